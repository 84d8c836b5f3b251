/* runtime.c — the container runtime: shared state and the pools.
 *
 * What can be prepared before a create request is, here: the agent binary is
 * copied once into a sealed memfd (sandboxes exec it from there, so nothing
 * inside can modify the host's copy, cf. runc CVE-2019-5736); the seccomp
 * filter is compiled once into another sealed memfd; a template mount
 * namespace (an empty read-only root, child.c) is made once, so that no
 * sandbox copies the host's mounts; and whole sandboxes are
 * staged ahead by pool threads (namespaces, cgroup, /dev, /proc, /sys, the
 * agent running and waiting for START; see sandbox.c) and handed out under a
 * mutex. An empty pool is not an error: create then stages one inline
 * (slower). The pool threads stop filling after the first error (kept in
 * pool.err) so a broken machine does not spin.
 *
 * The same threads finish destroyed sandboxes (sbx_destroy only kills;
 * waiting and recycling or removing cgroups happen here, off the caller's
 * path). Empty cgroup slots of finished sandboxes are kept (up to
 * SBX_SPARE_SLOTS) and handed to the next staging, and so are their
 * network and IPC namespaces when nothing of the sandbox is left in them
 * (up to SBX_SPARE_NETNS and SBX_SPARE_IPCNS; netns.c says what is checked).
 *
 * Pool invariants: n + staging <= want; a staged sandbox in the pool belongs
 * to no caller and has network "none"; a sandbox in reap is killed and
 * belongs to no caller; the threads exit only with reap empty. sbx_create
 * wakes a thread (pool_kick) only after its sandbox started, so refilling
 * does not compete with the create that emptied the slot. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sendfile.h>
#include <time.h>
#include <unistd.h>

#include "sandbox-internal.h"

static int mkdir_p(const char *path, mode_t mode)
{
	_cleanup_free_ char *p = strdup(path);
	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, mode) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return mkdir(p, mode) < 0 && errno != EEXIST ? -errno : 0;
}

/* Copies the agent into a sealed, close-on-exec memfd. */
static int load_agent(const char *path, int *ret_fd)
{
	_cleanup_close_ int in = open(path, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int fd = -1;
	struct stat st;
	if (in < 0 || fstat(in, &st) < 0)
		return -errno;
	fd = memfd_create("strata-agent", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	for (off_t done = 0; done < st.st_size;) {
		ssize_t n = sendfile(fd, in, NULL, (size_t)(st.st_size - done));
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		done += n;
	}
	if (fchmod(fd, 0555) < 0 ||
	    fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

/* ---- pool of staged sandboxes ------------------------------------------- */

/* One unit of background work; false when there is none. Called and
 * returns with the lock held. */
static bool pool_work(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	if (p->n_reap) {
		struct sbx *s = p->reap[--p->n_reap];
		pthread_mutex_unlock(&p->lock);
		sbx_free_now(s);
		pthread_mutex_lock(&p->lock);
		return true;
	}
	if (!p->stop && !p->err && p->n + p->staging < p->want) {
		struct sbx *s = NULL;
		p->staging++;
		pthread_mutex_unlock(&p->lock);
		int r = sbx_stage(rt, SBX_NET_NONE, &s);
		pthread_mutex_lock(&p->lock);
		p->staging--;
		if (r < 0)
			p->err = r;
		else
			p->staged[p->n++] = s;
		return true;
	}
	return false;
}

/* Set in the runtime's pool threads, which share the namespaces of the
 * thread that made the runtime (rt->home_*_fd). */
static __thread bool in_pool_thread;

static void *pool_main(void *arg)
{
	struct sbx_runtime *rt = arg;
	struct pool *p = &rt->pool;
	in_pool_thread = true;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		if (pool_work(rt))
			continue;
		if (!p->staging)
			pthread_cond_broadcast(&p->filled);
		if (p->stop)
			break;
		pthread_cond_wait(&p->wake, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return NULL;
}

static int pool_start(struct sbx_runtime *rt, unsigned want)
{
	struct pool *p = &rt->pool;
	p->want = want;
	p->staged = calloc(want + 1, sizeof(*p->staged));
	if (!p->staged)
		return -ENOMEM;
	unsigned want_threads = STRATA_MAX(STRATA_MIN(want, SBX_POOL_THREADS), 1u);
	int r = 0;
	while (r == 0 && p->n_threads < want_threads) {
		r = -pthread_create(&p->threads[p->n_threads], NULL, pool_main, rt);
		if (r == 0)
			p->n_threads++;
	}
	if (!p->n_threads)
		return r;
	pthread_mutex_lock(&p->lock);
	while (!p->err && p->n < p->want)
		pthread_cond_wait(&p->filled, &p->lock);
	r = p->err;
	pthread_mutex_unlock(&p->lock);
	return r;
}

/* Stops the thread after it finished every queued teardown. */
static void pool_stop(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->wake);
	pthread_mutex_unlock(&p->lock);
	for (; p->n_threads; p->n_threads--)
		pthread_join(p->threads[p->n_threads - 1], NULL);
	while (p->n)
		sbx_free_now(p->staged[--p->n]);
	while (p->n_reap)
		sbx_free_now(p->reap[--p->n_reap]);
	free(p->staged);
	free(p->reap);
	p->staged = p->reap = NULL;
}

int pool_reap(struct sbx_runtime *rt, struct sbx *s)
{
	struct pool *p = &rt->pool;
	int r = 0;
	pthread_mutex_lock(&p->lock);
	if (!p->n_threads || p->stop) {
		r = -ESHUTDOWN;
	} else if (p->n_reap == p->cap_reap) {
		unsigned cap = p->cap_reap ? p->cap_reap * 2 : 16;
		struct sbx **q = realloc(p->reap, cap * sizeof(*q));
		if (q) {
			p->reap = q;
			p->cap_reap = cap;
		} else {
			r = -ENOMEM;
		}
	}
	if (r == 0) {
		p->reap[p->n_reap++] = s;
		pthread_cond_signal(&p->wake);
	}
	pthread_mutex_unlock(&p->lock);
	return r;
}

struct sbx *pool_take(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	struct sbx *s = NULL;
	pthread_mutex_lock(&p->lock);
	if (p->n)
		s = p->staged[--p->n];
	pthread_mutex_unlock(&p->lock);
	return s;
}

void pool_kick(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	pthread_mutex_lock(&p->lock);
	pthread_cond_signal(&p->wake);
	pthread_mutex_unlock(&p->lock);
}

/* ---- reserved fd numbers of staging children ------------------------------ */

int rsv_take(struct sbx_runtime *rt)
{
	uint32_t busy = __atomic_load_n(&rt->rsv_busy, __ATOMIC_RELAXED);
	for (;;) {
		int i = 0;
		while (i < SBX_RSV_PAIRS && (busy & (1u << i)))
			i++;
		if (i == SBX_RSV_PAIRS || rt->rsv_fd[i][1] < 0)
			return -1;
		if (__atomic_compare_exchange_n(&rt->rsv_busy, &busy, busy | (1u << i), false,
						__ATOMIC_ACQUIRE, __ATOMIC_RELAXED))
			return i;
	}
}

void rsv_give(struct sbx_runtime *rt, int i)
{
	__atomic_fetch_and(&rt->rsv_busy, ~(1u << i), __ATOMIC_RELEASE);
}

/* ---- spare cgroup slots -------------------------------------------------- */

struct cg_slot *slot_take(struct sbx_runtime *rt)
{
	struct cg_slot *cg = NULL;
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_spare)
		cg = rt->spare[--rt->n_spare];
	pthread_mutex_unlock(&rt->pool.lock);
	return cg;
}

void slot_recycle(struct sbx_runtime *rt, struct cg_slot *cg)
{
	if (!cg)
		return;
	if (cg_slot_recyclable(&rt->cg, cg)) {
		pthread_mutex_lock(&rt->pool.lock);
		bool kept = rt->n_spare < SBX_SPARE_SLOTS;
		if (kept) {
			cg->reused = true;
			rt->spare[rt->n_spare++] = cg;
		}
		pthread_mutex_unlock(&rt->pool.lock);
		if (kept)
			return;
	}
	cg_slot_free(&rt->cg, cg);
}

static void slots_free(struct sbx_runtime *rt)
{
	while (rt->n_spare)
		cg_slot_free(&rt->cg, rt->spare[--rt->n_spare]);
	while (rt->n_spare_net) {
		close(rt->spare_net[--rt->n_spare_net]);
		if (rt->spare_net_sys[rt->n_spare_net] >= 0)
			close(rt->spare_net_sys[rt->n_spare_net]);
	}
	while (rt->n_spare_ipc)
		ipcns_close(&rt->spare_ipc[--rt->n_spare_ipc]);
}

/* ---- spare network namespaces -------------------------------------------- */

int net_take(struct sbx_runtime *rt, int *ret_sys_fd)
{
	int fd = -1;
	*ret_sys_fd = -1;
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_spare_net) {
		fd = rt->spare_net[--rt->n_spare_net];
		*ret_sys_fd = rt->spare_net_sys[rt->n_spare_net];
	}
	pthread_mutex_unlock(&rt->pool.lock);
	return fd;
}

void net_recycle(struct sbx_runtime *rt, int fd, int sys_fd)
{
	if (fd >= 0 && !rt->fresh_netns &&
	    netns_recyclable(fd, in_pool_thread ? rt->home_net_fd : -1)) {
		pthread_mutex_lock(&rt->pool.lock);
		bool kept = !rt->pool.stop && rt->n_spare_net < SBX_SPARE_NETNS;
		if (kept) {
			rt->spare_net_sys[rt->n_spare_net] = sys_fd;
			rt->spare_net[rt->n_spare_net++] = fd;
		}
		pthread_mutex_unlock(&rt->pool.lock);
		if (kept)
			return;
	}
	if (fd >= 0)
		close(fd);
	if (sys_fd >= 0)
		close(sys_fd);
}

/* ---- spare IPC namespaces ------------------------------------------------ */

struct ipcns ipc_take(struct sbx_runtime *rt)
{
	struct ipcns ns = {-1, -1};
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_spare_ipc)
		ns = rt->spare_ipc[--rt->n_spare_ipc];
	pthread_mutex_unlock(&rt->pool.lock);
	return ns;
}

void ipc_recycle(struct sbx_runtime *rt, struct ipcns *ns)
{
	if (ns->ns_fd < 0) {
		ipcns_close(ns);
		return;
	}
	if (!rt->fresh_netns && ipcns_recyclable(ns, in_pool_thread ? rt->home_ipc_fd : -1)) {
		pthread_mutex_lock(&rt->pool.lock);
		bool kept = !rt->pool.stop && rt->n_spare_ipc < SBX_SPARE_IPCNS;
		if (kept)
			rt->spare_ipc[rt->n_spare_ipc++] = *ns;
		pthread_mutex_unlock(&rt->pool.lock);
		if (kept) {
			ns->ns_fd = ns->mq_fd = -1;
			return;
		}
	}
	ipcns_close(ns);
}

/* ---- runtime ------------------------------------------------------------- */

static int runtime_init(struct sbx_runtime *rt, const struct sbx_runtime_config *cfg)
{
	int r = mkdir_p(cfg->state_dir, 0700);
	if (r < 0)
		return r;
	rt->fresh_netns = cfg->fresh_netns;
	/* Reserved fds first, while the lowest numbers are free. */
	rt->rsv_null = open("/dev/null", O_RDONLY | O_CLOEXEC);
	for (int i = 0; i < SBX_RSV_PAIRS && rt->rsv_null >= 0; i++)
		for (int j = 0; j < 2; j++)
			rt->rsv_fd[i][j] = fcntl(rt->rsv_null, F_DUPFD_CLOEXEC, 0);
	rt->state_dir = strdup(cfg->state_dir);
	if (!rt->state_dir || asprintf(&rt->staging, "%s/root", cfg->state_dir) < 0)
		return -ENOMEM;
	if (mkdir(rt->staging, 0700) < 0 && errno != EEXIST)
		return -errno;
	rt->home_net_fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	rt->home_ipc_fd = open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC);
	r = mntns_template(rt->staging, &rt->mntns_fd, rt->masks_present);
	if (r == 0)
		r = load_agent(cfg->agent_path, &rt->agent_fd);
	if (r == 0)
		r = seccomp_build(&rt->seccomp_fd);
	if (r == 0 && !cfg->no_cgroups)
		r = cg_driver_init(&rt->cg, cfg->cgroup_name ? cfg->cgroup_name : "strata-sandbox",
				   cfg->cgroup_version);
	if (r == 0)
		r = pool_start(rt, cfg->pool_size);
	return r;
}

