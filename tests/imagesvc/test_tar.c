/* test_tar.c — the tar reader and the decompression front-end: every entry
 * type in ustar, GNU and PAX form, and every hostile case (".." and absolute
 * paths, escaping hard links, malformed and oversized headers, PAX bombs,
 * limits, sparse files, truncated / corrupt / trailing-garbage gzip and zstd,
 * decompression bombs). Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "imagesvc/istream.h"
#include "imagesvc/tar.h"
#include "tests/imagesvc/tarbuild.h"
#include "tests/testutil.h"

#define MAX_SEEN 16

struct seen {
	size_t n;
	struct tar_entry e[MAX_SEEN]; /* shallow copies: strings duplicated below */
	char *data[MAX_SEEN];
	char *xname[MAX_SEEN], *xval[MAX_SEEN];
	uint32_t xlen[MAX_SEEN];
	size_t nx[MAX_SEEN];
	char msg[512];
};

static void seen_free(struct seen *s)
{
	for (size_t i = 0; i < s->n; i++) {
		free(s->e[i].path);
		free(s->e[i].linkname);
		free(s->data[i]);
		free(s->xname[i]);
		free(s->xval[i]);
	}
	memset(s, 0, sizeof(*s));
}

static void record(struct seen *s, struct tar_reader *r, const struct tar_entry *e)
{
	if (s->n >= MAX_SEEN)
		return;
	size_t i = s->n++;
	s->e[i] = *e;
	s->e[i].path = strdup(e->path);
	s->e[i].linkname = e->linkname ? strdup(e->linkname) : NULL;
	s->e[i].xattrs = NULL;
	s->nx[i] = e->n_xattrs;
	if (e->n_xattrs) {
		s->xname[i] = strdup(e->xattrs[0].name);
		s->xval[i] = malloc(e->xattrs[0].len + 1);
		memcpy(s->xval[i], e->xattrs[0].value, e->xattrs[0].len);
		s->xlen[i] = e->xattrs[0].len;
	}
	s->data[i] = calloc(1, e->size + 1);
	size_t got = 0;
	ssize_t k;
	while ((k = tar_read(r, s->data[i] + got, e->size - got + 1)) > 0)
		got += (size_t)k;
}

/* Reads the whole stream (through istream when `decomp`); returns the final
 * tar_next() result (0 = clean end) and records the entries. */
static int run(const struct tb *b, const struct tar_limits *lim, bool decomp, uint64_t max_out,
	       struct seen *s)
{
	struct memsrc src = {b->p, b->len, 0, 777};
	struct istream *in = NULL;
	struct tar_reader *r = NULL;
	int err = 0;
	if (decomp) {
		err = istream_open(memsrc_read, &src, max_out, &in);
		if (err < 0)
			return err;
		err = tar_reader_new(lim, istream_read_fn, in, &r);
		tar_reader_describe_source(r, istream_error_fn);
	} else {
		err = tar_reader_new(lim, memsrc_read, &src, &r);
	}
	if (err < 0)
		return err;
	const struct tar_entry *e;
	while ((err = tar_next(r, &e)) == 1)
		record(s, r, e);
	snprintf(s->msg, sizeof(s->msg), "%s", tar_error(r));
	if (err < 0 && getenv("VERBOSE"))
		fprintf(stderr, "  (expected error: %s)\n", s->msg);
	tar_reader_free(r);
	istream_free(in);
	return err;
}

static int run_plain(const struct tb *b, struct seen *s)
{
	return run(b, NULL, false, 0, s);
}

