/* ops_file.c — open files and the data path: open, create, read, write,
 * flush, release, fsync, fallocate, plus connection set-up (init) and
 * shutdown (destroy).
 *
 * Every open is a meta session (meta_open / meta_create ... meta_close), so
 * an unlinked file keeps its data while open anywhere. File bytes go
 * straight to the chunkservers: a request is cut at chunk boundaries
 * (split.c) and each piece is one chunk_read / chunk_write, issued in
 * parallel when a request spans several chunks. Reads never return bytes
 * past the file length and zero-fill holes. Writes past the end raise the
 * inode's in-memory length (size_dirty) and meta records it with
 * meta_set_length on flush, fsync and release (meta_close carries it); with
 * a holder already before the WRITE is answered, since an FSYNC resent
 * after our death is answered by a successor that knows only meta's length.
 *
 * fsync: chunk_sync on the file's chain table when chunk writes happened
 * since the last fsync, then the length, then meta_sync.
 *
 * Image blobs (sticky bit + xattr trusted.strata.blob, see blobcache.h and
 * fs/blob_format.h) are read through the node chunk cache when it is enabled
 * (--cache-dir): the digest table is loaded at the first open (failing the
 * open with EIO if it cannot be), and every read is verified chunk by chunk. */
#include <errno.h>
#include <fcntl.h>
#include <linux/falloc.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "fuse/fuse-internal.h"
#include "fs/log.h"

#define MAX_SEGS (SFS_MAX_IO / STRATA_MIN_CHUNK_SIZE + 2)

static struct sfs *FS(fuse_req_t req)
{
	return fuse_req_userdata(req);
}

static int do_io(struct sfs *fs, strata_ino_t ino, const struct strata_layout *layout, uint64_t off,
		 size_t len, char *buf, bool write, unsigned wflags);

/* Reads [off, off+len) of a file of any length, at most 16 chunks per round
 * (each round's chunks in parallel). */
static int read_range(struct sfs *fs, strata_ino_t ino, const struct strata_layout *l, uint64_t off,
		      size_t len, char *buf)
{
	size_t step = (size_t)STRATA_MIN((uint64_t)l->chunk_size * 16, (uint64_t)SFS_MAX_IO * 16);

	while (len > 0) {
		size_t n = STRATA_MIN(len, step - (size_t)(off % step));
		int r = do_io(fs, ino, l, off, n, buf, false, 0);

		if (r < 0)
			return r;
		off += n;
		buf += n;
		len -= n;
	}
	return 0;
}

/* ---- image blobs ---------------------------------------------------------------- */
struct blob_ctx {
	struct sfs *fs;
	strata_ino_t ino;
	struct strata_layout layout;
};

static int blob_fetch(void *ctx, uint64_t off, size_t len, void *buf)
{
	struct blob_ctx *c = ctx;

	return read_range(c->fs, c->ino, &c->layout, off, len, buf);
}

/* Loads the digest table stored in inode tino. */
static int blob_load_table(struct sfs *fs, strata_ino_t tino, struct sfs_blob_table **ret)
{
	_cleanup_free_ char *buf = NULL;
	struct strata_attr a;
	int r = SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, tino, &a));

	if (r < 0)
		return r;
	if (!S_ISREG(a.mode) || a.size < BLOB_TABLE_HDR_SIZE || a.size > SFS_BLOB_TABLE_MAX ||
	    !a.layout.chunk_size)
		return -EBADMSG;
	buf = malloc(a.size);
	if (!buf)
		return -ENOMEM;
	r = read_range(fs, tino, &a.layout, 0, a.size, buf);
	if (r < 0)
		return r;
	return sfs_blob_table_parse(buf, a.size, ret);
}

/* Whether t may serve ino: no pin, or the pinned SHA-256 (blobcache.h). */
static bool blob_table_as_pinned(struct sfs *fs, strata_ino_t ino, const struct sfs_blob_table *t)
{
	uint8_t want[32];
	return !sfs_blobcache_pinned(fs->bc, ino, want) || !memcmp(want, sfs_blob_table_sha(t), 32);
}

/* Sets *ret to the blob table of in (NULL if in is no blob or the cache is
 * off). A blob whose table cannot be loaded is -EIO: never served
 * unverified. */
