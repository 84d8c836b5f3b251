/* test_store_verify.c — unit test of the image store's signatures
 * (imagesvc/image_auth.h, store.h) on a local directory: a fresh import
 * verifies end to end (ref MAC, record MAC, table and document digests);
 * a rewritten ref (unsigned, or another name's signed ref copied over it),
 * a rewritten record (a flipped byte, another image's record moved in), a
 * format 1 record, a rewritten config and a rewritten digest table are each
 * refused with the error that says so; a rewritten table never feeds the
 * dedup of a later import, and importing the image again replaces it;
 * another cluster key verifies nothing; no key refuses to sign; `resign`
 * upgrades a format 1 store after checking every chunk, refuses a chunk
 * that does not match its table, and never re-signs a wrong signature.
 * Root only (blobs carry a trusted.* xattr). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "fs/wire.h"
#include "imagesvc/image_auth.h"
#include "imagesvc/store.h"
#include "tests/imagesvc/tarbuild.h"
#include "tests/testutil.h"

static char dir[] = "/tmp/test_store_verify.XXXXXX";
static char root[512];

static const char *M1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
static const char *M2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
#define HEX1 "1111111111111111111111111111111111111111111111111111111111111111"
#define HEX2 "2222222222222222222222222222222222222222222222222222222222222222"

static void write_file(const char *path, const void *p, size_t n)
{
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(p, 1, n, f) == n);
	CHECK_EQ(fclose(f), 0);
}

static void write_str(const char *path, const char *text)
{
	write_file(path, text, strlen(text));
}

static size_t read_file(const char *path, void *p, size_t cap)
{
	FILE *f = fopen(path, "rb");
	CHECK(f);
	size_t n = fread(p, 1, cap, f);
	fclose(f);
	return n;
}

/* Writes b to dir/name; its "sha256:HEX" into digest[72]. */
static void put_layer(const char *name, const struct tb *b, char *path, char *digest)
{
	uint8_t d[32];
	char hex[65];
	snprintf(path, 512, "%s/%s", dir, name);
	write_file(path, b->p, b->len);
	SHA256(b->p, b->len, d);
	img_digest_hex(d, hex);
	snprintf(digest, 72, "sha256:%s", hex);
}

static int import(struct img_store *s, const char *man, const char *name, const char *layer_path,
		  const char *layer_digest, const char *config, struct img_import_stats *st,
		  struct strata_err *e)
{
	struct img_layer_src l = {layer_path, layer_digest};
	struct img_import_req req = {.manifest_digest = man,
				     .name = name,
				     .config_path = config,
				     .layers = &l,
				     .n_layers = 1};
	*e = (struct strata_err){0};
	int r = img_store_import(s, &req, st, e);
	if (r < 0)
		fprintf(stderr, "import: %s\n", e->msg);
	return r;
}

static void path_of(char *p, const char *rel)
{
	snprintf(p, 700, "%s/%s", root, rel);
}

/* ROOT/blobs/N.idx of the first blob of image hex. */
static void table_of(struct img_store *s, const char *hex, char *p)
{
	struct img_record rec;
	struct strata_err e = {0};
	CHECK_EQ(img_store_record(s, hex, &rec, &e), 0);
	CHECK(rec.n_blobs >= 1);
	CHECK_EQ(img_store_blob_path(s, rec.blobs[0], "idx", p, 700), 0);
	img_record_done(&rec);
}

/* Resolving ref fails with code and a message containing word. */
static void resolve_fails(struct img_store *s, const char *ref, int code, const char *word)
{
	struct strata_err e = {0};
	char hex[65];
	CHECK_EQ(img_store_resolve(s, ref, hex, &e), code);
	if (!strstr(e.msg, word)) {
		fprintf(stderr, "resolve %s: '%s' lacks '%s'\n", ref, e.msg, word);
		exit(1);
	}
}

static void record_fails(struct img_store *s, const char *hex, int code, const char *word)
{
	struct strata_err e = {0};
	struct img_record rec;
	CHECK_EQ(img_store_record(s, hex, &rec, &e), code);
	if (!strstr(e.msg, word)) {
		fprintf(stderr, "record %.12s: '%s' lacks '%s'\n", hex, e.msg, word);
		exit(1);
	}
}

