/* test_erofs.c — layers to tree to EROFS, checked three ways.
 *
 * Four layers (gzip, zstd, plain, and a generated stream with a file of more
 * than 4 GiB) exercise every entry type, whiteouts, opaque directories, hard
 * links across layers, a directory replaced by a symlink, xattrs (inline and
 * shared, security.capability), long names, large ids, sub-second mtimes,
 * multi-block directories, holes and chunk dedup. Then:
 *  1. the merged tree is checked in memory (tree_lookup),
 *  2. the image is checked by fsck.erofs when erofs-utils is installed,
 *  3. as root, the image is mounted by the kernel (file-backed EROFS with the
 *     blobs as devices) and every path is compared against the expected
 *     final state: type, mode, owner, mtime, size, link count, inode sharing,
 *     symlink target, rdev, xattrs and content; and nothing else exists.
 * Also: merge errors (parent is a symlink, dangling / directory hard links).
 * Exit 0 pass, 1 fail, 77 when the kernel cannot mount at all (reason on
 * stderr). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <unistd.h>

#include "imagesvc/blobstore.h"
#include "fs/cleanup.h"
#include "imagesvc/erofs_writer.h"
#include "imagesvc/istream.h"
#include "imagesvc/tar.h"
#include "tests/imagesvc/tarbuild.h"
#include "imagesvc/tree.h"
#include "tests/testutil.h"

#define T0 1700000000
#define BIG_SIZE ((4ull << 30) + 8192)

struct spec {
	const char *path;
	char type; /* tar type: '0' '1' '2' '3' '4' '5' '6' */
	unsigned mode, uid, gid;
	int64_t mtime;
	unsigned nsec;
	uint64_t size;
	unsigned seed; /* content pattern */
	const char *link;
	unsigned major, minor;
	const char *xname, *xval;
	size_t xlen;
	const char *xname2, *xval2;
	unsigned nlink; /* expected */
};

static const char cap_val[] = "\x01\x00\x00\x02\x00\x20\x00\x00\x00\x00\x00\x00\x00\x00\x00\x00"
			      "\x00\x00\x00\x00";

static uint8_t content_byte(unsigned seed, uint64_t i)
{
	return (uint8_t)((i * (2 * seed + 1)) ^ (i >> 11) ^ seed);
}

/* seed 0 is all zeros (chunks that become holes) */
static void fill(uint8_t *p, unsigned seed, uint64_t off, size_t n)
{
	if (seed == 0) {
		memset(p, 0, n);
		return;
	}
	for (size_t i = 0; i < n; i++)
		p[i] = content_byte(seed, off + i);
}

/* Emits one entry: a PAX header when needed, then the ustar header and data. */
static void emit(struct tb *b, const struct spec *s)
{
	struct tb rec = {0};
	if (strlen(s->path) > 99)
		tb_pax_rec(&rec, "path", s->path, strlen(s->path));
	if (s->uid > 0777777 || s->gid > 0777777) {
		char v[24];
		snprintf(v, sizeof(v), "%u", s->uid);
		tb_pax_rec(&rec, "uid", v, strlen(v));
		snprintf(v, sizeof(v), "%u", s->gid);
		tb_pax_rec(&rec, "gid", v, strlen(v));
	}
	if (s->nsec) {
		char v[48];
		snprintf(v, sizeof(v), "%lld.%09u", (long long)s->mtime, s->nsec);
		tb_pax_rec(&rec, "mtime", v, strlen(v));
	}
	char k[300];
	if (s->xname) {
		snprintf(k, sizeof(k), "SCHILY.xattr.%s", s->xname);
		tb_pax_rec(&rec, k, s->xval, s->xlen ? s->xlen : strlen(s->xval));
	}
	if (s->xname2) {
		snprintf(k, sizeof(k), "SCHILY.xattr.%s", s->xname2);
		tb_pax_rec(&rec, k, s->xval2, strlen(s->xval2));
	}
	if (rec.len)
		tb_pax(b, 'x', &rec);
	tb_free(&rec);
	uint64_t size = s->type == '0' ? s->size : 0;
	tb_header(b, &(struct tb_hdr){.name = s->path,
				      .type = s->type,
				      .link = s->link,
				      .mode = s->mode,
				      .uid = s->uid & 0777777,
				      .gid = s->gid & 0777777,
				      .mtime = s->mtime,
				      .size = size,
				      .major = s->major,
				      .minor = s->minor});
	if (size) {
		uint8_t *d = malloc(size);
		fill(d, s->seed, 0, size);
		tb_raw(b, d, size);
		free(d);
		tb_pad(b);
	}
}

