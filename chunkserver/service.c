/* service.c — serves MSG_CHUNK_* requests from the chunk engine (see
 * service.h and fs/chunk_proto.h for the payloads).
 *
 * A READ is read by the engine straight into the reply buffer (wbuf_reserve),
 * a WRITE's data is handed to the engine as a pointer into the request frame:
 * the server copies no chunk data. With a replication engine attached
 * (cs_service.repl, the daemon) reads, writes, truncates and REMOVE_FILE go
 * through replica.c (chain checks, forwarding, CRAQ reads), and resync's
 * LIST, PUT and PUT_PART through resync.c. Without one (in-process tests)
 * they are served locally with no chain checks; both paths read with
 * cs_read_local and write with cs_write_local. */
#include "chunkserver/service.h"

#include <errno.h>

#include "fs/chunk_proto.h"
#include "chunkserver/chunk_store.h"
#include "fs/proto.h"
#include "chunkserver/replica.h"
#include "chunkserver/resync.h"

static struct chunk_store *find_target(struct cs_service *s, uint32_t target_id)
{
	int n = __atomic_load_n(&s->ntargets, __ATOMIC_ACQUIRE);
	for (int i = 0; i < n; i++)
		if (s->targets[i].target_id == target_id)
			return s->targets[i].store;
	return NULL;
}

static void put_meta(struct wbuf *reply, const struct chunk_meta *m)
{
	struct chunk_stat st = {m->version, m->length, m->checksum};
	chunk_stat_put(reply, &st);
}

int cs_read_local(struct chunk_store *cs, const struct chunk_req *r, struct wbuf *reply)
{
	if (r->len == 0)
		return 0;
	uint8_t *dst = wbuf_reserve(reply, r->len);
	if (!dst)
		return -ENOMEM;
	ssize_t n = chunk_store_read(cs, r->ino, r->index, r->off, r->len, dst);
	if (n < 0)
		return (int)n;
	reply->len -= r->len - (size_t)n;
	return 0;
}

int cs_write_local(struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		   struct chunk_stat *ret)
{
	struct chunk_meta m = {0};
	int e;
	if (type == MSG_CHUNK_TRUNCATE)
		e = chunk_store_truncate(cs, r->ino, r->index, r->len, &m);
	else
		e = chunk_store_write_sums(cs, r->ino, r->index, r->off, r->len, r->data,
					   r->data_sums,
					   r->flags & CHUNK_WF_SYNC ? CHUNK_STORE_SYNC : 0, &m);
	*ret = (struct chunk_stat){m.version, m.length, m.checksum};
	return e;
}

static int do_write(struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		    struct wbuf *reply)
{
	struct chunk_stat st;
	int e = cs_write_local(cs, type, r, &st);
	if (e == 0)
		chunk_stat_put(reply, &st);
	return e;
}

static int do_stat(struct chunk_store *cs, const struct chunk_req *r, struct wbuf *reply)
{
	struct chunk_meta m;
	int e = chunk_store_stat(cs, r->ino, r->index, &m);
	if (e == 0)
		put_meta(reply, &m);
	return e;
}

static int do_remove_file(struct chunk_store *cs, const struct chunk_req *r, struct wbuf *reply)
{
	int n = chunk_store_remove_file(cs, r->ino, r->index);
	if (n < 0)
		return n;
	chunk_count_put(reply, (uint32_t)n);
	return 0;
}

int cs_pool_of(void *ctx, uint16_t type, const uint8_t *payload, size_t len)
{
	struct cs_service *s = ctx;
	if (type == MSG_CHUNK_READ_MANY)
		return CS_POOL_CLIENT; /* reads only: they wait on no other server */
	if (type <= MSG_CHUNK_PING || type > MSG_CHUNK_PUT_PART)
		return CS_POOL_CONTROL; /* PING, or answered -EOPNOTSUPP at once */
	if (!s->repl)
		return CS_POOL_CLIENT;
	struct rbuf b;
	struct chunk_route rt;
	rbuf_init(&b, payload, len);
	rt.target_id = rbuf_get_u32(&b);
	rt.chain_id = rbuf_get_u32(&b);
	rt.chain_ver = rbuf_get_u32(&b);
	if (b.err)
		return CS_POOL_CONTROL; /* malformed: answered -EBADMSG at once */
	int pos = repl_chain_pos(s->repl, &rt);
	return pos > 0 && pos < CS_POOL_CONTROL ? pos : CS_POOL_CLIENT;
}

