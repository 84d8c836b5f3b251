/* ns_attr.c — reading and changing attributes: getattr, setattr, readdir,
 * statfs and extended attributes.
 *
 * setattr applies the STRATA_SET_* fields in one batch and sets ctime to now
 * unless STRATA_SET_CTIME gives it. STRATA_SET_SIZE changes only the
 * recorded length (the client trims chunks first when shrinking).
 * STRATA_SET_LAYOUT is for directories: the chunk size new files inherit;
 * STRATA_SET_REPLICAS too: the replication factor, i.e. the newest chain
 * table of that factor (-EINVAL outside 1..5, -ERANGE when the cluster has
 * no table of that factor: too few nodes or spare targets).
 * xattrs live under X(ino,name); limits: name 1..255 bytes (-ERANGE),
 * value <= 64 KiB (-E2BIG), NS_XATTR_COUNT_MAX per inode (-ENOSPC). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include "fs/cleanup.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"
#include "meta/ns-internal.h"

int ns_getattr(struct ns *ns, strata_ino_t ino, struct strata_attr *ret)
{
	struct inode in;
	int r = ns_get_inode(ns, ino, &in);

	if (r == 0)
		*ret = in.a;
	return r;
}

static bool chunk_size_ok(uint32_t cs)
{
	return cs >= STRATA_MIN_CHUNK_SIZE && cs <= STRATA_MAX_CHUNK_SIZE && (cs & (cs - 1)) == 0;
}

static int setattr_check(struct ns *ns, const struct inode *in, const struct strata_setattr *sa)
{
	if (sa->valid & STRATA_SET_SIZE) {
		if (mode_is_dir(in->a.mode))
			return -EISDIR;
		if (!mode_is_reg(in->a.mode))
			return -EINVAL;
	}
	if (sa->valid & STRATA_SET_LAYOUT) {
		if (!mode_is_dir(in->a.mode))
			return -ENOTDIR;
		if (!chunk_size_ok(sa->chunk_size))
			return -EINVAL;
	}
	if (sa->valid & STRATA_SET_REPLICAS) {
		if (!mode_is_dir(in->a.mode))
			return -ENOTDIR;
		if (sa->replicas < 1 || sa->replicas > STRATA_MAX_REPLICAS)
			return -EINVAL;
		if (!ns_factor_table(ns, sa->replicas))
			return -ERANGE;
	}
	return 0;
}

static void setattr_apply(struct ns *ns, struct inode *in, const struct strata_setattr *sa,
			  int64_t now)
{
	struct strata_attr *a = &in->a;
	uint32_t v = sa->valid;

	if (v & STRATA_SET_MODE)
		a->mode = (a->mode & S_IFMT) | (sa->mode & 07777);
	if (v & STRATA_SET_UID)
		a->uid = sa->uid;
	if (v & STRATA_SET_GID)
		a->gid = sa->gid;
	if (v & STRATA_SET_SIZE) {
		a->size = sa->size;
		a->mtime_ns = now; /* truncate(2) */
	}
	if (v & STRATA_SET_ATIME_NOW)
		a->atime_ns = now;
	else if (v & STRATA_SET_ATIME)
		a->atime_ns = sa->atime_ns;
	if (v & STRATA_SET_MTIME_NOW)
		a->mtime_ns = now;
	else if (v & STRATA_SET_MTIME)
		a->mtime_ns = sa->mtime_ns;
	if (v & STRATA_SET_LAYOUT)
		a->layout.chunk_size = sa->chunk_size;
	if (v & STRATA_SET_REPLICAS)
		a->layout.table_id = ns_factor_table(ns, sa->replicas);
	a->ctime_ns = (v & STRATA_SET_CTIME) ? sa->ctime_ns : now;
}

int ns_setattr(struct ns *ns, strata_ino_t ino, const struct strata_setattr *sa,
	       struct strata_attr *ret)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct inode in;
	int r;

	if (!b)
		return -ENOMEM;
	r = ns_get_inode(ns, ino, &in);
	if (r == 0)
		r = setattr_check(ns, &in, sa);
	if (r < 0)
		return r;
	setattr_apply(ns, &in, sa, ns_now());
	ns_put_inode(b, &in);
	r = ns_commit(ns, b);
	if (r == 0 && ret)
		*ret = in.a;
	return r;
}

/* ---- readdir ------------------------------------------------------------- */

struct rd_ctx {
	struct ns *ns;
	bool want_attrs;
	int max, n, more, err;
	ns_dirent_fn fn;
	void *fn_ctx;
};

