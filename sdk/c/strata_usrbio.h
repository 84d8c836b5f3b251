/* strata_usrbio.h — the native client of strata: reads, writes and fsyncs
 * of files on a strata mount through shared-memory rings to the node's
 * strata-fuse, with buffers registered once and no kernel copy (as 3FS's
 * USRBIO). The one public header of libstrata_usrbio (sdk/c/README.md).
 *
 *   struct strata_usrbio *u;
 *   strata_usrbio_open(NULL, 64, &u);            // $STRATA_USRBIO_SOCKET, or
 *                                                // $STRATA_HOME/run/usrbio.sock
 *   struct strata_usrbio_buf *b;
 *   strata_usrbio_buf_new(u, 1 << 20, &b);       // registered once
 *   int fd = open("/mnt/strata/f", O_RDONLY);    // the kernel checks permissions
 *   int id = strata_usrbio_reg_fd(u, fd, NULL);  // the ring may do what fd may
 *   char *p = strata_usrbio_buf_base(b);
 *   strata_usrbio_prep_read(u, id, b, p, 4096, 0, 1);
 *   strata_usrbio_submit(u);
 *   struct strata_usrbio_cqe c;
 *   strata_usrbio_wait(u, &c, 1, 1, -1);         // c.res: bytes read or -errno
 *
 * The descriptor stays the caller's (close it when you like: strata-fuse
 * keeps a session of its own until strata_usrbio_unreg_fd or close). Data is
 * coherent with the mount: what the ring writes, reads through the mount
 * see, and the ring reads what was written through the mount (also dirty
 * pages still in the kernel's cache of a file held open for writing).
 * fsync on the ring is fsync(2) on the mount.
 *
 * A connection is one ring, for one thread at a time (use one per thread).
 * Every function returns 0 or a count on success and a negative errno on
 * failure; the library never logs and never raises signals. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

struct strata_usrbio;	  /* a connection with its ring */
struct strata_usrbio_buf; /* a registered buffer */

struct strata_usrbio_cqe {
	uint64_t user_data; /* as submitted */
	int32_t res;	    /* bytes read / written, 0 for fsync, or -errno */
};

/* Connects to the strata-fuse at socket_path (NULL: $STRATA_USRBIO_SOCKET,
 * else $STRATA_HOME/run/usrbio.sock) with a ring of `entries` submissions
 * (a power of two, 1..2048; completions get twice as many). Returns 0 and
 * *ret (free with strata_usrbio_close), -ENOENT / -ECONNREFUSED (no
 * server), -EINVAL, or -errno. */
int strata_usrbio_open(const char *socket_path, unsigned entries, struct strata_usrbio **ret);
/* Disconnects: strata-fuse finishes what is in flight, then closes the
 * files' sessions. Frees the buffers too. NULL ok. */
void strata_usrbio_close(struct strata_usrbio *u);

/* Makes and registers a shared buffer of size bytes (at most 4 GiB a
 * connection, 16 buffers). Returns 0 and *ret (freed with the connection). */
int strata_usrbio_buf_new(struct strata_usrbio *u, size_t size, struct strata_usrbio_buf **ret);
/* Returns the buffer's first byte (page-aligned) / its size. */
void *strata_usrbio_buf_base(const struct strata_usrbio_buf *b);
size_t strata_usrbio_buf_size(const struct strata_usrbio_buf *b);

/* Registers fd, a regular file opened through the strata mount of this
 * strata-fuse (not O_PATH or O_APPEND). Returns the file id (>= 0; its
 * length as strata-fuse knows it in *ret_size if not NULL), -EXDEV (another
 * filesystem), -EISDIR, -EBADF, -EMFILE (1024 files), or -errno. */
int strata_usrbio_reg_fd(struct strata_usrbio *u, int fd, uint64_t *ret_size);
/* Unregisters a file id (operations already submitted finish first).
 * Returns 0 or -EBADF. */
int strata_usrbio_unreg_fd(struct strata_usrbio *u, int file_id);

/* Queue one operation (not sent before strata_usrbio_submit). ptr..ptr+len
 * must lie in b. Returns 0, -EBUSY (the ring is full: submit and reap
 * first), -EFAULT (outside b) or -EINVAL. */
int strata_usrbio_prep_read(struct strata_usrbio *u, int file_id, const struct strata_usrbio_buf *b,
			    void *ptr, uint32_t len, uint64_t off, uint64_t user_data);
int strata_usrbio_prep_write(struct strata_usrbio *u, int file_id,
			     const struct strata_usrbio_buf *b, const void *ptr, uint32_t len,
			     uint64_t off, uint64_t user_data);
int strata_usrbio_prep_fsync(struct strata_usrbio *u, int file_id, bool datasync,
			     uint64_t user_data);
/* Publishes the queued operations and wakes strata-fuse. Returns how many. */
int strata_usrbio_submit(struct strata_usrbio *u);
/* Reaps up to max completions into cqes, waiting up to timeout_ms (-1:
 * for ever) until at least min are there. Returns the number reaped (may be
 * < min on timeout), or -ECONNRESET when strata-fuse ended the connection
 * (it stopped, or refused the ring) with nothing left to reap. */
int strata_usrbio_wait(struct strata_usrbio *u, struct strata_usrbio_cqe *cqes, unsigned max,
		       unsigned min, int timeout_ms);
/* Operations submitted and not reaped yet. */
unsigned strata_usrbio_inflight(const struct strata_usrbio *u);

/* One operation, waited for (nothing else may be in flight). Return as
 * pread / pwrite / fsync, but -errno instead of -1. */
ssize_t strata_usrbio_pread(struct strata_usrbio *u, int file_id, const struct strata_usrbio_buf *b,
			    void *ptr, uint32_t len, uint64_t off);
ssize_t strata_usrbio_pwrite(struct strata_usrbio *u, int file_id,
			     const struct strata_usrbio_buf *b, const void *ptr, uint32_t len,
			     uint64_t off);
int strata_usrbio_fsync(struct strata_usrbio *u, int file_id);

/* ---- for tests of the server's checks: an entry exactly as given -------- */
struct strata_usrbio_raw_sqe {
	uint8_t op, flags;
	uint16_t buf_index;
	uint32_t file_id;
	uint64_t off, buf_off;
	uint32_t len;
	uint64_t user_data;
};
int strata_usrbio_prep_raw(struct strata_usrbio *u, const struct strata_usrbio_raw_sqe *s);
/* The shared ring (tests that scribble on it). */
void *strata_usrbio_ring(struct strata_usrbio *u);

#ifdef __cplusplus
}
#endif
