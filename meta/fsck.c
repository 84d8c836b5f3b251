/* fsck.c — the online check of the meta store (ns_fsck) and the verdicts on
 * chunks found on the chunkservers (ns_fsck_chunks); `strata fsck`
 * (tools/cmd_fsck.c) drives both over MSG_META_FSCK and
 * MSG_META_FSCK_CHUNKS. README.md "fsck" lists what is checked and how each
 * finding is repaired.
 *
 * How it stays online and correct:
 *  1. The check reads a RocksDB snapshot and takes no lock: every mutation is
 *     one atomic batch (ns-internal.h invariant 6), so a snapshot is a state
 *     the store really had and anything found there is a real inconsistency,
 *     never a half-done operation. Mutations go on meanwhile.
 *  2. A repair never trusts that snapshot: it takes the mutation lock, scans
 *     again (nothing can change under the lock, so this second view is the
 *     current state) and fixes what that scan finds, in one batch. Repairs
 *     that enable others (a dir linked into lost+found changes its nlink)
 *     are finished by up to FSCK_ROUNDS locked rounds. Mutations wait for
 *     the duration of a locked scan.
 *  3. Nothing that holds data is deleted: an unreachable inode is linked into
 *     /lost+found as "#<ino>", a dentry is deleted only when it names no
 *     inode (or a second name of a directory: the directory keeps its
 *     first), a GC entry is deleted (not the inode) when its inode exists.
 *  4. Chunk verdicts and chunk removals run under the mutation lock, so no
 *     file can be created, opened or grown between the verdict and the
 *     removal; inode ids are never reused (invariant 5), so a chunk whose
 *     inode is gone and not queued can never belong to a file again.
 *
 * The engine does not log and does not talk to the network: repairs come
 * back as records (server.c logs them), chunk removal is a callback. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fs/cleanup.h"
#include "meta/ns-internal.h"

#define FSCK_MAX_INODES (256ull << 20) /* inodes one check holds in memory */
#define FSCK_ROUNDS 4
#define LOST_FOUND "lost+found"

struct fino {
	struct inode in; /* the record; repairs change it in place (dirty) */
	uint32_t ndent;	 /* dentries naming it that stay (directories: 0 or 1) */
	uint32_t nsubdir;
	uint32_t nsess;
	size_t didx;  /* directories: the dentry kept (index into scan.dd) */
	uint8_t walk; /* check_cycles: 0 unseen, 1 reaches the root, 2 on the path, 3 not */
	bool orphan, dirty;
	bool cycle; /* a directory on a cycle cut off from the root */
};

struct ddent { /* a dentry naming a directory */
	uint64_t parent, ino;
	char name[STRATA_NAME_MAX + 1];
};

struct scan {
	struct ns *ns;
	const struct kv_snap *snap;
	struct kv_batch *b; /* repair round: fixes go here; NULL: check only */
	uint64_t lf;	    /* repair: the lost+found directory (0: none) */
	int nfix;
	struct meta_fsck_report *rep;
	struct meta_fsck_report *st; /* where the statistics go */
	struct fino *v;
	size_t n, cap;
	struct ddent *dd;
	size_t ndd, capdd;
	uint64_t max_ino, max_sid;
	uint32_t max_id[4]; /* N, T, H, B */
	int err;
};

static void record(struct scan *sc, uint16_t kind, uint64_t ino, uint64_t parent, const char *name,
		   uint64_t expected, uint64_t actual)
{
	struct meta_fsck_report *r = sc->rep;

	if (sc->b) {
		r->repaired[kind]++;
		sc->nfix++;
	} else {
		r->found[kind]++;
	}
	if (r->n >= META_FSCK_MAX_RECORDS) {
		r->truncated = 1;
		return;
	}
	struct meta_fsck_record *c = &r->rec[r->n++];
	*c = (struct meta_fsck_record){.kind = kind,
				       .repaired = sc->b != NULL,
				       .ino = ino,
				       .parent = parent,
				       .expected = expected,
				       .actual = actual};
	snprintf(c->name, sizeof(c->name), "%s", name ? name : "");
}

