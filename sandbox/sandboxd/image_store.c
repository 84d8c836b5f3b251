/* image_store.c — strata-sandboxd's images from the cluster's image store
 * (images.h): resolving a reference through imagesvc's store, mounting the
 * image once per node with imagesvc's node mount manager, one node reference
 * per sandbox (named by this sandboxd's holder, so that a restarted one can
 * give back those of sandboxes that vanished), and sweeping the mounts that
 * have been unused for IMAGES_LINGER_S. The container backend builds each sandbox's overlay
 * root (its own writable layer above) on the shared mount; fncall workers
 * bind it read-only.
 *
 * The image's OCI config (Env, Entrypoint, Cmd, WorkingDir, User) is read
 * once per image from ROOT/images/HEX/config.json, checked against the
 * image's signed record (imagesvc/image_auth.h: a rewritten name, record or
 * config fails the create with the reason), and becomes the sandbox
 * defaults (env, cwd and user; entrypoint and cmd are published by
 * GET /v1/images).
 *
 * A fresh mount replays the image's recorded prefetch list (the first
 * sandbox of an image on a node waits for it) or, when the image has none
 * yet, starts a thread that records one IMAGES_RECORD_AFTER_S seconds later
 * from what the sandboxes have read (imagesvc/prefetch.h).
 *
 * The node mount and its prefetch (seconds on a cold node, and a hung
 * strata-fuse would hang them) run on a worker (pool.h): sbd_images_acquire
 * answers -EINPROGRESS and the creates that need the image wait for it
 * (sbd_images_wait) while the loop serves other requests; at the end (an
 * eventfd) the loop marks the image held and wakes them. Everything else
 * runs on sandboxd's loop thread; the workers and the recorder use their
 * own store handles and copies of the paths. At re-adoption (before the
 * loop serves) and without a worker, the mount runs inline. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stddef.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/log.h"
#include "imagesvc/image_auth.h"
#include "imagesvc/mount.h"
#include "imagesvc/prefetch.h"
#include "sandbox/sandboxd/images-internal.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/sandboxd.h"
#include "imagesvc/store.h"

#define IMAGES_RECORD_AFTER_S 5

struct sbd_imgstore {
	char home[PATH_MAX], cache[PATH_MAX];
	char holder[48];	 /* names this sandboxd's node references (mount.h) */
	bool reconciled;	 /* the references of the earlier sandboxd checked */
	struct img_store *store; /* NULL until the cluster's store is reachable */
	struct sbd_image *list;	 /* store images this sandboxd knows */
	int64_t linger_ms;
	dev_t fuse_dev; /* device of the store's mount when it was opened */
	/* mounts on workers: done and running under mu, the rest the loop's */
	pthread_mutex_t mu;
	pthread_cond_t cond; /* a mount ended (for sbd_images_store_free) */
	struct mount_job *done;
	unsigned running;
	int efd; /* -1 until the first mount on a worker */
	struct sbd_watch w;
	struct sandboxd *d;
};

/* The device of the mount that holds path, from /proc/self/mountinfo (the
 * longest mount point above it): unlike a stat, this never waits for
 * strata-fuse, whose held connection makes requests wait for its successor
 * (fuse/README.md "Surviving a crash"). Returns 0 if it cannot tell. */
static dev_t mount_dev_of(const char *path)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char line[PATH_MAX + 512], mp[PATH_MAX];
	unsigned maj, min;
	size_t best = 0;
	dev_t dev = 0;

	while (f && fgets(line, sizeof(line), f)) {
		if (sscanf(line, "%*u %*u %u:%u %*s %4095s", &maj, &min, mp) != 3)
			continue;
		size_t n = strlen(mp);
		bool above =
		    !strcmp(mp, "/") || (!strncmp(path, mp, n) && (path[n] == '/' || !path[n]));
		if (above && n >= best) {
			best = n;
			dev = makedev(maj, min);
		}
	}
	if (f)
		fclose(f);
	return dev;
}

