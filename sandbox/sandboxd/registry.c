/* registry.c — the sandboxes a strata-sandboxd knows: lookup, admission,
 * persistence (one state dir per sandbox), re-adoption at start, and the TTL
 * and idle-timeout reaper. Invariants are listed in sandboxd.h. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/log.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/sandboxd.h"
#include "sandbox/sandboxd/xfer.h"

const char *sbd_state_name(enum sbd_state s)
{
	return s == SBD_PAUSED ? "paused" : s == SBD_FAILED ? "failed" : "running";
}

struct sbd_backend *sbd_registry_backend(struct sandboxd *d, const char *name)
{
	if (!strcmp(name, "docker"))
		name = "container";
	for (size_t i = 0; i < ARRAY_SIZE(d->backends); i++)
		if (d->backends[i] && !strcmp(d->backends[i]->name, name))
			return d->backends[i];
	return NULL;
}

struct sbd_sandbox *sbd_registry_find(struct sandboxd *d, const char *id)
{
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next)
		if (!strcmp(sb->id, id))
			return sb;
	return NULL;
}

struct sbd_sandbox *sbd_registry_find_idem(struct sandboxd *d, const char *key, const char *owner)
{
	/* Keys are the tenant's: another's same key is another sandbox. */
	for (struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next)
		if (sb->idem_key && !strcmp(sb->idem_key, key) &&
		    !strcmp(sb->tenant ?: "", owner ?: ""))
			return sb;
	return NULL;
}

/* MemAvailable, read at most every MEMINFO_MS: /proc/meminfo costs tens of
 * µs of the loop (the kernel sums every zone and the page cache), and at
 * hundreds of creates per second its value barely moves in that time. */
#define MEMINFO_MS 50

static int64_t mem_available_mb(struct sandboxd *d)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC_COARSE, &ts);
	int64_t now = (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
	if (d->meminfo_at_ms && now - d->meminfo_at_ms < MEMINFO_MS)
		return d->meminfo_mb;
	FILE *f = fopen("/proc/meminfo", "re");
	char line[256];
	long long kb = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "MemAvailable: %lld kB", &kb) == 1)
			break;
	fclose(f);
	d->meminfo_mb = kb < 0 ? -1 : kb / 1024;
	d->meminfo_at_ms = now;
	return d->meminfo_mb;
}

int sbd_registry_admit(struct sandboxd *d, const struct sbd_sandbox *sb, struct strata_err *e)
{
	const struct sandboxd_config *c = &d->cfg;
	if ((int64_t)(d->count + d->creating) >= c->max_sandboxes) {
		return strata_err_set(
		    e, -ENOSPC, "node has %zu sandboxes (%zu being created), the limit is %lld",
		    d->count + d->creating, d->creating, (long long)c->max_sandboxes);
	}
	int64_t mem_used = d->mem_used_mb + d->creating_mem_mb;
	int64_t pids_used = d->pids_used + d->creating_pids;
	if (sb->reserves && mem_used + sb->memory_mb > c->memory_budget_mb) {
		return strata_err_set(
		    e, -ENOSPC, "node memory: %lld MB requested, %lld MB of %lld MB left to admit",
		    (long long)sb->memory_mb, (long long)(c->memory_budget_mb - mem_used),
		    (long long)c->memory_budget_mb);
	}
	if (sb->reserves && pids_used + sb->pids > c->pids_budget) {
		return strata_err_set(e, -ENOSPC,
				      "node pids: %lld requested, %lld of %lld left to admit",
				      (long long)sb->pids, (long long)(c->pids_budget - pids_used),
				      (long long)c->pids_budget);
	}
	int64_t avail = mem_available_mb(d);
	if (avail >= 0 && avail < c->reserve_mb) {
		return strata_err_set(
		    e, -ENOSPC, "node memory available is %lld MB, below the reserve of %lld MB",
		    (long long)avail, (long long)c->reserve_mb);
	}
	return 0;
}

void sbd_registry_insert(struct sandboxd *d, struct sbd_sandbox *sb)
{
	sb->next = d->sandboxes;
	d->sandboxes = sb;
	d->count++;
	if (sb->reserves) {
		d->mem_used_mb += sb->memory_mb;
		d->pids_used += sb->pids;
	}
}