/* A record nothing can repair: counted by the check only. */
static void record_only(struct scan *sc, uint16_t kind, uint64_t ino, const char *what)
{
	if (!sc->b)
		record(sc, kind, ino, 0, what, 0, 0);
}

static struct fino *find(struct scan *sc, uint64_t ino)
{
	size_t lo = 0, hi = sc->n;

	while (lo < hi) {
		size_t mid = lo + (hi - lo) / 2;
		if (sc->v[mid].in.a.ino == ino)
			return &sc->v[mid];
		if (sc->v[mid].in.a.ino < ino)
			lo = mid + 1;
		else
			hi = mid;
	}
	return NULL;
}

static void note_ino(struct scan *sc, uint64_t ino)
{
	if (ino > sc->max_ino)
		sc->max_ino = ino;
}

/* ---- the scans, one per key tag ------------------------------------------------ */

static int scan_inode(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;
	struct inode in;

	if (kl != 9) {
		record_only(sc, FSCK_BAD_RECORD, 0, "inode key");
		return 0;
	}
	uint64_t ino = key_get_u64(k + 1);
	note_ino(sc, ino);
	if (inode_decode(v, vl, &in) < 0) {
		record_only(sc, FSCK_BAD_RECORD, ino, "inode");
		return 0;
	}
	if (sc->n == sc->cap) {
		if (sc->cap >= FSCK_MAX_INODES)
			return -EFBIG;
		size_t nc = sc->cap ? sc->cap * 2 : 1024;
		struct fino *nv = realloc(sc->v, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		sc->v = nv;
		sc->cap = nc;
	}
	in.a.ino = ino;
	sc->v[sc->n++] = (struct fino){.in = in};
	return 0;
}

static int push_ddent(struct scan *sc, uint64_t parent, uint64_t ino, const char *name)
{
	if (sc->ndd == sc->capdd) {
		size_t nc = sc->capdd ? sc->capdd * 2 : 256;
		struct ddent *nv = realloc(sc->dd, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		sc->dd = nv;
		sc->capdd = nc;
	}
	struct ddent *d = &sc->dd[sc->ndd++];
	d->parent = parent;
	d->ino = ino;
	snprintf(d->name, sizeof(d->name), "%s", name);
	return 0;
}

static int scan_dentry(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;
	char name[STRATA_NAME_MAX + 1];

	sc->st->dentries++;
	if (kl < 10 || kl > 9 + STRATA_NAME_MAX) {
		record_only(sc, FSCK_BAD_RECORD, 0, "dentry key");
		return 0;
	}
	uint64_t parent = key_get_u64(k + 1);
	memcpy(name, k + 9, kl - 9);
	name[kl - 9] = 0;
	struct dentry de;
	if (dentry_decode(v, vl, &de) < 0) {
		record_only(sc, FSCK_BAD_RECORD, parent, name);
		return 0;
	}
	uint64_t ino = de.ino;
	uint32_t dmode = de.mode;
	struct fino *p = find(sc, parent), *t = find(sc, ino);
	if (!t || !p || !mode_is_dir(p->in.a.mode)) {
		record(sc, FSCK_DANGLING_DENTRY, ino, parent, name, 0, ino);
		if (sc->b)
			kv_batch_del(sc->b, k, kl);
		return 0;
	}
	if ((dmode & 0170000) != (t->in.a.mode & 0170000)) {
		record(sc, FSCK_DENTRY_TYPE, ino, parent, name, t->in.a.mode & 0170000,
		       dmode & 0170000);
		if (sc->b)
			ns_put_dentry(sc->b, parent, name, &(struct dentry){ino, t->in.a.mode});
	}
	if (mode_is_dir(t->in.a.mode))
		return push_ddent(sc, parent, ino, name);
	t->ndent++;
	return 0;
}

static int cmp_ddent(const void *a, const void *b)
{
	const struct ddent *x = a, *y = b;

	if (x->ino != y->ino)
		return x->ino < y->ino ? -1 : 1;
	return x->parent < y->parent ? -1 : x->parent > y->parent;
}

static void del_dentry(struct scan *sc, uint64_t parent, const char *name)
{
	struct key k;

	key_dentry(&k, parent, name);
	kv_batch_del(sc->b, k.b, k.len);
}

/* A directory keeps one dentry: the one in the directory its parent field
 * names, else the first; the others are extra names (DIR_LINKS). */
static void check_dir_dentries(struct scan *sc)
{
	if (sc->ndd > 1)
		qsort(sc->dd, sc->ndd, sizeof(*sc->dd), cmp_ddent);
	for (size_t i = 0; i < sc->ndd;) {
		size_t j = i;
		while (j < sc->ndd && sc->dd[j].ino == sc->dd[i].ino)
			j++;
		struct fino *t = find(sc, sc->dd[i].ino);
		size_t keep = i;
		for (size_t x = i; x < j; x++)
			if (sc->dd[x].parent == t->in.parent)
				keep = x;
		bool root = t->in.a.ino == STRATA_ROOT_INO;
		for (size_t x = i; x < j; x++) {
			if (x == keep && !root)
				continue;
			record(sc, FSCK_DIR_LINKS, t->in.a.ino, sc->dd[x].parent, sc->dd[x].name,
			       root ? 0 : 1, j - i);
			if (sc->b)
				del_dentry(sc, sc->dd[x].parent, sc->dd[x].name);
		}
		if (!root) {
			t->ndent = 1;
			t->didx = keep;
			find(sc, sc->dd[keep].parent)->nsubdir++;
			if (t->in.parent != sc->dd[keep].parent) {
				record(sc, FSCK_DIR_PARENT, t->in.a.ino, sc->dd[keep].parent,
				       sc->dd[keep].name, sc->dd[keep].parent, t->in.parent);
				t->in.parent = sc->dd[keep].parent;
				t->dirty = true;
			}
		}
		i = j;
	}
}

/* Directories whose parents lead into a cycle instead of to the root (each
 * still has its one dentry, so no local check sees them): the members of
 * each cycle are marked; linking them into lost+found brings the cycle and
 * everything below it back. */
static int check_cycles(struct scan *sc)
{
	_cleanup_free_ struct fino **path = calloc(sc->n + 1, sizeof(*path));

	if (!path)
		return -ENOMEM;
	for (size_t i = 0; i < sc->n; i++) {
		struct fino *cur = &sc->v[i];
		size_t len = 0;
		if (!mode_is_dir(cur->in.a.mode))
			continue;
		while (cur && cur->walk == 0) {
			if (cur->in.a.ino == STRATA_ROOT_INO || cur->ndent == 0) {
				cur->walk = 1; /* no name: `unreachable`, linked on its own */
				break;
			}
			cur->walk = 2;
			path[len++] = cur;
			cur = find(sc, sc->dd[cur->didx].parent);
		}
		uint8_t end = cur ? cur->walk : 1;
		bool in = false;
		for (size_t j = 0; end == 2 && j < len; j++)
			path[j]->cycle = in = in || path[j] == cur;
		for (size_t j = 0; j < len; j++)
			path[j]->walk = end == 1 ? 1 : 3;
	}
	return 0;
}

static int scan_session(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;
	char client[NS_CLIENT_ID_MAX + 1];
	struct key u;

	sc->st->sessions++;
	if (kl != 17) {
		record_only(sc, FSCK_BAD_RECORD, 0, "session key");
		return 0;
	}
	uint64_t ino = key_get_u64(k + 1), sid = key_get_u64(k + 9);
	if (sid > sc->max_sid)
		sc->max_sid = sid;
	struct session_rec s;
	if (session_decode(v, vl, &s) < 0) {
		record_only(sc, FSCK_BAD_RECORD, ino, "session");
		return 0;
	}
	memcpy(client, s.client, sizeof(client));
	key_client(&u, client, ino, sid);
	struct fino *t = find(sc, ino);
	if (!t) {
		record(sc, FSCK_SESSION_NO_INODE, ino, 0, client, 0, sid);
		if (sc->b) {
			kv_batch_del(sc->b, k, kl);
			kv_batch_del(sc->b, u.b, u.len);
		}
		return 0;
	}
	t->nsess++;
	_cleanup_free_ void *val = NULL;
	size_t n;
	int r = kv_get_at(sc->ns->kv, sc->snap, u.b, u.len, &val, &n);
	if (r == -ENOENT) {
		record(sc, FSCK_SESSION_NO_INDEX, ino, 0, client, sid, 0);
		if (sc->b)
			kv_batch_put(sc->b, u.b, u.len, "", 0);
	} else if (r < 0) {
		return r;
	}
	return 0;
}

static int scan_client(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;
	char client[NS_CLIENT_ID_MAX + 1];
	struct key s;

	/* U client 0x00 ino(8) sid(8): client ids hold no NUL byte */
	if (kl < 18 || kl - 18 > NS_CLIENT_ID_MAX || k[kl - 17] != 0) {
		record_only(sc, FSCK_BAD_RECORD, 0, "client index key");
		return 0;
	}
	memcpy(client, k + 1, kl - 18);
	client[kl - 18] = 0;
	uint64_t ino = key_get_u64(k + kl - 16), sid = key_get_u64(k + kl - 8);
	key_session(&s, ino, sid);
	_cleanup_free_ void *val = NULL;
	size_t n;
	int r = kv_get_at(sc->ns->kv, sc->snap, s.b, s.len, &val, &n);
	if (r == -ENOENT) {
		record(sc, FSCK_INDEX_NO_SESSION, ino, 0, client, 0, sid);
		if (sc->b)
			kv_batch_del(sc->b, k, kl);
		return 0;
	}
	return r < 0 ? r : 0;
}

static int scan_orphan(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;

	if (kl != 9) {
		record_only(sc, FSCK_BAD_RECORD, 0, "orphan key");
		return 0;
	}
	struct fino *t = find(sc, key_get_u64(k + 1));
	if (t) {
		t->orphan = true; /* judged with the inode (check_inodes) */
		return 0;
	}
	record(sc, FSCK_STALE_ORPHAN, key_get_u64(k + 1), 0, NULL, 0, 1);
	if (sc->b)
		kv_batch_del(sc->b, k, kl);
	return 0;
}

static int scan_gc(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;

	sc->st->gc_queued++;
	if (kl != 9) {
		record_only(sc, FSCK_BAD_RECORD, 0, "gc key");
		return 0;
	}
	uint64_t ino = key_get_u64(k + 1);
	note_ino(sc, ino);
	if (find(sc, ino)) {
		/* the collector would remove the chunks of a live inode */
		record(sc, FSCK_GC_LIVE, ino, 0, NULL, 0, 1);
		if (sc->b)
			kv_batch_del(sc->b, k, kl);
	}
	return 0;
}

/* X ino name and L ino: what hangs off an inode must have one. */
static int scan_stray(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct scan *sc = ctx;
	bool xattr = k[0] == K_XATTR;

	if (kl < 9 || (!xattr && kl != 9)) {
		record_only(sc, FSCK_BAD_RECORD, 0, xattr ? "xattr key" : "symlink key");
		return 0;
	}
	struct fino *t = find(sc, key_get_u64(k + 1));
	if (!xattr && t && (t->in.a.mode & 0170000) == 0120000)
		t->walk = 1; /* has its target (check_inode; walk is for dirs only) */
	if (t && (xattr || (t->in.a.mode & 0170000) == 0120000))
		return 0;
	record(sc, FSCK_STRAY_RECORD, key_get_u64(k + 1), 0, xattr ? "xattr" : "symlink", 0, 1);
	if (sc->b)
		kv_batch_del(sc->b, k, kl);
	return 0;
}

static int scan_max_id(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	uint32_t *max = ctx;

	if (kl == 5 && key_get_u32(k + 1) > *max)
		*max = key_get_u32(k + 1);
	return 0;
}

/* ---- per inode ----------------------------------------------------------------- */

static void del_orphan(struct scan *sc, uint64_t ino)
{
	struct key k;

	key_ino(&k, K_ORPHAN, ino);
	kv_batch_del(sc->b, k.b, k.len);
}

/* Links t into lost+found as "#<ino>". */
/* Links t into lost+found as "#<ino>" ("#<ino>-N" if a user took that
 * name). false: no free name (left as it is). */
static bool link_lost(struct scan *sc, struct fino *t, char *name, size_t cap)
{
	snprintf(name, cap, "#%llu", (unsigned long long)t->in.a.ino);
	if (!sc->b)
		return true;
	for (int i = 1;; i++) {
		struct key k;
		key_dentry(&k, sc->lf, name);
		if (kv_exists(sc->ns->kv, k.b, k.len) == -ENOENT)
			break;
		if (i > 9)
			return false;
		snprintf(name, cap, "#%llu-%d", (unsigned long long)t->in.a.ino, i);
	}
	ns_put_dentry(sc->b, sc->lf, name, &(struct dentry){t->in.a.ino, t->in.a.mode});
	if (mode_is_dir(t->in.a.mode)) {
		t->in.parent = sc->lf; /* lost+found's nlink: the next round */
	} else {
		t->in.a.nlink = 1;
		t->ndent = 1;
	}
	t->dirty = true;
	if (t->orphan)
		del_orphan(sc, t->in.a.ino);
	return true;
}

static void check_inode(struct scan *sc, struct fino *t)
{
	const uint64_t ino = t->in.a.ino;
	const bool dir = mode_is_dir(t->in.a.mode);
	char name[32] = "";

	if (dir)
		sc->st->dirs++;
	else if (mode_is_reg(t->in.a.mode))
		sc->st->files++;
	else if ((t->in.a.mode & 0170000) == 0120000 && t->walk != 1)
		record_only(sc, FSCK_SYMLINK_NO_TARGET, ino, NULL);
	if (ino == STRATA_ROOT_INO && t->in.parent != STRATA_ROOT_INO) {
		record(sc, FSCK_DIR_PARENT, ino, 0, NULL, STRATA_ROOT_INO, t->in.parent);
		t->in.parent = STRATA_ROOT_INO;
		t->dirty = true;
	}
	/* unreachable: no name, and not an open orphan; or a directory on a
	 * cycle cut off from the root (its name there goes) */
	bool open_orphan = !dir && t->ndent == 0 && t->in.a.nlink == 0 && t->nsess > 0;
	if (ino != STRATA_ROOT_INO && (t->ndent == 0 || t->cycle) && !open_orphan) {
		if (sc->b && !sc->lf)
			return; /* no lost+found to link into */
		if (!link_lost(sc, t, name, sizeof(name)))
			return;
		if (t->cycle && sc->b) /* its parent's nlink: the next round */
			del_dentry(sc, sc->dd[t->didx].parent, sc->dd[t->didx].name);
		record(sc, FSCK_UNREACHABLE, ino, sc->lf, name, 1, 0); /* dentries */
		if (!dir)
			return;
	}
	if (open_orphan) {
		sc->st->orphans++;
		if (!t->orphan) {
			record(sc, FSCK_ORPHAN_NO_MARKER, ino, 0, NULL, 1, 0);
			if (sc->b) {
				struct key k;
				key_ino(&k, K_ORPHAN, ino);
				kv_batch_put(sc->b, k.b, k.len, "", 0);
			}
		}
		return;
	}
	if (t->orphan) {
		record(sc, FSCK_STALE_ORPHAN, ino, 0, NULL, 0, 1);
		if (sc->b)
			del_orphan(sc, ino);
	}
	uint32_t want = dir ? 2 + t->nsubdir : t->ndent;
	if (t->in.a.nlink != want) {
		record(sc, FSCK_NLINK, ino, 0, NULL, want, t->in.a.nlink);
		t->in.a.nlink = want;
		t->dirty = true;
	}
}

/* ---- counters ------------------------------------------------------------------ */

static int check_counter(struct scan *sc, const char *name, uint64_t dflt, uint64_t want_above,
			 uint64_t *mem)
{
	struct key k;
	_cleanup_free_ uint8_t *v = NULL;
	size_t n;
	uint64_t cur = dflt;

	key_counter(&k, name);
	int r = kv_get_at(sc->ns->kv, sc->snap, k.b, k.len, (void **)&v, &n);
	if (r < 0 && r != -ENOENT)
		return r;
	if (r == 0) {
		if (counter_decode(v, n, &cur) < 0) {
			record_only(sc, FSCK_BAD_RECORD, 0, name);
			return 0;
		}
	}
	if (cur > want_above)
		return 0;
	record(sc, FSCK_COUNTER, 0, 0, name, want_above + 1, cur);
	if (sc->b) {
		uint64_t nv = STRATA_MAX(want_above + 1, *mem);
		ns_put_counter(sc->b, name, nv);
		*mem = nv;
	}
	return 0;
}

static int check_counters(struct scan *sc)
{
	struct ns *ns = sc->ns;
	uint64_t mem[4] = {ns->next_node, ns->next_target, ns->next_chain, ns->next_table};
	static const char *const names[4] = {"next_node", "next_target", "next_chain",
					     "next_table"};
	int r = 0;

	r = r ?: check_counter(sc, "next_ino", STRATA_ROOT_INO + 1, sc->max_ino, &ns->next_ino);
	r = r ?: check_counter(sc, "next_session", 1, sc->max_sid, &ns->next_session);
	for (int i = 0; i < 4 && r == 0; i++)
		r = check_counter(sc, names[i], 1, sc->max_id[i], &mem[i]);
	if (r < 0)
		return r;
	ns->next_node = (uint32_t)mem[0];
	ns->next_target = (uint32_t)mem[1];
	ns->next_chain = (uint32_t)mem[2];
	ns->next_table = (uint32_t)mem[3];

	struct key k;
	_cleanup_free_ uint8_t *v = NULL;
	size_t n;
	key_counter(&k, "inodes");
	r = kv_get_at(ns->kv, sc->snap, k.b, k.len, (void **)&v, &n);
	if (r < 0 && r != -ENOENT)
		return r;
	uint64_t cur = r == 0 && n == 9 ? le64_get(v + 1) : 0;
	if (cur != sc->n) {
		record(sc, FSCK_INODE_COUNT, 0, 0, "inodes", sc->n, cur);
		if (sc->b) {
			ns_put_counter(sc->b, "inodes", sc->n);
			ns->inodes = sc->n;
		}
	}
	return 0;
}

/* ---- one pass --------------------------------------------------------------------- */

static int scan_tag(struct scan *sc, uint8_t tag, kv_scan_fn fn, void *ctx)
{
	return kv_scan_at(sc->ns->kv, sc->snap, &tag, 1, NULL, 0, fn, ctx);
}

static int run_scan(struct scan *sc)
{
	static const uint8_t idtags[4] = {K_NODE, K_TARGET, K_CHAIN, K_TABLE};
	int r = 0;

	r = r ?: scan_tag(sc, K_INODE, scan_inode, sc);
	r = r ?: scan_tag(sc, K_DENTRY, scan_dentry, sc);
	if (r < 0)
		return r;
	check_dir_dentries(sc);
	r = r ?: check_cycles(sc);
	r = r ?: scan_tag(sc, K_SESSION, scan_session, sc);
	r = r ?: scan_tag(sc, K_CLIENT, scan_client, sc);
	r = r ?: scan_tag(sc, K_ORPHAN, scan_orphan, sc);
	r = r ?: scan_tag(sc, K_GC, scan_gc, sc);
	r = r ?: scan_tag(sc, K_XATTR, scan_stray, sc);
	r = r ?: scan_tag(sc, K_SYMLINK, scan_stray, sc);
	for (int i = 0; i < 4 && r == 0; i++)
		r = scan_tag(sc, idtags[i], scan_max_id, &sc->max_id[i]);
	if (r < 0)
		return r;
	sc->st->inodes = sc->n;
	for (size_t i = 0; i < sc->n; i++)
		check_inode(sc, &sc->v[i]);
	if ((r = check_counters(sc)) < 0)
		return r;
	for (size_t i = 0; sc->b && i < sc->n; i++)
		if (sc->v[i].dirty) {
			sc->v[i].in.a.ctime_ns = ns_now();
			ns_put_inode(sc->b, &sc->v[i].in);
		}
	return 0;
}

static void scan_free(struct scan *sc)
{
	free(sc->v);
	free(sc->dd);
}

/* One locked repair round: re-scan the current state, fix what it finds. */
static int repair_round(struct ns *ns, uint64_t lf, struct meta_fsck_report *rep, int *ret_nfix)
{
	struct meta_fsck_report stats = {0};
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	int r;

	if (!b)
		return -ENOMEM;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct kv_snap *snap = kv_snap_new(ns->kv);
	if (!snap)
		return -ENOMEM;
	struct scan sc = {.ns = ns, .snap = snap, .b = b, .lf = lf, .rep = rep, .st = &stats};
	r = run_scan(&sc);
	kv_snap_free(ns->kv, snap);
	scan_free(&sc);
	if (r == 0 && sc.nfix > 0)
		r = ns_commit(ns, b);
	*ret_nfix = sc.nfix;
	return r;
}

static int repair_rounds(struct ns *ns, uint64_t lf, struct meta_fsck_report *rep)
{
	int r = 0;

	for (int round = 0; r == 0 && round < FSCK_ROUNDS; round++) {
		int nfix = 0;
		r = repair_round(ns, lf, rep, &nfix);
		if (nfix == 0)
			break;
	}
	return r;
}

/* The directory unreachable inodes go to: /lost+found, made when missing. */
static int lost_found(struct ns *ns, uint64_t *ret)
{
	struct strata_attr a;
	int r = ns_mkdir(ns, NULL, STRATA_ROOT_INO, LOST_FOUND, 0040700, 0, 0, &a);

	if (r == -EEXIST)
		r = ns_lookup(ns, STRATA_ROOT_INO, LOST_FOUND, &a);
	if (r < 0)
		return r;
	if (!mode_is_dir(a.mode))
		return -ENOTDIR;
	*ret = a.ino;
	return 0;
}

int ns_fsck(struct ns *ns, uint32_t flags, struct meta_fsck_report *ret)
{
	struct meta_fsck_report rep = {0};
	uint32_t total = 0;
	int r;

	if (!(rep.rec = calloc(META_FSCK_MAX_RECORDS, sizeof(*rep.rec))))
		return -ENOMEM;
	struct kv_snap *snap = kv_snap_new(ns->kv);
	if (!snap) {
		free(rep.rec);
		return -ENOMEM;
	}
	struct scan sc = {.ns = ns, .snap = snap, .rep = &rep, .st = &rep};
	r = run_scan(&sc);
	kv_snap_free(ns->kv, snap);
	scan_free(&sc);
	for (int k = 1; k < FSCK_KIND_MAX; k++)
		total += k == FSCK_BAD_RECORD ? 0 : rep.found[k];
	if (r == 0 && (flags & META_FSCK_REPAIR) && total > 0) {
		/* everything but unreachable inodes first: lost+found is made
		 * only once the counters are right (a next_ino below the inodes
		 * in use would hand it the number of a live inode) */
		r = repair_rounds(ns, 0, &rep);
		uint64_t lf = 0;
		if (r == 0 && rep.found[FSCK_UNREACHABLE] && lost_found(ns, &lf) == 0)
			r = repair_rounds(ns, lf, &rep);
	}
	if (r < 0) {
		free(rep.rec);
		return r;
	}
	*ret = rep;
	return 0;
}

/* ---- chunks ------------------------------------------------------------------------ */

static uint32_t chunks_of(uint64_t size, uint32_t chunk_size)
{
	uint64_t n = chunk_size ? (size + chunk_size - 1) / chunk_size : 0;

	return n > UINT32_MAX ? UINT32_MAX : (uint32_t)n;
}

static int verdict(struct ns *ns, struct meta_fsck_chunk *c, struct strata_layout *layout)
{
	struct inode in;
	struct key k;
	int r = ns_get_inode(ns, c->ino, &in);

	*layout = (struct strata_layout){STRATA_DEFAULT_CHUNK_SIZE, c->table_id, 0};
	c->first_orphan = 0;
	c->size = 0;
	if (r == -ENOENT) {
		key_ino(&k, K_GC, c->ino);
		r = kv_exists(ns->kv, k.b, k.len);
		if (r < 0 && r != -ENOENT)
			return r;
		c->verdict = r == 0 ? FSCK_CHUNK_GC : FSCK_CHUNK_NO_INODE;
		return 0;
	}
	if (r < 0)
		return r;
	c->size = in.a.size;
	if (!mode_is_reg(in.a.mode)) {
		c->verdict = FSCK_CHUNK_NOT_FILE;
		return 0;
	}
	key_ino(&k, K_SESSION, c->ino);
	if ((r = ns_prefix_any(ns, &k)) < 0)
		return r;
	if (r) {
		c->verdict = FSCK_CHUNK_OPEN;
		return 0;
	}
	uint32_t end = chunks_of(in.a.size, in.a.layout.chunk_size);
	if (c->index < end) {
		c->verdict = FSCK_CHUNK_OK;
		return 0;
	}
	c->verdict = FSCK_CHUNK_BEYOND_EOF;
	c->first_orphan = end;
	if (in.a.layout.table_id == c->table_id)
		*layout = in.a.layout;
	else
		layout->chunk_size = in.a.layout.chunk_size;
	return 0;
}

int ns_fsck_chunks(struct ns *ns, uint32_t flags, struct meta_fsck_chunk *items, uint32_t n,
		   ns_fsck_remove_fn rm, void *ctx)
{
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);

	for (uint32_t i = 0; i < n; i++) {
		struct meta_fsck_chunk *c = &items[i];
		struct strata_layout layout;
		int r = verdict(ns, c, &layout);
		if (r < 0)
			return r;
		c->removed = 0;
		c->err = 0;
		bool orphan = c->verdict >= FSCK_CHUNK_NO_INODE;
		if (!orphan || !(flags & META_FSCK_REPAIR) || !rm)
			continue;
		c->err = rm(ctx, &layout, c->ino, c->first_orphan);
		c->removed = c->err == 0;
	}
	return 0;
}

/* ---- replicas ---------------------------------------------------------------------- */

int ns_fsck_resync(struct ns *ns, uint32_t target_id, uint8_t *ret_state)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct cluster_target t;
	struct cmap *m = NULL;
	int r;

	if (!b)
		return -ENOMEM;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	if ((r = cluster_get_target(ns, target_id, &t)) < 0)
		return r;
	if (t.state != TARGET_SERVING)
		return -EALREADY; /* already out of service, or being resynced */
	if ((r = cmap_load(ns, &m)) < 0)
		return r;
	/* as if its node had restarted: waiting when others in its chain serve
	 * (chainmap.c returning_state), then synced by them */
	cmap_node_up(m, t.node_id, &target_id, 1, true);
	bool changed = cmap_write(m, b);
	cmap_free(m);
	if (!changed)
		return -EBUSY; /* the only serving replica: nothing to resync from */
	ns->routing_version++;
	cluster_put_counters(ns, b);
	if ((r = ns_commit(ns, b)) < 0)
		return r;
	*ret_state = TARGET_WAITING;
	return 0;
}
