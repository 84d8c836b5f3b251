/* usrbio_check.c — the native client (sdk/c, fuse/usrbio.c) against the same
 * data as FUSE reads, on a live mount: usrbio_check MNT SOCKET (run by
 * tests/usrbio/usrbio.sh after `strata up`). Exit 0 pass, 1 fail.
 *
 *  - written through FUSE, read through the ring at random offsets and
 *    lengths (past the end too), byte-compared with the model and with a
 *    FUSE pread of the same range;
 *  - written through the ring (overwrites, extending writes), read through
 *    FUSE with the kernel's cache populated before (it must be dropped), the
 *    size seen by fstat, an O_DIRECT read;
 *  - written through FUSE and still dirty in the kernel's cache, read
 *    through the ring; fsync through the ring;
 *  - four connections at queue depth 32 at once;
 *  - errors: an unregistered file id, a write through a read-only
 *    registration and a read through a write-only one, descriptors of
 *    another filesystem, a directory, O_PATH; bad buffer indices and ranges,
 *    lengths, opcodes, reserved bytes; an unsealed buffer, a bad ring shape,
 *    garbage on the socket; impossible ring indices; a client that stops
 *    reaping; unregistering with reads in flight; clients killed with
 *    operations in flight — after all of which the server still serves. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/usrbio_proto.h"
#include "sdk/c/strata_usrbio.h"

static const char *mnt, *sock_path;
static int failures;

#define CHECK(cond, ...)                                                                           \
	do {                                                                                       \
		if (!(cond)) {                                                                     \
			fprintf(stderr, "FAIL %s:%d: ", __FILE__, __LINE__);                       \
			fprintf(stderr, __VA_ARGS__);                                              \
			fprintf(stderr, "\n");                                                     \
			failures++;                                                                \
			return;                                                                    \
		}                                                                                  \
	} while (0)
#define CHECK_EQ(got, want, what)                                                                  \
	CHECK((long long)(got) == (long long)(want), "%s: got %lld, want %lld", what,              \
	      (long long)(got), (long long)(want))

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd(void)
{
	rng ^= rng << 13;
	rng ^= rng >> 7;
	rng ^= rng << 17;
	return rng;
}

static void fill(uint8_t *p, size_t n, uint64_t seed)
{
	uint64_t x = seed * 0x9E3779B97F4A7C15ull + 1;
	for (size_t i = 0; i < n; i++) {
		x ^= x << 13;
		x ^= x >> 7;
		x ^= x << 17;
		p[i] = (uint8_t)x;
	}
}

static char *path_of(const char *name)
{
	static char buf[4][4096];
	static int k;
	char *p = buf[k++ % 4];
	snprintf(p, 4096, "%s/%s", mnt, name);
	return p;
}

static int pwrite_all(int fd, const void *p, size_t n, off_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w <= 0)
			return -1;
		p = (const char *)p + w;
		n -= (size_t)w;
		off += w;
	}
	return 0;
}

static ssize_t pread_all(int fd, void *p, size_t n, off_t off)
{
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, (char *)p + got, n - got, off + (off_t)got);
		if (r < 0)
			return -1;
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return (ssize_t)got;
}

/* Expected result of a read of len at off of a file of model[size]. */
static size_t expect_len(uint64_t size, uint64_t off, uint32_t len)
{
	return off >= size ? 0 : (size_t)(size - off < len ? size - off : len);
}

/* ---- written through FUSE, read through the ring ------------------------------- */
#define F1_SIZE (6u << 20)
static uint8_t *f1_model;

/* Submits what was prepared (n entries) and waits for their completions
 * into c (10 s each). Returns how many came; a shortfall is a failure. */
static int submit_wait(struct strata_usrbio *u, struct strata_usrbio_cqe *c, int n)
{
	int got = 0, k = strata_usrbio_submit(u);

	if (k != n) {
		fprintf(stderr, "FAIL submit: %d of %d\n", k, n);
		failures++;
		return 0;
	}
	while (got < n) {
		k = strata_usrbio_wait(u, c + got, (unsigned)(n - got), 1, 10000);
		if (k <= 0) {
			fprintf(stderr, "FAIL wait: %d after %d of %d completions\n", k, got, n);
			failures++;
			break;
		}
		got += k;
	}
	return got;
}

