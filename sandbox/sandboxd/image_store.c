/* image_store.c — strata-sandboxd's images from the cluster's image store
 * (images.h): resolving a reference through imagesvc's store, mounting the
 * image once per node with imagesvc's node mount manager, one node reference
 * per sandbox (named by this sandboxd's holder, so that a restarted one can
 * give back those of sandboxes that vanished), and sweeping the mounts that
 * have been unused for IMAGES_LINGER_S. The container backend builds each
 * sandbox's overlay root (its own writable layer above) on the shared mount;
 * fncall workers bind it read-only.
 *
 * The image's OCI config (Env, Entrypoint, Cmd, WorkingDir, User) is read
 * from ROOT/images/HEX/config.json when a name is resolved (unless the loop
 * has that image's already), checked against the image's signed record
 * (imagesvc/image_auth.h: a rewritten name, record or config fails the
 * create with the reason), and becomes the sandbox defaults (env, cwd and
 * user; entrypoint and cmd are published by GET /v1/images).
 *
 * A fresh mount replays the image's recorded prefetch list (the create that
 * mounted waits for it; those that come meanwhile wait for the mount only)
 * or, when the image has none yet, starts a thread that records one
 * IMAGES_RECORD_AFTER_S seconds later from what the sandboxes have read
 * (imagesvc/prefetch.h).
 *
 * Where things run. The store and the image mounts' blobs live on the FUSE
 * mount; a stopped or hung strata-fuse makes every access there wait, and
 * the node locks of the node cache may be held by a thread that waits so.
 * So the loop never calls into the store nor takes a node lock:
 *   - acquire (a create), config (an exec of the image's command after a
 *     restart), list (GET /v1/images), sweep (the tick) and the giving back
 *     of an earlier sandboxd's anonymous references are store calls
 *     (store_call.h: a worker, a deadline, a bound, abandoned when stuck);
 *   - the releases of deleted sandboxes' references go to one worker that
 *     drains their queue (no answer is waited for);
 *   - the loop keeps the entries (struct sbd_image) and the ref cache, and
 *     reads /proc/self/mountinfo (never the mount) to see the strata mount
 *     replaced.
 * Workers touch only their call, the shared store handle (opened by the first
 * call that reaches the store, then fixed; sandboxd's calls only read
 * through it) and what g->mu guards. The reconcile at start runs before the
 * loop serves, on the node cache's files. */
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
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/log.h"
#include "imagesvc/image_auth.h"
#include "imagesvc/mount.h"
#include "imagesvc/prefetch.h"
#include "sandbox/sandboxd/images-internal.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/sandboxd.h"
#include "sandbox/sandboxd/store_call.h"
#include "imagesvc/store.h"

#define IMAGES_RECORD_AFTER_S 5
#define IMAGES_MARKERS_MAX 64 /* anonymous references of an earlier sandboxd per call */

/* A reference to give back (the release queue). */
struct release {
	struct release *next;
	char hex[65];
};

