/* sandbox_bench.c — the C driver of bench/sandbox (see bench/sandbox/README.md).
 *
 * One mode per run; each prints one line
 *   RESULT <name> <ops/s> <p50 ms> <p99 ms> <ops> <errors>
 * (memory modes: RESULT <name> <value> <unit>) that bench/sandbox/run.sh puts
 * beside its baseline. A "creation" is create + exec `true` + delete; CONC
 * threads loop over it for SECS seconds and the latency of the create step
 * alone is recorded (crun: the whole `crun run`, which cannot be split;
 * spawn: posix_spawn + wait).
 *
 *   spawn  CONC SECS [ARGV...]          posix_spawn + wait of ARGV (/bin/true)
 *   crun   BUNDLE CONC SECS             crun run (call inside a mount namespace
 *                                       without /sys/fs/cgroup/unified)
 *   lib    ROOTFS AGENT CONC SECS POOL  libstrata_sandbox directly (STRATA_BENCH_OP=pause:
 *                                       sbx_pause + sbx_resume of live sandboxes, one
 *                                       per thread; the latency of sbx_pause)
 *   api    SOCK IMAGE CONC SECS         strata-sandboxd's HTTP API (keep-alive)
 *   fncall SOCK IMAGE cmd|python CONC SECS   calls on fncall sandboxes
 *   exec   SOCK IMAGE CONC SECS     exec `true` in live container sandboxes (one
 *                                   per thread, made before): the exec's latency
 *   pause  SOCK IMAGE CONC SECS     pause + resume of live container sandboxes
 *                                   (one per thread, a `sleep` running in each):
 *                                   the latency of the pair
 *   ttfb   SOCK IMAGE N             exec_stream of `sleep 3; echo x` N times:
 *                                   the time to the stream's first event
 *   mem    SOCK IMAGE N SANDBOXD_PID    N idle container sandboxes: memory per
 *                                       sandbox, sandboxd's RSS
 *   memspawn N                          N idle `sleep` processes (baseline)
 *   purge  SOCK                         deletes every sandbox of a sandboxd
 *
 * The HTTP client is a minimal HTTP/1.1 one on a unix socket: one keep-alive
 * connection per thread, Content-Length or chunked answers. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <pthread.h>
#include <spawn.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/strata_sandbox.h"

extern char **environ;

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* ---- latency samples ------------------------------------------------------ */

struct samples {
	uint64_t *v;
	size_t n, cap;
};

static void samples_add(struct samples *s, uint64_t ns)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		uint64_t *v = realloc(s->v, cap * sizeof(*v));
		if (!v)
			return;
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = ns;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
	return x < y ? -1 : x > y;
}

static double pct_ms(struct samples *s, double p)
{
	if (!s->n)
		return 0;
	size_t i = (size_t)(p * (double)(s->n - 1));
	return (double)s->v[i] / 1e6;
}

/* ---- the thread harness --------------------------------------------------- */

struct worker;
/* One operation; records its create latency in w->lat. Returns 0 or -errno. */
typedef int (*op_fn)(struct worker *w);

struct bench {
	const char *name;
	op_fn op;
	int (*init)(struct worker *w); /* per thread, optional */
	void (*done)(struct worker *w);
	void *arg;
	uint64_t deadline;
	pthread_barrier_t ready; /* every worker's init done: the clock starts */
};

struct worker {
	struct bench *b;
	int idx;
	struct samples lat;
	uint64_t ops, errors;
	int last_err;
	void *priv;
};

static void *worker_main(void *arg)
{
	struct worker *w = arg;
	int r = w->b->init ? w->b->init(w) : 0;
	pthread_barrier_wait(&w->b->ready);
	if (r < 0) {
		w->errors++;
		return NULL;
	}
	while (now_ns() < w->b->deadline) {
		int r = w->b->op(w);
		if (r < 0) {
			w->errors++;
			w->last_err = r;
			if (w->errors > 100 && w->errors > w->ops)
				break;
		} else {
			w->ops++;
		}
	}
	if (w->b->done)
		w->b->done(w);
	return NULL;
}

