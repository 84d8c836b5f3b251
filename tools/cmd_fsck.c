/* cmd_fsck.c — `strata fsck [--repair] [--deep] [--json]`: the online check
 * of a running cluster (it keeps serving while this runs).
 *
 *   1. namespace  strata-meta checks its store on a snapshot (meta/fsck.c,
 *                 MSG_META_FSCK); with --repair it re-checks under its
 *                 mutation lock and repairs (each repair logged in meta.log)
 *   2. replicas   every serving target of every chain lists its chunks
 *                 (MSG_CHUNK_LIST; --deep: every block read and checked, a
 *                 damaged chunk lists as version 0) and the lists of a chain
 *                 are compared: version, length, checksum. A difference is
 *                 re-checked with MSG_CHUNK_STAT (and a damaged chunk
 *                 re-listed) a few times before it is reported, so a write
 *                 in flight is not one. Repair: the chunkserver takes a
 *                 replica's chunks only through a resync (PUT is accepted
 *                 by syncing targets only), so --repair has strata-meta
 *                 take the bad target out of service (MSG_META_FSCK_RESYNC)
 *                 and the chain's good replicas resync it; with no good
 *                 replica it is reported only
 *   3. orphans    the chunks listed in 2, grouped by inode and chain table,
 *                 are judged by strata-meta (MSG_META_FSCK_CHUNKS): a live
 *                 regular file's chunks within its size (rounded up to the
 *                 chunk), an open file's (writes in flight) and a
 *                 GC-queued inode's are fine; others are orphans. Each
 *                 orphan is re-checked (still there, verdict again) before
 *                 it is reported; --repair has strata-meta remove it under
 *                 its mutation lock with the GC's MSG_CHUNK_REMOVE_FILE.
 *
 * Exit status: 0 clean, 1 findings (repaired or not), 2 error. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/chunk_proto.h"
#include "tools/chunks.h"
#include "fs/cleanup.h"
#include "fs/json.h"
#include "tools/cli.h"
#include "fs/layout.h"
#include "fs/meta_client.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"
#include "fs/rpc.h"

#define VERB "fsck"
#define RECHECKS 3 /* a replica difference must persist this many looks */
#define RECHECK_DELAY_MS 300

/* Findings of the chunk passes (namespace ones come from strata-meta). */
enum chunk_kind {
	CK_ORPHAN,	 /* orphan chunks of an inode */
	CK_REPLICA_DIFF, /* serving replicas of a chain differ */
	CK_CORRUPT,	 /* --deep: a chunk that fails its checksums */
	CK_CHAIN_DOWN,	 /* a chain with no serving target: not checked */
	CK_MAX
};
static const char *const ck_name[CK_MAX] = {"orphan-chunk", "replica-differs", "corrupt-chunk",
					    "chain-unavailable"};

struct finding {
	int kind;
	uint32_t chain, target, index, count;
	uint64_t ino;
	uint8_t verdict; /* orphans */
	bool fixable;	 /* replicas: another serving replica is good */
	bool repaired;
	int err;
	char action[160];
	char done[96]; /* what the repair did */
};

struct fsck {
	struct meta_client *mc;
	struct strata_routing rt;
	bool repair, json, deep;
	/* chunks */
	uint32_t chains, targets;
	uint64_t chunks, inodes_asked;
	struct finding *f;
	size_t nf, capf;
	uint32_t found[CK_MAX], repaired[CK_MAX];
	/* orphan candidates: one entry per listed chunk */
	struct cand {
		uint64_t ino;
		uint32_t index, table, chain, target;
	} * c;
	size_t nc, capc;
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata fsck [--home DIR | --meta HOST:PORT] [--key FILE] [--repair] "
		   "[--deep] [--json]\n"
		   "\n"
		   "Checks a running cluster while it keeps serving:\n"
		   "  the namespace in strata-meta (dentries, inodes, nlink, orphans, sessions,\n"
		   "  counters), the chunks on every serving target (each must belong to a live\n"
		   "  regular file and lie within its size) and the replicas of every chain\n"
		   "  (equal versions and checksums; --deep reads and checks every block).\n"
		   "\n"
		   "  --repair   fix what can be fixed without losing data: nlink and counters,\n"
		   "             dangling dentries removed, unreachable inodes linked into\n"
		   "             /lost+found as #<ino>, orphan chunks removed; a damaged or\n"
		   "             stale replica is resynced from a good one (its target is out\n"
		   "             of service meanwhile), or reported when there is none.\n"
		   "  --deep     read every block of every chunk (finds damaged chunks)\n"
		   "  --json     one JSON object on stdout\n"
		   "\n"
		   "Exit status: 0 clean, 1 findings (also when all were repaired), 2 error.\n"
		   "The cluster is found through --meta, $STRATA_META, or the home.\n");
}

