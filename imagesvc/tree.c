/* tree.c — merging layer tars into one in-memory file tree (OCI semantics).
 *
 * Dentries are found through one hash table keyed by (parent inode, name);
 * each directory also keeps its children in a doubly-linked list so that a
 * subtree can be removed and the writer can list it. Inodes are reference
 * counted by their dentries (nlink): removing the last dentry frees the inode,
 * and for a directory its whole subtree.
 *
 * Invariants:
 *  1. Every dentry is in exactly one sibling list and one hash chain.
 *  2. inode->nlink == number of dentries pointing at it (root: 1, held by the
 *     tree itself). Directories are never hard-linked, so the tree is a tree.
 *  3. Every dentry name is a single component: non-empty, no '/', not "." or
 *     "..", at most 255 bytes (the tar reader normalized the path).
 *  4. dentry->layer is the layer that last created or replaced it; whiteouts
 *     and opaque markers of layer L only remove dentries with layer < L.
 *  5. A regular inode has either `data` (0 < size <= IMG_INLINE_MAX) or
 *     exactly ceil(size / BLOB_CHUNK_SIZE) extents.
 *  6. inline_total is the sum of the sizes of all live inodes with `data`,
 *     and never exceeds IMG_INLINE_BUDGET. */
#include "imagesvc/tree.h"

#include <errno.h>
#include <openssl/sha.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/cleanup.h"

#define WH_PREFIX ".wh."
#define WH_OPAQUE ".wh..wh..opq"

struct tree {
	struct tree_inode *root;
	struct tree_dentry **htab;
	size_t hcap, hcount;
	uint8_t *chunk;
	uint64_t inline_total;
	char msg[512];
};

