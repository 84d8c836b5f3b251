/* strata_sandbox.h — the container backend: isolated sandboxes on a root
 * filesystem directory, each run by strata-agent as its pid 1.
 *
 * A runtime (sbx_runtime) holds what all sandboxes share and what is prepared
 * ahead of time: the agent binary (sealed in a memfd), the compiled seccomp
 * program, the cgroup driver (v1 or v2, detected) and a pool of staged
 * sandboxes (namespaces, cgroup, /dev, /proc, /sys and the agent ready, the
 * root filesystem not yet chosen) refilled by background threads, which also
 * finish the teardown of destroyed sandboxes. A sandbox (sbx) is an overlay
 * root over the rootfs with a size-limited writable layer (on disk with a
 * project quota per sandbox where the machine allows, else a tmpfs inside
 * its memory limit: sbx_runtime_disk_quota), new mount, pid,
 * uts, ipc, net and cgroup namespaces, a masked /proc and /sys, a minimal
 * /dev, dropped capabilities, no_new_privs and seccomp, and the agent on the
 * other end of a socketpair. sbx_exec and sbx_file_* are a
 * synchronous client of the agent protocol; sbx_exec_op_* is the same exec
 * driven by the caller's event loop (no thread, nothing blocks), many at
 * once on the sandbox's channel. sbx_pause/sbx_resume freeze and thaw
 * every process of a sandbox (freezer.c).
 *
 * All functions return 0 or a negative errno; output parameters are ret_*,
 * last, untouched on failure. Thread safety: a runtime may be used from many
 * threads; one sandbox from one thread at a time. The library never logs. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbx_runtime;
struct sbx;

struct sbx_runtime_config {
	const char *agent_path;	 /* strata-agent binary (required) */
	const char *state_dir;	 /* private dir for staging mounts; created; required */
	const char *cgroup_name; /* our cgroup subtree, below our own cgroup; "strata-sandbox" */
	unsigned pool_size;	 /* staged sandboxes kept ready (0 = stage inline) */
	bool no_cgroups;	 /* run without cgroups (no limits at all) */
	int cgroup_version;	 /* 0 = detect; 1 or 2 = insist (else -ENOTSUP) */
	/* Network "none" namespaces are reused once nothing of their sandbox
	 * is left in them (no socket, only lo); what carries over is lo's
	 * cumulative traffic counters. true: a fresh namespace every time. */
	bool fresh_netns;
	/* Where the writable layers live (layer.c): SBX_DISK_AUTO on disk with
	 * a project quota per sandbox where the machine allows, else on a
	 * tmpfs per sandbox (in memory, counted against its memory limit);
	 * SBX_DISK_QUOTA insists on disk (sbx_runtime_new fails otherwise);
	 * SBX_DISK_TMPFS always in memory. */
	int disk_mode;
	/* An existing directory on XFS or ext4 mounted with prjquota to hold
	 * the layers; NULL: a sparse XFS image, loop-mounted on
	 * state_dir/layers, made on first use. */
	const char *disk_dir;
	const char *disk_image;	   /* the image; NULL = state_dir/layers.img */
	uint64_t disk_image_bytes; /* its size when made; 0 = 64 GiB or 90 % of the free space */
};

enum { SBX_DISK_AUTO = 0, SBX_DISK_QUOTA = 1, SBX_DISK_TMPFS = 2 };

/* Returns 0 and a runtime, or -ENOTSUP (no usable cgroup controllers, no
 * overlayfs), -EPERM (not root), -ENOENT (agent missing), -errno. Fills the
 * pools before returning. Free with sbx_runtime_free. */
int sbx_runtime_new(const struct sbx_runtime_config *cfg, struct sbx_runtime **ret);
/* Finishes queued teardowns, stops the pool threads, destroys the staged
 * sandboxes and removes the cgroup subtree if empty. Sandboxes must have
 * been destroyed or released. Accepts NULL. */
void sbx_runtime_free(struct sbx_runtime *rt);
/* 1 or 2: the cgroup version in use; 0 with no_cgroups. */
int sbx_runtime_cgroup_version(const struct sbx_runtime *rt);
/* True when the writable layers are on disk with a quota per sandbox
 * (disk_bytes is a disk limit, ENOSPC past it, outside the memory limit);
 * false when they are tmpfs (in memory). *ret_reason (may be NULL) says
 * which filesystem, or why not; it lives as long as rt. */
