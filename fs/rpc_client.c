/* rpc_client.c — the pooled, blocking RPC client of rpc.h.
 *
 * Each call owns one connection from the pool for its whole round trip, so a
 * connection carries at most one request at a time and replies need no
 * demultiplexing (the req_id is still checked). Concurrency comes from the
 * pool: up to max_conns calls run in parallel; more wait for a free
 * connection.
 *
 * Invariants:
 *  1. A connection that saw any error (timeout, reset, malformed reply) is
 *     closed, never returned to the pool: its stream position is unknown.
 *  2. An idle connection is checked for a hang-up before reuse (a restarted
 *     server closed it), so a request is not lost on a dead socket.
 *  3. A reply is read with as few syscalls as the transport allows: header
 *     and payload in one receive into the caller's buffer when they fit.
 *  4. WIRE_F_DATA frames go only over a connection whose peer answered with
 *     minor >= 1 (its handshake challenge already says which minor it
 *     speaks).
 *  5. A new connection carries no request before the server proved it holds
 *     the cluster key (rpc_auth.h); the first request follows the client's
 *     proof without waiting (the server answers nothing when it holds).
 *  6. A connection idle for RPC_CLIENT_IDLE_MAX_MS is not reused: the server
 *     closes idle ones after RPC_IDLE_TIMEOUT_MS, and a request must never
 *     race that close.
 *  7. With TLS (opts.tls, rpc_tls.h) every connection is dialled by
 *     transport_tls, keyed by the credential's cluster key; the rest of
 *     the client does not know the difference. */
#include "fs/rpc.h"
#include "fs/clock.h"
#include "fs/proto.h"
#include "fs/rpc_tls.h"
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fs/cleanup.h"

/* A pooled connection and what its peer told us. */
struct pconn {
	struct transport_conn *tc;
	int minor;	 /* the peer's wire minor from its last reply; -1: none yet */
	int64_t idle_ms; /* when it went back to the pool (strata_mono_ms) */
};

struct rpc_client {
	char addr[128];
	struct rpc_client_opts opts;
	const struct transport_ops *tops;
	struct rpc_tls *tls; /* transport_tls's context; NULL: plain */
	pthread_mutex_t lock;
	pthread_cond_t cond;
	struct pconn **idle;
	int nidle, nopen;
	_Atomic uint64_t next_req_id;
	_Atomic int peer_minor; /* the wire minor of the server's last answer; -1: none yet */
};

struct rpc_client *rpc_client_new(const char *addr, const struct rpc_client_opts *opts)
{
	struct rpc_client *c = calloc(1, sizeof(*c));
	if (!c)
		return NULL;
	snprintf(c->addr, sizeof(c->addr), "%s", addr);
	if (opts)
		c->opts = *opts;
	if (c->opts.timeout_ms <= 0)
		c->opts.timeout_ms = 10000;
	if (c->opts.connect_timeout_ms <= 0)
		c->opts.connect_timeout_ms = 2000;
	if (c->opts.max_conns <= 0)
		c->opts.max_conns = 16;
	c->idle = calloc(c->opts.max_conns, sizeof(*c->idle));
	if (!c->idle) {
		free(c);
		return NULL;
	}
	if (!c->opts.cred)
		c->opts.cred = rpc_auth_default();
	c->tops = &transport_tcp;
	if (rpc_tls_wanted(c->opts.tls)) {
		c->tops = &transport_tls;
		/* without a credential every call fails -ENOKEY (tls_dial) */
		if (c->opts.cred && rpc_tls_new(&c->opts.cred->key, false, &c->tls) < 0) {
			free(c->idle);
			free(c);
			return NULL;
		}
	}
	struct timespec ts;
	clock_gettime(CLOCK_REALTIME, &ts);
	c->next_req_id = ((uint64_t)ts.tv_nsec << 20) ^ (uint64_t)(uintptr_t)c;
	c->peer_minor = -1;
	pthread_mutex_init(&c->lock, NULL);
	pthread_cond_init(&c->cond, NULL);
	return c;
}

void rpc_client_free(struct rpc_client *c)
{
	if (!c)
		return;
	for (int i = 0; i < c->nidle; i++) {
		c->tops->close(c->idle[i]->tc);
		free(c->idle[i]);
	}
	free(c->idle);
	rpc_tls_free(c->tls);
	pthread_mutex_destroy(&c->lock);
	pthread_cond_destroy(&c->cond);
	free(c);
}