struct sbd_imgstore {
	char home[PATH_MAX], cache[PATH_MAX];
	char holder[48];	/* names this sandboxd's node references (mount.h) */
	struct sbd_image *list; /* store images this sandboxd knows (the loop's) */
	int64_t linger_ms;
	struct sbd_store_calls *calls;
	bool stopped; /* sbd_images_drain ran: no more calls */
	struct sandboxd *d;
	/* shared with the workers, under mu */
	pthread_mutex_t mu;
	pthread_cond_t cond;	 /* the release queue drained */
	struct img_store *store; /* NULL until a call reached the store; then fixed */
	dev_t fuse_dev;		 /* device of the store's mount when it was opened */
	bool sweeping;		 /* a sweep's run() has not returned */
	struct release *rel_head, **rel_tail;
	bool releasing; /* a worker drains the release queue */
	struct sbd_job rel_job;
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
 * once, before any call runs; without it ($STRATA_KEY, else none) the store
 * says why it cannot verify at the first create. */
static void load_image_key(const struct sbd_imgstore *g)
{
	char p[PATH_MAX];
	struct strata_err e = {0};
	if (fmt(p, sizeof(p), "%s/%s", g->home, "cluster.key") < 0 || access(p, F_OK) < 0)
		return;
	if (img_auth_load(p, &e) < 0)
		log_warn("image signatures: %s", e.msg);
}

/* The store state, made at first use; NULL without a loop and a pool (the
 * store is never called from the loop's thread) or memory. */
static struct sbd_imgstore *st_get(struct sandboxd *d)
{
	if (d->imgstore)
		return d->imgstore;
	if (!d->loop || !d->pool)
		return NULL;
	struct sbd_imgstore *g = calloc(1, sizeof(*g));
	if (!g)
		return NULL;
	char *abs = realpath(d->cfg.home, NULL);
	snprintf(g->home, sizeof(g->home), "%s", abs ? abs : d->cfg.home);
	free(abs);
	g->calls = sbd_store_calls_new(d->loop, d->pool, d->cfg.store_timeout_ms);
	if (!g->calls || fmt(g->cache, sizeof(g->cache), "%s/%s", g->home, "cache/images") < 0) {
		sbd_store_calls_free(g->calls);
		free(g);
		return NULL;
	}
	holder_name(g->holder, sizeof(g->holder), d->cfg.state_dir);
	load_image_key(g);
	const char *l = getenv("STRATA_SANDBOXD_IMAGE_LINGER_S"); /* tests */
	g->linger_ms = (l && l[0] ? strtoll(l, NULL, 10) : IMAGES_LINGER_S) * 1000;
	pthread_mutex_init(&g->mu, NULL);
	pthread_cond_init(&g->cond, NULL);
	g->rel_tail = &g->rel_head;
	g->d = d;
	d->imgstore = g;
	return g;
}

/* The shared store handle, or NULL (the loop: never opens it). */
static struct img_store *store_of(struct sbd_imgstore *g)
{
	pthread_mutex_lock(&g->mu);
	struct img_store *s = g->store;
	pthread_mutex_unlock(&g->mu);
	return s;
}

/* ---- the store (on workers) -------------------------------------------------- */

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

int sbd_images_cluster_mount(struct sandboxd *d, char *buf, size_t cap)
{
	if (!d->imgstore)
		return -ENOENT;
	cluster_mount(d->imgstore, buf, cap);
	return 0;
}

/* The store handle, opened by the first call that reaches the store. On a
 * worker. Returns 0 and *ret or -errno with e (-ENOENT: no store there,
 * -ENOTCONN: its mount is not connected). */
static int store_open(struct sbd_imgstore *g, struct img_store **ret, struct strata_err *e)
{
	char mnt[PATH_MAX], root[PATH_MAX];
	struct img_store *s = store_of(g);
	struct stat st;
	if ((*ret = s))
		return 0;
	cluster_mount(g, mnt, sizeof(mnt));
	if (fmt(root, sizeof(root), "%s/%s", mnt, IMG_STORE_SUBDIR) < 0)
		return strata_err_set(e, -ENAMETOOLONG, "the image store's path is too long");
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
	dev_t dev = mount_dev_of(root) ?: st.st_dev;
	int r = img_store_open(root, &s);
	if (r < 0)
		return strata_err_set(e, r, "cannot open the image store at %s: %s", root,
				      strerror(-r));
	pthread_mutex_lock(&g->mu);
	bool first = !g->store;
	if (first) {
		g->store = s;
		g->fuse_dev = dev;
	}
	pthread_mutex_unlock(&g->mu);
	if (first)
		log_info("image store: %s, node cache %s", root, g->cache);
	else
		img_store_free(s); /* another call was first */
	*ret = store_of(g);
	return 0;
}

/* Reads the OCI config of image hex (Env, Entrypoint, Cmd, WorkingDir,
 * User) into conf, checked against its signed record (a rewritten record
 * or config is refused: its Env would reach every sandbox). Returns 0 (also
 * for an image without a usable config: no defaults) or -errno with e. */
static int load_config(struct img_store *s, const char *hex, struct sbd_image *conf,
		       struct strata_err *e)
{
	struct img_record rec;
	_cleanup_free_ char *buf = NULL;
	int r = img_store_record(s, hex, &rec, e);
	if (r < 0)
		return r;
	ssize_t n = img_store_read_doc(s, &rec, "config.json", IMAGES_CONFIG_MAX, &buf, e);
	img_record_done(&rec);
	if (n < 0 && n != -ENOENT && n != -EFBIG)
		return (int)n;
	conf->config_loaded = true;
	struct json *j = n > 0 ? json_parse(buf, (size_t)n, NULL, 0) : NULL;
	const struct json *c = json_get(j, "config");
	if (!c) {
		if (n != -ENOENT)
			log_warn("image %.12s: no usable config (%s)", hex,
				 n < 0 ? e->msg : "no \"config\" object");
		if (e)
			strata_err_clear(e);
		json_free(j);
		return 0;
	}
	conf->env = sbd_images_str_array(json_get(c, "Env"), true);
	conf->entrypoint = sbd_images_str_array(json_get(c, "Entrypoint"), false);
	conf->cmd = sbd_images_str_array(json_get(c, "Cmd"), false);
	const char *wd = json_cstr(json_get(c, "WorkingDir"));
	const char *user = json_cstr(json_get(c, "User"));
	conf->cwd = wd && wd[0] == '/' ? strdup(wd) : NULL;
	conf->user = user && user[0] && strlen(user) <= 64 ? strdup(user) : NULL;
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

static void start_recorder(struct sbd_imgstore *g, struct img_store *s, const char *hex)
{
	struct recorder *rc = calloc(1, sizeof(*rc));
	pthread_t t;
	pthread_attr_t a;
	if (!rc)
		return;
	snprintf(rc->store_root, sizeof(rc->store_root), "%s", img_store_root(s));
	snprintf(rc->cache, sizeof(rc->cache), "%s", g->cache);
	snprintf(rc->hex, sizeof(rc->hex), "%s", hex);
	pthread_attr_init(&a);
	pthread_attr_setdetachstate(&a, PTHREAD_CREATE_DETACHED);
	if (pthread_create(&t, &a, record_thread, rc) != 0)
		free(rc);
	pthread_attr_destroy(&a);
}

/* ---- giving references back (a queue, one worker) ----------------------------- */

/* On a worker: the queued releases, in order. A named release never needs
 * the store (the sweep unmounts), but it takes the image's node lock. */
static void releases_run(struct sbd_job *job)
{
	struct sbd_imgstore *g =
	    (struct sbd_imgstore *)((char *)job - offsetof(struct sbd_imgstore, rel_job));
	for (;;) {
		pthread_mutex_lock(&g->mu);
		struct release *rl = g->rel_head;
		if (rl && !(g->rel_head = rl->next))
			g->rel_tail = &g->rel_head;
		if (!rl) {
			g->releasing = false;
			pthread_cond_broadcast(&g->cond);
		}
		pthread_mutex_unlock(&g->mu);
		if (!rl)
			return; /* g may be freed from here on */
		struct strata_err e = {0};
		if (img_node_release_as(NULL, g->cache, rl->hex, g->holder, &e) < 0)
			log_warn("image %.12s: releasing a node reference: %s", rl->hex, e.msg);
		free(rl);
	}
}

/* Starts the queue's worker unless it runs (on the loop). */
static void releases_kick(struct sbd_imgstore *g)
{
	pthread_mutex_lock(&g->mu);
	bool start = g->rel_head && !g->releasing;
	g->releasing |= start;
	pthread_mutex_unlock(&g->mu);
	g->rel_job.fn = releases_run;
	if (start && sbd_pool_run(g->d->pool, &g->rel_job) < 0) {
		pthread_mutex_lock(&g->mu);
		g->releasing = false; /* the next release or tick tries again */
		pthread_mutex_unlock(&g->mu);
	}
}

static void release_later(struct sbd_imgstore *g, const char *hex)
{
	struct release *rl = calloc(1, sizeof(*rl));
	if (!rl) {
		log_warn("image %.12s: out of memory giving back a node reference", hex);
		return; /* the next sandboxd's reconcile gives it back */
	}
	snprintf(rl->hex, sizeof(rl->hex), "%s", hex);
	pthread_mutex_lock(&g->mu);
	*g->rel_tail = rl;
	g->rel_tail = &rl->next;
	pthread_mutex_unlock(&g->mu);
	releases_kick(g);
}

/* ---- acquire: resolve, config, node reference, mount (a store call) ---------- */

struct acquire_call {
	struct sbd_store_call call;
	struct sbd_imgstore *g;
	struct sbd_image_waiter *w;
	/* inputs */
	char *ref;
	char hint[65];	/* an image the loop saw mounted for ref a moment ago */
	char known[65]; /* the image ref named before, whose config the loop has */
	/* results */
	int r;
	struct strata_err e;
	char hex[65];
	bool ref_taken, fresh, record;
	uint64_t prefetched;
	int64_t took_ms;
	struct strata_err pf;  /* the prefetch's failure (a warning) */
	struct sbd_image conf; /* the config read (conf.config_loaded), or none */
};

static struct acquire_call *acquire_of(struct sbd_store_call *call)
{
	return (struct acquire_call *)((char *)call - offsetof(struct acquire_call, call));
}

/* img_node_acquire_as and, for a fresh mount, the prefetch replay. */
static int mount_blocking(struct img_store *s, struct acquire_call *a)
{
	struct strata_err e = {0};
	char root[PATH_MAX];
	int64_t t0 = sbd_now_ms();
	int r = img_node_acquire_as(s, a->g->cache, a->hex, a->g->holder, root, sizeof(root),
				    &a->fresh, &e);
	if (r < 0)
		return strata_err_set(&a->e, r, "mounting image %.12s: %s", a->hex, e.msg);
	a->ref_taken = true;
	struct img_prefetch_stats ps = {0};
	if (!a->fresh)
		return 0;
	if (!img_prefetch_exists(s, a->hex))
		a->record = true;
	else
		img_prefetch_run(s, a->hex, root, false, 0, &ps, &a->pf);
	a->prefetched = ps.bytes;
	a->took_ms = sbd_now_ms() - t0;
	return 0;
}

/* Resolves a->ref and reads the image's config unless the loop has it. */
static int resolve_blocking(struct img_store **s, struct acquire_call *a)
{
	struct strata_err e = {0};
	int r = store_open(a->g, s, &e);
	if (r < 0) {
		r = r == -ENOTCONN ? -ENOTCONN : -ENOENT;
		return strata_err_set(&a->e, r, "image '%s' is not registered on this node and %s",
				      a->ref, e.msg);
	}
	r = img_store_resolve(*s, a->ref, a->hex, &e);
	if (r == -ENOENT)
		return strata_err_set(&a->e, r,
				      "image '%s' is neither registered on this node nor in the "
				      "image store (strata image ls)",
				      a->ref);
	if (r < 0)
		return strata_err_set(&a->e, r, "image reference '%s': %s", a->ref,
				      e.msg[0] ? e.msg : strerror(-r));
	if (!strcmp(a->hex, a->known))
		return 0;
	return load_config(*s, a->hex, &a->conf, &a->e);
}

static void acquire_run(struct sbd_store_call *call)
{
	struct acquire_call *a = acquire_of(call);
	struct img_store *s = NULL;
	struct strata_err e = {0};
	if (a->hint[0]) { /* the hot path: one more reference, no store */
		snprintf(a->hex, sizeof(a->hex), "%s", a->hint);
		int r = img_node_ref(a->g->cache, a->hex, a->g->holder, &e);
		if (r == 0) {
			a->ref_taken = true;
			return;
		}
		if (r != -ENOENT)
			log_warn("image %.12s: taking a node reference: %s", a->hex, e.msg);
		/* not mounted any more: mount it again */
		if ((a->r = store_open(a->g, &s, &a->e)) == 0)
			a->r = mount_blocking(s, a);
		return;
	}
	if ((a->r = resolve_blocking(&s, a)) == 0)
		a->r = mount_blocking(s, a);
}

/* The deadline came first: what the call took is given back here, on its
 * worker, once the store answered at last. */
static void acquire_late(struct sbd_store_call *call)
{
	struct acquire_call *a = acquire_of(call);
	struct strata_err e = {0};
	log_warn("image '%s': the image store answered %lld ms after the deadline%s", a->ref,
		 (long long)(sbd_now_ms() - call->deadline_ms),
		 a->ref_taken ? ": its node reference given back" : "");
	if (a->ref_taken && img_node_release_as(NULL, a->g->cache, a->hex, a->g->holder, &e) < 0)
		log_warn("image %.12s: releasing a node reference: %s", a->hex, e.msg);
	struct img_store *s = store_of(a->g);
	if (a->record && s)
		start_recorder(a->g, s, a->hex);
}

static void acquire_free(struct sbd_store_call *call)
{
	struct acquire_call *a = acquire_of(call);
	free(a->ref);
	sbd_image_config_clear(&a->conf);
	free(a);
}

static void remember(struct sbd_image *im, const char *ref)
{
	if (!im->last_ref || strcmp(im->last_ref, ref)) {
		free(im->last_ref);
		im->last_ref = strdup(ref);
	}
	im->last_ref_ms = sbd_now_ms();
}

/* The message of a store call past its deadline. */
static int store_timed_out(struct sbd_imgstore *g, struct strata_err *e, const char *what)
{
	return strata_err_set(e, -ETIMEDOUT,
			      "%s: the image store did not answer within %lld ms (strata-fuse "
			      "stopped, hung or restarting? strata status --home %s)",
			      what, (long long)sbd_store_calls_timeout_ms(g->calls), g->home);
}

/* On the loop: the image is the caller's, with its reference. */
static struct sbd_image *acquire_commit(struct sbd_imgstore *g, struct acquire_call *a)
{
	struct sbd_image *im = entry_find(g, a->hex) ?: entry_new(g, a->hex);
	if (!im) {
		release_later(g, a->hex);
		return NULL;
	}
	if (a->conf.config_loaded && !im->config_loaded) {
		sbd_image_config_move(im, &a->conf);
		im->config_loaded = true;
	}
	remember(im, a->ref);
	im->held = true;
	im->users++;
	if (!a->fresh)
		return im;
	struct img_store *s = store_of(g);
	if (a->record && s)
		start_recorder(g, s, im->hex);
	else if (a->pf.code)
		log_warn("image %.12s: prefetch: %s", im->hex, a->pf.msg);
	log_info("image %.12s mounted at %s in %lld ms (prefetched %llu bytes)", im->hex,
		 im->rootfs, (long long)a->took_ms, (unsigned long long)a->prefetched);
	return im;
}

static void acquire_done(struct sbd_store_call *call, int r)
{
	struct acquire_call *a = acquire_of(call);
	struct sbd_imgstore *g = a->g;
	struct strata_err e = {0};
	char what[256];
	if (r == -ETIMEDOUT) { /* the inputs only: the worker may still run */
		snprintf(what, sizeof(what), "image '%s'", a->ref);
		a->w->fn(a->w, store_timed_out(g, &e, what), NULL, &e);
		return;
	}
	if (a->r < 0) {
		a->w->fn(a->w, a->r, NULL, &a->e);
		return;
	}
	struct sbd_image *im = acquire_commit(g, a);
	if (!im) {
		strata_err_set(&e, -ENOMEM, "out of memory");
		a->w->fn(a->w, -ENOMEM, NULL, &e);
		return;
	}
	a->w->fn(a->w, 0, im, NULL);
}

/* An image that ref named a moment ago and that was mounted then (a hot
 * path: no round trip through the FUSE mount for every sandbox). */
static struct sbd_image *cached(struct sbd_imgstore *g, const char *ref)
{
	int64_t now = sbd_now_ms();
	for (struct sbd_image *im = g->list; im; im = im->next)
		if (im->held && im->last_ref && now - im->last_ref_ms < IMAGES_REF_CACHE_MS &&
		    !strcmp(im->last_ref, ref))
			return im;
	return NULL;
}

/* The image ref named last, whose config the loop has: "" if none. */
static const char *known_for(struct sbd_imgstore *g, const char *ref)
{
	for (struct sbd_image *im = g->list; im; im = im->next)
		if (im->config_loaded && im->last_ref && !strcmp(im->last_ref, ref))
			return im->hex;
	return "";
}

static int call_start(struct sbd_imgstore *g, struct sbd_store_call *call, struct strata_err *e)
{
	int r = g->stopped ? -ESHUTDOWN : sbd_store_call_start(g->calls, call);
	if (r == -EAGAIN)
		return strata_err_set(e, r,
				      "the image store is not answering: %d calls to it are "
				      "waiting already (at most %d); retry later",
				      SBD_STORE_CALLS_MAX, SBD_STORE_CALLS_MAX);
	if (r < 0)
		return strata_err_set(e, r, "cannot call the image store: %s", strerror(-r));
	return r;
}

/* ---- the API of images.h ---------------------------------------------------- */

int sbd_images_acquire(struct sandboxd *d, const char *ref, struct sbd_image **ret,
		       struct sbd_image_waiter *w, struct strata_err *e)
{
	struct sbd_image *im = sbd_images_find(d, ref);
	if (im) {
		*ret = im;
		return 0;
	}
	*ret = NULL;
	struct sbd_imgstore *g = st_get(d);
	if (!g)
		return strata_err_set(e, d->loop ? -ENOMEM : -EOPNOTSUPP,
				      "image '%s': the image store needs sandboxd's loop", ref);
	struct acquire_call *a = calloc(1, sizeof(*a));
	if (!a || !(a->ref = strdup(ref))) {
		free(a);
		return strata_err_set(e, -ENOMEM, "out of memory");
	}
	a->g = g;
	a->w = w;
	a->call = (struct sbd_store_call){
	    .run = acquire_run, .done = acquire_done, .late = acquire_late, .free = acquire_free};
	if ((im = cached(g, ref)))
		snprintf(a->hint, sizeof(a->hint), "%s", im->hex);
	snprintf(a->known, sizeof(a->known), "%s", known_for(g, ref));
	int r = call_start(g, &a->call, e);
	if (r < 0) {
		acquire_free(&a->call);
		return r;
	}
	return -EINPROGRESS;
}

void sbd_images_release(struct sandboxd *d, struct sbd_image *im)
{
	struct sbd_imgstore *g = d->imgstore;
	if (!g || !im || !im->hex[0] || im->users <= 0)
		return;
	im->users--;
	release_later(g, im->hex);
}

/* ---- config of a re-adopted image (a store call) --------------------------- */

struct config_call {
	struct sbd_store_call call;
	struct sbd_imgstore *g;
	struct sbd_image *im; /* the loop's: not touched by the worker */
	struct sbd_image_waiter *w;
	char hex[65];
	int r;
	struct strata_err e;
	struct sbd_image conf;
};

static struct config_call *config_of(struct sbd_store_call *call)
{
	return (struct config_call *)((char *)call - offsetof(struct config_call, call));
}

static void config_run(struct sbd_store_call *call)
{
	struct config_call *c = config_of(call);
	struct img_store *s = NULL;
	if ((c->r = store_open(c->g, &s, &c->e)) == 0)
		c->r = load_config(s, c->hex, &c->conf, &c->e);
}

static void config_done(struct sbd_store_call *call, int r)
{
	struct config_call *c = config_of(call);
	struct strata_err e = {0};
	char what[128];
	if (r == -ETIMEDOUT) {
		snprintf(what, sizeof(what), "the config of image %.12s", c->hex);
		c->w->fn(c->w, store_timed_out(c->g, &e, what), c->im, &e);
		return;
	}
	if (c->r == 0 && !c->im->config_loaded) {
		sbd_image_config_move(c->im, &c->conf);
		c->im->config_loaded = true;
	}
	c->w->fn(c->w, c->r, c->im, c->r < 0 ? &c->e : NULL);
}

static void config_free(struct sbd_store_call *call)
{
	struct config_call *c = config_of(call);
	sbd_image_config_clear(&c->conf);
	free(c);
}

int sbd_images_config(struct sandboxd *d, struct sbd_image *im, struct sbd_image_waiter *w,
		      struct strata_err *e)
{
	struct sbd_imgstore *g = d->imgstore;
	if (!im || !im->hex[0] || im->config_loaded)
		return 0;
	if (!g)
		return strata_err_set(e, -EOPNOTSUPP, "the image store needs sandboxd's loop");
	struct config_call *c = calloc(1, sizeof(*c));
	if (!c)
		return strata_err_set(e, -ENOMEM, "out of memory");
	*c = (struct config_call){.g = g, .im = im, .w = w};
	c->call =
	    (struct sbd_store_call){.run = config_run, .done = config_done, .free = config_free};
	snprintf(c->hex, sizeof(c->hex), "%s", im->hex);
	int r = call_start(g, &c->call, e);
	if (r < 0) {
		free(c);
		return r;
	}
	return -EINPROGRESS;
}

/* ---- re-adoption ------------------------------------------------------------- */

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
	/* Its node reference is the one it took (reconcile checks that). A
	 * statfs of the image mount: its metadata is local (EROFS). */
	im->users++;
	im->held = img_node_root(g->cache, hex, root, sizeof(root)) == 0;
	return im;
}

/* A sandboxd before named references held one anonymous reference per
 * image and said so with <state>/images/HEX: given back (after its
 * sandboxes took theirs) by a store call, as the last one drops the
 * image's lease in the store. */
struct markers_call {
	struct sbd_store_call call;
	struct sbd_imgstore *g;
	char state_dir[PATH_MAX];
	size_t n;
	char hex[IMAGES_MARKERS_MAX][65];
};

static struct markers_call *markers_of(struct sbd_store_call *call)
{
	return (struct markers_call *)((char *)call - offsetof(struct markers_call, call));
}

static void markers_run(struct sbd_store_call *call)
{
	struct markers_call *m = markers_of(call);
	struct img_store *s = NULL;
	char p[PATH_MAX];
	store_open(m->g, &s, NULL); /* for the lease, when it is reachable */
	for (size_t i = 0; i < m->n; i++) {
		if (fmt(p, sizeof(p), "%s/images/%s", m->state_dir, m->hex[i]) < 0 || unlink(p) < 0)
			continue;
		if (img_node_release(s, m->g->cache, m->hex[i], NULL) < 0)
			log_warn("image %.12s: giving back the earlier sandboxd's reference failed",
				 m->hex[i]);
	}
}

static void markers_done(struct sbd_store_call *call, int r)
{
	if (r == -ETIMEDOUT)
		log_warn("giving back an earlier sandboxd's image references: the image store "
			 "does not answer (they go when it does)");
}

static void markers_free(struct sbd_store_call *call)
{
	free(markers_of(call));
}

void sbd_images_reconcile(struct sandboxd *d)
{
	struct sbd_imgstore *g = st_get(d);
	DIR *dp = g ? opendir(g->cache) : NULL;
	struct markers_call *m = g ? calloc(1, sizeof(*m)) : NULL;
	struct dirent *de;
	char root[PATH_MAX], p[PATH_MAX];
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
			img_node_release_as(NULL, g->cache, de->d_name, g->holder, NULL);
		for (; k >= 0 && k < want; k++)
			if (img_node_ref(g->cache, de->d_name, g->holder, NULL) < 0)
				break;
		if (k >= 0 && k != want)
			log_warn("image %.12s: %lld sandboxes, %d node references", de->d_name,
				 (long long)want, k);
		if (m && m->n < IMAGES_MARKERS_MAX &&
		    fmt(p, sizeof(p), "%s/images/%s", d->cfg.state_dir, de->d_name) == 0 &&
		    access(p, F_OK) == 0)
			snprintf(m->hex[m->n++], 65, "%s", de->d_name);
	}
	if (dp)
		closedir(dp);
	if (m && m->n) {
		m->g = g;
		snprintf(m->state_dir, sizeof(m->state_dir), "%s", d->cfg.state_dir);
		m->call = (struct sbd_store_call){
		    .run = markers_run, .done = markers_done, .free = markers_free};
		if (call_start(g, &m->call, NULL) == 0)
			m = NULL;
	}
	free(m);
}