/* ---- chunkserver calls ------------------------------------------------------------ */

/* One chunk's entry as listed now (deep: its blocks read). 1 found, 0 gone. */
static int relist_one(const struct strata_target *t, const struct strata_chain *ch, uint64_t ino,
		      uint32_t index, bool deep, struct chunk_list_ent *ret)
{
	bool more;
	uint64_t cino = index ? ino : ino - 1;
	uint32_t cidx = index ? index - 1 : UINT32_MAX;
	int r = cli_chunk_list_page(t, ch, false, cino, cidx, 1, deep, ret, &more);

	if (r < 0)
		return r;
	return r == 1 && ret->ino == ino && ret->index == index;
}

/* ---- findings ------------------------------------------------------------------------ */

static struct finding *add_finding(struct fsck *k, int kind)
{
	if (k->nf == k->capf) {
		size_t nc = k->capf ? k->capf * 2 : 64;
		struct finding *nv = realloc(k->f, nc * sizeof(*nv));
		if (!nv)
			return NULL;
		k->f = nv;
		k->capf = nc;
	}
	struct finding *f = &k->f[k->nf++];
	*f = (struct finding){.kind = kind};
	k->found[kind]++;
	return f;
}

/* A finding about one chunk on one target of chain ch. NULL: no memory. */
static struct finding *add_replica_finding(struct fsck *k, int kind, const struct strata_chain *ch,
					   uint32_t target, uint64_t ino, uint32_t index)
{
	struct finding *f = add_finding(k, kind);
	if (f)
		*f = (struct finding){.kind = kind,
				      .chain = ch->chain_id,
				      .target = target,
				      .ino = ino,
				      .index = index};
	return f;
}

