/* rpc.h — request/reply RPC over a stream transport (TCP now, RDMA later).
 *
 * Server: worker threads share one epoll set; the one that gets a
 * connection's event reads its frame, runs the handler and writes the reply
 * (rpc_server.c). Optionally the workers are split into pools and a frame
 * runs only in the pool a classifier picks (rpc_server_opts.pool_of), so that
 * requests which wait on other servers cannot take every worker from the
 * requests they wait for. A connection that sends a malformed frame (bad magic,
 * newer major version, oversized length, bad checksum, truncated and then
 * closed) is logged with the reason and closed; other connections are
 * unaffected. Requests on one connection may be handled concurrently, so
 * replies can come back out of order (matched by req_id).
 *
 * Client: a pool of connections to one server address. rpc_call() is
 * blocking and thread-safe: it takes an idle connection (or dials a new one,
 * up to max_conns), sends, and waits for the reply with a timeout. On any
 * transport error the connection is dropped; the next call reconnects.
 * Calls marked idempotent are retried once on a fresh connection.
 *
 * Every connection opens with the handshake of rpc_auth.h: the client and
 * the server prove that they hold the cluster key, and the client states
 * its role, which the server checks each request against
 * (rpc_server_opts.may).
 *
 * Optionally the frames travel inside TLS 1.3 keyed by the cluster key
 * (rpc_tls.h): client and server must agree (rpc_*_opts.tls, else the
 * process default rpc_tls_default()); a mismatch is a clear error on both
 * sides, never a hang.
 *
 * Errors are negative errno: -ETIMEDOUT, -ECONNREFUSED, -ECONNRESET, -EPROTO,
 * -ENOKEY (no cluster key configured), -EKEYREJECTED (the peer does not hold
 * our key), -EPERM (our role may not send this request), RPC_ERR_PEER_TLS,
 * RPC_ERR_PEER_PLAIN (TLS on one side only), or the status the server's
 * handler returned. rpc_strerror() words them for messages. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <errno.h>
#include <stdint.h>
#include <sys/uio.h>
#include "fs/rpc_auth.h"
#include "fs/wire.h"

/* ---- transport interface: room for RDMA beside TCP ---------------------- */
struct transport_conn;
struct transport_ops {
	const char *name; /* "tcp", "tls" */
	/* addr is "host:port"; arg is the transport's state for the client
	 * (tls: its struct rpc_tls; tcp: unused). Returns 0 and a
	 * connection, or -errno. */
	int (*dial)(const char *addr, int timeout_ms, void *arg, struct transport_conn **ret);
	/* Sends all of iov, or fails. Returns 0 or -errno. */
	int (*sendv)(struct transport_conn *c, const struct iovec *iov, int iovcnt, int timeout_ms);
	/* Receives exactly n bytes. Returns 0, -ETIMEDOUT, -ECONNRESET on EOF, or -errno. */
	int (*recv_exact)(struct transport_conn *c, void *buf, size_t n, int timeout_ms);
	/* Waits for data and receives what is there (at least one byte) into
	 * iov. Returns the bytes received, -ETIMEDOUT, -ECONNRESET on EOF, or -errno. */
	ssize_t (*recvv)(struct transport_conn *c, struct iovec *iov, int iovcnt, int timeout_ms);
	/* True if an idle connection was closed or broken by the peer. */
	bool (*hung_up)(struct transport_conn *c);
	void (*close)(struct transport_conn *c);
};
extern const struct transport_ops transport_tcp;
extern const struct transport_ops transport_tls; /* rpc_tls.h */
/* Splits "host:port" (host may be empty, "[v6]" or a name). Returns 0 or -EINVAL. */
int addr_parse(const char *addr, char *host, size_t host_cap, uint16_t *ret_port);

/* TLS on one side only (rpc_tls.h): the server requires TLS and we speak
 * plain frames; the server speaks plain frames and we TLS. A server answers
 * the mismatch with a plain refusal frame, so neither side waits for a
 * deadline. (Linux errno values: the first travels as a reply status.) */
#define RPC_ERR_PEER_TLS (-EPROTOTYPE)
#define RPC_ERR_PEER_PLAIN (-ENOPROTOOPT)
/* Whether rpc_*_opts.tls asks for TLS. */
enum rpc_tls_mode { RPC_TLS_DEFAULT = 0, RPC_TLS_ON, RPC_TLS_OFF };
/* strerror(-r), thread-safe, with words for RPC_ERR_PEER_TLS and
 * RPC_ERR_PEER_PLAIN (which side to start with --tls); log.c uses it. */
