/* inode.c — the client's inode table: per-inode state that must outlive a
 * single request. The kernel's lookup count (entry replies minus forgets)
 * keeps an entry alive, as do open handles and requests in progress.
 *
 * What lives here: the file's layout (so truncate and I/O need no extra
 * RPC), the length of writes not yet recorded in meta, the mode/gid seen last
 * (setgid inheritance), a negative cache of security.capability (the kernel
 * asks for it on every write), and the mtime/size stamp that decides whether
 * an open may keep the kernel page cache.
 *
 * Locking: the table lock guards the hash chains, nlookup and nref; each
 * entry's own lock guards the rest. The table lock is never taken while an
 * entry lock is held. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"

#include "fuse/fuse-internal.h"

static size_t bucket_of(strata_ino_t ino)
{
	return (size_t)((ino * 0x9E3779B97F4A7C15ull) >> 48) & (SFS_ITABLE_BUCKETS - 1);
}

int sfs_itable_init(struct sfs_itable *t)
{
	pthread_mutex_init(&t->lock, NULL);
	t->buckets = calloc(SFS_ITABLE_BUCKETS, sizeof(*t->buckets));
	t->count = 0;
	return t->buckets ? 0 : -ENOMEM;
}

static void inode_free(struct sfs_inode *in)
{
	pthread_mutex_destroy(&in->lock);
	free(in);
}

void sfs_itable_done(struct sfs_itable *t)
{
	if (!t->buckets)
		return;
	for (size_t i = 0; i < SFS_ITABLE_BUCKETS; i++) {
		struct sfs_inode *in = t->buckets[i], *next;

		for (; in; in = next) {
			next = in->next;
			inode_free(in);
		}
	}
	free(t->buckets);
	t->buckets = NULL;
	pthread_mutex_destroy(&t->lock);
}

/* Table lock held. */
static struct sfs_inode *find_locked(struct sfs_itable *t, strata_ino_t ino)
{
	struct sfs_inode *in = t->buckets[bucket_of(ino)];

	while (in && in->ino != ino)
		in = in->next;
	return in;
}

/* Table lock held. Returns NULL on ENOMEM. */
static struct sfs_inode *insert_locked(struct sfs_itable *t, strata_ino_t ino)
{
	struct sfs_inode *in = calloc(1, sizeof(*in));
	size_t b = bucket_of(ino);

	if (!in)
		return NULL;
	in->ino = ino;
	in->has_caps = -1;
	pthread_mutex_init(&in->lock, NULL);
	in->next = t->buckets[b];
	t->buckets[b] = in;
	t->count++;
	return in;
}

/* Table lock held: unlinks and frees in if nothing holds it. */
static void maybe_drop_locked(struct sfs_itable *t, struct sfs_inode *in)
{
	struct sfs_inode **pp;

	if (in->nlookup > 0 || in->nref > 0)
		return;
	for (pp = &t->buckets[bucket_of(in->ino)]; *pp; pp = &(*pp)->next) {
		if (*pp == in) {
			uint64_t cur = atomic_load(&t->freed_changed_at);

			/* nothing else holds in: its changed_at is settled (an
			 * inode unlinked here is in no listing fetched since) */
			while (!in->unlinked && cur < in->changed_at &&
			       !atomic_compare_exchange_weak(&t->freed_changed_at, &cur,
							     in->changed_at))
				;
			*pp = in->next;
			t->count--;
			inode_free(in);
			return;
		}
	}
}

static void apply_attr(struct sfs_inode *in, struct strata_attr *a, uint64_t stamp)
{
	pthread_mutex_lock(&in->lock);
	bool stale = stamp != 0 && in->changed_at > stamp;
	in->mode = a->mode;
	in->gid = a->gid;
	if (S_ISREG(a->mode) || S_ISDIR(a->mode)) {
		in->layout = a->layout;
		in->have_layout = a->layout.chunk_size != 0;
	}
	in->seen_mtime = a->mtime_ns;
	in->seen_size = a->size;
	if (!stale && (!in->size_dirty || a->size > in->size))
		in->size = a->size;
	a->size = in->size;
	if (in->data_written && in->write_mtime > a->mtime_ns) {
		a->mtime_ns = in->write_mtime;
		a->ctime_ns = STRATA_MAX(a->ctime_ns, in->write_mtime);
	}
	pthread_mutex_unlock(&in->lock);
}

void sfs_inode_note(struct sfs *fs, struct strata_attr *a, bool lookup, uint64_t stamp)
{
	struct sfs_itable *t = &fs->itable;
	struct sfs_inode *in;

	pthread_mutex_lock(&t->lock);
	in = find_locked(t, a->ino);
	if (!in && lookup)
		in = insert_locked(t, a->ino);
	if (!in) {
		pthread_mutex_unlock(&t->lock);
		return;
	}
	if (lookup)
		in->nlookup++;
	in->nref++;
	pthread_mutex_unlock(&t->lock);

	apply_attr(in, a, stamp);
	sfs_inode_put(fs, in);
}

void sfs_inode_forget(struct sfs *fs, strata_ino_t ino, uint64_t n)
{
	struct sfs_itable *t = &fs->itable;
	struct sfs_inode *in;

	pthread_mutex_lock(&t->lock);
	in = find_locked(t, ino);
	if (in) {
		in->nlookup = in->nlookup > n ? in->nlookup - n : 0;
		maybe_drop_locked(t, in);
	}
	pthread_mutex_unlock(&t->lock);
}

struct sfs_inode *sfs_inode_get(struct sfs *fs, strata_ino_t ino, bool create)
{
	struct sfs_itable *t = &fs->itable;
	struct sfs_inode *in;

	pthread_mutex_lock(&t->lock);
	in = find_locked(t, ino);
	if (!in && create)
		in = insert_locked(t, ino);
	if (in)
		in->nref++;
	pthread_mutex_unlock(&t->lock);
	return in;
}

void sfs_inode_put(struct sfs *fs, struct sfs_inode *in)
{
	struct sfs_itable *t = &fs->itable;

	if (!in)
		return;
	pthread_mutex_lock(&t->lock);
	in->nref--;
	maybe_drop_locked(t, in);
	pthread_mutex_unlock(&t->lock);
}

void sfs_inode_foreach(struct sfs *fs, void (*fn)(struct sfs *, struct sfs_inode *))
{
	struct sfs_itable *t = &fs->itable;

	/* Shutdown only: no request runs concurrently, so calling fn with the
	 * table lock held cannot deadlock against entry locks. */
	pthread_mutex_lock(&t->lock);
	for (size_t i = 0; i < SFS_ITABLE_BUCKETS; i++)
		for (struct sfs_inode *in = t->buckets[i]; in; in = in->next)
			fn(fs, in);
	pthread_mutex_unlock(&t->lock);
}
