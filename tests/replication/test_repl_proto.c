/* test_repl_proto.c — the replication messages' codecs: WRITE_EX, LIST,
 * PUT, PUT_PART, TRUNCATE's appended fields, LIST replies, MSG_MGMT_SYNC_DONE, the
 * admin cluster view and the routing table's appended lease. Round trips,
 * every strict prefix rejected, out-of-range values rejected. */
#include <errno.h>
#include <string.h>

#include "tests/testutil.h"
#include "fs/chunk_proto.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"

static int decode(uint16_t type, const struct wbuf *w, size_t n, struct chunk_req *ret)
{
	struct rbuf b;
	rbuf_init(&b, w->data, n);
	return chunk_req_decode(type, &b, ret);
}

static void roundtrip(uint16_t type, const struct chunk_req *r, bool data)
{
	struct wbuf w;
	struct chunk_req d;
	wbuf_init(&w);
	CHECK_EQ(chunk_req_encode(type, r, &w), 0);
	size_t fixed = w.len;
	if (data)
		wbuf_put_bytes(&w, r->data, r->len);
	CHECK_EQ(decode(type, &w, w.len, &d), 0);
	CHECK_EQ(d.route.chain_ver, r->route.chain_ver);
	CHECK(d.ino == r->ino && d.index == r->index && d.len == r->len && d.flags == r->flags);
	CHECK(d.client_id == r->client_id && d.req_id == r->req_id && d.version == r->version);
	if (data)
		CHECK(d.data && memcmp(d.data, r->data, r->len) == 0);
	for (size_t n = 0; n < (data ? w.len : fixed); n++)
		if (!(type == MSG_CHUNK_TRUNCATE && n >= fixed - 20))
			CHECK_EQ(decode(type, &w, n, &d), -EBADMSG);
	wbuf_done(&w);
}

static void test_chunk_msgs(void)
{
	uint8_t data[300];
	memset(data, 7, sizeof(data));
	struct chunk_req r = {.route = {3, 4, 5},
			      .ino = 1ull << 40,
			      .index = 9,
			      .off = 100,
			      .len = 300,
			      .chunk_size = 1 << 20,
			      .flags = CHUNK_WF_FWD,
			      .client_id = 0xabcdef,
			      .req_id = 77,
			      .data = data};
	roundtrip(MSG_CHUNK_WRITE_EX, &r, true);
	struct chunk_req t = {.route = {3, 4, 5},
			      .ino = 2,
			      .index = 1,
			      .len = 4096,
			      .chunk_size = 1 << 20,
			      .flags = CHUNK_WF_FWD,
			      .client_id = 5,
			      .req_id = 6};
	roundtrip(MSG_CHUNK_TRUNCATE, &t, false);
	struct chunk_req l = {.route = {3, 4, 5},
			      .ino = 2,
			      .index = 1,
			      .len = 100,
			      .flags = CHUNK_LF_FIRST | CHUNK_LF_VERIFY};
	roundtrip(MSG_CHUNK_LIST, &l, false);
	struct chunk_req p = {.route = {3, 4, 5},
			      .ino = 2,
			      .index = 1,
			      .len = 300,
			      .chunk_size = 1 << 16,
			      .version = 42,
			      .data = data};
	roundtrip(MSG_CHUNK_PUT, &p, true);
	/* PUT_PART: a piece of a large chunk */
	struct chunk_req pp = {.route = {3, 4, 5},
			       .ino = 2,
			       .index = 1,
			       .version = 42,
			       .total = 40 << 20,
			       .off = 8 << 20,
			       .len = 300,
			       .flags = CHUNK_PP_LAST,
			       .tag = 0x1234567890ull,
			       .checksum = 0xfeedfacecafeull,
			       .data = data};
	roundtrip(MSG_CHUNK_PUT_PART, &pp, true);
	{
		struct wbuf w;
		struct chunk_req d;
		wbuf_init(&w);
		CHECK_EQ(chunk_req_encode(MSG_CHUNK_PUT_PART, &pp, &w), 0);
		wbuf_put_bytes(&w, data, 300);
		CHECK_EQ(decode(MSG_CHUNK_PUT_PART, &w, w.len, &d), 0);
		CHECK(d.total == pp.total && d.off == pp.off && d.tag == pp.tag &&
		      d.checksum == pp.checksum && d.data && memcmp(d.data, data, 300) == 0);
		wbuf_done(&w);
		struct chunk_req bad[] = {pp, pp, pp, pp, pp};
		bad[0].len = CHUNK_IO_MAX + 1, bad[0].total = 64 << 20; /* too long */
		bad[1].off = bad[1].total;				/* past the chunk */
		bad[2].total = (64 << 20) + 65536; /* above the largest chunk */
		bad[3].version = 0;
		bad[4].flags = 0x4;
		for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
			wbuf_init(&w);
			CHECK_EQ(chunk_req_encode(MSG_CHUNK_PUT_PART, &bad[i], &w), 0);
			CHECK_EQ(decode(MSG_CHUNK_PUT_PART, &w, w.len, &d), -EBADMSG);
			wbuf_done(&w);
		}
	}
	/* out of range */
	struct wbuf w;
	struct chunk_req d;
	l.len = CHUNK_LIST_MAX + 1;
	wbuf_init(&w);
	CHECK_EQ(chunk_req_encode(MSG_CHUNK_LIST, &l, &w), 0);
	CHECK_EQ(decode(MSG_CHUNK_LIST, &w, w.len, &d), -EBADMSG);
	wbuf_done(&w);
	r.flags = 0x80;
	wbuf_init(&w);
	CHECK_EQ(chunk_req_encode(MSG_CHUNK_WRITE_EX, &r, &w), 0);
	wbuf_put_bytes(&w, data, 300);
	CHECK_EQ(decode(MSG_CHUNK_WRITE_EX, &w, w.len, &d), -EBADMSG);
	wbuf_done(&w);
	/* LIST reply */
	struct chunk_list_ent e[2] = {{1, 2, {3, 4, 5}}, {6, 7, {8, 9, 10}}}, g[2];
	bool more = false;
	wbuf_init(&w);
	chunk_list_put(&w, e, 2, true);
	struct rbuf b;
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_list_get(&b, g, 2, &more), 2);
	CHECK(more && g[1].ino == 6 && g[1].st.checksum == 10);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_list_get(&b, g, 1, &more), -EBADMSG); /* more than the caller holds */
	rbuf_init(&b, w.data, w.len - 1);
	CHECK_EQ(chunk_list_get(&b, g, 2, &more), -EBADMSG);
	wbuf_done(&w);
}