static int blob_table(struct sfs *fs, struct sfs_inode *in, const struct sfs_blob_table **ret)
{
	uint8_t x[BLOB_XATTR_SIZE + 16];
	struct sfs_blob_table *t = NULL;
	uint64_t tino;
	uint32_t mode;
	int r;

	*ret = NULL;
	if (!fs->bc)
		return 0;
	pthread_mutex_lock(&in->lock);
	mode = in->mode;
	pthread_mutex_unlock(&in->lock);
	if (!(mode & S_ISVTX))
		return 0;
	*ret = sfs_blobcache_table(fs->bc, in->ino);
	if (*ret)
		return 0;
	r = SFS_CALL(fs, SFS_IDEM, meta_getxattr(fs->mc, in->ino, BLOB_XATTR_NAME, x, sizeof(x)));
	if (r == -ENODATA)
		return 0; /* sticky, but no blob */
	if (r >= 0)
		r = blob_xattr_decode(x, (size_t)r, &tino);
	if (r >= 0)
		r = blob_load_table(fs, tino, &t);
	if (r >= 0 && !blob_table_as_pinned(fs, in->ino, t)) {
		t = sfs_blob_table_free(t);
		return log_warn_errno(
		    -EIO,
		    "Digest table of blob inode %llu does not have the SHA-256 "
		    "its signed image record names (rewritten?): refusing the blob",
		    (unsigned long long)in->ino);
	}
	if (r >= 0)
		r = sfs_blobcache_attach(fs->bc, in->ino, t); /* takes t */
	if (r < 0)
		return log_warn_errno(r == -ENOMEM ? r : -EIO,
				      "Failed to load the digest table of blob inode %llu (%s)",
				      (unsigned long long)in->ino, strerror(-r));
	*ret = sfs_blobcache_table(fs->bc, in->ino);
	return *ret ? 0 : -EIO;
}

/* ---- handles ----------------------------------------------------------------
 * An open file is found by its fh, the meta session id (fuse-internal.h):
 * a table, not a pointer, so that a successor can serve the handles of a
 * dead predecessor (takeover.c). */
static size_t fh_bucket(uint64_t fh)
{
	return (size_t)((fh * 0x9E3779B97F4A7C15ull) >> 40) & (SFS_FH_BUCKETS - 1);
}

static void files_link(struct sfs *fs, struct sfs_file *f)
{
	size_t b = fh_bucket(f->session);

	pthread_mutex_lock(&fs->files_lock);
	f->prev = NULL;
	f->next = fs->files;
	if (fs->files)
		fs->files->prev = f;
	fs->files = f;
	f->hnext = fs->fh_buckets[b];
	fs->fh_buckets[b] = f;
	pthread_mutex_unlock(&fs->files_lock);
}

static void files_unlink(struct sfs *fs, struct sfs_file *f)
{
	pthread_mutex_lock(&fs->files_lock);
	if (f->prev)
		f->prev->next = f->next;
	else
		fs->files = f->next;
	if (f->next)
		f->next->prev = f->prev;
	for (struct sfs_file **pp = &fs->fh_buckets[fh_bucket(f->session)]; *pp;
	     pp = &(*pp)->hnext) {
		if (*pp == f) {
			*pp = f->hnext;
			break;
		}
	}
	pthread_mutex_unlock(&fs->files_lock);
}

static struct sfs_file *files_find(struct sfs *fs, uint64_t fh)
{
	struct sfs_file *f;

	pthread_mutex_lock(&fs->files_lock);
	for (f = fs->fh_buckets[fh_bucket(fh)]; f && f->session != fh; f = f->hnext)
		;
	pthread_mutex_unlock(&fs->files_lock);
	return f;
}

int sfs_handles_init(struct sfs *fs)
{
	pthread_mutex_init(&fs->files_lock, NULL);
	pthread_mutex_init(&fs->dirs_lock, NULL);
	pthread_mutex_init(&fs->adopt_lock, NULL);
	fs->fh_buckets = calloc(SFS_FH_BUCKETS, sizeof(*fs->fh_buckets));
	fs->dir_buckets = calloc(SFS_FH_BUCKETS, sizeof(*fs->dir_buckets));
	fs->dir_next = (uint64_t)sfs_realtime_ns();
	return fs->fh_buckets && fs->dir_buckets ? 0 : -ENOMEM;
}

void sfs_handles_done(struct sfs *fs)
{
	free(fs->fh_buckets);
	free(fs->dir_buckets);
	pthread_mutex_destroy(&fs->files_lock);
	pthread_mutex_destroy(&fs->dirs_lock);
	pthread_mutex_destroy(&fs->adopt_lock);
}

/* Decides whether the kernel may keep its page cache: only if meta's
 * mtime/size are what they were when the cache was last (re)started.
 * Caller holds in->lock. */
static bool keep_cache_locked(struct sfs_inode *in)
{
	if (in->cache_valid && in->cache_mtime == in->seen_mtime && in->cache_size == in->seen_size)
		return true;
	in->cache_valid = true;
	in->cache_mtime = in->seen_mtime;
	in->cache_size = in->seen_size;
	return false;
}

