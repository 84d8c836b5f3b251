/* prefetch.c — prefetch lists (prefetch.h): recorded with mincore over the
 * files of a mounted image, replayed by parallel reads of those ranges; the
 * eager mode reads every chunk of the image's blob files. */
#include "imagesvc/prefetch.h"

#include <errno.h>
#include <fcntl.h>
#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/openat2.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "imagesvc/store-internal.h"
#include "imagesvc/tree.h"
#include "fs/wire.h"

#define PF_HDR 16
#define PF_ENT 24
#define PF_PATH_MAX 4096
#define PF_GAP (64u << 10) /* runs of read pages closer than this are merged */
#define PF_THREADS 16

struct pf_ent {
	char *path; /* relative to the image root; NULL for blob entries */
	uint32_t blob;
	uint64_t off, len;
};

struct pf_list {
	struct pf_ent *v;
	size_t n, cap;
};

static int list_add(struct pf_list *l, const char *path, uint32_t blob, uint64_t off, uint64_t len)
{
	if (l->n >= IMG_PREFETCH_MAX)
		return -E2BIG;
	if (l->n == l->cap) {
		size_t nc = l->cap ? l->cap * 2 : 256;
		struct pf_ent *nv = realloc(l->v, nc * sizeof(*nv));
		if (!nv)
			return -ENOMEM;
		l->v = nv;
		l->cap = nc;
	}
	char *p = path ? strdup(path) : NULL;
	if (path && !p)
		return -ENOMEM;
	l->v[l->n++] = (struct pf_ent){p, blob, off, len};
	return 0;
}

static void list_done(struct pf_list *l)
{
	for (size_t i = 0; i < l->n; i++)
		free(l->v[i].path);
	free(l->v);
}

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

/* ---- recording ------------------------------------------------------------------------ */
#define PF_DEPTH 256

/* Adds the runs of resident pages of the file fd (size bytes) as rel. */
static int record_file(int fd, size_t size, const char *rel, struct pf_list *l)
{
	long pg = sysconf(_SC_PAGESIZE);
	size_t pages = (size + (size_t)pg - 1) / (size_t)pg;
	_cleanup_free_ unsigned char *vec = malloc(pages);
	void *m = mmap(NULL, size, PROT_READ, MAP_SHARED, fd, 0);
	if (!vec || m == MAP_FAILED)
		return vec ? 0 : -ENOMEM;
	int r = mincore(m, size, vec) < 0 ? -errno : 0;
	munmap(m, size);
	for (size_t p = 0; r == 0 && p < pages;) {
		if (!(vec[p] & 1)) {
			p++;
			continue;
		}
		size_t q = p + 1, gap = 0;
		for (; q < pages && gap * (size_t)pg < PF_GAP; q++)
			gap = (vec[q] & 1) ? 0 : gap + 1;
		q -= gap;
		uint64_t off = (uint64_t)p * (uint64_t)pg, end = (uint64_t)q * (uint64_t)pg;
		r = list_add(l, rel, 0, off, (end > size ? size : end) - off);
		p = q;
	}
	return r;
}

/* Walks directory dfd (rel: its path in the image, "" for the root). */
static int record_dir(int dfd, char *rel, size_t rlen, int depth, struct pf_list *l)
{
	DIR *d = fdopendir(dfd);
	int r = 0;
	if (!d) {
		close(dfd);
		return -errno;
	}
	for (struct dirent *de; r == 0 && (de = readdir(d));) {
		struct stat st;
		size_t nl = strlen(de->d_name);
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, "..") ||
		    rlen + nl + 2 > PF_PATH_MAX ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0)
			continue;
		if (!S_ISDIR(st.st_mode) && (!S_ISREG(st.st_mode) || st.st_size <= IMG_INLINE_MAX))
			continue;
		snprintf(rel + rlen, PF_PATH_MAX + 1 - rlen, "%s%s", rlen ? "/" : "", de->d_name);
		int fd = openat(dirfd(d), de->d_name,
				O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NOATIME |
				    (S_ISDIR(st.st_mode) ? O_DIRECTORY : 0));
		if (fd >= 0 && S_ISDIR(st.st_mode))
			r = depth < PF_DEPTH ? record_dir(fd, rel, strlen(rel), depth + 1, l)
					     : (close(fd), 0);
		else if (fd >= 0) {
			r = record_file(fd, (size_t)st.st_size, rel, l);
			close(fd);
		}
		rel[rlen] = '\0';
	}
	closedir(d);
	return r;
}

