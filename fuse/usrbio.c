/* usrbio.c — the native client's server in strata-fuse (--usrbio SOCKET):
 * reads, writes and fsyncs of strata files submitted on shared-memory rings
 * (fs/usrbio_proto.h; the library is sdk/c), served straight between the
 * chunk client and the client's registered buffer: no FUSE request, no
 * kernel copy.
 *
 * A client connects to the socket (mode 0666: the capability is the file
 * descriptor, not the socket), hands over its rings and buffers (memfds it
 * sealed against shrinking, so that no mapping here can ever fault) and
 * registers files by passing descriptors it opened through the mount: the
 * kernel checked the permissions at that open. A descriptor is accepted if
 * it is a regular file of this mount (st_dev of the mount point) opened for
 * reading and/or writing (F_GETFL; not O_PATH, not O_APPEND); the ring may
 * then do what the descriptor could. strata-fuse opens its own meta session
 * on the inode (sfs_file_open_native: the same checks as open, blob tables
 * included) and closes the descriptor at once: holding it would make our
 * own exit wait on a FLUSH that only a live strata-fuse answers.
 *
 * Threads: one per connection (control messages, and taking submissions
 * from its ring when the client kicks the eventfd or every UB_POLL_MS), and
 * UB_WORKERS shared workers that run the blocking chunk calls and post the
 * completions. Lock order: conn->lock, then srv->lock; in->lock is taken by
 * the ops_file.c calls only, never with a conn lock held.
 *
 * Coherence with the mount (fuse/README.md "The native client"):
 *  - a ring write invalidates the kernel's cached pages of its range after it
 *    is stored (FUSE reads then fetch it), and a write past the end stores its
 *    last byte into the kernel's cache (notify_store), which is how the
 *    kernel learns the new size with the writeback cache on (it trusts its own
 *    i_size then);
 *  - while the kernel has handles open for writing on the inode (it may hold
 *    dirty pages of it), a ring read or write first invalidates its range,
 *    which writes those pages back (launder) before the ring touches the
 *    chunks, and a ring fsync first does so for the whole file, so that it is
 *    as durable as fsync on the mount.
 *
 * Invariants:
 *  1. A completion always has room: a submission is taken only while in
 *     flight + unreaped < cq_entries (unreaped from the client's cq_head,
 *     which is checked to be at most cq_entries behind our cq_tail).
 *  2. A connection is freed only when nothing of it is in flight; a
 *     registered file only when no operation holds it (refs).
 *  3. Nothing read from shared memory is used before it is copied out and
 *     checked; what we own (sq_head, cq_tail) we never read back. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/log.h"
#include "fs/usrbio_proto.h"
#include "fuse/fuse-internal.h"

#define UB_WORKERS 32  /* concurrent chunk calls of all clients: qd32 in flight */
#define UB_POLL_MS 100 /* rings rechecked this often without a kick */
/* Most jobs one worker takes at once: its reads go to a chunkserver as one
 * batch. Half a queue depth of 32, so that a client's full ring makes two
 * batches that two chunkserver threads serve at once (one batch of 32 was
 * served by one thread while the other core idled; bench/fs "native"). */
#define UB_BATCH 16
#define UB_LISTEN_BACKLOG 64

struct ub_file {
	struct sfs_file *f; /* NULL: a free slot */
	bool readable, writable;
	bool closing;  /* unregistered: closed when refs drops to 0 */
	uint32_t refs; /* operations holding it; conn->lock */
};

struct ub_buf {
	uint8_t *base;
	uint64_t size;
};

struct ub_conn {
	struct sfs_usrbio *srv;
	int sock, sq_efd, cq_efd;
	uint8_t *ring; /* NULL until SETUP */
	size_t ring_size;
	uint32_t sq_entries, cq_entries;
	uint32_t sq_head, cq_tail; /* our own copies (invariant 3) */
	pthread_mutex_t lock;	   /* everything below, and the CQ */
	pthread_cond_t idle;	   /* inflight reached 0 */
	uint32_t inflight;
	bool broken; /* no more submissions taken (a bad ring, the end) */
	struct ub_buf bufs[USRBIO_MAX_BUFS];
	uint32_t nbufs;
	uint64_t buf_bytes;
	struct ub_file files[USRBIO_MAX_FILES];
};

