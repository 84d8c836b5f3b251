/* rpc_server.c — the RPC server of rpc.h: a pool of worker threads that
 * share one epoll set (leader/follower), with no hand-off between threads.
 *
 * Every connection is registered EPOLLONESHOT: the worker that gets its event
 * owns it until it re-arms it. That worker reads until one whole frame has
 * arrived (each connection keeps a partial-frame state across wake-ups),
 * runs the handler, writes the reply and re-arms the connection; a frame
 * still buffered behind it is reported again by the level-triggered epoll.
 * Compared with one reading thread feeding a queue, a request costs no
 * futex wake-up and no context switch between reader and handler (on the
 * 2-core VM about an eighth of strata-meta's CPU went there). A handler that
 * blocks occupies only its own worker, as before.
 *
 * Invariants:
 *  1. At most one thread works on a connection at a time (EPOLLONESHOT; the
 *     re-arm is the last thing the owner does). A connection is freed only
 *     when its reference count drops to zero: registration holds one
 *     reference and the owning worker one while it works on it.
 *  2. Any malformed frame closes its connection after one log line naming the
 *     peer and the reason; nothing else is affected.
 *  3. Requests on one connection are handled one at a time, in order
 *     (clients never pipeline: rpc_client.c gives each call its own
 *     connection; a pipelining peer is served, sequentially).
 *
 * Pools (rpc_server_opts.npools > 1). The workers still share the epoll
 * set and read any connection; a pool is a number of slots. A worker that
 * has read a whole request asks pool_of for its pool p: with a free slot it
 * takes it and runs the request itself (no hand-off, as without pools);
 * otherwise the request waits in p's queue, its connection not re-armed
 * (still owned, now by the queue, which holds a reference), and the worker
 * goes back to the epoll set. A worker that finishes a request of p re-arms
 * that connection and then, keeping the slot, runs what waits in p's queue,
 * before it gives the slot back.
 *  4. A pool runs at most pool_workers[p] requests at a time, and there are
 *     exactly sum(pool_workers) threads: while some pool has a free slot,
 *     some thread runs no request and so keeps reading (reading and queueing
 *     never block). A handler of p that waits only on requests of other
 *     pools (on this server or another) therefore never waits for a thread,
 *     whatever the handlers of p itself or of unrelated pools do.
 *  5. A queued request holds its connection un-armed; a pool's queue holds
 *     at most pool_queue requests: the next is answered -EAGAIN (busy).
 *
 * Authentication and limits (rpc_auth.h, the RPC_* limits of rpc.h):
 *  6. A connection runs no handler before its handshake is complete; until
 *     then it may send frames of at most RPC_AUTH_MAX_PAYLOAD bytes, and it
 *     must finish within RPC_HANDSHAKE_TIMEOUT_MS of its accept.
 *  7. Connections in their handshake are capped apart from authenticated
 *     ones (RPC_HANDSHAKE_MAX_CONNS, RPC_HANDSHAKE_PEER_MAX per address): a
 *     new one beyond a cap closes the oldest handshaking one (of the same
 *     address for the per-address cap), so that a flood of idle sockets
 *     never locks out a client who completes its handshake in time.
 *     Authenticated connections are capped at max_conns and at
 *     RPC_PEER_MAX_CONNS per address; beyond, the handshake is refused with
 *     -EAGAIN.
 *  8. Every connection has a deadline by which it must progress (its
 *     phase): the handshake's, a begun frame's (RPC_FRAME_TIMEOUT_MS) or
 *     the idle one (RPC_IDLE_TIMEOUT_MS); none while its request runs. A
 *     sweep every RPC_SWEEP_MS shuts down the expired ones (their owner sees
 *     the hang-up and frees them: invariant 1 holds).
 *  9. A payload's memory grows with the bytes that arrived (at most
 *     RPC_PAYLOAD_GROWTH times them, from RPC_PAYLOAD_FIRST), not with the
 *     length a header announces.
 * 10. A request the peer's role may not send (opts.may) is answered -EPERM
 *     without running its handler.
 *
 * TLS (rpc_tls.h, opts.tls): a connection's first byte says whether the peer
 * speaks TLS; a plain one is refused with a plain frame (RPC_ERR_PEER_TLS),
 * a TLS one does its TLS handshake, then the handshake of rpc_auth.h inside
 * it, all within invariant 6's deadline.
 * 11. The frame reader sees decrypted bytes; a TLS record that arrived in
 *     part counts as a begun frame (invariant 8), and a connection re-armed
 *     with decrypted bytes waiting in OpenSSL (a pipelining peer) is armed
 *     for EPOLLOUT too, so that it is served at once rather than when the
 *     socket next becomes readable. */
#include "fs/rpc.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "fs/clock.h"
#include "fs/log.h"
#include "fs/proto.h"
#include "fs/rpc_tls.h"
#include "fs/transport_tcp.h"

