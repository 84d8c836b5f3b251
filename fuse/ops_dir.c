/* ops_dir.c — directory handles: opendir, readdir, readdirplus, releasedir,
 * fsyncdir.
 *
 * Directory offsets are positions in the listing: 0 is ".", 1 is "..", and
 * entry k of meta's name-ordered listing is position k + 2. A handle keeps
 * a window of up to SFS_DIR_PAGE entries fetched with meta_readdir; the next
 * window is fetched with the `after` cursor (the window's last name), so
 * entries created or removed meanwhile never make the listing repeat or skip
 * a name that stayed. Reading on from where the last call stopped (the
 * usual case) costs one meta call per window; a seek backwards (rewinddir,
 * seekdir) restarts from the first entry.
 *
 * readdirplus returns attributes too, and each entry it returns counts as a
 * kernel lookup (except "." and ".."). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "fuse/fuse-internal.h"

static struct sfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

/* ---- handles: a table by fh (fuse-internal.h), so that the handles of a
 * dead predecessor can be served after a takeover: such a handle is made
 * anew at its first use (its window is fetched again from the offset the
 * kernel asks for). */
static size_t dir_bucket(uint64_t fh)
{
	return (size_t)((fh * 0x9E3779B97F4A7C15ull) >> 40) & (SFS_FH_BUCKETS - 1);
}

static struct sfs_dir *dir_new(strata_ino_t ino, uint64_t fh)
{
	struct sfs_dir *d = calloc(1, sizeof(*d));

	if (!d)
		return NULL;
	d->ents = calloc(SFS_DIR_PAGE, sizeof(*d->ents));
	if (!d->ents) {
		free(d);
		return NULL;
	}
	pthread_mutex_init(&d->lock, NULL);
	d->ino = ino;
	d->fh = fh;
	return d;
}

static void dir_free(struct sfs_dir *d)
{
	pthread_mutex_destroy(&d->lock);
	free(d->ents);
	free(d);
}

/* dirs_lock held. */
static struct sfs_dir *dir_find_locked(struct sfs *fs, uint64_t fh)
{
	struct sfs_dir *d = fs->dir_buckets[dir_bucket(fh)];

	while (d && d->fh != fh)
		d = d->hnext;
	return d;
}

static void dir_link(struct sfs *fs, struct sfs_dir *d)
{
	size_t b = dir_bucket(d->fh);

	pthread_mutex_lock(&fs->dirs_lock);
	d->hnext = fs->dir_buckets[b];
	fs->dir_buckets[b] = d;
	pthread_mutex_unlock(&fs->dirs_lock);
}

/* Unlinks and returns the handle fh (NULL if unknown). */
static struct sfs_dir *dir_unlink(struct sfs *fs, uint64_t fh)
{
	struct sfs_dir *d = NULL;

	pthread_mutex_lock(&fs->dirs_lock);
	for (struct sfs_dir **pp = &fs->dir_buckets[dir_bucket(fh)]; *pp; pp = &(*pp)->hnext) {
		if ((*pp)->fh == fh) {
			d = *pp;
			*pp = d->hnext;
			break;
		}
	}
	pthread_mutex_unlock(&fs->dirs_lock);
	return d;
}

/* The handle fi->fh names; after a takeover an unknown one is made anew. */
static struct sfs_dir *dir_get(struct sfs *fs, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_dir *d;

	pthread_mutex_lock(&fs->dirs_lock);
	d = dir_find_locked(fs, fi->fh);
	if (!d && fs->taken_over) {
		d = dir_new(ino, fi->fh);
		if (d) {
			d->hnext = fs->dir_buckets[dir_bucket(d->fh)];
			fs->dir_buckets[dir_bucket(d->fh)] = d;
		}
	}
	pthread_mutex_unlock(&fs->dirs_lock);
	return d;
}

void sfs_op_opendir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct sfs_dir *d = dir_new(ino, atomic_fetch_add(&fs->dir_next, 1));

	if (!d) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	dir_link(fs, d);
	fi->fh = d->fh;
	fi->cache_readdir = 0;
	if (fuse_reply_open(req, fi) < 0)
		dir_free(dir_unlink(fs, d->fh));
}

void sfs_op_releasedir(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs_dir *d = dir_unlink(FS(req), fi->fh);

	if (d)
		dir_free(d);
	fuse_reply_err(req, 0);
}

void sfs_op_fsyncdir(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);

	fuse_reply_err(req, -SFS_CALL(fs, SFS_IDEM, meta_sync(fs->mc)));
}

