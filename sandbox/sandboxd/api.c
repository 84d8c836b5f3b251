/* api.c — the routes of strata-sandboxd's HTTP API (documented in API.md):
 * request validation (unknown fields are refused by name), the mapping of
 * negative errno to HTTP errors, the exec stream (newline-delimited JSON
 * events in a chunked response) with its interactive stdin, and creates on
 * worker threads.
 *
 * Creates of a backend with create_threaded (container: the START round
 * trip, staging when the pool is empty) run backend->create on a worker of
 * pool.h (at most CREATE_THREADS at once; later ones wait, admitted)
 * while the loop serves other requests, unless none is in flight and the
 * last one was quick (CREATE_INLINE_MAX_US): then on the loop, as other
 * backends' creates, which saves the hand-off and its wake-ups. Everything
 * else stays on the loop: validation, the image, admission (a create in
 * flight holds its share in d->creating_*, so concurrent creates cannot
 * overcommit), and at completion (an eventfd) the registry insert and the
 * answer. state.json
 * is written by the worker after the backend's create (the sandbox is the
 * worker's alone until then), before the loop learns of it.
 * The sandbox is invisible until then, so its state transitions keep their
 * order. An idempotent repeat of a create in flight waits for it and gets
 * the same answer. A create whose client left before the answer is
 * destroyed, unless it has an idempotency key (a retry finds it). At
 * shutdown, api_creates_drain waits for the running ones and completes them.
 *
 * Error codes at this boundary (the SDK maps each to an exception):
 *   400 bad_request, unknown_field, invalid_path   404 not_found, image_not_found
 *   409 paused, not_paused   413 too_large   501 unsupported
 *   503 no_capacity, backend_unavailable   500 internal */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/http.h"
#include "fs/log.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/sandboxd.h"
#include "sandbox/sandboxd/tar.h"

#define ERRLEN 512
#define SBD_STDIN_CHUNK_MAX (1u << 20) /* one POST .../stdin body */

/* ---- small helpers ------------------------------------------------------- */

static void reply_errno(struct conn *c, int r, const char *what, const char *why)
{
	const char *msg = why && why[0] ? why : strerror(-r);
	switch (r) {
	case -ENOENT:
		conn_reply_error(c, 404, "not_found", "%s: %s", what, msg);
		break;
	case -ENODEV:
		conn_reply_error(c, 503, "backend_unavailable", "%s: %s", what, msg);
		break;
	case -EOPNOTSUPP:
		conn_reply_error(c, 501, "unsupported", "%s: %s", what, msg);
		break;
	case -ENOSPC:
		conn_reply_error(c, 503, "no_capacity", "%s: %s", what, msg);
		break;
	case -EBUSY:
		conn_reply_error(c, 409, "busy", "%s: %s", what,
				 why && why[0] ? why
					       : "the sandbox is busy (an exec holds it); retry");
		break;
	case -EFBIG:
		conn_reply_error(c, 413, "too_large", "%s: %s", what, msg);
		break;
	case -EINVAL:
	case -ENOTDIR:
	case -EISDIR:
	case -EEXIST:
	case -ENOTEMPTY:
	case -ENAMETOOLONG:
	case -ELOOP:
	case -EXDEV:
		conn_reply_error(c, 400, "bad_request", "%s: %s", what, msg);
		break;
	case -EACCES:
	case -EPERM:
	case -EROFS:
		conn_reply_error(c, 403, "forbidden", "%s: %s", what, msg);
		break;
	default:
		conn_reply_error(c, 500, "internal", "%s: %s", what, msg);
	}
}

/* Parses a JSON object body; replies 400 itself and returns NULL on error. */
static struct json *parse_body(struct conn *c, const char *body, size_t len,
			       const char *const *allowed)
{
	char err[200];
	if (len == 0) {
		conn_reply_error(c, 400, "bad_request", "a JSON object body is required");
		return NULL;
	}
	struct json *j = json_parse(body, len, err, sizeof(err));
	if (!j) {
		conn_reply_error(c, 400, "bad_request", "malformed JSON %s", err);
		return NULL;
	}
	if (j->type != JSON_OBJ) {
		conn_reply_error(c, 400, "bad_request", "the body must be a JSON object");
		return json_free(j);
	}
	const char *bad = json_unknown_field(j, allowed);
	if (bad) {
		conn_reply_error(c, 400, "unknown_field", "unknown field '%s'", bad);
		return json_free(j);
	}
	return j;
}

/* Normalises an absolute path: collapses "//" and ".", refuses "..",
 * relative paths and over-long ones. Returns a malloc'ed copy or NULL with
 * the reason in why. */
static char *clean_path(const char *p, char *why, size_t cap)
{
	if (!p || p[0] != '/') {
		snprintf(why, cap, "path must be absolute");
		return NULL;
	}
	if (strlen(p) > 4095) {
		snprintf(why, cap, "path longer than 4095 bytes");
		return NULL;
	}
	char *out = malloc(strlen(p) + 2);
	if (!out)
		return NULL;
	size_t o = 0;
	const char *s = p;
	while (*s) {
		while (*s == '/')
			s++;
		const char *e = strchrnul(s, '/');
		size_t n = (size_t)(e - s);
		if (n == 2 && s[0] == '.' && s[1] == '.') {
			snprintf(why, cap, "path may not contain '..'");
			free(out);
			return NULL;
		}
		if (n && !(n == 1 && s[0] == '.')) {
			out[o++] = '/';
			memcpy(out + o, s, n);
			o += n;
		}
		s = e;
	}
	if (!o)
		out[o++] = '/';
	out[o] = 0;
	return out;
}

static bool valid_label(const char *s, size_t max)
{
	size_t n = strlen(s);
	return n > 0 && n <= max;
}

/* Random ids, from a buffer refilled 64 ids at a time (a getrandom per
 * create was one syscall of the loop's ~20 per creation). */
static char *new_id(void)
{
	static uint8_t pool[512];
	static size_t left;
	if (left < 8) {
		if (getrandom(pool, sizeof(pool), 0) != (ssize_t)sizeof(pool))
			return NULL;
		left = sizeof(pool);
	}
	left -= 8;
	uint8_t *r = pool + left;
	char *id = malloc(SBD_ID_LEN + 1);
	if (id)
		snprintf(id, SBD_ID_LEN + 1, "sb-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1],
			 r[2], r[3], r[4], r[5], r[6], r[7]);
	explicit_bzero(r, 8); /* used once */
	return id;
}

/* ---- create ---------------------------------------------------------------- */

static const char *const create_fields[] = {
    "image", "backend", "cpu", "memory_mb",    "pids",	 "disk_mb",	    "env", "cwd",
    "user",  "network", "ttl", "idle_timeout", "labels", "idempotency_key", NULL};