static void emit_all(struct tb *b, const struct spec *s, size_t n)
{
	for (size_t i = 0; i < n; i++)
		emit(b, &s[i]);
	tb_end(b);
}

#define D(p, m)                                                                                    \
	{                                                                                          \
		.path = p, .type = '5', .mode = m, .mtime = T0                                     \
	}
#define F(p, sz, sd)                                                                               \
	{                                                                                          \
		.path = p, .type = '0', .mode = 0644, .mtime = T0, .size = sz, .seed = sd          \
	}

static char long_name[300];
static char big_xval[4001]; /* filled in main(): leaves no room for inline data */
static char many_names[600][40];

static const struct spec layer0[] = {
    D("./", 0755),
    D("etc/", 0755),
    F("etc/passwd", 30, 1),
    F("etc/hosts", 5000, 2),
    D("bin/", 0755),
    {.path = "bin/sh", .type = '0', .mode = 0755, .mtime = T0, .size = 3 * 1048576 + 17, .seed = 3},
    {.path = "bin/ping",
     .type = '0',
     .mode = 04755,
     .mtime = T0,
     .size = 70000,
     .seed = 4,
     .xname = "security.capability",
     .xval = cap_val,
     .xlen = sizeof(cap_val) - 1,
     .xname2 = "user.comment",
     .xval2 = "pings"},
    {.path = "bin/ping6", .type = '1', .link = "bin/ping", .mtime = T0},
    D("opq/", 0700),
    F("opq/a", 10, 5),
    F("opq/b", 10, 6),
    D("del/", 0755),
    F("del/x", 10, 7),
    F("del/keep", 10, 8),
    F("delfile", 10, 9),
    D("replaceme/", 0755),
    F("replaceme/child", 10, 10),
    D("dev/", 0755),
    {.path = "dev/null", .type = '3', .mode = 0666, .mtime = T0, .major = 1, .minor = 3},
    {.path = "dev/sda", .type = '4', .mode = 0660, .mtime = T0, .gid = 6, .major = 8, .minor = 300},
    {.path = "dev/fifo", .type = '6', .mode = 0600, .mtime = T0},
    F("empty", 0, 0),
    {.path = "zeros", .type = '0', .mode = 0644, .mtime = T0, .size = 2 * 1048576 + 5, .seed = 0},
};

static const struct spec layer1[] = {
    {.path = ".wh.delfile", .type = '0', .mtime = T0},
    {.path = "del/.wh.x", .type = '0', .mtime = T0},
    D("opq/", 0750),
    {.path = "opq/.wh..wh..opq", .type = '0', .mtime = T0},
    F("opq/c", 10, 11),
    F("etc/passwd", 40, 12),
    F("etc/hosts2", 5000, 2), /* same bytes as etc/hosts: deduplicated */
    D("lib/", 0755),
    {.path = "lib/ping-link", .type = '1', .link = "bin/ping", .mtime = T0},
    {.path = "replaceme", .type = '2', .link = "../somewhere/else", .mode = 0777, .mtime = T0},
    /* umoci's order: the replaced directory's children whited out after the
     * entry that replaced it (nothing left to hide, not an error) */
    {.path = "replaceme/.wh.child", .type = '0', .mtime = T0},
    {.path = "ids",
     .type = '0',
     .mode = 0640,
     .uid = 100000,
     .gid = 70000,
     .mtime = T0 + 5,
     .nsec = 123456789,
     .size = 100,
     .seed = 13},
    {.path = "old", .type = '0', .mode = 0644, .mtime = 12345, .size = 1, .seed = 14},
    {.path = "/abs/path", .type = '0', .mode = 0644, .mtime = T0, .size = 3, .seed = 15},
    D("many/", 0755),
    D(".wh..wh.plnk/", 0700), /* AUFS bookkeeping: skipped */
    F(".wh..wh.plnk/1234.5678", 5, 19),
    {.path = "bigx-file",
     .type = '0',
     .mode = 0644,
     .mtime = T0,
     .size = 100,
     .seed = 18,
     .xname = "user.big",
     .xval = big_xval},
    {.path = "bigx-link",
     .type = '2',
     .link = "bigx-file",
     .mode = 0777,
     .mtime = T0,
     .xname = "trusted.big",
     .xval = big_xval},
};

