/* rpc_server.c — the RPC server of rpc.h: a pool of worker threads that
 * share one epoll set (leader/follower), with no hand-off between threads.
 *
 * Every connection is registered EPOLLONESHOT: the worker that gets its event
 * owns it until it re-arms it. That worker reads until one whole frame has
 * arrived (each connection keeps a partial-frame state across wake-ups),
 * runs the handler, writes the reply and re-arms the connection; a frame
 * still buffered behind it is reported again by the level-triggered epoll.
 * Compared with one reading thread feeding a queue, a request costs no
 * futex wake-up and no context switch between reader and handler (on the
 * 2-core VM about an eighth of strata-meta's CPU went there). A handler that
 * blocks occupies only its own worker, as before.
 *
 * Invariants:
 *  1. At most one thread works on a connection at a time (EPOLLONESHOT; the
 *     re-arm is the last thing the owner does). A connection is freed only
 *     when its reference count drops to zero: registration holds one
 *     reference and the owning worker one while it works on it.
 *  2. Any malformed frame closes its connection after one log line naming the
 *     peer and the reason; nothing else is affected.
 *  3. Requests on one connection are handled one at a time, in order
 *     (clients never pipeline: rpc_client.c gives each call its own
 *     connection; a pipelining peer is served, sequentially).
 *
 * Pools (rpc_server_opts.npools > 1). The workers still share the epoll
 * set and read any connection; a pool is a number of slots. A worker that
 * has read a whole request asks pool_of for its pool p: with a free slot it
 * takes it and runs the request itself (no hand-off, as without pools);
 * otherwise the request waits in p's queue, its connection not re-armed
 * (still owned, now by the queue, which holds a reference), and the worker
 * goes back to the epoll set. A worker that finishes a request of p re-arms
 * that connection and then, keeping the slot, runs what waits in p's queue,
 * before it gives the slot back.
 *  4. A pool runs at most pool_workers[p] requests at a time, and there are
 *     exactly sum(pool_workers) threads: while some pool has a free slot,
 *     some thread runs no request and so keeps reading (reading and queueing
 *     never block). A handler of p that waits only on requests of other
 *     pools (on this server or another) therefore never waits for a thread,
 *     whatever the handlers of p itself or of unrelated pools do.
 *  5. A queued request holds its connection un-armed; a pool's queue holds
 *     at most pool_queue requests: the next is answered -EAGAIN (busy). */
#include "fs/rpc.h"
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "fs/log.h"

#define RPC_SEND_TIMEOUT_MS 30000

int tcp_sendv_fd(int fd, const struct iovec *iov, int iovcnt, int timeout_ms);
void tcp_tune_socket(int fd);

struct rpc_conn {
	int fd;
	_Atomic int refs;
	_Atomic bool dead;
	struct rpc_peer peer;
	struct rpc_conn *prev, *next; /* registered connections; conns_lock */
	pthread_mutex_t write_lock;
	/* partial frame being read by the loop */
	uint8_t hdr[WIRE_HDR_SIZE];
	size_t hdr_got;
	struct wire_hdr h;
	uint8_t *payload;
	size_t payload_got;
	uint64_t sums[WIRE_MAX_PIECES]; /* piece sums of a WIRE_F_DATA frame */
	/* a request waiting in a pool's queue (pool_lock) */
	struct rpc_conn *qnext;
	struct wire_hdr qh;
	uint8_t *qpayload;
};

struct rpc_pool {
	int slots, running, nwaiting; /* pool_lock */
	struct rpc_conn *qhead, *qtail;
	uint64_t run, queued, busy;
};

struct rpc_server {
	struct rpc_server_opts opts;
	char name[32];
	int listen_fd, epoll_fd, wake_fd;
	uint16_t port;
	pthread_t *workers;
	int nworkers;
	_Atomic bool stopping;
	_Atomic uint64_t rejected;
	pthread_mutex_t conns_lock;
	int nconns;		/* conns_lock */
	uint64_t next_conn_id;	/* conns_lock */
	struct rpc_conn *conns; /* registered connections; conns_lock */
	int npools;		/* > 1: requests run in pools (invariant 4) */
	int pool_queue;
	pthread_mutex_t pool_lock;
	struct rpc_pool pools[RPC_MAX_POOLS]; /* pool_lock */
};

static void conn_unref(struct rpc_conn *c)
{
	if (atomic_fetch_sub(&c->refs, 1) != 1)
		return;
	close(c->fd);
	pthread_mutex_destroy(&c->write_lock);
	free(c->payload);
	free(c);
}

