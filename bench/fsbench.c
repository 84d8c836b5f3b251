/* fsbench.c — the measuring half of bench/fs: one workload per invocation on
 * a path, one result line on stdout ("<metric> <value> <unit>"), so that the
 * script can run the same workload on strata and on the local disk and put
 * the numbers side by side.
 *
 *   fsbench seqwrite FILE BYTES      1 MiB writes, fsync at the end   -> MiB/s
 *   fsbench seqread  FILE            1 MiB reads to EOF                -> MiB/s
 *   fsbench randread FILE QD SECS    QD threads of 4 KiB preads at
 *                                    random aligned offsets            -> IOPS
 *   fsbench meta DIR FILES THREADS   create, stat, readdir, unlink of
 *                                    FILES files, THREADS threads each
 *                                    in its own subdirectory           -> ops/s x4
 *   fsbench onedir DIR FILES PROCS PHASE
 *                                    one phase of issue 15's metadata
 *                                    workload in the one directory DIR:
 *                                    create (open O_CREAT|O_EXCL + close),
 *                                    stat or unlink of FILES empty files
 *                                    split among PROCS processes, or
 *                                    readdir (one process lists DIR)   -> ops/s
 *                                    (readdir: entries/s)
 *   fsbench append FILE PREFILL N [direct]
 *                                    PREFILL bytes (1 MiB writes, may be
 *                                    0), fsync; then N appends of 1 KiB,
 *                                    each followed by fsync (direct:
 *                                    O_DIRECT writes, no fsync: each is
 *                                    one write to the disk or the
 *                                    chunkserver)                      -> us per
 *                                    append (median; p90 on stderr)
 */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024.0 * 1024.0)
#define BLOCK (1u << 20)