/* ---- the tick: a replaced strata mount, the sweep ----------------------------- */

/* The strata mount was replaced: strata-fuse and its holder both died, so
 * the FUSE connection under every image mount on the old one ended and
 * their files read as errors. Their sandboxes cannot be kept: marked
 * failed, with the reason (deleting them is the caller's). The next sandbox
 * goes through img_node_acquire_as, which replaces the image mounts (the
 * references of the sandboxes on the old mount stay counted). A restart of
 * strata-fuse alone keeps the mount (the holder): nothing changes here.
 * /proc/self/mountinfo only: never the mount itself. */
static void check_fuse(struct sbd_imgstore *g, struct img_store *s)
{
	dev_t dev = mount_dev_of(img_store_root(s));
	pthread_mutex_lock(&g->mu);
	bool same = !dev || dev == g->fuse_dev;
	if (!same)
		g->fuse_dev = dev;
	pthread_mutex_unlock(&g->mu);
	if (same)
		return;
	log_warn("the strata mount was replaced (strata-fuse and its holder died): "
		 "failing the sandboxes on its image mounts, renewing the mounts");
	for (struct sbd_sandbox *sb = g->d->sandboxes; sb; sb = sb->next)
		if (sb->img && sb->img->hex[0] && sb->img->held)
			sbd_registry_fail(g->d, sb,
					  "its image mount lost the strata mount (strata-fuse and "
					  "its holder died): the image files cannot be read");
	for (struct sbd_image *im = g->list; im; im = im->next)
		im->held = false;
}

