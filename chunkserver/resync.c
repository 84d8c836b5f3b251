/* resync.c — fills a syncing target from its predecessor, the chain's tail
 * (the last serving target), which pushes; strata-meta then makes it serving.
 *
 * The sending side. A pass (resync_pass, every PASS_EVERY_MS on the resync
 * thread, resync_main, which repl_start starts; with that thread's struct
 * resync_state: transfer tags, when a warning was last logged and staging
 * last expired; no globals) looks at each local target
 * that is the tail of its chain; if the next target is syncing it runs
 * sync_chain:
 *   1. list the successor's chunks (LIST, paged, with CHUNK_LF_VERIFY so that
 *      a torn or damaged chunk lists as version 0) and our own;
 *   2. walk the union in (ino, index) order; for each chunk, under its
 *      ordering lock (so that no write to it is between us and the
 *      successor), compare version, length and checksum with ours and PUT
 *      ours (the whole chunk, at our version) or remove theirs;
 *   3. report progress every SYNC_REPORT_EVERY chunks and completion at the
 *      chain version the sync started under (MSG_MGMT_SYNC_DONE). If the
 *      chain changed meanwhile strata-meta answers -ESTALE and the next pass
 *      starts over.
 * Writes keep flowing during the sync: the successor is a writer, so every
 * write after its listing reaches it through the chain, and a chunk written
 * after the walk passed it was written in order after the PUT (invariant 2
 * of replica.c). The successor's LIST is a snapshot; a chunk that changed
 * since is simply put again.
 *
 * Chunks larger than CHUNK_IO_MAX (chunk sizes of 8-64 MiB) go in pieces
 * (put_parts, MSG_CHUNK_PUT_PART): pieces of CHUNK_IO_MAX bytes in order,
 * each read (and verified) from our chunk, the first flagged
 * CHUNK_PP_FIRST, the last CHUNK_PP_LAST; every piece carries our version,
 * length and chunk checksum and a tag naming this transfer. All but the
 * last piece go without the chunk's ordering lock (a 64 MiB transfer would
 * hold up writes to the chunk past the forward timeout); the last one goes
 * under it, once the chunk is seen unchanged (else the transfer starts
 * over; the third attempt holds the lock throughout). The receiver
 * (resync_put, under its own ordering lock per piece) stages them in
 * tmp/ and publishes the chunk with the last piece only after checking
 * every block, and the whole chunk's checksum against ours
 * (chunk_store_put_piece): so the successor holds its old chunk or exactly
 * ours as of the moment we hold the lock, never a mix, and no write to the
 * chunk is between us then (its writes come through us). Writes that reach
 * it while the pieces are staged go to its old chunk, which the publish
 * replaces. A transfer cut off (either side killed, the chain changed:
 * -ESTALE) leaves a staging file the next first piece of that chunk, the
 * expiry (STAGE_MAX_AGE_S, checked every STAGE_EXPIRE_EVERY_MS) or a
 * restart removes; the sync stops and the next pass starts over. A
 * successor too old to know PUT_PART answers -EOPNOTSUPP: the sync stops
 * with a log line naming it (it cannot become serving until upgraded).
 *
 * The receiving side (resync_handle, from service.c): LIST answers the
 * sender's listing; PUT and PUT_PART (only at a syncing target, at the
 * request's chain version, under the chunk's ordering lock) take its
 * chunks. The ordering locks, calls and chain checks are replica.c's
 * (replica-internal.h). */
#include "chunkserver/resync.h"
#include "fs/clock.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunkserver/chunk_store.h"
#include "fs/cleanup.h"
#include "fs/layout.h"
#include "fs/log.h"
#include "fs/proto.h"
#include "chunkserver/replica-internal.h"
#include "chunkserver/service.h"

#define PASS_EVERY_MS 200
#define SYNC_REPORT_EVERY 64
#define PART_TIMEOUT_MS 5000 /* one piece, the last one's read-back and publish included */
#define STAGE_MAX_AGE_S 120  /* a staging file untouched this long is dropped */
#define STAGE_EXPIRE_EVERY_MS 30000
#define OLD_PEER_WARN_EVERY_MS 60000

/* What the resync thread carries from one pass to the next; it owns it (on
 * its stack, resync_main) and passes it to every pass. Zero-initialised. */
