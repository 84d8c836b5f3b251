/* test_chunk_proto.c — the MSG_CHUNK_* codecs (fs/chunk_proto.c): every
 * request round-trips; every truncation of a valid payload and every value
 * out of range is -EBADMSG; trailing bytes (a newer minor) are accepted;
 * and layout.c's round-robin striping. */
#include <errno.h>
#include <string.h>

#include "fs/chunk_proto.h"
#include "fs/layout.h"
#include "fs/proto.h"
#include "tests/testutil.h"

static const uint16_t types[] = {MSG_CHUNK_PING,     MSG_CHUNK_READ,   MSG_CHUNK_WRITE,
				 MSG_CHUNK_TRUNCATE, MSG_CHUNK_REMOVE, MSG_CHUNK_REMOVE_FILE,
				 MSG_CHUNK_SYNC,     MSG_CHUNK_STAT};

static struct chunk_req sample(void)
{
	return (struct chunk_req){.route = {3, 4, 5},
				  .ino = 0x1122334455667788ull,
				  .index = 9,
				  .off = 4096,
				  .len = 100,
				  .chunk_size = 1u << 20,
				  .flags = CHUNK_WF_SYNC};
}

/* Encodes r (plus WRITE data) into w. */
static void encode(uint16_t type, const struct chunk_req *r, struct wbuf *w)
{
	wbuf_init(w);
	CHECK_EQ(chunk_req_encode(type, r, w), 0);
	if (type == MSG_CHUNK_WRITE)
		wbuf_put_bytes(w, r->data, r->len);
}

static int decode(uint16_t type, const void *p, size_t n, struct chunk_req *ret)
{
	struct rbuf b;
	rbuf_init(&b, p, n);
	return chunk_req_decode(type, &b, ret);
}

static void test_roundtrip(void)
{
	uint8_t data[100];
	memset(data, 0xab, sizeof(data));
	for (size_t i = 0; i < sizeof(types) / sizeof(types[0]); i++) {
		uint16_t t = types[i];
		struct chunk_req r = sample(), d;
		r.data = data;
		if (t == MSG_CHUNK_TRUNCATE)
			r.len = 5000;
		struct wbuf w;
		encode(t, &r, &w);
		CHECK_EQ(decode(t, w.data, w.len, &d), 0);
		if (t != MSG_CHUNK_PING) {
			CHECK_EQ(d.route.target_id, 3);
			CHECK_EQ(d.route.chain_id, 4);
			CHECK_EQ(d.route.chain_ver, 5);
		}
		if (t != MSG_CHUNK_PING && t != MSG_CHUNK_SYNC) {
			CHECK(d.ino == r.ino);
			CHECK_EQ(d.index, 9);
		}
		if (t == MSG_CHUNK_READ || t == MSG_CHUNK_WRITE)
			CHECK_EQ(d.off, 4096);
		if (t == MSG_CHUNK_READ || t == MSG_CHUNK_WRITE || t == MSG_CHUNK_TRUNCATE)
			CHECK_EQ(d.len, r.len);
		if (t == MSG_CHUNK_WRITE) {
			CHECK_EQ(d.flags, CHUNK_WF_SYNC);
			CHECK(d.data && memcmp(d.data, data, 100) == 0);
		}
		/* every strict prefix is malformed (PING has none) */
		for (size_t n = 0; n < w.len; n++)
			CHECK_EQ(decode(t, w.data, n, &d), -EBADMSG);
		/* a newer minor's trailing field is ignored */
		wbuf_put_u32(&w, 0xdeadbeef);
		CHECK_EQ(decode(t, w.data, w.len, &d), 0);
		wbuf_done(&w);
	}
	struct chunk_req d;
	CHECK_EQ(decode(0x0299, "", 0, &d), -EINVAL);
	CHECK_EQ(decode(MSG_META_PING, "", 0, &d), -EINVAL);
}

static void expect_bad(uint16_t type, struct chunk_req r)
{
	uint8_t data[64] = {0};
	struct wbuf w;
	wbuf_init(&w);
	CHECK_EQ(chunk_req_encode(type, &r, &w), 0);
	if (type == MSG_CHUNK_WRITE)
		wbuf_put_bytes(&w, data, r.len < sizeof(data) ? r.len : sizeof(data));
	struct chunk_req d;
	CHECK_EQ(decode(type, w.data, w.len, &d), -EBADMSG);
	wbuf_done(&w);
}