static void test_all_types(void)
{
	struct tb b = {0};
	struct seen s = {0};
	tb_entry(&b, "./", '5', NULL);
	tb_entry(&b, "dir/", '5', NULL);
	tb_file(&b, "dir/file", "hello", 5);
	tb_entry(&b, "dir/sym", '2', "/etc/shadow"); /* symlink targets are data */
	tb_entry(&b, "dir/hard", '1', "dir/file");
	tb_header(&b, &(struct tb_hdr){.name = "dev/null", .type = '3', .major = 1, .minor = 3});
	tb_header(&b, &(struct tb_hdr){.name = "dev/sda", .type = '4', .major = 8, .minor = 300});
	tb_entry(&b, "fifo", '6', NULL);
	tb_header(&b, &(struct tb_hdr){.name = "file",
				       .prefix = "very/long/prefix",
				       .type = '0',
				       .uid = 1000,
				       .gid = 100,
				       .mode = 04755});
	tb_header(&b, &(struct tb_hdr){.name = "v7dir/", .type = '0'});
	tb_end(&b);
	EXPECT(run_plain(&b, &s) == 0);
	EXPECT(s.n == 10);
	EXPECT(s.e[0].type == TAR_DIR && !strcmp(s.e[0].path, ""));
	EXPECT(s.e[1].type == TAR_DIR && !strcmp(s.e[1].path, "dir"));
	EXPECT(s.e[2].type == TAR_REG && s.e[2].size == 5 && !strcmp(s.data[2], "hello"));
	EXPECT(s.e[3].type == TAR_SYMLINK && !strcmp(s.e[3].linkname, "/etc/shadow"));
	EXPECT(s.e[4].type == TAR_HARDLINK && !strcmp(s.e[4].linkname, "dir/file"));
	EXPECT(s.e[5].type == TAR_CHR && s.e[5].devmajor == 1 && s.e[5].devminor == 3);
	EXPECT(s.e[6].type == TAR_BLK && s.e[6].devmajor == 8 && s.e[6].devminor == 300);
	EXPECT(s.e[7].type == TAR_FIFO);
	EXPECT(!strcmp(s.e[8].path, "very/long/prefix/file") && s.e[8].uid == 1000 &&
	       s.e[8].gid == 100 && s.e[8].mode == 04755 && s.e[8].mtime == 1700000000);
	EXPECT(s.e[9].type == TAR_DIR && !strcmp(s.e[9].path, "v7dir"));
	seen_free(&s);
	tb_free(&b);
}

static void test_gnu_and_pax(void)
{
	struct tb b = {0}, rec = {0};
	struct seen s = {0};
	char longname[400], longlink[300];
	memset(longname, 'n', sizeof(longname));
	memcpy(longname + 100, "/", 1);
	memcpy(longname + 200, "/", 1);
	memcpy(longname + 300, "/", 1);
	longname[399] = 0;
	memset(longlink, 'l', sizeof(longlink));
	longlink[299] = 0;
	tb_gnu_long(&b, 'L', longname);
	tb_gnu_long(&b, 'K', longlink);
	tb_entry(&b, "short", '2', "x");
	/* PAX: path, linkpath, large ids, fractional and negative mtime, xattrs */
	const uint8_t cap[] = {0x01, 0x00, 0x00, 0x02, 0x00, 0x20, '\n', 0, 0, 0};
	tb_pax_rec(&rec, "path", "pax/name/\xc3\xa9t\xc3\xa9", 14);
	tb_pax_rec(&rec, "uid", "5000000", 7);
	tb_pax_rec(&rec, "gid", "4294967295", 10);
	tb_pax_rec(&rec, "mtime", "1700000000.123456789", 20);
	tb_pax_rec(&rec, "SCHILY.xattr.security.capability", cap, sizeof(cap));
	tb_pax_rec(&rec, "atime", "1.5", 3);
	tb_pax(&b, 'x', &rec);
	tb_file(&b, "ignored-name", "abc", 3);
	tb_free(&rec);
	tb_pax_rec(&rec, "mtime", "-1.25", 5);
	tb_pax_rec(&rec, "size", "4", 1);
	tb_pax(&b, 'x', &rec);
	tb_header(&b, &(struct tb_hdr){.name = "neg", .type = '0', .size = 999});
	tb_raw(&b, "wxyz", 4);
	tb_pad(&b);
	tb_free(&rec);
	tb_pax_rec(&rec, "comment", "global headers are ignored", 26);
	tb_pax(&b, 'g', &rec);
	tb_header(&b, &(struct tb_hdr){.name = "b256", .type = '0', .size = 0, .uid = 0});
	tb_end(&b);
	EXPECT(run_plain(&b, &s) == 0);
	EXPECT(s.n == 4);
	EXPECT(strlen(s.e[0].path) == 399 && !strcmp(s.e[0].linkname, longlink));
	EXPECT(!strcmp(s.e[1].path, "pax/name/\xc3\xa9t\xc3\xa9"));
	EXPECT(s.e[1].uid == 5000000 && s.e[1].gid == 4294967295u);
	EXPECT(s.e[1].mtime == 1700000000 && s.e[1].mtime_nsec == 123456789);
	EXPECT(s.nx[1] == 1 && !strcmp(s.xname[1], "security.capability") &&
	       s.xlen[1] == sizeof(cap) && !memcmp(s.xval[1], cap, sizeof(cap)));
	EXPECT(!strcmp(s.data[1], "abc"));
	EXPECT(s.e[2].mtime == -2 && s.e[2].mtime_nsec == 750000000);
	EXPECT(s.e[2].size == 4 && !strcmp(s.data[2], "wxyz"));
	seen_free(&s);
	tb_free(&b);
	tb_free(&rec);
}