/* Fetches the window that starts after `after` at listing index base. */
static int fetch(struct sfs *fs, struct sfs_dir *d, const char *after, uint64_t base, bool plus)
{
	int more = 0;
	uint64_t stamp = sfs_attr_stamp(fs);
	int n = SFS_CALL(fs, SFS_IDEM,
			 meta_readdir(fs->mc, d->ino, after, plus, d->ents, SFS_DIR_PAGE, &more));

	if (n < 0)
		return n;
	d->n = n;
	d->base = base;
	d->more = more != 0 && n > 0;
	d->plus = plus;
	d->loaded = true;
	d->stamp = stamp;
	return 0;
}

/* Makes the window hold listing index idx if it exists. Returns 0 (then
 * idx < base + n, or the listing ends before idx) or -errno. */
static int seek_window(struct sfs *fs, struct sfs_dir *d, uint64_t idx, bool plus)
{
	char after[STRATA_NAME_MAX + 1];
	int r;

	if (!d->loaded || idx < d->base || (plus && !d->plus)) {
		r = fetch(fs, d, "", 0, plus);
		if (r < 0)
			return r;
	}
	while (idx >= d->base + (uint64_t)d->n && d->more) {
		memcpy(after, d->ents[d->n - 1].name, sizeof(after));
		r = fetch(fs, d, after, d->base + (uint64_t)d->n, plus);
		if (r < 0)
			return r;
	}
	return 0;
}

/* Adds one entry to buf; returns its size or 0 if it does not fit. For
 * readdirplus the entry counts as a lookup only once it fits. */
static size_t add_entry(fuse_req_t req, char *buf, size_t rem, const char *name,
			struct meta_dirent *de, strata_ino_t self, off_t next, bool plus,
			uint64_t stamp)
{
	struct sfs *fs = FS(req);
	struct fuse_entry_param e = {0};
	size_t sz;

	if (!plus) {
		struct stat st = {.st_ino = de ? de->ino : self,
				  .st_mode = de ? de->mode & S_IFMT : S_IFDIR};

		sz = fuse_add_direntry(req, buf, rem, name, &st, next);
		return sz <= rem ? sz : 0;
	}
	if (!de) { /* "." and "..": no lookup counted (ino 0) */
		e.attr.st_ino = self;
		e.attr.st_mode = S_IFDIR;
		sz = fuse_add_direntry_plus(req, buf, rem, name, &e, next);
		return sz <= rem ? sz : 0;
	}
	sz = fuse_add_direntry_plus(req, NULL, 0, name, NULL, 0); /* size only */
	if (sz > rem)
		return 0;
	/* Counted as a lookup only now that it fits; the reported size is the
	 * max with local writes. */
	sfs_inode_note(fs, &de->attr, true, stamp);
	e.ino = de->ino;
	e.generation = de->attr.generation;
	e.attr_timeout = fs->o.attr_timeout;
	e.entry_timeout = fs->o.entry_timeout;
	sfs_fill_stat(fs, &de->attr, &e.attr);
	fuse_add_direntry_plus(req, buf, rem, name, &e, next);
	return sz;
}

static void do_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		       struct fuse_file_info *fi, bool plus)
{
	struct sfs *fs = FS(req);
	struct sfs_dir *d = dir_get(fs, ino, fi);
	_cleanup_free_ char *buf = NULL;
	size_t used = 0;
	uint64_t pos;
	int r = 0;

	if (!d) {
		fuse_reply_err(req, fs->taken_over ? ENOMEM : EBADF);
		return;
	}
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	size = STRATA_MIN(size, (size_t)SFS_MAX_IO);
	buf = malloc(size);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&d->lock);
	for (pos = (uint64_t)off;; pos++) {
		struct meta_dirent *de = NULL;
		const char *name;
		size_t sz;

		if (pos < 2) {
			name = pos == 0 ? "." : "..";
		} else {
			r = seek_window(fs, d, pos - 2, plus);
			if (r < 0 || pos - 2 >= d->base + (uint64_t)d->n)
				break;
			de = &d->ents[pos - 2 - d->base];
			name = de->name;
		}
		sz = add_entry(req, buf + used, size - used, name, de, ino, (off_t)(pos + 1), plus,
			       d->stamp);
		if (sz == 0)
			break;
		used += sz;
	}
	pthread_mutex_unlock(&d->lock);
	if (r < 0 && used == 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_buf(req, buf, used);
}

void sfs_op_readdir(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
		    struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, false);
}

void sfs_op_readdirplus(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off,
			struct fuse_file_info *fi)
{
	do_readdir(req, ino, size, off, fi, true);
}