/* Makes sure in has its layout (and a size). */
static int ensure_layout(struct sfs *fs, struct sfs_inode *in)
{
	struct strata_attr a;
	bool have;
	int r;

	pthread_mutex_lock(&in->lock);
	have = in->have_layout;
	pthread_mutex_unlock(&in->lock);
	if (have)
		return 0;
	uint64_t stamp = sfs_attr_stamp(fs);
	r = SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, in->ino, &a));
	if (r < 0)
		return r;
	if (!S_ISREG(a.mode))
		return S_ISDIR(a.mode) ? -EISDIR : -EINVAL;
	sfs_inode_note(fs, &a, false, stamp);
	return 0;
}

int sfs_blob_pin(struct sfs *fs, fuse_ino_t ino, const void *value, size_t size)
{
	const struct sfs_blob_table *t;
	struct sfs_inode *in;
	int r;

	if (!fs->bc)
		return -ENOTSUP; /* blobs are plain files: nothing is verified */
	if (size != 32)
		return -EINVAL;
	in = sfs_inode_get(fs, ino, true);
	if (!in)
		return -ENOMEM;
	r = ensure_layout(fs, in);
	if (r == 0)
		r = sfs_blobcache_pin(fs->bc, ino, value);
	t = r == 0 ? sfs_blobcache_table(fs->bc, ino) : NULL;
	if (t && memcmp(sfs_blob_table_sha(t), value, 32)) {
		log_warn("Blob inode %llu: the table attached before its pin differs from it: "
			 "loading it again",
			 (unsigned long long)ino);
		sfs_blobcache_detach(fs->bc, ino);
	}
	if (r == 0)
		r = blob_table(fs, in, &t); /* loads and checks it now: the caller learns */
	if (r == 0 && !t)
		r = -EINVAL; /* not a blob */
	sfs_inode_put(fs, in);
	return r;
}

/* Whether f is a kernel handle that may write (the kernel may hold dirty
 * pages of its inode: usrbio.c writes them back before it reads). */
static bool kernel_writer(const struct sfs_file *f)
{
	return !f->native && (f->flags & O_ACCMODE) != O_RDONLY;
}

static struct sfs_file *file_new(struct sfs *fs, struct sfs_inode *in, uint64_t session,
				 uint32_t flags, bool native)
{
	struct sfs_file *f = calloc(1, sizeof(*f));

	if (!f)
		return NULL;
	f->inode = in;
	f->session = session;
	f->flags = flags;
	f->native = native;
	pthread_mutex_lock(&in->lock);
	in->nopen++;
	in->nkwriters += kernel_writer(f);
	pthread_mutex_unlock(&in->lock);
	files_link(fs, f);
	return f;
}

/* Closes f's session (recording a pending length) and frees f. */
static int file_close(struct sfs *fs, struct sfs_file *f)
{
	struct sfs_inode *in = f->inode;
	int r;

	files_unlink(fs, f);
	pthread_mutex_lock(&in->lock);
	int64_t len = in->size_dirty ? (int64_t)in->size : -1;
	int64_t mtime = in->data_written ? in->write_mtime : -1;

	r = SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, in->ino, f->session, len, mtime));
	if (r < 0 && len >= 0) /* e.g. the session was lost: keep the length */
		r = SFS_CALL(fs, SFS_IDEM, meta_set_length(fs->mc, in->ino, (uint64_t)len, mtime));
	if (len >= 0 || mtime >= 0)
		sfs_attr_changed_locked(fs, in);
	if (r == 0) {
		in->size_dirty = false;
		in->data_written = false;
	}
	pthread_mutex_unlock(&in->lock);
	sfs_file_closed(fs, f, r);
	return r;
}

void sfs_file_closed(struct sfs *fs, struct sfs_file *f, int r)
{
	struct sfs_inode *in = f->inode;

	pthread_mutex_lock(&in->lock);
	in->nopen--;
	in->nkwriters -= kernel_writer(f);
	pthread_mutex_unlock(&in->lock);
	if (r < 0)
		log_warn_errno(r, "Failed to close the session of inode %llu",
			       (unsigned long long)in->ino);
	sfs_inode_put(fs, in);
	free(f);
}

/* Whether f's close has nothing to record (closer.c invariant 3): then its
 * RELEASE may be answered after a batched close. */
static bool release_batchable(struct sfs_file *f)
{
	struct sfs_inode *in = f->inode;
	bool ok;

	pthread_mutex_lock(&in->lock);
	ok = !in->size_dirty && !in->data_written;
	pthread_mutex_unlock(&in->lock);
	return ok && !f->native;
}

/* Rebuilds the handle of a file a dead predecessor opened (its session
 * fh is still open in meta: a takeover does not clear the sessions). One
 * at a time, so that two requests on the same handle make one. */