struct resync_state {
	uint64_t tag_seq;     /* transfers tagged so far (part_tag) */
	uint32_t warned_peer; /* the last target warned about as too old ... */
	int64_t warned_ms;    /* ... and when (monotonic ms) */
	int64_t expired_ms;   /* the last staging expiry (monotonic ms) */
};

struct sync_job {
	struct repl *rp;
	struct chunk_store *cs;
	uint32_t self; /* our target (the tail) */
	uint32_t peer; /* the syncing target */
	char peer_addr[64];
	struct strata_chain chain;     /* as of the start */
	struct chunk_list_ent *remote; /* heap, sorted */
	size_t nremote;
	uint64_t done, total, copied, removed;
	struct resync_state *st; /* the resync thread's, across passes */
	struct rpc_client *rpc;	 /* PUT_PART's connection, made on first use */
	uint8_t *part_buf;	 /* CHUNK_IO_MAX bytes, on first use */
};

static struct chunk_route peer_route(const struct sync_job *j)
{
	return (struct chunk_route){j->peer, j->chain.chain_id, j->chain.version};
}

/* Step 1: the successor's chunks, every page. */
static int list_remote(struct sync_job *j)
{
	size_t cap = 0;
	struct chunk_req q = {.route = peer_route(j),
			      .len = CHUNK_LIST_MAX,
			      .flags = CHUNK_LF_FIRST | CHUNK_LF_VERIFY};
	for (bool more = true; more;) {
		if (j->nremote + CHUNK_LIST_MAX > cap) {
			cap = cap ? cap * 2 : CHUNK_LIST_MAX;
			void *n = realloc(j->remote, cap * sizeof(*j->remote));
			if (!n)
				return -ENOMEM;
			j->remote = n;
		}
		struct rpc_reply rep = {0};
		int r = repl_call(j->rp, j->peer_addr, MSG_CHUNK_LIST, &q, &rep);
		if (r == 0) {
			struct rbuf b;
			rbuf_init(&b, rep.data, rep.len);
			r = chunk_list_get(&b, j->remote + j->nremote, CHUNK_LIST_MAX, &more);
		}
		rpc_reply_done(&rep);
		if (r < 0)
			return r;
		j->nremote += (size_t)r;
		if (r == 0)
			break;
		q.ino = j->remote[j->nremote - 1].ino;
		q.index = j->remote[j->nremote - 1].index;
		q.flags = CHUNK_LF_VERIFY;
	}
	return 0;
}

static int put_remote(struct sync_job *j, uint64_t ino, uint32_t index, const void *data,
		      uint32_t len, uint64_t version, uint32_t flags)
{
	struct chunk_req q = {.route = peer_route(j),
			      .ino = ino,
			      .index = index,
			      .len = len,
			      .data = data,
			      .version = version,
			      .flags = flags,
			      .chunk_size = STRATA_MAX(STRATA_MIN_CHUNK_SIZE,
						       len <= STRATA_MIN_CHUNK_SIZE
							   ? STRATA_MIN_CHUNK_SIZE
							   : 1u << (32 - __builtin_clz(len - 1)))};
	struct rpc_reply rep = {0};
	int r = repl_call(j->rp, j->peer_addr, MSG_CHUNK_PUT, &q, &rep);
	rpc_reply_done(&rep);
	return r;
}

/* A new transfer's tag: differs from every other transfer of the chunk to
 * the successor (ours before, another tail's after a chain change). */
static uint64_t part_tag(const struct sync_job *j)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	return ((uint64_t)j->self << 40) ^ ((uint64_t)ts.tv_sec * 1000000000ull + ts.tv_nsec) ^
	       (++j->st->tag_seq << 20);
}

static void warn_old_peer(const struct sync_job *j, uint64_t ino, uint32_t index, uint32_t len)
{
	struct resync_state *st = j->st;
	if (st->warned_peer == j->peer && strata_mono_ms() - st->warned_ms < OLD_PEER_WARN_EVERY_MS)
		return;
	st->warned_peer = j->peer;
	st->warned_ms = strata_mono_ms();
	log_warn("resync: target %u at %s does not take chunks over %u bytes in pieces "
		 "(MSG_CHUNK_PUT_PART unknown: an older strata-chunkserver); chunk %llu/%u "
		 "(%u bytes) cannot be copied and the target stays syncing until it is upgraded",
		 j->peer, j->peer_addr, CHUNK_IO_MAX, (unsigned long long)ino, index, len);
}

