/* test_rpc.c — the RPC layer end to end over loopback TCP: concurrent calls,
 * large payloads into caller buffers, error statuses, timeouts, reconnect
 * after a server restart, and malformed frames that must close only the
 * offending connection; worker pools: a request runs in the pool the
 * classifier picks, queues while its pool is busy (-EAGAIN once the queue is
 * full) and never waits for a thread while its own pool has a free slot. */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/socket.h>
#include "fs/rpc.h"
#include "fs/log.h"
#include "tests/testutil.h"
#include "tests/fs/testkey.h"

enum {
	T_ECHO = 1,
	T_FAIL = 2,
	T_SLOW = 3,
	T_BIG = 4,
	T_DATA = 5,
	T_HOLD = 6,
	T_NEST = 7,
	T_PING = 8
};

/* test_pools: T_HOLD blocks until the gate opens; T_NEST calls the server
 * itself (nest_client) with a T_ECHO for pool 1 */
static pthread_mutex_t gate_mu = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t gate_cv = PTHREAD_COND_INITIALIZER;
static bool gate_open;
static int gate_entered;
static struct rpc_client *nest_client;

static int handler(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
		   const struct rpc_peer *peer)
{
	switch (type) {
	case T_ECHO: {
		size_t n = rbuf_remaining(req);
		wbuf_put_bytes(reply, rbuf_get_bytes(req, n), n);
		return 0;
	}
	case T_DATA: { /* u32 n fields bytes, then data: reports what the frame said */
		uint32_t n = rbuf_get_u32(req);
		rbuf_get_bytes(req, n);
		const uint8_t *data = (const uint8_t *)req->p + req->off;
		size_t len = rbuf_remaining(req);
		bool split = peer->data != NULL;
		if (split &&
		    (peer->data != data || peer->data_len != len ||
		     peer->data_sums[0] !=
			 wire_xxh3_64(data, len < WIRE_DATA_PIECE ? len : WIRE_DATA_PIECE, 0)))
			return -EPROTO;
		wbuf_put_u8(reply, split);
		wbuf_put_u64(reply, split ? peer->data_hash : 0);
		return rbuf_done(req);
	}
	case T_HOLD:
		pthread_mutex_lock(&gate_mu);
		gate_entered++;
		pthread_cond_broadcast(&gate_cv);
		while (!gate_open)
			pthread_cond_wait(&gate_cv, &gate_mu);
		pthread_mutex_unlock(&gate_mu);
		return 0;
	case T_NEST: {
		struct wbuf w;
		struct rpc_reply rep = {0};
		wbuf_init(&w);
		wbuf_put_u8(&w, 1);
		int r = rpc_call(nest_client, T_ECHO, &w, 0, &rep);
		rpc_reply_done(&rep);
		wbuf_done(&w);
		return r;
	}
	case T_PING:
		return 0;
	case T_FAIL:
		return -ENOENT;
	case T_SLOW:
		usleep(600 * 1000);
		return 0;
	case T_BIG: {
		uint32_t n = rbuf_get_u32(req);
		if (rbuf_done(req) < 0 || n > (4u << 20))
			return -EINVAL;
		uint8_t *p = wbuf_reserve(reply, n);
		if (!p)
			return -ENOMEM;
		for (uint32_t i = 0; i < n; i++)
			p[i] = (uint8_t)(i * 7);
		return 0;
	}
	}
	return -EOPNOTSUPP;
}

static struct rpc_server *start(uint16_t port)
{
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", port);
	struct rpc_server_opts o = {
	    .name = "test", .listen = addr, .workers = 3, .handler = handler};
	struct rpc_server *s;
	CHECK(rpc_server_start(&o, &s) == 0);
	return s;
}

struct worker_arg {
	struct rpc_client *c;
	int id;
	int failures;
};

static void *hammer(void *p)
{
	struct worker_arg *a = p;
	for (int i = 0; i < 300; i++) {
		char msg[64];
		int n = snprintf(msg, sizeof(msg), "thread %d call %d", a->id, i);
		struct wbuf w;
		wbuf_init(&w);
		wbuf_put_bytes(&w, msg, n);
		struct rpc_reply rep = {0};
		int r = rpc_call(a->c, T_ECHO, &w, 0, &rep);
		if (r != 0 || rep.len != (size_t)n || memcmp(rep.data, msg, n) != 0)
			a->failures++;
		rpc_reply_done(&rep);
		wbuf_done(&w);
	}
	return NULL;
}