bool sbx_runtime_disk_quota(const struct sbx_runtime *rt, const char **ret_reason);

/* Whether sandboxes over rootfs can have a user namespace here
 * (sbx_config.userns): the runtime can make one, and rootfs's filesystem
 * can be idmapped into it (tried once per filesystem type, then cached),
 * on a kernel whose overlayfs takes idmapped lower layers (5.19).
 * rootfs NULL: only whether user namespaces can be made at all.
 * Returns 0, or -errno with the reason in why[0..cap) (e.g. "the image's
 * 9p filesystem does not support idmapped mounts"). Thread-safe. */
int sbx_runtime_userns_check(struct sbx_runtime *rt, const char *rootfs, char *why, size_t cap);

/* The sandboxes' seccomp filter, for processes sandboxed elsewhere (sandboxd's
 * fncall Python workers). Returns 0 and *ret_fd, a sealed close-on-exec memfd
 * holding the raw BPF program (struct sock_filter[], at most 64 KiB; load it
 * with PR_SET_SECCOMP after PR_SET_NO_NEW_PRIVS); the caller closes it. */
int sbx_seccomp_program(int *ret_fd);

/* cgroup v2: the directory (under the cgroup2 mount) below which this
 * process makes its cgroups, with memory, pids and cpu (where the kernel
 * has it) enabled for its children: our own cgroup, once it holds no
 * process. A process below the root shares its cgroup with nobody
 * (a systemd service, Delegate=yes) but sits in it itself, and a cgroup
 * with processes cannot enable controllers for children: the first call
 * moves the whole process into the leaf <own>/SBX_CGROUP_SELF, and every
 * later one (also after a restart in the same cgroup) answers <own>
 * again. -EBUSY when other processes share our cgroup, -ENOENT without
 * cgroup2. Used by the runtime (cgroup.c) and sandboxd's fncall workers,
 * so that both build in the same place. */
#define SBX_CGROUP_SELF "strata-self"
int sbx_cgroup_v2_base(char *buf, size_t cap);

/* The open-file soft limit a sandbox starts with: the usual 1024 (Docker's
 * too). The strata daemons raise their own to the hard limit (fs/daemon.h);
 * sbx_sandbox_fd_limit() gives it back in the first process of a sandbox,
 * before its exec (no malloc: safe in a clone child). The hard limit stays. */
#define SBX_SANDBOX_NOFILE 1024
void sbx_sandbox_fd_limit(void);

enum sbx_network { SBX_NET_NONE = 0, SBX_NET_HOST = 1 };

#define SBX_MIN_MEMORY (16ull << 20)
#define SBX_MIN_DISK (1ull << 20)
#define SBX_MIN_DISK_INODES 16ull

struct sbx_config {
	const char *rootfs;    /* lower layer (a directory; later an image mount) */
	const char *hostname;  /* default "sandbox" */
	uint64_t memory_bytes; /* 0 = 512 MiB; else >= SBX_MIN_MEMORY */
	uint32_t cpu_millis;   /* 0 = unlimited; 1000 = one core */
	uint32_t pids_max;     /* 0 = 1024; else >= 2 (the agent is one) */
	uint64_t disk_bytes;   /* writable layer; 0 = 256 MiB; else >= SBX_MIN_DISK */
	uint64_t disk_inodes;  /* its files; 0 = disk_bytes / 2048, at least 8192;
				  else >= SBX_MIN_DISK_INODES */
	enum sbx_network network;
	bool persist; /* outlives its host: see sbx_release and sbx_adopt */
	/* In a user namespace: ids 0..65535 inside are an unprivileged range
	 * of host ids (sbx_uid_base), root inside is nobody outside; the
	 * rootfs must be on a filesystem that allows idmapped mounts. false
	 * (for now the default): root inside is root outside. */
	bool userns;
	uint32_t orphan_timeout_ms; /* persistent: ends after this long without a
				       host (0 = never) */
};

