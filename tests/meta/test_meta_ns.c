/* test_meta_ns.c — unit test of the strata-meta engine (meta/ns.h) on a
 * RocksDB in a temporary directory: every namespace operation and its
 * error cases, sessions and orphans, the GC queue, the cluster map,
 * persistence across reopen, a structural invariant check of the whole
 * tree, and two threads mutating one directory at once (with a figure for
 * creates per second). */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "meta/gc.h"
#include "meta/ns.h"
#include "tests/testutil.h"
#include "tests/meta/ns_testutil.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#define RENAME_EXCHANGE (1 << 1)
#endif
#define ROOT STRATA_ROOT_INO

static strata_ino_t mkdir_ok(struct ns *ns, strata_ino_t p, const char *name)
{
	struct strata_attr a;

	CHECK_EQ(ns_mkdir(ns, NULL, p, name, 0755, 1000, 1000, &a), 0);
	return a.ino;
}

static strata_ino_t file_ok(struct ns *ns, strata_ino_t p, const char *name)
{
	struct strata_attr a;

	CHECK_EQ(ns_mknod(ns, NULL, p, name, S_IFREG | 0644, 0, 1000, 1000, &a), 0);
	return a.ino;
}

static uint32_t nlink_of(struct ns *ns, strata_ino_t ino)
{
	struct strata_attr a;

	CHECK_EQ(ns_getattr(ns, ino, &a), 0);
	return a.nlink;
}

/* ---- invariant check: walk the tree, count links ----------------------- */

struct walk {
	struct ns *ns;
	strata_ino_t inos[20000];
	uint32_t links[20000];
	int n;
};

static void count_link(struct walk *w, strata_ino_t ino)
{
	for (int i = 0; i < w->n; i++)
		if (w->inos[i] == ino) {
			w->links[i]++;
			return;
		}
	CHECK(w->n < 20000);
	w->inos[w->n] = ino;
	w->links[w->n++] = 1;
}

struct collect {
	struct meta_dirent *ents;
	int n;
};

static int collect_ent(void *ctx, const struct meta_dirent *d)
{
	struct collect *c = ctx;

	c->ents[c->n++] = *d;
	return 0;
}

static void walk_dir(struct walk *w, strata_ino_t dir)
{
	static struct meta_dirent ents[NS_READDIR_MAX];
	char after[STRATA_NAME_MAX + 1] = "";
	int subdirs = 0, more = 1;

	while (more) {
		struct collect c = {ents, 0};
		int n = ns_readdir(w->ns, dir, after, true, 100, collect_ent, &c, &more);
		CHECK(n >= 0);
		struct meta_dirent copy[100];
		memcpy(copy, ents, (size_t)n * sizeof(*ents));
		if (n)
			snprintf(after, sizeof(after), "%s", copy[n - 1].name);
		for (int i = 0; i < n; i++) {
			CHECK_EQ(copy[i].attr.ino, copy[i].ino);
			if (S_ISDIR(copy[i].attr.mode)) {
				subdirs++;
				walk_dir(w, copy[i].ino);
			} else {
				count_link(w, copy[i].ino);
			}
		}
	}
	CHECK_EQ(nlink_of(w->ns, dir), 2 + subdirs);
}

static void check_invariants(struct ns *ns)
{
	struct walk *w = calloc(1, sizeof(*w));

	w->ns = ns;
	walk_dir(w, ROOT);
	for (int i = 0; i < w->n; i++)
		CHECK_EQ(nlink_of(ns, w->inos[i]), w->links[i]);
	free(w);
}

/* ---- tests ---------------------------------------------------------------- */

static void test_root_and_names(struct ns *ns)
{
	struct strata_attr a;
	char long_name[300];

	CHECK_EQ(ns_getattr(ns, ROOT, &a), 0);
	CHECK_EQ(a.mode, S_IFDIR | 0755);
	CHECK_EQ(a.uid, 0);
	CHECK_EQ(a.nlink, 2);
	CHECK_EQ(ns_getattr(ns, 999999, &a), -ENOENT);
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "", 0755, 0, 0, &a), -EINVAL);
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, ".", 0755, 0, 0, &a), -EINVAL);
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "..", 0755, 0, 0, &a), -EINVAL);
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "a/b", 0755, 0, 0, &a), -EINVAL);
	memset(long_name, 'x', 256);
	long_name[256] = 0;
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, long_name, 0755, 0, 0, &a), -ENAMETOOLONG);
	long_name[255] = 0;
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, long_name, 0755, 0, 0, &a), 0);
	CHECK_EQ(ns_rmdir(ns, NULL, ROOT, long_name), 0);
	CHECK_EQ(ns_lookup(ns, ROOT, "nope", &a), -ENOENT);
}