/* The good path: names, records, tables and the config verify. */
static void check_intact(struct img_store *s)
{
	struct strata_err e = {0};
	struct img_record rec;
	char hex[65], p[700];
	uint8_t sha[32];
	CHECK_EQ(img_store_resolve(s, "app:1", hex, &e), 0);
	CHECK(!strcmp(hex, HEX1));
	CHECK_EQ(img_store_record(s, hex, &rec, &e), 0);
	CHECK_EQ(rec.version, IMG_REC_VERSION);
	CHECK(rec.flags & IMG_REC_HAS_CONFIG);
	for (uint32_t i = 0; i < rec.n_blobs; i++) {
		CHECK_EQ(img_store_blob_path(s, rec.blobs[i], "idx", p, sizeof(p)), 0);
		CHECK_EQ(img_sha256_file(p, sha, NULL), 0);
		CHECK(!memcmp(sha, rec.tables[i], 32));
	}
	char *doc = NULL;
	CHECK(img_store_read_doc(s, &rec, "config.json", 65536, &doc, &e) > 0);
	CHECK(strstr(doc, "\"Env\""));
	free(doc);
	img_record_done(&rec);
}

/* Rewrites the record at path as format 1 (as before signatures): the
 * format 2 bytes without the document digests, the table digests and the
 * MAC, version 1, no flags. */
static void make_v1(const char *path)
{
	uint8_t v2[8192], v1[8192];
	size_t n = read_file(path, v2, sizeof(v2)), o = 0;
	uint32_t blobs = le32_get(v2 + 16 + 128 + 40), layers = le32_get(v2 + 16 + 128 + 44);
	CHECK(n > 16 + 176 && n < sizeof(v2));
	memcpy(v1, v2, 16 + 64), o = 16 + 64; /* header, manifest and meta digests */
	memcpy(v1 + o, v2 + 16 + 128, 48 + 4 * blobs), o += 48 + 4 * blobs;
	memcpy(v1 + o, v2 + 16 + 176 + 36 * blobs, 32 * layers), o += 32 * layers;
	le16_put(v1 + 4, 1);
	le32_put(v1 + 8, (uint32_t)o);
	le32_put(v1 + 12, 0);
	write_file(path, v1, o);
}

static void tamper_refs(struct img_store *s)
{
	char p[700], q[700], saved[256], other[256];
	path_of(p, "refs/app:1");
	path_of(q, "refs/other:latest");
	size_t n = read_file(p, saved, sizeof(saved)), m = read_file(q, other, sizeof(other));
	CHECK(n > 0 && m > 0);
	/* The case: the ref rewritten to name another image. */
	write_str(p, "sha256:" HEX2 "\n");
	resolve_fails(s, "app:1", -EKEYEXPIRED, "strata image resign");
	/* Another name's signed ref copied over it: the MAC binds the name. */
	write_file(p, other, m);
	resolve_fails(s, "app:1", -EKEYREJECTED, "valid signature");
	/* A MAC line of garbage. */
	write_str(p, "sha256:" HEX2 "\nhmac-sha256:00\n");
	resolve_fails(s, "app:1", -EKEYREJECTED, "valid signature");
	write_file(p, saved, n);
	check_intact(s);
	/* rm can still remove a forged name (the image, named by others, stays). */
	struct strata_err e = {0};
	path_of(p, "refs/evil:1");
	write_str(p, "sha256:" HEX1 "\n");
	resolve_fails(s, "evil:1", -EKEYEXPIRED, "resign");
	CHECK_EQ(img_store_rm(s, "evil:1", false, &e), 0);
	CHECK(access(p, F_OK) < 0);
	check_intact(s);
}

