/* ns_entry.c — operations that add or remove one directory entry: lookup,
 * mknod, mkdir, symlink, create, link, unlink, rmdir.
 *
 * Each mutation runs under ns->mu from its first read to its kv_write
 * (ns_mutate, which also answers an operation id carried out before from
 * its record: ns_opid.c) and writes one batch: the new or changed inode, the dentry, the parent
 * directory (nlink for subdirectories, mtime/ctime = now) and the counters
 * it consumed. Layouts: a new file or directory takes its parent's
 * chunk_size and replication factor: the newest chain table of the factor
 * of the parent's table (the default table when the parent has none yet,
 * tables.c), and a stripe_seed hashed from its inode number. */
#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <fcntl.h>
#include "fs/cleanup.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"
#include "meta/ns-internal.h"

struct new_entry {
	uint32_t mode;
	uint64_t rdev;
	uint32_t uid, gid;
	const char *symlink;
};

int ns_lookup(struct ns *ns, strata_ino_t parent, const char *name, struct strata_attr *ret)
{
	struct dentry d;
	struct inode in;
	int r = meta_name_check(name);

	if (r < 0)
		return r;
	r = ns_get_dentry(ns, parent, name, &d);
	if (r == -ENOENT) {
		r = ns_get_dir(ns, parent, &in);
		return r < 0 ? r : -ENOENT;
	}
	if (r < 0)
		return r;
	/* Lock-free: an unlink committed between the two reads leaves a dentry
	 * we saw pointing at a deleted inode; that name is gone now. */
	r = ns_get_inode(ns, d.ino, &in);
	if (r < 0)
		return r;
	*ret = in.a;
	return 0;
}

/* Checks name and parent and that the name is free. */
static int entry_prepare(struct ns *ns, uint64_t parent, const char *name, struct inode *pdir)
{
	struct dentry d;
	int r = meta_name_check(name);

	if (r < 0)
		return r;
	r = ns_get_dir(ns, parent, pdir);
	if (r < 0)
		return r;
	if (pdir->a.nlink == 0)
		return -ENOENT; /* removed directory */
	r = ns_get_dentry(ns, parent, name, &d);
	if (r == 0)
		return -EEXIST;
	return r == -ENOENT ? 0 : r;
}

static void layout_inherit(struct ns *ns, struct inode *in, const struct inode *pdir)
{
	struct strata_layout *l = &in->a.layout;

	l->chunk_size = pdir->a.layout.chunk_size ?: STRATA_DEFAULT_CHUNK_SIZE;
	l->table_id = ns_table_for(ns, pdir->a.layout.table_id);
	l->stripe_seed = mode_is_reg(in->a.mode) ? ns_stripe_seed(in->a.ino) : 0;
}

static void inode_new(struct ns *ns, struct inode *in, const struct inode *pdir,
		      const struct new_entry *e, int64_t now)
{
	memset(in, 0, sizeof(*in));
	in->a.ino = ns->next_ino++;
	in->a.mode = e->mode;
	in->a.nlink = mode_is_dir(e->mode) ? 2 : 1;
	in->a.uid = e->uid;
	in->a.gid = e->gid;
	in->a.rdev = e->rdev;
	in->a.size = e->symlink ? strlen(e->symlink) : 0;
	in->a.atime_ns = in->a.mtime_ns = in->a.ctime_ns = now;
	in->a.generation = 1; /* inode numbers are never reused */
	in->parent = pdir->a.ino;
	if (mode_is_dir(e->mode) || mode_is_reg(e->mode))
		layout_inherit(ns, in, pdir);
}

/* Adds the new inode, its dentry, the parent's update and the counters. */
static void entry_add(struct ns *ns, struct kv_batch *b, struct inode *pdir, const char *name,
		      const struct inode *in, const struct new_entry *e)
{
	struct dentry d = {in->a.ino, in->a.mode};
	struct key k;

	ns_put_inode(b, in);
	ns_put_dentry(b, pdir->a.ino, name, &d);
	if (e->symlink) {
		key_ino(&k, K_SYMLINK, in->a.ino);
		kv_batch_put(b, k.b, k.len, e->symlink, strlen(e->symlink));
	}
	if (mode_is_dir(in->a.mode))
		pdir->a.nlink++;
	pdir->a.mtime_ns = pdir->a.ctime_ns = in->a.ctime_ns;
	ns_put_inode(b, pdir);
	ns->inodes++;
	ns_put_counter(b, "inodes", ns->inodes);
	ns_put_counter(b, "next_ino", ns->next_ino);
}

/* Under ns->mu: creates the entry into batch b (not committed). */
static int entry_create_locked(struct ns *ns, struct kv_batch *b, uint64_t parent, const char *name,
			       const struct new_entry *e, struct inode *ret)
{
	struct inode pdir;
	int r = entry_prepare(ns, parent, name, &pdir);

	if (r < 0)
		return r;
	inode_new(ns, ret, &pdir, e, ns_now());
	entry_add(ns, b, &pdir, name, ret, e);
	return 0;
}

