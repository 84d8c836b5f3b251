/* sandbox-internal.h — private types of the container backend (strata_sandbox).
 *
 * Pieces: cgroup.c (v1/v2 driver and per-sandbox cgroup slots), netns.c
 * (loopback, and whether a dead sandbox's network namespace can be
 * reused), seccomp.c (the filter, compiled
 * once to BPF), child.c (everything the new sandbox process does between
 * clone3 and exec of the agent), masks.c (the masks of /proc and /sys,
 * for child.c and worker.c), sandbox.c (create/destroy), runtime.c (the
 * runtime and its pools), client.c (the synchronous agent client),
 * freezer.c (pause and resume), worker.c and worker_cgroup.c (workers,
 * worker.h). */
#pragma once
#include <limits.h>
#include <linux/filter.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>

#include "fs/cleanup.h"
#include "sandbox/container/strata_sandbox.h"

static inline void fclosep(FILE **f)
{
	if (*f)
		fclose(*f);
}

/* CG_FREEZER: v1's freezer hierarchy, where it is mounted (v2 freezes the
 * sandbox's one cgroup: cgroup.freeze). */
enum { CG_MEMORY, CG_CPU, CG_PIDS, CG_DEVICES, CG_FREEZER, CG_NCTRL };

struct cg_driver {
	int version;		       /* 0 none, 1, 2 */
	bool has[CG_NCTRL];	       /* controller usable */
	int base_fd[CG_NCTRL];	       /* our subtree per controller (v2: [0]) */
	char base[CG_NCTRL][PATH_MAX]; /* its path */
	bool memsw;		       /* v1 memory.memsw.* exists */
	/* "sbx-<pid>-<n>-": the names of this driver's slots. n tells apart
	 * the runtimes of one process, which may share a subtree (cgroup.c). */
	char prefix[32];
};

/* One sandbox's cgroups: a directory per v1 controller, or one on v2. */
struct cg_slot {
	char name[48];		/* <its driver's prefix><seq>: sbx-<pid>-<n>-<seq> */
	int dir_fd[CG_NCTRL];	/* -1 where absent; v2 uses [0] */
	int procs_fd[CG_NCTRL]; /* v1: "tasks", written "0" by the child (cgroup.c) */
	bool reused;		/* held an earlier sandbox: apply resets old limits */
	/* What cg_slot_apply last wrote, valid while applied: a reused slot
	 * with the same limits needs no write. exposed (its path was handed
	 * out by sbx_cgroup_path, so others may have written there) makes
	 * the next apply write everything again. */
	bool applied, exposed;
	uint64_t mem;
	uint32_t cpu, pids;
	/* v1, adopted: the freezer cgroup the sandbox was found in, when it
	 * is not the slot's own (an older host froze it there; freezer.c).
	 * Its dir_fd[CG_FREEZER] is that directory, never removed by us. */
	bool foreign_freezer;
};

/* version: 0 detect, 1 or 2 insist. Returns 0 or -ENOTSUP (no usable
 * controllers), -errno. */
int cg_driver_init(struct cg_driver *d, const char *name, int version);
void cg_driver_done(struct cg_driver *d);
int cg_slot_new(struct cg_driver *d, uint64_t seq, struct cg_slot **ret);
int cg_slot_apply(struct cg_driver *d, struct cg_slot *s, const struct sbx_config *c);
/* Closes and removes the slot's directories (retrying while busy). Accepts NULL. */
void cg_slot_free(struct cg_driver *d, struct cg_slot *s);
/* True when a dead sandbox's slot may serve another one: no process left in
 * it and little memory still charged to it. */
bool cg_slot_recyclable(const struct cg_driver *d, const struct cg_slot *s);
/* Closes a slot's fds and frees it, leaving the directories. */
void cg_slot_close(struct cg_slot *s);
/* The slot of a running sandbox, from /proc/<pid>/cgroup. -ESTALE if pid is
 * not in one of our slots. */
int cg_slot_adopt(struct cg_driver *d, pid_t pid, struct cg_slot **ret);
/* Opens (read-only, close-on-exec) the slot's OOM kill counter: v2
 * memory.events, v1 memory.oom_control (both have an "oom_kill N" line).
 * Returns the fd or -errno. */
int cg_slot_oom_fd(const struct cg_driver *d, const struct cg_slot *s);
int cg_slot_path(const struct cg_driver *d, const struct cg_slot *s, int ctrl, char *buf,
		 size_t cap);
