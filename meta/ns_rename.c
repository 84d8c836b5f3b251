/* ns_rename.c — rename(2) and renameat2(2) semantics in one batch.
 *
 * Rules, in the order they are checked:
 *  - flags: only RENAME_NOREPLACE or RENAME_EXCHANGE (not both): -EINVAL;
 *  - both names valid, both parents directories, the source exists;
 *  - source and destination are the same inode: nothing to do (POSIX);
 *  - NOREPLACE with an existing destination: -EEXIST; EXCHANGE without: -ENOENT;
 *  - a directory may not move under itself: walking up from the new parent
 *    (through I(dir).parent) reaching the source gives -EINVAL (and the same
 *    for the destination directory of an EXCHANGE);
 *  - replacing: dir over non-dir -ENOTDIR, non-dir over dir -EISDIR, over a
 *    non-empty dir -ENOTEMPTY.
 * A replaced destination loses one link exactly as with unlink/rmdir
 * (orphan or GC). Directory nlink and parent pointers move with the entry. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "fs/cleanup.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"
#include "meta/ns-internal.h"

#ifndef RENAME_NOREPLACE
#define RENAME_NOREPLACE (1 << 0)
#endif
#ifndef RENAME_EXCHANGE
#define RENAME_EXCHANGE (1 << 1)
#endif
#define DEPTH_MAX 4096

struct rn {
	const char *name, *newname;
	uint32_t flags;
	struct inode p, np_store, *np;
	struct dentry sd, dd;
	struct inode src, dst;
	bool has_dst;
};

/* -EINVAL if `ino` is start or one of its ancestors. */
static int check_not_under(struct ns *ns, uint64_t start, uint64_t ino)
{
	uint64_t cur = start;
	struct inode in;

	for (int depth = 0; depth < DEPTH_MAX; depth++) {
		if (cur == ino)
			return -EINVAL;
		if (cur == STRATA_ROOT_INO)
			return 0;
		int r = ns_get_inode(ns, cur, &in);
		if (r < 0)
			return r == -ENOENT ? -EIO : r;
		cur = in.parent;
	}
	return -ELOOP;
}

static int rn_load(struct ns *ns, struct rn *x, uint64_t parent, uint64_t newparent)
{
	int r = meta_name_check(x->name) ?: meta_name_check(x->newname);

	if (r < 0)
		return r;
	if ((r = ns_get_dir(ns, parent, &x->p)) < 0)
		return r;
	x->np = &x->p;
	if (newparent != parent) {
		x->np = &x->np_store;
		if ((r = ns_get_dir(ns, newparent, x->np)) < 0)
			return r;
	}
	if ((r = ns_get_dentry(ns, parent, x->name, &x->sd)) < 0)
		return r;
	if ((r = ns_get_inode(ns, x->sd.ino, &x->src)) < 0)
		return r == -ENOENT ? -EIO : r;
	r = ns_get_dentry(ns, newparent, x->newname, &x->dd);
	if (r < 0 && r != -ENOENT)
		return r;
	x->has_dst = r == 0;
	if (!x->has_dst)
		return 0;
	r = ns_get_inode(ns, x->dd.ino, &x->dst);
	return r == -ENOENT ? -EIO : r;
}

static int rn_check(struct ns *ns, struct rn *x)
{
	bool sdir = mode_is_dir(x->src.a.mode), ddir = x->has_dst && mode_is_dir(x->dst.a.mode);
	bool moves = x->p.a.ino != x->np->a.ino;
	int r;

	if ((x->flags & RENAME_NOREPLACE) && x->has_dst)
		return -EEXIST;
	if ((x->flags & RENAME_EXCHANGE) && !x->has_dst)
		return -ENOENT;
	if (sdir && moves && (r = check_not_under(ns, x->np->a.ino, x->src.a.ino)) < 0)
		return r;
	if (x->flags & RENAME_EXCHANGE) {
		if (ddir && moves)
			return check_not_under(ns, x->p.a.ino, x->dst.a.ino);
		return 0;
	}
	if (!x->has_dst)
		return 0;
	if (sdir && !ddir)
		return -ENOTDIR;
	if (!sdir && ddir)
		return -EISDIR;
	return ddir ? ns_dir_empty(ns, x->dst.a.ino) : 0;
}