static int tree_err(struct tree *t, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int tree_err(struct tree *t, int err, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(t->msg, sizeof(t->msg), fmt, ap);
	va_end(ap);
	return err;
}

const char *tree_error(const struct tree *t)
{
	return t->msg[0] ? t->msg : "no error";
}

static size_t hash_of(const struct tree_inode *parent, const char *name, size_t len)
{
	uint64_t h = 1469598103934665603ull ^ (uint64_t)(uintptr_t)parent;
	for (size_t i = 0; i < len; i++)
		h = (h ^ (uint8_t)name[i]) * 1099511628211ull;
	return (size_t)(h ^ (h >> 29));
}

static void xattrs_clear(struct tree_inode *ino)
{
	for (size_t i = 0; i < ino->n_xattrs; i++) {
		free(ino->xattrs[i].name);
		free(ino->xattrs[i].value);
	}
	free(ino->xattrs);
	ino->xattrs = NULL;
	ino->n_xattrs = 0;
}

static struct tree_inode *inode_new(uint32_t mode)
{
	struct tree_inode *ino = calloc(1, sizeof(*ino));
	if (ino)
		ino->mode = mode;
	return ino;
}

static void dentry_remove(struct tree *t, struct tree_dentry *d);

static void inode_unref(struct tree *t, struct tree_inode *ino)
{
	if (--ino->nlink > 0)
		return;
	while (ino->children)
		dentry_remove(t, ino->children);
	xattrs_clear(ino);
	if (ino->data)
		t->inline_total -= ino->size;
	free(ino->data);
	free(ino->symlink);
	free(ino->extents);
	free(ino);
}

static struct tree_dentry *dentry_find(struct tree *t, const struct tree_inode *parent,
				       const char *name, size_t len)
{
	for (struct tree_dentry *d = t->htab[hash_of(parent, name, len) & (t->hcap - 1)]; d;
	     d = d->hnext)
		if (d->parent == parent && strlen(d->name) == len && !memcmp(d->name, name, len))
			return d;
	return NULL;
}

static int hash_grow(struct tree *t)
{
	size_t ncap = t->hcap * 2;
	struct tree_dentry **n = calloc(ncap, sizeof(*n));
	if (!n)
		return -ENOMEM;
	for (size_t i = 0; i < t->hcap; i++) {
		struct tree_dentry *d = t->htab[i], *next;
		for (; d; d = next) {
			next = d->hnext;
			size_t b = hash_of(d->parent, d->name, strlen(d->name)) & (ncap - 1);
			d->hnext = n[b];
			n[b] = d;
		}
	}
	free(t->htab);
	t->htab = n;
	t->hcap = ncap;
	return 0;
}

/* Links a new dentry parent/name -> ino (taking a reference on ino). */
static int dentry_add(struct tree *t, struct tree_inode *parent, const char *name, size_t len,
		      struct tree_inode *ino, unsigned layer)
{
	if (t->hcount + 1 > t->hcap && hash_grow(t) < 0)
		return -ENOMEM;
	struct tree_dentry *d = calloc(1, sizeof(*d));
	if (!d || !(d->name = strndup(name, len))) {
		free(d);
		return -ENOMEM;
	}
	d->inode = ino;
	d->parent = parent;
	d->layer = layer;
	size_t b = hash_of(parent, name, len) & (t->hcap - 1);
	d->hnext = t->htab[b];
	t->htab[b] = d;
	d->next = parent->children;
	if (d->next)
		d->next->prev = d;
	parent->children = d;
	parent->n_children++;
	ino->nlink++;
	t->hcount++;
	return 0;
}

static void dentry_remove(struct tree *t, struct tree_dentry *d)
{
	struct tree_dentry **pp =
	    &t->htab[hash_of(d->parent, d->name, strlen(d->name)) & (t->hcap - 1)];
	while (*pp != d)
		pp = &(*pp)->hnext;
	*pp = d->hnext;
	if (d->prev)
		d->prev->next = d->next;
	else
		d->parent->children = d->next;
	if (d->next)
		d->next->prev = d->prev;
	d->parent->n_children--;
	t->hcount--;
	struct tree_inode *ino = d->inode;
	free(d->name);
	free(d);
	inode_unref(t, ino);
}

int tree_new(struct tree **ret)
{
	struct tree *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->hcap = 1024;
	t->htab = calloc(t->hcap, sizeof(*t->htab));
	t->root = inode_new(S_IFDIR | 0755);
	t->chunk = malloc(BLOB_CHUNK_SIZE);
	if (!t->htab || !t->root || !t->chunk) {
		tree_free(t);
		return -ENOMEM;
	}
	t->root->nlink = 1;
	*ret = t;
	return 0;
}

struct tree *tree_free(struct tree *t)
{
	if (!t)
		return NULL;
	if (t->root)
		inode_unref(t, t->root);
	free(t->htab);
	free(t->chunk);
	free(t);
	return NULL;
}

struct tree_inode *tree_root(struct tree *t)
{
	return t->root;
}

struct tree_inode *tree_lookup(struct tree *t, const char *path)
{
	struct tree_inode *cur = t->root;
	const char *p = path;
	while (*p) {
		const char *slash = strchr(p, '/');
		size_t len = slash ? (size_t)(slash - p) : strlen(p);
		if (!S_ISDIR(cur->mode))
			return NULL;
		struct tree_dentry *d = dentry_find(t, cur, p, len);
		if (!d)
			return NULL;
		cur = d->inode;
		p += len + (slash ? 1 : 0);
	}
	return cur;
}

/* Walks to the parent directory of `path`, creating missing directories if
 * `create`. Returns 0 with the parent and the last component, -ENOENT (not
 * creating), or -ENOTDIR when a component is not a directory (an error of the
 * layer only when creating: a look-up leaves the tree's message alone). */
static int resolve_parent(struct tree *t, const char *path, unsigned layer, bool create,
			  struct tree_inode **ret_parent, const char **ret_base)
{
	struct tree_inode *cur = t->root;
	const char *p = path, *slash;
	while ((slash = strchr(p, '/'))) {
		size_t len = (size_t)(slash - p);
		struct tree_dentry *d = dentry_find(t, cur, p, len);
		if (!d) {
			if (!create)
				return -ENOENT;
			struct tree_inode *dir = inode_new(S_IFDIR | 0755);
			if (!dir || dentry_add(t, cur, p, len, dir, layer) < 0) {
				free(dir);
				return -ENOMEM;
			}
			cur = dir;
		} else if (!S_ISDIR(d->inode->mode)) {
			if (!create)
				return -ENOTDIR;
			return tree_err(t, -ENOTDIR,
					"'%.200s': a parent component is not a directory", path);
		} else {
			cur = d->inode;
		}
		p = slash + 1;
	}
	*ret_parent = cur;
	*ret_base = p;
	return 0;
}

/* ---- metadata ----------------------------------------------------------- */

static bool xattr_supported(const char *name)
{
	static const char *const pfx[] = {"user.", "trusted.", "security."};
	for (size_t i = 0; i < ARRAY_SIZE(pfx); i++) {
		size_t n = strlen(pfx[i]);
		if (!strncmp(name, pfx[i], n) && name[n])
			return true;
	}
	return !strcmp(name, "system.posix_acl_access") ||
	       !strcmp(name, "system.posix_acl_default");
}

static int set_xattrs(struct tree_inode *ino, const struct tar_entry *e, struct tree_stats *st)
{
	xattrs_clear(ino);
	if (!e->n_xattrs)
		return 0;
	ino->xattrs = calloc(e->n_xattrs, sizeof(*ino->xattrs));
	if (!ino->xattrs)
		return -ENOMEM;
	for (size_t i = 0; i < e->n_xattrs; i++) {
		const struct tar_xattr *x = &e->xattrs[i];
		if (!xattr_supported(x->name)) {
			st->xattrs_dropped++;
			continue;
		}
		struct tree_xattr *y = &ino->xattrs[ino->n_xattrs];
		y->name = strdup(x->name);
		y->value = malloc(x->len ? x->len : 1);
		if (!y->name || !y->value) {
			free(y->name);
			free(y->value);
			return -ENOMEM;
		}
		memcpy(y->value, x->value, x->len);
		y->len = x->len;
		ino->n_xattrs++;
	}
	return 0;
}

static uint32_t type_bits(enum tar_type t)
{
	switch (t) {
	case TAR_DIR:
		return S_IFDIR;
	case TAR_SYMLINK:
		return S_IFLNK;
	case TAR_CHR:
		return S_IFCHR;
	case TAR_BLK:
		return S_IFBLK;
	case TAR_FIFO:
		return S_IFIFO;
	default:
		return S_IFREG;
	}
}

static int set_meta(struct tree_inode *ino, const struct tar_entry *e, struct tree_stats *st)
{
	ino->mode = type_bits(e->type) | (e->mode & 07777);
	ino->uid = e->uid;
	ino->gid = e->gid;
	ino->mtime = e->mtime;
	ino->mtime_nsec = e->mtime_nsec;
	ino->rdev_major = e->devmajor;
	ino->rdev_minor = e->devminor;
	return set_xattrs(ino, e, st);
}

/* ---- file data ---------------------------------------------------------- */

static int read_exact(struct tar_reader *r, uint8_t *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = tar_read(r, buf + got, n - got);
		if (k < 0)
			return (int)k;
		if (k == 0)
			return -EBADMSG;
		got += (size_t)k;
	}
	return 0;
}