static void test_limits(void)
{
	struct chunk_req r = sample();
	r.len = CHUNK_IO_MAX + 1;
	expect_bad(MSG_CHUNK_READ, r);
	r = sample();
	r.off = STRATA_MAX_CHUNK_SIZE;
	expect_bad(MSG_CHUNK_READ, r);
	r = sample();
	r.off = 0xffffffff; /* overflow of off + len */
	expect_bad(MSG_CHUNK_READ, r);
	r = sample();
	r.chunk_size = 3u << 20; /* not a power of two */
	expect_bad(MSG_CHUNK_WRITE, r);
	r.chunk_size = 1u << 10; /* too small */
	expect_bad(MSG_CHUNK_WRITE, r);
	r = sample();
	r.off = (1u << 20) - 10; /* past the chunk */
	expect_bad(MSG_CHUNK_WRITE, r);
	r = sample();
	r.flags = 0x80;
	expect_bad(MSG_CHUNK_WRITE, r);
	r = sample();
	r.len = 64; /* claims 64 data bytes ... */
	struct wbuf w;
	wbuf_init(&w);
	CHECK_EQ(chunk_req_encode(MSG_CHUNK_WRITE, &r, &w), 0);
	wbuf_put_bytes(&w, "short", 5); /* ... carries 5 */
	struct chunk_req d;
	CHECK_EQ(decode(MSG_CHUNK_WRITE, w.data, w.len, &d), -EBADMSG);
	wbuf_done(&w);
	r = sample();
	r.len = (2u << 20);
	expect_bad(MSG_CHUNK_TRUNCATE, r);
}

static void test_replies(void)
{
	struct wbuf w;
	wbuf_init(&w);
	struct chunk_stat s = {7, 12345, 0xfeedull}, g;
	chunk_stat_put(&w, &s);
	struct rbuf b;
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_stat_get(&b, &g), 0);
	CHECK(g.version == 7 && g.length == 12345 && g.checksum == 0xfeed);
	rbuf_init(&b, w.data, w.len - 1);
	CHECK_EQ(chunk_stat_get(&b, &g), -EBADMSG);
	wbuf_reset(&w);
	chunk_count_put(&w, 42);
	uint32_t c;
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_count_get(&b, &c), 0);
	CHECK_EQ(c, 42);
	rbuf_init(&b, w.data, 2);
	CHECK_EQ(chunk_count_get(&b, &c), -EBADMSG);
	wbuf_done(&w);
	CHECK_EQ(chunk_read_reply_check(10, 10), 0);
	CHECK_EQ(chunk_read_reply_check(11, 10), -EBADMSG);
}

/* READ_MANY: entries as READ's fields, the count and total bounded, replies
 * checked against what was asked. */
