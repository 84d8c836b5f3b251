/* apiserver.h — strata-apiserver's internal interfaces (one file each):
 *
 *   main.c     options, the listener, a thread per client connection
 *   client.c   a client connection: request heads, auth, dispatch, replies
 *   nodes.c    the node table read from strata-meta, placement and the queue
 *   create.c   POST /v1/sandboxes: placement, queue, idempotent retries
 *   list.c     the routes answered from several nodes or from the table
 *   proxy.c    a request forwarded to a node, the answer streamed back
 *   framing.c  HTTP body framing (sized, chunked, to the end) and pumps
 *   pool.c     kept-alive connections to the nodes
 *
 * The apiserver holds no state of its own that a restart would lose: the
 * node table is strata-meta's, sandboxes are the nodes', and an id names
 * its node (sb-NNNN..., sandbox/cluster/README.md), so any apiserver
 * serves any sandbox. */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>
#include <sys/types.h>
#include "fs/json.h"
#include "fs/sbnode_proto.h"
#include "sandbox/sandboxd/http.h"
#include "sandbox/sandboxd/tenants.h"

#define API_ADDR_MAX (SBNODE_ADDR_MAX + 1)
#define API_CREATE_BODY_MAX (1u << 20) /* a create's JSON (the nodes' own limit is larger) */
#define API_EXCLUDE_MAX 16	       /* nodes a create skips after they refused it */

struct api_config {
	char *meta_addr, *listen, *token, *tenants_path, *key_path, *addr_file;
	int64_t queue_max;	  /* creations waiting for room at once */
	int64_t queue_timeout_ms; /* a creation's wait without Strata-Queue-Timeout */
	int64_t refresh_ms;	  /* how often the node table is read */
	int64_t max_conns;	  /* client connections at once */
};

struct apiserver {
	struct api_config cfg;
	struct api_nodes *nodes;
	struct api_pool *pool;
	pthread_mutex_t tmu; /* the tenants table and its stat */
	struct sbd_tenants tenants;
	struct stat tenants_st;
	int64_t tenants_checked_ms;
	atomic_int conns;
	atomic_ullong creates_total, proxied_total, queued_total, no_capacity_total;
};

/* ---- framing.c --------------------------------------------------------- */
/* Bytes read from fd and not consumed yet: b[0..len). */
struct ibuf {
	int fd;
	char *b;
	size_t len, cap;
};
int ibuf_init(struct ibuf *in, int fd, size_t cap);
void ibuf_done(struct ibuf *in);
/* Reads more (at least one byte). Returns the count, 0 at EOF, -errno. */
ssize_t ibuf_fill(struct ibuf *in);
void ibuf_consume(struct ibuf *in, size_t n);
/* Writes all of p, or returns -errno. */
int send_all(int fd, const void *p, size_t n);

enum body_kind { BODY_NONE, BODY_LEN, BODY_CHUNKED, BODY_EOF };
/* An answer's head (the node's): status and framing. */
struct resp_head {
	int status;
	enum body_kind kind;
	uint64_t length;
	bool close; /* Connection: close, or a body to the end */
	size_t head_len;
};
/* Parses a response head at in->b (waits for more bytes as needed).
 * head_request: the request was HEAD (no body). Returns 0, -EBADMSG, or
 * the read's error (-ECONNRESET at EOF). */
int resp_head_read(struct ibuf *in, bool head_request, struct resp_head *ret);
/* Copies a body of kind/length from in to out_fd (-1: drops it). Returns 0,
 * -EPIPE when writing to out_fd failed, -ECONNRESET / -EBADMSG / -errno when
 * reading in failed. */
int pump_body(struct ibuf *in, int out_fd, enum body_kind kind, uint64_t length);
/* Reads a body into *ret (heap, NUL-terminated) up to max bytes. */
int read_body(struct ibuf *in, enum body_kind kind, uint64_t length, size_t max, char **ret,
	      size_t *ret_len);

/* ---- pool.c ------------------------------------------------------------ */
struct api_pool *api_pool_new(void);
void api_pool_free(struct api_pool *p);
/* A connection to addr: a kept one (*ret_reused) or a new one. Returns the
 * fd or -errno (connect failed: nothing was sent). */
int api_pool_get(struct api_pool *p, const char *addr, bool *ret_reused);
/* Keeps fd for the next request to addr (closed past the pool's bound). */
void api_pool_put(struct api_pool *p, const char *addr, int fd);

/* ---- nodes.c ----------------------------------------------------------- */
struct api_place {
	uint32_t cpu_milli;
	uint64_t mem;
	const char *image;
	uint32_t exclude[API_EXCLUDE_MAX];
	unsigned nexclude;
};
/* Starts the refresh thread (reads the table every refresh_ms). NULL on
 * error (logged). */