static bool all_zero(const uint8_t *p, size_t n)
{
	return n == 0 || (p[0] == 0 && !memcmp(p, p + 1, n - 1));
}

static int store_chunk(struct tree *t, struct blobstore *bs, uint32_t blob, uint32_t len,
		       struct tree_extent *x, struct tree_stats *st)
{
	x->len = len;
	if (all_zero(t->chunk, len)) {
		x->blob = IMG_HOLE;
		st->holes++;
		return 0;
	}
	uint8_t digest[SHA256_DIGEST_LENGTH];
	SHA256(t->chunk, len, digest);
	struct blob_loc loc;
	bool is_new;
	int r = blobstore_put_chunk(bs, blob, digest, t->chunk, len, &loc, &is_new);
	if (r < 0)
		return r;
	x->blob = loc.blob;
	x->off = loc.off;
	st->chunks++;
	if (is_new)
		st->chunks_new++;
	else
		st->chunks_dedup++;
	return 0;
}

static int ingest_inline(struct tree *t, struct tar_reader *r, const struct tar_entry *e,
			 struct tree_inode *ino, struct tree_stats *st)
{
	ino->data = malloc(e->size);
	if (!ino->data)
		return -ENOMEM;
	t->inline_total += e->size; /* invariant 6 */
	int err = read_exact(r, ino->data, (size_t)e->size);
	if (err < 0)
		return tree_err(t, err, "'%.200s': %s", e->path, tar_error(r));
	st->inlined++;
	st->files++;
	st->bytes += e->size;
	return 0;
}

