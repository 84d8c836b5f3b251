/* worker_cgroup.c — the cgroups of workers (worker.h has the layout: W per
 * worker, on v1 in the pids and memory hierarchies below <own>/<name> and
 * in our own cpu cgroup as <name>-w..., on v2 below
 * sbx_cgroup_v2_base()/<name>; with children a cgroup C for the processes
 * the worker makes, v1 W/c, v2 W/c beside the worker's W/t).
 *
 * Split between the host and the worker: the host (wcg_prepare, before the
 * clone) makes the directories and opens what the worker needs (directory
 * fds, C's join files and OOM counter, W's cpu file), in its own mount and
 * cgroup namespaces; the worker (wcg_enter, after the clone) joins on v1 —
 * through "tasks", which moves the writing thread, all of this
 * single-threaded process, without the cgroup_threadgroup_rwsem a
 * cgroup.procs write takes (sandbox/README.md) — and writes its limits and
 * its children's, off the host's loop. On v2 clone3(CLONE_INTO_CGROUP)
 * places it, as the library's sandboxes.
 *
 * Several hosts (sandboxds) share <name>: directories are named by the
 * host's pid, the empty ones of dead hosts go when the next starts, and a
 * host that stops removes <name> when it is empty, which may be while
 * another is about to make a worker there: <name> is then made again (on
 * v2 with the controllers for its children) and the mkdir retried. Removal
 * of a worker's directories that the kernel still holds is retried
 * (wcg_retry). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

/* What the names of workers' directories in base[i] start with. */
static void wcg_prefix(const struct wcg *g, int i, char *buf, size_t cap)
{
	snprintf(buf, cap, "%s%s", g->version == 1 && i == WCG_CPU ? g->name : "",
		 g->version == 1 && i == WCG_CPU ? "-w" : "w");
}

/* The number of hierarchies a worker has a directory in. */
static int wcg_count(const struct wcg *g)
{
	return g->version == 1 ? (g->has_cpu ? 3 : 2) : g->version == 2 ? 1 : 0;
}