/* Expected final state (nlink 0 means "not checked"). */
static const struct spec final_tree[] = {
    {.path = "", .type = '5', .mode = 0755, .mtime = T0},
    D("etc", 0755),
    F("etc/passwd", 40, 12),
    F("etc/hosts", 5000, 2),
    F("etc/hosts2", 5000, 2),
    D("bin", 0755),
    {.path = "bin/sh", .type = '0', .mode = 0755, .mtime = T0, .size = 3 * 1048576 + 17, .seed = 3},
    {.path = "bin/ping",
     .type = '0',
     .mode = 04755,
     .mtime = T0,
     .size = 70000,
     .seed = 4,
     .xname = "security.capability",
     .xval = cap_val,
     .xlen = sizeof(cap_val) - 1,
     .xname2 = "user.comment",
     .xval2 = "pings",
     .nlink = 3},
    {.path = "bin/ping6",
     .type = '0',
     .mode = 04755,
     .mtime = T0,
     .size = 70000,
     .seed = 4,
     .xname = "security.capability",
     .xval = cap_val,
     .xlen = sizeof(cap_val) - 1,
     .xname2 = "user.comment",
     .xval2 = "pings",
     .nlink = 3},
    D("opq", 0750),
    F("opq/c", 10, 11),
    D("del", 0755),
    F("del/keep", 10, 8),
    {.path = "replaceme", .type = '2', .link = "../somewhere/else", .mode = 0777, .mtime = T0},
    D("dev", 0755),
    {.path = "dev/null", .type = '3', .mode = 0666, .mtime = T0, .major = 1, .minor = 3},
    {.path = "dev/sda", .type = '4', .mode = 0660, .mtime = T0, .gid = 6, .major = 8, .minor = 300},
    {.path = "dev/fifo", .type = '6', .mode = 0600, .mtime = T0},
    F("empty", 0, 0),
    {.path = "zeros", .type = '0', .mode = 0644, .mtime = T0, .size = 2 * 1048576 + 5, .seed = 0},
    D("lib", 0755),
    {.path = "lib/ping-link",
     .type = '0',
     .mode = 04755,
     .mtime = T0,
     .size = 70000,
     .seed = 4,
     .xname = "security.capability",
     .xval = cap_val,
     .xlen = sizeof(cap_val) - 1,
     .xname2 = "user.comment",
     .xval2 = "pings",
     .nlink = 3},
    {.path = "ids",
     .type = '0',
     .mode = 0640,
     .uid = 100000,
     .gid = 70000,
     .mtime = T0 + 5,
     .nsec = 123456789,
     .size = 100,
     .seed = 13},
    {.path = "old", .type = '0', .mode = 0644, .mtime = 12345, .size = 1, .seed = 14},
    {.path = "abs", .type = '5', .mode = 0755, .mtime = 0}, /* created implicitly */
    {.path = "abs/path", .type = '0', .mode = 0644, .mtime = T0, .size = 3, .seed = 15},
    D("many", 0755),
    D("long", 0755),
    D("big", 0755),
    {.path = "bigx-file",
     .type = '0',
     .mode = 0644,
     .mtime = T0,
     .size = 100,
     .seed = 18,
     .xname = "user.big",
     .xval = big_xval},
    {.path = "bigx-link",
     .type = '2',
     .link = "bigx-file",
     .mode = 0777,
     .mtime = T0,
     .xname = "trusted.big",
     .xval = big_xval},
};

