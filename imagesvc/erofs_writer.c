/* erofs_writer.c — an EROFS metadata image from a merged tree, written from
 * the on-disk format (4 KiB blocks, no compression).
 *
 * Layout of the image (byte offsets; meta_blkaddr = 0, so nid = offset / 32):
 *
 *   0       1024 bytes of zeros
 *   1024    superblock (128 bytes)
 *   1152    device table: one 128-byte slot per blob (devt_slotoff = 9)
 *   ...     inodes, root first, each 32-byte aligned: the on-disk inode
 *           (compact 32 or extended 64 bytes), its inline xattrs, then either
 *           its inline tail (directories, symlinks) or, 8-byte aligned, its
 *           chunk indexes (regular files). A unit of 4 KiB or less never
 *           crosses a block boundary.
 *   xattr_blkaddr: shared xattrs (name/value pairs used by 2+ inodes)
 *   then    data blocks of directories / symlinks too big to inline
 *
 * Regular files with data are EROFS_INODE_CHUNK_BASED with 1 MiB chunks
 * (chunk format = 8 | EROFS_CHUNK_FORMAT_INDEXES); each index names the
 * device (blob position + 1) and the 4 KiB block in the blob, or
 * EROFS_NULL_ADDR for a hole. Empty files, devices, fifos and sockets are
 * FLAT_PLAIN without data. Small files whose content the tree kept
 * (IMG_INLINE_MAX) are FLAT_INLINE: their bytes follow the inode, like fast
 * symlinks (FLAT_PLAIN in one data block if big xattrs leave no room).
 *
 * Compact inodes are used when they lose nothing: uid/gid/nlink < 2^16,
 * size < 2^32 and mtime equal to the superblock build time (we pick the most
 * common mtime of the tree); anything else gets an extended inode.
 *
 * Invariants:
 *  1. Every on-disk structure is encoded field by field (wire.h LE helpers)
 *     at the offsets of the kernel's erofs_fs.h; the sizes are asserted.
 *  2. Directory entries are sorted by name bytes across and within blocks
 *     ("." and ".." included), so the kernel's binary search works.
 *  3. An inline tail and its inode lie in one block.
 *  4. tree_inode.scratch is 0 again when erofs_write_image() returns. */
#include "imagesvc/erofs_writer.h"
#include "fs/fdio.h"

#include <assert.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/wire.h"

#define BLK 4096u
#define BLK_BITS 12
#define SB_OFFSET 1024
#define SB_SIZE 128
#define DEVT_SLOT_SIZE 128
#define INODE_COMPACT_SIZE 32
#define INODE_EXTENDED_SIZE 64
#define XATTR_IBODY_HDR_SIZE 12
#define XATTR_ENTRY_HDR_SIZE 4
#define DIRENT_SIZE 12
#define CHUNK_INDEX_SIZE 8
#define EROFS_MAGIC 0xE0F5E1E2u
#define FEAT_INCOMPAT_CHUNKED_FILE 0x4u
#define FEAT_INCOMPAT_DEVICE_TABLE 0x8u
#define LAYOUT_FLAT_PLAIN 0
#define LAYOUT_FLAT_INLINE 2
#define LAYOUT_CHUNK_BASED 4
#define CHUNK_FORMAT_INDEXES 0x20u
#define NULL_ADDR 0xFFFFFFFFu
#define MAX_SHARED_PER_INODE 255
#define XATTR_IBODY_MAX (XATTR_IBODY_HDR_SIZE + 4u * (UINT16_MAX - 1))

static_assert(SB_OFFSET + SB_SIZE == 9 * DEVT_SLOT_SIZE, "device table follows the superblock");
static_assert((BLOB_CHUNK_SIZE >> BLK_BITS) == 256, "chunk bits = 8");
static_assert(BLOB_ALIGN == BLK, "blob chunks are block aligned");
static_assert(DIRENT_SIZE == 12 && CHUNK_INDEX_SIZE == 8 && XATTR_IBODY_HDR_SIZE == 12,
	      "sizes of erofs_dirent, erofs_inode_chunk_index, erofs_xattr_ibody_header");

