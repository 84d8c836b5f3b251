/* worker.h — workers: processes contained as a library sandbox is, but with
 * no agent and no overlay: a program of the caller's exec'd straight into an
 * image root, for hosts that run their own protocol with it over the
 * descriptors they hand over (sandboxd's fncall Python templates). The
 * security-critical part is the container library's own, written once:
 * the masks of /proc and /sys (masks.c), the capability drop, no_new_privs
 * and seccomp (sbx_privs.h, the agent's code), the cgroups (cgroup.c's
 * limit writers) and the network namespace's loopback (netns.c).
 *
 * A worker is cloned (clone3, from any thread of a multi-threaded host:
 * the child never allocates) into new mount, pid (it is pid 1), uts, ipc
 * and, for network "none", net namespaces, and then, in order:
 *
 *   1. dies with its parent (PDEATHSIG SIGKILL), unless survive_parent;
 *   2. keeps only its descriptors: the caller's fds[i] at i (and
 *      extra_fds[i] at SBX_WORKER_FD_EXTRA + i), and those of its
 *      children's cgroup (below) at SBX_WORKER_FD_JOIN_*, ..._OOM;
 *   3. cgroups: on v1 joins its own in each hierarchy (pids, memory, cpu)
 *      through "tasks" (the clone3 placed it on v2), and writes its limits
 *      and its children's; then unshares a cgroup namespace (after: with
 *      nsdelegate a namespace's root files are not writable from inside);
 *   4. signals back to their defaults (SIGPIPE; an empty mask), setsid;
 *      lo up (network "none", before the root: it also opens low ports and
 *      ICMP echo to every id in the namespace, as in a sandbox);
 *   5. the root: every mount made private, rootfs bound read-only and
 *      nosuid (recursively), a fresh tmpfs on /tmp (64 MiB, nosuid, nodev),
 *      a fresh /proc and a read-only sysfs of its network namespace on
 *      /sys, both with the library's masks, a read-only tmpfs /dev with
 *      null, zero, full, random, urandom, tty bound from the host and the
 *      usual links; pivot_root into it, the old root detached (rootfs "/",
 *      the host's own root for trusted tools and tests: no pivot, the same
 *      read-only treatment in the private mount namespace);
 *   6. hostname, open-file soft limit 1024, no core dumps, oom_score_adj;
 *   7. privileges: the bounding, permitted and effective sets cut to
 *      caps_keep (default none), ambient and inheritable empty,
 *      no_new_privs, and the library's seccomp filter loaded (or, with
 *      seccomp_deferred, handed over at SBX_WORKER_FD_SECCOMP for a worker
 *      that sets up processes of its own first);
 *   8. execs path.
 *
 * A step that fails writes "<label>: <step>: <error>" on the worker's fd 2
 * and exits 126: a worker runs contained and within its limits, or not at
 * all. Spawning does not wait for the exec (the host's loop goes on).
 *
 * cgroups: every worker has its own directory W ("w<host pid>-<id>") below
 * <our cgroup>/<cgroup_name> in the pids and memory hierarchies on v1 and,
 * one level of group scheduling less (a call's p50 doubled at concurrency
 * 4 one level deeper), "<cgroup_name>-w<host pid>-<id>" directly in our own
 * cpu cgroup; on v2 one directory below sbx_cgroup_v2_base()/<cgroup_name>.
 * W holds the worker's limits (memory, swap included; pids; cpu). With
 * children, a cgroup C for the processes the worker makes, within W's
 * limits and with its own (children_*): on v1 "c" below W (pids, memory),
 * on v2 — where a cgroup with processes cannot delegate controllers — W
 * holds "t", the worker's, and "c", its children's, beside each other. The
 * worker gets C's join files (v1 "tasks" of pids and memory, v2
 * cgroup.procs: a child writes "0" there) and its OOM counter, opened by
 * the host, so that a cgroup2 mounted with nsdelegate checks a move in the
 * host's cgroup namespace, not in the worker's. An OOM kill in C is counted
 * there (sbx_worker_oom_kills).
 *
 * All functions return 0 or a negative errno; a worker set is used by one
 * thread at a time. The library never logs. */
#pragma once
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/container/strata_sandbox.h"

struct sbx_workers;

struct sbx_workers_config {
	const char *cgroup_name; /* the subtree below our own cgroup; NULL: "strata-worker" */
	bool no_cgroups;	 /* workers without cgroups (no limits at all) */
};

/* What a host's workers share: the cgroup subtree (made, and the empty
 * worker directories of dead hosts of the same name removed), the seccomp
 * program (compiled once) and the /proc mask lists. Returns 0 and *ret, or
 * the errno of the seccomp program's build; without pids and memory cgroups
 * *ret is made all the same (sbx_workers_cgroup_version says 0, and
 * spawning refuses unless no_cgroups). Free with sbx_workers_free. */
int sbx_workers_new(const struct sbx_workers_config *cfg, struct sbx_workers **ret);
/* Removes what cgroups can be removed (the subtree when empty). Workers must
 * be freed. Accepts NULL. */
void sbx_workers_free(struct sbx_workers *ws);
/* 1 or 2; 0: no pids and memory cgroups. */
int sbx_workers_cgroup_version(const struct sbx_workers *ws);
/* Whether workers get a cpu limit (a cpu controller). */
bool sbx_workers_have_cpu(const struct sbx_workers *ws);
/* Retries the removal of workers' cgroups the kernel still held (call it
 * now and then). */
void sbx_workers_tick(struct sbx_workers *ws);
/* sbx_masks.h's /proc lists as JSON, [[files], [directories], [read-only]]
 * (absolute paths), for a worker that mounts a /proc of its own later and
 * masks it the same way. Lives as long as ws. */