/* v1, adopting pid whose slot has no freezer directory of its own (made by
 * an older host, which froze sandboxes in a freezer cgroup of its own): the
 * freezer cgroup pid is in, if that is not the hierarchy's root and holds
 * nothing but processes of the slot (so that freezing it freezes nobody
 * else). Opens it into s->dir_fd[CG_FREEZER]; -ENOENT when there is none. */
int cg_slot_adopt_freezer(struct cg_driver *d, pid_t pid, struct cg_slot *s);

/* freezer.c: what the kernel was asked of the slot's freezer (v1
 * freezer.self_freezing, v2 cgroup.freeze): 1 freeze, 0 not, or -errno
 * (-EOPNOTSUPP: the slot has no freezer). */
int cg_freeze_requested(const struct cg_driver *d, const struct cg_slot *s);
/* freezer.c: asks the kernel to thaw the slot (a no-op without a freezer):
 * v1 freezer.state THAWED, v2 cgroup.freeze 0. Returns 0 or -errno. */
int cg_thaw(const struct cg_driver *d, const struct cg_slot *s);
/* freezer.c: after the SIGKILL of a paused sandbox, thaws it (on v1 a
 * frozen task dies only once thawed); no longer paused. */
void sbx_thaw_killed(struct sbx *s);
int cg_ctrl_index(const char *name);
/* One write(2) of val to the cgroup file dirfd/file. Returns 0 or -errno.
 * No malloc (as cg_limit_*: a clone child writes its own limits). */
int cg_write_at(int dirfd, const char *file, const char *val);
/* Reads a small cgroup file into buf (NUL-terminated). Returns its length
 * or -errno. */
ssize_t cg_read_at(int dirfd, const char *file, char *buf, size_t cap);

/* cgroup.c's pieces that worker_cgroup.c uses too. */
/* 1: v1 hierarchies carry memory and pids; 2: a cgroup2 mount (and no
 * such v1 ones); 0: neither. */
int cg_detect_version(void);
/* The directory of our own cgroup in the v1 hierarchy of ctrl. */
int cg_own_dir(const char *ctrl, char *path, size_t cap);
/* The memory limit, swap included: v1 memory.limit_in_bytes and (where
 * swap is accounted) memory.memsw.limit_in_bytes, lifting an earlier
 * memsw first with lift_swap; v2 memory.max and memory.swap.max 0. */
int cg_limit_memory(int version, int dirfd, uint64_t mem, bool lift_swap);
int cg_limit_pids(int dirfd, uint32_t pids);
/* The cpu limit's file (v1 cpu.cfs_quota_us, v2 cpu.max) and what to
 * write there for millis thousandths of a core over a 100 ms period (0: no
 * limit). Returns the length or -ENAMETOOLONG. */
const char *cg_cpu_file(int version);
int cg_cpu_value(int version, uint32_t millis, char *buf, size_t cap);

/* worker_cgroup.c: workers' cgroups (worker.h has the layout). */
enum { WCG_PIDS, WCG_MEMORY, WCG_CPU, WCG_N }; /* v1 hierarchies; v2: [0] */
struct wcg {
	int version;		    /* 0: none */
	bool has_cpu;		    /* workers get a cpu limit */
	char name[64];		    /* the subtree's */
	char base[WCG_N][PATH_MAX]; /* v1: <own>/<name> (cpu: <own>); v2: [0] */
	pid_t owner;		    /* names the directories: w<owner>-<id> */
	uint64_t next_id;
	uint64_t *pending; /* workers whose directories are to be removed again */
	size_t npending;
};
/* What a worker's cgroups need, opened by the host before the clone (-1:
 * none). */