static int parse_env_obj(const struct json *e, char **base, char ***ret, char *why, size_t cap)
{
	size_t nb = 0;
	while (base && base[nb])
		nb++;
	size_t ne = e ? e->len : 0;
	if (e && e->type != JSON_OBJ) {
		snprintf(why, cap, "env must be an object of strings");
		return -EINVAL;
	}
	if (ne > SBD_MAX_ENV) {
		snprintf(why, cap, "env has more than %d entries", SBD_MAX_ENV);
		return -EINVAL;
	}
	char **v = calloc(nb + ne + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	size_t n = 0;
	for (size_t i = 0; i < nb; i++)
		v[n++] = strdup(base[i]);
	for (struct json *c = e ? e->child : NULL; c; c = c->next) {
		const char *val = json_cstr(c);
		if (!val || !c->key[0] || strchr(c->key, '=') ||
		    strlen(c->key) + strlen(val) > 32768) {
			snprintf(why, cap, "env '%s' must be a string (no '=' in the name)",
				 c->key);
			for (size_t k = 0; k < n; k++)
				free(v[k]);
			free(v);
			return -EINVAL;
		}
		size_t kl = strlen(c->key);
		for (size_t k = 0; k < n; k++) /* a later value replaces an earlier one */
			if (v[k] && !strncmp(v[k], c->key, kl) && v[k][kl] == '=') {
				free(v[k]);
				v[k] = v[--n];
				v[n] = NULL;
				break;
			}
		if (asprintf(&v[n], "%s=%s", c->key, val) >= 0)
			n++;
	}
	*ret = v;
	return 0;
}

static int parse_labels(const struct json *l, struct sbd_sandbox *sb, char *why, size_t cap)
{
	if (!l)
		return 0;
	if (l->type != JSON_OBJ || l->len > SBD_MAX_LABELS) {
		snprintf(why, cap, "labels must be an object of at most %d strings",
			 SBD_MAX_LABELS);
		return -EINVAL;
	}
	sb->labels = calloc(l->len + 1, sizeof(*sb->labels));
	if (!sb->labels)
		return -ENOMEM;
	for (struct json *c = l->child; c; c = c->next) {
		const char *v = json_cstr(c);
		if (!v || !valid_label(c->key, 63) || strlen(v) > 255 || strchr(c->key, ',') ||
		    strchr(c->key, '=')) {
			snprintf(why, cap,
				 "label '%s': names 1-63 bytes without ',' or '=', values strings "
				 "up to 255 bytes",
				 c->key);
			return -EINVAL;
		}
		sb->labels[sb->nlabels].key = strdup(c->key);
		sb->labels[sb->nlabels++].value = strdup(v);
	}
	return 0;
}

struct int_field {
	const char *name;
	int64_t *dst;
	int64_t lo, hi;
};

static int parse_ints(const struct json *j, const struct int_field *f, size_t n, char *why,
		      size_t cap)
{
	for (size_t i = 0; i < n; i++) {
		const struct json *v = json_get(j, f[i].name);
		if (!v || v->type == JSON_NULL)
			continue;
		if (!json_int(v, f[i].lo, f[i].hi, f[i].dst)) {
			snprintf(why, cap, "%s must be an integer in [%lld, %lld]", f[i].name,
				 (long long)f[i].lo, (long long)f[i].hi);
			return -EINVAL;
		}
	}
	return 0;
}

static const char *opt_str(const struct json *j, const char *key, size_t max, bool *bad)
{
	const struct json *v = json_get(j, key);
	if (!v || v->type == JSON_NULL)
		return NULL;
	const char *s = json_cstr(v);
	if (!s || strlen(s) > max)
		*bad = true;
	return s;
}

static int fill_sandbox(struct sandboxd *d, const struct json *j, struct sbd_sandbox *sb,
			const struct sbd_image *im, char *why, size_t cap)
{
	sb->memory_mb = 512;
	sb->pids = 256;
	sb->disk_mb = 1024;
	sb->cpu = 1;
	struct int_field ints[] = {
	    {"memory_mb", &sb->memory_mb, 16, 1 << 20},	    {"pids", &sb->pids, 8, 1 << 20},
	    {"disk_mb", &sb->disk_mb, 1, 1 << 24},	    {"ttl", &sb->ttl_s, 0, 30LL * 86400},
	    {"idle_timeout", &sb->idle_s, 0, 30LL * 86400},
	};
	int r = parse_ints(j, ints, ARRAY_SIZE(ints), why, cap);
	if (r < 0)
		return r;
	const struct json *cpu = json_get(j, "cpu");
	if (cpu && cpu->type != JSON_NULL) {
		if (cpu->type != JSON_NUM || cpu->num <= 0 || cpu->num > 1024) {
			snprintf(why, cap, "cpu must be a number of cores in (0, 1024]");
			return -EINVAL;
		}
		sb->cpu = cpu->num;
	}
	bool bad = false;
	const char *cwd = opt_str(j, "cwd", 4095, &bad), *user = opt_str(j, "user", 64, &bad);
	const char *net = opt_str(j, "network", 8, &bad);
	const char *idem = opt_str(j, "idempotency_key", 255, &bad);
	if (bad || (cwd && cwd[0] != '/') || (net && strcmp(net, "none") && strcmp(net, "host"))) {
		snprintf(why, cap,
			 "cwd must be an absolute path, user a name or uid[:gid], network \"none\" "
			 "or \"host\", idempotency_key a string up to 255 bytes");
		return -EINVAL;
	}
	sb->net_host = net && !strcmp(net, "host");
	sb->cwd = strdup(cwd ? cwd : im->cwd ? im->cwd : "/");
	sb->user = strdup(user ? user : im->user ? im->user : "");
	sb->idem_key = idem ? strdup(idem) : NULL;
	r = parse_env_obj(json_get(j, "env"), im->env, &sb->env, why, cap);
	if (r < 0)
		return r;
	r = parse_labels(json_get(j, "labels"), sb, why, cap);
	if (r < 0)
		return r;
	sb->created_at = sbd_wall_s();
	sb->expires_at = sb->ttl_s ? sb->created_at + sb->ttl_s : 0;
	sb->last_active_ms = sbd_now_ms();
	return sb->cwd && sb->user ? 0 : -ENOMEM;
}

static void reply_sandbox(struct conn *c, int status, const struct sbd_sandbox *sb)
{
	struct jw w;
	jw_init(&w);
	sandbox_to_json(sb, &w);
	conn_reply_json(c, status, &w);
}

/* ---- creates on worker threads ------------------------------------------ */

struct create_waiter {
	struct conn *c; /* NULL once its client left */
	struct create_waiter *next;
};

struct create_job {
	struct sandboxd *d;
	struct sbd_backend *b;
	struct sbd_sandbox *sb;
	struct create_waiter first;    /* the request that made it */
	struct create_waiter *repeats; /* idempotent repeats waiting for it */
	struct sbd_job job;	       /* on the worker pool (pool.h) */
	bool started;		       /* it runs (else it waits for a slot: CREATE_THREADS) */
	bool finished;		       /* under cj.mu: in cj.done, the worker is done with it */
	bool persisted;		       /* state.json written by the worker: persist_r */
	int r, persist_r;
	int64_t took_us; /* backend->create's wall time */
	char why[ERRLEN];
	struct create_job *next;      /* in cj.in_flight (the loop's) */
	struct create_job *done_next; /* in cj.done (under cj.mu) */
};

/* Create threads at once; later creates wait (admitted) for one. */
#define CREATE_THREADS 8
/* A create runs on the loop itself when none is in flight and the last one
 * took less than this: the hand-off to a worker and back (a futex wake, an
 * eventfd, two context switches) cost 10-20 % of a create's latency at
 * concurrency 1, and the loop had nothing else to do meanwhile. A slow one
 * (the library staged inline: its pool was empty) sends the next ones to
 * workers until one is quick again, so that the loop is not held for long. */
#define CREATE_INLINE_MAX_US 1000

static struct {
	pthread_mutex_t mu;  /* guards done, finished */
	pthread_cond_t cond; /* a create finished (for the drain) */
	struct create_job *in_flight, *done;
	unsigned running; /* started and not finished */
	bool draining;
	int efd;
	struct sbd_watch w;
	int64_t last_us; /* the last create's took_us (the loop's) */
} cj = {PTHREAD_MUTEX_INITIALIZER, PTHREAD_COND_INITIALIZER, NULL, NULL, 0, false, -1, {.fd = -1}};

static int64_t now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000 + ts.tv_nsec / 1000;
}