static void test_concurrent(struct rpc_client *c)
{
	pthread_t t[6];
	struct worker_arg a[6];
	for (int i = 0; i < 6; i++) {
		a[i] = (struct worker_arg){.c = c, .id = i};
		pthread_create(&t[i], NULL, hammer, &a[i]);
	}
	for (int i = 0; i < 6; i++) {
		pthread_join(t[i], NULL);
		CHECK_EQ(a[i].failures, 0);
	}
}

static void test_big_into_buffer(struct rpc_client *c)
{
	uint32_t n = 4u << 20;
	uint8_t *buf = malloc(n);
	struct wbuf w;
	wbuf_init(&w);
	wbuf_put_u32(&w, n);
	struct rpc_reply rep = {.buf = buf, .cap = n};
	CHECK_EQ(rpc_call(c, T_BIG, &w, 0, &rep), 0);
	CHECK(rep.data == buf); /* landed in the caller's buffer, no copy */
	CHECK_EQ(rep.len, n);
	for (uint32_t i = 0; i < n; i += 4099)
		CHECK(buf[i] == (uint8_t)(i * 7));
	rpc_reply_done(&rep);
	/* too small a buffer falls back to the heap */
	struct rpc_reply rep2 = {.buf = buf, .cap = 16};
	CHECK_EQ(rpc_call(c, T_BIG, &w, 0, &rep2), 0);
	CHECK(rep2.data != buf && rep2.len == n);
	rpc_reply_done(&rep2);
	wbuf_done(&w);
	free(buf);
}

static void test_errors(struct rpc_client *c)
{
	struct rpc_reply rep = {0};
	CHECK_EQ(rpc_call(c, T_FAIL, NULL, 0, &rep), -ENOENT);
	rpc_reply_done(&rep);
	CHECK_EQ(rpc_call(c, 999, NULL, 0, &rep), -EOPNOTSUPP);
	rpc_reply_done(&rep);
}

static void test_timeout(const char *addr)
{
	struct rpc_client_opts o = {.timeout_ms = 200};
	struct rpc_client *c = rpc_client_new(addr, &o);
	struct rpc_reply rep = {0};
	CHECK_EQ(rpc_call(c, T_SLOW, NULL, 0, &rep), -ETIMEDOUT);
	rpc_reply_done(&rep);
	/* the timed-out connection was dropped; the next call works */
	CHECK_EQ(rpc_call(c, T_FAIL, NULL, 0, &rep), -ENOENT);
	rpc_reply_done(&rep);
	rpc_client_free(c);
}

static int raw_connect(uint16_t port)
{
	int fd = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(port)};
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(connect(fd, (struct sockaddr *)&in, sizeof(in)) == 0);
	return fd;
}

/* Sends bytes, then expects the server to close the connection. */
static void expect_closed(uint16_t port, const void *bytes, size_t n, bool half_close)
{
	int fd = raw_connect(port);
	CHECK(write(fd, bytes, n) == (ssize_t)n);
	if (half_close)
		shutdown(fd, SHUT_WR);
	struct timeval tv = {.tv_sec = 5};
	setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
	char buf[64];
	ssize_t r = read(fd, buf, sizeof(buf));
	CHECK(r == 0 || (r < 0 && errno == ECONNRESET));
	close(fd);
}

static void test_malformed(struct rpc_server *s, struct rpc_client *c)
{
	uint16_t port = rpc_server_port(s);
	uint64_t before = rpc_server_rejected(s);
	uint8_t hdr[WIRE_HDR_SIZE];
	struct wire_hdr h = {.type = T_ECHO, .req_id = 1};
	const char pl[] = "abc";

	memset(hdr, 0x5a, sizeof(hdr)); /* garbage */
	expect_closed(port, hdr, sizeof(hdr), false);

	wire_hdr_seal(&h, pl, 3, hdr); /* newer major */
	hdr[4] = WIRE_MAJOR + 1;
	expect_closed(port, hdr, sizeof(hdr), false);

	wire_hdr_seal(&h, pl, 3, hdr); /* oversized length */
	le32_put(hdr + 24, 0x7fffffff);
	expect_closed(port, hdr, sizeof(hdr), false);

	uint8_t frame[WIRE_HDR_SIZE + 3]; /* bad checksum */
	wire_hdr_seal(&h, pl, 3, frame);
	memcpy(frame + WIRE_HDR_SIZE, "abd", 3);
	expect_closed(port, frame, sizeof(frame), false);

	wire_hdr_seal(&h, pl, 3, frame); /* truncated: header, then EOF */
	expect_closed(port, frame, WIRE_HDR_SIZE + 1, true);

	CHECK_EQ(rpc_server_rejected(s) - before, 5);
	/* the server still serves a well-behaved client */
	struct rpc_reply rep = {0};
	CHECK_EQ(rpc_call(c, T_FAIL, NULL, 0, &rep), -ENOENT);
	rpc_reply_done(&rep);
}