static void test_fuse_to_ring(void)
{
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	int fd, id, r;
	uint64_t size;

	f1_model = malloc(F1_SIZE);
	fill(f1_model, F1_SIZE, 1);
	fd = open(path_of("f1"), O_CREAT | O_TRUNC | O_WRONLY, 0644);
	CHECK(fd >= 0, "create f1: %s", strerror(errno));
	for (size_t off = 0; off < F1_SIZE;) { /* odd piece sizes */
		size_t n = 1 + rnd() % 300000;
		if (n > F1_SIZE - off)
			n = F1_SIZE - off;
		CHECK(pwrite_all(fd, f1_model + off, n, (off_t)off) == 0, "write f1");
		off += n;
	}
	close(fd);
	fd = open(path_of("f1"), O_RDONLY);
	int fuse_fd = open(path_of("f1"), O_RDONLY);
	CHECK(fd >= 0 && fuse_fd >= 0, "open f1");
	CHECK_EQ(r = strata_usrbio_open(sock_path, 32, &u), 0, "connect");
	CHECK_EQ(strata_usrbio_buf_new(u, 32u << 18, &b), 0, "buffer"); /* 32 x 256 KiB */
	id = strata_usrbio_reg_fd(u, fd, &size);
	CHECK(id >= 0, "register f1: %s", strerror(-id));
	CHECK_EQ(size, F1_SIZE, "registered size");
	close(fd); /* the registration outlives the descriptor */
	uint8_t *base = strata_usrbio_buf_base(b), *fuse_buf = malloc(256 << 10);
	for (int round = 0; round < 40; round++) {
		uint64_t offs[32];
		uint32_t lens[32];
		for (int i = 0; i < 32; i++) {
			offs[i] = rnd() % (F1_SIZE + 8192);
			lens[i] = 1 + (uint32_t)(rnd() % (256 << 10));
			if (i % 4 == 0) /* 4 KiB aligned, as the benchmark */
				offs[i] &= ~4095ull, lens[i] = 4096;
			CHECK_EQ(strata_usrbio_prep_read(u, id, b, base + ((size_t)i << 18),
							 lens[i], offs[i], (uint64_t)i),
				 0, "prep read");
		}
		struct strata_usrbio_cqe c[32];
		int got = submit_wait(u, c, 32);
		for (int k = 0; k < got; k++) {
			int i = (int)c[k].user_data;
			size_t want = expect_len(F1_SIZE, offs[i], lens[i]);
			CHECK_EQ(c[k].res, want, "read length");
			CHECK(!memcmp(base + ((size_t)i << 18), f1_model + (want ? offs[i] : 0),
				      want),
			      "ring read at %llu+%u differs from what FUSE wrote",
			      (unsigned long long)offs[i], lens[i]);
			ssize_t fn = pread_all(fuse_fd, fuse_buf, lens[i], (off_t)offs[i]);
			CHECK_EQ(fn, want, "FUSE read length");
			CHECK(!memcmp(base + ((size_t)i << 18), fuse_buf, want),
			      "ring and FUSE read differ at %llu", (unsigned long long)offs[i]);
		}
	}
	free(fuse_buf);
	close(fuse_fd);
	strata_usrbio_close(u);
}

/* ---- sparse files: holes and short chunks in one batch ---------------------------- */
#define SPARSE_SIZE (5u << 20)
/* A file of SPARSE_SIZE with 4 KiB of data every 300 KiB (whole chunks
 * never written, chunks shorter than the file, a hole at the end), and f1
 * registered beside it: each submission's 32 reads of 4 KiB mix both files,
 * data, holes and the end of the file, as strata-fuse batches them
 * (chunk_read_many); every byte is checked against the model. */
