/* tar_stream.c — trees in and out of a sandbox as tar streams of any size,
 * on a transfer's worker (xfer.h) through the sandbox's root (inroot.h).
 *
 * Out: a walk by directory fds from dir (never by name from the root
 * again: each step is an openat of one name with O_NOFOLLOW, so a symlink
 * the sandbox swaps in is not followed), staying on dir's filesystem (as
 * tar --one-file-system: not into the sandbox's /proc or /dev). Regular
 * files, directories, symlinks and hard links (a second name of an inode
 * already sent is a link entry), with mode, uid/gid and mtime; file bytes go
 * from the file to the socket with sendfile inside a chunk of the chunked
 * response. Other types (devices, FIFOs, sockets) are left out.
 *
 * In: the archive is read as it arrives; every member's parent is resolved
 * under the root with openat2 (parents made), the member itself made with
 * the *at calls on that parent fd (an existing non-directory is replaced),
 * file bytes spliced from the socket into the file. Owners come from the
 * archive (or all are the upload's user), modes and mtimes too; a
 * directory's mtime is set at the end, after its members were written.
 * A member whose name has ".." stops the upload with -EINVAL; a failed
 * upload removes the names it created, parent directories included (a file
 * is written under a temporary name and renamed into place once whole, so
 * the failed member leaves the file it would have replaced as it was;
 * members before it stay replaced). pax extended headers give the next
 * member its path, linkpath, size, uid, gid and mtime. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/inroot.h"
#include "sandbox/sandboxd/tar.h"
#include "sandbox/sandboxd/xfer.h"

#define TAR_BLOCK 512
#define OUT_BUF 65536 /* headers and small files gathered into one chunk */
#define LINK_MAX_LEN 4095
#define TAIL_MAX 65536 /* body bytes after the archive's end that are read */

/* ---- out ------------------------------------------------------------------ */

/* A name remembered during a stream: an inode sent (out, for hard links)
 * or a directory made (in, for its mtime at the end). */
struct named {
	dev_t dev;
	ino_t ino;
	struct timespec mtime;
	char *name;
};

struct names {
	struct named *v;
	size_t n, cap;
};

static int names_add(struct names *ns, struct named e, const char *name)
{
	if (ns->n == ns->cap) {
		size_t cap = ns->cap ? ns->cap * 2 : 64;
		struct named *v = realloc(ns->v, cap * sizeof(*v));
		if (!v)
			return -ENOMEM;
		ns->v = v;
		ns->cap = cap;
	}
	if (!(e.name = strdup(name)))
		return -ENOMEM;
	ns->v[ns->n++] = e;
	return 0;
}

static void names_free(struct names *ns)
{
	for (size_t i = 0; i < ns->n; i++)
		free(ns->v[i].name);
	free(ns->v);
}

struct tar_out {
	struct sbd_xfer *x;
	char buf[OUT_BUF];
	size_t len;
	uint64_t mnt_id; /* dir's mount (st_dev will not do: overlayfs gives
			  * files the st_dev of the layer they are on) */
	size_t entries;
	struct names links; /* inodes with more than one name, as sent */
	uint32_t base;	    /* the sandbox's id 0 on the host (inroot.h) */
};

/* Sends what is gathered as one chunk. */
static int out_flush(struct tar_out *t)
{
	if (!t->len)
		return 0;
	char h[32];
	int k = snprintf(h, sizeof(h), "%zx\r\n", t->len);
	int r = sbd_xfer_send(t->x, h, (size_t)k);
	if (r == 0)
		r = sbd_xfer_send(t->x, t->buf, t->len);
	if (r == 0)
		r = sbd_xfer_send(t->x, "\r\n", 2);
	t->len = 0;
	return r;
}

static int out_put(struct tar_out *t, const void *p, size_t n)
{
	const char *s = p;
	while (n) {
		if (t->len == OUT_BUF) {
			int r = out_flush(t);
			if (r < 0)
				return r;
		}
		size_t k = OUT_BUF - t->len < n ? OUT_BUF - t->len : n;
		memcpy(t->buf + t->len, s, k);
		t->len += k;
		s += k;
		n -= k;
	}
	return 0;
}