static void test_reconnect(struct rpc_server **s, struct rpc_client *c)
{
	uint16_t port = rpc_server_port(*s);
	rpc_server_free(*s);
	struct rpc_reply rep = {0};
	CHECK_EQ(rpc_call(c, T_FAIL, NULL, RPC_IDEMPOTENT, &rep), -ECONNREFUSED);
	rpc_reply_done(&rep);
	*s = start(port);
	CHECK_EQ(rpc_call(c, T_FAIL, NULL, 0, &rep), -ENOENT);
	rpc_reply_done(&rep);
}

/* WIRE_F_DATA through the client: every call carries the data hash (the
 * handshake's challenge gave the peer's minor), which
 * the server recomputes from the bytes; a caller's wrong hash is caught. */
static void test_data_frames(const char *addr)
{
	struct rpc_client_opts o = {.max_conns = 1};
	struct rpc_client *c = rpc_client_new(addr, &o);
	CHECK(c);
	size_t len = 200000;
	uint8_t *data = malloc(len), fields[8] = {0};
	CHECK(data);
	for (size_t i = 0; i < len; i++)
		data[i] = (uint8_t)(i * 13);
	le32_put(fields, 4);
	struct iovec iov = {fields, sizeof(fields)};
	struct rpc_data d = {.p = data, .len = len};
	uint64_t want = wire_data_hash(data, len, NULL);
	for (int call = 0; call < 3; call++) {
		struct rpc_reply rep = {0};
		CHECK_EQ(rpc_callv_data(c, T_DATA, &iov, 1, &d, 0, &rep), 0);
		struct rbuf r;
		rbuf_init(&r, rep.data, rep.len);
		uint8_t split = rbuf_get_u8(&r);
		uint64_t h = rbuf_get_u64(&r);
		CHECK(rbuf_done(&r) == 0);
		CHECK_EQ(split, 1); /* the handshake told the client the minor */
		CHECK(!split || h == want);
		rpc_reply_done(&rep);
		d.hashed = call == 1; /* the third call reuses the hash */
		d.hash = want;
	}
	/* a hash that is not the data's: the server refuses the frame */
	d.hashed = true;
	d.hash = want ^ 1;
	struct rpc_reply rep = {0};
	int r = rpc_callv_data(c, T_DATA, &iov, 1, &d, 0, &rep);
	CHECK(r == -ECONNRESET || r == -EPROTO);
	rpc_reply_done(&rep);
	free(data);
	rpc_client_free(c);
}

/* Wire 1 peers (before the handshake of rpc_auth.h). A wire 1 server
 * closes a connection whose first frame has a newer major: the client's
 * call fails at the handshake, nothing is sent to it. */
struct old_peer {
	int lfd;
	int frames;
};

static void *old_peer_main(void *p)
{
	struct old_peer *o = p;
	int fd = accept(o->lfd, NULL, NULL);
	uint8_t hdr[WIRE_HDR_SIZE];
	if (fd >= 0 && recv(fd, hdr, sizeof(hdr), MSG_WAITALL) == sizeof(hdr)) {
		o->frames++;
		CHECK_EQ(hdr[4], 2); /* a wire 1 server refuses this major */
	}
	if (fd >= 0)
		close(fd);
	return NULL;
}