static int fmt(char *buf, size_t cap, const char *f, const char *a, const char *b)
{
	int n = snprintf(buf, cap, f, a, b);
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

static bool is_hex64(const char *s)
{
	size_t n = strspn(s, "0123456789abcdef");
	return n == 64 && !s[n];
}

/* ---- entries ------------------------------------------------------------------ */

static struct sbd_image *entry_new(struct sbd_imgstore *g, const char *hex)
{
	struct sbd_image *im = calloc(1, sizeof(*im));
	if (!im)
		return NULL;
	snprintf(im->hex, sizeof(im->hex), "%s", hex);
	if (asprintf(&im->rootfs, "%s/%s/root", g->cache, hex) < 0 ||
	    asprintf(&im->name, "sha256:%s", hex) < 0) {
		im->rootfs = im->name = NULL;
		sbd_image_free(im);
		return NULL;
	}
	im->next = g->list;
	g->list = im;
	return im;
}

static struct sbd_image *entry_find(struct sbd_imgstore *g, const char *hex)
{
	for (struct sbd_image *im = g->list; im; im = im->next)
		if (!strcmp(im->hex, hex))
			return im;
	return NULL;
}

/* "sandboxd:" and a hash of the state directory: the same for a restarted
 * sandboxd, another for a second sandboxd on the node. */
static void holder_name(char *buf, size_t cap, const char *state_dir)
{
	char *abs = realpath(state_dir, NULL);
	uint64_t h = 0xcbf29ce484222325ull;
	for (const char *p = abs ? abs : state_dir; *p; p++)
		h = (h ^ (uint8_t)*p) * 0x100000001b3ull;
	free(abs);
	snprintf(buf, cap, "sandboxd:%016llx", (unsigned long long)h);
}

/* The image key (imagesvc/image_auth.h) from the home's cluster key, set
 * once, before any mount worker runs; without it ($STRATA_KEY, else none)
 * the store says why it cannot verify at the first create. */
static void load_image_key(const struct sbd_imgstore *g)
{
	char p[PATH_MAX];
	struct strata_err e = {0};
	if (fmt(p, sizeof(p), "%s/%s", g->home, "cluster.key") < 0 || access(p, F_OK) < 0)
		return;
	if (img_auth_load(p, &e) < 0)
		log_warn("image signatures: %s", e.msg);
}

static struct sbd_imgstore *st_get(struct sandboxd *d)
{
	if (d->imgstore)
		return d->imgstore;
	struct sbd_imgstore *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	char *abs = realpath(d->cfg.home, NULL);
	snprintf(g->home, sizeof(g->home), "%s", abs ? abs : d->cfg.home);
	free(abs);
	if (fmt(g->cache, sizeof(g->cache), "%s/%s", g->home, "cache/images") < 0) {
		free(g);
		return NULL;
	}
	holder_name(g->holder, sizeof(g->holder), d->cfg.state_dir);
	load_image_key(g);
	const char *l = getenv("STRATA_SANDBOXD_IMAGE_LINGER_S"); /* tests */
	g->linger_ms = (l && l[0] ? strtoll(l, NULL, 10) : IMAGES_LINGER_S) * 1000;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->efd = g->w.fd = -1;
	g->d = d;
	d->imgstore = g;
	return g;
}

/* ---- the store ------------------------------------------------------------------- */

/* The cluster's mount: STRATA_MOUNT of <home>/cluster.env, else <home>/mnt. */
static void cluster_mount(const struct sbd_imgstore *g, char *buf, size_t cap)
{
	char p[PATH_MAX], line[PATH_MAX + 32];
	snprintf(buf, cap, "%s/mnt", g->home);
	if (fmt(p, sizeof(p), "%s/%s", g->home, "cluster.env") < 0)
		return;
	FILE *f = fopen(p, "re");
	while (f && fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		if (!strncmp(line, "STRATA_MOUNT=", 13) && line[13])
			snprintf(buf, cap, "%s", line + 13);
	}
	if (f)
		fclose(f);
}

static int st_open(struct sbd_imgstore *g, struct strata_err *e)
{
	char mnt[PATH_MAX], root[PATH_MAX];
	struct stat st;
	if (g->store)
		return 0;
	cluster_mount(g, mnt, sizeof(mnt));
	if (fmt(root, sizeof(root), "%s/%s", mnt, IMG_STORE_SUBDIR) < 0)
		return -ENAMETOOLONG;
	/* Only an existing store: never create one on a mount point whose
	 * cluster is down (that would write into the bare directory). */
	if (stat(root, &st) < 0 || !S_ISDIR(st.st_mode)) {
		int r = errno == ENOTCONN ? -ENOTCONN : -ENOENT;
		return strata_err_set(
		    e, r, "no image store at %s (%s; start the cluster with strata up --home %s)",
		    root, r == -ENOTCONN ? "the mount is not connected" : "nothing imported",
		    g->home);
	}
	/* As check_fuse will see it (the same source: no false "replaced"). */
	g->fuse_dev = mount_dev_of(root) ?: st.st_dev;
	int r = img_store_open(root, &g->store);
	if (r < 0)
		strata_err_set(e, r, "cannot open the image store at %s: %s", root, strerror(-r));
	else
		log_info("image store: %s, node cache %s", root, g->cache);
	return r;
}

/* Reads the OCI config of the image (Env, Entrypoint, Cmd, WorkingDir,
 * User), checked against its signed record (a rewritten record or config
 * is refused: its Env would reach every sandbox). Returns 0 (also for an
 * image without a usable config: no defaults) or -errno with e filled. */
static int load_config(struct sbd_imgstore *g, struct sbd_image *im, struct strata_err *e)
{
	struct img_record rec;
	_cleanup_free_ char *buf = NULL;
	int r = img_store_record(g->store, im->hex, &rec, e);
	if (r < 0)
		return r;
	ssize_t n = img_store_read_doc(g->store, &rec, "config.json", IMAGES_CONFIG_MAX, &buf, e);
	img_record_done(&rec);
	if (n < 0 && n != -ENOENT && n != -EFBIG)
		return (int)n;
	im->config_loaded = true;
	struct json *j = n > 0 ? json_parse(buf, (size_t)n, NULL, 0) : NULL;
	const struct json *c = json_get(j, "config");
	if (!c) {
		if (n != -ENOENT)
			log_warn("image %.12s: no usable config (%s)", im->hex,
				 n < 0 ? e->msg : "no \"config\" object");
		json_free(j);
		return 0;
	}
	im->env = sbd_images_str_array(json_get(c, "Env"), true);
	im->entrypoint = sbd_images_str_array(json_get(c, "Entrypoint"), false);
	im->cmd = sbd_images_str_array(json_get(c, "Cmd"), false);
	const char *wd = json_cstr(json_get(c, "WorkingDir"));
	const char *user = json_cstr(json_get(c, "User"));
	im->cwd = wd && wd[0] == '/' ? strdup(wd) : NULL;
	im->user = user && user[0] && strlen(user) <= 64 ? strdup(user) : NULL;
	json_free(j);
	return 0;
}

/* ---- prefetch recording ------------------------------------------------------ */

struct recorder {
	char store_root[PATH_MAX], cache[PATH_MAX], hex[65];
};

static void *record_thread(void *arg)
{
	struct recorder *rc = arg;
	struct img_store *s = NULL;
	char root[PATH_MAX];
	sleep(IMAGES_RECORD_AFTER_S);
	if (img_store_open(rc->store_root, &s) == 0 && !img_prefetch_exists(s, rc->hex) &&
	    img_node_root(rc->cache, rc->hex, root, sizeof(root)) == 0)
		img_prefetch_record(s, rc->hex, root, NULL, NULL);
	img_store_free(s);
	free(rc);
	return NULL;
}

static void start_recorder(struct sbd_imgstore *g, const char *hex)
{
	struct recorder *rc = calloc(1, sizeof(*rc));
	pthread_t t;
	pthread_attr_t a;
	if (!rc)
		return;
	snprintf(rc->store_root, sizeof(rc->store_root), "%s", img_store_root(g->store));
	snprintf(rc->cache, sizeof(rc->cache), "%s", g->cache);
	snprintf(rc->hex, sizeof(rc->hex), "%s", hex);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, record_thread, rc) != 0)
		free(rc);
	pthread_attr_destroy(&a);
}

