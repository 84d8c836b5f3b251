/* test_store.c — unit test of the image store (imagesvc/store.h) on a local
 * directory (no cluster, no root): import publishes blobs, record, ref; a
 * second image sharing a layer stores no new chunk; names resolve by tag,
 * digest and prefix; rm drops names, then the image, and removes only blobs
 * no other image lists; a lease makes rm refuse; a corrupt layer fails the
 * import with nothing left behind; gc removes debris and orphans. Root only
 * (blobs carry a trusted.* xattr). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "tests/imagesvc/tarbuild.h"
#include "imagesvc/store.h"
#include "tests/testutil.h"

static char dir[] = "/tmp/test_store.XXXXXX";
static char root[512];

/* Writes buf to dir/name; returns its "sha256:HEX" into digest[72]. */
static void put_file(const char *name, const struct tb *b, char *path, char *digest)
{
	uint8_t d[32];
	char hex[65];
	snprintf(path, 512, "%s/%s", dir, name);
	FILE *f = fopen(path, "wb");
	CHECK(f && fwrite(b->p, 1, b->len, f) == b->len);
	fclose(f);
	SHA256(b->p, b->len, d);
	img_digest_hex(d, hex);
	snprintf(digest, 72, "sha256:%s", hex);
}

/* Entries under root/sub (excluding . and ..). */
static int count(const char *sub)
{
	char cmd[700], out[32] = "";
	snprintf(cmd, sizeof(cmd), "find %s/%s -mindepth 1 | wc -l", root, sub);
	FILE *p = popen(cmd, "r");
	CHECK(p && fgets(out, sizeof(out), p));
	pclose(p);
	return atoi(out);
}

static int import(struct img_store *s, const char *man, const char *name,
		  const struct img_layer_src *l, size_t n, struct img_import_stats *st)
{
	struct strata_err e = {0};
	struct img_import_req req = {
	    .manifest_digest = man, .name = name, .layers = l, .n_layers = n};
	int r = img_store_import(s, &req, st, &e);
	if (r < 0)
		fprintf(stderr, "import: %s\n", e.msg);
	return r;
}

int main(void)
{
	struct img_store *s;
	struct img_import_stats st;
	struct strata_err e = {0};
	char p0[512], p1[512], p2[512], d0[72], d1[72], d2[72], hex[65], hex2[65];
	const char *m1 = "sha256:1111111111111111111111111111111111111111111111111111111111111111";
	const char *m2 = "sha256:2222222222222222222222222222222222222222222222222222222222222222";
	const char *m3 = "sha256:3333333333333333333333333333333333333333333333333333333333333333";

	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: blobs are marked with trusted.* xattrs (root only)\n");
		return 77;
	}
	CHECK(mkdtemp(dir));
	snprintf(root, sizeof(root), "%s/store", dir);
	struct tb b0 = tb_layer("base/big", 3u << 20, 'a'), b1 = tb_layer("app/data", 100000, 'b');
	struct tb g0 = tb_gzip(&b0), b2 = tb_layer("other/x", 200000, 'c');
	put_file("l0.tar.gz", &g0, p0, d0);
	put_file("l1.tar", &b1, p1, d1);
	put_file("l2.tar", &b2, p2, d2);
	CHECK_EQ(img_store_open(root, &s), 0);

	/* Image 1: two layers. */
	struct img_layer_src one[] = {{p0, d0}, {p1, d1}};
	CHECK_EQ(import(s, m1, "app:1", one, 2, &st), 0);
	CHECK_EQ(st.chunks_new, 4);
	CHECK(st.n_blobs >= 1 && !st.existed);
	int blobs1 = count("blobs");
	CHECK(blobs1 >= 2);
	CHECK_EQ(img_store_resolve(s, "app:1", hex, &e), 0);
	CHECK(!strncmp(hex, "1111", 4));
	CHECK_EQ(img_store_resolve(s, "11111111", hex, &e), 0);
	CHECK_EQ(img_store_resolve(s, m1, hex, &e), 0);
	CHECK_EQ(img_store_resolve(s, "nope:1", hex, &(struct strata_err){0}), -ENOENT);
	struct img_record rec;
	CHECK_EQ(img_store_record(s, hex, &rec, &e), 0);
	CHECK_EQ(rec.n_layers, 2);
	CHECK(rec.meta_size > 0 && rec.bytes == (3u << 20) + 100000);
	img_record_done(&rec);

	/* Same image again: only the name. Image 2 shares layer 0: no new chunk
	 * for it, only layer 2's. */
	CHECK_EQ(import(s, m1, "app:again", one, 2, &st), 0);
	CHECK(st.existed);
	struct img_layer_src two[] = {{p0, d0}, {p2, d2}};
	CHECK_EQ(import(s, m2, "other", two, 2, &st), 0);
	CHECK_EQ(st.chunks_dedup, 3);
	CHECK_EQ(st.chunks_new, 1);
	CHECK_EQ(st.blobs_new, 1);

	/* A corrupt layer: the import fails and leaves nothing. */
	int before = count("blobs") + count("images") + count("refs");
	struct tb bad = {0};
	tb_raw(&bad, g0.p, g0.len / 2);
	char pb[512], db[72];
	put_file("bad.tar.gz", &bad, pb, db);
	struct img_layer_src three[] = {{p2, d2}, {pb, db}};
	CHECK(import(s, m3, "broken", three, 2, &st) < 0);
	CHECK_EQ(count("blobs") + count("images") + count("refs"), before);
	CHECK_EQ(count("tmp"), 0);

	/* Leases: rm refuses a mounted image. */
	CHECK_EQ(img_store_lease(s, hex, "node1", true), 0);
	CHECK_EQ(img_store_rm(s, "app:1", false, &(struct strata_err){0}), 0); /* a name */
	CHECK_EQ(img_store_rm(s, "app:again", false, &(struct strata_err){0}), -EBUSY);
	CHECK_EQ(img_store_lease(s, hex, "node1", false), 0);
	CHECK_EQ(img_store_rm(s, "app:again", false, &e), 0);
	CHECK_EQ(img_store_resolve(s, m1, hex2, &(struct strata_err){0}), -ENOENT);
	/* The blob of layer 0 is still listed by "other": it stays. */
	CHECK_EQ(img_store_resolve(s, "other", hex2, &e), 0);
	CHECK_EQ(img_store_record(s, hex2, &rec, &e), 0);
	for (uint32_t i = 0; i < rec.n_blobs; i++) {
		char bp[700];
		CHECK_EQ(img_store_blob_path(s, rec.blobs[i], "data", bp, sizeof(bp)), 0);
		CHECK(access(bp, F_OK) == 0);
	}
	img_record_done(&rec);
	CHECK(count("blobs") < blobs1 + 2);

	/* gc: debris and orphans go. */
	char junk[700];
	snprintf(junk, sizeof(junk), "%s/tmp/import-dead", root);
	CHECK_EQ(mkdir(junk, 0755), 0);
	snprintf(junk, sizeof(junk), "%s/blobs/00000999.data", root);
	close(open(junk, O_CREAT | O_WRONLY, 0644));
	CHECK(img_store_gc(s) >= 1);
	CHECK(access(junk, F_OK) < 0);
	CHECK_EQ(count("tmp"), 0);

	CHECK_EQ(img_store_rm(s, "other", false, &e), 0);
	CHECK_EQ(count("blobs") + count("images") + count("refs") + count("leases"), 0);

	img_store_free(s);
	tb_free(&b0), tb_free(&b1), tb_free(&b2), tb_free(&g0), tb_free(&bad);
	char cmd[600];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
	printf("store: ok\n");
	return 0;
}