static int run_bench(struct bench *b, int conc, double secs)
{
	struct worker *ws = calloc((size_t)conc, sizeof(*ws));
	pthread_t *th = calloc((size_t)conc, sizeof(*th));
	if (!ws || !th)
		return 1;
	pthread_barrier_init(&b->ready, NULL, (unsigned)conc + 1);
	b->deadline = UINT64_MAX;
	for (int i = 0; i < conc; i++) {
		ws[i] = (struct worker){.b = b, .idx = i};
		if (pthread_create(&th[i], NULL, worker_main, &ws[i]) != 0)
			return 1;
	}
	uint64_t t0 = now_ns(); /* after the inits (fncall, exec: a sandbox each) */
	b->deadline = t0 + (uint64_t)(secs * 1e9);
	pthread_barrier_wait(&b->ready);
	struct samples all = {0};
	uint64_t ops = 0, errors = 0;
	int last_err = 0;
	for (int i = 0; i < conc; i++) {
		pthread_join(th[i], NULL);
		for (size_t j = 0; j < ws[i].lat.n; j++)
			samples_add(&all, ws[i].lat.v[j]);
		ops += ws[i].ops;
		errors += ws[i].errors;
		if (ws[i].last_err)
			last_err = ws[i].last_err;
		free(ws[i].lat.v);
	}
	double el = (double)(now_ns() - t0) / 1e9;
	qsort(all.v, all.n, sizeof(*all.v), cmp_u64);
	printf("RESULT %s %.1f %.3f %.3f %llu %llu\n", b->name, (double)ops / el, pct_ms(&all, 0.5),
	       pct_ms(&all, 0.99), (unsigned long long)ops, (unsigned long long)errors);
	if (errors)
		fprintf(stderr, "%s: %llu errors, last: %s\n", b->name, (unsigned long long)errors,
			strerror(-last_err));
	free(all.v);
	free(ws);
	free(th);
	pthread_barrier_destroy(&b->ready);
	return 0;
}

/* ---- baselines: posix_spawn, crun ----------------------------------------- */

static int spawn_wait(char *const argv[], uint64_t *ret_ns)
{
	uint64_t t0 = now_ns();
	pid_t pid;
	int r = posix_spawn(&pid, argv[0], NULL, NULL, argv, environ);
	if (r)
		return -r;
	int st;
	while (waitpid(pid, &st, 0) < 0)
		if (errno != EINTR)
			return -errno;
	if (ret_ns)
		*ret_ns = now_ns() - t0;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -ECHILD;
}

static int op_spawn(struct worker *w)
{
	char **argv = w->b->arg;
	uint64_t ns;
	int r = spawn_wait(argv, &ns);
	if (r == 0)
		samples_add(&w->lat, ns);
	return r;
}

static int op_crun(struct worker *w)
{
	char id[64];
	snprintf(id, sizeof(id), "sbb-%d-%d-%llu", getpid(), w->idx, (unsigned long long)w->ops);
	char *argv[] = {"/usr/bin/crun", "run", "--bundle", w->b->arg, id, NULL};
	uint64_t ns;
	int r = spawn_wait(argv, &ns);
	if (r == 0)
		samples_add(&w->lat, ns);
	return r;
}

/* ---- the library ---------------------------------------------------------- */

struct lib_ctx {
	struct sbx_runtime *rt;
	const char *rootfs;
	bool userns; /* STRATA_BENCH_USERNS=1: sandboxes in user namespaces */
};

static int op_lib(struct worker *w)
{
	struct lib_ctx *c = w->b->arg;
	struct sbx_config cfg = {.rootfs = c->rootfs, .userns = c->userns};
	struct sbx *s;
	uint64_t t0 = now_ns();
	int r = sbx_create(c->rt, &cfg, &s);
	if (r < 0)
		return r;
	samples_add(&w->lat, now_ns() - t0);
	const char *argv[] = {"/bin/true", NULL};
	struct sbx_exec_opts o = {.argv = argv, .timeout_ms = 10000};
	struct sbx_exec_result res;
	r = sbx_exec(s, &o, NULL, NULL, &res);
	if (r == 0 && res.exit_code != 0)
		r = -ECHILD;
	sbx_destroy(s);
	return r;
}

/* lib with STRATA_BENCH_OP=pause: each thread's sandbox (a `sleep` in it)
 * is paused and resumed; the latency of sbx_pause alone is recorded. */