/* ---- node references ------------------------------------------------------------ */

/* Taking sandboxd's node reference on an image: the blocking part
 * (mount_blocking, on a worker or inline) and the loop's (mount_commit). */
struct mount_job {
	struct sbd_job job; /* on the worker pool (pool.h) */
	struct sbd_imgstore *g;
	struct sbd_image *im;
	char store_root[PATH_MAX], hex[65], root[PATH_MAX], holder[48];
	int r;
	bool fresh, record; /* mounted by this job; no prefetch list yet */
	uint64_t prefetched;
	int64_t took_ms;
	struct strata_err e;	/* r < 0: why */
	struct strata_err pf;	/* the prefetch's failure (a warning) */
	struct mount_job *next; /* in g->done */
};

/* img_node_acquire and, for a fresh mount, the prefetch replay; touches
 * only s (a store handle of the calling thread) and j. */
static void mount_blocking(struct img_store *s, struct mount_job *j)
{
	struct strata_err e = {0};
	int64_t t0 = sbd_now_ms();
	j->r = img_node_acquire_as(s, j->g->cache, j->hex, j->holder, j->root, sizeof(j->root),
				   &j->fresh, &e);
	if (j->r < 0) {
		strata_err_set(&j->e, j->r, "mounting image %.12s: %s", j->hex, e.msg);
		return;
	}
	struct img_prefetch_stats ps = {0};
	if (!j->fresh)
		return;
	if (!img_prefetch_exists(s, j->hex))
		j->record = true;
	else
		img_prefetch_run(s, j->hex, j->root, false, 0, &ps, &j->pf);
	j->prefetched = ps.bytes;
	j->took_ms = sbd_now_ms() - t0;
}

