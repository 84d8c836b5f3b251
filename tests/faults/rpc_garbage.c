/* rpc_garbage.c — malformed RPC frames against a running strata daemon.
 *
 *   rpc_garbage HOST:PORT meta|chunk
 *
 * Sends random bytes, truncated frames, huge lengths, bad checksums, a newer
 * major version, unknown message types, payloads that are too short, random
 * payloads for every known message type, byte-at-a-time frames and a crowd of
 * idle half-open connections. After each case a well-formed ping on a fresh
 * connection must be answered with status 0: a bad peer may lose its own
 * connection, never the server. Frames are built here from the layout
 * documented in fs/wire.h (an independent encoder, so that a bug shared by
 * the codec's two sides cannot hide). Every connection but those of the
 * "without the handshake" cases first proves the cluster key ($STRATA_KEY,
 * role admin: every type reaches its decoder) with fs/rpc_auth.h.
 *
 * Exit 0 when the server survived every case, 1 otherwise. */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>
#include "fs/proto.h"
#include "fs/rpc_auth.h"
#include "fs/wire.h"

static const char *g_addr;
static uint16_t g_ping;
static const char *g_case = "setup";
static uint64_t g_rng = 0x1234567;

static uint64_t rnd(void)
{
	g_rng ^= g_rng >> 12;
	g_rng ^= g_rng << 25;
	g_rng ^= g_rng >> 27;
	return g_rng * 0x2545F4914F6CDD1Dull;
}

static void __attribute__((noreturn, format(printf, 1, 2))) fail(const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "FAIL %s: ", g_case);
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	exit(1);
}

static int recv_exact(int fd, void *p, size_t n, int timeout_ms);

/* A TCP connection, no handshake. */
static int dial_raw(void)
{
	char host[256];
	const char *colon = strrchr(g_addr, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai;
	size_t hl = (size_t)(colon - g_addr);
	int fd;

	memcpy(host, g_addr, hl);
	host[hl] = '\0';
	if (getaddrinfo(hl ? host : "127.0.0.1", colon + 1, &hints, &ai) != 0)
		fail("cannot resolve %s", g_addr);
	fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0 || connect(fd, ai->ai_addr, ai->ai_addrlen) < 0)
		fail("connect %s: %s", g_addr, strerror(errno));
	freeaddrinfo(ai);
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	return fd;
}

static void send_all(int fd, const void *p, size_t n)
{
	const uint8_t *b = p;
	while (n) {
		ssize_t w = send(fd, b, n, MSG_NOSIGNAL);
		if (w < 0) {
			if (errno == EINTR)
				continue;
			return; /* the server may close on us mid-way: fine */
		}
		b += w;
		n -= (size_t)w;
	}
}

/* Builds a frame per fs/wire.h. major/len_override let cases lie. */
static size_t frame(uint8_t *out, uint16_t type, uint8_t major, uint8_t minor, uint64_t req_id,
		    const void *payload, uint32_t len, uint32_t len_field, bool bad_sum)
{
	le32_put(out + 0, WIRE_MAGIC);
	out[4] = major;
	out[5] = minor;
	le16_put(out + 6, 0);
	le16_put(out + 8, type);
	le16_put(out + 10, 0);
	le32_put(out + 12, 0);
	le64_put(out + 16, req_id);
	le32_put(out + 24, len_field);
	le32_put(out + 28, 0);
	uint64_t sum = XXH3_64bits_withSeed(payload, len, XXH3_64bits(out, 32));
	if (bad_sum)
		sum ^= 0x5a5a;
	le64_put(out + 32, sum);
	if (len)
		memcpy(out + WIRE_HDR_SIZE, payload, len);
	return WIRE_HDR_SIZE + len;
}

/* A connection past the handshake (rpc_auth.h) with role admin. */
static int dial(void)
{
	int fd = dial_raw();
	const struct rpc_cred *cred = rpc_auth_default();
	struct rpc_auth_client a;
	struct wbuf out;
	wbuf_init(&out);
	rpc_auth_client_hello(&a, cred, &out);
	send_all(fd, out.data, out.len);
	uint8_t hdr[WIRE_HDR_SIZE], p[RPC_AUTH_MAX_PAYLOAD];
	struct wire_hdr h;
	const char *why = "no challenge";
	int r = recv_exact(fd, hdr, sizeof(hdr), 5000);
	if (r == 0 && (r = wire_hdr_decode(hdr, &h, &why)) == 0 &&
	    h.payload_len <= RPC_AUTH_MAX_PAYLOAD &&
	    (r = recv_exact(fd, p, h.payload_len, 5000)) == 0) {
		wbuf_reset(&out);
		r = rpc_auth_client_challenge(&a, &h, p, &out, &why);
	}
	if (r < 0)
		fail("handshake with %s: %s (%s)", g_addr, strerror(-r), why);
	send_all(fd, out.data, out.len);
	wbuf_done(&out);
	return fd;
}