static int libpause_init(struct worker *w)
{
	struct lib_ctx *c = w->b->arg;
	struct sbx_config cfg = {.rootfs = c->rootfs, .userns = c->userns};
	struct sbx *s;
	int r = sbx_create(c->rt, &cfg, &s);
	if (r < 0)
		return r;
	w->priv = s;
	const char *argv[] = {"/bin/sh", "-c", "sleep 1000 >/dev/null 2>&1 &", NULL};
	struct sbx_exec_opts o = {.argv = argv, .timeout_ms = 10000};
	struct sbx_exec_result res;
	return sbx_exec(s, &o, NULL, NULL, &res);
}

static void libpause_done(struct worker *w)
{
	sbx_destroy(w->priv);
}

static int op_libpause(struct worker *w)
{
	uint64_t t0 = now_ns();
	int r = sbx_pause(w->priv, 0);
	if (r < 0)
		return r;
	samples_add(&w->lat, now_ns() - t0);
	return sbx_resume(w->priv);
}

/* ---- a minimal HTTP/1.1 client on a unix socket -------------------------- */

struct hc {
	int fd;
	char in[1 << 16];
	size_t len, off;
	char *body; /* last response body (decoded), NUL-terminated */
	size_t body_len, body_cap;
};

static int hc_connect(struct hc *h, const char *path)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	snprintf(a.sun_path, sizeof(a.sun_path), "%s", path);
	h->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (h->fd < 0)
		return -errno;
	if (connect(h->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		int e = -errno;
		close(h->fd);
		h->fd = -1;
		return e;
	}
	h->len = h->off = 0;
	return 0;
}

static void hc_close(struct hc *h)
{
	if (h->fd >= 0)
		close(h->fd);
	h->fd = -1;
	free(h->body);
	h->body = NULL;
	h->body_cap = 0;
}

/* Makes sure n unread bytes are buffered. */
static int hc_fill(struct hc *h, size_t n)
{
	if (h->off && h->len - h->off < n) {
		memmove(h->in, h->in + h->off, h->len - h->off);
		h->len -= h->off;
		h->off = 0;
	}
	if (n > sizeof(h->in))
		return -E2BIG;
	while (h->len - h->off < n) {
		ssize_t k = read(h->fd, h->in + h->len, sizeof(h->in) - h->len);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EPIPE;
		h->len += (size_t)k;
	}
	return 0;
}

/* Reads a line (without CRLF) into the buffer; returns its start. */
static char *hc_line(struct hc *h, int *err)
{
	for (size_t want = 1;; want = h->len - h->off + 1) {
		char *s = h->in + h->off;
		char *e = memmem(s, h->len - h->off, "\r\n", 2);
		if (e) {
			*e = 0;
			h->off = (size_t)(e + 2 - h->in);
			return s;
		}
		if ((*err = hc_fill(h, want)) < 0)
			return NULL;
	}
}

static int hc_body_put(struct hc *h, size_t n)
{
	if (h->body_len + n + 1 > h->body_cap) {
		size_t cap = (h->body_len + n + 1) * 2;
		char *b = realloc(h->body, cap);
		if (!b)
			return -ENOMEM;
		h->body = b;
		h->body_cap = cap;
	}
	while (n) {
		size_t chunk = n < sizeof(h->in) / 2 ? n : sizeof(h->in) / 2;
		int r = hc_fill(h, chunk);
		if (r < 0)
			return r;
		memcpy(h->body + h->body_len, h->in + h->off, chunk);
		h->off += chunk;
		h->body_len += chunk;
		n -= chunk;
	}
	h->body[h->body_len] = 0;
	return 0;
}

static int hc_read_chunked(struct hc *h)
{
	for (;;) {
		int err = 0;
		char *l = hc_line(h, &err);
		if (!l)
			return err;
		size_t n = strtoul(l, NULL, 16);
		if (n && (err = hc_body_put(h, n)) < 0)
			return err;
		if (!(l = hc_line(h, &err)))
			return err;
		if (!n)
			return 0;
	}
}