#define RPC_SEND_TIMEOUT_MS 30000
#define RPC_SWEEP_MS 1000	      /* how often deadlines are checked (invariant 8) */
#define RPC_PAYLOAD_FIRST (64u << 10) /* a payload's first allocation (invariant 9) */
#define RPC_PAYLOAD_GROWTH 4	      /* then it grows by this factor as bytes arrive */
#define RPC_LOG_INTERVAL_MS 1000      /* at most one line per interval for floods */

/* What a connection is doing, for its deadline (invariant 8). */
enum conn_phase { PHASE_HANDSHAKE, PHASE_FRAME, PHASE_BUSY, PHASE_IDLE };
static const char *const phase_names[] = {
    [PHASE_HANDSHAKE] = "no handshake within the deadline",
    [PHASE_FRAME] = "frame not completed within the deadline",
    [PHASE_BUSY] = "busy",
    [PHASE_IDLE] = "idle",
};

struct rpc_conn {
	int fd;
	_Atomic int refs;
	_Atomic bool dead;
	_Atomic bool doomed; /* shut down by the sweep or an eviction: closes quietly */
	_Atomic bool authed; /* handshake complete (owner writes, under conns_lock) */
	_Atomic int phase;   /* enum conn_phase */
	_Atomic int64_t deadline_ms;
	struct rpc_auth_server auth;
	struct rpc_tls_conn *tls; /* NULL: plain (or TLS not yet begun) */
	bool tls_up;		  /* the TLS handshake is done */
	char ip[48];		  /* the peer's address without port: per-address caps */
	struct rpc_peer peer;
	struct rpc_conn *prev, *next; /* registered connections; conns_lock */
	pthread_mutex_t write_lock;
	/* partial frame being read by the loop */
	uint8_t hdr[WIRE_HDR_SIZE];
	size_t hdr_got;
	struct wire_hdr h;
	uint8_t *payload;
	size_t payload_got, payload_cap;
	uint64_t sums[WIRE_MAX_PIECES]; /* piece sums of a WIRE_F_DATA frame */
	/* a request waiting in a pool's queue (pool_lock) */
	struct rpc_conn *qnext;
	struct wire_hdr qh;
	uint8_t *qpayload;
};

struct rpc_pool {
	int slots, running, nwaiting; /* pool_lock */
	struct rpc_conn *qhead, *qtail;
	uint64_t run, queued, busy;
};

struct rpc_server {
	struct rpc_server_opts opts;
	char name[32];
	int listen_fd, epoll_fd, wake_fd, timer_fd;
	struct rpc_key key;
	struct rpc_tls *tls;	    /* NULL: plain frames */
	_Atomic bool accept_paused; /* EMFILE: the listener is out of the epoll set */
	_Atomic int64_t log_next_ms;
	_Atomic uint64_t log_suppressed;
	uint16_t port;
	pthread_t *workers;
	int nworkers;
	_Atomic bool stopping;
	_Atomic uint64_t rejected;
	pthread_mutex_t conns_lock;
	int nconns;		/* conns_lock: all listed connections */
	int nauthed;		/* conns_lock: of those, authenticated */
	uint64_t next_conn_id;	/* conns_lock */
	struct rpc_conn *conns; /* registered connections; conns_lock */
	int npools;		/* > 1: requests run in pools (invariant 4) */
	int pool_queue;
	pthread_mutex_t pool_lock;
	struct rpc_pool pools[RPC_MAX_POOLS]; /* pool_lock */
};

static void conn_unref(struct rpc_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	rpc_tls_conn_free(c->tls);
	close(c->fd);
	pthread_mutex_destroy(&c->write_lock);
	free(c->payload);
	free(c);
}