/* Creates and starts a sandbox (a staged one from the pool when there is
 * one) and returns when its agent is ready. Returns 0 and *ret, -EINVAL (bad
 * config: relative rootfs, limits below the minimums, hostname empty or
 * over 64 bytes), -ENOENT/-ENOTDIR (no rootfs), or the errno of the failing
 * set-up step. On failure nothing is left behind. Destroy with sbx_destroy. */
int sbx_create(struct sbx_runtime *rt, const struct sbx_config *cfg, struct sbx **ret);
/* Kills every process of the sandbox (SIGKILL, at once) and frees s; waiting
 * for them and removing the cgroups continue on the runtime's thread (the
 * mounts go with the sandbox's mount namespace). sbx_runtime_free waits for
 * that. Accepts NULL. */
void sbx_destroy(struct sbx *s);

/* What the sandbox's writable layer holds: bytes and inodes charged to its
 * quota, or used on its tmpfs. Returns 0, -ESRCH (gone), -errno. */
int sbx_disk_usage(struct sbx *s, uint64_t *ret_bytes, uint64_t *ret_inodes);

pid_t sbx_pid(const struct sbx *s); /* host pid of the agent */
/* The host uid (= gid) that is uid 0 inside: ids 0..65535 inside are
 * base..base+65535 outside. 0: no user namespace (userns false), root
 * is root. */
uint32_t sbx_uid_base(const struct sbx *s);
int sbx_agent_fd(const struct sbx *s); /* host end of the protocol stream */
/* The sandbox's cgroup directory for controller ctrl ("memory", "pids",
 * "cpu"; on v2 any name gives the one directory), or NULL. */
const char *sbx_cgroup_path(const struct sbx *s, const char *ctrl);
/* The name of the sandbox's cgroup directory ("sbx-..."), the last component
 * of every sbx_cgroup_path, or NULL. Unlike sbx_cgroup_path it does not mark
 * the slot as handed out (the next sandbox in it need not rewrite limits). */
const char *sbx_cgroup_name(const struct sbx *s);

/* ---- exec ------------------------------------------------------------------ */

struct sbx_exec_opts {
	const char *const *argv; /* required, NULL-terminated */
	const char *const *env;	 /* NULL = PATH and HOME only */
	const char *cwd;	 /* NULL = "/" */
	const char *user;	 /* "name", "uid" or "uid:gid"; NULL = root */
	uint32_t timeout_ms;	 /* 0 = none */
	uint64_t output_cap;	 /* stdout+stderr bytes forwarded; 0 = 16 MiB */
	const void *stdin_data;	 /* NULL = /dev/null */
	size_t stdin_len;	 /* <= 1 MiB */
	/* Interactive stdin: stdin stays open (after stdin_data, if any) and is
	 * fed by sbx_exec_stdin from another thread while sbx_exec runs.
	 * on_stdin is called on sbx_exec's thread: once the command started,
	 * with status SBX_STDIN_STARTED (the agent acknowledges chunks) or
	 * SBX_STDIN_STARTED_NOACK (an agent older than 1.1: it does not), and
	 * exec_id for sbx_exec_stdin; then once per chunk sent with ack, with
	 * the agent's answer: 0, -EPIPE (the command's stdin is closed or it
	 * ended), -ENOBUFS (over 4 MiB not yet read by the command: the chunk
	 * was dropped, stdin stays open); pending = bytes not yet read. */
	bool stdin_stream;
	void (*on_stdin)(void *userdata, uint32_t exec_id, int status, uint32_t pending);
	/* The exec's id on the stream, chosen by the caller so that it finds
	 * the exec again after a restart (sbx_execs_list): 0 = the library
	 * picks one, else it must have SBX_EXEC_ID_CALLER set and not be in
	 * flight (sbx_exec_op_start only). */
	uint32_t id;
};

#define SBX_EXEC_ID_CALLER 0x80000000u

#define SBX_STDIN_STARTED 1
#define SBX_STDIN_STARTED_NOACK 2
#define SBX_STDIN_MAX_CHUNK (1u << 20)

/* The step of a command's start that failed (the agent's AG_STEP_*). */
enum sbx_exec_step {
	SBX_STEP_UNKNOWN = 0, /* not said (an older agent), or before the agent */
	SBX_STEP_USER = 1,    /* no such user in the sandbox's /etc/passwd */
	SBX_STEP_CWD = 2,     /* chdir to the working directory */
	SBX_STEP_IDS = 3,     /* switching to the user's uid and gid */
	SBX_STEP_EXEC = 4,    /* finding and executing the command */
	SBX_STEP_SETUP = 5,   /* pipes, the process, its stdio */
};