struct wcg_dirs {
	int dir[WCG_N]; /* W per hierarchy (v2: [0]) */
	int kids[2];	/* C in pids and memory (v2: [0]) */
	int into;	/* v2: where clone3 places the worker (W, or W/t) */
	int join[2];	/* C's join files: v1 pids and memory tasks, v2 [0] cgroup.procs */
	int oom;	/* C's OOM counter */
	int cpu_fd;	/* W's cpu limit file, for writing */
};
struct wcg_limits {
	uint64_t memory, children_memory;
	uint32_t pids, children_pids;
};
/* Detects the version, makes the subtree <name>, sweeps dead hosts'. */
void wcg_init(struct wcg *g, const char *name);
void wcg_done(struct wcg *g);
void wcg_dirs_init(struct wcg_dirs *d);
void wcg_dirs_close(struct wcg_dirs *d);
/* In the host: worker id's directories (with C for children), opened. */
int wcg_prepare(const struct wcg *g, uint64_t id, bool children, struct wcg_dirs *d);
/* In the worker: joins (v1) and writes the limits. 0, or -1 and errno. */
int wcg_enter(const struct wcg *g, const struct wcg_dirs *d, const struct wcg_limits *l);
/* Removes worker id's directories, or remembers to retry (wcg_retry). */
void wcg_remove(struct wcg *g, uint64_t id);
void wcg_retry(struct wcg *g);
int wcg_path(const struct wcg *g, uint64_t id, const char *ctrl, bool children, char *buf,
	     size_t cap);

/* Brings "lo" up in the caller's current network namespace. */
int netns_lo_up(void);
/* An fd of the network namespace of process pid, or -errno. */
int netns_open(pid_t pid);
/* A sandbox's network namespace ("none"), kept for reuse: the namespace,
 * an O_PATH of a sysfs mount of it (held so that its superblock lives on:
 * the next /sys mount there is not a new one) and the files
 * netns_recyclable reads, opened at its first check (kept: all of them
 * are, absent ones -1). */
#define NETNS_FILES 5
struct netns {
	int fd, sys_fd;		/* -1 when absent */
	int files[NETNS_FILES]; /* netns.c nf_names */
	bool kept;
};
/* All fds -1. */
void netns_init(struct netns *ns);
/* Closes what it holds; netns_init. */
void netns_close(struct netns *ns);
/* True when a network namespace whose processes are all gone holds nothing
 * of them (no socket, fragment or flow label; only lo, as we set it up), so
 * that another sandbox may join it. Its first check enters it for a moment
 * on the calling thread (setns) and keeps the files it reads; later ones
 * read those. */
bool netns_recyclable(struct netns *ns, int home);
/* A sandbox's IPC namespace, kept for reuse: the namespace and the root
 * of its mqueue filesystem (a directory fd of the sandbox's /dev/mqueue). */
struct ipcns {
	int ns_fd, mq_fd; /* -1 when absent */
};
/* The IPC namespace of staged sandbox pid and its mqueue root, or -errno. */
int ipcns_open(pid_t pid, struct ipcns *ret);
/* True when an IPC namespace whose processes are all gone holds nothing of
 * them: no SysV shared memory, message queue or semaphore set, no POSIX
 * message queue, its mqueue root as made. Enters it for a moment on the
 * calling thread (setns). */
bool ipcns_recyclable(const struct ipcns *ns, int home);
void ipcns_close(struct ipcns *ns);

/* Builds the seccomp filter and returns it as a sealed memfd holding the raw
 * BPF program (struct sock_filter[]). */
int seccomp_build(int *ret_fd);
/* The same filter as libseccomp builds it (seccomp_build's fallback, and
 * the reference its own program is tested against). */
int seccomp_build_libseccomp(int *ret_fd);
/* Capabilities a sandbox keeps (bit mask). */
uint64_t sbx_caps_keep(void);

/* masks.c: sbx_masks.h's lists, applied below the cwd (its proc/ and sys/
 * mounted already). null: a path of /dev/null, bound over files; *empty: an
 * empty read-only directory, bound over directories, or NULL: the first
 * directory gets an empty read-only tmpfs, and *empty is then that one.
 * present (MASK_LISTS masks: bit i of [k], entry i of list k exists; NULL:
 * try each) skips paths the kernel lacks; absent ones are no failure.
 * Return 0 or -1 with errno. No malloc. */
enum { MASK_PROC_FILES, MASK_PROC_DIRS, MASK_PROC_RO, MASK_SYS_DIRS, MASK_SYS_FILES, MASK_LISTS };
int masks_proc(const char *null, const char **empty, const uint32_t *present);
int masks_sys(const char *null, const char **empty, const uint32_t *present);
/* Which masked paths this kernel has, seen in a fresh proc and sysfs
 * mounted for a moment on dir (a sandbox's proc of another pid namespace
 * and sysfs of another network namespace have the same ones). Any doubt
 * sets every bit: staging then tries them all, absent ones being fine. */