static void test_create_remove(struct ns *ns)
{
	struct strata_attr a, d0, d1;
	uint64_t sid;

	strata_ino_t d = mkdir_ok(ns, ROOT, "d");
	CHECK_EQ(nlink_of(ns, ROOT), 3);
	CHECK_EQ(ns_getattr(ns, d, &d0), 0);
	usleep(2000);
	strata_ino_t f = file_ok(ns, d, "f");
	CHECK_EQ(ns_getattr(ns, d, &d1), 0);
	CHECK(d1.mtime_ns > d0.mtime_ns && d1.ctime_ns > d0.ctime_ns);
	CHECK_EQ(ns_lookup(ns, d, "f", &a), 0);
	CHECK_EQ(a.ino, f);
	CHECK_EQ(a.nlink, 1);
	CHECK_EQ(a.layout.chunk_size, STRATA_DEFAULT_CHUNK_SIZE);
	CHECK_EQ(ns_mkdir(ns, NULL, d, "f", 0755, 0, 0, &a), -EEXIST);
	CHECK_EQ(ns_mknod(ns, NULL, f, "x", S_IFREG | 0644, 0, 0, 0, &a), -ENOTDIR);
	CHECK_EQ(ns_lookup(ns, f, "x", &a), -ENOTDIR);
	CHECK_EQ(ns_mknod(ns, NULL, d, "dir", S_IFDIR | 0755, 0, 0, 0, &a), -EINVAL);
	CHECK_EQ(ns_mknod(ns, NULL, d, "fifo", S_IFIFO | 0644, 0, 0, 0, &a), 0);
	CHECK_EQ(ns_mknod(ns, NULL, d, "chr", S_IFCHR | 0644, 0x0501, 0, 0, &a), 0);
	CHECK_EQ(a.rdev, 0x0501);
	CHECK_EQ(ns_mknod(ns, NULL, 12345678, "x", S_IFREG | 0644, 0, 0, 0, &a), -ENOENT);

	/* create: O_EXCL, existing open, O_TRUNC */
	CHECK_EQ(ns_create(ns, NULL, d, "c", 0600, 1, 2, O_CREAT | O_EXCL | O_RDWR, "cl", &a, &sid),
		 0);
	strata_ino_t c = a.ino;
	CHECK_EQ(a.mode, S_IFREG | 0600);
	CHECK_EQ(ns_create(ns, NULL, d, "c", 0600, 1, 2, O_CREAT | O_EXCL, "cl", &a, &sid),
		 -EEXIST);
	CHECK_EQ(ns_set_length(ns, c, 5000, -1), 0);
	CHECK_EQ(ns_create(ns, NULL, d, "c", 0600, 1, 2, O_CREAT | O_RDWR, "cl", &a, &sid), 0);
	CHECK_EQ(a.size, 5000);
	CHECK_EQ(
	    ns_create(ns, NULL, d, "c", 0600, 1, 2, O_CREAT | O_TRUNC | O_RDWR, "cl", &a, &sid), 0);
	CHECK_EQ(a.size, 0);
	CHECK_EQ(a.ino, c);
	CHECK_EQ(ns_session_count(ns, c), 3);
	CHECK_EQ(ns_create(ns, NULL, ROOT, "d", 0600, 1, 2, O_CREAT, "cl", &a, &sid), -EISDIR);
	CHECK_EQ(ns_clear_sessions(ns, "cl"), 3);
	CHECK_EQ(ns_session_count(ns, c), 0);

	/* unlink / rmdir rules */
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "d"), -EISDIR);
	CHECK_EQ(ns_rmdir(ns, NULL, d, "f"), -ENOTDIR);
	CHECK_EQ(ns_rmdir(ns, NULL, ROOT, "d"), -ENOTEMPTY);
	CHECK_EQ(ns_unlink(ns, NULL, d, "missing"), -ENOENT);
	CHECK_EQ(ns_unlink(ns, NULL, d, "f"), 0);
	CHECK_EQ(ns_getattr(ns, f, &a), -ENOENT);
	CHECK_EQ(ns_unlink(ns, NULL, d, "fifo"), 0);
	CHECK_EQ(ns_unlink(ns, NULL, d, "chr"), 0);
	CHECK_EQ(ns_unlink(ns, NULL, d, "c"), 0);
	CHECK_EQ(ns_rmdir(ns, NULL, ROOT, "d"), 0);
	CHECK_EQ(nlink_of(ns, ROOT), 2);
	CHECK_EQ(ns_getattr(ns, d, &a), -ENOENT);
}

static void test_links(struct ns *ns)
{
	struct strata_attr a;
	char buf[64];

	strata_ino_t d = mkdir_ok(ns, ROOT, "ln");
	strata_ino_t f = file_ok(ns, d, "f");
	CHECK_EQ(ns_link(ns, NULL, f, d, "g", &a), 0);
	CHECK_EQ(a.nlink, 2);
	CHECK_EQ(ns_link(ns, NULL, f, d, "g", &a), -EEXIST);
	CHECK_EQ(ns_link(ns, NULL, d, ROOT, "dd", &a), -EPERM);
	CHECK_EQ(ns_unlink(ns, NULL, d, "f"), 0);
	CHECK_EQ(nlink_of(ns, f), 1);
	CHECK_EQ(ns_symlink(ns, NULL, d, "s", "target/path", 3, 4, &a), 0);
	CHECK_EQ(a.mode, S_IFLNK | 0777);
	CHECK_EQ(a.size, 11);
	CHECK_EQ(ns_readlink(ns, a.ino, buf, sizeof(buf)), 11);
	CHECK(strcmp(buf, "target/path") == 0);
	CHECK_EQ(ns_readlink(ns, a.ino, buf, 5), -ERANGE);
	CHECK_EQ(ns_readlink(ns, f, buf, sizeof(buf)), -EINVAL);
	CHECK_EQ(ns_symlink(ns, NULL, d, "s2", "", 0, 0, &a), -ENOENT);
	check_invariants(ns);
}

