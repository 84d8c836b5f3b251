/* chunk_open_cache.c — chunk files kept open with their verified current
 * headers, so that a small read costs the blocks it touches and not an
 * open(), two 12 KiB header slots read and hashed, and a close (chunk_store.c,
 * invariant 8).
 *
 * A direct-mapped table of cs->open_nslots entries keyed by (ino, index);
 * an entry is refcounted, so one dropped while a read uses it lives until
 * that read is done. Our own changes drop the entry: cs_chunk_changed() is
 * called after every rename over a chunk (cs_publish), every unlink
 * (chunk_store_remove) and under the view lock of every in-place update. A
 * load racing such a change must not put the old file back: a reader notes
 * the stripe's generation before it opens the file and inserts only if the
 * generation is unchanged, which the change bumps before it drops the entry.
 * Changes made behind our back (an operator deleting or editing a chunk
 * file) are caught by fstat(): a file whose link count fell to 0 or whose
 * ctime moved is loaded again. Data blocks are verified on every read
 * whatever the cache holds, so an entry can never make a read return a byte
 * that fails its checksum. */
#include <errno.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <unistd.h>

#include "chunkserver/chunk_store-internal.h"

#define OPEN_SLOTS_MAX 512
#define OPEN_SLOTS_MIN 16

struct chunk_open_slot {
	uint64_t ino;
	uint32_t index;
	struct chunk_open *o;
};

/* A fraction of the descriptor limit, so that a process holding several
 * stores (tests, a chunkserver with many targets) keeps room for sockets. */
static unsigned slots_for_fd_limit(void)
{
	struct rlimit rl;
	unsigned n = OPEN_SLOTS_MAX;
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
	    rl.rlim_cur / 16 < n)
		n = rl.rlim_cur / 16 < OPEN_SLOTS_MIN ? OPEN_SLOTS_MIN
						      : (unsigned)(rl.rlim_cur / 16);
	unsigned p = OPEN_SLOTS_MIN;
	while (p * 2 <= n)
		p *= 2;
	return p;
}

int cs_open_cache_init(struct chunk_store *cs)
{
	for (int i = 0; i < CS_OPEN_LOCKS; i++)
		pthread_mutex_init(&cs->open_locks[i], NULL);
	cs->open_nslots = cs->opts.no_open_cache ? 0 : slots_for_fd_limit();
	if (cs->open_nslots == 0)
		return 0;
	cs->open_slots = calloc(cs->open_nslots, sizeof(*cs->open_slots));
	return cs->open_slots ? 0 : -ENOMEM;
}

void cs_open_put(struct chunk_open *o)
{
	if (!o || __atomic_sub_fetch(&o->refs, 1, __ATOMIC_ACQ_REL) != 0)
		return;
	close(o->fd);
	chunk_hdr_done(&o->h);
	free(o);
}

void cs_open_cache_free(struct chunk_store *cs)
{
	for (unsigned i = 0; i < cs->open_nslots && cs->open_slots; i++)
		cs_open_put(cs->open_slots[i].o);
	free(cs->open_slots);
	cs->open_slots = NULL;
	for (int i = 0; i < CS_OPEN_LOCKS; i++)
		pthread_mutex_destroy(&cs->open_locks[i]);
}

static unsigned slot_of(const struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	uint64_t h = (ino * 0xC2B2AE3D27D4EB4Full) ^ ((uint64_t)index * 0x9E3779B97F4A7C15ull);
	return (unsigned)(h >> 40) & (cs->open_nslots - 1);
}

static pthread_mutex_t *slot_lock(struct chunk_store *cs, unsigned s)
{
	return &cs->open_locks[s % CS_OPEN_LOCKS];
}

static uint64_t *stripe_gen(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	return &cs->view_gen[cs_stripe_of(ino, index)];
}

/* Still the file at the chunk's path, unchanged since it was loaded? */
static bool still_current(const struct chunk_open *o)
{
	struct stat st;
	return fstat(o->fd, &st) == 0 && st.st_nlink > 0 && st.st_ctim.tv_sec == o->ctime.tv_sec &&
	       st.st_ctim.tv_nsec == o->ctime.tv_nsec;
}

/* Removes slot s's entry if it is o (or, with o NULL, any entry of the
 * chunk) and returns the table's reference to it. */