struct entry_args {
	uint64_t parent;
	const char *name;
	const struct new_entry *e;
};

static int entry_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct entry_args *x = arg;
	struct inode in;
	int r = entry_create_locked(ns, b, x->parent, x->name, x->e, &in);

	if (r == 0)
		ret->attr = in.a;
	return r;
}

static int entry_create(struct ns *ns, const struct meta_opid *op, uint16_t type, uint64_t parent,
			const char *name, const struct new_entry *e, struct strata_attr *ret)
{
	struct entry_args x = {parent, name, e};
	struct ns_answer a;
	int r = ns_mutate(ns, op, type, entry_build, &x, &a);

	if (r == 0 && ret)
		*ret = a.attr;
	return r;
}

int ns_mknod(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	     uint32_t mode, uint64_t rdev, uint32_t uid, uint32_t gid, struct strata_attr *ret)
{
	struct new_entry e = {mode, rdev, uid, gid, NULL};

	if ((mode & S_IFMT) == 0)
		e.mode |= S_IFREG; /* mknod(2): type 0 means a regular file */
	switch (e.mode & S_IFMT) {
	case S_IFREG:
	case S_IFIFO:
	case S_IFSOCK:
		e.rdev = 0;
		break;
	case S_IFCHR:
	case S_IFBLK:
		break;
	default:
		return -EINVAL;
	}
	e.mode &= S_IFMT | 07777;
	return entry_create(ns, op, MSG_META_MKNOD, parent, name, &e, ret);
}

int ns_mkdir(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	     uint32_t mode, uint32_t uid, uint32_t gid, struct strata_attr *ret)
{
	struct new_entry e = {S_IFDIR | (mode & 07777), 0, uid, gid, NULL};

	return entry_create(ns, op, MSG_META_MKDIR, parent, name, &e, ret);
}

int ns_symlink(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	       const char *target, uint32_t uid, uint32_t gid, struct strata_attr *ret)
{
	struct new_entry e = {S_IFLNK | 0777, 0, uid, gid, target};

	if (!target || !target[0])
		return -ENOENT; /* symlink(2) with an empty target */
	if (strlen(target) >= STRATA_PATH_MAX)
		return -ENAMETOOLONG;
	return entry_create(ns, op, MSG_META_SYMLINK, parent, name, &e, ret);
}

/* create on an existing name: open it (O_TRUNC: length 0). */
static int create_existing(struct ns *ns, struct kv_batch *b, const struct dentry *d,
			   uint32_t flags, struct inode *in)
{
	int r;

	if (flags & O_EXCL)
		return -EEXIST;
	if (mode_is_dir(d->mode))
		return -EISDIR;
	if (!mode_is_reg(d->mode))
		return -EEXIST; /* only regular files carry sessions */
	r = ns_get_inode(ns, d->ino, in);
	if (r < 0)
		return r;
	if (flags & O_TRUNC) {
		in->a.size = 0;
		in->a.mtime_ns = in->a.ctime_ns = ns_now();
		ns_put_inode(b, in);
	}
	return 0;
}

static int create_locked(struct ns *ns, struct kv_batch *b, uint64_t parent, const char *name,
			 const struct new_entry *e, uint32_t flags, struct inode *in)
{
	struct dentry d;
	int r = meta_name_check(name);

	if (r < 0)
		return r;
	r = ns_get_dentry(ns, parent, name, &d);
	if (r == 0)
		return create_existing(ns, b, &d, flags, in);
	if (r != -ENOENT)
		return r;
	return entry_create_locked(ns, b, parent, name, e, in);
}

struct create_args {
	uint64_t parent;
	const char *name;
	struct new_entry e;
	uint32_t flags;
	const char *client;
};

static int create_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct create_args *x = arg;
	struct inode in;
	int r = create_locked(ns, b, x->parent, x->name, &x->e, x->flags, &in);

	if (r < 0)
		return r;
	ns_add_session(ns, b, in.a.ino, x->flags, x->client, &ret->session);
	ret->attr = in.a;
	return 0;
}

int ns_create(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	      uint32_t mode, uint32_t uid, uint32_t gid, uint32_t flags, const char *client_id,
	      struct strata_attr *ret, uint64_t *ret_session)
{
	struct create_args x = {
	    parent, name, {S_IFREG | (mode & 07777), 0, uid, gid, NULL}, flags, client_id};
	struct ns_answer a;
	int r;

	if (strlen(client_id) > NS_CLIENT_ID_MAX)
		return -EINVAL;
	r = ns_mutate(ns, op, MSG_META_CREATE, create_build, &x, &a);
	if (r < 0)
		return r;
	*ret = a.attr;
	*ret_session = a.session;
	return 0;
}