static int write_list(struct img_store *s, const char *hex, const struct pf_list *l)
{
	char p[PATH_MAX];
	int r = img_store_image_path(s, hex, "prefetch", p, sizeof(p));
	if (r < 0)
		return r;
	size_t n = PF_HDR;
	for (size_t i = 0; i < l->n; i++)
		n += PF_ENT + strlen(l->v[i].path);
	_cleanup_free_ uint8_t *b = calloc(1, n);
	if (!b)
		return -ENOMEM;
	le32_put(b, IMG_PREFETCH_MAGIC);
	le16_put(b + 4, IMG_PREFETCH_VERSION);
	le16_put(b + 6, PF_HDR);
	le32_put(b + 12, (uint32_t)l->n);
	uint8_t *q = b + PF_HDR;
	for (size_t i = 0; i < l->n; i++) {
		uint32_t pl = (uint32_t)strlen(l->v[i].path);
		le32_put(q, pl);
		le64_put(q + 8, l->v[i].off);
		le64_put(q + 16, l->v[i].len);
		memcpy(q + PF_ENT, l->v[i].path, pl);
		q += PF_ENT + pl;
	}
	return store_write_file(p, b, n);
}

int img_prefetch_record(struct img_store *s, const char *hex, const char *root,
			struct img_prefetch_stats *ret, struct strata_err *e)
{
	struct pf_list l = {0};
	char rel[PF_PATH_MAX + 1] = "";
	double t0 = now_s();
	int fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	int r = fd < 0 ? -errno : record_dir(fd, rel, 0, 0, &l);
	if (r < 0)
		strata_err_set(e, r, "recording what %s read: %s", root, strerror(-r));
	if (r == 0 && (r = write_list(s, hex, &l)) < 0)
		strata_err_set(e, r, "writing the prefetch list: %s", strerror(-r));
	if (r == 0 && ret) {
		*ret = (struct img_prefetch_stats){.chunks = l.n, .seconds = now_s() - t0};
		for (size_t i = 0; i < l.n; i++)
			ret->bytes += l.v[i].len;
	}
	list_done(&l);
	return r;
}

bool img_prefetch_exists(struct img_store *s, const char *hex)
{
	char p[PATH_MAX];
	return img_store_image_path(s, hex, "prefetch", p, sizeof(p)) == 0 && access(p, F_OK) == 0;
}

/* ---- replay ------------------------------------------------------------------------------ */
static int read_list(struct img_store *s, const char *hex, struct pf_list *l)
{
	char p[PATH_MAX], path[PF_PATH_MAX + 1];
	uint8_t h[PF_HDR], q[PF_ENT];
	int r = img_store_image_path(s, hex, "prefetch", p, sizeof(p));
	_cleanup_close_ int fd = r < 0 ? -1 : open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return r < 0 ? r : -errno;
	if (strata_read_all(fd, h, sizeof(h)) != PF_HDR || le32_get(h) != IMG_PREFETCH_MAGIC ||
	    le16_get(h + 4) != IMG_PREFETCH_VERSION || le16_get(h + 6) != PF_HDR ||
	    le32_get(h + 12) > IMG_PREFETCH_MAX)
		return -EBADMSG;
	for (uint32_t i = 0, n = le32_get(h + 12); i < n; i++) {
		if (strata_read_all(fd, q, sizeof(q)) != PF_ENT)
			return -EBADMSG;
		uint32_t pl = le32_get(q);
		if (pl == 0 || pl > PF_PATH_MAX || strata_read_all(fd, path, pl) != (ssize_t)pl)
			return -EBADMSG;
		path[pl] = '\0';
		if (path[0] == '/' || strstr(path, "..") || strlen(path) != pl)
			return -EBADMSG; /* never read outside the image */
		if ((r = list_add(l, path, 0, le64_get(q + 8), le64_get(q + 16))) < 0)
			return r;
	}
	return 0;
}

struct all_ctx {
	struct pf_list *l;
	uint32_t blob;
};

static int all_one(void *arg, size_t i, const struct blob_rec *rec)
{
	struct all_ctx *c = arg;
	return list_add(c->l, NULL, c->blob, rec->off, rec->len);
}

static int list_all(struct img_store *s, const struct img_record *rec, struct pf_list *l)
{
	for (uint32_t i = 0; i < rec->n_blobs; i++) {
		char idx[PATH_MAX];
		int r = img_store_blob_path(s, rec->blobs[i], "idx", idx, sizeof(idx));
		if (r == 0)
			r = img_blobidx_read(idx, all_one, &(struct all_ctx){l, rec->blobs[i]},
					     NULL);
		if (r < 0)
			return r;
	}
	return 0;
}

struct runner {
	const struct pf_list *l;
	const struct img_record *rec; /* eager: blob entries */
	int root_fd;		      /* replay: file entries, relative to it */
	int *fds;		      /* per blob of rec */
	atomic_size_t next;
	atomic_int err;
};

static int fd_of(struct runner *x, uint32_t blob)
{
	for (uint32_t i = 0; i < x->rec->n_blobs; i++)
		if (x->rec->blobs[i] == blob)
			return x->fds[i];
	return -1;
}

static void read_range(int fd, char *buf, uint64_t off, uint64_t len, bool drop)
{
	for (uint64_t done = 0; done < len;) {
		size_t n = len - done > BLOB_CHUNK_SIZE ? BLOB_CHUNK_SIZE : (size_t)(len - done);
		ssize_t k = pread(fd, buf, n, (off_t)(off + done));
		if (k <= 0)
			break;
		done += (uint64_t)k;
	}
	if (drop) /* eager: the chunks are in the node cache; no second copy */
		posix_fadvise(fd, (off_t)off, (off_t)len, POSIX_FADV_DONTNEED);
}