static void test_read_many(void)
{
	struct chunk_req q[CHUNK_READ_MANY_MAX + 1], d[CHUNK_READ_MANY_MAX];
	struct wbuf w;
	struct rbuf b;

	for (int i = 0; i <= CHUNK_READ_MANY_MAX; i++)
		q[i] = (struct chunk_req){.route = {100 + i, 7, 3},
					  .ino = 42 + i,
					  .index = i,
					  .off = 4096 * i,
					  .len = 4096};
	wbuf_init(&w);
	CHECK_EQ(chunk_read_many_encode(q, 3, &w), 0);
	CHECK_EQ(w.len, 4 + 3 * CHUNK_READ_MANY_ENTRY);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_decode(&b, d, CHUNK_READ_MANY_MAX), 3);
	for (int i = 0; i < 3; i++)
		CHECK(d[i].route.target_id == q[i].route.target_id && d[i].ino == q[i].ino &&
		      d[i].index == q[i].index && d[i].off == q[i].off && d[i].len == 4096);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_decode(&b, d, 2), -EBADMSG); /* more than the caller holds */
	rbuf_init(&b, w.data, w.len - 1);
	CHECK_EQ(chunk_read_many_decode(&b, d, CHUNK_READ_MANY_MAX), -EBADMSG);
	wbuf_put_u8(&w, 0);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_decode(&b, d, CHUNK_READ_MANY_MAX), -EBADMSG); /* trailing */
	/* limits on both sides */
	wbuf_reset(&w);
	CHECK_EQ(chunk_read_many_encode(q, 0, &w), -EINVAL);
	CHECK_EQ(chunk_read_many_encode(q, CHUNK_READ_MANY_MAX + 1, &w), -EINVAL);
	q[1].len = CHUNK_IO_MAX;
	CHECK_EQ(chunk_read_many_encode(q, 2, &w), -EINVAL); /* 4 MiB + 4 KiB */
	wbuf_reset(&w);
	wbuf_put_u32(&w, 0);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_decode(&b, d, CHUNK_READ_MANY_MAX), -EBADMSG);
	/* a forged total above CHUNK_IO_MAX, each entry valid on its own */
	wbuf_reset(&w);
	wbuf_put_u32(&w, 2);
	for (int i = 0; i < 2; i++)
		CHECK_EQ(chunk_req_encode(MSG_CHUNK_READ, &q[1], &w), 0);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_decode(&b, d, CHUNK_READ_MANY_MAX), -EBADMSG);
	q[1].len = 4096;

	/* replies: data, an error, a short read */
	struct chunk_read_ans a[3];
	uint8_t data[4096] = {1, 2, 3};
	wbuf_reset(&w);
	wbuf_put_u32(&w, 0), wbuf_put_u32(&w, 4096), wbuf_put_bytes(&w, data, 4096);
	wbuf_put_u32(&w, (uint32_t)-EIO), wbuf_put_u32(&w, 0);
	wbuf_put_u32(&w, 0), wbuf_put_u32(&w, 3), wbuf_put_bytes(&w, data, 3);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_reply_get(&b, q, 3, a), 0);
	CHECK(a[0].status == 0 && a[0].len == 4096 && !memcmp(a[0].data, data, 4096));
	CHECK(a[1].status == -EIO && a[1].len == 0);
	CHECK(a[2].status == 0 && a[2].len == 3);
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_reply_get(&b, q, 2, a), -EBADMSG); /* an entry too many */
	rbuf_init(&b, w.data, w.len - 1);
	CHECK_EQ(chunk_read_many_reply_get(&b, q, 3, a), -EBADMSG); /* cut short */
	wbuf_reset(&w);
	wbuf_put_u32(&w, 0), wbuf_put_u32(&w, 4097); /* more than asked */
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_reply_get(&b, q, 1, a), -EBADMSG);
	wbuf_reset(&w);
	wbuf_put_u32(&w, 5), wbuf_put_u32(&w, 0); /* a positive status */
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_reply_get(&b, q, 1, a), -EBADMSG);
	wbuf_reset(&w);
	wbuf_put_u32(&w, (uint32_t)-EIO), wbuf_put_u32(&w, 1),
	    wbuf_put_u8(&w, 9); /* error + data */
	rbuf_init(&b, w.data, w.len);
	CHECK_EQ(chunk_read_many_reply_get(&b, q, 1, a), -EBADMSG);
	wbuf_done(&w);
}

static void test_layout(void)
{
	struct strata_target targets[2] = {{.target_id = 101, .addr = "a:1"},
					   {.target_id = 102, .addr = "b:2"}};
	struct strata_chain chains[2] = {{.chain_id = 1, .ntargets = 1, .targets = {101}},
					 {.chain_id = 2, .ntargets = 1, .targets = {102}}};
	uint32_t ids[2] = {2, 1};
	struct strata_chain_table tables[1] = {{.table_id = 5, .nchains = 2, .chain_ids = ids}};
	struct strata_routing r = {.version = 1,
				   .ntargets = 2,
				   .nchains = 2,
				   .ntables = 1,
				   .targets = targets,
				   .chains = chains,
				   .tables = tables};
	struct strata_layout l = {.chunk_size = 1u << 20, .table_id = 5, .stripe_seed = 7};
	/* seed 7 -> slot 1 -> chain 1; then alternate */
	CHECK_EQ(layout_chain_for_chunk(&r, &l, 0)->chain_id, 1);
	CHECK_EQ(layout_chain_for_chunk(&r, &l, 1)->chain_id, 2);
	CHECK_EQ(layout_chain_for_chunk(&r, &l, 2)->chain_id, 1);
	l.stripe_seed = 0xffffffffu; /* no overflow */
	CHECK_EQ(layout_chain_for_chunk(&r, &l, 1)->chain_id, 2);
	l.table_id = 6;
	CHECK(layout_chain_for_chunk(&r, &l, 0) == NULL);
	CHECK(routing_target(&r, 102) == &targets[1]);
	CHECK(routing_target(&r, 103) == NULL);
	CHECK(routing_table(&r, 5) == &tables[0]);
	CHECK(routing_chain(&r, 3) == NULL);
	tables[0].nchains = 0;
	l.table_id = 5;
	CHECK(layout_chain_for_chunk(&r, &l, 0) == NULL);
}

int main(void)
{
	test_roundtrip();
	test_limits();
	test_replies();
	test_read_many();
	test_layout();
	return 0;
}