static void test_path_normalization(void)
{
	char *p;
	EXPECT(tar_normalize_path("/etc//./passwd/", 15, 4096, &p) == 0 &&
	       !strcmp(p, "etc/passwd"));
	free(p);
	EXPECT(tar_normalize_path("./", 2, 4096, &p) == 0 && !strcmp(p, ""));
	free(p);
	EXPECT(tar_normalize_path("..", 2, 4096, &p) == -EINVAL);
	EXPECT(tar_normalize_path("a/../b", 6, 4096, &p) == -EINVAL);
	EXPECT(tar_normalize_path("/../../etc", 10, 4096, &p) == -EINVAL);
	EXPECT(tar_normalize_path("a/..b/c..", 9, 4096, &p) == 0 && !strcmp(p, "a/..b/c.."));
	free(p);
	EXPECT(tar_normalize_path("a\0b", 3, 4096, &p) == -EINVAL);
	char big[300];
	memset(big, 'x', sizeof(big));
	EXPECT(tar_normalize_path(big, 256, 4096, &p) == -ENAMETOOLONG);
	EXPECT(tar_normalize_path(big, 255, 4096, &p) == 0);
	free(p);
	EXPECT(tar_normalize_path("aaaa/bbbb", 9, 8, &p) == -ENAMETOOLONG);
}

/* Builds a one-entry archive through `fn` and expects `want` from the reader. */
static void expect(const char *what, void (*fn)(struct tb *), const struct tar_limits *lim,
		   int want)
{
	struct tb b = {0};
	struct seen s = {0};
	fn(&b);
	int r = run(&b, lim, false, 0, &s);
	if (r != want) {
		fprintf(stderr, "hostile case '%s': got %d (%s), want %d\n", what, r, s.msg, want);
		test_failures++;
	} else if (want < 0 && !s.msg[0]) {
		fprintf(stderr, "hostile case '%s': no error message\n", what);
		test_failures++;
	}
	seen_free(&s);
	tb_free(&b);
}

