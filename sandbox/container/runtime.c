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
 * (slower), unless SBX_STAGING_MAX stagings run already, in which case it
 * waits for the pool (more at once only contend for the kernel's mount and
 * namespace locks and the CPUs). The pool threads stop filling after the
 * first error (kept in pool.err) so a broken machine does not spin.
 *
 * Destroyed sandboxes are finished by the reaper thread (sbx_destroy only
 * kills and adds the pidfd to the reaper's epoll set): once an agent has
 * exited, it reaps it and recycles or removes its cgroups, off every
 * caller's path, and no thread waits for one exit in particular (an exit
 * takes milliseconds: the mount namespace teardown waits for expedited RCU
 * grace periods). Empty cgroup slots of finished sandboxes are kept (up to
 * SBX_SPARE_SLOTS) and handed to the next staging, and so are their
 * network and IPC namespaces when nothing of the sandbox is left in them
 * (up to SBX_SPARE_NETNS and SBX_SPARE_IPCNS; netns.c says what is checked).
 *
 * Pool invariants: n + staging <= want; staging + inline_n <= SBX_STAGING_MAX
 * unless the pool cannot fill (no threads, error, stopping); a staged
 * sandbox in the pool belongs to no caller and has network "none"; a
 * sandbox in the reaper's set is killed and belongs to no caller (it may be
 * freed as soon as it is added); the reaper exits only with its set empty
 * (reaping 0), after the pool threads. sbx_create
 * wakes a thread (pool_kick) only after its sandbox started, so refilling
 * does not compete with the create that emptied the slot. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/sendfile.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

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

/* One staging; false when none is wanted. Called and returns with the lock
 * held. */
static bool pool_work(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	if (!p->stop && !p->err && p->n + p->staging < p->want) {
		struct sbx *s = NULL;
		p->staging++;
		pthread_mutex_unlock(&p->lock);
		int r = sbx_stage(rt, SBX_NET_NONE, &s);
		pthread_mutex_lock(&p->lock);
		p->staging--;
		if (r < 0) {
			p->err = r;
			pthread_cond_broadcast(&p->avail); /* callers now stage inline */
		} else {
			p->staged[p->n++] = s;
			pthread_cond_signal(&p->avail);
		}
		return true;
	}
	return false;
}

/* Set in the runtime's pool threads and its reaper, which share the
 * namespaces of the thread that made the runtime (rt->home_*_fd). */
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

/* The reaper: one thread waits, in one epoll set, on the pidfds of every
 * killed sandbox and finishes each once its agent has exited (sbx_finish:
 * reap, recycle the cgroup slot and namespaces, free). An agent's exit
 * takes milliseconds (the mount namespace teardown waits for expedited RCU
 * grace periods), so no thread waits for one in particular: the pool
 * threads only stage, and sbx_destroy only kills and queues. */
static void *reaper_main(void *arg)
{
	struct sbx_runtime *rt = arg;
	struct pool *p = &rt->pool;
	struct epoll_event ev[32];
	in_pool_thread = true;
	for (;;) {
		int n = epoll_wait(p->reap_epfd, ev, (int)ARRAY_SIZE(ev), -1);
		if (n < 0 && errno != EINTR)
			break; /* EBADF/EINVAL: cannot happen with our own epoll fd */
		unsigned done = 0;
		for (int i = 0; i < n; i++) {
			struct sbx *s = ev[i].data.ptr;
			if (!s) {
				uint64_t v;
				(void)!read(p->reap_evfd, &v, sizeof(v));
				continue;
			}
			/* Out of the set before sbx_finish closes the pidfd:
			 * closing alone would leave it there while another
			 * reference to the file lives (a staging child's
			 * copy of the low fds, child.c), with s freed. */
			epoll_ctl(p->reap_epfd, EPOLL_CTL_DEL, s->pidfd, NULL);
			sbx_finish(s);
			done++;
		}
		pthread_mutex_lock(&p->lock);
		p->reaping -= done;
		bool quit = p->reap_stop && !p->reaping;
		pthread_mutex_unlock(&p->lock);
		if (quit)
			break;
	}
	return NULL;
}

static int reaper_start(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	p->reap_epfd = epoll_create1(EPOLL_CLOEXEC);
	if (p->reap_epfd < 0)
		return -errno;
	p->reap_evfd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	if (p->reap_evfd < 0)
		return -errno;
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = NULL};
	if (epoll_ctl(p->reap_epfd, EPOLL_CTL_ADD, p->reap_evfd, &ev) < 0)
		return -errno;
	int r = -pthread_create(&p->reaper, NULL, reaper_main, rt);
	p->reaper_started = r == 0;
	return r;
}

