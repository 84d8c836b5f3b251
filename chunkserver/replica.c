/* replica.c — CRAQ in strata-chunkserver: chain checks, write forwarding,
 * commit on the way back, reads from any replica, exactly-once retries.
 *
 * The protocol. A chain (from strata-meta's routing table) lists targets
 * head first; writers are its serving and syncing targets, in order; the
 * tail is the last serving target. A client's WRITE_EX/TRUNCATE goes to the
 * head. Each writer, holding the chunk's ordering lock:
 *   1. marks the chunk pending (in memory); if the chunk is unsure here
 *      (invariant 7), reconciles it with the next writer first,
 *   2. forwards the request to the next writer (flag CHUNK_WF_FWD) and waits
 *      for its acknowledgement — which the next writer sends only after it
 *      applied the write itself, so the acknowledgement is the commit
 *      travelling back up,
 *   3. applies it to its own chunk file (a new copy-on-write version),
 *   4. records (client id, request id) -> result in the dedup table,
 *   5. clears pending and answers.
 * The last writer applies first: once the tail has applied, the write is
 * committed; once the head has applied, every writer has, and the client
 * gets its acknowledgement.
 *
 * Why "unsure": a forward that fails after it may have been delivered
 * (timeout, reset: a frozen or dying successor; or an error the successor
 * answered after its own forward failed) leaves the write's outcome below
 * unknown. Say the middle of H -> M -> T is frozen after T applied write w
 * (T at v+1, M and H at v). H's forward times out, M is taken out, H
 * answers -EAGAIN without applying. A retry of w that T answers from its
 * dedup table must not make H apply w on top of a chunk that lacks it, and
 * a retry under a new request id (or another client's write) must not pass
 * H while H is one write behind T: H would end at v+1 and T at v+2 (the
 * same bytes one version apart, or two writes ordered differently on H and
 * T). So no write passes a hop whose last forward of the chunk failed
 * until the hop has caught up with its successor.
 *
 * State of one chunk on one replica (functions making each transition):
 *
 *      committed(v) --repl_write (pending count +1)--> pending(v -> v+1)
 *      pending      --write_locked: forward_write ok, cs_write_local ok,
 *                     dedup_add--> committed(v+1)
 *      pending      --forward_write failed before the request could be
 *                     delivered--> committed(v) (error to the caller)
 *      pending      --forward_write failed after it may have been
 *                     delivered, or cs_write_local failed--> unsure(v) (error
 *                     to the caller; replicas below may hold v+1)
 *      unsure(v)    --next write: reconcile (an empty write down the chain
 *                     as a barrier; a serving successor ahead is copied here
 *                     whole)--> committed(successor's version), then as
 *                     committed; reads treat unsure as pending
 *      committed(V) --a write the successor answers at a version <= V
 *                     copied here by reconcile (already_here)--> committed(V)
 *                     (nothing applied: the copy holds it)
 *      committed(v) --repl_write: dedup_find hit--> committed(v) (answered
 *                     with the recorded result, nothing applied)
 *      any          --resync_put (a resync PUT from sync_chunk, resync.c)-->
 *                     committed(the predecessor's version)
 *      any, read    --repl_read: pending and not the tail--> -EAGAIN
 *
 * Invariants:
 *   1. A replica acknowledges a write only after every writer below it in the
 *      chain applied it; so the head's state contains every acknowledged
 *      write, and so does every serving replica that is not pending.
 *   2. Writes to one chunk are applied in the same order on every replica:
 *      the ordering lock is held across the forward, so the successor sees
 *      them one at a time, in the head's order. The lock is exact per
 *      (target, ino, index) — never shared between chunks — so waits follow
 *      a chain's order and cannot form a cycle across nodes.
 *   3. Every hop checks the chain version the request carries against its
 *      own table (refetching when the request's is newer): a mismatch is
 *      -ESTALE and nothing is applied. A client write is accepted only at
 *      the head, a forwarded one only by a serving or syncing target.
 *   4. A read is served only by a serving target at the request's chain
 *      version, both judged by a table younger than half the lease (an older
 *      one is refetched and the request placed again by the new one:
 *      read_place), before the read and again after it; so a frozen node
 *      that comes back cannot serve what it held before it was taken out,
 *      even to a client routing by the same old chain version. A non-tail
 *      replica with the chunk pending or unsure answers -EAGAIN and the
 *      client reads from the tail.
 *   5. A retried request (same client id and request id, non-zero) that was
 *      applied here is answered from the dedup table without applying or
 *      forwarding it again (bounded table: DEDUP_SLOTS, oldest overwritten).
 *   6. A replica whose writes may have diverged (a crash between the tail's
 *      apply and the head's) is brought back to its predecessor's state by
 *      resync before it serves again: strata-meta makes every restarted or
 *      returning target wait and sync (meta/chainmap.c).
 *   7. A writer whose forward of a chunk failed after it may have been
 *      delivered marks the chunk unsure (in memory; a restart loses the
 *      mark, but a restarted target resyncs, invariant 6). Before it
 *      forwards or applies another write of that chunk it reconciles,
 *      holding the ordering lock: an empty WRITE_EX (no client id) goes down
 *      the chain — every hop takes the chunk's ordering lock behind what it
 *      still had in flight and reconciles itself first — and answers the
 *      next writer's state; if that is a serving target at a higher
 *      version, its chunk is read and put here at its version (it holds
 *      every write we hold, invariant 1, plus the ones whose forward
 *      failed). A straggling forward of the old chain version is refused
 *      below (invariant 3), so nothing more lands there behind our back. At
 *      the tail the mark is dropped: whoever applied more is out of the
 *      chain and resyncs. Reads of an unsure chunk at a non-tail replica
 *      answer -EAGAIN.
 *   8. After such a copy at version V (its copy record, set_pulled), a
 *      forward that a serving successor answers at a version <= V is a
 *      retry it answered from its dedup table: the write is already in the
 *      copy and is not applied here again (exactly once per request id).
 *      This holds across chain changes, so the record is not tied to the
 *      chain version: the chunk here stays at V or above until it is
 *      removed or replaced, and a serving successor holds every write we
 *      hold (invariant 1), so a write it applies afresh lands above V. The
 *      record goes when the chunk is removed here (REMOVE_FILE) or replaced
 *      by a resync (a PUT, or the last piece of a PUT_PART, resync.c),
 *      which may put a lower version. Tied to the chain version, a copy
 *      made before a chain change was forgotten by it, and a retry of the
 *      lost write under the new chain was applied a second time: the head
 *      one version ahead of its successors with the same bytes
 *      (repl_large_receiver once in CI; repl_copy_rechain).
 *
 * Without an engine attached (service.c, repl == NULL) requests are served
 * locally with no chain checks (in-process tests). */