static int out_pad(struct tar_out *t, uint64_t size)
{
	static const char zero[TAR_BLOCK];
	return size % TAR_BLOCK ? out_put(t, zero, TAR_BLOCK - size % TAR_BLOCK) : 0;
}

/* A GNU long-name ('L') or long-link ('K') record for s. */
static int out_long(struct tar_out *t, char type, const char *s)
{
	struct sbd_tar_hdr h = {.name = "././@LongLink", .type = type, .size = strlen(s) + 1};
	char b[TAR_BLOCK];
	sbd_tar_encode(b, &h);
	int r = out_put(t, b, sizeof(b));
	if (r == 0)
		r = out_put(t, s, h.size);
	return r < 0 ? r : out_pad(t, h.size);
}

static int out_header(struct tar_out *t, const char *name, char type, const struct stat *st,
		      uint64_t size, const char *link)
{
	if (++t->entries > TAR_MAX_ENTRIES)
		return -E2BIG;
	int r = strlen(name) >= 100 ? out_long(t, 'L', name) : 0;
	if (r == 0 && link && strlen(link) >= 100)
		r = out_long(t, 'K', link);
	if (r < 0)
		return r;
	struct sbd_tar_hdr h = {.name = name,
				.link = link,
				.type = type,
				.mode = st->st_mode & 07777,
				.uid = sbd_id_from_host(t->base, st->st_uid),
				.gid = sbd_id_from_host(t->base, st->st_gid),
				.size = size,
				.mtime = st->st_mtime};
	char b[TAR_BLOCK];
	sbd_tar_encode(b, &h);
	return out_put(t, b, sizeof(b));
}

/* A regular file's bytes: its own chunk, sent by sendfile. */
static int out_file(struct tar_out *t, int dfd, const char *name, const char *rel,
		    const struct stat *lst)
{
	_cleanup_close_ int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
	struct stat st;
	if (fd < 0 || fstat(fd, &st) < 0)
		return errno == ENOENT || errno == ELOOP ? 0
							 : -errno; /* gone or swapped: skipped */
	if (!S_ISREG(st.st_mode) || st.st_ino != lst->st_ino)
		return 0;
	int r = out_header(t, rel, '0', &st, (uint64_t)st.st_size, NULL);
	if (r < 0 || !st.st_size)
		return r;
	char h[32];
	int k = snprintf(h, sizeof(h), "%llx\r\n", (unsigned long long)st.st_size);
	if ((r = out_flush(t)) < 0 || (r = sbd_xfer_send(t->x, h, (size_t)k)) < 0 ||
	    (r = sbd_xfer_sendfile(t->x, fd, 0, (uint64_t)st.st_size)) < 0 ||
	    (r = sbd_xfer_send(t->x, "\r\n", 2)) < 0)
		return r; /* a file that shrank meanwhile breaks the stream */
	return out_pad(t, (uint64_t)st.st_size);
}

/* A second name of an inode already sent: its link entry, true. */
static int out_hardlink(struct tar_out *t, const char *rel, const struct stat *st, bool *done)
{
	*done = false;
	if (st->st_nlink < 2)
		return 0;
	for (size_t i = 0; i < t->links.n; i++)
		if (t->links.v[i].dev == st->st_dev && t->links.v[i].ino == st->st_ino) {
			*done = true;
			return out_header(t, rel, '1', st, 0, t->links.v[i].name);
		}
	return names_add(&t->links, (struct named){.dev = st->st_dev, .ino = st->st_ino}, rel);
}

static int out_dir(struct tar_out *t, int dfd, const char *rel, int depth); /* takes dfd */

static int mount_id(int dfd, const char *name, uint64_t *ret)
{
	struct statx sx;
	if (statx(dfd, name, AT_SYMLINK_NOFOLLOW | (name[0] ? 0 : AT_EMPTY_PATH), STATX_MNT_ID,
		  &sx) < 0)
		return -errno;
	if (!(sx.stx_mask & STATX_MNT_ID))
		return -EOPNOTSUPP;
	*ret = sx.stx_mnt_id;
	return 0;
}