static void test_mgmt_msgs(void)
{
	struct mgmt_sync s = {1, 2, 3, 40, 50, 1}, g;
	struct wbuf w;
	struct rbuf b;
	wbuf_init(&w);
	mgmt_sync_put(&w, &s);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(mgmt_sync_get(&b, &g), 0);
	CHECK(g.chain_ver == 2 && g.total == 50 && g.finished == 1);
	rbuf_init(&b, w.data, w.len - 1);
	CHECK_EQ(mgmt_sync_get(&b, &g), -EBADMSG);
	wbuf_done(&w);

	struct mgmt_node_info n = {7, "10.77.0.11:7000", 123, 1};
	struct mgmt_target_detail t = {8, 7, 2, TARGET_SYNCING, "/t", 100, 50, 3, 9};
	struct mgmt_cluster c = {3000, 3, 3, 1, 1, &n, &t}, cg;
	wbuf_init(&w);
	mgmt_cluster_put(&w, &c);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(mgmt_cluster_get(&b, &cg), 0);
	CHECK(cg.lease_ms == 3000 && cg.nnodes == 1 && cg.ntargets == 1);
	CHECK(!strcmp(cg.nodes[0].addr, n.addr) && cg.targets[0].sync_total == 9);
	mgmt_cluster_done(&cg);
	for (size_t k = 0; k < w.len; k++) {
		rbuf_init(&b, w.data, k);
		CHECK(mgmt_cluster_get(&b, &cg) < 0);
	}
	wbuf_done(&w);

	/* routing: the appended lease and replication factors, and older
	 * servers without them */
	struct strata_chain ch = {1, 4, 1, {8}, .want = 1};
	struct strata_target tg = {8, 7, 0, "a:1"};
	uint32_t ids[1] = {1};
	struct strata_chain_table tb = {
	    .table_id = 2, .nchains = 1, .chain_ids = ids, .replicas = 1};
	struct strata_routing r = {.version = 9,
				   .lease_ms = 2500,
				   .ntargets = 1,
				   .nchains = 1,
				   .ntables = 1,
				   .targets = &tg,
				   .chains = &ch,
				   .tables = &tb},
			      rg;
	size_t factors = 4 + 1 + 4 + 1; /* table count, factor, chain count, want */
	wbuf_init(&w);
	meta_routing_put(&w, &r);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(meta_routing_get(&b, &rg), 0);
	CHECK_EQ(rg.lease_ms, 2500);
	CHECK_EQ(rg.tables[0].replicas, 1);
	CHECK_EQ(rg.chains[0].want, 1);
	strata_routing_done(&rg);
	rbuf_init(&b, w.data, w.len - factors);
	CHECK_EQ(meta_routing_get(&b, &rg), 0);
	CHECK(rg.lease_ms == 2500 && rg.tables[0].replicas == 0 && rg.chains[0].want == 0);
	strata_routing_done(&rg);
	rbuf_init(&b, w.data, w.len - factors - 4);
	CHECK_EQ(meta_routing_get(&b, &rg), 0);
	CHECK_EQ(rg.lease_ms, 0);
	strata_routing_done(&rg);
	rbuf_init(&b, w.data, w.len - 1); /* cut inside the factors */
	CHECK_EQ(meta_routing_get(&b, &rg), -EBADMSG);
	wbuf_done(&w);
}

int main(void)
{
	test_chunk_msgs();
	test_mgmt_msgs();
	fprintf(stderr, "test_repl_proto: ok\n");
	return 0;
}
