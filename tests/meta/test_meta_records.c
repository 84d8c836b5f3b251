/* test_meta_records.c — the value records of meta/records.c, byte for byte:
 * the namespace's dentry, counter, session and GC records, and the cluster
 * map's node, target, chain and table records (written through a real
 * store, kv_rocksdb), compared with their documented layout (a version
 * byte, then little-endian fields), then decoded back, including the older
 * shapes without the appended fields (target without fsid, chain without
 * want, table without factor) and refusals of a wrong length or version. A
 * change of these bytes is a change of the disk format. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "meta/ns-internal.h"
#include "tests/testutil.h"

/* Writes b, then checks that key holds exactly want[0..n). */
static void expect_record(struct kv *kv, struct kv_batch *b, const struct key *k,
			  const uint8_t *want, size_t n)
{
	_cleanup_free_ uint8_t *v = NULL;
	size_t vl = 0;

	CHECK_EQ(kv_write(kv, b), 0);
	CHECK_EQ(kv_get(kv, k->b, k->len, (void **)&v, &vl), 0);
	CHECK_EQ(vl, n);
	CHECK(memcmp(v, want, n) == 0);
}

static void test_node(struct kv *kv)
{
	static const uint8_t want[] = {1, 3, 0, 'a', ':', '1', 8, 7, 6, 5, 4, 3, 2, 1};
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct key k;

	cluster_put_node(b, 7, "a:1", 0x0102030405060708);
	key_id(&k, K_NODE, 7);
	CHECK_EQ(k.len, 5);
	CHECK(memcmp(k.b, "N\0\0\0\x07", 5) == 0);
	expect_record(kv, b, &k, want, sizeof(want));
}

static void test_target(struct kv *kv)
{
	/* clang-format off */
	static const uint8_t want[] = {
		1,			  /* REC_VERSION */
		7, 0, 0, 0,		  /* node */
		2,			  /* state */
		2, 0, '/', 'p',		  /* path */
		3, 0, 'h', ':', '2',	  /* addr */
		0x10, 0, 0, 0, 0, 0, 0, 0, /* total */
		0x20, 0, 0, 0, 0, 0, 0, 0, /* free */
		0x30, 0, 0, 0, 0, 0, 0, 0, /* last seen */
		0x40, 0, 0, 0, 0, 0, 0, 0, /* fsid (appended) */
	};
	/* clang-format on */
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct cluster_target t = {.target_id = 9,
				   .node_id = 7,
				   .state = 2,
				   .path = "/p",
				   .addr = "h:2",
				   .total_bytes = 0x10,
				   .free_bytes = 0x20,
				   .last_seen_ns = 0x30,
				   .fsid = 0x40},
			      got;
	struct key k;

	cluster_put_target(b, &t);
	key_id(&k, K_TARGET, 9);
	expect_record(kv, b, &k, want, sizeof(want));
	CHECK_EQ(cluster_target_decode(want, sizeof(want), &got), 0);
	CHECK_EQ(got.node_id, 7);
	CHECK_EQ(got.state, 2);
	CHECK(strcmp(got.path, "/p") == 0 && strcmp(got.addr, "h:2") == 0);
	CHECK_EQ(got.total_bytes, 0x10);
	CHECK_EQ(got.free_bytes, 0x20);
	CHECK_EQ(got.last_seen_ns, 0x30);
	CHECK_EQ(got.fsid, 0x40);
	CHECK_EQ(cluster_target_decode(want, sizeof(want) - 8, &got), 0); /* before fsid */
	CHECK_EQ(got.fsid, 0);
	CHECK_EQ(got.last_seen_ns, 0x30);
	CHECK(cluster_target_decode(want, sizeof(want) - 9, &got) < 0);
	uint8_t newer[sizeof(want)];
	memcpy(newer, want, sizeof(want));
	newer[0] = REC_VERSION + 1;
	CHECK(cluster_target_decode(newer, sizeof(newer), &got) < 0);
}

static void test_chain(struct kv *kv)
{
	static const uint8_t want[] = {1, 5, 0, 0, 0, 2, 9, 0, 0, 0, 10, 0, 0, 0, 2};
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct strata_chain c = {.chain_id = 3, .version = 5, .ntargets = 2, .want = 2}, got;
	struct key k;

	c.targets[0] = 9;
	c.targets[1] = 10;
	cluster_put_chain(b, &c);
	key_id(&k, K_CHAIN, 3);
	expect_record(kv, b, &k, want, sizeof(want));
	CHECK_EQ(cluster_chain_decode(k.b, k.len, want, sizeof(want), &got), 0);
	CHECK_EQ(got.chain_id, 3);
	CHECK_EQ(got.version, 5);
	CHECK_EQ(got.ntargets, 2);
	CHECK_EQ(got.targets[1], 10);
	CHECK_EQ(got.want, 2);
	static const uint8_t old[] = {1, 5, 0, 0, 0, 1, 9, 0, 0, 0}; /* before want */
	CHECK_EQ(cluster_chain_decode(k.b, k.len, old, sizeof(old), &got), 0);
	CHECK_EQ(got.want, 1);
	CHECK(cluster_chain_decode(k.b, k.len - 1, want, sizeof(want), &got) < 0);
	static const uint8_t many[] = {1, 5, 0, 0, 0, STRATA_MAX_REPLICAS + 1};
	CHECK(cluster_chain_decode(k.b, k.len, many, sizeof(many), &got) < 0);
}