static void registry_remove(struct sandboxd *d, struct sbd_sandbox *sb)
{
	for (struct sbd_sandbox **p = &d->sandboxes; *p; p = &(*p)->next)
		if (*p == sb) {
			*p = sb->next;
			d->count--;
			if (sb->reserves) {
				d->mem_used_mb -= sb->memory_mb;
				d->pids_used -= sb->pids;
			}
			return;
		}
}

void sbd_sandbox_labels_free(struct sbd_sandbox *sb)
{
	for (size_t i = 0; i < sb->nlabels; i++) {
		free(sb->labels[i].key);
		free(sb->labels[i].value);
	}
	free(sb->labels);
	sb->labels = NULL;
	sb->nlabels = 0;
}

void sbd_sandbox_free(struct sbd_sandbox *sb)
{
	if (!sb)
		return;
	sbd_pause_wait_free(sb->pause_wait);
	sbd_net_detach(NULL, sb); /* a policy never attached */
	free(sb->image);
	free(sb->rootfs);
	free(sb->backend_name);
	if (sb->env)
		for (char **e = sb->env; *e; e++)
			free(*e);
	free(sb->env);
	free(sb->cwd);
	free(sb->user);
	sbd_sandbox_labels_free(sb);
	free(sb->idem_key);
	free(sb->tenant);
	free(sb->bstate);
	free(sb->failed_reason);
	free(sb);
}

void sbd_sandbox_to_json(const struct sbd_sandbox *sb, uint32_t node, struct jw *w)
{
	jw_obj(w);
	jw_kstr(w, "id", sb->id);
	if (node)
		jw_kint(w, "node", node);
	jw_kstr(w, "image", sb->image);
	jw_kstr(w, "backend", sb->backend_name);
	jw_kstr(w, "state", sbd_state_name(sb->state));
	if (sb->failed_reason)
		jw_kstr(w, "failed_reason", sb->failed_reason);
	jw_key(w, "cpu");
	jw_num(w, sb->cpu);
	jw_kint(w, "memory_mb", sb->memory_mb);
	jw_kint(w, "pids", sb->pids);
	jw_kint(w, "disk_mb", sb->disk_mb);
	jw_key(w, "env");
	jw_obj(w);
	for (char **e = sb->env; e && *e; e++) {
		char *eq = strchr(*e, '=');
		*eq = 0; /* the key, briefly */
		jw_key(w, *e);
		*eq = '=';
		jw_str(w, eq + 1);
	}
	jw_obj_end(w);
	jw_kstr(w, "cwd", sb->cwd);
	jw_kstr(w, "user", sb->user);
	jw_kstr(w, "network", sb->net_host ? "host" : sb->net_egress ? "egress" : "none");
	jw_kbool(w, "userns", sb->userns);
	jw_kint(w, "ttl", sb->ttl_s);
	jw_kint(w, "idle_timeout", sb->idle_s);
	jw_kint(w, "created_at", sb->created_at);
	jw_kint(w, "expires_at", sb->expires_at);
	jw_key(w, "labels");
	jw_obj(w);
	for (size_t i = 0; i < sb->nlabels; i++)
		jw_kstr(w, sb->labels[i].key, sb->labels[i].value);
	jw_obj_end(w);
	jw_key(w, "idempotency_key");
	jw_str(w, sb->idem_key);
	jw_key(w, "tenant");
	jw_str(w, sb->tenant);
	jw_kint(w, "execs", (int64_t)sb->execs_total);
	jw_kint(w, "running_execs", sb->running_execs);
	jw_obj_end(w);
}