static void test_old_peer(uint16_t port)
{
	struct old_peer o = {.lfd = socket(AF_INET, SOCK_STREAM, 0)};
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t sl = sizeof(in);
	CHECK(o.lfd >= 0 && bind(o.lfd, (struct sockaddr *)&in, sizeof(in)) == 0 &&
	      listen(o.lfd, 4) == 0 && getsockname(o.lfd, (struct sockaddr *)&in, &sl) == 0);
	pthread_t t;
	CHECK(pthread_create(&t, NULL, old_peer_main, &o) == 0);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(in.sin_port));
	struct rpc_client_opts opts = {.max_conns = 1};
	struct rpc_client *c = rpc_client_new(addr, &opts);
	CHECK(c);
	struct rpc_reply rep = {0};
	int r = rpc_call(c, T_ECHO, NULL, 0, &rep);
	CHECK(r == -ECONNRESET || r == -EPIPE);
	rpc_reply_done(&rep);
	rpc_client_free(c);
	pthread_join(t, NULL);
	close(o.lfd);
	CHECK_EQ(o.frames, 1);

	/* a wire 1 client of this server: a wire 1 reply saying
	 * -EPROTONOSUPPORT for its request, then the connection closes */
	int fd = raw_connect(port);
	uint8_t hdr[WIRE_HDR_SIZE];
	struct wire_hdr h = {.type = T_ECHO, .req_id = 77};
	wire_hdr_seal(&h, NULL, 0, hdr);
	hdr[4] = 1;
	le64_put(hdr + 32, wire_xxh3_64("", 0, wire_xxh3_64(hdr, 32, 0)));
	CHECK(write(fd, hdr, sizeof(hdr)) == (ssize_t)sizeof(hdr));
	uint8_t back[WIRE_HDR_SIZE];
	CHECK(recv(fd, back, sizeof(back), MSG_WAITALL) == (ssize_t)sizeof(back));
	CHECK_EQ(back[4], 1);
	CHECK_EQ((int32_t)le32_get(back + 12), -EPROTONOSUPPORT);
	CHECK_EQ(le64_get(back + 16), 77);
	CHECK_EQ(le16_get(back + 8), T_ECHO);
	CHECK_EQ(le64_get(back + 32), wire_xxh3_64("", 0, wire_xxh3_64(back, 32, 0)));
	CHECK_EQ(read(fd, back, 1), 0);
	close(fd);
}

/* ---- worker pools ---------------------------------------------------------- */

/* The pool is the payload's first byte (T_PING: pool 2). */
static int pool_of(void *ctx, uint16_t type, const uint8_t *payload, size_t len)
{
	(void)ctx;
	if (type == T_PING)
		return 2;
	return len ? payload[0] : 0;
}

struct call_arg {
	struct rpc_client *c;
	uint16_t type;
	uint8_t pool;
	int rc;
	pthread_t t;
};

static int call_pool(struct rpc_client *c, uint16_t type, uint8_t pool)
{
	struct wbuf w;
	struct rpc_reply rep = {0};
	wbuf_init(&w);
	wbuf_put_u8(&w, pool);
	int r = rpc_call(c, type, &w, 0, &rep);
	CHECK(r < 0 || (rep.len == 1 && rep.data[0] == pool) || type != T_ECHO);
	rpc_reply_done(&rep);
	wbuf_done(&w);
	return r;
}

static void *call_main(void *p)
{
	struct call_arg *a = p;
	a->rc = call_pool(a->c, a->type, a->pool);
	return NULL;
}

static void call_start(struct call_arg *a, struct rpc_client *c, uint16_t type, uint8_t pool)
{
	*a = (struct call_arg){.c = c, .type = type, .pool = pool, .rc = 1};
	CHECK(pthread_create(&a->t, NULL, call_main, a) == 0);
}

static struct rpc_pool_stats pool_stats(struct rpc_server *s, int pool)
{
	struct rpc_pool_stats st;
	CHECK_EQ(rpc_server_pool_stats(s, pool, &st), 0);
	return st;
}

/* Waits up to 5 s for pool's waiting count, or for gate_entered (pool < 0). */
static void wait_for(struct rpc_server *s, int pool, int n)
{
	for (int i = 0; i < 500; i++) {
		pthread_mutex_lock(&gate_mu);
		int entered = gate_entered;
		pthread_mutex_unlock(&gate_mu);
		if ((pool < 0 ? entered : pool_stats(s, pool).waiting) == n)
			return;
		usleep(10 * 1000);
	}
	fprintf(stderr, "test_pools: pool %d never reached %d\n", pool, n);
	exit(1);
}

static void *open_gate_later(void *p)
{
	(void)p;
	usleep(300 * 1000);
	pthread_mutex_lock(&gate_mu);
	gate_open = true;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
	return NULL;
}