/* Sends one request and reads the whole answer. Returns the status or -errno. */
static int hc_req(struct hc *h, const char *method, const char *path, const char *body)
{
	char head[512];
	size_t blen = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
			 "Content-Length: %zu\r\n\r\n",
			 method, path, blen);
	struct iovec iov[2] = {{head, (size_t)n}, {(void *)body, blen}};
	struct msghdr m = {.msg_iov = iov, .msg_iovlen = body ? 2 : 1};
	if (sendmsg(h->fd, &m, MSG_NOSIGNAL) != n + (ssize_t)blen)
		return -EPIPE;
	int err = 0, status = 0;
	long long clen = -1;
	bool chunked = false;
	char *l = hc_line(h, &err);
	if (!l || sscanf(l, "HTTP/1.1 %d", &status) != 1)
		return err ? err : -EBADMSG;
	while ((l = hc_line(h, &err)) && *l) {
		if (!strncasecmp(l, "content-length:", 15))
			clen = atoll(l + 15);
		else if (!strncasecmp(l, "transfer-encoding:", 18) && strcasestr(l, "chunked"))
			chunked = true;
	}
	if (!l)
		return err;
	h->body_len = 0;
	err = chunked ? hc_read_chunked(h) : hc_body_put(h, clen > 0 ? (size_t)clen : 0);
	return err < 0 ? err : status;
}

/* The "id" of a created sandbox, from its JSON. */
static int json_id(const char *body, char *id, size_t cap)
{
	const char *p = body ? strstr(body, "\"id\":\"") : NULL;
	if (!p)
		p = body ? strstr(body, "\"id\": \"") : NULL;
	if (!p)
		return -EBADMSG;
	p = strchr(p + 4, '"') + 1;
	size_t n = strcspn(p, "\"");
	if (n + 1 > cap)
		return -EBADMSG;
	memcpy(id, p, n);
	id[n] = 0;
	return 0;
}

static bool exec_ok(const struct hc *h)
{
	return h->body &&
	       (strstr(h->body, "\"exit_code\":0,") || strstr(h->body, "\"exit_code\": 0,"));
}

struct api_ctx {
	const char *sock, *image, *backend, *call;
};

static int api_create(struct hc *h, const struct api_ctx *c, char *id, size_t cap)
{
	char body[512];
	snprintf(body, sizeof(body),
		 "{\"image\":\"%s\",\"backend\":\"%s\",\"memory_mb\":64,\"pids\":32}", c->image,
		 c->backend);
	int st = hc_req(h, "POST", "/v1/sandboxes", body);
	if (st < 0)
		return st;
	if (st != 201 && st != 200) {
		fprintf(stderr, "create: %d %s\n", st, h->body);
		return -EIO;
	}
	return json_id(h->body, id, cap);
}

static int api_delete(struct hc *h, const char *id)
{
	char path[256];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s", id);
	int st = hc_req(h, "DELETE", path, NULL);
	return st < 0 ? st : st == 200 ? 0 : -EIO;
}

static int api_exec(struct hc *h, const char *id, const char *call)
{
	char path[256];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/exec", id);
	int st = hc_req(h, "POST", path, call);
	if (st < 0)
		return st;
	if (st != 200 || !exec_ok(h)) {
		fprintf(stderr, "exec: %d %s\n", st, h->body);
		return -EIO;
	}
	return 0;
}

static int api_init(struct worker *w)
{
	struct api_ctx *c = w->b->arg;
	struct hc *h = calloc(1, sizeof(*h));
	if (!h)
		return -ENOMEM;
	w->priv = h;
	return hc_connect(h, c->sock);
}

static void api_done(struct worker *w)
{
	hc_close(w->priv);
	free(w->priv);
}

static int op_api(struct worker *w)
{
	struct api_ctx *c = w->b->arg;
	struct hc *h = w->priv;
	char id[128];
	uint64_t t0 = now_ns();
	int r = api_create(h, c, id, sizeof(id));
	if (r < 0)
		return r;
	samples_add(&w->lat, now_ns() - t0);
	r = api_exec(h, id, "{\"cmd\":[\"true\"]}");
	int d = api_delete(h, id);
	return r < 0 ? r : d;
}

/* fncall (and exec on container sandboxes): each thread has its own
 * connection and sandbox; an op is a call. */
struct fn_priv {
	struct hc h;
	char id[128];
};

static int fn_init(struct worker *w)
{
	struct api_ctx *c = w->b->arg;
	struct fn_priv *p = calloc(1, sizeof(*p));
	if (!p)
		return -ENOMEM;
	w->priv = p;
	int r = hc_connect(&p->h, c->sock);
	if (r == 0)
		r = api_create(&p->h, c, p->id, sizeof(p->id));
	return r;
}