static int state_path(struct sandboxd *d, const char *id, const char *leaf, char *buf, size_t cap)
{
	int n = snprintf(buf, cap, "%s/sandboxes/%s%s%s", d->cfg.state_dir, id, leaf ? "/" : "",
			 leaf ? leaf : "");
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int sbd_registry_persist(struct sandboxd *d, const struct sbd_sandbox *sb)
{
	char dir[4096], tmp[4200], fin[4200];
	if (state_path(d, sb->id, NULL, dir, sizeof(dir)) < 0)
		return -ENAMETOOLONG;
	if (mkdir(dir, 0700) < 0 && errno != EEXIST)
		return -errno;
	snprintf(tmp, sizeof(tmp), "%s/state.json.tmp", dir);
	snprintf(fin, sizeof(fin), "%s/state.json", dir);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "version", 1);
	jw_kstr(&w, "rootfs", sb->rootfs);
	jw_key(&w, "sandbox");
	sbd_sandbox_to_json(sb, 0, &w);
	jw_kint(&w, "exec_ids_reserved", (int64_t)sb->exec_ids_reserved);
	jw_key(&w, "backend_state");
	if (sb->bstate)
		jw_raw(&w, sb->bstate, strlen(sb->bstate));
	else
		jw_null(&w);
	jw_obj_end(&w);
	jw_append(&w, "\n", 1);
	int r = w.err;
	if (r == 0) {
		_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
		if (fd < 0 || write(fd, w.buf, w.len) != (ssize_t)w.len || rename(tmp, fin) < 0)
			r = errno ? -errno : -EIO;
	}
	jw_done(&w);
	return r;
}

void sbd_registry_fail(struct sandboxd *d, struct sbd_sandbox *sb, const char *why)
{
	if (sb->state == SBD_FAILED)
		return;
	free(sb->failed_reason);
	sb->failed_reason = strdup(why);
	sb->state = SBD_FAILED;
	log_warn("sandbox %s failed: %s", sb->id, why);
	sbd_registry_persist(d, sb);
}

static void unpersist(struct sandboxd *d, const char *id)
{
	char p[4200];
	if (state_path(d, id, "state.json", p, sizeof(p)) == 0)
		unlink(p);
	if (state_path(d, id, "state.json.tmp", p, sizeof(p)) == 0)
		unlink(p);
	if (state_path(d, id, NULL, p, sizeof(p)) == 0 && rmdir(p) < 0 && errno != ENOENT)
		log_warn_errno(-errno, "Failed to remove state dir %s", p);
}

/* A destroyed sandbox's state is removed by a worker (pool.h), in batches:
 * the unlinks and the rmdir were ~7 % of the loop thread during
 * create/delete churn, and waking a worker per delete would cost about as
 * much. The queue goes to a worker once it holds UNPERSIST_BATCH ids or at
 * the next second's sbd_registry_reap. The sandbox is gone from the registry
 * (and the API) before; a sandboxd that stops removes what is left
 * (sbd_registry_unpersist_wait); one killed in between finds the state of a
 * dead sandbox at its start, as after a sandbox that died while no
 * sandboxd ran, and drops it. Ids are random (new_id), so a queued removal
 * cannot hit a newer sandbox. */
#define UNPERSIST_BATCH 32

struct unpersist_item {
	struct unpersist_item *next;
	char id[SBD_ID_LEN + 1];
};

/* The queue of one sandboxd (d->unpersist), made at its first delete. */
struct sbd_unpersist {
	pthread_mutex_t mu;
	pthread_cond_t cond;	     /* the job ended */
	struct unpersist_item *head; /* queued */
	unsigned queued;
	bool running; /* the job is submitted or runs (it drains the queue) */
	struct sbd_job job;
	struct sandboxd *d;
};

/* Removes everything queued; with up->mu held, returns with it held. */
static void unpersist_drain_locked(struct sbd_unpersist *up)
{
	while (up->head) {
		struct unpersist_item *it = up->head;
		up->head = NULL;
		up->queued = 0;
		pthread_mutex_unlock(&up->mu);
		while (it) {
			struct unpersist_item *next = it->next;
			unpersist(up->d, it->id);
			free(it);
			it = next;
		}
		pthread_mutex_lock(&up->mu);
	}
}

static void unpersist_run(struct sbd_job *job)
{
	struct sbd_unpersist *up =
	    (struct sbd_unpersist *)((char *)job - offsetof(struct sbd_unpersist, job));
	pthread_mutex_lock(&up->mu);
	unpersist_drain_locked(up);
	up->running = false;
	pthread_cond_broadcast(&up->cond);
	pthread_mutex_unlock(&up->mu);
}

/* Hands the queue to a worker unless one has it. Called with up->mu held;
 * returns with it released. */