/* ---- layer 2 (many files, shared xattrs, long name) and layer 3 (big) ----- */

static size_t layer2(struct spec *s)
{
	size_t n = 0;
	s[n++] = (struct spec)D("long/", 0755);
	memset(long_name, 'L', sizeof(long_name));
	memcpy(long_name, "long/", 5);
	long_name[5 + 255] = 0;
	s[n++] = (struct spec){
	    .path = long_name, .type = '0', .mode = 0600, .mtime = T0, .size = 7, .seed = 16};
	for (int i = 0; i < 600; i++) {
		snprintf(many_names[i], sizeof(many_names[i]), "many/file-%04d-%020d", i, i * 7919);
		s[n++] = (struct spec){.path = many_names[i],
				       .type = '0',
				       .mode = 0644,
				       .mtime = T0,
				       .size = (uint64_t)(i % 3),
				       .seed = 17,
				       .xname = "user.shared",
				       .xval = "same-label"};
	}
	return n;
}

struct gen {
	uint8_t hdr[1024];
	size_t hdr_len;
	uint64_t pos;
	uint8_t tail[8192];
};

/* A tar stream with one file of BIG_SIZE bytes: 4 GiB of zeros, then 8 KiB of
 * pattern; generated on the fly so that no 4 GiB buffer exists. */
static ssize_t gen_read(void *ctx, void *buf, size_t n)
{
	struct gen *g = ctx;
	uint64_t data_end = g->hdr_len + BIG_SIZE, total = data_end + 1024;
	if (g->pos >= total)
		return 0;
	size_t k = n < total - g->pos ? n : (size_t)(total - g->pos);
	uint8_t *o = buf;
	for (size_t i = 0; i < k;) {
		uint64_t p = g->pos + i;
		size_t run;
		if (p < g->hdr_len) {
			run = STRATA_MIN(k - i, g->hdr_len - p);
			memcpy(o + i, g->hdr + p, run);
		} else if (p < g->hdr_len + (4ull << 30)) {
			run = (size_t)STRATA_MIN((uint64_t)(k - i), g->hdr_len + (4ull << 30) - p);
			memset(o + i, 0, run);
		} else if (p < data_end) {
			uint64_t t = p - g->hdr_len - (4ull << 30);
			run = (size_t)STRATA_MIN((uint64_t)(k - i), 8192 - t);
			memcpy(o + i, g->tail + t, run);
		} else {
			run = (size_t)STRATA_MIN((uint64_t)(k - i), total - p);
			memset(o + i, 0, run);
		}
		i += run;
	}
	g->pos += k;
	return (ssize_t)k;
}

/* ---- applying layers ------------------------------------------------------- */

static int apply(struct tree *t, struct blobstore *bs, img_read_fn fn, void *ctx, unsigned layer,
		 struct tree_stats *st)
{
	struct istream *in = NULL;
	struct tar_reader *r = NULL;
	uint32_t blob;
	int err = istream_open(fn, ctx, 0, &in);
	if (err == 0)
		err = tar_reader_new(NULL, istream_read_fn, in, &r);
	if (err == 0)
		err = blobstore_begin_blob(bs, &blob);
	if (err == 0) {
		tar_reader_describe_source(r, istream_error_fn);
		err = tree_apply_layer(t, r, bs, blob, layer, st);
		if (err < 0)
			fprintf(stderr, "layer %u: %s\n", layer, tree_error(t));
		int e2 = blobstore_end_blob(bs, blob);
		err = err ? err : e2;
	}
	tar_reader_free(r);
	istream_free(in);
	return err;
}

static int apply_buf(struct tree *t, struct blobstore *bs, const struct tb *b, unsigned layer,
		     struct tree_stats *st)
{
	struct memsrc src = {b->p, b->len, 0, 0};
	return apply(t, bs, memsrc_read, &src, layer, st);
}

/* A reopened store knows every chunk from its digest tables: importing the
 * same layer again stores nothing new. */