#include "chunkserver/replica.h"
#include "fs/clock.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "chunkserver/chunk_store.h"
#include "fs/cleanup.h"
#include "fs/layout.h"
#include "fs/log.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "chunkserver/replica-internal.h"
#include "chunkserver/resync.h"
#include "chunkserver/service.h"

#define ORDER_STRIPES 1024
#define PENDING_SLOTS 4096
#define DEDUP_SLOTS 16384
#define FWD_TIMEOUT_MS 2500
#define FWD_CONNECT_MS 1000
#define REFRESH_MIN_MS 20
#define PULLED_SLOTS 256

struct rsnap {
	int refs;
	int64_t fetched_ms;
	struct strata_routing r;
};

struct rconn {
	char addr[64];
	struct rpc_client *rpc;
};

struct dedup_ent {
	uint64_t client_id, req_id;
	uint32_t target_id;
	struct chunk_stat st;
};

/* Exact per-chunk locks (no two chunks share one: a shared stripe could link
 * the chains of two chunks into a cycle of waits across nodes). */
struct held_key {
	uint32_t target, index;
	uint64_t ino;
};
struct order_stripe {
	pthread_mutex_t mu;
	pthread_cond_t cv;
	struct held_key *held;
	int nheld, cap;
};

struct repl {
	struct meta_client *mc;
	struct cs_service *svc;
	pthread_mutex_t mu; /* snap, tried_ms, conns */
	struct rsnap *snap;
	int64_t tried_ms;
	struct rconn *conns;
	int nconns, capconns;
	struct order_stripe order[ORDER_STRIPES];
	uint32_t pending[PENDING_SLOTS]; /* atomic counters */
	pthread_mutex_t unsure_mu;
	struct held_key *unsure; /* chunks that may lag their successor (invariant 7) */
	int nunsure, capunsure;
	struct pulled {
		struct held_key k;
		uint64_t version; /* 0: a cleared slot */
	} pulled[PULLED_SLOTS];	  /* copy records: chunks copied from a successor (invariant 8) */
	int npulled, pulled_next;
	pthread_mutex_t dedup_mu;
	struct dedup_ent *dedup;
	pthread_t resync_thr;
	pthread_mutex_t stop_mu;
	pthread_cond_t stop_cv;
	bool started, stop;
};

static uint64_t chunk_hash(uint32_t target, uint64_t ino, uint32_t index)
{
	uint64_t h = (ino * 0x9E3779B97F4A7C15ull) ^ ((uint64_t)index * 0xC2B2AE3D27D4EB4Full) ^
		     ((uint64_t)target * 0x165667B19E3779F9ull);
	return h ^ (h >> 29);
}

/* ---- routing snapshots ---------------------------------------------------- */

static void snap_put(struct rsnap *s)
{
	if (!s || __atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) > 0)
		return;
	strata_routing_done(&s->r);
	free(s);
}

static struct rsnap *snap_get(struct repl *rp)
{
	pthread_mutex_lock(&rp->mu);
	struct rsnap *s = rp->snap;
	if (s)
		__atomic_add_fetch(&s->refs, 1, __ATOMIC_ACQ_REL);
	pthread_mutex_unlock(&rp->mu);
	return s;
}