static void create_reserve(struct sandboxd *d, const struct sbd_sandbox *sb, int sign)
{
	d->creating += (size_t)sign;
	if (sb->reserves) {
		d->creating_mem_mb += sign * sb->memory_mb;
		d->creating_pids += sign * sb->pids;
	}
}

/* On a worker: once j is in cj.done and cj.mu released, the loop may free
 * j, and the drain may close cj.efd: the eventfd is written under cj.mu. */
static void create_run(struct sbd_job *job)
{
	struct create_job *j =
	    (struct create_job *)((char *)job - offsetof(struct create_job, job));
	int64_t t0 = now_us();
	j->r = j->b->create(j->b, j->sb, j->why, sizeof(j->why));
	j->took_us = now_us() - t0;
	if (j->r == 0) { /* the sandbox is the worker's alone until create_finish */
		j->persist_r = registry_persist(j->d, j->sb);
		j->persisted = true;
	}
	uint64_t one = 1;
	pthread_mutex_lock(&cj.mu);
	j->done_next = cj.done;
	cj.done = j;
	j->finished = true;
	(void)!write(cj.efd, &one, sizeof(one));
	pthread_cond_broadcast(&cj.cond);
	pthread_mutex_unlock(&cj.mu);
}

/* Starts the oldest waiting create while there is a thread for it. */
static void creates_launch(void)
{
	while (cj.running < CREATE_THREADS && !cj.draining) {
		struct create_job *oldest = NULL;
		for (struct create_job *j = cj.in_flight; j; j = j->next)
			if (!j->started)
				oldest = j;
		if (!oldest)
			return;
		oldest->started = true;
		cj.running++;
		oldest->job.fn = create_run;
		if (sbd_pool_run(&oldest->job) < 0)
			create_run(&oldest->job); /* no thread: done here, on the loop */
	}
}

static void waiter_abort(void *ctx)
{
	struct create_waiter *w = ctx;
	w->c = NULL;
}

static void waiter_answer(struct create_waiter *w, int status, const struct sbd_sandbox *sb, int r,
			  const char *why)
{
	if (!w->c)
		return;
	conn_set_abort(w->c, NULL, NULL);
	if (sb)
		reply_sandbox(w->c, status, sb);
	else
		reply_errno(w->c, r, "create", why);
	conn_hold_done(w->c);
	w->c = NULL;
}

/* On the loop: the create finished (or failed); answer everyone. */
static void create_finish(struct create_job *j)
{
	struct sandboxd *d = j->d;
	struct sbd_sandbox *sb = j->sb;
	for (struct create_job **p = &cj.in_flight; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	cj.running -= j->started;
	if (j->started)
		cj.last_us = j->took_us;
	creates_launch();
	create_reserve(d, sb, -1);
	if (j->r == 0) {
		registry_insert(d, sb);
		int r = j->persisted ? j->persist_r : registry_persist(d, sb);
		if (r < 0)
			log_warn_errno(r, "Failed to persist sandbox %s", sb->id);
		d->creates_total++;
		log_debug("sandbox %s created (%s, %s)", sb->id, sb->image, sb->backend_name);
		bool anyone = j->first.c || sb->idem_key;
		waiter_answer(&j->first, 201, sb, 0, NULL);
		for (struct create_waiter *w = j->repeats; w; w = w->next)
			waiter_answer(w, 200, sb, 0, NULL);
		if (!anyone)
			registry_destroy(d, sb, "its client left before the answer");
	} else {
		waiter_answer(&j->first, 0, NULL, j->r, j->why);
		for (struct create_waiter *w = j->repeats; w; w = w->next)
			waiter_answer(w, 0, NULL, j->r, j->why);
		images_release(d, sb->rootfs);
		sandbox_free(sb);
	}
	while (j->repeats) {
		struct create_waiter *w = j->repeats;
		j->repeats = w->next;
		free(w);
	}
	free(j);
}

static void creates_done(struct sandboxd *d)
{
	pthread_mutex_lock(&cj.mu);
	struct create_job *j = cj.done;
	cj.done = NULL;
	pthread_mutex_unlock(&cj.mu);
	while (j) {
		struct create_job *next = j->done_next;
		create_finish(j);
		j = next;
	}
}

/* Edge-triggered: every write of a worker is a new event, so the counter
 * is never read (one syscall less per create; it would take 2^64 creates
 * to fill it). */
static void creates_io(void *ctx, uint32_t ev)
{
	creates_done(ctx);
}

/* Runs sb's create on a thread; the answer to c comes from create_finish.
 * Returns 0, or -errno (nothing started: the caller creates inline). */
static int create_start(struct conn *c, struct sandboxd *d, struct sbd_backend *b,
			struct sbd_sandbox *sb)
{
	if (cj.efd < 0) {
		cj.efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
		if (cj.efd < 0)
			return -errno;
		int r = sbd_watch_add(d->loop, &cj.w, cj.efd, EPOLLIN | EPOLLET, creates_io, d);
		if (r < 0) {
			close(cj.efd);
			cj.efd = -1;
			return r;
		}
	}
	struct create_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct create_job){.d = d, .b = b, .sb = sb, .first = {.c = c}};
	create_reserve(d, sb, +1);
	j->next = cj.in_flight;
	cj.in_flight = j;
	conn_hold(c, true);
	conn_set_abort(c, waiter_abort, &j->first);
	creates_launch();
	return 0;
}

/* An idempotent repeat of a create in flight: waits for its answer. */
static bool create_join_pending(struct conn *c, const char *key)
{
	for (struct create_job *j = cj.in_flight; j; j = j->next) {
		if (!j->sb->idem_key || strcmp(j->sb->idem_key, key) != 0)
			continue;
		struct create_waiter *w = calloc(1, sizeof(*w));
		if (!w)
			return false;
		w->c = c;
		w->next = j->repeats;
		j->repeats = w;
		conn_hold(c, true);
		conn_set_abort(c, waiter_abort, w);
		return true;
	}
	return false;
}

