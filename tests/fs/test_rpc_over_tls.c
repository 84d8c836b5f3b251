/* test_rpc_over_tls.c — the RPC layer inside TLS (fs/rpc_tls.h) over
 * loopback, server and clients in this process:
 *
 *  1. calls over TLS: concurrent echoes, 4 MiB each way (the reply into the
 *     caller's buffer), a 1 MiB WIRE_F_DATA request, handler errors, roles (-EPERM);
 *  2. a client holding another key is refused (-EKEYREJECTED) at the TLS
 *     handshake, at once;
 *  3. TLS on one side only gives the clear error within a second, both
 *     ways: a plain client of a TLS server RPC_ERR_PEER_TLS, a TLS client
 *     of a plain server RPC_ERR_PEER_PLAIN (before rpc_tls.c: a plain
 *     server closes on "bad magic", the client sees a reset);
 *  4. the documented PSK (HMAC-SHA256(key, "strata-tls-psk"), identity
 *     "strata") opens a session with a TLS client written here on OpenSSL;
 *     that client authenticates, pipelines (two requests in one record, two
 *     records in one segment: both answered), then sends part of a TLS
 *     record and stops:
 *     the server closes it after RPC_FRAME_TIMEOUT_MS, as a partial frame
 *     (not after RPC_IDLE_TIMEOUT_MS, as an idle connection);
 *  5. garbage after a TLS record byte, on 200 connections, closes each of
 *     them and leaves the server serving. */
#include <errno.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/socket.h>
#include "fs/clock.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "fs/rpc_tls.h"
#include "tests/testutil.h"
#include "tests/fs/testkey.h"

enum { T_ECHO = 1, T_FAIL = 2, T_DATA = 3, T_ADMIN_ONLY = 4 };

static int handler(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
		   const struct rpc_peer *peer)
{
	(void)ctx;
	switch (type) {
	case T_ECHO:
	case T_ADMIN_ONLY: {
		size_t n = rbuf_remaining(req);
		wbuf_put_bytes(reply, rbuf_get_bytes(req, n), n);
		return 0;
	}
	case T_DATA: /* the data's hash, as the server verified it */
		if (!peer->data)
			return -EPROTO;
		wbuf_put_u64(reply, peer->data_hash);
		return 0;
	case T_FAIL:
		return -ENOENT;
	}
	return -EOPNOTSUPP;
}

static bool may(uint8_t role, uint16_t type)
{
	return type != T_ADMIN_ONLY || role == RPC_ROLE_ADMIN;
}

static struct rpc_server *start(enum rpc_tls_mode tls, char addr[32])
{
	struct rpc_server_opts o = {.name = "test",
				    .listen = "127.0.0.1:0",
				    .workers = 3,
				    .handler = handler,
				    .may = may,
				    .tls = tls};
	struct rpc_server *s;
	CHECK_EQ(rpc_server_start(&o, &s), 0);
	snprintf(addr, 32, "127.0.0.1:%u", rpc_server_port(s));
	return s;
}

static struct rpc_client *client(const char *addr, enum rpc_tls_mode tls,
				 const struct rpc_cred *cred)
{
	struct rpc_client_opts o = {.tls = tls, .cred = cred};
	struct rpc_client *c = rpc_client_new(addr, &o);
	CHECK(c);
	return c;
}

static int echo(struct rpc_client *c, uint16_t type, const char *msg)
{
	struct wbuf w;
	wbuf_init(&w);
	wbuf_put_bytes(&w, msg, strlen(msg));
	struct rpc_reply rep = {0};
	int r = rpc_call(c, type, &w, 0, &rep);
	if (r == 0 && (rep.len != strlen(msg) || memcmp(rep.data, msg, rep.len) != 0))
		r = -EBADMSG;
	rpc_reply_done(&rep);
	wbuf_done(&w);
	return r;
}

static void *hammer(void *p)
{
	struct rpc_client *c = p;
	for (int i = 0; i < 200; i++) {
		char msg[64];
		snprintf(msg, sizeof(msg), "call %d of %p", i, (void *)&msg);
		if (echo(c, T_ECHO, msg) != 0)
			return (void *)1;
	}
	return NULL;
}

