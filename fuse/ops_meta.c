/* ops_meta.c — FUSE requests that touch only the namespace: lookup, forget,
 * getattr, setattr, mknod, mkdir, unlink, rmdir, symlink, readlink, rename,
 * link, statfs and the xattr calls. Each maps onto one strata-meta call
 * (plus chunk trimming for a shrinking truncate). The chunks of a file whose
 * last link and last session are gone are removed by strata-meta's GC.
 *
 * Permission checks are the kernel's (default_permissions); the caller's
 * uid/gid become the owner of new inodes, and a setgid directory passes its
 * group on (and its setgid bit to new directories), as on local filesystems.
 * The kernel updates its own dentry and inode caches after each of these
 * operations; we never need to invalidate them for our own mutations. */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <stdio.h> /* RENAME_NOREPLACE, RENAME_EXCHANGE */
#include <sys/xattr.h>

#include "fs/cleanup.h"
#include "fuse/fuse-internal.h"
#include "fs/log.h"

#define XATTR_CAPS "security.capability"

static struct sfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

void sfs_fill_stat(struct sfs *fs, const struct strata_attr *a, struct stat *st)
{
	uint32_t blk = a->layout.chunk_size ? a->layout.chunk_size : STRATA_DEFAULT_CHUNK_SIZE;

	memset(st, 0, sizeof(*st));
	st->st_ino = a->ino;
	st->st_mode = a->mode;
	st->st_nlink = a->nlink;
	st->st_uid = a->uid;
	st->st_gid = a->gid;
	st->st_rdev = a->rdev;
	st->st_size = (off_t)a->size;
	st->st_blksize = STRATA_MIN(blk, SFS_MAX_IO);
	st->st_blocks = (blkcnt_t)((a->size + 511) / 512);
	st->st_atim.tv_sec = a->atime_ns / 1000000000ll;
	st->st_atim.tv_nsec = a->atime_ns % 1000000000ll;
	st->st_mtim.tv_sec = a->mtime_ns / 1000000000ll;
	st->st_mtim.tv_nsec = a->mtime_ns % 1000000000ll;
	st->st_ctim.tv_sec = a->ctime_ns / 1000000000ll;
	st->st_ctim.tv_nsec = a->ctime_ns % 1000000000ll;
}

/* Replies with an entry for a (counted as one kernel lookup); caches a if
 * stamp (sfs_attr_stamp before the meta call) is not 0. */
static void reply_entry(fuse_req_t req, struct strata_attr *a, uint64_t stamp)
{
	struct sfs *fs = FS(req);
	struct fuse_entry_param e = {0};
	struct strata_attr raw = *a;

	sfs_inode_note(fs, a, true, stamp);
	sfs_attr_put(fs, &raw, stamp);
	e.ino = a->ino;
	e.generation = a->generation;
	e.attr_timeout = fs->o.attr_timeout;
	e.entry_timeout = fs->o.entry_timeout;
	sfs_fill_stat(fs, a, &e.attr);
	if (fuse_reply_entry(req, &e) < 0)
		sfs_inode_forget(fs, a->ino, 1);
}

/* stamp: as for sfs_inode_note (0 for an attribute served from the cache,
 * which is only served while no local change is newer than it). */
static void reply_attr(fuse_req_t req, struct strata_attr *a, uint64_t stamp)
{
	struct sfs *fs = FS(req);
	struct stat st;

	sfs_inode_note(fs, a, false, stamp);
	sfs_fill_stat(fs, a, &st);
	fuse_reply_attr(req, &st, fs->o.attr_timeout);
}

/* "No such entry", for the kernel to cache ttl seconds (ino 0). */
static void reply_negative(fuse_req_t req, double ttl)
{
	struct fuse_entry_param e = {.entry_timeout = ttl};

	fuse_reply_entry(req, &e);
}