static struct sfs_file *file_adopt(struct sfs *fs, fuse_ino_t ino, struct fuse_file_info *fi,
				   int *ret_err)
{
	const struct sfs_blob_table *blob = NULL;
	struct sfs_inode *in;
	struct sfs_file *f;
	int r;

	pthread_mutex_lock(&fs->adopt_lock);
	f = files_find(fs, fi->fh);
	if (f)
		goto out;
	in = sfs_inode_get(fs, ino, true);
	r = in ? ensure_layout(fs, in) : -ENOMEM;
	if (r == 0)
		r = blob_table(fs, in, &blob);
	if (r == 0) {
		f = calloc(1, sizeof(*f));
		r = f ? 0 : -ENOMEM;
	}
	if (r < 0) {
		sfs_inode_put(fs, in);
		*ret_err = r;
		goto out;
	}
	f->inode = in;
	f->session = fi->fh;
	f->flags = (uint32_t)fi->flags;
	f->blob = blob;
	pthread_mutex_lock(&in->lock);
	in->nopen++;
	in->nkwriters += kernel_writer(f);
	/* The predecessor may have written through it without syncing (a
	 * request does not say how the file was opened): the next fsync
	 * syncs the chunks. */
	in->unsynced = true;
	pthread_mutex_unlock(&in->lock);
	files_link(fs, f);
	log_info("Adopted handle %llu of inode %llu from the previous strata-fuse",
		 (unsigned long long)fi->fh, (unsigned long long)ino);
out:
	pthread_mutex_unlock(&fs->adopt_lock);
	return f;
}

/* The open file fi->fh names: ours, or (after a takeover) a predecessor's,
 * rebuilt. NULL with *ret_err set if it cannot be. */
static struct sfs_file *file_get(struct sfs *fs, fuse_ino_t ino, struct fuse_file_info *fi,
				 int *ret_err)
{
	struct sfs_file *f = files_find(fs, fi->fh);

	*ret_err = -EBADF;
	if (f || !fs->taken_over)
		return f;
	return file_adopt(fs, ino, fi, ret_err);
}

/* file_get, or the error replied. */
static struct sfs_file *file_or_reply(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	int err;
	struct sfs_file *f = file_get(FS(req), ino, fi, &err);

	if (!f)
		fuse_reply_err(req, -err);
	return f;
}

void sfs_op_open(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct sfs_inode *in = sfs_inode_get(fs, ino, true);
	uint32_t flags = (uint32_t)fi->flags & ~(uint32_t)(O_TRUNC | O_CREAT | O_EXCL);
	const struct sfs_blob_table *blob = NULL;
	struct sfs_file *f;
	struct sfs_op op;
	uint64_t session;
	int r;

	if (!in) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	sfs_op_of(fs, req, &op);
	r = ensure_layout(fs, in);
	if (r == 0)
		r = blob_table(fs, in, &blob);
	/* reads never depend on it, so retried as before even by an older meta
	 * (which then may open a second session: kept until the next fresh mount) */
	if (r == 0)
		r = SFS_CALL(fs, SFS_IDEM, meta_open(fs->mc, &op.id, ino, flags, &session));
	if (r < 0) {
		sfs_inode_put(fs, in);
		fuse_reply_err(req, -r);
		return;
	}
	f = file_new(fs, in, session, (uint32_t)fi->flags, false);
	if (!f) {
		SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, ino, session, -1, -1));
		sfs_inode_put(fs, in);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	f->blob = blob;
	pthread_mutex_lock(&in->lock);
	fi->keep_cache = keep_cache_locked(in);
	pthread_mutex_unlock(&in->lock);
	/* A read-only handle never has lengths to record: no FLUSH round trip. */
	fi->noflush = (fi->flags & O_ACCMODE) == O_RDONLY;
	fi->fh = f->session;
	if (fuse_reply_open(req, fi) < 0)
		file_close(fs, f);
}

struct sfs_file *sfs_file_open_native(struct sfs *fs, strata_ino_t ino, uint32_t flags,
				      int *ret_err)
{
	struct sfs_inode *in = sfs_inode_get(fs, ino, true);
	/* not a FUSE request: an operation id of this process's life (opid.c) */
	struct meta_opid id = {.conn = fs->life_id, .unique = atomic_fetch_add(&fs->life_ops, 1)};
	const struct sfs_blob_table *blob = NULL;
	struct sfs_file *f = NULL;
	uint64_t session;
	int r;

	flags &= ~(uint32_t)(O_TRUNC | O_CREAT | O_EXCL);
	r = in ? ensure_layout(fs, in) : -ENOMEM;
	if (r == 0)
		r = blob_table(fs, in, &blob);
	if (r == 0)
		r = SFS_CALL(fs, SFS_IDEM, meta_open(fs->mc, &id, ino, flags, &session));
	if (r == 0) {
		f = file_new(fs, in, session, flags, true);
		if (!f) {
			SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, ino, session, -1, -1));
			r = -ENOMEM;
		}
	}
	if (r < 0) {
		sfs_inode_put(fs, in);
		*ret_err = r;
		return NULL;
	}
	f->blob = blob;
	return f;
}