static void test_pools(void)
{
	struct rpc_server_opts o = {.name = "pools",
				    .listen = "127.0.0.1:0",
				    .handler = handler,
				    .npools = 3,
				    .pool_workers = {1, 1, 1},
				    .pool_queue = 2,
				    .pool_of = pool_of};
	struct rpc_server *s;
	CHECK_EQ(rpc_server_start(&o, &s), 0);
	struct rpc_server_opts bad = o;
	bad.pool_workers[1] = 0;
	struct rpc_server *s2 = NULL;
	CHECK_EQ(rpc_server_start(&bad, &s2), -EINVAL);
	CHECK_EQ(rpc_server_pool_stats(s, 3, &(struct rpc_pool_stats){0}), -EINVAL);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", rpc_server_port(s));
	struct rpc_client_opts co = {.timeout_ms = 3000, .max_conns = 16};
	struct rpc_client *c = rpc_client_new(addr, &co);
	nest_client = rpc_client_new(addr, &co);
	CHECK(c && nest_client);

	/* pool 0 (one worker) busy: the next two wait in its queue, the
	 * third is busy; pools 1 and 2 are served meanwhile */
	struct call_arg hold[3];
	call_start(&hold[0], c, T_HOLD, 0);
	wait_for(s, -1, 1);
	call_start(&hold[1], c, T_HOLD, 0);
	call_start(&hold[2], c, T_HOLD, 7); /* out of range: pool 0 */
	wait_for(s, 0, 2);
	CHECK_EQ(call_pool(c, T_HOLD, 0), -EAGAIN);
	for (int i = 0; i < 20; i++) {
		CHECK_EQ(call_pool(c, T_ECHO, 1), 0);
		CHECK_EQ(call_pool(c, T_PING, 0), 0);
	}
	pthread_mutex_lock(&gate_mu);
	CHECK_EQ(gate_entered, 1); /* the queued ones did not run */
	gate_open = true;
	pthread_cond_broadcast(&gate_cv);
	pthread_mutex_unlock(&gate_mu);
	for (int i = 0; i < 3; i++) {
		pthread_join(hold[i].t, NULL);
		CHECK_EQ(hold[i].rc, 0);
	}
	struct rpc_pool_stats st = pool_stats(s, 0);
	CHECK_EQ(st.run, 3);
	CHECK_EQ(st.queued, 2);
	CHECK_EQ(st.busy, 1);
	CHECK_EQ(st.running + st.waiting, 0);
	CHECK_EQ(pool_stats(s, 1).run, 20);
	CHECK_EQ(pool_stats(s, 2).run, 20);

	/* requests of pool 0 that wait on requests of pool 1 (as a forward
	 * waits on the next hop): every pool-0 slot taken and more queued,
	 * still each one's call gets a thread (invariant 4) */
	struct call_arg nest[3];
	for (int i = 0; i < 3; i++)
		call_start(&nest[i], c, T_NEST, 0);
	for (int i = 0; i < 3; i++) {
		pthread_join(nest[i].t, NULL);
		CHECK_EQ(nest[i].rc, 0);
	}
	CHECK_EQ(pool_stats(s, 0).run, 6);
	CHECK_EQ(pool_stats(s, 1).run, 23);

	/* a request still queued at shutdown is dropped with its connection */
	gate_open = false;
	gate_entered = 0;
	call_start(&hold[0], c, T_HOLD, 0);
	wait_for(s, -1, 1);
	call_start(&hold[1], c, T_HOLD, 0);
	wait_for(s, 0, 1);
	pthread_t opener;
	CHECK(pthread_create(&opener, NULL, open_gate_later, NULL) == 0);
	rpc_server_free(s); /* returns once the running one is answered */
	pthread_join(opener, NULL);
	pthread_join(hold[0].t, NULL);
	pthread_join(hold[1].t, NULL);
	CHECK_EQ(hold[0].rc, 0);
	CHECK(hold[1].rc < 0);
	rpc_client_free(c);
	rpc_client_free(nest_client);
}

int main(void)
{
	test_key_setup(RPC_ROLE_ADMIN);
	log_init("test_rpc", LOG_LVL_WARN);
	struct rpc_server *s = start(0);
	char addr[32];
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", rpc_server_port(s));
	struct rpc_client *c = rpc_client_new(addr, NULL);
	CHECK(c);
	test_concurrent(c);
	test_big_into_buffer(c);
	test_errors(c);
	test_timeout(addr);
	test_malformed(s, c);
	test_reconnect(&s, c);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", rpc_server_port(s));
	test_data_frames(addr);
	test_old_peer(rpc_server_port(s));
	test_pools();
	rpc_client_free(c);
	rpc_server_free(s);
	printf("test_rpc: ok\n");
	return 0;
}