static void tamper_records(struct img_store *s)
{
	char p[700], q[700], saved[8192], other[8192];
	struct img_record rec;
	struct strata_err e = {0};
	path_of(p, "images/" HEX1 "/image");
	path_of(q, "images/" HEX2 "/image");
	size_t n = read_file(p, saved, sizeof(saved)), m = read_file(q, other, sizeof(other));
	CHECK(n > 64 && n < sizeof(saved) && m > 64);
	/* One byte of the body (the file bytes) flipped. */
	saved[16 + 128 + 8] ^= 1;
	write_file(p, saved, n);
	record_fails(s, HEX1, -EKEYREJECTED, "valid signature");
	saved[16 + 128 + 8] ^= 1;
	/* Image 2's signed record moved into image 1's place. */
	write_file(p, other, m);
	record_fails(s, HEX1, -EKEYREJECTED, "valid signature");
	/* Format 1 (unsigned). */
	write_file(p, saved, n);
	make_v1(p);
	record_fails(s, HEX1, -EKEYEXPIRED, "strata image resign");
	/* A truncated record. */
	write_file(p, saved, n - 1);
	record_fails(s, HEX1, -EBADMSG, "corrupt");
	write_file(p, saved, n);
	check_intact(s);

	/* The config rewritten (say, Env with LD_PRELOAD). */
	char *doc = NULL;
	path_of(p, "images/" HEX1 "/config.json");
	CHECK_EQ(img_store_record(s, HEX1, &rec, &e), 0);
	write_str(p, "{\"config\":{\"Env\":[\"LD_PRELOAD=/x\"]}}");
	CHECK_EQ(img_store_read_doc(s, &rec, "config.json", 65536, &doc, &e), -EKEYREJECTED);
	CHECK(strstr(e.msg, "does not match"));
	CHECK(doc == NULL);
	img_record_done(&rec);
}

/* A digest table rewritten: the record's digest no longer matches it, a
 * later import does not dedup against it, importing again replaces it. */
static void tamper_table(struct img_store *s, const char *lp, const char *ld, const char *cfg)
{
	struct img_import_stats st;
	struct strata_err e = {0};
	struct img_record rec;
	char p[700];
	uint8_t buf[65536], sha[32];
	table_of(s, HEX1, p);
	CHECK_EQ(chmod(p, 0644), 0);
	size_t n = read_file(p, buf, sizeof(buf));
	CHECK(n >= 16 + 48);
	buf[16] ^= 0xff; /* the first chunk's digest */
	write_file(p, buf, n);
	CHECK_EQ(img_store_record(s, HEX1, &rec, &e), 0);
	CHECK_EQ(img_sha256_file(p, sha, NULL), 0);
	CHECK(memcmp(sha, rec.tables[0], 32) != 0); /* what strata-fuse compares */
	img_record_done(&rec);
	/* Image 3 has the same layer: nothing may dedup against the rewritten
	 * table, so its chunks are stored anew. */
	const char *m3 = "sha256:3333333333333333333333333333333333333333333333333333333333333333";
	CHECK_EQ(import(s, m3, "three", lp, ld, cfg, &st, &e), 0);
	CHECK(st.chunks_new > 0 && st.chunks_dedup == 0);
	/* Importing image 1 again replaces it: a fresh, consistent image. */
	CHECK_EQ(import(s, M1, "app:1", lp, ld, cfg, &st, &e), 0);
	CHECK(!st.existed);
	check_intact(s);
	CHECK_EQ(img_store_rm(s, "three", false, &e), 0);
}

static void other_keys(struct img_store *s, const char *lp, const char *ld)
{
	struct img_auth_key k;
	struct img_store *t;
	struct img_import_stats st;
	struct strata_err e = {0};
	memset(k.b, 0x5a, sizeof(k.b));
	img_auth_set_default(&k);
	CHECK_EQ(img_store_open(root, &t), 0);
	resolve_fails(t, "app:1", -EKEYREJECTED, "another cluster key");
	record_fails(t, HEX1, -EKEYREJECTED, "another cluster key");
	img_store_free(t);
	/* No key at all: nothing is converted that could not be signed. */
	const char *env = getenv(RPC_KEY_ENV);
	char *saved = env ? strdup(env) : NULL;
	unsetenv(RPC_KEY_ENV);
	img_auth_set_default(NULL);
	CHECK_EQ(img_store_open(root, &t), 0);
	const char *m4 = "sha256:4444444444444444444444444444444444444444444444444444444444444444";
	CHECK_EQ(import(t, m4, "four", lp, ld, NULL, &st, &e), -ENOKEY);
	CHECK(strstr(e.msg, "cluster key"));
	resolve_fails(t, "app:1", -ENOKEY, "cluster key");
	img_store_free(t);
	if (saved)
		setenv(RPC_KEY_ENV, saved, 1);
	free(saved);
	(void)s;
}