static int add_cand(struct fsck *k, uint64_t ino, uint32_t index, uint32_t table, uint32_t chain,
		    uint32_t target)
{
	if (k->nc == k->capc) {
		size_t nc = k->capc ? k->capc * 2 : 4096;
		struct cand *nv = realloc(k->c, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		k->c = nv;
		k->capc = nc;
	}
	k->c[k->nc++] = (struct cand){ino, index, table, chain, target};
	return 0;
}

/* The first chain table holding chain_id (0: none). */
static uint32_t table_of(const struct strata_routing *rt, uint32_t chain_id)
{
	for (uint32_t i = 0; i < rt->ntables; i++)
		for (uint32_t j = 0; j < rt->tables[i].nchains; j++)
			if (rt->tables[i].chain_ids[j] == chain_id)
				return rt->tables[i].table_id;
	return 0;
}

static bool same_st(const struct chunk_stat *a, const struct chunk_stat *b)
{
	return a->version == b->version && a->length == b->length && a->checksum == b->checksum;
}

static int cmp_key(uint64_t ai, uint32_t ax, uint64_t bi, uint32_t bx)
{
	if (ai != bi)
		return ai < bi ? -1 : 1;
	return ax < bx ? -1 : ax > bx;
}

/* A replica difference seen in the lists: does it persist? Compares STATs
 * of every serving replica RECHECKS times. Returns 1 (differs), 0, -errno. */
static int recheck_diff(const struct strata_target *const *tg, int nt,
			const struct strata_chain *ch, uint64_t ino, uint32_t index,
			struct chunk_stat *st)
{
	for (int look = 0; look < RECHECKS; look++) {
		bool differ = false;
		for (int a = 0; a < nt; a++) {
			int r = cli_chunk_stat(tg[a], ch, ino, index, &st[a]);
			if (r < 0)
				return r;
			differ |= !same_st(&st[a], &st[0]);
		}
		if (!differ)
			return 0;
		cli_sleep_ms(RECHECK_DELAY_MS);
	}
	return 1;
}

/* --deep: a chunk listed as damaged on tg[a]; still damaged when re-read? */
static int recheck_corrupt(const struct strata_target *t, const struct strata_chain *ch,
			   uint64_t ino, uint32_t index)
{
	for (int look = 0; look < RECHECKS; look++) {
		struct chunk_list_ent e;
		int r = relist_one(t, ch, ino, index, true, &e);
		if (r <= 0)
			return r; /* gone (removed or replaced meanwhile), or an error */
		if (e.st.version != 0)
			return 0;
		cli_sleep_ms(RECHECK_DELAY_MS);
	}
	return 1;
}

static void resync_advice(const struct strata_routing *rt, struct finding *f, uint32_t bad,
			  int good)
{
	const struct strata_target *t = routing_target(rt, bad);

	if (good < 0)
		snprintf(f->action, sizeof(f->action),
			 "no good replica on a serving target: data of this chunk is lost");
	else
		snprintf(f->action, sizeof(f->action),
			 "needs resync from target %d: strata fsck --repair (or a restart of the "
			 "chunkserver of node %u)",
			 good, t ? t->node_id : 0);
	f->fixable = good >= 0;
}

/* --repair of damaged or stale replicas: strata-meta takes each such target
 * out of service to be resynced from its chain's other serving replicas
 * (the path a restarted node takes), once per target. */
static void repair_replicas(struct fsck *k)
{
	for (size_t i = 0; i < k->nf; i++) {
		struct finding *f = &k->f[i];
		if ((f->kind != CK_CORRUPT && f->kind != CK_REPLICA_DIFF) || !f->fixable)
			continue;
		/* the resync copies everything from the chain's other replicas:
		 * not while one of them is damaged too */
		bool other_bad = false;
		for (size_t j = 0; j < k->nf; j++)
			other_bad |= k->f[j].kind == CK_CORRUPT && k->f[j].chain == f->chain &&
				     k->f[j].target != f->target;
		if (other_bad) {
			snprintf(f->action, sizeof(f->action),
				 "not resynced: another replica of chain %u is damaged too",
				 f->chain);
			continue;
		}
		bool done = false;
		for (size_t j = 0; j < i && !done; j++)
			done = k->f[j].fixable && k->f[j].target == f->target &&
			       (k->f[j].kind == CK_CORRUPT || k->f[j].kind == CK_REPLICA_DIFF);
		if (done) { /* the same target's resync, asked for already */
			for (size_t j = 0; j < i; j++)
				if (k->f[j].fixable && k->f[j].target == f->target)
					f->repaired = k->f[j].repaired, f->err = k->f[j].err;
		} else {
			f->err = meta_fsck_resync(k->mc, f->target);
			f->repaired = f->err == 0;
		}
		if (f->repaired) {
			k->repaired[f->kind]++;
			snprintf(f->done, sizeof(f->done),
				 "target %u taken out of service and resynced from its chain",
				 f->target);
		}
	}
}

/* Compares the lists of a chain's serving targets; collects candidates. */
static int check_chain(struct fsck *k, const struct strata_chain *ch)
{
	const struct strata_routing *rt = &k->rt;
	const struct strata_target *tg[STRATA_MAX_REPLICAS];
	struct chunk_list_ent *l[STRATA_MAX_REPLICAS] = {0};
	size_t n[STRATA_MAX_REPLICAS] = {0}, pos[STRATA_MAX_REPLICAS] = {0};
	int nt = 0, r = 0;
	uint32_t table = table_of(rt, ch->chain_id);

	for (int j = 0; j < ch->ntargets && j < STRATA_MAX_REPLICAS; j++)
		if (routing_state(rt, ch->targets[j]) == TARGET_SERVING &&
		    routing_target(rt, ch->targets[j]))
			tg[nt++] = routing_target(rt, ch->targets[j]);
	k->chains++;
	k->targets += (uint32_t)nt;
	if (nt == 0) {
		struct finding *f = add_finding(k, CK_CHAIN_DOWN);
		if (!f)
			return -ENOMEM;
		f->chain = ch->chain_id;
		snprintf(f->action, sizeof(f->action),
			 "no serving target: its chunks were not checked");
		return 0;
	}
	for (int a = 0; a < nt && r == 0; a++)
		r = cli_chunk_list_all(tg[a], ch, k->deep, &l[a], &n[a]);
	for (;;) {
		if (r < 0)
			break;
		/* the smallest key at the heads of the lists */
		int m = -1;
		for (int a = 0; a < nt; a++)
			if (pos[a] < n[a] &&
			    (m < 0 || cmp_key(l[a][pos[a]].ino, l[a][pos[a]].index,
					      l[m][pos[m]].ino, l[m][pos[m]].index) < 0))
				m = a;
		if (m < 0)
			break;
		uint64_t ino = l[m][pos[m]].ino;
		uint32_t index = l[m][pos[m]].index;
		const struct chunk_list_ent *e[STRATA_MAX_REPLICAS] = {0};
		bool differ = false;
		for (int a = 0; a < nt; a++)
			if (pos[a] < n[a] && l[a][pos[a]].ino == ino && l[a][pos[a]].index == index)
				e[a] = &l[a][pos[a]++];
		for (int a = 0; a < nt; a++)
			differ |= !e[a] || !same_st(&e[a]->st, &e[m]->st);
		k->chunks++;
		if ((r = add_cand(k, ino, index, table, ch->chain_id, tg[m]->target_id)) < 0)
			break;
		/* --deep: damaged copies (version 0) */
		int good = -1;
		for (int a = 0; a < nt; a++)
			if (e[a] && e[a]->st.version != 0)
				good = (int)tg[a]->target_id;
		for (int a = 0; k->deep && a < nt; a++) {
			if (!e[a] || e[a]->st.version != 0)
				continue;
			if ((r = recheck_corrupt(tg[a], ch, ino, index)) <= 0)
				continue;
			struct finding *f =
			    add_replica_finding(k, CK_CORRUPT, ch, tg[a]->target_id, ino, index);
			if (!f)
				return -ENOMEM;
			resync_advice(rt, f, tg[a]->target_id, good);
			differ = false; /* reported as damaged */
			r = 0;
		}
		if (!differ || nt < 2)
			continue;
		struct chunk_stat st[STRATA_MAX_REPLICAS];
		if ((r = recheck_diff(tg, nt, ch, ino, index, st)) <= 0)
			continue;
		r = 0;
		/* the newest version is taken as the good one */
		int best = 0;
		for (int a = 1; a < nt; a++)
			if (st[a].version > st[best].version)
				best = a;
		for (int a = 0; a < nt; a++) {
			if (same_st(&st[a], &st[best]))
				continue;
			struct finding *f = add_replica_finding(k, CK_REPLICA_DIFF, ch,
								tg[a]->target_id, ino, index);
			if (!f)
				return -ENOMEM;
			resync_advice(rt, f, tg[a]->target_id, (int)tg[best]->target_id);
		}
	}
	for (int a = 0; a < nt; a++)
		free(l[a]);
	return r;
}

/* ---- orphans ----------------------------------------------------------------------------- */

static int cmp_cand(const void *a, const void *b)
{
	const struct cand *x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	if (x->table != y->table)
		return x->table < y->table ? -1 : 1;
	return x->index < y->index ? -1 : x->index > y->index;
}

/* Verdicts for items[0..n) in pages of META_FSCK_CHUNKS_MAX. */
static int ask_meta(struct fsck *k, uint32_t flags, struct meta_fsck_chunk *items, size_t n)
{
	for (size_t i = 0; i < n; i += META_FSCK_CHUNKS_MAX) {
		uint32_t m = (uint32_t)STRATA_MIN((size_t)META_FSCK_CHUNKS_MAX, n - i);
		int r = meta_fsck_chunks(k->mc, flags, items + i, m);
		if (r < 0)
			return r;
	}
	return 0;
}

static bool is_orphan(uint8_t v)
{
	return v >= FSCK_CHUNK_NO_INODE;
}

static const char *verdict_name(uint8_t v)
{
	switch (v) {
	case FSCK_CHUNK_NO_INODE:
		return "no inode";
	case FSCK_CHUNK_NOT_FILE:
		return "inode is not a regular file";
	case FSCK_CHUNK_BEYOND_EOF:
		return "past the end of the file";
	}
	return "ok";
}

/* Does any orphan chunk of item c still exist on the target it was listed on? */
static int still_there(struct fsck *k, const struct meta_fsck_chunk *c, const struct cand *from,
		       size_t nfrom)
{
	for (size_t i = 0; i < nfrom; i++) {
		if (from[i].index < c->first_orphan)
			continue;
		const struct strata_chain *ch = routing_chain(&k->rt, from[i].chain);
		const struct strata_target *t = routing_target(&k->rt, from[i].target);
		struct chunk_stat st;
		if (!ch || !t)
			continue;
		int r = cli_chunk_stat(t, ch, from[i].ino, from[i].index, &st);
		if (r < 0)
			return r;
		if (st.version || st.length)
			return 1;
	}
	return 0;
}

static int check_orphans(struct fsck *k)
{
	if (k->nc > 1)
		qsort(k->c, k->nc, sizeof(*k->c), cmp_cand);
	/* one item per (ino, table), with its highest listed index */
	size_t ng = 0;
	_cleanup_free_ struct meta_fsck_chunk *items = calloc(k->nc + 1, sizeof(*items));
	_cleanup_free_ size_t *first = calloc(k->nc + 2, sizeof(*first));
	if (!items || !first)
		return -ENOMEM;
	for (size_t i = 0; i < k->nc; i++) {
		if (i == 0 || k->c[i].ino != k->c[i - 1].ino ||
		    k->c[i].table != k->c[i - 1].table) {
			first[ng] = i;
			items[ng++] =
			    (struct meta_fsck_chunk){.ino = k->c[i].ino, .table_id = k->c[i].table};
		}
		items[ng - 1].index = k->c[i].index;
	}
	first[ng] = k->nc;
	k->inodes_asked = ng;
	int r = ask_meta(k, 0, items, ng);
	if (r < 0)
		return r;
	/* re-check each orphan: still there, and still an orphan now */
	size_t nq = 0;
	_cleanup_free_ struct meta_fsck_chunk *q = calloc(ng + 1, sizeof(*q));
	_cleanup_free_ size_t *qg = calloc(ng + 1, sizeof(*qg));
	if (!q || !qg)
		return -ENOMEM;
	for (size_t g = 0; g < ng; g++) {
		if (!is_orphan(items[g].verdict))
			continue;
		r = still_there(k, &items[g], &k->c[first[g]], first[g + 1] - first[g]);
		if (r < 0)
			return r;
		if (r == 0)
			continue; /* removed meanwhile (the GC) */
		qg[nq] = g;
		q[nq++] = (struct meta_fsck_chunk){
		    .ino = items[g].ino, .index = items[g].index, .table_id = items[g].table_id};
	}
	if ((r = ask_meta(k, 0, q, nq)) < 0)
		return r;
	/* repair: strata-meta judges once more and removes under its lock */
	size_t nrep = 0;
	_cleanup_free_ struct meta_fsck_chunk *rq = calloc(nq + 1, sizeof(*rq));
	if (!rq)
		return -ENOMEM;
	for (size_t i = 0; i < nq; i++)
		if (is_orphan(q[i].verdict))
			rq[nrep++] = q[i];
	if (k->repair && (r = ask_meta(k, META_FSCK_REPAIR, rq, nrep)) < 0)
		return r;
	for (size_t i = 0, j = 0; i < nq; i++) {
		if (!is_orphan(q[i].verdict))
			continue;
		const struct meta_fsck_chunk *c = k->repair ? &rq[j++] : &q[i];
		if (!is_orphan(c->verdict))
			continue; /* judged again under the lock: not an orphan now */
		size_t g = qg[i], at = first[g];
		uint32_t cnt = 0;
		for (size_t x = first[g + 1]; x-- > first[g];)
			if (k->c[x].index >= q[i].first_orphan) {
				cnt++;
				at = x; /* the first orphan listed */
			}
		struct finding *f = add_finding(k, CK_ORPHAN);
		if (!f)
			return -ENOMEM;
		*f = (struct finding){.kind = CK_ORPHAN,
				      .ino = q[i].ino,
				      .index = q[i].first_orphan,
				      .count = cnt,
				      .chain = k->c[at].chain,
				      .target = k->c[at].target,
				      .verdict = q[i].verdict};
		snprintf(f->action, sizeof(f->action), "%s (table %u)", verdict_name(q[i].verdict),
			 q[i].table_id);
		if (k->repair && is_orphan(c->verdict)) {
			f->repaired = c->removed;
			f->err = c->err;
			k->repaired[CK_ORPHAN] += c->removed;
		}
	}
	return 0;
}

/* ---- output ----------------------------------------------------------------------------- */

static void ns_record_json(struct jw *w, const struct meta_fsck_record *c)
{
	jw_obj(w);
	jw_kstr(w, "kind", meta_fsck_kind_name(c->kind));
	cli_jw_ku64(w, "ino", c->ino);
	cli_jw_ku64(w, "parent", c->parent);
	jw_kstr(w, "name", c->name);
	cli_jw_ku64(w, "expected", c->expected);
	cli_jw_ku64(w, "actual", c->actual);
	jw_obj_end(w);
}

static void print_ns_record(const struct meta_fsck_record *c)
{
	printf("%s %s: ino %llu", c->repaired ? "REPAIRED" : "FOUND", meta_fsck_kind_name(c->kind),
	       (unsigned long long)c->ino);
	if (c->parent || c->name[0])
		printf(" parent %llu name '%s'", (unsigned long long)c->parent, c->name);
	if (c->expected || c->actual)
		printf(" expected %llu was %llu", (unsigned long long)c->expected,
		       (unsigned long long)c->actual);
	putchar('\n');
}

static void chunk_finding_json(struct jw *w, const struct finding *f, bool repaired_list)
{
	jw_obj(w);
	jw_kstr(w, "kind", ck_name[f->kind]);
	jw_kint(w, "chain", f->chain);
	jw_kint(w, "target", f->target);
	cli_jw_ku64(w, "ino", f->ino);
	jw_kint(w, "index", f->index);
	jw_kint(w, "chunks", f->count);
	jw_kstr(w, "action", f->action);
	if (repaired_list && f->done[0])
		jw_kstr(w, "repair", f->done);
	if (f->err)
		jw_kstr(w, "error", rpc_strerror(f->err));
	jw_obj_end(w);
}

static void print_chunk_finding(const struct finding *f, bool repaired_list)
{
	const char *tag = repaired_list ? "REPAIRED" : "FOUND";
	switch (f->kind) {
	case CK_ORPHAN:
		printf("%s %s: ino %llu, %u chunk(s) from index %u (chain %u target %u): %s%s%s\n",
		       tag, ck_name[f->kind], (unsigned long long)f->ino, f->count, f->index,
		       f->chain, f->target, f->action, f->err ? "; removal failed: " : "",
		       f->err ? rpc_strerror(f->err) : "");
		break;
	case CK_CHAIN_DOWN:
		printf("%s %s: chain %u: %s\n", tag, ck_name[f->kind], f->chain, f->action);
		break;
	default:
		printf("%s %s: chain %u target %u ino %llu index %u: %s%s%s\n", tag,
		       ck_name[f->kind], f->chain, f->target, (unsigned long long)f->ino, f->index,
		       repaired_list && f->done[0] ? f->done : f->action,
		       f->err ? "; resync refused: " : "", f->err ? rpc_strerror(f->err) : "");
	}
}

/* The findings (repaired: false) or the repairs (true), namespace first. */
static void records_json(struct jw *w, const struct fsck *k, const struct meta_fsck_report *ns,
			 bool repaired)
{
	jw_arr(w);
	for (uint32_t i = 0; i < ns->n; i++)
		if (!!ns->rec[i].repaired == repaired)
			ns_record_json(w, &ns->rec[i]);
	for (size_t i = 0; i < k->nf; i++)
		if (!repaired || k->f[i].repaired)
			chunk_finding_json(w, &k->f[i], repaired);
	jw_arr_end(w);
}

/* "KIND":{"found":N,"repaired":M} */
static void count_json(struct jw *w, const char *kind, uint32_t found, uint32_t repaired)
{
	jw_key(w, kind);
	jw_obj(w);
	jw_kint(w, "found", found);
	jw_kint(w, "repaired", repaired);
	jw_obj_end(w);
}

/* The kinds seen, namespace first (a namespace kind also when only repaired). */
static void counts_json(struct jw *w, const struct fsck *k, const struct meta_fsck_report *ns)
{
	jw_obj(w);
	for (int i = 1; i < FSCK_KIND_MAX; i++)
		if (ns->found[i] || ns->repaired[i])
			count_json(w, meta_fsck_kind_name((uint16_t)i), ns->found[i],
				   ns->repaired[i]);
	for (int i = 0; i < CK_MAX; i++)
		if (k->found[i])
			count_json(w, ck_name[i], k->found[i], k->repaired[i]);
	jw_obj_end(w);
}

static void report_json(const struct fsck *k, const struct meta_fsck_report *ns, uint32_t total,
			uint32_t fixed)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "namespace");
	jw_obj(&w);
	cli_jw_ku64(&w, "inodes", ns->inodes);
	cli_jw_ku64(&w, "dirs", ns->dirs);
	cli_jw_ku64(&w, "files", ns->files);
	cli_jw_ku64(&w, "dentries", ns->dentries);
	cli_jw_ku64(&w, "sessions", ns->sessions);
	cli_jw_ku64(&w, "open_orphans", ns->orphans);
	cli_jw_ku64(&w, "gc_queued", ns->gc_queued);
	jw_obj_end(&w);
	jw_key(&w, "chunks");
	jw_obj(&w);
	jw_kint(&w, "chains", k->chains);
	jw_kint(&w, "serving_targets", k->targets);
	cli_jw_ku64(&w, "chunks", k->chunks);
	cli_jw_ku64(&w, "inodes", k->inodes_asked);
	jw_kbool(&w, "deep", k->deep);
	jw_obj_end(&w);
	jw_key(&w, "counts");
	counts_json(&w, k, ns);
	jw_key(&w, "findings");
	records_json(&w, k, ns, false);
	jw_key(&w, "repairs");
	records_json(&w, k, ns, true);
	jw_kbool(&w, "truncated", ns->truncated);
	jw_kint(&w, "findings_total", total);
	jw_kint(&w, "repaired_total", fixed);
	jw_kbool(&w, "clean", !total);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static int report(const struct fsck *k, const struct meta_fsck_report *ns)
{
	uint32_t total = 0, fixed = 0;

	for (int i = 1; i < FSCK_KIND_MAX; i++)
		total += ns->found[i], fixed += ns->repaired[i];
	for (int i = 0; i < CK_MAX; i++)
		total += k->found[i], fixed += k->repaired[i];
	if (k->json) {
		report_json(k, ns, total, fixed);
		return total ? 1 : 0;
	}
	printf("namespace: %llu inodes (%llu directories, %llu regular files), %llu dentries, "
	       "%llu sessions, %llu open orphans, %llu queued for GC\n",
	       (unsigned long long)ns->inodes, (unsigned long long)ns->dirs,
	       (unsigned long long)ns->files, (unsigned long long)ns->dentries,
	       (unsigned long long)ns->sessions, (unsigned long long)ns->orphans,
	       (unsigned long long)ns->gc_queued);
	printf("chunks: %u chains, %u serving targets, %llu chunks of %llu inodes%s\n", k->chains,
	       k->targets, (unsigned long long)k->chunks, (unsigned long long)k->inodes_asked,
	       k->deep ? " (deep: every block read)" : "");
	for (uint32_t i = 0; i < ns->n; i++)
		if (!ns->rec[i].repaired)
			print_ns_record(&ns->rec[i]);
	for (size_t i = 0; i < k->nf; i++)
		print_chunk_finding(&k->f[i], false);
	for (uint32_t i = 0; i < ns->n; i++)
		if (ns->rec[i].repaired)
			print_ns_record(&ns->rec[i]);
	for (size_t i = 0; i < k->nf; i++)
		if (k->f[i].repaired)
			print_chunk_finding(&k->f[i], true);
	if (ns->truncated)
		printf("(more records than strata-meta returns: the counts below are complete)\n");
	if (!total) {
		printf("clean: no findings\n");
		return 0;
	}
	printf("%u finding(s):", total);
	const char *sep = " ";
	for (int i = 1; i < FSCK_KIND_MAX; i++)
		if (ns->found[i]) {
			printf("%s%s %u", sep, meta_fsck_kind_name((uint16_t)i), ns->found[i]);
			sep = ", ";
		}
	for (int i = 0; i < CK_MAX; i++)
		if (k->found[i]) {
			printf("%s%s %u", sep, ck_name[i], k->found[i]);
			sep = ", ";
		}
	printf("; %u repair(s)%s\n", fixed, k->repair ? "" : " (run with --repair to fix)");
	return 1;
}