struct sbx_exec_result {
	int exit_code;			     /* -1 if killed by a signal */
	int signo;			     /* the killing signal, else 0 */
	bool timed_out;			     /* killed at timeout_ms */
	bool truncated;			     /* output beyond output_cap was dropped */
	uint64_t stdout_bytes, stderr_bytes; /* produced, including dropped */
	uint64_t duration_us;
	bool oom_killed; /* died of SIGKILL while the sandbox's OOM kill count rose */
	/* A command that could not start: the exec's exit callback gets r < 0
	 * (the errno) and a result with only this set: the step that failed. */
	enum sbx_exec_step failed_step;
};

/* Called for every output chunk as it arrives; stream 1 = stdout, 2 = stderr.
 * Return 0 to go on, negative to stop waiting (the exec is killed). */
typedef int (*sbx_output_fn)(void *userdata, int stream, const void *data, size_t len);

/* Runs a command and waits for it. Returns 0 and *ret when it ran (whatever
 * its exit), -ENOENT/-EACCES/... when it could not start (then *ret holds
 * only failed_step, when the agent said it), -ETIMEDOUT when the
 * agent did not answer, -EPIPE when the sandbox is gone. */
int sbx_exec(struct sbx *s, const struct sbx_exec_opts *opts, sbx_output_fn fn, void *userdata,
	     struct sbx_exec_result *ret);
/* Sends a chunk (<= SBX_STDIN_MAX_CHUNK; eof closes the command's stdin
 * after it) to the running exec exec_id of an opts.stdin_stream exec. The
 * one call allowed from another thread while sbx_exec runs on s, between
 * on_stdin(SBX_STDIN_STARTED*) and sbx_exec's return. With ack (only for
 * SBX_STDIN_STARTED) the agent answers through opts.on_stdin. Blocks while
 * the agent's stream is full. Returns 0, -EINVAL, -EPIPE. */
int sbx_exec_stdin(struct sbx *s, uint32_t exec_id, const void *data, size_t len, bool eof,
		   bool ack);

/* ---- exec driven by the caller's event loop ---------------------------------- */

/* The same exec without a thread. Every sandbox has one channel: its
 * stream, shared by all the requests in flight on it, each keyed by its
 * request id, so that many execs run at once (at most SBX_MAX_EXECS) and
 * the synchronous sbx_file_* calls work while they do (a file request
 * queues its frame behind what waits to be sent and drives the channel
 * until its reply came: the execs' callbacks run inside it).
 *
 * sbx_exec_op_start queues the request (what the socket does not take at
 * once is kept and sent later); the caller calls sbx_chan_io whenever
 * sbx_agent_fd(s) is ready for the events of sbx_chan_events, and the
 * callbacks of every op of s run inside it (never inside the other
 * sbx_exec_op_* calls). sbx_exec_op_events/sbx_exec_op_io are the same
 * for a caller that follows one op. Nothing blocks: each call reads at
 * most once and writes what the socket takes. sbx_exec is built on it.
 * The library keeps no timer: the caller gives up when it wants
 * (sbx_exec: timeout_ms + 10 s). opts is only read by sbx_exec_op_start
 * (on_stdin is not used: see the callbacks). */
struct sbx_exec_op;

/* Execs in flight on one sandbox's channel. */
#define SBX_MAX_EXECS 64

struct sbx_exec_cbs {
	/* The command started (the agent answered EXEC): stdin_mode is
	 * SBX_STDIN_STARTED (an agent of 1.1: stdin chunks are acknowledged)
	 * or SBX_STDIN_STARTED_NOACK. sbx_exec_op_pid has its pid from here.
	 * May be NULL. */
	void (*started)(void *userdata, int stdin_mode);
	/* An output chunk; stream 1 = stdout, 2 = stderr. May be NULL. */
	void (*output)(void *userdata, int stream, const void *data, size_t len);
	/* The agent's answer to a chunk of sbx_exec_op_stdin that returned 0:
	 * as on_stdin's (0, -EPIPE, -ENOBUFS). May be NULL. */
	void (*stdin_ack)(void *userdata, int status, uint32_t pending);
	/* Exactly once, last: r = 0 and *res when the command ran (whatever
	 * its exit); else res is NULL and r is what sbx_exec returns
	 * (-ENOENT/-EACCES/...: it could not start, -EPIPE: the sandbox is
	 * gone, -EPROTO/-EBADMSG: a broken stream). It may free the op.
	 * Required. */
	void (*exit)(void *userdata, int r, const struct sbx_exec_result *res);
};