enum { FT_UNKNOWN, FT_REG, FT_DIR, FT_CHR, FT_BLK, FT_FIFO, FT_SOCK, FT_LNK };

struct dent {
	const char *name;
	uint16_t len;
	uint32_t idx;	       /* winode index */
	struct tree_inode *ti; /* NULL for "." and ".." */
};

struct wxattr {
	const struct tree_xattr *x;
	uint8_t index;	    /* EROFS name index */
	uint8_t prefix_len; /* bytes of the prefix stripped */
	int64_t shared_id;  /* -1: inline */
};

struct winode {
	struct tree_inode *ti;
	uint32_t parent;
	uint32_t nlink;
	bool extended;
	uint8_t layout;
	struct dent *dents;
	size_t n_dents;
	struct wxattr *xattrs;
	size_t n_xattrs, n_shared;
	uint32_t xattr_size;
	uint64_t data_size;
	uint32_t tail;	  /* inline bytes */
	uint32_t nblocks; /* blocks in the data area */
	uint32_t raw_blkaddr;
	uint32_t meta_size;
	uint64_t pos;
};

struct writer {
	struct winode *w;
	size_t n, cap;
	int64_t epoch;
	uint32_t epoch_nsec;
	const struct tree_xattr **shared; /* shared xattr table, in id order */
	uint32_t *shared_off;		  /* byte offset in the shared area */
	size_t n_shared;
	uint32_t shared_size;
	uint32_t *blobs;
	size_t n_blobs;
	uint32_t *blob_blocks;
	bool any_chunked;
	uint32_t xattr_blkaddr;
	uint64_t total_blocks;
	uint8_t *img;
};

static uint32_t align_up(uint64_t v, uint32_t a)
{
	return (uint32_t)((v + a - 1) / a * a);
}

static uint64_t align_up64(uint64_t v, uint64_t a)
{
	return (v + a - 1) / a * a;
}

/* ---- collecting inodes -------------------------------------------------- */

static int add_winode(struct writer *wr, struct tree_inode *ti, uint32_t parent, uint32_t *ret)
{
	if (wr->n == wr->cap) {
		size_t ncap = wr->cap ? wr->cap * 2 : 256;
		struct winode *nw = realloc(wr->w, ncap * sizeof(*nw));
		if (!nw)
			return -ENOMEM;
		wr->w = nw;
		wr->cap = ncap;
	}
	wr->w[wr->n] = (struct winode){.ti = ti, .parent = parent, .nlink = ti->nlink};
	ti->scratch = wr->n + 1;
	*ret = (uint32_t)wr->n++;
	return 0;
}

static int dent_cmp(const void *a, const void *b)
{
	const struct dent *x = a, *y = b;
	int c = memcmp(x->name, y->name, x->len < y->len ? x->len : y->len);
	return c ? c : (int)x->len - (int)y->len;
}

/* Lists directory wr->w[di] (with "." and ".."), sorted by name; inodes seen
 * for the first time are numbered in that order, so that a directory's
 * inodes lie together in readdir order. */
static int collect_dir(struct writer *wr, uint32_t di)
{
	struct tree_inode *dir = wr->w[di].ti;
	size_t n = dir->n_children + 2;
	struct dent *d = calloc(n, sizeof(*d));
	if (!d)
		return -ENOMEM;
	wr->w[di].dents = d;
	wr->w[di].n_dents = n;
	d[0] = (struct dent){".", 1, di, NULL};
	d[1] = (struct dent){"..", 2, wr->w[di].parent, NULL};
	uint32_t subdirs = 0;
	size_t k = 2;
	for (struct tree_dentry *c = dir->children; c; c = c->next, k++) {
		d[k] = (struct dent){c->name, (uint16_t)strlen(c->name), 0, c->inode};
		if (S_ISDIR(c->inode->mode))
			subdirs++;
	}
	qsort(d, n, sizeof(*d), dent_cmp);
	for (k = 0; k < n; k++) {
		if (!d[k].ti)
			continue;
		if (!d[k].ti->scratch) {
			uint32_t idx;
			int r = add_winode(wr, d[k].ti, di, &idx);
			if (r < 0)
				return r;
		}
		d[k].idx = (uint32_t)d[k].ti->scratch - 1;
	}
	wr->w[di].nlink = 2 + subdirs;
	return 0;
}