/* Unmounting the images that have been unused for idle_ms (node-wide: no
 * users; the node lock says so, not the loop's counts). */
struct sweep_call {
	struct sbd_store_call call;
	struct sbd_imgstore *g;
	int64_t idle_ms;
	size_t n;
	struct {
		char hex[65];
		bool unmounted; /* a result */
	} v[];
};

static struct sweep_call *sweep_of(struct sbd_store_call *call)
{
	return (struct sweep_call *)((char *)call - offsetof(struct sweep_call, call));
}

static void sweep_run(struct sbd_store_call *call)
{
	struct sweep_call *sw = sweep_of(call);
	struct img_store *s = NULL;
	/* No store, no sweep: unmounting drops the image's lease there. */
	store_open(sw->g, &s, NULL);
	for (size_t i = 0; s && i < sw->n; i++) {
		struct strata_err e = {0};
		int r = img_node_sweep_one(s, sw->g->cache, sw->v[i].hex, sw->idle_ms, &e);
		if (r < 0)
			log_warn("image %.12s: unmounting: %s", sw->v[i].hex, e.msg);
		else if (r > 0)
			log_info("image %.12s: unmounted (unused for %lld ms)", sw->v[i].hex,
				 (long long)sw->idle_ms);
		sw->v[i].unmounted = r > 0;
	}
	pthread_mutex_lock(&sw->g->mu);
	sw->g->sweeping = false;
	pthread_mutex_unlock(&sw->g->mu);
}