static void op_lookup(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	struct sfs *fs = FS(req);
	struct strata_attr a;
	uint64_t stamp;
	double ttl;
	int r;

	switch (sfs_dircache_lookup(fs, parent, name, &a, &stamp, &ttl)) {
	case SFS_DC_ABSENT:
		reply_negative(req, ttl);
		return;
	case SFS_DC_FOUND:
		reply_entry(req, &a, stamp);
		return;
	case SFS_DC_MISS:
		break;
	}
	stamp = sfs_attr_stamp(fs);
	r = SFS_CALL(fs, SFS_IDEM, meta_lookup(fs->mc, parent, name, &a));
	if (r == -ENOENT && fs->o.negative_timeout > 0) {
		reply_negative(req, fs->o.negative_timeout);
		return;
	}
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	reply_entry(req, &a, stamp);
}

static void op_forget(fuse_req_t req, fuse_ino_t ino, uint64_t nlookup)
{
	sfs_inode_forget(FS(req), ino, nlookup);
	fuse_reply_none(req);
}

static void op_forget_multi(fuse_req_t req, size_t count, struct fuse_forget_data *forgets)
{
	for (size_t i = 0; i < count; i++)
		sfs_inode_forget(FS(req), forgets[i].ino, forgets[i].nlookup);
	fuse_reply_none(req);
}

static void op_getattr(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct strata_attr a;
	uint64_t stamp;
	int r;

	/* The stamp before the cache is read: a change that lands meanwhile
	 * (a truncate) makes the attribute stale for the inode's length. */
	stamp = sfs_attr_stamp(fs);
	if (sfs_attr_get(fs, ino, &a)) {
		reply_attr(req, &a, stamp);
		return;
	}
	r = SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, ino, &a));
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	sfs_attr_put(fs, &a, stamp);
	reply_attr(req, &a, stamp);
}

int sfs_get_layout(struct sfs *fs, strata_ino_t ino, struct strata_layout *ret)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);
	struct strata_attr a;
	bool have = false;
	int r;

	if (in) {
		pthread_mutex_lock(&in->lock);
		have = in->have_layout;
		if (have)
			*ret = in->layout;
		pthread_mutex_unlock(&in->lock);
		sfs_inode_put(fs, in);
	}
	if (have)
		return 0;
	uint64_t stamp = sfs_attr_stamp(fs);
	r = SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, ino, &a));
	if (r < 0)
		return r;
	sfs_inode_note(fs, &a, false, stamp);
	*ret = a.layout;
	return 0;
}

/* Removes the chunks at and past byte `size`. */
static int trim_chunks(struct sfs *fs, strata_ino_t ino, const struct strata_layout *l,
		       uint64_t size)
{
	uint64_t cs = l->chunk_size;
	uint64_t first = (size + cs - 1) / cs;
	int r;

	if (first <= UINT32_MAX) {
		r = SFS_CALL(fs, SFS_IDEM, chunk_remove_file(fs->cc, l, ino, (uint32_t)first));
		if (r < 0)
			return r;
	}
	if (size % cs) {
		struct chunk_id id = {.ino = ino, .index = (uint32_t)(size / cs)};
		uint64_t ids = 0; /* the same request id on every retry (exactly once) */

		r = SFS_CALL(fs, SFS_IDEM,
			     chunk_truncate_ids(fs->cc, l, id, (uint32_t)(size % cs), &ids));
		if (r < 0)
			return r;
	}
	return 0;
}

int sfs_truncate_locked(struct sfs *fs, struct sfs_inode *in, strata_ino_t ino,
			const struct strata_layout *layout, uint64_t old, struct strata_setattr *sa,
			struct strata_attr *ret_attr)
{
	int r;

	if (sa->size < old && layout->chunk_size) {
		r = trim_chunks(fs, ino, layout, sa->size);
		if (r < 0)
			return r;
	}
	r = SFS_CALL(fs, SFS_IDEM, meta_setattr(fs->mc, ino, sa, ret_attr));
	if (in)
		sfs_attr_changed_locked(fs, in);
	if (r < 0)
		return r;
	if (in) {
		in->size = ret_attr->size;
		in->size_dirty = false;
		in->seen_size = ret_attr->size;
	}
	return 0;
}