/* On the loop: the image is mounted (when the mount worked). */
static void mount_commit(struct sbd_imgstore *g, struct mount_job *j)
{
	struct sbd_image *im = j->im;
	if (j->r < 0)
		return;
	im->held = true;
	if (!j->fresh)
		return;
	if (j->record)
		start_recorder(g, im->hex);
	else if (j->pf.code)
		log_warn("image %.12s: prefetch: %s", im->hex, j->pf.msg);
	log_info("image %.12s mounted at %s in %lld ms (prefetched %llu bytes)", im->hex, j->root,
		 (long long)j->took_ms, (unsigned long long)j->prefetched);
}

static void mount_job_init(struct mount_job *j, struct sbd_imgstore *g, struct sbd_image *im)
{
	j->g = g;
	j->im = im;
	snprintf(j->hex, sizeof(j->hex), "%s", im->hex);
	snprintf(j->holder, sizeof(j->holder), "%s", g->holder);
	snprintf(j->store_root, sizeof(j->store_root), "%s", img_store_root(g->store));
}

/* Takes a sandbox's node reference on im here (mounting it if it is not). */
static int hold(struct sbd_imgstore *g, struct sbd_image *im, struct strata_err *err)
{
	struct mount_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	mount_job_init(j, g, im);
	mount_blocking(g->store, j);
	mount_commit(g, j);
	int r = j->r < 0 ? strata_err_set(err, j->r, "%s", j->e.msg) : 0;
	free(j);
	return r;
}

/* On a worker: once j is in g->done and g->mu released, the loop may free
 * it. */