void api_creates_drain(struct sandboxd *d)
{
	cj.draining = true; /* no new threads: the waiting creates run here */
	while (cj.in_flight) {
		struct create_job *j = cj.in_flight;
		if (!j->started) {
			j->r = j->b->create(j->b, j->sb, j->why, sizeof(j->why));
			create_finish(j);
			continue;
		}
		pthread_mutex_lock(&cj.mu);
		while (!j->finished)
			pthread_cond_wait(&cj.cond, &cj.mu);
		for (struct create_job **p = &cj.done; *p; p = &(*p)->done_next)
			if (*p == j) {
				*p = j->done_next;
				break;
			}
		pthread_mutex_unlock(&cj.mu);
		create_finish(j);
	}
	sbd_watch_del(d->loop, &cj.w);
	if (cj.efd >= 0)
		close(cj.efd);
	cj.efd = -1;
}

static void api_create(struct conn *c, const char *body, size_t len)
{
	struct sandboxd *d = conn_daemon(c);
	char why[ERRLEN] = "";
	struct json *j = parse_body(c, body, len, create_fields);
	if (!j)
		return;
	const char *image = json_cstr(json_get(j, "image"));
	const char *bname = json_cstr(json_get(j, "backend")) ?: "container";
	const char *idem = json_cstr(json_get(j, "idempotency_key"));
	struct sbd_sandbox *prev = idem ? registry_find_idem(d, idem) : NULL;
	struct sbd_image *im = NULL;
	struct sbd_backend *b = registry_backend(d, bname);
	struct sbd_caps caps = {0};
	if (b)
		b->caps(b, &caps);
	struct sbd_sandbox *sb = NULL;
	int r;
	if (prev) {
		reply_sandbox(c, 200, prev);
		goto out;
	}
	if (idem && create_join_pending(c, idem))
		goto out;
	if (!image) {
		conn_reply_error(c, 400, "bad_request", "field 'image' (a string) is required");
		goto out;
	}
	if (!b) {
		conn_reply_error(
		    c, 400, "bad_request",
		    "unknown backend '%s' (container, docker, fncall, firecracker, qemu)", bname);
		goto out;
	}
	r = images_acquire(d, image, &im, why, sizeof(why));
	if (r == -ENOENT) {
		conn_reply_error(c, 404, "image_not_found", "%s", why);
		goto out;
	}
	if (r < 0) {
		reply_errno(c, r, "create", why);
		goto out;
	}
	sb = calloc(1, sizeof(*sb));
	char *id = new_id();
	if (!sb || !id) {
		free(id);
		images_release(d, im->rootfs);
		conn_reply_error(c, 500, "internal", "out of memory");
		goto out;
	}
	strcpy(sb->id, id);
	free(id);
	sb->image = strdup(im->hex[0] ? image : im->name); /* store: as the user named it */
	sb->rootfs = strdup(im->rootfs);
	sb->backend_name = strdup(b->name);
	sb->backend = b;
	sb->reserves = caps.persistent;
	r = fill_sandbox(d, j, sb, im, why, sizeof(why));
	if (r == 0 && !caps.available) {
		snprintf(why, sizeof(why), "backend '%s': %s", bname, caps.why);
		r = -ENODEV;
	}
	if (r == 0 && sb->net_host && !caps.network_host) {
		snprintf(why, sizeof(why), "backend '%s' does not support network \"host\"",
			 b->name);
		r = -EOPNOTSUPP;
	}
	if (r == 0 && (r = registry_admit(d, sb, why, sizeof(why))) < 0)
		d->refused_total++;
	bool inline_ok = !cj.in_flight && cj.last_us < CREATE_INLINE_MAX_US;
	if (r == 0 && b->create_threaded && !inline_ok && create_start(c, d, b, sb) == 0)
		goto out; /* answered by create_finish */
	if (r == 0) {
		int64_t t0 = now_us();
		r = b->create(b, sb, why, sizeof(why));
		if (b->create_threaded)
			cj.last_us = now_us() - t0;
	}
	if (r < 0) {
		reply_errno(c, r, "create", why);
		images_release(d, im->rootfs);
		sandbox_free(sb);
		goto out;
	}
	registry_insert(d, sb);
	r = registry_persist(d, sb);
	if (r < 0)
		log_warn_errno(r, "Failed to persist sandbox %s", sb->id);
	d->creates_total++;
	log_debug("sandbox %s created (%s, %s)", sb->id, sb->image, sb->backend_name);
	reply_sandbox(c, 201, sb);
out:
	json_free(j);
}

/* ---- list, get, delete ---------------------------------------------------- */

static bool label_match(const struct sbd_sandbox *sb, const char *filter)
{
	/* filter: "k=v,k2=v2" ("k" alone: the label exists) */
	const char *p = filter;
	while (*p) {
		const char *e = strchrnul(p, ',');
		const char *eq = memchr(p, '=', e - p);
		size_t kl = eq ? (size_t)(eq - p) : (size_t)(e - p);
		bool hit = false;
		for (size_t i = 0; i < sb->nlabels && !hit; i++)
			hit = strlen(sb->labels[i].key) == kl &&
			      !strncmp(sb->labels[i].key, p, kl) &&
			      (!eq || (strlen(sb->labels[i].value) == (size_t)(e - eq - 1) &&
				       !strncmp(sb->labels[i].value, eq + 1, e - eq - 1)));
		if (!hit)
			return false;
		p = *e ? e + 1 : e;
	}
	return true;
}

