/* sandboxd.h — strata-sandboxd's internal types: the daemon context, the
 * registry entry of one sandbox, and the functions the files of the daemon
 * share (server.c: connections; api.c and api-internal.h: routes;
 * registry.c: sandboxes, admission, persistence and the reaper; images.c,
 * image_store.c: images.h). Every external name has the prefix sbd_.
 *
 * Sandbox states and the functions that move between them:
 *
 *   POST /v1/sandboxes (sbd_api_create: the backend's create, then
 *   create_commit -> sbd_registry_insert)
 *            |
 *            v
 *         RUNNING --POST .../pause (backend pause)--> PAUSED
 *          ^  |  <--POST .../resume (backend resume)--
 *          |  +--delete / ttl / idle (sbd_registry_destroy)--> gone
 *   (start: sbd_registry_adopt_all, the backend's adopt)
 *
 * Invariants:
 *  1. A sandbox in the registry has a state dir <state>/sandboxes/<id>/ with a
 *     state.json written atomically (tmp + rename) after every state change;
 *     removing the dir is the last step of destroy.
 *  2. The admission counters (count, memory, pids) are the sums over the
 *     registry; they change only in sbd_registry_insert and registry_remove
 *     (registry.c, inside sbd_registry_destroy).
 *  3. creating* are the sums over the creates running on worker threads
 *     (api_create.c); admission counts them too. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "sandbox/sandboxd/backend.h"
#include "sandbox/sandboxd/images.h"
#include "fs/err.h"
#include "fs/json.h"
#include "sandbox/sandboxd/loop.h"
#include "sandbox/sandboxd/tenants.h"

#define SBD_ID_LEN 20
#define SBD_MAX_LABELS 32
#define SBD_MAX_ENV 256
#define SBD_NAME_MAX 255
/* Output kept in sandboxd's heap for background execs no client follows,
 * all sandboxes together (the default of --exec-keep-budget-mb): outside
 * every cgroup, so bounded here; a few execs at the largest output cap. */
#define SBD_EXEC_KEEP_BUDGET (256ll << 20)

/* Connection limits (server.c; API.md "Limits of connections"): what keeps
 * many or slow clients from taking sandboxd's descriptors, memory or loop.
 * Connections at once: well under the descriptor limit (20,000 here), which
 * sandboxes, agents and transfers share; lowered at start to fit it. */
#define SBD_MAX_CONNS_DEFAULT 4096
/* Connections of one peer (a uid on the unix socket, an address on TCP):
 * a quarter of the total, so one peer cannot lock the others out. */
#define SBD_MAX_CONNS_PER_PEER_DEFAULT 1024
/* A request head must be complete this long after its first byte (or the
 * connection's accept): a slow-loris client holds a slot 10 s at most. */
#define SBD_HEAD_TIMEOUT_MS_DEFAULT 10000
/* A buffered body must arrive within this plus its length at
 * SBD_BODY_MIN_RATE: 64 MiB (the largest by default) in 10 + 256 s. */
#define SBD_BODY_TIMEOUT_MS_DEFAULT 10000
#define SBD_BODY_MIN_RATE (256u << 10) /* bytes per second */
/* An idle keep-alive connection (no request begun) is closed after this;
 * so is one whose client does not read its answer for as long. */
#define SBD_IDLE_CONN_TIMEOUT_MS_DEFAULT 60000
/* Buffered request bodies of all connections together (file uploads
 * stream and do not count): two bodies of the largest size (64 MiB). */
#define SBD_MAX_BODY_TOTAL_DEFAULT (128LL << 20)

/* FAILED: the sandbox cannot work any more and says why (failed_reason);
 * it is kept, refusing execs and files, until deleted (image_store.c marks
 * the sandboxes whose image mount lost its strata mount). */
enum sbd_state { SBD_RUNNING, SBD_PAUSED, SBD_FAILED };

struct sbd_label {
	char *key, *value;
};

/* A hook on a sandbox's destruction: the layers above the registry (the
 * API's exec streams) register one for what they serve on the sandbox, so
 * that the registry needs to know nothing of them. */
struct sbd_destroy_hook {
	/* Called by sbd_registry_destroy before the backend destroys sb; h is off
	 * the list by then. why: the reason ("deleted by request", "ttl
	 * expired", ...). */
	void (*fn)(struct sbd_destroy_hook *h, struct sbd_sandbox *sb, const char *why);
	struct sbd_destroy_hook *next;
};