static void test_table(struct kv *kv)
{
	static const uint8_t want[] = {1, 2, 0, 0, 0, 3, 0, 0, 0, 6, 0, 0, 0, 2};
	static const uint32_t ids[] = {3, 6};
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct rbuf rb;
	struct key k;
	uint32_t n;

	CHECK_EQ(cluster_put_table(b, 4, 2, ids, 2), 0);
	key_id(&k, K_TABLE, 4);
	expect_record(kv, b, &k, want, sizeof(want));
	CHECK_EQ(cluster_table_decode(k.b, k.len, want, sizeof(want), &rb, &n), 0);
	CHECK_EQ(n, 2);
	CHECK_EQ(rbuf_get_u32(&rb), 3);
	CHECK_EQ(rbuf_get_u32(&rb), 6);
	CHECK_EQ(rbuf_get_u8(&rb), 2);
	CHECK_EQ(rbuf_done(&rb), 0);
	CHECK(cluster_table_decode(k.b, k.len, want, 9, &rb, &n) < 0); /* ids cut off */
}

static void test_namespace_records(void)
{
	static const uint8_t dent[] = {1, 0x21, 0, 0, 0, 0, 0, 0, 0, 0, 0x80, 0, 0};
	struct dentry d = {.ino = 0x21, .mode = 0100644}, dg;
	uint8_t raw[GC_REC_LEN];

	dentry_encode(&d, raw);
	CHECK(memcmp(raw, dent, sizeof(dent)) == 0); /* type bits only */
	CHECK_EQ(dentry_decode(dent, sizeof(dent), &dg), 0);
	CHECK_EQ(dg.ino, 0x21);
	CHECK_EQ(dg.mode, 0100000);
	CHECK(dentry_decode(dent, sizeof(dent) - 1, &dg) < 0);

	static const uint8_t ctr[] = {1, 8, 7, 6, 5, 4, 3, 2, 1};
	uint64_t v = 0;
	counter_encode(0x0102030405060708, raw);
	CHECK(memcmp(raw, ctr, sizeof(ctr)) == 0);
	CHECK_EQ(counter_decode(ctr, sizeof(ctr), &v), 0);
	CHECK_EQ(v, 0x0102030405060708);
	CHECK(counter_decode(ctr, sizeof(ctr) + 1, &v) < 0);

	static const uint8_t sess[] = {1, 2, 0, 0, 0, 9, 0, 0, 0, 0, 0, 0, 0, 2, 0, 'c', '1'};
	struct session_rec sr;
	struct wbuf w;
	wbuf_init(&w);
	session_encode(2, 9, "c1", &w);
	CHECK_EQ(w.len, sizeof(sess));
	CHECK(memcmp(w.data, sess, sizeof(sess)) == 0);
	wbuf_done(&w);
	CHECK_EQ(session_decode(sess, sizeof(sess), &sr), 0);
	CHECK_EQ(sr.flags, 2);
	CHECK_EQ(sr.opened_ns, 9);
	CHECK(strcmp(sr.client, "c1") == 0);
	CHECK(session_decode(sess, sizeof(sess) - 1, &sr) < 0);

	static const uint8_t gc[] = {1,	   0x10, 0, 0, 0, 0, 0, 0, 0, 0, 0,
				     0x10, 0,	 3, 0, 0, 0, 5, 0, 0, 0};
	struct inode in = {.a = {.size = 0x10, .layout = {0x100000, 3, 5}}};
	struct ns_gc_item it = {0};
	gc_encode(&in, raw);
	CHECK(memcmp(raw, gc, sizeof(gc)) == 0);
	CHECK_EQ(gc_decode(gc, sizeof(gc), &it), 0);
	CHECK_EQ(it.size, 0x10);
	CHECK_EQ(it.layout.chunk_size, 0x100000);
	CHECK_EQ(it.layout.table_id, 3);
	CHECK_EQ(it.layout.stripe_seed, 5);
	uint8_t newer[sizeof(gc)];
	memcpy(newer, gc, sizeof(gc));
	newer[0] = REC_VERSION + 1;
	CHECK(gc_decode(newer, sizeof(newer), &it) < 0);
}

int main(void)
{
	char dir[] = "/tmp/test_meta_records.XXXXXX";
	char cmd[256], why[256];
	struct kv *kv = NULL;

	CHECK(mkdtemp(dir) != NULL);
	CHECK_EQ(kv_open(dir, &kv, why, sizeof(why)), 0);
	test_namespace_records();
	test_node(kv);
	test_target(kv);
	test_chain(kv);
	test_table(kv);
	kv_close(kv);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
	fprintf(stderr, "test_meta_records: ok\n");
	return 0;
}
