/* fsx.c — randomized file operations against a file and an in-memory model.
 *
 *   fsx [-n OPS] [-s SEED] [-l MAXLEN] [-k] [-v] DIR
 *
 * A long seeded sequence of writes (small and multi-chunk, at random offsets
 * including past the end: holes), truncates (up and down), reads (compared
 * byte for byte with the model), renames of the file while it stays open,
 * close/reopen, fsync and fstat size checks, on DIR/fsx.<pid>. A quarter of
 * the reads, writes and truncates go through a second descriptor of the same
 * file, so that the client's caches must stay coherent between them. The first
 * difference prints the seed, the offending range and the last operations,
 * and exits 1. The same seed replays the same sequence. The file is removed at
 * the end unless -k (keep it: the replication test compares its chunks across
 * replicas afterwards; removed, they would be collected meanwhile).
 *
 * Chunks are 1 MiB in strata: sizes and offsets are biased towards chunk
 * boundaries, where client and chunkserver code splits requests. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#define CHUNK (1u << 20)
#define LOG_KEEP 64
#define STRATA_MINU(a, b) ((a) < (b) ? (a) : (b))

static uint64_t g_rng;
static uint8_t *g_model; /* expected content, MAXLEN bytes */
static uint64_t g_size;	 /* expected size */
static uint64_t g_maxlen = 8ull * CHUNK;
static uint64_t g_seed;
static long g_op;
static bool g_verbose;
static bool g_keep; /* -k: leave the file in place at the end */
static char g_path[2][PATH_MAX];
static int g_cur; /* which of the two names the file has now */
static int g_fd = -1;
static int g_fd2 = -1; /* a second descriptor on the same file */
static uint8_t *g_buf;

static char g_log[LOG_KEEP][160];

static uint64_t rnd(void)
{
	/* xorshift64* */
	g_rng ^= g_rng >> 12;
	g_rng ^= g_rng << 25;
	g_rng ^= g_rng >> 27;
	return g_rng * 0x2545F4914F6CDD1Dull;
}

static uint64_t rnd_below(uint64_t n)
{
	return n ? rnd() % n : 0;
}

static void logop(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void logop(const char *fmt, ...)
{
	va_list ap;
	char *l = g_log[g_op % LOG_KEEP];
	int n = snprintf(l, sizeof(g_log[0]), "%6ld ", g_op);
	va_start(ap, fmt);
	vsnprintf(l + n, sizeof(g_log[0]) - (size_t)n, fmt, ap);
	va_end(ap);
	if (g_verbose)
		printf("%s\n", l);
}

static void __attribute__((noreturn, format(printf, 1, 2))) die(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "fsx: FAIL at op %ld (seed %" PRIu64 "): ", g_op, g_seed);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fprintf(stderr, "\nlast operations (oldest first):\n");
	long first = g_op - LOG_KEEP + 1;
	if (first < 1)
		first = 1;
	for (long i = first; i <= g_op; i++)
		fprintf(stderr, "  %s\n", g_log[i % LOG_KEEP]);
	fprintf(stderr, "replay: fsx -s %" PRIu64 " -n %ld -l %" PRIu64 " DIR\n", g_seed, g_op,
		g_maxlen);
	exit(1);
}

/* An offset: uniform, or near a chunk boundary, or near the end. */
static uint64_t pick_off(uint64_t limit)
{
	uint64_t r = rnd_below(10);
	uint64_t off;
	if (limit == 0)
		return 0;
	if (r < 4) {
		off = rnd_below(limit);
	} else if (r < 8) {
		uint64_t b = rnd_below(limit / CHUNK + 1) * CHUNK;
		off = b + rnd_below(64) - 32;
		if ((int64_t)off < 0)
			off = 0;
	} else {
		off = g_size ? g_size - STRATA_MINU(g_size, rnd_below(4096)) : 0;
	}
	return off < limit ? off : limit - 1;
}
static uint64_t pick_len(uint64_t maxlen)
{
	uint64_t r = rnd_below(10), len;
	if (r < 5)
		len = 1 + rnd_below(4096);
	else if (r < 8)
		len = 1 + rnd_below(256 * 1024);
	else
		len = 1 + rnd_below(3 * CHUNK);
	return STRATA_MINU(len, maxlen);
}