static void conn_unlist(struct rpc_server *s, struct rpc_conn *c)
{
	pthread_mutex_lock(&s->conns_lock);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	pthread_mutex_unlock(&s->conns_lock);
}

/* Takes the connection out of the epoll set and the list; the fd closes
 * with the last ref. Called by its owner (or at shutdown, with no workers). */
static void conn_kill(struct rpc_server *s, struct rpc_conn *c)
{
	if (atomic_exchange(&c->dead, true))
		return;
	epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
	shutdown(c->fd, SHUT_RDWR);
	conn_unlist(s, c);
	conn_unref(c);
}

static void conn_reject(struct rpc_server *s, struct rpc_conn *c, const char *why)
{
	s->rejected++;
	log_warn("%s: closing connection %llu from %s: %s", s->name,
		 (unsigned long long)c->peer.conn_id, c->peer.addr, why);
	conn_kill(s, c);
}

/* Hands the connection back to the epoll set (its owner's last act). */
static void conn_rearm(struct rpc_server *s, struct rpc_conn *c)
{
	struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT, .data.ptr = c};
	if (epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev) < 0)
		conn_kill(s, c);
}

static void send_reply(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *req,
		       int status, const struct wbuf *reply)
{
	struct wire_hdr h = {
	    .flags = WIRE_F_REPLY, .type = req->type, .status = status, .req_id = req->req_id};
	uint8_t hdr[WIRE_HDR_SIZE];
	size_t len = status < 0 ? 0 : reply->len;
	struct iovec iov[2] = {{.iov_base = hdr, .iov_len = WIRE_HDR_SIZE},
			       {.iov_base = reply->data, .iov_len = len}};
	wire_hdr_sealv(&h, &iov[1], len ? 1 : 0, hdr);
	pthread_mutex_lock(&c->write_lock);
	int r = c->dead ? -ECONNRESET : tcp_sendv_fd(c->fd, iov, len ? 2 : 1, RPC_SEND_TIMEOUT_MS);
	pthread_mutex_unlock(&c->write_lock);
	if (r < 0 && r != -ECONNRESET)
		log_warn_errno(r, "%s: failed to send reply to %s", s->name, c->peer.addr);
	if (r < 0)
		shutdown(c->fd, SHUT_RDWR); /* the next wake-up sees the hang-up and drops it */
}

/* Runs the handler on the frame (payload taken from c) and replies. */
static void run_frame(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *h,
		      uint8_t *payload, struct wbuf *reply)
{
	struct rbuf req;
	rbuf_init(&req, payload, h->payload_len);
	wbuf_reset(reply);
	c->peer.data = NULL;
	c->peer.data_len = 0;
	c->peer.data_sums = NULL;
	if (h->flags & WIRE_F_DATA) {
		c->peer.data = payload + h->data_off;
		c->peer.data_len = h->payload_len - h->data_off;
		c->peer.data_sums = c->sums;
	}
	int status = s->opts.handler(s->opts.ctx, h->type, &req, reply, &c->peer);
	c->peer.data = NULL;
	if (status == 0 && reply->err)
		status = reply->err;
	if (status > 0)
		status = 0;
	send_reply(s, c, h, status, reply);
	free(payload);
}

/* Invariant 4: runs the request in its pool if the pool has a free slot
 * (then *ret_held = the pool: the caller runs its queue before it gives the
 * slot back, pool_drain), else queues it. Returns 0 (handled: re-arm c) or
 * 1 (queued: c belongs to the queue). */
static int pool_dispatch(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *h,
			 uint8_t *payload, struct wbuf *reply, int *ret_held)
{
	int p = s->opts.pool_of(s->opts.ctx, h->type, payload, h->payload_len);
	if (p < 0 || p >= s->npools)
		p = 0;
	struct rpc_pool *pl = &s->pools[p];
	pthread_mutex_lock(&s->pool_lock);
	if (pl->running < pl->slots) {
		pl->running++;
		pl->run++;
		pthread_mutex_unlock(&s->pool_lock);
		*ret_held = p;
		run_frame(s, c, h, payload, reply);
		return 0;
	}
	if (pl->nwaiting < s->pool_queue) {
		atomic_fetch_add(&c->refs, 1);
		c->qh = *h;
		c->qpayload = payload;
		c->qnext = NULL;
		if (pl->qtail)
			pl->qtail->qnext = c;
		else
			pl->qhead = c;
		pl->qtail = c;
		pl->nwaiting++;
		pl->queued++;
		pthread_mutex_unlock(&s->pool_lock);
		return 1;
	}
	pl->busy++;
	pthread_mutex_unlock(&s->pool_lock);
	wbuf_reset(reply);
	send_reply(s, c, h, -EAGAIN, reply);
	free(payload);
	return 0;
}