/* Sends the piece of our chunk m at off (a transfer's piece: tag). Returns 0,
 * CHUNK_CHANGED if the chunk no longer reads as m's length, or -errno. */
#define CHUNK_CHANGED 1
static int send_piece(struct sync_job *j, uint64_t ino, uint32_t index, const struct chunk_meta *m,
		      uint64_t tag, uint32_t off)
{
	if (!j->rpc) {
		struct rpc_client_opts o = {
		    .timeout_ms = PART_TIMEOUT_MS, .connect_timeout_ms = 1000, .max_conns = 1};
		if (!(j->rpc = rpc_client_new(j->peer_addr, &o)))
			return -ENOMEM;
	}
	if (!j->part_buf && !(j->part_buf = malloc(CHUNK_IO_MAX)))
		return -ENOMEM;
	struct chunk_req q = {.route = peer_route(j),
			      .ino = ino,
			      .index = index,
			      .version = m->version,
			      .total = m->length,
			      .tag = tag,
			      .checksum = m->checksum,
			      .off = off,
			      .len = STRATA_MIN(CHUNK_IO_MAX, m->length - off)};
	q.flags = (off == 0 ? CHUNK_PP_FIRST : 0) | (off + q.len == m->length ? CHUNK_PP_LAST : 0);
	ssize_t n = chunk_store_read(j->cs, ino, index, off, q.len, j->part_buf);
	if (n < 0)
		return n == -EIO ? (int)n : CHUNK_CHANGED; /* e.g. removed meanwhile */
	if (n != q.len)
		return CHUNK_CHANGED;
	_cleanup_(wbuf_done) struct wbuf wb;
	wbuf_init(&wb);
	int r = chunk_req_encode(MSG_CHUNK_PUT_PART, &q, &wb);
	if (r < 0)
		return r;
	struct iovec iov = {wb.data, wb.len};
	struct rpc_data d = {.p = j->part_buf, .len = q.len};
	struct rpc_reply rep = {0};
	r = rpc_callv_data(j->rpc, MSG_CHUNK_PUT_PART, &iov, 1, &d, 0, &rep);
	rpc_reply_done(&rep);
	if (r == -EOPNOTSUPP)
		warn_old_peer(j, ino, index, m->length);
	return r;
}

static bool same_meta(const struct chunk_meta *a, const struct chunk_meta *b)
{
	return a->version == b->version && a->length == b->length && a->checksum == b->checksum;
}

/* Our chunk (m, above CHUNK_IO_MAX, as stat'ed under the ordering lock) to
 * the successor in pieces. All but the last piece go without the lock, so
 * that writes to the chunk are not held up for the whole transfer (a
 * forward waits at most FWD_TIMEOUT_MS, 2.5 s, for it); the last one goes
 * under it, after checking that the chunk is still m: the receiver
 * publishes with it, and the staged chunk must match m's checksum, so it
 * holds exactly our chunk as of that moment (no write to it is then between
 * us and the successor). A chunk written meanwhile is sent again; the
 * third attempt holds the lock throughout, so a busy chunk gets across. */
static int put_parts(struct sync_job *j, uint64_t ino, uint32_t index, struct chunk_meta m)
{
	uint32_t last = (m.length - 1) / CHUNK_IO_MAX * CHUNK_IO_MAX;
	for (int attempt = 0;; attempt++) {
		bool hold = attempt >= 2;
		uint64_t tag = part_tag(j);
		int r = 0;
		if (hold)
			repl_order_lock(j->rp, j->self, ino, index);
		for (uint32_t off = 0; r == 0 && off < last; off += CHUNK_IO_MAX)
			r = send_piece(j, ino, index, &m, tag, off);
		if (!hold)
			repl_order_lock(j->rp, j->self, ino, index);
		struct chunk_meta now;
		int s = r < 0 ? r : chunk_store_stat(j->cs, ino, index, &now);
		if (s == -ENOENT)
			r = 0; /* removed meanwhile: the removal goes down the chain too */
		else if (s < 0)
			r = s;
		else if (r == 0 && same_meta(&now, &m))
			r = send_piece(j, ino, index, &m, tag, last);
		else
			r = CHUNK_CHANGED, m = now;
		repl_order_unlock(j->rp, j->self, ino, index);
		if (r != CHUNK_CHANGED)
			return r;
		if (m.length <= CHUNK_IO_MAX || hold) /* shrank; or changed under the lock */
			return -EAGAIN;		      /* the next pass compares it again */
		log_info("resync: chunk %llu/%u written during its transfer to target %u; "
			 "sending it again%s",
			 (unsigned long long)ino, index, j->peer,
			 attempt == 1 ? " under its ordering lock" : "");
		last = (m.length - 1) / CHUNK_IO_MAX * CHUNK_IO_MAX;
	}
}