static void test_sparse(void)
{
	uint8_t *model = calloc(1, SPARSE_SIZE), *base;
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	int fd = open(path_of("sparse"), O_CREAT | O_TRUNC | O_RDWR, 0644), id[2];

	CHECK(fd >= 0 && model, "create sparse: %s", strerror(errno));
	for (uint64_t off = 4096; off + 4096 <= SPARSE_SIZE - (1u << 20); off += 300u << 10) {
		fill(model + off, 4096, off);
		CHECK(pwrite_all(fd, model + off, 4096, (off_t)off) == 0, "write sparse");
	}
	CHECK(ftruncate(fd, SPARSE_SIZE) == 0, "extend sparse");
	CHECK(fsync(fd) == 0, "fsync sparse");
	CHECK_EQ(strata_usrbio_open(sock_path, 32, &u), 0, "connect");
	CHECK_EQ(strata_usrbio_buf_new(u, 32 * 4096, &b), 0, "buffer");
	id[0] = strata_usrbio_reg_fd(u, fd, NULL);
	close(fd);
	fd = open(path_of("f1"), O_RDONLY);
	id[1] = strata_usrbio_reg_fd(u, fd, NULL);
	close(fd);
	CHECK(id[0] >= 0 && id[1] >= 0, "register sparse and f1");
	base = strata_usrbio_buf_base(b);
	for (int round = 0; round < 30; round++) {
		uint64_t offs[32];
		for (int i = 0; i < 32; i++) {
			uint64_t size = i % 3 ? SPARSE_SIZE : F1_SIZE;
			/* near a data block, anywhere, or at the end */
			offs[i] = i % 4 == 0   ? (4096 + (300u << 10) * (rnd() % 14)) & ~4095ull
				  : i % 4 == 1 ? size - 4096
					       : (rnd() % size) & ~4095ull;
			CHECK_EQ(strata_usrbio_prep_read(u, id[i % 3 ? 0 : 1], b, base + i * 4096,
							 4096, offs[i], (uint64_t)i),
				 0, "prep read");
		}
		struct strata_usrbio_cqe c[32];
		int got = submit_wait(u, c, 32);
		for (int k = 0; k < got; k++) {
			int i = (int)c[k].user_data;
			const uint8_t *want = (i % 3 ? model : f1_model) + offs[i];
			CHECK_EQ(c[k].res, 4096, "sparse read length");
			CHECK(!memcmp(base + i * 4096, want, 4096),
			      "ring read of %s at %llu differs from the model",
			      i % 3 ? "sparse" : "f1", (unsigned long long)offs[i]);
		}
	}
	strata_usrbio_close(u);
	free(model);
}