static void conn_unlist(struct rpc_server *s, struct rpc_conn *c)
{
	pthread_mutex_lock(&s->conns_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	if (c->authed)
		s->nauthed--;
	pthread_mutex_unlock(&s->conns_lock);
}

/* Takes the connection out of the epoll set and the list; the fd closes
 * with the last ref. Called by its owner (or at shutdown, with no workers). */
static void conn_kill(struct rpc_server *s, struct rpc_conn *c)
{
	if (atomic_exchange(&c->dead, true))
		return;
	epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
	shutdown(c->fd, SHUT_RDWR);
	conn_unlist(s, c);
	conn_unref(c);
}

/* True at most once per RPC_LOG_INTERVAL_MS: lines about what peers do are
 * rate-limited, so that a flood cannot fill the disk with the log. Fills
 * note with how many lines were dropped before this one ("" if none). */
static bool log_allowed(struct rpc_server *s, char note[48])
{
	int64_t now = strata_mono_ms(), next = s->log_next_ms;
	if (now < next ||
	    !atomic_compare_exchange_strong(&s->log_next_ms, &next, now + RPC_LOG_INTERVAL_MS)) {
		s->log_suppressed++;
		return false;
	}
	uint64_t n = atomic_exchange(&s->log_suppressed, 0);
	note[0] = 0;
	if (n)
		snprintf(note, 48, " (%llu similar lines suppressed)", (unsigned long long)n);
	return true;
}

static void conn_reject(struct rpc_server *s, struct rpc_conn *c, const char *why)
{
	s->rejected++;
	char note[48];
	if (log_allowed(s, note))
		log_warn("%s: closing connection %llu from %s: %s%s", s->name,
			 (unsigned long long)c->peer.conn_id, c->peer.addr, why, note);
	conn_kill(s, c);
}

static void conn_set_deadline(struct rpc_conn *c, enum conn_phase phase, int64_t ms)
{
	c->phase = phase;
	c->deadline_ms = ms == INT64_MAX ? INT64_MAX : strata_mono_ms() + ms;
}

/* Hands the connection back to the epoll set (its owner's last act). */
static void conn_rearm(struct rpc_server *s, struct rpc_conn *c)
{
	if (c->authed && c->hdr_got == 0 && !(c->tls && rpc_tls_partial(c->tls)))
		conn_set_deadline(c, PHASE_IDLE, RPC_IDLE_TIMEOUT_MS);
	uint32_t events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT;
	if (c->tls_up && rpc_tls_buffered(c->tls))
		events |= EPOLLOUT; /* invariant 11: ready at once */
	struct epoll_event ev = {.events = events, .data.ptr = c};
	if (epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		conn_kill(s, c);
}

/* Sends iov on c, through TLS once it is up. */
static int conn_send(struct rpc_conn *c, const struct iovec *iov, int iovcnt, int timeout_ms)
{
	pthread_mutex_lock(&c->write_lock);
	int r = c->dead	    ? -ECONNRESET
		: c->tls_up ? rpc_tls_sendv(c->tls, iov, iovcnt, timeout_ms)
			    : tcp_sendv_fd(c->fd, iov, iovcnt, timeout_ms);
	pthread_mutex_unlock(&c->write_lock);
	return r;
}

static void send_reply(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *req,
		       int status, const struct wbuf *reply)
{
	struct wire_hdr h = {
	    .flags = WIRE_F_REPLY, .type = req->type, .status = status, .req_id = req->req_id};
	uint8_t hdr[WIRE_HDR_SIZE];
	size_t len = status < 0 ? 0 : reply->len;
	struct iovec iov[2] = {{.iov_base = hdr, .iov_len = WIRE_HDR_SIZE},
			       {.iov_base = reply->data, .iov_len = len}};
	wire_hdr_sealv(&h, &iov[1], len ? 1 : 0, hdr);
	int r = conn_send(c, iov, len ? 2 : 1, RPC_SEND_TIMEOUT_MS);
	if (r < 0 && r != -ECONNRESET)
		log_warn_errno(r, "%s: failed to send reply to %s", s->name, c->peer.addr);
	if (r < 0)
		shutdown(c->fd, SHUT_RDWR); /* the next wake-up sees the hang-up and drops it */
}

/* Sends bytes already framed (handshake answers, refusals). */
static int send_raw(struct rpc_conn *c, const struct wbuf *b)
{
	if (b->err)
		return b->err;
	if (!b->len)
		return 0;
	struct iovec iov = {.iov_base = b->data, .iov_len = b->len};
	return conn_send(c, &iov, 1, RPC_HANDSHAKE_TIMEOUT_MS);
}

/* Invariant 10: whether the peer's role may send this request. */
static bool role_may(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *h)
{
	if (!s->opts.may || s->opts.may(c->peer.role, h->type))
		return true;
	char note[48];
	if (log_allowed(s, note))
		log_warn("%s: refused request 0x%04x from %s: role %s may not send it%s", s->name,
			 h->type, c->peer.addr, rpc_role_name(c->peer.role), note);
	return false;
}

/* Runs the handler on the frame (payload taken from c) and replies. */
static void run_frame(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *h,
		      uint8_t *payload, struct wbuf *reply)
{
	if (!role_may(s, c, h)) {
		wbuf_reset(reply);
		send_reply(s, c, h, -EPERM, reply);
		free(payload);
		return;
	}
	struct rbuf req;
	rbuf_init(&req, payload, h->payload_len);
	wbuf_reset(reply);
	c->peer.data = NULL;
	c->peer.data_len = 0;
	c->peer.data_sums = NULL;
	if (h->flags & WIRE_F_DATA) {
		c->peer.data = payload + h->data_off;
		c->peer.data_len = h->payload_len - h->data_off;
		c->peer.data_sums = c->sums;
	}
	int status = s->opts.handler(s->opts.ctx, h->type, &req, reply, &c->peer);
	c->peer.data = NULL;
	if (status == 0 && reply->err)
		status = reply->err;
	if (status > 0)
		status = 0;
	send_reply(s, c, h, status, reply);
	free(payload);
}

/* Invariant 4: runs the request in its pool if the pool has a free slot
 * (then *ret_held = the pool: the caller runs its queue before it gives the
 * slot back, pool_drain), else queues it. Returns 0 (handled: re-arm c) or
 * 1 (queued: c belongs to the queue). */
static int pool_dispatch(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *h,
			 uint8_t *payload, struct wbuf *reply, int *ret_held)
{
	int p = s->opts.pool_of(s->opts.ctx, h->type, payload, h->payload_len);
	if (p < 0 || p >= s->npools)
		p = 0;
	struct rpc_pool *pl = &s->pools[p];
	pthread_mutex_lock(&s->pool_lock);
	if (pl->running < pl->slots) {
		pl->running++;
		pl->run++;
		pthread_mutex_unlock(&s->pool_lock);
		*ret_held = p;
		run_frame(s, c, h, payload, reply);
		return 0;
	}
	if (pl->nwaiting < s->pool_queue) {
		atomic_fetch_add(&c->refs, 1);
		c->qh = *h;
		c->qpayload = payload;
		c->qnext = NULL;
		if (pl->qtail)
			pl->qtail->qnext = c;
		else
			pl->qhead = c;
		pl->qtail = c;
		pl->nwaiting++;
		pl->queued++;
		pthread_mutex_unlock(&s->pool_lock);
		return 1;
	}
	pl->busy++;
	pthread_mutex_unlock(&s->pool_lock);
	wbuf_reset(reply);
	send_reply(s, c, h, -EAGAIN, reply);
	free(payload);
	return 0;
}

/* Takes the next request of pool p's queue, or gives the slot back. */
static struct rpc_conn *pool_next(struct rpc_server *s, int p)
{
	struct rpc_pool *pl = &s->pools[p];
	pthread_mutex_lock(&s->pool_lock);
	struct rpc_conn *c = s->stopping ? NULL : pl->qhead;
	if (c) {
		pl->qhead = c->qnext;
		if (!pl->qhead)
			pl->qtail = NULL;
		pl->nwaiting--;
		pl->run++;
	} else {
		pl->running--;
	}
	pthread_mutex_unlock(&s->pool_lock);
	return c;
}

/* Holding a slot of pool p: runs its queue, then gives the slot back. */
static void pool_drain(struct rpc_server *s, int p, struct wbuf *reply)
{
	struct rpc_conn *c;
	while ((c = pool_next(s, p))) {
		uint8_t *payload = c->qpayload;
		c->qpayload = NULL;
		run_frame(s, c, &c->qh, payload, reply);
		conn_rearm(s, c);
		conn_unref(c);
	}
}

/* Invariant 7 at the end of a handshake: admits c among the authenticated
 * connections if the caps allow. Returns 0, or -EAGAIN (over a cap). */
static int conn_admit(struct rpc_server *s, struct rpc_conn *c, const char **why)
{
	int r = 0, same = 0;
	pthread_mutex_lock(&s->conns_lock);
	for (struct rpc_conn *o = s->conns; o; o = o->next)
		same += o->authed && !o->doomed && strcmp(o->ip, c->ip) == 0;
	if (s->nauthed >= s->opts.max_conns) {
		r = -EAGAIN;
		*why = "authenticated connections at their limit (max_conns)";
	} else if (same >= RPC_PEER_MAX_CONNS) {
		r = -EAGAIN;
		*why = "authenticated connections of this address at their limit "
		       "(RPC_PEER_MAX_CONNS)";
	} else {
		c->authed = true;
		s->nauthed++;
	}
	pthread_mutex_unlock(&s->conns_lock);
	return r;
}

/* A whole handshake frame (invariant 6). Returns 0 (re-arm c) or -1 (c
 * closed). */
static int auth_frame(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *h,
		      const uint8_t *payload, struct wbuf *out)
{
	const char *why = NULL;
	wbuf_reset(out);
	int r = rpc_auth_server_frame(&c->auth, h, payload, out, &why);
	if (r == 1) {
		r = conn_admit(s, c, &why);
		if (r == 0) {
			c->peer.role = c->auth.role;
			return 0;
		}
		rpc_auth_refusal(h, r, out);
	}
	int w = send_raw(c, out);
	if (r < 0 || w < 0) {
		conn_reject(s, c, r < 0 ? why : "cannot send the handshake's challenge");
		return -1;
	}
	return 0;
}

/* Answers a connection whose peer speaks TLS where we do not, or the
 * reverse, with a plain refusal frame of its hello (rpc_tls.h). */
static void refuse_plain(struct rpc_conn *c, int status)
{
	struct wire_hdr h = {.type = MSG_AUTH_HELLO};
	struct wbuf out;
	wbuf_init(&out);
	rpc_auth_refusal(&h, status, &out);
	send_raw(c, &out);
	wbuf_done(&out);
}

/* A header that wire_hdr_decode refused: an older major gets an answer it
 * understands before the connection closes. */
static void header_refused(struct rpc_server *s, struct rpc_conn *c, int r, const char *why)
{
	if (!c->authed && c->hdr[0] == RPC_TLS_RECORD_HANDSHAKE) {
		refuse_plain(c, RPC_ERR_PEER_PLAIN);
		conn_reject(
		    s, c,
		    "peer speaks TLS, this server does not (start both with --tls, or neither)");
		return;
	}
	if (r == -EPROTONOSUPPORT && le32_get(c->hdr) == WIRE_MAGIC && c->hdr[4] < WIRE_MAJOR) {
		struct wbuf out;
		wbuf_init(&out);
		int major = rpc_auth_old_major_reply(c->hdr, &out);
		send_raw(c, &out);
		wbuf_done(&out);
		char line[128];
		snprintf(line, sizeof(line), "peer speaks wire %d, this is wire %d: upgrade it",
			 major, WIRE_MAJOR);
		conn_reject(s, c, line);
		return;
	}
	conn_reject(s, c, why);
}

/* A whole frame has arrived on c: validate the checksum and handle it. A
 * WIRE_F_DATA frame's data hash and piece sums are kept for the handler
 * (rpc_peer.data*). Returns 0 (re-arm c), 1 (queued) or -1 (c closed). */
static int frame_complete(struct rpc_server *s, struct rpc_conn *c, struct wbuf *reply,
			  int *ret_held)
{
	if (wire_payload_verify_data(c->hdr, &c->h, c->payload ? c->payload : (uint8_t *)"",
				     &c->peer.data_hash, c->sums) < 0) {
		conn_reject(s, c, "payload checksum mismatch");
		return -1;
	}
	if (c->h.flags & WIRE_F_REPLY) {
		conn_reject(s, c, "reply frame sent to a server");
		return -1;
	}
	struct wire_hdr h = c->h;
	uint8_t *payload = c->payload;
	c->payload = NULL;
	c->hdr_got = 0;
	c->payload_got = 0;
	c->payload_cap = 0;
	c->peer.minor = c->h.minor;
	if (!c->authed) {
		int r = auth_frame(s, c, &h, payload, reply);
		free(payload);
		return r;
	}
	conn_set_deadline(c, PHASE_BUSY, INT64_MAX);
	if (s->npools > 1)
		return pool_dispatch(s, c, &h, payload, reply, ret_held);
	run_frame(s, c, &h, payload, reply);
	return 0;
}

/* Invariant 9: the payload buffer is full but the frame is not: grow it. */
static int payload_grow(struct rpc_conn *c)
{
	size_t cap = c->payload_cap * RPC_PAYLOAD_GROWTH;
	if (cap > c->h.payload_len)
		cap = c->h.payload_len;
	uint8_t *p = realloc(c->payload, cap);
	if (!p)
		return -ENOMEM;
	c->payload = p;
	c->payload_cap = cap;
	return 0;
}

/* Reads up to n bytes of the stream (decrypted, with TLS). Returns the
 * bytes read, 0 at EOF or -errno (-EAGAIN: nothing now). */
static ssize_t conn_recv(struct rpc_conn *c, void *buf, size_t n)
{
	if (c->tls_up)
		return rpc_tls_recv(c->tls, buf, n);
	ssize_t r = recv(c->fd, buf, n, 0);
	return r < 0 ? -errno : r;
}

/* Invariant 11: an idle connection on which a TLS record began is inside a
 * frame for the deadlines. */
static void tls_partial_deadline(struct rpc_conn *c)
{
	if (c->tls_up && c->authed && c->hdr_got == 0 && c->phase == PHASE_IDLE &&
	    rpc_tls_partial(c->tls))
		conn_set_deadline(c, PHASE_FRAME, RPC_FRAME_TIMEOUT_MS);
}

/* On a TLS server, what a connection does before its first frame: a peer
 * speaking plain frames is refused (its first byte is no TLS record), a TLS
 * one advances its TLS handshake. Returns 1 (TLS up: read frames), 0 (wait
 * for more) or -1 (c closed). */
static int tls_begin(struct rpc_server *s, struct rpc_conn *c)
{
	if (!c->tls) {
		uint8_t first;
		ssize_t n = recv(c->fd, &first, 1, MSG_PEEK);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			return 0;
		if (n <= 0) {
			conn_kill(s, c);
			return -1;
		}
		if (first != RPC_TLS_RECORD_HANDSHAKE) {
			refuse_plain(c, RPC_ERR_PEER_TLS);
			conn_reject(s, c,
				    "peer speaks plain frames, this server requires TLS (start the "
				    "client with --tls)");
			return -1;
		}
		if (rpc_tls_accept(s->tls, c->fd, &c->tls) < 0) {
			conn_reject(s, c, "out of memory");
			return -1;
		}
	}
	const char *why = NULL;
	int r = rpc_tls_handshake(c->tls, &why);
	if (r < 0) {
		conn_reject(s, c, why);
		return -1;
	}
	c->tls_up = r == 1;
	return r;
}

/* Reads what is available on c, up to one whole frame, which it handles.
 * Returns 0 to keep the connection, 1 if its request was queued, -1 once it
 * was closed; *ret_held as pool_dispatch's. */
static int conn_read(struct rpc_server *s, struct rpc_conn *c, struct wbuf *reply, int *ret_held)
{
	if (s->tls && !c->tls_up) {
		int r = tls_begin(s, c);
		if (r <= 0)
			return r;
	}
	for (;;) {
		ssize_t n;
		if (c->hdr_got < WIRE_HDR_SIZE)
			n = conn_recv(c, c->hdr + c->hdr_got, WIRE_HDR_SIZE - c->hdr_got);
		else
			n = conn_recv(c, c->payload + c->payload_got,
				      c->payload_cap - c->payload_got);
		if (n == 0) {
			if (c->doomed)
				conn_kill(s, c); /* the sweep or an eviction, which logged */
			else if (c->hdr_got > 0)
				conn_reject(s, c, "connection closed inside a frame (truncated)");
			else
				conn_kill(s, c);
			return -1;
		}
		if (n < 0) {
			if (n == -EINTR)
				continue;
			if (n == -EAGAIN) {
				tls_partial_deadline(c);
				return 0;
			}
			conn_kill(s, c);
			return -1;
		}
		if (c->hdr_got < WIRE_HDR_SIZE) {
			if (c->hdr_got == 0 && c->authed)
				conn_set_deadline(c, PHASE_FRAME, RPC_FRAME_TIMEOUT_MS);
			c->hdr_got += n;
			if (c->hdr_got < WIRE_HDR_SIZE)
				continue;
			const char *why = NULL;
			int r = wire_hdr_decode(c->hdr, &c->h, &why);
			if (r < 0) {
				header_refused(s, c, r, why);
				return -1;
			}
			if (!c->authed && c->h.payload_len > RPC_AUTH_MAX_PAYLOAD) {
				conn_reject(s, c,
					    c->h.type == MSG_AUTH_HELLO
						? "oversized handshake frame"
						: "request before the handshake");
				return -1;
			}
			c->payload_cap = c->h.payload_len < RPC_PAYLOAD_FIRST ? c->h.payload_len
									      : RPC_PAYLOAD_FIRST;
			c->payload = malloc(c->payload_cap ? c->payload_cap : 1);
			if (!c->payload) {
				conn_reject(s, c, "out of memory");
				return -1;
			}
		} else {
			c->payload_got += n;
			if (c->payload_got == c->payload_cap && c->payload_cap < c->h.payload_len &&
			    payload_grow(c) < 0) {
				conn_reject(s, c, "out of memory");
				return -1;
			}
		}
		/* One frame per wake-up: our clients never pipeline (a call owns its
		 * connection), so reading on would only earn an EAGAIN; if more is
		 * there, the level-triggered epoll reports the socket again. */
		if (c->hdr_got == WIRE_HDR_SIZE && c->payload_got == c->h.payload_len)
			return frame_complete(s, c, reply, ret_held);
	}
}

/* Shuts c down for its owner to free (invariants 1, 8): under conns_lock,
 * so c is still listed. Returns false if it was doomed already. */
static bool conn_doom(struct rpc_conn *c)
{
	if (atomic_exchange(&c->doomed, true))
		return false;
	shutdown(c->fd, SHUT_RDWR);
	return true;
}

/* Invariant 7 for a new connection from ip: closes the oldest handshaking
 * connection if the global cap or ip's cap is reached. conns_lock held. */
static void handshake_make_room(struct rpc_server *s, const char *ip)
{
	int all = 0, same = 0;
	struct rpc_conn *oldest = NULL, *oldest_same = NULL;
	for (struct rpc_conn *o = s->conns; o; o = o->next) { /* newest first */
		if (o->authed || o->doomed)
			continue;
		all++;
		oldest = o;
		if (strcmp(o->ip, ip) == 0) {
			same++;
			oldest_same = o;
		}
	}
	struct rpc_conn *victim = same >= RPC_HANDSHAKE_PEER_MAX   ? oldest_same
				  : all >= RPC_HANDSHAKE_MAX_CONNS ? oldest
								   : NULL;
	char note[48];
	if (victim && conn_doom(victim) && log_allowed(s, note))
		log_warn("%s: closing connection %llu from %s: %d connections in their handshake "
			 "(%d from %s; limits %d, %d per address)%s",
			 s->name, (unsigned long long)victim->peer.conn_id, victim->peer.addr, all,
			 same, ip, RPC_HANDSHAKE_MAX_CONNS, RPC_HANDSHAKE_PEER_MAX, note);
}

static void peer_name(const struct sockaddr_storage *ss, char ip[48], char *addr, size_t cap)
{
	uint16_t port = 0;
	snprintf(ip, 48, "?");
	if (ss->ss_family == AF_INET) {
		const struct sockaddr_in *in = (const struct sockaddr_in *)ss;
		inet_ntop(AF_INET, &in->sin_addr, ip, 48);
		port = ntohs(in->sin_port);
	} else if (ss->ss_family == AF_INET6) {
		const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)ss;
		inet_ntop(AF_INET6, &in6->sin6_addr, ip, 48);
		port = ntohs(in6->sin6_port);
	}
	snprintf(addr, cap, "%s:%u", ip, port);
}

/* Out of descriptors: stop accepting until the next sweep (else the
 * level-triggered listener would spin a worker at 100% CPU). */
static void accept_pause(struct rpc_server *s, int err)
{
	if (atomic_exchange(&s->accept_paused, true))
		return;
	epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, s->listen_fd, NULL);
	char note[48];
	if (log_allowed(s, note))
		log_warn("%s: cannot accept connections: %s; pausing for %d ms", s->name,
			 strerror(err), RPC_SWEEP_MS);
}

