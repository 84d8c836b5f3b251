/* proto.h — the strata-agent protocol: framing and message codec.
 *
 * One protocol between a host (the container backend, later sandboxd and the
 * VM backends) and strata-agent, independent of the transport: any reliable
 * byte stream (a socketpair now; virtio-serial or vsock later). Every message
 * is one frame, a 16-byte header then a payload of fixed-width little-endian
 * fields, written and read by the ag_wr_* / ag_rd_* functions below, never by
 * casting a struct. The full description is sandbox/agent/PROTOCOL.md.
 *
 *   offset size field
 *   0      4    magic     AG_MAGIC ("SAGT" little-endian)
 *   4      1    major     AG_MAJOR; a peer with a newer major is refused
 *   5      1    minor     AG_MINOR; newer minors are served (fields appended)
 *   6      2    type      AG_T_*; replies have AG_T_REPLY set
 *   8      4    id        request id chosen by the host, echoed by replies and
 *                         by the OUTPUT/EXIT messages of an exec
 *   12     4    length    payload bytes, <= AG_MAX_PAYLOAD
 *
 * Invariants:
 *  1. A frame is accepted only if magic, major and length are valid; anything
 *     else ends the session (a byte stream cannot be resynced).
 *  2. Readers never read past the end: an overrun sets err = -EBADMSG and
 *     returns zeros; decoders check it once at the end. Trailing bytes are
 *     allowed (newer minors append fields).
 *  3. Every variable-size field has a limit (AG_MAX_*); decoders enforce it.
 *
 * This file is compiled into the static agent (no sanitizers, no libc-heavy
 * deps), the strata_sandbox library and the fuzz target. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define AG_MAGIC 0x54474153u /* "SAGT" */
#define AG_MAJOR 1
#define AG_MINOR                                                                                   \
	6 /* 1.1: STDIN flag "ack" and its reply; 1.2: EXEC failure step, OOM flag; 1.3: EXECS,    \
	     ATTACH; 1.4: a new host of a persistent agent takes AG_HOST_FD, writes first;         \
	     1.5: START's user namespace (AG_START_F_USERNS); 1.6: PING AG_PING_NEW_HOST (a VM     \
	     guest's new host on its port) */
#define AG_HDR_SIZE 16
/* A persistent container agent holds, at this fd number, the host end of a
 * socketpair for the next host: a host that restarts takes it with
 * pidfd_getfd (PROTOCOL.md, "Session end, persistent sandboxes"). In a
 * staged agent and one that is not persistent it is /dev/null. */
#define AG_HOST_FD 4
/* PING's optional payload byte (1.6): the sender is a new host on the same
 * stream (a VM guest's port, which a restarted sandboxd connects to again):
 * the agent ends the old session as at a lost host (its execs held for
 * ATTACH) and sends HELLO before PING's reply. */
#define AG_PING_NEW_HOST 1
#define AG_MAX_DATA (1u << 20)		      /* one read/write/stdin chunk */
#define AG_MAX_PAYLOAD (AG_MAX_DATA + 65536u) /* data plus its fields */
#define AG_MAX_PATH 4096
#define AG_MAX_ARGS 4096  /* argv and env entries, each */
#define AG_MAX_LIST 16384 /* directory entries in one LIST reply */
#define AG_OUTPUT_CHUNK 32768
#define AG_MAX_CMD 1024 /* bytes of an exec's command line in an EXECS entry */

enum ag_type {
	AG_T_HELLO = 1,	 /* agent -> host, id 0, once at start */
	AG_T_EXEC = 2,	 /* -> reply: status, pid */
	AG_T_STDIN = 3,	 /* host -> agent; a reply only with AG_STDIN_F_ACK (1.1) */
	AG_T_SIGNAL = 4, /* -> reply: status */
	AG_T_OUTPUT = 5, /* agent -> host, id = exec id */
	AG_T_EXIT = 6,	 /* agent -> host, id = exec id, last message of an exec */
	AG_T_START = 7,	 /* container staging: enter the root, drop privileges */
	AG_T_EXECS = 8,	 /* 1.2: -> reply: status, the execs (running, or ended, not collected) */
	AG_T_ATTACH = 9, /* 1.2, id = exec id: -> reply: status, pid; then its held frames */
	AG_T_READ = 16,
	AG_T_WRITE = 17,
	AG_T_LIST = 18,
	AG_T_STAT = 19,
	AG_T_MKDIR = 20,
	AG_T_REMOVE = 21,
	AG_T_PING = 22,
	AG_T_TAR_OUT = 23, /* 1.6: str dir, str archive -> reply: status, u64 size, u32 members */
	AG_T_TAR_IN = 24,  /* 1.6: str archive, str dir -> reply: status, u32 members */
	AG_T_REPLY = 0x8000,
};