struct ub_job {
	struct ub_conn *c;
	struct usrbio_sqe sqe;
	struct ub_file *uf;
	uint8_t *ptr; /* in the registered buffer */
	struct ub_job *next;
};

struct sfs_usrbio {
	struct sfs *fs;
	int lsock;
	int stop_efd; /* written once at stop: every poll returns */
	pthread_t acceptor;
	bool accepting; /* the acceptor runs */
	pthread_t workers[UB_WORKERS];
	int nworkers;
	pthread_mutex_t lock; /* below */
	pthread_cond_t work;  /* a job queued, or stopping */
	pthread_cond_t gone;  /* a connection ended */
	struct ub_job *head, *tail;
	bool stopping;
	int nconns;
	bool have_dev;
	dev_t dev; /* of the mount */
};

/* ---- rings ------------------------------------------------------------------ */
static uint32_t *ring_u32(struct ub_conn *c, size_t off)
{
	return (uint32_t *)(c->ring + off);
}

/* Posts a completion. Caller holds c->lock; there is room (invariant 1).
 * Returns whether the client asked to be woken by now (cq_wake). */
static bool post_locked(struct ub_conn *c, uint64_t user_data, int32_t result)
{
	struct usrbio_cqe e = {.user_data = user_data, .result = result};
	size_t at = usrbio_cqes_offset(c->sq_entries) +
		    (size_t)(c->cq_tail & (c->cq_entries - 1)) * USRBIO_CQE_SIZE;

	usrbio_cqe_encode(&e, c->ring + at);
	c->cq_tail++;
	__atomic_store_n(ring_u32(c, USRBIO_OFF_CQ_TAIL), c->cq_tail, __ATOMIC_RELEASE);
	/* pairs with the client's fence between storing cq_wake and loading cq_tail */
	__atomic_thread_fence(__ATOMIC_SEQ_CST);
	uint32_t wake = __atomic_load_n(ring_u32(c, USRBIO_OFF_CQ_WAKE), __ATOMIC_RELAXED);
	return (int32_t)(c->cq_tail - wake) >= 0;
}

static void kick(int efd)
{
	uint64_t one = 1;

	/* nonblocking: a client that let its counter fill up only misses wake-ups */
	if (write(efd, &one, sizeof(one)) < 0 && errno != EAGAIN)
		log_debug("usrbio: eventfd write failed: %s", strerror(errno));
}

/* Checks s against the connection: the file and what its descriptor
 * allowed, the buffer range. Caller holds c->lock. */
static int check_sqe(struct ub_conn *c, const struct usrbio_sqe *s, struct ub_file **ret_uf,
		     uint8_t **ret_ptr)
{
	struct ub_file *uf;

	if (s->file_id >= USRBIO_MAX_FILES)
		return -EBADF;
	uf = &c->files[s->file_id];
	if (!uf->f || uf->closing)
		return -EBADF;
	if ((s->op == USRBIO_OP_READ && !uf->readable) ||
	    (s->op == USRBIO_OP_WRITE && !uf->writable))
		return -EBADF; /* as pread on O_WRONLY, pwrite on O_RDONLY */
	*ret_uf = uf;
	*ret_ptr = NULL;
	if (s->op == USRBIO_OP_FSYNC)
		return 0;
	if (s->buf_index >= c->nbufs || s->buf_off > c->bufs[s->buf_index].size ||
	    s->len > c->bufs[s->buf_index].size - s->buf_off)
		return -EFAULT;
	*ret_ptr = c->bufs[s->buf_index].base + s->buf_off;
	return 0;
}

/* Queues the jobs first..last (linked) with one signal: one worker takes
 * them together, and its reads go to the chunkservers as one batch. */
static void enqueue(struct sfs_usrbio *srv, struct ub_job *first, struct ub_job *last)
{
	pthread_mutex_lock(&srv->lock);
	last->next = NULL;
	if (srv->tail)
		srv->tail->next = first;
	else
		srv->head = first;
	srv->tail = last;
	pthread_cond_signal(&srv->work);
	pthread_mutex_unlock(&srv->lock);
}

