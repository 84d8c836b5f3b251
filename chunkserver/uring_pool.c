/* uring_pool.c — io_uring instances lent to worker threads, and a batch
 * runner for vectored reads/writes/fdatasync (see uring_pool.h). */
#include "chunkserver/uring_pool.h"

#include <errno.h>
#include <liburing.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/uio.h>
#include <unistd.h>

enum { OP_QUEUED, OP_INFLIGHT, OP_DONE };

struct uring_pool {
	pthread_mutex_t lock;
	pthread_cond_t cond;
	int n, nfree;
	struct io_uring *rings;
	int *free_idx; /* stack of free ring indexes */
};

void uring_pool_free(struct uring_pool *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		io_uring_queue_exit(&p->rings[i]);
	pthread_mutex_destroy(&p->lock);
	pthread_cond_destroy(&p->cond);
	free(p->rings);
	free(p->free_idx);
	free(p);
}

int uring_pool_new(int n, unsigned depth, struct uring_pool **ret)
{
	if (n <= 0 || depth == 0)
		return -EINVAL;
	struct uring_pool *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	pthread_mutex_init(&p->lock, NULL);
	pthread_cond_init(&p->cond, NULL);
	p->rings = calloc(n, sizeof(*p->rings));
	p->free_idx = calloc(n, sizeof(*p->free_idx));
	if (!p->rings || !p->free_idx) {
		uring_pool_free(p);
		return -ENOMEM;
	}
	for (int i = 0; i < n; i++) {
		int r = io_uring_queue_init(depth, &p->rings[i], 0);
		if (r < 0) {
			uring_pool_free(p);
			return r;
		}
		p->n++;
		p->free_idx[p->nfree++] = i;
	}
	*ret = p;
	return 0;
}

struct io_uring *uring_pool_get(struct uring_pool *p)
{
	pthread_mutex_lock(&p->lock);
	while (p->nfree == 0)
		pthread_cond_wait(&p->cond, &p->lock);
	struct io_uring *ring = &p->rings[p->free_idx[--p->nfree]];
	pthread_mutex_unlock(&p->lock);
	return ring;
}

void uring_pool_put(struct uring_pool *p, struct io_uring *ring)
{
	pthread_mutex_lock(&p->lock);
	p->free_idx[p->nfree++] = (int)(ring - p->rings);
	pthread_cond_signal(&p->cond);
	pthread_mutex_unlock(&p->lock);
}

/* ---- batch runner ------------------------------------------------------ */

static size_t op_remaining(const struct uring_op *op)
{
	size_t n = 0;
	for (int i = 0; i < op->iovcnt; i++)
		n += op->iov[i].iov_len;
	return n;
}

/* Drops the first `done` bytes of op's iovecs. */
static void op_advance(struct uring_op *op, size_t done)
{
	op->off += done;
	int i = 0;
	while (i < op->iovcnt && done >= op->iov[i].iov_len)
		done -= op->iov[i++].iov_len;
	for (int j = i; j < op->iovcnt; j++)
		op->iov[j - i] = op->iov[j];
	op->iovcnt -= i;
	if (op->iovcnt > 0) {
		op->iov[0].iov_base = (char *)op->iov[0].iov_base + done;
		op->iov[0].iov_len -= done;
	}
}

static void op_prep(struct io_uring_sqe *sqe, struct uring_op *op)
{
	switch (op->kind) {
	case URING_READ:
		io_uring_prep_readv(sqe, op->fd, op->iov, op->iovcnt, op->off);
		break;
	case URING_WRITE:
		io_uring_prep_writev(sqe, op->fd, op->iov, op->iovcnt, op->off);
		break;
	case URING_FDATASYNC:
		io_uring_prep_fsync(sqe, op->fd, IORING_FSYNC_DATASYNC);
		break;
	}
	io_uring_sqe_set_data(sqe, op);
}

/* Applies one completion. Returns true when op needs resubmitting. */
static bool op_complete(struct uring_op *op, int res)
{
	if (res == -EINTR || res == -EAGAIN)
		return true;
	if (res < 0) {
		op->res_ = res;
		return false;
	}
	if (op->kind == URING_FDATASYNC)
		return false;
	if (res == 0) { /* EOF on read; a write that makes no progress */
		op->res_ = op->kind == URING_READ ? -EIO : -ENOSPC;
		return false;
	}
	op_advance(op, (size_t)res);
	return op_remaining(op) > 0;
}

int uring_run(struct io_uring *ring, struct uring_op *ops, int nops)
{
	int inflight = 0, todo = nops, err = 0;

	for (int i = 0; i < nops; i++) {
		ops[i].res_ = 0;
		ops[i].state_ = OP_QUEUED;
	}
	while (todo > 0) {
		struct io_uring_sqe *sqe;
		for (int i = 0; i < nops; i++) {
			if (ops[i].state_ != OP_QUEUED || !(sqe = io_uring_get_sqe(ring)))
				continue;
			op_prep(sqe, &ops[i]);
			ops[i].state_ = OP_INFLIGHT;
			inflight++;
		}
		int r = io_uring_submit_and_wait(ring, 1);
		if (r < 0 && r != -EINTR && r != -EAGAIN && r != -EBUSY) /* EBUSY: reap, retry */
			return r; /* ring unusable; see uring_pool.h */
		struct io_uring_cqe *cqe;
		while (inflight > 0 && io_uring_peek_cqe(ring, &cqe) == 0) {
			struct uring_op *op = io_uring_cqe_get_data(cqe);
			int res = cqe->res;
			io_uring_cqe_seen(ring, cqe);
			inflight--;
			if (op_complete(op, res)) {
				op->state_ = OP_QUEUED;
				continue;
			}
			op->state_ = OP_DONE;
			todo--;
			if (op->res_ < 0 && err == 0)
				err = op->res_;
		}
	}
	return err;
}

int uring_run_inline(struct uring_op *ops, int nops)
{
	int err = 0;
	for (int i = 0; i < nops; i++) {
		struct uring_op *op = &ops[i];
		op->res_ = 0;
		for (bool again = true; again;) {
			ssize_t n = op->kind == URING_FDATASYNC ? fdatasync(op->fd)
				    : op->kind == URING_READ
					? preadv(op->fd, op->iov, op->iovcnt, (off_t)op->off)
					: pwritev(op->fd, op->iov, op->iovcnt, (off_t)op->off);
			again = op_complete(op, n < 0 ? -errno : (int)n);
		}
		op->state_ = OP_DONE;
		if (op->res_ < 0 && err == 0)
			err = op->res_;
	}
	return err;
}