static void fill_setattr(const struct stat *st, int to_set, struct strata_setattr *sa)
{
	memset(sa, 0, sizeof(*sa));
	if (to_set & FUSE_SET_ATTR_MODE) {
		sa->valid |= STRATA_SET_MODE;
		sa->mode = st->st_mode;
	}
	if (to_set & FUSE_SET_ATTR_UID) {
		sa->valid |= STRATA_SET_UID;
		sa->uid = st->st_uid;
	}
	if (to_set & FUSE_SET_ATTR_GID) {
		sa->valid |= STRATA_SET_GID;
		sa->gid = st->st_gid;
	}
	if (to_set & FUSE_SET_ATTR_SIZE) {
		sa->valid |= STRATA_SET_SIZE;
		sa->size = (uint64_t)st->st_size;
	}
	if (to_set & FUSE_SET_ATTR_ATIME_NOW) {
		sa->valid |= STRATA_SET_ATIME_NOW;
	} else if (to_set & FUSE_SET_ATTR_ATIME) {
		sa->valid |= STRATA_SET_ATIME;
		sa->atime_ns = st->st_atim.tv_sec * 1000000000ll + st->st_atim.tv_nsec;
	}
	if (to_set & FUSE_SET_ATTR_MTIME_NOW) {
		sa->valid |= STRATA_SET_MTIME_NOW;
	} else if (to_set & FUSE_SET_ATTR_MTIME) {
		sa->valid |= STRATA_SET_MTIME;
		sa->mtime_ns = st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec;
	}
	if (to_set & FUSE_SET_ATTR_CTIME) {
		sa->valid |= STRATA_SET_CTIME;
		sa->ctime_ns = st->st_ctim.tv_sec * 1000000000ll + st->st_ctim.tv_nsec;
	}
}

/* setattr with a size: trims chunks first when the file shrinks. */
static int setattr_size(struct sfs *fs, fuse_ino_t ino, struct strata_setattr *sa,
			struct strata_attr *ret)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, true);
	struct strata_attr cur;
	uint64_t old;
	int r;

	if (!in)
		return -ENOMEM;
	pthread_mutex_lock(&in->lock);
	/* The current length from meta: the shrink decision must not rest on
	 * a stale cached size. */
	r = SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, ino, &cur));
	if (r < 0)
		goto out;
	if (!S_ISREG(cur.mode)) {
		r = S_ISDIR(cur.mode) ? -EISDIR : -EINVAL;
		goto out;
	}
	in->layout = cur.layout;
	in->have_layout = cur.layout.chunk_size != 0;
	old = STRATA_MAX(cur.size, in->size_dirty ? in->size : 0);
	r = sfs_truncate_locked(fs, in, ino, &cur.layout, old, sa, ret);
out:
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
	return r;
}

#define TIMES_ONLY                                                                                 \
	(STRATA_SET_ATIME | STRATA_SET_MTIME | STRATA_SET_ATIME_NOW | STRATA_SET_MTIME_NOW |       \
	 STRATA_SET_CTIME)

/* The kernel writes back the times of a cached inode (writeback cache) even
 * after its last link and session are gone and meta has freed it; nobody
 * can observe that inode any more, so such a setattr succeeds with the
 * last known attributes and nlink 0 instead of failing the writeback. */
static int gone_attr(struct sfs *fs, fuse_ino_t ino, const struct stat *st, struct strata_attr *ret)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);
	int r = -ENOENT;

	if (!in)
		return r;
	pthread_mutex_lock(&in->lock);
	if (in->mode) {
		memset(ret, 0, sizeof(*ret));
		ret->ino = ino;
		ret->mode = in->mode;
		ret->gid = in->gid;
		ret->size = in->size;
		ret->layout = in->layout;
		ret->atime_ns = st->st_atim.tv_sec * 1000000000ll + st->st_atim.tv_nsec;
		ret->mtime_ns = st->st_mtim.tv_sec * 1000000000ll + st->st_mtim.tv_nsec;
		ret->ctime_ns = st->st_ctim.tv_sec * 1000000000ll + st->st_ctim.tv_nsec;
		r = 0;
	}
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
	return r;
}