/* Takes the next request of pool p's queue, or gives the slot back. */
static struct rpc_conn *pool_next(struct rpc_server *s, int p)
{
	struct rpc_pool *pl = &s->pools[p];
	pthread_mutex_lock(&s->pool_lock);
	struct rpc_conn *c = s->stopping ? NULL : pl->qhead;
	if (c) {
		pl->qhead = c->qnext;
		if (!pl->qhead)
			pl->qtail = NULL;
		pl->nwaiting--;
		pl->run++;
	} else {
		pl->running--;
	}
	pthread_mutex_unlock(&s->pool_lock);
	return c;
}

/* Holding a slot of pool p: runs its queue, then gives the slot back. */
static void pool_drain(struct rpc_server *s, int p, struct wbuf *reply)
{
	struct rpc_conn *c;
	while ((c = pool_next(s, p))) {
		uint8_t *payload = c->qpayload;
		c->qpayload = NULL;
		run_frame(s, c, &c->qh, payload, reply);
		conn_rearm(s, c);
		conn_unref(c);
	}
}

/* A whole frame has arrived on c: validate the checksum and handle it. A
 * WIRE_F_DATA frame's data hash and piece sums are kept for the handler
 * (rpc_peer.data*). Returns 0 (re-arm c), 1 (queued) or -1 (c closed). */
static int frame_complete(struct rpc_server *s, struct rpc_conn *c, struct wbuf *reply,
			  int *ret_held)
{
	if (wire_payload_verify_data(c->hdr, &c->h, c->payload ? c->payload : (uint8_t *)"",
				     &c->peer.data_hash, c->sums) < 0) {
		conn_reject(s, c, "payload checksum mismatch");
		return -1;
	}
	if (c->h.flags & WIRE_F_REPLY) {
		conn_reject(s, c, "reply frame sent to a server");
		return -1;
	}
	struct wire_hdr h = c->h;
	uint8_t *payload = c->payload;
	c->payload = NULL;
	c->hdr_got = 0;
	c->payload_got = 0;
	c->peer.minor = c->h.minor;
	if (s->npools > 1)
		return pool_dispatch(s, c, &h, payload, reply, ret_held);
	run_frame(s, c, &h, payload, reply);
	return 0;
}

/* Reads what is available on c, up to one whole frame, which it handles.
 * Returns 0 to keep the connection, 1 if its request was queued, -1 once it
 * was closed; *ret_held as pool_dispatch's. */
static int conn_read(struct rpc_server *s, struct rpc_conn *c, struct wbuf *reply, int *ret_held)
{
	for (;;) {
		ssize_t n;
		if (c->hdr_got < WIRE_HDR_SIZE) {
			n = recv(c->fd, c->hdr + c->hdr_got, WIRE_HDR_SIZE - c->hdr_got, 0);
		} else {
			n = recv(c->fd, c->payload + c->payload_got,
				 c->h.payload_len - c->payload_got, 0);
		}
		if (n == 0) {
			if (c->hdr_got > 0)
				conn_reject(s, c, "connection closed inside a frame (truncated)");
			else
				conn_kill(s, c);
			return -1;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno == EAGAIN)
				return 0;
			conn_kill(s, c);
			return -1;
		}
		if (c->hdr_got < WIRE_HDR_SIZE) {
			c->hdr_got += n;
			if (c->hdr_got < WIRE_HDR_SIZE)
				continue;
			const char *why = NULL;
			if (wire_hdr_decode(c->hdr, &c->h, &why) < 0) {
				conn_reject(s, c, why);
				return -1;
			}
			c->payload = malloc(c->h.payload_len ? c->h.payload_len : 1);
			if (!c->payload) {
				conn_reject(s, c, "out of memory");
				return -1;
			}
		} else {
			c->payload_got += n;
		}
		/* One frame per wake-up: our clients never pipeline (a call owns its
		 * connection), so reading on would only earn an EAGAIN; if more is
		 * there, the level-triggered epoll reports the socket again. */
		if (c->hdr_got == WIRE_HDR_SIZE && c->payload_got == c->h.payload_len)
			return frame_complete(s, c, reply, ret_held);
	}
}

