/* dircache.c — LOOKUPs answered from a directory's whole listing.
 *
 * Why: the kernel asks LOOKUP before every create of a new name (the answer
 * is "no such entry") and for every name of a tree stat'ed cold; each was a
 * meta round trip. A directory looked up often (SFS_DC_HOT misses within
 * one window) has its whole listing fetched, with attributes, in pages of
 * META_READDIR_MAX; for one window (the negative timeout, 1 s by default)
 * LOOKUPs in it are answered here: a name absent from the listing is
 * ENOENT, a listed name is its entry with the listed attributes.
 *
 * Freshness is the kernel's own for negative entries: a name created on
 * another node is seen at most one window late here, as a negative dentry
 * the kernel cached would be. This mount's own changes are applied to the
 * listing as they are answered (sfs_dircache_after), and the
 * kernel holds a directory's lock across a create, unlink or rename in it,
 * so no LOOKUP in that directory is answered while one of ours is under way.
 *
 * Invariants (everything under dc->lock):
 *  1. d->complete: d->names held every entry of the directory as meta
 *     listed it in a fetch that started at d->fetched_ns, with every change
 *     this mount made in the directory since applied. A change whose
 *     outcome is unknown (transport failure, a surprise EEXIST/ENOENT)
 *     clears it.
 *  2. Changes made while a fetch is under way are also logged (d->pending)
 *     and replayed onto the fetched listing before it is installed: a page
 *     read before a change lacks it, a page read after has it, and replaying
 *     an add or a removal twice is harmless.
 *  3. A listed name's attributes are served only if the inode was not
 *     changed through this mount since the fetch began
 *     (sfs_attr_unchanged_since, which also covers inodes the table has
 *     forgotten). Names this mount added carry no attributes: their LOOKUP
 *     goes to meta.
 *  4. A listing is dropped past SFS_DC_MAX_NAMES names (the directory is
 *     then left alone for SFS_DC_BIG_BACKOFF_NS); at most SFS_DC_DIRS
 *     directories and SFS_DC_NAMES_BUDGET names in all are kept (the least
 *     recently used listings go first). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/log.h"
#include "fs/meta_proto.h" /* META_READDIR_MAX */
#include "fuse/fuse-internal.h"

#define SFS_DC_DIRS 64		   /* directories with a listing kept */
#define SFS_DC_HOT 4		   /* misses within a window that fetch the listing */
#define SFS_DC_MAX_NAMES 100000	   /* a bigger directory is not listed */
#define SFS_DC_NAMES_BUDGET 300000 /* names kept in all (~170 bytes each) */
#define SFS_DC_PENDING 65536	   /* changes logged during one fetch, at most */
#define SFS_DC_BIG_BACKOFF_NS (60ull * 1000000000ull)

struct dc_name {
	struct dc_name *next;
	bool has_attr;
	struct strata_attr attr;
	char name[];
};

struct dc_names {
	struct dc_name **buckets;
	size_t nbuckets, count;
};

struct dc_change {
	bool added;
	char *name;
};

struct dc_dir {
	strata_ino_t ino; /* 0: a free slot */
	uint64_t last_used_ns;
	bool complete;
	uint64_t fetched_ns; /* sfs_now_ns() when the fetch of names started */
	uint64_t stamp;	     /* sfs_attr_stamp() then */
	struct dc_names names;
	uint64_t miss_window_ns; /* misses counted since */
	uint32_t misses;
	uint64_t big_until_ns; /* too big to list until then */
	bool fetching;
	bool pending_lost; /* more changes than SFS_DC_PENDING during the fetch */
	uint32_t npending, cap_pending;
	struct dc_change *pending;
};

struct sfs_dircache {
	pthread_mutex_t lock;
	uint64_t window_ns;
	struct dc_dir dirs[SFS_DC_DIRS];
};

/* ---- a set of names ---------------------------------------------------- */

static uint64_t name_hash(const char *s)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a */

	while (*s)
		h = (h ^ (uint8_t)*s++) * 1099511628211ull;
	return h;
}

static void names_free(struct dc_names *ns)
{
	for (size_t i = 0; i < ns->nbuckets; i++) {
		struct dc_name *n = ns->buckets[i], *next;

		for (; n; n = next) {
			next = n->next;
			free(n);
		}
	}
	free(ns->buckets);
	memset(ns, 0, sizeof(*ns));
}

static struct dc_name **names_slot(struct dc_names *ns, const char *name)
{
	struct dc_name **pp = &ns->buckets[name_hash(name) & (ns->nbuckets - 1)];