static void test_readdir(struct ns *ns)
{
	static struct meta_dirent ents[NS_READDIR_MAX];
	char name[32], after[STRATA_NAME_MAX + 1] = "", prev[STRATA_NAME_MAX + 1] = "";
	int more = 1, total = 0;

	strata_ino_t d = mkdir_ok(ns, ROOT, "rd");
	for (int i = 0; i < 53; i++) {
		snprintf(name, sizeof(name), "e%03d", (i * 37) % 53);
		if (i % 5 == 0)
			mkdir_ok(ns, d, name);
		else
			file_ok(ns, d, name);
	}
	while (more) {
		struct collect c = {ents, 0};
		int n = ns_readdir(ns, d, after, false, 7, collect_ent, &c, &more);
		CHECK(n >= 0 && n <= 7);
		for (int i = 0; i < n; i++) {
			CHECK(strcmp(ents[i].name, prev) > 0);
			snprintf(prev, sizeof(prev), "%s", ents[i].name);
			CHECK(ents[i].ino != 0 && (ents[i].mode & S_IFMT) != 0);
		}
		total += n;
		if (n)
			snprintf(after, sizeof(after), "%s", ents[n - 1].name);
	}
	CHECK_EQ(total, 53);
	struct collect c = {ents, 0};
	CHECK_EQ(ns_readdir(ns, d, "e050", true, 100, collect_ent, &c, &more), 2);
	CHECK_EQ(more, 0);
	CHECK(strcmp(ents[0].name, "e051") == 0 && ents[0].attr.ino == ents[0].ino);
	CHECK(S_ISDIR(ents[0].attr.mode)); /* e051 is i == 20 */
	strata_ino_t file = file_ok(ns, ROOT, "rd-file");
	c.n = 0;
	CHECK_EQ(ns_readdir(ns, file, "", false, 10, collect_ent, &c, &more), -ENOTDIR);
	CHECK_EQ(nlink_of(ns, d), 2 + 11);
	check_invariants(ns);
}

static void test_rename(struct ns *ns)
{
	struct strata_attr a, b;

	strata_ino_t r = mkdir_ok(ns, ROOT, "rn");
	strata_ino_t x = mkdir_ok(ns, r, "x"), y = mkdir_ok(ns, r, "y");
	strata_ino_t f = file_ok(ns, x, "f");
	file_ok(ns, x, "g");
	/* same dir, cross dir */
	CHECK_EQ(ns_rename(ns, NULL, x, "f", x, "f2", 0), 0);
	CHECK_EQ(ns_lookup(ns, x, "f", &a), -ENOENT);
	CHECK_EQ(ns_rename(ns, NULL, x, "f2", y, "f", 0), 0);
	CHECK_EQ(ns_lookup(ns, y, "f", &a), 0);
	CHECK_EQ(a.ino, f);
	/* replace a file (the old one goes) */
	strata_ino_t g = file_ok(ns, y, "g");
	CHECK_EQ(ns_rename(ns, NULL, y, "f", y, "g", 0), 0);
	CHECK_EQ(ns_getattr(ns, g, &a), -ENOENT);
	CHECK_EQ(ns_rename(ns, NULL, y, "missing", y, "z", 0), -ENOENT);
	/* dir moves: nlink follows */
	strata_ino_t sub = mkdir_ok(ns, x, "sub");
	CHECK_EQ(nlink_of(ns, x), 3);
	CHECK_EQ(ns_rename(ns, NULL, x, "sub", y, "sub", 0), 0);
	CHECK_EQ(nlink_of(ns, x), 2);
	CHECK_EQ(nlink_of(ns, y), 3);
	/* loops */
	mkdir_ok(ns, sub, "deep");
	strata_ino_t deep;
	CHECK_EQ(ns_lookup(ns, sub, "deep", &a), 0);
	deep = a.ino;
	CHECK_EQ(ns_rename(ns, NULL, r, "y", deep, "y", 0), -EINVAL);
	CHECK_EQ(ns_rename(ns, NULL, y, "sub", sub, "self", 0), -EINVAL);
	CHECK_EQ(ns_rename(ns, NULL, r, "y", deep, "y", RENAME_EXCHANGE), -ENOENT);
	/* type rules */
	mkdir_ok(ns, y, "emptydir");
	CHECK_EQ(ns_rename(ns, NULL, y, "g", y, "emptydir", 0), -EISDIR);
	CHECK_EQ(ns_rename(ns, NULL, y, "emptydir", y, "g", 0), -ENOTDIR);
	CHECK_EQ(ns_rename(ns, NULL, x, "g", y, "g", RENAME_NOREPLACE), -EEXIST);
	CHECK_EQ(ns_rename(ns, NULL, r, "x", y, "sub", 0), -ENOTEMPTY);
	CHECK_EQ(ns_rename(ns, NULL, x, "g", y, "g", RENAME_NOREPLACE | RENAME_EXCHANGE), -EINVAL);
	/* replace an empty dir with a dir from another parent */
	uint32_t ny = nlink_of(ns, y);
	mkdir_ok(ns, x, "mv");
	CHECK_EQ(ns_rename(ns, NULL, x, "mv", y, "emptydir", 0), 0);
	CHECK_EQ(nlink_of(ns, y), ny);
	CHECK_EQ(nlink_of(ns, x), 2);
	/* exchange a file and a dir across directories */
	CHECK_EQ(ns_lookup(ns, x, "g", &a), 0);
	CHECK_EQ(ns_rename(ns, NULL, x, "g", y, "sub", RENAME_EXCHANGE), 0);
	CHECK_EQ(ns_lookup(ns, x, "g", &b), 0);
	CHECK_EQ(b.ino, sub);
	CHECK_EQ(ns_lookup(ns, y, "sub", &b), 0);
	CHECK_EQ(b.ino, a.ino);
	CHECK_EQ(nlink_of(ns, x), 3);
	CHECK_EQ(nlink_of(ns, y), ny - 1);
	/* hard links to the same inode: no-op */
	CHECK_EQ(ns_link(ns, NULL, a.ino, y, "alias", &b), 0);
	CHECK_EQ(ns_rename(ns, NULL, y, "sub", y, "alias", 0), 0);
	CHECK_EQ(ns_lookup(ns, y, "sub", &b), 0);
	CHECK_EQ(nlink_of(ns, a.ino), 2);
	check_invariants(ns);
}

