/* backend.h — the interface between strata-sandboxd's core and its backends
 * ("container"/"docker", "fncall", "firecracker", "qemu").
 *
 * The core owns the HTTP API, validation, admission, the registry of
 * sandboxes, persistence, TTLs and output framing; a backend owns the
 * isolation: it creates, execs in, serves files of, pauses, resumes and
 * destroys one sandbox. All calls run on sandboxd's single event-loop thread;
 * a backend that waits for something registers a watch in the loop.
 *
 * Errors are negative errno; the few that the core maps to API errors:
 *   -ENODEV      backend unavailable on this node (reason in caps.why)
 *   -EOPNOTSUPP  feature not supported by this backend (typed error up front)
 *   -ENOENT      (files) no such path;  -ENOEXEC  image unusable
 *   -ETIMEDOUT   (pause) the sandbox did not freeze within SBD_PAUSE_TIMEOUT_MS
 * A backend never logs through the HTTP client: it fills its struct strata_err
 * (fs/err.h: the errno and a one-line reason) and returns. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/err.h"

struct sbd_loop;
struct sbd_sandbox;

/* How long a pause may wait for the sandbox to freeze (on a timer: the
 * loop goes on meanwhile, api_pause.c). */
#define SBD_PAUSE_TIMEOUT_MS 1000u

/* What a backend can do; published by GET /v1/capabilities and the SDK. */
struct sbd_caps {
	bool available;
	bool exec, exec_stream, exec_stdin, python;
	bool exec_stdin_stream; /* interactive stdin (sbd_exec_req.stdin_stream) */
	bool files, tar, pause, persistent, network_host;
	bool limits_memory, limits_pids, limits_cpu, limits_disk;
	bool metrics;	       /* usage (sbd_backend.usage): GET /v1/sandboxes/{id}/metrics */
	struct strata_err why; /* when !available: -ENODEV and the reason */
	/* What holds the writable layers (limits_disk: a quota on disk), or
	 * why disk_mb is no disk limit (the layer is in memory); or NULL. */
	const char *disk_reason;
	/* Sandboxes in user namespaces (root inside is an unprivileged range
	 * outside): possible for this backend's images; when not, why. */
	bool userns;
	const char *userns_reason;
};

/* One exec request, validated by the core. */
struct sbd_exec_req {
	char **argv;	    /* NULL-terminated; NULL when python is set */
	const char *python; /* Python source to run in a warm interpreter, or NULL */
	char **env;	    /* NULL-terminated "K=V": sandbox env overlaid with the call's */
	const char *cwd;    /* absolute */
	const char *user;
	const uint8_t *stdin_data; /* given up front; closed after it, unless: */
	size_t stdin_len;
	bool stdin_stream;   /* stdin stays open: fed by exec_stdin, closed by its eof */
	int64_t timeout_ms;  /* > 0 */
	uint64_t output_cap; /* bytes of stdout+stderr forwarded */
	uint64_t xid;	     /* the exec's number in its sandbox (for exec_orphans) */
};

/* An exec that an adopted sandbox ran on through a sandboxd restart (it
 * may have ended since: its output and exit wait to be collected). */
struct sbd_orphan {
	uint32_t id;	    /* for exec_attach */
	uint64_t xid;	    /* its number in the sandbox; 0 if unknown */
	int64_t pid;	    /* in the sandbox */
	bool running;	    /* false: ended, its exit held */
	int64_t started_at; /* wall seconds */
	char cmd[1025];
};

struct sbd_exit {
	int exit_code; /* -1 when killed by a signal */
	int signo;
	bool timed_out, truncated;
	uint64_t stdout_bytes, stderr_bytes; /* produced, including discarded */
	int64_t duration_us;
	char error[200]; /* set when the command could not be started */
	/* with error: what failed, for programs (API.md: no_such_directory,
	 * no_such_user, command_not_found, not_executable, ...) */
	char error_code[32];
	bool oom_killed; /* the OOM killer ended it (agent: SIGKILL while the count rose) */
};

/* Where an exec's output goes. output() is called as data arrives; exit() is
 * called exactly once, last, unless the exec was cancelled. */