/* One READ, alone or as an entry of READ_MANY: its data appended to reply. */
static int read_one(struct cs_service *s, const struct chunk_req *r, struct wbuf *reply)
{
	struct chunk_store *cs = find_target(s, r->route.target_id);
	if (!cs)
		return -ENXIO;
	return s->repl ? repl_handle(s->repl, cs, MSG_CHUNK_READ, r, reply)
		       : cs_read_local(cs, r, reply);
}

/* READ_MANY: each entry as READ would answer it, one after the other (a
 * batch of the native client's 4 KiB reads costs one request and one reply
 * instead of one each). An entry that fails leaves no data in the reply. */
static int read_many(struct cs_service *s, struct rbuf *req, struct wbuf *reply)
{
	struct chunk_req reqs[CHUNK_READ_MANY_MAX];
	int n = chunk_read_many_decode(req, reqs, CHUNK_READ_MANY_MAX);
	if (n < 0)
		return -EBADMSG;
	for (int i = 0; i < n; i++) {
		size_t at = reply->len;
		uint8_t *head = wbuf_reserve(reply, 8);
		if (!head)
			return -ENOMEM;
		int e = read_one(s, &reqs[i], reply);
		if (e < 0)
			reply->len = at + 8; /* no partial data */
		head = reply->data + at;     /* reserve may have moved the buffer */
		uint32_t len = (uint32_t)(reply->len - at - 8);
		uint32_t st = (uint32_t)(e < 0 ? e : 0);
		le32_put(head, st);
		le32_put(head + 4, len);
	}
	return 0;
}

int cs_handle(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
	      const struct rpc_peer *peer)
{
	struct cs_service *s = ctx;
	struct chunk_req r;
	if (type == MSG_CHUNK_READ_MANY)
		return read_many(s, req, reply);
	int e = chunk_req_decode(type, req, &r);
	if (e == -EINVAL)
		return -EOPNOTSUPP;
	if (e < 0)
		return -EBADMSG;
	if (type == MSG_CHUNK_PING)
		return 0;
	/* the frame's verified data is this request's data: keep its sums */
	if (peer && peer->data &&
	    (type == MSG_CHUNK_WRITE || type == MSG_CHUNK_WRITE_EX || type == MSG_CHUNK_PUT ||
	     type == MSG_CHUNK_PUT_PART) &&
	    r.data == (const void *)peer->data && r.len == peer->data_len && r.len > 0) {
		r.data_hashed = true;
		r.data_hash = peer->data_hash;
		r.data_sums = peer->data_sums;
	}
	struct chunk_store *cs = find_target(s, r.route.target_id);
	if (!cs)
		return -ENXIO;
	if (s->repl &&
	    (type == MSG_CHUNK_LIST || type == MSG_CHUNK_PUT || type == MSG_CHUNK_PUT_PART))
		return resync_handle(s->repl, cs, type, &r, reply);
	if (s->repl &&
	    (type == MSG_CHUNK_READ || type == MSG_CHUNK_WRITE || type == MSG_CHUNK_WRITE_EX ||
	     type == MSG_CHUNK_TRUNCATE || type == MSG_CHUNK_REMOVE_FILE))
		return repl_handle(s->repl, cs, type, &r, reply);
	switch (type) {
	case MSG_CHUNK_READ:
		return cs_read_local(cs, &r, reply);
	case MSG_CHUNK_WRITE:
	case MSG_CHUNK_WRITE_EX:
	case MSG_CHUNK_TRUNCATE:
		return do_write(cs, type, &r, reply);
	case MSG_CHUNK_LIST:
	case MSG_CHUNK_PUT:
	case MSG_CHUNK_PUT_PART:
		return -EOPNOTSUPP; /* replication only */
	case MSG_CHUNK_REMOVE:
		e = chunk_store_remove(cs, r.ino, r.index);
		return e < 0 ? e : 0;
	case MSG_CHUNK_REMOVE_FILE:
		return do_remove_file(cs, &r, reply);
	case MSG_CHUNK_SYNC:
		return chunk_store_sync(cs);
	case MSG_CHUNK_STAT:
		return do_stat(cs, &r, reply);
	}
	return -EOPNOTSUPP;
}