int sfs_file_close(struct sfs *fs, struct sfs_file *f)
{
	return file_close(fs, f);
}

/* O_TRUNC on a file that already existed: trim its chunks, then its length. */
static int create_truncate(struct sfs *fs, struct strata_attr *a)
{
	struct sfs_inode *in = sfs_inode_get(fs, a->ino, true);
	struct strata_setattr sa = {.valid = STRATA_SET_SIZE, .size = 0};
	struct strata_attr out;
	int r;

	if (!in)
		return -ENOMEM;
	pthread_mutex_lock(&in->lock);
	r = sfs_truncate_locked(fs, in, a->ino, &a->layout, a->size, &sa, &out);
	pthread_mutex_unlock(&in->lock);
	sfs_inode_put(fs, in);
	if (r == 0)
		*a = out;
	return r;
}

void sfs_op_create(fuse_req_t req, fuse_ino_t parent, const char *name, mode_t mode,
		   struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	uint32_t m = S_IFREG | (mode & 07777), uid, gid;
	uint32_t flags = (uint32_t)fi->flags & ~(uint32_t)O_TRUNC;
	struct fuse_entry_param e = {0};
	struct sfs_inode *in;
	struct sfs_file *f;
	struct strata_attr a, raw;
	uint64_t session, stamp;
	struct sfs_op op;
	int r;

	sfs_op_of(fs, req, &op);
	sfs_new_owner(req, parent, false, &m, &uid, &gid);
	stamp = sfs_attr_stamp(fs);
	r = SFS_MUTATE(fs, &op,
		       meta_create(fs->mc, &op.id, parent, name, m, uid, gid, flags, &a, &session));
	sfs_dircache_after(fs, parent, name, r, true);
	if (r == 0 && !op.resent)
		sfs_attr_created(fs, parent, &a, stamp);
	else
		sfs_attr_changed(fs, parent);
	if (op.resent)
		stamp = 0; /* the record's attributes (ns_opid.c): not cached */
	if (r == 0 && (fi->flags & O_TRUNC) && a.size > 0) {
		r = create_truncate(fs, &a);
		if (r < 0)
			SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, a.ino, session, -1, -1));
	}
	if (r < 0) {
		fuse_reply_err(req, -r);
		return;
	}
	e.ino = a.ino;
	e.generation = a.generation;
	e.attr_timeout = fs->o.attr_timeout;
	e.entry_timeout = fs->o.entry_timeout;
	raw = a;
	sfs_inode_note(fs, &a, true, stamp);
	if (!(fi->flags & O_TRUNC))
		sfs_attr_put(fs, &raw, stamp);
	sfs_fill_stat(fs, &a, &e.attr);
	in = sfs_inode_get(fs, a.ino, true);
	f = in ? file_new(fs, in, session, (uint32_t)fi->flags, false) : NULL;
	if (!f) {
		SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, a.ino, session, -1, -1));
		sfs_inode_put(fs, in);
		sfs_inode_forget(fs, a.ino, 1);
		fuse_reply_err(req, ENOMEM);
		return;
	}
	pthread_mutex_lock(&in->lock);
	keep_cache_locked(in); /* a new file: its (empty) cache starts now */
	pthread_mutex_unlock(&in->lock);
	fi->fh = f->session;
	if (fuse_reply_create(req, &e, fi) < 0) {
		file_close(fs, f);
		sfs_inode_forget(fs, a.ino, 1);
	}
}

void sfs_op_release(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct sfs_file *f = files_find(fs, fi->fh);

	if (f && release_batchable(f)) {
		files_unlink(fs, f);
		if (sfs_closer_queue(fs, req, f))
			return; /* answered once meta closed it */
		sfs_file_closed(
		    fs, f, SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, ino, f->session, -1, -1)));
		fuse_reply_err(req, 0);
		return;
	}
	if (f)
		file_close(fs, f);
	else if (fs->taken_over) /* a predecessor's handle never used since */
		SFS_CALL(fs, SFS_IDEM, meta_close(fs->mc, ino, fi->fh, -1, -1));
	fuse_reply_err(req, 0);
}

int sfs_record_length_locked(struct sfs *fs, struct sfs_inode *in)
{
	int64_t mtime;
	int r;

	if (!in->size_dirty && !in->data_written)
		return 0;
	mtime = in->data_written ? in->write_mtime : -1;
	r = SFS_CALL(fs, SFS_IDEM, meta_set_length(fs->mc, in->ino, in->size, mtime));
	sfs_attr_changed_locked(fs, in);
	if (r < 0)
		return r;
	in->size_dirty = false;
	in->data_written = false;
	return 0;
}