static void h_dotdot(struct tb *b)
{
	tb_file(b, "../etc/passwd", "x", 1);
	tb_end(b);
}
static void h_dotdot_mid(struct tb *b)
{
	tb_file(b, "a/b/../../../x", "x", 1);
	tb_end(b);
}
static void h_abs_ok(struct tb *b)
{
	tb_file(b, "/etc/passwd", "x", 1);
	tb_end(b);
}
static void h_hardlink_escape(struct tb *b)
{
	tb_entry(b, "evil", '1', "../../etc/shadow");
	tb_end(b);
}
static void h_hardlink_root(struct tb *b)
{
	tb_entry(b, "evil", '1', "/");
	tb_end(b);
}
static void h_pax_dotdot(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "path", "ok/../../x", 10);
	tb_pax(b, 'x', &rec);
	tb_file(b, "innocent", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_linkpath_escape(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "linkpath", "../../../../etc/passwd", 22);
	tb_pax(b, 'x', &rec);
	tb_entry(b, "innocent", '1', "x");
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_nul(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "path", "a\0b", 3);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_bomb(struct tb *b)
{
	/* claims 1 GiB of PAX records: refused before any allocation */
	tb_header(b, &(struct tb_hdr){.name = "PaxHeader", .type = 'x', .size = 1ull << 30});
	tb_end(b);
}
static void h_gnu_long_bomb(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "././@LongLink", .type = 'L', .size = 2u << 20});
	tb_end(b);
}
static void h_pax_malformed(struct tb *b)
{
	struct tb rec = {0};
	tb_raw(&rec, "99 path=x\n", 10); /* length beyond the payload */
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_nokey(struct tb *b)
{
	struct tb rec = {0};
	tb_raw(&rec, "6 =ab\n", 6);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_badnum(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "size", "12abc", 5);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_uid_overflow(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "uid", "4294967296", 10);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_pax_sparse(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "GNU.sparse.major", "1", 1);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_gnu_sparse(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "sparse", .type = 'S', .gnu_magic = true});
	tb_end(b);
}
static void h_xattr_many(struct tb *b)
{
	struct tb rec = {0};
	for (int i = 0; i < 200; i++) {
		char k[64];
		snprintf(k, sizeof(k), "SCHILY.xattr.user.k%d", i);
		tb_pax_rec(&rec, k, "v", 1);
	}
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_xattr_big(struct tb *b)
{
	struct tb rec = {0};
	char *v = calloc(1, 70000);
	tb_pax_rec(&rec, "SCHILY.xattr.user.big", v, 70000);
	free(v);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_xattr_total(struct tb *b)
{
	struct tb rec = {0};
	char *v = calloc(1, 60000);
	for (int i = 0; i < 4; i++) {
		char k[64];
		snprintf(k, sizeof(k), "SCHILY.xattr.user.v%d", i);
		tb_pax_rec(&rec, k, v, 60000);
	}
	free(v);
	tb_pax(b, 'x', &rec);
	tb_file(b, "x", "x", 1);
	tb_end(b);
	tb_free(&rec);
}
static void h_bad_checksum(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "x", .type = '0', .bad_checksum = true});
	tb_end(b);
}
static void h_garbage(struct tb *b)
{
	uint8_t junk[1024];
	for (size_t i = 0; i < sizeof(junk); i++)
		junk[i] = (uint8_t)(i * 7 + 1);
	tb_raw(b, junk, sizeof(junk));
}
static void h_truncated_data(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "x", .type = '0', .size = 10000});
	tb_raw(b, "short", 5);
}
static void h_no_end(struct tb *b)
{
	tb_file(b, "x", "x", 1);
}
static void h_truncated_header(struct tb *b)
{
	tb_file(b, "x", "x", 1);
	tb_raw(b, "partial header", 14);
}
static void h_empty(struct tb *b)
{
	(void)b;
}
static void h_dangling_pax(struct tb *b)
{
	struct tb rec = {0};
	tb_pax_rec(&rec, "path", "x", 1);
	tb_pax(b, 'x', &rec);
	tb_end(b);
	tb_free(&rec);
}
static void h_meta_chain(struct tb *b)
{
	for (int i = 0; i < 40; i++)
		tb_gnu_long(b, 'L', "x");
	tb_file(b, "x", "x", 1);
	tb_end(b);
}
static void h_many_entries(struct tb *b)
{
	for (int i = 0; i < 20; i++)
		tb_entry(b, "d/", '5', NULL);
	tb_end(b);
}
static void h_total_size(struct tb *b)
{
	/* 2 x 600 KiB of zeros against a 1 MiB total limit */
	static uint8_t z[600 << 10];
	tb_file(b, "a", z, sizeof(z));
	tb_file(b, "b", z, sizeof(z));
	tb_end(b);
}
static void h_huge_size(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "x", .type = '0', .size = 1ull << 40});
	tb_end(b);
}
static void h_bad_octal(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "x", .type = '0'});
	uint8_t *h = b->p + b->len - 512;
	memcpy(h + 124, "00000000009x", 12);
	memset(h + 148, ' ', 8);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += h[i];
	tb_octal(h + 148, 7, sum);
	tb_end(b);
}
static void h_unknown_type(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "x", .type = 'Z'});
	tb_end(b);
}
static void h_long_component(struct tb *b)
{
	char n[300];
	memset(n, 'c', 299);
	n[299] = 0;
	tb_gnu_long(b, 'L', n);
	tb_file(b, "x", "x", 1);
	tb_end(b);
}
static void h_long_path(struct tb *b)
{
	char n[6000];
	for (int i = 0; i < 5999; i++)
		n[i] = (i % 100 == 99) ? '/' : 'p';
	n[5999] = 0;
	tb_gnu_long(b, 'L', n);
	tb_file(b, "x", "x", 1);
	tb_end(b);
}
static void h_long_symlink(struct tb *b)
{
	char n[5000];
	memset(n, 's', 4999);
	n[4999] = 0;
	tb_gnu_long(b, 'K', n);
	tb_entry(b, "x", '2', "t");
	tb_end(b);
}
static void h_empty_symlink(struct tb *b)
{
	tb_entry(b, "x", '2', "");
	tb_end(b);
}
static void h_multivolume(struct tb *b)
{
	tb_header(b, &(struct tb_hdr){.name = "x", .type = 'M', .gnu_magic = true});
	tb_end(b);
}