/* Times set explicitly (utimens, or the kernel's writeback of its own
 * mtime) win over the "now" we would record for earlier writes at close. */
static void explicit_mtime(struct sfs *fs, fuse_ino_t ino)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);

	if (!in)
		return;
	pthread_mutex_lock(&in->lock);
	in->data_written = false;
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
}

static void op_setattr(fuse_req_t req, fuse_ino_t ino, struct stat *st, int to_set,
		       struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct strata_setattr sa;
	struct strata_attr a;
	int r;

	/* Taken before the call: meta's answer carries the length it had then,
	 * and a truncate here that overtook it (the kernel sends a times-only
	 * SETATTR from its writeback without the inode's lock) must not have
	 * that old length raise the inode's again (then a later write to that
	 * length would not mark it unrecorded, and it would be lost). */
	uint64_t stamp = sfs_attr_stamp(fs);

	fill_setattr(st, to_set, &sa);
	if (!(sa.valid & ~(STRATA_SET_MTIME | STRATA_SET_CTIME)) && (sa.valid & STRATA_SET_MTIME) &&
	    sfs_attr_echo(fs, ino, sa.mtime_ns, &a)) {
		reply_attr(req, &a, stamp);
		return;
	}
	if (sa.valid & (STRATA_SET_MTIME | STRATA_SET_MTIME_NOW))
		explicit_mtime(fs, ino);
	if (sa.valid & STRATA_SET_SIZE)
		r = setattr_size(fs, ino, &sa, &a);
	else
		r = SFS_CALL(fs, SFS_IDEM, meta_setattr(fs->mc, ino, &sa, &a));
	sfs_attr_changed(fs, ino);
	if (r == -ENOENT && !(sa.valid & ~TIMES_ONLY) && gone_attr(fs, ino, st, &a) == 0)
		r = 0;
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	reply_attr(req, &a, stamp); /* stale by our own change: the length stays ours */
}

void sfs_new_owner(fuse_req_t req, fuse_ino_t parent, bool isdir, uint32_t *mode, uint32_t *uid,
		   uint32_t *gid)
{
	struct sfs *fs = FS(req);
	const struct fuse_ctx *c = fuse_req_ctx(req);
	struct sfs_inode *in = sfs_inode_get(fs, parent, false);
	uint32_t pmode = 0, pgid = 0;
	struct strata_attr a;

	*uid = c->uid;
	*gid = c->gid;
	if (in) {
		pthread_mutex_lock(&in->lock);
		pmode = in->mode;
		pgid = in->gid;
		pthread_mutex_unlock(&in->lock);
		sfs_inode_put(fs, in);
	}
	if (pmode == 0 && SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, parent, &a)) == 0) {
		pmode = a.mode;
		pgid = a.gid;
	}
	if (pmode & S_ISGID) {
		*gid = pgid;
		if (isdir)
			*mode |= S_ISGID;
	}
}

/* Replies to mknod, mkdir or symlink in parent, whose meta call returned r
 * (and *a, asked for at stamp): a failure may still have changed the parent,
 * so its cached attributes go; a success patches them (sfs_attr_created),
 * unless the answer may be the record of an earlier attempt (op->resent):
 * the parent we cached may already count that change. */
static void reply_created(fuse_req_t req, struct sfs *fs, fuse_ino_t parent, const char *name,
			  int r, struct strata_attr *a, uint64_t stamp, const struct sfs_op *op)
{
	sfs_dircache_after(fs, parent, name, r, true);
	if (r < 0) {
		sfs_attr_changed(fs, parent);
		fuse_reply_err(req, -r);
		return;
	}
	if (op->resent) {
		sfs_attr_changed(fs, parent);
		reply_entry(req, a, 0); /* the record's attributes: not cached */
		return;
	}
	sfs_attr_created(fs, parent, a, stamp);
	reply_entry(req, a, stamp);
}