void sfs_op_flush(fuse_req_t req, fuse_ino_t ino, struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct sfs_file *f = file_or_reply(req, ino, fi);
	struct sfs_inode *in;
	int r;

	if (!f)
		return;
	in = f->inode;
	pthread_mutex_lock(&in->lock);
	r = sfs_record_length_locked(fs, in);
	pthread_mutex_unlock(&in->lock);
	fuse_reply_err(req, -r);
}

void sfs_op_fsync(fuse_req_t req, fuse_ino_t ino, int datasync, struct fuse_file_info *fi)
{
	struct sfs_file *f = file_or_reply(req, ino, fi);

	if (f)
		fuse_reply_err(req, -sfs_file_fsync(FS(req), f, datasync));
}

int sfs_file_fsync(struct sfs *fs, struct sfs_file *f, bool datasync)
{
	struct sfs_inode *in = f->inode;
	bool meta_changed;
	int r = 0;

	pthread_mutex_lock(&in->lock);
	if (in->unsynced) {
		in->unsynced = false;
		r = SFS_CALL(fs, SFS_IDEM, chunk_sync(fs->cc, &in->layout));
		if (r < 0)
			in->unsynced = true;
	}
	meta_changed = in->size_dirty || in->data_written;
	if (r == 0)
		r = sfs_record_length_locked(fs, in);
	pthread_mutex_unlock(&in->lock);
	if (r == 0 && (meta_changed || !datasync))
		r = SFS_CALL(fs, SFS_IDEM, meta_sync(fs->mc));
	return r;
}

void sfs_op_fallocate(fuse_req_t req, fuse_ino_t ino, int mode, off_t off, off_t len,
		      struct fuse_file_info *fi)
{
	struct sfs *fs = FS(req);
	struct sfs_file *f = file_or_reply(req, ino, fi);
	struct sfs_inode *in;
	uint64_t end;
	int r = 0;

	if (!f)
		return;
	in = f->inode;
	/* No space reservation: chunks are allocated when written. Mode 0 only
	 * extends the length (the new range reads as zeros). */
	if (mode & ~FALLOC_FL_KEEP_SIZE) {
		fuse_reply_err(req, EOPNOTSUPP);
		return;
	}
	if (off < 0 || len <= 0 || __builtin_add_overflow((uint64_t)off, (uint64_t)len, &end)) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	pthread_mutex_lock(&in->lock);
	if (!(mode & FALLOC_FL_KEEP_SIZE) && end > in->size) {
		r = SFS_CALL(fs, SFS_IDEM,
			     meta_set_length(fs->mc, in->ino, end, sfs_realtime_ns()));
		sfs_attr_changed_locked(fs, in);
		if (r == 0)
			in->size = end;
	}
	pthread_mutex_unlock(&in->lock);
	fuse_reply_err(req, -r);
}

/* ---- data path ------------------------------------------------------------------ */
struct io_job {
	struct sfs *fs;
	const struct strata_layout *layout;
	strata_ino_t ino;
	const struct sfs_seg *seg;
	char *buf; /* request buffer; the segment is at seg->bufoff */
	bool write;
	unsigned wflags;
	int result;
};

static int seg_read(struct io_job *j)
{
	struct chunk_id id = {.ino = j->ino, .index = j->seg->index};
	char *p = j->buf + j->seg->bufoff;
	ssize_t got = SFS_CALL(j->fs, SFS_IDEM,
			       chunk_read(j->fs->cc, j->layout, id, j->seg->off, j->seg->len, p));

	if (got < 0)
		return (int)got;
	if ((size_t)got < j->seg->len) /* a hole or a short chunk */
		memset(p + got, 0, j->seg->len - (size_t)got);
	return 0;
}

/* Every retry of the segment carries the request ids of its first attempt:
 * a retry after chunk_client's failover window that a replica applied
 * already is answered from its dedup table, not applied twice. */
static int seg_write(struct io_job *j)
{
	struct chunk_id id = {.ino = j->ino, .index = j->seg->index};
	uint64_t ids = 0;

	return SFS_CALL(j->fs, SFS_IDEM,
			chunk_write_ids(j->fs->cc, j->layout, id, j->seg->off, j->seg->len,
					j->buf + j->seg->bufoff, j->wflags, &ids));
}

static void *io_thread(void *arg)
{
	struct io_job *j = arg;

	j->result = j->write ? seg_write(j) : seg_read(j);
	return NULL;
}

/* Runs the segments: the first on this thread, the others on helper threads
 * (a request spans at most a few chunks, each on a different chain). */