static int collect(struct writer *wr, struct tree *t)
{
	uint32_t root;
	int r = add_winode(wr, tree_root(t), 0, &root);
	/* wr->w grows while we walk it: directories are listed in BFS order. */
	for (size_t i = 0; r == 0 && i < wr->n; i++)
		if (S_ISDIR(wr->w[i].ti->mode))
			r = collect_dir(wr, (uint32_t)i);
	return r;
}

/* ---- the build time: the most common mtime -------------------------------- */

struct mt {
	int64_t s;
	uint32_t ns;
};

static int mt_cmp(const void *a, const void *b)
{
	const struct mt *x = a, *y = b;
	if (x->s != y->s)
		return x->s < y->s ? -1 : 1;
	return x->ns < y->ns ? -1 : x->ns > y->ns;
}

static int pick_epoch(struct writer *wr)
{
	_cleanup_free_ struct mt *m = malloc(wr->n * sizeof(*m));
	if (!m)
		return -ENOMEM;
	for (size_t i = 0; i < wr->n; i++)
		m[i] = (struct mt){wr->w[i].ti->mtime, wr->w[i].ti->mtime_nsec};
	qsort(m, wr->n, sizeof(*m), mt_cmp);
	size_t best = 0, best_run = 0;
	for (size_t i = 0, run = 0; i < wr->n; i++) {
		run = (i > 0 && !mt_cmp(&m[i], &m[i - 1])) ? run + 1 : 1;
		if (run > best_run) {
			best_run = run;
			best = i;
		}
	}
	wr->epoch = m[best].s;
	wr->epoch_nsec = m[best].ns;
	return 0;
}

/* ---- xattrs --------------------------------------------------------------- */

static void xattr_index(const char *name, uint8_t *ret_index, uint8_t *ret_plen)
{
	static const struct {
		const char *p;
		uint8_t idx;
	} map[] = {
	    {"user.", 1},
	    {"system.posix_acl_access", 2},
	    {"system.posix_acl_default", 3},
	    {"trusted.", 4},
	    {"security.", 6},
	};
	for (size_t i = 0; i < ARRAY_SIZE(map); i++) {
		size_t n = strlen(map[i].p);
		if (!strncmp(name, map[i].p, n)) {
			*ret_index = map[i].idx;
			*ret_plen = (uint8_t)n;
			return;
		}
	}
	*ret_index = 0; /* the tree keeps only the names above */
	*ret_plen = 0;
}

static uint32_t xattr_entry_size(const struct tree_xattr *x, uint8_t plen)
{
	return align_up(XATTR_ENTRY_HDR_SIZE + strlen(x->name) - plen + x->len, 4);
}

struct xref {
	const struct tree_xattr *x;
	struct wxattr *wx;
};

static int xref_cmp(const void *a, const void *b)
{
	const struct tree_xattr *x = ((const struct xref *)a)->x, *y = ((const struct xref *)b)->x;
	int c = strcmp(x->name, y->name);
	if (c)
		return c;
	if (x->len != y->len)
		return x->len < y->len ? -1 : 1;
	return memcmp(x->value, y->value, x->len);
}

static int prepare_inode_xattrs(struct winode *w, struct xref *refs, size_t *nref)
{
	if (!w->ti->n_xattrs)
		return 0;
	w->xattrs = calloc(w->ti->n_xattrs, sizeof(*w->xattrs));
	if (!w->xattrs)
		return -ENOMEM;
	w->n_xattrs = w->ti->n_xattrs;
	for (size_t j = 0; j < w->n_xattrs; j++) {
		struct wxattr *wx = &w->xattrs[j];
		wx->x = &w->ti->xattrs[j];
		wx->shared_id = -1;
		xattr_index(wx->x->name, &wx->index, &wx->prefix_len);
		refs[(*nref)++] = (struct xref){wx->x, wx};
	}
	return 0;
}