static int ingest_data(struct tree *t, struct tar_reader *r, const struct tar_entry *e,
		       struct tree_inode *ino, struct blobstore *bs, uint32_t blob,
		       struct tree_stats *st)
{
	ino->size = e->size;
	if (e->size > 0 && e->size <= IMG_INLINE_MAX &&
	    t->inline_total + e->size <= IMG_INLINE_BUDGET)
		return ingest_inline(t, r, e, ino, st);
	ino->n_extents = (size_t)((e->size + BLOB_CHUNK_SIZE - 1) / BLOB_CHUNK_SIZE);
	if (!ino->n_extents)
		return 0;
	ino->extents = calloc(ino->n_extents, sizeof(*ino->extents));
	if (!ino->extents)
		return -ENOMEM;
	uint64_t left = e->size;
	for (size_t i = 0; i < ino->n_extents; i++) {
		uint32_t len = left < BLOB_CHUNK_SIZE ? (uint32_t)left : BLOB_CHUNK_SIZE;
		int err = read_exact(r, t->chunk, len);
		if (err < 0)
			return tree_err(t, err, "'%.200s': %s", e->path, tar_error(r));
		err = store_chunk(t, bs, blob, len, &ino->extents[i], st);
		if (err < 0)
			return tree_err(t, err, "'%.200s': storing a chunk failed: %s", e->path,
					strerror(-err));
		left -= len;
	}
	st->files++;
	st->bytes += e->size;
	return 0;
}

/* ---- applying entries --------------------------------------------------- */

static int apply_whiteout(struct tree *t, const struct tar_entry *e, const char *base,
			  unsigned layer, struct tree_stats *st)
{
	struct tree_inode *parent;
	const char *b;
	bool opaque = !strcmp(base, WH_OPAQUE);
	int r = resolve_parent(t, e->path, layer, opaque, &parent, &b);
	/* Nothing below to hide: the parent is gone, or it is no directory. umoci
	 * writes the whiteouts of a replaced directory's children after the file
	 * that replaced it, in the same layer; a whiteout hides lower layers only,
	 * and the replacement hid those children already. */
	if (r == -ENOENT || (r == -ENOTDIR && !opaque))
		return 0;
	if (r < 0)
		return r;
	st->whiteouts++;
	if (opaque) {
		struct tree_dentry *d = parent->children, *next;
		for (; d; d = next) {
			next = d->next;
			if (d->layer < layer)
				dentry_remove(t, d);
		}
		return 0;
	}
	const char *name = base + strlen(WH_PREFIX);
	if (!*name || !strcmp(name, ".") || !strcmp(name, ".."))
		return tree_err(t, -EINVAL, "'%.200s': invalid whiteout", e->path);
	struct tree_dentry *d = dentry_find(t, parent, name, strlen(name));
	if (d && d->layer < layer)
		dentry_remove(t, d);
	return 0;
}

static int apply_root(struct tree *t, const struct tar_entry *e, struct tree_stats *st)
{
	if (e->type != TAR_DIR)
		return tree_err(t, -EINVAL, "the root entry must be a directory");
	return set_meta(t->root, e, st);
}

/* Builds the inode an entry stands for (new, or the hard-link target with an
 * extra temporary reference). */