static void api_list(struct conn *c, const char *query)
{
	struct sandboxd *d = conn_daemon(c);
	bool bad = false;
	_cleanup_free_ char *label = http_query_get(query, "label", &bad);
	_cleanup_free_ char *state = http_query_get(query, "state", &bad);
	_cleanup_free_ char *backend = http_query_get(query, "backend", &bad);
	if (bad || (state && strcmp(state, "running") && strcmp(state, "paused"))) {
		conn_reply_error(c, 400, "bad_request",
				 "filters: label=k=v[,k=v], state=running|paused, backend=NAME");
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next) {
		if (state && strcmp(state, sbd_state_name(sb->state)))
			continue;
		if (backend && strcmp(backend, sb->backend_name))
			continue;
		if (label && !label_match(sb, label))
			continue;
		sandbox_to_json(sb, &w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	conn_reply_json(c, 200, &w);
}

static void api_delete(struct conn *c, struct sbd_sandbox *sb)
{
	struct sandboxd *d = conn_daemon(c);
	int r = registry_destroy(d, sb, "deleted by request");
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kbool(&w, "deleted", true);
	jw_kbool(&w, "clean", r == 0);
	jw_obj_end(&w);
	conn_reply_json(c, 200, &w);
}

static void api_pause(struct conn *c, struct sbd_sandbox *sb, bool pause)
{
	struct sandboxd *d = conn_daemon(c);
	if (pause != (sb->state == SBD_RUNNING)) {
		conn_reply_error(c, 409, pause ? "paused" : "not_paused",
				 "sandbox %s is already %s", sb->id, sbd_state_name(sb->state));
		return;
	}
	int r = pause ? sb->backend->pause(sb->backend, sb) : sb->backend->resume(sb->backend, sb);
	if (r < 0) {
		reply_errno(c, r, pause ? "pause" : "resume", NULL);
		return;
	}
	sb->state = pause ? SBD_PAUSED : SBD_RUNNING;
	sb->last_active_ms = sbd_now_ms();
	registry_persist(d, sb);
	reply_sandbox(c, 200, sb);
}

/* ---- exec ------------------------------------------------------------------ */

struct exec_ctx {
	struct conn *c;
	struct sandboxd *d;
	struct sbd_sandbox *sb;
	void *handle;
	bool started;	       /* the chunked response began */
	bool stdin_stream;     /* interactive stdin: POST .../execs/{xid}/stdin */
	uint64_t xid;	       /* the exec's number in its sandbox (sb->execs_total) */
	struct conn *stdin_c;  /* a stdin request waiting for its acknowledgement */
	struct exec_ctx *next; /* in sb->execs */
};

/* Answers a stdin request: status 0 (pending < 0: unknown), or why not. */
static void stdin_reply(struct conn *c, uint64_t xid, int status, int64_t pending)
{
	unsigned long long n = (unsigned long long)xid;
	if (status == 0) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kbool(&w, "ok", true);
		if (pending >= 0)
			jw_kint(&w, "pending", pending);
		jw_obj_end(&w);
		conn_reply_json(c, 200, &w);
	} else if (status == -ENOBUFS)
		conn_reply_error(c, 429, "stdin_full",
				 "exec %llu has %lld bytes of stdin it has not read yet (limit 4 "
				 "MiB): chunk dropped, retry later",
				 n, (long long)pending);
	else if (status == -ESRCH)
		conn_reply_error(c, 409, "exec_finished", "exec %llu has finished", n);
	else if (status == -EPIPE)
		conn_reply_error(c, 409, "stdin_closed", "exec %llu: its stdin is closed", n);
	else if (status == -EBUSY)
		conn_reply_error(c, 409, "busy",
				 "exec %llu: a stdin chunk is in flight; send the next after its "
				 "answer",
				 n);
	else
		reply_errno(c, status, "stdin", NULL);
}

/* The answer to a waiting stdin request: the backend acknowledged its
 * chunk, or the exec ended first. */
static void stdin_answer(struct exec_ctx *x, int status, uint64_t pending)
{
	struct conn *c = x->stdin_c;
	if (!c)
		return;
	x->stdin_c = NULL;
	conn_set_abort(c, NULL, NULL);
	stdin_reply(c, x->xid,
		    status == 0 || status == -ENOBUFS || status == -ESRCH ? status : -EPIPE,
		    (int64_t)pending);
	conn_hold_done(c);
}

static void exec_stdin_ack(void *ctx, int status, uint64_t pending)
{
	stdin_answer(ctx, status, pending);
}

/* The client of a waiting stdin request went away. */
static void stdin_abort(void *ctx)
{
	struct exec_ctx *x = ctx;
	x->stdin_c = NULL;
}

static void exec_unlink(struct exec_ctx *x)
{
	if (!x->sb)
		return;
	for (struct exec_ctx **p = (struct exec_ctx **)&x->sb->execs; *p; p = &(*p)->next)
		if (*p == x) {
			*p = x->next;
			break;
		}
	x->sb->running_execs--;
	x->sb->last_active_ms = sbd_now_ms();
	x->sb = NULL;
	stdin_answer(x, -ESRCH, 0);
}

/* The stream starts with the first event, so that an exec that cannot
 * start is answered with a typed HTTP error instead. */
static void exec_start_stream(struct exec_ctx *x)
{
	if (!x->started)
		conn_stream_begin(x->c, 200, "application/x-ndjson");
	x->started = true;
}

static void exec_output(void *ctx, int stream, const void *p, size_t n)
{
	struct exec_ctx *x = ctx;
	exec_start_stream(x);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "type", stream == 2 ? "stderr" : "stdout");
	jw_key(&w, "data");
	jw_b64(&w, p, n);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	if (!w.err)
		conn_stream_chunk(x->c, w.buf, w.len);
	jw_done(&w);
}

/* A client that does not read its stream holds its exec back (bounded
 * memory here, a blocked pipe for the command) instead of growing our
 * buffer up to the output cap. */
#define EXEC_BACKLOG (1u << 20)

static bool exec_congested(void *ctx)
{
	struct exec_ctx *x = ctx;
	return conn_pending(x->c) > EXEC_BACKLOG;
}

static void emit_exit(struct conn *c, const struct sbd_exit *e)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "type", "exit");
	jw_key(&w, "exit_code");
	if (e->signo)
		jw_null(&w);
	else
		jw_int(&w, e->exit_code);
	jw_key(&w, "signal");
	if (e->signo)
		jw_int(&w, e->signo);
	else
		jw_null(&w);
	jw_kbool(&w, "timed_out", e->timed_out);
	jw_kbool(&w, "truncated", e->truncated);
	jw_kint(&w, "stdout_bytes", (int64_t)e->stdout_bytes);
	jw_kint(&w, "stderr_bytes", (int64_t)e->stderr_bytes);
	jw_kint(&w, "duration_us", e->duration_us);
	jw_key(&w, "error");
	jw_str(&w, e->error[0] ? e->error : NULL);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	conn_stream_end_with(c, w.buf, w.err ? 0 : w.len);
	jw_done(&w);
}

static void exec_exit(void *ctx, const struct sbd_exit *e)
{
	struct exec_ctx *x = ctx;
	exec_unlink(x);
	exec_start_stream(x);
	emit_exit(x->c, e);
	free(x);
}

/* The client went away mid-stream: kill the command. */
static void exec_abort(void *ctx)
{
	struct exec_ctx *x = ctx;
	if (x->sb)
		x->sb->backend->exec_cancel(x->sb->backend, x->handle);
	exec_unlink(x);
	free(x);
}

void api_cancel_execs(struct sandboxd *d, struct sbd_sandbox *sb, const char *why)
{
	while (sb->execs) {
		struct exec_ctx *x = sb->execs;
		sb->backend->exec_cancel(sb->backend, x->handle);
		exec_unlink(x);
		conn_set_abort(x->c, NULL, NULL);
		exec_start_stream(x);
		struct sbd_exit e = {.exit_code = -1, .signo = 9};
		snprintf(e.error, sizeof(e.error), "sandbox exited: %s", why);
		emit_exit(x->c, &e);
		free(x);
	}
}

static const char *const exec_fields[] = {"cmd",   "python",	   "env",     "cwd",	    "user",
					  "stdin", "stdin_stream", "timeout", "output_cap", NULL};

struct exec_args {
	struct sbd_exec_req req;
	char **argv, **env;
	uint8_t *stdin_buf;
};

static void exec_args_done(struct exec_args *a)
{
	for (char **p = a->argv; p && *p; p++)
		free(*p);
	free(a->argv);
	for (char **p = a->env; p && *p; p++)
		free(*p);
	free(a->env);
	free(a->stdin_buf);
}

