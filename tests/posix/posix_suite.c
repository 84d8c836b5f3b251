/* posix_suite.c — strata's own POSIX conformance suite.
 *
 *   posix_suite DIR [GROUP...]
 *
 * Runs every check in a fresh directory DIR/posix.<pid> (removed at the end
 * on success) and prints each check's name. The first failure prints what was
 * expected and what came back and exits 1; 0 means every check passed. The
 * same binary runs against the strata mount and against a plain directory on
 * the local filesystem (ext4), which proves that the suite itself expects what
 * Linux does. Groups can be picked by name (e.g. `posix_suite /mnt rename`).
 *
 * Must run as root: it chowns and drops to uid/gid 65534 in a forked child to
 * check permission enforcement (DIR must be traversable by that uid).
 *
 * Environment: POSIX_READDIR_N (default 5000) entries for the readdir check. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <inttypes.h>
#include <limits.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/statvfs.h>
#include <sys/sysmacros.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>

#define MiB (1024 * 1024)
#define CHUNK MiB

static char g_root[PATH_MAX]; /* DIR/posix.<pid> */
static const char *g_check = "setup";
static int g_nchecks;

/* ---- reporting ---------------------------------------------------------- */
static void check(const char *name)
{
	g_check = name;
	g_nchecks++;
	printf("  %s\n", name);
	fflush(stdout);
}

