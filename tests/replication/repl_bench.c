/* repl_bench.c — the C helper of bench/replication.sh: drives chunk_client
 * directly against a running cluster (no FUSE, so the figures are the
 * replication path's own).
 *
 *   repl_bench write META MB THREADS        sequential write of a new file
 *   repl_bench read META MB THREADS any|tail   re-read of that file
 *   repl_bench failover META PID            writes 64 KiB in a loop, kills PID
 *                                           (SIGKILL) after 1 s and reports the
 *                                           time to the first write that
 *                                           succeeds after the kill
 *
 * write and read print "MB/s X", "max_ms X" (the slowest chunk) and "cpu_s X" (this process);
 * failover prints "failover_ms X". The file is /bench.<pid> in the cluster's root (write creates it
 * and prints its inode on stderr; read reads the newest /bench.* created by this tool: its name is
 * passed in $REPL_BENCH_FILE). With $REPL_BENCH_REPLICAS=N the file lives in /r<N>, a directory
 * made with replication factor N (strata admin layout set), so one cluster holds files of several
 * factors. */
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include "fs/chunk_client.h"
#include "fs/meta_client.h"
#include "tests/fs/testkey.h"

struct job {
	struct chunk_client *cc;
	struct strata_attr a;
	uint32_t nchunks;
	uint32_t next;	 /* atomic */
	uint32_t max_ms; /* atomic: the slowest chunk's call */
	bool write;
	int err;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static void *worker(void *arg)
{
	struct job *j = arg;
	uint32_t cs = j->a.layout.chunk_size;
	char *buf = malloc(cs);
	if (!buf)
		return NULL;
	memset(buf, 0x5a, cs);
	for (;;) {
		uint32_t i = __atomic_fetch_add(&j->next, 1, __ATOMIC_RELAXED);
		if (i >= j->nchunks)
			break;
		struct chunk_id id = {j->a.ino, i};
		double t0 = now_s();
		int r = j->write ? chunk_write(j->cc, &j->a.layout, id, 0, cs, buf, 0)
				 : (int)chunk_read(j->cc, &j->a.layout, id, 0, cs, buf);
		uint32_t ms = (uint32_t)((now_s() - t0) * 1000);
		uint32_t max = __atomic_load_n(&j->max_ms, __ATOMIC_RELAXED);
		while (ms > max && !__atomic_compare_exchange_n(&j->max_ms, &max, ms, false,
								__ATOMIC_RELAXED, __ATOMIC_RELAXED))
			;
		if (r < 0) {
			j->err = r;
			break;
		}
	}
	free(buf);
	return NULL;
}

static int run(struct job *j, int threads)
{
	pthread_t t[64];
	threads = threads < 1 ? 1 : threads > 64 ? 64 : threads;
	double t0 = now_s();
	for (int i = 0; i < threads; i++)
		pthread_create(&t[i], NULL, worker, j);
	for (int i = 0; i < threads; i++)
		pthread_join(t[i], NULL);
	double dt = now_s() - t0;
	if (j->err) {
		fprintf(stderr, "repl_bench: %s\n", strerror(-j->err));
		return 1;
	}
	struct rusage ru;
	getrusage(RUSAGE_SELF, &ru);
	printf("MB/s %.1f\n", (double)j->nchunks * j->a.layout.chunk_size / dt / 1e6);
	printf("max_ms %u\n", j->max_ms);
	printf("cpu_s %.3f\n", ru.ru_utime.tv_sec + ru.ru_stime.tv_sec +
				   (ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) / 1e6);
	return 0;
}

static int failover(struct chunk_client *cc, const struct strata_attr *a, pid_t victim)
{
	static char buf[65536];
	double t0 = now_s(), killed = 0;
	for (uint32_t i = 0;; i++) {
		if (!killed && now_s() - t0 > 1.0) {
			kill(victim, SIGKILL);
			killed = now_s();
		}
		struct chunk_id id = {a->ino, 0};
		int r =
		    chunk_write(cc, &a->layout, id, (i % 16) * sizeof(buf), sizeof(buf), buf, 0);
		if (r == 0 && killed) {
			printf("failover_ms %.0f\n", (now_s() - killed) * 1000);
			return 0;
		}
		if (r < 0 && now_s() - t0 > 30) {
			fprintf(stderr, "repl_bench: no write succeeded: %s\n", strerror(-r));
			return 1;
		}
	}
}

/* The directory for files of replication factor $REPL_BENCH_REPLICAS (made
 * on first use), or the root when it is not set. */
static int bench_parent(struct meta_client *mc, strata_ino_t *ret)
{
	const char *env = getenv("REPL_BENCH_REPLICAS");
	struct strata_attr a;
	char name[32];
	*ret = STRATA_ROOT_INO;
	if (!env || !*env)
		return 0;
	snprintf(name, sizeof(name), "r%s", env);
	int r = meta_mkdir(mc, NULL, STRATA_ROOT_INO, name, 040755, 0, 0, &a);
	if (r == -EEXIST)
		r = meta_lookup(mc, STRATA_ROOT_INO, name, &a);
	if (r < 0)
		return r;
	struct strata_setattr sa = {.valid = STRATA_SET_REPLICAS, .replicas = (uint32_t)atoi(env)};
	r = meta_setattr(mc, a.ino, &sa, &a);
	*ret = a.ino;
	return r;
}

int main(int argc, char **argv)
{
	test_key_setup(RPC_ROLE_ADMIN); /* it sets directories' layouts */
	if (argc < 4) {
		fprintf(stderr, "usage: repl_bench write|read|failover META ...\n");
		return 2;
	}
	struct meta_client *mc = meta_client_new(argv[2], NULL, NULL);
	struct chunk_client *cc = chunk_client_new(mc, NULL);
	struct job j = {.cc = cc, .write = !strcmp(argv[1], "write")};
	char name[64];
	const char *env = getenv("REPL_BENCH_FILE");
	snprintf(name, sizeof(name), "%s", env && strcmp(argv[1], "write") ? env : "");
	if (!name[0])
		snprintf(name, sizeof(name), "bench.%d", (int)getpid());
	uint64_t sid = 0;
	strata_ino_t parent;
	int r = bench_parent(mc, &parent);
	if (r < 0) {
		fprintf(stderr, "repl_bench: directory for %s replicas: %s\n",
			getenv("REPL_BENCH_REPLICAS"), strerror(-r));
		return 1;
	}
	r = strcmp(argv[1], "read")
		? meta_create(mc, NULL, parent, name, 0100644, 0, 0, 0, &j.a, &sid)
		: meta_lookup(mc, parent, name, &j.a);
	if (r < 0) {
		fprintf(stderr, "repl_bench: %s: %s\n", name, strerror(-r));
		return 1;
	}
	fprintf(stderr, "file %s\n", name);
	if (!strcmp(argv[1], "failover"))
		return failover(cc, &j.a, (pid_t)atoi(argv[3]));
	if (argc < 5)
		return 2;
	j.nchunks = (uint32_t)((strtoull(argv[3], NULL, 10) << 20) / j.a.layout.chunk_size);
	if (!strcmp(argv[1], "read") && argc > 5 && !strcmp(argv[5], "tail"))
		chunk_client_set_read_policy(cc, CHUNK_READ_TAIL);
	r = run(&j, atoi(argv[4]));
	chunk_client_free(cc);
	meta_client_free(mc);
	return r;
}