/* POLLIN while anything is in flight on s, with POLLOUT while bytes wait to
 * be sent (or a failure waits to be reported); 0 when nothing is. */
short sbx_chan_events(struct sbx *s);
/* Does the I/O that revents (poll's, or epoll's EPOLLIN/EPOLLOUT/EPOLLHUP/
 * EPOLLERR, which have the same values) allows and runs the callbacks of
 * every op of s. Returns 0, or the stream's error (every op in flight was
 * told through its exit). */
int sbx_chan_io(struct sbx *s, short revents);
/* Execs in flight on s (started, exit not yet called). */
unsigned sbx_chan_execs(const struct sbx *s);

/* Returns 0 and *ret, -EINVAL (no argv, stdin_len over 1 MiB), -EAGAIN
 * (SBX_MAX_EXECS in flight on s), -ENOMEM. A send that fails is reported
 * by exit from the next sbx_chan_io. */
int sbx_exec_op_start(struct sbx *s, const struct sbx_exec_opts *opts,
		      const struct sbx_exec_cbs *cbs, void *userdata, struct sbx_exec_op **ret);
/* sbx_chan_events of its sandbox; 0 once the op is done. */
short sbx_exec_op_events(const struct sbx_exec_op *op);
/* sbx_chan_io of its sandbox (other ops' callbacks run too). Returns 1
 * once the op is done: exit was called (free it); else 0. */
int sbx_exec_op_io(struct sbx_exec_op *op, short revents);
/* The command's pid in the sandbox (from the EXEC answer), 0 before. */
int32_t sbx_exec_op_pid(const struct sbx_exec_op *op);
/* The exec's id on the stream (what the agent lists it by). */
uint32_t sbx_exec_op_id(const struct sbx_exec_op *op);
/* For an opts.stdin_stream exec, after started: sends a chunk (<=
 * SBX_STDIN_MAX_CHUNK; eof closes the command's stdin after it). Returns 0
 * (stdin_ack follows, unless the exec ends first), 1 (taken; no answer
 * will come: SBX_STDIN_STARTED_NOACK), -EINVAL, -EPIPE (not started, ended,
 * or stdin already closed with eof), -ENOMEM. */
int sbx_exec_op_stdin(struct sbx_exec_op *op, const void *data, size_t len, bool eof);
/* SIGKILL to the command's process group (sent after the request; EXIT
 * follows). */
void sbx_exec_op_kill(struct sbx_exec_op *op);
/* Signal sig (1..64) to the command's process group, queued like kill.
 * Returns 0, -EINVAL, -ESRCH (ended), -EPIPE, -ENOMEM. */
int sbx_exec_op_signal(struct sbx_exec_op *op, int sig);
/* Follows an exec that another host started (a host before a restart):
 * ATTACH exec_id. started comes with the agent's answer (the pid in
 * sbx_exec_op_pid), then the output it printed while no host followed it
 * (up to its cap), then on to its exit; or exit(-ESRCH) for no such exec.
 * Returns 0 and *ret, -EINVAL (id 0 or in flight), -EAGAIN, -ENOMEM. An
 * agent older than 1.2 answers exit(-EOPNOTSUPP). */
int sbx_exec_op_attach(struct sbx *s, uint32_t exec_id, const struct sbx_exec_cbs *cbs,
		       void *userdata, struct sbx_exec_op **ret);

/* An exec the agent runs, or one that ended while no host followed it and
 * whose output and exit wait for an attach. */
