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
 * Replication (chunkserver/replica.c): writes and truncates go to the
 * chain's head (its first serving target) as WRITE_EX with this client's
 * random id and a request id kept across retries (its own within the
 * failover window, and the caller's with chunk_write_ids/_truncate_ids);
 * reads go to a serving
 * replica chosen by chunk (CHUNK_READ_TAIL: always the tail), and to the
 * tail after -EAGAIN. A transport failure is reported to strata-meta
 * (mgmt_report), which probes the target and takes a dead one out of its
 * chain at once; the call is retried on a refetched table with backoff
 * until CC_RETRY_MS, then the error is returned (the FUSE client retries on
 * and finally answers EIO). REMOVE_FILE and SYNC go to every serving and
 * syncing target of the table. */
#include "fs/chunk_client.h"
#include "fs/clock.h"

#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fs/chunk_proto.h"
#include "fs/cleanup.h"
#include "fs/layout.h"
#include "fs/proto.h"
#include "fs/rpc.h"

#define ROUTING_MAX_AGE_MS 5000
#define CC_MAX_TIMEOUT_MS 5000 /* per call: give up on a frozen replica in time */
#define CC_RETRY_MS 4000       /* failover window of one call (see call_chunk) */
#define CC_READ_TIMEOUT_MS                                                                         \
	2000 /* a replica that does not answer a read in time is                                   \
	      * skipped: the next serving one is asked */

struct rt_snap {
	int refs;
	struct strata_routing r;
};

struct cc_conn {
	bool fast; /* reads: short timeout, another replica is tried next */
	char addr[64];
	struct rpc_client *rpc;
};

struct chunk_client {
	struct meta_client *mc;
	struct rpc_client_opts opts;
	pthread_mutex_t lock;
	struct rt_snap *snap; /* current table, one ref held by cc */
	int64_t fetched_ms;   /* last fetch attempt, successful or not */
	bool pinned, fetching;
	struct cc_conn *conns;
	int nconns, capconns;
	uint64_t client_id, next_req; /* exactly-once: (client_id, req id) per write */
	int retry_ms;		      /* failover window of one call */
	enum chunk_read_policy read_policy;
	bool no_read_many;		 /* a server answered READ_MANY -EOPNOTSUPP */
	struct chunk_client_stats stats; /* relaxed atomic adds */
};

static void count(uint64_t *counter, uint64_t n)
{
	__atomic_add_fetch(counter, n, __ATOMIC_RELAXED);
}

void chunk_client_stats(struct chunk_client *cc, struct chunk_client_stats *ret)
{
	ret->reads = __atomic_load_n(&cc->stats.reads, __ATOMIC_RELAXED);
	ret->read_many = __atomic_load_n(&cc->stats.read_many, __ATOMIC_RELAXED);
	ret->read_many_ranges = __atomic_load_n(&cc->stats.read_many_ranges, __ATOMIC_RELAXED);
	ret->read_many_retried = __atomic_load_n(&cc->stats.read_many_retried, __ATOMIC_RELAXED);
}

/* ---- routing snapshots ------------------------------------------------- */

static void snap_unref(struct rt_snap *s)
{
	if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	strata_routing_done(&s->r);
	free(s);
}

/* Installs a copy of r as the current table. */
static int snap_install(struct chunk_client *cc, const struct strata_routing *r, bool pin)
{
	struct rt_snap *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	int err = strata_routing_copy(r, &s->r);
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
	struct strata_routing r = {0};
	int err = mgmt_routing(cc->mc, &r);
	if (err == 0) {
		err = snap_install(cc, &r, false);
		strata_routing_done(&r);
	}
	pthread_mutex_lock(&cc->lock);
	cc->fetched_ms = strata_mono_ms(); /* a failure also waits ROUTING_MAX_AGE_MS */
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
		     (force || !cc->snap || strata_mono_ms() - cc->fetched_ms > ROUTING_MAX_AGE_MS);
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

static uint64_t random_id(void)
{
	uint64_t v = 0;
	if (getrandom(&v, sizeof(v), 0) != sizeof(v)) {
		struct timespec ts;
		clock_gettime(CLOCK_REALTIME, &ts);
		v = (uint64_t)ts.tv_nsec * 0x9E3779B97F4A7C15ull ^ (uint64_t)getpid() << 32;
	}
	return v ? v : 1;
}

/* ---- connections ------------------------------------------------------- */

/* Returns the pooled rpc client for addr (created on first use; lives until
 * chunk_client_free), or NULL on ENOMEM. */
static struct rpc_client *conn_for(struct chunk_client *cc, const char *addr, bool fast)
{
	struct rpc_client *rpc = NULL;
	struct rpc_client_opts o = cc->opts;
	if (fast && o.timeout_ms > CC_READ_TIMEOUT_MS)
		o.timeout_ms = CC_READ_TIMEOUT_MS;
	pthread_mutex_lock(&cc->lock);
	for (int i = 0; i < cc->nconns && !rpc; i++)
		if (cc->conns[i].fast == fast && strcmp(cc->conns[i].addr, addr) == 0)
			rpc = cc->conns[i].rpc;
	if (!rpc && cc->nconns == cc->capconns) {
		int cap = cc->capconns ? 2 * cc->capconns : 8;
		struct cc_conn *n = realloc(cc->conns, cap * sizeof(*n));
		if (n)
			cc->conns = n, cc->capconns = cap;
	}
	if (!rpc && cc->nconns < cc->capconns && (rpc = rpc_client_new(addr, &o))) {
		struct cc_conn *c = &cc->conns[cc->nconns++];
		c->fast = fast;
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
	if (!cc->opts.timeout_ms || cc->opts.timeout_ms > CC_MAX_TIMEOUT_MS)
		cc->opts.timeout_ms = CC_MAX_TIMEOUT_MS;
	cc->retry_ms = CC_RETRY_MS;
	cc->client_id = random_id();
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

static bool is_transport(int r)
{
	return r == -ECONNREFUSED || r == -ECONNRESET || r == -ETIMEDOUT || r == -EPIPE ||
	       r == -EHOSTUNREACH || r == -ENETUNREACH || r == -ENOTCONN || r == -ECONNABORTED;
}

static bool worth_refetch(int r)
{
	return r == -ENXIO || r == -ESTALE || r == -EAGAIN || is_transport(r);
}

/* Sends one request to target_id of chain. data (WRITE, WRITE_EX) goes as a
 * second iovec. */
static int call_target(struct chunk_client *cc, const struct strata_routing *rt,
		       const struct strata_chain *chain, uint32_t target_id, uint16_t type,
		       struct chunk_req *req, unsigned flags, struct rpc_reply *reply)
{
	const struct strata_target *t = routing_target(rt, target_id);
	if (!t)
		return -ENXIO;
	bool fast = type == MSG_CHUNK_READ && !cc->pinned;
	struct rpc_client *rpc = conn_for(cc, t->addr, fast);
	if (!rpc)
		return -ENOMEM;
	req->route = (struct chunk_route){target_id, chain->chain_id, chain->version};
	_cleanup_(wbuf_done) struct wbuf wb;
	wbuf_init(&wb);
	int r = chunk_req_encode(type, req, &wb);
	if (r < 0)
		return r;
	/* the data as WIRE_F_DATA: hashed once here, and each hop re-seals its
	 * forward from the hash it verified */
	struct iovec iov = {wb.data, wb.len};
	struct rpc_data d = {.p = req->data, .len = req->data ? req->len : 0};
	r = rpc_callv_data(rpc, type, &iov, 1, &d, flags, reply);
	if (is_transport(r) && cc->mc && !cc->pinned)
		mgmt_report(cc->mc, target_id); /* strata-meta probes it, fails it if dead */
	return r;
}

/* Which replica of chain serves this read: writes go to the head; reads to
 * a serving replica picked by chunk (spreading a file's reads over the
 * chain), or the tail after -EAGAIN (a pending write there) or with
 * CHUNK_READ_TAIL; `skip` moves on to the next serving replica after a
 * transport failure. Returns a target id or 0 if none serves. */
static uint32_t pick_target(struct chunk_client *cc, const struct strata_routing *rt,
			    const struct strata_chain *chain, uint16_t type, struct chunk_req *req,
			    bool tail, int skip)
{
	bool read = type == MSG_CHUNK_READ;
	int n = chain_nserving(rt, chain);
	if (n == 0)
		return 0;
	if (!read) {
		int h = chain_head(rt, chain);
		return chain->targets[h];
	}
	if (tail || cc->read_policy == CHUNK_READ_TAIL)
		return chain->targets[chain_tail(rt, chain)];
	uint64_t k = (req->ino * 0x9E3779B97F4A7C15ull) ^ (req->index * 0x85EBCA6Bu);
	int want = (int)((k >> 33) % (uint64_t)n + (uint64_t)skip) % n;
	for (int i = 0; i < chain->ntargets; i++)
		if (routing_state(rt, chain->targets[i]) == TARGET_SERVING && want-- == 0)
			return chain->targets[i];
	return 0;
}

static void backoff(int attempt)
{
	int ms = attempt < 5 ? 10 << attempt : 200;
	struct timespec ts = {0, (long)ms * 1000000L};
	nanosleep(&ts, NULL);
}

/* Sends one request about chunk `index` to its chain (head for writes, a
 * replica for reads), retrying on a fresh routing table with the same
 * request id while the chain fails over (up to cc->retry_ms). On return
 * *reply must be released (rpc_reply_done). */
static int call_chunk(struct chunk_client *cc, const struct strata_layout *layout, uint32_t index,
		      uint16_t type, struct chunk_req *req, unsigned flags, struct rpc_reply *reply)
{
	void *buf = reply->buf;
	size_t cap = reply->cap;
	int64_t deadline = strata_mono_ms() + cc->retry_ms;
	bool tail = false;
	int r = 0, skip = 0;
	for (int attempt = 0;; attempt++) {
		struct rt_snap *s;
		r = snap_get(cc, attempt > 0 && r != -EAGAIN, &s);
		if (r < 0)
			return r;
		const struct strata_chain *chain = layout_chain_for_chunk(&s->r, layout, index);
		uint32_t tid = chain ? pick_target(cc, &s->r, chain, type, req, tail, skip) : 0;
		r = !chain ? -ENXIO
		    : !tid ? -EAGAIN
			   : call_target(cc, &s->r, chain, tid, type, req,
					 cc->pinned ? flags : flags & ~RPC_IDEMPOTENT, reply);
		snap_unref(s);
		if (!worth_refetch(r) || cc->pinned || strata_mono_ms() >= deadline)
			break;
		tail = r == -EAGAIN && type == MSG_CHUNK_READ;
		skip += is_transport(r);
		rpc_reply_done(reply);
		*reply = (struct rpc_reply){.buf = buf, .cap = cap};
		if (r != -EAGAIN || !tail)
			backoff(attempt);
	}
	return r;
}

static struct chunk_req req_for(struct chunk_id id)
{
	return (struct chunk_req){.ino = id.ino, .index = id.index};
}

ssize_t chunk_read(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		   uint32_t off, uint32_t len, void *buf)
{
	size_t done = 0;
	while (done < len) {
		uint32_t piece = (uint32_t)STRATA_MIN((size_t)CHUNK_IO_MAX, len - done);
		struct chunk_req req = req_for(id);
		req.off = off + (uint32_t)done;
		req.len = piece;
		struct rpc_reply rep = {.buf = (uint8_t *)buf + done, .cap = piece};
		count(&cc->stats.reads, 1);
		int r =
		    call_chunk(cc, layout, id.index, MSG_CHUNK_READ, &req, RPC_IDEMPOTENT, &rep);
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

/* ---- batched reads ---------------------------------------------------- */
#define RM_PENDING ((ssize_t)LONG_MIN) /* a result not known yet */

/* The address of the replica that serves reads[i] by the snapshot, or NULL:
 * then the read goes on its own. */
static const char *read_addr(struct chunk_client *cc, const struct strata_routing *rt,
			     struct chunk_read_one *rd, struct chunk_req *req)
{
	const struct strata_chain *chain = layout_chain_for_chunk(rt, rd->layout, rd->id.index);
	if (!chain || rd->len == 0 || rd->len > CHUNK_IO_MAX)
		return NULL;
	*req = req_for(rd->id);
	req->off = rd->off;
	req->len = rd->len;
	uint32_t tid = pick_target(cc, rt, chain, MSG_CHUNK_READ, req, false, 0);
	const struct strata_target *t = tid ? routing_target(rt, tid) : NULL;
	if (!t)
		return NULL;
	req->route = (struct chunk_route){tid, chain->chain_id, chain->version};
	return t->addr;
}

/* Sends reads[idx[0..m)] (requests reqs[0..m)) to addr as one READ_MANY and
 * stores each answer that is final; the others stay pending. */
static void read_batch(struct chunk_client *cc, const char *addr, struct chunk_read_one *reads,
		       const int *idx, const struct chunk_req *reqs, int m)
{
	struct rpc_client *rpc = conn_for(cc, addr, !cc->pinned);
	struct chunk_read_ans ans[CHUNK_READ_MANY_MAX];
	struct rpc_reply rep = {0};
	_cleanup_(wbuf_done) struct wbuf wb;
	wbuf_init(&wb);
	if (!rpc || chunk_read_many_encode(reqs, (uint32_t)m, &wb) < 0)
		return;
	struct iovec iov = {wb.data, wb.len};
	count(&cc->stats.read_many, 1);
	count(&cc->stats.read_many_ranges, (uint64_t)m);
	int r = rpc_callv(rpc, MSG_CHUNK_READ_MANY, &iov, 1, RPC_IDEMPOTENT, &rep);
	if (r == -EOPNOTSUPP)
		__atomic_store_n(&cc->no_read_many, true, __ATOMIC_RELAXED);
	struct rbuf rb;
	rbuf_init(&rb, rep.data, rep.len);
	if (r == 0 && chunk_read_many_reply_get(&rb, reqs, (uint32_t)m, ans) == 0)
		for (int k = 0; k < m; k++) {
			struct chunk_read_one *rd = &reads[idx[k]];
			if (ans[k].status == 0) {
				memcpy(rd->buf, ans[k].data, ans[k].len);
				rd->result = ans[k].len;
			} else if (!worth_refetch(ans[k].status)) {
				rd->result = ans[k].status; /* -EIO: never wrong bytes */
			}
		}
	rpc_reply_done(&rep);
}

/* Groups the pending reads by the chunkserver that serves them, each group
 * one READ_MANY of at most CHUNK_READ_MANY_MAX entries and CHUNK_IO_MAX
 * bytes. */
static void read_batches(struct chunk_client *cc, const struct strata_routing *rt,
			 struct chunk_read_one *reads, int n)
{
	const char *addr[CHUNK_READ_MANY_MAX];
	struct chunk_req reqs[CHUNK_READ_MANY_MAX];
	bool sent[CHUNK_READ_MANY_MAX];
	for (int i = 0; i < n; i++) {
		addr[i] = read_addr(cc, rt, &reads[i], &reqs[i]);
		sent[i] = !addr[i];
	}
	for (int i = 0; i < n; i++) {
		int idx[CHUNK_READ_MANY_MAX], m = 0;
		struct chunk_req batch[CHUNK_READ_MANY_MAX];
		uint64_t bytes = 0;
		if (sent[i])
			continue;
		for (int j = i; j < n && m < CHUNK_READ_MANY_MAX; j++) {
			if (sent[j] || strcmp(addr[j], addr[i]) != 0 ||
			    bytes + reqs[j].len > CHUNK_IO_MAX)
				continue;
			sent[j] = true;
			bytes += reqs[j].len;
			batch[m] = reqs[j];
			idx[m++] = j;
		}
		if (m > 0)
			read_batch(cc, addr[idx[0]], reads, idx, batch, m);
	}
}

void chunk_read_many(struct chunk_client *cc, struct chunk_read_one *reads, int n)
{
	struct rt_snap *s = NULL;
	for (int i = 0; i < n; i++)
		reads[i].result = RM_PENDING;
	if (n > 1 && !__atomic_load_n(&cc->no_read_many, __ATOMIC_RELAXED) &&
	    snap_get(cc, false, &s) == 0) {
		/* slices of CHUNK_READ_MANY_MAX: read_batches' arrays are fixed */
		for (int i = 0; i < n; i += CHUNK_READ_MANY_MAX)
			read_batches(cc, &s->r, reads + i, STRATA_MIN(n - i, CHUNK_READ_MANY_MAX));
		snap_unref(s);
	}
	for (int i = 0; i < n; i++)
		if (reads[i].result == RM_PENDING) {
			if (s)
				count(&cc->stats.read_many_retried, 1);
			reads[i].result = chunk_read(cc, reads[i].layout, reads[i].id, reads[i].off,
						     reads[i].len, reads[i].buf);
		}
}

/* Runs a call whose reply is a chunk_stat. */
static int call_stat_reply(struct chunk_client *cc, const struct strata_layout *layout,
			   struct chunk_id id, uint16_t type, struct chunk_req *req,
			   struct chunk_stat *ret)
{
	struct rpc_reply rep = {0};
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

/* The first of n consecutive fresh request ids (never 0). */
static uint64_t new_req_ids(struct chunk_client *cc, uint32_t n)
{
	return __atomic_add_fetch(&cc->next_req, n, __ATOMIC_RELAXED) - n + 1;
}

/* *ids: the request ids of this call, picked on its first attempt (0) and
 * kept for the caller's retries of the same call. */
static uint64_t req_ids(struct chunk_client *cc, uint64_t *ids, uint32_t n)
{
	if (!*ids)
		*ids = new_req_ids(cc, n ? n : 1);
	return *ids;
}

int chunk_write(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		uint32_t off, uint32_t len, const void *buf, unsigned flags)
{
	uint64_t ids = 0;
	return chunk_write_ids(cc, layout, id, off, len, buf, flags, &ids);
}

/* A write larger than CHUNK_IO_MAX (chunks above 4 MiB) is sent in pieces,
 * each atomic on its own. Each piece carries this client's id and a request
 * id of its own (the k-th piece *ids + k), kept across its retries here and
 * the caller's: a replica that already applied it answers from its dedup
 * table (exactly once). */
int chunk_write_ids(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		    uint32_t off, uint32_t len, const void *buf, unsigned flags, uint64_t *ids)
{
	uint64_t first = req_ids(cc, ids, (len + CHUNK_IO_MAX - 1) / CHUNK_IO_MAX);
	uint32_t done = 0;
	do {
		struct chunk_req req = req_for(id);
		req.off = off + done;
		req.len = STRATA_MIN(CHUNK_IO_MAX, len - done);
		req.chunk_size = layout->chunk_size;
		req.flags = flags & CHUNK_WRITE_SYNC ? CHUNK_WF_SYNC : 0;
		req.data = (const uint8_t *)buf + done;
		req.client_id = cc->client_id;
		req.req_id = first + done / CHUNK_IO_MAX;
		int r = call_stat_reply(cc, layout, id, MSG_CHUNK_WRITE_EX, &req, NULL);
		if (r < 0)
			return r;
		done += req.len;
	} while (done < len);
	return 0;
}

int chunk_truncate(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
		   uint32_t len)
{
	uint64_t ids = 0;
	return chunk_truncate_ids(cc, layout, id, len, &ids);
}

int chunk_truncate_ids(struct chunk_client *cc, const struct strata_layout *layout,
		       struct chunk_id id, uint32_t len, uint64_t *ids)
{
	struct chunk_req req = req_for(id);
	req.len = len;
	req.chunk_size = layout->chunk_size;
	req.client_id = cc->client_id;
	req.req_id = req_ids(cc, ids, 1);
	return call_stat_reply(cc, layout, id, MSG_CHUNK_TRUNCATE, &req, NULL);
}

int chunk_stat(struct chunk_client *cc, const struct strata_layout *layout, struct chunk_id id,
	       struct chunk_stat *ret)
{
	struct chunk_req req = req_for(id);
	return call_stat_reply(cc, layout, id, MSG_CHUNK_STAT, &req, ret);
}

/* Sends req to every distinct serving or syncing target of the layout's
 * table (offline and waiting ones are brought up to date by resync). A
 * failure of a syncing target is ignored. */
static int call_table_once(struct chunk_client *cc, const struct strata_routing *rt,
			   const struct strata_layout *layout, uint16_t type, struct chunk_req *req)
{
	const struct strata_chain_table *t = routing_table(rt, layout->table_id);
	if (!t)
		return -ENXIO;
	_cleanup_free_ uint32_t *seen =
	    calloc(t->nchains * STRATA_MAX_REPLICAS + 1, sizeof(uint32_t));
	if (!seen)
		return -ENOMEM;
	size_t nseen = 0;
	for (uint32_t i = 0; i < t->nchains; i++) {
		const struct strata_chain *c = routing_chain(rt, t->chain_ids[i]);
		if (!c)
			return -ENXIO;
		if (chain_nserving(rt, c) == 0)
			return -EAGAIN;
		for (uint8_t j = 0; j < c->ntargets && j < STRATA_MAX_REPLICAS; j++) {
			uint8_t st = routing_state(rt, c->targets[j]);
			bool dup = st != TARGET_SERVING && st != TARGET_SYNCING;
			for (size_t k = 0; k < nseen && !dup; k++)
				dup = seen[k] == c->targets[j];
			if (dup)
				continue;
			seen[nseen++] = c->targets[j];
			struct rpc_reply rep = {0};
			int r = call_target(cc, rt, c, c->targets[j], type, req,
					    cc->pinned ? RPC_IDEMPOTENT : 0, &rep);
			rpc_reply_done(&rep);
			if (r < 0 && st == TARGET_SERVING)
				return r;
		}
	}
	return 0;
}

static int call_table(struct chunk_client *cc, const struct strata_layout *layout, uint16_t type,
		      struct chunk_req *req)
{
	int64_t deadline = strata_mono_ms() + cc->retry_ms;
	int r = 0;
	for (int attempt = 0;; attempt++) {
		struct rt_snap *s;
		r = snap_get(cc, attempt > 0, &s);
		if (r < 0)
			return r;
		r = call_table_once(cc, &s->r, layout, type, req);
		snap_unref(s);
		if (!worth_refetch(r) || cc->pinned || strata_mono_ms() >= deadline)
			break;
		backoff(attempt);
	}
	return r;
}

int chunk_remove_file(struct chunk_client *cc, const struct strata_layout *layout, uint64_t ino,
		      uint32_t first_index)
{
	struct chunk_req req = {.ino = ino, .index = first_index};
	return call_table(cc, layout, MSG_CHUNK_REMOVE_FILE, &req);
}

int chunk_sync(struct chunk_client *cc, const struct strata_layout *layout)
{
	struct chunk_req req = {0};
	return call_table(cc, layout, MSG_CHUNK_SYNC, &req);
}

void chunk_client_set_read_policy(struct chunk_client *cc, enum chunk_read_policy p)
{
	cc->read_policy = p;
}

void chunk_client_set_retry_ms(struct chunk_client *cc, int ms)
{
	cc->retry_ms = ms < 0 ? 0 : ms;
}

int chunk_stat_target(struct chunk_client *cc, const struct strata_layout *layout,
		      struct chunk_id id, uint32_t target_id, struct chunk_stat *ret)
{
	struct rt_snap *s;
	int r = snap_get(cc, false, &s);
	if (r < 0)
		return r;
	const struct strata_chain *chain = layout_chain_for_chunk(&s->r, layout, id.index);
	struct chunk_req req = req_for(id);
	struct rpc_reply rep = {0};
	r = chain ? call_target(cc, &s->r, chain, target_id, MSG_CHUNK_STAT, &req, RPC_IDEMPOTENT,
				&rep)
		  : -ENXIO;
	snap_unref(s);
	if (r == 0) {
		struct rbuf rb;
		rbuf_init(&rb, rep.data, rep.len);
		r = chunk_stat_get(&rb, ret);
	}
	rpc_reply_done(&rep);
	return r;
}
