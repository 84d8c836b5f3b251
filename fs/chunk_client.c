/* chunk_client.c — the client of the chunkservers (chunk_client.h).
 *
 * Routing: a refcounted snapshot of the routing table, fetched with
 * mgmt_routing and refetched when older than ROUTING_MAX_AGE_MS or when a
 * call fails in a way that suggests it is stale (-ENXIO: the target is not
 * on that server or not in the table; -ESTALE: chain version moved;
 * -ECONNREFUSED: the server moved). Such a call is retried once on the
 * fresh table. Calls in flight keep their snapshot alive.
 *
 * Data: a read's reply payload is received straight into the caller's buffer
 * (rpc_reply.buf); a write sends the caller's buffer as a second iovec. The
 * client copies no chunk data.
 *
 * Until CRAQ replication exists, reads and writes both go to the chain's
 * head so that a read always sees the writes; REMOVE_FILE and SYNC go to
 * every target of the table. */
#include "chunk_client.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunk_proto.h"
#include "cleanup.h"
#include "layout.h"
#include "proto.h"
#include "rpc.h"

#define ROUTING_MAX_AGE_MS 5000

struct rt_snap {
	int refs;
	struct strata_routing r;
};

struct cc_conn {
	char addr[64];
	struct rpc_client *rpc;
};

struct chunk_client {
	struct meta_client *mc;
	struct rpc_client_opts opts;
	pthread_mutex_t lock;
	struct rt_snap *snap; /* current table, one ref held by cc */
	int64_t fetched_ms; /* last fetch attempt, successful or not */
	bool pinned, fetching;
	struct cc_conn *conns;
	int nconns, capconns;
};

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

/* ---- routing snapshots ------------------------------------------------- */

static void routing_free(struct strata_routing *r)
{
	for (uint32_t i = 0; r->tables && i < r->ntables; i++)
		free(r->tables[i].chain_ids);
	free(r->tables);
	free(r->chains);
	free(r->targets);
	memset(r, 0, sizeof(*r));
}

static void *dup_array(const void *p, size_t n, size_t size)
{
	void *q = malloc(n ? n * size : 1);
	if (q && n)
		memcpy(q, p, n * size);
	return q;
}

/* Deep copy in our own allocation scheme (freed by routing_free). */
static int routing_dup(const struct strata_routing *src, struct strata_routing *ret)
{
	struct strata_routing r = { .version = src->version, .ntargets = src->ntargets,
				    .nchains = src->nchains };
	r.targets = dup_array(src->targets, src->ntargets, sizeof(*r.targets));
	r.chains = dup_array(src->chains, src->nchains, sizeof(*r.chains));
	r.tables = calloc(src->ntables ? src->ntables : 1, sizeof(*r.tables));
	int err = !r.targets || !r.chains || !r.tables ? -ENOMEM : 0;
	for (uint32_t i = 0; err == 0 && i < src->ntables; i++, r.ntables++) {
		r.tables[i] = src->tables[i];
		r.tables[i].chain_ids = dup_array(src->tables[i].chain_ids, src->tables[i].nchains,
						  sizeof(uint32_t));
		if (!r.tables[i].chain_ids)
			err = -ENOMEM;
	}
	if (err < 0) {
		routing_free(&r);
		return err;
	}
	*ret = r;
	return 0;
}

static void snap_unref(struct rt_snap *s)
{
	if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	routing_free(&s->r);
	free(s);
}

/* Installs a copy of r as the current table. */
static int snap_install(struct chunk_client *cc, const struct strata_routing *r, bool pin)
{
	struct rt_snap *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int err = routing_dup(r, &s->r);
	if (err < 0) {
		free(s);
		return err;
	}
	s->refs = 1;
	pthread_mutex_lock(&cc->lock);
	struct rt_snap *old = cc->snap;
	cc->snap = s;
	cc->pinned = cc->pinned || pin;
	pthread_mutex_unlock(&cc->lock);
	snap_unref(old);
	return 0;
}