struct sbx_exec_info {
	uint32_t id; /* for sbx_exec_op_attach */
	int32_t pid;
	bool running;
	uint64_t age_us; /* since it started */
	char *cmd;	 /* its argv joined by spaces (at most 1 KiB) */
};
/* Lists them (a round trip on the channel). Also keeps the library's own
 * request ids above those in use. Returns 0 and *ret (n entries, free with
 * sbx_exec_infos_free), -EOPNOTSUPP (an agent older than 1.2), -errno. */
int sbx_execs_list(struct sbx *s, struct sbx_exec_info **ret, size_t *ret_n);
void sbx_exec_infos_free(struct sbx_exec_info *v, size_t n);

/* Frees op; before its exit, its later frames are skipped (the command
 * runs on unless it was killed). Accepts NULL. */
void sbx_exec_op_free(struct sbx_exec_op *op);

/* ---- files ----------------------------------------------------------------- */

struct sbx_stat {
	int type;      /* 1 reg, 2 dir, 3 symlink, 4 chr, 5 blk, 6 fifo, 7 sock, 0 other */
	uint32_t mode; /* permission bits */
	uint32_t uid, gid, nlink;
	uint64_t size;
	int64_t mtime_ns;
};
struct sbx_dirent {
	char *name;
	struct sbx_stat st;
};

/* Reads up to max bytes (<= 1 MiB) at offset. *ret_data is malloc'ed (caller
 * frees), *ret_len its length; *ret_size (may be NULL) the file size. */
int sbx_file_read(struct sbx *s, const char *path, uint64_t offset, uint32_t max, void **ret_data,
		  size_t *ret_len, uint64_t *ret_size);
/* Writes (<= 1 MiB, creating with mode, truncating) a whole file. */
int sbx_file_write(struct sbx *s, const char *path, const void *data, size_t len, uint32_t mode);
/* Writes len (<= 1 MiB) bytes at offset; with create, the file is made
 * (mode) and truncated first, else it must exist. */
int sbx_file_write_at(struct sbx *s, const char *path, uint64_t offset, const void *data,
		      size_t len, uint32_t mode, bool create);
/* The agent packs the tree at dir into a new file archive in the sandbox
 * (tar: ustar + pax, devices, FIFOs, hard links, xattrs; agent_tar.c) and
 * says its size and member count; sbx_tar_in unpacks such a file under dir.
 * Agents of protocol 1.6 and later (else -EOPNOTSUPP). */
int sbx_tar_out(struct sbx *s, const char *dir, const char *archive, uint64_t *ret_size,
		uint32_t *ret_members);
int sbx_tar_in(struct sbx *s, const char *archive, const char *dir, uint32_t *ret_members);
int sbx_file_stat(struct sbx *s, const char *path, struct sbx_stat *ret);
/* Lists a directory; *ret (n entries) is freed with sbx_dirents_free. */
int sbx_file_list(struct sbx *s, const char *path, struct sbx_dirent **ret, size_t *ret_n);
void sbx_dirents_free(struct sbx_dirent *d, size_t n);
int sbx_file_mkdir(struct sbx *s, const char *path, uint32_t mode, bool parents);
int sbx_file_remove(struct sbx *s, const char *path, bool recursive);

/* Lets go of a sandbox without stopping it, as a host that restarts would:
 * a persistent one (sbx_config.persist) keeps running and can be adopted,
 * by this process or the next one; any other ends when its stream closes.
 * Frees s. Accepts NULL. */
void sbx_release(struct sbx *s);
/* Who a sandbox's agent is, as a host records it to find the agent again
 * after a restart: its pid (in the host's pid namespace), its start time
 * (/proc/<pid>/stat field 22, clock ticks after boot) and the inode of its
 * pid namespace. A process with that pid but another start time or
 * namespace is not the agent (the pid was reused). */
struct sbx_agent_id {
	pid_t pid;
	uint64_t start_time;
	uint64_t pidns_ino;
};
/* The identity of s's agent. Returns 0, -ESRCH (it exited). */
int sbx_agent_id(const struct sbx *s, struct sbx_agent_id *ret);
/* The same identity of any process that is pid 1 of its own pid namespace
 * (a contained worker, a VM sandbox's VMM), read while pidfd (pid's) says
 * it lives. Returns 0, -ESRCH (it exited), -EPERM (not a namespace's pid 1). */
