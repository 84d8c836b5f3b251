/* rpc_server.c — the RPC server of rpc.h: one epoll event-loop thread and a
 * pool of worker threads.
 *
 * The loop thread accepts connections and reads frames without blocking
 * (each connection keeps a partial-frame state). A complete, valid frame
 * becomes a job on the worker queue; a worker runs the handler and writes the
 * reply under the connection's write lock.
 *
 * Invariants:
 *  1. A connection is freed only when its reference count drops to zero: the
 *     loop holds one reference while the connection is registered, each
 *     queued or running job holds one. So a worker never writes to a reused fd.
 *  2. Any malformed frame closes its connection after one log line naming the
 *     peer and the reason; nothing else is affected.
 *  3. At most RPC_MAX_INFLIGHT requests per connection are queued or running;
 *     past that the loop stops reading from it (back-pressure) until a reply
 *     has been sent. */
#include "rpc.h"
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
#include "cleanup.h"
#include "log.h"

#define RPC_MAX_INFLIGHT 64
#define RPC_SEND_TIMEOUT_MS 30000

int tcp_sendv_fd(int fd, const struct iovec *iov, int iovcnt, int timeout_ms);
void tcp_tune_socket(int fd);

struct rpc_conn {
	int fd;
	_Atomic int refs;
	_Atomic int inflight;
	_Atomic bool dead;
	bool reading_paused;
	struct rpc_peer peer;
	struct rpc_conn *prev, *next; /* registered connections; loop thread only */
	pthread_mutex_t write_lock;
	/* partial frame being read by the loop */
	uint8_t hdr[WIRE_HDR_SIZE];
	size_t hdr_got;
	struct wire_hdr h;
	uint8_t *payload;
	size_t payload_got;
};

struct rpc_job {
	struct rpc_job *next;
	struct rpc_conn *conn;
	struct wire_hdr h;
	uint8_t *payload;
};