/* Step 2 for one chunk, under its ordering lock. A chunk above
 * CHUNK_IO_MAX is left to put_parts, after the lock: *big. */
static int sync_chunk_locked(struct sync_job *j, uint64_t ino, uint32_t index,
			     const struct chunk_stat *theirs, struct chunk_meta *big)
{
	struct chunk_meta m;
	int r = chunk_store_stat(j->cs, ino, index, &m);
	if (r == -ENOENT) {
		if (!theirs)
			return 0;
		j->removed++;
		return put_remote(j, ino, index, NULL, 0, 1, CHUNK_PF_REMOVE);
	}
	if (r < 0)
		return r;
	if (theirs && theirs->version == m.version && theirs->length == m.length &&
	    theirs->checksum == m.checksum)
		return 0;
	if (m.length > CHUNK_IO_MAX) {
		j->copied++;
		*big = m;
		return 0;
	}
	_cleanup_free_ uint8_t *buf = malloc(m.length ? m.length : 1);
	if (!buf)
		return -ENOMEM;
	ssize_t n = chunk_store_read(j->cs, ino, index, 0, m.length, buf);
	if (n < 0)
		return (int)n;
	if (n < m.length)
		memset(buf + n, 0, m.length - (size_t)n);
	j->copied++;
	return put_remote(j, ino, index, buf, m.length, m.version, 0);
}

static int sync_chunk(struct sync_job *j, uint64_t ino, uint32_t index,
		      const struct chunk_stat *theirs)
{
	struct chunk_meta big = {0};
	repl_order_lock(j->rp, j->self, ino, index);
	int r = sync_chunk_locked(j, ino, index, theirs, &big);
	repl_order_unlock(j->rp, j->self, ino, index);
	if (r == 0 && big.length)
		r = put_parts(j, ino, index, big);
	return r;
}

static void report(struct sync_job *j, bool finished, int *ret)
{
	struct mgmt_sync s = {j->chain.chain_id, j->chain.version, j->peer,
			      j->done,		 j->total,	   finished};
	int r = mgmt_sync_done(repl_meta(j->rp), &s);
	if (ret)
		*ret = r;
}

static int cmp_ent(const struct chunk_key *a, const struct chunk_list_ent *b)
{
	if (a->ino != b->ino)
		return a->ino < b->ino ? -1 : 1;
	return a->index < b->index ? -1 : a->index > b->index;
}

/* The number of distinct chunks in ours and theirs (the progress total). */
static uint64_t union_size(const struct sync_job *j, const struct chunk_key *keys, size_t n)
{
	size_t a = 0, b = 0;
	uint64_t u = 0;
	while (a < n || b < j->nremote) {
		int c = a == n ? 1 : b == j->nremote ? -1 : cmp_ent(&keys[a], &j->remote[b]);
		a += c <= 0;
		b += c >= 0;
		u++;
	}
	return u;
}

/* Step 2: the merge walk over ours (keys) and theirs (j->remote). */
static int walk(struct sync_job *j, const struct chunk_key *keys, size_t n)
{
	size_t a = 0, b = 0;
	int r = 0;
	while (r == 0 && (a < n || b < j->nremote) && !repl_stopping(j->rp)) {
		int c = a == n ? 1 : b == j->nremote ? -1 : cmp_ent(&keys[a], &j->remote[b]);
		if (c < 0)
			r = sync_chunk(j, keys[a].ino, keys[a].index, NULL), a++;
		else if (c > 0)
			r = sync_chunk(j, j->remote[b].ino, j->remote[b].index, &j->remote[b].st),
			b++;
		else
			r = sync_chunk(j, keys[a].ino, keys[a].index, &j->remote[b].st), a++, b++;
		if (++j->done % SYNC_REPORT_EVERY == 0)
			report(j, false, NULL);
	}
	return r;
}