int sbx_runtime_new(const struct sbx_runtime_config *cfg, struct sbx_runtime **ret)
{
	if (!cfg->agent_path || !cfg->state_dir)
		return -EINVAL;
	if (geteuid() != 0)
		return -EPERM;
	struct sbx_runtime *rt = calloc(1, sizeof(*rt));
	if (!rt)
		return -ENOMEM;
	rt->agent_fd = rt->seccomp_fd = rt->mntns_fd = rt->rsv_null = -1;
	rt->home_net_fd = rt->home_ipc_fd = -1;
	for (int i = 0; i < SBX_RSV_PAIRS; i++)
		rt->rsv_fd[i][0] = rt->rsv_fd[i][1] = -1;
	for (int i = 0; i < CG_NCTRL; i++)
		rt->cg.base_fd[i] = -1;
	pthread_mutex_init(&rt->pool.lock, NULL);
	pthread_cond_init(&rt->pool.wake, NULL);
	pthread_cond_init(&rt->pool.filled, NULL);
	/* Cgroup names (sbx-<seq>) must not collide with those of sandboxes a
	 * previous runtime left running (persistent ones): start from the clock. */
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	rt->seq = (uint64_t)ts.tv_sec * 1000000 + (uint64_t)ts.tv_nsec / 1000;
	int r = runtime_init(rt, cfg);
	if (r < 0) {
		sbx_runtime_free(rt);
		return r;
	}
	*ret = rt;
	return 0;
}