static double now(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "fsbench: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static uint64_t parse_size(const char *s)
{
	char *end;
	double v = strtod(s, &end);
	switch (*end) {
	case 'k':
	case 'K':
		v *= 1024;
		break;
	case 'm':
	case 'M':
		v *= MiB;
		break;
	case 'g':
	case 'G':
		v *= MiB * 1024;
		break;
	case '\0':
		break;
	default:
		die("bad size '%s'", s);
	}
	if (v < BLOCK)
		die("size %s is below 1 MiB", s);
	return (uint64_t)v;
}

/* A 1 MiB block of not-all-equal bytes (free()). */
static char *pattern_block(void)
{
	char *buf;
	if (posix_memalign((void **)&buf, 4096, BLOCK))
		die("out of memory");
	for (unsigned i = 0; i < BLOCK; i++)
		buf[i] = (char)(i * 2654435761u >> 24);
	return buf;
}

static int seqwrite(const char *path, uint64_t bytes)
{
	char *buf = pattern_block();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	double t0 = now();
	for (uint64_t done = 0; done < bytes;) {
		size_t n = bytes - done < BLOCK ? (size_t)(bytes - done) : BLOCK;
		buf[0] = (char)(done >> 20); /* not all blocks identical */
		ssize_t w = write(fd, buf, n);
		if (w <= 0)
			die("write at %llu: %s", (unsigned long long)done, strerror(errno));
		done += (uint64_t)w;
	}
	if (fsync(fd) < 0)
		die("fsync: %s", strerror(errno));
	close(fd);
	double dt = now() - t0;
	printf("seqwrite %.1f MiB/s\n", (double)bytes / MiB / dt);
	free(buf);
	return 0;
}

static int seqread(const char *path)
{
	char *buf;
	uint64_t total = 0;
	if (posix_memalign((void **)&buf, 4096, BLOCK))
		die("out of memory");
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	double t0 = now();
	for (;;) {
		ssize_t r = read(fd, buf, BLOCK);
		if (r < 0)
			die("read at %llu: %s", (unsigned long long)total, strerror(errno));
		if (r == 0)
			break;
		total += (uint64_t)r;
	}
	double dt = now() - t0;
	close(fd);
	printf("seqread %.1f MiB/s\n", (double)total / MiB / dt);
	free(buf);
	return 0;
}

struct rr {
	int fd;
	uint64_t blocks;
	double until;
	unsigned seed;
	uint64_t ops;
};

static void *rr_thread(void *arg)
{
	struct rr *a = arg;
	char buf[4096];
	uint64_t x = a->seed * 0x9E3779B97F4A7C15ull + 1;
	while (now() < a->until) {
		for (int i = 0; i < 64; i++) {
			x ^= x >> 12;
			x ^= x << 25;
			x ^= x >> 27;
			uint64_t blk = (x * 0x2545F4914F6CDD1Dull) % a->blocks;
			if (pread(a->fd, buf, sizeof(buf), (off_t)(blk * 4096)) !=
			    (ssize_t)sizeof(buf))
				die("pread at %llu: %s", (unsigned long long)blk * 4096,
				    strerror(errno));
			a->ops++;
		}
	}
	return NULL;
}

static int randread(const char *path, int qd, double secs)
{
	struct stat st;
	int fd = open(path, O_RDONLY);
	if (fd < 0 || fstat(fd, &st) < 0)
		die("open %s: %s", path, strerror(errno));
	if (st.st_size < 4096)
		die("%s is too small", path);
	pthread_t *t = calloc((size_t)qd, sizeof(*t));
	struct rr *a = calloc((size_t)qd, sizeof(*a));
	double t0 = now();
	for (int i = 0; i < qd; i++) {
		a[i] = (struct rr){.fd = fd,
				   .blocks = (uint64_t)st.st_size / 4096,
				   .until = t0 + secs,
				   .seed = (unsigned)i + 1};
		pthread_create(&t[i], NULL, rr_thread, &a[i]);
	}
	uint64_t ops = 0;
	for (int i = 0; i < qd; i++) {
		pthread_join(t[i], NULL);
		ops += a[i].ops;
	}
	double dt = now() - t0;
	close(fd);
	printf("randread4k_qd%d %.0f IOPS\n", qd, (double)ops / dt);
	free(t);
	free(a);
	return 0;
}

enum phase { P_CREATE, P_STAT, P_READDIR, P_UNLINK };
static const char *phase_name[] = {"create", "stat", "readdir", "unlink"};

/* One create (open O_CREAT|O_EXCL + close), stat or unlink of path; dies on
 * failure. */
static void file_op(const char *path, enum phase p)
{
	struct stat st;
	if (p == P_CREATE) {
		int fd = open(path, O_WRONLY | O_CREAT | O_EXCL, 0644);
		if (fd < 0)
			die("create %s: %s", path, strerror(errno));
		close(fd);
	} else if (p == P_STAT) {
		if (stat(path, &st) < 0)
			die("stat %s: %s", path, strerror(errno));
	} else if (unlink(path) < 0) {
		die("unlink %s: %s", path, strerror(errno));
	}
}

/* Lists dir once; returns its entries but . and .. */
static uint64_t list_dir(const char *dir)
{
	uint64_t n = 0;
	struct dirent *e;
	DIR *d = opendir(dir);
	if (!d)
		die("opendir %s: %s", dir, strerror(errno));
	while ((e = readdir(d)))
		n += strcmp(e->d_name, ".") && strcmp(e->d_name, "..");
	closedir(d);
	return n;
}

struct mt {
	const char *dir;
	int id, nfiles;
	enum phase phase;
	uint64_t ops;
};

static void *meta_thread(void *arg)
{
	struct mt *a = arg;
	char path[4096];
	for (int i = 0; i < a->nfiles && a->phase != P_READDIR; i++) {
		snprintf(path, sizeof(path), "%s/t%d/file-%07d", a->dir, a->id, i);
		file_op(path, a->phase);
		a->ops++;
	}
	if (a->phase == P_READDIR) {
		snprintf(path, sizeof(path), "%s/t%d", a->dir, a->id);
		a->ops = list_dir(path);
		if (a->ops != (uint64_t)a->nfiles)
			die("readdir %s: %llu entries, expected %d", path,
			    (unsigned long long)a->ops, a->nfiles);
	}
	return NULL;
}

static int meta(const char *dir, int nfiles, int nthreads)
{
	char path[4096];
	pthread_t *t = calloc((size_t)nthreads, sizeof(*t));
	struct mt *a = calloc((size_t)nthreads, sizeof(*a));
	for (int i = 0; i < nthreads; i++) {
		snprintf(path, sizeof(path), "%s/t%d", dir, i);
		if (mkdir(path, 0755) < 0 && errno != EEXIST)
			die("mkdir %s: %s", path, strerror(errno));
	}
	for (int p = P_CREATE; p <= P_UNLINK; p++) {
		double t0 = now();
		uint64_t ops = 0;
		for (int i = 0; i < nthreads; i++) {
			a[i] = (struct mt){.dir = dir,
					   .id = i,
					   .phase = (enum phase)p,
					   .nfiles = nfiles / nthreads + (i < nfiles % nthreads)};
			pthread_create(&t[i], NULL, meta_thread, &a[i]);
		}
		for (int i = 0; i < nthreads; i++) {
			pthread_join(t[i], NULL);
			ops += a[i].ops;
		}
		double dt = now() - t0;
		printf("%s %.0f ops/s\n", phase_name[p], (double)ops / dt);
		fflush(stdout);
	}
	for (int i = 0; i < nthreads; i++) {
		snprintf(path, sizeof(path), "%s/t%d", dir, i);
		rmdir(path);
	}
	free(t);
	free(a);
	return 0;
}

/* Runs phase p on files [0, nfiles) split into nprocs forked processes, each
 * a contiguous range; dies unless every process succeeded. */
static void onedir_fork(const char *dir, enum phase p, int nfiles, int nprocs)
{
	pid_t *pid = calloc((size_t)nprocs, sizeof(*pid));
	if (!pid)
		die("out of memory");
	fflush(NULL); /* the children exit with _exit: nothing buffered twice */
	for (int k = 0; k < nprocs; k++) {
		int lo = (int)((int64_t)nfiles * k / nprocs);
		int hi = (int)((int64_t)nfiles * (k + 1) / nprocs);
		pid[k] = fork();
		if (pid[k] < 0)
			die("fork: %s", strerror(errno));
		if (pid[k] == 0) {
			char path[4096];
			for (int i = lo; i < hi; i++) {
				snprintf(path, sizeof(path), "%s/f%07d", dir, i);
				file_op(path, p);
			}
			_exit(0);
		}
	}
	int failed = 0;
	for (int k = 0; k < nprocs; k++) {
		int status;
		if (waitpid(pid[k], &status, 0) < 0)
			die("waitpid: %s", strerror(errno));
		failed += !WIFEXITED(status) || WEXITSTATUS(status) != 0;
	}
	free(pid);
	if (failed)
		die("%s: %d of %d processes failed", phase_name[p], failed, nprocs);
}

/* Issue 15's metadata workload: every file in one directory, as users put
 * them, so that the kernel's per-directory lock and the filesystem's
 * per-directory work are in the figure (meta above gives each thread its own
 * directory). Processes, not threads, as separate programs are: each has its
 * own file table and credentials. One phase per invocation, so that the
 * script can drop the caches between them and the stat and readdir are
 * cold. */
static int onedir(const char *dir, int nfiles, int nprocs, const char *name)
{
	int p = P_CREATE;
	while (p <= P_UNLINK && strcmp(name, phase_name[p]))
		p++;
	if (p > P_UNLINK)
		die("unknown phase '%s' (create, stat, readdir, unlink)", name);
	double t0 = now();
	if (p == P_READDIR) {
		uint64_t n = list_dir(dir);
		if (n != (uint64_t)nfiles)
			die("readdir %s: %llu entries, expected %d", dir, (unsigned long long)n,
			    nfiles);
	} else {
		onedir_fork(dir, (enum phase)p, nfiles, nprocs);
	}
	double dt = now() - t0;
	printf("%s %.0f %s\n", name, (double)nfiles / dt, p == P_READDIR ? "entries/s" : "ops/s");
	return 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;
	return x < y ? -1 : x > y;
}

/* Writes all of buf[0..n) at off. */
static void pwrite_all(int fd, const char *buf, size_t n, uint64_t off)
{
	while (n > 0) {
		ssize_t w = pwrite(fd, buf, n, (off_t)off);
		if (w <= 0)
			die("write at %llu: %s", (unsigned long long)off, strerror(errno));
		buf += w, n -= (size_t)w, off += (uint64_t)w;
	}
}

/* An acknowledged log record: 1 KiB at the end of a file that already holds
 * prefill bytes, made durable (fsync) before the next one. */
static int append(const char *path, uint64_t prefill, int count, bool direct)
{
	char *buf = pattern_block();
	int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | (direct ? O_DIRECT : 0), 0644);
	if (fd < 0)
		die("open %s: %s", path, strerror(errno));
	for (uint64_t done = 0; done < prefill; done += BLOCK)
		pwrite_all(fd, buf, prefill - done < BLOCK ? (size_t)(prefill - done) : BLOCK,
			   done);
	if (fsync(fd) < 0)
		die("fsync: %s", strerror(errno));
	double *t = malloc(sizeof(double) * (size_t)count);
	if (!t)
		die("out of memory");
	for (int i = 0; i < count; i++) {
		double t0 = now();
		pwrite_all(fd, buf + (i % 64) * 4096, 1024, prefill + (uint64_t)i * 1024);
		if (!direct && fsync(fd) < 0)
			die("fsync: %s", strerror(errno));
		t[i] = (now() - t0) * 1e6;
	}
	close(fd);
	qsort(t, (size_t)count, sizeof(double), cmp_double);
	fprintf(stderr, "append after %llu MiB: median %.0f us, p90 %.0f us, max %.0f us\n",
		(unsigned long long)(prefill >> 20), t[count / 2], t[count * 9 / 10], t[count - 1]);
	printf("append %.1f us\n", t[count / 2]);
	free(t);
	free(buf);
	return 0;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (argc == 4 && !strcmp(argv[1], "seqwrite"))
		return seqwrite(argv[2], parse_size(argv[3]));
	if (argc == 3 && !strcmp(argv[1], "seqread"))
		return seqread(argv[2]);
	if (argc == 5 && !strcmp(argv[1], "randread"))
		return randread(argv[2], atoi(argv[3]) > 0 ? atoi(argv[3]) : 32, atof(argv[4]));
	if (argc == 5 && !strcmp(argv[1], "meta"))
		return meta(argv[2], atoi(argv[3]), atoi(argv[4]) > 0 ? atoi(argv[4]) : 2);
	if (argc == 6 && !strcmp(argv[1], "onedir"))
		return onedir(argv[2], atoi(argv[3]) > 0 ? atoi(argv[3]) : 20000,
			      atoi(argv[4]) > 0 ? atoi(argv[4]) : 2, argv[5]);
	if ((argc == 5 || (argc == 6 && !strcmp(argv[5], "direct"))) && !strcmp(argv[1], "append"))
		return append(argv[2], atof(argv[3]) > 0 ? parse_size(argv[3]) : 0,
			      atoi(argv[4]) > 0 ? atoi(argv[4]) : 100, argc == 6);
	fprintf(stderr, "usage: fsbench seqwrite FILE BYTES | seqread FILE |\n"
			"       randread FILE QD SECONDS | meta DIR FILES THREADS |\n"
			"       onedir DIR FILES PROCS create|stat|readdir|unlink |\n"
			"       append FILE PREFILL COUNT [direct]\n");
	return 2;
}