static void run_one(struct runner *x, const struct pf_ent *p, char *buf)
{
	if (!p->path) { /* whole 4 KiB blocks (the blob is padded), for O_DIRECT */
		int fd = fd_of(x, p->blob);
		uint64_t len = blob_padded(p->len);
		if (fd >= 0)
			read_range(fd, buf, p->off, len, true);
		return;
	}
	/* The list comes from the store: resolve it inside the image only (no
	 * symlink may lead out of it), and read nothing but regular files. */
	struct open_how how = {.flags = O_RDONLY | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK,
			       .resolve =
				   RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
	struct stat st;
	_cleanup_close_ int fd = (int)syscall(SYS_openat2, x->root_fd, p->path, &how, sizeof(how));
	if (fd >= 0 && fstat(fd, &st) == 0 && S_ISREG(st.st_mode))
		read_range(fd, buf, p->off, p->len, false); /* a missing file is skipped */
}

static void *run_thread(void *arg)
{
	struct runner *x = arg;
	char *buf = NULL;
	if (posix_memalign((void **)&buf, BLOB_ALIGN, BLOB_CHUNK_SIZE) != 0)
		buf = NULL;
	for (size_t i; buf && (i = atomic_fetch_add(&x->next, 1)) < x->l->n;)
		run_one(x, &x->l->v[i], buf);
	if (!buf)
		atomic_store(&x->err, -ENOMEM);
	free(buf);
	return NULL;
}

static int open_blobs(struct img_store *s, struct runner *x)
{
	x->fds = calloc(x->rec->n_blobs + 1, sizeof(int));
	if (!x->fds)
		return -ENOMEM;
	for (uint32_t i = 0; i < x->rec->n_blobs; i++) {
		char p[PATH_MAX];
		if (img_store_blob_path(s, x->rec->blobs[i], "data", p, sizeof(p)) < 0)
			return -ENAMETOOLONG;
		/* Direct I/O: every read reaches strata-fuse (which caches the
		 * chunk), none is answered by stale pages of the blob file. */
		x->fds[i] = open(p, O_RDONLY | O_CLOEXEC | O_DIRECT);
		if (x->fds[i] < 0 && errno == EINVAL)
			x->fds[i] = open(p, O_RDONLY | O_CLOEXEC);
		if (x->fds[i] < 0)
			return -errno;
		posix_fadvise(x->fds[i], 0, 0, POSIX_FADV_RANDOM); /* exactly the chunks */
	}
	return 0;
}

static int run_list(struct img_store *s, struct runner *x, int threads)
{
	pthread_t tid[64];
	int r = x->rec ? open_blobs(s, x) : 0, started = 0;
	for (int i = 0; r == 0 && i < threads && i < 64; i++)
		started += pthread_create(&tid[started], NULL, run_thread, x) == 0;
	if (r == 0 && started == 0)
		run_thread(x);
	for (int i = 0; i < started; i++)
		pthread_join(tid[i], NULL);
	for (uint32_t i = 0; x->fds && i < x->rec->n_blobs; i++)
		if (x->fds[i] >= 0)
			close(x->fds[i]);
	free(x->fds);
	return r < 0 ? r : atomic_load(&x->err);
}

int img_prefetch_run(struct img_store *s, const char *hex, const char *root, bool eager,
		     int threads, struct img_prefetch_stats *ret, struct strata_err *e)
{
	struct img_record rec;
	struct pf_list l = {0};
	double t0 = now_s();
	int r = img_store_record(s, hex, &rec, e);
	if (r < 0)
		return r;
	r = eager ? list_all(s, &rec, &l) : read_list(s, hex, &l);
	if (r == -ENOENT)
		strata_err_set(e, r, "image %.12s has no recorded prefetch list", hex);
	else if (r < 0)
		strata_err_set(e, r, "image %.12s: prefetch list: %s", hex, strerror(-r));
	struct runner x = {.l = &l, .rec = eager ? &rec : NULL, .root_fd = -1};
	if (r == 0 && !eager && (x.root_fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC)) < 0)
		r = strata_err_set(e, -errno, "prefetching %.12s: %s: %m", hex, root);
	if (r == 0 && (r = run_list(s, &x, threads > 0 ? threads : PF_THREADS)) < 0)
		strata_err_set(e, r, "prefetching %.12s: %s", hex, strerror(-r));
	if (x.root_fd >= 0)
		close(x.root_fd);
	if (r == 0 && ret) {
		*ret = (struct img_prefetch_stats){.chunks = l.n, .seconds = now_s() - t0};
		for (size_t i = 0; i < l.n; i++)
			ret->bytes += l.v[i].len;
	}
	list_done(&l);
	img_record_done(&rec);
	return r;
}
