/* api_create.c — POST /v1/sandboxes: validation of the spec, the image,
 * admission, idempotency, and the backend's create, on the loop or on a
 * worker thread; one create_commit finishes both.
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
 * shutdown, sbd_api_creates_drain waits for the running ones and completes them.
 */
#include <errno.h>
#include <pthread.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/log.h"
#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/pool.h"

static bool valid_label(const char *s, size_t max)
{
	size_t n = strlen(s);
	return n > 0 && n <= max;
}

/* Random ids, from a buffer refilled 64 ids at a time (a getrandom per
 * create was one syscall of the loop's ~20 per creation). */
static char *new_id(struct sandboxd *d)
{
	if (d->id_left < 8) {
		if (getrandom(d->id_pool, sizeof(d->id_pool), 0) != (ssize_t)sizeof(d->id_pool))
			return NULL;
		d->id_left = sizeof(d->id_pool);
	}
	d->id_left -= 8;
	uint8_t *r = d->id_pool + d->id_left;
	char *id = malloc(SBD_ID_LEN + 1);
	/* In a cluster the first 4 hex digits are the node (--node-id), so
	 * that an apiserver routes the id without a lookup; 48 random bits
	 * are left per node. */
	if (id && d->cfg.node_id)
		snprintf(id, SBD_ID_LEN + 1, "sb-%04x%02x%02x%02x%02x%02x%02x",
			 (unsigned)d->cfg.node_id, r[0], r[1], r[2], r[3], r[4], r[5]);
	else if (id)
		snprintf(id, SBD_ID_LEN + 1, "sb-%02x%02x%02x%02x%02x%02x%02x%02x", r[0], r[1],
			 r[2], r[3], r[4], r[5], r[6], r[7]);
	explicit_bzero(r, 8); /* used once */
	return id;
}

/* ---- create ---------------------------------------------------------------- */

static const char *const create_fields[] = {"image",
					    "backend",
					    "cpu",
					    "memory_mb",
					    "pids",
					    "disk_mb",
					    "env",
					    "cwd",
					    "user",
					    "network",
					    "allow_out",
					    "deny_out",
					    "egress_default",
					    "ttl",
					    "idle_timeout",
					    "labels",
					    "idempotency_key",
					    "tenant",
					    "keep_state",
					    "userns",
					    NULL};