/* Name/value pairs used by two or more inodes go to the shared area. */
static int share_xattrs(struct writer *wr)
{
	size_t total = 0, nref = 0;
	for (size_t i = 0; i < wr->n; i++)
		total += wr->w[i].ti->n_xattrs;
	if (!total)
		return 0;
	_cleanup_free_ struct xref *refs = malloc(total * sizeof(*refs));
	wr->shared = malloc(total * sizeof(*wr->shared));
	wr->shared_off = malloc(total * sizeof(*wr->shared_off));
	if (!refs || !wr->shared || !wr->shared_off)
		return -ENOMEM;
	for (size_t i = 0; i < wr->n; i++) {
		int r = prepare_inode_xattrs(&wr->w[i], refs, &nref);
		if (r < 0)
			return r;
	}
	qsort(refs, nref, sizeof(*refs), xref_cmp);
	for (size_t i = 0; i < nref;) {
		size_t j = i + 1;
		while (j < nref && !xref_cmp(&refs[i], &refs[j]))
			j++;
		if (j - i >= 2) {
			size_t id = wr->n_shared++;
			wr->shared[id] = refs[i].x;
			wr->shared_off[id] = wr->shared_size;
			wr->shared_size += xattr_entry_size(refs[i].x, refs[i].wx->prefix_len);
			for (size_t k = i; k < j; k++)
				refs[k].wx->shared_id = (int64_t)id;
		}
		i = j;
	}
	return 0;
}

static void inode_xattr_size(struct winode *w)
{
	if (!w->n_xattrs)
		return;
	uint32_t size = XATTR_IBODY_HDR_SIZE;
	for (size_t j = 0; j < w->n_xattrs; j++) {
		struct wxattr *wx = &w->xattrs[j];
		if (wx->shared_id >= 0 && w->n_shared < MAX_SHARED_PER_INODE) {
			w->n_shared++;
			size += 4;
		} else {
			wx->shared_id = -1;
			size += xattr_entry_size(wx->x, wx->prefix_len);
		}
	}
	w->xattr_size = size;
}

/* ---- directories ---------------------------------------------------------- */

static uint8_t ftype(uint32_t mode)
{
	switch (mode & S_IFMT) {
	case S_IFREG:
		return FT_REG;
	case S_IFDIR:
		return FT_DIR;
	case S_IFCHR:
		return FT_CHR;
	case S_IFBLK:
		return FT_BLK;
	case S_IFIFO:
		return FT_FIFO;
	case S_IFSOCK:
		return FT_SOCK;
	case S_IFLNK:
		return FT_LNK;
	default:
		return FT_UNKNOWN;
	}
}

/* Packs the entries into blocks; writes them to out (if not NULL, which must
 * hold the returned size rounded up to a block). Returns the directory size. */
static uint64_t dir_pack(const struct writer *wr, const struct winode *w, uint8_t *out)
{
	uint64_t size = 0;
	for (size_t i = 0; i < w->n_dents;) {
		size_t start = i, used = 0;
		while (i < w->n_dents && used + DIRENT_SIZE + w->dents[i].len <= BLK)
			used += DIRENT_SIZE + w->dents[i++].len;
		if (out) {
			uint8_t *b = out + size;
			size_t nameoff = DIRENT_SIZE * (i - start);
			for (size_t k = start; k < i; k++) {
				const struct dent *d = &w->dents[k];
				const struct winode *c = &wr->w[d->idx];
				uint8_t *de = b + DIRENT_SIZE * (k - start);
				le64_put(de, c->pos / 32);
				le16_put(de + 8, (uint16_t)nameoff);
				de[10] = ftype(c->ti->mode);
				de[11] = 0;
				memcpy(b + nameoff, d->name, d->len);
				nameoff += d->len;
			}
		}
		size += i < w->n_dents ? BLK : used;
	}
	return size;
}