static void test_setattr(struct ns *ns)
{
	struct strata_setattr sa = {0};
	struct strata_attr a, before;

	strata_ino_t d = mkdir_ok(ns, ROOT, "sa");
	strata_ino_t f = file_ok(ns, d, "f");
	CHECK_EQ(ns_getattr(ns, f, &before), 0);
	sa.valid = STRATA_SET_MODE | STRATA_SET_UID | STRATA_SET_GID | STRATA_SET_SIZE;
	sa.mode = 04711;
	sa.uid = 7;
	sa.gid = 8;
	sa.size = 12345;
	CHECK_EQ(ns_setattr(ns, f, &sa, &a), 0);
	CHECK_EQ(a.mode, S_IFREG | 04711);
	CHECK_EQ(a.uid, 7);
	CHECK_EQ(a.gid, 8);
	CHECK_EQ(a.size, 12345);
	CHECK(a.ctime_ns >= before.ctime_ns);
	sa =
	    (struct strata_setattr){.valid = STRATA_SET_ATIME | STRATA_SET_MTIME | STRATA_SET_CTIME,
				    .atime_ns = 111,
				    .mtime_ns = 222,
				    .ctime_ns = 333};
	CHECK_EQ(ns_setattr(ns, f, &sa, &a), 0);
	CHECK_EQ(a.atime_ns, 111);
	CHECK_EQ(a.mtime_ns, 222);
	CHECK_EQ(a.ctime_ns, 333);
	sa.valid = STRATA_SET_ATIME_NOW | STRATA_SET_MTIME_NOW;
	CHECK_EQ(ns_setattr(ns, f, &sa, &a), 0);
	CHECK(a.atime_ns > 1000000000000000000ll && a.mtime_ns > 1000000000000000000ll);
	sa.valid = STRATA_SET_SIZE;
	CHECK_EQ(ns_setattr(ns, d, &sa, &a), -EISDIR);
	sa = (struct strata_setattr){.valid = STRATA_SET_LAYOUT, .chunk_size = 4u << 20};
	CHECK_EQ(ns_setattr(ns, f, &sa, &a), -ENOTDIR);
	CHECK_EQ(ns_setattr(ns, d, &sa, &a), 0);
	CHECK_EQ(a.layout.chunk_size, 4u << 20);
	sa.chunk_size = 3u << 20;
	CHECK_EQ(ns_setattr(ns, d, &sa, &a), -EINVAL);
	sa.chunk_size = 32u << 10;
	CHECK_EQ(ns_setattr(ns, d, &sa, &a), -EINVAL);
	sa.chunk_size = 128u << 20;
	CHECK_EQ(ns_setattr(ns, d, &sa, &a), -EINVAL);
	strata_ino_t g = file_ok(ns, d, "g");
	CHECK_EQ(ns_getattr(ns, g, &a), 0);
	CHECK_EQ(a.layout.chunk_size, 4u << 20);
	strata_ino_t sub = mkdir_ok(ns, d, "sub");
	CHECK_EQ(ns_getattr(ns, sub, &a), 0);
	CHECK_EQ(a.layout.chunk_size, 4u << 20);
	CHECK_EQ(ns_setattr(ns, 424242, &sa, &a), -ENOENT);
	/* set_length: max(size, length), mtime */
	CHECK_EQ(ns_set_length(ns, g, 100, 555), 0);
	CHECK_EQ(ns_set_length(ns, g, 50, -1), 0);
	CHECK_EQ(ns_getattr(ns, g, &a), 0);
	CHECK_EQ(a.size, 100);
	CHECK_EQ(a.mtime_ns, 555);
	CHECK_EQ(ns_set_length(ns, d, 50, -1), -EISDIR);
}