/* Takes what the client submitted, as far as completions have room. */
static void drain(struct ub_conn *c)
{
	struct ub_job *first = NULL, *last = NULL;
	bool posted = false;

	pthread_mutex_lock(&c->lock);
	if (!c->ring || c->broken) {
		pthread_mutex_unlock(&c->lock);
		return;
	}
	uint32_t tail = __atomic_load_n(ring_u32(c, USRBIO_OFF_SQ_TAIL), __ATOMIC_ACQUIRE);
	uint32_t cq_head = __atomic_load_n(ring_u32(c, USRBIO_OFF_CQ_HEAD), __ATOMIC_ACQUIRE);

	if (tail - c->sq_head > c->sq_entries || c->cq_tail - cq_head > c->cq_entries) {
		c->broken = true;
		pthread_mutex_unlock(&c->lock);
		log_warn("usrbio: a client's ring indices are impossible (sq %u..%u of %u, cq "
			 "%u..%u of %u): no longer serving it",
			 c->sq_head, tail, c->sq_entries, cq_head, c->cq_tail, c->cq_entries);
		shutdown(c->sock, SHUT_RDWR);
		return;
	}
	while (c->sq_head != tail && c->inflight + (c->cq_tail - cq_head) < c->cq_entries) {
		uint8_t raw[USRBIO_SQE_SIZE];
		struct usrbio_sqe s;
		struct ub_file *uf = NULL;
		uint8_t *ptr = NULL;
		struct ub_job *j;
		int r;

		/* copied out once (invariant 3): the client may rewrite it meanwhile */
		memcpy(raw,
		       c->ring + USRBIO_OFF_SQES +
			   (size_t)(c->sq_head & (c->sq_entries - 1)) * USRBIO_SQE_SIZE,
		       sizeof(raw));
		c->sq_head++;
		r = usrbio_sqe_decode(raw, &s);
		if (r == 0)
			r = check_sqe(c, &s, &uf, &ptr);
		j = r == 0 ? malloc(sizeof(*j)) : NULL;
		if (r == 0 && !j)
			r = -ENOMEM;
		if (r < 0) {
			posted |= post_locked(c, s.user_data, r);
			continue;
		}
		*j = (struct ub_job){.c = c, .sqe = s, .uf = uf, .ptr = ptr};
		uf->refs++;
		c->inflight++;
		if (last)
			last->next = j;
		else
			first = j;
		last = j;
	}
	if (first)
		enqueue(c->srv, first, last);
	__atomic_store_n(ring_u32(c, USRBIO_OFF_SQ_HEAD), c->sq_head, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&c->lock);
	if (posted)
		kick(c->cq_efd);
}

/* ---- operations ------------------------------------------------------------- */
/* Drops the kernel's cached pages of [off, off+len) of ino (len 0: to the
 * end), writing dirty ones back first (the kernel launders them through
 * FUSE WRITEs, which the loop's threads serve). */
static void kernel_drop(struct sfs *fs, strata_ino_t ino, uint64_t off, uint64_t len)
{
	int r = fuse_lowlevel_notify_inval_inode(fs->se, ino, (off_t)off, (off_t)len);

	if (r < 0 && r != -ENOENT)
		log_debug("usrbio: invalidating inode %llu failed: %s", (unsigned long long)ino,
			  strerror(-r));
}

static bool kernel_may_be_dirty(struct sfs *fs, struct sfs_inode *in)
{
	uint32_t n;

	if (!fs->writeback)
		return false; /* every write reached us already */
	pthread_mutex_lock(&in->lock);
	n = in->nkwriters;
	pthread_mutex_unlock(&in->lock);
	return n > 0;
}

static int op_write(struct sfs *fs, struct ub_job *j, char *bounce)
{
	struct sfs_inode *in = j->uf->f->inode;
	uint64_t off = j->sqe.off, len = j->sqe.len, old;
	int r;

	if (kernel_may_be_dirty(fs, in))
		kernel_drop(fs, in->ino, off, len);
	/* A private copy: the chunk client checksums and sends the bytes in
	 * separate passes, and a client rewriting its buffer meanwhile would
	 * store a chunk that fails its checksum. */
	memcpy(bounce, j->ptr, len);
	pthread_mutex_lock(&in->lock);
	old = in->size;
	pthread_mutex_unlock(&in->lock);
	r = sfs_file_write(fs, j->uf->f, off, len, bounce);
	if (r < 0)
		return r;
	kernel_drop(fs, in->ino, off, len);
	if (fs->writeback && off + len > old) {
		struct fuse_bufvec bv = FUSE_BUFVEC_INIT(1);

		bv.buf[0].mem = bounce + len - 1;
		r = fuse_lowlevel_notify_store(fs->se, in->ino, (off_t)(off + len - 1), &bv, 0);
		if (r < 0 && r != -ENOENT)
			log_debug("usrbio: telling the kernel inode %llu's size failed: %s",
				  (unsigned long long)in->ino, strerror(-r));
	}
	return (int)len;
}

