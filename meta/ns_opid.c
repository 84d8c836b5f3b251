/* ns_opid.c — operation ids: a mutation asked for twice is done once.
 *
 * A client gives each mutation an id (struct meta_opid: its connection and
 * the request within it) and sends the same id on every attempt: its own
 * retries after a transport failure and, for strata-fuse, the kernel's
 * resend of the FUSE requests a crashed daemon had read but not answered
 * (fuse/README.md "Replayed requests"). Without ids such a second attempt
 * of a create, mkdir, unlink, rename ... that the first one carried out
 * answers EEXIST or ENOENT.
 *
 * ns_mutate runs every mutation that can carry an id, under ns->mu:
 *   1. an id with a record R(conn,unique) of the same type: the answer is
 *      the record's (attributes, session) and nothing else is done;
 *   2. else the mutation builds its batch; on success the record and its
 *      age entry Q(time,conn,unique) are added to that same batch, so the
 *      record exists exactly when the mutation does (a kill -9 of
 *      strata-meta loses both or neither);
 *   3. a failure writes nothing: it changed nothing, so doing it again is a
 *      valid answer to a request whose first answer nobody saw.
 * Two attempts racing (the dead daemon's still in meta's socket while the
 * successor's arrives) serialize on ns->mu, and the second finds the
 * first's record.
 *
 * Records are kept ns->opid_ttl_ns (NS_OPID_TTL_MS) and at most
 * ns->opid_max (NS_OPID_MAX): ns_opid_expire, on meta's ticker, deletes
 * them oldest first (by Q) in batches of EXPIRE_BATCH, each under the lock
 * for a moment. Their number is kept in memory (counted at open), not in the
 * store (invariant 7 of ns-internal.h). */
#include <errno.h>
#include <string.h>
#include "fs/cleanup.h"
#include "meta/ns-internal.h"

#define EXPIRE_BATCH 1024 /* records removed per locked round */

static int count_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	(*(uint64_t *)ctx)++;
	return 0;
}

/* The count is not a stored counter (a key more in every mutation's batch
 * costs ~10 % of the engine's rate, they are memtable inserts): one scan of
 * the age entries at open, at most NS_OPID_MAX of them. */
int ns_opid_load(struct ns *ns)
{
	uint8_t tag = K_OPAGE;

	ns->opids = 0;
	ns->opid_max = NS_OPID_MAX;
	ns->opid_ttl_ns = NS_OPID_TTL_MS * 1000000;
	return kv_scan(ns->kv, &tag, 1, NULL, 0, count_one, &ns->opids);
}

int ns_set_opid_limits(struct ns *ns, uint32_t max, int64_t ttl_ms)
{
	if (max == 0 || ttl_ms <= 0)
		return -EINVAL;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	ns->opid_max = max;
	ns->opid_ttl_ns = ttl_ms * 1000000;
	return 0;
}

uint64_t ns_opid_count(struct ns *ns)
{
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	return ns->opids;
}

uint64_t ns_opid_answered(struct ns *ns)
{
	return atomic_load(&ns->opid_answered);
}

/* Under mu: 1 and *ret if op was carried out as a mutation of type, 0 if
 * not, or -errno. A record of another type (a client that reused an id) is
 * not an answer: the mutation is done and its record replaces that one,
 * whose time goes to *ret_stale_ns (else -1) so that its age entry goes too. */
static int opid_find(struct ns *ns, const struct meta_opid *op, uint16_t type,
		     struct ns_answer *ret, int64_t *ret_stale_ns)
{
	_cleanup_free_ uint8_t *v = NULL;
	struct opid_rec o;
	struct key k;
	size_t n;
	int r;

	*ret_stale_ns = -1;
	key_opid(&k, op);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r == -ENOENT)
		return 0;
	if (r < 0)
		return r;
	if (opid_decode(v, n, &o) < 0)
		return 0; /* unreadable: done again, and the record rewritten */
	if (o.type != type) {
		*ret_stale_ns = o.done_ns;
		return 0;
	}
	*ret = o.a;
	ns->opid_answered++;
	return 1;
}

/* Adds op's record of a (and its age entry, and the count) to b; a record
 * of the same id done at stale_ns (>= 0) is replaced. */