const char *rpc_strerror(int r);

/* ---- server ------------------------------------------------------------- */
struct rpc_server;
struct rpc_peer {
	uint64_t conn_id;
	char addr[64]; /* remote "ip:port" */
	uint8_t minor; /* peer's wire minor version */
	uint8_t role;  /* enum rpc_role the peer proved in the handshake */
	/* The request being handled, if its frame carried WIRE_F_DATA: where
	 * its bulk data lies in the payload (data == NULL otherwise), the data
	 * hash and piece sums computed while verifying it (wire.h). */
	const uint8_t *data;
	size_t data_len;
	uint64_t data_hash;
	const uint64_t *data_sums; /* wire_data_pieces(data_len) entries */
};
/* A handler decodes req, does the work, encodes the reply payload into reply
 * and returns 0 or a negative errno (sent as the reply status; a failed
 * reply carries no payload). It runs on a worker thread. */
typedef int (*rpc_handler_fn)(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
			      const struct rpc_peer *peer);
/* Picks the pool of a request from its type and payload (the request's
 * fields, not yet decoded by the handler: may be short or malformed). Runs
 * on the thread that read the frame, once per request; must not block.
 * Returns 0..npools-1; anything else counts as 0. */
typedef int (*rpc_pool_fn)(void *ctx, uint16_t type, const uint8_t *payload, size_t len);
/* Whether a peer of role may send requests of type (rpc_role_may is the
 * cluster's table). A refused request is answered -EPERM and logged. */
typedef bool (*rpc_may_fn)(uint8_t role, uint16_t type);
#define RPC_MAX_POOLS 8
/* Connection limits and deadlines of the server (rpc_server.c), each a
 * named constant so that tests can prove it holds. */
#define RPC_MAX_CONNS 1024	    /* authenticated connections, default max_conns */
#define RPC_PEER_MAX_CONNS 512	    /* authenticated connections from one address */
#define RPC_HANDSHAKE_MAX_CONNS 512 /* connections still in their handshake */
#define RPC_HANDSHAKE_PEER_MAX 128  /* ... from one address (a client dials in bursts) */
#define RPC_HANDSHAKE_TIMEOUT_MS 5000
#define RPC_FRAME_TIMEOUT_MS 30000    /* a frame begun must be complete within this */
#define RPC_IDLE_TIMEOUT_MS 300000    /* an authenticated connection with nothing to do */
#define RPC_CLIENT_IDLE_MAX_MS 120000 /* a client reuses no connection idle longer */
struct rpc_server_opts {
	const char *name;   /* for logs, e.g. "meta" */
	const char *listen; /* "host:port"; port 0 picks a free one */
	int workers;	    /* worker threads (one pool); 0 = 4 */
	int max_conns;	    /* authenticated connections; 0 = RPC_MAX_CONNS */
	/* The cluster key clients must prove; NULL: the process credential's
	 * (rpc_auth_default). Without either the server does not start. */
	const struct rpc_key *key;
	rpc_may_fn may;	       /* NULL: an authenticated peer may send anything */
	enum rpc_tls_mode tls; /* RPC_TLS_DEFAULT: rpc_tls_default() */
	rpc_handler_fn handler;
	void *ctx;
	/* Worker pools, if npools > 1 (workers is then ignored): pool i runs at
	 * most pool_workers[i] (>= 1) requests at a time, those pool_of picks
	 * for it, and the server has sum(pool_workers) threads, so a pool that
	 * has a free worker always has a thread to read its next request, however
	 * long the other pools' handlers block. A request whose pool is busy
	 * waits in the pool's queue (FIFO, at most pool_queue requests; each
	 * holds its connection, which sends nothing more until it is answered);
	 * beyond that it is answered -EAGAIN at once (rpc_pool_stats.busy). */
	int npools;
	int pool_workers[RPC_MAX_POOLS];
	int pool_queue; /* 0 = 256 */
	rpc_pool_fn pool_of;
};
/* Binds and starts the workers (rpc_server.c). Returns 0 and *ret (owned by the
 * caller, release with rpc_server_free), -ENOKEY without a key, or -errno. */