	while (*pp && strcmp((*pp)->name, name) != 0)
		pp = &(*pp)->next;
	return pp;
}

static struct dc_name *names_find(struct dc_names *ns, const char *name)
{
	return ns->nbuckets ? *names_slot(ns, name) : NULL;
}

/* Doubles the buckets when the set outgrows them. Returns 0 or -ENOMEM. */
static int names_grow(struct dc_names *ns)
{
	size_t nb = ns->nbuckets ? ns->nbuckets * 2 : 64;
	struct dc_name **b = calloc(nb, sizeof(*b));

	if (!b)
		return -ENOMEM;
	for (size_t i = 0; i < ns->nbuckets; i++) {
		struct dc_name *n = ns->buckets[i], *next;

		for (; n; n = next) {
			next = n->next;
			n->next = b[name_hash(n->name) & (nb - 1)];
			b[name_hash(n->name) & (nb - 1)] = n;
		}
	}
	free(ns->buckets);
	ns->buckets = b;
	ns->nbuckets = nb;
	return 0;
}

/* Adds or replaces name (attr NULL: none known). Returns 0 or -ENOMEM. */
static int names_put(struct dc_names *ns, const char *name, const struct strata_attr *attr)
{
	size_t len = strlen(name);
	struct dc_name **pp, *n;

	if (ns->count >= ns->nbuckets && names_grow(ns) < 0)
		return -ENOMEM;
	pp = names_slot(ns, name);
	if (!*pp) {
		n = malloc(sizeof(*n) + len + 1);
		if (!n)
			return -ENOMEM;
		memcpy(n->name, name, len + 1);
		n->next = NULL;
		*pp = n;
		ns->count++;
	}
	n = *pp;
	n->has_attr = attr != NULL;
	if (attr)
		n->attr = *attr;
	return 0;
}

static void names_del(struct dc_names *ns, const char *name)
{
	struct dc_name **pp, *n;

	if (!ns->nbuckets)
		return;
	pp = names_slot(ns, name);
	if (!*pp)
		return;
	n = *pp;
	*pp = n->next;
	free(n);
	ns->count--;
}

/* ---- directories -------------------------------------------------------- */

int sfs_dircache_init(struct sfs *fs)
{
	struct sfs_dircache *dc;

	fs->dc = NULL;
	if (fs->o.negative_timeout <= 0)
		return 0; /* no negative caching asked for: none here either */
	dc = calloc(1, sizeof(*dc));
	if (!dc)
		return -ENOMEM;
	pthread_mutex_init(&dc->lock, NULL);
	dc->window_ns = (uint64_t)(fs->o.negative_timeout * 1e9);
	fs->dc = dc;
	return 0;
}

/* The changes logged during a fetch go (dc->lock held). */
static void pending_clear(struct dc_dir *d)
{
	for (uint32_t i = 0; i < d->npending; i++)
		free(d->pending[i].name);
	free(d->pending);
	d->pending = NULL;
	d->npending = d->cap_pending = 0;
	d->pending_lost = false;
}

static void dir_reset(struct dc_dir *d)
{
	names_free(&d->names);
	pending_clear(d);
	memset(d, 0, sizeof(*d));
}

void sfs_dircache_done(struct sfs *fs)
{
	if (!fs->dc)
		return;
	for (int i = 0; i < SFS_DC_DIRS; i++)
		dir_reset(&fs->dc->dirs[i]);
	pthread_mutex_destroy(&fs->dc->lock);
	free(fs->dc);
	fs->dc = NULL;
}

/* dc->lock held: the slot of ino, or NULL. */
static struct dc_dir *dir_find(struct sfs_dircache *dc, strata_ino_t ino)
{
	for (int i = 0; i < SFS_DC_DIRS; i++)
		if (dc->dirs[i].ino == ino)
			return &dc->dirs[i];
	return NULL;
}

/* dc->lock held: the slot of ino, taking a free or the least recently used
 * one (never one being fetched). */
static struct dc_dir *dir_get(struct sfs_dircache *dc, strata_ino_t ino, uint64_t now)
{
	struct dc_dir *d = dir_find(dc, ino), *victim = NULL;

	if (!d) {
		for (int i = 0; i < SFS_DC_DIRS; i++) {
			struct dc_dir *c = &dc->dirs[i];

			if (c->fetching)
				continue;
			if (!victim || c->ino == 0 || c->last_used_ns < victim->last_used_ns)
				victim = c;
			if (c->ino == 0)
				break;
		}
		if (!victim)
			return NULL;
		dir_reset(victim);
		victim->ino = ino;
		d = victim;
	}
	d->last_used_ns = now;
	return d;
}