static void accept_all(struct rpc_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0) {
			if (errno == EMFILE || errno == ENFILE || errno == ENOBUFS ||
			    errno == ENOMEM)
				accept_pause(s, errno);
			return;
		}
		tcp_tune_socket(fd);
		struct rpc_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->refs = 1;
		pthread_mutex_init(&c->write_lock, NULL);
		peer_name(&ss, c->ip, c->peer.addr, sizeof(c->peer.addr));
		rpc_auth_server_init(&c->auth, &s->key);
		conn_set_deadline(c, PHASE_HANDSHAKE, RPC_HANDSHAKE_TIMEOUT_MS);
		/* listed before it is armed: a worker may kill it at once */
		pthread_mutex_lock(&s->conns_lock);
		handshake_make_room(s, c->ip);
		c->peer.conn_id = ++s->next_conn_id;
		s->nconns++;
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		pthread_mutex_unlock(&s->conns_lock);
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
					 .data.ptr = c};
		if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			atomic_store(&c->dead, true); /* never armed: no other owner */
			conn_unlist(s, c);
			conn_unref(c);
		}
	}
}

/* Invariant 8, every RPC_SWEEP_MS: shuts down the connections past their
 * deadline, and takes the listener back after an EMFILE pause. */
static void sweep(struct rpc_server *s)
{
	uint64_t ticks;
	if (read(s->timer_fd, &ticks, sizeof(ticks)) != sizeof(ticks))
		return; /* another worker took this tick */
	int64_t now = strata_mono_ms();
	int expired = 0;
	const char *what = NULL, *addr = NULL;
	pthread_mutex_lock(&s->conns_lock);
	for (struct rpc_conn *c = s->conns; c; c = c->next) {
		if (c->doomed || c->deadline_ms > now)
			continue;
		if (conn_doom(c) && c->phase != PHASE_IDLE) {
			expired++;
			what = phase_names[c->phase];
			addr = c->peer.addr;
		}
	}
	char note[48];
	if (expired && log_allowed(s, note))
		log_warn("%s: closing %d connections (last %s: %s)%s", s->name, expired, addr, what,
			 note);
	pthread_mutex_unlock(&s->conns_lock);
	if (atomic_exchange(&s->accept_paused, false)) {
		struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
		epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &ev);
	}
}