static void op_mknod(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode, dev_t rdev)
{
	struct sfs *fs = FS(req);
	uint32_t m = mode, uid, gid;
	struct strata_attr a;
	struct sfs_op op;
	uint64_t stamp;
	int r;

	sfs_op_of(fs, req, &op);
	sfs_new_owner(req, parent, false, &m, &uid, &gid);
	stamp = sfs_attr_stamp(fs);
	r = SFS_MUTATE(fs, &op, meta_mknod(fs->mc, &op.id, parent, name, m, rdev, uid, gid, &a));
	reply_created(req, fs, parent, name, r, &a, stamp, &op);
}

static void op_mkdir(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode)
{
	struct sfs *fs = FS(req);
	uint32_t m = S_IFDIR | (mode & 07777), uid, gid;
	struct strata_attr a;
	struct sfs_op op;
	uint64_t stamp;
	int r;

	sfs_op_of(fs, req, &op);
	sfs_new_owner(req, parent, true, &m, &uid, &gid);
	stamp = sfs_attr_stamp(fs);
	r = SFS_MUTATE(fs, &op, meta_mkdir(fs->mc, &op.id, parent, name, m, uid, gid, &a));
	reply_created(req, fs, parent, name, r, &a, stamp, &op);
}

/* unlink (dir false) and rmdir. When meta says what changed, the removed
 * inode's and the parent's cached attributes become meta's answer: the
 * GETATTR that follows a removal (the kernel drops both) and the kernel's
 * write-back of the removed inode's ctime cost no meta call. Without the
 * answer (an older server, a resent request), every cached attribute goes,
 * as the removed inode cannot be named. */
static void op_remove(fuse_req_t req, fuse_ino_t parent, const char *name, bool dir)
{
	struct sfs *fs = FS(req);
	struct meta_removed m = {0};
	struct sfs_op op;
	uint64_t stamp;
	int r;

	sfs_op_of(fs, req, &op);
	stamp = sfs_attr_stamp(fs);
	r = SFS_MUTATE(fs, &op, meta_remove(fs->mc, &op.id, parent, name, dir, &m));
	sfs_dircache_after(fs, parent, name, r, false);
	if (r == 0 && m.known && !op.resent) {
		sfs_attr_replied(fs, &m.inode, stamp, true);
		sfs_attr_replied(fs, &m.parent, stamp, false);
	} else {
		sfs_attr_changed_all(fs);
	}
	fuse_reply_err(req, -r);
}

static void op_unlink(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	op_remove(req, parent, name, false);
}

static void op_rmdir(fuse_req_t req, fuse_ino_t parent, const char *name)
{
	op_remove(req, parent, name, true);
}

static void op_symlink(fuse_req_t req, const char *link, fuse_ino_t parent, const char *name)
{
	struct sfs *fs = FS(req);
	const struct fuse_ctx *c = fuse_req_ctx(req);
	struct strata_attr a;
	struct sfs_op op;
	uint64_t stamp;
	int r;

	if (strlen(link) >= STRATA_PATH_MAX) {
		fuse_reply_err(req, ENAMETOOLONG);
		return;
	}
	sfs_op_of(fs, req, &op);
	stamp = sfs_attr_stamp(fs);
	r = SFS_MUTATE(fs, &op,
		       meta_symlink(fs->mc, &op.id, parent, name, link, c->uid, c->gid, &a));
	reply_created(req, fs, parent, name, r, &a, stamp, &op);
}

static void op_readlink(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs *fs = FS(req);
	_cleanup_free_ char *buf = malloc(STRATA_PATH_MAX + 1);
	int r;

	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	r = SFS_CALL(fs, SFS_IDEM, meta_readlink(fs->mc, ino, buf, STRATA_PATH_MAX + 1));
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	fuse_reply_readlink(req, buf);
}