/* The entry parent/name and its inode, for removal. */
static int entry_load(struct ns *ns, uint64_t parent, const char *name, struct inode *pdir,
		      struct dentry *d, struct inode *in)
{
	int r = meta_name_check(name);

	if (r < 0)
		return r;
	r = ns_get_dir(ns, parent, pdir);
	if (r < 0)
		return r;
	r = ns_get_dentry(ns, parent, name, d);
	if (r < 0)
		return r;
	r = ns_get_inode(ns, d->ino, in);
	return r == -ENOENT ? -EIO : r;
}

/* Removes the dentry and one link of in, updating the parent. */
static int entry_remove(struct ns *ns, struct kv_batch *b, struct inode *pdir, const char *name,
			struct inode *in)
{
	struct key k;

	key_dentry(&k, pdir->a.ino, name);
	kv_batch_del(b, k.b, k.len);
	if (mode_is_dir(in->a.mode))
		pdir->a.nlink--;
	pdir->a.mtime_ns = pdir->a.ctime_ns = ns_now();
	ns_put_inode(b, pdir);
	return ns_drop_link(ns, b, in);
}

int ns_dir_empty(struct ns *ns, uint64_t ino)
{
	struct key k;
	int r;

	key_named(&k, K_DENTRY, ino, NULL);
	r = ns_prefix_any(ns, &k);
	return r < 0 ? r : r ? -ENOTEMPTY : 0;
}

struct remove_args {
	uint64_t parent;
	const char *name;
	bool dir;
};

static int remove_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct remove_args *x = arg;
	struct inode pdir, in;
	struct dentry d;
	int r = entry_load(ns, x->parent, x->name, &pdir, &d, &in);

	if (r < 0)
		return r;
	if (!x->dir && mode_is_dir(in.a.mode))
		return -EISDIR;
	if (x->dir && !mode_is_dir(in.a.mode))
		return -ENOTDIR;
	if (x->dir && (r = ns_dir_empty(ns, in.a.ino)) < 0)
		return r;
	r = entry_remove(ns, b, &pdir, x->name, &in);
	if (r == 0) {
		ret->attr = in.a;
		ret->parent = pdir.a;
	}
	return r;
}

int ns_remove(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	      bool dir, struct ns_answer *ret)
{
	struct remove_args x = {parent, name, dir};

	return ns_mutate(ns, op, dir ? MSG_META_RMDIR : MSG_META_UNLINK, remove_build, &x, ret);
}

int ns_unlink(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name)
{
	return ns_remove(ns, op, parent, name, false, NULL);
}

int ns_rmdir(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name)
{
	return ns_remove(ns, op, parent, name, true, NULL);
}

static int link_locked(struct ns *ns, struct kv_batch *b, uint64_t ino, uint64_t newparent,
		       const char *newname, struct inode *in)
{
	struct inode pdir;
	int r = ns_get_inode(ns, ino, in);

	if (r < 0)
		return r;
	if (mode_is_dir(in->a.mode))
		return -EPERM;
	if (in->a.nlink == 0)
		return -ENOENT; /* linkat(2) of an unlinked file */
	r = entry_prepare(ns, newparent, newname, &pdir);
	if (r < 0)
		return r;
	struct dentry d = {ino, in->a.mode};
	in->a.nlink++;
	in->a.ctime_ns = ns_now();
	pdir.a.mtime_ns = pdir.a.ctime_ns = in->a.ctime_ns;
	ns_put_inode(b, in);
	ns_put_inode(b, &pdir);
	ns_put_dentry(b, newparent, newname, &d);
	return 0;
}

struct link_args {
	uint64_t ino, newparent;
	const char *newname;
};

static int link_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct link_args *x = arg;
	struct inode in;
	int r = link_locked(ns, b, x->ino, x->newparent, x->newname, &in);

	if (r == 0)
		ret->attr = in.a;
	return r;
}

int ns_link(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, strata_ino_t newparent,
	    const char *newname, struct strata_attr *ret)
{
	struct link_args x = {ino, newparent, newname};
	struct ns_answer a;
	int r = ns_mutate(ns, op, MSG_META_LINK, link_build, &x, &a);

	if (r == 0 && ret)
		*ret = a.attr;
	return r;
}

int ns_readlink(struct ns *ns, strata_ino_t ino, char *buf, size_t cap)
{
	_cleanup_free_ char *v = NULL;
	struct inode in;
	struct key k;
	size_t n;
	int r = ns_get_inode(ns, ino, &in);

	if (r < 0)
		return r;
	if ((in.a.mode & S_IFMT) != S_IFLNK)
		return -EINVAL;
	key_ino(&k, K_SYMLINK, ino);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r < 0)
		return r; /* -ENOENT: removed after we read the inode */
	if (n + 1 > cap)
		return -ERANGE;
	memcpy(buf, v, n);
	buf[n] = 0;
	return (int)n;
}