void masks_scan(const char *dir, uint32_t present[MASK_LISTS]);
/* The /proc lists as JSON, [[files], [directories], [read-only]], absolute
 * paths: for a worker that masks a /proc it mounts later. Returns 0 or
 * -ENOSPC. */
int masks_proc_json(char *buf, size_t cap);

/* Everything the child needs, computed before clone3 (the child must not
 * allocate: another thread of the parent may hold the malloc lock). */
struct child_args {
	int mntns_fd; /* the runtime's template mount namespace (mntns_template) */
	char tmpfs_opts[64];
	bool new_netns;		/* clone made a network namespace: lo must be brought up */
	int netns_fd;		/* else a reused one to join (setns), or -1 (host network) */
	int ipcns_fd;		/* a reused IPC namespace to join, or -1 (clone made one) */
	bool cgroupns;		/* unshare a cgroup namespace after joining */
	int procs_fd[CG_NCTRL]; /* v1 "tasks" files to join, -1 if none */
	int agent_fd;		/* memfd with the agent */
	int seccomp_fd;		/* memfd with the BPF program */
	uint32_t masks_present[MASK_LISTS]; /* bit i of [k]: entry i of mask list k exists */
	int sock_fd;			    /* agent end of the socketpair */
	int err_fd;			    /* write end of the error pipe (clone3), or -1 */
	int *status;			    /* or (clone_vm) where a failure's {step, errno} goes */
	bool files_shared;		    /* cloned with CLONE_FILES: unshare (close_range) */
};

/* Runs in the child; never returns. On failure reports {step, errno} in
 * *status (clone_vm), else to err_fd, and exits 127. */
_Noreturn void child_main(const struct child_args *a);
/* child_main for clone(CLONE_VM): runs on its own stack in its parent's
 * memory. child.c is compiled without ASan, whose no-return bookkeeping
 * would otherwise see a foreign stack. */
int child_main_vm(void *arg);
/* A mount namespace holding nothing but an empty read-only tmpfs root with
 * the directories /s (where each sandbox mounts its staging tmpfs) and /e
 * (empty, bound over masked directories), made by a helper process with
 * dir (an empty host directory) as the mount point; an fd of it in *ret_fd.
 * Every staging child starts from a copy of it instead of the host's. */
int mntns_template(const char *dir, int *ret_fd, uint32_t present[MASK_LISTS]);
/* The function of the short-lived child that holds a new user namespace
 * while userns.c writes its maps (clone(CLONE_VM) on a stack of ours, so
 * in child.c, without ASan): waits until the pipe fd *arg reads EOF. */
int child_userns_wait(void *arg);
/* Names a failing child step for messages. */
const char *child_step_name(int step);

/* Threads that refill the pool. Staging no longer waits for RCU grace
 * periods (the v1 join writes "tasks", and teardown waits are the
 * reaper's), so two keep a pool ahead of one caller; under load, callers
 * of an empty pool stage inline (no hand-off, cheaper) up to
 * SBX_STAGING_MAX at once. Four cost ~3 % more CPU per creation at
 * concurrency 8 (wake-ups, hand-offs), for the same rate. */
#define SBX_POOL_THREADS 2
/* The staging child's stack (child.c runs on it until its exec, in our
 * memory); one per staging that may run at once is kept for the next. */
#define SBX_CHILD_STACK_SIZE (256u << 10)
/* Stagings that can run at once with a small fd table for their child:
 * the pool threads and a few inline ones (more fall back to a full copy). */
#define SBX_RSV_FDS 12
/* Stagings of network "none" sandboxes at once (pool threads and callers
 * of an empty pool): each holds a reserved fd (SBX_RSV_FDS). */
#define SBX_STAGING_MAX SBX_RSV_FDS

struct pool {
	pthread_mutex_t lock;
	pthread_cond_t wake, filled;
	pthread_cond_t avail; /* a staged sandbox or a staging slot came free */
	pthread_t threads[SBX_POOL_THREADS];
	unsigned n_threads; /* started */
	bool stop;
	int err;	     /* first error of the pool thread; it then stops filling */
	struct sbx **staged; /* staged sandboxes with network "none" */
	unsigned n, want;
	unsigned staging;  /* being staged by a pool thread right now */
	unsigned inline_n; /* being staged inline by sbx_create (network "none") */
	/* The reaper (runtime.c): an epoll set of killed sandboxes' pidfds
	 * (data.ptr: the sbx; NULL: reap_evfd, which wakes it to stop). */
	int reap_epfd, reap_evfd;
	pthread_t reaper;
	bool reaper_started, reap_stop;
	unsigned reaping; /* killed sandboxes in the set, not finished yet */
};