static void sweep_done(struct sbd_store_call *call, int r)
{
	struct sweep_call *sw = sweep_of(call);
	if (r == -ETIMEDOUT) {
		log_warn("sweeping unused image mounts: the image store does not answer");
		return;
	}
	for (size_t i = 0; i < sw->n; i++) {
		struct sbd_image *im = entry_find(sw->g, sw->v[i].hex);
		if (im && sw->v[i].unmounted)
			im->held = false;
	}
}

static void sweep_free(struct sbd_store_call *call)
{
	free(sweep_of(call));
}

/* Starts the sweep of the unused images (none while one runs). Returns 0
 * or -errno (nothing to sweep: -ENOENT). */
static int sweep_start(struct sbd_imgstore *g, int64_t idle_ms)
{
	size_t n = 0;
	for (struct sbd_image *im = g->list; im; im = im->next)
		n += im->users == 0;
	pthread_mutex_lock(&g->mu);
	bool busy = g->sweeping;
	pthread_mutex_unlock(&g->mu);
	if (busy || !n)
		return busy ? -EBUSY : -ENOENT;
	struct sweep_call *sw = calloc(1, sizeof(*sw) + n * sizeof(sw->v[0]));
	if (!sw)
		return -ENOMEM;
	sw->g = g;
	sw->idle_ms = idle_ms;
	sw->call =
	    (struct sbd_store_call){.run = sweep_run, .done = sweep_done, .free = sweep_free};
	/* Not only the held ones: a mount renewed away from is swept too. */
	for (struct sbd_image *im = g->list; im; im = im->next)
		if (im->users == 0)
			snprintf(sw->v[sw->n++].hex, 65, "%s", im->hex);
	pthread_mutex_lock(&g->mu);
	g->sweeping = true;
	pthread_mutex_unlock(&g->mu);
	int r = call_start(g, &sw->call, NULL);
	if (r < 0) {
		pthread_mutex_lock(&g->mu);
		g->sweeping = false;
		pthread_mutex_unlock(&g->mu);
		free(sw);
	}
	return r;
}