static void test_calls(const char *addr)
{
	struct rpc_client *c = client(addr, RPC_TLS_ON, NULL);
	pthread_t t[6];
	for (int i = 0; i < 6; i++)
		pthread_create(&t[i], NULL, hammer, c);
	for (int i = 0; i < 6; i++) {
		void *failed;
		pthread_join(t[i], &failed);
		CHECK(failed == NULL);
	}
	/* 4 MiB each way; the reply lands in the caller's buffer */
	uint32_t n = 4u << 20;
	uint8_t *buf = malloc(n), *back = malloc(n);
	for (uint32_t i = 0; i < n; i++)
		buf[i] = (uint8_t)(i * 7);
	struct iovec big = {.iov_base = buf, .iov_len = n};
	struct rpc_reply rep = {.buf = back, .cap = n};
	CHECK_EQ(rpc_callv(c, T_ECHO, &big, 1, 0, &rep), 0);
	CHECK(rep.data == back && rep.len == n && memcmp(back, buf, n) == 0);
	rpc_reply_done(&rep);
	/* a 1 MiB data frame: the server verified the same data */
	for (uint32_t i = 0; i < (1u << 20); i++)
		buf[i] = (uint8_t)(i * 13);
	struct rpc_data d = {.p = buf, .len = 1u << 20};
	uint8_t field = 1;
	struct iovec iov = {.iov_base = &field, .iov_len = 1};
	rep = (struct rpc_reply){0};
	CHECK_EQ(rpc_callv_data(c, T_DATA, &iov, 1, &d, 0, &rep), 0);
	CHECK_EQ(rep.len, 8);
	CHECK(le64_get(rep.data) == wire_data_hash(buf, d.len, NULL));
	rpc_reply_done(&rep);
	CHECK_EQ(rpc_call(c, T_FAIL, NULL, 0, &rep), -ENOENT);
	rpc_reply_done(&rep);
	free(buf);
	free(back);
	/* roles still hold inside TLS */
	struct rpc_cred fuse = *rpc_auth_default();
	fuse.role = RPC_ROLE_FUSE;
	struct rpc_client *f = client(addr, RPC_TLS_ON, &fuse);
	CHECK_EQ(echo(f, T_ECHO, "fine"), 0);
	CHECK_EQ(echo(f, T_ADMIN_ONLY, "refused"), -EPERM);
	CHECK_EQ(echo(c, T_ADMIN_ONLY, "admin may"), 0);
	rpc_client_free(f);
	rpc_client_free(c);
}

/* Runs one echo and checks it fails with want within a second. */
static void expect_quick(struct rpc_client *c, int want)
{
	int64_t t0 = strata_mono_ms();
	CHECK_EQ(echo(c, T_ECHO, "x"), want);
	int64_t ms = strata_mono_ms() - t0;
	printf("  %s after %lld ms\n", rpc_strerror(want), (long long)ms);
	CHECK(ms < 1000);
}

static void test_wrong_key(const char *addr)
{
	struct rpc_cred other = *rpc_auth_default();
	other.key.b[0] ^= 1;
	struct rpc_client *c = client(addr, RPC_TLS_ON, &other);
	expect_quick(c, -EKEYREJECTED);
	rpc_client_free(c);
}

static void test_mismatch(const char *tls_addr, const char *plain_addr)
{
	struct rpc_client *plain = client(tls_addr, RPC_TLS_OFF, NULL);
	expect_quick(plain, RPC_ERR_PEER_TLS);
	rpc_client_free(plain);
	struct rpc_client *tls = client(plain_addr, RPC_TLS_ON, NULL);
	expect_quick(tls, RPC_ERR_PEER_PLAIN);
	rpc_client_free(tls);
	/* each server still serves its own kind */
	struct rpc_client *ok = client(plain_addr, RPC_TLS_OFF, NULL);
	CHECK_EQ(echo(ok, T_ECHO, "plain"), 0);
	rpc_client_free(ok);
}

static int raw_connect(const char *addr)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in in = {.sin_family = AF_INET,
				 .sin_port = htons((uint16_t)atoi(strrchr(addr, ':') + 1))};
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	CHECK(fd >= 0 && connect(fd, (struct sockaddr *)&in, sizeof(in)) == 0);
	return fd;
}

/* ---- an independent TLS client: the PSK as fs/rpc_tls.h documents it ---- */
static uint8_t doc_psk[32];