static int out_entry(struct tar_out *t, int dfd, const char *name, const char *rel, int depth)
{
	struct stat st;
	uint64_t mnt = 0;
	if (fstatat(dfd, name, &st, AT_SYMLINK_NOFOLLOW) < 0 || mount_id(dfd, name, &mnt) < 0)
		return errno == ENOENT ? 0 : -errno;
	if (mnt != t->mnt_id)
		return 0; /* a mount point: not followed */
	if (S_ISDIR(st.st_mode)) {
		_cleanup_free_ char *d = NULL;
		if (asprintf(&d, "%s/", rel) < 0)
			return -ENOMEM;
		int r = out_header(t, d, '5', &st, 0, NULL);
		if (r < 0)
			return r;
		int sub = openat(dfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
		if (sub < 0)
			return errno == ENOENT || errno == ELOOP || errno == ENOTDIR ? 0 : -errno;
		return out_dir(t, sub, rel, depth + 1);
	}
	if (S_ISLNK(st.st_mode)) {
		char target[LINK_MAX_LEN + 1];
		ssize_t n = readlinkat(dfd, name, target, LINK_MAX_LEN);
		if (n < 0)
			return errno == ENOENT || errno == EINVAL ? 0 : -errno;
		target[n] = 0;
		return out_header(t, rel, '2', &st, 0, target);
	}
	if (!S_ISREG(st.st_mode))
		return 0;
	bool linked;
	int r = out_hardlink(t, rel, &st, &linked);
	return r < 0 || linked ? r : out_file(t, dfd, name, rel, &st);
}

/* Sends the entries of directory dfd, which it takes over: one fd per
 * level of the walk (a 64-deep tree holds 65, not twice as many). */
static int out_dir(struct tar_out *t, int dfd, const char *rel, int depth)
{
	if (depth > TAR_MAX_DEPTH) {
		close(dfd);
		return -ELOOP;
	}
	DIR *dp = fdopendir(dfd);
	if (!dp) {
		int r = -errno;
		close(dfd);
		return r;
	}
	int r = 0;
	struct dirent *de;
	while (r == 0 && (de = readdir(dp))) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		char *cr = NULL;
		if (asprintf(&cr, "%s%s%s", rel, rel[0] ? "/" : "", de->d_name) < 0) {
			r = -ENOMEM;
			break;
		}
		r = out_entry(t, dfd, de->d_name, cr, depth);
		if (r < 0 && !t->x->err.code)
			strata_err_set(&t->x->err, r, "%s: %s", cr, strerror(-r));
		free(cr);
	}
	closedir(dp);
	return r;
}

int64_t sbd_tar_stream_out(struct sbd_xfer *x, int root, const char *dir, uint32_t base)
{
	_cleanup_close_ int fd = sbd_inroot_open_dir(root, dir);
	if (fd < 0)
		return fd;
	struct tar_out *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	t->x = x;
	t->base = base;
	int r = mount_id(fd, "", &t->mnt_id);
	if (r == 0)
		r = sbd_xfer_head(x, 200, "application/x-tar", -1);
	if (r == 0)
		r = out_dir(t, TAKE_FD(fd), "", 0);
	static const char zero[2 * TAR_BLOCK];
	if (r == 0)
		r = out_put(t, zero, sizeof(zero));
	if (r == 0)
		r = out_flush(t);
	if (r == 0)
		r = sbd_xfer_send(x, "0\r\n\r\n", 5);
	else
		x->broken = true; /* the client sees a stream without its last chunk */
	int64_t n = (int64_t)t->entries;
	names_free(&t->links);
	free(t);
	return r < 0 ? r : n;
}

/* ---- in ------------------------------------------------------------------- */

struct tar_in {
	struct sbd_xfer *x;
	int root;
	const char *dir;
	const struct sbd_owner *owner; /* the upload's user (unless only_new), else the archive's */
	int *werr;
	int64_t files;
	struct names dirs;	   /* made, with the mtime to give them at the end */
	struct names made;	   /* names this upload created (ino 1: a dir), for a rollback */
	char *longname, *longlink; /* from 'L'/'K' or a pax header, for the next member */
	struct sbd_tar_pax pax;	   /* the numbers of a pax header, for the next member */
};

