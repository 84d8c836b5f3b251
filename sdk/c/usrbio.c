/* usrbio.c — libstrata_usrbio, the native client (strata_usrbio.h): the
 * client end of fs/usrbio_proto.h. It makes the shared memory (memfds
 * sealed against shrinking, which strata-fuse requires so that its mappings
 * never fault), the two eventfds (nonblocking: strata-fuse sets that flag on
 * the file descriptions it shares with us anyway), and speaks the control
 * protocol synchronously: one request, one reply. The rings are a
 * single-producer, single-consumer pair per side; a connection belongs to
 * one thread at a time. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "fs/unix_seqpacket.h"
#include "fs/usrbio_proto.h"
#include "sdk/c/strata_usrbio.h"

struct strata_usrbio_buf {
	uint8_t *base;
	size_t size;
	uint16_t index;
};

struct strata_usrbio {
	int sock, sq_efd, cq_efd;
	uint8_t *ring;
	size_t ring_size;
	uint32_t sq_entries, cq_entries;
	uint32_t sq_tail; /* next entry to fill */
	uint32_t sq_pub;  /* published as sq_tail */
	uint32_t cq_head;
	unsigned inflight; /* published, not reaped */
	bool dead;	   /* the server ended the connection */
	struct strata_usrbio_buf *bufs[USRBIO_MAX_BUFS];
	unsigned nbufs;
};

static uint32_t *ring_u32(const struct strata_usrbio *u, size_t off)
{
	return (uint32_t *)(u->ring + off);
}

static int call(struct strata_usrbio *u, struct usrbio_msg *m, const int *fds, int nfds,
		struct usrbio_msg *ret)
{
	int got[3], ngot, r;

	r = usrbio_msg_send(u->sock, m, fds, nfds, false);
	if (r < 0)
		return r;
	r = usrbio_msg_recv(u->sock, ret, got, 3, &ngot);
	for (int i = 0; i < ngot; i++)
		close(got[i]); /* replies carry none */
	if (r == -EAGAIN)
		return -ETIMEDOUT;
	if (r < 0)
		return r;
	return ret->type == USRBIO_REPLY ? ret->status : -EPROTO;
}

