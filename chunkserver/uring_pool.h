/* uring_pool.h — a small pool of io_uring instances shared by the worker
 * threads of strata-chunkserver, and a helper that runs a batch of reads,
 * writes and fsyncs on one ring to completion.
 *
 * A ring is not thread-safe, and the RPC worker threads are not ours, so
 * instead of a thread-local ring each operation borrows a whole ring from the
 * pool (uring_pool_get) and returns it (uring_pool_put). With as many rings as
 * workers, borrowing never waits. */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/uio.h>

struct io_uring;
struct uring_pool;

/* Returns 0 and a pool of n rings of `depth` entries each in *ret (owned by the
 * caller, release with uring_pool_free), or -errno (io_uring unavailable). */
int uring_pool_new(int n, unsigned depth, struct uring_pool **ret);
void uring_pool_free(struct uring_pool *p);
/* Borrows a ring, waiting while all are in use. Never NULL. */
struct io_uring *uring_pool_get(struct uring_pool *p);
void uring_pool_put(struct uring_pool *p, struct io_uring *ring);

enum uring_op_kind { URING_READ, URING_WRITE, URING_FDATASYNC };
#define URING_OP_MAX_IOV 4
/* One operation of a batch. Fill fd, kind, iov[0..iovcnt) and off; the
 * batch runner updates iov/off in place while it resubmits short transfers. */
struct uring_op {
	int fd;
	enum uring_op_kind kind;
	struct iovec iov[URING_OP_MAX_IOV];
	int iovcnt;
	uint64_t off;
	int res_, state_; /* private */
};
/* Runs every op to completion on ring (all submitted together; short
 * transfers are continued). Returns 0, -EIO if a read hit end of file, or
 * the first -errno an op failed with (e.g. -ENOSPC). Only if io_uring_submit
 * itself fails can ops be left in flight; the ring should then be dropped. */
int uring_run(struct io_uring *ring, struct uring_op *ops, int nops);
/* Same result, with plain preadv/pwritev/fdatasync on the calling thread.
 * For buffered writes to a local file system: io_uring cannot do those
 * without blocking and hands each to an io-wq thread, one wake-up and two
 * context switches per op; the copy into the page cache is the same. */
int uring_run_inline(struct uring_op *ops, int nops);