static int pool_start(struct sbx_runtime *rt, unsigned want)
{
	struct pool *p = &rt->pool;
	p->want = want;
	p->staged = calloc(want + 1, sizeof(*p->staged));
	if (!p->staged)
		return -ENOMEM;
	int r = reaper_start(rt);
	if (r < 0)
		return r;
	unsigned want_threads = STRATA_MAX(STRATA_MIN(want, SBX_POOL_THREADS), 1u);
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

/* Stops the pool threads, then the reaper once it finished every queued
 * teardown (the staged sandboxes' too: all killed at once, so their exits
 * overlap). */
static void pool_stop(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	pthread_mutex_lock(&p->lock);
	p->stop = true;
	pthread_cond_broadcast(&p->wake);
	pthread_cond_broadcast(&p->avail);
	pthread_mutex_unlock(&p->lock);
	for (; p->n_threads; p->n_threads--)
		pthread_join(p->threads[p->n_threads - 1], NULL);
	while (p->n) {
		struct sbx *s = p->staged[--p->n];
		sbx_kill(s);
		if (pool_reap(rt, s) < 0)
			sbx_free_now(s);
	}
	if (p->reaper_started) {
		pthread_mutex_lock(&p->lock);
		p->reap_stop = true;
		pthread_mutex_unlock(&p->lock);
		(void)!write(p->reap_evfd, &(uint64_t){1}, sizeof(uint64_t));
		pthread_join(p->reaper, NULL);
		p->reaper_started = false;
	}
	if (p->reap_epfd >= 0)
		close(p->reap_epfd);
	if (p->reap_evfd >= 0)
		close(p->reap_evfd);
	p->reap_epfd = p->reap_evfd = -1;
	free(p->staged);
	p->staged = NULL;
}

int pool_reap(struct sbx_runtime *rt, struct sbx *s)
{
	struct pool *p = &rt->pool;
	int r = 0;
	if (s->pidfd < 0)
		return -EBADF; /* nothing to wait on: the caller finishes it */
	pthread_mutex_lock(&p->lock);
	if (!p->reaper_started || p->reap_stop)
		r = -ESHUTDOWN;
	else
		p->reaping++;
	pthread_mutex_unlock(&p->lock);
	if (r < 0)
		return r;
	/* From here the reaper may finish and free s at any moment. */
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = s};
	if (epoll_ctl(p->reap_epfd, EPOLL_CTL_ADD, s->pidfd, &ev) < 0) {
		r = -errno;
		pthread_mutex_lock(&p->lock);
		p->reaping--;
		pthread_mutex_unlock(&p->lock);
		/* A reaper told to stop may be waiting for this one. */
		(void)!write(p->reap_evfd, &(uint64_t){1}, sizeof(uint64_t));
	}
	return r;
}

struct sbx *pool_take(struct sbx_runtime *rt, bool *ret_inline)
{
	struct pool *p = &rt->pool;
	struct sbx *s = NULL;
	*ret_inline = false;
	pthread_mutex_lock(&p->lock);
	for (;;) {
		if (p->n) {
			s = p->staged[--p->n];
			break;
		}
		/* Stage inline while few stagings run; beyond that, wait for
		 * the pool threads: more at once only contend (namespace_sem,
		 * mount_lock, the CPUs) and copy whole fd tables (rsv_take). */
		if (!p->want || p->err || p->stop || !p->n_threads ||
		    p->staging + p->inline_n < SBX_STAGING_MAX) {
			p->inline_n++;
			*ret_inline = true;
			break;
		}
		pthread_cond_wait(&p->avail, &p->lock);
	}
	pthread_mutex_unlock(&p->lock);
	return s;
}

void pool_inline_done(struct sbx_runtime *rt)
{
	struct pool *p = &rt->pool;
	pthread_mutex_lock(&p->lock);
	p->inline_n--;
	pthread_cond_signal(&p->avail);
	pthread_mutex_unlock(&p->lock);
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
		while (i < SBX_RSV_FDS && (busy & (1u << i)))
			i++;
		if (i == SBX_RSV_FDS || rt->rsv_fd[i] < 0)
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
	while (rt->n_spare_net)
		netns_close(&rt->spare_net[--rt->n_spare_net]);
	while (rt->n_spare_ipc)
		ipcns_close(&rt->spare_ipc[--rt->n_spare_ipc]);
	while (rt->n_spare_userns)
		userns_free(&rt->spare_userns[--rt->n_spare_userns]);
}