struct sbd_sandbox {
	char id[SBD_ID_LEN + 1];
	char *image;	       /* name as registered */
	char *rootfs;	       /* the image's root directory */
	struct sbd_image *img; /* the image's handle (images.h), NULL if unknown */
	char *backend_name;
	struct sbd_backend *backend;
	void *bpriv; /* the backend's own data */
	enum sbd_state state;
	double cpu;
	int64_t memory_mb, pids, disk_mb;
	char **env; /* NULL-terminated "K=V" */
	char *cwd, *user;
	bool net_host;
	/* Network "egress" (api_network.c): the policy asked for at create,
	 * until the sandbox is attached; then its box on the node's network. */
	bool net_egress;
	struct sbn_policy *net_policy;
	struct sbn_box *net_box;
	/* User namespace: asked for (1), refused (0), or the daemon's default
	 * (-1: one where the backend and the image allow); userns what it got. */
	int userns_req;
	bool userns;
	bool keep_state; /* fncall: its Python calls share one interpreter of its own */
	bool reserves;	 /* counts against the memory/pids budgets (not fncall:
			  * an idle fncall sandbox holds nothing) */
	int64_t ttl_s, idle_s;
	int64_t created_at;	/* wall seconds */
	int64_t expires_at;	/* wall seconds, 0 = never */
	int64_t last_active_ms; /* monotonic */
	struct sbd_label *labels;
	size_t nlabels;
	char *idem_key;
	char *tenant;	     /* the tenant that created it (tenants.h); NULL: the operator */
	char *bstate;	     /* the backend's persisted state (JSON text) or NULL */
	char *failed_reason; /* SBD_FAILED: why, else NULL */
	int running_execs;
	void *execs;			     /* api_exec.c: the exec streams in flight */
	struct sbd_destroy_hook *on_destroy; /* run by sbd_registry_destroy */
	struct sbd_pause_wait *pause_wait;   /* a pause waiting for the freeze (api_pause.c) */
	uint64_t execs_total;
	uint64_t exec_id_last;	    /* the highest exec id given (api_exec.c) */
	uint64_t exec_ids_reserved; /* persisted: ids up to it may have been given */
	size_t exec_kept;	    /* bytes kept for its execs without a client */
	struct sbd_sandbox *next;
};

struct sandboxd_config {
	char *home, *state_dir, *socket_path, *tcp_listen, *token;
	char *tenants_path; /* --tenants FILE, default HOME/tenants.json (auth.c) */
	char *state_link;   /* HOME/sandboxd when state_dir is the default on tmpfs */
	char *images_dir;
	char *firecracker;	      /* --firecracker, or NULL: firecracker on PATH */
	uint64_t vm_snapshots_max_mb; /* --vm-snapshots-max-mb: per snapshot store (warm.h) */
#define SBD_VM_SNAPSHOTS_MAX_MB_DEFAULT 4096
	int64_t max_sandboxes;
	int64_t memory_budget_mb; /* sum of memory_mb admitted */
	int64_t pids_budget;
	int64_t reserve_mb; /* refuse when MemAvailable is below */
	int64_t max_body;
	int64_t max_body_total; /* buffered bodies of all connections at once */
	int64_t max_conns, max_conns_per_peer;
	int64_t head_timeout_ms, body_timeout_ms, idle_conn_timeout_ms;
	int64_t default_output_cap, max_output_cap;
	int64_t default_timeout_ms, max_timeout_ms;
	int64_t exec_keep_budget; /* --exec-keep-budget-mb, bytes (api_exec.c) */
	int64_t store_timeout_ms; /* --store-timeout: a call into the image store (store_call.h) */
	int fncall_pool;
	bool fresh_netns; /* --fresh-netns: no reuse of network namespaces */
	/* --net-uplink, --net-pool, --net-dns, --net-protect, --net-resolver-port:
	 * network "egress" (api_network.c); none without an uplink. */
	char *net_uplink, *net_pool, *net_dns, *net_protect;
	int64_t net_resolver_port;
	bool no_userns; /* --no-userns: no user namespace unless a create asks */
	/* --disk-dir, --disk-image, --disk-tmpfs/--disk-quota: where the
	 * container sandboxes' writable layers go (sbd_disk_opts). */
	char *disk_dir, *disk_image;
	int disk_mode;
	/* The cluster (issue 17, lease.h): --meta, --node-id (in every sandbox
	 * id), --advertise (the API address apiservers forward to; default
	 * --listen-tcp), --key, --cpu-budget (millicores placement counts). */
	char *meta_addr, *advertise, *key_path;
	int64_t node_id;
	int64_t cpu_budget_milli;
};