struct sbd_exec_sink {
	void (*output)(void *ctx, int stream /* 1 stdout, 2 stderr */, const void *p, size_t n);
	void (*exit)(void *ctx, const struct sbd_exit *e);
	/* True while the consumer is behind (a slow client): the backend stops
	 * reading output, so that the command blocks on its pipe, and asks
	 * again a few milliseconds later. May be NULL. */
	bool (*congested)(void *ctx);
	void *ctx;
	/* stdin_stream: the answer to one exec_stdin that returned 0: 0, or
	 * -EPIPE (stdin closed: the command closed it, eof was sent, or it
	 * ended), -ENOBUFS (too much not yet read: dropped, retry later);
	 * pending = bytes not yet read by the command. May be NULL. */
	void (*stdin_ack)(void *ctx, int status, uint64_t pending);
	/* The command started (its pid in the sandbox, 0 if unknown); before
	 * any output. Backends that cannot tell do not call it. May be NULL. */
	void (*started)(void *ctx, int64_t pid);
};

/* What one sandbox uses now (GET /v1/sandboxes/{id}/metrics); -1 where
 * the backend cannot tell. */
struct sbd_usage {
	int64_t cpu_us;		   /* CPU time of every process it ran, user + system */
	int64_t memory_bytes;	   /* charged to its memory cgroup now */
	int64_t memory_peak_bytes; /* the most charged at once since it was created */
	int64_t pids;		   /* processes and threads now, the agent included */
	int64_t disk_bytes;	   /* the writable layer's usage */
};

enum sbd_ftype { SBD_FT_OTHER = 0, SBD_FT_REG, SBD_FT_DIR, SBD_FT_LNK };
struct sbd_stat {
	char name[256];
	enum sbd_ftype type;
	uint32_t mode;
	uint64_t size;
	int64_t mtime_s;
};

/* One file operation; paths are absolute, normalised and free of "..". */
enum sbd_fop { SBD_F_READ, SBD_F_WRITE, SBD_F_LIST, SBD_F_STAT, SBD_F_MKDIR, SBD_F_REMOVE };
struct sbd_file_req {
	enum sbd_fop op;
	const char *path;
	const uint8_t *data; /* WRITE */
	size_t len;
	uint32_t mode;	/* WRITE, MKDIR */
	bool parents;	/* MKDIR */
	bool recursive; /* REMOVE */
	bool append;	/* WRITE */
	uint64_t max;	/* READ: refuse files larger than this (-EFBIG) */
	/* results (caller frees data and entries) */
	uint8_t *out_data;
	size_t out_len;
	struct sbd_stat st;	  /* STAT */
	struct sbd_stat *entries; /* LIST */
	size_t nentries;
};