/* ---- written through the ring, read through FUSE; dirty pages; fsync -------------- */
static void test_ring_to_fuse(void)
{
	const size_t cap = 3u << 20, room = cap + 65536; /* FUSE extends past cap */
	uint8_t *model = calloc(1, room), *chk = malloc(room);
	uint64_t size = 1u << 20;
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	int fd, id;

	fill(model, size, 2);
	fd = open(path_of("f2"), O_CREAT | O_TRUNC | O_RDWR, 0644);
	CHECK(fd >= 0, "create f2");
	CHECK(pwrite_all(fd, model, size, 0) == 0 && fsync(fd) == 0, "write f2");
	CHECK_EQ(pread_all(fd, chk, size, 0), size, "prime the page cache");
	CHECK_EQ(strata_usrbio_open(sock_path, 16, &u), 0, "connect");
	CHECK_EQ(strata_usrbio_buf_new(u, 1u << 20, &b), 0, "buffer");
	id = strata_usrbio_reg_fd(u, fd, NULL); /* fd stays open: a kernel writer */
	CHECK(id >= 0, "register f2: %s", strerror(-id));
	uint8_t *base = strata_usrbio_buf_base(b);
	for (int i = 0; i < 60; i++) {
		uint64_t off = rnd() % (cap - 70000);
		uint32_t len = 1 + (uint32_t)(rnd() % 65536);
		if (i == 59) /* the last one extends the file to cap */
			off = cap - 4097, len = 4097;
		fill(base, len, 100 + (uint64_t)i);
		ssize_t w = strata_usrbio_pwrite(u, id, b, base, len, off);
		CHECK_EQ(w, len, "ring write");
		memcpy(model + off, base, len);
		if (off + len > size)
			size = off + len;
	}
	struct stat st;
	CHECK(fstat(fd, &st) == 0, "fstat");
	CHECK_EQ(st.st_size, size, "size through FUSE after ring writes");
	memset(chk, 0, cap);
	CHECK_EQ(pread_all(fd, chk, cap, 0), size, "FUSE read length");
	CHECK(!memcmp(chk, model, size), "FUSE read (cached before) misses ring writes");
	int dfd = open(path_of("f2"), O_RDONLY | O_DIRECT);
	uint8_t *al = aligned_alloc(4096, cap);
	CHECK(dfd >= 0 && al, "O_DIRECT open");
	CHECK_EQ(pread_all(dfd, al, cap, 0), size, "O_DIRECT length");
	CHECK(!memcmp(al, model, size), "O_DIRECT read differs from ring writes");
	close(dfd);
	free(al);

	/* through FUSE, still in the kernel's cache (writeback): read via the ring */
	for (int i = 0; i < 20; i++) {
		uint64_t off = rnd() % (size - 9000);
		uint32_t len = 1 + (uint32_t)(rnd() % 8192);
		fill(chk, len, 500 + (uint64_t)i);
		CHECK(pwrite_all(fd, chk, len, (off_t)off) == 0, "FUSE write");
		memcpy(model + off, chk, len);
		memset(base, 0xEE, len);
		CHECK_EQ(strata_usrbio_pread(u, id, b, base, len, off), len, "ring read of dirty");
		CHECK(!memcmp(base, model + off, len),
		      "ring read misses a FUSE write still in the page cache (at %llu)",
		      (unsigned long long)off);
	}
	/* a FUSE write past the end, not yet written back */
	fill(chk, 5000, 900);
	CHECK(pwrite_all(fd, chk, 5000, (off_t)size) == 0, "FUSE extend");
	memcpy(model + size, chk, 5000);
	size += 5000;
	CHECK_EQ(strata_usrbio_pread(u, id, b, base, 8192, size - 5000), 5000,
		 "ring read of a FUSE extension");
	CHECK(!memcmp(base, chk, 5000), "ring read of a FUSE extension differs");
	CHECK_EQ(strata_usrbio_fsync(u, id), 0, "ring fsync");
	close(fd);
	/* a fresh descriptor after the last close sees it all */
	fd = open(path_of("f2"), O_RDONLY);
	CHECK(fd >= 0 && fstat(fd, &st) == 0, "reopen");
	CHECK_EQ(st.st_size, size, "size after close");
	CHECK_EQ(pread_all(fd, chk, room, 0), size, "read after close");
	CHECK(!memcmp(chk, model, size), "content after close");
	close(fd);
	strata_usrbio_close(u);
	free(model);
	free(chk);
}

/* ---- concurrency ---------------------------------------------------------------- */
struct conc {
	int bad, ops;
	unsigned seed;
};

static void *conc_thread(void *arg)
{
	struct conc *a = arg;
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	uint64_t x = a->seed;
	int fd = open(path_of("f1"), O_RDONLY), id;

	if (fd < 0 || strata_usrbio_open(sock_path, 32, &u) < 0) {
		a->bad++;
		return NULL;
	}
	if (strata_usrbio_buf_new(u, 32 * 8192, &b) < 0 ||
	    (id = strata_usrbio_reg_fd(u, fd, NULL)) < 0) {
		a->bad++;
		return NULL;
	}
	close(fd);
	uint8_t *base = strata_usrbio_buf_base(b);
	uint64_t offs[32];
	for (int round = 0; round < 60; round++) {
		for (int i = 0; i < 32; i++) {
			x = x * 6364136223846793005ull + 1442695040888963407ull;
			offs[i] = (x >> 20) % (F1_SIZE - 8192);
			strata_usrbio_prep_read(u, id, b, base + i * 8192, 8192, offs[i],
						(uint64_t)i);
		}
		strata_usrbio_submit(u);
		struct strata_usrbio_cqe c[32];
		int got = 0;
		while (got < 32) {
			int n = strata_usrbio_wait(u, c + got, 32 - got, 1, 10000);
			if (n <= 0) {
				a->bad++;
				strata_usrbio_close(u);
				return NULL;
			}
			got += n;
		}
		for (int k = 0; k < 32; k++) {
			int i = (int)c[k].user_data;
			if (c[k].res != 8192 || memcmp(base + i * 8192, f1_model + offs[i], 8192))
				a->bad++;
			a->ops++;
		}
	}
	strata_usrbio_close(u);
	return NULL;
}

