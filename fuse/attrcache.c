/* attrcache.c — the daemon's own attribute cache: GETATTR answered without
 * a meta round trip when this mount fetched the inode's attributes less than
 * attr_timeout ago and has not changed the inode since.
 *
 * Why it exists: with the writeback cache the kernel marks i_blocks stale on
 * every close (fuse_flush), and a directory's attributes on every create or
 * unlink in it; with default_permissions the next path walk or stat then
 * sends GETATTR even though its attr_timeout has not run out. Answering those
 * from here costs one FUSE round trip instead of two plus a meta RPC, and is
 * exactly as fresh as the kernel's own cache with the same timeout: changes
 * made on other nodes are seen once the entry expires.
 *
 * Invariants (all fields under in->lock; the clocks are atomics):
 *  1. fs->attr_clock only grows. A local change ticks it *after* meta has
 *     applied the change and records the new value in in->changed_at (or in
 *     fs->ns_changed_at when the change may touch inodes we cannot name:
 *     unlink, rmdir, rename, link).
 *  2. A reply is cached with the stamp read before its call started, and
 *     only if no change was recorded after that stamp: a reply that may
 *     predate a change is never cached, and never served.
 *  3. An entry is served only while its stamp >= in->changed_at and
 *     >= fs->ns_changed_at and it has not expired. */
#include <string.h>

#include "fuse/fuse-internal.h"

uint64_t sfs_attr_stamp(struct sfs *fs)
{
	return atomic_load(&fs->attr_clock);
}

static uint64_t tick(struct sfs *fs)
{
	return atomic_fetch_add(&fs->attr_clock, 1) + 1;
}

/* in->lock held: no change recorded after stamp. */
static bool unchanged_since(struct sfs *fs, const struct sfs_inode *in, uint64_t stamp)
{
	return stamp != 0 && in->changed_at <= stamp && atomic_load(&fs->ns_changed_at) <= stamp;
}

/* in->lock held. */
static bool fresh_locked(struct sfs *fs, const struct sfs_inode *in)
{
	return unchanged_since(fs, in, in->cattr_stamp) && sfs_now_ns() < in->cattr_expire_ns;
}

void sfs_attr_put(struct sfs *fs, const struct strata_attr *a, uint64_t stamp)
{
	struct sfs_inode *in;

	if (fs->o.attr_timeout <= 0 || stamp == 0)
		return;
	in = sfs_inode_get(fs, a->ino, false);
	if (!in)
		return;
	pthread_mutex_lock(&in->lock);
	if (unchanged_since(fs, in, stamp) && stamp >= in->cattr_stamp) {
		in->cattr = *a;
		in->cattr_stamp = stamp;
		in->cattr_expire_ns = sfs_now_ns() + (uint64_t)(fs->o.attr_timeout * 1e9);
	}
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
}

bool sfs_attr_get(struct sfs *fs, strata_ino_t ino, struct strata_attr *ret)
{
	struct sfs_inode *in;
	bool hit;

	if (fs->o.attr_timeout <= 0)
		return false;
	in = sfs_inode_get(fs, ino, false);
	if (!in)
		return false;
	pthread_mutex_lock(&in->lock);
	hit = fresh_locked(fs, in);
	if (hit)
		*ret = in->cattr;
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
	return hit;
}

void sfs_attr_changed_locked(struct sfs *fs, struct sfs_inode *in)
{
	in->changed_at = tick(fs);
	in->cattr_stamp = 0;
}

void sfs_attr_changed(struct sfs *fs, strata_ino_t ino)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);

	if (!in)
		return;
	pthread_mutex_lock(&in->lock);
	sfs_attr_changed_locked(fs, in);
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
}

void sfs_attr_changed_all(struct sfs *fs)
{
	uint64_t c = tick(fs), cur = atomic_load(&fs->ns_changed_at);

	/* never backwards when two changes race */
	while (cur < c && !atomic_compare_exchange_weak(&fs->ns_changed_at, &cur, c))
		;
}

bool sfs_attr_unchanged_since(struct sfs *fs, strata_ino_t ino, uint64_t stamp)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);
	bool r;

	if (!in)
		return stamp != 0 && atomic_load(&fs->itable.freed_changed_at) <= stamp &&
		       atomic_load(&fs->ns_changed_at) <= stamp;
	pthread_mutex_lock(&in->lock);
	r = unchanged_since(fs, in, stamp);
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
	return r;
}

void sfs_attr_replied(struct sfs *fs, const struct strata_attr *a, uint64_t stamp, bool echo)
{
	struct sfs_inode *in = sfs_inode_get(fs, a->ino, false);
	bool ok;

	if (!in)
		return;
	pthread_mutex_lock(&in->lock);
	/* meta's state right after our change, as fresh as a fetch started
	 * then; unless a local change raced the call (meta may have applied it
	 * on either side of ours) */
	ok = fs->o.attr_timeout > 0 && unchanged_since(fs, in, stamp);
	sfs_attr_changed_locked(fs, in);
	in->times_echo = false;
	if (echo && a->nlink == 0)
		in->unlinked = true; /* its name is in no later listing */
	if (ok) {
		in->cattr = *a;
		in->cattr_stamp = in->changed_at;
		in->cattr_expire_ns = sfs_now_ns() + (uint64_t)(fs->o.attr_timeout * 1e9);
		in->times_echo = echo; /* the kernel writes back its ctime next */
	}
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
}

bool sfs_attr_echo(struct sfs *fs, strata_ino_t ino, int64_t mtime_ns, struct strata_attr *ret)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);
	bool hit;

	if (!in)
		return false;
	pthread_mutex_lock(&in->lock);
	hit = in->times_echo && fresh_locked(fs, in) && !in->data_written && !in->size_dirty &&
	      in->cattr.mtime_ns == mtime_ns;
	in->times_echo = false;
	if (hit)
		*ret = in->cattr;
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
	return hit;
}

void sfs_attr_created(struct sfs *fs, strata_ino_t parent, const struct strata_attr *child,
		      uint64_t stamp)
{
	struct sfs_inode *in = sfs_inode_get(fs, parent, false);
	bool patch;

	if (!in)
		return;
	pthread_mutex_lock(&in->lock);
	/* Patch only an entry that was fresh and untouched while we created:
	 * then meta's parent is exactly the cached one plus this change
	 * (meta/ns_entry.c: entry_add). */
	patch = fresh_locked(fs, in) && unchanged_since(fs, in, stamp);
	sfs_attr_changed_locked(fs, in);
	if (patch) {
		in->cattr.mtime_ns = in->cattr.ctime_ns = child->ctime_ns;
		if (S_ISDIR(child->mode))
			in->cattr.nlink++;
		in->cattr_stamp = in->changed_at;
	}
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
}