static void fn_done(struct worker *w)
{
	struct fn_priv *p = w->priv;
	if (p->id[0])
		api_delete(&p->h, p->id);
	hc_close(&p->h);
	free(p);
}

static int op_fncall(struct worker *w)
{
	struct api_ctx *c = w->b->arg;
	struct fn_priv *p = w->priv;
	uint64_t t0 = now_ns();
	int r = api_exec(&p->h, p->id, c->call);
	if (r == 0)
		samples_add(&w->lat, now_ns() - t0);
	return r;
}

/* pause: each thread's sandbox runs a background sleep (a second process
 * to freeze); an op is POST pause then POST resume. */
static int pause_init(struct worker *w)
{
	int r = fn_init(w);
	struct fn_priv *p = w->priv;
	if (r == 0)
		r = api_exec(&p->h, p->id,
			     "{\"cmd\":[\"sh\",\"-c\",\"sleep 1000 >/dev/null 2>&1 &\"]}");
	return r;
}

static int api_post(struct hc *h, const char *id, const char *action)
{
	char path[256];
	snprintf(path, sizeof(path), "/v1/sandboxes/%s/%s", id, action);
	int st = hc_req(h, "POST", path, NULL);
	if (st < 0)
		return st;
	if (st != 200) {
		fprintf(stderr, "%s: %d %s\n", action, st, h->body);
		return -EIO;
	}
	return 0;
}

static int op_pause(struct worker *w)
{
	struct fn_priv *p = w->priv;
	uint64_t t0 = now_ns();
	int r = api_post(&p->h, p->id, "pause");
	if (r == 0)
		r = api_post(&p->h, p->id, "resume");
	if (r == 0)
		samples_add(&w->lat, now_ns() - t0);
	return r;
}

/* ttfb: one sandbox, one new connection per sample (closing it cancels the
 * exec); the time from the request to the first event of the stream. */
static int mode_ttfb(const struct api_ctx *c, int n)
{
	struct hc h = {.fd = -1};
	char id[128], head[512];
	static const char body[] = "{\"cmd\":\"sleep 3; echo x\"}";
	struct samples lat = {0};
	int r = hc_connect(&h, c->sock);
	if (r == 0)
		r = api_create(&h, c, id, sizeof(id));
	if (r < 0) {
		fprintf(stderr, "ttfb: %s\n", strerror(-r));
		return 1;
	}
	int hl = snprintf(head, sizeof(head),
			  "POST /v1/sandboxes/%s/exec HTTP/1.1\r\nHost: x\r\n"
			  "Content-Length: %zu\r\n\r\n%s",
			  id, strlen(body), body);
	uint64_t errors = 0, t_all = now_ns();
	for (int i = 0; i < n; i++) {
		struct hc s = {.fd = -1};
		int err = 0;
		uint64_t t0 = now_ns();
		if (hc_connect(&s, c->sock) < 0 || write(s.fd, head, (size_t)hl) != hl) {
			errors++;
			hc_close(&s);
			continue;
		}
		char *l;
		while ((l = hc_line(&s, &err)) && !strstr(l, "\"type\""))
			;
		if (l && strstr(l, "\"start\""))
			samples_add(&lat, now_ns() - t0);
		else
			errors++;
		hc_close(&s);
	}
	double el = (double)(now_ns() - t_all) / 1e9;
	qsort(lat.v, lat.n, sizeof(*lat.v), cmp_u64);
	printf("RESULT ttfb %.1f %.3f %.3f %zu %llu\n", (double)lat.n / el, pct_ms(&lat, 0.5),
	       pct_ms(&lat, 0.99), lat.n, (unsigned long long)errors);
	free(lat.v);
	api_delete(&h, id);
	hc_close(&h);
	return 0;
}

/* ---- memory --------------------------------------------------------------- */

/* Host memory in use (MemTotal - MemAvailable), KiB. */
static long long mem_used_kb(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	long long total = 0, avail = 0, v;
	char key[64];
	while (f && fscanf(f, "%63s %lld kB\n", key, &v) == 2) {
		if (!strcmp(key, "MemTotal:"))
			total = v;
		else if (!strcmp(key, "MemAvailable:"))
			avail = v;
	}
	if (f)
		fclose(f);
	return total - avail;
}

static void settle(void)
{
	sync();
	usleep(1500 * 1000);
}