struct sandboxd {
	struct sandboxd_config cfg;
	struct sbd_loop *loop;
	struct sbd_backend *backends[4]; /* container, fncall, firecracker, qemu */
	struct sbn_node *net;		 /* network "egress", or NULL (api_network.c) */
	struct sbd_image *images;	 /* registered directories (images.h) */
	struct sbd_imgstore *imgstore;	 /* the cluster's image store (image_store.c) */
	struct sbd_sandbox *sandboxes;
	size_t count;
	int64_t mem_used_mb, pids_used;
	size_t creating; /* creates in flight on worker threads (api_create.c) */
	int64_t creating_mem_mb, creating_pids;
	struct sbd_pool *pool;		   /* worker threads (pool.h) */
	struct sbd_creates *creates;	   /* api_create.c's, made at the first create */
	struct sbd_xfers *xfers;	   /* xfer.c's file transfers, made at the first */
	struct sbd_unpersist *unpersist;   /* registry.c's queue of state to remove */
	struct sbd_server *server;	   /* server.c's connections and their limits */
	struct sbd_tenants tenants;	   /* auth.c: the tenants file as last read */
	struct stat tenants_st;		   /* its stat then (a change is reloaded) */
	bool tenants_file;		   /* it exists (and was read) */
	uint8_t id_pool[512];		   /* random bytes for ids (api_create.c) */
	size_t id_left;			   /* bytes of id_pool not used yet */
	int64_t meminfo_mb, meminfo_at_ms; /* registry.c: MemAvailable and when */
	int listen_fd, tcp_fd, timer_fd, signal_fd;
	struct sbd_watch w_listen, w_tcp, w_timer, w_signal;
	bool stopping;
	int64_t started_ms;
	uint64_t creates_total, deletes_total, execs_total, refused_total, reaped_total;
	size_t exec_kept; /* api_exec.c: bytes kept for execs without a client */
	int conns;
	struct sbd_lease *lease; /* lease.h, with --meta */
};

/* Who a request is (auth.c): the operator (tenant "", admin: the unix
 * socket's root, the --token), or a tenant of the tenants file. */
struct sbd_who {
	char tenant[SBD_TENANT_NAME_MAX + 1]; /* "": the operator */
	bool admin;
};

/* What a tenant's sandboxes hold (auth.c), creates in flight included. */
struct sbd_tenant_usage {
	int64_t sandboxes, memory_mb;
	double cpu;
};

/* ---- auth.c --------------------------------------------------------------- */
/* Who sends a request: authz is its Authorization header (or NULL), tcp
 * whether it came over TCP, uid the unix socket peer's. Returns 0 with
 * *ret filled, or -EACCES with the reason for the 401 in *ret_why. */
int sbd_auth_request(struct sandboxd *d, bool tcp, uint32_t uid, const char *authz,
		     struct sbd_who *ret, const char **ret_why);
/* Whether w may see and act on sb: an admin every sandbox, a tenant its own. */
bool sbd_who_sees(const struct sbd_who *w, const struct sbd_sandbox *sb);
/* Whether sandbox tenant owner (NULL: the operator) is w's tenant. */
bool sbd_who_owns(const struct sbd_who *w, const char *owner);
/* Reads the tenants file when it changed since the last read (its inode,
 * size, mtime or ctime; called at start and every second). A file that
 * cannot be read or parsed leaves the table as it was (logged); one that
 * is gone empties it. */
void sbd_tenants_reload(struct sandboxd *d);
/* What the sandboxes of tenant (w's) hold now. */
void sbd_tenant_usage(struct sandboxd *d, const struct sbd_who *w, struct sbd_tenant_usage *ret);
/* A tenant's quotas: 0 when sb fits what w's tenant may hold, else
 * -EDQUOT with the limit and the usage in e. */
int sbd_tenant_admit(struct sandboxd *d, const struct sbd_who *w, const struct sbd_sandbox *sb,
		     struct strata_err *e);