/* layer.c: the filesystem of a runtime's writable layers (see there). */
struct layer_fs {
	bool quota;	     /* layers on disk with project quotas; else on tmpfs */
	bool failed;	     /* SBX_DISK_QUOTA was asked for and cannot be had */
	bool mounted;	     /* dir is the runtime's image mount */
	bool disk_dir_given; /* dir is the operator's (never unmounted) */
	bool edquot;	     /* ext4: a full layer answers EDQUOT, not ENOSPC */
	int dir_fd, lock_fd;
	dev_t dev;
	uint32_t next_id; /* atomically incremented */
	/* The limits staging gives new layers: those of the last create
	 * (atomic), so that a steady stream of creates with the same disk
	 * limits sets no quota on their path. */
	uint64_t stage_bytes, stage_inodes;
	char dir[PATH_MAX];
	char image[PATH_MAX];
	char reason[256]; /* what is used, or why tmpfs */
};
/* One sandbox's layer: project id (= directory p<id>), its detached bind
 * (sent with START, then closed; -1) and the limits set. */
struct layer {
	uint32_t id; /* 0: none (tmpfs) */
	int tree_fd;
	uint64_t bytes, inodes;
};
/* The staging defaults of sbx_create (its limits when the config has none). */
#define SBX_DEFAULT_DISK (256ull << 20)
#define SBX_DEFAULT_DISK_INODES (SBX_DEFAULT_DISK / 2048)
/* Sets up (or finds) the layers' filesystem; on failure L->quota is false
 * and L->reason says why. Never fails otherwise. */
void layer_fs_init(struct layer_fs *L, const struct sbx_runtime_config *cfg, const char *state_dir);
/* Closes; unmounts the runtime's image when no layer is left in it. */
void layer_fs_done(struct layer_fs *L);
/* A new layer with the staging limits (stage_bytes, stage_inodes). */
int layer_new(struct layer_fs *L, struct layer *ret);
/* Records the agent that holds the layer (found again by the sweep). */
void layer_set_owner(struct layer_fs *L, uint32_t id, pid_t pid);
/* Sets the limits (nothing to do when they are those already set) and
 * makes them the staging limits. */
int layer_limit(struct layer_fs *L, struct layer *l, uint64_t bytes, uint64_t inodes);
/* Bytes and inodes charged to layer id. */
int layer_usage(const struct layer_fs *L, uint32_t id, uint64_t *ret_bytes, uint64_t *ret_inodes);
/* The layer of the running agent pid (the project of its root's upper
 * directory): -ENOENT when it has none, -ESTALE when not this runtime's. */
int layer_adopt(const struct layer_fs *L, pid_t pid, struct layer *ret);
/* Removes layer id's directory and frees the id (0: nothing to do). */
int layer_free(struct layer_fs *L, uint32_t id);

/* userns.c: a sandbox's user namespace: ids 0..SBX_USERNS_SIZE-1 inside
 * are SBX_USERNS_BASE + idx * SBX_USERNS_SIZE.. outside; lock_fd holds the
 * range (an flock on SBX_USERNS_DIR/<idx>, shared by every runtime of the
 * machine). fd -1: none (made without, or adopted without one). */
#define SBX_USERNS_BASE 0x10000000u
#define SBX_USERNS_SIZE 65536u
#define SBX_USERNS_MAX 4096u /* ranges up to 0x20000000 */
#define SBX_USERNS_DIR "/run/strata-userns"
struct userns {
	int fd, lock_fd;
	uint32_t idx;
};
void userns_init(struct userns *u);
/* The host uid (and gid) of root inside, 0 without a namespace. */
uint32_t userns_base(const struct userns *u);
/* A free range and a new namespace mapping it; -EUSERS when every range
 * is taken. */
int userns_new(struct sbx_runtime *rt, struct userns *ret);
/* Records the range's agent in its file (found by other runtimes). */
void userns_set_owner(struct userns *u, pid_t pid);
/* The namespace and range of the running agent pid (locked again):
 * -ENOENT when it has none, -ESTALE when its map is not one of ours. */