/* The owner of c's event: read (and handle) a frame, then re-arm. */
static void conn_event(struct rpc_server *s, struct rpc_conn *c, uint32_t events,
		       struct wbuf *reply)
{
	atomic_fetch_add(&c->refs, 1);
	int held = -1;
	int r = conn_read(s, c, reply, &held);
	if (r == 0 && (events & (EPOLLHUP | EPOLLERR)) && !(events & EPOLLIN))
		conn_kill(s, c);
	else if (r == 0)
		conn_rearm(s, c);
	conn_unref(c);
	if (held >= 0)
		pool_drain(s, held, reply);
}

static void *worker_main(void *arg)
{
	struct rpc_server *s = arg;
	struct wbuf reply;
	wbuf_init(&reply);
	while (!s->stopping) {
		struct epoll_event ev;
		/* one event at a time, so that ready connections spread over the workers */
		int n = epoll_wait(s->epoll_fd, &ev, 1, -1);
		if (n <= 0)
			continue;
		if (ev.data.ptr == &s->listen_fd)
			accept_all(s);
		else if (ev.data.ptr == &s->timer_fd)
			sweep(s);
		else if (ev.data.ptr != &s->wake_fd)
			conn_event(s, ev.data.ptr, ev.events, &reply);
	}
	wbuf_done(&reply);
	return NULL;
}