/* ---- registry.c --------------------------------------------------------- */
struct sbd_backend *sbd_registry_backend(struct sandboxd *d, const char *name);
struct sbd_sandbox *sbd_registry_find(struct sandboxd *d, const char *id);
/* The sandbox of tenant owner (NULL: the operator) with idempotency key key. */
struct sbd_sandbox *sbd_registry_find_idem(struct sandboxd *d, const char *key, const char *owner);
/* Admission: 0 if a sandbox of sb's size fits, else -ENOSPC with the
 * reason in e. */
int sbd_registry_admit(struct sandboxd *d, const struct sbd_sandbox *sb, struct strata_err *e);
void sbd_registry_insert(struct sandboxd *d, struct sbd_sandbox *sb);
/* Writes the sandbox's state.json. Returns 0 or -errno. */
int sbd_registry_persist(struct sandboxd *d, const struct sbd_sandbox *sb);
/* Marks sb failed with the reason why (logged, persisted); a no-op if it
 * failed already. */
void sbd_registry_fail(struct sandboxd *d, struct sbd_sandbox *sb, const char *why);
/* Adds h to sb's on-destroy hooks (h stays the caller's), or removes it
 * (a no-op when it is not there). */
/* api_pause.c: frees a pause's wait (its client is not answered). Accepts NULL. */
struct sbd_pause_wait;
void sbd_pause_wait_free(struct sbd_pause_wait *pw);
void sbd_sandbox_hook_add(struct sbd_sandbox *sb, struct sbd_destroy_hook *h);
void sbd_sandbox_hook_del(struct sbd_sandbox *sb, struct sbd_destroy_hook *h);
/* Runs sb's on-destroy hooks, destroys through the backend, unlinks and frees. Returns the
 * backend's result (the sandbox is removed from the registry either way). */
int sbd_registry_destroy(struct sandboxd *d, struct sbd_sandbox *sb, const char *why);
/* Re-adopts every sandbox persisted under the state dir. */
void sbd_registry_adopt_all(struct sandboxd *d);
/* TTL and idle reaper, and the removal of deleted sandboxes' state;
 * called once a second. */
void sbd_registry_reap(struct sandboxd *d);
void sbd_sandbox_free(struct sbd_sandbox *sb);
/* Frees sb's labels and leaves it with none. */
void sbd_sandbox_labels_free(struct sbd_sandbox *sb);
/* The sandbox's JSON (the API's and state.json's); node: this node's
 * --node-id, written as "node" (the API's, in a cluster), or 0 for none. */
void sbd_sandbox_to_json(const struct sbd_sandbox *sb, uint32_t node, struct jw *w);
const char *sbd_state_name(enum sbd_state s);
/* Parses a persisted or requested sandbox. */
int sbd_sandbox_from_json(const struct json *j, struct sbd_sandbox *sb);
void sbd_registry_free_all(struct sandboxd *d);
/* Removes the state of destroyed sandboxes still queued for a worker. */
void sbd_registry_unpersist_wait(struct sandboxd *d);