static int rd_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct rd_ctx *c = ctx;
	struct meta_dirent d = {0};
	struct inode in;
	size_t nl = kl - 9;

	if (c->n >= c->max) {
		c->more = 1;
		return 1;
	}
	struct dentry de;
	if (nl == 0 || nl > STRATA_NAME_MAX || dentry_decode(v, vl, &de) < 0)
		return -EIO;
	d.ino = de.ino;
	d.mode = de.mode;
	memcpy(d.name, k + 9, nl);
	if (c->want_attrs) {
		int r = ns_get_inode(c->ns, d.ino, &in);
		if (r < 0)
			return r == -ENOENT ? 0 : r; /* removed under us: skip */
		d.attr = in.a;
		d.mode = in.a.mode;
	}
	c->n++;
	return c->fn(c->fn_ctx, &d);
}

int ns_readdir(struct ns *ns, strata_ino_t ino, const char *after, bool want_attrs, int max,
	       ns_dirent_fn fn, void *ctx, int *ret_more)
{
	struct rd_ctx c = {ns, want_attrs, max, 0, 0, 0, fn, ctx};
	struct inode dir;
	struct key prefix, start;
	int r;

	if (max <= 0 || max > NS_READDIR_MAX)
		c.max = NS_READDIR_MAX;
	if (after && strlen(after) > STRATA_NAME_MAX)
		return -ENAMETOOLONG;
	r = ns_get_dir(ns, ino, &dir);
	if (r < 0)
		return r;
	key_named(&prefix, K_DENTRY, ino, NULL);
	key_named(&start, K_DENTRY, ino, after ? after : "");
	bool from_start = !after || !after[0];
	r = kv_scan(ns->kv, prefix.b, prefix.len, from_start ? NULL : start.b, start.len, rd_one,
		    &c);
	if (r < 0)
		return r;
	*ret_more = c.more;
	return c.n;
}

/* ---- statfs -------------------------------------------------------------- */

/* Targets that share a filesystem (same node, same fsid) report the same
 * space: each (node, fsid) is counted once. A target whose fsid is unknown
 * (0: a chunkserver that does not send it) counts on its own. */
struct sf_fs {
	uint32_t node_id;
	uint64_t fsid;
};

struct sf_ctx {
	struct strata_statfs *s;
	struct sf_fs *seen;
	size_t nseen, cap;
};

/* Returns true if (node, fsid) was counted already; else remembers it. */
static bool sf_seen(struct sf_ctx *c, uint32_t node_id, uint64_t fsid)
{
	if (fsid == 0)
		return false;
	for (size_t i = 0; i < c->nseen; i++)
		if (c->seen[i].node_id == node_id && c->seen[i].fsid == fsid)
			return true;
	if (c->nseen == c->cap) {
		size_t cap = c->cap ? c->cap * 2 : 16;
		struct sf_fs *p = realloc(c->seen, cap * sizeof(*p));
		if (!p)
			return false; /* best-effort: may count it twice */
		c->seen = p;
		c->cap = cap;
	}
	c->seen[c->nseen++] = (struct sf_fs){node_id, fsid};
	return false;
}

static int sf_target(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct sf_ctx *c = ctx;
	struct cluster_target t;

	if (cluster_target_decode(v, vl, &t) < 0)
		return 0; /* statfs stays best-effort */
	if (sf_seen(c, t.node_id, t.fsid))
		return 0;
	c->s->total_bytes += t.total_bytes;
	c->s->free_bytes += t.free_bytes;
	return 0;
}

int ns_statfs(struct ns *ns, struct strata_statfs *ret)
{
	struct strata_statfs s = {0};
	struct sf_ctx c = {.s = &s};
	uint8_t tag = K_TARGET;
	int r;

	r = kv_scan(ns->kv, &tag, 1, NULL, 0, sf_target, &c);
	free(c.seen);
	if (r < 0)
		return r;
	s.avail_bytes = s.free_bytes;
	s.total_inodes = NS_TOTAL_INODES;
	s.used_inodes = atomic_load(&ns->inodes);
	s.bsize = 4096;
	s.namemax = STRATA_NAME_MAX;
	*ret = s;
	return 0;
}

/* ---- xattrs -------------------------------------------------------------- */

static int xattr_name_check(const char *name)
{
	if (!name || !name[0])
		return -EINVAL;
	return strlen(name) > STRATA_XATTR_NAME_MAX ? -ERANGE : 0;
}