static int sync_chain(struct sync_job *j)
{
	_cleanup_free_ struct chunk_key *keys = NULL;
	size_t n = 0;
	int r = list_remote(j);
	if (r == 0)
		r = chunk_store_list(j->cs, &keys, &n);
	if (r < 0)
		return r;
	j->total = union_size(j, keys, n);
	r = walk(j, keys, n);
	if (r == 0 && !repl_stopping(j->rp))
		report(j, true, &r);
	return r;
}

/* Runs the sync of chain c if target self is its tail and the next target
 * is syncing. */
static void maybe_sync(struct repl *rp, struct resync_state *st, const struct strata_routing *rt,
		       const struct strata_chain *c, uint32_t self, struct chunk_store *cs)
{
	int pos = chain_pos(c, self);
	if (pos < 0 || pos != chain_tail(rt, c))
		return;
	int next = chain_next_writer(rt, c, pos);
	if (next < 0 || routing_state(rt, c->targets[next]) != TARGET_SYNCING)
		return;
	const struct strata_target *t = routing_target(rt, c->targets[next]);
	if (!t)
		return;
	struct sync_job j = {
	    .rp = rp, .cs = cs, .self = self, .peer = t->target_id, .chain = *c, .st = st};
	snprintf(j.peer_addr, sizeof(j.peer_addr), "%s", t->addr);
	log_info("resync: chain %u (v%u): target %u -> target %u at %s", c->chain_id, c->version,
		 self, j.peer, j.peer_addr);
	int r = sync_chain(&j);
	if (r < 0)
		log_warn_errno(r,
			       "resync: chain %u target %u -> %u stopped after %llu of %llu chunks",
			       c->chain_id, self, j.peer, (unsigned long long)j.done,
			       (unsigned long long)j.total);
	else
		log_info("resync: chain %u target %u done: %llu chunks compared, %llu copied, "
			 "%llu removed",
			 c->chain_id, j.peer, (unsigned long long)j.done,
			 (unsigned long long)j.copied, (unsigned long long)j.removed);
	free(j.remote);
	free(j.part_buf);
	rpc_client_free(j.rpc);
}

/* Drops the staging files of transfers whose sender went away (a receiver
 * side chore; the pass runs on every chunkserver). */
static void expire_staging(struct cs_service *svc, struct resync_state *st, int nt)
{
	if (st->expired_ms && strata_mono_ms() - st->expired_ms < STAGE_EXPIRE_EVERY_MS)
		return;
	st->expired_ms = strata_mono_ms();
	for (int i = 0; i < nt; i++) {
		int n = chunk_store_put_expire(svc->targets[i].store, STAGE_MAX_AGE_S);
		if (n > 0)
			log_info("resync: target %u: dropped %d staging file(s) of interrupted "
				 "transfers",
				 svc->targets[i].target_id, n);
	}
}

static void resync_pass(struct repl *rp, struct resync_state *st)
{
	struct cs_service *svc = repl_service(rp);
	int nt = __atomic_load_n(&svc->ntargets, __ATOMIC_ACQUIRE);
	expire_staging(svc, st, nt);
	struct strata_routing rt;
	if (repl_routing_copy(rp, &rt) < 0)
		return;
	for (int i = 0; i < nt && !repl_stopping(rp); i++)
		for (uint32_t k = 0; k < rt.nchains; k++)
			maybe_sync(rp, st, &rt, &rt.chains[k], svc->targets[i].target_id,
				   svc->targets[i].store);
	strata_routing_done(&rt);
}

void *resync_main(void *arg)
{
	struct repl *rp = arg;
	struct resync_state st = {0};
	while (!repl_wait_stop(rp, PASS_EVERY_MS))
		resync_pass(rp, &st);
	return NULL;
}

/* ---- the receiving side (resync.h) ------------------------------------- */

/* The chunk's state; with verify every block is read and checked, and a
 * damaged chunk is reported with version 0 so that resync replaces it. */
static void list_stat(struct chunk_store *cs, uint64_t ino, uint32_t index, bool verify,
		      uint8_t *scratch, struct chunk_stat *ret)
{
	struct chunk_meta m;
	*ret = (struct chunk_stat){0};
	if (chunk_store_stat(cs, ino, index, &m) < 0)
		return;
	for (uint32_t off = 0; verify && off < m.length; off += CHUNK_IO_MAX) {
		uint32_t n = STRATA_MIN(CHUNK_IO_MAX, m.length - off);
		if (chunk_store_read(cs, ino, index, off, n, scratch) != (ssize_t)n)
			return;
	}
	*ret = (struct chunk_stat){m.version, m.length, m.checksum};
}