static void unpersist_kick_unlock(struct sbd_unpersist *up)
{
	if (up->running || !up->head) {
		pthread_mutex_unlock(&up->mu);
		return;
	}
	up->running = true;
	up->job.fn = unpersist_run;
	pthread_mutex_unlock(&up->mu);
	if (sbd_pool_run(up->d->pool, &up->job) < 0)
		unpersist_run(&up->job); /* no thread: here */
}

static struct sbd_unpersist *unpersist_of(struct sandboxd *d)
{
	if (d->unpersist)
		return d->unpersist;
	struct sbd_unpersist *up = calloc(1, sizeof(*up));
	if (!up)
		return NULL;
	pthread_mutex_init(&up->mu, NULL);
	pthread_cond_init(&up->cond, NULL);
	up->d = d;
	d->unpersist = up;
	return up;
}

static void unpersist_later(struct sandboxd *d, const char *id)
{
	struct sbd_unpersist *up = unpersist_of(d);
	struct unpersist_item *it = up ? calloc(1, sizeof(*it)) : NULL;
	if (!it) {
		unpersist(d, id);
		return;
	}
	snprintf(it->id, sizeof(it->id), "%s", id);
	pthread_mutex_lock(&up->mu);
	it->next = up->head;
	up->head = it;
	if (++up->queued < UNPERSIST_BATCH) {
		pthread_mutex_unlock(&up->mu);
		return;
	}
	unpersist_kick_unlock(up);
}

void sbd_registry_unpersist_wait(struct sandboxd *d)
{
	struct sbd_unpersist *up = d->unpersist;
	if (!up)
		return;
	pthread_mutex_lock(&up->mu);
	while (up->running)
		pthread_cond_wait(&up->cond, &up->mu);
	unpersist_drain_locked(up);
	pthread_mutex_unlock(&up->mu);
	pthread_mutex_destroy(&up->mu);
	pthread_cond_destroy(&up->cond);
	free(up);
	d->unpersist = NULL;
}

void sbd_sandbox_hook_add(struct sbd_sandbox *sb, struct sbd_destroy_hook *h)
{
	h->next = sb->on_destroy;
	sb->on_destroy = h;
}

void sbd_sandbox_hook_del(struct sbd_sandbox *sb, struct sbd_destroy_hook *h)
{
	for (struct sbd_destroy_hook **p = &sb->on_destroy; *p; p = &(*p)->next)
		if (*p == h) {
			*p = h->next;
			return;
		}
}

/* Runs sb's on-destroy hooks, each taken off the list before it runs (it
 * may remove others). */
static void run_destroy_hooks(struct sbd_sandbox *sb, const char *why)
{
	while (sb->on_destroy) {
		struct sbd_destroy_hook *h = sb->on_destroy;
		sb->on_destroy = h->next;
		h->fn(h, sb, why);
	}
}

int sbd_registry_destroy(struct sandboxd *d, struct sbd_sandbox *sb, const char *why)
{
	run_destroy_hooks(sb, why);
	/* its file transfers end first: none writes on past its quota */
	int busy = sbd_xfer_cancel(d, sb);
	if (busy)
		log_warn("sandbox %s: %d file transfers still running after %d ms", sb->id, busy,
			 XFER_CANCEL_WAIT_MS);
	sbd_net_detach(d, sb); /* its veth and rules go before its namespace */
	int r = sb->backend ? sb->backend->destroy(sb->backend, sb) : 0;
	if (r < 0)
		log_warn_errno(r, "Backend %s failed to destroy sandbox %s", sb->backend_name,
			       sb->id);
	log_info("sandbox %s destroyed (%s)", sb->id, why);
	registry_remove(d, sb);
	sbd_images_release(d, sb->img);
	unpersist_later(d, sb->id);
	sbd_net_forget(d, sb->id);
	d->deletes_total++;
	sbd_sandbox_free(sb);
	return r;
}

static char *dup_or_null(const char *s)
{
	return s ? strdup(s) : NULL;
}