static int parse_cmd(const struct json *cmd, char ***ret, char *why, size_t cap)
{
	if (cmd->type == JSON_STR) { /* a shell command line */
		const char *s = json_cstr(cmd);
		char **v = calloc(4, sizeof(char *));
		if (!s || !v) {
			free(v);
			snprintf(why, cap, "cmd contains a NUL byte");
			return -EINVAL;
		}
		v[0] = strdup("/bin/sh");
		v[1] = strdup("-c");
		v[2] = strdup(s);
		*ret = v;
		return 0;
	}
	if (cmd->type != JSON_ARR || !cmd->len || cmd->len > 4096) {
		snprintf(why, cap, "cmd must be a non-empty array of strings (or a shell string)");
		return -EINVAL;
	}
	char **v = calloc(cmd->len + 1, sizeof(char *));
	if (!v)
		return -ENOMEM;
	size_t i = 0;
	for (struct json *a = cmd->child; a; a = a->next) {
		const char *s = json_cstr(a);
		if (!s || !(v[i++] = strdup(s))) {
			snprintf(why, cap, "cmd[%zu] must be a string without NUL bytes", i - 1);
			*ret = v;
			return -EINVAL;
		}
	}
	*ret = v;
	return 0;
}

static int parse_exec(struct sandboxd *d, struct sbd_sandbox *sb, const struct json *j,
		      struct exec_args *a, char *why, size_t cap)
{
	const struct json *cmd = json_get(j, "cmd"), *py = json_get(j, "python");
	struct sbd_exec_req *q = &a->req;
	if (cmd && py) {
		snprintf(why, cap, "give exactly one of 'cmd' and 'python'");
		return -EINVAL;
	}
	/* Neither: the image's own command (OCI Entrypoint + Cmd), if it has one. */
	if (!cmd && !py && !(a->argv = images_default_cmd(d, sb->rootfs))) {
		snprintf(why, cap,
			 "give one of 'cmd' and 'python' (the image has no Entrypoint or Cmd)");
		return -EINVAL;
	}
	int r = cmd ? parse_cmd(cmd, &a->argv, why, cap) : 0;
	if (r < 0)
		return r;
	if (py && !(q->python = json_cstr(py))) {
		snprintf(why, cap, "python must be a string without NUL bytes");
		return -EINVAL;
	}
	r = parse_env_obj(json_get(j, "env"), sb->env, &a->env, why, cap);
	if (r < 0)
		return r;
	bool bad = false;
	q->cwd = opt_str(j, "cwd", 4095, &bad) ?: sb->cwd;
	q->user = opt_str(j, "user", 64, &bad) ?: sb->user;
	if (bad || q->cwd[0] != '/') {
		snprintf(why, cap, "cwd must be an absolute path and user a short string");
		return -EINVAL;
	}
	const struct json *in = json_get(j, "stdin");
	if (in && in->type != JSON_NULL) {
		if (in->type != JSON_STR ||
		    b64_decode(in->str, in->len, &a->stdin_buf, &q->stdin_len) < 0) {
			snprintf(why, cap, "stdin must be base64");
			return -EINVAL;
		}
		q->stdin_data = a->stdin_buf;
	}
	const struct json *ss = json_get(j, "stdin_stream");
	if (ss && ss->type != JSON_NULL) {
		if (ss->type != JSON_BOOL) {
			snprintf(why, cap, "stdin_stream must be a boolean");
			return -EINVAL;
		}
		q->stdin_stream = ss->b;
	}
	const struct json *t = json_get(j, "timeout");
	q->timeout_ms = d->cfg.default_timeout_ms;
	if (t && t->type != JSON_NULL) {
		if (t->type != JSON_NUM || t->num <= 0 ||
		    t->num * 1000 > (double)d->cfg.max_timeout_ms) {
			snprintf(why, cap, "timeout must be seconds in (0, %lld]",
				 (long long)d->cfg.max_timeout_ms / 1000);
			return -EINVAL;
		}
		q->timeout_ms = (int64_t)(t->num * 1000) ?: 1;
	}
	int64_t oc = d->cfg.default_output_cap;
	struct int_field f[] = {{"output_cap", &oc, 0, d->cfg.max_output_cap}};
	r = parse_ints(j, f, 1, why, cap);
	q->output_cap = (uint64_t)oc;
	q->argv = a->argv;
	q->env = a->env;
	return r;
}

static void api_exec(struct conn *c, struct sbd_sandbox *sb, const char *body, size_t len)
{
	struct sandboxd *d = conn_daemon(c);
	char why[ERRLEN] = "";
	struct json *j = parse_body(c, body, len, exec_fields);
	if (!j)
		return;
	struct exec_args a = {0};
	int r = parse_exec(d, sb, j, &a, why, sizeof(why));
	if (r < 0) {
		reply_errno(c, r, "exec", why);
		goto out;
	}
	if (sb->state == SBD_PAUSED) {
		conn_reply_error(c, 409, "paused", "sandbox %s is paused; resume it first", sb->id);
		goto out;
	}
	struct sbd_caps caps = {0};
	sb->backend->caps(sb->backend, &caps);
	if (a.req.stdin_stream && (!caps.exec_stdin_stream || !sb->backend->exec_stdin)) {
		conn_reply_error(c, 501, "unsupported",
				 "exec: backend '%s' has no interactive stdin (stdin_stream); give "
				 "stdin up front",
				 sb->backend_name);
		goto out;
	}
	struct exec_ctx *x = calloc(1, sizeof(*x));
	if (!x) {
		conn_reply_error(c, 500, "internal", "out of memory");
		goto out;
	}
	*x = (struct exec_ctx){.c = c, .d = d, .sb = sb, .stdin_stream = a.req.stdin_stream};
	struct sbd_exec_sink sink = {exec_output, exec_exit, exec_congested, x, exec_stdin_ack};
	x->next = sb->execs;
	sb->execs = x;
	sb->running_execs++;
	x->xid = ++sb->execs_total;
	d->execs_total++;
	sb->last_active_ms = sbd_now_ms();
	conn_set_abort(c, exec_abort, x);
	conn_hold(c, true);
	r = sb->backend->exec(sb->backend, sb, &a.req, &sink, &x->handle, why, sizeof(why));
	if (r < 0) { /* nothing ran: the sink was not called */
		conn_set_abort(c, NULL, NULL);
		conn_hold(c, false);
		exec_unlink(x);
		free(x);
		reply_errno(c, r, "exec", why);
	} else if (x->stdin_stream) { /* the client needs the id to send stdin */
		exec_start_stream(x);
		char ev[96];
		int n = snprintf(ev, sizeof(ev), "{\"type\":\"start\",\"exec_id\":\"%llu\"}\n",
				 (unsigned long long)x->xid);
		conn_stream_chunk(c, ev, (size_t)n);
	}
out:
	exec_args_done(&a);
	json_free(j);
}

static bool query_bool(const char *query, const char *key);

/* POST /v1/sandboxes/{id}/execs/{exec_id}/stdin[?eof=1], the body the raw
 * bytes: one chunk of an interactive exec's stdin, answered once the
 * sandbox took it (at most one in flight per exec). */