static int routing_fetch(struct chunk_client *cc)
{
	if (!cc->mc)
		return -ENXIO;
	struct strata_routing r = { 0 };
	int err = mgmt_routing(cc->mc, &r);
	if (err == 0) {
		err = snap_install(cc, &r, false);
		strata_routing_done(&r);
	}
	pthread_mutex_lock(&cc->lock);
	cc->fetched_ms = now_ms(); /* a failure also waits ROUTING_MAX_AGE_MS */
	cc->fetching = false;
	pthread_mutex_unlock(&cc->lock);
	return err;
}

/* Returns a referenced snapshot (release with snap_unref), refetching it when
 * forced or old. While one thread refetches, others keep using the current
 * table; a failed refetch keeps serving it too. */
static int snap_get(struct chunk_client *cc, bool force, struct rt_snap **ret)
{
	pthread_mutex_lock(&cc->lock);
	bool stale = !cc->pinned &&
		     (force || !cc->snap || now_ms() - cc->fetched_ms > ROUTING_MAX_AGE_MS);
	bool fetch = stale && (!cc->snap || !cc->fetching);
	if (fetch)
		cc->fetching = true;
	pthread_mutex_unlock(&cc->lock);
	int err = fetch ? routing_fetch(cc) : 0;
	pthread_mutex_lock(&cc->lock);
	struct rt_snap *s = cc->snap;
	if (s)
		__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&cc->lock);
	if (!s)
		return err < 0 ? err : -ENXIO;
	*ret = s;
	return 0;
}

/* ---- connections ------------------------------------------------------- */

/* Returns the pooled rpc client for addr (created on first use; lives until
 * chunk_client_free), or NULL on ENOMEM. */
static struct rpc_client *conn_for(struct chunk_client *cc, const char *addr)
{
	struct rpc_client *rpc = NULL;
	pthread_mutex_lock(&cc->lock);
	for (int i = 0; i < cc->nconns && !rpc; i++)
		if (strcmp(cc->conns[i].addr, addr) == 0)
			rpc = cc->conns[i].rpc;
	if (!rpc && cc->nconns == cc->capconns) {
		int cap = cc->capconns ? 2 * cc->capconns : 8;
		struct cc_conn *n = realloc(cc->conns, cap * sizeof(*n));
		if (n)
			cc->conns = n, cc->capconns = cap;
	}
	if (!rpc && cc->nconns < cc->capconns && (rpc = rpc_client_new(addr, &cc->opts))) {
		struct cc_conn *c = &cc->conns[cc->nconns++];
		snprintf(c->addr, sizeof(c->addr), "%s", addr);
		c->rpc = rpc;
	}
	pthread_mutex_unlock(&cc->lock);
	return rpc;
}

struct chunk_client *chunk_client_new(struct meta_client *mc, const struct rpc_client_opts *opts)
{
	struct chunk_client *cc = calloc(1, sizeof(*cc));
	if (!cc)
		return NULL;
	cc->mc = mc;
	if (opts)
		cc->opts = *opts;
	pthread_mutex_init(&cc->lock, NULL);
	return cc;
}

void chunk_client_free(struct chunk_client *cc)
{
	if (!cc)
		return;
	for (int i = 0; i < cc->nconns; i++)
		rpc_client_free(cc->conns[i].rpc);
	free(cc->conns);
	snap_unref(cc->snap);
	pthread_mutex_destroy(&cc->lock);
	free(cc);
}

int chunk_client_set_routing(struct chunk_client *cc, const struct strata_routing *r)
{
	return snap_install(cc, r, true);
}

/* ---- calls ------------------------------------------------------------- */

static bool worth_refetch(int r)
{
	return r == -ENXIO || r == -ESTALE || r == -ECONNREFUSED;
}