static bool dir_fresh(const struct sfs_dircache *dc, const struct dc_dir *d, uint64_t now)
{
	return d->complete && now < d->fetched_ns + dc->window_ns;
}

/* ---- fetching a listing ------------------------------------------------- */

/* Reads every entry of dir ino into *ret. Returns 0, -EFBIG past
 * SFS_DC_MAX_NAMES, or -errno. */
static int fetch_names(struct sfs *fs, strata_ino_t ino, struct dc_names *ret)
{
	struct meta_dirent *ents = malloc(META_READDIR_MAX * sizeof(*ents));
	char after[STRATA_NAME_MAX + 1] = "";
	int more = 1, n, r = 0;

	memset(ret, 0, sizeof(*ret));
	if (!ents)
		return -ENOMEM;
	while (more && r == 0) {
		n = SFS_CALL(fs, SFS_IDEM,
			     meta_readdir(fs->mc, ino, after, true, ents, META_READDIR_MAX, &more));
		if (n < 0) {
			r = n;
			break;
		}
		for (int i = 0; i < n && r == 0; i++)
			r = names_put(ret, ents[i].name, &ents[i].attr);
		if (n > 0)
			memcpy(after, ents[n - 1].name, sizeof(after));
		if (ret->count > SFS_DC_MAX_NAMES)
			r = -EFBIG;
		if (n == 0)
			break;
	}
	free(ents);
	if (r < 0)
		names_free(ret);
	return r;
}

/* dc->lock held: the changes logged during the fetch, onto names. */
static int replay_pending(struct dc_dir *d, struct dc_names *names)
{
	for (uint32_t i = 0; i < d->npending; i++) {
		const struct dc_change *c = &d->pending[i];

		if (!c->added)
			names_del(names, c->name);
		else if (names_put(names, c->name, NULL) < 0)
			return -ENOMEM;
	}
	return d->pending_lost ? -ENOBUFS : 0;
}

/* dc->lock held: drops the least recently used listings (never keep's)
 * while more than SFS_DC_NAMES_BUDGET names are kept. */
static void keep_budget(struct sfs_dircache *dc, const struct dc_dir *keep)
{
	for (;;) {
		struct dc_dir *lru = NULL;
		size_t total = 0;

		for (int i = 0; i < SFS_DC_DIRS; i++) {
			struct dc_dir *c = &dc->dirs[i];

			total += c->names.count;
			if (c != keep && c->names.count &&
			    (!lru || c->last_used_ns < lru->last_used_ns))
				lru = c;
		}
		if (total <= SFS_DC_NAMES_BUDGET || !lru)
			return;
		names_free(&lru->names);
		lru->complete = false;
	}
}

/* Fetches and installs the listing of dir ino (its slot marked fetching by
 * the caller, dc->lock not held). */
static void fetch_dir(struct sfs *fs, strata_ino_t ino)
{
	struct sfs_dircache *dc = fs->dc;
	uint64_t stamp = sfs_attr_stamp(fs), started = sfs_now_ns();
	struct dc_names names;
	int r = fetch_names(fs, ino, &names);
	struct dc_dir *d;

	pthread_mutex_lock(&dc->lock);
	d = dir_find(dc, ino);
	if (d && r == 0)
		r = replay_pending(d, &names);
	if (d && r == 0) {
		names_free(&d->names);
		d->names = names;
		d->complete = true;
		d->fetched_ns = started;
		d->stamp = stamp;
	} else {
		names_free(&names);
	}
	if (d) {
		if (r == -EFBIG)
			d->big_until_ns = sfs_now_ns() + SFS_DC_BIG_BACKOFF_NS;
		d->fetching = false;
		pending_clear(d);
		keep_budget(dc, d);
	}
	pthread_mutex_unlock(&dc->lock);
	if (r < 0 && r != -EFBIG)
		log_debug("dircache: listing of directory %llu not kept: %s",
			  (unsigned long long)ino, strerror(-r));
}

/* dc->lock held: counts a miss in d; true when it should now be listed
 * (and marks it fetching). */
static bool miss_starts_fetch(struct sfs_dircache *dc, struct dc_dir *d, uint64_t now)
{
	if (d->fetching || now < d->big_until_ns)
		return false;
	if (now >= d->miss_window_ns + dc->window_ns) {
		d->miss_window_ns = now;
		d->misses = 0;
	}
	if (++d->misses < SFS_DC_HOT)
		return false;
	pending_clear(d);
	d->fetching = true;
	return true;
}