static void test_concurrent(void)
{
	pthread_t t[4];
	struct conc a[4] = {{0}};

	for (int i = 0; i < 4; i++) {
		a[i].seed = 7u + (unsigned)i;
		pthread_create(&t[i], NULL, conc_thread, &a[i]);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(t[i], NULL);
	for (int i = 0; i < 4; i++) {
		CHECK_EQ(a[i].bad, 0, "concurrent connection: bad reads");
		CHECK_EQ(a[i].ops, 60 * 32, "concurrent connection: reads done");
	}
}

/* ---- errors ----------------------------------------------------------------------- */
static int raw_result(struct strata_usrbio *u, const struct strata_usrbio_raw_sqe *s)
{
	struct strata_usrbio_cqe c;
	int r = strata_usrbio_prep_raw(u, s);

	if (r < 0)
		return 1000 + r;
	strata_usrbio_submit(u);
	r = strata_usrbio_wait(u, &c, 1, 1, 10000);
	return r == 1 ? c.res : 2000 + r;
}

static void test_errors(void)
{
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	int ro, wo, r;

	CHECK_EQ(strata_usrbio_open(sock_path, 8, &u), 0, "connect");
	CHECK_EQ(strata_usrbio_buf_new(u, 65536, &b), 0, "buffer");
	uint8_t *base = strata_usrbio_buf_base(b);
	int fd = open(path_of("f1"), O_RDONLY);
	ro = strata_usrbio_reg_fd(u, fd, NULL);
	close(fd);
	fd = open(path_of("f3"), O_CREAT | O_WRONLY, 0644);
	wo = strata_usrbio_reg_fd(u, fd, NULL);
	close(fd);
	CHECK(ro >= 0 && wo >= 0, "register: %d %d", ro, wo);

	CHECK_EQ(strata_usrbio_pread(u, 77, b, base, 4096, 0), -EBADF, "unregistered file id");
	struct strata_usrbio_raw_sqe s = {.op = USRBIO_OP_READ, .file_id = 1u << 30, .len = 4096};
	CHECK_EQ(raw_result(u, &s), -EBADF, "file id past the table");
	CHECK_EQ(strata_usrbio_pwrite(u, ro, b, base, 4096, 0), -EBADF, "write via read-only fd");
	CHECK_EQ(strata_usrbio_pread(u, wo, b, base, 4096, 0), -EBADF, "read via write-only fd");
	CHECK_EQ(strata_usrbio_pwrite(u, wo, b, base, 4096, 0), 4096, "write via write-only fd");

	char tmpl[] = "/tmp/usrbio-other.XXXXXX";
	fd = mkstemp(tmpl);
	CHECK_EQ(strata_usrbio_reg_fd(u, fd, NULL), -EXDEV, "fd of another filesystem");
	close(fd);
	unlink(tmpl);
	fd = open(mnt, O_RDONLY | O_DIRECTORY);
	CHECK_EQ(strata_usrbio_reg_fd(u, fd, NULL), -EISDIR, "a directory");
	close(fd);
	fd = open(path_of("f1"), O_PATH);
	CHECK_EQ(strata_usrbio_reg_fd(u, fd, NULL), -EBADF, "an O_PATH fd");
	close(fd);
	CHECK_EQ(strata_usrbio_unreg_fd(u, 555), -EBADF, "unregister an unknown id");

	s = (struct strata_usrbio_raw_sqe){
	    .op = USRBIO_OP_READ, .file_id = (uint32_t)ro, .buf_index = 3, .len = 4096};
	CHECK_EQ(raw_result(u, &s), -EFAULT, "buffer index");
	s.buf_index = 0;
	s.buf_off = 65536 - 100;
	CHECK_EQ(raw_result(u, &s), -EFAULT, "buffer range");
	s.buf_off = UINT64_MAX - 10;
	CHECK_EQ(raw_result(u, &s), -EINVAL, "buffer offset overflow");
	s.buf_off = 0;
	s.len = USRBIO_MAX_IO + 1;
	CHECK_EQ(raw_result(u, &s), -EINVAL, "length over the limit");
	s.len = 0;
	CHECK_EQ(raw_result(u, &s), -EINVAL, "length 0");
	s.len = 4096;
	s.off = UINT64_MAX - 100;
	CHECK_EQ(raw_result(u, &s), -EINVAL, "file offset overflow");
	s.off = 0;
	s.op = 99;
	CHECK_EQ(raw_result(u, &s), -EINVAL, "unknown opcode");
	s.op = USRBIO_OP_READ;
	s.flags = 0x80;
	CHECK_EQ(raw_result(u, &s), -EINVAL, "unknown flags");
	s.flags = 0;
	/* reserved bytes: written behind the library's back */
	CHECK_EQ(strata_usrbio_prep_raw(u, &s), 0, "prep");
	uint8_t *ring = strata_usrbio_ring(u);
	uint32_t tail = *(uint32_t *)(ring + USRBIO_OFF_SQ_HEAD); /* == ours: all reaped */
	ring[USRBIO_OFF_SQES + (tail & 7) * USRBIO_SQE_SIZE + 50] = 1;
	strata_usrbio_submit(u);
	struct strata_usrbio_cqe c;
	CHECK_EQ(strata_usrbio_wait(u, &c, 1, 1, 10000), 1, "wait");
	CHECK_EQ(c.res, -EINVAL, "reserved bytes set");
	CHECK_EQ(strata_usrbio_pread(u, ro, b, base, 4096, 4096), 4096, "still serving");
	CHECK(!memcmp(base, f1_model + 4096, 4096), "still right");

	/* unregister with reads in flight: they finish, later ones fail */
	for (int i = 0; i < 8; i++)
		CHECK_EQ(strata_usrbio_prep_read(u, ro, b, base + i * 8192, 8192,
						 (uint64_t)i * 8192, (uint64_t)i),
			 0, "prep");
	strata_usrbio_submit(u);
	CHECK_EQ(strata_usrbio_unreg_fd(u, ro), 0, "unregister in flight");
	struct strata_usrbio_cqe cs[8];
	int got = 0;
	while (got < 8) {
		r = strata_usrbio_wait(u, cs + got, 8 - got, 1, 10000);
		CHECK(r > 0, "wait: %d", r);
		got += r;
	}
	for (int i = 0; i < 8; i++)
		CHECK(cs[i].res == 8192 || cs[i].res == -EBADF, "in-flight read at unregister: %d",
		      cs[i].res);
	CHECK_EQ(strata_usrbio_pread(u, ro, b, base, 4096, 0), -EBADF, "read after unregister");
	strata_usrbio_close(u);
}

/* Control messages the library would never send. */
static int raw_connect(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	int s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

	snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock_path);
	if (connect(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(s);
		return -errno;
	}
	return s;
}

static int raw_call(int s, struct usrbio_msg *m, const int *fds, int nfds)
{
	struct usrbio_msg reply;
	int got[3], ngot, r = usrbio_msg_send(s, m, fds, nfds, false);

	if (r < 0)
		return 1000 + r;
	r = usrbio_msg_recv(s, &reply, got, 3, &ngot);
	return r < 0 ? 2000 + r : reply.status;
}

static void test_control(void)
{
	int s = raw_connect();
	CHECK(s >= 0, "connect: %s", strerror(-s));
	int mfd = memfd_create("unsealed", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	CHECK(mfd >= 0 && ftruncate(mfd, 1 << 20) == 0, "memfd");
	struct usrbio_msg m = {.type = USRBIO_REG_BUF, .buf_size = 1 << 20};
	CHECK_EQ(raw_call(s, &m, &mfd, 1), -EPERM, "unsealed buffer");
	fcntl(mfd, F_ADD_SEALS, F_SEAL_SHRINK);
	m.buf_size = 2 << 20;
	CHECK_EQ(raw_call(s, &m, &mfd, 1), -EINVAL, "buffer larger than its memfd");
	m.buf_size = 1 << 20;
	CHECK_EQ(raw_call(s, &m, NULL, 0), -EBADMSG, "buffer without an fd");
	CHECK_EQ(raw_call(s, &m, &mfd, 1), 0, "sealed buffer");
	int fds[3] = {mfd, mfd, mfd};
	m = (struct usrbio_msg){.type = USRBIO_SETUP, .sq_entries = 3, .cq_entries = 8};
	CHECK_EQ(raw_call(s, &m, fds, 3), -EINVAL, "ring of 3 entries");
	m.sq_entries = 8;
	CHECK_EQ(raw_call(s, &m, fds, 3), -EINVAL, "a memfd as eventfd");
	m.type = USRBIO_REPLY;
	CHECK_EQ(raw_call(s, &m, NULL, 0), -EBADMSG, "a reply as request");
	/* garbage: answered or dropped, never a crash */
	uint8_t junk[40];
	fill(junk, sizeof(junk), 3);
	CHECK(send(s, junk, sizeof(junk), MSG_NOSIGNAL) == (ssize_t)sizeof(junk), "send junk");
	close(mfd);
	close(s);
}

/* Ring indices no server could have produced: the ring is dropped. */
static void test_bad_indices(void)
{
	struct strata_usrbio *u;
	struct strata_usrbio_cqe c;

	CHECK_EQ(strata_usrbio_open(sock_path, 8, &u), 0, "connect");
	/* no kick: the server looks at its rings every 100 ms anyway */
	uint8_t *ring = strata_usrbio_ring(u);
	__atomic_store_n((uint32_t *)(ring + USRBIO_OFF_SQ_TAIL), 100000u, __ATOMIC_RELEASE);
	int r = strata_usrbio_wait(u, &c, 1, 1, 10000);
	CHECK_EQ(r, -ECONNRESET, "a ring with impossible indices is dropped");
	strata_usrbio_close(u);

	CHECK_EQ(strata_usrbio_open(sock_path, 8, &u), 0, "connect");
	ring = strata_usrbio_ring(u);
	__atomic_store_n((uint32_t *)(ring + USRBIO_OFF_CQ_HEAD), 5000u, __ATOMIC_RELEASE);
	CHECK_EQ(strata_usrbio_wait(u, &c, 1, 1, 10000), -ECONNRESET,
		 "completions reaped that were never posted");
	strata_usrbio_close(u);
}

/* A client that stops reaping stops only its own ring. */
static void test_no_reaping(void)
{
	struct strata_usrbio *lazy, *u;
	struct strata_usrbio_buf *lb, *b;
	int fd = open(path_of("f1"), O_RDONLY), lid, id, queued = 0;

	CHECK_EQ(strata_usrbio_open(sock_path, 4, &lazy), 0, "connect");
	CHECK_EQ(strata_usrbio_buf_new(lazy, 4096, &lb), 0, "buffer");
	lid = strata_usrbio_reg_fd(lazy, fd, NULL);
	CHECK(lid >= 0, "register");
	for (int round = 0; round < 10; round++) {
		while (strata_usrbio_prep_read(lazy, lid, lb, strata_usrbio_buf_base(lb), 4096, 0,
					       (uint64_t)queued) == 0)
			queued++;
		strata_usrbio_submit(lazy);
		usleep(20000);
	}
	/* 4 in the SQ + 8 completions at most: then the ring is full */
	CHECK_EQ(queued, 12, "submissions a non-reaping client gets in");
	CHECK_EQ(strata_usrbio_open(sock_path, 8, &u), 0, "connect");
	CHECK_EQ(strata_usrbio_buf_new(u, 4096, &b), 0, "buffer");
	id = strata_usrbio_reg_fd(u, fd, NULL);
	for (int i = 0; i < 50; i++)
		CHECK_EQ(strata_usrbio_pread(u, id, b, strata_usrbio_buf_base(b), 4096, 8192), 4096,
			 "another client meanwhile");
	struct strata_usrbio_cqe c[16];
	int got = 0;
	while (got < 12) {
		int n = strata_usrbio_wait(lazy, c + got, 16 - (unsigned)got, 1, 10000);
		CHECK(n > 0, "late reaping: %d after %d", n, got);
		got += n;
	}
	for (int i = 0; i < 12; i++)
		CHECK_EQ(c[i].res, 4096, "late completion");
	close(fd);
	strata_usrbio_close(u);
	strata_usrbio_close(lazy);
}

/* Clients killed with reads and writes in flight. */
static void test_killed(void)
{
	for (int round = 0; round < 12; round++) {
		pid_t pid = fork();
		CHECK(pid >= 0, "fork");
		if (pid == 0) {
			struct strata_usrbio *u;
			struct strata_usrbio_buf *b;
			int fd = open(path_of("f1"), O_RDONLY),
			    wfd = open(path_of("f4"), O_CREAT | O_RDWR, 0644);
			if (strata_usrbio_open(sock_path, 64, &u) < 0 ||
			    strata_usrbio_buf_new(u, 64 << 16, &b) < 0)
				_exit(3);
			int id = strata_usrbio_reg_fd(u, fd, NULL),
			    wid = strata_usrbio_reg_fd(u, wfd, NULL);
			if (id < 0 || wid < 0)
				_exit(4);
			uint8_t *base = strata_usrbio_buf_base(b);
			for (int i = 0; i < 64; i++) {
				if (i % 2)
					strata_usrbio_prep_read(u, id, b, base + (i << 16), 65536,
								(uint64_t)i << 16, 0);
				else
					strata_usrbio_prep_write(u, wid, b, base + (i << 16), 65536,
								 (uint64_t)i << 16, 0);
			}
			strata_usrbio_submit(u);
			if (round % 2)
				usleep((useconds_t)(rnd() % 3000));
			raise(SIGKILL);
		}
		int st;
		waitpid(pid, &st, 0);
		CHECK(WIFSIGNALED(st), "child exit %d", WEXITSTATUS(st));
	}
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	int fd = open(path_of("f1"), O_RDONLY);
	CHECK_EQ(strata_usrbio_open(sock_path, 8, &u), 0, "connect after the kills");
	CHECK_EQ(strata_usrbio_buf_new(u, 4096, &b), 0, "buffer");
	int id = strata_usrbio_reg_fd(u, fd, NULL);
	CHECK_EQ(strata_usrbio_pread(u, id, b, strata_usrbio_buf_base(b), 4096, 12288), 4096,
		 "read after the kills");
	CHECK(!memcmp(strata_usrbio_buf_base(b), f1_model + 12288, 4096), "right after the kills");
	close(fd);
	strata_usrbio_close(u);
}

int main(int argc, char **argv)
{
	if (argc != 3) {
		fprintf(stderr, "usage: usrbio_check MNT SOCKET\n");
		return 2;
	}
	mnt = argv[1];
	sock_path = argv[2];
	signal(SIGPIPE, SIG_IGN);
	struct {
		const char *name;
		void (*fn)(void);
	} tests[] = {{"fuse_to_ring", test_fuse_to_ring},
		     {"ring_to_fuse", test_ring_to_fuse},
		     {"concurrent", test_concurrent},
		     {"sparse", test_sparse},
		     {"errors", test_errors},
		     {"control", test_control},
		     {"bad_indices", test_bad_indices},
		     {"no_reaping", test_no_reaping},
		     {"killed", test_killed}};
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		int before = failures;
		tests[i].fn();
		fprintf(stderr, "%s %s\n", failures == before ? "ok  " : "FAIL", tests[i].name);
		if (i == 0 && failures)
			break; /* nothing else can work */
	}
	return failures ? 1 : 0;
}