int sbd_api_parse_labels(const struct json *l, struct sbd_sandbox *sb, struct strata_err *err)
{
	if (!l)
		return 0;
	if (l->type != JSON_OBJ || l->len > SBD_MAX_LABELS) {
		strata_err_set(err, -EINVAL, "labels must be an object of at most %d strings",
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
			strata_err_set(
			    err, -EINVAL,
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

/* cpu's bounds, in cores. The limit is a CFS quota of cpu x 100 ms per
 * 100 ms period, and the kernel refuses a quota under 1 ms (EINVAL): 0.01
 * is the smallest limit there is. Below it, 0.001-0.0099 failed the create
 * with "Invalid argument" and smaller values rounded to a quota of 0,
 * which the backends write as "no limit". */
#define SBD_CPU_MIN 0.01
#define SBD_CPU_MAX 1024.0

static int fill_sandbox(struct sandboxd *d, const struct json *j, struct sbd_sandbox *sb,
			const struct sbd_image *im, struct strata_err *err)
{
	sb->memory_mb = 512;
	sb->pids = 256;
	sb->disk_mb = 1024;
	sb->cpu = 1;
	struct sbd_api_int ints[] = {
	    {"memory_mb", &sb->memory_mb, 16, 1 << 20},	    {"pids", &sb->pids, 8, 1 << 20},
	    {"disk_mb", &sb->disk_mb, 1, 1 << 24},	    {"ttl", &sb->ttl_s, 0, 30LL * 86400},
	    {"idle_timeout", &sb->idle_s, 0, 30LL * 86400},
	};
	int r = sbd_api_parse_ints(j, ints, ARRAY_SIZE(ints), err);
	if (r < 0)
		return r;
	const struct json *cpu = json_get(j, "cpu");
	if (cpu && cpu->type != JSON_NULL) {
		/* Written the negated way so that a NaN is refused too. */
		if (cpu->type != JSON_NUM ||
		    !(cpu->num >= SBD_CPU_MIN && cpu->num <= SBD_CPU_MAX)) {
			strata_err_set(err, -EINVAL,
				       "cpu must be a number of cores in [%g, %g]: %g is the "
				       "smallest the kernel enforces (a quota of 1 ms per 100 ms)",
				       SBD_CPU_MIN, SBD_CPU_MAX, SBD_CPU_MIN);
			return -EINVAL;
		}
		sb->cpu = cpu->num;
	}
	bool bad = false;
	const char *cwd = sbd_api_opt_str(j, "cwd", 4095, &bad),
		   *user = sbd_api_opt_str(j, "user", 64, &bad);
	const char *net = sbd_api_opt_str(j, "network", 8, &bad);
	const char *idem = sbd_api_opt_str(j, "idempotency_key", 255, &bad);
	if (bad || (cwd && cwd[0] != '/') ||
	    (net && strcmp(net, "none") && strcmp(net, "host") && strcmp(net, "egress"))) {
		strata_err_set(
		    err, -EINVAL,
		    "cwd must be an absolute path, user a name or uid[:gid], network \"none\", "
		    "\"egress\" or \"host\", idempotency_key a string up to 255 bytes");
		return -EINVAL;
	}
	sb->net_host = net && !strcmp(net, "host");
	sb->net_egress = net && !strcmp(net, "egress");
	bool policy =
	    json_get(j, "allow_out") || json_get(j, "deny_out") || json_get(j, "egress_default");
	if (policy && !sb->net_egress)
		return strata_err_set(
		    err, -EINVAL, "allow_out, deny_out and egress_default need network \"egress\"");
	if (sb->net_egress && !d->net)
		return strata_err_set(
		    err, -EOPNOTSUPP,
		    "network \"egress\" is not set up on this node (strata-sandboxd "
		    "--net-uplink IFACE --net-dns ADDR)");
	if (sb->net_egress) {
		int pr = sbd_net_parse(j, &sb->net_policy, err);
		if (pr < 0)
			return pr;
	}
	const struct json *keep = json_get(j, "keep_state");
	if (keep && keep->type != JSON_NULL && keep->type != JSON_BOOL) {
		strata_err_set(err, -EINVAL, "keep_state must be true or false");
		return -EINVAL;
	}
	sb->keep_state = keep && keep->type == JSON_BOOL && keep->b;
	const struct json *uns = json_get(j, "userns");
	if (uns && uns->type != JSON_NULL && uns->type != JSON_BOOL) {
		strata_err_set(err, -EINVAL, "userns must be true or false");
		return -EINVAL;
	}
	sb->userns_req = uns && uns->type == JSON_BOOL ? uns->b : d->cfg.no_userns ? 0 : -1;
	struct sbd_image_defaults def = sbd_image_defaults(im);
	sb->cwd = strdup(cwd ? cwd : def.cwd ? def.cwd : "/");
	sb->user = strdup(user ? user : def.user ? def.user : "");
	sb->idem_key = idem ? strdup(idem) : NULL;
	r = sbd_api_parse_env(json_get(j, "env"), def.env, &sb->env, err);
	if (r < 0)
		return r;
	r = sbd_api_parse_labels(json_get(j, "labels"), sb, err);
	if (r < 0)
		return r;
	sb->created_at = sbd_wall_s();
	sb->expires_at = sb->ttl_s ? sb->created_at + sb->ttl_s : 0;
	sb->last_active_ms = sbd_now_ms();
	return sb->cwd && sb->user ? 0 : -ENOMEM;
}

/* ---- the end of a create ------------------------------------------------------ */

/* On the loop: the create of sb ended with r. On success the sandbox enters
 * the registry and its state is persisted (unless the worker did it:
 * persisted, with persist_r); on failure its image is released and sb
 * freed. Returns r. Both paths, inline and on a worker, end here. */
static int create_commit(struct sandboxd *d, struct sbd_sandbox *sb, int r, bool persisted,
			 int persist_r)
{
	if (r < 0) {
		sbd_images_release(d, sb->img);
		sbd_sandbox_free(sb);
		return r;
	}
	sbd_registry_insert(d, sb);
	int pr = persisted ? persist_r : sbd_registry_persist(d, sb);
	if (pr < 0)
		log_warn_errno(pr, "Failed to persist sandbox %s", sb->id);
	d->creates_total++;
	log_debug("sandbox %s created (%s, %s)", sb->id, sb->image, sb->backend_name);
	return 0;
}

/* ---- creates on worker threads ------------------------------------------ */

struct create_waiter {
	struct sbd_conn *c; /* NULL once its client left */
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
	bool finished;		       /* under cs->mu: in cs->done, the worker is done with it */
	bool persisted;		       /* state.json written by the worker: persist_r */
	int r, persist_r;
	int64_t took_us; /* backend->create's wall time */
	struct strata_err err;
	struct create_job *next;      /* in cs->in_flight (the loop's) */
	struct create_job *done_next; /* in cs->done (under cs->mu) */
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

/* The creates of one sandboxd (d->creates), made at its first create. */
struct sbd_creates {
	pthread_mutex_t mu;  /* guards done, finished */
	pthread_cond_t cond; /* a create finished (for the drain) */
	struct create_job *in_flight, *done;
	unsigned running; /* started and not finished */
	bool draining;
	int efd; /* -1 until the first create on a worker */
	struct sbd_watch w;
	int64_t last_us; /* the last create's took_us (the loop's) */
};

/* d's creates, made on first use; NULL when out of memory (creates then run
 * inline). */
static struct sbd_creates *creates_of(struct sandboxd *d)
{
	if (d->creates)
		return d->creates;
	struct sbd_creates *cs = calloc(1, sizeof(*cs));
	if (!cs)
		return NULL;
	pthread_mutex_init(&cs->mu, NULL);
	pthread_cond_init(&cs->cond, NULL);
	cs->efd = -1;
	cs->w.fd = -1;
	d->creates = cs;
	return cs;
}

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

/* The backend's create, then the sandbox's network "egress" (a sandbox
 * that cannot have it is destroyed again: nothing of it is left). */
static int create_attached(struct sandboxd *d, struct sbd_backend *b, struct sbd_sandbox *sb,
			   struct strata_err *err)
{
	int r = b->create(b, sb, err);
	if (r == 0 && (r = sbd_net_attach(d, sb, err)) < 0) {
		(void)b->destroy(b, sb);
		sb->bpriv = NULL;
	}
	return r;
}

/* On a worker: once j is in cs->done and cs->mu released, the loop may free
 * j, and the drain may close cs->efd: the eventfd is written under cs->mu. */
static void create_run(struct sbd_job *job)
{
	struct create_job *j =
	    (struct create_job *)((char *)job - offsetof(struct create_job, job));
	struct sbd_creates *cs = j->d->creates;
	int64_t t0 = now_us();
	j->r = create_attached(j->d, j->b, j->sb, &j->err);
	j->took_us = now_us() - t0;
	if (j->r == 0) { /* the sandbox is the worker's alone until create_finish */
		j->persist_r = sbd_registry_persist(j->d, j->sb);
		j->persisted = true;
	}
	uint64_t one = 1;
	pthread_mutex_lock(&cs->mu);
	j->done_next = cs->done;
	cs->done = j;
	j->finished = true;
	(void)!write(cs->efd, &one, sizeof(one));
	pthread_cond_broadcast(&cs->cond);
	pthread_mutex_unlock(&cs->mu);
}

/* Starts the oldest waiting create while there is a thread for it. */
static void creates_launch(struct sbd_creates *cs)
{
	while (cs->running < CREATE_THREADS && !cs->draining) {
		struct create_job *oldest = NULL;
		for (struct create_job *j = cs->in_flight; j; j = j->next)
			if (!j->started)
				oldest = j;
		if (!oldest)
			return;
		oldest->started = true;
		cs->running++;
		oldest->job.fn = create_run;
		if (sbd_pool_run(oldest->d->pool, &oldest->job) < 0)
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
	sbd_conn_set_abort(w->c, NULL, NULL);
	if (sb)
		sbd_api_reply_sandbox(w->c, status, sb);
	else
		sbd_api_reply_errno(w->c, r, "create", why);
	sbd_conn_hold_done(w->c);
	w->c = NULL;
}

/* On the loop: the create finished (or failed); answer everyone. */
static void create_finish(struct create_job *j)
{
	struct sandboxd *d = j->d;
	struct sbd_creates *cs = d->creates;
	struct sbd_sandbox *sb = j->sb;
	for (struct create_job **p = &cs->in_flight; *p; p = &(*p)->next)
		if (*p == j) {
			*p = j->next;
			break;
		}
	cs->running -= j->started;
	if (j->started)
		cs->last_us = j->took_us;
	creates_launch(cs);
	create_reserve(d, sb, -1);
	bool anyone = j->first.c || sb->idem_key;
	/* Answered after the commit (the registry has it), as the inline path. */
	if (create_commit(d, sb, j->r, j->persisted, j->persist_r) == 0) {
		waiter_answer(&j->first, 201, sb, 0, NULL);
		for (struct create_waiter *w = j->repeats; w; w = w->next)
			waiter_answer(w, 200, sb, 0, NULL);
		if (!anyone)
			sbd_registry_destroy(d, sb, "its client left before the answer");
	} else {
		waiter_answer(&j->first, 0, NULL, j->r, j->err.msg);
		for (struct create_waiter *w = j->repeats; w; w = w->next)
			waiter_answer(w, 0, NULL, j->r, j->err.msg);
	}
	while (j->repeats) {
		struct create_waiter *w = j->repeats;
		j->repeats = w->next;
		free(w);
	}
	free(j);
}

static void creates_done(struct sbd_creates *cs)
{
	pthread_mutex_lock(&cs->mu);
	struct create_job *j = cs->done;
	cs->done = NULL;
	pthread_mutex_unlock(&cs->mu);
	while (j) {
		struct create_job *next = j->done_next;
		create_finish(j);
		j = next;
	}
}

/* The workers' wake-up (sbd_wakeup_add: never read, one syscall less per
 * create). */
static void creates_io(void *ctx, uint32_t ev)
{
	creates_done(ctx);
}

/* Runs sb's create on a thread; the answer to c comes from create_finish.
 * Returns 0, or -errno (nothing started: the caller creates inline). */
static int create_start(struct sbd_conn *c, struct sandboxd *d, struct sbd_creates *cs,
			struct sbd_backend *b, struct sbd_sandbox *sb)
{
	if (cs->efd < 0 && (cs->efd = sbd_wakeup_add(d->loop, &cs->w, creates_io, cs)) < 0) {
		int r = cs->efd;
		cs->efd = -1;
		return r;
	}
	struct create_job *j = calloc(1, sizeof(*j));
	if (!j)
		return -ENOMEM;
	*j = (struct create_job){.d = d, .b = b, .sb = sb, .first = {.c = c}};
	create_reserve(d, sb, +1);
	j->next = cs->in_flight;
	cs->in_flight = j;
	sbd_conn_hold(c, true);
	sbd_conn_set_abort(c, waiter_abort, &j->first);
	creates_launch(cs);
	return 0;
}

void sbd_api_creating_usage(struct sandboxd *d, const char *owner, struct sbd_tenant_usage *u)
{
	for (struct create_job *j = d->creates ? d->creates->in_flight : NULL; j; j = j->next)
		if (!strcmp(j->sb->tenant ?: "", owner ?: "")) {
			u->sandboxes++;
			u->cpu += j->sb->cpu;
			u->memory_mb += j->sb->memory_mb;
		}
}

/* An idempotent repeat of a create in flight for the same tenant owner
 * (NULL: the operator; keys are a tenant's own): waits for its answer. */
static bool create_join_pending(struct sbd_conn *c, struct sbd_creates *cs, const char *key,
				const char *owner)
{
	for (struct create_job *j = cs ? cs->in_flight : NULL; j; j = j->next) {
		if (!j->sb->idem_key || strcmp(j->sb->idem_key, key) != 0 ||
		    strcmp(j->sb->tenant ?: "", owner ?: ""))
			continue;
		struct create_waiter *w = calloc(1, sizeof(*w));
		if (!w)
			return false;
		w->c = c;
		w->next = j->repeats;
		j->repeats = w;
		sbd_conn_hold(c, true);
		sbd_conn_set_abort(c, waiter_abort, w);
		return true;
	}
	return false;
}

void sbd_api_creates_drain(struct sandboxd *d)
{
	struct sbd_creates *cs = d->creates;
	if (!cs)
		return;
	cs->draining = true; /* no new threads: the waiting creates run here */
	while (cs->in_flight) {
		struct create_job *j = cs->in_flight;
		if (!j->started) {
			j->r = create_attached(j->d, j->b, j->sb, &j->err);
			create_finish(j);
			continue;
		}
		pthread_mutex_lock(&cs->mu);
		while (!j->finished)
			pthread_cond_wait(&cs->cond, &cs->mu);
		for (struct create_job **p = &cs->done; *p; p = &(*p)->done_next)
			if (*p == j) {
				*p = j->done_next;
				break;
			}
		pthread_mutex_unlock(&cs->mu);
		create_finish(j);
	}
	sbd_wakeup_del(d->loop, &cs->w, cs->efd);
	pthread_mutex_destroy(&cs->mu);
	pthread_cond_destroy(&cs->cond);
	free(cs);
	d->creates = NULL;
}

/* ---- POST /v1/sandboxes -------------------------------------------------------- */

/* Runs the create of an admitted sandbox (r == 0; else only its end): on
 * a worker when the backend allows and the loop has other work (then
 * create_finish answers: returns true), else here. */
static bool create_run_or_start(struct sbd_conn *c, struct sandboxd *d, struct sbd_backend *b,
				struct sbd_sandbox *sb, int r, struct strata_err *err)
{
	struct sbd_creates *cs = creates_of(d);
	bool inline_ok = !cs || (!cs->in_flight && cs->last_us < CREATE_INLINE_MAX_US);
	if (r == 0 && b->create_threaded && !inline_ok && create_start(c, d, cs, b, sb) == 0)
		return true;
	if (r == 0) {
		int64_t t0 = now_us();
		r = create_attached(d, b, sb, err);
		if (b->create_threaded && cs)
			cs->last_us = now_us() - t0;
	}
	if (create_commit(d, sb, r, false, 0) < 0)
		sbd_api_reply_errno(c, r, "create", err->msg);
	else
		sbd_api_reply_sandbox(c, 201, sb);
	return false;
}

/* A create waiting for its image (images.h): resolved, and its node
 * reference taken, on a worker; the request is taken up again from the
 * start with the image then. */
struct image_wait {
	struct sbd_image_waiter w;
	struct sandboxd *d;
	struct sbd_conn *c; /* NULL once its client left */
	size_t len;
	char body[]; /* a copy: the connection's buffer moves on */
};

static bool create_request(struct sbd_conn *c, const char *body, size_t len,
			   struct sbd_image *ready);

static void image_wait_abort(void *ctx)
{
	struct image_wait *iw = ctx;
	iw->c = NULL;
}

static void image_ready(struct sbd_image_waiter *w, int r, struct sbd_image *im,
			const struct strata_err *e)
{
	struct image_wait *iw = (struct image_wait *)((char *)w - offsetof(struct image_wait, w));
	struct sbd_conn *c = iw->c;
	if (!c && r == 0)
		sbd_images_release(iw->d, im); /* the create never came */
	if (c) {
		sbd_conn_set_abort(c, NULL, NULL);
		bool later = false;
		if (r < 0)
			sbd_api_reply_image_error(c, r, "create", e->msg);
		else
			later = create_request(c, iw->body, iw->len, im);
		if (!later)
			sbd_conn_hold_done(c);
	}
	free(iw);
}

/* Starts the look-up of image on a worker and holds c until it ended.
 * Returns 0 or -errno with e (nothing started). */
static int image_wait(struct sbd_conn *c, const char *image, const char *body, size_t len,
		      struct strata_err *e)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct sbd_image *im = NULL;
	struct image_wait *iw = malloc(sizeof(*iw) + len);
	if (!iw)
		return strata_err_set(e, -ENOMEM, "out of memory");
	*iw = (struct image_wait){.w = {.fn = image_ready}, .d = d, .c = c, .len = len};
	memcpy(iw->body, body, len);
	int r = sbd_images_acquire(d, image, &im, &iw->w, e);
	if (r != -EINPROGRESS) { /* a registered image is never waited for */
		free(iw);
		return r < 0 ? r
			     : strata_err_set(e, -EINVAL, "image '%s' was not waited for", image);
	}
	sbd_conn_hold(c, true);
	sbd_conn_set_abort(c, image_wait_abort, iw);
	return 0;
}

/* POST /v1/sandboxes. Returns true when the answer comes later (a create
 * on a worker, or the image's mount), false when it was queued. */
/* Whom a create is for: the caller, or (an admin's "tenant") the tenant it
 * names, whose quotas then apply. Returns false after replying. */
static bool create_for(struct sbd_conn *c, const struct json *j, struct sbd_who *ret)
{
	const struct sbd_who *who = sbd_conn_who(c);
	const struct json *t = json_get(j, "tenant");
	const char *name = json_cstr(t);
	*ret = *who;
	if (!t || t->type == JSON_NULL)
		return true;
	if (!name || !sbd_tenant_name_valid(name)) {
		sbd_conn_reply_error(c, 400, "bad_request",
				     "tenant must be a tenant's name (1-63 of a-z 0-9 - _)");
		return false;
	}
	if (!who->admin && strcmp(name, who->tenant)) {
		sbd_conn_reply_error(c, 403, "admin_only",
				     "a create for another tenant is for administrators only "
				     "(tenant '%s')",
				     who->tenant);
		return false;
	}
	snprintf(ret->tenant, sizeof(ret->tenant), "%s", name);
	return true;
}

/* ready: the image, when its look-up ended (a reference the create takes
 * over, or gives back when it answers otherwise). */
static bool create_request(struct sbd_conn *c, const char *body, size_t len,
			   struct sbd_image *ready)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	const struct sbd_who *who = sbd_conn_who(c);
	struct sbd_who as; /* whom it is for: owner, quotas */
	struct strata_err err = {0};
	struct json *j = sbd_api_parse_body(c, body, len, create_fields);
	bool later = false;
	if (!j || !create_for(c, j, &as)) { /* answered */
		sbd_images_release(d, ready);
		json_free(j);
		return false;
	}
	const char *owner = as.tenant[0] ? as.tenant : NULL;
	const char *image = json_cstr(json_get(j, "image"));
	const char *bname = json_cstr(json_get(j, "backend")) ?: "container";
	const char *idem = json_cstr(json_get(j, "idempotency_key"));
	const char *net = json_cstr(json_get(j, "network"));
	/* The host's network reaches the cluster's ports: an admin's choice. */
	if (net && !strcmp(net, "host") && !who->admin) {
		sbd_conn_reply_error(c, 403, "admin_only",
				     "network \"host\" is for administrators only (tenant '%s'); "
				     "\"none\" gives the sandbox its own network with loopback",
				     who->tenant);
		goto out;
	}
	struct sbd_sandbox *prev = idem ? sbd_registry_find_idem(d, idem, owner) : NULL;
	struct sbd_image *im = NULL;
	struct sbd_backend *b = sbd_registry_backend(d, bname);
	struct sbd_caps caps = {0};
	if (b)
		b->caps(b, &caps);
	struct sbd_sandbox *sb = NULL;
	int r;
	if (prev) {
		sbd_api_reply_sandbox(c, 200, prev);
		goto out;
	}
	if (idem && (later = create_join_pending(c, d->creates, idem, owner)))
		goto out;
	if (!image) {
		sbd_conn_reply_error(c, 400, "bad_request", "field 'image' (a string) is required");
		goto out;
	}
	if (!b) {
		sbd_conn_reply_error(
		    c, 400, "bad_request",
		    "unknown backend '%s' (container, docker, fncall, firecracker, qemu)", bname);
		goto out;
	}
	if (ready) {
		im = ready;
		ready = NULL;
	} else if (sbd_images_find(d, image)) {
		im = sbd_images_find(d, image); /* registered: no store, no wait */
	} else {
		if ((r = image_wait(c, image, body, len, &err)) == 0)
			later = true;
		else
			sbd_api_reply_image_error(c, r, "create", err.msg);
		goto out;
	}
	sb = calloc(1, sizeof(*sb));
	char *id = new_id(d);
	if (!sb || !id) {
		free(id);
		free(sb);
		sbd_images_release(d, im);
		sbd_conn_reply_error(c, 500, "internal", "out of memory");
		goto out;
	}
	strcpy(sb->id, id);
	free(id);
	sb->image = strdup(sbd_image_name(im, image));
	sb->rootfs = strdup(sbd_image_rootfs(im));
	sb->img = im;
	sb->backend_name = strdup(b->name);
	sb->backend = b;
	sb->reserves = caps.persistent;
	if (owner)
		sb->tenant = strdup(owner);
	r = fill_sandbox(d, j, sb, im, &err);
	if (r == 0 && owner && !sb->tenant)
		r = -ENOMEM;
	if (r == 0 && !caps.available)
		r = strata_err_set(&err, -ENODEV, "backend '%s': %s", bname, caps.why.msg);
	if (r == 0 && sb->userns_req == 1 && !caps.userns)
		r = strata_err_set(&err, -EOPNOTSUPP,
				   "backend '%s' has no user namespaces here: %s", b->name,
				   caps.userns_reason ?: "not supported by this backend");
	if (r == 0 && sb->net_egress && !b->net_pid)
		r = strata_err_set(&err, -EOPNOTSUPP,
				   "backend '%s' does not support network \"egress\"", b->name);
	if (r == 0 && sb->net_host && !caps.network_host)
		r = strata_err_set(&err, -EOPNOTSUPP,
				   "backend '%s' does not support network \"host\"", b->name);
	if (r == 0 && ((r = sbd_tenant_admit(d, &as, sb, &err)) < 0 ||
		       (r = sbd_registry_admit(d, sb, &err)) < 0))
		d->refused_total++;
	later = create_run_or_start(c, d, b, sb, r, &err);
out:
	if (ready) /* answered before the create: its reference goes */
		sbd_images_release(d, ready);
	json_free(j);
	return later;
}

/* ?lookup=1: the sandbox made (or being made) with the body's key. */
static void create_lookup(struct sbd_conn *c, const char *body, size_t len)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct json *j = sbd_api_parse_body(c, body, len, create_fields);
	struct sbd_who as;
	if (!j || !create_for(c, j, &as)) { /* answered */
		json_free(j);
		return;
	}
	const char *owner = as.tenant[0] ? as.tenant : NULL;
	const char *idem = json_cstr(json_get(j, "idempotency_key"));
	struct sbd_sandbox *prev = idem ? sbd_registry_find_idem(d, idem, owner) : NULL;
	if (!idem)
		sbd_conn_reply_error(c, 400, "bad_request", "lookup needs an idempotency_key");
	else if (prev)
		sbd_api_reply_sandbox(c, 200, prev);
	else if (!create_join_pending(c, d->creates, idem, owner))
		sbd_conn_reply_error(c, 404, "not_found", "no sandbox with idempotency key '%s'",
				     idem);
	json_free(j);
}

void sbd_api_create(struct sbd_conn *c, const char *query, const char *body, size_t len)
{
	if (sbd_api_query_bool(query, "lookup"))
		create_lookup(c, body, len);
	else
		create_request(c, body, len, NULL);
}
