/* fuzz_meta_proto.c — libFuzzer entry point over every strata-meta payload
 * decoder (meta_proto.h): the first two input bytes pick a message type,
 * the rest is the payload. Nothing may crash or read out of bounds; a
 * request that decodes must re-encode and decode to the same fields. */
#include <stdint.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include "fs/sbnode_proto.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"

static void roundtrip(uint16_t type, const struct meta_req *q)
{
	struct meta_req *q2 = malloc(sizeof(*q2));
	struct wbuf w;
	struct rbuf r;

	wbuf_init(&w);
	if (meta_req_encode(type, q, &w) == 0) {
		rbuf_init(&r, w.data, w.len);
		if (meta_req_decode(type, &r, q2) != 0)
			__builtin_trap();
		if (q2->ino != q->ino || q2->parent != q->parent || strcmp(q2->name, q->name) ||
		    q2->value_len != q->value_len || strcmp(q2->target, q->target) ||
		    q2->op.conn != q->op.conn || q2->op.unique != q->op.unique)
			__builtin_trap();
	}
	wbuf_done(&w);
	free(q2);
}

static void fuzz_requests(uint16_t type, const uint8_t *p, size_t n)
{
	struct meta_req *q = malloc(sizeof(*q));
	struct mgmt_req *m = malloc(sizeof(*m));
	struct rbuf r;

	rbuf_init(&r, p, n);
	if (meta_req_decode(type, &r, q) == 0)
		roundtrip(type, q);
	rbuf_init(&r, p, n);
	(void)mgmt_req_decode(type, &r, m);
	free(m);
	free(q);
}

static void fuzz_replies(const uint8_t *p, size_t n)
{
	static struct meta_dirent ents[64];
	struct strata_attr a;
	struct strata_statfs s;
	struct strata_routing rt;
	uint32_t ids[MGMT_MAX_TARGETS], node;
	struct rbuf r;
	int more;

	rbuf_init(&r, p, n);
	(void)meta_attr_get(&r, &a);
	rbuf_init(&r, p, n);
	(void)meta_statfs_get(&r, &s);
	/* batched closes: the request (re-encoded: same bytes back) and reply */
	static struct meta_close_item ci[META_CLOSE_MANY_MAX];
	static int cres[META_CLOSE_MANY_MAX];
	uint32_t nci;
	rbuf_init(&r, p, n);
	if (meta_close_many_get(&r, ci, &nci) == 0) {
		struct wbuf w;
		wbuf_init(&w);
		meta_close_many_put(&w, ci, nci);
		if (!w.err && (w.len != n || memcmp(w.data, p, n) != 0))
			__builtin_trap();
		wbuf_done(&w);
	}
	rbuf_init(&r, p, n);
	(void)meta_close_many_reply_get(&r, cres, n ? p[0] % META_CLOSE_MANY_MAX : 0);
	rbuf_init(&r, p, n);
	(void)meta_readdir_get(&r, ents, 64, &more);
	rbuf_init(&r, p, n);
	if (meta_routing_get(&r, &rt) == 0)
		strata_routing_done(&rt);
	rbuf_init(&r, p, n);
	(void)mgmt_register_reply_get(&r, &node, ids, n ? p[0] % MGMT_MAX_TARGETS : 0);
	/* fsck: the report, the chunk request (re-encoded: same bytes back) and reply */
	struct meta_fsck_report fr;
	rbuf_init(&r, p, n);
	if (meta_fsck_report_get(&r, &fr) == 0)
		meta_fsck_report_done(&fr);
	struct meta_fsck_chunk *items = NULL, fc[8];
	uint32_t flags, nitems;
	rbuf_init(&r, p, n);
	if (meta_fsck_chunks_req_get(&r, &flags, &items, &nitems) == 0) {
		struct wbuf w;
		wbuf_init(&w);
		meta_fsck_chunks_req_put(&w, flags, items, nitems);
		if (!w.err && (w.len > n || memcmp(w.data, p, w.len) != 0))
			__builtin_trap();
		wbuf_done(&w);
		free(items);
	}
	rbuf_init(&r, p, n);
	(void)meta_fsck_chunks_reply_get(&r, fc, n ? p[0] % 8 : 0);
}

/* The sandbox node lease (sbnode_proto.h): a report that decodes encodes
 * to the same bytes; the table decodes or fails without a leak. */
static void fuzz_sbnodes(const uint8_t *p, size_t n)
{
	static struct sbnode_report rep;
	struct sbnode_table t;
	struct rbuf r;
	uint32_t lease;
	bool rc;

	rbuf_init(&r, p, n);
	if (sbnode_report_get(&r, &rep) == 0) {
		struct wbuf w;
		wbuf_init(&w);
		sbnode_report_put(&w, &rep);
		if (!w.err && w.len > n)
			__builtin_trap();
		wbuf_done(&w);
	}
	rbuf_init(&r, p, n);
	if (sbnode_table_get(&r, &t) == 0)
		sbnode_table_done(&t);
	rbuf_init(&r, p, n);
	(void)sbnode_reply_get(&r, &lease, &rc);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 2)
		return 0;
	/* low byte picks among the meta and mgmt numbers, so every decoder is hit */
	uint16_t pick = data[0];
	uint16_t type = (data[1] & 1) ? MSG_MGMT_REGISTER + pick % 3 : MSG_META_PING + pick % 24;
	fuzz_requests(type, data + 2, size - 2);
	fuzz_replies(data + 2, size - 2);
	fuzz_sbnodes(data + 2, size - 2);
	return 0;
}