static int doc_psk_cb(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
		      SSL_SESSION **ret)
{
	(void)md;
	static const unsigned char aes128gcm[2] = {0x13, 0x01};
	SSL_SESSION *s = SSL_SESSION_new();
	CHECK(s && SSL_SESSION_set1_master_key(s, doc_psk, sizeof(doc_psk)) &&
	      SSL_SESSION_set_cipher(s, SSL_CIPHER_find(ssl, aes128gcm)) &&
	      SSL_SESSION_set_protocol_version(s, TLS1_3_VERSION));
	*ret = s;
	*id = (const unsigned char *)"strata";
	*idlen = 6;
	return 1;
}

static void ssl_write_all(SSL *ssl, const struct wbuf *b)
{
	size_t n;
	CHECK(SSL_write_ex(ssl, b->data, b->len, &n) && n == b->len);
}

static void ssl_read_all(SSL *ssl, void *buf, size_t len)
{
	for (size_t got = 0, n; got < len; got += n)
		CHECK(SSL_read_ex(ssl, (uint8_t *)buf + got, len - got, &n));
}

/* Opens TLS with the documented PSK and authenticates as admin; returns fd. */
static int doc_client_connect(const char *addr, SSL_CTX **ret_ctx, SSL **ret_ssl)
{
	unsigned len = sizeof(doc_psk);
	CHECK(HMAC(EVP_sha256(), rpc_auth_default()->key.b, RPC_KEY_SIZE,
		   (const uint8_t *)"strata-tls-psk", 14, doc_psk, &len));
	SSL_CTX *ctx = SSL_CTX_new(TLS_client_method());
	CHECK(ctx && SSL_CTX_set_min_proto_version(ctx, TLS1_3_VERSION));
	SSL_CTX_set_psk_use_session_callback(ctx, doc_psk_cb);
	int fd = raw_connect(addr);
	SSL *ssl = SSL_new(ctx);
	CHECK(ssl && SSL_set_fd(ssl, fd) && SSL_connect(ssl) == 1);
	struct rpc_auth_client a;
	struct wbuf out;
	wbuf_init(&out);
	rpc_auth_client_hello(&a, rpc_auth_default(), &out);
	ssl_write_all(ssl, &out);
	uint8_t hdr[WIRE_HDR_SIZE], payload[RPC_AUTH_MAX_PAYLOAD];
	struct wire_hdr h;
	ssl_read_all(ssl, hdr, sizeof(hdr));
	CHECK_EQ(wire_hdr_decode(hdr, &h, NULL), 0);
	CHECK(h.payload_len <= sizeof(payload));
	ssl_read_all(ssl, payload, h.payload_len);
	const char *why;
	wbuf_reset(&out);
	CHECK_EQ(rpc_auth_client_challenge(&a, &h, payload, &out, &why), 0);
	ssl_write_all(ssl, &out);
	wbuf_done(&out);
	*ret_ctx = ctx;
	*ret_ssl = ssl;
	return fd;
}

/* Seconds until the server closes fd (at most limit_s). */
static double seconds_to_close(int fd, int limit_s)
{
	int64_t t0 = strata_mono_ms();
	struct pollfd p = {.fd = fd, .events = POLLIN};
	while (strata_mono_ms() - t0 < limit_s * 1000LL) {
		if (poll(&p, 1, 200) > 0) {
			char b[64];
			if (recv(fd, b, sizeof(b), MSG_DONTWAIT) <= 0)
				break;
		}
	}
	return (double)(strata_mono_ms() - t0) / 1000;
}