static void test_xattr(struct ns *ns)
{
	static char big[STRATA_XATTR_SIZE_MAX + 1];
	char name[300];
	void *v = NULL;
	char *list = NULL;
	size_t n;

	strata_ino_t f = file_ok(ns, ROOT, "xa");
	CHECK_EQ(ns_getxattr(ns, f, "user.a", &v, &n), -ENODATA);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.a", "1", 1, XATTR_REPLACE), -ENODATA);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.a", "1", 1, XATTR_CREATE), 0);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.a", "2", 1, XATTR_CREATE), -EEXIST);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.a", "22", 2, XATTR_REPLACE), 0);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.b", "", 0, 0), 0);
	CHECK_EQ(ns_getxattr(ns, f, "user.a", &v, &n), 0);
	CHECK(n == 2 && memcmp(v, "22", 2) == 0);
	free(v);
	v = NULL;
	CHECK_EQ(ns_getxattr(ns, f, "user.b", &v, &n), 0);
	CHECK_EQ(n, 0);
	free(v);
	CHECK_EQ(ns_listxattr(ns, f, &list, &n), 0);
	CHECK(n == 14 && memcmp(list, "user.a\0user.b\0", 14) == 0);
	free(list);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.big", big, sizeof(big), 0), -E2BIG);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "user.big", big, sizeof(big) - 1, 0), 0);
	memset(name, 'n', 256);
	name[256] = 0;
	CHECK_EQ(ns_setxattr(ns, NULL, f, name, "1", 1, 0), -ERANGE);
	CHECK_EQ(ns_setxattr(ns, NULL, f, "", "1", 1, 0), -EINVAL);
	CHECK_EQ(ns_removexattr(ns, NULL, f, "user.a"), 0);
	CHECK_EQ(ns_removexattr(ns, NULL, f, "user.a"), -ENODATA);
	CHECK_EQ(ns_setxattr(ns, NULL, 777777, "user.a", "1", 1, 0), -ENOENT);
	for (int i = 0; i < NS_XATTR_COUNT_MAX; i++) {
		snprintf(name, sizeof(name), "user.n%d", i);
		int r = ns_setxattr(ns, NULL, f, name, "v", 1, 0);
		CHECK(r == 0 || (r == -ENOSPC && i >= NS_XATTR_COUNT_MAX - 2));
	}
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "xa"), 0); /* xattrs go with the inode */
	CHECK_EQ(ns_getxattr(ns, f, "user.b", &v, &n), -ENOENT);
}

static int gc_count(struct ns *ns, strata_ino_t ino)
{
	struct ns_gc_item items[64];
	int n = ns_gc_list(ns, items, 64), hits = 0;

	CHECK(n >= 0);
	for (int i = 0; i < n; i++)
		hits += items[i].ino == ino;
	return hits;
}

static int fake_remove(void *ctx, const struct ns_gc_item *it)
{
	return *(int *)ctx;
}

static void test_sessions_gc(struct ns *ns)
{
	struct strata_attr a;
	uint64_t s1, s2, s3;
	int fail = -EIO, ok = 0;

	CHECK_EQ(ns_create(ns, NULL, ROOT, "open", 0644, 0, 0, O_CREAT | O_RDWR, "A", &a, &s1), 0);
	strata_ino_t f = a.ino;
	CHECK_EQ(ns_open_file(ns, NULL, f, O_RDONLY, "B", &s2), 0);
	CHECK(s1 != s2);
	CHECK_EQ(ns_open_file(ns, NULL, ROOT, O_RDONLY, "B", &s3), -EISDIR);
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "open"), 0);
	CHECK_EQ(ns_getattr(ns, f, &a), 0); /* orphan */
	CHECK_EQ(a.nlink, 0);
	CHECK_EQ(ns_link(ns, NULL, f, ROOT, "back", &a), -ENOENT);
	CHECK_EQ(gc_count(ns, f), 0);
	CHECK_EQ(ns_close_file(ns, f, s1, 4096, 77), 0);
	CHECK_EQ(ns_close_file(ns, f, s1, -1, -1), -EBADF);
	CHECK_EQ(ns_getattr(ns, f, &a), 0);
	CHECK_EQ(a.size, 4096);
	CHECK_EQ(ns_clear_sessions(ns, "B"), 1); /* last session: now collected */
	CHECK_EQ(ns_getattr(ns, f, &a), -ENOENT);
	CHECK_EQ(gc_count(ns, f), 1);
	struct gc_stats st;
	CHECK_EQ(gc_pass(ns, 0, GC_BATCH, GC_WORKERS, fake_remove, &fail, NULL, &st), 0);
	CHECK(st.failed >= 1);
	CHECK_EQ(gc_count(ns, f), 1); /* failure: stays queued */
	CHECK_EQ(gc_pass(ns, 0, GC_BATCH, GC_WORKERS, fake_remove, &ok, NULL, &st), 0);
	CHECK(st.done >= 1);
	CHECK_EQ(st.failed, 0);
	CHECK_EQ(gc_count(ns, f), 0);
	/* unlink with no session: straight to the queue */
	strata_ino_t g = file_ok(ns, ROOT, "plain");
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "plain"), 0);
	CHECK_EQ(gc_count(ns, g), 1);
	CHECK_EQ(ns_gc_done(ns, g), 0);
	/* rename over an open file orphans it */
	CHECK_EQ(ns_create(ns, NULL, ROOT, "victim", 0644, 0, 0, O_CREAT | O_RDWR, "A", &a, &s1),
		 0);
	strata_ino_t v = a.ino;
	file_ok(ns, ROOT, "winner");
	CHECK_EQ(ns_rename(ns, NULL, ROOT, "winner", ROOT, "victim", 0), 0);
	CHECK_EQ(ns_getattr(ns, v, &a), 0);
	CHECK_EQ(a.nlink, 0);
	CHECK_EQ(ns_close_file(ns, v, s1, -1, -1), 0);
	CHECK_EQ(ns_getattr(ns, v, &a), -ENOENT);
	CHECK_EQ(gc_count(ns, v), 1);
	CHECK_EQ(ns_gc_done(ns, v), 0);
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "victim"), 0);
	while (ns_gc_list(ns, (struct ns_gc_item[4]){}, 4) > 0) {
		CHECK_EQ(gc_pass(ns, 0, GC_BATCH, GC_WORKERS, fake_remove, &ok, NULL, &st), 0);
		CHECK(st.done > 0);
	}
}