void sbd_images_tick(struct sandboxd *d)
{
	struct sbd_imgstore *g = d->imgstore ?: st_get(d);
	bool any = false;
	if (!g || g->stopped)
		return;
	releases_kick(g); /* one that could not start a thread before */
	struct img_store *s = store_of(g);
	if (!g->list)
		return;
	for (struct sbd_image *im = g->list; im; im = im->next)
		any |= im->held;
	if (any && s)
		check_fuse(g, s);
	sweep_start(g, g->linger_ms); /* its worker opens the store if need be */
}

/* ---- GET /v1/images (a store call) ------------------------------------------ */

struct list_call {
	struct sbd_store_call call;
	struct sbd_imgstore *g;
	struct sbd_images_listing *l;
	/* results: the store's names and images */
	size_t n, cap;
	struct listed {
		char *name; /* NULL: an image without a name */
		char hex[65];
	} * v;
	bool oom;
};

static struct list_call *list_of(struct sbd_store_call *call)
{
	return (struct list_call *)((char *)call - offsetof(struct list_call, call));
}

static int list_collect(void *ctx, const char *name, const char *hex)
{
	struct list_call *lc = ctx;
	if (lc->n == lc->cap) {
		size_t cap = lc->cap ? 2 * lc->cap : 16;
		struct listed *v = realloc(lc->v, cap * sizeof(*v));
		if (!v) {
			lc->oom = true;
			return -ENOMEM;
		}
		lc->v = v;
		lc->cap = cap;
	}
	struct listed *it = &lc->v[lc->n];
	it->name = name ? strdup(name) : NULL;
	snprintf(it->hex, sizeof(it->hex), "%s", hex);
	lc->n += !name || it->name;
	return 0;
}