int repl_refresh(struct repl *rp, int min_age_ms)
{
	pthread_mutex_lock(&rp->mu);
	bool skip = strata_mono_ms() - rp->tried_ms < min_age_ms;
	if (!skip)
		rp->tried_ms = strata_mono_ms();
	pthread_mutex_unlock(&rp->mu);
	if (skip)
		return 0;
	struct rsnap *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	/* The table is as new as the moment it was asked for, not as the moment
	 * its answer was read: an answer that waited in the socket while this
	 * process was frozen describes the chains before the freeze. */
	int64_t asked_ms = strata_mono_ms();
	int r = mgmt_routing(rp->mc, &s->r);
	if (r < 0) {
		free(s);
		return r;
	}
	s->refs = 1;
	s->fetched_ms = asked_ms;
	pthread_mutex_lock(&rp->mu);
	struct rsnap *drop = rp->snap;
	if (drop && drop->r.version > s->r.version) { /* a slower, older answer */
		/* ours is newer than what strata-meta had when we asked */
		if (__atomic_load_n(&drop->fetched_ms, __ATOMIC_ACQUIRE) < asked_ms)
			__atomic_store_n(&drop->fetched_ms, asked_ms, __ATOMIC_RELEASE);
		drop = s;
	} else {
		rp->snap = s;
	}
	pthread_mutex_unlock(&rp->mu);
	snap_put(drop);
	return 0;
}

int repl_routing_copy(struct repl *rp, struct strata_routing *ret)
{
	struct rsnap *s = snap_get(rp);
	if (!s)
		return -ENXIO;
	int r = strata_routing_copy(&s->r, ret);
	snap_put(s);
	return r;
}

struct meta_client *repl_meta(struct repl *rp)
{
	return rp->mc;
}

struct cs_service *repl_service(struct repl *rp)
{
	return rp->svc;
}

/* ---- connections to the other chunkservers -------------------------------- */

static struct rpc_client *conn_for(struct repl *rp, const char *addr)
{
	struct rpc_client *rpc = NULL;
	pthread_mutex_lock(&rp->mu);
	for (int i = 0; i < rp->nconns && !rpc; i++)
		if (strcmp(rp->conns[i].addr, addr) == 0)
			rpc = rp->conns[i].rpc;
	if (!rpc && rp->nconns == rp->capconns) {
		int cap = rp->capconns ? 2 * rp->capconns : 8;
		struct rconn *n = realloc(rp->conns, (size_t)cap * sizeof(*n));
		if (n)
			rp->conns = n, rp->capconns = cap;
	}
	struct rpc_client_opts o = {.timeout_ms = FWD_TIMEOUT_MS,
				    .connect_timeout_ms = FWD_CONNECT_MS};
	if (!rpc && rp->nconns < rp->capconns && (rpc = rpc_client_new(addr, &o))) {
		snprintf(rp->conns[rp->nconns].addr, sizeof(rp->conns[0].addr), "%s", addr);
		rp->conns[rp->nconns++].rpc = rpc;
	}
	pthread_mutex_unlock(&rp->mu);
	return rpc;
}

int repl_call(struct repl *rp, const char *addr, uint16_t type, const struct chunk_req *req,
	      struct rpc_reply *reply)
{
	struct rpc_client *rpc = conn_for(rp, addr);
	if (!rpc)
		return -ENOMEM;
	_cleanup_(wbuf_done) struct wbuf wb;
	wbuf_init(&wb);
	int r = chunk_req_encode(type, req, &wb);
	if (r < 0)
		return r;
	bool data = type == MSG_CHUNK_WRITE_EX || type == MSG_CHUNK_PUT;
	struct iovec iov = {wb.data, wb.len};
	/* a forward re-seals from the hash verified on receipt (WIRE_F_DATA):
	 * the data is not read again, and what the next hop checks it against
	 * is what the client sent, not what this hop holds */
	struct rpc_data d = {.p = req->data,
			     .len = data ? req->len : 0,
			     .hashed = req->data_hashed,
			     .hash = req->data_hash};
	return rpc_callv_data(rpc, type, &iov, 1, &d, 0, reply);
}

/* ---- ordering locks, pending marks, dedup ---------------------------------- */

static int held_find(const struct order_stripe *o, uint32_t target, uint64_t ino, uint32_t index)
{
	for (int i = 0; i < o->nheld; i++)
		if (o->held[i].target == target && o->held[i].ino == ino &&
		    o->held[i].index == index)
			return i;
	return -1;
}

void repl_order_lock(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	struct order_stripe *o = &rp->order[chunk_hash(target, ino, index) % ORDER_STRIPES];
	pthread_mutex_lock(&o->mu);
	while (held_find(o, target, ino, index) >= 0)
		pthread_cond_wait(&o->cv, &o->mu);
	while (o->nheld == o->cap) {
		int cap = o->cap ? o->cap * 2 : 4;
		struct held_key *h = realloc(o->held, (size_t)cap * sizeof(*h));
		if (h) {
			o->held = h;
			o->cap = cap;
		} else { /* out of memory: wait for a holder to leave */
			pthread_cond_wait(&o->cv, &o->mu);
		}
	}
	o->held[o->nheld++] = (struct held_key){target, index, ino};
	pthread_mutex_unlock(&o->mu);
}

void repl_order_unlock(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	struct order_stripe *o = &rp->order[chunk_hash(target, ino, index) % ORDER_STRIPES];
	pthread_mutex_lock(&o->mu);
	int i = held_find(o, target, ino, index);
	if (i >= 0)
		o->held[i] = o->held[--o->nheld];
	pthread_cond_broadcast(&o->cv);
	pthread_mutex_unlock(&o->mu);
}

static uint32_t *pending_slot(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	return &rp->pending[(chunk_hash(target, ino, index) >> 7) % PENDING_SLOTS];
}