int sbx_process_id(pid_t pid, int pidfd, struct sbx_agent_id *ret);
/* Re-attaches to a persistent sandbox whose agent the host recorded (id):
 * checks that the process with that pid is that agent (pid 1 of its pid
 * namespace, the recorded start time and namespace), takes the host end of
 * its channel from it with pidfd_getfd (nothing with a name: no process of
 * the sandbox can reach or replace it, PROTOCOL.md), checks that the
 * channel's peer is that process (SO_PEERCRED), reads its HELLO and finds
 * its cgroups. Returns 0 and *ret; -ESRCH (no such process, or it exited),
 * -EPERM (the process is not the recorded agent, or the channel's peer is
 * not the agent), -ENOTCONN (not a persistent agent), -ESTALE (not in this
 * runtime's cgroups), -ETIMEDOUT. A running exec of the previous host runs
 * on, held by the agent: sbx_execs_list and sbx_exec_op_attach find it
 * again. A paused sandbox (its cgroup asked to freeze, by sbx_pause of any
 * host) is adopted paused (sbx_paused), without its channel: its frozen
 * agent cannot answer, and sbx_resume takes the channel once it thawed it;
 * until then sbx_agent_fd is -1 and only sbx_resume, sbx_release and
 * sbx_destroy may be called. */
int sbx_adopt(struct sbx_runtime *rt, const struct sbx_agent_id *id, struct sbx **ret);

/* ---- pause ------------------------------------------------------------------ */

/* The freeze deadline of sbx_pause(s, 0). */
#define SBX_PAUSE_TIMEOUT_MS 2000u

/* Freezes every process of the sandbox (cgroup v1: its freezer cgroup, which
 * it is in from its start; v2: cgroup.freeze) and returns once the kernel
 * says all are frozen. A freeze is held off by a process in a sleep the
 * freezer cannot interrupt (a FUSE read whose server does not answer): past
 * timeout_ms (0: SBX_PAUSE_TIMEOUT_MS) the sandbox is thawed again and the
 * answer is -ETIMEDOUT; it is paused whole or not at all. Returns 0,
 * -EALREADY (paused already: nothing done), -EOPNOTSUPP (no cgroups, no
 * freezer hierarchy on v1, an sbx_attach_agent sandbox, or one adopted
 * from a host that made it without a freezer cgroup), -ESRCH (its agent
 * exited), -ETIMEDOUT, -errno. Execs in flight stop with it (their agent
 * does not answer until sbx_resume: their deadlines are the caller's). */
int sbx_pause(struct sbx *s, uint32_t timeout_ms);
/* sbx_pause in two halves, for a caller's event loop (nothing waits):
 * sbx_pause_start asks the kernel and returns 0 (frozen already: paused),
 * -EINPROGRESS (freezing: call sbx_pause_poll until it answers otherwise),
 * -EBUSY (a freeze is under way already), or as sbx_pause. sbx_pause_poll
 * returns 0 once frozen (paused), -EINPROGRESS while not, and with
 * give_up (the caller's deadline passed) thaws the sandbox again and
 * returns -ETIMEDOUT; -EINVAL when no freeze is under way. Until then the
 * sandbox may be used as a running one, and sbx_resume gives the freeze
 * up (returns 0). */
int sbx_pause_start(struct sbx *s);
int sbx_pause_poll(struct sbx *s, bool give_up);
/* Thaws a paused sandbox; an adopted one (sbx_adopt of a paused sandbox)
 * then has its channel taken (sbx_adopt's checks, HELLO within 10 s): if
 * that fails it is frozen again, stays paused and the error is returned.
 * Returns 0, -EALREADY (not paused: nothing done), -EOPNOTSUPP (as
 * sbx_pause), -ENOTCONN/-EPERM/-ETIMEDOUT/-ESRCH (as sbx_adopt), -errno. */
int sbx_resume(struct sbx *s);
/* Whether s is paused: by sbx_pause, or found so at sbx_adopt. */
bool sbx_paused(const struct sbx *s);

/* Wraps an agent reached some other way (a VM's serial port, a test's
 * socketpair) so that sbx_exec and sbx_file_* work on it. Takes ownership of
 * fd; pid (> 0) is killed and waited for by sbx_destroy, 0 if none. */
int sbx_attach_agent(int fd, pid_t pid, struct sbx **ret);