static int run_segs(struct io_job *jobs, int n)
{
	pthread_t tids[MAX_SEGS];
	bool started[MAX_SEGS] = {false};
	int r = 0;

	for (int i = 1; i < n; i++)
		started[i] = sfs_thread_start(&tids[i], io_thread, &jobs[i]) == 0;
	io_thread(&jobs[0]);
	for (int i = 1; i < n; i++) {
		if (started[i])
			pthread_join(tids[i], NULL);
		else
			io_thread(&jobs[i]);
	}
	for (int i = 0; i < n && r == 0; i++)
		r = jobs[i].result;
	return r;
}

static int do_io(struct sfs *fs, strata_ino_t ino, const struct strata_layout *layout, uint64_t off,
		 size_t len, char *buf, bool write, unsigned wflags)
{
	struct sfs_seg segs[MAX_SEGS];
	struct io_job jobs[MAX_SEGS];
	int n = sfs_split(layout->chunk_size, off, len, segs, MAX_SEGS);

	if (n <= 0)
		return n < 0 ? n : 0;
	for (int i = 0; i < n; i++)
		jobs[i] = (struct io_job){.fs = fs,
					  .layout = layout,
					  .ino = ino,
					  .seg = &segs[i],
					  .buf = buf,
					  .write = write,
					  .wflags = wflags};
	return run_segs(jobs, n);
}

void sfs_op_read(fuse_req_t req, fuse_ino_t ino, size_t size, off_t off, struct fuse_file_info *fi)
{
	struct sfs_file *f = file_or_reply(req, ino, fi);
	_cleanup_free_ char *buf = NULL;
	ssize_t n;

	if (!f)
		return;
	if (off < 0) {
		fuse_reply_err(req, EINVAL);
		return;
	}
	buf = malloc(size ? size : 1);
	if (!buf) {
		fuse_reply_err(req, ENOMEM);
		return;
	}
	n = sfs_file_read(FS(req), f, (uint64_t)off, size, buf);
	if (n < 0)
		fuse_reply_err(req, (int)-n);
	else
		fuse_reply_buf(req, buf, (size_t)n);
}

ssize_t sfs_file_read(struct sfs *fs, struct sfs_file *f, uint64_t off, size_t len, char *buf)
{
	struct sfs_inode *in = f->inode;
	struct strata_layout layout;
	uint64_t n;
	int r;

	pthread_mutex_lock(&in->lock);
	n = sfs_clamp_read(in->size, off, len);
	layout = in->layout;
	pthread_mutex_unlock(&in->lock);
	if (n == 0)
		return 0;
	if (f->blob) {
		struct blob_ctx c = {.fs = fs, .ino = in->ino, .layout = layout};

		r = sfs_blobcache_read(fs->bc, f->blob, off, n, buf, blob_fetch, &c);
	} else {
		r = do_io(fs, in->ino, &layout, off, n, buf, false, 0);
	}
	if (r == -EIO)
		log_warn("Read of inode %llu at %llu failed: bad chunk or lost chunkserver",
			 (unsigned long long)in->ino, (unsigned long long)off);
	return r < 0 ? r : (ssize_t)n;
}

/* Whether rd (n bytes after clamping) is one range of one chunk of a plain
 * file: then *ret is its chunk read. */
static bool read_in_one_chunk(struct sfs_read *rd, uint64_t n, struct strata_layout *layout,
			      struct chunk_read_one *ret)
{
	uint64_t cs = layout->chunk_size;

	/* (a range above CHUNK_IO_MAX is read on its own by chunk_read_many) */
	if (rd->f->blob || n == 0 || !cs || rd->off / cs != (rd->off + n - 1) / cs)
		return false;
	*ret = (struct chunk_read_one){.layout = layout,
				       .id = {.ino = rd->f->inode->ino, .index = rd->off / cs},
				       .off = (uint32_t)(rd->off % cs),
				       .len = (uint32_t)n,
				       .buf = rd->buf};
	return true;
}

void sfs_file_read_many(struct sfs *fs, struct sfs_read *rd, int n)
{
	struct strata_layout layouts[SFS_READ_MANY_MAX];
	struct chunk_read_one cr[SFS_READ_MANY_MAX];
	int of[SFS_READ_MANY_MAX], m = 0;

	for (int i = 0; i < n && i < SFS_READ_MANY_MAX; i++) {
		struct sfs_inode *in = rd[i].f->inode;
		uint64_t len;

		pthread_mutex_lock(&in->lock);
		len = sfs_clamp_read(in->size, rd[i].off, rd[i].len);
		layouts[m] = in->layout;
		pthread_mutex_unlock(&in->lock);
		rd[i].result = (ssize_t)len;
		if (read_in_one_chunk(&rd[i], len, &layouts[m], &cr[m]))
			of[m++] = i;
		else if (len > 0)
			rd[i].result = sfs_file_read(fs, rd[i].f, rd[i].off, rd[i].len, rd[i].buf);
	}
	chunk_read_many(fs->cc, cr, m);
	for (int k = 0; k < m; k++) {
		struct sfs_read *r = &rd[of[k]];

		if (cr[k].result < 0) /* again on its own, with sfs_file_read's retries */
			r->result = sfs_file_read(fs, r->f, r->off, r->len, r->buf);
		else if ((size_t)cr[k].result < cr[k].len) /* a hole or a short chunk */
			memset((char *)cr[k].buf + cr[k].result, 0, cr[k].len - cr[k].result);
	}
	for (int i = SFS_READ_MANY_MAX; i < n; i++)
		rd[i].result = sfs_file_read(fs, rd[i].f, rd[i].off, rd[i].len, rd[i].buf);
}