/* Invariant 7: chunks whose last forwarded write failed after it may have
 * been delivered (its successor may have applied it; this replica did not).
 * Exact keys, few entries (one per failed forward, until the chunk's next
 * write here reconciles it). */
static int unsure_find(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	for (int i = 0; i < rp->nunsure; i++)
		if (rp->unsure[i].target == target && rp->unsure[i].ino == ino &&
		    rp->unsure[i].index == index)
			return i;
	return -1;
}

static bool is_unsure(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	if (!__atomic_load_n(&rp->nunsure, __ATOMIC_ACQUIRE))
		return false;
	pthread_mutex_lock(&rp->unsure_mu);
	bool r = unsure_find(rp, target, ino, index) >= 0;
	pthread_mutex_unlock(&rp->unsure_mu);
	return r;
}

static void set_unsure(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index, bool on)
{
	pthread_mutex_lock(&rp->unsure_mu);
	int i = unsure_find(rp, target, ino, index);
	if (!on && i >= 0) {
		rp->unsure[i] = rp->unsure[rp->nunsure - 1];
		__atomic_store_n(&rp->nunsure, rp->nunsure - 1, __ATOMIC_RELEASE);
	} else if (on && i < 0) {
		if (rp->nunsure == rp->capunsure) {
			int cap = rp->capunsure ? 2 * rp->capunsure : 16;
			struct held_key *n = realloc(rp->unsure, (size_t)cap * sizeof(*n));
			if (n)
				rp->unsure = n, rp->capunsure = cap;
		}
		if (rp->nunsure < rp->capunsure) {
			rp->unsure[rp->nunsure] = (struct held_key){target, index, ino};
			__atomic_store_n(&rp->nunsure, rp->nunsure + 1, __ATOMIC_RELEASE);
		} else {
			log_error("replica: out of memory marking chunk %llu:%u of target %u",
				  (unsigned long long)ino, index, target);
		}
	}
	pthread_mutex_unlock(&rp->unsure_mu);
}

static bool key_eq(const struct held_key *k, uint32_t target, uint64_t ino, uint32_t index)
{
	return k->target == target && k->ino == ino && k->index == index;
}

/* Invariant 8: the version at which a chunk was last copied from its
 * successor here (its copy record; 0: none since the start, or the chunk
 * was removed or put here by a resync since). Not tied to the chain
 * version: a retry answered from a successor's dedup table after a chain
 * change is as much in the copy as before it. A chunk has at most one
 * live slot (set_pulled clears the others first); cleared slots keep
 * their key and are skipped, wherever the ring put them. */
static uint64_t pulled_version(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	if (!__atomic_load_n(&rp->npulled, __ATOMIC_ACQUIRE))
		return 0;
	uint64_t v = 0;
	pthread_mutex_lock(&rp->unsure_mu);
	for (int i = 0; i < rp->npulled && !v; i++)
		if (rp->pulled[i].version && key_eq(&rp->pulled[i].k, target, ino, index))
			v = rp->pulled[i].version;
	pthread_mutex_unlock(&rp->unsure_mu);
	return v;
}

/* Records a copy at version (0: forgets the chunk's copy record; index
 * UINT32_MAX: every chunk of ino). */
static void set_pulled(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index,
		       uint64_t version)
{
	pthread_mutex_lock(&rp->unsure_mu);
	for (int i = 0; i < rp->npulled; i++)
		if (key_eq(&rp->pulled[i].k, target, ino, index) ||
		    (index == UINT32_MAX && rp->pulled[i].k.target == target &&
		     rp->pulled[i].k.ino == ino))
			rp->pulled[i].version = 0;
	if (version) {
		int i = rp->pulled_next;
		rp->pulled_next = (i + 1) % PULLED_SLOTS;
		rp->pulled[i] = (struct pulled){{target, index, ino}, version};
		if (rp->npulled < PULLED_SLOTS)
			__atomic_store_n(&rp->npulled, rp->npulled + 1, __ATOMIC_RELEASE);
	}
	pthread_mutex_unlock(&rp->unsure_mu);
}

void repl_forget_pulled(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	set_pulled(rp, target, ino, index, 0);
}

/* A hash slot may be shared: a false "pending" only sends a read to the tail.
 * An unsure chunk counts as pending: its successor may hold a write it lacks. */
static bool is_pending(struct repl *rp, uint32_t target, uint64_t ino, uint32_t index)
{
	return __atomic_load_n(pending_slot(rp, target, ino, index), __ATOMIC_ACQUIRE) > 0 ||
	       is_unsure(rp, target, ino, index);
}

static struct dedup_ent *dedup_slot(struct repl *rp, uint32_t target, uint64_t cid, uint64_t rid)
{
	uint64_t h = chunk_hash(target, cid, (uint32_t)rid) ^ (rid * 0x27D4EB2F165667C5ull);
	return &rp->dedup[(h >> 17) % DEDUP_SLOTS];
}

static bool dedup_find(struct repl *rp, uint32_t target, const struct chunk_req *r,
		       struct chunk_stat *ret)
{
	if (!r->client_id)
		return false;
	pthread_mutex_lock(&rp->dedup_mu);
	struct dedup_ent *e = dedup_slot(rp, target, r->client_id, r->req_id);
	bool hit = e->client_id == r->client_id && e->req_id == r->req_id && e->target_id == target;
	if (hit)
		*ret = e->st;
	pthread_mutex_unlock(&rp->dedup_mu);
	return hit;
}