static void list_run(struct sbd_store_call *call)
{
	struct list_call *lc = list_of(call);
	struct img_store *s = NULL;
	/* No store (nothing imported, or not connected): the directories only. */
	if (store_open(lc->g, &s, NULL) == 0)
		img_store_list(s, list_collect, lc);
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

static void list_one(struct jw *w, struct sbd_imgstore *g, const char *name, const char *hex)
{
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
}

static void list_done(struct sbd_store_call *call, int r)
{
	struct list_call *lc = list_of(call);
	struct sandboxd *d = lc->g->d;
	struct jw *w = &lc->l->w;
	struct strata_err e = {0};
	if (r == -ETIMEDOUT) {
		lc->l->fn(lc->l, store_timed_out(lc->g, &e, "listing images"), &e);
		return;
	}
	if (lc->oom) {
		lc->l->fn(lc->l, strata_err_set(&e, -ENOMEM, "out of memory"), &e);
		return;
	}
	jw_init(w);
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
	for (size_t i = 0; i < lc->n; i++)
		list_one(w, lc->g, lc->v[i].name, lc->v[i].hex);
	jw_arr_end(w);
	jw_obj_end(w);
	lc->l->fn(lc->l, 0, NULL);
}

static void list_free(struct sbd_store_call *call)
{
	struct list_call *lc = list_of(call);
	for (size_t i = 0; i < lc->n; i++)
		free(lc->v[i].name);
	free(lc->v);
	free(lc);
}

int sbd_images_list(struct sandboxd *d, struct sbd_images_listing *l, struct strata_err *e)
{
	struct sbd_imgstore *g = st_get(d);
	if (!g)
		return strata_err_set(e, d->loop ? -ENOMEM : -EOPNOTSUPP,
				      "listing images: the image store needs sandboxd's loop");
	struct list_call *lc = calloc(1, sizeof(*lc));
	if (!lc)
		return strata_err_set(e, -ENOMEM, "out of memory");
	lc->g = g;
	lc->l = l;
	lc->call = (struct sbd_store_call){.run = list_run, .done = list_done, .free = list_free};
	int r = call_start(g, &lc->call, e);
	if (r < 0) {
		free(lc);
		return r;
	}
	return -EINPROGRESS;
}

void sbd_images_store_stats(struct sandboxd *d, unsigned *ret_in_flight, uint64_t *ret_timeouts)
{
	struct sbd_imgstore *g = d->imgstore;
	*ret_in_flight = g ? sbd_store_calls_in_flight(g->calls) : 0;
	*ret_timeouts = g ? sbd_store_calls_timeouts(g->calls) : 0;
}

/* ---- shutdown ------------------------------------------------------------------ */

/* Waits up to until_ms for the release queue's worker. True when it is done. */
static bool releases_wait(struct sbd_imgstore *g, int64_t until_ms)
{
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	int64_t left = until_ms - sbd_now_ms();
	ts.tv_sec += left / 1000;
	ts.tv_nsec += (left % 1000) * 1000000;
	if (ts.tv_nsec >= 1000000000) {
		ts.tv_sec++;
		ts.tv_nsec -= 1000000000;
	}
	pthread_mutex_lock(&g->mu);
	while (g->releasing && left > 0 && pthread_cond_timedwait(&g->cond, &g->mu, &ts) == 0)
		;
	bool idle = !g->releasing;
	pthread_mutex_unlock(&g->mu);
	return idle;
}

unsigned sbd_images_drain(struct sandboxd *d)
{
	struct sbd_imgstore *g = d->imgstore;
	if (!g || g->stopped)
		return g ? sbd_store_calls_in_flight(g->calls) : 0;
	int64_t until = sbd_now_ms() + SBD_STORE_STOP_WAIT_MS;
	unsigned stuck = sbd_store_calls_stop(g->calls, SBD_STORE_STOP_WAIT_MS);
	/* Unused mounts go now (unless the store is stuck); the references of
	 * live sandboxes stay for the sandboxd that re-adopts them. */
	if (!stuck && sweep_start(g, 0) == 0)
		stuck = sbd_store_calls_stop(g->calls, until - sbd_now_ms());
	g->stopped = true;
	releases_wait(g, until);
	if (stuck)
		log_warn("%u image store calls are stuck (strata-fuse not answering): "
			 "not waiting for them",
			 stuck);
	return stuck;
}

void sbd_images_store_free(struct sandboxd *d)
{
	struct sbd_imgstore *g = d->imgstore;
	if (!g)
		return;
	sbd_images_drain(d);
	d->imgstore = NULL;
	/* A release queued since (a create that failed at the end) is given
	 * back here, unless the queue's worker still runs: then the next
	 * sandboxd's reconcile does. */
	bool idle = releases_wait(g, sbd_now_ms() + 100);
	while (idle && g->rel_head) {
		struct release *rl = g->rel_head;
		g->rel_head = rl->next;
		if (!sbd_store_calls_in_flight(g->calls))
			img_node_release_as(NULL, g->cache, rl->hex, g->holder, NULL);
		free(rl);
	}
	if (!idle || sbd_store_calls_in_flight(g->calls)) {
		/* A worker stuck in the store still uses g and the store
		 * handle: left to the process's end (store_call.h). */
		return;
	}
	sbd_store_calls_free(g->calls);
	while (g->list) {
		struct sbd_image *im = g->list;
		g->list = im->next;
		sbd_image_free(im);
	}
	img_store_free(g->store);
	pthread_mutex_destroy(&g->mu);
	pthread_cond_destroy(&g->cond);
	free(g);
}

int sbd_image_erofs(struct sandboxd *d, const struct sbd_image *im, char *meta, size_t cap,
		    char ***ret_blobs, size_t *ret_n, struct strata_err *e)
{
	struct sbd_imgstore *st = d->imgstore;
	if (!im || !im->hex[0] || !st)
		return -ENOENT;
	pthread_mutex_lock(&st->mu);
	struct img_store *s = st->store;
	pthread_mutex_unlock(&st->mu);
	if (!s)
		return strata_err_set(e, -EAGAIN, "the image store is not open");
	if ((size_t)snprintf(meta, cap, "%s/%s/meta.img", st->cache, im->hex) >= cap)
		return -ENAMETOOLONG;
	struct img_record rec;
	int r = img_store_record(s, im->hex, &rec, e);
	if (r < 0)
		return r;
	char **v = calloc(rec.n_blobs + 1, sizeof(char *));
	r = v ? 0 : -ENOMEM;
	for (uint32_t i = 0; r == 0 && i < rec.n_blobs; i++) {
		v[i] = malloc(PATH_MAX);
		r = v[i] ? img_store_blob_path(s, rec.blobs[i], "data", v[i], PATH_MAX) : -ENOMEM;
	}
	size_t n = rec.n_blobs;
	img_record_done(&rec);
	if (r < 0) {
		for (size_t i = 0; v && i < n; i++)
			free(v[i]);
		free(v);
		return strata_err_set(e, r, "image %.12s: its blobs: %s", im->hex, strerror(-r));
	}
	*ret_blobs = v;
	*ret_n = n;
	return 0;
}

void sbd_images_each_mounted(struct sandboxd *d, void (*fn)(void *ctx, const char *name), void *ctx)
{
	for (struct sbd_image *im = d->imgstore ? d->imgstore->list : NULL; im; im = im->next)
		if (im->held)
			fn(ctx, im->last_ref ? im->last_ref : im->hex);
}
