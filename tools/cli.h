/* cli.h — what the verbs of the `strata` command line share: the home
 * directory of a cluster on this machine and the daemons that run from it.
 *
 * A home H (CONVENTIONS.md) holds
 *   H/strata.conf        the shape chosen at the first `strata up` (nodes,
 *                        targets per node, replicas, mount point, tls)
 *   H/meta/db            strata-meta's database
 *   H/cs<N>/t<M>         target directories of chunkserver N (1-based)
 *   H/run/<name>.pid     pid of daemon <name> ("meta", "cs1".., "fuse")
 *   H/run/<name>.addr    the address it bound (kept across `down`, so that
 *                        the next `up` reuses the same ports)
 *   H/log/<name>.log     its stderr
 *   H/cluster.env        STRATA_META / STRATA_MOUNT / STRATA_HOME for clients
 *   H/run/sandboxd.sock  strata-sandboxd's API socket (sandbox/sandboxd/API.md)
 *   H/run/fuse-holder.sock  strata-fuse-holder (keeps the mount across a crash
 *                        of strata-fuse: fuse_holder.c)
 *   H/run/usrbio.sock    strata-fuse's native-client socket (sdk/c, fuse/usrbio.c)
 *   H/run/net            the network of a multi-node home: its subnet and the
 *                        bridge, namespaces and veths `up` created (netns.c)
 *   H/cache/images       node image mounts (imagesvc/mount.h), also sandboxd's
 *
 * Functions return 0 or a negative errno; they never print, except the
 * CLI's boundary: cli_err() and the option helpers that call it
 * (cli_parse_opts, cli_bad_option, cli_home_open), and the JSON output
 * (cli_jw_print). */
#pragma once
#include <getopt.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <sys/types.h>
#include "fs/fuse_holder.h"

#define CLI_MAX_NODES 16
#define CLI_MAX_TARGETS 8
#define CLI_PATH 4096

struct cli_home {
	char home[CLI_PATH];   /* absolute */
	char bindir[CLI_PATH]; /* where strata-meta & co. live */
	char mount[CLI_PATH];
	int nodes;   /* chunkservers */
	int targets; /* targets per chunkserver */
	int replicas;
	/* Chunkservers as separate hosts (own network namespace and address)
	 * when nodes > 1: 1 yes, 0 loopback ports (--no-netns), -1 not chosen. */
	int netns;
	/* Every connection of the cluster in TLS (`strata up --tls`,
	 * fs/rpc_tls.h): its daemons get --tls, its tools and clients use it. */
	bool tls;
	bool have_conf; /* strata.conf existed */
};

/* Which daemon: meta, chunkserver i (1-based), fuse or the node agent
 * (strata-sandboxd, started last and stopped first). With several nodes
 * (issue 17) every node has a sandboxd ("sandboxd" for node 1, "sandboxdI"
 * for node I, each in its node's namespace, in the cluster through meta)
 * and one strata-apiserver ("apiserver") serves them all. */
enum cli_kind { D_META, D_CS, D_FUSE, D_SANDBOXD, D_APISERVER };
/* The most daemons of a home: meta, nodes, fuse, a sandboxd per node, apiserver. */
#define CLI_MAX_DAEMONS (2 * CLI_MAX_NODES + 3)
struct cli_daemon {
	enum cli_kind kind;
	int index;	    /* chunkserver or sandbox node number, 1-based */
	char name[16];	    /* "meta", "cs1", "fuse", "sandboxd", "sandboxd2", "apiserver" */
	const char *binary; /* "strata-meta", ... */
};