static bool key_after(const struct chunk_key *k, const struct chunk_req *r)
{
	return k->ino > r->ino || (k->ino == r->ino && k->index > r->index);
}

static int resync_list(struct chunk_store *cs, const struct chunk_req *r, struct wbuf *reply)
{
	_cleanup_free_ struct chunk_key *keys = NULL;
	size_t n = 0, i = 0;
	int e = chunk_store_list(cs, &keys, &n);
	if (e < 0)
		return e;
	bool verify = r->flags & CHUNK_LF_VERIFY;
	_cleanup_free_ uint8_t *scratch = verify ? malloc(CHUNK_IO_MAX) : NULL;
	_cleanup_free_ struct chunk_list_ent *ents = calloc(r->len, sizeof(*ents));
	if (!ents || (verify && !scratch))
		return -ENOMEM;
	while (i < n && !(r->flags & CHUNK_LF_FIRST) && !key_after(&keys[i], r))
		i++;
	uint32_t k = 0;
	for (; i < n && k < r->len; i++, k++) {
		ents[k].ino = keys[i].ino;
		ents[k].index = keys[i].index;
		list_stat(cs, keys[i].ino, keys[i].index, verify, scratch, &ents[k].st);
	}
	chunk_list_put(reply, ents, k, i < n);
	return reply->err;
}

/* PUT: the whole chunk at the sender's version, or its removal. */
static int put_whole(struct chunk_store *cs, const struct chunk_req *r, struct chunk_meta *m)
{
	if (r->flags & CHUNK_PF_REMOVE)
		return chunk_store_remove(cs, r->ino, r->index);
	return chunk_store_put(cs, r->ino, r->index, r->data, r->len, r->version, m);
}

/* PUT_PART: one piece of a transfer (put_parts on the sending side). */
static int put_piece(struct chunk_store *cs, const struct chunk_req *r, struct chunk_meta *m)
{
	struct chunk_put_piece p = {.version = r->version,
				    .tag = r->tag,
				    .checksum = r->checksum,
				    .total = r->total,
				    .off = r->off,
				    .len = r->len,
				    .data = r->data,
				    .sums = r->data_sums,
				    .flags = (r->flags & CHUNK_PP_FIRST ? CHUNK_PUT_FIRST : 0) |
					     (r->flags & CHUNK_PP_LAST ? CHUNK_PUT_LAST : 0)};
	return chunk_store_put_piece(cs, r->ino, r->index, &p, m);
}

/* PUT or PUT_PART: only a syncing target takes one, at the current chain
 * version; under the chunk's ordering lock, so that a forwarded write to it
 * lands before or after, never during. A whole put, and the last piece of
 * a put in pieces (which publishes it), also forget the chunk's copy record
 * (replica.c, invariant 8): the chunk now holds the sender's version, which
 * may be lower than the copy's. */
static int resync_put(struct repl *rp, struct chunk_store *cs, uint16_t type,
		      const struct chunk_req *r, struct wbuf *reply)
{
	int e = repl_check_syncing(rp, &r->route);
	if (e < 0)
		return e;
	struct chunk_meta m = {0};
	uint32_t tid = r->route.target_id;
	repl_order_lock(rp, tid, r->ino, r->index);
	if (type == MSG_CHUNK_PUT)
		e = put_whole(cs, r, &m);
	else
		e = put_piece(cs, r, &m);
	if (type == MSG_CHUNK_PUT || (r->flags & CHUNK_PP_LAST))
		repl_forget_pulled(rp, tid, r->ino, r->index);
	repl_order_unlock(rp, tid, r->ino, r->index);
	if (e < 0)
		return e;
	struct chunk_stat st = {m.version, m.length, m.checksum};
	chunk_stat_put(reply, &st);
	return 0;
}

int resync_handle(struct repl *rp, struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		  struct wbuf *reply)
{
	switch (type) {
	case MSG_CHUNK_LIST:
		return resync_list(cs, r, reply);
	case MSG_CHUNK_PUT:
	case MSG_CHUNK_PUT_PART:
		return resync_put(rp, cs, type, r, reply);
	}
	return -EOPNOTSUPP;
}