static void op_rename(fuse_req_t req, fuse_ino_t parent, const char *name, fuse_ino_t newparent,
		      const char *newname, unsigned int flags)
{
	struct sfs *fs = FS(req);
	struct meta_renamed m = {0};
	struct sfs_op op;
	uint64_t stamp;
	int r;

	if (flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	sfs_op_of(fs, req, &op);
	stamp = sfs_attr_stamp(fs);
	r = SFS_MUTATE(fs, &op,
		       meta_rename_ex(fs->mc, &op.id, parent, name, newparent, newname, flags, &m));
	/* an exchange keeps both names (to other inodes): "added" drops what
	 * the listing knew of them. Without meta's answer the rename may have
	 * changed nothing (the same inode under both names): not known. */
	sfs_dircache_after(fs, parent, name, r == 0 && !m.known ? -EAGAIN : r,
			   (flags & RENAME_EXCHANGE) != 0);
	sfs_dircache_after(fs, newparent, newname, r == 0 && !m.known ? -EAGAIN : r, true);
	if (r == 0 && m.known && !op.resent) {
		/* the kernel writes back the ctime of the inodes whose names
		 * moved (and of one replaced): both are echoes */
		sfs_attr_replied(fs, &m.inode, stamp, true);
		if (m.has_other)
			sfs_attr_replied(fs, &m.other, stamp, true);
		sfs_attr_replied(fs, &m.parent, stamp, false);
		if (m.newparent.ino != m.parent.ino)
			sfs_attr_replied(fs, &m.newparent, stamp, false);
	} else {
		sfs_attr_changed_all(fs);
	}
	fuse_reply_err(req, -r);
}

static void op_link(fuse_req_t req, fuse_ino_t ino, fuse_ino_t newparent, const char *newname)
{
	struct sfs *fs = FS(req);
	struct strata_attr a;
	struct sfs_op op;

	sfs_op_of(fs, req, &op);
	int r = SFS_MUTATE(fs, &op, meta_link(fs->mc, &op.id, ino, newparent, newname, &a));

	sfs_dircache_after(fs, newparent, newname, r, true);
	sfs_attr_changed_all(fs);
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	reply_entry(req, &a, 0);
}

static void op_statfs(fuse_req_t req, fuse_ino_t ino)
{
	struct sfs *fs = FS(req);
	struct strata_statfs s;
	struct statvfs v = {0};
	int r = SFS_CALL(fs, SFS_IDEM, meta_statfs(fs->mc, &s));
	uint32_t bs;

	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	bs = s.bsize ? s.bsize : 4096;
	v.f_bsize = bs;
	v.f_frsize = bs;
	v.f_blocks = s.total_bytes / bs;
	v.f_bfree = s.free_bytes / bs;
	v.f_bavail = s.avail_bytes / bs;
	v.f_files = s.total_inodes;
	v.f_ffree = s.total_inodes > s.used_inodes ? s.total_inodes - s.used_inodes : 0;
	v.f_favail = v.f_ffree;
	v.f_namemax = s.namemax ? s.namemax : STRATA_NAME_MAX;
	fuse_reply_statfs(req, &v);
}

/* ---- xattrs ---------------------------------------------------------------
 * The kernel asks for security.capability before every write to a file
 * (to drop file capabilities); the answer is cached per inode and kept up to
 * date by our own setxattr/removexattr. */
static int caps_cached(struct sfs *fs, fuse_ino_t ino)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, false);
	int v = -1;

	if (in) {
		pthread_mutex_lock(&in->lock);
		v = in->has_caps;
		pthread_mutex_unlock(&in->lock);
		sfs_inode_put(fs, in);
	}
	return v;
}