/* Bytes charged to a v1 memory cgroup directory (its subtree), -1 if none. */
static long long cg_usage(const char *dir)
{
	char p[4096];
	long long v = -1;
	snprintf(p, sizeof(p), "%s/memory.usage_in_bytes", dir);
	FILE *f = fopen(p, "re");
	if (f && fscanf(f, "%lld", &v) != 1)
		v = -1;
	if (f)
		fclose(f);
	return v;
}

/* The v1 memory cgroup directory of pid (0: ourselves). */
static int memcg_dir(pid_t pid, char *buf, size_t cap)
{
	char p[64], line[4096];
	snprintf(p, sizeof(p), pid ? "/proc/%d/cgroup" : "/proc/self/cgroup", (int)pid);
	FILE *f = fopen(p, "re");
	int r = -ENOENT;
	while (f && r < 0 && fgets(line, sizeof(line), f)) {
		char *c = strstr(line, ":memory:");
		if (!c)
			continue;
		c[strcspn(c, "\n")] = 0;
		snprintf(buf, cap, "/sys/fs/cgroup/memory%s", strcmp(c + 8, "/") ? c + 8 : "");
		r = 0;
	}
	if (f)
		fclose(f);
	return r;
}

/* Prints host memory per sandbox two ways: charged to the sandboxes' memory
 * cgroups (exact, what a limit sees) and MemTotal - MemAvailable (includes
 * what no cgroup is charged for; noisy while others run). */
static int mode_mem(const struct api_ctx *c, int n, pid_t sd_pid)
{
	struct hc h = {.fd = -1};
	int r = hc_connect(&h, c->sock);
	char(*ids)[128] = calloc((size_t)n, sizeof(*ids));
	char cg[4096] = "";
	if (r < 0 || !ids)
		return 1;
	if (memcg_dir(sd_pid, cg, sizeof(cg) - 32) == 0)
		strcat(cg, "/strata-sandbox");
	settle();
	long long before = mem_used_kb(), cg_before = cg_usage(cg);
	int made = 0;
	for (; made < n; made++)
		if ((r = api_create(&h, c, ids[made], sizeof(ids[made]))) < 0)
			break;
	settle();
	long long after = mem_used_kb(), cg_after = cg_usage(cg);
	long long rss = -1;
	if (hc_req(&h, "GET", "/v1/node", NULL) == 200) {
		const char *p = strstr(h.body, "\"sandboxd_rss_kb\":");
		if (p)
			rss = atoll(p + 18);
	}
	for (int i = 0; i < made; i++)
		api_delete(&h, ids[i]);
	double k = made ? 1.0 / made : 0;
	printf("RESULT mem_cg_per_sandbox %.1f KiB\n",
	       cg_before >= 0 && cg_after >= 0 ? (double)(cg_after - cg_before) / 1024 * k : -1.0);
	printf("RESULT mem_host_per_sandbox %.1f KiB\n", (double)(after - before) * k);
	printf("RESULT sandboxd_rss %.1f MiB %d\n", (double)rss / 1024, made);
	if (made < n)
		fprintf(stderr, "mem: only %d of %d sandboxes: %s\n", made, n, strerror(-r));
	hc_close(&h);
	free(ids);
	return made == n ? 0 : 1;
}

/* The child of mode_memspawn: joins the cgroup, spawns n sleeps when told,
 * says so, and kills them at EOF. */
static _Noreturn void memspawn_child(const char *cg, int n, int in, int out)
{
	char p[4096], b;
	snprintf(p, sizeof(p), "%s/cgroup.procs", cg);
	FILE *f = fopen(p, "we");
	if (!f || fprintf(f, "0\n") < 0 || fclose(f) != 0)
		_exit(1);
	pid_t *pids = calloc((size_t)n, sizeof(*pids));
	char *argv[] = {"/bin/sleep", "600", NULL};
	if (!pids || write(out, "a", 1) != 1 || read(in, &b, 1) != 1)
		_exit(1);
	int made = 0;
	while (made < n && posix_spawn(&pids[made], argv[0], NULL, NULL, argv, environ) == 0)
		made++;
	if (write(out, "b", 1) != 1)
		_exit(1);
	while (read(in, &b, 1) > 0)
		;
	for (int i = 0; i < made; i++)
		kill(pids[i], SIGKILL);
	for (int i = 0; i < made; i++)
		waitpid(pids[i], NULL, 0);
	_exit(made == n ? 0 : 1);
}