static int listen_on(const char *addr, int *ret_fd, uint16_t *ret_port)
{
	char host[256];
	uint16_t port;
	int r = addr_parse(addr, host, sizeof(host), &port);
	if (r < 0)
		return r;
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (!host[0] || strcmp(host, "0.0.0.0") == 0)
		in.sin_addr.s_addr = htonl(INADDR_ANY);
	else if (strcmp(host, "localhost") == 0)
		in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else if (inet_pton(AF_INET, host, &in.sin_addr) != 1)
		return -EINVAL;
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&in, sizeof(in)) < 0 || listen(fd, 1024) < 0)
		return -errno;
	socklen_t sl = sizeof(in);
	if (getsockname(fd, (struct sockaddr *)&in, &sl) < 0)
		return -errno;
	*ret_port = ntohs(in.sin_port);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int rpc_server_start(const struct rpc_server_opts *opts, struct rpc_server **ret)
{
	struct rpc_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opts = *opts;
	if (s->opts.workers <= 0)
		s->opts.workers = 4;
	if (opts->npools > 1) {
		if (opts->npools > RPC_MAX_POOLS || !opts->pool_of) {
			free(s);
			return -EINVAL;
		}
		s->npools = opts->npools;
		s->pool_queue = opts->pool_queue > 0 ? opts->pool_queue : 256;
		s->opts.workers = 0;
		for (int i = 0; i < s->npools; i++) {
			if (opts->pool_workers[i] <= 0) {
				free(s);
				return -EINVAL;
			}
			s->pools[i].slots = opts->pool_workers[i];
			s->opts.workers += opts->pool_workers[i]; /* invariant 4 */
		}
	}
	if (s->opts.max_conns <= 0)
		s->opts.max_conns = RPC_MAX_CONNS;
	const struct rpc_cred *dc = rpc_auth_default();
	if (!opts->key && !dc) {
		free(s);
		return -ENOKEY;
	}
	s->key = opts->key ? *opts->key : dc->key;
	if (rpc_tls_wanted(opts->tls)) {
		int r = rpc_tls_new(&s->key, true, &s->tls);
		if (r < 0) {
			free(s);
			return r;
		}
	}
	snprintf(s->name, sizeof(s->name), "%s", opts->name ? opts->name : "rpc");
	s->listen_fd = s->epoll_fd = s->wake_fd = s->timer_fd = -1;
	pthread_mutex_init(&s->conns_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	int r = listen_on(opts->listen, &s->listen_fd, &s->port);
	if (r < 0)
		goto fail;
	s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	s->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (s->epoll_fd < 0 || s->wake_fd < 0 || s->timer_fd < 0) {
		r = -errno;
		goto fail;
	}
	struct itimerspec its = {
	    .it_interval = {.tv_sec = RPC_SWEEP_MS / 1000,
			    .tv_nsec = RPC_SWEEP_MS % 1000 * 1000000L},
	    .it_value = {.tv_sec = RPC_SWEEP_MS / 1000, .tv_nsec = RPC_SWEEP_MS % 1000 * 1000000L}};
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
	struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &s->wake_fd};
	struct epoll_event tev = {.events = EPOLLIN, .data.ptr = &s->timer_fd};
	if (timerfd_settime(s->timer_fd, 0, &its, NULL) < 0 ||
	    epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) < 0 ||
	    epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->wake_fd, &wev) < 0 ||
	    epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->timer_fd, &tev) < 0) {
		r = -errno;
		goto fail;
	}
	s->workers = calloc(s->opts.workers, sizeof(pthread_t));
	if (!s->workers) {
		r = -ENOMEM;
		goto fail;
	}
	for (; s->nworkers < s->opts.workers; s->nworkers++) {
		r = -pthread_create(&s->workers[s->nworkers], NULL, worker_main, s);
		if (r < 0)
			goto fail;
	}
	*ret = s;
	return 0;