struct api_nodes *api_nodes_new(struct apiserver *a);
void api_nodes_free(struct api_nodes *n);
/* Places p: power of k choices with affinity (sandbox/cluster/placement.h)
 * over the live nodes, counted against the chosen node until its report
 * shows it. When no node has room, waits in the queue until deadline_ms
 * (strata_mono_ms). Returns 0 with the node and its address, -ETIMEDOUT
 * (the deadline passed: no room), -EBUSY (the queue is full), -ENODEV (no
 * live node at all, after the deadline). */
int api_nodes_pick(struct api_nodes *n, const struct api_place *p, int64_t deadline_ms,
		   uint32_t *ret_node, char ret_addr[API_ADDR_MAX], int64_t *ret_waited_ms);
/* A create placed on node that did not happen: its count goes. */
void api_nodes_unpick(struct api_nodes *n, uint32_t node, const struct api_place *p);
/* The node refused for want of room (full until its next report), or did
 * not answer (not live until its next report). */
void api_nodes_full(struct api_nodes *n, uint32_t node);
void api_nodes_down(struct api_nodes *n, uint32_t node);
/* A sandbox of node was deleted through us: room for the queue now. */
void api_nodes_released(struct api_nodes *n, uint32_t node);
/* Where node is: 0 (live, its address), -EHOSTDOWN (lost: its lease
 * lapsed), -ENOENT (not in the table). */
int api_nodes_route(struct api_nodes *n, uint32_t node, char ret_addr[API_ADDR_MAX]);
/* The live nodes' ids and addresses (at most max), and the lost ones'
 * ids. Returns the number of live ones. */
int api_nodes_list(struct api_nodes *n, uint32_t *ids, char (*addrs)[API_ADDR_MAX], int max,
		   uint32_t *lost, int *nlost, int maxlost);
/* The table as GET /v1/node answers it. */
void api_nodes_json(struct api_nodes *n, struct jw *w);
/* Creations waiting in the queue now. */
int api_nodes_queued(struct api_nodes *n);

/* ---- client.c ---------------------------------------------------------- */
struct api_client {
	struct apiserver *a;
	struct ibuf in;
	bool close; /* after this answer */
	char peer[64];
};
struct api_req {
	struct sbd_http_req h;
	const char *head; /* in.b[0..h.head_len): valid until the body is consumed */
	char auth[SBD_TENANT_TOKEN_MAX + 16];
	bool admin;
	char tenant[SBD_TENANT_NAME_MAX + 1];
};
/* Serves a client connection until it closes; closes fd. */
void api_client_serve(struct apiserver *a, int fd, const char *peer);
/* The value of header name in the request head (copied into buf), or NULL. */
const char *api_req_header(const struct api_req *r, const char *name, char *buf, size_t cap);
void api_reply_error(struct api_client *c, int status, const char *code, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
void api_reply_json(struct api_client *c, int status, struct jw *w);
/* A JSON body as a node answered it. */
void api_reply_raw(struct api_client *c, int status, const char *body, size_t len);
/* Reads the request's buffered body (at most max bytes; 413 answered past
 * it). Returns 0 with *ret (heap) or -errno after answering. */
int api_req_body(struct api_client *c, const struct api_req *r, size_t max, char **ret,
		 size_t *ret_len);

/* ---- proxy.c ----------------------------------------------------------- */
/* A buffered exchange with a node: method path (with query), the caller's
 * Authorization, a JSON body. Fills *ret_status and *ret_body (heap).
 * Returns 0, -ECONNREFUSED/-errno (the node could not be reached or
 * answered nothing: *ret_sent says whether the request went out). */
int api_exchange(struct apiserver *a, const char *addr, const char *method, const char *path,
		 const char *auth, const char *body, size_t len, int *ret_status, char **ret_body,
		 size_t *ret_len, bool *ret_sent);
/* Forwards the client's request r (head as it came, then its body) to
 * addr and streams the answer back (its status in *ret_status). Returns 0
 * (the client connection may go on unless c->close), or -errno when the
 * node could not be reached before anything was sent (the caller answers;
 * the request is still in c->in). */
int api_proxy(struct api_client *c, const struct api_req *r, const char *addr, int *ret_status);

/* ---- create.c, list.c -------------------------------------------------- */
void api_create(struct api_client *c, const struct api_req *r);
void api_list(struct api_client *c, const struct api_req *r);
/* /v1/sandboxes/{id}...: routed to the node the id names. */
void api_route_sandbox(struct api_client *c, const struct api_req *r, const char *rest);
/* The node an id names (sb-NNNN...), or 0. */
uint32_t api_id_node(const char *id);