static void test_hostile(void)
{
	struct tar_limits small;
	tar_limits_default(&small);
	small.max_entries = 10;
	small.max_total = 1u << 20;
	expect("'..' component", h_dotdot, NULL, -EINVAL);
	expect("'..' climbing out mid-path", h_dotdot_mid, NULL, -EINVAL);
	expect("absolute path (normalized)", h_abs_ok, NULL, 0);
	expect("hard link escaping", h_hardlink_escape, NULL, -EINVAL);
	expect("hard link to the root", h_hardlink_root, NULL, -EINVAL);
	expect("PAX path with '..'", h_pax_dotdot, NULL, -EINVAL);
	expect("PAX linkpath escaping", h_pax_linkpath_escape, NULL, -EINVAL);
	expect("PAX path with NUL", h_pax_nul, NULL, -EINVAL);
	expect("PAX header bomb", h_pax_bomb, NULL, -EFBIG);
	expect("GNU long name bomb", h_gnu_long_bomb, NULL, -EFBIG);
	expect("PAX record length beyond payload", h_pax_malformed, NULL, -EBADMSG);
	expect("PAX record without key", h_pax_nokey, NULL, -EBADMSG);
	expect("PAX bad number", h_pax_badnum, NULL, -EBADMSG);
	expect("PAX uid overflow", h_pax_uid_overflow, NULL, -EBADMSG);
	expect("PAX sparse", h_pax_sparse, NULL, -EOPNOTSUPP);
	expect("GNU sparse", h_gnu_sparse, NULL, -EOPNOTSUPP);
	expect("multi-volume", h_multivolume, NULL, -EOPNOTSUPP);
	expect("unknown entry type", h_unknown_type, NULL, -EOPNOTSUPP);
	expect("too many xattrs", h_xattr_many, NULL, -E2BIG);
	expect("xattr value too big", h_xattr_big, NULL, -EFBIG);
	expect("xattrs of one entry too big", h_xattr_total, NULL, -EFBIG);
	expect("bad checksum", h_bad_checksum, NULL, -EBADMSG);
	expect("garbage", h_garbage, NULL, -EBADMSG);
	expect("truncated data", h_truncated_data, NULL, -EBADMSG);
	expect("no end-of-archive", h_no_end, NULL, -EBADMSG);
	expect("truncated header", h_truncated_header, NULL, -EBADMSG);
	expect("empty stream", h_empty, NULL, -EBADMSG);
	expect("dangling PAX header", h_dangling_pax, NULL, -EBADMSG);
	expect("endless meta-header chain", h_meta_chain, NULL, -EBADMSG);
	expect("too many entries", h_many_entries, &small, -E2BIG);
	expect("total expanded size", h_total_size, &small, -EFBIG);
	expect("1 TiB entry", h_huge_size, NULL, -EFBIG);
	expect("bad octal", h_bad_octal, NULL, -EBADMSG);
	expect("component > 255", h_long_component, NULL, -ENAMETOOLONG);
	expect("path > max_path", h_long_path, NULL, -ENAMETOOLONG);
	expect("symlink target > 4095", h_long_symlink, NULL, -ENAMETOOLONG);
	expect("empty symlink target", h_empty_symlink, NULL, -EINVAL);
}

static void sample(struct tb *b)
{
	static uint8_t data[300000];
	for (size_t i = 0; i < sizeof(data); i++)
		data[i] = (uint8_t)(i * 131 >> 3);
	tb_entry(b, "d/", '5', NULL);
	tb_file(b, "d/data", data, sizeof(data));
	tb_end(b);
}