/* ---- server.c ------------------------------------------------------------ */
struct sbd_conn;
int sbd_server_listen(struct sandboxd *d);
void sbd_server_close(struct sandboxd *d);
/* Queues a complete JSON response (body = w's buffer, consumed). */
void sbd_conn_reply_json(struct sbd_conn *c, int status, struct jw *body);
/* Queues an error response {"error":{"code":..,"message":..}}. */
void sbd_conn_reply_error(struct sbd_conn *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Queues a raw response (e.g. file contents). */
void sbd_conn_reply_raw(struct sbd_conn *c, int status, const char *ctype, const void *p, size_t n);
/* Marks the connection as owned by an asynchronous response (no further
 * request is read from it) before anything is sent, or releases it. */
void sbd_conn_hold(struct sbd_conn *c, bool hold);
/* Whether the connection is held (an asynchronous response or a stream). */
bool sbd_conn_held(const struct sbd_conn *c);
/* A held connection's response was queued (conn_reply_*): sends it and
 * carries on with the connection's next request (after this round). */
void sbd_conn_hold_done(struct sbd_conn *c);
/* Starts a chunked response (sent with the first chunk, which must follow
 * in the same callback); then sbd_conn_stream_chunk(); sbd_conn_stream_end(). */
void sbd_conn_stream_begin(struct sbd_conn *c, int status, const char *ctype);
void sbd_conn_stream_chunk(struct sbd_conn *c, const void *p, size_t n);
void sbd_conn_stream_end(struct sbd_conn *c);
/* The last chunk and the end, sent together. */
void sbd_conn_stream_end_with(struct sbd_conn *c, const void *p, size_t n);
/* Called when the peer of a stream goes away: set by the API (api_*.c). */
void sbd_conn_set_abort(struct sbd_conn *c, void (*fn)(void *ctx), void *ctx);
struct sandboxd *sbd_conn_daemon(struct sbd_conn *c);
/* Who sent the connection's current request (auth.c's answer at its head). */
const struct sbd_who *sbd_conn_who(const struct sbd_conn *c);
/* Bytes queued on the connection and not yet sent. */
size_t sbd_conn_pending(const struct sbd_conn *c);
/* A request's body as a transfer (xfer.h) reads it: the bytes read with the
 * head (pre: valid until sbd_conn_give_back), its framing, and the request's
 * keep-alive and Expect: 100-continue. */
struct sbd_conn_body {
	const char *pre;
	size_t pre_len;
	uint64_t length; /* Content-Length (0 when chunked) */
	bool chunked, keep_alive, expect_continue;
};
void sbd_conn_body(const struct sbd_conn *c, struct sbd_conn_body *ret);
/* Lends the connection's socket to a transfer on a worker thread: the loop
 * stops watching it. *ret_out: response bytes queued and not yet sent
 * (malloc'ed, the worker sends them first). Returns the fd. */
int sbd_conn_lend(struct sbd_conn *c, char **ret_out, size_t *ret_out_len);
/* The transfer is over (on the loop): the socket is watched again, extra
 * (bytes read past the request's body) is kept as the next request's
 * start; !keep closes the connection after the answer. */
void sbd_conn_give_back(struct sbd_conn *c, const void *extra, size_t n, bool keep);
/* After give-back and the answer: sent (the worker sent the whole response)
 * or queued by sbd_conn_reply_*; the connection goes on with its next
 * request. */
void sbd_conn_answered(struct sbd_conn *c, bool sent);

/* ---- api.c ---------------------------------------------------------------- */
/* Dispatches one complete request. */
void sbd_api_dispatch(struct sbd_conn *c, const char *method, const char *path, const char *query,
		      const char *body, size_t body_len);
/* Whether the body of this request of who streams to a transfer (an upload
 * to a sandbox of who's whose backend has file_root) instead of being
 * buffered. */
bool sbd_api_body_streamed(struct sandboxd *d, const struct sbd_who *who, const char *method,
			   const char *path);
/* Adds what the creates in flight of tenant owner (NULL: the operator)
 * hold to *u (api_create.c). */
void sbd_api_creating_usage(struct sandboxd *d, const char *owner, struct sbd_tenant_usage *u);
/* Shutdown: waits for the creates in flight and completes them. */
void sbd_api_creates_drain(struct sandboxd *d);

/* ---- network "egress" (api_network.c) ------------------------------------- */
struct sbn_policy;
struct sbn_box;
struct sbn_node;
struct json;
struct jw;
/* The policy fields of j (allow_out, deny_out, egress_default) in *ret.
 * Returns 0 or -EINVAL with err. */
int sbd_net_parse(const struct json *j, struct sbn_policy **ret, struct strata_err *err);
/* Attaches a created sandbox with network "egress" (else nothing):
 * returns 0 or -errno with err. */
int sbd_net_attach(struct sandboxd *d, struct sbd_sandbox *sb, struct strata_err *err);
/* Detaches it (before its backend destroys it); accepts any sandbox. */
void sbd_net_detach(struct sandboxd *d, struct sbd_sandbox *sb);
/* Removes the decision log of a sandbox gone for good. */
void sbd_net_forget(struct sandboxd *d, const char *id);
/* Adds net_bytes_out and net_bytes_in to a metrics object. */
void sbd_net_metrics(struct jw *w, const struct sbd_sandbox *sb);
void sbd_api_network(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method,
		     const char *sub, const char *query, const char *body, size_t len);
/* At start (with --net-uplink) and stop. */
int sbd_net_start(struct sandboxd *d);
void sbd_net_stop(struct sandboxd *d);