/* ---- errors at the boundary (options.c) ------------------------------- */
/* Prints "strata <verb>: <message>" on stderr. */
void cli_err(const char *verb, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* ---- the command line (options.c) --------------------------------------- */
/* The options verbs share: which a verb takes (cli_verb_opts.common) and
 * which were given (cli_opts.seen). A verb may use the bits from
 * CLI_OPT_OWN up for its own options. */
enum {
	CLI_OPT_HOME = 1 << 0, /* --home DIR */
	CLI_OPT_JSON = 1 << 1, /* --json */
	CLI_OPT_META = 1 << 2, /* --meta HOST:PORT */
	CLI_OPT_OWN = 1 << 3,
};

struct cli_verb_opts {
	const char *verb; /* for the messages: "strata <verb>: ..." */
	unsigned common;  /* CLI_OPT_* the verb takes */
	/* The verb's own options (NULL or ended by {0}); their val must be a
	 * character other than 'h'. on_opt gets each one with its value and
	 * returns 0, or the exit status after its error line. */
	const struct option *own;
	int (*on_opt)(void *arg, int val, const char *value);
	void *arg;
	/* --help: usage(stdout) and exit 0; NULL: the parse stops with
	 * cli_opts.help set, for a verb whose help depends on more. */
	void (*usage)(FILE *f);
	bool no_operands;     /* an operand is a usage error */
	bool stop_at_operand; /* options end at the first operand (a sub-command's follow) */
};

struct cli_opts {
	const char *home; /* --home DIR, or NULL ($STRATA_HOME, else ./.strata) */
	const char *meta; /* --meta HOST:PORT, or NULL */
	const char *key;  /* --key FILE (with --meta), or NULL (cli_key_setup) */
	bool json;
	bool help;     /* --help, when cli_verb_opts.usage is NULL */
	unsigned seen; /* CLI_OPT_* given */
	char **args;   /* the operands (pointers into argv) */
	int nargs;
};

/* What cli_parse_opts returns when the verb goes on. */
#define CLI_GO (-1)
/* Parses argv[1..argc) for verb v into ret: the shared options, v's own
 * (through v->on_opt), --help, the operands. Returns CLI_GO, or the exit
 * status the verb ends with (0 after --help, 2 after a usage error line). */
int cli_parse_opts(const struct cli_verb_opts *v, int argc, char **argv, struct cli_opts *ret);
/* Reports what getopt_long (called with opterr = 0 and ":" leading the
 * optstring) returned o for: an unknown option or a missing argument. */
void cli_bad_option(const char *verb, int o, char **argv);
/* Parses a decimal integer in [lo, hi]. Returns 0 or -EINVAL. */
int cli_parse_int(const char *s, int lo, int hi, int *ret);
/* cli_verb_opts.on_opt of a verb whose own option is --timeout S only
 * (1..3600 seconds); its arg is a struct cli_timeout_arg. */
struct cli_timeout_arg {
	const char *verb;
	int *seconds;
};
int cli_timeout_option(void *arg, int val, const char *value);
/* strata-meta's address: opt_meta, else $STRATA_META, else the home's
 * (-ENOENT when none is known). */
int cli_meta_addr(const char *opt_meta, const char *home, char *buf, size_t cap);

/* ---- JSON output (json_out.c), over fs/json.h's writer ------------------ */
struct jw;
struct json;
/* Prints w's document and a newline on stdout and frees it. Returns 0, or
 * -ENOMEM (nothing printed) when the writer ran out of memory. */
int cli_jw_print(struct jw *w);
/* Prints a parsed tree as one line of JSON (cli_jw_print). */
int cli_json_print(const struct json *j);
/* Key and an unsigned 64-bit value (jw_kint is signed). */
void cli_jw_ku64(struct jw *w, const char *k, uint64_t v);
/* Key and seconds with three decimals ("1.250"), as the CLI always printed them. */
void cli_jw_ksecs(struct jw *w, const char *k, double v);
/* Key and a string; NULL is "" (jw_kstr writes null). */
void cli_jw_kstr0(struct jw *w, const char *k, const char *v);

/* ---- the home ----------------------------------------------------------- */
/* Resolves the home: home_opt, else $STRATA_HOME, else ./.strata, made
 * absolute (the directory need not exist). Reads H/strata.conf if present.
 * argv0 locates the bin dir (the directory of /proc/self/exe). */
int cli_home_resolve(const char *home_opt, struct cli_home *ret);
/* The home the options name (cli_home_resolve), with the error line for
 * verb when it cannot be resolved. Returns 0 or -errno. */
int cli_home_open(const char *verb, const char *home_opt, struct cli_home *ret);
/* Writes H/strata.conf atomically. */
int cli_home_save(const struct cli_home *h);
/* Creates the directory layout (meta/db, cs<N>/t<M>, run, log, mount). */
int cli_home_create(const struct cli_home *h);
/* The cluster key in a home (made by cli_home_create, never replaced). */
#define CLI_KEY_FILE "cluster.key"
/* Makes the cluster key the credential of this process's calls (role
 * admin): key_opt (--key), else the home's cluster.key if there is one,
 * else $STRATA_KEY; and TLS the default of its connections if the home
 * says so (else $STRATA_TLS=1). Returns 0, or -errno after printing why
 * for verb. */
int cli_key_setup(const char *verb, const char *key_opt, const char *home_opt);
/* Path helpers: snprintf into buf[CLI_PATH]; return buf. */
char *cli_path(char *buf, const struct cli_home *h, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* Number of daemons (meta + nodes + fuse + sandboxd, or with several nodes
 * a sandboxd each and the apiserver) and the i-th of them. */
int cli_daemon_count(const struct cli_home *h);
void cli_daemon_get(const struct cli_home *h, int i, struct cli_daemon *ret);

/* ---- files ---------------------------------------------------------------- */
/* Reads a small text file (trailing newline stripped) into buf[cap].
 * Returns its length or -errno. */
int cli_read_file(const char *path, char *buf, size_t cap);
/* The last non-empty line of a text file (a log) into out[cap]; "" if none. */
void cli_last_line(const char *path, char *out, size_t cap);
/* Writes text atomically (tmp + rename). */
int cli_write_file(const char *path, const char *text);
int cli_mkdir_p(const char *path, mode_t mode);

/* ---- processes -------------------------------------------------------------- */
/* Pid recorded for d, or 0 if none. */
pid_t cli_daemon_pid(const struct cli_home *h, const struct cli_daemon *d);
/* True if pid is alive (not a zombie) and runs d's binary. */
bool cli_pid_alive(pid_t pid, const char *binary);
/* Address recorded in H/run/<name>.addr into buf (or "" if none). */
void cli_daemon_addr(const struct cli_home *h, const struct cli_daemon *d, char *buf, size_t cap);
/* Starts argv[0] (a path) in a new session with stdin from /dev/null and
 * stdout+stderr appended to logpath. Returns the pid or -errno. */
pid_t cli_spawn(char *const argv[], const char *logpath);
/* The same, in the network namespace bound at netns_path (NULL: ours). */
pid_t cli_spawn_in(char *const argv[], const char *logpath, const char *netns_path);
/* Sends SIGTERM, waits up to timeout_ms, then SIGKILL. Returns 0 once the
 * process is gone, -errno otherwise. */
int cli_stop_pid(pid_t pid, const char *binary, int timeout_ms);
/* Milliseconds of CLOCK_MONOTONIC. */
long long cli_now_ms(void);
void cli_sleep_ms(int ms);

/* ---- the mount ------------------------------------------------------------- */
enum cli_mount_state {
	MNT_NONE = 0,  /* nothing mounted there */
	MNT_OK = 1,    /* a fuse mount that answers stat */
	MNT_STALE = 2, /* mounted but stat fails (ENOTCONN: daemon gone) */
	MNT_OTHER = 3, /* something that is not fuse is mounted there */
};
enum cli_mount_state cli_mount_state(const char *path);
const char *cli_mount_state_name(enum cli_mount_state s);
/* Unmounts path (lazy if busy). Returns 0 or -errno. */
int cli_umount(const char *path);

/* ---- the holder of the mount's FUSE connection (fuse_holder.c) ---------- */
/* Its socket: H/run/fuse-holder.sock into buf[CLI_PATH]; returns buf. */
char *cli_fuse_holder_socket(const struct cli_home *h, char *buf);
/* Returns 1 with what it says in *ret, 0 if no holder answers, or -errno. */
int cli_fuse_holder_status(const struct cli_home *h, struct fuse_holder_info *ret);
/* True if a holder keeps a live connection no strata-fuse serves: a new
 * strata-fuse takes it over (the mount must not be unmounted). */
bool cli_fuse_holder_keeps(const struct cli_home *h);
/* Tells the holder to exit and waits for it. Returns 1 if one was stopped,
 * 0 if none ran, or -errno. */
int cli_fuse_holder_stop(const struct cli_home *h, int timeout_ms);

/* ---- chunkservers as hosts (netns.c) ----------------------------------------
 * Node i of a multi-node home lives in network namespace strata-<tag>-cs<i>
 * with address 10.78.Y.(10+i)/24 on a veth to the bridge stu<tag>br, whose
 * address 10.78.Y.1 strata-meta listens on (tag: a hash of the home's path;
 * Y: a /24 free on this machine, kept in H/run/net). Only on-link traffic:
 * nothing is forwarded or routed off the machine. */
struct cli_net {
	char tag[9];	 /* 8 hex digits */
	char bridge[16]; /* interface name */
	int subnet;	 /* Y of 10.78.Y.0/24; 0 = none chosen yet */
	bool created;	 /* H/run/net lists a bridge: this home's network exists */
	bool on;	 /* this run: the chunkservers live in namespaces */
	char err[256];	 /* what failed, for the message at the boundary */
};
/* Names from the home, subnet and what exists from H/run/net. on = created
 * and the bridge is there. */
void cli_net_load(const struct cli_home *h, struct cli_net *ret);
/* Returns 0 if namespaces can be made here, else -errno with why[cap]. */
int cli_net_usable(char *why, size_t cap);
/* Creates what is missing of the bridge and the namespaces of nodes 1..N
 * (recorded in H/run/net before they exist) and re-applies their addresses:
 * idempotent, and a repair after a reboot. Sets on. Returns 0 or -errno
 * (n->err says what failed). */
int cli_net_up(const struct cli_home *h, struct cli_net *n);
/* Deletes what H/run/net lists (namespaces, veths, bridge); keeps the subnet
 * there for the next `up`. Returns the number deleted or -errno (n->err). */
int cli_net_down(const struct cli_home *h, struct cli_net *n);
/* Node i's namespace name into buf[cap]; returns buf. */
char *cli_net_ns_name(const struct cli_net *n, int node, char *buf, size_t cap);
/* Its path (/run/netns/NAME) into buf[cap]; returns buf. */
char *cli_net_ns_path(const struct cli_net *n, int node, char *buf, size_t cap);
/* Host part of an address: node i's (i >= 1) or the bridge's (i = 0). */
char *cli_net_ip(const struct cli_net *n, int node, char *buf, size_t cap);
/* True if node i's namespace exists (a mounted nsfs file). */
bool cli_net_ns_exists(const struct cli_net *n, int node);
/* True if pid runs in node i's namespace. */
bool cli_net_pid_in(const struct cli_net *n, int node, pid_t pid);

/* ---- the meta service ------------------------------------------------------- */
/* Returns 0 if strata-meta at addr answers a ping (or, in a build without the
 * meta client, accepts a TCP connection), else -errno. */
int cli_meta_ping(const char *addr);
/* Number of targets the routing table of the meta at addr knows about, or -errno
 * (-ENOSYS in a build without the meta client). */
int cli_meta_targets(const char *addr);
/* Returns 0 if a TCP connection to addr succeeds. */
int cli_tcp_probe(const char *addr, int timeout_ms);

/* ---- sandbox nodes (sbnodes.c) ------------------------------------------------ */
struct sbnode_table;
struct jw;
/* The rows after a header line (nothing for an empty table). */
void cli_sbnodes_print(const struct sbnode_table *t);
/* "sandbox_nodes": [...] into w (an object's member). */
void cli_sbnodes_json(struct jw *w, const struct sbnode_table *t);
/* Reads the table from strata-meta at addr with the home's key (role admin,
 * no message). Returns 0 or -errno (-ENOSYS: a build without meta client). */
int cli_meta_sbnodes(const struct cli_home *h, const char *addr, struct sbnode_table *ret);

/* ---- strata-sandboxd -------------------------------------------------------- */
/* Its API socket: H/run/sandboxd.sock into buf[CLI_PATH]; returns buf. */
char *cli_sandboxd_socket(const struct cli_home *h, char *buf);
/* Node i's (1: the one above; i > 1: H/run/sandboxdI.sock). */
char *cli_sandboxd_socket_of(const struct cli_home *h, int node, char *buf);
/* Sandbox nodes of the home: one sandboxd per node when there are several
 * (a cluster with an apiserver), else the one. */
int cli_sbnode_count(const struct cli_home *h);
/* The TCP port of node i's sandboxd API (its own address in a namespace;
 * on loopback CLI_SBNODE_PORT + i) and of the apiserver's first try. */
#define CLI_SBNODE_PORT 7070
#define CLI_APISERVER_PORT 7080
/* Returns 0 if the socket accepts a connection, else -errno. */
int cli_sandboxd_ping(const char *sock);
/* Deletes every sandbox sandboxd at sock knows (cmd_sandbox.c). Returns the
 * number deleted or -errno (the first failure; the rest are still tried). */
int cli_sandboxd_delete_all(const char *sock);
/* Unmounts the node's image mounts of home h: overlay and bind mounts made by
 * `strata image mount`, then the shared EROFS mounts, dropping their leases
 * (cmd_down.c). Returns the number unmounted. */
int cli_images_unmount_all(const struct cli_home *h);

/* Starts strata-fuse for h's mount as `strata up` does (taking over a
 * connection the holder keeps, else mounting) and waits up to timeout_ms
 * for the mount to answer (cmd_up.c; `strata restart fuse`). Returns 0 (also
 * when a working strata-fuse runs already) or -errno after its error line. */
int cli_up_fuse(const struct cli_home *h, int timeout_ms);

/* ---- verbs --------------------------------------------------------------- */
int cmd_up(int argc, char **argv);
int cmd_down(int argc, char **argv);
int cmd_restart(int argc, char **argv);
int cmd_status(int argc, char **argv);
int cmd_admin(int argc, char **argv);
int cmd_fsck(int argc, char **argv);
int cmd_image(int argc, char **argv);
int cmd_sandbox(int argc, char **argv);
int cmd_tenant(int argc, char **argv);