static void dedup_add(struct repl *rp, uint32_t target, const struct chunk_req *r,
		      const struct chunk_stat *st)
{
	if (!r->client_id)
		return;
	pthread_mutex_lock(&rp->dedup_mu);
	*dedup_slot(rp, target, r->client_id, r->req_id) =
	    (struct dedup_ent){r->client_id, r->req_id, target, *st};
	pthread_mutex_unlock(&rp->dedup_mu);
}

/* ---- chain checks ------------------------------------------------------------ */

/* Where this request's target stands in its chain, by our table. */
struct place {
	struct rsnap *s;
	const struct strata_chain *c;
	int pos;
};

static void place_done(struct place *p)
{
	snap_put(p->s);
	p->s = NULL;
}

static const struct strata_chain *find_chain(struct rsnap *s, uint32_t id)
{
	return s ? routing_chain(&s->r, id) : NULL;
}

int repl_chain_pos(struct repl *rp, const struct chunk_route *rt)
{
	struct rsnap *s = snap_get(rp);
	int pos = chain_pos(find_chain(s, rt->chain_id), rt->target_id);
	snap_put(s);
	return pos;
}

/* Invariant 3: the request's chain version must be ours; a newer one makes
 * us refetch first. Returns 0 with *p filled (release with place_done) or
 * -ESTALE. */
static int place_of(struct repl *rp, const struct chunk_route *rt, struct place *p)
{
	p->s = snap_get(rp);
	p->c = find_chain(p->s, rt->chain_id);
	if (!p->c || p->c->version < rt->chain_ver) {
		place_done(p);
		repl_refresh(rp, REFRESH_MIN_MS);
		p->s = snap_get(rp);
		p->c = find_chain(p->s, rt->chain_id);
	}
	p->pos = chain_pos(p->c, rt->target_id);
	if (!p->c || p->c->version != rt->chain_ver || p->pos < 0) {
		place_done(p);
		return -ESTALE;
	}
	return 0;
}

/* Invariant 4: where a read may be served. The request's chain version and
 * this target's serving state are checked by a table younger than half the
 * lease (for a multi-replica chain); with an older one the table is
 * refetched and the request placed again by the new one: a node frozen past
 * the lease and thawed must not serve by what it believed before (the
 * refetch alone proves nothing about the chain the request named, which the
 * new table may have moved on from). Returns 0 with *p filled (release with
 * place_done), or -ESTALE. */
static int read_place(struct repl *rp, const struct chunk_route *rt, struct place *p,
		      bool refetched)
{
	int e = place_of(rp, rt, p);
	if (e < 0)
		return e;
	if (routing_state(&p->s->r, rt->target_id) != TARGET_SERVING) {
		place_done(p);
		return -ESTALE;
	}
	uint32_t lease = p->s->r.lease_ms;
	if (p->c->ntargets < 2 || !lease ||
	    strata_mono_ms() - __atomic_load_n(&p->s->fetched_ms, __ATOMIC_ACQUIRE) <= lease / 2)
		return 0;
	place_done(p);
	if (refetched)
		return -ESTALE;
	repl_refresh(rp, 0);
	return read_place(rp, rt, p, true);
}

int repl_check_syncing(struct repl *rp, const struct chunk_route *rt)
{
	_cleanup_(place_done) struct place p = {0};
	int e = place_of(rp, rt, &p);
	if (e < 0)
		return e;
	return routing_state(&p.s->r, rt->target_id) == TARGET_SYNCING ? 0 : -ESTALE;
}

/* ---- reads --------------------------------------------------------------------- */

/* Invariant 4. Placed by read_place before the read and again after it, so
 * that both the pending check (a non-tail replica with the chunk pending or
 * unsure, invariant 7, sends the client to the tail) and the data are judged
 * by a table fetched since any freeze. */
static int repl_read(struct repl *rp, struct chunk_store *cs, const struct chunk_req *r,
		     struct wbuf *reply)
{
	_cleanup_(place_done) struct place p = {0};
	int e = read_place(rp, &r->route, &p, false);
	if (e < 0)
		return e;
	if (p.pos != chain_tail(&p.s->r, p.c) &&
	    is_pending(rp, r->route.target_id, r->ino, r->index))
		return -EAGAIN;
	if ((e = cs_read_local(cs, r, reply)) < 0)
		return e;
	/* frozen between the check and the read: what it read may be stale */
	place_done(&p);
	return read_place(rp, &r->route, &p, false) < 0 ? -ESTALE : 0;
}

/* ---- writes -------------------------------------------------------------------- */

/* The chain's next writer, as a forward addressed it. */
struct fwd {
	uint32_t tid;
	bool serving; /* the successor serves (its versions track ours) */
};