int userns_adopt(pid_t pid, struct userns *ret);
/* Closes; the range stays recorded for its agent (released sandboxes). */
void userns_close(struct userns *u);
/* Closes and frees the range (its agent is gone). */
void userns_free(struct userns *u);

/* Empty cgroup slots and network and IPC namespaces of destroyed sandboxes
 * kept for reuse (under pool.lock). At concurrency 64 the number in use
 * swings by more than 64 (exits finish in bursts, after RCU grace periods):
 * with 64 spares a fifth of the stagings made new ones (mkdir, memcg
 * online, setup_net) while others were being removed. */
#define SBX_SPARE_SLOTS 256
#define SBX_SPARE_NETNS 256
#define SBX_SPARE_IPCNS 256
#define SBX_SPARE_USERNS 256
#define SBX_USERNS_FS_TYPES 16

struct sbx_runtime {
	char *state_dir, *staging;
	struct cg_slot *spare[SBX_SPARE_SLOTS];
	unsigned n_spare;
	struct netns spare_net[SBX_SPARE_NETNS]; /* network namespaces with only lo */
	unsigned n_spare_net;
	struct ipcns spare_ipc[SBX_SPARE_IPCNS]; /* IPC namespaces holding nothing */
	unsigned n_spare_ipc;
	struct userns spare_userns[SBX_SPARE_USERNS]; /* ranges of ended sandboxes */
	unsigned n_spare_userns;
	uint32_t userns_next; /* the range to try first (atomic) */
	/* sbx_runtime_userns_check's answers, per filesystem type (statfs
	 * f_type), under pool.lock. */
	struct userns_fs {
		long f_type;
		int r;
		char why[160];
	} userns_fs[SBX_USERNS_FS_TYPES];
	unsigned n_userns_fs;
	/* The kernel refused to make a user namespace (not a passing
	 * shortage): every later check says so at once. */
	int userns_make_r;
	char userns_make_why[160];
	void *stacks[SBX_STAGING_MAX]; /* stacks of staging children (sandbox.c) */
	unsigned n_stacks;
	/* Low fd numbers, reserved at start-up, for the socket ends of
	 * staging children (a copy of /dev/null holds them between
	 * stagings), so that a child's own fd table stays small (child.c,
	 * FDS). rsv_busy: bit i, rsv_fd[i] is in use (atomic). */
	int rsv_fd[SBX_RSV_FDS], rsv_null;
	uint32_t rsv_busy;
	/* The network and IPC namespaces the pool threads run in (those of the
	 * thread that made the runtime): where they return after looking into
	 * a dead sandbox's (netns_recyclable, ipcns_recyclable). */
	int home_net_fd, home_ipc_fd;
	uint32_t masks_present[MASK_LISTS]; /* which masked paths exist (masks_scan) */
	bool fresh_netns;		    /* never reuse network or IPC namespaces */
	int mntns_fd;			    /* the template mount namespace (mntns_template) */
	int agent_fd;			    /* sealed memfd with strata-agent */
	int seccomp_fd;			    /* sealed memfd with the BPF program */
	struct cg_driver cg;
	struct layer_fs layers;
	struct pool pool;
	uint64_t seq; /* atomically incremented */
};

/* A sandbox; before START it is "staged" (pooled). */
struct sbx {
	struct sbx_runtime *rt;
	pid_t pid;
	int pidfd;
	int ctl;	    /* host end of the protocol stream */
	struct netns netns; /* its network namespace ("none"; fd -1 if unknown), reused after it */
	struct ipcns ipc;   /* its IPC namespace (-1 if unknown), reused after it */
	struct cg_slot *cg;
	struct layer layer;   /* its writable layer on disk (id 0: on its tmpfs) */
	struct userns userns; /* fd -1: none (config userns false) */
	enum sbx_network net;
	bool persist; /* survives its stream; released, not killed, by sbx_release */
	uint32_t next_id;
	struct sbx_chan *chan; /* client.c: the requests in flight on ctl (NULL: none yet) */
	/* freezer.c: paused (its cgroup frozen by sbx_pause, or found asked
	 * to freeze at adoption). An adopted paused sandbox has no channel
	 * (ctl -1) until sbx_resume takes it: its agent cannot answer. */
	bool paused;
	bool freezing; /* freezer.c: asked to freeze, not frozen yet (sbx_pause_start) */
	char cg_path[PATH_MAX];
};