struct sbd_backend {
	const char *name;
	struct sbd_loop *loop;
	void *priv;
	/* Fills caps (including availability and its reason). */
	void (*caps)(struct sbd_backend *b, struct sbd_caps *ret);
	/* create may run on a worker thread: it touches no loop state (only
	 * sb and thread-safe backend state), and the loop runs on meanwhile. */
	bool create_threaded;
	/* Creates the sandbox described by sb (its spec is filled in). Returns 0
	 * or -errno with the reason in e. */
	int (*create)(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e);
	/* Re-attaches to a sandbox created by an earlier sandboxd (from its
	 * persisted state). Returns 0, or -errno if it is gone. */
	int (*adopt)(struct sbd_backend *b, struct sbd_sandbox *sb);
	/* Starts an exec; *ret_handle identifies it for exec_cancel. Returns 0
	 * or -errno with the reason in e (nothing ran: the sink is not called). */
	int (*exec)(struct sbd_backend *b, struct sbd_sandbox *sb, const struct sbd_exec_req *req,
		    const struct sbd_exec_sink *sink, void **ret_handle, struct strata_err *e);
	/* Feeds a stdin_stream exec (at most one chunk in flight: the next only
	 * after its stdin_ack). Returns 0 (stdin_ack follows), 1 (taken, no
	 * acknowledgement will come), -EPIPE (stdin already closed), -errno.
	 * NULL when the backend has no interactive stdin. */
	int (*exec_stdin)(struct sbd_backend *b, void *handle, const void *p, size_t n, bool eof);
	/* Kills a running exec; its sink is not called again. */
	void (*exec_cancel)(struct sbd_backend *b, void *handle);
	/* Sends signal sig to a running exec's process group (its sink goes
	 * on). Returns 0 or -errno. NULL: the backend cannot (no background
	 * execs, list, signal or attach in the API). */
	int (*exec_signal)(struct sbd_backend *b, void *handle, int sig);
	/* Once after adopt: the execs the sandbox kept (caller frees *ret).
	 * Returns 0 (and nothing on later calls) or -errno. May be NULL. */
	int (*exec_orphans)(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_orphan **ret,
			    size_t *ret_n);
	/* Follows orphan id as exec does its new command: the sink gets its
	 * start, the output held for it, then on to its exit. */
	int (*exec_attach)(struct sbd_backend *b, struct sbd_sandbox *sb, uint32_t id,
			   const struct sbd_exec_sink *sink, void **ret_handle,
			   struct strata_err *e);
	int (*file)(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *req);
	/* Streamed files: an O_PATH fd of the sandbox's root directory as its
	 * processes see it, for the core's transfers of files and trees of any
	 * size on worker threads (api_files.c, xfer.h), which resolve every
	 * path under it with openat2(RESOLVE_IN_ROOT) (inroot.h) and move the
	 * bytes with sendfile/splice. The caller closes the fd. NULL when the
	 * backend reaches files through its agent only (a VM's: there, a
	 * stream of READ at an offset and WRITE with append would take its
	 * place); such backends get `file`, whole files in one buffer. */
	int (*file_root)(struct sbd_backend *b, struct sbd_sandbox *sb, int *ret_fd);
	/* With file_root: the host id that is id 0 in the sandbox (ids
	 * 0..65535 inside are ret_base.. on the host: its user namespace), 0
	 * when the ids are the host's. NULL: always 0. */
	uint32_t (*id_base)(struct sbd_backend *b, struct sbd_sandbox *sb);
	/* Tar archives made and unpacked by the sandbox itself (a VM's agent,
	 * which sees every file type and attribute), in place of the core's
	 * archives over `file` (tar.c) when there is no file_root: tar_out
	 * packs the tree at dir into *ret (malloc'ed, at most max bytes:
	 * -EFBIG), tar_in unpacks p[0..n) under dir and returns its member
	 * count. NULL: tar.c's. */
	int (*tar_out)(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, uint64_t max,
		       uint8_t **ret, size_t *ret_len, struct strata_err *e);
	int (*tar_in)(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir,
		      const uint8_t *p, size_t n, struct strata_err *e);
	/* A process in sb's own network namespace (network "none": only lo),
	 * which network "egress" gets its veth in; NULL: no "egress". */
	pid_t (*net_pid)(struct sbd_backend *b, struct sbd_sandbox *sb);
	/* Stops every process of sb, whole or not at all. 0 when stopped;
	 * with pause_poll it may return -EINPROGRESS (stopping), and the core
	 * calls pause_poll on a timer of its own until it answers 0 (stopped)
	 * or, with give_up (SBD_PAUSE_TIMEOUT_MS passed), -ETIMEDOUT (it runs
	 * on). */
	int (*pause)(struct sbd_backend *b, struct sbd_sandbox *sb);
	int (*pause_poll)(struct sbd_backend *b, struct sbd_sandbox *sb, bool give_up);
	int (*resume)(struct sbd_backend *b, struct sbd_sandbox *sb);
	/* Destroys the sandbox and everything it holds; 0 or -errno. */
	int (*destroy)(struct sbd_backend *b, struct sbd_sandbox *sb);
	/* sandboxd is stopping: let go of sb without destroying it if the
	 * backend can adopt it again later, else destroy it. May be NULL. */
	void (*release)(struct sbd_backend *b, struct sbd_sandbox *sb);
	/* Fills ret with what sb uses now. Returns 0 or -errno. NULL when the
	 * backend has no usage to report (caps.metrics false). */
	int (*usage)(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_usage *ret);
	/* Periodic housekeeping (pools), once a second. May be NULL. */
	void (*tick)(struct sbd_backend *b);
	/* Frees the backend (at shutdown; sandboxes are left running). */
	void (*free)(struct sbd_backend *b);
};