static void test_reopen_dedup(const char *store, const struct tb *layer)
{
	struct blobstore *bs;
	struct tree *t;
	struct tree_stats st = {0};
	EXPECT(blobstore_local_open(store, &bs) == 0);
	EXPECT(tree_new(&t) == 0);
	EXPECT(apply_buf(t, bs, layer, 0, &st) == 0);
	EXPECT(st.chunks > 0 && st.chunks_new == 0 && st.chunks_dedup == st.chunks);
	tree_free(t);
	blobstore_free(bs);
}

/* A damaged digest table fails the open instead of feeding the dedup index. */
static void test_corrupt_table(const char *dir)
{
	char path[600];
	snprintf(path, sizeof(path), "%s/badstore", dir);
	mkdir(path, 0755);
	snprintf(path, sizeof(path), "%s/badstore/blob-00000003.idx", dir);
	FILE *f = fopen(path, "w");
	if (f) {
		fputs("this is not a digest table", f);
		fclose(f);
	}
	snprintf(path, sizeof(path), "%s/badstore", dir);
	struct blobstore *bs = NULL;
	EXPECT(blobstore_local_open(path, &bs) == -EBADMSG);
	blobstore_free(bs);
}

static void check_tree(struct tree *t, const struct tree_stats *st)
{
	EXPECT(tree_lookup(t, "delfile") == NULL);
	EXPECT(tree_lookup(t, "del/x") == NULL);
	EXPECT(tree_lookup(t, "del/keep") != NULL);
	EXPECT(tree_lookup(t, "opq/a") == NULL && tree_lookup(t, "opq/b") == NULL);
	EXPECT(tree_lookup(t, "opq/c") != NULL);
	EXPECT(tree_lookup(t, "replaceme/child") == NULL);
	struct tree_inode *p = tree_lookup(t, "bin/ping");
	EXPECT(p && p == tree_lookup(t, "lib/ping-link") && p == tree_lookup(t, "bin/ping6"));
	EXPECT(p && p->nlink == 3);
	EXPECT(st->chunks_dedup >= 1);
	EXPECT(st->holes >= 4096 + 2);
	EXPECT(st->whiteouts == 3);
	EXPECT(st->inlined >= 400); /* etc/passwd, the 1- and 2-byte files of many/, ... */
}

static void test_merge_errors(struct blobstore *bs)
{
	static const struct spec sym[] = {
	    {.path = "link", .type = '2', .link = "/etc", .mtime = T0},
	    F("link/passwd", 3, 1),
	};
	static const struct spec dangling[] = {
	    {.path = "h", .type = '1', .link = "nope", .mtime = T0}};
	static const struct spec dirlink[] = {D("d/", 0755),
					      {.path = "h", .type = '1', .link = "d", .mtime = T0}};
	struct {
		const struct spec *s;
		size_t n;
		int want;
	} cases[] = {{sym, 2, -ENOTDIR}, {dangling, 1, -ENOENT}, {dirlink, 2, -EPERM}};
	for (size_t i = 0; i < ARRAY_SIZE(cases); i++) {
		struct tree *t;
		struct tb b = {0};
		emit_all(&b, cases[i].s, cases[i].n);
		EXPECT(tree_new(&t) == 0);
		int r = apply_buf(t, bs, &b, 0, NULL);
		if (r != cases[i].want) {
			fprintf(stderr, "merge error case %zu: got %d want %d\n", i, r,
				cases[i].want);
			test_failures++;
		}
		tree_free(t);
		tb_free(&b);
	}
}

/* ---- checking the mounted image -------------------------------------------- */

static bool content_ok(const char *path, unsigned seed, uint64_t size)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return false;
	static uint8_t buf[1 << 20], want[1 << 20];
	uint64_t off = 0;
	bool ok = true;
	for (;;) {
		ssize_t k = read(fd, buf, sizeof(buf));
		if (k <= 0) {
			ok = k == 0 && off == size;
			break;
		}
		fill(want, seed, off, (size_t)k);
		if (memcmp(buf, want, (size_t)k)) {
			ok = false;
			break;
		}
		off += (uint64_t)k;
	}
	close(fd);
	return ok;
}