int sbd_sandbox_from_json(const struct json *j, struct sbd_sandbox *sb)
{
	const char *id = json_cstr(json_get(j, "id"));
	const char *image = json_cstr(json_get(j, "image"));
	const char *backend = json_cstr(json_get(j, "backend"));
	if (!id || strlen(id) > SBD_ID_LEN || !image || !backend)
		return -EINVAL;
	strcpy(sb->id, id);
	sb->image = strdup(image);
	sb->backend_name = strdup(backend);
	const char *st = json_cstr(json_get(j, "state")) ?: "";
	sb->state = !strcmp(st, "paused")   ? SBD_PAUSED
		    : !strcmp(st, "failed") ? SBD_FAILED
					    : SBD_RUNNING;
	if (sb->state == SBD_FAILED)
		sb->failed_reason =
		    dup_or_null(json_cstr(json_get(j, "failed_reason")) ?: "failed");
	struct json *cpu = json_get(j, "cpu");
	sb->cpu = cpu && cpu->type == JSON_NUM ? cpu->num : 0;
	json_int(json_get(j, "memory_mb"), 0, INT64_MAX, &sb->memory_mb);
	json_int(json_get(j, "pids"), 0, INT64_MAX, &sb->pids);
	json_int(json_get(j, "disk_mb"), 0, INT64_MAX, &sb->disk_mb);
	json_int(json_get(j, "ttl"), 0, INT64_MAX, &sb->ttl_s);
	json_int(json_get(j, "idle_timeout"), 0, INT64_MAX, &sb->idle_s);
	json_int(json_get(j, "created_at"), 0, INT64_MAX, &sb->created_at);
	json_int(json_get(j, "expires_at"), 0, INT64_MAX, &sb->expires_at);
	int64_t execs = 0; /* exec numbers go on after a restart */
	json_int(json_get(j, "execs"), 0, INT64_MAX, &execs);
	sb->execs_total = (uint64_t)execs;
	sb->cwd = dup_or_null(json_cstr(json_get(j, "cwd")) ?: "/");
	sb->user = dup_or_null(json_cstr(json_get(j, "user")) ?: "");
	sb->net_host = !strcmp(json_cstr(json_get(j, "network")) ?: "", "host");
	/* Not re-attached after a restart (sandbox/net/README.md): its veth
	 * has no rules any more, so the node refuses all it sends. */
	sb->net_egress = !strcmp(json_cstr(json_get(j, "network")) ?: "", "egress");
	const struct json *uns = json_get(j, "userns");
	sb->userns = uns && uns->type == JSON_BOOL && uns->b;
	sb->idem_key = dup_or_null(json_cstr(json_get(j, "idempotency_key")));
	/* Its owner: a restart keeps who may see it (auth.c). */
	const char *tenant = json_cstr(json_get(j, "tenant"));
	if (tenant && !(sb->tenant = strdup(tenant)))
		return -ENOMEM;
	const struct json *env = json_get(j, "env"), *labels = json_get(j, "labels");
	size_t ne = env && env->type == JSON_OBJ ? env->len : 0;
	sb->env = calloc(ne + 1, sizeof(char *));
	if (!sb->env)
		return -ENOMEM;
	size_t i = 0;
	for (struct json *c = ne ? env->child : NULL; c; c = c->next) {
		const char *v = json_cstr(c);
		/* a name with '=' would read back as another variable */
		if (v && c->key[0] && !strchr(c->key, '=') &&
		    asprintf(&sb->env[i], "%s=%s", c->key, v) >= 0)
			i++;
	}
	size_t nl = labels && labels->type == JSON_OBJ ? labels->len : 0;
	sb->labels = calloc(nl + 1, sizeof(*sb->labels));
	if (!sb->labels)
		return -ENOMEM;
	for (struct json *c = nl ? labels->child : NULL; c; c = c->next) {
		const char *v = json_cstr(c);
		if (!v)
			continue;
		sb->labels[sb->nlabels].key = strdup(c->key);
		sb->labels[sb->nlabels++].value = strdup(v);
	}
	return sb->image && sb->backend_name && sb->cwd && sb->user ? 0 : -ENOMEM;
}