static void mount_run(struct sbd_job *job)
{
	struct mount_job *j = (struct mount_job *)((char *)job - offsetof(struct mount_job, job));
	struct sbd_imgstore *g = j->g;
	struct img_store *s = NULL;
	int r = img_store_open(j->store_root, &s);
	if (r < 0) {
		j->r = strata_err_set(&j->e, r,
				      "mounting image %.12s: cannot open the image store at %s: %s",
				      j->hex, j->store_root, strerror(-r));
	} else {
		mount_blocking(s, j);
	}
	img_store_free(s);
	uint64_t one = 1;
	pthread_mutex_lock(&g->mu);
	j->next = g->done;
	g->done = j;
	g->running--;
	(void)!write(g->efd, &one, sizeof(one));
	pthread_cond_broadcast(&g->cond);
	pthread_mutex_unlock(&g->mu);
}

/* On the loop: mounts that ended; their images' waiters learn how. */
static void mounts_done(struct sbd_imgstore *g)
{
	pthread_mutex_lock(&g->mu);
	struct mount_job *j = g->done;
	g->done = NULL;
	pthread_mutex_unlock(&g->mu);
	while (j) {
		struct mount_job *next = j->next;
		struct sbd_image *im = j->im;
		im->mounting = false;
		mount_commit(g, j);
		while (im->waiters) {
			struct sbd_image_waiter *w = im->waiters;
			im->waiters = w->next;
			w->fn(w, j->r, &j->e);
		}
		/* The waiters took their own references: the mount's goes (the
		 * last one leaves the mount for the sweep). */
		if (j->r == 0)
			img_node_release_as(g->store, g->cache, j->hex, g->holder, NULL);
		free(j);
		j = next;
	}
}

/* The workers' wake-up (sbd_wakeup_add). */
static void mounts_io(void *ctx, uint32_t ev)
{
	mounts_done(ctx);
}

/* Starts the mount of im on a worker. Returns 0 or -errno (not started). */
static int mount_start(struct sbd_imgstore *g, struct sbd_image *im)
{
	struct sandboxd *d = g->d;
	if (!d->loop || !d->pool)
		return -EOPNOTSUPP;
	if (g->efd < 0 && (g->efd = sbd_wakeup_add(d->loop, &g->w, mounts_io, g)) < 0) {
		int r = g->efd;
		g->efd = -1;
		return r;
	}
	struct mount_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	mount_job_init(j, g, im);
	j->job.fn = mount_run;
	pthread_mutex_lock(&g->mu);
	g->running++;
	pthread_mutex_unlock(&g->mu);
	int r = sbd_pool_run(d->pool, &j->job);
	if (r < 0) {
		pthread_mutex_lock(&g->mu);
		g->running--;
		pthread_mutex_unlock(&g->mu);
		free(j);
		return r;
	}
	im->mounting = true;
	return 0;
}

void sbd_images_drain(struct sandboxd *d)
{
	struct sbd_imgstore *g = d->imgstore;
	for (bool idle = !g; !idle;) {
		pthread_mutex_lock(&g->mu);
		while (g->running && !g->done)
			pthread_cond_wait(&g->cond, &g->mu);
		idle = !g->running && !g->done;
		pthread_mutex_unlock(&g->mu);
		mounts_done(g); /* the waiters may start other mounts */
	}
}

void sbd_images_wait(struct sbd_image *im, struct sbd_image_waiter *w)
{
	struct sbd_image_waiter **p = &im->waiters; /* in arrival order */
	while (*p)
		p = &(*p)->next;
	w->next = NULL;
	*p = w;
}

/* One more node reference on im, which this sandboxd saw mounted (the hot
 * path of a create: a lock and a small file, no mount). false: it is not
 * mounted any more. */
static bool take_ref(struct sbd_imgstore *g, struct sbd_image *im)
{
	struct strata_err e = {0};
	int r = img_node_ref(g->cache, im->hex, g->holder, &e);
	if (r < 0 && r != -ENOENT)
		log_warn("image %.12s: taking a node reference: %s", im->hex, e.msg);
	im->held = r == 0;
	return r == 0;
}

/* ---- the API of images.h ---------------------------------------------------- */