static int run_job(struct sfs *fs, struct ub_job *j, char *bounce)
{
	struct sfs_file *f = j->uf->f;

	switch (j->sqe.op) {
	case USRBIO_OP_WRITE:
		return op_write(fs, j, bounce);
	case USRBIO_OP_FSYNC:
		if (kernel_may_be_dirty(fs, f->inode))
			kernel_drop(fs, f->inode->ino, 0, 0);
		return sfs_file_fsync(fs, f, (j->sqe.flags & USRBIO_SQE_F_DATASYNC) != 0);
	}
	return -EINVAL; /* reads go through run_reads; decode let no other op through */
}

/* Posts the results of jobs[0..n) (res[i] for jobs[i]), one lock and at
 * most one kick per connection, and lets go of their files and
 * connections. */
static void finish_jobs(struct sfs *fs, struct ub_job **jobs, const int *res, int n)
{
	bool done[UB_BATCH] = {false};

	for (int i = 0; i < n; i++) {
		struct sfs_file *close_f[UB_BATCH];
		int nclose = 0, ndone = 0;
		bool wake = false;

		if (done[i])
			continue; /* freed */
		struct ub_conn *c = jobs[i]->c;

		pthread_mutex_lock(&c->lock);
		for (int k = i; k < n; k++) {
			struct ub_job *j = jobs[k];

			if (done[k] || j->c != c)
				continue;
			done[k] = true;
			ndone++;
			wake |= post_locked(c, j->sqe.user_data, res[k]);
			if (--j->uf->refs == 0 && j->uf->closing) {
				close_f[nclose++] = j->uf->f;
				*j->uf = (struct ub_file){0};
			}
			free(j);
		}
		/* Kick before letting go of inflight: once it is 0, conn_free may
		 * close cq_efd (its number then another file's) and free c. */
		if (wake)
			kick(c->cq_efd);
		c->inflight -= (uint32_t)ndone;
		if (c->inflight == 0)
			pthread_cond_broadcast(&c->idle);
		pthread_mutex_unlock(&c->lock);
		for (int k = 0; k < nclose; k++)
			sfs_file_close(fs, close_f[k]);
	}
}

/* Takes up to max queued jobs (at stop, what is queued still runs:
 * invariant 2). Returns how many; 0 when stopping with nothing queued. */
static int take_jobs(struct sfs_usrbio *srv, struct ub_job **jobs, int max)
{
	int n = 0;

	pthread_mutex_lock(&srv->lock);
	while (!srv->head && !srv->stopping)
		pthread_cond_wait(&srv->work, &srv->lock);
	while (srv->head && n < max) {
		jobs[n++] = srv->head;
		srv->head = srv->head->next;
	}
	if (!srv->head)
		srv->tail = NULL;
	else
		pthread_cond_signal(&srv->work); /* the rest, for another worker */
	pthread_mutex_unlock(&srv->lock);
	return n;
}

/* Runs jobs[0..n) into res[0..n): the reads as one batch
 * (sfs_file_read_many: one chunkserver round trip for all of them), the
 * writes and fsyncs one by one. */
static void run_jobs(struct sfs *fs, struct ub_job **jobs, int n, int *res, char *bounce)
{
	struct sfs_read rd[UB_BATCH];
	int of[UB_BATCH], m = 0;

	for (int i = 0; i < n; i++) {
		struct ub_job *j = jobs[i];
		struct sfs_file *f = j->uf->f;

		if (j->sqe.op != USRBIO_OP_READ) {
			res[i] = bounce || j->sqe.op != USRBIO_OP_WRITE ? run_job(fs, j, bounce)
									: -ENOMEM;
			continue;
		}
		if (kernel_may_be_dirty(fs, f->inode))
			kernel_drop(fs, f->inode->ino, j->sqe.off, j->sqe.len);
		rd[m] = (struct sfs_read){
		    .f = f, .off = j->sqe.off, .len = j->sqe.len, .buf = (char *)j->ptr};
		of[m++] = i;
	}
	if (m == 1)
		rd[0].result = sfs_file_read(fs, rd[0].f, rd[0].off, rd[0].len, rd[0].buf);
	else if (m > 1)
		sfs_file_read_many(fs, rd, m);
	for (int k = 0; k < m; k++)
		res[of[k]] = (int)rd[k].result;
}