/* ---- layout --------------------------------------------------------------- */

static bool needs_extended(const struct writer *wr, const struct winode *w)
{
	const struct tree_inode *t = w->ti;
	return t->uid > 0xffff || t->gid > 0xffff || w->nlink > 0xffff ||
	       w->data_size > UINT32_MAX || t->mtime != wr->epoch ||
	       t->mtime_nsec != wr->epoch_nsec;
}

/* Chooses the data layout, inline tail and metadata size of one inode. */
static void layout_inode(struct writer *wr, struct winode *w)
{
	const struct tree_inode *t = w->ti;
	inode_xattr_size(w);
	if (S_ISDIR(t->mode))
		w->data_size = dir_pack(wr, w, NULL);
	else if (S_ISLNK(t->mode))
		w->data_size = strlen(t->symlink);
	else if (S_ISREG(t->mode))
		w->data_size = t->size;
	bool flat = S_ISDIR(t->mode) || S_ISLNK(t->mode) || (S_ISREG(t->mode) && t->data);
	w->extended = needs_extended(wr, w);
	uint32_t head = (w->extended ? INODE_EXTENDED_SIZE : INODE_COMPACT_SIZE) + w->xattr_size;
	w->layout = LAYOUT_FLAT_PLAIN;
	w->meta_size = head;
	if (S_ISREG(t->mode) && w->data_size && !t->data) {
		w->layout = LAYOUT_CHUNK_BASED;
		w->meta_size =
		    align_up(head, CHUNK_INDEX_SIZE) + CHUNK_INDEX_SIZE * (uint32_t)t->n_extents;
		wr->any_chunked = true;
	} else if (flat) {
		uint32_t tail = (uint32_t)(w->data_size % BLK);
		w->nblocks = (uint32_t)(w->data_size / BLK);
		if (tail && head + tail <= BLK) {
			w->layout = LAYOUT_FLAT_INLINE;
			w->tail = tail;
			w->meta_size = head + tail;
		} else if (tail) {
			w->nblocks++;
		}
	}
}

static int place_inodes(struct writer *wr, uint64_t start)
{
	uint64_t pos = start;
	for (size_t i = 0; i < wr->n; i++) {
		struct winode *w = &wr->w[i];
		if (w->xattr_size > XATTR_IBODY_MAX)
			return -E2BIG; /* i_xattr_icount is a u16 */
		uint32_t head =
		    (w->extended ? INODE_EXTENDED_SIZE : INODE_COMPACT_SIZE) + w->xattr_size;
		uint32_t unit = w->meta_size <= BLK ? w->meta_size : head;
		if (unit <= BLK && pos % BLK + unit > BLK)
			pos = align_up64(pos, BLK);
		w->pos = pos;
		pos = align_up64(pos + w->meta_size, 32);
	}
	if (wr->w[0].pos / 32 > UINT16_MAX)
		return -E2BIG;
	uint64_t blk = align_up64(pos, BLK) / BLK;
	wr->xattr_blkaddr = wr->n_shared ? (uint32_t)blk : 0;
	blk += align_up64(wr->shared_size, BLK) / BLK;
	for (size_t i = 0; i < wr->n; i++) {
		if (!wr->w[i].nblocks)
			continue;
		wr->w[i].raw_blkaddr = (uint32_t)blk;
		blk += wr->w[i].nblocks;
	}
	if (blk > UINT32_MAX)
		return -EFBIG;
	wr->total_blocks = blk;
	return 0;
}

/* ---- blobs ---------------------------------------------------------------- */