/* client.c: frees the channel (ops still linked are only unlinked: their
 * owners free them). */
void client_chan_free(struct sbx *s);

/* adopt.c: takes the channel of an adopted agent (pidfd_getfd), checks its
 * peer and reads HELLO; a no-op when connected. Returns 0, -ENOTCONN,
 * -EPERM, -ETIMEDOUT, -ESRCH. */
int sbx_adopt_finish(struct sbx *s);

/* sandbox.c: reads the agent's HELLO within the start timeout. */
int sbx_wait_hello(struct sbx *s);
/* sandbox.c: reads frames (dropping others) until the reply of type and id,
 * each within timeout_ms; its status in *ret_status. Returns 0 or -errno. */
int sbx_wait_reply(struct sbx *s, uint16_t type, uint32_t id, int timeout_ms, int *ret_status);
/* sandbox.c: starts a staged sandbox (clone3, child.c, agent HELLO). */
int sbx_stage(struct sbx_runtime *rt, enum sbx_network net, struct sbx **ret);
/* runtime.c: a free reserved fd number (its index), or -1. */
int rsv_take(struct sbx_runtime *rt);
void rsv_give(struct sbx_runtime *rt, int i);
/* runtime.c: a staged sandbox from the pool, or NULL with *ret_inline
 * true: the caller stages one itself and then calls pool_inline_done.
 * Waits for the pool when SBX_STAGING_MAX stagings run already. */
struct sbx *pool_take(struct sbx_runtime *rt, bool *ret_inline);
void pool_inline_done(struct sbx_runtime *rt);
/* runtime.c: wakes the pool thread to refill. */
void pool_kick(struct sbx_runtime *rt);
/* runtime.c: hands a killed sandbox to the reaper, which finishes it
 * (sbx_finish) once its agent has exited; s may be gone when this returns
 * 0. Else -EBADF (no pidfd), -ESHUTDOWN or -errno, and the caller frees it
 * itself. */
int pool_reap(struct sbx_runtime *rt, struct sbx *s);
/* runtime.c: an empty slot kept from a destroyed sandbox, or NULL. */
struct cg_slot *slot_take(struct sbx_runtime *rt);
/* runtime.c: keeps a dead sandbox's slot for reuse if it can, else removes it. */
void slot_recycle(struct sbx_runtime *rt, struct cg_slot *cg);
/* runtime.c: a network namespace kept from a destroyed sandbox in *ret
 * (fd -1 if none). */
void net_take(struct sbx_runtime *rt, struct netns *ret);
/* runtime.c: keeps a dead sandbox's network namespace for reuse if
 * netns_recyclable, else closes it; *ns is left empty. Accepts fd -1. */
void net_recycle(struct sbx_runtime *rt, struct netns *ns);
/* runtime.c: an IPC namespace kept from a destroyed sandbox ({-1, -1} if none). */
struct ipcns ipc_take(struct sbx_runtime *rt);
/* runtime.c: keeps a dead sandbox's IPC namespace (owned) for reuse if
 * ipcns_recyclable, else closes it. */
void ipc_recycle(struct sbx_runtime *rt, struct ipcns *ns);
/* runtime.c: a user namespace and range for a new sandbox: a spare one of
 * an ended sandbox, else a new one (userns_new). */
int userns_take(struct sbx_runtime *rt, struct userns *ret);
/* runtime.c: keeps an ended sandbox's user namespace and range for the next
 * one, else frees them; *u is left empty. Accepts fd -1. */
void userns_recycle(struct sbx_runtime *rt, struct userns *u);
/* sandbox.c: SIGKILL and close the stream (no waiting). */
void sbx_kill(struct sbx *s);
/* sandbox.c: kill, wait for every process, remove the cgroups, free. */
void sbx_free_now(struct sbx *s);
/* sandbox.c: sbx_free_now of a sandbox whose agent has exited (its pidfd is
 * readable): reap it, recycle or remove the cgroup slot and namespaces, free. */
void sbx_finish(struct sbx *s);

/* client.c: reads one frame into *buf (grown as needed) within timeout_ms. */
struct ag_hdr;
int client_read_frame(int fd, struct ag_hdr *h, uint8_t **buf, size_t *cap, int timeout_ms);