/* ---- entry -------------------------------------------------------------------------------- */

static int run(struct fsck *k)
{
	struct meta_fsck_report ns = {0};
	int r = meta_fsck(k->mc, k->repair ? META_FSCK_REPAIR : 0, &ns);

	if (r < 0) {
		cli_err(VERB, "namespace check: %s",
			r == -EOPNOTSUPP ? "this strata-meta has no fsck (too old)"
					 : rpc_strerror(r));
		return 2;
	}
	if ((r = mgmt_routing(k->mc, &k->rt)) < 0) {
		cli_err(VERB, "cannot read the routing table: %s", rpc_strerror(r));
		meta_fsck_report_done(&ns);
		return 2;
	}
	for (uint32_t i = 0; i < k->rt.nchains && r == 0; i++) {
		r = check_chain(k, &k->rt.chains[i]);
		if (r < 0)
			cli_err(VERB, "chain %u: %s", k->rt.chains[i].chain_id, rpc_strerror(r));
	}
	if (r == 0 && (r = check_orphans(k)) < 0)
		cli_err(VERB, "orphan chunks: %s", rpc_strerror(r));
	if (r == 0 && k->repair)
		repair_replicas(k);
	int rc = r < 0 ? 2 : report(k, &ns);
	meta_fsck_report_done(&ns);
	return rc;
}

