/* xfer.h — request and response bodies of any size, moved on worker threads.
 *
 * A file or tar transfer borrows its connection's socket from the loop
 * (sbd_conn_lend), runs on a thread of sandboxd's pool (pool.h) with
 * blocking I/O, and hands the socket back when it is done (through an
 * eventfd the loop watches: sbd_conn_give_back). The loop thread never
 * waits for a client or a disk: a 1 GiB copy, a cold read of a lazily
 * fetched image file or a client that reads slowly hold only their worker.
 *
 * Bounded memory: a transfer holds one buffer of XFER_BUF bytes; file
 * bytes go with sendfile (out) and splice (in) where the kernel can. A
 * client that moves no byte for XFER_IDLE_MS, or averages less than
 * XFER_MIN_RATE, is dropped (-ETIMEDOUT); at most XFER_MAX transfers run
 * at once, XFER_PER_SANDBOX_MAX of one sandbox (the next is refused with
 * 429). A sandbox's transfers end with it (sbd_xfer_cancel).
 *
 * Request bodies come with Content-Length or chunked (RFC 9112 7.1; chunk
 * extensions and trailers are read and ignored; a chunk-size line over
 * 1 KiB is refused). The worker answers a body it streams out itself (the
 * head once it knows the size or that it will stream chunked); any error
 * before that head, and the answer to an upload, is sent by the loop in
 * the transfer's done callback. An error after the head (the file shrank,
 * the client left) closes the connection: the client sees a short body. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/err.h"
#include "sandbox/sandboxd/pool.h"

#define XFER_BUF (1u << 20)
#define XFER_IDLE_MS 30000
#define XFER_MAX 32
#define XFER_CHUNK_LINE_MAX 1024
/* A transfer must average XFER_MIN_RATE bytes/s after its first
 * XFER_RATE_GRACE_MS (its deadline moves by a second for every
 * XFER_MIN_RATE bytes moved): a client that trickles a byte now and then,
 * under the idle timeout, would otherwise hold a worker and a slot for
 * ever. 4 KiB/s is far below any real link, the grace covers a slow start
 * (a cold image file, a client that computes what it sends). */
#define XFER_MIN_RATE 4096
#define XFER_RATE_GRACE_MS 30000
/* Transfers of one sandbox at once (-EMFILE past it): one tenant cannot
 * take all XFER_MAX slots of the node. */
#define XFER_PER_SANDBOX_MAX 8
/* A destroyed sandbox's transfers have their sockets shut down; its
 * destroy waits this long for their workers to stop writing into it. */
#define XFER_CANCEL_WAIT_MS 2000
/* sandboxd's stop waits this long for the transfers in flight. */
#define XFER_SHUTDOWN_WAIT_MS 5000

struct sandboxd;
struct sbd_conn;
struct sbd_xfer;

/* The transfer's work, on the worker: 0 or -errno with the reason in x->err. */
typedef int (*sbd_xfer_fn)(struct sbd_xfer *x);
/* Back on the loop, once: answers c (when x->head_sent is false) and frees
 * what the operation holds. x is freed after it returns. */
typedef void (*sbd_xfer_done_fn)(struct sbd_xfer *x, struct sbd_conn *c);

struct sbd_xfer {
	struct sbd_job job;
	struct sandboxd *d;
	struct sbd_conn *c; /* the loop's: the worker never touches it */
	int sock;	    /* lent by c */
	bool keep_alive;    /* the request's */
	bool expect_continue;
	/* the body: Content-Length (left) or chunked */
	bool chunked, body_done, chunk_seen;
	uint64_t left; /* of the body, or of the current chunk */
	char *in;      /* read ahead: in[in_off..in_len) (XFER_BUF) */
	size_t in_off, in_len;
	char *out_pre; /* the connection's unsent output: sent first */
	size_t out_pre_len;
	bool head_sent;	     /* a response went out from the worker */
	bool broken;	     /* the stream is off a message boundary: close */
	int r;		     /* the work's result */
	const void *sandbox; /* whose (the loop's: sbd_xfer_cancel) */
	bool cancelled;	     /* the loop's: its sandbox was destroyed */
	bool finished;	     /* the worker is done with it (under the mutex) */
	int64_t started_ms;
	uint64_t moved; /* bytes sent and received: the rate */
	struct strata_err err;
	sbd_xfer_fn run;
	sbd_xfer_done_fn done;
	void *op;			   /* the operation's */
	struct sbd_xfer *next, *done_next; /* the running list; the done list */
};

/* Starts x->run on a worker with c's socket; x->done answers on the loop
 * afterwards. x is malloc'ed by the caller with run, done, op and sandbox
 * set and is owned by the transfer from here on. Returns 0, or -EBUSY
 * (XFER_MAX running), -EMFILE (XFER_PER_SANDBOX_MAX of x->sandbox) /
 * -errno: nothing started, x is freed, c is the caller's. When no worker
 * thread can be started, done gets -EAGAIN (answer 503). */
int sbd_xfer_start(struct sandboxd *d, struct sbd_conn *c, struct sbd_xfer *x);
/* Ends the transfers of sandbox (it is being destroyed): their sockets are
 * shut down, so that their workers stop at their next I/O, and this waits
 * up to XFER_CANCEL_WAIT_MS for the workers to be done with its files.
 * Returns how many still run after that (0 normally). */
int sbd_xfer_cancel(struct sandboxd *d, const void *sandbox);
/* At shutdown: waits up to XFER_SHUTDOWN_WAIT_MS for the transfers in
 * flight (their sockets shut down first), then frees the daemon's transfer
 * state (left allocated when a worker is still busy: the process exits). */
void sbd_xfer_shutdown(struct sandboxd *d);

/* ---- on the worker ---------------------------------------------------- */

/* Reads up to n bytes of the request body into p. Returns the count, 0 at
 * its end, or -errno: -ETIMEDOUT (the client was silent XFER_IDLE_MS or
 * below XFER_MIN_RATE: then x->err says so),
 * -EPROTO (bad chunked framing), -ECONNRESET (it left). */
ssize_t sbd_xfer_read(struct sbd_xfer *x, void *p, size_t n);
/* Copies up to max bytes of the body into fd (splice from the socket when
 * the body has no chunk framing). Returns the bytes written (fewer than max
 * at the body's end), or -errno: a failed write of fd is -EIO with
 * *ret_werr its errno (ENOSPC, EDQUOT, ...). */
int64_t sbd_xfer_body_to_fd(struct sbd_xfer *x, int fd, uint64_t max, int *ret_werr);
/* Sends all of p[0..n). 0 or -errno. */
int sbd_xfer_send(struct sbd_xfer *x, const void *p, size_t n);
/* Sends the response head (content_length < 0: chunked) and marks it sent. */
int sbd_xfer_head(struct sbd_xfer *x, int status, const char *ctype, long long content_length);
/* Sends n bytes of fd from its offset off (sendfile). 0, or -ENODATA when
 * the file ended first, or -errno. */
int sbd_xfer_sendfile(struct sbd_xfer *x, int fd, uint64_t off, uint64_t n);
/* Sends 100 Continue when the client asked for it (once the upload can
 * start: a client that waits for it sends nothing before). */
int sbd_xfer_continue(struct sbd_xfer *x);