static void test_partial_record(const char *addr, struct rpc_server *s)
{
	SSL_CTX *ctx;
	SSL *ssl;
	int fd = doc_client_connect(addr, &ctx, &ssl);
	/* the session works: a whole request is answered */
	struct wbuf req;
	wbuf_init(&req);
	struct wire_hdr h = {.type = T_ECHO, .req_id = 7};
	uint8_t hdr[WIRE_HDR_SIZE];
	wire_hdr_seal(&h, "ok", 2, hdr);
	wbuf_put_bytes(&req, hdr, sizeof(hdr));
	wbuf_put_bytes(&req, "ok", 2);
	ssl_write_all(ssl, &req);
	uint8_t rhdr[WIRE_HDR_SIZE + 2];
	ssl_read_all(ssl, rhdr, sizeof(rhdr));
	CHECK(memcmp(rhdr + WIRE_HDR_SIZE, "ok", 2) == 0);
	int authed, hs;
	rpc_server_conns(s, &authed, &hs);
	CHECK(authed >= 1);
	/* pipelined: two requests in one record, then two records in one
	 * segment; the second of each waits in OpenSSL (decrypted, or read
	 * ahead), not in the socket, and is still answered */
	struct wbuf two;
	wbuf_init(&two);
	wbuf_put_bytes(&two, req.data, req.len);
	wbuf_put_bytes(&two, req.data, req.len);
	ssl_write_all(ssl, &two);
	for (int i = 0; i < 2; i++) {
		ssl_read_all(ssl, rhdr, sizeof(rhdr));
		CHECK(memcmp(rhdr + WIRE_HDR_SIZE, "ok", 2) == 0);
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
	ssl_write_all(ssl, &req);
	ssl_write_all(ssl, &req);
	one = 0;
	setsockopt(fd, IPPROTO_TCP, TCP_CORK, &one, sizeof(one));
	for (int i = 0; i < 2; i++) {
		ssl_read_all(ssl, rhdr, sizeof(rhdr));
		CHECK(memcmp(rhdr + WIRE_HDR_SIZE, "ok", 2) == 0);
	}
	wbuf_done(&two);
	/* part of a TLS record: header (application data, 64 bytes) and 10 */
	static const uint8_t part[15] = {0x17, 0x03, 0x03, 0x00, 0x40, 1, 2, 3, 4, 5, 6, 7, 8, 9};
	CHECK(send(fd, part, sizeof(part), MSG_NOSIGNAL) == (ssize_t)sizeof(part));
	double sec = seconds_to_close(fd, RPC_FRAME_TIMEOUT_MS / 1000 + 15);
	printf("  partial TLS record: closed after %.1f s (frame deadline %d s)\n", sec,
	       RPC_FRAME_TIMEOUT_MS / 1000);
	CHECK(sec >= RPC_FRAME_TIMEOUT_MS / 1000 - 1 && sec < RPC_FRAME_TIMEOUT_MS / 1000 + 5);
	SSL_free(ssl);
	SSL_CTX_free(ctx);
	close(fd);
	wbuf_done(&req);
}

static void test_garbage(const char *addr, struct rpc_server *s)
{
	uint64_t x = 0x9e3779b97f4a7c15ull;
	for (int i = 0; i < 200; i++) {
		uint8_t b[512];
		size_t n = 1 + (size_t)(x % sizeof(b));
		for (size_t k = 0; k < n; k++) {
			x ^= x << 13, x ^= x >> 7, x ^= x << 17;
			b[k] = (uint8_t)x;
		}
		b[0] = RPC_TLS_RECORD_HANDSHAKE;
		if (i % 2 && n > 5) { /* a plausible record header, a random body */
			b[1] = 3;
			b[2] = 1;
		}
		int fd = raw_connect(addr);
		CHECK(send(fd, b, n, MSG_NOSIGNAL) == (ssize_t)n);
		shutdown(fd, SHUT_WR);
		CHECK(seconds_to_close(fd, RPC_HANDSHAKE_TIMEOUT_MS / 1000 + 3) <
		      RPC_HANDSHAKE_TIMEOUT_MS / 1000 + 2);
		close(fd);
	}
	struct rpc_client *c = client(addr, RPC_TLS_ON, NULL);
	CHECK_EQ(echo(c, T_ECHO, "still serving"), 0);
	rpc_client_free(c);
	int authed = 0, hs = 1;
	for (int i = 0; i < 50 && hs; i++) {
		rpc_server_conns(s, &authed, &hs);
		usleep(20000);
	}
	CHECK_EQ(hs, 0);
}

int main(void)
{
	test_key_setup(RPC_ROLE_ADMIN);
	char tls_addr[32], plain_addr[32];
	struct rpc_server *tls = start(RPC_TLS_ON, tls_addr);
	struct rpc_server *plain = start(RPC_TLS_OFF, plain_addr);
	printf("calls over TLS\n");
	test_calls(tls_addr);
	printf("wrong key\n");
	test_wrong_key(tls_addr);
	printf("TLS on one side only\n");
	test_mismatch(tls_addr, plain_addr);
	printf("garbage after a TLS record byte\n");
	test_garbage(tls_addr, tls);
	printf("a partial TLS record on an authenticated connection\n");
	test_partial_record(tls_addr, tls);
	rpc_server_free(plain);
	rpc_server_free(tls);
	printf("ok\n");
	return 0;
}