struct rpc_server {
	struct rpc_server_opts opts;
	char name[32];
	int listen_fd, epoll_fd, wake_fd;
	uint16_t port;
	pthread_t loop_thread;
	pthread_t *workers;
	int nworkers;
	_Atomic bool stopping;
	_Atomic uint64_t rejected;
	_Atomic int nconns;
	uint64_t next_conn_id;
	struct rpc_conn *conns; /* list of registered connections; loop thread only */
	pthread_mutex_t q_lock;
	pthread_cond_t q_cond;
	struct rpc_job *q_head, *q_tail;
	bool q_stop;
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

/* Takes the connection out of the loop; the fd closes with the last ref. */
static void conn_kill(struct rpc_server *s, struct rpc_conn *c)
{
	if (atomic_exchange(&c->dead, true))
		return;
	epoll_ctl(s->epoll_fd, EPOLL_CTL_DEL, c->fd, NULL);
	shutdown(c->fd, SHUT_RDWR);
	if (c->prev)
		c->prev->next = c->next;
	else
		s->conns = c->next;
	if (c->next)
		c->next->prev = c->prev;
	s->nconns--;
	conn_unref(c);
}

static void conn_reject(struct rpc_server *s, struct rpc_conn *c, const char *why)
{
	s->rejected++;
	log_warn("%s: closing connection %llu from %s: %s", s->name,
		 (unsigned long long)c->peer.conn_id, c->peer.addr, why);
	conn_kill(s, c);
}

static void queue_push(struct rpc_server *s, struct rpc_job *j)
{
	pthread_mutex_lock(&s->q_lock);
	if (s->q_tail)
		s->q_tail->next = j;
	else
		s->q_head = j;
	s->q_tail = j;
	pthread_cond_signal(&s->q_cond);
	pthread_mutex_unlock(&s->q_lock);
}

static struct rpc_job *queue_pop(struct rpc_server *s)
{
	pthread_mutex_lock(&s->q_lock);
	while (!s->q_head && !s->q_stop)
		pthread_cond_wait(&s->q_cond, &s->q_lock);
	struct rpc_job *j = s->q_head;
	if (j) {
		s->q_head = j->next;
		if (!s->q_head)
			s->q_tail = NULL;
	}
	pthread_mutex_unlock(&s->q_lock);
	return j;
}

static void set_reading(struct rpc_server *s, struct rpc_conn *c, bool on)
{
	struct epoll_event ev = {.events = on ? EPOLLIN | EPOLLRDHUP : EPOLLRDHUP, .data.ptr = c};
	epoll_ctl(s->epoll_fd, EPOLL_CTL_MOD, c->fd, &ev);
}

static void send_reply(struct rpc_server *s, struct rpc_conn *c, const struct wire_hdr *req,
		       int status, const struct wbuf *reply)
{
	struct wire_hdr h = {.flags = WIRE_F_REPLY, .type = req->type, .status = status,
			     .req_id = req->req_id};
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
		shutdown(c->fd, SHUT_RDWR); /* the loop sees the hang-up and drops it */
}

static void run_job(struct rpc_server *s, struct rpc_job *j, struct wbuf *reply)
{
	struct rpc_conn *c = j->conn;
	struct rbuf req;
	rbuf_init(&req, j->payload, j->h.payload_len);
	wbuf_reset(reply);
	int status = s->opts.handler(s->opts.ctx, j->h.type, &req, reply, &c->peer);
	if (status == 0 && reply->err)
		status = reply->err;
	if (status > 0)
		status = 0;
	send_reply(s, c, &j->h, status, reply);
	if (atomic_fetch_sub(&c->inflight, 1) == RPC_MAX_INFLIGHT && !c->dead)
		set_reading(s, c, true);
	free(j->payload);
	conn_unref(c);
	free(j);
}

static void *worker_main(void *arg)
{
	struct rpc_server *s = arg;
	struct wbuf reply;
	wbuf_init(&reply);
	struct rpc_job *j;
	while ((j = queue_pop(s)))
		run_job(s, j, &reply);
	wbuf_done(&reply);
	return NULL;
}

/* A whole frame has arrived on c: validate the checksum and queue it. */
static int frame_complete(struct rpc_server *s, struct rpc_conn *c)
{
	if (wire_payload_verify(c->hdr, &c->h, c->payload ? c->payload : (uint8_t *)"") < 0) {
		conn_reject(s, c, "payload checksum mismatch");
		return -1;
	}
	if (c->h.flags & WIRE_F_REPLY) {
		conn_reject(s, c, "reply frame sent to a server");
		return -1;
	}
	struct rpc_job *j = calloc(1, sizeof(*j));
	if (!j) {
		conn_reject(s, c, "out of memory");
		return -1;
	}
	j->conn = c;
	j->h = c->h;
	j->payload = c->payload;
	c->payload = NULL;
	c->hdr_got = 0;
	c->payload_got = 0;
	c->peer.minor = c->h.minor;
	atomic_fetch_add(&c->refs, 1);
	if (atomic_fetch_add(&c->inflight, 1) + 1 >= RPC_MAX_INFLIGHT)
		set_reading(s, c, false);
	queue_push(s, j);
	return 0;
}

/* Reads what is available on c. Returns 0 to keep the connection, -1 once it
 * was closed. */
static int conn_read(struct rpc_server *s, struct rpc_conn *c)
{
	for (;;) {
		if (c->inflight >= RPC_MAX_INFLIGHT)
			return 0;
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
			return frame_complete(s, c) < 0 ? -1 : 0;
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
		if (s->nconns >= s->opts.max_conns) {
			log_warn("%s: refusing connection: %d connections open (limit)", s->name,
				 s->nconns);
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
		c->peer.conn_id = ++s->next_conn_id;
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
		struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.ptr = c};
		if (epoll_ctl(s->epoll_fd, EPOLL_CTL_ADD, fd, &ev) < 0) {
			conn_unref(c);
			continue;
		}
		s->nconns++;
		c->next = s->conns;
		if (s->conns)
			s->conns->prev = c;
		s->conns = c;
	}
}

static void *loop_main(void *arg)
{
	struct rpc_server *s = arg;
	struct epoll_event evs[64];
	while (!s->stopping) {
		int n = epoll_wait(s->epoll_fd, evs, 64, -1);
		for (int i = 0; i < n; i++) {
			void *p = evs[i].data.ptr;
			if (p == &s->listen_fd) {
				accept_all(s);
			} else if (p == &s->wake_fd) {
				continue;
			} else {
				struct rpc_conn *c = p;
				if (c->dead)
					continue;
				if (conn_read(s, c) == 0 &&
				    (evs[i].events & (EPOLLHUP | EPOLLERR)) &&
				    !(evs[i].events & EPOLLIN))
					conn_kill(s, c);
			}
		}
	}
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
	if (s->opts.max_conns <= 0)
		s->opts.max_conns = 1024;
	snprintf(s->name, sizeof(s->name), "%s", opts->name ? opts->name : "rpc");
	s->listen_fd = s->epoll_fd = s->wake_fd = -1;
	pthread_mutex_init(&s->q_lock, NULL);
	pthread_cond_init(&s->q_cond, NULL);
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
	r = -pthread_create(&s->loop_thread, NULL, loop_main, s);
	if (r < 0)
		goto fail;
	*ret = s;
	return 0;
fail:
	s->loop_thread = 0;
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

void rpc_server_free(struct rpc_server *s)
{
	if (!s)
		return;
	s->stopping = true;
	if (s->wake_fd >= 0) {
		uint64_t one = 1;
		ssize_t w = write(s->wake_fd, &one, sizeof(one));
		(void)w;
	}
	if (s->loop_thread)
		pthread_join(s->loop_thread, NULL);
	pthread_mutex_lock(&s->q_lock);
	s->q_stop = true;
	pthread_cond_broadcast(&s->q_cond);
	pthread_mutex_unlock(&s->q_lock);
	/* workers drain the queue before they exit (queue_pop returns jobs
	 * until it is empty), so every job's reference is dropped */
	for (int i = 0; i < s->nworkers; i++)
		pthread_join(s->workers[i], NULL);
	free(s->workers);
	/* connections still registered: drop the loop's reference */
	while (s->conns)
		conn_kill(s, s->conns);
	if (s->listen_fd >= 0)
		close(s->listen_fd);
	if (s->epoll_fd >= 0)
		close(s->epoll_fd);
	if (s->wake_fd >= 0)
		close(s->wake_fd);
	pthread_mutex_destroy(&s->q_lock);
	pthread_cond_destroy(&s->q_cond);
	free(s);
}