static void *worker(void *arg)
{
	struct sfs_usrbio *srv = arg;
	char *bounce = malloc(USRBIO_MAX_IO);
	struct ub_job *jobs[UB_BATCH];
	int res[UB_BATCH], n;

	while ((n = take_jobs(srv, jobs, UB_BATCH)) > 0) {
		run_jobs(srv->fs, jobs, n, res, bounce);
		finish_jobs(srv->fs, jobs, res, n);
	}
	free(bounce);
	return NULL;
}

/* ---- control messages ---------------------------------------------------------- */
/* A memfd sealed against shrinking with at least size bytes: its mapping
 * can never fault (a plain file could be truncated under us: SIGBUS). */
static int check_memfd(int fd, uint64_t size)
{
	struct stat st;
	int seals = fcntl(fd, F_GET_SEALS);

	if (seals < 0 || !(seals & F_SEAL_SHRINK))
		return -EPERM;
	if (fstat(fd, &st) < 0)
		return -errno;
	return (uint64_t)st.st_size >= size ? 0 : -EINVAL;
}

static bool is_eventfd(int fd)
{
	char path[64], link[64];
	ssize_t n;

	snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
	n = readlink(path, link, sizeof(link) - 1);
	if (n < 0)
		return false;
	link[n] = '\0';
	return !strcmp(link, "anon_inode:[eventfd]");
}

static int map_fd(int fd, size_t size, uint8_t **ret)
{
	void *p = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

	if (p == MAP_FAILED)
		return -errno;
	*ret = p;
	return 0;
}

static int do_setup(struct ub_conn *c, const struct usrbio_msg *m, int *fds, int nfds)
{
	size_t size;
	int r;

	if (nfds != 3)
		return -EBADMSG;
	if (c->ring)
		return -EEXIST;
	if (!usrbio_shape_ok(m->sq_entries, m->cq_entries))
		return -EINVAL;
	size = usrbio_ring_size(m->sq_entries, m->cq_entries);
	if ((r = check_memfd(fds[0], size)) < 0)
		return r;
	if (!is_eventfd(fds[1]) || !is_eventfd(fds[2]))
		return -EINVAL;
	/* Ours never block: not on a counter the client filled, nor on a
	 * read it raced (the client polls, fs/usrbio_proto.h). */
	if (fcntl(fds[1], F_SETFL, O_NONBLOCK) < 0 || fcntl(fds[2], F_SETFL, O_NONBLOCK) < 0)
		return -errno;
	uint8_t *ring = NULL;
	if ((r = map_fd(fds[0], size, &ring)) < 0)
		return r;
	pthread_mutex_lock(&c->lock);
	c->ring = ring;
	c->ring_size = size;
	c->sq_entries = m->sq_entries;
	c->cq_entries = m->cq_entries;
	/* start where the client's indices are (it may not start at 0) */
	c->sq_head = __atomic_load_n(ring_u32(c, USRBIO_OFF_SQ_TAIL), __ATOMIC_ACQUIRE);
	c->cq_tail = __atomic_load_n(ring_u32(c, USRBIO_OFF_CQ_HEAD), __ATOMIC_ACQUIRE);
	__atomic_store_n(ring_u32(c, USRBIO_OFF_SQ_HEAD), c->sq_head, __ATOMIC_RELEASE);
	__atomic_store_n(ring_u32(c, USRBIO_OFF_CQ_TAIL), c->cq_tail, __ATOMIC_RELEASE);
	c->sq_efd = fds[1];
	c->cq_efd = fds[2];
	pthread_mutex_unlock(&c->lock);
	close(fds[0]); /* the mapping stays */
	fds[0] = fds[1] = fds[2] = -1;
	return 0;
}