/* --repair, --deep. */
static int fsck_option(void *arg, int val, const char *value)
{
	struct fsck *k = arg;

	(void)value;
	if (val == 'r')
		k->repair = true;
	else
		k->deep = true;
	return 0;
}

int cmd_fsck(int argc, char **argv)
{
	static const struct option own[] = {
	    {"repair", no_argument, NULL, 'r'},
	    {"deep", no_argument, NULL, 'd'},
	    {},
	};
	struct fsck k = {0};
	struct cli_opts o;
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME | CLI_OPT_META | CLI_OPT_JSON,
	    .own = own,
	    .on_opt = fsck_option,
	    .arg = &k,
	    .usage = usage,
	};
	int r = cli_parse_opts(&v, argc, argv, &o);

	if (r != CLI_GO)
		return r;
	k.json = o.json;
	if (o.nargs) {
		usage(stderr);
		return 2;
	}
	char addr[128] = "";
	if (cli_meta_addr(o.meta, o.home, addr, sizeof(addr)) < 0) {
		cli_err(VERB, "no cluster found (use --meta HOST:PORT, $STRATA_META or --home)");
		return 2;
	}
	if (cli_key_setup(VERB, o.key, o.home) < 0)
		return 2;
	/* a check of a large namespace takes a while: a long per-call timeout */
	struct rpc_client_opts ro = {.timeout_ms = 600000};
	k.mc = meta_client_new(addr, "strata-fsck", &ro);
	if (!k.mc) {
		cli_err(VERB, "out of memory");
		return 2;
	}
	int rc = run(&k);
	strata_routing_done(&k.rt);
	meta_client_free(k.mc);
	free(k.f);
	free(k.c);
	return rc;
}