void sfs_op_write(fuse_req_t req, fuse_ino_t ino, const char *buf, size_t size, off_t off,
		  struct fuse_file_info *fi)
{
	struct sfs_file *f = file_or_reply(req, ino, fi);
	int r;

	if (!f)
		return;
	r = off < 0 ? -EINVAL : sfs_file_write(FS(req), f, (uint64_t)off, size, buf);
	if (r < 0)
		fuse_reply_err(req, -r);
	else
		fuse_reply_write(req, size);
}

int sfs_file_write(struct sfs *fs, struct sfs_file *f, uint64_t off, size_t size, const char *buf)
{
	struct sfs_inode *in = f->inode;
	bool sync = (f->flags & O_DSYNC) != 0;
	struct strata_layout layout;
	uint64_t end;
	int r;

	if (__builtin_add_overflow(off, (uint64_t)size, &end) || end > INT64_MAX)
		return -EINVAL;
	pthread_mutex_lock(&in->lock);
	layout = in->layout;
	pthread_mutex_unlock(&in->lock);
	r = do_io(fs, in->ino, &layout, off, size, (char *)buf, true, sync ? CHUNK_WRITE_SYNC : 0);
	if (r < 0)
		return log_warn_errno(r, "Write of inode %llu at %llu (%zu bytes) failed",
				      (unsigned long long)in->ino, (unsigned long long)off, size);
	pthread_mutex_lock(&in->lock);
	if (end > in->size) {
		in->size = end;
		in->size_dirty = true;
	}
	in->data_written = true;
	in->write_mtime = sfs_realtime_ns();
	sfs_attr_changed_locked(fs, in);
	if (!sync)
		in->unsynced = true;
	/* With a holder, a WRITE we answer may be followed by our death and an
	 * FSYNC answered by a successor that knows only meta's length: so the
	 * length a WRITE raised is in meta before the WRITE is answered (README
	 * "What a crash of strata-fuse loses"). */
	if (sync || (in->size_dirty && fs->o.holder))
		r = sfs_record_length_locked(fs, in);
	pthread_mutex_unlock(&in->lock);
	return r;
}

/* ---- connection ------------------------------------------------------------------ */
void sfs_op_init(void *userdata, struct fuse_conn_info *conn)
{
	struct sfs *fs = userdata;

	conn->max_write = SFS_MAX_IO;
	conn->max_readahead = SFS_MAX_IO;
	conn->max_background = 64;
	conn->congestion_threshold = 48;
	conn->time_gran = 1;
	/* Truncation must trim chunks first: keep O_TRUNC as a separate
	 * setattr. The kernel kills suid/sgid on write itself. */
	conn->want &= ~(unsigned)(FUSE_CAP_ATOMIC_O_TRUNC | FUSE_CAP_HANDLE_KILLPRIV);
	conn->want |= conn->capable &
		      (FUSE_CAP_ASYNC_READ | FUSE_CAP_PARALLEL_DIROPS | FUSE_CAP_READDIRPLUS |
		       FUSE_CAP_READDIRPLUS_AUTO | FUSE_CAP_CACHE_SYMLINKS | FUSE_CAP_ASYNC_DIO);
	if (fs->o.writeback && (conn->capable & FUSE_CAP_WRITEBACK_CACHE)) {
		conn->want |= FUSE_CAP_WRITEBACK_CACHE;
		fs->writeback = true;
	}
	log_info("FUSE protocol %u.%u, max_write %u, writeback cache %s", conn->proto_major,
		 conn->proto_minor, conn->max_write, fs->writeback ? "on" : "off");
}

void sfs_close_all(struct sfs *fs)
{
	for (;;) {
		struct sfs_file *f;

		pthread_mutex_lock(&fs->files_lock);
		f = fs->files;
		pthread_mutex_unlock(&fs->files_lock);
		if (!f)
			break;
		file_close(fs, f);
	}
}

void sfs_op_destroy(void *userdata)
{
	struct sfs *fs = userdata;

	if (!fs->handing_over) /* a restart: they are the kernel's handles */
		sfs_close_all(fs);
}