/* ---- spare network namespaces -------------------------------------------- */

void net_take(struct sbx_runtime *rt, struct netns *ret)
{
	netns_init(ret);
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_spare_net)
		*ret = rt->spare_net[--rt->n_spare_net];
	pthread_mutex_unlock(&rt->pool.lock);
}

void net_recycle(struct sbx_runtime *rt, struct netns *ns)
{
	if (ns->fd >= 0 && !rt->fresh_netns &&
	    netns_recyclable(ns, in_pool_thread ? rt->home_net_fd : -1)) {
		pthread_mutex_lock(&rt->pool.lock);
		bool kept = !rt->pool.stop && rt->n_spare_net < SBX_SPARE_NETNS;
		if (kept)
			rt->spare_net[rt->n_spare_net++] = *ns;
		pthread_mutex_unlock(&rt->pool.lock);
		if (kept) {
			netns_init(ns);
			return;
		}
	}
	netns_close(ns);
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

int userns_take(struct sbx_runtime *rt, struct userns *ret)
{
	bool got = false;
	pthread_mutex_lock(&rt->pool.lock);
	if (rt->n_spare_userns) {
		*ret = rt->spare_userns[--rt->n_spare_userns];
		got = true;
	}
	pthread_mutex_unlock(&rt->pool.lock);
	return got ? 0 : userns_new(rt, ret);
}

/* Every process of the sandbox is gone (its pid namespace ended with its
 * agent), and nothing else can hold ids of the range (userns.c): the
 * namespace and range serve the next sandbox as they are. */
void userns_recycle(struct sbx_runtime *rt, struct userns *u)
{
	if (u->fd < 0 || u->lock_fd < 0) { /* not a range of ours */
		userns_free(u);
		return;
	}
	pthread_mutex_lock(&rt->pool.lock);
	bool kept = !rt->pool.stop && rt->n_spare_userns < SBX_SPARE_USERNS;
	if (kept)
		rt->spare_userns[rt->n_spare_userns++] = *u;
	pthread_mutex_unlock(&rt->pool.lock);
	if (kept)
		userns_init(u);
	else
		userns_free(u);
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
	for (int i = 0; i < SBX_RSV_FDS && rt->rsv_null >= 0; i++)
		rt->rsv_fd[i] = fcntl(rt->rsv_null, F_DUPFD_CLOEXEC, 0);
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
	if (r == 0) {
		layer_fs_init(&rt->layers, cfg, cfg->state_dir);
		if (rt->layers.failed)
			r = -ENOTSUP;
	}
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
	rt->pool.reap_epfd = rt->pool.reap_evfd = -1;
	rt->layers.dir_fd = rt->layers.lock_fd = -1;
	for (int i = 0; i < SBX_RSV_FDS; i++)
		rt->rsv_fd[i] = -1;
	for (int i = 0; i < CG_NCTRL; i++)
		rt->cg.base_fd[i] = -1;
	pthread_mutex_init(&rt->pool.lock, NULL);
	pthread_cond_init(&rt->pool.wake, NULL);
	pthread_cond_init(&rt->pool.filled, NULL);
	pthread_cond_init(&rt->pool.avail, NULL);
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
	layer_fs_done(&rt->layers);
	if (rt->agent_fd >= 0)
		close(rt->agent_fd);
	if (rt->seccomp_fd >= 0)
		close(rt->seccomp_fd);
	if (rt->mntns_fd >= 0)
		close(rt->mntns_fd);
	for (int i = 0; i < SBX_RSV_FDS; i++)
		if (rt->rsv_fd[i] >= 0)
			close(rt->rsv_fd[i]);
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
	pthread_cond_destroy(&rt->pool.avail);
	pthread_mutex_destroy(&rt->pool.lock);
	free(rt);
}

int sbx_runtime_cgroup_version(const struct sbx_runtime *rt)
{
	return rt->cg.version;
}

bool sbx_runtime_disk_quota(const struct sbx_runtime *rt, const char **ret_reason)
{
	if (ret_reason)
		*ret_reason = rt->layers.reason;
	return rt->layers.quota;
}