/* Moves directory `d` from directory `from` to `to` (nlink, parent). */
static void move_dir(struct inode *d, struct inode *from, struct inode *to)
{
	if (!mode_is_dir(d->a.mode) || from == to)
		return;
	from->a.nlink--;
	to->a.nlink++;
	d->parent = to->a.ino;
}

static void rn_finish(struct kv_batch *b, struct rn *x, int64_t now)
{
	x->p.a.mtime_ns = x->p.a.ctime_ns = now;
	x->np->a.mtime_ns = x->np->a.ctime_ns = now;
	ns_put_inode(b, &x->p);
	if (x->np != &x->p)
		ns_put_inode(b, x->np);
}

static int rn_apply_move(struct ns *ns, struct kv_batch *b, struct rn *x, int64_t now)
{
	struct dentry d = {x->src.a.ino, x->src.a.mode};
	struct key k;
	int r;

	key_dentry(&k, x->p.a.ino, x->name);
	kv_batch_del(b, k.b, k.len);
	ns_put_dentry(b, x->np->a.ino, x->newname, &d);
	if (x->has_dst) {
		if (mode_is_dir(x->dst.a.mode))
			x->np->a.nlink--;
		if ((r = ns_drop_link(ns, b, &x->dst)) < 0)
			return r;
	}
	move_dir(&x->src, &x->p, x->np);
	x->src.a.ctime_ns = now;
	ns_put_inode(b, &x->src);
	rn_finish(b, x, now);
	return 0;
}

static void rn_apply_exchange(struct kv_batch *b, struct rn *x, int64_t now)
{
	struct dentry ds = {x->src.a.ino, x->src.a.mode};
	struct dentry dd = {x->dst.a.ino, x->dst.a.mode};

	ns_put_dentry(b, x->p.a.ino, x->name, &dd);
	ns_put_dentry(b, x->np->a.ino, x->newname, &ds);
	move_dir(&x->src, &x->p, x->np);
	move_dir(&x->dst, x->np, &x->p);
	x->src.a.ctime_ns = x->dst.a.ctime_ns = now;
	ns_put_inode(b, &x->src);
	ns_put_inode(b, &x->dst);
	rn_finish(b, x, now);
}

static int rename_locked(struct ns *ns, struct kv_batch *b, struct rn *x, uint64_t parent,
			 uint64_t newparent)
{
	int r = rn_load(ns, x, parent, newparent);

	if (r < 0)
		return r;
	if (x->has_dst && x->dd.ino == x->sd.ino)
		return 1; /* same inode: POSIX says do nothing */
	if ((r = rn_check(ns, x)) < 0)
		return r;
	if (x->flags & RENAME_EXCHANGE) {
		rn_apply_exchange(b, x, ns_now());
		return 0;
	}
	return rn_apply_move(ns, b, x, ns_now());
}

struct rename_args {
	struct rn x;
	uint64_t parent, newparent;
};

static int rename_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	struct rename_args *a = arg;
	int r = rename_locked(ns, b, &a->x, a->parent, a->newparent);

	if (r == 0) {
		ret->attr = a->x.src.a;
		ret->has_other = a->x.has_dst;
		if (a->x.has_dst)
			ret->other = a->x.dst.a;
		ret->parent = a->x.p.a;
		ret->newparent = a->x.np->a;
	}
	return r > 0 ? 0 : r; /* same inode: nothing to write */
}

int ns_rename_answer(struct ns *ns, const struct meta_opid *op, strata_ino_t parent,
		     const char *name, strata_ino_t newparent, const char *newname, uint32_t flags,
		     struct ns_answer *ret)
{
	struct rename_args a = {.x = {.name = name, .newname = newname, .flags = flags},
				.parent = parent,
				.newparent = newparent};

	if ((flags & ~(RENAME_NOREPLACE | RENAME_EXCHANGE)) ||
	    (flags & RENAME_NOREPLACE && flags & RENAME_EXCHANGE))
		return -EINVAL;
	return ns_mutate(ns, op, MSG_META_RENAME, rename_build, &a, ret);
}

int ns_rename(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	      strata_ino_t newparent, const char *newname, uint32_t flags)
{
	return ns_rename_answer(ns, op, parent, name, newparent, newname, flags, NULL);
}