static int sealed_memfd(const char *name, size_t size)
{
	int fd = memfd_create(name, MFD_CLOEXEC | MFD_ALLOW_SEALING);

	if (fd < 0)
		return -errno;
	if (ftruncate(fd, (off_t)size) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int default_path(char *buf, size_t cap)
{
	const char *p = getenv("STRATA_USRBIO_SOCKET"), *home = getenv("STRATA_HOME");
	int n;

	if (p && *p)
		n = snprintf(buf, cap, "%s", p);
	else if (home && *home)
		n = snprintf(buf, cap, "%s/run/usrbio.sock", home);
	else
		return -ENOENT;
	return n > 0 && (size_t)n < cap ? 0 : -ENAMETOOLONG;
}

static int setup(struct strata_usrbio *u, unsigned entries)
{
	struct usrbio_msg m = {.type = USRBIO_SETUP}, reply;
	int fds[3], r;

	u->sq_entries = entries;
	u->cq_entries = entries * 2;
	u->ring_size = usrbio_ring_size(u->sq_entries, u->cq_entries);
	fds[0] = sealed_memfd("strata-usrbio-ring", u->ring_size);
	if (fds[0] < 0)
		return fds[0];
	u->ring = mmap(NULL, u->ring_size, PROT_READ | PROT_WRITE, MAP_SHARED, fds[0], 0);
	if (u->ring == MAP_FAILED) {
		u->ring = NULL;
		r = -errno;
		close(fds[0]);
		return r;
	}
	*ring_u32(u, USRBIO_OFF_MAGIC) = USRBIO_RING_MAGIC;
	fds[1] = u->sq_efd;
	fds[2] = u->cq_efd;
	m.sq_entries = u->sq_entries;
	m.cq_entries = u->cq_entries;
	r = call(u, &m, fds, 3, &reply);
	close(fds[0]);
	return r;
}

int strata_usrbio_open(const char *socket_path, unsigned entries, struct strata_usrbio **ret)
{
	struct strata_usrbio *u;
	char path[4096];
	int r;

	if (!usrbio_shape_ok(entries, entries * 2))
		return -EINVAL;
	if (!socket_path) {
		if ((r = default_path(path, sizeof(path))) < 0)
			return r;
		socket_path = path;
	}
	u = calloc(1, sizeof(*u));
	if (!u)
		return -ENOMEM;
	u->sq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	u->cq_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	u->sock = unix_seqpacket_connect(socket_path, USRBIO_TIMEOUT_MS);
	r = u->sq_efd < 0 || u->cq_efd < 0 ? -EMFILE : u->sock < 0 ? u->sock : 0;
	if (r == 0)
		r = setup(u, entries);
	if (r < 0) {
		if (u->sock < 0)
			u->sock = -1;
		strata_usrbio_close(u);
		return r;
	}
	*ret = u;
	return 0;
}

void strata_usrbio_close(struct strata_usrbio *u)
{
	if (!u)
		return;
	if (u->sock >= 0)
		close(u->sock);
	if (u->sq_efd >= 0)
		close(u->sq_efd);
	if (u->cq_efd >= 0)
		close(u->cq_efd);
	for (unsigned i = 0; i < u->nbufs; i++) {
		munmap(u->bufs[i]->base, u->bufs[i]->size);
		free(u->bufs[i]);
	}
	if (u->ring)
		munmap(u->ring, u->ring_size);
	free(u);
}

int strata_usrbio_buf_new(struct strata_usrbio *u, size_t size, struct strata_usrbio_buf **ret)
{
	struct usrbio_msg m = {.type = USRBIO_REG_BUF, .buf_size = size}, reply;
	struct strata_usrbio_buf *b;
	int fd, r;

	if (u->nbufs >= USRBIO_MAX_BUFS)
		return -EMFILE;
	if (size == 0)
		return -EINVAL;
	size = (size + 4095) & ~(size_t)4095;
	m.buf_size = size;
	b = calloc(1, sizeof(*b));
	if (!b)
		return -ENOMEM;
	fd = sealed_memfd("strata-usrbio-buf", size);
	if (fd < 0) {
		free(b);
		return fd;
	}
	b->base = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (b->base == MAP_FAILED) {
		r = -errno;
		close(fd);
		free(b);
		return r;
	}
	b->size = size;
	r = call(u, &m, &fd, 1, &reply);
	close(fd);
	if (r < 0) {
		munmap(b->base, size);
		free(b);
		return r;
	}
	b->index = (uint16_t)reply.value;
	u->bufs[u->nbufs++] = b;
	*ret = b;
	return 0;
}

void *strata_usrbio_buf_base(const struct strata_usrbio_buf *b)
{
	return b->base;
}

size_t strata_usrbio_buf_size(const struct strata_usrbio_buf *b)
{
	return b->size;
}

int strata_usrbio_reg_fd(struct strata_usrbio *u, int fd, uint64_t *ret_size)
{
	struct usrbio_msg m = {.type = USRBIO_REG_FILE}, reply;
	int r = call(u, &m, &fd, 1, &reply);

	if (r < 0)
		return r;
	if (ret_size)
		*ret_size = reply.file_size;
	return (int)reply.value;
}

int strata_usrbio_unreg_fd(struct strata_usrbio *u, int file_id)
{
	struct usrbio_msg m = {.type = USRBIO_UNREG_FILE, .file_id = (uint32_t)file_id}, reply;

	return file_id < 0 ? -EBADF : call(u, &m, NULL, 0, &reply);
}

/* ---- rings ---------------------------------------------------------------------- */
static int push(struct strata_usrbio *u, const struct usrbio_sqe *s)
{
	uint32_t head = __atomic_load_n(ring_u32(u, USRBIO_OFF_SQ_HEAD), __ATOMIC_ACQUIRE);

	if (u->dead)
		return -ECONNRESET;
	if (u->sq_tail - head >= u->sq_entries)
		return -EBUSY;
	usrbio_sqe_encode(s, u->ring + USRBIO_OFF_SQES +
				 (size_t)(u->sq_tail & (u->sq_entries - 1)) * USRBIO_SQE_SIZE);
	u->sq_tail++;
	return 0;
}

static int prep_rw(struct strata_usrbio *u, uint8_t op, int file_id,
		   const struct strata_usrbio_buf *b, const void *ptr, uint32_t len, uint64_t off,
		   uint64_t user_data)
{
	const uint8_t *p = ptr;

	if (file_id < 0 || len == 0 || len > USRBIO_MAX_IO)
		return -EINVAL;
	if (!b || p < b->base || p > b->base + b->size || len > (size_t)(b->base + b->size - p))
		return -EFAULT;
	struct usrbio_sqe s = {.op = op,
			       .buf_index = b->index,
			       .file_id = (uint32_t)file_id,
			       .off = off,
			       .buf_off = (uint64_t)(p - b->base),
			       .len = len,
			       .user_data = user_data};
	return push(u, &s);
}

int strata_usrbio_prep_read(struct strata_usrbio *u, int file_id, const struct strata_usrbio_buf *b,
			    void *ptr, uint32_t len, uint64_t off, uint64_t user_data)
{
	return prep_rw(u, USRBIO_OP_READ, file_id, b, ptr, len, off, user_data);
}

int strata_usrbio_prep_write(struct strata_usrbio *u, int file_id,
			     const struct strata_usrbio_buf *b, const void *ptr, uint32_t len,
			     uint64_t off, uint64_t user_data)
{
	return prep_rw(u, USRBIO_OP_WRITE, file_id, b, ptr, len, off, user_data);
}

int strata_usrbio_prep_fsync(struct strata_usrbio *u, int file_id, bool datasync,
			     uint64_t user_data)
{
	struct usrbio_sqe s = {.op = USRBIO_OP_FSYNC,
			       .flags = datasync ? USRBIO_SQE_F_DATASYNC : 0,
			       .file_id = (uint32_t)file_id,
			       .user_data = user_data};

	return file_id < 0 ? -EINVAL : push(u, &s);
}

int strata_usrbio_prep_raw(struct strata_usrbio *u, const struct strata_usrbio_raw_sqe *r)
{
	struct usrbio_sqe s = {.op = r->op,
			       .flags = r->flags,
			       .buf_index = r->buf_index,
			       .file_id = r->file_id,
			       .off = r->off,
			       .buf_off = r->buf_off,
			       .len = r->len,
			       .user_data = r->user_data};
	return push(u, &s);
}

void *strata_usrbio_ring(struct strata_usrbio *u)
{
	return u->ring;
}

static void kick(int efd)
{
	uint64_t one = 1;

	if (write(efd, &one, sizeof(one)) < 0) {
		/* EAGAIN: the counter is full, the server has a wake-up pending */
	}
}

int strata_usrbio_submit(struct strata_usrbio *u)
{
	uint32_t n = u->sq_tail - u->sq_pub;

	if (u->dead)
		return -ECONNRESET;
	if (n == 0)
		return 0;
	__atomic_store_n(ring_u32(u, USRBIO_OFF_SQ_TAIL), u->sq_tail, __ATOMIC_RELEASE);
	u->sq_pub = u->sq_tail;
	u->inflight += n;
	kick(u->sq_efd);
	return (int)n;
}

unsigned strata_usrbio_inflight(const struct strata_usrbio *u)
{
	return u->inflight;
}

static unsigned reap(struct strata_usrbio *u, struct strata_usrbio_cqe *cqes, unsigned max)
{
	uint32_t tail = __atomic_load_n(ring_u32(u, USRBIO_OFF_CQ_TAIL), __ATOMIC_ACQUIRE);
	size_t base = usrbio_cqes_offset(u->sq_entries);
	unsigned got = 0;

	while (u->cq_head != tail && got < max) {
		struct usrbio_cqe e;

		usrbio_cqe_decode(u->ring + base +
				      (size_t)(u->cq_head & (u->cq_entries - 1)) * USRBIO_CQE_SIZE,
				  &e);
		cqes[got++] = (struct strata_usrbio_cqe){.user_data = e.user_data, .res = e.result};
		u->cq_head++;
	}
	if (got) {
		__atomic_store_n(ring_u32(u, USRBIO_OFF_CQ_HEAD), u->cq_head, __ATOMIC_RELEASE);
		u->inflight -= got < u->inflight ? got : u->inflight;
		/* the server takes submissions only while completions have room:
		 * tell it there is more now if some wait */
		if (__atomic_load_n(ring_u32(u, USRBIO_OFF_SQ_HEAD), __ATOMIC_ACQUIRE) != u->sq_pub)
			kick(u->sq_efd);
	}
	return got;
}

static int64_t now_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int strata_usrbio_wait(struct strata_usrbio *u, struct strata_usrbio_cqe *cqes, unsigned max,
		       unsigned min, int timeout_ms)
{
	int64_t deadline = timeout_ms < 0 ? -1 : now_ms() + timeout_ms;
	unsigned got = 0;
	uint64_t v;

	if (min > max)
		min = max;
	for (;;) {
		got += reap(u, cqes + got, max - got);
		if (got >= min && (got > 0 || min == 0 || u->dead))
			return (int)got;
		if (u->dead)
			return got ? (int)got : -ECONNRESET;
		/* ask to be woken once min are there, then look again (the
		 * server fences between publishing cq_tail and reading cq_wake) */
		__atomic_store_n(ring_u32(u, USRBIO_OFF_CQ_WAKE), u->cq_head + (min - got),
				 __ATOMIC_RELAXED);
		__atomic_thread_fence(__ATOMIC_SEQ_CST);
		if (__atomic_load_n(ring_u32(u, USRBIO_OFF_CQ_TAIL), __ATOMIC_RELAXED) -
			u->cq_head >=
		    min - got)
			continue;
		int wait = -1;
		if (deadline >= 0) {
			int64_t left = deadline - now_ms();
			if (left <= 0)
				return (int)got;
			wait = (int)left;
		}
		struct pollfd p[2] = {{.fd = u->cq_efd, .events = POLLIN},
				      {.fd = u->sock, .events = POLLIN}};
		if (poll(p, 2, wait) < 0 && errno != EINTR)
			return got ? (int)got : -errno;
		if (p[0].revents & POLLIN) {
			if (read(u->cq_efd, &v, sizeof(v)) < 0) {
				/* EAGAIN: reset by an earlier read */
			}
		}
		/* the server sends nothing unasked: readable is its end */
		if (p[1].revents)
			u->dead = true;
	}
}

static ssize_t one(struct strata_usrbio *u, int r)
{
	struct strata_usrbio_cqe c;

	if (r < 0)
		return r;
	if ((r = strata_usrbio_submit(u)) < 0)
		return r;
	r = strata_usrbio_wait(u, &c, 1, 1, -1);
	return r < 0 ? r : c.res;
}

static bool idle(const struct strata_usrbio *u)
{
	return u->inflight == 0 && u->sq_tail == u->sq_pub;
}

ssize_t strata_usrbio_pread(struct strata_usrbio *u, int file_id, const struct strata_usrbio_buf *b,
			    void *ptr, uint32_t len, uint64_t off)
{
	if (!idle(u))
		return -EBUSY;
	return one(u, strata_usrbio_prep_read(u, file_id, b, ptr, len, off, 0));
}

ssize_t strata_usrbio_pwrite(struct strata_usrbio *u, int file_id,
			     const struct strata_usrbio_buf *b, const void *ptr, uint32_t len,
			     uint64_t off)
{
	if (!idle(u))
		return -EBUSY;
	return one(u, strata_usrbio_prep_write(u, file_id, b, ptr, len, off, 0));
}

int strata_usrbio_fsync(struct strata_usrbio *u, int file_id)
{
	if (!idle(u))
		return -EBUSY;
	return (int)one(u, strata_usrbio_prep_fsync(u, file_id, false, 0));
}