static void api_exec_stdin(struct conn *c, struct sbd_sandbox *sb, const char *sub,
			   const char *query, const char *body, size_t len)
{
	char *end;
	unsigned long long xid = strtoull(sub, &end, 10);
	if (end == sub || strcmp(end, "/stdin") != 0) {
		conn_reply_error(c, 404, "not_found", "no route .../execs/%s", sub);
		return;
	}
	struct exec_ctx *x = sb->execs;
	while (x && x->xid != xid)
		x = x->next;
	if (!x && xid >= 1 && xid <= sb->execs_total) {
		stdin_reply(c, xid, -ESRCH, -1);
		return;
	}
	if (!x) {
		conn_reply_error(c, 404, "not_found", "no exec %llu in sandbox %s", xid, sb->id);
		return;
	}
	if (!x->stdin_stream) {
		conn_reply_error(c, 409, "stdin_closed",
				 "exec %llu was not started with stdin_stream: its stdin is closed",
				 xid);
		return;
	}
	if (len > SBD_STDIN_CHUNK_MAX) {
		conn_reply_error(c, 413, "too_large",
				 "a stdin chunk is limited to %u bytes (got %zu); split it",
				 SBD_STDIN_CHUNK_MAX, len);
		return;
	}
	if (x->stdin_c) {
		stdin_reply(c, xid, -EBUSY, -1);
		return;
	}
	if (sb->state == SBD_PAUSED) {
		conn_reply_error(c, 409, "paused", "sandbox %s is paused; resume it first", sb->id);
		return;
	}
	sb->last_active_ms = sbd_now_ms();
	int r =
	    sb->backend->exec_stdin(sb->backend, x->handle, body, len, query_bool(query, "eof"));
	if (r != 0) {
		stdin_reply(c, xid, r == 1 ? 0 : r, -1);
	} else {
		x->stdin_c = c;
		conn_hold(c, true);
		conn_set_abort(c, stdin_abort, x);
	}
}

/* ---- files ------------------------------------------------------------------ */

static bool query_bool(const char *query, const char *key)
{
	bool bad = false;
	_cleanup_free_ char *v = http_query_get(query, key, &bad);
	return v && (!strcmp(v, "1") || !strcmp(v, "true") || !v[0]);
}

static void stat_json(struct jw *w, const struct sbd_stat *st, bool with_name)
{
	static const char *const types[] = {"other", "file", "dir", "symlink"};
	jw_obj(w);
	if (with_name)
		jw_kstr(w, "name", st->name);
	jw_kstr(w, "type", types[st->type <= SBD_FT_LNK ? st->type : 0]);
	jw_kint(w, "mode", st->mode & 07777);
	jw_kint(w, "size", (int64_t)st->size);
	jw_kint(w, "mtime", st->mtime_s);
	jw_obj_end(w);
}

static void files_reply(struct conn *c, struct sbd_file_req *f)
{
	struct jw w;
	jw_init(&w);
	switch (f->op) {
	case SBD_F_READ:
		conn_reply_raw(c, 200, "application/octet-stream", f->out_data, f->out_len);
		return;
	case SBD_F_STAT:
		stat_json(&w, &f->st, false);
		break;
	case SBD_F_LIST:
		jw_obj(&w);
		jw_key(&w, "entries");
		jw_arr(&w);
		for (size_t i = 0; i < f->nentries; i++)
			stat_json(&w, &f->entries[i], true);
		jw_arr_end(&w);
		jw_obj_end(&w);
		break;
	default:
		jw_obj(&w);
		jw_kbool(&w, "ok", true);
		jw_obj_end(&w);
	}
	conn_reply_json(c, 200, &w);
}

/* GET .../files/tar?path=DIR: the tree as a tar stream; PUT: unpack one. */
static void api_tar(struct conn *c, struct sbd_sandbox *sb, const char *method, const char *path,
		    const char *body, size_t len)
{
	struct sandboxd *d = conn_daemon(c);
	char why[ERRLEN] = "";
	if (sb->state == SBD_PAUSED) {
		conn_reply_error(c, 409, "paused", "sandbox %s is paused; resume it first", sb->id);
		return;
	}
	sb->last_active_ms = sbd_now_ms();
	if (!strcmp(method, "GET")) {
		uint8_t *tar = NULL;
		size_t n = 0;
		int r = tar_pack(sb->backend, sb, path, (uint64_t)d->cfg.max_body, &tar, &n, why,
				 sizeof(why));
		if (r < 0)
			reply_errno(c, r, path,
				    r == -EOPNOTSUPP ? "files are not supported by this backend"
						     : why);
		else
			conn_reply_raw(c, 200, "application/x-tar", tar, n);
		free(tar);
		return;
	}
	if (strcmp(method, "PUT")) {
		conn_reply_error(c, 405, "bad_request", "files/tar takes GET or PUT");
		return;
	}
	int r = tar_unpack(sb->backend, sb, path, (const uint8_t *)body, len, why, sizeof(why));
	if (r < 0) {
		reply_errno(c, r, path,
			    r == -EOPNOTSUPP ? "files are not supported by this backend" : why);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "files", r);
	jw_obj_end(&w);
	conn_reply_json(c, 200, &w);
}

static void api_files(struct conn *c, struct sbd_sandbox *sb, const char *method, const char *sub,
		      const char *query, const char *body, size_t len)
{
	struct sandboxd *d = conn_daemon(c);
	char why[ERRLEN] = "";
	bool bad = false;
	_cleanup_free_ char *raw = http_query_get(query, "path", &bad);
	_cleanup_free_ char *mode_s = http_query_get(query, "mode", &bad);
	_cleanup_free_ char *path = raw && !bad ? clean_path(raw, why, sizeof(why)) : NULL;
	if (!path) {
		conn_reply_error(c, 400, "invalid_path", "query parameter 'path': %s",
				 why[0] ? why : "required, percent-encoded, without NUL bytes");
		return;
	}
	struct sbd_file_req f = {.path = path, .mode = 0644, .max = (uint64_t)d->cfg.max_body};
	if (mode_s)
		f.mode = (uint32_t)strtoul(mode_s, NULL, 8) & 07777;
	if (!strcmp(sub, "tar")) {
		api_tar(c, sb, method, path, body, len);
		return;
	}
	if (!strcmp(sub, "") && !strcmp(method, "GET"))
		f.op = SBD_F_READ;
	else if (!strcmp(sub, "") && !strcmp(method, "PUT")) {
		f.op = SBD_F_WRITE;
		f.data = (const uint8_t *)body;
		f.len = len;
		f.append = query_bool(query, "append");
	} else if (!strcmp(sub, "") && !strcmp(method, "DELETE")) {
		f.op = SBD_F_REMOVE;
		f.recursive = query_bool(query, "recursive");
	} else if (!strcmp(sub, "list") && !strcmp(method, "GET"))
		f.op = SBD_F_LIST;
	else if (!strcmp(sub, "stat") && !strcmp(method, "GET"))
		f.op = SBD_F_STAT;
	else if (!strcmp(sub, "mkdir") && !strcmp(method, "POST")) {
		f.op = SBD_F_MKDIR;
		f.parents = query_bool(query, "parents");
		if (!mode_s)
			f.mode = 0755;
	} else {
		conn_reply_error(c, 405, "bad_request", "no route %s .../files%s%s", method,
				 sub[0] ? "/" : "", sub);
		return;
	}
	if (sb->state == SBD_PAUSED) {
		conn_reply_error(c, 409, "paused", "sandbox %s is paused; resume it first", sb->id);
		return;
	}
	sb->last_active_ms = sbd_now_ms();
	int r = sb->backend->file(sb->backend, sb, &f);
	if (r < 0)
		reply_errno(c, r, path,
			    r == -EOPNOTSUPP ? "files are not supported by this backend" : NULL);
	else
		files_reply(c, &f);
	free(f.out_data);
	free(f.entries);
}