/* Sends one request to target_id of chain. data (WRITE) goes as a second iovec. */
static int call_target(struct chunk_client *cc, const struct strata_routing *rt,
		       const struct strata_chain *chain, uint32_t target_id, uint16_t type,
		       struct chunk_req *req, unsigned flags, struct rpc_reply *reply)
{
	const struct strata_target *t = routing_target(rt, target_id);
	if (!t)
		return -ENXIO;
	struct rpc_client *rpc = conn_for(cc, t->addr);
	if (!rpc)
		return -ENOMEM;
	req->route = (struct chunk_route){ target_id, chain->chain_id, chain->version };
	_cleanup_(wbuf_done) struct wbuf wb;
	wbuf_init(&wb);
	int r = chunk_req_encode(type, req, &wb);
	if (r < 0)
		return r;
	struct iovec iov[2] = { { wb.data, wb.len }, { (void *)req->data, req->data ? req->len : 0 } };
	return rpc_callv(rpc, type, iov, req->data ? 2 : 1, flags, reply);
}

/* Sends one request about chunk `index` to its chain's head, retrying once on
 * a fresh routing table. On return *reply must be released (rpc_reply_done). */
static int call_chunk(struct chunk_client *cc, const struct strata_layout *layout, uint32_t index,
		      uint16_t type, struct chunk_req *req, unsigned flags, struct rpc_reply *reply)
{
	void *buf = reply->buf;
	size_t cap = reply->cap;
	int r = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		struct rt_snap *s;
		r = snap_get(cc, attempt > 0, &s);
		if (r < 0)
			return r;
		const struct strata_chain *chain = layout_chain_for_chunk(&s->r, layout, index);
		r = !chain || chain->ntargets == 0
			    ? -ENXIO
			    : call_target(cc, &s->r, chain, chain->targets[0], type, req, flags, reply);
		snap_unref(s);
		if (!worth_refetch(r) || attempt > 0)
			break;
		rpc_reply_done(reply);
		*reply = (struct rpc_reply){ .buf = buf, .cap = cap };
	}
	return r;
}

static struct chunk_req req_for(struct chunk_id id)
{
	return (struct chunk_req){ .ino = id.ino, .index = id.index };
}

ssize_t chunk_read(struct chunk_client *cc, const struct strata_layout *layout,
		   struct chunk_id id, uint32_t off, uint32_t len, void *buf)
{
	size_t done = 0;
	while (done < len) {
		uint32_t piece = (uint32_t)STRATA_MIN((size_t)CHUNK_IO_MAX, len - done);
		struct chunk_req req = req_for(id);
		req.off = off + (uint32_t)done;
		req.len = piece;
		struct rpc_reply rep = { .buf = (uint8_t *)buf + done, .cap = piece };
		int r = call_chunk(cc, layout, id.index, MSG_CHUNK_READ, &req, RPC_IDEMPOTENT, &rep);
		if (r == 0)
			r = chunk_read_reply_check(rep.len, piece);
		if (r == 0 && rep.data != rep.buf && rep.len) /* did not fit: cannot happen */
			memcpy((uint8_t *)buf + done, rep.data, rep.len);
		size_t n = rep.len;
		rpc_reply_done(&rep);
		if (r < 0)
			return r;
		done += n;
		if (n < piece)
			break;
	}
	return (ssize_t)done;
}

/* Runs a call whose reply is a chunk_stat. */
static int call_stat_reply(struct chunk_client *cc, const struct strata_layout *layout,
			   struct chunk_id id, uint16_t type, struct chunk_req *req,
			   struct chunk_stat *ret)
{
	struct rpc_reply rep = { 0 };
	int r = call_chunk(cc, layout, id.index, type, req, RPC_IDEMPOTENT, &rep);
	if (r == 0) {
		struct rbuf rb;
		struct chunk_stat st;
		rbuf_init(&rb, rep.data, rep.len);
		r = chunk_stat_get(&rb, &st);
		if (r == 0 && ret)
			*ret = st;
	}
	rpc_reply_done(&rep);
	return r;
}