static int do_reg_buf(struct ub_conn *c, const struct usrbio_msg *m, int *fds, int nfds,
		      uint64_t *ret_index)
{
	uint8_t *base = NULL;
	int r;

	if (nfds != 1)
		return -EBADMSG;
	if (m->buf_size == 0 || m->buf_size > USRBIO_MAX_BUF_BYTES || m->buf_size > SIZE_MAX)
		return -EINVAL;
	pthread_mutex_lock(&c->lock);
	r = c->nbufs >= USRBIO_MAX_BUFS				? -EMFILE
	    : c->buf_bytes + m->buf_size > USRBIO_MAX_BUF_BYTES ? -ENOMEM
								: 0;
	pthread_mutex_unlock(&c->lock);
	if (r < 0)
		return r;
	if ((r = check_memfd(fds[0], m->buf_size)) < 0)
		return r;
	if ((r = map_fd(fds[0], (size_t)m->buf_size, &base)) < 0)
		return r;
	/* only this thread adds buffers: the count checked above still holds */
	pthread_mutex_lock(&c->lock);
	*ret_index = c->nbufs;
	c->bufs[c->nbufs++] = (struct ub_buf){.base = base, .size = m->buf_size};
	c->buf_bytes += m->buf_size;
	pthread_mutex_unlock(&c->lock);
	return 0;
}

/* The device of the mount, from its root (looked up once; a GETATTR the
 * loop's threads serve). */
static int mount_dev(struct sfs_usrbio *srv, dev_t *ret)
{
	struct stat st;
	int r = 0;

	pthread_mutex_lock(&srv->lock);
	if (!srv->have_dev) {
		if (stat(srv->fs->o.mountpoint, &st) < 0) {
			r = -errno;
		} else {
			srv->dev = st.st_dev;
			srv->have_dev = true;
		}
	}
	*ret = srv->dev;
	pthread_mutex_unlock(&srv->lock);
	return r;
}

static int do_reg_file(struct ub_conn *c, int *fds, int nfds, uint64_t *ret_id, uint64_t *ret_size)
{
	struct sfs *fs = c->srv->fs;
	struct sfs_file *f;
	struct stat st;
	dev_t dev;
	int fl, acc, r, id = -1;

	if (nfds != 1)
		return -EBADMSG;
	if ((fl = fcntl(fds[0], F_GETFL)) < 0 || fstat(fds[0], &st) < 0)
		return -errno;
	if ((r = mount_dev(c->srv, &dev)) < 0)
		return r;
	if (st.st_dev != dev)
		return -EXDEV; /* not a file of this mount */
	if (!S_ISREG(st.st_mode))
		return S_ISDIR(st.st_mode) ? -EISDIR : -EINVAL;
	if (fl & O_PATH)
		return -EBADF; /* opened without a permission check */
	if (fl & O_APPEND)
		return -EINVAL; /* ring writes name their offset */
	acc = fl & O_ACCMODE;
	pthread_mutex_lock(&c->lock);
	for (int i = 0; i < USRBIO_MAX_FILES && id < 0; i++)
		if (!c->files[i].f && !c->files[i].closing)
			id = i;
	if (id >= 0)
		c->files[id].closing = true; /* reserved while we open it */
	pthread_mutex_unlock(&c->lock);
	if (id < 0)
		return -EMFILE;
	f = sfs_file_open_native(fs, st.st_ino, (uint32_t)(fl & (O_ACCMODE | O_DSYNC)), &r);
	/* Not kept: see the top of the file. The close flushes through the
	 * loop's threads, which run while we serve. */
	close(fds[0]);
	fds[0] = -1;
	pthread_mutex_lock(&c->lock);
	c->files[id] = (struct ub_file){.f = f,
					.readable = acc == O_RDONLY || acc == O_RDWR,
					.writable = acc == O_WRONLY || acc == O_RDWR};
	pthread_mutex_unlock(&c->lock);
	if (!f)
		return r;
	pthread_mutex_lock(&f->inode->lock);
	*ret_size = f->inode->size;
	pthread_mutex_unlock(&f->inode->lock);
	*ret_id = (uint64_t)id;
	return 0;
}