static bool xattr_ok(const char *path, const char *name, const char *val, size_t len)
{
	char buf[8192];
	ssize_t k = lgetxattr(path, name, buf, sizeof(buf));
	return k == (ssize_t)len && !memcmp(buf, val, len);
}

static mode_t type_of(char t)
{
	switch (t) {
	case '5':
		return S_IFDIR;
	case '2':
		return S_IFLNK;
	case '3':
		return S_IFCHR;
	case '4':
		return S_IFBLK;
	case '6':
		return S_IFIFO;
	default:
		return S_IFREG;
	}
}

static int check_one(const char *mnt, const struct spec *s)
{
	char path[4096];
	snprintf(path, sizeof(path), "%s/%s", mnt, s->path);
	struct stat st;
	int bad = 0;
#define EXPECT_ENTRY(c)                                                                            \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "mounted '%s': %s\n", s->path, #c);                        \
			bad++;                                                                     \
		}                                                                                  \
	} while (0)
	if (lstat(path, &st) < 0) {
		fprintf(stderr, "mounted '%s': missing (%s)\n", s->path, strerror(errno));
		return 1;
	}
	EXPECT_ENTRY((st.st_mode & S_IFMT) == type_of(s->type));
	EXPECT_ENTRY((st.st_mode & 07777) == s->mode);
	EXPECT_ENTRY(st.st_uid == s->uid && st.st_gid == s->gid);
	EXPECT_ENTRY(st.st_mtim.tv_sec == s->mtime && st.st_mtim.tv_nsec == (long)s->nsec);
	if (s->nlink)
		EXPECT_ENTRY(st.st_nlink == s->nlink);
	if (s->type == '0') {
		EXPECT_ENTRY((uint64_t)st.st_size == s->size);
		EXPECT_ENTRY(content_ok(path, s->seed, s->size));
		if (!s->nlink)
			EXPECT_ENTRY(st.st_nlink == 1);
	}
	if (s->type == '2') {
		char t[4096];
		ssize_t k = readlink(path, t, sizeof(t) - 1);
		EXPECT_ENTRY(k == (ssize_t)strlen(s->link) && !memcmp(t, s->link, (size_t)k));
	}
	if (s->type == '3' || s->type == '4')
		EXPECT_ENTRY(major(st.st_rdev) == s->major && minor(st.st_rdev) == s->minor);
	if (s->xname)
		EXPECT_ENTRY(
		    xattr_ok(path, s->xname, s->xval, s->xlen ? s->xlen : strlen(s->xval)));
	if (s->xname2)
		EXPECT_ENTRY(xattr_ok(path, s->xname2, s->xval2, strlen(s->xval2)));
	char list[1024];
	ssize_t ln = llistxattr(path, list, sizeof(list));
	size_t want_list =
	    (s->xname ? strlen(s->xname) + 1 : 0) + (s->xname2 ? strlen(s->xname2) + 1 : 0);
	EXPECT_ENTRY(ln == (ssize_t)want_list);
	return bad;
#undef EXPECT_ENTRY
}

static size_t walk_count;
static int walk_cb(const char *p, const struct stat *sb, int flag, struct FTW *f)
{
	walk_count++;
	return 0;
}