/* Reads exactly n bytes with a deadline. Returns 0, -ETIMEDOUT, or -ECONNRESET
 * on EOF / reset. */
static int recv_exact(int fd, void *p, size_t n, int timeout_ms)
{
	uint8_t *b = p;
	while (n) {
		struct pollfd pf = {.fd = fd, .events = POLLIN};
		int r = poll(&pf, 1, timeout_ms);
		if (r == 0)
			return -ETIMEDOUT;
		if (r < 0 && errno != EINTR)
			return -errno;
		ssize_t got = recv(fd, b, n, 0);
		if (got == 0)
			return -ECONNRESET;
		if (got < 0) {
			if (errno == EINTR || errno == EAGAIN)
				continue;
			return -ECONNRESET;
		}
		b += got;
		n -= (size_t)got;
	}
	return 0;
}

/* Reads one reply frame; returns its status via *ret_status and req id. */
static int read_reply(int fd, int timeout_ms, int32_t *ret_status, uint64_t *ret_req)
{
	uint8_t h[WIRE_HDR_SIZE];
	int r = recv_exact(fd, h, sizeof(h), timeout_ms);
	if (r < 0)
		return r;
	if (le32_get(h) != WIRE_MAGIC)
		fail("reply with bad magic 0x%08x", le32_get(h));
	if (!(le16_get(h + 6) & WIRE_F_REPLY))
		fail("reply frame without the reply flag");
	uint32_t len = le32_get(h + 24);
	if (len > WIRE_MAX_PAYLOAD)
		fail("reply payload_len %u over the limit", len);
	uint8_t *p = malloc(len ? len : 1);
	if (!p)
		fail("out of memory");
	r = recv_exact(fd, p, len, timeout_ms);
	if (r < 0) {
		free(p);
		return r;
	}
	uint64_t want = XXH3_64bits_withSeed(p, len, XXH3_64bits(h, 32));
	free(p);
	if (want != le64_get(h + 32))
		fail("reply checksum mismatch");
	*ret_status = (int32_t)le32_get(h + 12);
	*ret_req = le64_get(h + 16);
	return 0;
}

/* A well-formed ping on fd; fails unless answered with status 0. */
static void ping_on(int fd, const char *what)
{
	uint8_t f[WIRE_HDR_SIZE];
	uint64_t id = rnd() | 1;
	int32_t st;
	uint64_t rid;
	size_t n = frame(f, g_ping, WIRE_MAJOR, WIRE_MINOR, id, NULL, 0, 0, false);
	send_all(fd, f, n);
	int r = read_reply(fd, 5000, &st, &rid);
	if (r < 0)
		fail("%s: no answer to a ping: %s", what, strerror(-r));
	if (st != 0)
		fail("%s: ping answered with status %d", what, st);
	if (rid != id)
		fail("%s: ping reply has req_id %llu, sent %llu", what, (unsigned long long)rid,
		     (unsigned long long)id);
}

static void ping_fresh(void)
{
	int fd = dial();
	ping_on(fd, "fresh connection after the case");
	close(fd);
}

/* After a malformed frame the server must close the connection (or answer it
 * with an error) within a few seconds, never with success. */
static void expect_closed(int fd)
{
	int32_t st;
	uint64_t rid;
	for (int i = 0; i < 4; i++) {
		int r = read_reply(fd, 5000, &st, &rid);
		if (r == -ECONNRESET)
			return;
		if (r == -ETIMEDOUT)
			fail("the server kept a connection open after a malformed frame");
		if (r < 0)
			return;
		if (st == 0)
			fail("a malformed frame was answered with status 0");
	}
	fail("the server kept answering on a connection after a malformed frame");
}