/* A successor that does not answer is reported; the write answers -EAGAIN. */
static int fwd_result(struct repl *rp, uint32_t tid, int e)
{
	if (e == -ECONNREFUSED || e == -ECONNRESET || e == -ETIMEDOUT || e == -EPIPE ||
	    e == -EHOSTUNREACH || e == -ENETUNREACH) {
		log_warn_errno(e, "replica: call to target %u failed; reporting it to strata-meta",
			       tid);
		mgmt_report(rp->mc, tid); /* strata-meta probes it and fails its node */
		repl_refresh(rp, 0);
		return -EAGAIN;
	}
	return e;
}

/* Could the request have reached the successor? Only a refused or
 * unreachable connection (nothing sent) says it could not. */
static bool maybe_delivered(int e)
{
	return e != -ECONNREFUSED && e != -EHOSTUNREACH && e != -ENETUNREACH;
}

/* Sends the write on to the chain's next writer; the reply is its commit,
 * with the successor's chunk state in *succ. *sent tells whether the
 * request may have reached it (then a failure leaves its outcome below
 * unknown: invariant 7). */
static int forward_write(struct repl *rp, struct place *p, int next, uint16_t type,
			 const struct chunk_req *r, struct fwd *fw, struct chunk_stat *succ,
			 bool *sent)
{
	uint32_t tid = p->c->targets[next];
	const struct strata_target *t = routing_target(&p->s->r, tid);
	if (!t)
		return -ESTALE;
	*fw = (struct fwd){tid, routing_state(&p->s->r, tid) == TARGET_SERVING};
	struct chunk_req f = *r;
	f.route = (struct chunk_route){tid, p->c->chain_id, p->c->version};
	f.flags |= CHUNK_WF_FWD;
	uint16_t ftype = type == MSG_CHUNK_WRITE ? MSG_CHUNK_WRITE_EX : type;
	struct rpc_reply rep = {0};
	int e = repl_call(rp, t->addr, ftype, &f, &rep);
	*sent = e != -ENOMEM && maybe_delivered(e);
	if (e == 0) {
		struct rbuf rb;
		rbuf_init(&rb, rep.data, rep.len);
		e = chunk_stat_get(&rb, succ) < 0 ? -EPROTO : 0;
	}
	rpc_reply_done(&rep);
	return fwd_result(rp, tid, e);
}

static int local_stat(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_stat *st)
{
	struct chunk_meta m = {0};
	int e = chunk_store_stat(cs, ino, index, &m);
	if (e == -ENOENT)
		e = 0, m = (struct chunk_meta){0};
	*st = (struct chunk_stat){m.version, m.length, m.checksum};
	return e;
}

/* Invariant 8: after a reconcile copied the successor's chunk here at
 * version V, a write it answers at a version <= V (a retry it answered from
 * its dedup table) is one we already hold: it is not applied again. */
static bool already_here(struct repl *rp, const struct chunk_req *r, const struct fwd *f,
			 const struct chunk_stat *succ)
{
	if (!f->serving || !succ->version)
		return false;
	return succ->version <= pulled_version(rp, r->route.target_id, r->ino, r->index);
}

/* Reads the successor's whole chunk (st: its state, as it answered the
 * barrier) into buf. */
static int read_successor(struct repl *rp, struct place *p, const struct fwd *f,
			  const struct chunk_req *r, const struct chunk_stat *st, uint8_t *buf)
{
	const struct strata_target *t = routing_target(&p->s->r, f->tid);
	if (!t)
		return -ESTALE;
	for (uint32_t off = 0; off < st->length;) {
		struct chunk_req q = {.route = {f->tid, p->c->chain_id, p->c->version},
				      .ino = r->ino,
				      .index = r->index,
				      .off = off,
				      .len = STRATA_MIN(CHUNK_IO_MAX, st->length - off)};
		struct rpc_reply rep = {.buf = buf + off, .cap = q.len};
		int e = repl_call(rp, t->addr, MSG_CHUNK_READ, &q, &rep);
		if (e == 0 && rep.len != q.len)
			e = -EAGAIN; /* changed under us: cannot be, try again later */
		if (e == 0 && rep.data != buf + off)
			memcpy(buf + off, rep.data, rep.len);
		rpc_reply_done(&rep);
		if (e < 0)
			return fwd_result(rp, f->tid, e);
		off += q.len;
	}
	return 0;
}

/* Invariant 7, the copy: puts the successor's chunk (state succ, ahead of
 * ours at `here`) here at its version. */
static int copy_successor(struct repl *rp, struct chunk_store *cs, struct place *p,
			  const struct fwd *f, const struct chunk_req *r,
			  const struct chunk_stat *succ, const struct chunk_stat *here)
{
	uint32_t tid = r->route.target_id;
	if (succ->length > CHUNK_STORE_MAX_LEN)
		return -EPROTO;
	_cleanup_free_ uint8_t *buf = malloc(succ->length ? succ->length : 1);
	if (!buf)
		return -ENOMEM;
	int e = read_successor(rp, p, f, r, succ, buf);
	if (e < 0)
		return e;
	struct chunk_meta m = {0};
	if ((e = chunk_store_put(cs, r->ino, r->index, buf, succ->length, succ->version, &m)) < 0)
		return e;
	if (m.checksum != succ->checksum || m.length != succ->length) {
		log_warn("replica: chunk %llu:%u of target %u copied from target %u differs "
			 "from its state (length %u/%u); not reconciled",
			 (unsigned long long)r->ino, r->index, tid, f->tid, m.length, succ->length);
		return -EAGAIN;
	}
	log_info("replica: chunk %llu:%u of target %u was behind target %u after a failed "
		 "forward: copied its version %llu (had %llu)",
		 (unsigned long long)r->ino, r->index, tid, f->tid,
		 (unsigned long long)succ->version, (unsigned long long)here->version);
	set_pulled(rp, tid, r->ino, r->index, succ->version);
	return 0;
}

