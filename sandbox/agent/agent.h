/* agent.h — internals of strata-agent, the init process of every sandbox.
 *
 * The agent is single-threaded: one poll() loop (agent.c) over the control
 * stream, a signalfd for SIGCHLD and the pipes of running execs. Requests are
 * decoded with proto.h and answered in order; exec output and exit reports
 * are interleaved with replies on the same stream.
 *
 * Invariants:
 *  1. Nothing blocks the loop for long: the control fd and exec pipes are
 *     non-blocking; file operations are bounded (AG_MAX_DATA, AG_MAX_LIST).
 *  2. Outgoing bytes are bounded: above AG_OUT_HIGH queued bytes the agent
 *     stops reading exec pipes and the control stream (back-pressure).
 *  3. An exec's EXIT is the last message with its id; its pipes are drained
 *     (what is readable right then) before EXIT is queued.
 *  4. Every child is reaped; children that are not execs (orphans re-parented
 *     to pid 1) are reaped and forgotten.
 *  5. An exec whose host went away is held: its frames (OUTPUT up to its
 *     output cap, then EXIT) go to its own queue (held), not to the
 *     stream, and an ended one stays listed (EXECS) until a host ATTACHes
 *     and gets them. At most AG_MAX_EXECS execs, running or held ended;
 *     the oldest ended one makes room for a new exec. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/agent/proto.h"

#define AG_MAX_EXECS 256
#define AG_MAX_FDS 4 /* fds received with frames (SCM_RIGHTS), queued */
#define AG_OUT_HIGH (4u << 20)
#define AG_STDIN_MAX (4u << 20)
#define AG_DEFAULT_OUTPUT_CAP (16ull << 20)
#define AG_DEFAULT_PATH "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"

struct ag_execp {
	struct ag_execp *next;
	uint32_t id;
	pid_t pid;
	int out_fd, err_fd, in_fd; /* -1 once closed */
	struct ag_wr in_buf;	   /* stdin not yet written */
	bool in_eof;		   /* close stdin once in_buf is empty */
	bool timed_out, truncated, killed;
	uint64_t cap, sent, out_bytes, err_bytes;
	uint64_t start_us, deadline_us; /* deadline 0 = none */
	uint64_t oom_kills;		/* the sandbox's OOM kill count at its start */
	bool detached;			/* no host follows it: frames go to held */
	bool ended;			/* reaped; kept for an ATTACH (detached only) */
	struct ag_wr held;		/* its frames while detached */
	char *cmd;			/* argv joined, for EXECS */
};

struct agent {
	int ctl;   /* the protocol stream */
	int sigfd; /* SIGCHLD */
	bool ctl_eof;
	struct ag_wr out; /* queued frames */
	uint8_t *in;	  /* partial incoming frame */
	size_t in_len, in_cap;
	struct ag_execp *execs;
	unsigned nexecs;
	int fds[AG_MAX_FDS]; /* received, not yet taken by a request */
	unsigned nfds;
	bool staged;		    /* --stage: privileged, only START and PING served */
	bool guest;		    /* --guest: init of a VM (agent_guest.c) */
	int port;		    /* guest: the virtio-serial port, kept across hosts; else -1 */
	bool port_hup;		    /* guest, no host: the last one left (a new one may come) */
	int spare_fd;		    /* persistent: our end of the next host's channel (its end
				     * is fd AG_HOST_FD), else -1 */
	uint32_t orphan_timeout_ms; /* persistent: exit after this long without a host */
	uint64_t orphan_since_us;   /* when the last host left (0: one is connected) */
	int oom_fd;		    /* the sandbox's OOM kill counter (START), else -1 */
	void *seccomp;		    /* staged: BPF program to load at START */
	size_t seccomp_len;
};

uint64_t ag_now_us(void);
/* Queues a reply carrying only a status. */
void ag_reply_status(struct agent *a, uint16_t type, uint32_t id, int status);

/* agent_exec.c */
int ag_exec_start(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_exec_stdin(struct agent *a, uint32_t id, const void *p, size_t len);
int ag_exec_signal(struct agent *a, uint32_t id, const void *p, size_t len);
/* The host went away: every exec is held (invariant 5). */
void ag_exec_detach_all(struct agent *a);
/* EXECS and ATTACH: each queues its reply. */
void ag_exec_list(struct agent *a, uint32_t id);
void ag_exec_attach(struct agent *a, uint32_t id);
/* Reaps every child that exited and reports finished execs. */
void ag_reap(struct agent *a);
/* Reads available output of e->fd (stdout or stderr). Returns false at EOF. */
bool ag_exec_pump(struct agent *a, struct ag_execp *e, int stream);
/* Writes pending stdin. */
void ag_exec_feed(struct ag_execp *e);
/* Kills execs past their deadline; returns ms until the next deadline, -1 if none. */
int ag_exec_timeouts(struct agent *a);

/* agent_stage.c: container staging (see there). */
/* MS_MOVE of mount from onto to, making the directory to when the move
 * finds none (also the VM guest's). 0 or -errno. */
int ag_move_into(const char *from, const char *to);
int ag_stage_init(struct agent *a);
/* agent_guest.c: the init of a VM sandbox's guest makes its root and
 * opens its port (see there). */
int ag_guest_init(struct agent *a);
/* agent.c: (re)makes the next host's channel of a persistent sandbox, its
 * host end at AG_HOST_FD. Returns 0 or -errno. */
int ag_spare_make(struct agent *a);
void ag_stage_start(struct agent *a, uint32_t id, const void *p, size_t len);
/* Queues HELLO (on start and on every new connection). */
void ag_send_hello(struct agent *a);
/* Takes the oldest received fd, or -1. */
int ag_take_fd(struct agent *a);

/* agent_tar.c: a tree into an archive file and back (each queues its reply). */
void ag_tar_out(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_tar_in(struct agent *a, uint32_t id, const void *p, size_t len);

/* agent_files.c: each handles one request payload and queues its reply. */
void ag_file_read(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_file_write(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_file_list(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_file_stat(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_file_mkdir(struct agent *a, uint32_t id, const void *p, size_t len);
void ag_file_remove(struct agent *a, uint32_t id, const void *p, size_t len);