const char *rpc_client_addr(const struct rpc_client *c)
{
	return c->addr;
}

int rpc_client_peer_minor(struct rpc_client *c)
{
	return atomic_load(&c->peer_minor);
}

/* Takes a connection: an idle one, or a slot to dial a new one (*ret = NULL). */
static int pool_get(struct rpc_client *c, struct pconn **ret)
{
	pthread_mutex_lock(&c->lock);
	for (;;) {
		while (c->nidle > 0) {
			struct pconn *pc = c->idle[--c->nidle];
			if (strata_mono_ms() - pc->idle_ms < RPC_CLIENT_IDLE_MAX_MS &&
			    !c->tops->hung_up(pc->tc)) {
				pthread_mutex_unlock(&c->lock);
				*ret = pc;
				return 0;
			}
			c->tops->close(pc->tc);
			free(pc);
			c->nopen--;
		}
		if (c->nopen < c->opts.max_conns) {
			c->nopen++;
			pthread_mutex_unlock(&c->lock);
			*ret = NULL;
			return 0;
		}
		pthread_cond_wait(&c->cond, &c->lock);
	}
}

static void pool_put(struct rpc_client *c, struct pconn *pc, bool healthy)
{
	pthread_mutex_lock(&c->lock);
	if (healthy && pc) {
		pc->idle_ms = strata_mono_ms();
		c->idle[c->nidle++] = pc;
	} else {
		if (pc) {
			c->tops->close(pc->tc);
			free(pc);
		}
		c->nopen--;
	}
	pthread_cond_signal(&c->cond);
	pthread_mutex_unlock(&c->lock);
}

void rpc_reply_done(struct rpc_reply *r)
{
	free(r->heap_);
	r->heap_ = NULL;
	r->data = NULL;
	r->len = 0;
}

/* Where a reply payload of len bytes goes: the caller's buffer if it fits,
 * else the heap (reply->heap_). got bytes of it already arrived in first. */
static uint8_t *payload_dst(struct rpc_reply *reply, uint32_t len, const uint8_t *first, size_t got)
{
	if (reply->buf && len <= reply->cap) {
		if (first != reply->buf)
			memcpy(reply->buf, first, got);
		return reply->buf;
	}
	reply->heap_ = malloc(len ? len : 1);
	if (reply->heap_)
		memcpy(reply->heap_, first, got);
	return reply->heap_;
}

/* Receives the reply frame. The first recvmsg takes the header and as much
 * of the payload as is there, straight into the caller's buffer (or a small
 * stack buffer), so a small reply costs one syscall. Only one request is in
 * flight per connection: nothing may follow the reply. */
static int recv_reply(struct rpc_client *c, struct pconn *pc, uint64_t req_id, uint16_t type,
		      struct rpc_reply *reply)
{
	struct transport_conn *tc = pc->tc;
	uint8_t hdr[WIRE_HDR_SIZE], small[4096];
	struct wire_hdr h;
	struct iovec iov[2] = {{.iov_base = hdr, .iov_len = WIRE_HDR_SIZE}};
	iov[1] = reply->buf && reply->cap >= sizeof(small)
		     ? (struct iovec){.iov_base = reply->buf, .iov_len = reply->cap}
		     : (struct iovec){.iov_base = small, .iov_len = sizeof(small)};
	ssize_t n = c->tops->recvv(tc, iov, 2, c->opts.timeout_ms);
	if (n < 0)
		return (int)n;
	size_t got = 0;
	int r = 0;
	if ((size_t)n < WIRE_HDR_SIZE)
		r = c->tops->recv_exact(tc, hdr + n, WIRE_HDR_SIZE - (size_t)n, c->opts.timeout_ms);
	else
		got = (size_t)n - WIRE_HDR_SIZE;
	if (r < 0)
		return r;
	if (wire_hdr_decode(hdr, &h, NULL) < 0 || !(h.flags & WIRE_F_REPLY))
		return -EPROTO;
	/* the server refused the handshake's proof (invariant 5): the request
	 * behind it was not run */
	if (h.type == MSG_AUTH_PROOF && h.status < 0 && h.payload_len == 0)
		return h.status == -EKEYREJECTED || h.status == -EAGAIN || h.status == -EPERM
			   ? h.status
			   : -EPROTO;
	if (h.req_id != req_id || h.type != type || got > h.payload_len)
		return -EPROTO;
	uint8_t *dst = payload_dst(reply, h.payload_len, iov[1].iov_base, got);
	if (!dst)
		return -ENOMEM;
	r = c->tops->recv_exact(tc, dst + got, h.payload_len - got, c->opts.timeout_ms);
	if (r < 0)
		return r;
	if (wire_payload_verify(hdr, &h, dst) < 0)
		return -EPROTO;
	pc->minor = h.minor;
	atomic_store(&c->peer_minor, h.minor);
	reply->data = dst;
	reply->len = h.payload_len;
	/* the status is the handler's answer; the connection itself is fine */
	return h.status > 0 ? -EPROTO : h.status;
}