static int do_unreg_file(struct ub_conn *c, const struct usrbio_msg *m)
{
	struct sfs_file *close_f = NULL;
	struct ub_file *uf;

	if (m->file_id >= USRBIO_MAX_FILES)
		return -EBADF;
	pthread_mutex_lock(&c->lock);
	uf = &c->files[m->file_id];
	if (!uf->f || uf->closing) {
		pthread_mutex_unlock(&c->lock);
		return -EBADF;
	}
	uf->closing = true;
	if (uf->refs == 0) {
		close_f = uf->f;
		*uf = (struct ub_file){0};
	}
	pthread_mutex_unlock(&c->lock);
	if (close_f)
		sfs_file_close(c->srv->fs, close_f);
	return 0;
}

/* One control message and its reply. Returns 0, or -errno: end the connection. */
static int control(struct ub_conn *c)
{
	struct usrbio_msg m, reply = {.type = USRBIO_REPLY};
	int fds[3], nfds, r;

	r = usrbio_msg_recv(c->sock, &m, fds, 3, &nfds);
	if (r == -ECONNRESET || r == -EPROTO)
		return r;
	if (r == 0) {
		switch (m.type) {
		case USRBIO_SETUP:
			r = do_setup(c, &m, fds, nfds);
			break;
		case USRBIO_REG_BUF:
			r = do_reg_buf(c, &m, fds, nfds, &reply.value);
			break;
		case USRBIO_REG_FILE:
			r = do_reg_file(c, fds, nfds, &reply.value, &reply.file_size);
			break;
		case USRBIO_UNREG_FILE:
			r = nfds ? -EBADMSG : do_unreg_file(c, &m);
			break;
		default:
			r = -EBADMSG;
		}
	}
	for (int i = 0; i < nfds; i++)
		if (fds[i] >= 0)
			close(fds[i]);
	reply.status = r;
	/* a client that does not read its replies is not waited for */
	return usrbio_msg_send(c->sock, &reply, NULL, 0, true);
}

/* ---- connections ---------------------------------------------------------------- */
static void conn_free(struct ub_conn *c)
{
	struct sfs_usrbio *srv = c->srv;

	pthread_mutex_lock(&c->lock);
	c->broken = true;
	while (c->inflight > 0) /* invariant 2 */
		pthread_cond_wait(&c->idle, &c->lock);
	pthread_mutex_unlock(&c->lock);
	for (int i = 0; i < USRBIO_MAX_FILES; i++)
		if (c->files[i].f)
			sfs_file_close(srv->fs, c->files[i].f);
	for (uint32_t i = 0; i < c->nbufs; i++)
		munmap(c->bufs[i].base, (size_t)c->bufs[i].size);
	if (c->ring)
		munmap(c->ring, c->ring_size);
	if (c->sq_efd >= 0)
		close(c->sq_efd);
	if (c->cq_efd >= 0)
		close(c->cq_efd);
	close(c->sock);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->idle);
	free(c);
	pthread_mutex_lock(&srv->lock);
	srv->nconns--;
	pthread_cond_broadcast(&srv->gone);
	pthread_mutex_unlock(&srv->lock);
}