static void check_mounted(const char *mnt, const struct spec *l2, size_t n2)
{
	size_t nfinal = ARRAY_SIZE(final_tree);
	for (size_t i = 0; i < nfinal; i++)
		test_failures += check_one(mnt, &final_tree[i]);
	for (size_t i = 0; i < n2; i++)
		if (l2[i].type == '0')
			test_failures += check_one(mnt, &l2[i]);
	/* the big file: size, a hole in the middle, the tail */
	char path[4096];
	snprintf(path, sizeof(path), "%s/big/file", mnt);
	struct stat st;
	EXPECT(lstat(path, &st) == 0 && (uint64_t)st.st_size == BIG_SIZE);
	int fd = open(path, O_RDONLY);
	uint8_t buf[8192], want[8192];
	EXPECT(fd >= 0 && pread(fd, buf, 4096, 3ull << 30) == 4096 && buf[0] == 0 &&
	       buf[4095] == 0);
	fill(want, 21, 0, sizeof(want));
	EXPECT(fd >= 0 && pread(fd, buf, 8192, 4ull << 30) == 8192 && !memcmp(buf, want, 8192));
	if (fd >= 0)
		close(fd);
	/* same inode for hard links, different for others */
	struct stat a, b, c;
	snprintf(path, sizeof(path), "%s/bin/ping", mnt);
	EXPECT(lstat(path, &a) == 0);
	snprintf(path, sizeof(path), "%s/lib/ping-link", mnt);
	EXPECT(lstat(path, &b) == 0 && a.st_ino == b.st_ino);
	snprintf(path, sizeof(path), "%s/bin/sh", mnt);
	EXPECT(lstat(path, &c) == 0 && a.st_ino != c.st_ino);
	/* nothing more than expected: final_tree + layer2 files + big/file */
	walk_count = 0;
	nftw(mnt, walk_cb, 16, FTW_PHYS);
	size_t want_n = nfinal + (n2 - 1) + 1;
	if (walk_count != want_n) {
		fprintf(stderr, "mounted tree has %zu paths, expected %zu\n", walk_count, want_n);
		test_failures++;
	}
	/* many/ has 600 entries over several directory blocks */
	snprintf(path, sizeof(path), "%s/many", mnt);
	DIR *d = opendir(path);
	size_t n = 0;
	struct dirent *de;
	while (d && (de = readdir(d)))
		n++;
	if (d)
		closedir(d);
	EXPECT(n == 602);
}

static int run_cmd(char *const argv[])
{
	pid_t pid = fork();
	if (pid == 0) {
		execvp(argv[0], argv);
		_exit(127);
	}
	int status;
	if (pid < 0 || waitpid(pid, &status, 0) < 0)
		return -1;
	return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

static void fsck_image(const char *img, char devs[][4096], size_t n)
{
	char *argv[16] = {"fsck.erofs"};
	char opt[8][4200];
	size_t k = 1;
	for (size_t i = 0; i < n && i < 8; i++) {
		snprintf(opt[i], sizeof(opt[i]), "--device=%s", devs[i]);
		argv[k++] = opt[i];
	}
	argv[k++] = (char *)img;
	argv[k] = NULL;
	int rc = run_cmd(argv);
	if (rc == 127) {
		fprintf(stderr, "note: fsck.erofs not installed, image check skipped\n");
		return;
	}
	if (rc != 0) {
		fprintf(stderr, "fsck.erofs failed with %d\n", rc);
		test_failures++;
	}
}

static char mnt_dir[4096];
static void umount_at_exit(void)
{
	if (mnt_dir[0] && umount2(mnt_dir, MNT_DETACH) == 0)
		mnt_dir[0] = 0;
}

/* Returns 0 mounted, 77 when mounting is impossible here, 1 on failure. */
static int mount_image(const char *img, const char *mnt, char devs[][4096], size_t n)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skip: mounting needs root\n");
		return 77;
	}
	char opts[16384] = "";
	size_t o = 0;
	for (size_t i = 0; i < n; i++)
		o += (size_t)snprintf(opts + o, sizeof(opts) - o, "%sdevice=%s", i ? "," : "",
				      devs[i]);
	if (mount(img, mnt, "erofs", MS_RDONLY, opts) == 0) {
		snprintf(mnt_dir, sizeof(mnt_dir), "%s", mnt);
		atexit(umount_at_exit);
		return 0;
	}
	int e = errno;
	if (e == ENODEV || e == EPERM || e == ENOTBLK) {
		fprintf(stderr, "skip: the kernel cannot mount file-backed EROFS here: %s\n",
			strerror(e));
		return 77;
	}
	fprintf(stderr, "mount of %s failed: %s (see dmesg)\n", img, strerror(e));
	return 1;
}