static void do_open(int flags)
{
	g_fd = open(g_path[g_cur], O_RDWR | flags, 0644);
	if (g_fd < 0)
		die("open %s: %s", g_path[g_cur], strerror(errno));
}

/* The descriptor for the next operation: usually the first, sometimes the second. */
static int pick_fd(const char **which)
{
	if (rnd_below(4) == 0) {
		*which = " [fd2]";
		return g_fd2;
	}
	*which = "";
	return g_fd;
}

static void check_size(const char *when)
{
	struct stat st;
	if (fstat(g_fd, &st) < 0)
		die("fstat: %s", strerror(errno));
	if ((uint64_t)st.st_size != g_size)
		die("size %s: expected %" PRIu64 ", got %lld", when, g_size, (long long)st.st_size);
}

static void compare_fd(int fd, uint64_t off, uint64_t len, const char *what)
{
	uint64_t got = 0;
	while (got < len) {
		ssize_t r = pread(fd, g_buf + got, len - got, (off_t)(off + got));
		if (r < 0)
			die("%s: pread(%" PRIu64 " at %" PRIu64 "): %s", what, len - got, off + got,
			    strerror(errno));
		if (r == 0)
			break;
		got += (uint64_t)r;
	}
	uint64_t want = off >= g_size ? 0 : STRATA_MINU(len, g_size - off);
	if (got != want)
		die("%s: read %" PRIu64 " at %" PRIu64 ": expected %" PRIu64 " bytes, got %" PRIu64,
		    what, len, off, want, got);
	for (uint64_t i = 0; i < got; i++) {
		if (g_buf[i] != g_model[off + i]) {
			uint64_t bad = off + i, end = bad;
			while (end < off + got && g_buf[end - off] != g_model[end])
				end++;
			die("%s: content differs at offset %" PRIu64 " (chunk %" PRIu64 " +%" PRIu64
			    ") for %" PRIu64 "+ bytes: expected 0x%02x, got 0x%02x",
			    what, bad, bad / CHUNK, bad % CHUNK, end - bad, g_model[bad], g_buf[i]);
		}
	}
}

static void compare(uint64_t off, uint64_t len, const char *what)
{
	compare_fd(g_fd, off, len, what);
}

static void op_write(void)
{
	uint64_t off = pick_off(g_maxlen);
	uint64_t len = pick_len(g_maxlen - off);
	uint8_t tag = (uint8_t)rnd();
	for (uint64_t i = 0; i < len; i++)
		g_buf[i] = (uint8_t)(tag + (off + i) * 131 + ((off + i) >> 9));
	const char *which;
	int fd = pick_fd(&which);
	logop("write  %8" PRIu64 " .. %8" PRIu64 " (%" PRIu64 " bytes)%s%s", off, off + len, len,
	      off > g_size ? " past EOF" : "", which);
	uint64_t done = 0;
	while (done < len) {
		ssize_t w = pwrite(fd, g_buf + done, len - done, (off_t)(off + done));
		if (w <= 0)
			die("pwrite(%" PRIu64 " at %" PRIu64 "): %s", len - done, off + done,
			    w < 0 ? strerror(errno) : "returned 0");
		done += (uint64_t)w;
	}
	if (off > g_size)
		memset(g_model + g_size, 0, off - g_size);
	memcpy(g_model + off, g_buf, len);
	if (off + len > g_size)
		g_size = off + len;
}

static void op_truncate(void)
{
	uint64_t nsize;
	if (rnd_below(2) && g_size)
		nsize = rnd_below(g_size); /* down */
	else
		nsize = pick_off(g_maxlen); /* anywhere, often up */
	if (rnd_below(4) == 0)
		nsize = nsize / CHUNK * CHUNK; /* exactly on a boundary */
	const char *which;
	int fd = pick_fd(&which);
	logop("trunc  %8" PRIu64 " -> %8" PRIu64 "%s", g_size, nsize, which);
	if (ftruncate(fd, (off_t)nsize) < 0)
		die("ftruncate(%" PRIu64 "): %s", nsize, strerror(errno));
	if (nsize > g_size)
		memset(g_model + g_size, 0, nsize - g_size);
	g_size = nsize;
}

static void op_read(void)
{
	uint64_t off = pick_off(g_size + 4096);
	uint64_t len = pick_len(g_maxlen);
	const char *which;
	int fd = pick_fd(&which);
	logop("read   %8" PRIu64 " .. %8" PRIu64 " (%" PRIu64 " bytes)%s", off, off + len, len,
	      which);
	compare_fd(fd, off, len, "read");
}