/* Constructors. Each returns a backend (possibly one that reports itself
 * unavailable) or NULL on allocation failure. */
/* container: the container backend, whose library runtime makes the
 * sandboxes of fncall's command calls (it must be freed after fncall). */
struct sbd_backend *sbd_backend_fncall_new(struct sbd_loop *loop, int pool_min,
					   struct sbd_backend *container);
/* Where the container sandboxes' writable layers go (sbx_runtime_config's
 * disk_mode, disk_dir, disk_image; sandbox/container/layer.c). */
struct sbd_disk_opts {
	int mode; /* SBX_DISK_AUTO, _QUOTA, _TMPFS */
	const char *dir, *image;
};
/* fresh_netns: never hand a finished sandbox's network namespace to the next
 * one (sandbox/README.md: a reused one shows earlier loopback counters). */
struct sbd_backend *sbd_backend_container_new(struct sbd_loop *loop, const char *state_dir,
					      bool fresh_netns, const struct sbd_disk_opts *disk);
/* The container backend's library runtime (struct sbx_runtime), or NULL
 * when it is unavailable. */
struct sbx_runtime;
struct sbx_runtime *sbd_backend_container_runtime(struct sbd_backend *container);
/* Whether sandboxes over images in dir (an image's root directory; NULL:
 * none, only whether the kernel can) can have user namespaces: what the
 * container backend's capabilities say. */
void sbd_backend_container_userns_probe(struct sbd_backend *container, const char *dir);
struct sbx_exec_result;
/* The exit of a library exec as the API reports it (res NULL: all zero). */
struct sbd_exit sbd_exit_of(const struct sbx_exec_result *res);
/* Fills e for a command that could not start: r the errno (negative), step
 * the sbx_exec_step that failed, argv0, cwd and user (NULL: not known) for
 * the message. Exit code 127 for a command not found, else 126, as a shell. */
void sbd_exit_cannot_start(struct sbd_exit *e, int r, int step, const char *argv0, const char *cwd,
			   const char *user);
struct sbx;
/* The container backend's agent half, for another backend whose sandboxes
 * run strata-agent behind a stream of their own (the VM backends): sb gets
 * a box of the container backend over s (sbx_attach_agent's), served by
 * the container backend's exec, exec_stdin, exec_cancel, exec_signal and
 * file (sbd_agent_box_ops copies them into b), the exec deadlines watched
 * by its tick; outer is the other backend's own state of sb. attach may run
 * on a create's worker thread (it touches no loop state). -ENODEV without
 * the container library. */
int sbd_agent_box_attach(struct sbd_backend *container, struct sbd_sandbox *sb, struct sbx *s,
			 void *outer);
void *sbd_agent_box_outer(const struct sbd_sandbox *sb);
/* Drops the box's execs (cancelled by the core already) and destroys s. */
void sbd_agent_box_destroy(struct sbd_sandbox *sb);
/* Replaces the box's channel by s (its execs dropped, the old one
 * destroyed): a VM adopted paused gets its agent's stream at resume. */
void sbd_agent_box_rechannel(struct sbd_sandbox *sb, struct sbx *s);
void sbd_agent_box_ops(const struct sbd_backend *container, struct sbd_backend *b);
/* An adopted box: the execs its agent held (EXECS), for exec_orphans. */
void sbd_agent_box_find_orphans(struct sbd_sandbox *sb);
/* The box's channel to its agent. */
struct sbx *sbd_agent_box_sbx(const struct sbd_sandbox *sb);
/* An agent box's tar_out and tar_in: the agent makes and unpacks the
 * archive (agent_tar.c) as a file in the sandbox, moved in 1 MiB chunks
 * (backend_agent_tar.c). */
int sbd_agent_tar_out(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, uint64_t max,
		      uint8_t **ret, size_t *ret_len, struct strata_err *e);
int sbd_agent_tar_in(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir,
		     const uint8_t *p, size_t n, struct strata_err *e);
struct sandboxd;
/* The VM backends; container is the container backend (its agent half). */
struct sbd_backend *sbd_backend_vm_new(struct sandboxd *d, struct sbd_backend *container,
				       const char *kind /* "firecracker"|"qemu" */);