const char *sbx_workers_proc_masks(const struct sbx_workers *ws);

#define SBX_WORKER_FDS 6	    /* the caller's fds, at 0..5 at most */
#define SBX_WORKER_FD_SECCOMP 6	    /* seccomp_deferred: the raw BPF program (a memfd) */
#define SBX_WORKER_FD_JOIN_PIDS 7   /* children: v1 C's pids "tasks", v2 C's cgroup.procs */
#define SBX_WORKER_FD_JOIN_MEMORY 8 /* children, v1: C's memory "tasks" (v2: not open) */
#define SBX_WORKER_FD_OOM 9	    /* children: C's memory.oom_control (v2 memory.events) */
/* More of the caller's fds (extra_fds), at SBX_WORKER_FD_EXTRA.. in order:
 * files a worker opens again through /proc/self/fd/N (a VMM's disks,
 * which its read-only root, with its own /tmp, may not show). */
#define SBX_WORKER_FD_EXTRA 32
#define SBX_WORKER_EXTRA_MAX 96

struct sbx_worker_config {
	const char *rootfs;		/* absolute; "/": the host's own root */
	const char *path;		/* absolute, in rootfs: what is exec'd */
	char *const *argv;		/* required */
	char *const *envp;		/* NULL: none */
	const char *hostname;		/* NULL: "sandbox" */
	const char *label;		/* prefix of its failure messages; NULL: "strata-worker" */
	enum sbx_network network;	/* SBX_NET_NONE: a namespace with only lo, up */
	const int *fds;			/* fds[i] at i in the worker (-1: closed) */
	unsigned nfds;			/* <= SBX_WORKER_FDS */
	const int *extra_fds;		/* at SBX_WORKER_FD_EXTRA + i */
	unsigned nextra;		/* <= SBX_WORKER_EXTRA_MAX */
	uint64_t caps_keep;		/* capabilities kept (1 << CAP_*); 0: none */
	bool seccomp_deferred;		/* not loaded: at SBX_WORKER_FD_SECCOMP instead */
	int oom_score_adj;		/* written before the exec when not 0 */
	uint64_t memory_bytes;		/* the worker's, children included; >= SBX_MIN_MEMORY */
	uint32_t pids_max;		/* >= 1 */
	uint32_t cpu_millis;		/* 0: none (sbx_worker_set_cpu later); 1000: a core */
	bool children;			/* a cgroup for its children, C above */
	uint64_t children_memory_bytes; /* C's; >= SBX_MIN_MEMORY */
	uint32_t children_pids_max;	/* >= 1 */
	/* Outlives its host (no PDEATHSIG): a host that restarts finds it by
	 * its pid (a VMM of a VM sandbox, adopted again by sandboxd). */
	bool survive_parent;
};

/* A spawned worker. The fields are the caller's to read; pid and pidfd are
 * the worker's (the caller's child: SIGCHLD at its exit). */
struct sbx_worker {
	pid_t pid;
	int pidfd;    /* -1 once reaped */
	uint64_t id;  /* names its cgroups */
	int cpu_fd;   /* its cpu quota file, or -1 (no cpu controller) */
	uint32_t cpu; /* the cpu limit written there, thousandths of a core; 0: none */
	struct sbx_workers *ws;
};

/* Makes a worker; returns once it is cloned (its set-up then runs on its
 * own). Returns 0 and *ret, -EINVAL (bad config), -ENOTSUP (no cgroups and
 * not no_cgroups), or the errno of the cgroups' set-up or the clone (then
 * nothing is left behind). Free with sbx_worker_free. */
int sbx_worker_spawn(struct sbx_workers *ws, const struct sbx_worker_config *cfg,
		     struct sbx_worker *ret);
/* Sets the worker's cpu limit (thousandths of a core, >= 10: the kernel's
 * smallest quota is 1 ms of a 100 ms period; 0: none); one pwrite, nothing
 * when it is the limit already. -ENOTSUP without a cpu controller. */
int sbx_worker_set_cpu(struct sbx_worker *w, uint32_t millis);
/* Reaps the worker if it has exited (with wait, waits for that). Returns 1
 * and *ret (may be NULL) once reaped (pidfd closed and -1), 0 while it
 * runs, -errno. */
int sbx_worker_reap(struct sbx_worker *w, bool wait, siginfo_t *ret);
/* Kills a worker still running (SIGKILL, reaped), closes its fds and
 * removes its cgroups (those the kernel still holds later, from
 * sbx_workers_tick). Accepts a zeroed struct with pidfd and cpu_fd -1. */
void sbx_worker_free(struct sbx_worker *w);
/* Lets go of a worker that runs on (survive_parent) without killing it:
 * closes its fds; its cgroups stay, for whoever adopts it (they are found
 * with sbx_worker_cgroup_path first). */
void sbx_worker_release(struct sbx_worker *w);
/* The directory of its cgroup in the hierarchy of ctrl ("pids", "memory",
 * "cpu"; on v2 any name: the one directory), or with children its
 * children's (v2: "c"; v1 cpu: none). -ENOENT, -ENAMETOOLONG. */
int sbx_worker_cgroup_path(const struct sbx_worker *w, const char *ctrl, bool children, char *buf,
			   size_t cap);
/* The OOM kills in its memory cgroup (children: in C's), from v1
 * memory.oom_control or v2 memory.events (which counts C's in W too). */
int sbx_worker_oom_kills(const struct sbx_worker *w, bool children, uint64_t *ret);