static struct chunk_open *take(struct chunk_store *cs, unsigned s, uint64_t ino, uint32_t index,
			       const struct chunk_open *o)
{
	struct chunk_open_slot *e = &cs->open_slots[s];
	struct chunk_open *got = NULL;
	pthread_mutex_lock(slot_lock(cs, s));
	if (e->o && e->ino == ino && e->index == index && (!o || e->o == o)) {
		got = e->o;
		e->o = NULL;
	}
	pthread_mutex_unlock(slot_lock(cs, s));
	return got;
}

static struct chunk_open *lookup(struct chunk_store *cs, unsigned s, uint64_t ino, uint32_t index)
{
	struct chunk_open_slot *e = &cs->open_slots[s];
	struct chunk_open *o = NULL;
	pthread_mutex_lock(slot_lock(cs, s));
	if (e->o && e->ino == ino && e->index == index) {
		o = e->o;
		__atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(slot_lock(cs, s));
	if (o && !still_current(o)) {
		__atomic_add_fetch(&cs->open_stats.stale, 1, __ATOMIC_RELAXED);
		cs_open_put(take(cs, s, ino, index, o));
		cs_open_put(o);
		o = NULL;
	}
	return o;
}

/* Puts o in slot s unless the chunk changed since gen was read. */
static void insert(struct chunk_store *cs, unsigned s, struct chunk_open *o, uint64_t gen)
{
	struct chunk_open_slot *e = &cs->open_slots[s];
	struct chunk_open *old = NULL;
	pthread_mutex_lock(slot_lock(cs, s));
	if (__atomic_load_n(stripe_gen(cs, o->h.ino, o->h.index), __ATOMIC_ACQUIRE) == gen) {
		old = e->o;
		*e = (struct chunk_open_slot){o->h.ino, o->h.index, o};
		__atomic_add_fetch(&o->refs, 1, __ATOMIC_RELAXED);
	}
	pthread_mutex_unlock(slot_lock(cs, s));
	cs_open_put(old);
}

/* Opens the chunk file and loads its header into a new entry. */
static int load(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_open **ret)
{
	struct chunk_open *o = calloc(1, sizeof(*o));
	if (!o)
		return -ENOMEM;
	__atomic_add_fetch(&cs->open_stats.loads, 1, __ATOMIC_RELAXED);
	o->refs = 1;
	o->fd = cs_chunk_open(cs, ino, index, false);
	int r = o->fd < 0 ? o->fd : cs_hdr_load(cs, o->fd, ino, index, &o->h);
	struct stat st;
	if (r == 0 && fstat(o->fd, &st) < 0)
		r = -errno;
	if (r < 0) {
		if (o->fd >= 0)
			close(o->fd);
		chunk_hdr_done(&o->h);
		free(o);
		return r;
	}
	o->ctime = st.st_ctim;
	*ret = o;
	return 0;
}

int cs_open_get(struct chunk_store *cs, uint64_t ino, uint32_t index, struct chunk_open **ret)
{
	if (cs->open_nslots == 0)
		return load(cs, ino, index, ret);
	unsigned s = slot_of(cs, ino, index);
	struct chunk_open *o = lookup(cs, s, ino, index);
	if (o) {
		__atomic_add_fetch(&cs->open_stats.hits, 1, __ATOMIC_RELAXED);
		*ret = o;
		return 0;
	}
	uint64_t gen = __atomic_load_n(stripe_gen(cs, ino, index), __ATOMIC_ACQUIRE);
	int r = load(cs, ino, index, &o);
	if (r < 0)
		return r;
	insert(cs, s, o, gen);
	*ret = o;
	return 0;
}

void cs_chunk_changed(struct chunk_store *cs, uint64_t ino, uint32_t index)
{
	__atomic_add_fetch(stripe_gen(cs, ino, index), 1, __ATOMIC_ACQ_REL);
	if (cs->open_nslots)
		cs_open_put(take(cs, slot_of(cs, ino, index), ino, index, NULL));
}

void chunk_store_open_stats(struct chunk_store *cs, struct chunk_open_stats *ret)
{
	ret->hits = __atomic_load_n(&cs->open_stats.hits, __ATOMIC_RELAXED);
	ret->loads = __atomic_load_n(&cs->open_stats.loads, __ATOMIC_RELAXED);
	ret->stale = __atomic_load_n(&cs->open_stats.stale, __ATOMIC_RELAXED);
}