static int resolve(struct sbd_imgstore *g, const char *ref, char hex[65], struct strata_err *err)
{
	struct strata_err e = {0};
	int r = st_open(g, &e);
	if (r < 0) {
		r = r == -ENOTCONN ? -ENOTCONN : -ENOENT;
		return strata_err_set(err, r, "image '%s' is not registered on this node and %s",
				      ref, e.msg);
	}
	r = img_store_resolve(g->store, ref, hex, &e);
	if (r == -ENOENT)
		strata_err_set(err, r,
			       "image '%s' is neither registered on this node nor in the image "
			       "store (strata image ls)",
			       ref);
	else if (r < 0)
		strata_err_set(err, r, "image reference '%s': %s", ref,
			       e.msg[0] ? e.msg : strerror(-r));
	return r;
}

/* A mounted image that ref named a moment ago (a hot path: no round trip
 * through the FUSE mount for every sandbox). */
static struct sbd_image *cached(struct sbd_imgstore *g, const char *ref)
{
	int64_t now = sbd_now_ms();
	for (struct sbd_image *im = g->list; im; im = im->next)
		if (im->held && im->last_ref && now - im->last_ref_ms < IMAGES_REF_CACHE_MS &&
		    !strcmp(im->last_ref, ref))
			return im;
	return NULL;
}

static void remember(struct sbd_image *im, const char *ref)
{
	if (!im->last_ref || strcmp(im->last_ref, ref)) {
		free(im->last_ref);
		im->last_ref = strdup(ref);
	}
	im->last_ref_ms = sbd_now_ms();
}

int sbd_images_acquire(struct sandboxd *d, const char *ref, struct sbd_image **ret,
		       struct strata_err *e)
{
	struct sbd_image *im = sbd_images_find(d, ref);
	if (im) {
		*ret = im;
		return 0;
	}
	struct sbd_imgstore *g = st_get(d);
	char hex[65];
	if (!g)
		return -ENOMEM;
	if ((im = cached(g, ref)) && take_ref(g, im)) {
		im->users++;
		*ret = im;
		return 0;
	}
	int r = resolve(g, ref, hex, e);
	if (r < 0)
		return r;
	im = entry_find(g, hex) ?: entry_new(g, hex);
	if (!im)
		return -ENOMEM;
	if (!im->config_loaded && (r = load_config(g, im, e)) < 0)
		return r;
	remember(im, ref);
	if (im->held && !im->mounting && take_ref(g, im)) {
		im->users++;
		*ret = im;
		return 0;
	}
	if (im->mounting || mount_start(g, im) == 0) {
		*ret = im;
		return -EINPROGRESS;
	}
	if ((r = hold(g, im, e)) < 0)
		return r;
	im->users++;
	*ret = im;
	return 0;
}

void sbd_images_release(struct sandboxd *d, struct sbd_image *im)
{
	struct sbd_imgstore *g = d->imgstore;
	struct strata_err e = {0};
	if (!g || !im || !im->hex[0] || im->users <= 0)
		return;
	im->users--;
	/* A named release never needs the store (the sweep unmounts). */
	if (img_node_release_as(g->store, g->cache, im->hex, g->holder, &e) < 0)
		log_warn("image %.12s: releasing a node reference: %s", im->hex, e.msg);
}

void sbd_images_store_config(struct sandboxd *d, struct sbd_image *im)
{
	struct sbd_imgstore *g = d->imgstore;
	struct strata_err e = {0};
	if (g && !im->config_loaded && st_open(g, NULL) == 0 && load_config(g, im, &e) < 0)
		log_warn("image %.12s: %s", im->hex, e.msg);
}

/* "<cache>/<hex>/root" -> hex, else false. */
static bool hex_of_rootfs(const struct sbd_imgstore *g, const char *rootfs, char hex[65])
{
	size_t n = strlen(g->cache);
	if (!rootfs || strncmp(rootfs, g->cache, n) || rootfs[n] != '/')
		return false;
	snprintf(hex, 65, "%.64s", rootfs + n + 1);
	return is_hex64(hex) && !strcmp(rootfs + n + 65, "/root");
}