/* Seals the frame of a call into hdr: with WIRE_F_DATA if the peer speaks
 * minor >= 1 and there is data (whose hash is computed once and kept in
 * *data for a retry), else plain. */
static void seal(struct pconn *pc, struct wire_hdr *h, const struct iovec *iov, int iovcnt,
		 struct rpc_data *data, uint8_t hdr[WIRE_HDR_SIZE])
{
	if (data && data->len && pc->minor >= 1) {
		if (!data->hashed) {
			data->hash = wire_data_hash(data->p, data->len, NULL);
			data->hashed = true;
		}
		wire_hdr_seal_data(h, iov, iovcnt - 1, data->len, data->hash, hdr);
	} else {
		wire_hdr_sealv(h, iov, iovcnt, hdr);
	}
}

/* Receives one handshake frame (a small reply) into hdr/h/payload. */
static int recv_auth_frame(struct rpc_client *c, struct transport_conn *tc, int timeout_ms,
			   struct wire_hdr *h, uint8_t payload[RPC_AUTH_MAX_PAYLOAD])
{
	uint8_t hdr[WIRE_HDR_SIZE];
	int r = c->tops->recv_exact(tc, hdr, sizeof(hdr), timeout_ms);
	if (r < 0)
		return r;
	if (wire_hdr_decode(hdr, h, NULL) < 0 || h->payload_len > RPC_AUTH_MAX_PAYLOAD)
		return -EPROTO;
	if ((r = c->tops->recv_exact(tc, payload, h->payload_len, timeout_ms)) < 0)
		return r;
	return wire_payload_verify(hdr, h, payload) < 0 ? -EPROTO : 0;
}

/* The client's half of the handshake on a new connection (rpc_auth.h):
 * HELLO, the server's challenge checked, PROOF sent. Returns 0, -ENOKEY,
 * -EKEYREJECTED (the server does not hold our key), the server's refusal,
 * or a transport error. */
static int handshake(struct rpc_client *c, struct pconn *pc)
{
	struct transport_conn *tc = pc->tc;
	if (!c->opts.cred)
		return -ENOKEY;
	struct rpc_auth_client a;
	struct wbuf out;
	wbuf_init(&out);
	rpc_auth_client_hello(&a, c->opts.cred, &out);
	int timeout = c->opts.connect_timeout_ms > RPC_HANDSHAKE_TIMEOUT_MS / 2
			  ? c->opts.connect_timeout_ms
			  : RPC_HANDSHAKE_TIMEOUT_MS / 2;
	struct iovec v = {.iov_base = out.data, .iov_len = out.len};
	int r = out.err ? out.err : c->tops->sendv(tc, &v, 1, timeout);
	struct wire_hdr h;
	uint8_t payload[RPC_AUTH_MAX_PAYLOAD];
	if (r == 0)
		r = recv_auth_frame(c, tc, timeout, &h, payload);
	const char *why;
	wbuf_reset(&out);
	if (r == 0)
		r = rpc_auth_client_challenge(&a, &h, payload, &out, &why);
	if (r == 0)
		pc->minor = h.minor; /* the first request may use what it speaks */
	if (r == 0)
		atomic_store(&c->peer_minor, h.minor);
	if (r == 0) {
		v = (struct iovec){.iov_base = out.data, .iov_len = out.len};
		r = out.err ? out.err : c->tops->sendv(tc, &v, 1, timeout);
	}
	wbuf_done(&out);
	return r;
}

/* One attempt. *transport_failed tells the caller whether a retry may help.
 * iov[0..iovcnt) is the whole payload; with data, its last entry is the data. */