enum {
	AG_EXEC_F_STDIN = 1,  /* stdin is a pipe fed by STDIN messages, else /dev/null */
	AG_EXEC_F_UIDGID = 2, /* uid/gid fields are set */
};
/* STDIN: u8 eof, blob data, then (1.1, optional) u8 flags. With ACK the
 * agent replies STDIN|REPLY: i32 status (0; -EPIPE: the command's stdin is
 * closed or the exec is gone; -ENOBUFS: the chunk would take the stdin not
 * yet read by the command over AG_STDIN_MAX: it is dropped, stdin stays
 * open), u32 pending (bytes queued, not yet read by the command). */
enum { AG_STDIN_F_ACK = 1 };
enum { AG_STREAM_STDOUT = 1, AG_STREAM_STDERR = 2 };
/* EXIT flags. OOM_KILLED (1.2): the command was killed by SIGKILL (or
 * exited 137, a shell reporting it) and the sandbox's memory cgroup counted
 * an OOM kill while it ran. */
enum { AG_EXIT_F_TIMED_OUT = 1, AG_EXIT_F_TRUNCATED = 2, AG_EXIT_F_OOM_KILLED = 4 };
/* A failed EXEC reply (1.2): i32 status, then u8 step, the step of the
 * command's start that failed with that errno (absent from older agents:
 * AG_STEP_UNKNOWN). */
enum {
	AG_STEP_UNKNOWN = 0,
	AG_STEP_USER = 1,  /* looking up the user in the sandbox's /etc/passwd */
	AG_STEP_CWD = 2,   /* chdir to the working directory */
	AG_STEP_IDS = 3,   /* switching to the user's uid and gid */
	AG_STEP_EXEC = 4,  /* finding and executing the command */
	AG_STEP_SETUP = 5, /* pipes, the child process, its stdio */
};
enum { AG_WRITE_F_CREATE = 1, AG_WRITE_F_TRUNC = 2, AG_WRITE_F_APPEND = 4, AG_WRITE_F_EXCL = 8 };
enum {
	AG_FT_OTHER = 0,
	AG_FT_REG = 1,
	AG_FT_DIR = 2,
	AG_FT_LNK = 3,
	AG_FT_CHR = 4,
	AG_FT_BLK = 5,
	AG_FT_FIFO = 6,
	AG_FT_SOCK = 7
};

struct ag_hdr {
	uint8_t major, minor;
	uint16_t type;
	uint32_t id;
	uint32_t len;
};

/* Encodes h (magic and versions are filled in) into out[AG_HDR_SIZE]. */
void ag_hdr_encode(uint16_t type, uint32_t id, uint32_t len, uint8_t out[AG_HDR_SIZE]);
/* Decodes and validates a header. Returns 0, -EPROTO (bad magic),
 * -EPROTONOSUPPORT (newer major) or -EMSGSIZE (length over AG_MAX_PAYLOAD). */
int ag_hdr_decode(const uint8_t in[AG_HDR_SIZE], struct ag_hdr *ret);

/* ---- growable writer ---------------------------------------------------- */
struct ag_wr {
	uint8_t *data;
	size_t len, cap;
	int err; /* -ENOMEM once an allocation failed; later puts are no-ops */
};
void ag_wr_init(struct ag_wr *w);
void ag_wr_done(struct ag_wr *w); /* frees; accepts a zeroed writer */
/* Starts a frame: reserves the header. Returns the frame's start offset. */
size_t ag_wr_begin(struct ag_wr *w, uint16_t type, uint32_t id);
/* Fills in the header of the frame started at off with its final length.
 * Returns 0, -EMSGSIZE if the payload grew over AG_MAX_PAYLOAD, or w->err. */
int ag_wr_end(struct ag_wr *w, size_t off);
void ag_wr_u8(struct ag_wr *w, uint8_t v);
void ag_wr_u16(struct ag_wr *w, uint16_t v);
void ag_wr_u32(struct ag_wr *w, uint32_t v);
void ag_wr_u64(struct ag_wr *w, uint64_t v);
void ag_wr_bytes(struct ag_wr *w, const void *p, size_t n);
void ag_wr_blob(struct ag_wr *w, const void *p, uint32_t n); /* u32 length, bytes */
void ag_wr_str(struct ag_wr *w, const char *s);		     /* u32 length, no NUL */
/* Drops the first n bytes (after they were sent). */
void ag_wr_consume(struct ag_wr *w, size_t n);

/* ---- bounded reader ----------------------------------------------------- */
struct ag_rd {
	const uint8_t *p;
	size_t len, off;
	int err; /* -EBADMSG after any overrun or limit violation */
};
void ag_rd_init(struct ag_rd *r, const void *p, size_t len);
uint8_t ag_rd_u8(struct ag_rd *r);
uint16_t ag_rd_u16(struct ag_rd *r);
uint32_t ag_rd_u32(struct ag_rd *r);
uint64_t ag_rd_u64(struct ag_rd *r);
/* u32 length then bytes; returns a pointer into the buffer (NULL on overrun or
 * when the length exceeds max). */