static int xattr_count(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	(*(int *)ctx)++;
	return 0;
}

static int setxattr_locked(struct ns *ns, struct kv_batch *b, uint64_t ino, const char *name,
			   const void *value, size_t size, uint32_t flags)
{
	struct inode in;
	struct key k, prefix;
	int n = 0, r = ns_get_inode(ns, ino, &in);

	if (r < 0)
		return r;
	key_named(&k, K_XATTR, ino, name);
	r = kv_exists(ns->kv, k.b, k.len);
	if (r < 0 && r != -ENOENT)
		return r;
	if (r == 0 && (flags & XATTR_CREATE))
		return -EEXIST;
	if (r == -ENOENT && (flags & XATTR_REPLACE))
		return -ENODATA;
	if (r == -ENOENT) {
		key_named(&prefix, K_XATTR, ino, NULL);
		if ((r = kv_scan(ns->kv, prefix.b, prefix.len, NULL, 0, xattr_count, &n)) < 0)
			return r;
		if (n >= NS_XATTR_COUNT_MAX)
			return -ENOSPC;
	}
	kv_batch_put(b, k.b, k.len, value, size);
	in.a.ctime_ns = ns_now();
	ns_put_inode(b, &in);
	return 0;
}

struct setxattr_args {
	uint64_t ino;
	const char *name;
	const void *value;
	size_t size;
	uint32_t flags;
};

static int setxattr_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct setxattr_args *x = arg;

	return setxattr_locked(ns, b, x->ino, x->name, x->value, x->size, x->flags);
}

int ns_setxattr(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, const char *name,
		const void *value, size_t size, uint32_t flags)
{
	struct setxattr_args x = {ino, name, value, size, flags};
	int r = xattr_name_check(name);

	if (r < 0)
		return r;
	if (size > STRATA_XATTR_SIZE_MAX)
		return -E2BIG;
	if (flags & ~(uint32_t)(XATTR_CREATE | XATTR_REPLACE))
		return -EINVAL;
	return ns_mutate(ns, op, MSG_META_SETXATTR, setxattr_build, &x, NULL);
}

int ns_getxattr(struct ns *ns, strata_ino_t ino, const char *name, void **ret_val, size_t *ret_len)
{
	struct inode in;
	struct key k;
	int r = xattr_name_check(name);

	if (r < 0)
		return r;
	r = ns_get_inode(ns, ino, &in);
	if (r < 0)
		return r;
	key_named(&k, K_XATTR, ino, name);
	r = kv_get(ns->kv, k.b, k.len, ret_val, ret_len);
	return r == -ENOENT ? -ENODATA : r;
}

struct lx_ctx {
	struct wbuf w;
};

static int lx_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct lx_ctx *c = ctx;

	wbuf_put_bytes(&c->w, k + 9, kl - 9);
	wbuf_put_u8(&c->w, 0);
	return c->w.err;
}

int ns_listxattr(struct ns *ns, strata_ino_t ino, char **ret_list, size_t *ret_len)
{
	struct lx_ctx c;
	struct inode in;
	struct key prefix;
	int r = ns_get_inode(ns, ino, &in);

	if (r < 0)
		return r;
	wbuf_init(&c.w);
	key_named(&prefix, K_XATTR, ino, NULL);
	r = kv_scan(ns->kv, prefix.b, prefix.len, NULL, 0, lx_one, &c);
	if (r < 0) {
		wbuf_done(&c.w);
		return r;
	}
	*ret_list = (char *)c.w.data; /* NULL when empty */
	*ret_len = c.w.len;
	return 0;
}

struct removexattr_args {
	uint64_t ino;
	const char *name;
};

static int removexattr_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct removexattr_args *x = arg;
	struct inode in;
	struct key k;
	int r = ns_get_inode(ns, x->ino, &in);

	if (r < 0)
		return r;
	key_named(&k, K_XATTR, x->ino, x->name);
	r = kv_exists(ns->kv, k.b, k.len);
	if (r < 0)
		return r == -ENOENT ? -ENODATA : r;
	kv_batch_del(b, k.b, k.len);
	in.a.ctime_ns = ns_now();
	ns_put_inode(b, &in);
	return 0;
}

int ns_removexattr(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, const char *name)
{
	struct removexattr_args x = {ino, name};
	int r = xattr_name_check(name);

	return r ?: ns_mutate(ns, op, MSG_META_REMOVEXATTR, removexattr_build, &x, NULL);
}