static int64_t mono_ms(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* A remove() that takes 5 ms and records how many run at once. */
struct slow_remove {
	atomic_int inflight, peak, calls;
	strata_ino_t fail_ino; /* this one fails */
};

static int slow_remove(void *ctx, const struct ns_gc_item *it)
{
	struct slow_remove *s = ctx;
	int now = atomic_fetch_add(&s->inflight, 1) + 1, peak = atomic_load(&s->peak);

	while (now > peak && !atomic_compare_exchange_weak(&s->peak, &peak, now))
		;
	atomic_fetch_add(&s->calls, 1);
	usleep(5000);
	atomic_fetch_sub(&s->inflight, 1);
	return it->ino == s->fail_ino ? -EHOSTUNREACH : 0;
}

static int gc_queued(struct ns *ns)
{
	_cleanup_free_ struct ns_gc_item *items = calloc(4096, sizeof(*items));
	CHECK(items);
	return ns_gc_list(ns, items, 4096);
}

/* The collector takes large batches, removes in parallel, keeps a failure
 * queued, walks the whole queue without pausing between full batches, and
 * retries the failure later. The old GC took 64 inodes a second, one at a
 * time: 300 removals of 5 ms needed 5 passes and at least 1.5 s. */
static void test_gc_throughput(struct ns *ns)
{
	enum { NFILES = 300 };
	struct slow_remove sr = {0};
	strata_ino_t inos[NFILES];
	char name[32];

	strata_ino_t d = mkdir_ok(ns, ROOT, "gcd");
	for (int i = 0; i < NFILES; i++) {
		snprintf(name, sizeof(name), "f%d", i);
		inos[i] = file_ok(ns, d, name);
		CHECK_EQ(ns_unlink(ns, NULL, d, name), 0);
	}
	CHECK_EQ(gc_queued(ns), NFILES);
	sr.fail_ino = inos[NFILES / 2];
	struct gc_stats st;
	int64_t t0 = mono_ms();
	CHECK_EQ(gc_pass(ns, 0, GC_BATCH, GC_WORKERS, slow_remove, &sr, NULL, &st), 0);
	int64_t ms = mono_ms() - t0;
	fprintf(stderr, "gc: one pass, %d removals of 5 ms: %lld ms, peak %d in flight\n",
		st.listed, (long long)ms, atomic_load(&sr.peak));
	CHECK_EQ(st.listed, NFILES);
	CHECK_EQ(st.done, NFILES - 1);
	CHECK_EQ(st.failed, 1);
	CHECK(atomic_load(&sr.peak) >= 2);
	CHECK_EQ(gc_queued(ns), 1); /* the failure stays queued */

	/* the cursor: a pass after the last inode sees nothing */
	CHECK_EQ(gc_pass(ns, inos[NFILES - 1], GC_BATCH, 1, slow_remove, &sr, NULL, &st), 0);
	CHECK_EQ(st.listed, 0);

	/* the thread: retries the failure after a backoff once it succeeds */
	sr.fail_ino = 0;
	struct gc *g = NULL;
	struct gc_opts o = {.remove = slow_remove, .ctx = &sr, .idle_ms = 50};
	CHECK_EQ(gc_start(ns, &o, &g), 0);
	for (int i = 0; i < 200 && gc_queued(ns) > 0; i++)
		usleep(10000);
	CHECK_EQ(gc_queued(ns), 0);
	gc_stop(g);
	CHECK_EQ(ns_rmdir(ns, NULL, ROOT, "gcd"), 0);
}

/* Two targets of one node on one filesystem (same fsid) count once; the same
 * fsid on another node is another machine's filesystem and counts too. */
static void test_statfs_shared_fs(struct ns *ns, uint32_t node, struct mgmt_target_info *t,
				  uint32_t node2, struct mgmt_target_info *t2)
{
	struct strata_statfs sf;

	for (int i = 0; i < 2; i++)
		t[i] = (struct mgmt_target_info){t[i].target_id, "", 2000, 1000, 42};
	snprintf(t[0].path, sizeof(t[0].path), "/t0");
	snprintf(t[1].path, sizeof(t[1].path), "/t1");
	CHECK_EQ(ns_heartbeat(ns, node, t, 2), 0);
	CHECK_EQ(ns_statfs(ns, &sf), 0);
	CHECK_EQ(sf.total_bytes, 2000 + 4000);
	CHECK_EQ(sf.free_bytes, 1000 + 4000);
	t2->fsid = 42;
	CHECK_EQ(ns_heartbeat(ns, node2, t2, 1), 0);
	CHECK_EQ(ns_statfs(ns, &sf), 0);
	CHECK_EQ(sf.total_bytes, 2000 + 4000);
	/* fsid 0 (unknown, an older chunkserver): every target counts */
	t[0].fsid = t[1].fsid = 0;
	CHECK_EQ(ns_heartbeat(ns, node, t, 2), 0);
	CHECK_EQ(ns_statfs(ns, &sf), 0);
	CHECK_EQ(sf.total_bytes, 2000 + 2000 + 4000);
	/* the fsid survives in the target record (reopen reads it back) */
	t[0].fsid = t[1].fsid = 42;
	CHECK_EQ(ns_heartbeat(ns, node, t, 2), 0);
}

static void test_cluster(struct ns *ns)
{
	struct mgmt_target_info t[3] = {{0, "/t0", 1000, 600}, {0, "/t1", 2000, 1000}};
	struct strata_routing rt;
	struct strata_statfs sf;
	struct strata_attr a;
	uint32_t node = 0;

	CHECK_EQ(ns_routing(ns, &rt), 0);
	uint64_t v0 = rt.version;
	CHECK_EQ(rt.ntables, 0);
	strata_routing_done(&rt);
	strata_ino_t early = mkdir_ok(ns, ROOT, "early");
	CHECK_EQ(ns_register(ns, &node, "127.0.0.1:7001", t, 2), 0);
	CHECK(node != 0 && t[0].target_id && t[1].target_id && t[0].target_id != t[1].target_id);
	CHECK_EQ(ns_routing(ns, &rt), 0);
	CHECK(rt.version > v0);
	CHECK_EQ(rt.ntargets, 2);
	CHECK_EQ(rt.nchains, 2);
	CHECK_EQ(rt.ntables, 1);
	CHECK_EQ(rt.tables[0].table_id, 1);
	CHECK_EQ(rt.tables[0].nchains, 2);
	CHECK(strcmp(rt.targets[0].addr, "127.0.0.1:7001") == 0);
	CHECK_EQ(rt.chains[0].ntargets, 1);
	uint64_t v1 = rt.version;
	strata_routing_done(&rt);
	CHECK_EQ(ns_getattr(ns, ROOT, &a), 0);
	CHECK_EQ(a.layout.table_id, 1);
	strata_ino_t f = file_ok(ns, ROOT, "striped");
	CHECK_EQ(ns_getattr(ns, f, &a), 0);
	CHECK_EQ(a.layout.table_id, 1);
	CHECK(a.layout.stripe_seed != 0);
	strata_ino_t f2 = file_ok(ns, early, "f"); /* dir made before any table */
	CHECK_EQ(ns_getattr(ns, f2, &a), 0);
	CHECK_EQ(a.layout.table_id, 1);
	/* same ids again: nothing changes */
	CHECK_EQ(ns_register(ns, &node, "127.0.0.1:7001", t, 2), 0);
	CHECK_EQ(ns_routing(ns, &rt), 0);
	CHECK_EQ(rt.version, v1);
	CHECK_EQ(rt.ntables, 1);
	strata_routing_done(&rt);
	/* a second node with one target: table 2 with all three chains */
	uint32_t node2 = 0;
	struct mgmt_target_info t2 = {0, "/u0", 4000, 4000};
	CHECK_EQ(ns_register(ns, &node2, "127.0.0.1:7002", &t2, 1), 0);
	CHECK(node2 != node);
	CHECK_EQ(ns_routing(ns, &rt), 0);
	CHECK_EQ(rt.ntables, 2);
	CHECK_EQ(rt.tables[1].table_id, 2);
	CHECK_EQ(rt.tables[1].nchains, 3);
	strata_routing_done(&rt);
	CHECK_EQ(ns_getattr(ns, file_ok(ns, ROOT, "newer"), &a), 0);
	CHECK_EQ(a.layout.table_id, 2);
	CHECK_EQ(ns_getattr(ns, f, &a), 0);
	CHECK_EQ(a.layout.table_id, 1); /* fixed at creation */
	/* heartbeats feed statfs */
	t[0].free_bytes = 100;
	CHECK_EQ(ns_heartbeat(ns, node, t, 2), 0);
	CHECK_EQ(ns_statfs(ns, &sf), 0);
	CHECK_EQ(sf.total_bytes, 7000);
	CHECK_EQ(sf.free_bytes, 100 + 1000 + 4000);
	CHECK(sf.used_inodes > 1);
	CHECK_EQ(ns_heartbeat(ns, 99, t, 2), -ENOENT);
	test_statfs_shared_fs(ns, node, t, node2, &t2);
}

/* ---- concurrency ----------------------------------------------------------- */

struct worker {
	struct ns *ns;
	strata_ino_t dir;
	int id, n;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	struct strata_attr a;
	uint64_t sid;
	char name[64], to[64];

	for (int i = 0; i < w->n; i++) {
		snprintf(name, sizeof(name), "w%d-%05d", w->id, i);
		CHECK_EQ(ns_create(w->ns, NULL, w->dir, name, 0644, 0, 0, O_CREAT | O_EXCL, "conc",
				   &a, &sid),
			 0);
		CHECK_EQ(ns_close_file(w->ns, a.ino, sid, 10, -1), 0);
		if (i % 10 == 0) {
			snprintf(to, sizeof(to), "m%d-%05d", w->id, i);
			CHECK_EQ(ns_mkdir(w->ns, NULL, w->dir, to, 0755, 0, 0, &a), 0);
			CHECK_EQ(ns_rename(w->ns, NULL, w->dir, name, a.ino, "moved", 0), 0);
		}
	}
	return NULL;
}

static void test_concurrency(struct ns *ns)
{
	struct worker w[2];
	pthread_t th[2];
	struct timespec t0, t1;
	const int n = 2000;

	strata_ino_t d = mkdir_ok(ns, ROOT, "conc");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 2; i++) {
		w[i] = (struct worker){ns, d, i, n};
		CHECK_EQ(pthread_create(&th[i], NULL, worker_main, &w[i]), 0);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	fprintf(stderr, "concurrency: %d create+close by 2 threads in %.2f s (%.0f creates/s)\n",
		2 * n, s, 2 * n / s);
	CHECK_EQ(nlink_of(ns, d), 2 + 2 * (n / 10));
	check_invariants(ns);
}

static void bench_create(struct ns *ns)
{
	struct timespec t0, t1;
	struct strata_attr a;
	char name[32];
	const int n = 5000;

	strata_ino_t d = mkdir_ok(ns, ROOT, "bench");
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < n; i++) {
		snprintf(name, sizeof(name), "b%06d", i);
		CHECK_EQ(ns_mknod(ns, NULL, d, name, S_IFREG | 0644, 0, 0, 0, &a), 0);
	}
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	fprintf(stderr, "bench: %d mknod in %.2f s (%.0f/s, one thread, sanitizer build)\n", n, s,
		n / s);
}