struct sbd_image *sbd_images_adopt(struct sandboxd *d, const char *rootfs)
{
	for (struct sbd_image *im = d->images; im; im = im->next)
		if (!strcmp(im->rootfs, rootfs)) /* the first registered wins */
			return im;
	struct sbd_imgstore *g = st_get(d);
	char hex[65], root[PATH_MAX];
	if (!g || !hex_of_rootfs(g, rootfs, hex))
		return NULL;
	struct sbd_image *im = entry_find(g, hex) ?: entry_new(g, hex);
	if (!im)
		return NULL;
	/* Its node reference is the one it took (reconcile checks that). */
	im->users++;
	im->held = img_node_root(g->cache, hex, root, sizeof(root)) == 0;
	return im;
}

/* A sandboxd before named references held one anonymous reference per
 * image and said so with <state>/images/HEX: it is given back (after its
 * sandboxes took theirs). */
static void old_marker(struct sbd_imgstore *g, const char *hex)
{
	char p[PATH_MAX];
	if (fmt(p, sizeof(p), "%s/images/%s", g->d->cfg.state_dir, hex) < 0 || unlink(p) < 0)
		return;
	if (img_node_release(g->store, g->cache, hex, NULL) < 0)
		log_warn("image %.12s: giving back the earlier sandboxd's reference failed", hex);
}

/* Once, after the re-adoption and with no mount in flight: the references
 * of this holder on each image are made as many as its sandboxes, giving
 * back those of sandboxes that vanished while sandboxd was down (and
 * taking any a re-adopted one lacks). An image left mounted becomes an
 * entry, so that it is swept. */
static void reconcile(struct sbd_imgstore *g)
{
	DIR *dp = opendir(g->cache);
	struct dirent *de;
	char root[PATH_MAX];
	st_open(g, NULL); /* for old_marker's lease, when it is reachable */
	while (dp && (de = readdir(dp))) {
		if (!is_hex64(de->d_name))
			continue;
		struct sbd_image *im = entry_find(g, de->d_name);
		bool mounted = img_node_root(g->cache, de->d_name, root, sizeof(root)) == 0;
		int k = img_node_holds(g->cache, de->d_name, g->holder);
		int64_t want = im ? im->users : 0;
		if (!im && mounted && (im = entry_new(g, de->d_name)))
			im->held = true;
		for (; k > want; k--)
			img_node_release_as(g->store, g->cache, de->d_name, g->holder, NULL);
		for (; k >= 0 && k < want; k++)
			if (img_node_ref(g->cache, de->d_name, g->holder, NULL) < 0)
				break;
		if (k >= 0 && k != want)
			log_warn("image %.12s: %lld sandboxes, %d node references", de->d_name,
				 (long long)want, k);
		old_marker(g, de->d_name);
	}
	if (dp)
		closedir(dp);
	g->reconciled = true;
}

/* The strata mount was replaced: strata-fuse and its holder both died, so
 * the FUSE connection under every image mount on the old one ended and
 * their files read as errors. Their sandboxes cannot be kept: marked
 * failed, with the reason (deleting them is the caller's). The next sandbox
 * goes through img_node_acquire_as, which replaces the image mounts (the
 * references of the sandboxes on the old mount stay counted). A restart of
 * strata-fuse alone keeps the mount (the holder): nothing changes here. */
static void check_fuse(struct sbd_imgstore *g)
{
	dev_t dev = mount_dev_of(img_store_root(g->store));
	if (!dev || dev == g->fuse_dev)
		return;
	log_warn("the strata mount was replaced (strata-fuse and its holder died): "
		 "failing the sandboxes on its image mounts, renewing the mounts");
	g->fuse_dev = dev;
	for (struct sbd_sandbox *sb = g->d->sandboxes; sb; sb = sb->next)
		if (sb->img && sb->img->hex[0] && sb->img->held)
			sbd_registry_fail(g->d, sb,
					  "its image mount lost the strata mount (strata-fuse and "
					  "its holder died): the image files cannot be read");
	for (struct sbd_image *im = g->list; im; im = im->next)
		im->held = false;
}