/* ---- answering and changing --------------------------------------------- */

/* dc->lock held: the answer of a fresh listing for name. */
static enum sfs_dc_answer answer_locked(struct sfs_dircache *dc, struct dc_dir *d, const char *name,
					uint64_t now, struct strata_attr *ret, uint64_t *ret_stamp,
					double *ret_ttl)
{
	struct dc_name *n = names_find(&d->names, name);

	if (!n) {
		*ret_ttl = (double)(d->fetched_ns + dc->window_ns - now) / 1e9;
		return SFS_DC_ABSENT;
	}
	if (!n->has_attr)
		return SFS_DC_MISS;
	*ret = n->attr;
	*ret_stamp = d->stamp;
	return SFS_DC_FOUND;
}

enum sfs_dc_answer sfs_dircache_lookup(struct sfs *fs, strata_ino_t parent, const char *name,
				       struct strata_attr *ret, uint64_t *ret_stamp,
				       double *ret_ttl)
{
	struct sfs_dircache *dc = fs->dc;
	enum sfs_dc_answer a = SFS_DC_MISS;
	uint64_t now = sfs_now_ns();
	bool fetch = false;
	struct dc_dir *d;

	if (!dc || meta_name_check(name) < 0) /* meta's error for a bad name */
		return SFS_DC_MISS;
	for (int attempt = 0; attempt < 2; attempt++) {
		pthread_mutex_lock(&dc->lock);
		d = dir_get(dc, parent, now);
		a = d && dir_fresh(dc, d, now)
			? answer_locked(dc, d, name, now, ret, ret_stamp, ret_ttl)
			: SFS_DC_MISS;
		pthread_mutex_unlock(&dc->lock);
		/* a listed inode changed here since the listing: meta knows better */
		if (a == SFS_DC_FOUND && !sfs_attr_unchanged_since(fs, ret->ino, *ret_stamp))
			a = SFS_DC_MISS;
		if (a != SFS_DC_MISS || attempt > 0)
			break;
		/* no listing, an old one, or one without this name's attributes:
		 * a miss, and enough of them fetch a new listing */
		pthread_mutex_lock(&dc->lock);
		d = dir_find(dc, parent);
		fetch = d && miss_starts_fetch(dc, d, now);
		pthread_mutex_unlock(&dc->lock);
		if (!fetch)
			break;
		fetch_dir(fs, parent);
		now = sfs_now_ns();
	}
	return a;
}

/* dc->lock held: logs a change made during d's fetch (or marks the log
 * lost: the fetch is then not installed). */
static void pending_add(struct dc_dir *d, const char *name, bool added)
{
	struct dc_change *c;

	if (d->pending_lost)
		return;
	if (d->npending == d->cap_pending) {
		uint32_t cap = d->cap_pending ? d->cap_pending * 2 : 64;

		c = cap <= SFS_DC_PENDING ? realloc(d->pending, cap * sizeof(*c)) : NULL;
		if (!c) {
			d->pending_lost = true;
			return;
		}
		d->pending = c;
		d->cap_pending = cap;
	}
	c = &d->pending[d->npending];
	c->added = added;
	c->name = strdup(name);
	if (!c->name)
		d->pending_lost = true;
	else
		d->npending++;
}

/* dc->lock held: applies one change of this mount to d. */
static void change_locked(struct dc_dir *d, const char *name, bool added)
{
	if (d->fetching)
		pending_add(d, name, added);
	if (!d->complete)
		return;
	if (!added)
		names_del(&d->names, name);
	else if (names_put(&d->names, name, NULL) < 0)
		d->complete = false;
	if (d->names.count > SFS_DC_MAX_NAMES) { /* grown too big here */
		names_free(&d->names);
		d->complete = false;
		d->big_until_ns = sfs_now_ns() + SFS_DC_BIG_BACKOFF_NS;
	}
}

/* dc->lock held: a change in d whose outcome is not known (invariant 1). */
static void unknown_locked(struct dc_dir *d)
{
	d->complete = false;
	if (d->fetching) /* the fetch under way may predate the change */
		d->pending_lost = true;
}

void sfs_dircache_after(struct sfs *fs, strata_ino_t parent, const char *name, int r, bool added)
{
	struct sfs_dircache *dc = fs->dc;
	struct dc_dir *d;

	if (!dc)
		return;
	pthread_mutex_lock(&dc->lock);
	d = dir_find(dc, parent);
	if (d && r == 0)
		change_locked(d, name, added);
	else if (d)
		unknown_locked(d);
	pthread_mutex_unlock(&dc->lock);
}