static __attribute__((noreturn, format(printf, 1, 2))) void fail(const char *fmt, ...)
{
	va_list ap;
	fflush(stdout);
	fprintf(stderr, "FAIL %s: ", g_check);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static const char *errname(int e)
{
	static char buf[64];
	switch (e) {
#define E(x)                                                                                       \
	case x:                                                                                    \
		return #x
		E(EPERM);
		E(ENOENT);
		E(EIO);
		E(EBADF);
		E(EACCES);
		E(EBUSY);
		E(EEXIST);
		E(EXDEV);
		E(ENOTDIR);
		E(EISDIR);
		E(EINVAL);
		E(ENOSPC);
		E(EROFS);
		E(EMLINK);
		E(ERANGE);
		E(ENAMETOOLONG);
		E(ENOSYS);
		E(ENOTEMPTY);
		E(ELOOP);
		E(ENODATA);
		E(ENOTSUP);
		E(ETIMEDOUT);
		E(ENOTCONN);
		E(EFBIG);
		E(EOVERFLOW);
		E(E2BIG);
#undef E
	case 0:
		return "success";
	}
	snprintf(buf, sizeof(buf), "errno %d", e);
	return buf;
}

/* expr must not fail (>= 0). */
#define OK(expr)                                                                                   \
	({                                                                                         \
		errno = 0;                                                                         \
		long _r = (long)(expr);                                                            \
		if (_r < 0)                                                                        \
			fail("%s: expected success, got %s (%s)", #expr, errname(errno),           \
			     strerror(errno));                                                     \
		_r;                                                                                \
	})
/* expr must fail with errno e. */
#define ERR(expr, e)                                                                               \
	do {                                                                                       \
		errno = 0;                                                                         \
		long _r = (long)(expr);                                                            \
		if (_r >= 0)                                                                       \
			fail("%s: expected %s, got success (%ld)", #expr, errname(e), _r);         \
		if (errno != (e))                                                                  \
			fail("%s: expected %s, got %s", #expr, errname(e), errname(errno));        \
	} while (0)
/* expr must fail with errno e1 or e2 (where POSIX allows either). */
#define ERR2(expr, e1, e2)                                                                         \
	do {                                                                                       \
		errno = 0;                                                                         \
		long _r = (long)(expr);                                                            \
		if (_r >= 0)                                                                       \
			fail("%s: expected %s, got success (%ld)", #expr, errname(e1), _r);        \
		if (errno != (e1) && errno != (e2))                                                \
			fail("%s: expected %s or %s, got %s", #expr, errname(e1), errname(e2),     \
			     errname(errno));                                                      \
	} while (0)
#define EQ(a, b)                                                                                   \
	do {                                                                                       \
		long long _a = (long long)(a), _b = (long long)(b);                                \
		if (_a != _b)                                                                      \
			fail("%s == %s: expected %lld, got %lld", #a, #b, _b, _a);                 \
	} while (0)
#define TRUE(c)                                                                                    \
	do {                                                                                       \
		if (!(c))                                                                          \
			fail("expected %s", #c);                                                   \
	} while (0)

/* ---- helpers ------------------------------------------------------------ */
static char *P(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* A path under the work dir; a ring of buffers so several can be live. */
static char *P(const char *fmt, ...)
{
	static char bufs[8][PATH_MAX];
	static int next;
	char rel[PATH_MAX];
	char *b = bufs[next++ % 8];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	snprintf(b, PATH_MAX, "%s/%s", g_root, rel);
	return b;
}

static uint8_t pat(uint32_t seed, uint64_t off)
{
	uint64_t x = (off + 1) * 0x9E3779B97F4A7C15ull ^ ((uint64_t)seed << 32);
	x ^= x >> 29;
	return (uint8_t)(x ^ (x >> 17));
}

static void fill(uint8_t *b, size_t n, uint32_t seed, uint64_t off)
{
	for (size_t i = 0; i < n; i++)
		b[i] = pat(seed, off + i);
}

static void pwrite_all(int fd, const void *buf, size_t n, off_t off)
{
	const uint8_t *p = buf;
	while (n) {
		ssize_t w = pwrite(fd, p, n, off);
		if (w < 0)
			fail("pwrite(%zu bytes at %lld): %s", n, (long long)off, errname(errno));
		if (w == 0)
			fail("pwrite returned 0");
		p += w;
		n -= (size_t)w;
		off += w;
	}
}

/* Reads up to n bytes at off, looping over short reads; returns bytes read. */
static size_t pread_all(int fd, void *buf, size_t n, off_t off)
{
	uint8_t *p = buf;
	size_t got = 0;
	while (got < n) {
		ssize_t r = pread(fd, p + got, n - got, off + (off_t)got);
		if (r < 0)
			fail("pread(%zu bytes at %lld): %s", n - got, (long long)(off + (off_t)got),
			     errname(errno));
		if (r == 0)
			break;
		got += (size_t)r;
	}
	return got;
}

/* Checks bytes [off, off+n) of fd against seed's pattern (seed 0 = zeros). */
static void expect_content(int fd, off_t off, size_t n, uint32_t seed, const char *what)
{
	uint8_t *b = malloc(n ? n : 1);
	if (!b)
		fail("out of memory");
	size_t got = pread_all(fd, b, n, off);
	if (got != n)
		fail("%s: read %zu bytes at %lld: expected %zu, got %zu", what, n, (long long)off,
		     n, got);
	for (size_t i = 0; i < n; i++) {
		uint8_t want = seed ? pat(seed, (uint64_t)off + i) : 0;
		if (b[i] != want)
			fail("%s: byte at offset %lld: expected 0x%02x, got 0x%02x", what,
			     (long long)off + (long long)i, want, b[i]);
	}
	free(b);
}

static void write_file(const char *path, const char *s)
{
	int fd = (int)OK(open(path, O_WRONLY | O_CREAT | O_TRUNC, 0644));
	pwrite_all(fd, s, strlen(s), 0);
	OK(close(fd));
}

static void expect_file(const char *path, const char *s)
{
	char buf[4096];
	int fd = (int)OK(open(path, O_RDONLY));
	size_t n = pread_all(fd, buf, sizeof(buf) - 1, 0);
	buf[n] = '\0';
	OK(close(fd));
	if (strcmp(buf, s) != 0)
		fail("content of %s: expected '%s', got '%s'", path, s, buf);
}

static struct stat st_of(const char *path)
{
	struct stat st;
	OK(lstat(path, &st));
	return st;
}

static int64_t ts_ns(struct timespec t)
{
	return (int64_t)t.tv_sec * 1000000000 + t.tv_nsec;
}

static int64_t now_ns(void)
{
	struct timespec t;
	clock_gettime(CLOCK_REALTIME, &t);
	return ts_ns(t);
}

/* Removes a tree (best effort, for cleanup). */
static void rm_rf(const char *path)
{
	struct stat st;
	if (lstat(path, &st) < 0)
		return;
	if (S_ISDIR(st.st_mode)) {
		DIR *d = opendir(path);
		struct dirent *e;
		if (d) {
			while ((e = readdir(d))) {
				char sub[PATH_MAX];
				if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
					continue;
				snprintf(sub, sizeof(sub), "%s/%s", path, e->d_name);
				rm_rf(sub);
			}
			closedir(d);
		}
		rmdir(path);
	} else {
		unlink(path);
	}
}

/* Runs fn in a child with uid/gid 65534; fails if the child fails. */
static void as_nobody(void (*fn)(void))
{
	pid_t pid = fork();
	int status;
	if (pid < 0)
		fail("fork: %s", strerror(errno));
	if (pid == 0) {
		if (setgroups(0, NULL) < 0 || setgid(65534) < 0 || setuid(65534) < 0) {
			fprintf(stderr, "FAIL %s: cannot drop to uid 65534: %s\n", g_check,
				strerror(errno));
			_exit(1);
		}
		fn();
		fflush(stdout);
		_exit(0);
	}
	if (waitpid(pid, &status, 0) < 0)
		fail("waitpid: %s", strerror(errno));
	if (!WIFEXITED(status) || WEXITSTATUS(status) != 0)
		exit(1); /* the child printed the failure */
}

/* ---- groups ------------------------------------------------------------- */
static void t_open(void)
{
	int fd;
	struct stat st;

	check("open: O_CREAT|O_EXCL creates a new file");
	fd = (int)OK(open(P("o1"), O_RDWR | O_CREAT | O_EXCL, 0640));
	st = st_of(P("o1"));
	TRUE(S_ISREG(st.st_mode));
	EQ(st.st_mode & 07777, 0640);
	EQ(st.st_size, 0);
	EQ(st.st_nlink, 1);
	OK(close(fd));

	check("open: O_CREAT|O_EXCL on an existing name is EEXIST");
	ERR(open(P("o1"), O_RDWR | O_CREAT | O_EXCL, 0644), EEXIST);
	OK(mkdir(P("odir"), 0755));
	ERR(open(P("odir"), O_RDWR | O_CREAT | O_EXCL, 0644), EEXIST);

	check("open: O_CREAT without O_EXCL opens an existing file, keeps its data");
	write_file(P("o2"), "hello");
	fd = (int)OK(open(P("o2"), O_RDWR | O_CREAT, 0600));
	OK(close(fd));
	expect_file(P("o2"), "hello");
	EQ(st_of(P("o2")).st_mode & 07777, 0644);

	check("open: missing file without O_CREAT is ENOENT");
	ERR(open(P("missing"), O_RDONLY), ENOENT);
	ERR(open(P("nodir/x"), O_RDWR | O_CREAT, 0644), ENOENT);

	check("open: O_TRUNC empties the file");
	fd = (int)OK(open(P("o2"), O_WRONLY | O_TRUNC));
	OK(fstat(fd, &st));
	EQ(st.st_size, 0);
	OK(close(fd));
	EQ(st_of(P("o2")).st_size, 0);

	check("open: O_APPEND writes at the end");
	write_file(P("o3"), "abc");
	fd = (int)OK(open(P("o3"), O_WRONLY | O_APPEND));
	OK(write(fd, "def", 3));
	OK(lseek(fd, 0, SEEK_SET));
	OK(write(fd, "gh", 2));
	OK(close(fd));
	expect_file(P("o3"), "abcdefgh");

	check("open: a directory for writing is EISDIR");
	ERR(open(P("odir"), O_WRONLY), EISDIR);
	ERR(open(P("odir"), O_RDWR), EISDIR);
	fd = (int)OK(open(P("odir"), O_RDONLY | O_DIRECTORY));
	OK(close(fd));

	check("open: O_DIRECTORY on a file, or a file as a directory, is ENOTDIR");
	ERR(open(P("o3"), O_RDONLY | O_DIRECTORY), ENOTDIR);
	ERR(open(P("o3/x"), O_RDONLY), ENOTDIR);
	ERR(open(P("o3/x"), O_RDWR | O_CREAT, 0644), ENOTDIR);

	check("open: read-only fd refuses writes (EBADF), write-only refuses reads");
	fd = (int)OK(open(P("o3"), O_RDONLY));
	ERR(write(fd, "x", 1), EBADF);
	OK(close(fd));
	fd = (int)OK(open(P("o3"), O_WRONLY));
	char c;
	ERR(read(fd, &c, 1), EBADF);
	OK(close(fd));

	check("creat: mode bits are honoured (umask 0)");
	fd = (int)OK(open(P("o4"), O_WRONLY | O_CREAT, 0751));
	OK(close(fd));
	EQ(st_of(P("o4")).st_mode & 07777, 0751);
}

static void t_rw(void)
{
	char buf[256];
	int fd;
	struct stat st;

	check("write/read: small write reads back, file offset advances");
	fd = (int)OK(open(P("rw1"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	EQ(OK(write(fd, "0123456789", 10)), 10);
	EQ(OK(lseek(fd, 0, SEEK_CUR)), 10);
	OK(lseek(fd, 2, SEEK_SET));
	EQ(OK(read(fd, buf, 4)), 4);
	TRUE(memcmp(buf, "2345", 4) == 0);
	EQ(OK(read(fd, buf, sizeof(buf))), 4);
	TRUE(memcmp(buf, "6789", 4) == 0);
	check("read: at and past EOF returns 0");
	EQ(OK(read(fd, buf, sizeof(buf))), 0);
	EQ(OK(pread(fd, buf, 10, 1000)), 0);
	check("pread: short read at the end of the file");
	EQ(OK(pread(fd, buf, 100, 7)), 3);
	check("pwrite: does not move the file offset");
	OK(lseek(fd, 1, SEEK_SET));
	OK(pwrite(fd, "AB", 2, 4));
	EQ(OK(lseek(fd, 0, SEEK_CUR)), 1);
	EQ(OK(pread(fd, buf, 10, 0)), 10);
	TRUE(memcmp(buf, "0123AB6789", 10) == 0);
	check("lseek: SEEK_END");
	EQ(OK(lseek(fd, 0, SEEK_END)), 10);
	ERR(lseek(fd, -20, SEEK_SET), EINVAL);
	OK(close(fd));

	check("write: across chunk boundaries (3 MiB at 1 MiB - 1000)");
	size_t n = 3 * MiB;
	off_t off = CHUNK - 1000;
	uint8_t *big = malloc(n);
	if (!big)
		fail("out of memory");
	fill(big, n, 7, (uint64_t)off);
	fd = (int)OK(open(P("rw2"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(fd, big, n, off);
	OK(fstat(fd, &st));
	EQ(st.st_size, off + (off_t)n);
	check("read: hole before the first write reads as zeros");
	expect_content(fd, 0, (size_t)off, 0, "hole");
	check("read: ranges straddling chunk boundaries");
	expect_content(fd, off, n, 7, "whole range");
	expect_content(fd, CHUNK - 1, 2, 7, "1 MiB boundary");
	expect_content(fd, 2 * CHUNK - 4096, 8192, 7, "2 MiB boundary");
	expect_content(fd, 3 * CHUNK - 1, 1, 7, "last byte of chunk 2");
	expect_content(fd, 3 * CHUNK, 1, 7, "first byte of chunk 3");
	check("read: from a fresh open (no client cache)");
	OK(close(fd));
	fd = (int)OK(open(P("rw2"), O_RDONLY));
	expect_content(fd, off, n, 7, "reopened");
	OK(close(fd));

	check("write: overwrite in the middle of chunks keeps the rest");
	fd = (int)OK(open(P("rw2"), O_RDWR));
	fill(big, 10000, 8, (uint64_t)(2 * CHUNK - 5000));
	pwrite_all(fd, big, 10000, 2 * CHUNK - 5000);
	expect_content(fd, off, (size_t)(2 * CHUNK - 5000 - off), 7, "before overwrite");
	expect_content(fd, 2 * CHUNK - 5000, 10000, 8, "overwrite");
	expect_content(fd, 2 * CHUNK + 5000, (size_t)(off + (off_t)n - (2 * CHUNK + 5000)), 7,
		       "after overwrite");
	OK(close(fd));

	check("write: sparse file with holes spanning whole chunks");
	fd = (int)OK(open(P("rw3"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	fill(big, 100, 9, 5 * CHUNK + 123);
	pwrite_all(fd, big, 100, 5 * CHUNK + 123);
	fill(big, 10, 9, 100);
	pwrite_all(fd, big, 10, 100);
	OK(fstat(fd, &st));
	EQ(st.st_size, 5 * CHUNK + 223);
	expect_content(fd, 0, 100, 0, "hole at start");
	expect_content(fd, 100, 10, 9, "first write");
	expect_content(fd, 110, (size_t)(5 * CHUNK + 13), 0, "hole of 5 chunks");
	expect_content(fd, 5 * CHUNK + 123, 100, 9, "tail write");
	EQ(OK(pread(fd, big, 1000, 5 * CHUNK + 223)), 0);
	OK(close(fd));
	TRUE(st_of(P("rw3")).st_size == 5 * CHUNK + 223);

	check("write: size is visible to stat while the file is open");
	fd = (int)OK(open(P("rw4"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(fd, "xyz", 3, 4000);
	EQ(st_of(P("rw4")).st_size, 4003);
	OK(close(fd));

	check("write: two descriptors see each other's writes");
	int a = (int)OK(open(P("rw5"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	int b = (int)OK(open(P("rw5"), O_RDWR));
	pwrite_all(a, "first", 5, 0);
	EQ(OK(pread(b, buf, 10, 0)), 5);
	TRUE(memcmp(buf, "first", 5) == 0);
	pwrite_all(b, "SE", 2, 0);
	EQ(OK(pread(a, buf, 10, 0)), 5);
	TRUE(memcmp(buf, "SErst", 5) == 0);
	OK(close(a));
	OK(close(b));
	free(big);
}

static void t_truncate(void)
{
	uint8_t *big = malloc(3 * MiB);
	int fd;
	struct stat st;

	if (!big)
		fail("out of memory");
	fill(big, 3 * MiB, 11, 0);
	fd = (int)OK(open(P("tr1"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(fd, big, 3 * MiB, 0);

	check("ftruncate: down to 1.5 MiB");
	OK(ftruncate(fd, CHUNK + CHUNK / 2));
	OK(fstat(fd, &st));
	EQ(st.st_size, CHUNK + CHUNK / 2);
	expect_content(fd, 0, CHUNK + CHUNK / 2, 11, "kept part");
	EQ(OK(pread(fd, big, 100, CHUNK + CHUNK / 2)), 0);

	check("ftruncate: up to 4 MiB reads zeros past the old end (no stale bytes)");
	OK(ftruncate(fd, 4 * CHUNK));
	OK(fstat(fd, &st));
	EQ(st.st_size, 4 * CHUNK);
	expect_content(fd, 0, CHUNK + CHUNK / 2, 11, "kept part");
	expect_content(fd, CHUNK + CHUNK / 2, 4 * CHUNK - (CHUNK + CHUNK / 2), 0, "extension");

	check("truncate: to 0 and write again");
	OK(truncate(P("tr1"), 0));
	EQ(st_of(P("tr1")).st_size, 0);
	pwrite_all(fd, "abc", 3, 10);
	expect_content(fd, 0, 10, 0, "hole after truncate to 0");
	OK(close(fd));

	check("truncate: inside a chunk, then extend: the cut tail is zero");
	fd = (int)OK(open(P("tr2"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	fill(big, 100000, 12, 0);
	pwrite_all(fd, big, 100000, 0);
	OK(ftruncate(fd, 5000));
	pwrite_all(fd, "Z", 1, 99999);
	expect_content(fd, 0, 5000, 12, "kept");
	expect_content(fd, 5000, 94999, 0, "re-extended");
	OK(close(fd));
	fd = (int)OK(open(P("tr2"), O_RDONLY));
	expect_content(fd, 5000, 94999, 0, "re-extended, reopened");
	OK(close(fd));

	check("truncate: a directory is EISDIR, a missing file ENOENT, negative EINVAL");
	OK(mkdir(P("trdir"), 0755));
	ERR(truncate(P("trdir"), 0), EISDIR);
	ERR(truncate(P("trmissing"), 0), ENOENT);
	ERR(truncate(P("tr2"), -1), EINVAL);
	fd = (int)OK(open(P("tr2"), O_RDONLY));
	ERR2(ftruncate(fd, 0), EINVAL, EBADF);
	OK(close(fd));

	check("open O_TRUNC on a multi-chunk file frees its data");
	fd = (int)OK(open(P("tr3"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	fill(big, 3 * MiB, 13, 0);
	pwrite_all(fd, big, 3 * MiB, 0);
	OK(close(fd));
	fd = (int)OK(open(P("tr3"), O_RDWR | O_TRUNC));
	OK(ftruncate(fd, 3 * MiB));
	expect_content(fd, 0, 3 * MiB, 0, "after O_TRUNC and extend");
	OK(close(fd));
	free(big);
}

static void t_stat(void)
{
	struct stat st, st2;
	int fd;

	check("stat: regular file fields");
	write_file(P("s1"), "12345");
	st = st_of(P("s1"));
	TRUE(S_ISREG(st.st_mode));
	EQ(st.st_size, 5);
	EQ(st.st_nlink, 1);
	EQ(st.st_uid, getuid());
	EQ(st.st_gid, getgid());
	TRUE(st.st_ino != 0);
	TRUE(st.st_blksize > 0);
	fd = (int)OK(open(P("s1"), O_RDONLY));
	OK(fstat(fd, &st2));
	OK(close(fd));
	EQ(st2.st_ino, st.st_ino);
	EQ(st2.st_size, st.st_size);

	check("stat: directory fields");
	OK(mkdir(P("sdir"), 0710));
	st = st_of(P("sdir"));
	TRUE(S_ISDIR(st.st_mode));
	EQ(st.st_mode & 07777, 0710);
	TRUE(st.st_nlink >= 1);

	check("stat: missing is ENOENT, through a file is ENOTDIR");
	ERR(stat(P("nothere"), &st), ENOENT);
	ERR(stat(P("s1/x"), &st), ENOTDIR);

	check("chmod: changes the mode and ctime");
	struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
	OK(utimensat(AT_FDCWD, P("s1"), old, 0));
	int64_t c0 = ts_ns(st_of(P("s1")).st_ctim);
	struct timespec pause = {0, 20 * 1000 * 1000};
	nanosleep(&pause, NULL);
	OK(chmod(P("s1"), 0600));
	st = st_of(P("s1"));
	EQ(st.st_mode & 07777, 0600);
	TRUE(S_ISREG(st.st_mode));
	TRUE(ts_ns(st.st_ctim) > c0);
	OK(chmod(P("s1"), 04755));
	EQ(st_of(P("s1")).st_mode & 07777, 04755);
	OK(chmod(P("s1"), 0644));

	check("chown: uid and gid change; -1 keeps");
	OK(chown(P("s1"), 1234, 5678));
	st = st_of(P("s1"));
	EQ(st.st_uid, 1234);
	EQ(st.st_gid, 5678);
	OK(chown(P("s1"), (uid_t)-1, 4321));
	st = st_of(P("s1"));
	EQ(st.st_uid, 1234);
	EQ(st.st_gid, 4321);
	OK(chown(P("s1"), 0, 0));

	check("utimensat: exact times with nanoseconds");
	struct timespec ts[2] = {{1500000000, 123456789}, {1600000000, 987654321}};
	OK(utimensat(AT_FDCWD, P("s1"), ts, 0));
	st = st_of(P("s1"));
	EQ(ts_ns(st.st_atim), ts_ns(ts[0]));
	EQ(ts_ns(st.st_mtim), ts_ns(ts[1]));

	check("utimensat: UTIME_OMIT keeps, UTIME_NOW sets the current time");
	int64_t before = now_ns();
	struct timespec ts2[2] = {{0, UTIME_OMIT}, {0, UTIME_NOW}};
	OK(utimensat(AT_FDCWD, P("s1"), ts2, 0));
	int64_t after = now_ns();
	st = st_of(P("s1"));
	EQ(ts_ns(st.st_atim), ts_ns(ts[0]));
	if (ts_ns(st.st_mtim) < before - 1000000000ll || ts_ns(st.st_mtim) > after + 1000000000ll)
		fail("mtime after UTIME_NOW: expected within 1 s of %lld, got %lld",
		     (long long)before, (long long)ts_ns(st.st_mtim));
	struct timespec ts3[2] = {{0, UTIME_NOW}, {0, UTIME_OMIT}};
	OK(utimensat(AT_FDCWD, P("s1"), ts3, 0));
	st2 = st_of(P("s1"));
	EQ(ts_ns(st2.st_mtim), ts_ns(st.st_mtim));
	TRUE(ts_ns(st2.st_atim) >= before - 1000000000ll);

	check("utimensat: NULL sets both to now");
	OK(utimensat(AT_FDCWD, P("s1"), old, 0));
	before = now_ns();
	OK(utimensat(AT_FDCWD, P("s1"), NULL, 0));
	st = st_of(P("s1"));
	TRUE(ts_ns(st.st_mtim) >= before - 1000000000ll);
	TRUE(ts_ns(st.st_atim) >= before - 1000000000ll);

	check("write: updates mtime and ctime");
	OK(utimensat(AT_FDCWD, P("s1"), old, 0));
	int64_t ctime_before = ts_ns(st_of(P("s1")).st_ctim);
	nanosleep(&pause, NULL);
	before = now_ns();
	fd = (int)OK(open(P("s1"), O_WRONLY));
	pwrite_all(fd, "more", 4, 5);
	OK(fstat(fd, &st));
	if (ts_ns(st.st_mtim) < before - 1000000000ll)
		fail("mtime after write (fstat): expected >= %lld, got %lld", (long long)before,
		     (long long)ts_ns(st.st_mtim));
	OK(close(fd));
	st = st_of(P("s1"));
	if (ts_ns(st.st_mtim) < before - 1000000000ll)
		fail("mtime after write and close: expected >= %lld, got %lld", (long long)before,
		     (long long)ts_ns(st.st_mtim));
	TRUE(ts_ns(st.st_ctim) > ctime_before);
	EQ(st.st_size, 9);

	check("truncate: updates mtime");
	OK(utimensat(AT_FDCWD, P("s1"), old, 0));
	before = now_ns();
	OK(truncate(P("s1"), 2));
	st = st_of(P("s1"));
	TRUE(ts_ns(st.st_mtim) >= before - 1000000000ll);

	check("create in a directory updates the directory's mtime");
	OK(utimensat(AT_FDCWD, P("sdir"), old, 0));
	before = now_ns();
	write_file(P("sdir/new"), "x");
	st = st_of(P("sdir"));
	TRUE(ts_ns(st.st_mtim) >= before - 1000000000ll);
}

static void t_dirs(void)
{
	struct stat st;

	check("mkdir: creates, EEXIST on an existing dir or file");
	OK(mkdir(P("d1"), 0755));
	TRUE(S_ISDIR(st_of(P("d1")).st_mode));
	ERR(mkdir(P("d1"), 0755), EEXIST);
	write_file(P("dfile"), "x");
	ERR(mkdir(P("dfile"), 0755), EEXIST);
	check("mkdir: under a file is ENOTDIR, under a missing dir ENOENT");
	ERR(mkdir(P("dfile/sub"), 0755), ENOTDIR);
	ERR(mkdir(P("nodir/sub"), 0755), ENOENT);
	check("mkdir: nested, mode honoured");
	OK(mkdir(P("d1/d2"), 0700));
	OK(mkdir(P("d1/d2/d3"), 0755));
	EQ(st_of(P("d1/d2")).st_mode & 07777, 0700);
	check("rmdir: non-empty is ENOTEMPTY");
	ERR(rmdir(P("d1")), ENOTEMPTY);
	write_file(P("d1/d2/d3/f"), "x");
	ERR(rmdir(P("d1/d2/d3")), ENOTEMPTY);
	check("rmdir: a file is ENOTDIR, missing is ENOENT");
	ERR(rmdir(P("dfile")), ENOTDIR);
	ERR(rmdir(P("dmissing")), ENOENT);
	check("rmdir: empties bottom-up");
	OK(unlink(P("d1/d2/d3/f")));
	OK(rmdir(P("d1/d2/d3")));
	OK(rmdir(P("d1/d2")));
	OK(rmdir(P("d1")));
	ERR(stat(P("d1"), &st), ENOENT);
	check("mkdir then rmdir then mkdir again with the same name");
	OK(mkdir(P("d1"), 0755));
	OK(rmdir(P("d1")));
	OK(mkdir(P("d1"), 0755));
	st = st_of(P("d1"));
	TRUE(S_ISDIR(st.st_mode));
	check("unlink: a directory is EISDIR, missing ENOENT");
	ERR(unlink(P("d1")), EISDIR);
	ERR(unlink(P("dmissing")), ENOENT);
	ERR(unlink(P("dfile/x")), ENOTDIR);
	check("unlink: removes the name");
	OK(unlink(P("dfile")));
	ERR(stat(P("dfile"), &st), ENOENT);
	check("rmdir: cwd inside the removed dir sees an empty, dead directory");
	OK(mkdir(P("dcwd"), 0755));
	int dfd = (int)OK(open(P("dcwd"), O_RDONLY | O_DIRECTORY));
	OK(rmdir(P("dcwd")));
	ERR(openat(dfd, "newfile", O_RDWR | O_CREAT, 0644), ENOENT);
	OK(close(dfd));
}

static void t_rename(void)
{
	struct stat st, a, b;

	check("rename: same directory");
	write_file(P("r1"), "one");
	ino_t ino = st_of(P("r1")).st_ino;
	OK(rename(P("r1"), P("r1b")));
	ERR(stat(P("r1"), &st), ENOENT);
	EQ(st_of(P("r1b")).st_ino, ino);
	expect_file(P("r1b"), "one");

	check("rename: across directories");
	OK(mkdir(P("ra"), 0755));
	OK(mkdir(P("rb"), 0755));
	OK(rename(P("r1b"), P("ra/x")));
	OK(rename(P("ra/x"), P("rb/y")));
	expect_file(P("rb/y"), "one");
	ERR(stat(P("ra/x"), &st), ENOENT);

	check("rename: a directory across directories keeps its contents");
	OK(mkdir(P("ra/sub"), 0755));
	write_file(P("ra/sub/f"), "deep");
	OK(rename(P("ra/sub"), P("rb/sub2")));
	expect_file(P("rb/sub2/f"), "deep");
	ERR(stat(P("ra/sub"), &st), ENOENT);

	check("rename: replaces an existing file");
	write_file(P("rf1"), "new");
	write_file(P("rf2"), "old");
	ino = st_of(P("rf1")).st_ino;
	OK(rename(P("rf1"), P("rf2")));
	expect_file(P("rf2"), "new");
	EQ(st_of(P("rf2")).st_ino, ino);
	ERR(stat(P("rf1"), &st), ENOENT);

	check("rename: replaced file stays readable through an open fd");
	write_file(P("rf3"), "victim");
	write_file(P("rf4"), "winner");
	int fd = (int)OK(open(P("rf3"), O_RDONLY));
	OK(rename(P("rf4"), P("rf3")));
	char buf[16] = {0};
	EQ(OK(pread(fd, buf, sizeof(buf) - 1, 0)), 6);
	TRUE(strcmp(buf, "victim") == 0);
	OK(close(fd));
	expect_file(P("rf3"), "winner");

	check("rename: a directory replaces an empty directory");
	OK(mkdir(P("rd1"), 0755));
	write_file(P("rd1/f"), "in rd1");
	OK(mkdir(P("rd2"), 0755));
	OK(rename(P("rd1"), P("rd2")));
	expect_file(P("rd2/f"), "in rd1");
	ERR(stat(P("rd1"), &st), ENOENT);

	check("rename: onto a non-empty directory is ENOTEMPTY");
	OK(mkdir(P("rd3"), 0755));
	ERR2(rename(P("rd3"), P("rd2")), ENOTEMPTY, EEXIST);

	check("rename: a file onto a directory is EISDIR");
	write_file(P("rf5"), "x");
	ERR(rename(P("rf5"), P("rd3")), EISDIR);

	check("rename: a directory onto a file is ENOTDIR");
	ERR(rename(P("rd3"), P("rf5")), ENOTDIR);

	check("rename: missing source is ENOENT");
	ERR(rename(P("rmissing"), P("rx")), ENOENT);
	ERR(rename(P("rf5"), P("rmissing/x")), ENOENT);

	check("rename: a directory into its own subdirectory is EINVAL");
	OK(mkdir(P("rd3/inner"), 0755));
	ERR(rename(P("rd3"), P("rd3/inner/moved")), EINVAL);
	ERR(rename(P("rd3"), P("rd3/moved")), EINVAL);

	check("rename: onto itself (same name, or a hard link) is a no-op");
	OK(rename(P("rf5"), P("rf5")));
	OK(link(P("rf5"), P("rf5link")));
	OK(rename(P("rf5"), P("rf5link")));
	OK(stat(P("rf5"), &st));
	OK(stat(P("rf5link"), &st));
	EQ(st.st_nlink, 2);

	check("renameat2: RENAME_NOREPLACE on an existing name is EEXIST");
	write_file(P("rn1"), "a");
	write_file(P("rn2"), "b");
	ERR(renameat2(AT_FDCWD, P("rn1"), AT_FDCWD, P("rn2"), RENAME_NOREPLACE), EEXIST);
	expect_file(P("rn1"), "a");
	expect_file(P("rn2"), "b");
	check("renameat2: RENAME_NOREPLACE to a free name works");
	OK(renameat2(AT_FDCWD, P("rn1"), AT_FDCWD, P("rn3"), RENAME_NOREPLACE));
	expect_file(P("rn3"), "a");

	check("renameat2: RENAME_EXCHANGE swaps two files");
	a = st_of(P("rn3"));
	b = st_of(P("rn2"));
	OK(renameat2(AT_FDCWD, P("rn3"), AT_FDCWD, P("rn2"), RENAME_EXCHANGE));
	expect_file(P("rn3"), "b");
	expect_file(P("rn2"), "a");
	EQ(st_of(P("rn3")).st_ino, b.st_ino);
	EQ(st_of(P("rn2")).st_ino, a.st_ino);

	check("renameat2: RENAME_EXCHANGE swaps a file and a directory across dirs");
	OK(mkdir(P("rx1"), 0755));
	write_file(P("rx1/f"), "dir content");
	OK(renameat2(AT_FDCWD, P("rx1"), AT_FDCWD, P("rb/y"), RENAME_EXCHANGE));
	expect_file(P("rb/y/f"), "dir content");
	expect_file(P("rx1"), "one");

	check("renameat2: RENAME_EXCHANGE with a missing name is ENOENT");
	ERR(renameat2(AT_FDCWD, P("rn2"), AT_FDCWD, P("rmissing"), RENAME_EXCHANGE), ENOENT);

	check("rename: many renames keep the directory listing exact");
	OK(mkdir(P("rloop"), 0755));
	for (int i = 0; i < 50; i++) {
		char n[64];
		snprintf(n, sizeof(n), "rloop/f%d", i);
		write_file(P("%s", n), n);
	}
	for (int i = 0; i < 50; i++)
		OK(rename(P("rloop/f%d", i), P("rloop/g%d", (i * 7) % 50 + 100)));
	int count = 0;
	DIR *d = opendir(P("rloop"));
	struct dirent *e;
	TRUE(d != NULL);
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		TRUE(e->d_name[0] == 'g');
		count++;
	}
	closedir(d);
	EQ(count, 50);
	expect_file(P("rloop/g100"), "rloop/f0");
	expect_file(P("rloop/g107"), "rloop/f1");
}

static void t_link(void)
{
	struct stat st;

	check("link: nlink counts up and down");
	write_file(P("l1"), "linked");
	OK(link(P("l1"), P("l2")));
	EQ(st_of(P("l1")).st_nlink, 2);
	EQ(st_of(P("l2")).st_nlink, 2);
	EQ(st_of(P("l1")).st_ino, st_of(P("l2")).st_ino);
	OK(mkdir(P("ld"), 0755));
	OK(link(P("l1"), P("ld/l3")));
	EQ(st_of(P("l2")).st_nlink, 3);
	check("link: content shared, writes through one name visible in the other");
	int fd = (int)OK(open(P("l2"), O_WRONLY | O_APPEND));
	OK(write(fd, "+", 1));
	OK(close(fd));
	expect_file(P("ld/l3"), "linked+");
	check("link: unlink of one name keeps the others");
	OK(unlink(P("l1")));
	EQ(st_of(P("l2")).st_nlink, 2);
	expect_file(P("l2"), "linked+");
	OK(unlink(P("ld/l3")));
	EQ(st_of(P("l2")).st_nlink, 1);
	check("link: a directory is EPERM");
	ERR(link(P("ld"), P("ld2")), EPERM);
	check("link: onto an existing name is EEXIST, missing source ENOENT");
	write_file(P("l4"), "x");
	ERR(link(P("l2"), P("l4")), EEXIST);
	ERR(link(P("lmissing"), P("l5")), ENOENT);
	ERR(link(P("l2"), P("lmissing/l5")), ENOENT);
	ERR(stat(P("l5"), &st), ENOENT);
}

static void t_symlink(void)
{
	char buf[PATH_MAX];
	struct stat st;

	check("symlink: readlink returns the target, lstat says S_IFLNK");
	write_file(P("sl_target"), "pointed");
	OK(symlink("sl_target", P("sl1")));
	ssize_t n = OK(readlink(P("sl1"), buf, sizeof(buf)));
	EQ(n, 9);
	TRUE(memcmp(buf, "sl_target", 9) == 0);
	st = st_of(P("sl1"));
	TRUE(S_ISLNK(st.st_mode));
	EQ(st.st_size, 9);
	check("symlink: stat and open follow it");
	OK(stat(P("sl1"), &st));
	TRUE(S_ISREG(st.st_mode));
	expect_file(P("sl1"), "pointed");
	check("symlink: readlink with a short buffer truncates");
	EQ(OK(readlink(P("sl1"), buf, 3)), 3);
	TRUE(memcmp(buf, "sl_", 3) == 0);
	check("symlink: long target (1000 bytes), absolute target");
	char longt[1001];
	memset(longt, 'a', 1000);
	longt[1000] = '\0';
	OK(symlink(longt, P("sl2")));
	EQ(OK(readlink(P("sl2"), buf, sizeof(buf))), 1000);
	TRUE(memcmp(buf, longt, 1000) == 0);
	OK(symlink(P("sl_target"), P("sl3")));
	expect_file(P("sl3"), "pointed");
	check("symlink: dangling link: lstat works, stat is ENOENT");
	OK(symlink("nowhere", P("sl4")));
	OK(lstat(P("sl4"), &st));
	ERR(stat(P("sl4"), &st), ENOENT);
	check("symlink: onto an existing name is EEXIST");
	ERR(symlink("x", P("sl1")), EEXIST);
	check("readlink: on a regular file is EINVAL, missing ENOENT");
	ERR(readlink(P("sl_target"), buf, sizeof(buf)), EINVAL);
	ERR(readlink(P("slmissing"), buf, sizeof(buf)), ENOENT);
	check("open: O_NOFOLLOW on a symlink is ELOOP");
	ERR(open(P("sl1"), O_RDONLY | O_NOFOLLOW), ELOOP);
	check("symlink: a loop is ELOOP");
	OK(symlink("sl6", P("sl5")));
	OK(symlink("sl5", P("sl6")));
	ERR(stat(P("sl5"), &st), ELOOP);
	check("symlink: to a directory, path walk through it");
	OK(mkdir(P("sldir"), 0755));
	write_file(P("sldir/f"), "via link");
	OK(symlink("sldir", P("sl7")));
	expect_file(P("sl7/f"), "via link");
	check("unlink: removes the link, not the target");
	OK(unlink(P("sl1")));
	expect_file(P("sl_target"), "pointed");
}

static int cmp_str(const void *a, const void *b)
{
	return strcmp(*(char *const *)a, *(char *const *)b);
}

static void t_readdir(void)
{
	const char *env = getenv("POSIX_READDIR_N");
	int n = env ? atoi(env) : 5000;
	char name[64];

	if (n < 10)
		n = 10;
	check("readdir: empty directory has only . and ..");
	OK(mkdir(P("rdempty"), 0755));
	DIR *d = opendir(P("rdempty"));
	struct dirent *e;
	int dots = 0, others = 0;
	TRUE(d != NULL);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			dots++;
		else
			others++;
	}
	closedir(d);
	EQ(dots, 2);
	EQ(others, 0);

	char chk[96];
	snprintf(chk, sizeof(chk), "readdir: %d entries, exact set, each once", n);
	check(chk);
	OK(mkdir(P("rdmany"), 0755));
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "rdmany/entry-%06d-%s", i, (i % 3) ? "file" : "x");
		if (i % 10 == 0) {
			OK(mkdir(P("%s", name), 0755));
		} else {
			int fd = (int)OK(open(P("%s", name), O_WRONLY | O_CREAT | O_EXCL, 0644));
			OK(close(fd));
		}
	}
	char **seen = calloc((size_t)n + 8, sizeof(char *));
	int nseen = 0;
	if (!seen)
		fail("out of memory");
	d = opendir(P("rdmany"));
	TRUE(d != NULL);
	while ((errno = 0, e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		if (nseen >= n)
			fail("more than %d entries (extra: %s)", n, e->d_name);
		int i = atoi(e->d_name + 6);
		if (e->d_type != DT_UNKNOWN && e->d_type != ((i % 10 == 0) ? DT_DIR : DT_REG))
			fail("d_type of %s: expected %d, got %d", e->d_name,
			     (i % 10 == 0) ? DT_DIR : DT_REG, e->d_type);
		seen[nseen++] = strdup(e->d_name);
	}
	if (errno)
		fail("readdir: %s", errname(errno));
	closedir(d);
	qsort(seen, (size_t)nseen, sizeof(char *), cmp_str);
	for (int i = 0; i < nseen; i++)
		if (i > 0 && !strcmp(seen[i], seen[i - 1]))
			fail("entry %s returned twice", seen[i]);
	if (nseen != n)
		fail("expected %d entries, got %d", n, nseen);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "entry-%06d-%s", i, (i % 3) ? "file" : "x");
		if (strcmp(seen[i], name) != 0)
			fail("entry %d: expected %s, got %s", i, name, seen[i]);
	}
	for (int i = 0; i < nseen; i++)
		free(seen[i]);

	check("readdir: unlinking while iterating returns each remaining entry once");
	d = opendir(P("rdmany"));
	TRUE(d != NULL);
	nseen = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		int i = atoi(e->d_name + 6);
		if (i % 10 == 0)
			OK(rmdir(P("rdmany/%s", e->d_name)));
		else
			OK(unlink(P("rdmany/%s", e->d_name)));
		nseen++;
	}
	closedir(d);
	EQ(nseen, n);
	OK(rmdir(P("rdmany")));
	free(seen);

	check("readdir: rewinddir lists again");
	OK(mkdir(P("rdrew"), 0755));
	write_file(P("rdrew/a"), "");
	write_file(P("rdrew/b"), "");
	d = opendir(P("rdrew"));
	int c1 = 0, c2 = 0;
	while ((e = readdir(d)))
		c1++;
	rewinddir(d);
	while ((e = readdir(d)))
		c2++;
	closedir(d);
	EQ(c1, 4);
	EQ(c2, 4);
}

static void t_special(void)
{
	struct stat st;

	check("mkfifo: creates a fifo, it passes data");
	OK(mkfifo(P("fifo"), 0644));
	st = st_of(P("fifo"));
	TRUE(S_ISFIFO(st.st_mode));
	EQ(st.st_mode & 07777, 0644);
	int fd = (int)OK(open(P("fifo"), O_RDWR | O_NONBLOCK));
	OK(write(fd, "p", 1));
	char c = 0;
	EQ(OK(read(fd, &c, 1)), 1);
	EQ(c, 'p');
	OK(close(fd));
	check("mknod: S_IFIFO through mknod, EEXIST on existing name");
	OK(mknod(P("fifo2"), S_IFIFO | 0600, 0));
	TRUE(S_ISFIFO(st_of(P("fifo2")).st_mode));
	ERR(mknod(P("fifo2"), S_IFIFO | 0600, 0), EEXIST);
	check("mknod: S_IFREG creates an empty regular file");
	OK(mknod(P("regnod"), S_IFREG | 0640, 0));
	st = st_of(P("regnod"));
	TRUE(S_ISREG(st.st_mode));
	EQ(st.st_size, 0);
	check("mknod: a character device keeps its rdev");
	OK(mknod(P("chr"), S_IFCHR | 0600, makedev(1, 3)));
	st = st_of(P("chr"));
	TRUE(S_ISCHR(st.st_mode));
	EQ(st.st_rdev, makedev(1, 3));
	check("unlink: fifo and device nodes");
	OK(unlink(P("fifo")));
	OK(unlink(P("chr")));
}

static void t_xattr(void)
{
	char buf[256];
	write_file(P("x1"), "x");
	const char *f = P("x1");

	check("setxattr/getxattr: value round-trips, size query with size 0");
	OK(setxattr(f, "user.alpha", "value-1", 7, 0));
	EQ(OK(getxattr(f, "user.alpha", NULL, 0)), 7);
	EQ(OK(getxattr(f, "user.alpha", buf, sizeof(buf))), 7);
	TRUE(memcmp(buf, "value-1", 7) == 0);
	check("getxattr: too small a buffer is ERANGE");
	ERR(getxattr(f, "user.alpha", buf, 3), ERANGE);
	check("getxattr: a missing name is ENODATA");
	ERR(getxattr(f, "user.missing", buf, sizeof(buf)), ENODATA);
	check("setxattr: XATTR_CREATE on an existing name is EEXIST");
	ERR(setxattr(f, "user.alpha", "v", 1, XATTR_CREATE), EEXIST);
	check("setxattr: XATTR_REPLACE on a missing name is ENODATA");
	ERR(setxattr(f, "user.beta", "v", 1, XATTR_REPLACE), ENODATA);
	check("setxattr: XATTR_REPLACE replaces, empty values are allowed");
	OK(setxattr(f, "user.alpha", "longer-value", 12, XATTR_REPLACE));
	EQ(OK(getxattr(f, "user.alpha", buf, sizeof(buf))), 12);
	TRUE(memcmp(buf, "longer-value", 12) == 0);
	OK(setxattr(f, "user.empty", "", 0, XATTR_CREATE));
	EQ(OK(getxattr(f, "user.empty", buf, sizeof(buf))), 0);
	check("setxattr: binary value with NUL bytes");
	char bin[300];
	for (int i = 0; i < 300; i++)
		bin[i] = (char)(i * 7);
	OK(setxattr(f, "user.bin", bin, sizeof(bin), 0));
	char bin2[300];
	EQ(OK(getxattr(f, "user.bin", bin2, sizeof(bin2))), 300);
	TRUE(memcmp(bin, bin2, 300) == 0);
	check("listxattr: lists every name, size query, ERANGE");
	char list[1024];
	ssize_t need = OK(listxattr(f, NULL, 0));
	ssize_t n = OK(listxattr(f, list, sizeof(list)));
	EQ(n, need);
	bool a = false, e = false, b = false;
	for (ssize_t off = 0; off < n; off += (ssize_t)strlen(list + off) + 1) {
		if (!strcmp(list + off, "user.alpha"))
			a = true;
		else if (!strcmp(list + off, "user.empty"))
			e = true;
		else if (!strcmp(list + off, "user.bin"))
			b = true;
	}
	TRUE(a && e && b);
	ERR(listxattr(f, list, 5), ERANGE);
	check("removexattr: removes; again is ENODATA");
	OK(removexattr(f, "user.alpha"));
	ERR(getxattr(f, "user.alpha", buf, sizeof(buf)), ENODATA);
	ERR(removexattr(f, "user.alpha"), ENODATA);
	check("xattr: on a directory");
	OK(mkdir(P("xdir"), 0755));
	OK(setxattr(P("xdir"), "user.d", "dv", 2, 0));
	EQ(OK(getxattr(P("xdir"), "user.d", buf, sizeof(buf))), 2);
	check("xattr: survives rename and is per inode (shared by hard links)");
	OK(rename(f, P("x2")));
	EQ(OK(getxattr(P("x2"), "user.bin", NULL, 0)), 300);
	OK(link(P("x2"), P("x3")));
	OK(setxattr(P("x3"), "user.viaLink", "1", 1, 0));
	EQ(OK(getxattr(P("x2"), "user.viaLink", buf, sizeof(buf))), 1);
	check("xattr: name longer than 255 is ERANGE");
	char longname[300];
	memcpy(longname, "user.", 5);
	memset(longname + 5, 'n', 260);
	longname[265] = '\0';
	ERR(setxattr(P("x2"), longname, "v", 1, 0), ERANGE);
}

static void t_statfs(void)
{
	struct statvfs sv;
	struct statfs sf;

	check("statvfs: sane numbers");
	OK(statvfs(g_root, &sv));
	TRUE(sv.f_bsize > 0);
	TRUE(sv.f_blocks > 0);
	TRUE(sv.f_bfree <= sv.f_blocks);
	TRUE(sv.f_bavail <= sv.f_blocks);
	EQ(sv.f_namemax, 255);
	check("fstatfs: on an open file");
	write_file(P("sf"), "x");
	int fd = (int)OK(open(P("sf"), O_RDONLY));
	OK(fstatfs(fd, &sf));
	TRUE(sf.f_bsize > 0);
	OK(close(fd));
}

static void t_sync(void)
{
	check("fsync/fdatasync: on a written file");
	int fd = (int)OK(open(P("fs1"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(fd, "durable", 7, 0);
	OK(fsync(fd));
	pwrite_all(fd, "!", 1, 7);
	OK(fdatasync(fd));
	OK(close(fd));
	expect_file(P("fs1"), "durable!");
	check("fsync: on a directory");
	int dfd = (int)OK(open(g_root, O_RDONLY | O_DIRECTORY));
	OK(fsync(dfd));
	OK(close(dfd));
	check("sync: syncfs on the filesystem");
	fd = (int)OK(open(P("fs1"), O_RDONLY));
	OK(syncfs(fd));
	check("sync: syncfs after a file was written, closed and unlinked");
	write_file(P("fs2"), "short-lived");
	OK(unlink(P("fs2")));
	OK(syncfs(fd));
	OK(close(fd));
}

static void t_unlinked(void)
{
	struct stat st;
	uint8_t *big = malloc(2 * MiB);
	if (!big)
		fail("out of memory");

	check("unlink: an open file stays readable and writable");
	int fd = (int)OK(open(P("u1"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	fill(big, 2 * MiB, 21, 0);
	pwrite_all(fd, big, 2 * MiB, 0);
	OK(fsync(fd));
	int fd2 = (int)OK(open(P("u1"), O_RDONLY));
	OK(unlink(P("u1")));
	ERR(stat(P("u1"), &st), ENOENT);
	OK(fstat(fd, &st));
	EQ(st.st_nlink, 0);
	EQ(st.st_size, 2 * MiB);
	expect_content(fd, 0, 2 * MiB, 21, "unlinked file");
	pwrite_all(fd, "tail", 4, 2 * MiB);
	char buf[8] = {0};
	EQ(OK(pread(fd2, buf, 4, 2 * MiB)), 4);
	TRUE(memcmp(buf, "tail", 4) == 0);
	OK(close(fd));
	expect_content(fd2, 0, CHUNK, 21, "unlinked file, second fd");
	OK(close(fd2));
	check("unlink: a new file with the same name is a different file");
	write_file(P("u1"), "new");
	expect_file(P("u1"), "new");

	check("rename over an open file: its data stays readable until close");
	fd = (int)OK(open(P("u2"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(fd, big, CHUNK + 10, 0);
	write_file(P("u3"), "replacement");
	OK(rename(P("u3"), P("u2")));
	expect_content(fd, 0, CHUNK + 10, 21, "replaced but open");
	OK(close(fd));
	free(big);
}

/* ---- permissions (run as uid 65534) ------------------------------------- */
static void perm_child(void)
{
	char buf[8];
	check("perm: a 0600 root file is EACCES for others");
	ERR(open(P("p_private"), O_RDONLY), EACCES);
	check("perm: a 0644 root file is readable, not writable");
	int fd = (int)OK(open(P("p_public"), O_RDONLY));
	EQ(OK(read(fd, buf, sizeof(buf))), 6);
	OK(close(fd));
	ERR(open(P("p_public"), O_WRONLY), EACCES);
	ERR(truncate(P("p_public"), 0), EACCES);
	check("perm: create in a 0755 root directory is EACCES");
	ERR(open(P("p_dir/new"), O_WRONLY | O_CREAT, 0644), EACCES);
	ERR(mkdir(P("p_dir/newdir"), 0755), EACCES);
	ERR(unlink(P("p_dir/f")), EACCES);
	ERR(rename(P("p_dir/f"), P("p_open/f")), EACCES);
	check("perm: a 0700 directory cannot be listed or traversed");
	ERR(open(P("p_closed/f"), O_RDONLY), EACCES);
	ERR(opendir(P("p_closed")) ? 0 : -1, EACCES);
	check("perm: create in a 0777 directory works, owner is the caller");
	fd = (int)OK(open(P("p_open/mine"), O_WRONLY | O_CREAT | O_EXCL, 0600));
	OK(write(fd, "mine", 4));
	OK(close(fd));
	struct stat st;
	OK(stat(P("p_open/mine"), &st));
	EQ(st.st_uid, 65534);
	EQ(st.st_gid, 65534);
	check("perm: chmod of someone else's file is EPERM, of one's own works");
	ERR(chmod(P("p_public"), 0777), EPERM);
	OK(chmod(P("p_open/mine"), 0640));
	check("perm: chown to another uid is EPERM");
	ERR(chown(P("p_open/mine"), 0, 0), EPERM);
	check("perm: utimensat with explicit times on someone else's file is EPERM");
	struct timespec ts[2] = {{1, 0}, {1, 0}};
	ERR(utimensat(AT_FDCWD, P("p_public"), ts, 0), EPERM);
	check("perm: sticky directory: others' files cannot be removed");
	ERR(unlink(P("p_sticky/rootfile")), EPERM);
	check("perm: user xattr on someone else's file is EACCES/EPERM");
	ERR2(setxattr(P("p_public"), "user.x", "v", 1, 0), EACCES, EPERM);
}

static void t_perm(void)
{
	check("perm: setting up root-owned files (0600, 0644) and directories");
	write_file(P("p_private"), "secret");
	OK(chmod(P("p_private"), 0600));
	write_file(P("p_public"), "public");
	OK(chmod(P("p_public"), 0644));
	OK(mkdir(P("p_dir"), 0755));
	write_file(P("p_dir/f"), "f");
	OK(mkdir(P("p_closed"), 0700));
	write_file(P("p_closed/f"), "f");
	OK(mkdir(P("p_open"), 0777));
	OK(chmod(P("p_open"), 0777));
	OK(mkdir(P("p_sticky"), 01777));
	OK(chmod(P("p_sticky"), 01777));
	write_file(P("p_sticky/rootfile"), "r");
	as_nobody(perm_child);
	check("perm: root still reads the 0600 file (no enforcement against root)");
	expect_file(P("p_private"), "secret");
}

static void t_names(void)
{
	char name[300];
	struct stat st;

	check("names: a 255-byte name works");
	memset(name, 'n', 255);
	name[255] = '\0';
	write_file(P("%s", name), "long");
	expect_file(P("%s", name), "long");
	OK(mkdir(P("d%.254s", name), 0755));
	OK(unlink(P("%s", name)));
	check("names: a 256-byte name is ENAMETOOLONG");
	memset(name, 'm', 256);
	name[256] = '\0';
	ERR(open(P("%s", name), O_WRONLY | O_CREAT, 0644), ENAMETOOLONG);
	ERR(mkdir(P("%s", name), 0755), ENAMETOOLONG);
	ERR(stat(P("%s", name), &st), ENAMETOOLONG);
	ERR(symlink("x", P("%s", name)), ENAMETOOLONG);
	write_file(P("nshort"), "s");
	ERR(rename(P("nshort"), P("%s", name)), ENAMETOOLONG);
	ERR(link(P("nshort"), P("%s", name)), ENAMETOOLONG);
	check("names: a path longer than PATH_MAX is ENAMETOOLONG");
	char *longpath = malloc(PATH_MAX + 100);
	if (!longpath)
		fail("out of memory");
	int off = snprintf(longpath, PATH_MAX + 100, "%s", g_root);
	while (off < PATH_MAX + 10)
		off += snprintf(longpath + off, (size_t)(PATH_MAX + 100 - off), "/aaaaaaaaa");
	ERR(stat(longpath, &st), ENAMETOOLONG);
	free(longpath);
	check("names: \".\" and \"..\" misuse");
	OK(mkdir(P("ndir"), 0755));
	ERR(mkdir(P("ndir/."), 0755), EEXIST);
	ERR(mkdir(P("ndir/.."), 0755), EEXIST);
	ERR(rmdir(P("ndir/.")), EINVAL);
	ERR(rmdir(P("ndir/..")), ENOTEMPTY);
	ERR(unlink(P("ndir/.")), EISDIR);
	ERR(rename(P("ndir/."), P("nother")), EBUSY);
	ERR(rename(P("nshort"), P("ndir/..")), EBUSY);
	ERR(link(P("nshort"), P("ndir/.")), EEXIST);
	ERR(open(P("ndir/."), O_WRONLY | O_CREAT, 0644), EISDIR);
	check("names: . and .. resolve to the directory and its parent");
	struct stat a, b;
	OK(stat(P("ndir/."), &a));
	OK(stat(P("ndir"), &b));
	EQ(a.st_ino, b.st_ino);
	OK(stat(P("ndir/.."), &a));
	OK(stat(g_root, &b));
	EQ(a.st_ino, b.st_ino);
	check("names: odd but valid bytes (spaces, UTF-8, newline, high bytes)");
	const char *odd[] = {"with space", "ünïcödé-名前", "new\nline", "\x01\x7f\xff",
			     "-dash",	   "...",	   "a.b.c"};
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++) {
		write_file(P("%s", odd[i]), odd[i]);
		expect_file(P("%s", odd[i]), odd[i]);
	}
	DIR *d = opendir(g_root);
	struct dirent *e;
	int found = 0;
	while ((e = readdir(d)))
		for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
			if (!strcmp(e->d_name, odd[i]))
				found++;
	closedir(d);
	EQ(found, (int)(sizeof(odd) / sizeof(odd[0])));
	for (size_t i = 0; i < sizeof(odd) / sizeof(odd[0]); i++)
		OK(unlink(P("%s", odd[i])));
	check("names: empty path is ENOENT");
	ERR(stat("", &st), ENOENT);
}

static void t_semantics(void)
{
	struct stat st;
	char buf[64];

	check("two fds: a truncate through one is not undone by closing the other");
	int a = (int)OK(open(P("m1"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	char *big = calloc(1, 200000);
	if (!big)
		fail("out of memory");
	memset(big, 'z', 200000);
	pwrite_all(a, big, 5000, 0);
	int b = (int)OK(open(P("m1"), O_RDWR));
	OK(ftruncate(b, 100));
	OK(close(a));
	EQ(st_of(P("m1")).st_size, 100);
	OK(close(b));
	EQ(st_of(P("m1")).st_size, 100);

	check("two fds: closing a writer with a smaller view keeps the larger size");
	a = (int)OK(open(P("m2"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(a, "aaaaaaaaaa", 10, 0);
	b = (int)OK(open(P("m2"), O_RDWR));
	pwrite_all(b, "bbb", 3, 1000);
	OK(close(b));
	OK(close(a));
	EQ(st_of(P("m2")).st_size, 1003);

	check("truncate by path while a writer has it open");
	a = (int)OK(open(P("m3"), O_RDWR | O_CREAT | O_TRUNC, 0644));
	pwrite_all(a, big, 200000, 0);
	OK(truncate(P("m3"), 10));
	OK(close(a));
	EQ(st_of(P("m3")).st_size, 10);
	a = (int)OK(open(P("m3"), O_RDONLY));
	EQ(OK(pread(a, buf, sizeof(buf), 0)), 10);
	OK(close(a));
	free(big);

	check("O_APPEND from two descriptors: nothing overwritten");
	a = (int)OK(open(P("m4"), O_WRONLY | O_CREAT | O_APPEND | O_TRUNC, 0644));
	b = (int)OK(open(P("m4"), O_WRONLY | O_APPEND));
	for (int i = 0; i < 20; i++) {
		OK(write(a, "A", 1));
		OK(write(b, "BB", 2));
	}
	OK(close(a));
	OK(close(b));
	EQ(st_of(P("m4")).st_size, 60);

	check("directory nlink is 1 (unknown) or 2 + subdirectories");
	OK(mkdir(P("mnl"), 0755));
	OK(mkdir(P("mnl/a"), 0755));
	OK(mkdir(P("mnl/b"), 0755));
	write_file(P("mnl/f"), "x");
	st = st_of(P("mnl"));
	if (st.st_nlink != 1 && st.st_nlink != 4)
		fail("nlink of a dir with 2 subdirs: expected 1 or 4, got %lu",
		     (unsigned long)st.st_nlink);
	OK(rmdir(P("mnl/a")));
	st = st_of(P("mnl"));
	if (st.st_nlink != 1 && st.st_nlink != 3)
		fail("nlink after rmdir of a subdir: expected 1 or 3, got %lu",
		     (unsigned long)st.st_nlink);
	OK(rename(P("mnl/b"), P("mnl_b")));
	st = st_of(P("mnl"));
	if (st.st_nlink != 1 && st.st_nlink != 2)
		fail("nlink after moving a subdir out: expected 1 or 2, got %lu",
		     (unsigned long)st.st_nlink);

	check("setgid directory: new entries inherit its group, subdirs the bit");
	OK(mkdir(P("msg"), 0755));
	OK(chown(P("msg"), 0, 4321));
	OK(chmod(P("msg"), 02775));
	write_file(P("msg/f"), "x");
	OK(mkdir(P("msg/d"), 0755));
	EQ(st_of(P("msg/f")).st_gid, 4321);
	st = st_of(P("msg/d"));
	EQ(st.st_gid, 4321);
	TRUE(st.st_mode & S_ISGID);

	check("chown clears the setuid bit of a regular file");
	write_file(P("msuid"), "x");
	OK(chmod(P("msuid"), 04755));
	OK(chown(P("msuid"), 1, 1));
	EQ(st_of(P("msuid")).st_mode & 07777, 0755);

	check("st_blocks accounts for written data");
	a = (int)OK(open(P("mblk"), O_WRONLY | O_CREAT | O_TRUNC, 0644));
	big = malloc(MiB);
	if (!big)
		fail("out of memory");
	memset(big, 'q', MiB);
	pwrite_all(a, big, MiB, 0);
	OK(close(a));
	free(big);
	st = st_of(P("mblk"));
	if ((long long)st.st_blocks * 512 < MiB)
		fail("st_blocks of a 1 MiB file: expected >= %d, got %lld", MiB / 512,
		     (long long)st.st_blocks);

	check("telldir/seekdir: resume a listing at a saved position");
	OK(mkdir(P("mtell"), 0755));
	for (int i = 0; i < 300; i++)
		write_file(P("mtell/e%03d", i), "");
	DIR *d = opendir(P("mtell"));
	TRUE(d != NULL);
	struct dirent *e;
	int seen = 0;
	long pos = -1;
	char after[300][8];
	int nafter = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (++seen == 150)
			pos = telldir(d);
		else if (seen > 150)
			snprintf(after[nafter++], sizeof(after[0]), "%s", e->d_name);
	}
	TRUE(pos >= 0);
	seekdir(d, pos);
	int again = 0;
	while ((e = readdir(d))) {
		if (e->d_name[0] == '.')
			continue;
		if (again >= nafter || strcmp(e->d_name, after[again]) != 0)
			fail("after seekdir: entry %d is %s, expected %s", again, e->d_name,
			     again < nafter ? after[again] : "(end)");
		again++;
	}
	EQ(again, nafter);
	closedir(d);

	check("fstat after the file was renamed and its directory removed");
	OK(mkdir(P("mren"), 0755));
	write_file(P("mren/f"), "moving");
	a = (int)OK(open(P("mren/f"), O_RDONLY));
	OK(rename(P("mren/f"), P("mren_f")));
	OK(rmdir(P("mren")));
	OK(fstat(a, &st));
	EQ(st.st_size, 6);
	EQ(OK(pread(a, buf, sizeof(buf), 0)), 6);
	OK(close(a));

	check("directory mtime changes on unlink and rename");
	struct timespec old[2] = {{1000000000, 0}, {1000000000, 0}};
	OK(mkdir(P("mdt"), 0755));
	write_file(P("mdt/a"), "a");
	OK(utimensat(AT_FDCWD, P("mdt"), old, 0));
	OK(unlink(P("mdt/a")));
	TRUE(ts_ns(st_of(P("mdt")).st_mtim) > 1000000000ll * 1000000000ll);
	write_file(P("mdt/b"), "b");
	OK(utimensat(AT_FDCWD, P("mdt"), old, 0));
	OK(rename(P("mdt/b"), P("mdt/c")));
	TRUE(ts_ns(st_of(P("mdt")).st_mtim) > 1000000000ll * 1000000000ll);
}

/* Children race on a small pool of names; afterwards the namespace must be
 * self-consistent: the listing equals the names that lstat finds, each file's
 * nlink equals the number of names pointing at it, and files hold one of the
 * contents that were written. */
#define RACE_NAMES 12
#define RACE_PROCS 4
#define RACE_OPS 400

static void race_child(int id)
{
	uint64_t x = (uint64_t)id * 0x9E3779B97F4A7C15ull + 12345;
	char a[PATH_MAX], b[PATH_MAX];
	for (int i = 0; i < RACE_OPS; i++) {
		x ^= x >> 12;
		x ^= x << 25;
		x ^= x >> 27;
		uint64_t r = x * 0x2545F4914F6CDD1Dull;
		snprintf(a, sizeof(a), "%s/race/n%d", g_root, (int)(r % RACE_NAMES));
		snprintf(b, sizeof(b), "%s/race/n%d", g_root, (int)((r >> 8) % RACE_NAMES));
		int fd;
		switch ((r >> 16) % 8) {
		case 0:
		case 1:
			fd = open(a, O_WRONLY | O_CREAT | O_TRUNC, 0644);
			if (fd >= 0) {
				char content[32];
				int n = snprintf(content, sizeof(content), "content-%d-%d", id, i);
				if (write(fd, content, (size_t)n) < 0 && errno != EISDIR)
					_exit(10);
				close(fd);
			}
			break;
		case 2:
			rename(a, b);
			break;
		case 3:
			unlink(a);
			break;
		case 4:
			link(a, b);
			break;
		case 5:
			mkdir(a, 0755);
			break;
		case 6:
			rmdir(a);
			break;
		case 7:
			renameat2(AT_FDCWD, a, AT_FDCWD, b, RENAME_EXCHANGE);
			break;
		}
	}
	_exit(0);
}

static void t_concurrent(void)
{
	char chk[128];
	snprintf(chk, sizeof(chk),
		 "concurrent: %d processes x %d create/rename/unlink/link/mkdir/rmdir/exchange",
		 RACE_PROCS, RACE_OPS);
	check(chk);
	OK(mkdir(P("race"), 0755));
	pid_t pids[RACE_PROCS];
	for (int i = 0; i < RACE_PROCS; i++) {
		pids[i] = fork();
		if (pids[i] < 0)
			fail("fork: %s", strerror(errno));
		if (pids[i] == 0)
			race_child(i);
	}
	for (int i = 0; i < RACE_PROCS; i++) {
		int status;
		if (waitpid(pids[i], &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			fail("racing child %d failed (status 0x%x)", i, status);
	}

	check("concurrent: listing matches lstat, nlink matches names, content intact");
	bool listed[RACE_NAMES] = {false};
	DIR *d = opendir(P("race"));
	struct dirent *e;
	TRUE(d != NULL);
	while ((e = readdir(d))) {
		if (!strcmp(e->d_name, ".") || !strcmp(e->d_name, ".."))
			continue;
		int n = -1;
		if (sscanf(e->d_name, "n%d", &n) != 1 || n < 0 || n >= RACE_NAMES)
			fail("unexpected entry '%s'", e->d_name);
		if (listed[n])
			fail("entry '%s' listed twice", e->d_name);
		listed[n] = true;
	}
	closedir(d);
	struct stat st[RACE_NAMES];
	bool exists[RACE_NAMES];
	for (int n = 0; n < RACE_NAMES; n++) {
		exists[n] = lstat(P("race/n%d", n), &st[n]) == 0;
		if (!exists[n] && errno != ENOENT)
			fail("lstat n%d: %s", n, errname(errno));
		if (exists[n] != listed[n])
			fail("n%d: readdir says %s, lstat says %s", n,
			     listed[n] ? "present" : "absent", exists[n] ? "present" : "absent");
	}
	for (int n = 0; n < RACE_NAMES; n++) {
		if (!exists[n] || S_ISDIR(st[n].st_mode))
			continue;
		TRUE(S_ISREG(st[n].st_mode));
		unsigned names = 0;
		for (int m = 0; m < RACE_NAMES; m++)
			if (exists[m] && st[m].st_ino == st[n].st_ino)
				names++;
		if (st[n].st_nlink != names)
			fail("n%d (inode %llu): nlink %lu, but %u names in the directory", n,
			     (unsigned long long)st[n].st_ino, (unsigned long)st[n].st_nlink,
			     names);
		char buf[64] = {0};
		int fd = (int)OK(open(P("race/n%d", n), O_RDONLY));
		ssize_t len = OK(read(fd, buf, sizeof(buf) - 1));
		OK(close(fd));
		if (len != st[n].st_size)
			fail("n%d: read %zd bytes, size %lld", n, len, (long long)st[n].st_size);
		if (len && strncmp(buf, "content-", 8) != 0) {
			char hex[3 * 16 + 1] = "";
			for (int k = 0; k < len && k < 16; k++)
				snprintf(hex + 3 * k, 4, "%02x ", (unsigned char)buf[k]);
			fail(
			    "n%d (inode %llu, nlink %lu, size %lld): content was never written: %s",
			    n, (unsigned long long)st[n].st_ino, (unsigned long)st[n].st_nlink,
			    (long long)st[n].st_size, hex);
		}
	}
	for (int n = 0; n < RACE_NAMES; n++) {
		if (!exists[n])
			continue;
		if (S_ISDIR(st[n].st_mode)) {
			int dn = 0;
			DIR *sd = opendir(P("race/n%d", n));
			TRUE(sd != NULL);
			while ((e = readdir(sd)))
				dn++;
			closedir(sd);
			EQ(dn, 2);
		}
	}
}

struct test_group {
	const char *name;
	void (*fn)(void);
};
static const struct test_group groups[] = {
    {"open", t_open},		{"rw", t_rw},
    {"truncate", t_truncate},	{"stat", t_stat},
    {"dirs", t_dirs},		{"rename", t_rename},
    {"link", t_link},		{"symlink", t_symlink},
    {"readdir", t_readdir},	{"special", t_special},
    {"xattr", t_xattr},		{"statfs", t_statfs},
    {"sync", t_sync},		{"unlinked", t_unlinked},
    {"perm", t_perm},		{"names", t_names},
    {"semantics", t_semantics}, {"concurrent", t_concurrent},
};

int main(int argc, char **argv)
{
	if (argc < 2 || !strcmp(argv[1], "--help")) {
		fprintf(argc < 2 ? stderr : stdout, "Usage: posix_suite DIR [GROUP...]\nGroups:");
		for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++)
			fprintf(argc < 2 ? stderr : stdout, " %s", groups[i].name);
		fprintf(argc < 2 ? stderr : stdout, "\n");
		return argc < 2 ? 2 : 0;
	}
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: posix_suite needs root (chown, uid switching)\n");
		return 77;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	umask(0);
	snprintf(g_root, sizeof(g_root), "%s/posix.%d", argv[1], (int)getpid());
	if (mkdir(g_root, 0755) < 0) {
		fprintf(stderr, "FAIL setup: mkdir %s: %s\n", g_root, strerror(errno));
		return 1;
	}
	printf("posix_suite: %s\n", g_root);
	for (size_t i = 0; i < sizeof(groups) / sizeof(groups[0]); i++) {
		bool want = argc == 2;
		for (int a = 2; a < argc; a++)
			if (!strcmp(argv[a], groups[i].name))
				want = true;
		if (!want)
			continue;
		printf("[%s]\n", groups[i].name);
		groups[i].fn();
	}
	check("cleanup: remove the work directory");
	rm_rf(g_root);
	struct stat st;
	ERR(stat(g_root, &st), ENOENT);
	printf("posix_suite: all %d checks passed on %s\n", g_nchecks, argv[1]);
	return 0;
}
