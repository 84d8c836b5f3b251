/* chunk_reads.c — what a small random read costs the chunk engine
 * (chunkserver/chunk_store.c), with its open-file cache beside the same
 * store opened without it (each read opening the chunk file and loading its
 * header, as before the cache), in one run on the same files:
 *
 *   chunk_reads [DIR] [THREADS] [SECONDS] [READ_BYTES]
 *
 * DIR (default /var/tmp) gets a temporary target of 64 chunks of 4 MiB,
 * written once and left in the page cache, so the figure is the engine's CPU
 * per read and not the disk. THREADS (2) threads read READ_BYTES (4096) at
 * random aligned offsets for SECONDS (5) per mode; modes alternate twice and
 * each keeps its better round (the machine is shared). Prints reads/s and
 * us/read per mode and the ratio. */
#include <errno.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "chunkserver/chunk_store.h"
#include "chunkserver/uring_pool.h"

#define NCHUNKS 64
#define CHUNK_LEN (4u << 20)

struct run {
	struct chunk_store *cs;
	uint32_t read_len;
	double secs;
	uint64_t reads; /* __atomic */
	int failed;	/* __atomic */
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void *reader(void *arg)
{
	struct run *r = arg;
	uint8_t *buf = malloc(r->read_len);
	uint64_t x = (uint64_t)(uintptr_t)&buf ^ (uint64_t)time(NULL), n = 0;
	double end = now_s() + r->secs;
	while (buf) {
		for (int i = 0; i < 64; i++, n++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17; /* xorshift64 */
			uint32_t chunk = (uint32_t)(x % NCHUNKS);
			uint32_t off =
			    (uint32_t)((x >> 8) % (CHUNK_LEN / r->read_len)) * r->read_len;
			if (chunk_store_read(r->cs, 1, chunk, off, r->read_len, buf) != r->read_len)
				__atomic_store_n(&r->failed, 1, __ATOMIC_RELAXED);
		}
		if (now_s() >= end)
			break;
	}
	__atomic_add_fetch(&r->reads, n, __ATOMIC_RELAXED);
	free(buf);
	return NULL;
}

/* Reads per second over `threads` threads. */
static double measure(struct chunk_store *cs, int threads, double secs, uint32_t read_len)
{
	struct run r = {.cs = cs, .read_len = read_len, .secs = secs};
	pthread_t t[64];
	double t0 = now_s();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, reader, &r);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double dt = now_s() - t0;
	if (r.failed) {
		fprintf(stderr, "chunk_reads: a read failed\n");
		exit(1);
	}
	return (double)r.reads / dt;
}

static struct chunk_store *open_store(const char *dir, struct uring_pool *pool, bool cached)
{
	struct chunk_store_opts o = {.no_open_cache = !cached};
	struct chunk_store *cs;
	int r = chunk_store_open(dir, pool, &o, &cs);
	if (r < 0) {
		fprintf(stderr, "chunk_reads: open %s: %s\n", dir, strerror(-r));
		exit(1);
	}
	return cs;
}

static void fill_target(const char *dir, struct uring_pool *pool)
{
	struct chunk_store *cs = open_store(dir, pool, true);
	uint8_t *data = malloc(CHUNK_LEN);
	for (uint32_t i = 0; data && i < CHUNK_LEN; i++)
		data[i] = (uint8_t)(i * 2654435761u >> 13);
	for (uint32_t c = 0; data && c < NCHUNKS; c++)
		if (chunk_store_write(cs, 1, c, 0, CHUNK_LEN, data, 0, NULL) < 0) {
			fprintf(stderr, "chunk_reads: write failed\n");
			exit(1);
		}
	free(data);
	chunk_store_free(cs);
}

int main(int argc, char **argv)
{
	if (argc > 1 && (!strcmp(argv[1], "-h") || !strcmp(argv[1], "--help"))) {
		printf("usage: chunk_reads [DIR] [THREADS] [SECONDS] [READ_BYTES]\n");
		return 0;
	}
	const char *base = argc > 1 ? argv[1] : "/var/tmp";
	int threads = argc > 2 ? atoi(argv[2]) : 2;
	double secs = argc > 3 ? atof(argv[3]) : 5;
	uint32_t read_len = argc > 4 ? (uint32_t)atoi(argv[4]) : 4096;
	if (threads < 1 || threads > 64 || secs <= 0 || read_len == 0 || read_len > CHUNK_LEN) {
		fprintf(stderr, "chunk_reads: bad arguments (--help)\n");
		return 2;
	}
	char dir[512];
	snprintf(dir, sizeof(dir), "%s/chunk-reads-XXXXXX", base);
	if (!mkdtemp(dir)) {
		perror("chunk_reads: mkdtemp");
		return 1;
	}
	struct uring_pool *pool;
	if (uring_pool_new(threads, 32, &pool) < 0) {
		fprintf(stderr, "chunk_reads: io_uring unavailable\n");
		return 77;
	}
	fill_target(dir, pool);
	double best[2] = {0, 0};
	for (int round = 0; round < 4; round++) {
		bool cached = round % 2 == 0;
		struct chunk_store *cs = open_store(dir, pool, cached);
		double v = measure(cs, threads, secs, read_len);
		chunk_store_free(cs);
		if (v > best[cached])
			best[cached] = v;
	}
	printf("chunk_reads: %u-byte random reads, %d threads, %d chunks of %u MiB in the page "
	       "cache\n",
	       read_len, threads, NCHUNKS, CHUNK_LEN >> 20);
	printf("%-28s %12s %10s\n", "mode", "reads/s", "us/read");
	printf("%-28s %12.0f %10.2f\n", "open-file cache", best[1], threads * 1e6 / best[1]);
	printf("%-28s %12.0f %10.2f\n", "open + header per read", best[0], threads * 1e6 / best[0]);
	printf("ratio cached / uncached      %12.2f\n", best[1] / best[0]);
	uring_pool_free(pool);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	return system(cmd) == 0 ? 0 : 1;
}