static int make_inode(struct tree *t, struct tar_reader *r, const struct tar_entry *e,
		      struct blobstore *bs, uint32_t blob, struct tree_stats *st,
		      struct tree_inode **ret)
{
	if (e->type == TAR_HARDLINK) {
		struct tree_inode *target = tree_lookup(t, e->linkname);
		if (!target)
			return tree_err(t, -ENOENT, "hard link '%.200s': target '%.200s' not found",
					e->path, e->linkname);
		if (S_ISDIR(target->mode))
			return tree_err(t, -EPERM, "hard link '%.200s': target is a directory",
					e->path);
		target->nlink++; /* temporary reference, dropped by the caller */
		*ret = target;
		return 0;
	}
	struct tree_inode *ino = inode_new(0);
	if (!ino)
		return -ENOMEM;
	ino->nlink = 1; /* temporary reference */
	int err = set_meta(ino, e, st);
	if (!err && e->type == TAR_SYMLINK) {
		ino->symlink = strdup(e->linkname);
		ino->size = strlen(e->linkname);
		err = ino->symlink ? 0 : -ENOMEM;
	}
	if (!err && e->type == TAR_REG)
		err = ingest_data(t, r, e, ino, bs, blob, st);
	if (err < 0) {
		inode_unref(t, ino);
		return err;
	}
	*ret = ino;
	return 0;
}

/* AUFS bookkeeping (".wh..wh.plnk/...", ".wh..wh.aufs") is not content:
 * like Docker, skip any entry with such a component, except the opaque
 * marker itself. */
static bool is_aufs_meta(const char *path)
{
	for (const char *p = path; p; p = strchr(p, '/')) {
		if (*p == '/')
			p++;
		if (!strncmp(p, ".wh..wh.", 8) && strncmp(p, WH_OPAQUE, strlen(WH_OPAQUE)))
			return true;
		if (!strncmp(p, WH_OPAQUE, strlen(WH_OPAQUE)) && p[strlen(WH_OPAQUE)] == '/')
			return true;
	}
	return false;
}

static int apply_entry(struct tree *t, struct tar_reader *r, const struct tar_entry *e,
		       struct blobstore *bs, uint32_t blob, unsigned layer, struct tree_stats *st)
{
	if (!e->path[0])
		return apply_root(t, e, st);
	if (is_aufs_meta(e->path))
		return 0;
	const char *slash = strrchr(e->path, '/');
	const char *base = slash ? slash + 1 : e->path;
	if (!strncmp(base, WH_PREFIX, strlen(WH_PREFIX)))
		return apply_whiteout(t, e, base, layer, st);
	struct tree_inode *parent;
	int err = resolve_parent(t, e->path, layer, true, &parent, &base);
	if (err < 0)
		return err;
	struct tree_dentry *old = dentry_find(t, parent, base, strlen(base));
	if (e->type == TAR_DIR && old && S_ISDIR(old->inode->mode)) {
		old->layer = layer;
		return set_meta(old->inode, e, st);
	}
	struct tree_inode *ino = NULL;
	err = make_inode(t, r, e, bs, blob, st, &ino);
	if (err < 0)
		return err;
	if (old)
		dentry_remove(t, old);
	err = dentry_add(t, parent, base, strlen(base), ino, layer);
	inode_unref(t, ino); /* drop the temporary reference */
	return err;
}

int tree_apply_layer(struct tree *t, struct tar_reader *r, struct blobstore *bs, uint32_t blob,
		     unsigned layer, struct tree_stats *stats)
{
	struct tree_stats local = {0};
	struct tree_stats *st = stats ? stats : &local;
	t->msg[0] = 0;
	for (;;) {
		const struct tar_entry *e;
		int err = tar_next(r, &e);
		if (err < 0)
			return tree_err(t, err, "%s", tar_error(r));
		if (err == 0)
			return 0;
		st->entries++;
		err = apply_entry(t, r, e, bs, blob, layer, st);
		if (err < 0) {
			if (!t->msg[0])
				tree_err(t, err, "'%.200s': %s", e->path, strerror(-err));
			return err;
		}
	}
}