/* ---- node ------------------------------------------------------------------- */

static long self_rss_kb(void)
{
	FILE *f = fopen("/proc/self/status", "re");
	char line[256];
	long kb = -1;
	while (f && fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	if (f)
		fclose(f);
	return kb;
}

static void api_node(struct conn *c)
{
	struct sandboxd *d = conn_daemon(c);
	size_t paused = 0;
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next)
		paused += sb->state == SBD_PAUSED;
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "sandboxes", (int64_t)d->count);
	jw_kint(&w, "creating", (int64_t)d->creating);
	jw_kint(&w, "running", (int64_t)(d->count - paused));
	jw_kint(&w, "paused", (int64_t)paused);
	jw_kint(&w, "max_sandboxes", d->cfg.max_sandboxes);
	jw_kint(&w, "memory_admitted_mb", d->mem_used_mb);
	jw_kint(&w, "memory_budget_mb", d->cfg.memory_budget_mb);
	jw_kint(&w, "pids_admitted", d->pids_used);
	jw_kint(&w, "pids_budget", d->cfg.pids_budget);
	jw_kint(&w, "sandboxd_rss_kb", self_rss_kb());
	jw_kint(&w, "connections", d->conns);
	jw_kint(&w, "uptime_s", (sbd_now_ms() - d->started_ms) / 1000);
	jw_kint(&w, "creates_total", (int64_t)d->creates_total);
	jw_kint(&w, "deletes_total", (int64_t)d->deletes_total);
	jw_kint(&w, "execs_total", (int64_t)d->execs_total);
	jw_kint(&w, "refused_total", (int64_t)d->refused_total);
	jw_kint(&w, "reaped_total", (int64_t)d->reaped_total);
	jw_kstr(&w, "state_dir", d->cfg.state_dir);
	jw_obj_end(&w);
	conn_reply_json(c, 200, &w);
}

static void caps_json(struct jw *w, const struct sbd_caps *k)
{
	jw_obj(w);
	jw_kbool(w, "available", k->available);
	jw_key(w, "reason");
	jw_str(w, k->available ? NULL : k->why);
	jw_kbool(w, "exec", k->exec);
	jw_kbool(w, "exec_stream", k->exec_stream);
	jw_kbool(w, "exec_stdin", k->exec_stdin);
	jw_kbool(w, "exec_stdin_stream", k->exec_stdin_stream);
	jw_kbool(w, "python", k->python);
	jw_kbool(w, "files", k->files);
	jw_kbool(w, "tar", k->tar);
	jw_kbool(w, "pause", k->pause);
	jw_kbool(w, "persistent", k->persistent);
	jw_kbool(w, "network_host", k->network_host);
	jw_kbool(w, "limits_memory", k->limits_memory);
	jw_kbool(w, "limits_pids", k->limits_pids);
	jw_kbool(w, "limits_cpu", k->limits_cpu);
	jw_kbool(w, "limits_disk", k->limits_disk);
	jw_obj_end(w);
}

static void api_caps(struct conn *c)
{
	struct sandboxd *d = conn_daemon(c);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "backends");
	jw_obj(&w);
	for (size_t i = 0; i < ARRAY_SIZE(d->backends); i++) {
		struct sbd_backend *b = d->backends[i];
		struct sbd_caps k = {0};
		if (!b)
			continue;
		b->caps(b, &k);
		jw_key(&w, b->name);
		caps_json(&w, &k);
	}
	jw_obj_end(&w);
	jw_key(&w, "aliases");
	jw_obj(&w);
	jw_kstr(&w, "docker", "container");
	jw_obj_end(&w);
	jw_obj_end(&w);
	conn_reply_json(c, 200, &w);
}

static void api_images(struct conn *c)
{
	struct jw w;
	jw_init(&w);
	images_to_json(conn_daemon(c), &w);
	conn_reply_json(c, 200, &w);
}

static void api_health(struct conn *c)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "status", "ok");
	jw_kint(&w, "api_version", 1);
	jw_obj_end(&w);
	conn_reply_json(c, 200, &w);
}

/* ---- routing ---------------------------------------------------------------- */

static bool is(const char *method, const char *want)
{
	return !strcmp(method, want);
}

static void route_sandbox(struct conn *c, const char *method, const char *rest, const char *query,
			  const char *body, size_t len)
{
	char id[SBD_ID_LEN + 2];
	const char *slash = strchrnul(rest, '/');
	size_t n = (size_t)(slash - rest);
	if (n == 0 || n > SBD_ID_LEN) {
		conn_reply_error(c, 404, "not_found", "no such sandbox");
		return;
	}
	memcpy(id, rest, n);
	id[n] = 0;
	struct sbd_sandbox *sb = registry_find(conn_daemon(c), id);
	if (!sb) {
		conn_reply_error(c, 404, "not_found", "no sandbox '%s'", id);
		return;
	}
	const char *action = *slash ? slash + 1 : "";
	if (!*action && is(method, "GET"))
		reply_sandbox(c, 200, sb);
	else if (!*action && is(method, "DELETE"))
		api_delete(c, sb);
	else if (!strcmp(action, "exec") && is(method, "POST"))
		api_exec(c, sb, body, len);
	else if (!strncmp(action, "execs/", 6) && is(method, "POST"))
		api_exec_stdin(c, sb, action + 6, query, body, len);
	else if (!strcmp(action, "pause") && is(method, "POST"))
		api_pause(c, sb, true);
	else if (!strcmp(action, "resume") && is(method, "POST"))
		api_pause(c, sb, false);
	else if (!strcmp(action, "files"))
		api_files(c, sb, method, "", query, body, len);
	else if (!strncmp(action, "files/", 6))
		api_files(c, sb, method, action + 6, query, body, len);
	else
		conn_reply_error(c, 404, "not_found", "no route %s /v1/sandboxes/%s/%s", method, id,
				 action);
}

void api_dispatch(struct conn *c, const char *method, const char *path, const char *query,
		  const char *body, size_t len)
{
	if (!strcmp(path, "/v1/health") && is(method, "GET"))
		api_health(c);
	else if ((!strcmp(path, "/v1/node") || !strcmp(path, "/v1/metrics")) && is(method, "GET"))
		api_node(c);
	else if (!strcmp(path, "/v1/capabilities") && is(method, "GET"))
		api_caps(c);
	else if (!strcmp(path, "/v1/images") && is(method, "GET"))
		api_images(c);
	else if (!strcmp(path, "/v1/sandboxes") && is(method, "POST"))
		api_create(c, body, len);
	else if (!strcmp(path, "/v1/sandboxes") && is(method, "GET"))
		api_list(c, query);
	else if (!strncmp(path, "/v1/sandboxes/", 14))
		route_sandbox(c, method, path + 14, query, body, len);
	else
		conn_reply_error(c, 404, "not_found", "no route %s %s", method, path);
}