static void accept_all(struct rpc_server *s)
{
	for (;;) {
		struct sockaddr_storage ss;
		socklen_t sl = sizeof(ss);
		int fd = accept4(s->listen_fd, (struct sockaddr *)&ss, &sl,
				 SOCK_NONBLOCK | SOCK_CLOEXEC);
		if (fd < 0)
			return;
		pthread_mutex_lock(&s->conns_lock);
		int nconns = s->nconns;
		uint64_t conn_id = ++s->next_conn_id;
		pthread_mutex_unlock(&s->conns_lock);
		if (nconns >= s->opts.max_conns) {
			log_warn("%s: refusing connection: %d connections open (limit)", s->name,
				 nconns);
			close(fd);
			continue;
		}
		tcp_tune_socket(fd);
		struct rpc_conn *c = calloc(1, sizeof(*c));
		if (!c) {
			close(fd);
			continue;
		}
		c->fd = fd;
		c->refs = 1;
		c->peer.conn_id = conn_id;
		pthread_mutex_init(&c->write_lock, NULL);
		char ip[INET6_ADDRSTRLEN] = "?";
		uint16_t port = 0;
		if (ss.ss_family == AF_INET) {
			struct sockaddr_in *in = (struct sockaddr_in *)&ss;
			inet_ntop(AF_INET, &in->sin_addr, ip, sizeof(ip));
			port = ntohs(in->sin_port);
		} else if (ss.ss_family == AF_INET6) {
			struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&ss;
			inet_ntop(AF_INET6, &in6->sin6_addr, ip, sizeof(ip));
			port = ntohs(in6->sin6_port);
		}
		snprintf(c->peer.addr, sizeof(c->peer.addr), "%s:%u", ip, port);
		/* listed before it is armed: a worker may kill it at once */
		pthread_mutex_lock(&s->conns_lock);
		s->nconns++;
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
		pthread_mutex_unlock(&s->conns_lock);
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP | EPOLLONESHOT,
					 .data.ptr = c};
		if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			atomic_store(&c->dead, true); /* never armed: no other owner */
			conn_unlist(s, c);
			conn_unref(c);
		}
	}
}

/* The owner of c's event: read (and handle) a frame, then re-arm. */
static void conn_event(struct rpc_server *s, struct rpc_conn *c, uint32_t events,
		       struct wbuf *reply)
{
	atomic_fetch_add(&c->refs, 1);
	int held = -1;
	int r = conn_read(s, c, reply, &held);
	if (r == 0 && (events & (EPOLLHUP | EPOLLERR)) && !(events & EPOLLIN))
		conn_kill(s, c);
	else if (r == 0)
		conn_rearm(s, c);
	conn_unref(c);
	if (held >= 0)
		pool_drain(s, held, reply);
}

static void *worker_main(void *arg)
{
	struct rpc_server *s = arg;
	struct wbuf reply;
	wbuf_init(&reply);
	while (!s->stopping) {
		struct epoll_event ev;
		/* one event at a time, so that ready connections spread over the workers */
		int n = epoll_wait(s->epoll_fd, &ev, 1, -1);
		if (n <= 0)
			continue;
		if (ev.data.ptr == &s->listen_fd)
			accept_all(s);
		else if (ev.data.ptr != &s->wake_fd)
			conn_event(s, ev.data.ptr, ev.events, &reply);
	}
	wbuf_done(&reply);
	return NULL;
}