/* Invariant 7: makes an unsure chunk equal to its successor's before it is
 * written or read here again. An empty write goes down the chain first (a
 * barrier: every hop below takes the chunk's ordering lock behind whatever
 * it still had in flight, reconciles itself, and answers its state); a
 * serving successor ahead of us (it applied a write we did not) has its
 * whole chunk copied here at its version. Called with the ordering lock
 * held. */
static int reconcile(struct repl *rp, struct chunk_store *cs, struct place *p, int next,
		     const struct chunk_req *r)
{
	uint32_t tid = r->route.target_id;
	if (next < 0) { /* no writer below: whoever applied more is out and resyncs */
		set_unsure(rp, tid, r->ino, r->index, false);
		return 0;
	}
	struct chunk_req b = {
	    .route = r->route, .ino = r->ino, .index = r->index, .chunk_size = r->chunk_size};
	struct fwd f;
	struct chunk_stat succ = {0}, here = {0}; /* gcc -O2 cannot see local_stat sets it */
	bool sent;
	int e = forward_write(rp, p, next, MSG_CHUNK_WRITE_EX, &b, &f, &succ, &sent);
	if (e == 0)
		e = local_stat(cs, r->ino, r->index, &here);
	if (e < 0)
		return e;
	if (succ.version > here.version) {
		if (!f.serving) /* a syncing successor: our resync makes it equal to us */
			return -EAGAIN;
		if ((e = copy_successor(rp, cs, p, &f, r, &succ, &here)) < 0)
			return e;
	}
	set_unsure(rp, tid, r->ino, r->index, false);
	return 0;
}

/* Invariant 3: who may accept this write here. */
static int write_allowed(const struct place *p, const struct chunk_req *r)
{
	uint8_t st = routing_state(&p->s->r, r->route.target_id);
	if (r->flags & CHUNK_WF_FWD)
		return st == TARGET_SERVING || st == TARGET_SYNCING ? 0 : -ESTALE;
	return st == TARGET_SERVING && p->pos == chain_head(&p->s->r, p->c) ? 0 : -ESTALE;
}

/* Forward (if there is a next writer), then apply here, unless the
 * successor's answer shows the write is already in a copy made by
 * reconcile (invariant 8). *sent as forward_write's. */
static int forward_apply(struct repl *rp, struct chunk_store *cs, struct place *p, int next,
			 uint16_t type, const struct chunk_req *r, struct chunk_stat *st,
			 bool *sent)
{
	if (next >= 0) {
		struct fwd f;
		struct chunk_stat succ;
		int e = forward_write(rp, p, next, type, r, &f, &succ, sent);
		if (e < 0)
			return e;
		if (already_here(rp, r, &f, &succ))
			return local_stat(cs, r->ino, r->index, st);
	}
	return cs_write_local(cs, type, r, st);
}

/* Steps 2-5 of the protocol, under the ordering lock with the chunk pending.
 * The chain is looked up again under the lock: a write that queued behind
 * one whose forward failed must not forward by the table of before. */
static int write_locked(struct repl *rp, struct chunk_store *cs, struct place *p, uint16_t type,
			const struct chunk_req *r, struct chunk_stat *st)
{
	if (dedup_find(rp, r->route.target_id, r, st))
		return 0;
	place_done(p);
	int e = place_of(rp, &r->route, p);
	if (e == 0)
		e = write_allowed(p, r);
	if (e < 0)
		return e;
	int next = chain_next_writer(&p->s->r, p->c, p->pos);
	uint32_t tid = r->route.target_id;
	if (is_unsure(rp, tid, r->ino, r->index) && (e = reconcile(rp, cs, p, next, r)) < 0)
		return e;
	bool sent = false;
	e = forward_apply(rp, cs, p, next, type, r, st, &sent);
	if (e == 0)
		dedup_add(rp, tid, r, st);
	else if (sent) /* invariant 7: the successor may have applied it */
		set_unsure(rp, tid, r->ino, r->index, true);
	return e;
}

static int repl_write(struct repl *rp, struct chunk_store *cs, uint16_t type,
		      const struct chunk_req *r, struct wbuf *reply)
{
	_cleanup_(place_done) struct place p = {0};
	struct chunk_stat st;
	int e = place_of(rp, &r->route, &p);
	if (e == 0)
		e = write_allowed(&p, r);
	if (e < 0)
		return e;
	if (dedup_find(rp, r->route.target_id, r, &st)) {
		chunk_stat_put(reply, &st);
		return 0;
	}
	uint32_t tid = r->route.target_id, *pend = pending_slot(rp, tid, r->ino, r->index);
	repl_order_lock(rp, tid, r->ino, r->index);
	__atomic_add_fetch(pend, 1, __ATOMIC_ACQ_REL);
	e = write_locked(rp, cs, &p, type, r, &st);
	__atomic_sub_fetch(pend, 1, __ATOMIC_ACQ_REL);
	repl_order_unlock(rp, tid, r->ino, r->index);
	if (e == 0)
		chunk_stat_put(reply, &st);
	return e;
}