/* A write larger than CHUNK_IO_MAX (chunks above 4 MiB) is sent in pieces,
 * each atomic on its own. Resending a write is safe: same bytes, same place. */
int chunk_write(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		uint32_t off, uint32_t len, const void *buf, unsigned flags)
{
	uint32_t done = 0;
	do {
		struct chunk_req req = req_for(id);
		req.off = off + done;
		req.len = STRATA_MIN(CHUNK_IO_MAX, len - done);
		req.chunk_size = layout->chunk_size;
		req.flags = flags & CHUNK_WRITE_SYNC ? CHUNK_WF_SYNC : 0;
		req.data = (const uint8_t *)buf + done;
		int r = call_stat_reply(cc, layout, id, MSG_CHUNK_WRITE, &req, NULL);
		if (r < 0)
			return r;
		done += req.len;
	} while (done < len);
	return 0;
}

int chunk_truncate(struct chunk_client *cc, const struct strata_layout *layout,
		   struct chunk_id id, uint32_t len)
{
	struct chunk_req req = req_for(id);
	req.len = len;
	req.chunk_size = layout->chunk_size;
	return call_stat_reply(cc, layout, id, MSG_CHUNK_TRUNCATE, &req, NULL);
}

int chunk_stat(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
	       struct chunk_stat *ret)
{
	struct chunk_req req = req_for(id);
	return call_stat_reply(cc, layout, id, MSG_CHUNK_STAT, &req, ret);
}

/* Sends req to every distinct target of the layout's table. */
static int call_table_once(struct chunk_client *cc, const struct strata_routing *rt,
			   const struct strata_layout *layout, uint16_t type, struct chunk_req *req)
{
	const struct strata_chain_table *t = routing_table(rt, layout->table_id);
	if (!t)
		return -ENXIO;
	_cleanup_free_ uint32_t *seen = calloc(t->nchains * STRATA_MAX_REPLICAS + 1, sizeof(uint32_t));
	if (!seen)
		return -ENOMEM;
	size_t nseen = 0;
	for (uint32_t i = 0; i < t->nchains; i++) {
		const struct strata_chain *c = routing_chain(rt, t->chain_ids[i]);
		if (!c)
			return -ENXIO;
		for (uint8_t j = 0; j < c->ntargets && j < STRATA_MAX_REPLICAS; j++) {
			bool dup = false;
			for (size_t k = 0; k < nseen && !dup; k++)
				dup = seen[k] == c->targets[j];
			if (dup)
				continue;
			seen[nseen++] = c->targets[j];
			struct rpc_reply rep = { 0 };
			int r = call_target(cc, rt, c, c->targets[j], type, req, RPC_IDEMPOTENT, &rep);
			rpc_reply_done(&rep);
			if (r < 0)
				return r;
		}
	}
	return 0;
}

static int call_table(struct chunk_client *cc, const struct strata_layout *layout, uint16_t type,
		      struct chunk_req *req)
{
	int r = 0;
	for (int attempt = 0; attempt < 2; attempt++) {
		struct rt_snap *s;
		r = snap_get(cc, attempt > 0, &s);
		if (r < 0)
			return r;
		r = call_table_once(cc, &s->r, layout, type, req);
		snap_unref(s);
		if (!worth_refetch(r))
			break;
	}
	return r;
}

int chunk_remove_file(struct chunk_client *cc, const struct strata_layout *layout, uint64_t ino,
		      uint32_t first_index)
{
	struct chunk_req req = { .ino = ino, .index = first_index };
	return call_table(cc, layout, MSG_CHUNK_REMOVE_FILE, &req);
}

int chunk_sync(struct chunk_client *cc, const struct strata_layout *layout)
{
	struct chunk_req req = { 0 };
	return call_table(cc, layout, MSG_CHUNK_SYNC, &req);
}