int rpc_server_start(const struct rpc_server_opts *opts, struct rpc_server **ret);
/* The bound port (useful with port 0). */
uint16_t rpc_server_port(const struct rpc_server *s);
/* Stops accepting, closes all connections, joins threads, frees. NULL ok. */
void rpc_server_free(struct rpc_server *s);
/* Counters for tests: frames rejected as malformed since start. */
uint64_t rpc_server_rejected(const struct rpc_server *s);
/* Connections now open: authenticated ones and those in the handshake. */
void rpc_server_conns(struct rpc_server *s, int *ret_authed, int *ret_handshake);
/* Counters of one pool since start (with npools > 1; a server without
 * pools reports zeros for its pool 0). */
struct rpc_pool_stats {
	uint64_t run;	      /* requests started */
	uint64_t queued;      /* of those, requests that waited in the queue first */
	uint64_t busy;	      /* requests answered -EAGAIN: pool and queue full */
	int running, waiting; /* now */
};
/* Returns 0, or -EINVAL for a pool the server does not have. */
int rpc_server_pool_stats(struct rpc_server *s, int pool, struct rpc_pool_stats *ret);

/* ---- client ------------------------------------------------------------- */
struct rpc_client;
struct rpc_client_opts {
	int timeout_ms;		/* per call; 0 = 10000 */
	int connect_timeout_ms; /* 0 = 2000 */
	int max_conns;		/* pooled connections; 0 = 16 */
	/* Key and role this client proves; NULL: the process credential
	 * (rpc_auth_default). Without either every call fails -ENOKEY. */
	const struct rpc_cred *cred;
	enum rpc_tls_mode tls; /* RPC_TLS_DEFAULT: rpc_tls_default() */
};
/* Returns a client for addr (no connection is made yet), or NULL on ENOMEM.
 * opts may be NULL. Release with rpc_client_free. */
struct rpc_client *rpc_client_new(const char *addr, const struct rpc_client_opts *opts);
void rpc_client_free(struct rpc_client *c);
const char *rpc_client_addr(const struct rpc_client *c);
/* The wire minor version the server stated in its last answer (any
 * connection), or -1 before the first: what it understands of the fields
 * a newer minor appended (wire.h). */
int rpc_client_peer_minor(struct rpc_client *c);

#define RPC_IDEMPOTENT 0x1 /* safe to resend after a transport failure */

/* A reply. If the caller set buf/cap before the call, a payload that fits is
 * received into buf (no allocation: large reads land in the caller's buffer);
 * otherwise payload is malloc'd and owned by the reply. */
struct rpc_reply {
	void *buf;	/* in: optional caller buffer */
	size_t cap;	/* in: its size */
	uint8_t *data;	/* out: the payload (== buf or heap) */
	size_t len;	/* out: payload length */
	uint8_t *heap_; /* private: freed by rpc_reply_done */
};
void rpc_reply_done(struct rpc_reply *r);

/* Sends request `type` with payload iov[0..iovcnt) and waits for the reply.
 * Returns the reply status (0 or negative errno from the handler) or a
 * transport error. On return (any status) *reply must be released with
 * rpc_reply_done. */
int rpc_callv(struct rpc_client *c, uint16_t type, const struct iovec *iov, int iovcnt,
	      unsigned flags, struct rpc_reply *reply);
/* Bulk data that follows a call's fields (WIRE_F_DATA): towards a peer that
 * speaks minor >= 1 the frame is sealed from the data hash, computed here
 * unless hashed (a hop forwarding data it verified on receipt); towards an
 * older peer (and on a connection's first call, before the peer's minor is
 * known) it is sent as a plain frame. */
struct rpc_data {
	const void *p;
	size_t len;
	bool hashed;
	uint64_t hash; /* wire_data_hash(p, len), if hashed */
};
/* rpc_callv with the payload iov[0..iovcnt) followed by data (may be NULL). */
int rpc_callv_data(struct rpc_client *c, uint16_t type, const struct iovec *iov, int iovcnt,
		   const struct rpc_data *data, unsigned flags, struct rpc_reply *reply);
/* Convenience: payload from a wbuf. */
int rpc_call(struct rpc_client *c, uint16_t type, const struct wbuf *req, unsigned flags,
	     struct rpc_reply *reply);