int main(void)
{
	char dir[] = "/tmp/strata-imagesvc-XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	char store[512], img[512], mnt[512];
	snprintf(store, sizeof(store), "%s/store", dir);
	snprintf(img, sizeof(img), "%s/meta.img", dir);
	snprintf(mnt, sizeof(mnt), "%s/mnt", dir);
	mkdir(mnt, 0755);

	memset(big_xval, 'v', sizeof(big_xval) - 1);
	struct blobstore *bs;
	struct tree *t;
	EXPECT(blobstore_local_open(store, &bs) == 0);
	test_merge_errors(bs);
	EXPECT(tree_new(&t) == 0);

	struct tb l0 = {0}, l1 = {0}, l2 = {0};
	emit_all(&l0, layer0, ARRAY_SIZE(layer0));
	emit_all(&l1, layer1, ARRAY_SIZE(layer1));
	static struct spec s2[700];
	size_t n2 = layer2(s2);
	emit_all(&l2, s2, n2);
	struct tb gz0 = tb_gzip(&l0), zs1 = tb_zstd(&l1);
	struct tree_stats st = {0};
	EXPECT(apply_buf(t, bs, &gz0, 0, &st) == 0);
	EXPECT(apply_buf(t, bs, &zs1, 1, &st) == 0);
	EXPECT(apply_buf(t, bs, &l2, 2, &st) == 0);

	struct gen *g = calloc(1, sizeof(*g));
	struct tb gh = {0};
	tb_entry(&gh, "big/", '5', NULL);
	tb_header(&gh,
		  &(struct tb_hdr){.name = "big/file", .type = '0', .size = BIG_SIZE, .mtime = T0});
	memcpy(g->hdr, gh.p, gh.len);
	g->hdr_len = gh.len;
	fill(g->tail, 21, 0, sizeof(g->tail));
	EXPECT(apply(t, bs, gen_read, g, 3, &st) == 0);
	/* big/ comes from a layer of its own with 0755 root:root at T0 */
	check_tree(t, &st);
	printf("merged: %llu entries, %llu files, %llu bytes, %llu chunks (%llu new, %llu dedup), "
	       "%llu holes\n",
	       (unsigned long long)st.entries, (unsigned long long)st.files,
	       (unsigned long long)st.bytes, (unsigned long long)st.chunks,
	       (unsigned long long)st.chunks_new, (unsigned long long)st.chunks_dedup,
	       (unsigned long long)st.holes);

	int fd = open(img, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	struct erofs_image_info info = {0};
	EXPECT(fd >= 0 && erofs_write_image(t, fd, &info) == 0);
	close(fd);
	char(*devs)[4096] = calloc(info.n_blobs + 1, 4096);
	for (size_t i = 0; i < info.n_blobs; i++)
		EXPECT(blobstore_blob_path(bs, info.blobs[i], devs[i], 4096) == 0);
	printf("image: %llu bytes, %llu inodes, %zu blobs, root nid %u\n",
	       (unsigned long long)info.size, (unsigned long long)info.inodes, info.n_blobs,
	       info.root_nid);
	fsck_image(img, devs, info.n_blobs);

	int rc = mount_image(img, mnt, devs, info.n_blobs);
	if (rc == 0) {
		/* The checks run in a child, so that the mount is removed here even
		 * if they crash. */
		fflush(NULL);
		pid_t pid = fork();
		if (pid == 0) {
			test_failures = 0;
			check_mounted(mnt, s2, n2);
			_exit(test_failures ? 1 : 0);
		}
		int status = 0;
		if (pid < 0 || waitpid(pid, &status, 0) < 0 || !WIFEXITED(status) ||
		    WEXITSTATUS(status) != 0)
			test_failures++;
		umount_at_exit();
	} else if (rc == 1) {
		test_failures++;
	}

	test_reopen_dedup(store, &gz0);
	test_corrupt_table(dir);
	free(devs);
	free(info.blobs);
	free(g);
	tb_free(&gh);
	tb_free(&l0);
	tb_free(&l1);
	tb_free(&l2);
	tb_free(&gz0);
	tb_free(&zs1);
	tree_free(t);
	blobstore_free(bs);
	char cmd[4300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	if (!mnt_dir[0] && system(cmd) != 0)
		fprintf(stderr, "note: could not remove %s\n", dir);
	if (test_failures)
		return test_result("test_erofs");
	if (rc == 77)
		return 77;
	printf("test_erofs: ok (mounted and compared)\n");
	return 0;
}