static int opid_add(struct ns *ns, struct kv_batch *b, const struct meta_opid *op, uint16_t type,
		    const struct ns_answer *a, int64_t stale_ns)
{
	/* never older than the last: the expiry's cursor stays behind every
	 * record even if the clock steps back */
	int64_t now = ns_now();
	struct opid_rec o = {.type = type, .done_ns = STRATA_MAX(now, ns->opid_last_ns), .a = *a};
	struct wbuf w;
	struct key k;
	int r;

	wbuf_init(&w);
	opid_encode(&o, &w);
	r = w.err;
	if (r == 0) {
		key_opid(&k, op);
		kv_batch_put(b, k.b, k.len, w.data, w.len);
		key_opage(&k, o.done_ns, op);
		kv_batch_put(b, k.b, k.len, "", 0);
		if (stale_ns >= 0) {
			key_opage(&k, stale_ns, op);
			kv_batch_del(b, k.b, k.len);
		} else {
			ns->opids++;
		}
		ns->opid_last_ns = o.done_ns;
	}
	wbuf_done(&w);
	return r;
}

int ns_mutate(struct ns *ns, const struct meta_opid *op, uint16_t type, ns_build_fn build,
	      void *arg, struct ns_answer *ret)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct ns_answer a = {0};
	bool with_id = op && op->conn;
	int64_t stale_ns = -1;
	uint64_t opids;
	int r;

	if (!b)
		return -ENOMEM;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	opids = ns->opids;
	r = with_id ? opid_find(ns, op, type, &a, &stale_ns) : 0;
	if (r == 0) {
		r = build(ns, b, arg, &a);
		if (r == 0 && with_id)
			r = opid_add(ns, b, op, type, &a, stale_ns);
		if (r == 0 && kv_batch_count(b) > 0 && (r = ns_commit(ns, b)) < 0)
			ns->opids = opids; /* the record was not written */
	}
	if (r < 0)
		return r;
	if (ret)
		*ret = a;
	return 0;
}

/* ---- expiry ----------------------------------------------------------------- */

struct expire_ctx {
	struct ns *ns;
	struct kv_batch *b;
	int64_t before_ns; /* records done earlier have expired */
	uint64_t over;	   /* records beyond the limit: these go whatever their age */
	int n;
	struct key last; /* the last age key deleted */
};

static int expire_one(void *arg, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct expire_ctx *c = arg;
	struct meta_opid op;
	struct key rk;

	if (kl != 25)
		return 0; /* not ours to judge: fsck's */
	if ((int64_t)key_get_u64(k + 1) >= c->before_ns && c->over == 0)
		return 1; /* the oldest left is young, and there is room */
	op.conn = key_get_u64(k + 9);
	op.unique = key_get_u64(k + 17);
	kv_batch_del(c->b, k, kl);
	key_opid(&rk, &op);
	kv_batch_del(c->b, rk.b, rk.len);
	memcpy(c->last.b, k, kl);
	c->last.len = kl;
	if (c->over)
		c->over--;
	return ++c->n == EXPIRE_BATCH ? 1 : 0;
}

/* One locked round: up to EXPIRE_BATCH of the oldest records that expired
 * or exceed the limit. Returns how many went, or -errno. */
static int expire_round(struct ns *ns)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	uint8_t tag = K_OPAGE;
	int r;

	if (!b)
		return -ENOMEM;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct expire_ctx c = {.ns = ns,
			       .b = b,
			       .before_ns = ns_now() - ns->opid_ttl_ns,
			       .over = ns->opids > ns->opid_max ? ns->opids - ns->opid_max : 0};
	struct key *cur = &ns->opid_cursor;
	r = kv_scan(ns->kv, &tag, 1, cur->len ? cur->b : NULL, cur->len, expire_one, &c);
	if (r < 0 || c.n == 0)
		return r;
	if ((r = ns_commit(ns, b)) < 0)
		return r;
	ns->opids = ns->opids > (uint64_t)c.n ? ns->opids - (uint64_t)c.n : 0;
	*cur = c.last;
	return c.n;
}

int ns_opid_expire(struct ns *ns)
{
	int total = 0, r;

	do {
		r = expire_round(ns);
		if (r < 0)
			return r;
		total += r;
	} while (r == EXPIRE_BATCH);
	return total;
}