static int wcg_dir(const struct wcg *g, int i, uint64_t id, const char *sub, char *buf, size_t cap)
{
	char pre[80];
	wcg_prefix(g, i, pre, sizeof(pre));
	int n = snprintf(buf, cap, "%s/%s%d-%llu%s%s", g->base[i], pre, (int)g->owner,
			 (unsigned long long)id, sub ? "/" : "", sub ? sub : "");
	return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

/* Removes the empty worker directories of hosts that are gone (a killed
 * one leaves its workers'; populated ones cannot be removed). */
static void sweep(const struct wcg *g)
{
	for (int i = 0; i < wcg_count(g); i++) {
		char pre[80];
		wcg_prefix(g, i, pre, sizeof(pre));
		size_t n = strlen(pre);
		DIR *d = opendir(g->base[i]);
		struct dirent *e;
		while (d && (e = readdir(d))) {
			char *end;
			long pid = strncmp(e->d_name, pre, n) ? 0 : strtol(e->d_name + n, &end, 10);
			if (pid <= 0 || pid == g->owner || *end != '-' ||
			    kill((pid_t)pid, 0) == 0 || errno != ESRCH)
				continue;
			char p[PATH_MAX + 300];
			snprintf(p, sizeof(p), "%s/%s/c", g->base[i], e->d_name);
			rmdir(p); /* its children's first, and on v2 its own "t" */
			p[strlen(p) - 1] = 't';
			rmdir(p);
			p[strlen(p) - 2] = 0;
			rmdir(p);
		}
		if (d)
			closedir(d);
	}
}

static const char *v2_controllers(const struct wcg *g)
{
	return g->has_cpu ? "+pids +memory +cpu" : "+pids +memory";
}

static int write_path(const char *dir, const char *file, const char *val)
{
	int fd = open(dir, O_DIRECTORY | O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = cg_write_at(fd, file, val);
	close(fd);
	return r;
}

static void init_v1(struct wcg *g)
{
	static const char *const ctrls[] = {[WCG_PIDS] = "pids", [WCG_MEMORY] = "memory"};
	for (int i = WCG_PIDS; i <= WCG_MEMORY; i++) {
		char own[PATH_MAX - 80];
		if (cg_own_dir(ctrls[i], own, sizeof(own)) < 0)
			return;
		snprintf(g->base[i], sizeof(g->base[i]), "%s/%s", own, g->name);
		if (mkdir(g->base[i], 0755) < 0 && errno != EEXIST)
			return;
	}
	g->has_cpu = cg_own_dir("cpu", g->base[WCG_CPU], sizeof(g->base[WCG_CPU])) == 0;
	g->version = 1;
}

/* Below the same cgroup as the library's sandboxes, which may have moved
 * this process into a leaf of its own cgroup. */
static void init_v2(struct wcg *g)
{
	char dir[PATH_MAX - 80];
	if (sbx_cgroup_v2_base(dir, sizeof(dir)) < 0)
		return;
	snprintf(g->base[0], sizeof(g->base[0]), "%s/%s", dir, g->name);
	if (mkdir(g->base[0], 0755) < 0 && errno != EEXIST)
		return;
	g->has_cpu = true;
	if (write_path(g->base[0], "cgroup.subtree_control", v2_controllers(g)) == 0) {
		g->version = 2;
		return;
	}
	g->has_cpu = false;
	if (write_path(g->base[0], "cgroup.subtree_control", v2_controllers(g)) == 0)
		g->version = 2;
}

void wcg_init(struct wcg *g, const char *name)
{
	memset(g, 0, sizeof(*g));
	snprintf(g->name, sizeof(g->name), "%s", name);
	g->owner = getpid();
	int v = cg_detect_version();
	if (v == 1)
		init_v1(g);
	else if (v == 2)
		init_v2(g);
	if (g->version)
		sweep(g);
}

/* Makes a worker's directory in base[i] (see the head of the file). */
static int wcg_mkdir(const struct wcg *g, int i, uint64_t id)
{
	char p[PATH_MAX + 128];
	int r = wcg_dir(g, i, id, NULL, p, sizeof(p));
	for (int tries = 0; r == 0 && tries < 3; tries++) {
		if (mkdir(p, 0755) == 0 || errno == EEXIST)
			return 0;
		if (errno != ENOENT || (mkdir(g->base[i], 0755) < 0 && errno != EEXIST))
			return -errno;
		if (g->version == 2 &&
		    (r = write_path(g->base[i], "cgroup.subtree_control", v2_controllers(g))) < 0)
			return r;
	}
	return r < 0 ? r : -ENOENT;
}

static int open_in(const struct wcg *g, int i, uint64_t id, const char *sub, int flags)
{
	char p[PATH_MAX + 128];
	int r = wcg_dir(g, i, id, sub, p, sizeof(p));
	if (r < 0)
		return r;
	int fd = open(p, flags | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

static int mkdir_in(const struct wcg *g, int i, uint64_t id, const char *sub)
{
	char p[PATH_MAX + 128];
	int r = wcg_dir(g, i, id, sub, p, sizeof(p));
	return r < 0 ? r : mkdir(p, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

void wcg_dirs_init(struct wcg_dirs *d)
{
	for (int i = 0; i < WCG_N; i++)
		d->dir[i] = -1;
	d->kids[0] = d->kids[1] = d->into = d->join[0] = d->join[1] = d->oom = d->cpu_fd = -1;
}

void wcg_dirs_close(struct wcg_dirs *d)
{
	int *fds[] = {&d->dir[0], &d->dir[1],  &d->dir[2],  &d->kids[0], &d->kids[1],
		      &d->into,	  &d->join[0], &d->join[1], &d->oom,	 &d->cpu_fd};
	for (size_t i = 0; i < ARRAY_SIZE(fds); i++)
		if (*fds[i] >= 0) {
			close(*fds[i]);
			*fds[i] = -1;
		}
}

/* v2 with children: W delegates pids and memory to t and c. */
static int prepare_v2(const struct wcg *g, uint64_t id, bool children, struct wcg_dirs *d)
{
	int r = wcg_mkdir(g, 0, id);
	if (r < 0 || (d->dir[0] = r = open_in(g, 0, id, NULL, O_DIRECTORY | O_RDONLY)) < 0)
		return r;
	if (!children) {
		d->into = fcntl(d->dir[0], F_DUPFD_CLOEXEC, 3);
		return d->into < 0 ? -errno : 0;
	}
	if ((r = cg_write_at(d->dir[0], "cgroup.subtree_control", "+pids +memory")) < 0 ||
	    (r = mkdir_in(g, 0, id, "t")) < 0 || (r = mkdir_in(g, 0, id, "c")) < 0 ||
	    (d->into = r = open_in(g, 0, id, "t", O_DIRECTORY | O_RDONLY)) < 0 ||
	    (d->kids[0] = r = open_in(g, 0, id, "c", O_DIRECTORY | O_RDONLY)) < 0 ||
	    (d->join[0] = r = open_in(g, 0, id, "c/cgroup.procs", O_WRONLY)) < 0 ||
	    (d->oom = r = open_in(g, 0, id, "c/memory.events", O_RDONLY)) < 0)
		return r;
	return 0;
}

static int prepare_v1(const struct wcg *g, uint64_t id, bool children, struct wcg_dirs *d)
{
	int r;
	for (int i = 0; i < wcg_count(g); i++)
		if ((r = wcg_mkdir(g, i, id)) < 0 ||
		    (d->dir[i] = r = open_in(g, i, id, NULL, O_DIRECTORY | O_RDONLY)) < 0)
			return r;
	if (!children)
		return 0;
	for (int i = WCG_PIDS; i <= WCG_MEMORY; i++)
		if ((r = mkdir_in(g, i, id, "c")) < 0 ||
		    (d->kids[i] = r = open_in(g, i, id, "c", O_DIRECTORY | O_RDONLY)) < 0 ||
		    (d->join[i] = r = open_in(g, i, id, "c/tasks", O_WRONLY)) < 0)
			return r;
	d->oom = r = open_in(g, WCG_MEMORY, id, "c/memory.oom_control", O_RDONLY);
	return r < 0 ? r : 0;
}

int wcg_prepare(const struct wcg *g, uint64_t id, bool children, struct wcg_dirs *d)
{
	if (!g->version)
		return 0;
	int r = g->version == 2 ? prepare_v2(g, id, children, d) : prepare_v1(g, id, children, d);
	if (r == 0 && g->has_cpu)
		d->cpu_fd = r = open_in(g, g->version == 2 ? 0 : WCG_CPU, id,
					cg_cpu_file(g->version), O_WRONLY);
	return r < 0 ? r : 0;
}

int wcg_enter(const struct wcg *g, const struct wcg_dirs *d, const struct wcg_limits *l)
{
	if (!g->version)
		return 0;
	for (int i = 0; g->version == 1 && i < wcg_count(g); i++)
		if (cg_write_at(d->dir[i], "tasks", "0") < 0)
			return -1;
	int mem = g->version == 2 ? 0 : WCG_MEMORY, pids = g->version == 2 ? 0 : WCG_PIDS;
	int r = cg_limit_pids(d->dir[pids], l->pids);
	if (r == 0)
		r = cg_limit_memory(g->version, d->dir[mem], l->memory, false);
	if (r == 0 && d->kids[pids] >= 0)
		r = cg_limit_pids(d->kids[pids], l->children_pids);
	if (r == 0 && d->kids[pids] >= 0)
		r = cg_limit_memory(g->version, d->kids[mem], l->children_memory, false);
	errno = -r;
	return r < 0 ? -1 : 0;
}

/* Removes a worker's directories; false if the kernel still holds one. */
static bool try_remove(const struct wcg *g, uint64_t id)
{
	char p[PATH_MAX + 128];
	bool done = true;
	for (int i = 0; i < wcg_count(g); i++) {
		static const char *const subs[] = {"c", "t", NULL};
		for (size_t k = 0; k < ARRAY_SIZE(subs); k++)
			if (wcg_dir(g, i, id, subs[k], p, sizeof(p)) == 0 && rmdir(p) < 0 &&
			    !subs[k] && errno != ENOENT)
				done = false;
	}
	return done;
}

void wcg_remove(struct wcg *g, uint64_t id)
{
	if (!g->version || try_remove(g, id))
		return;
	uint64_t *n = realloc(g->pending, (g->npending + 1) * sizeof(*n));
	if (n) {
		g->pending = n;
		g->pending[g->npending++] = id;
	}
}

void wcg_retry(struct wcg *g)
{
	size_t k = 0;
	for (size_t i = 0; i < g->npending; i++)
		if (!try_remove(g, g->pending[i]))
			g->pending[k++] = g->pending[i];
	g->npending = k;
}

void wcg_done(struct wcg *g)
{
	wcg_retry(g);
	for (int i = 0; i < wcg_count(g); i++)
		if (!(g->version == 1 && i == WCG_CPU)) /* not our own cpu cgroup */
			rmdir(g->base[i]);		/* fails while another host uses it */
	free(g->pending);
	g->pending = NULL;
	g->npending = 0;
	g->version = 0;
}

/* The index of ctrl's hierarchy in base (v2: 0), or -1 (v1: C has no cpu
 * cgroup of its own). */
static int hierarchy(const struct wcg *g, const char *ctrl, bool children)
{
	if (g->version == 2)
		return 0;
	if (!strcmp(ctrl, "pids"))
		return WCG_PIDS;
	if (!strcmp(ctrl, "memory"))
		return WCG_MEMORY;
	return !strcmp(ctrl, "cpu") && g->has_cpu && !children ? WCG_CPU : -1;
}

int wcg_path(const struct wcg *g, uint64_t id, const char *ctrl, bool children, char *buf,
	     size_t cap)
{
	int i = hierarchy(g, ctrl, children);
	if (!g->version || i < 0)
		return -ENOENT;
	return wcg_dir(g, i, id, children ? "c" : NULL, buf, cap);
}