static int call_once(struct rpc_client *c, uint16_t type, const struct iovec *iov, int iovcnt,
		     struct rpc_data *data, struct rpc_reply *reply, bool *transport_failed)
{
	struct pconn *pc;
	pool_get(c, &pc);
	int r = 0;
	if (!pc) {
		pc = malloc(sizeof(*pc));
		r = pc ? c->tops->dial(c->addr, c->opts.connect_timeout_ms, c->tls, &pc->tc)
		       : -ENOMEM;
		if (pc)
			pc->minor = -1;
		if (r == 0 && (r = handshake(c, pc)) < 0)
			c->tops->close(pc->tc);
		if (r < 0) {
			free(pc);
			pc = NULL;
		}
	}
	if (r < 0) {
		pool_put(c, NULL, false);
		/* a refused key or role, TLS on one side only: answers, a retry
		 * would get the same */
		*transport_failed = r != -ENOKEY && r != -EKEYREJECTED && r != -EPERM &&
				    r != RPC_ERR_PEER_TLS && r != RPC_ERR_PEER_PLAIN;
		return r;
	}
	uint64_t req_id = atomic_fetch_add(&c->next_req_id, 1);
	struct wire_hdr h = {.type = type, .req_id = req_id};
	uint8_t hdr[WIRE_HDR_SIZE];
	struct iovec v[8];
	if (iovcnt > 7) {
		pool_put(c, pc, true);
		return -EINVAL;
	}
	v[0] = (struct iovec){.iov_base = hdr, .iov_len = WIRE_HDR_SIZE};
	memcpy(v + 1, iov, sizeof(*iov) * iovcnt);
	seal(pc, &h, iov, iovcnt, data, hdr);
	if (h.payload_len > WIRE_MAX_PAYLOAD) {
		pool_put(c, pc, true);
		return -EMSGSIZE;
	}
	r = c->tops->sendv(pc->tc, v, iovcnt + 1, c->opts.timeout_ms);
	if (r == 0)
		r = recv_reply(c, pc, req_id, type, reply);
	bool healthy = r >= 0 || reply->data != NULL;
	*transport_failed = !healthy;
	pool_put(c, pc, healthy);
	return r;
}

int rpc_callv_data(struct rpc_client *c, uint16_t type, const struct iovec *iov_in, int iovcnt,
		   const struct rpc_data *data_in, unsigned flags, struct rpc_reply *reply)
{
	reply->data = NULL;
	reply->len = 0;
	reply->heap_ = NULL;
	struct iovec iov[8];
	if (iovcnt < 0 || iovcnt > 7 || (data_in && data_in->len && iovcnt > 6))
		return -EINVAL;
	memcpy(iov, iov_in, sizeof(*iov) * iovcnt);
	struct rpc_data data = {0}, *dp = NULL;
	if (data_in && data_in->len) {
		data = *data_in;
		dp = &data;
		iov[iovcnt++] = (struct iovec){.iov_base = (void *)data.p, .iov_len = data.len};
	}
	bool transport_failed = false;
	int r = call_once(c, type, iov, iovcnt, dp, reply, &transport_failed);
	if (transport_failed && (flags & RPC_IDEMPOTENT)) {
		rpc_reply_done(reply);
		r = call_once(c, type, iov, iovcnt, dp, reply, &transport_failed);
	}
	return r;
}

int rpc_callv(struct rpc_client *c, uint16_t type, const struct iovec *iov, int iovcnt,
	      unsigned flags, struct rpc_reply *reply)
{
	return rpc_callv_data(c, type, iov, iovcnt, NULL, flags, reply);
}

int rpc_call(struct rpc_client *c, uint16_t type, const struct wbuf *req, unsigned flags,
	     struct rpc_reply *reply)
{
	if (req && req->err)
		return req->err;
	struct iovec iov = {.iov_base = req ? req->data : NULL, .iov_len = req ? req->len : 0};
	return rpc_callv(c, type, &iov, iov.iov_len ? 1 : 0, flags, reply);
}

const char *rpc_strerror(int r)
{
	switch (r) {
	case RPC_ERR_PEER_TLS:
		return "the server requires TLS and we speak plain frames (use --tls, as the "
		       "cluster's daemons do)";
	case RPC_ERR_PEER_PLAIN:
		return "we speak TLS and the server plain frames (--tls on one side only)";
	}
	const char *d = strerrordesc_np(r < 0 ? -r : r); /* static: thread-safe */
	return d ? d : "Unknown error";
}