static void *conn_thread(void *arg)
{
	struct ub_conn *c = arg;
	uint64_t v;

	for (;;) {
		struct pollfd p[3] = {{.fd = c->srv->stop_efd, .events = POLLIN},
				      {.fd = c->sock, .events = POLLIN},
				      {.fd = c->sq_efd, .events = POLLIN}};

		if (poll(p, c->sq_efd >= 0 ? 3 : 2, UB_POLL_MS) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		if (p[1].revents && control(c) < 0)
			break; /* the client went away, or sent what cannot be answered */
		if (c->sq_efd >= 0 && (p[2].revents & POLLIN) &&
		    read(c->sq_efd, &v, sizeof(v)) < 0 && errno != EAGAIN)
			break;
		drain(c);
	}
	conn_free(c);
	return NULL;
}

static void accept_one(struct sfs_usrbio *srv)
{
	int s = accept4(srv->lsock, NULL, NULL, SOCK_CLOEXEC);
	struct ub_conn *c;
	pthread_t t;

	if (s < 0)
		return;
	pthread_mutex_lock(&srv->lock);
	bool full = srv->nconns >= USRBIO_MAX_CONNS;
	if (!full)
		srv->nconns++;
	pthread_mutex_unlock(&srv->lock);
	if (full) {
		log_warn("usrbio: refusing a client: %d connected already", USRBIO_MAX_CONNS);
		close(s);
		return;
	}
	c = calloc(1, sizeof(*c));
	if (c) {
		c->srv = srv;
		c->sock = s;
		c->sq_efd = c->cq_efd = -1;
		pthread_mutex_init(&c->lock, NULL);
		pthread_cond_init(&c->idle, NULL);
	}
	if (c && sfs_thread_start(&t, conn_thread, c) == 0) {
		pthread_detach(t);
		return;
	}
	if (c) {
		pthread_mutex_destroy(&c->lock);
		pthread_cond_destroy(&c->idle);
		free(c);
	}
	close(s);
	pthread_mutex_lock(&srv->lock);
	srv->nconns--;
	pthread_mutex_unlock(&srv->lock);
}

static void *acceptor(void *arg)
{
	struct sfs_usrbio *srv = arg;

	for (;;) {
		struct pollfd p[2] = {{.fd = srv->stop_efd, .events = POLLIN},
				      {.fd = srv->lsock, .events = POLLIN}};

		if (poll(p, 2, -1) < 0 && errno != EINTR)
			break;
		if (p[0].revents)
			break;
		if (p[1].revents)
			accept_one(srv);
	}
	return NULL;
}

static int listen_on(const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int s;

	if (strlen(path) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	strcpy(a.sun_path, path);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (s < 0)
		return -errno;
	unlink(path); /* a predecessor's */
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || chmod(path, 0666) < 0 ||
	    listen(s, UB_LISTEN_BACKLOG) < 0) {
		int r = -errno;
		close(s);
		return r;
	}
	return s;
}

int sfs_usrbio_start(struct sfs *fs)
{
	struct sfs_usrbio *srv;
	int r;

	if (!fs->o.usrbio)
		return 0;
	srv = calloc(1, sizeof(*srv));
	if (!srv)
		return -ENOMEM;
	srv->fs = fs;
	pthread_mutex_init(&srv->lock, NULL);
	pthread_cond_init(&srv->work, NULL);
	pthread_cond_init(&srv->gone, NULL);
	srv->stop_efd = eventfd(0, EFD_CLOEXEC);
	srv->lsock = listen_on(fs->o.usrbio);
	r = srv->stop_efd < 0 ? -errno : srv->lsock < 0 ? srv->lsock : 0;
	for (int i = 0; r == 0 && i < UB_WORKERS; i++)
		if (sfs_thread_start(&srv->workers[srv->nworkers], worker, srv) == 0)
			srv->nworkers++;
	if (r == 0 && !srv->nworkers)
		r = -EAGAIN;
	if (r == 0)
		r = sfs_thread_start(&srv->acceptor, acceptor, srv);
	srv->accepting = r == 0;
	fs->usrbio = srv;
	if (r < 0) {
		sfs_usrbio_stop(fs);
		return log_error_errno(r, "Failed to serve the native client at %s", fs->o.usrbio);
	}
	log_info("Native client (usrbio) at %s, %d workers", fs->o.usrbio, srv->nworkers);
	return 0;
}

void sfs_usrbio_stop(struct sfs *fs)
{
	struct sfs_usrbio *srv = fs->usrbio;
	uint64_t one = 1;

	if (!srv)
		return;
	if (srv->stop_efd >= 0 && write(srv->stop_efd, &one, sizeof(one)) < 0)
		log_warn("usrbio: cannot signal the stop: %s", strerror(errno));
	if (srv->accepting)
		pthread_join(srv->acceptor, NULL);
	/* connections end once their operations finished (the workers run on) */
	pthread_mutex_lock(&srv->lock);
	while (srv->nconns > 0)
		pthread_cond_wait(&srv->gone, &srv->lock);
	srv->stopping = true;
	pthread_cond_broadcast(&srv->work);
	pthread_mutex_unlock(&srv->lock);
	for (int i = 0; i < srv->nworkers; i++)
		pthread_join(srv->workers[i], NULL);
	if (srv->lsock >= 0) {
		close(srv->lsock);
		unlink(fs->o.usrbio);
	}
	if (srv->stop_efd >= 0)
		close(srv->stop_efd);
	pthread_mutex_destroy(&srv->lock);
	pthread_cond_destroy(&srv->work);
	pthread_cond_destroy(&srv->gone);
	free(srv);
	fs->usrbio = NULL;
}