static int adopt_one(struct sandboxd *d, const char *id)
{
	char p[4200];
	if (state_path(d, id, "state.json", p, sizeof(p)) < 0)
		return -ENAMETOOLONG;
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	_cleanup_free_ char *buf = malloc(1 << 20);
	ssize_t n = buf ? read(fd, buf, 1 << 20) : -1;
	if (n < 0)
		return -EIO;
	struct json *j = json_parse(buf, (size_t)n, NULL, 0);
	struct sbd_sandbox *sb = calloc(1, sizeof(*sb));
	int r = j && sb ? sbd_sandbox_from_json(json_get(j, "sandbox"), sb) : -EINVAL;
	if (r == 0 && strcmp(sb->id, id))
		r = -EINVAL;
	const char *rootfs = json_cstr(json_get(j, "rootfs"));
	enum sbd_state recorded = r == 0 ? sb->state : SBD_RUNNING;
	if (r == 0) {
		int64_t reserved = 0; /* new ids start after every one given before */
		json_int(json_get(j, "exec_ids_reserved"), 0, INT64_MAX, &reserved);
		sb->exec_id_last = sb->exec_ids_reserved =
		    (uint64_t)reserved > sb->execs_total ? (uint64_t)reserved : sb->execs_total;
		sb->rootfs = rootfs ? strdup(rootfs) : NULL;
		struct json *bs = json_get(j, "backend_state");
		if (bs && bs->type != JSON_NULL) {
			struct jw w;
			jw_init(&w);
			json_emit(&w, bs);
			sb->bstate = jw_take(&w, NULL);
		}
		sb->backend = sbd_registry_backend(d, sb->backend_name);
		r = sb->backend && sb->rootfs ? sb->backend->adopt(sb->backend, sb) : -ENODEV;
		if (r == 0) {
			struct sbd_caps k = {0};
			sb->backend->caps(sb->backend, &k);
			sb->reserves = k.persistent;
		}
	}
	json_free(j);
	if (r < 0) {
		sbd_sandbox_free(sb);
		return r;
	}
	sb->last_active_ms = sbd_now_ms();
	sbd_registry_insert(d, sb);
	sb->img = sbd_images_adopt(d, sb->rootfs);
	/* The backend may have found it failed (an agent it could not verify),
	 * or paused or running against the record (a sandboxd that died
	 * between the freeze and the record) */
	if (sb->state != recorded)
		(void)sbd_registry_persist(d, sb);
	return 0;
}

void sbd_registry_adopt_all(struct sandboxd *d)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/sandboxes", d->cfg.state_dir);
	DIR *dp = opendir(p);
	if (!dp)
		return;
	struct dirent *de;
	int ok = 0, gone = 0;
	while ((de = readdir(dp))) {
		if (de->d_name[0] == '.')
			continue;
		int r = adopt_one(d, de->d_name);
		if (r == 0) {
			ok++;
			continue;
		}
		log_warn_errno(r, "Sandbox %s could not be re-adopted; removing its state",
			       de->d_name);
		unpersist(d, de->d_name);
		gone++;
	}
	closedir(dp);
	if (ok || gone)
		log_info("re-adopted %d sandboxes (%d gone)", ok, gone);
}

void sbd_registry_reap(struct sandboxd *d)
{
	int64_t now = sbd_wall_s(), mono = sbd_now_ms();
	struct sbd_sandbox *sb = d->sandboxes;
	while (sb) {
		struct sbd_sandbox *next = sb->next;
		const char *why = NULL;
		if (sb->expires_at && now >= sb->expires_at)
			why = "ttl expired";
		else if (sb->idle_s && !sb->running_execs && sb->state == SBD_RUNNING &&
			 mono - sb->last_active_ms >= sb->idle_s * 1000)
			why = "idle timeout";
		if (why) {
			d->reaped_total++;
			sbd_registry_destroy(d, sb, why);
		}
		sb = next;
	}
	if (d->unpersist) { /* state of the second's deletes */
		pthread_mutex_lock(&d->unpersist->mu);
		unpersist_kick_unlock(d->unpersist);
	}
}

void sbd_registry_free_all(struct sandboxd *d)
{
	while (d->sandboxes) {
		struct sbd_sandbox *sb = d->sandboxes;
		d->sandboxes = sb->next;
		if (sb->backend && sb->backend->release)
			sb->backend->release(sb->backend, sb);
		sbd_sandbox_free(sb);
	}
	d->count = 0;
}