/* 4 KiB of random bytes on fd: the server must close it and serve others. */
static void random_bytes(int fd, uint8_t *buf)
{
	for (size_t i = 0; i < 4096; i++)
		buf[i] = (uint8_t)rnd();
	send_all(fd, buf, 4096);
	expect_closed(fd);
	close(fd);
	ping_fresh();
}

static void begin(const char *name)
{
	g_case = name;
	printf("  %s\n", name);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static uint8_t buf[WIRE_HDR_SIZE + 65536];
	uint8_t payload[65536];
	int fd;
	size_t n;
	int32_t st;
	uint64_t rid;

	if (argc != 3 || (strcmp(argv[2], "meta") && strcmp(argv[2], "chunk"))) {
		fprintf(stderr, "usage: rpc_garbage HOST:PORT meta|chunk\n");
		return 2;
	}
	g_addr = argv[1];
	bool meta = !strcmp(argv[2], "meta");
	g_ping = meta ? MSG_META_PING : MSG_CHUNK_PING;
	g_rng ^= (uint64_t)time(NULL);
	printf("rpc_garbage: %s (%s)\n", g_addr, argv[2]);
	struct strata_err e = {0};
	if (rpc_auth_setup(NULL, RPC_ROLE_ADMIN, &e) < 0)
		fail("%s", strata_err_msg(&e));

	begin("baseline ping");
	ping_fresh();

	begin("a ping without the handshake is refused");
	fd = dial_raw();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 1, NULL, 0, 0, false);
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("random bytes before the handshake");
	random_bytes(dial_raw(), buf);

	begin("random bytes (4 KiB) then close");
	random_bytes(dial(), buf);

	begin("bad magic");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 1, NULL, 0, 0, false);
	buf[0] ^= 0xff;
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("newer major version is refused");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR + 1, 0, 2, NULL, 0, 0, false);
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("newer minor version is served");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR + 3, 3, "future", 6, 6, false);
	send_all(fd, buf, n);
	if (read_reply(fd, 5000, &st, &rid) < 0 || st != 0)
		fail("a ping with a newer minor version was not answered with 0");
	close(fd);

	begin("huge payload length (4 GiB - 16)");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 4, NULL, 0, 0xfffffff0u, false);
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("payload length just over WIRE_MAX_PAYLOAD");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 5, NULL, 0, WIRE_MAX_PAYLOAD + 1, false);
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("bad checksum");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 6, "abcdefgh", 8, 8, true);
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("truncated header then close");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 7, NULL, 0, 0, false);
	send_all(fd, buf, 17);
	close(fd);
	ping_fresh();

	begin("truncated payload then close");
	fd = dial();
	memset(payload, 'x', 1000);
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 8, payload, 1000, 1000, false);
	send_all(fd, buf, WIRE_HDR_SIZE + 100);
	close(fd);
	ping_fresh();

	begin("a reply frame sent to the server");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 9, NULL, 0, 0, false);
	le16_put(buf + 6, WIRE_F_REPLY);
	{
		uint64_t sum = XXH3_64bits_withSeed(NULL, 0, XXH3_64bits(buf, 32));
		le64_put(buf + 32, sum);
	}
	send_all(fd, buf, n);
	expect_closed(fd);
	close(fd);
	ping_fresh();

	begin("unknown message type: an error reply, connection still usable");
	fd = dial();
	n = frame(buf, 0x7777, WIRE_MAJOR, WIRE_MINOR, 10, "zz", 2, 2, false);
	send_all(fd, buf, n);
	int r = read_reply(fd, 5000, &st, &rid);
	if (r == 0) {
		if (st >= 0)
			fail("unknown type 0x7777 answered with status %d", st);
		ping_on(fd, "same connection after an unknown type");
	} else if (r != -ECONNRESET) {
		fail("unknown type: no reply and no close: %s", strerror(-r));
	}
	close(fd);
	ping_fresh();

	/* Every known type with empty, short and random payloads. */
	uint16_t types[64];
	int ntypes = 0;
	if (meta) {
		for (uint16_t t = MSG_META_PING; t <= MSG_META_SET_LENGTH; t++)
			types[ntypes++] = t;
		for (uint16_t t = MSG_MGMT_REGISTER; t <= MSG_MGMT_ROUTING; t++)
			types[ntypes++] = t;
	} else {
		for (uint16_t t = MSG_CHUNK_PING; t <= MSG_CHUNK_STAT; t++)
			types[ntypes++] = t;
	}
	begin("every known type with an empty payload");
	fd = dial();
	for (int i = 0; i < ntypes; i++) {
		n = frame(buf, types[i], WIRE_MAJOR, WIRE_MINOR, 100 + (uint64_t)i, NULL, 0, 0,
			  false);
		send_all(fd, buf, n);
		r = read_reply(fd, 5000, &st, &rid);
		if (r < 0)
			fail("type 0x%04x with an empty payload: %s", types[i], strerror(-r));
		if (st == 0 && types[i] != g_ping && types[i] != MSG_MGMT_ROUTING &&
		    types[i] != MSG_META_SYNC && types[i] != MSG_META_STATFS)
			printf("    note: type 0x%04x accepted an empty payload\n", types[i]);
	}
	close(fd);
	ping_fresh();

	begin("every known type with 2000 random payloads (valid frames)");
	fd = dial();
	for (int round = 0; round < 2000; round++) {
		uint16_t t = types[rnd() % (uint64_t)ntypes];
		/* Registering random nodes would change routing for the mount
		 * the test checks afterwards: only the empty case covers it. */
		if (t == MSG_MGMT_REGISTER)
			continue;
		uint32_t len = (uint32_t)(rnd() % ((round % 10) ? 64 : 4096));
		for (uint32_t i = 0; i < len; i++)
			payload[i] = (uint8_t)rnd();
		/* Plausible prefixes for read-only requests: small inode numbers
		 * (root and its first children) so decoding reaches the handlers.
		 * Mutating requests keep random (non-existent) inode numbers. */
		bool readonly = t == MSG_META_LOOKUP || t == MSG_META_GETATTR ||
				t == MSG_META_READLINK || t == MSG_META_READDIR ||
				t == MSG_META_GETXATTR || t == MSG_META_LISTXATTR ||
				t == MSG_META_STATFS || t == MSG_CHUNK_READ || t == MSG_CHUNK_STAT;
		if (len >= 8 && readonly && rnd() % 2)
			le64_put(payload, rnd() % 4);
		if (len >= 16 && rnd() % 2)
			le32_put(payload + 8, (uint32_t)(rnd() % 300));
		n = frame(buf, t, WIRE_MAJOR, WIRE_MINOR, 1000 + (uint64_t)round, payload, len, len,
			  false);
		send_all(fd, buf, n);
		r = read_reply(fd, 10000, &st, &rid);
		if (r == -ECONNRESET) {
			/* Allowed for a frame the server deems malformed; carry on. */
			close(fd);
			fd = dial();
			continue;
		}
		if (r < 0)
			fail("type 0x%04x, %u random bytes: %s", t, len, strerror(-r));
		if (rid != 1000 + (uint64_t)round)
			fail("reply req_id %llu for request %d", (unsigned long long)rid,
			     1000 + round);
	}
	ping_on(fd, "same connection after random payloads");
	close(fd);
	ping_fresh();

	begin("a ping sent one byte at a time");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 11, NULL, 0, 0, false);
	for (size_t i = 0; i < n; i++) {
		send_all(fd, buf + i, 1);
		struct timespec ts = {0, 5 * 1000 * 1000};
		nanosleep(&ts, NULL);
	}
	if (read_reply(fd, 5000, &st, &rid) < 0 || st != 0)
		fail("a slowly sent ping was not answered");
	close(fd);

	begin("two pipelined pings in one write");
	fd = dial();
	n = frame(buf, g_ping, WIRE_MAJOR, WIRE_MINOR, 12, NULL, 0, 0, false);
	n += frame(buf + n, g_ping, WIRE_MAJOR, WIRE_MINOR, 13, NULL, 0, 0, false);
	send_all(fd, buf, n);
	for (int i = 0; i < 2; i++)
		if (read_reply(fd, 5000, &st, &rid) < 0 || st != 0)
			fail("pipelined ping %d not answered", i);
	close(fd);

	begin("200 idle connections holding half a header");
	int idle[200];
	for (int i = 0; i < 200; i++) {
		idle[i] = dial();
		send_all(idle[i], buf, 20);
	}
	ping_fresh();
	for (int i = 0; i < 200; i++)
		close(idle[i]);
	ping_fresh();

	printf("rpc_garbage: %s survived every case\n", g_addr);
	return 0;
}