/* REMOVE_FILE one chunk at a time under its ordering lock, so that a resync
 * PUT of the chunk in flight (from a predecessor holding its own lock) lands
 * before the removal here, never after. Clients send REMOVE_FILE down the
 * chain's order (serving before syncing targets). */
static int repl_remove_file(struct repl *rp, struct chunk_store *cs, const struct chunk_req *r,
			    struct wbuf *reply)
{
	_cleanup_free_ uint32_t *idx = NULL;
	size_t n = 0;
	int e = chunk_store_list_ino(cs, r->ino, r->index, &idx, &n);
	uint32_t removed = 0, tid = r->route.target_id;
	for (size_t i = 0; e >= 0 && i < n; i++) {
		repl_order_lock(rp, tid, r->ino, idx[i]);
		e = chunk_store_remove(cs, r->ino, idx[i]);
		set_pulled(rp, tid, r->ino, idx[i], 0);
		repl_order_unlock(rp, tid, r->ino, idx[i]);
		removed += e > 0;
	}
	if (e < 0)
		return e;
	if (r->index == 0)
		chunk_store_rmdir_ino(cs, r->ino);
	chunk_count_put(reply, removed);
	return 0;
}

/* ---- dispatch ------------------------------------------------------------------- */

int repl_handle(struct repl *rp, struct chunk_store *cs, uint16_t type, const struct chunk_req *r,
		struct wbuf *reply)
{
	switch (type) {
	case MSG_CHUNK_READ:
		return repl_read(rp, cs, r, reply);
	case MSG_CHUNK_WRITE:
	case MSG_CHUNK_WRITE_EX:
	case MSG_CHUNK_TRUNCATE:
		return repl_write(rp, cs, type, r, reply);
	case MSG_CHUNK_REMOVE_FILE:
		return repl_remove_file(rp, cs, r, reply);
	}
	return -EOPNOTSUPP;
}

/* ---- life cycle ------------------------------------------------------------------ */

int repl_new(struct meta_client *mc, struct cs_service *svc, struct repl **ret)
{
	struct repl *rp = calloc(1, sizeof(*rp));
	if (!rp)
		return -ENOMEM;
	rp->dedup = calloc(DEDUP_SLOTS, sizeof(*rp->dedup));
	if (!rp->dedup) {
		free(rp);
		return -ENOMEM;
	}
	rp->mc = mc;
	rp->svc = svc;
	pthread_mutex_init(&rp->mu, NULL);
	pthread_mutex_init(&rp->dedup_mu, NULL);
	pthread_mutex_init(&rp->unsure_mu, NULL);
	pthread_mutex_init(&rp->stop_mu, NULL);
	pthread_cond_init(&rp->stop_cv, NULL);
	for (int i = 0; i < ORDER_STRIPES; i++) {
		pthread_mutex_init(&rp->order[i].mu, NULL);
		pthread_cond_init(&rp->order[i].cv, NULL);
	}
	*ret = rp;
	return 0;
}

int repl_start(struct repl *rp)
{
	int r = pthread_create(&rp->resync_thr, NULL, resync_main, rp);
	if (r != 0)
		return -r;
	rp->started = true;
	return 0;
}

bool repl_stopping(struct repl *rp)
{
	pthread_mutex_lock(&rp->stop_mu);
	bool s = rp->stop;
	pthread_mutex_unlock(&rp->stop_mu);
	return s;
}

bool repl_wait_stop(struct repl *rp, int ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	ts.tv_nsec += ms % 1000 * 1000000L;
	ts.tv_sec += ms / 1000;
	if (ts.tv_nsec >= 1000000000L)
		ts.tv_sec++, ts.tv_nsec -= 1000000000L;
	pthread_mutex_lock(&rp->stop_mu);
	if (!rp->stop)
		pthread_cond_timedwait(&rp->stop_cv, &rp->stop_mu, &ts);
	bool s = rp->stop;
	pthread_mutex_unlock(&rp->stop_mu);
	return s;
}

void repl_free(struct repl *rp)
{
	if (!rp)
		return;
	if (rp->started) {
		pthread_mutex_lock(&rp->stop_mu);
		rp->stop = true;
		pthread_cond_signal(&rp->stop_cv);
		pthread_mutex_unlock(&rp->stop_mu);
		pthread_join(rp->resync_thr, NULL);
	}
	for (int i = 0; i < rp->nconns; i++)
		rpc_client_free(rp->conns[i].rpc);
	free(rp->conns);
	snap_put(rp->snap);
	for (int i = 0; i < ORDER_STRIPES; i++) {
		pthread_mutex_destroy(&rp->order[i].mu);
		pthread_cond_destroy(&rp->order[i].cv);
		free(rp->order[i].held);
	}
	pthread_mutex_destroy(&rp->mu);
	pthread_mutex_destroy(&rp->dedup_mu);
	pthread_mutex_destroy(&rp->unsure_mu);
	free(rp->unsure);
	pthread_mutex_destroy(&rp->stop_mu);
	pthread_cond_destroy(&rp->stop_cv);
	free(rp->dedup);
	free(rp);
}