void sbx_runtime_free(struct sbx_runtime *rt)
{
	if (!rt)
		return;
	pool_stop(rt);
	slots_free(rt);
	while (rt->n_stacks)
		munmap(rt->stacks[--rt->n_stacks], SBX_CHILD_STACK_SIZE);
	cg_driver_done(&rt->cg);
	if (rt->agent_fd >= 0)
		close(rt->agent_fd);
	if (rt->seccomp_fd >= 0)
		close(rt->seccomp_fd);
	if (rt->mntns_fd >= 0)
		close(rt->mntns_fd);
	for (int i = 0; i < SBX_RSV_PAIRS; i++)
		for (int j = 0; j < 2; j++)
			if (rt->rsv_fd[i][j] >= 0)
				close(rt->rsv_fd[i][j]);
	if (rt->rsv_null >= 0)
		close(rt->rsv_null);
	if (rt->home_net_fd >= 0)
		close(rt->home_net_fd);
	if (rt->home_ipc_fd >= 0)
		close(rt->home_ipc_fd);
	if (rt->staging)
		rmdir(rt->staging);
	free(rt->staging);
	free(rt->state_dir);
	pthread_cond_destroy(&rt->pool.wake);
	pthread_cond_destroy(&rt->pool.filled);
	pthread_mutex_destroy(&rt->pool.lock);
	free(rt);
}

int sbx_runtime_cgroup_version(const struct sbx_runtime *rt)
{
	return rt->cg.version;
}