fail:
	rpc_server_free(s);
	return r;
}

uint16_t rpc_server_port(const struct rpc_server *s)
{
	return s->port;
}

uint64_t rpc_server_rejected(const struct rpc_server *s)
{
	return s->rejected;
}

void rpc_server_conns(struct rpc_server *s, int *ret_authed, int *ret_handshake)
{
	pthread_mutex_lock(&s->conns_lock);
	*ret_authed = s->nauthed;
	*ret_handshake = s->nconns - s->nauthed;
	pthread_mutex_unlock(&s->conns_lock);
}

int rpc_server_pool_stats(struct rpc_server *s, int pool, struct rpc_pool_stats *ret)
{
	if (pool < 0 || pool >= (s->npools > 1 ? s->npools : 1))
		return -EINVAL;
	pthread_mutex_lock(&s->pool_lock);
	const struct rpc_pool *pl = &s->pools[pool];
	*ret = (struct rpc_pool_stats){pl->run, pl->queued, pl->busy, pl->running, pl->nwaiting};
	pthread_mutex_unlock(&s->pool_lock);
	return 0;
}

void rpc_server_free(struct rpc_server *s)
{
	if (!s)
		return;
	s->stopping = true;
	if (s->wake_fd >= 0) {
		/* the eventfd stays readable (never drained): every worker wakes */
		uint64_t one = 1;
		ssize_t w = write(s->wake_fd, &one, sizeof(one));
		(void)w;
	}
	/* a worker finishes the frame it is handling before it sees stopping */
	for (int i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	free(s->workers);
	/* requests still queued: drop the queue's reference */
	for (int i = 0; i < s->npools; i++) {
		struct rpc_conn *c, *next;
		for (c = s->pools[i].qhead; c; c = next) {
			next = c->qnext;
			free(c->qpayload);
			c->qpayload = NULL;
			conn_unref(c);
		}
		s->pools[i].qhead = s->pools[i].qtail = NULL;
	}
	/* connections still registered: drop the registration's reference */
	while (s->conns)
		conn_kill(s, s->conns);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->epoll_fd >= 0)
		close(s->epoll_fd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	if (s->timer_fd >= 0)
		close(s->timer_fd);
	explicit_bzero(&s->key, sizeof(s->key));
	rpc_tls_free(s->tls);
	pthread_mutex_destroy(&s->conns_lock);
	pthread_mutex_destroy(&s->pool_lock);
	free(s);
}