static int listen_on(const char *addr, int *ret_fd, uint16_t *ret_port)
{
	char host[256];
	uint16_t port;
	int r = addr_parse(addr, host, sizeof(host), &port);
	if (r < 0)
		return r;
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
	if (!host[0] || strcmp(host, "0.0.0.0") == 0)
		in.sin_addr.s_addr = htonl(INADDR_ANY);
	else if (strcmp(host, "localhost") == 0)
		in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	else if (inet_pton(AF_INET, host, &in.sin_addr) != 1)
		return -EINVAL;
	_cleanup_close_ int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	int one = 1;
	setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(fd, (struct sockaddr *)&in, sizeof(in)) < 0 || listen(fd, 1024) < 0)
		return -errno;
	socklen_t sl = sizeof(in);
	if (getsockname(fd, (struct sockaddr *)&in, &sl) < 0)
		return -errno;
	*ret_port = ntohs(in.sin_port);
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int rpc_server_start(const struct rpc_server_opts *opts, struct rpc_server **ret)
{
	struct rpc_server *s = calloc(1, sizeof(*s));
	if (!s)
		return -ENOMEM;
	s->opts = *opts;
	if (s->opts.workers <= 0)
		s->opts.workers = 4;
	if (opts->npools > 1) {
		if (opts->npools > RPC_MAX_POOLS || !opts->pool_of) {
			free(s);
			return -EINVAL;
		}
		s->npools = opts->npools;
		s->pool_queue = opts->pool_queue > 0 ? opts->pool_queue : 256;
		s->opts.workers = 0;
		for (int i = 0; i < s->npools; i++) {
			if (opts->pool_workers[i] <= 0) {
				free(s);
				return -EINVAL;
			}
			s->pools[i].slots = opts->pool_workers[i];
			s->opts.workers += opts->pool_workers[i]; /* invariant 4 */
		}
	}
	if (s->opts.max_conns <= 0)
		s->opts.max_conns = 1024;
	snprintf(s->name, sizeof(s->name), "%s", opts->name ? opts->name : "rpc");
	s->listen_fd = s->epoll_fd = s->wake_fd = -1;
	pthread_mutex_init(&s->conns_lock, NULL);
	pthread_mutex_init(&s->pool_lock, NULL);
	int r = listen_on(opts->listen, &s->listen_fd, &s->port);
	if (r < 0)
		goto fail;
	s->epoll_fd = epoll_create1(EPOLL_CLOEXEC);
	s->wake_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
	if (s->epoll_fd < 0 || s->wake_fd < 0) {
		r = -errno;
		goto fail;
	}
	struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &s->listen_fd};
	struct epoll_event wev = {.events = EPOLLIN, .data.ptr = &s->wake_fd};
	if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->listen_fd, &ev) < 0 ||
	    epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, s->wake_fd, &wev) < 0) {
		r = -errno;
		goto fail;
	}
	s->workers = calloc(s->opts.workers, sizeof(pthread_t));
	if (!s->workers) {
		r = -ENOMEM;
		goto fail;
	}
	for (; s->nworkers < s->opts.workers; s->nworkers++) {
		r = -pthread_create(&s->workers[s->nworkers], NULL, worker_main, s);
		if (r < 0)
			goto fail;
	}
	*ret = s;
	return 0;
fail:
	rpc_server_free(s);
	return r;
}

uint16_t rpc_server_port(const struct rpc_server *s)
{
	return s->port;
}

uint64_t rpc_server_rejected(const struct rpc_server *s)
{
	return s->rejected;
}

int rpc_server_pool_stats(struct rpc_server *s, int pool, struct rpc_pool_stats *ret)
{
	if (pool < 0 || pool >= (s->npools > 1 ? s->npools : 1))
		return -EINVAL;
	pthread_mutex_lock(&s->pool_lock);
	const struct rpc_pool *pl = &s->pools[pool];
	*ret = (struct rpc_pool_stats){pl->run, pl->queued, pl->busy, pl->running, pl->nwaiting};
	pthread_mutex_unlock(&s->pool_lock);
	return 0;
}

void rpc_server_free(struct rpc_server *s)
{
	if (!s)
		return;
	s->stopping = true;
	if (s->wake_fd >= 0) {
		/* the eventfd stays readable (never drained): every worker wakes */
		uint64_t one = 1;
		ssize_t w = write(s->wake_fd, &one, sizeof(one));
		(void)w;
	}
	/* a worker finishes the frame it is handling before it sees stopping */
	for (int i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	free(s->workers);
	/* requests still queued: drop the queue's reference */
	for (int i = 0; i < s->npools; i++) {
		struct rpc_conn *c, *next;
		for (c = s->pools[i].qhead; c; c = next) {
			next = c->qnext;
			free(c->qpayload);
			c->qpayload = NULL;
			conn_unref(c);
		}
		s->pools[i].qhead = s->pools[i].qtail = NULL;
	}
	/* connections still registered: drop the registration's reference */
	while (s->conns)
		conn_kill(s, s->conns);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->epoll_fd >= 0)
		close(s->epoll_fd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	pthread_mutex_destroy(&s->conns_lock);
	pthread_mutex_destroy(&s->pool_lock);
	free(s);
}