static int u32_cmp(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

static int device_of(const struct writer *wr, uint32_t blob)
{
	const uint32_t *p = bsearch(&blob, wr->blobs, wr->n_blobs, sizeof(blob), u32_cmp);
	return p ? (int)(p - wr->blobs) + 1 : -1;
}

static int collect_blobs(struct writer *wr)
{
	size_t total = 0;
	for (size_t i = 0; i < wr->n; i++)
		if (S_ISREG(wr->w[i].ti->mode))
			total += wr->w[i].ti->n_extents;
	wr->blobs = malloc((total ? total : 1) * sizeof(*wr->blobs));
	if (!wr->blobs)
		return -ENOMEM;
	for (size_t i = 0; i < wr->n; i++) {
		const struct tree_inode *t = wr->w[i].ti;
		for (size_t j = 0; S_ISREG(t->mode) && j < t->n_extents; j++)
			if (t->extents[j].blob != IMG_HOLE)
				wr->blobs[wr->n_blobs++] = t->extents[j].blob;
	}
	qsort(wr->blobs, wr->n_blobs, sizeof(*wr->blobs), u32_cmp);
	size_t k = 0;
	for (size_t i = 0; i < wr->n_blobs; i++)
		if (k == 0 || wr->blobs[k - 1] != wr->blobs[i])
			wr->blobs[k++] = wr->blobs[i];
	wr->n_blobs = k;
	if (k > EROFS_MAX_DEVICES)
		return -E2BIG;
	wr->blob_blocks = calloc(k ? k : 1, sizeof(*wr->blob_blocks));
	if (!wr->blob_blocks)
		return -ENOMEM;
	for (size_t i = 0; i < wr->n; i++) {
		const struct tree_inode *t = wr->w[i].ti;
		for (size_t j = 0; S_ISREG(t->mode) && j < t->n_extents; j++) {
			const struct tree_extent *x = &t->extents[j];
			if (x->blob == IMG_HOLE)
				continue;
			uint64_t end = align_up64(x->off + x->len, BLK) / BLK;
			if (end > UINT32_MAX)
				return -EFBIG;
			uint32_t *bb = &wr->blob_blocks[device_of(wr, x->blob) - 1];
			if (end > *bb)
				*bb = (uint32_t)end;
		}
	}
	return 0;
}

/* ---- encoding ------------------------------------------------------------- */

static uint32_t encode_rdev(uint32_t major, uint32_t minor)
{
	return (minor & 0xff) | (major << 8) | ((minor & ~0xffu) << 12);
}

static void put_inode_header(const struct writer *wr, const struct winode *w, uint32_t ino,
			     uint8_t *p)
{
	const struct tree_inode *t = w->ti;
	uint16_t icount =
	    w->xattr_size ? (uint16_t)(1 + (w->xattr_size - XATTR_IBODY_HDR_SIZE) / 4) : 0;
	uint32_t iu = 0;
	if (w->layout == LAYOUT_CHUNK_BASED)
		iu = (BLOB_CHUNK_SHIFT - BLK_BITS) | CHUNK_FORMAT_INDEXES;
	else if (S_ISCHR(t->mode) || S_ISBLK(t->mode))
		iu = encode_rdev(t->rdev_major, t->rdev_minor);
	else if (w->nblocks)
		iu = w->raw_blkaddr;
	le16_put(p, (uint16_t)((w->extended ? 1 : 0) | w->layout << 1));
	le16_put(p + 2, icount);
	le16_put(p + 4, (uint16_t)t->mode);
	if (!w->extended) {
		le16_put(p + 6, (uint16_t)w->nlink);
		le32_put(p + 8, (uint32_t)w->data_size);
		le32_put(p + 16, iu);
		le32_put(p + 20, ino);
		le16_put(p + 24, (uint16_t)t->uid);
		le16_put(p + 26, (uint16_t)t->gid);
		return;
	}
	le64_put(p + 8, w->data_size);
	le32_put(p + 16, iu);
	le32_put(p + 20, ino);
	le32_put(p + 24, t->uid);
	le32_put(p + 28, t->gid);
	le64_put(p + 32, (uint64_t)t->mtime);
	le32_put(p + 40, t->mtime_nsec);
	le32_put(p + 44, w->nlink);
	(void)wr;
}

static uint32_t put_xattr_entry(const struct tree_xattr *x, uint8_t index, uint8_t plen, uint8_t *p)
{
	size_t nlen = strlen(x->name) - plen;
	p[0] = (uint8_t)nlen;
	p[1] = index;
	le16_put(p + 2, (uint16_t)x->len);
	memcpy(p + 4, x->name + plen, nlen);
	memcpy(p + 4 + nlen, x->value, x->len);
	return xattr_entry_size(x, plen);
}

static void put_inode_xattrs(const struct winode *w, uint8_t *p)
{
	if (!w->xattr_size)
		return;
	p[4] = (uint8_t)w->n_shared; /* h_name_filter = 0: no filter */
	uint32_t off = XATTR_IBODY_HDR_SIZE;
	for (size_t j = 0; j < w->n_xattrs; j++)
		if (w->xattrs[j].shared_id >= 0) {
			le32_put(p + off, (uint32_t)w->xattrs[j].shared_id);
			off += 4;
		}
	for (size_t j = 0; j < w->n_xattrs; j++)
		if (w->xattrs[j].shared_id < 0)
			off += put_xattr_entry(w->xattrs[j].x, w->xattrs[j].index,
					       w->xattrs[j].prefix_len, p + off);
}

static void put_chunk_indexes(const struct writer *wr, const struct winode *w, uint8_t *p)
{
	const struct tree_inode *t = w->ti;
	for (size_t j = 0; j < t->n_extents; j++, p += CHUNK_INDEX_SIZE) {
		const struct tree_extent *x = &t->extents[j];
		if (x->blob == IMG_HOLE) {
			le32_put(p + 4, NULL_ADDR);
			continue;
		}
		le16_put(p + 2, (uint16_t)device_of(wr, x->blob));
		le32_put(p + 4, (uint32_t)(x->off / BLK));
	}
}

static int put_inode(struct writer *wr, size_t i)
{
	struct winode *w = &wr->w[i];
	uint8_t *p = wr->img + w->pos;
	uint32_t head = (w->extended ? INODE_EXTENDED_SIZE : INODE_COMPACT_SIZE);
	put_inode_header(wr, w, (uint32_t)i + 1, p);
	put_inode_xattrs(w, p + head);
	head += w->xattr_size;
	if (w->layout == LAYOUT_CHUNK_BASED) {
		put_chunk_indexes(wr, w, p + align_up(head, CHUNK_INDEX_SIZE));
		return 0;
	}
	uint8_t *data = w->nblocks ? wr->img + (uint64_t)w->raw_blkaddr * BLK : NULL;
	if (S_ISLNK(w->ti->mode) || (S_ISREG(w->ti->mode) && w->ti->data)) {
		/* at most one block: inline, or one block in the data area */
		const void *src = w->ti->data ? (const void *)w->ti->data : w->ti->symlink;
		memcpy(w->tail ? p + head : data, src, w->data_size);
		return 0;
	}
	if (!S_ISDIR(w->ti->mode))
		return 0;
	_cleanup_free_ uint8_t *buf = calloc(1, align_up64(w->data_size, BLK));
	if (!buf)
		return -ENOMEM;
	dir_pack(wr, w, buf);
	uint64_t full = (uint64_t)w->nblocks * BLK;
	if (data)
		memcpy(data, buf, w->tail ? full : w->data_size);
	if (w->tail)
		memcpy(p + head, buf + full, w->tail);
	return 0;
}

static void put_shared_xattrs(struct writer *wr)
{
	uint8_t *base = wr->img + (uint64_t)wr->xattr_blkaddr * BLK;
	for (size_t i = 0; i < wr->n_shared; i++) {
		uint8_t idx, plen;
		xattr_index(wr->shared[i]->name, &idx, &plen);
		put_xattr_entry(wr->shared[i], idx, plen, base + wr->shared_off[i]);
	}
	/* ids in inodes are in 4-byte units from xattr_blkaddr */
	for (size_t i = 0; i < wr->n; i++)
		for (size_t j = 0; j < wr->w[i].n_xattrs; j++) {
			struct wxattr *wx = &wr->w[i].xattrs[j];
			if (wx->shared_id >= 0)
				wx->shared_id = wr->shared_off[wx->shared_id] / 4;
		}
}

static void put_superblock(struct writer *wr)
{
	uint8_t *sb = wr->img + SB_OFFSET;
	le32_put(sb, EROFS_MAGIC);
	sb[12] = BLK_BITS;
	le16_put(sb + 14, (uint16_t)(wr->w[0].pos / 32));
	le64_put(sb + 16, wr->n);
	le64_put(sb + 24, (uint64_t)wr->epoch);
	le32_put(sb + 32, wr->epoch_nsec);
	le32_put(sb + 36, (uint32_t)wr->total_blocks);
	le32_put(sb + 40, 0); /* meta_blkaddr */
	le32_put(sb + 44, wr->xattr_blkaddr);
	memcpy(sb + 64, "strata", 6);
	uint32_t incompat = (wr->any_chunked ? FEAT_INCOMPAT_CHUNKED_FILE : 0) |
			    (wr->n_blobs ? FEAT_INCOMPAT_DEVICE_TABLE : 0);
	le32_put(sb + 80, incompat);
	le16_put(sb + 86, (uint16_t)wr->n_blobs);
	le16_put(sb + 88, (SB_OFFSET + SB_SIZE) / DEVT_SLOT_SIZE);
	for (size_t i = 0; i < wr->n_blobs; i++) {
		uint8_t *slot = wr->img + SB_OFFSET + SB_SIZE + i * DEVT_SLOT_SIZE;
		snprintf((char *)slot, 64, "blob-%08u", wr->blobs[i]);
		le32_put(slot + 64, wr->blob_blocks[i]);
		le32_put(slot + 68, 0); /* mapped_blkaddr: not flat-addressed */
	}
}

static int build(struct writer *wr, struct tree *t)
{
	int r;
	if ((r = collect(wr, t)) < 0 || (r = pick_epoch(wr)) < 0 || (r = share_xattrs(wr)) < 0 ||
	    (r = collect_blobs(wr)) < 0)
		return r;
	for (size_t i = 0; i < wr->n; i++)
		layout_inode(wr, &wr->w[i]);
	r = place_inodes(wr, SB_OFFSET + SB_SIZE + (uint64_t)wr->n_blobs * DEVT_SLOT_SIZE);
	if (r < 0)
		return r;
	wr->img = calloc(1, wr->total_blocks * BLK);
	if (!wr->img)
		return -ENOMEM;
	put_shared_xattrs(wr);
	for (size_t i = 0; i < wr->n && r == 0; i++)
		r = put_inode(wr, i);
	if (r == 0)
		put_superblock(wr);
	return r;
}

static void writer_done(struct writer *wr)
{
	for (size_t i = 0; i < wr->n; i++) {
		wr->w[i].ti->scratch = 0;
		free(wr->w[i].dents);
		free(wr->w[i].xattrs);
	}
	free(wr->w);
	free(wr->shared);
	free(wr->shared_off);
	free(wr->blob_blocks);
	free(wr->img);
}

int erofs_write_image(struct tree *t, int fd, struct erofs_image_info *ret)
{
	struct writer wr = {0};
	int r = build(&wr, t);
	if (r == 0)
		r = strata_pwrite_all(fd, wr.img, wr.total_blocks * BLK, 0);
	/* The image may replace a longer file: its size is the image's. */
	if (r == 0 && ftruncate(fd, (off_t)(wr.total_blocks * BLK)) < 0)
		r = -errno;
	if (r == 0) {
		*ret = (struct erofs_image_info){
		    .blobs = TAKE_PTR(wr.blobs),
		    .n_blobs = wr.n_blobs,
		    .size = wr.total_blocks * BLK,
		    .inodes = wr.n,
		    .root_nid = (uint32_t)(wr.w[0].pos / 32),
		};
	}
	free(wr.blobs);
	writer_done(&wr);
	return r;
}