const void *ag_rd_blob(struct ag_rd *r, uint32_t max, uint32_t *ret_len);
/* u32 length then bytes, as a malloc'ed NUL-terminated string (caller frees).
 * Rejects lengths over max and embedded NUL bytes. NULL and err on failure. */
char *ag_rd_strdup(struct ag_rd *r, uint32_t max);

/* ---- decoded messages --------------------------------------------------- */

/* EXEC request. Allocated as one block by ag_exec_decode; free() it. */
struct ag_exec_req {
	uint32_t flags, uid, gid, timeout_ms;
	uint64_t output_cap; /* bytes of stdout+stderr forwarded; 0 = agent default */
	char *cwd;	     /* "" = "/" */
	char *user;	     /* "" = use uid/gid (or root) */
	uint32_t argc, envc;
	char **argv; /* NULL-terminated */
	char **env;  /* NULL-terminated */
};
/* Encodes an EXEC request payload. */
void ag_exec_encode(struct ag_wr *w, const struct ag_exec_req *req);
/* Decodes an EXEC payload. Returns 0 and *ret (one malloc'ed block, caller
 * frees), -EBADMSG on a malformed or over-limit payload, -EINVAL if argc is 0,
 * -ENOMEM. */
int ag_exec_decode(const void *p, size_t len, struct ag_exec_req **ret);

struct ag_exit {
	int32_t exit_code;		     /* -1 when killed by a signal */
	int32_t signo;			     /* 0 unless killed by a signal */
	uint32_t flags;			     /* AG_EXIT_F_* */
	uint64_t stdout_bytes, stderr_bytes; /* produced, including discarded */
	uint64_t duration_us;
};
void ag_exit_encode(struct ag_wr *w, const struct ag_exit *e);
int ag_exit_decode(const void *p, size_t len, struct ag_exit *ret);

struct ag_stat {
	uint8_t type; /* AG_FT_* */
	uint32_t mode, uid, gid, nlink;
	uint64_t size;
	int64_t mtime_ns;
};
void ag_stat_encode(struct ag_wr *w, const struct ag_stat *st);
void ag_stat_decode(struct ag_rd *r, struct ag_stat *ret);

/* START request (container backend, agent in --stage mode). The rootfs comes
 * as a detached mount (open_tree clone) in SCM_RIGHTS with this frame, then
 * with AG_START_F_LAYER the writable layer's directory on disk (holding u
 * and w, its quota set by the host), then with AG_START_F_OOM_FD the
 * sandbox's OOM kill counter. */
enum {
	AG_START_F_PERSIST = 1, /* survive the stream's end; accept a new host */
	/* 1.2: an fd follows the rootfs (and the layer's): the sandbox's OOM
	 * kill counter (its memory cgroup's memory.events on v2,
	 * memory.oom_control on v1) */
	AG_START_F_OOM_FD = 2,
	AG_START_F_LAYER = 4, /* the layer is the second fd, not the staging tmpfs */
	/* 1.5: the last fd is the sandbox's user namespace (uid_base..+65535
	 * outside are 0..65535 inside): the agent owns the upper layer's root
	 * by uid_base and enters it before dropping its capabilities */
	AG_START_F_USERNS = 8,
};
struct ag_start_req {
	char hostname[65];
	uint64_t disk_bytes, disk_inodes; /* the writable layer's limits (tmpfs: its size) */
	uint64_t caps_keep;		  /* capability bits the sandbox keeps */
	uint8_t flags;			  /* AG_START_F_*; absent (0) from older hosts */
	uint32_t orphan_timeout_ms; /* persistent: exit this long after the host left (0: never) */
	uint32_t uid_base;	    /* AG_START_F_USERNS: the host uid (and gid) of root inside */
};
void ag_start_encode(struct ag_wr *w, const struct ag_start_req *q);
int ag_start_decode(const void *p, size_t len, struct ag_start_req *ret);

/* One entry of an EXECS reply (after i32 status, u32 count): an exec the
 * agent runs, or one that ended while no host followed it and whose EXIT
 * waits for an ATTACH. */
enum { AG_EXEC_RUNNING = 1, AG_EXEC_ENDED = 2 };
struct ag_exec_info {
	uint32_t id, pid;
	uint8_t state;		  /* AG_EXEC_* */
	uint8_t held;		  /* frames wait for an ATTACH */
	uint64_t age_us;	  /* since it started */
	char cmd[AG_MAX_CMD + 1]; /* argv joined by spaces, cut at AG_MAX_CMD */
};
void ag_exec_info_encode(struct ag_wr *w, const struct ag_exec_info *e);
/* Reads one entry; returns 0 or -EBADMSG (overrun, bad state, a cmd over
 * AG_MAX_CMD or with a NUL byte). */
int ag_exec_info_decode(struct ag_rd *r, struct ag_exec_info *ret);

/* Maps a st_mode to AG_FT_*. */
uint8_t ag_file_type(uint32_t st_mode);
/* A printable name of a message type, for logs ("EXEC", "?"). */
const char *ag_type_name(uint16_t type);