static void report(void *ctx, const char *what, const struct strata_err *e)
{
	fprintf(stderr, "resign refused %s: %s\n", what, e->msg);
	(*(int *)ctx)++;
}

/* A format 1 store (records and refs as written before signatures) is
 * upgraded by resign; a chunk that does not match its table is refused. */
static void resign(struct img_store *s)
{
	struct img_resign_stats rs;
	struct strata_err e = {0};
	struct img_record rec;
	char p[700], hex[65];
	int refused = 0;
	for (int i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/images/%s/image", root, i ? HEX2 : HEX1);
		make_v1(p);
	}
	path_of(p, "refs/app:1");
	write_str(p, "sha256:" HEX1 "\n");
	path_of(p, "refs/other:latest");
	write_str(p, "sha256:" HEX2 "\nhmac-sha256:"); /* a wrong one */
	resolve_fails(s, "app:1", -EKEYEXPIRED, "resign");
	CHECK_EQ(img_store_resign(s, report, &refused, &rs, &e), 0);
	CHECK_EQ(rs.images, 2);
	CHECK_EQ(rs.names, 1);		      /* app:1 */
	CHECK_EQ(rs.names_signed_already, 1); /* app:again */
	CHECK_EQ(rs.refused, 1);	      /* other: never re-signed */
	CHECK_EQ(refused, 1);
	check_intact(s);
	resolve_fails(s, "other", -EKEYREJECTED, "valid signature");

	/* A blob whose chunk was altered is not signed. */
	CHECK_EQ(img_store_record(s, HEX2, &rec, &e), 0);
	snprintf(p, sizeof(p), "%s/images/%s/image", root, HEX2);
	make_v1(p);
	char data[700];
	uint32_t last = rec.blobs[rec.n_blobs - 1];
	CHECK_EQ(img_store_blob_path(s, last, "data", data, sizeof(data)), 0);
	img_record_done(&rec);
	CHECK_EQ(chmod(data, 0644), 0);
	int fd = open(data, O_WRONLY);
	CHECK(fd >= 0 && pwrite(fd, "X", 1, 1) == 1);
	close(fd);
	refused = 0;
	CHECK_EQ(img_store_resign(s, report, &refused, &rs, &e), 0);
	CHECK_EQ(rs.images, 0);
	CHECK(refused >= 1);
	record_fails(s, HEX2, -EKEYEXPIRED, "resign");
	CHECK_EQ(img_store_resolve(s, "app:again", hex, &e), 0);
}

int main(void)
{
	struct img_store *s;
	struct img_import_stats st;
	struct strata_err e = {0};
	char p0[512], p1[512], d0[72], d1[72], cfg[512];

	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: blobs are marked with trusted.* xattrs (root only)\n");
		return 77;
	}
	if (img_auth_default(&(struct img_auth_key){0}, &e) < 0) {
		fprintf(stderr, "SKIP: %s\n", e.msg);
		return 77;
	}
	CHECK(mkdtemp(dir));
	snprintf(root, sizeof(root), "%s/store", dir);
	struct tb b0 = tb_layer("base/big", 3u << 20, 'a'), b1 = tb_layer("other/x", 200000, 'c');
	put_layer("l0.tar", &b0, p0, d0);
	put_layer("l1.tar", &b1, p1, d1);
	snprintf(cfg, sizeof(cfg), "%s/config.json", dir);
	write_str(cfg, "{\"config\":{\"Env\":[\"PATH=/bin\"]}}");
	CHECK_EQ(img_store_open(root, &s), 0);
	CHECK_EQ(import(s, M1, "app:1", p0, d0, cfg, &st, &e), 0);
	CHECK_EQ(import(s, M1, "app:again", p0, d0, cfg, &st, &e), 0);
	CHECK(st.existed);
	CHECK_EQ(import(s, M2, "other", p1, d1, cfg, &st, &e), 0);
	check_intact(s);

	tamper_refs(s);
	tamper_records(s);
	tamper_table(s, p0, d0, cfg);
	other_keys(s, p0, d0);
	resign(s);

	img_store_free(s);
	tb_free(&b0), tb_free(&b1);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
	printf("store verify: ok\n");
	return 0;
}
