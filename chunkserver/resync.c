/* resync.c — fills a syncing target from its predecessor, the chain's tail
 * (the last serving target), which pushes; strata-meta then makes it serving.
 *
 * A pass (repl_resync_pass, every 200 ms on the engine's thread) looks at
 * each local target that is the tail of its chain; if the next target is
 * syncing it runs sync_chain:
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
 * Limits: a chunk larger than CHUNK_IO_MAX (4 MiB; chunk sizes above 4 MiB)
 * cannot be put in one message: the sync stops with -EFBIG and a log line. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_store.h"
#include "cleanup.h"
#include "layout.h"
#include "log.h"
#include "proto.h"
#include "replica.h"
#include "service.h"

#define SYNC_REPORT_EVERY 64

struct sync_job {
	struct repl *rp;
	struct chunk_store *cs;
	uint32_t self;                /* our target (the tail) */
	uint32_t peer;                /* the syncing target */
	char peer_addr[64];
	struct strata_chain chain;    /* as of the start */
	struct chunk_list_ent *remote; /* heap, sorted */
	size_t nremote;
	uint64_t done, total, copied, removed;
};

static struct chunk_route peer_route(const struct sync_job *j)
{
	return (struct chunk_route){ j->peer, j->chain.chain_id, j->chain.version };
}

/* Step 1: the successor's chunks, every page. */
static int list_remote(struct sync_job *j)
{
	size_t cap = 0;
	struct chunk_req q = { .route = peer_route(j), .len = CHUNK_LIST_MAX,
			       .flags = CHUNK_LF_FIRST | CHUNK_LF_VERIFY };
	for (bool more = true; more;) {
		if (j->nremote + CHUNK_LIST_MAX > cap) {
			cap = cap ? cap * 2 : CHUNK_LIST_MAX;
			void *n = realloc(j->remote, cap * sizeof(*j->remote));
			if (!n)
				return -ENOMEM;
			j->remote = n;
		}
		struct rpc_reply rep = { 0 };
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
	struct chunk_req q = { .route = peer_route(j), .ino = ino, .index = index, .len = len,
			       .data = data, .version = version, .flags = flags,
			       .chunk_size = STRATA_MAX(STRATA_MIN_CHUNK_SIZE,
							len <= STRATA_MIN_CHUNK_SIZE
								? STRATA_MIN_CHUNK_SIZE
								: 1u << (32 - __builtin_clz(len - 1))) };
	struct rpc_reply rep = { 0 };
	int r = repl_call(j->rp, j->peer_addr, MSG_CHUNK_PUT, &q, &rep);
	rpc_reply_done(&rep);
	return r;
}

/* Step 2 for one chunk, under its ordering lock. */
static int sync_chunk_locked(struct sync_job *j, uint64_t ino, uint32_t index,
			     const struct chunk_stat *theirs)
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
	if (m.length > CHUNK_IO_MAX)
		return -EFBIG;
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
	repl_order_lock(j->rp, j->self, ino, index);
	int r = sync_chunk_locked(j, ino, index, theirs);
	repl_order_unlock(j->rp, j->self, ino, index);
	return r;
}

static void report(struct sync_job *j, bool finished, int *ret)
{
	struct mgmt_sync s = { j->chain.chain_id, j->chain.version, j->peer, j->done, j->total,
			       finished };
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
			r = sync_chunk(j, j->remote[b].ino, j->remote[b].index, &j->remote[b].st), b++;
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
static void maybe_sync(struct repl *rp, const struct strata_routing *rt,
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
	struct sync_job j = { .rp = rp, .cs = cs, .self = self, .peer = t->target_id,
			      .chain = *c };
	snprintf(j.peer_addr, sizeof(j.peer_addr), "%s", t->addr);
	log_info("resync: chain %u (v%u): target %u -> target %u at %s", c->chain_id, c->version,
		 self, j.peer, j.peer_addr);
	int r = sync_chain(&j);
	if (r < 0)
		log_warn_errno(r, "resync: chain %u target %u -> %u stopped after %llu of %llu chunks",
			       c->chain_id, self, j.peer, (unsigned long long)j.done,
			       (unsigned long long)j.total);
	else
		log_info("resync: chain %u target %u done: %llu chunks compared, %llu copied, "
			 "%llu removed",
			 c->chain_id, j.peer, (unsigned long long)j.done,
			 (unsigned long long)j.copied, (unsigned long long)j.removed);
	free(j.remote);
}

void repl_resync_pass(struct repl *rp)
{
	struct strata_routing rt;
	if (repl_routing_copy(rp, &rt) < 0)
		return;
	struct cs_service *svc = repl_service(rp);
	int nt = __atomic_load_n(&svc->ntargets, __ATOMIC_ACQUIRE);
	for (int i = 0; i < nt && !repl_stopping(rp); i++)
		for (uint32_t k = 0; k < rt.nchains; k++)
			maybe_sync(rp, &rt, &rt.chains[k], svc->targets[i].target_id,
				   svc->targets[i].store);
	strata_routing_done(&rt);
}