static void op_rename(void)
{
	int next = 1 - g_cur;
	logop("rename %s -> %s", strrchr(g_path[g_cur], '/') + 1, strrchr(g_path[next], '/') + 1);
	if (rename(g_path[g_cur], g_path[next]) < 0)
		die("rename: %s", strerror(errno));
	g_cur = next;
}

static void op_reopen(void)
{
	if (rnd_below(2)) {
		logop("close+reopen [fd2]");
		if (close(g_fd2) < 0)
			die("close: %s", strerror(errno));
		g_fd2 = open(g_path[g_cur], O_RDWR);
		if (g_fd2 < 0)
			die("open %s: %s", g_path[g_cur], strerror(errno));
		return;
	}
	logop("close+reopen");
	if (close(g_fd) < 0)
		die("close: %s", strerror(errno));
	do_open(0);
}

static void op_fsync(void)
{
	logop("fsync");
	if (fsync(g_fd) < 0)
		die("fsync: %s", strerror(errno));
}

static void op_fullcheck(void)
{
	logop("check whole file (%" PRIu64 " bytes)", g_size);
	check_size("at a full check");
	compare(0, g_size + 1, "full check");
}

static void usage(void)
{
	fprintf(stderr, "Usage: fsx [-n OPS] [-s SEED] [-l MAXLEN] [-k] [-v] DIR\n");
	exit(2);
}

int main(int argc, char **argv)
{
	long nops = 3000;
	int o;

	g_seed = (uint64_t)time(NULL) ^ ((uint64_t)getpid() << 20);
	while ((o = getopt(argc, argv, "n:s:l:kvh")) != -1) {
		switch (o) {
		case 'n':
			nops = atol(optarg);
			break;
		case 's':
			g_seed = strtoull(optarg, NULL, 0);
			break;
		case 'l':
			g_maxlen = strtoull(optarg, NULL, 0);
			break;
		case 'k':
			g_keep = true;
			break;
		case 'v':
			g_verbose = true;
			break;
		default:
			usage();
		}
	}
	if (optind != argc - 1 || nops <= 0 || g_maxlen < 4096 || g_maxlen > (1ull << 32))
		usage();
	setvbuf(stdout, NULL, _IOLBF, 0);
	g_rng = g_seed ? g_seed * 0x9E3779B97F4A7C15ull : 1;
	g_model = calloc(1, g_maxlen + 4096);
	g_buf = malloc(g_maxlen + 8192);
	if (!g_model || !g_buf) {
		fprintf(stderr, "fsx: out of memory\n");
		return 1;
	}
	snprintf(g_path[0], sizeof(g_path[0]), "%s/fsx.%d.a", argv[optind], (int)getpid());
	snprintf(g_path[1], sizeof(g_path[1]), "%s/fsx.%d.b", argv[optind], (int)getpid());
	printf("fsx: seed %" PRIu64 ", %ld ops, max length %" PRIu64 ", file %s\n", g_seed, nops,
	       g_maxlen, g_path[0]);
	do_open(O_CREAT | O_TRUNC | O_EXCL);
	g_fd2 = open(g_path[g_cur], O_RDWR);
	if (g_fd2 < 0)
		die("open %s: %s", g_path[g_cur], strerror(errno));

	for (g_op = 1; g_op <= nops; g_op++) {
		uint64_t r = rnd_below(100);
		if (r < 35)
			op_write();
		else if (r < 47)
			op_truncate();
		else if (r < 85)
			op_read();
		else if (r < 90)
			op_rename();
		else if (r < 95)
			op_reopen();
		else if (r < 98)
			op_fsync();
		else
			op_fullcheck();
		check_size("after the operation");
		if (g_op % 1000 == 0)
			printf("fsx: %ld ops, size %" PRIu64 "\n", g_op, g_size);
	}
	g_op = nops + 1;
	op_reopen();
	op_fullcheck();
	close(g_fd);
	close(g_fd2);
	if (!g_keep)
		unlink(g_path[g_cur]);
	printf("fsx: passed %ld ops (seed %" PRIu64 ")\n", nops, g_seed);
	free(g_model);
	free(g_buf);
	return 0;
}