/* Baseline: n idle `sleep` processes, measured like mode_mem. */
static int mode_memspawn(int n)
{
	char cg[4096];
	int to[2], from[2];
	if (memcg_dir(0, cg, sizeof(cg) - 64) < 0 || pipe(to) < 0 || pipe(from) < 0)
		return 1;
	snprintf(cg + strlen(cg), 64, "/strata-bench-sleep-%d", (int)getpid());
	if (mkdir(cg, 0755) < 0)
		return 1;
	pid_t pid = fork();
	if (pid == 0) {
		close(to[1]);
		close(from[0]);
		memspawn_child(cg, n, to[0], from[1]);
	}
	close(to[0]);
	close(from[1]);
	char b;
	int ok = pid > 0 && read(from[0], &b, 1) == 1;
	settle();
	long long before = mem_used_kb(), cg_before = cg_usage(cg);
	ok = ok && write(to[1], "g", 1) == 1 && read(from[0], &b, 1) == 1;
	settle();
	long long after = mem_used_kb(), cg_after = cg_usage(cg);
	close(to[1]);
	int st = 1;
	if (pid > 0)
		waitpid(pid, &st, 0);
	for (int i = 0; i < 100 && rmdir(cg) < 0 && errno == EBUSY; i++)
		usleep(10000);
	printf("RESULT mem_cg_per_process %.1f KiB\n", (double)(cg_after - cg_before) / 1024 / n);
	printf("RESULT mem_host_per_process %.1f KiB\n", (double)(after - before) / n);
	close(from[0]);
	return ok && st == 0 ? 0 : 1;
}

/* Deletes every sandbox the daemon has (the clean-up of an interrupted run). */
static int mode_purge(const char *sock)
{
	struct hc h = {.fd = -1};
	if (hc_connect(&h, sock) < 0 || hc_req(&h, "GET", "/v1/sandboxes", NULL) != 200) {
		hc_close(&h);
		return 1;
	}
	char *list = strdup(h.body);
	for (char *p = list; p && (p = strstr(p, "\"id\":\"")); p += 6) {
		char id[128];
		if (json_id(p, id, sizeof(id)) == 0)
			api_delete(&h, id);
	}
	free(list);
	hc_close(&h);
	return 0;
}

/* ---- main ----------------------------------------------------------------- */

static int mode_lib(char **a)
{
	struct sbx_runtime_config rc = {
	    .agent_path = a[1], .cgroup_name = "strata-bench", .pool_size = (unsigned)atoi(a[4])};
	/* Under $TMPDIR when set: the test VM's /var/tmp is an overlay over 9p,
	 * where a loop device (the quota'd layers' image) cannot work. */
	const char *tmp = getenv("TMPDIR");
	char state[PATH_MAX];
	snprintf(state, sizeof(state), "%s/strata-bench-XXXXXX", tmp && *tmp ? tmp : "/var/tmp");
	if (!mkdtemp(state))
		return 1;
	rc.state_dir = state;
	/* STRATA_BENCH_DISK=tmpfs|quota: where the writable layers go
	 * (default: on disk where the machine allows, sandbox/container/layer.c). */
	const char *disk = getenv("STRATA_BENCH_DISK");
	rc.disk_mode = !disk			? SBX_DISK_AUTO
		       : !strcmp(disk, "tmpfs") ? SBX_DISK_TMPFS
						: SBX_DISK_QUOTA;
	const char *uns = getenv("STRATA_BENCH_USERNS");
	struct lib_ctx c = {.rootfs = a[0], .userns = uns && !strcmp(uns, "1")};
	int r = sbx_runtime_new(&rc, &c.rt);
	if (r < 0) {
		fprintf(stderr, "sbx_runtime_new: %s\n", strerror(-r));
		rmdir(state);
		return 1;
	}
	const char *why = NULL;
	bool quota = sbx_runtime_disk_quota(c.rt, &why);
	fprintf(stderr, "writable layers: %s%s\n", quota ? "" : "no quota, ", why);
	char name[32];
	const char *op = getenv("STRATA_BENCH_OP");
	bool pause = op && !strcmp(op, "pause");
	snprintf(name, sizeof(name), "lib%s%s_c%s", pause ? "pause" : "", c.userns ? "_userns" : "",
		 a[2]);
	struct bench b = {.name = name, .op = op_lib, .arg = &c};
	if (pause)
		b = (struct bench){.name = name,
				   .op = op_libpause,
				   .init = libpause_init,
				   .done = libpause_done,
				   .arg = &c};
	r = run_bench(&b, atoi(a[2]), atof(a[3]));
	sbx_runtime_free(c.rt);
	char img[sizeof(state) + 16];
	snprintf(img, sizeof(img), "%s/layers.img", state); /* the layers' image, if made */
	unlink(img);
	rmdir(state);
	return r;
}