static void test_compressed(void)
{
	struct tb plain = {0};
	sample(&plain);
	struct tb gz = tb_gzip(&plain), zs = tb_zstd(&plain);
	struct seen s = {0};
	EXPECT(run(&plain, NULL, true, 0, &s) == 0 && s.n == 2 && s.e[1].size == 300000);
	seen_free(&s);
	EXPECT(run(&gz, NULL, true, 0, &s) == 0 && s.n == 2 && s.e[1].size == 300000);
	seen_free(&s);
	EXPECT(run(&zs, NULL, true, 0, &s) == 0 && s.n == 2);
	seen_free(&s);

	/* multi-member gzip and multi-frame zstd */
	struct tb two = {0};
	tb_raw(&two, gz.p, gz.len / 2);
	struct tb half1 = {0}, half2 = {0};
	tb_raw(&half1, plain.p, 512 * 10);
	tb_raw(&half2, plain.p + 512 * 10, plain.len - 512 * 10);
	struct tb g1 = tb_gzip(&half1), g2 = tb_gzip(&half2), z1 = tb_zstd(&half1),
		  z2 = tb_zstd(&half2);
	struct tb gcat = {0}, zcat = {0};
	tb_raw(&gcat, g1.p, g1.len);
	tb_raw(&gcat, g2.p, g2.len);
	tb_raw(&zcat, z1.p, z1.len);
	tb_raw(&zcat, z2.p, z2.len);
	EXPECT(run(&gcat, NULL, true, 0, &s) == 0 && s.n == 2 && s.e[1].size == 300000);
	seen_free(&s);
	EXPECT(run(&zcat, NULL, true, 0, &s) == 0 && s.n == 2 && s.e[1].size == 300000);
	seen_free(&s);

	/* truncated at several points */
	for (size_t cut = 1; cut < 8; cut++) {
		struct tb t = {0};
		tb_raw(&t, gz.p, gz.len * cut / 8);
		EXPECT(run(&t, NULL, true, 0, &s) == -EBADMSG);
		EXPECT(strstr(s.msg, "gzip") != NULL);
		seen_free(&s);
		tb_free(&t);
		tb_raw(&t, zs.p, zs.len * cut / 8);
		EXPECT(run(&t, NULL, true, 0, &s) == -EBADMSG);
		EXPECT(strstr(s.msg, "zstd") != NULL);
		seen_free(&s);
		tb_free(&t);
	}
	/* only the 8-byte gzip trailer missing: the tar is complete, gzip is not */
	struct tb t = {0};
	tb_raw(&t, gz.p, gz.len - 4);
	EXPECT(run(&t, NULL, true, 0, &s) == -EBADMSG);
	seen_free(&s);
	tb_free(&t);
	/* corrupt bytes */
	tb_raw(&t, gz.p, gz.len);
	t.p[gz.len / 2] ^= 0xff;
	t.p[gz.len / 2 + 1] ^= 0x55;
	EXPECT(run(&t, NULL, true, 0, &s) < 0);
	seen_free(&s);
	tb_free(&t);
	tb_raw(&t, zs.p, zs.len);
	t.p[zs.len / 2] ^= 0xff;
	EXPECT(run(&t, NULL, true, 0, &s) < 0);
	seen_free(&s);
	tb_free(&t);
	/* trailing garbage after gzip */
	tb_raw(&t, gz.p, gz.len);
	tb_raw(&t, "garbage!", 8);
	EXPECT(run(&t, NULL, true, 0, &s) == -EBADMSG);
	seen_free(&s);
	tb_free(&t);
	/* decompression bomb: expanded size limit */
	EXPECT(run(&gz, NULL, true, 100000, &s) == -EFBIG);
	EXPECT(strstr(s.msg, "limit") != NULL);
	seen_free(&s);
	EXPECT(run(&zs, NULL, true, 100000, &s) == -EFBIG);
	seen_free(&s);

	tb_free(&two);
	tb_free(&half1);
	tb_free(&half2);
	tb_free(&g1);
	tb_free(&g2);
	tb_free(&z1);
	tb_free(&z2);
	tb_free(&gcat);
	tb_free(&zcat);
	tb_free(&plain);
	tb_free(&gz);
	tb_free(&zs);
}

int main(void)
{
	test_all_types();
	test_gnu_and_pax();
	test_path_normalization();
	test_hostile();
	test_compressed();
	if (test_failures)
		return test_result("test_tar");
	printf("test_tar: ok\n");
	return 0;
}