static void caps_set(struct sfs *fs, fuse_ino_t ino, const char *name, int v)
{
	struct sfs_inode *in;

	if (strcmp(name, XATTR_CAPS) != 0)
		return;
	in = sfs_inode_get(fs, ino, false);
	if (in) {
		pthread_mutex_lock(&in->lock);
		in->has_caps = (int8_t)v;
		pthread_mutex_unlock(&in->lock);
		sfs_inode_put(fs, in);
	}
}

static void op_setxattr(fuse_req_t req, fuse_ino_t ino, const char *name, const char *value,
			size_t size, int flags)
{
	struct sfs *fs = FS(req);
	struct sfs_op op;
	int r;

	if (strlen(name) > STRATA_XATTR_NAME_MAX) {
		fuse_reply_err(req, ERANGE);
		return;
	}
	if (size > STRATA_XATTR_SIZE_MAX) {
		fuse_reply_err(req, E2BIG);
		return;
	}
	if (strcmp(name, SFS_BLOB_PIN_XATTR) == 0) { /* node-local, never in meta */
		fuse_reply_err(req, -sfs_blob_pin(fs, ino, value, size));
		return;
	}
	sfs_op_of(fs, req, &op);
	r = SFS_MUTATE(fs, &op,
		       meta_setxattr(fs->mc, &op.id, ino, name, value, size, (uint32_t)flags));
	sfs_attr_changed(fs, ino);
	if (r == 0)
		caps_set(fs, ino, name, 1);
	fuse_reply_err(req, -r);
}

/* Allocates the reply buffer of a getxattr / listxattr of *size bytes (none
 * for a size probe), capping *size at max. Returns false after replying
 * ENOMEM. */
static bool xattr_buf(fuse_req_t req, size_t *size, size_t max, char **ret)
{
	*ret = NULL;
	if (*size == 0)
		return true;
	*size = STRATA_MIN(*size, max);
	*ret = malloc(*size);
	if (!*ret)
		fuse_reply_err(req, ENOMEM);
	return *ret != NULL;
}

/* Replies to a getxattr / listxattr whose meta call returned r: the length
 * for a size probe (size 0), else the bytes in buf. */
static void reply_xattr(fuse_req_t req, int r, size_t size, const char *buf)
{
	if (r < 0)
		fuse_reply_err(req, -r);
	else if (size == 0)
		fuse_reply_xattr(req, (size_t)r);
	else
		fuse_reply_buf(req, buf, (size_t)r);
}

/* The pinned table digest of a blob (blobcache.h): node-local state. */
static void reply_pin(fuse_req_t req, struct sfs *fs, fuse_ino_t ino, size_t size)
{
	uint8_t sha[32];

	if (!fs->bc || !sfs_blobcache_pinned(fs->bc, ino, sha))
		fuse_reply_err(req, ENODATA);
	else if (size == 0)
		fuse_reply_xattr(req, sizeof(sha));
	else if (size < sizeof(sha))
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, (const char *)sha, sizeof(sha));
}

/* The request counters (stats.c): node-local, never in meta. */
static void reply_stats(fuse_req_t req, struct sfs *fs, size_t size)
{
	_cleanup_free_ char *text = NULL;
	size_t len = 0;
	int r = sfs_stats_text(fs, &text, &len);

	if (r < 0)
		fuse_reply_err(req, -r);
	else if (size == 0)
		fuse_reply_xattr(req, len);
	else if (size < len)
		fuse_reply_err(req, ERANGE);
	else
		fuse_reply_buf(req, text, len);
}

static void op_getxattr(fuse_req_t req, fuse_ino_t ino, const char *name, size_t size)
{
	struct sfs *fs = FS(req);
	_cleanup_free_ char *buf = NULL;
	int r;

	if (strcmp(name, XATTR_CAPS) == 0 && caps_cached(fs, ino) == 0) {
		fuse_reply_err(req, ENODATA);
		return;
	}
	if (strcmp(name, SFS_BLOB_PIN_XATTR) == 0) {
		reply_pin(req, fs, ino, size);
		return;
	}
	if (strcmp(name, SFS_STATS_XATTR) == 0) {
		reply_stats(req, fs, size);
		return;
	}
	if (!xattr_buf(req, &size, STRATA_XATTR_SIZE_MAX, &buf))
		return;
	r = SFS_CALL(fs, SFS_IDEM, meta_getxattr(fs->mc, ino, name, buf, size));
	if (r == -ENODATA)
		caps_set(fs, ino, name, 0);
	reply_xattr(req, r, size, buf);
}