/* Reads exactly n bytes of the body (the archive may not end early). */
static int in_exact(struct tar_in *t, void *p, size_t n)
{
	char *s = p;
	while (n) {
		ssize_t k = sbd_xfer_read(t->x, s, n);
		if (k == 0)
			return strata_err_set(&t->x->err, -EINVAL, "truncated archive");
		if (k < 0)
			return (int)k;
		s += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Skips n bytes of the body. */
static int in_skip(struct tar_in *t, uint64_t n)
{
	char b[4096];
	while (n) {
		size_t k = n > sizeof(b) ? sizeof(b) : (size_t)n;
		int r = in_exact(t, b, k);
		if (r < 0)
			return r;
		n -= k;
	}
	return 0;
}

static uint64_t padded(uint64_t size)
{
	return (size + TAR_BLOCK - 1) / TAR_BLOCK * TAR_BLOCK;
}

/* A long name or a pax header's data (at most PATH_MAX + some). */
static int in_meta(struct tar_in *t, const struct sbd_tar_hdr *h)
{
	if (h->size > 65536)
		return strata_err_set(&t->x->err, -EINVAL,
				      "archive: an extended header of %llu bytes",
				      (unsigned long long)h->size);
	_cleanup_free_ char *b = malloc(padded(h->size) + 1);
	if (!b)
		return -ENOMEM;
	int r = in_exact(t, b, padded(h->size));
	if (r < 0)
		return r;
	b[h->size] = 0;
	char **dst = h->type == 'K' ? &t->longlink : &t->longname;
	if (h->type == 'x') {
		r = sbd_tar_pax_parse(b, h->size, &t->pax);
		if (r < 0)
			return r == -EINVAL
				   ? strata_err_set(&t->x->err, r, "archive: a bad pax header")
				   : r;
		if (t->pax.path) {
			free(t->longname);
			t->longname = t->pax.path;
			t->pax.path = NULL;
		}
		if (t->pax.linkpath) {
			free(t->longlink);
			t->longlink = t->pax.linkpath;
			t->pax.linkpath = NULL;
		}
		return 0;
	}
	free(*dst);
	*dst = strndup(b, h->size);
	return *dst ? 0 : -ENOMEM;
}

static void in_owner(struct tar_in *t, const struct sbd_tar_hdr *h, uid_t *uid, gid_t *gid)
{
	const struct sbd_owner *o = t->owner;
	bool user = o && o->set && !o->only_new;
	uint32_t base = o ? o->base : 0;
	*uid = user ? o->uid : (uid_t)sbd_id_to_host(base, h->uid);
	*gid = user ? o->gid : (gid_t)sbd_id_to_host(base, h->gid);
}

/* Makes room for a new non-directory at name: an existing one goes. */
static void in_clear(int pfd, const char *name)
{
	struct stat st;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && !S_ISDIR(st.st_mode))
		unlinkat(pfd, name, 0);
}

static int in_file(struct tar_in *t, const struct sbd_tar_hdr *h, int pfd, const char *name)
{
	/* a temporary name renamed over name at the end: a failed upload
	 * leaves a file it would have replaced as it was */
	struct sbd_inroot_file out;
	int r = sbd_inroot_file_at(pfd, name, 0600, true, false, NULL, &out);
	if (r < 0)
		return r;
	int64_t n = sbd_xfer_body_to_fd(t->x, out.fd, h->size, t->werr);
	if (n >= 0 && (uint64_t)n < h->size)
		n = strata_err_set(&t->x->err, -EINVAL, "truncated archive");
	if (n < 0) {
		sbd_inroot_file_abort(&out);
		return (int)n;
	}
	uid_t uid;
	gid_t gid;
	in_owner(t, h, &uid, &gid);
	(void)!fchown(out.fd, uid, gid);
	(void)!fchmod(out.fd, h->mode & 07777); /* after fchown, which drops set-id bits */
	struct timespec ts[2] = {{h->mtime, 0}, {h->mtime, 0}};
	futimens(out.fd, ts);
	if ((r = sbd_inroot_file_commit(&out)) < 0)
		return r;
	t->files++;
	return in_skip(t, padded(h->size) - h->size);
}

/* Remembers the parents of path that open_parent made, from offset made
 * on (the shallowest first: the rollback removes the last first). */
static int in_made_parents(struct tar_in *t, const char *path, size_t made)
{
	size_t len = strlen(path);
	const char *last = strrchr(path, '/');
	size_t end = last ? (size_t)(last - path) : 0;
	for (size_t i = made + 1; made < len && i <= end; i++)
		if (i == end || path[i] == '/') {
			_cleanup_free_ char *d = strndup(path, i);
			int r = d ? names_add(&t->made, (struct named){.ino = 1}, d) : -ENOMEM;
			if (r < 0)
				return r;
		}
	return 0;
}

/* Makes (or finds) the directory path of a member: an fd of it. */
static int in_dir_open(struct tar_in *t, const char *path)
{
	if (!strcmp(path, "/")) /* "./" unpacked at the root: no parent */
		return sbd_inroot_open_dir(t->root, path);
	const char *name;
	size_t made;
	_cleanup_close_ int pfd =
	    sbd_inroot_open_parent(t->root, path, true, t->owner, &name, &made);
	if (pfd < 0)
		return pfd;
	int r = in_made_parents(t, path, made);
	if (r < 0)
		return r;
	struct stat st;
	if (fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0 && S_ISLNK(st.st_mode))
		unlinkat(pfd, name, 0); /* replaced, as a file member replaces one */
	if (mkdirat(pfd, name, 0700) < 0 && errno != EEXIST)
		return -errno;
	/* opened by its parent's fd with O_NOFOLLOW: a symlink swapped in
	 * meanwhile is refused, never given the member's owner and mode */
	int fd = openat(pfd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
	return fd >= 0 ? fd : errno == ELOOP ? -ENOTDIR : -errno;
}

static int in_dir(struct tar_in *t, const struct sbd_tar_hdr *h, const char *path)
{
	_cleanup_close_ int fd = in_dir_open(t, path);
	if (fd < 0)
		return fd;
	uid_t uid;
	gid_t gid;
	in_owner(t, h, &uid, &gid);
	(void)!fchown(fd, uid, gid);
	(void)!fchmod(fd, h->mode & 07777 ? h->mode & 07777 : 0755);
	return names_add(&t->dirs, (struct named){.mtime = {h->mtime, 0}}, path);
}

static int in_link(struct tar_in *t, const struct sbd_tar_hdr *h, int pfd, const char *name)
{
	const char *target = t->longlink ? t->longlink : h->link;
	in_clear(pfd, name);
	if (h->type == '2') {
		if (symlinkat(target, pfd, name) < 0)
			return -errno;
		uid_t uid;
		gid_t gid;
		in_owner(t, h, &uid, &gid);
		(void)!fchownat(pfd, name, uid, gid, AT_SYMLINK_NOFOLLOW);
		struct timespec ts[2] = {{h->mtime, 0}, {h->mtime, 0}};
		utimensat(pfd, name, ts, AT_SYMLINK_NOFOLLOW);
		return 0;
	}
	_cleanup_free_ char *tpath = sbd_tar_join(t->dir, target);
	if (!tpath)
		return strata_err_set(&t->x->err, -EINVAL,
				      "archive link '%s' leaves the destination", target);
	const char *tname;
	_cleanup_close_ int tfd = sbd_inroot_open_parent(t->root, tpath, false, NULL, &tname, NULL);
	if (tfd < 0)
		return tfd;
	return linkat(tfd, tname, pfd, name, 0) < 0 ? -errno : 0;
}

static bool in_exists(struct tar_in *t, const char *path)
{
	const char *name;
	struct stat st;
	_cleanup_close_ int pfd = sbd_inroot_open_parent(t->root, path, false, NULL, &name, NULL);
	return pfd >= 0 && fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) == 0;
}

/* A refused or failed upload: what it created goes again, the last first
 * (files it replaced stay replaced). */
static void in_rollback(struct tar_in *t)
{
	for (size_t i = t->made.n; i-- > 0;) {
		const char *name;
		_cleanup_close_ int pfd =
		    sbd_inroot_open_parent(t->root, t->made.v[i].name, false, NULL, &name, NULL);
		if (pfd >= 0)
			unlinkat(pfd, name, t->made.v[i].ino ? AT_REMOVEDIR : 0);
	}
}

/* One member (its header parsed). */
static int in_member(struct tar_in *t, struct sbd_tar_hdr *h)
{
	const char *nm = t->longname ? t->longname : h->name;
	_cleanup_free_ char *path = sbd_tar_join(t->dir, nm);
	if (!path)
		return strata_err_set(&t->x->err, -EINVAL,
				      "archive member '%s' leaves the destination", nm);
	bool data = h->type == '0' || h->type == 0 || h->type == '7';
	bool is_dir = h->type == '5';
	bool existed = in_exists(t, path);
	int r;
	if (is_dir) {
		r = in_dir(t, h, path);
	} else if (data || h->type == '1' || h->type == '2') {
		const char *name;
		size_t made;
		_cleanup_close_ int pfd =
		    sbd_inroot_open_parent(t->root, path, true, t->owner, &name, &made);
		r = pfd < 0 ? pfd : in_made_parents(t, path, made);
		if (r == 0)
			r = data ? in_file(t, h, pfd, name) : in_link(t, h, pfd, name);
	} else {
		r = 0; /* devices, FIFOs: not made */
	}
	if (r == 0 && !existed && in_exists(t, path))
		r = names_add(&t->made, (struct named){.ino = is_dir}, path);
	if (r == 0 && !data)
		r = in_skip(t, padded(h->size));
	if (r < 0 && !t->x->err.code)
		strata_err_set(&t->x->err, r, "%s: %s", path, strerror(-r));
	free(t->longname);
	free(t->longlink);
	t->longname = t->longlink = NULL;
	sbd_tar_pax_clear(&t->pax);
	return r;
}

static void in_dir_times(struct tar_in *t)
{
	for (size_t i = t->dirs.n; i-- > 0;) {
		const struct named *d = &t->dirs.v[i];
		int fd = sbd_inroot_open_dir(t->root, d->name);
		if (fd >= 0) {
			struct timespec ts[2] = {d->mtime, d->mtime};
			futimens(fd, ts);
			close(fd);
		}
	}
	names_free(&t->dirs);
}

int64_t sbd_tar_stream_in(struct sbd_xfer *x, int root, const char *dir,
			  const struct sbd_owner *owner, int *ret_werr)
{
	struct tar_in t = {.x = x, .root = root, .dir = dir, .owner = owner, .werr = ret_werr};
	_cleanup_close_ int top = sbd_inroot_mkdirs(root, dir, 0755, owner);
	int r = top < 0 ? top : sbd_xfer_continue(x);
	size_t members = 0;
	while (r == 0) {
		char b[TAR_BLOCK];
		ssize_t k = sbd_xfer_read(x, b, 1);
		if (k == 0)
			break; /* an archive without its end blocks: taken as ended */
		if (k < 0 || (r = in_exact(&t, b + 1, TAR_BLOCK - 1)) < 0) {
			r = k < 0 ? (int)k : r;
			break;
		}
		struct sbd_tar_hdr h;
		char name[257], link[101];
		int d = sbd_tar_decode(b, &h, name, link);
		if (d == 1) /* a zero block: the end */
			break;
		if (d < 0) {
			r = strata_err_set(&x->err, -EINVAL, "archive: a bad header block");
			break;
		}
		if (++members > TAR_MAX_ENTRIES) {
			r = -E2BIG;
			break;
		}
		if (h.type == 'L' || h.type == 'K' || h.type == 'x')
			r = in_meta(&t, &h);
		else if (h.type == 'g')
			r = in_skip(&t, padded(h.size));
		else {
			sbd_tar_pax_apply(&t.pax, &h);
			r = in_member(&t, &h);
		}
	}
	free(t.longname);
	free(t.longlink);
	sbd_tar_pax_clear(&t.pax);
	in_dir_times(&t);
	if (r < 0)
		in_rollback(&t);
	names_free(&t.made);
	if (r == 0) { /* the rest of the body (end blocks, padding) */
		char b[4096];
		ssize_t k;
		size_t tail = 0;
		while ((k = sbd_xfer_read(x, b, sizeof(b))) > 0 && (tail += (size_t)k) <= TAIL_MAX)
			;
		r = k < 0 ? (int)k : 0;
		if (k > 0)
			x->broken = true; /* not read to its end: the connection closes */
	}
	return r < 0 ? r : t.files;
}