int main(int argc, char **argv)
{
	setvbuf(stdout, NULL, _IOLBF, 0);
	const char *m = argc > 1 ? argv[1] : "";
	char name[64];
	if (!strcmp(m, "spawn") && argc >= 4) {
		static char *true_argv[] = {"/bin/true", NULL};
		snprintf(name, sizeof(name), "spawn_c%s", argv[2]);
		struct bench b = {
		    .name = name, .op = op_spawn, .arg = argc > 4 ? argv + 4 : true_argv};
		return run_bench(&b, atoi(argv[2]), atof(argv[3]));
	}
	if (!strcmp(m, "crun") && argc == 5) {
		snprintf(name, sizeof(name), "crun_c%s", argv[3]);
		struct bench b = {.name = name, .op = op_crun, .arg = argv[2]};
		return run_bench(&b, atoi(argv[3]), atof(argv[4]));
	}
	if (!strcmp(m, "lib") && argc == 7)
		return mode_lib(argv + 2);
	if (!strcmp(m, "api") && argc == 6) {
		struct api_ctx c = {.sock = argv[2], .image = argv[3], .backend = "container"};
		snprintf(name, sizeof(name), "api_c%s", argv[4]);
		struct bench b = {
		    .name = name, .op = op_api, .init = api_init, .done = api_done, .arg = &c};
		return run_bench(&b, atoi(argv[4]), atof(argv[5]));
	}
	if (!strcmp(m, "fncall") && argc == 7) {
		bool py = !strcmp(argv[4], "python");
		struct api_ctx c = {.sock = argv[2],
				    .image = argv[3],
				    .backend = "fncall",
				    .call = py ? "{\"python\":\"x = 1\"}" : "{\"cmd\":[\"true\"]}"};
		snprintf(name, sizeof(name), "fncall_%s_c%s", argv[4], argv[5]);
		struct bench b = {
		    .name = name, .op = op_fncall, .init = fn_init, .done = fn_done, .arg = &c};
		return run_bench(&b, atoi(argv[5]), atof(argv[6]));
	}
	if (!strcmp(m, "exec") && argc == 6) {
		struct api_ctx c = {.sock = argv[2],
				    .image = argv[3],
				    .backend = "container",
				    .call = "{\"cmd\":[\"true\"]}"};
		snprintf(name, sizeof(name), "exec_c%s", argv[4]);
		struct bench b = {
		    .name = name, .op = op_fncall, .init = fn_init, .done = fn_done, .arg = &c};
		return run_bench(&b, atoi(argv[4]), atof(argv[5]));
	}
	if (!strcmp(m, "pause") && argc == 6) {
		struct api_ctx c = {.sock = argv[2], .image = argv[3], .backend = "container"};
		snprintf(name, sizeof(name), "pause_c%s", argv[4]);
		struct bench b = {
		    .name = name, .op = op_pause, .init = pause_init, .done = fn_done, .arg = &c};
		return run_bench(&b, atoi(argv[4]), atof(argv[5]));
	}
	if (!strcmp(m, "ttfb") && argc == 5) {
		struct api_ctx c = {.sock = argv[2], .image = argv[3], .backend = "container"};
		return mode_ttfb(&c, atoi(argv[4]));
	}
	if (!strcmp(m, "mem") && argc == 6) {
		struct api_ctx c = {.sock = argv[2], .image = argv[3], .backend = "container"};
		return mode_mem(&c, atoi(argv[4]), atoi(argv[5]));
	}
	if (!strcmp(m, "purge") && argc == 3)
		return mode_purge(argv[2]);
	if (!strcmp(m, "memspawn") && argc == 3)
		return mode_memspawn(atoi(argv[2]));
	fprintf(stderr, "usage: see the head of bench/sandbox_bench.c\n");
	return 2;
}