/* Unmounts im if it has been unused for idle_ms (node-wide: no users). */
static void sweep(struct sbd_imgstore *g, struct sbd_image *im, int64_t idle_ms)
{
	struct strata_err e = {0};
	int r = img_node_sweep_one(g->store, g->cache, im->hex, idle_ms, &e);
	if (r < 0)
		log_warn("image %.12s: unmounting: %s", im->hex, e.msg);
	else if (r > 0)
		log_info("image %.12s: unmounted (unused for %lld ms)", im->hex,
			 (long long)idle_ms);
	if (r > 0)
		im->held = false;
}

void sbd_images_tick(struct sandboxd *d)
{
	struct sbd_imgstore *g = d->imgstore ?: st_get(d);
	bool any = false, busy;
	if (!g)
		return;
	pthread_mutex_lock(&g->mu);
	busy = g->running || g->done;
	pthread_mutex_unlock(&g->mu);
	if (!g->reconciled && !busy)
		reconcile(g);
	for (struct sbd_image *im = g->list; im; im = im->next)
		any |= im->held;
	if (!g->list || st_open(g, NULL) < 0)
		return;
	if (any)
		check_fuse(g);
	/* Not only the held ones: a mount renewed away from is swept too. */
	for (struct sbd_image *im = g->list; im; im = im->next)
		if (im->users == 0 && !im->mounting)
			sweep(g, im, g->linger_ms);
}

static void strv_json(struct jw *w, const char *key, char **v)
{
	jw_key(w, key);
	if (!v) {
		jw_null(w);
		return;
	}
	jw_arr(w);
	for (; *v; v++)
		jw_str(w, *v);
	jw_arr_end(w);
}

static int list_one(void *ctx, const char *name, const char *hex)
{
	struct jw *w = ((void **)ctx)[0];
	struct sbd_imgstore *g = ((void **)ctx)[1];
	struct sbd_image *im = entry_find(g, hex);
	char digest[80];
	snprintf(digest, sizeof(digest), "sha256:%s", hex);
	jw_obj(w);
	jw_kstr(w, "name", name ? name : digest);
	jw_kstr(w, "digest", digest);
	jw_kstr(w, "source", "store");
	jw_kbool(w, "mounted", im && im->held);
	jw_kint(w, "sandboxes", im ? im->users : 0);
	if (im && im->held)
		jw_kstr(w, "rootfs", im->rootfs);
	if (im && im->config_loaded) {
		strv_json(w, "entrypoint", im->entrypoint);
		strv_json(w, "cmd", im->cmd);
	}
	jw_obj_end(w);
	return 0;
}

void sbd_images_to_json(struct sandboxd *d, struct jw *w)
{
	struct sbd_imgstore *g = st_get(d);
	jw_obj(w);
	jw_key(w, "images");
	jw_arr(w);
	for (struct sbd_image *im = d->images; im; im = im->next) {
		jw_obj(w);
		jw_kstr(w, "name", im->name);
		jw_kstr(w, "rootfs", im->rootfs);
		jw_kstr(w, "source", "dir");
		jw_obj_end(w);
	}
	void *ctx[2] = {w, g};
	if (g && st_open(g, NULL) == 0)
		img_store_list(g->store, list_one, ctx);
	jw_arr_end(w);
	jw_obj_end(w);
}

void sbd_images_store_free(struct sandboxd *d)
{
	struct sbd_imgstore *g = d->imgstore;
	if (!g)
		return;
	sbd_images_drain(d); /* mounts in flight end first */
	sbd_wakeup_del(d->loop, &g->w, g->efd);
	while (g->list) {
		struct sbd_image *im = g->list;
		g->list = im->next;
		/* Unused mounts go now; the references of live sandboxes stay
		 * for the sandboxd that re-adopts them. */
		if (im->users == 0 && st_open(g, NULL) == 0)
			sweep(g, im, 0);
		sbd_image_free(im);
	}
	img_store_free(g->store);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cond);
	free(g);
	d->imgstore = NULL;
}