static void test_persistence(const char *dir)
{
	struct ns *ns = test_ns_open(dir);
	struct strata_attr a, b;
	struct strata_routing rt;

	strata_ino_t d = mkdir_ok(ns, ROOT, "persist");
	CHECK_EQ(ns_setxattr(ns, NULL, d, "user.k", "v", 1, 0), 0);
	uint64_t used = 0;
	struct strata_statfs sf;
	CHECK_EQ(ns_statfs(ns, &sf), 0);
	used = sf.used_inodes;
	ns_close(ns);
	ns = test_ns_open(dir);
	CHECK_EQ(ns_lookup(ns, ROOT, "persist", &a), 0);
	CHECK_EQ(a.ino, d);
	CHECK_EQ(ns_lookup(ns, ROOT, "striped", &b), 0);
	CHECK_EQ(ns_statfs(ns, &sf), 0);
	CHECK_EQ(sf.used_inodes, used);
	CHECK_EQ(ns_routing(ns, &rt), 0);
	CHECK_EQ(rt.ntables, 2);
	strata_routing_done(&rt);
	strata_ino_t n = mkdir_ok(ns, ROOT, "after-reopen");
	CHECK(n > d); /* ids never reused */
	CHECK_EQ(ns_getattr(ns, n, &a), 0);
	CHECK_EQ(a.layout.table_id, 2);
	check_invariants(ns);
	ns_close(ns);
}

int main(void)
{
	char dir[] = "/tmp/test_meta_ns.XXXXXX";
	char cmd[256];

	CHECK(mkdtemp(dir) != NULL);
	struct ns *ns = test_ns_open(dir);
	test_root_and_names(ns);
	test_create_remove(ns);
	test_links(ns);
	test_readdir(ns);
	test_rename(ns);
	test_setattr(ns);
	test_xattr(ns);
	test_sessions_gc(ns);
	test_gc_throughput(ns);
	test_cluster(ns);
	test_concurrency(ns);
	bench_create(ns);
	CHECK_EQ(ns_sync(ns), 0);
	check_invariants(ns);
	ns_close(ns);
	test_persistence(dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
	fprintf(stderr, "test_meta_ns: ok\n");
	return 0;
}
