/* ringbench.c — the native client's half of bench/fs: random 4 KiB reads
 * through the ring (sdk/c, fuse/usrbio.c) with QD reads kept in flight by
 * one thread, as a USRBIO application does; one result line on stdout
 * ("<metric> <value> <unit>") beside fsbench's FUSE and local-disk rows.
 *
 *   ringbench randread FILE SOCKET QD SECS   -> IOPS through the ring
 *   ringbench direct FILE QD SECS            -> IOPS of QD threads of O_DIRECT
 *                                               4 KiB preads (the baseline the
 *                                               issue's fio figures use: no page
 *                                               cache on either side)
 *
 * Every completion is checked (4096 bytes); the ring is refilled once a
 * quarter of it has completed (as fio's iodepth_batch_complete), so that
 * one wake-up on each side carries several reads. */
#include <pthread.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sdk/c/strata_usrbio.h"

static double now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static int die(const char *what, int r)
{
	fprintf(stderr, "ringbench: %s: %s\n", what, strerror(-r));
	return 1;
}

static uint64_t next_block(uint64_t *x, uint64_t blocks)
{
	*x ^= *x >> 12;
	*x ^= *x << 25;
	*x ^= *x >> 27;
	return (*x * 0x2545F4914F6CDD1Dull) % blocks;
}

static int randread(const char *path, const char *sock, int qd, double secs)
{
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	struct strata_usrbio_cqe c[256];
	uint64_t size, x = 0x9E3779B97F4A7C15ull, ops = 0;
	unsigned entries = 1;
	int fd, id, r;

	while (entries < (unsigned)qd)
		entries <<= 1;
	if (qd > 256)
		return die("QD", -EINVAL);
	fd = open(path, O_RDONLY);
	if (fd < 0)
		return die(path, -errno);
	if ((r = strata_usrbio_open(sock, entries, &u)) < 0)
		return die(sock, r);
	if ((r = strata_usrbio_buf_new(u, (size_t)qd * 4096, &b)) < 0)
		return die("buffer", r);
	if ((id = strata_usrbio_reg_fd(u, fd, &size)) < 0)
		return die("register", id);
	close(fd);
	if (size < 4096)
		return die("file too small", -EINVAL);
	char *base = strata_usrbio_buf_base(b);
	uint64_t blocks = size / 4096;
	double t0 = now(), until = t0 + secs;

	for (int i = 0; i < qd; i++)
		strata_usrbio_prep_read(u, id, b, base + (size_t)i * 4096, 4096,
					next_block(&x, blocks) * 4096, (uint64_t)i);
	strata_usrbio_submit(u);
	bool stopping = false;
	unsigned batch = qd >= 4 ? (unsigned)qd / 4 : 1;
	while (strata_usrbio_inflight(u) > 0) {
		unsigned want = stopping || strata_usrbio_inflight(u) < batch ? 1 : batch;
		int n = strata_usrbio_wait(u, c, 256, want, -1);
		if (n < 0)
			return die("wait", n);
		if (!stopping && now() >= until)
			stopping = true; /* reap what is in flight, issue no more */
		for (int k = 0; k < n; k++) {
			if (c[k].res != 4096)
				return die("read", c[k].res < 0 ? c[k].res : -EIO);
			ops++;
			if (!stopping)
				strata_usrbio_prep_read(u, id, b, base + c[k].user_data * 4096,
							4096, next_block(&x, blocks) * 4096,
							c[k].user_data);
		}
		strata_usrbio_submit(u);
	}
	double dt = now() - t0;
	strata_usrbio_close(u);
	printf("ringread4k_qd%d %.0f IOPS\n", qd, (double)ops / dt);
	return 0;
}

struct dthread {
	int fd;
	uint64_t blocks, ops, seed;
	double until;
	int err;
};

static void *direct_thread(void *arg)
{
	struct dthread *t = arg;
	void *buf = NULL;
	uint64_t x = t->seed * 0x9E3779B97F4A7C15ull + 1;

	if (posix_memalign(&buf, 4096, 4096)) {
		t->err = ENOMEM;
		return NULL;
	}
	while (now() < t->until) {
		for (int i = 0; i < 64; i++) {
			if (pread(t->fd, buf, 4096, (off_t)(next_block(&x, t->blocks) * 4096)) !=
			    4096) {
				t->err = errno ? errno : EIO;
				free(buf);
				return NULL;
			}
			t->ops++;
		}
	}
	free(buf);
	return NULL;
}

static int direct(const char *path, int qd, double secs)
{
	struct dthread t[256];
	pthread_t tid[256];
	struct stat st;
	uint64_t ops = 0;
	int fd = open(path, O_RDONLY | O_DIRECT);

	if (fd < 0 || fstat(fd, &st) < 0)
		return die(path, -errno);
	if (qd > 256 || st.st_size < 4096)
		return die("QD or size", -EINVAL);
	double t0 = now();
	for (int i = 0; i < qd; i++) {
		t[i] = (struct dthread){.fd = fd,
					.blocks = (uint64_t)st.st_size / 4096,
					.seed = (uint64_t)i + 1,
					.until = t0 + secs};
		pthread_create(&tid[i], NULL, direct_thread, &t[i]);
	}
	for (int i = 0; i < qd; i++) {
		pthread_join(tid[i], NULL);
		if (t[i].err)
			return die("pread", -t[i].err);
		ops += t[i].ops;
	}
	close(fd);
	printf("directread4k_qd%d %.0f IOPS\n", qd, (double)ops / (now() - t0));
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 6 && !strcmp(argv[1], "randread"))
		return randread(argv[2], argv[3], atoi(argv[4]) > 0 ? atoi(argv[4]) : 32,
				atof(argv[5]));
	if (argc == 5 && !strcmp(argv[1], "direct"))
		return direct(argv[2], atoi(argv[3]) > 0 ? atoi(argv[3]) : 32, atof(argv[4]));
	fprintf(stderr,
		"usage: ringbench randread FILE SOCKET QD SECONDS | direct FILE QD SECONDS\n");
	return 2;
}