static void op_listxattr(fuse_req_t req, fuse_ino_t ino, size_t size)
{
	struct sfs *fs = FS(req);
	_cleanup_free_ char *buf = NULL;
	int r;

	if (!xattr_buf(req, &size, XATTR_LIST_MAX, &buf))
		return;
	r = SFS_CALL(fs, SFS_IDEM, meta_listxattr(fs->mc, ino, buf, size));
	reply_xattr(req, r, size, buf);
}

static void op_removexattr(fuse_req_t req, fuse_ino_t ino, const char *name)
{
	struct sfs *fs = FS(req);
	struct sfs_op op;

	sfs_op_of(fs, req, &op);
	int r = SFS_MUTATE(fs, &op, meta_removexattr(fs->mc, &op.id, ino, name));

	sfs_attr_changed(fs, ino);
	if (r == 0 || r == -ENODATA)
		caps_set(fs, ino, name, 0);
	fuse_reply_err(req, -r);
}

/* Defined in ops_file.c and ops_dir.c. */
void sfs_op_open(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void sfs_op_create(fuse_req_t, fuse_ino_t, const char *, mode_t, struct fuse_file_info *);
void sfs_op_release(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void sfs_op_read(fuse_req_t, fuse_ino_t, size_t, off_t, struct fuse_file_info *);
void sfs_op_write(fuse_req_t, fuse_ino_t, const char *, size_t, off_t, struct fuse_file_info *);
void sfs_op_flush(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void sfs_op_fsync(fuse_req_t, fuse_ino_t, int, struct fuse_file_info *);
void sfs_op_fallocate(fuse_req_t, fuse_ino_t, int, off_t, off_t, struct fuse_file_info *);
void sfs_op_opendir(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void sfs_op_readdir(fuse_req_t, fuse_ino_t, size_t, off_t, struct fuse_file_info *);
void sfs_op_readdirplus(fuse_req_t, fuse_ino_t, size_t, off_t, struct fuse_file_info *);
void sfs_op_releasedir(fuse_req_t, fuse_ino_t, struct fuse_file_info *);
void sfs_op_fsyncdir(fuse_req_t, fuse_ino_t, int, struct fuse_file_info *);

const struct fuse_lowlevel_ops sfs_ops = {
    .init = sfs_op_init,
    .destroy = sfs_op_destroy,
    .lookup = op_lookup,
    .forget = op_forget,
    .forget_multi = op_forget_multi,
    .getattr = op_getattr,
    .setattr = op_setattr,
    .readlink = op_readlink,
    .mknod = op_mknod,
    .mkdir = op_mkdir,
    .unlink = op_unlink,
    .rmdir = op_rmdir,
    .symlink = op_symlink,
    .rename = op_rename,
    .link = op_link,
    .open = sfs_op_open,
    .read = sfs_op_read,
    .write = sfs_op_write,
    .flush = sfs_op_flush,
    .release = sfs_op_release,
    .fsync = sfs_op_fsync,
    .opendir = sfs_op_opendir,
    .readdir = sfs_op_readdir,
    .releasedir = sfs_op_releasedir,
    .fsyncdir = sfs_op_fsyncdir,
    .statfs = op_statfs,
    .setxattr = op_setxattr,
    .getxattr = op_getxattr,
    .listxattr = op_listxattr,
    .removexattr = op_removexattr,
    .create = sfs_op_create,
    .readdirplus = sfs_op_readdirplus,
    .fallocate = sfs_op_fallocate,
};
