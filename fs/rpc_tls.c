/* rpc_tls.c — TLS 1.3 with a pre-shared key derived from the cluster key,
 * under the RPC frames (rpc_tls.h): the client transport (transport_tls)
 * and the non-blocking calls the server's epoll workers use.
 *
 * Writes gather the caller's iovecs into records of up to 16 KiB (a frame
 * header and its fields travel in one record with the data behind them),
 * bulk data is encrypted from the caller's buffer; a client's records go
 * through a 256 KiB write buffer, flushed at the end of each sendv, so
 * that a 1 MiB chunk is a few writes, not 64. Both sides read ahead 256 KiB
 * per recv (else every 16 KiB record would cost two recvs and, on the
 * server, often a trip through epoll); what the server read ahead but has
 * not decrypted is invisible to epoll, so rpc_tls_buffered decrypts the
 * next record if it is whole. OpenSSL releases a connection's buffers when
 * they are empty (idle connections hold none). Session tickets are off
 * (each connection uses the external PSK; a server writes nothing the
 * client does not read). */
#include "fs/rpc_tls.h"
#include <errno.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <openssl/ssl.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fs/clock.h"
#include "fs/transport_tcp.h"

#define PSK_LABEL "strata-tls-psk"
#define PSK_IDENTITY "strata"
#define TLS_RECORD_MAX 16384		 /* plaintext bytes of one TLS record */
#define READ_AHEAD (256u << 10)		 /* bytes one recv may take */
#define CLIENT_WRITE_BUFFER (256u << 10) /* records gathered before a write */
/* TLS_AES_128_GCM_SHA256 (RFC 8446 B.4): AES-NI makes it the cheapest */
static const unsigned char cipher_id[2] = {0x13, 0x01};

struct rpc_tls {
	SSL_CTX *ctx;
	uint8_t psk[32];
};

struct rpc_tls_conn {
	SSL *ssl;
	int fd;
	int timeout_ms; /* client: SO_RCVTIMEO/SO_SNDTIMEO now set */
	bool partial;	/* rpc_tls_partial */
};

static _Atomic int tls_default = -1;

void rpc_tls_set_default(bool on)
{
	tls_default = on;
}

bool rpc_tls_default(void)
{
	int d = tls_default;
	if (d >= 0)
		return d;
	const char *e = getenv("STRATA_TLS");
	return e && strcmp(e, "1") == 0;
}

bool rpc_tls_wanted(enum rpc_tls_mode mode)
{
	return mode == RPC_TLS_DEFAULT ? rpc_tls_default() : mode == RPC_TLS_ON;
}

/* The session that stands for the external PSK (as OpenSSL's s_client and
 * s_server build it). */
static SSL_SESSION *psk_session(SSL *ssl)
{
	const struct rpc_tls *t = SSL_CTX_get_app_data(SSL_get_SSL_CTX(ssl));
	const SSL_CIPHER *cipher = SSL_CIPHER_find(ssl, cipher_id);
	SSL_SESSION *sess = SSL_SESSION_new();
	if (!sess || !cipher || !SSL_SESSION_set1_master_key(sess, t->psk, sizeof(t->psk)) ||
	    !SSL_SESSION_set_cipher(sess, cipher) ||
	    !SSL_SESSION_set_protocol_version(sess, TLS1_3_VERSION)) {
		SSL_SESSION_free(sess);
		return NULL;
	}
	return sess;
}

static int client_psk(SSL *ssl, const EVP_MD *md, const unsigned char **id, size_t *idlen,
		      SSL_SESSION **ret)
{
	SSL_SESSION *sess = psk_session(ssl);
	if (!sess)
		return 0;
	/* after a HelloRetryRequest the hash must match the one chosen */
	if (md && md != SSL_CIPHER_get_handshake_digest(SSL_SESSION_get0_cipher(sess))) {
		SSL_SESSION_free(sess);
		*ret = NULL;
		*id = NULL;
		*idlen = 0;
		return 1;
	}
	*ret = sess;
	*id = (const unsigned char *)PSK_IDENTITY;
	*idlen = strlen(PSK_IDENTITY);
	return 1;
}

static int server_psk(SSL *ssl, const unsigned char *id, size_t idlen, SSL_SESSION **ret)
{
	*ret = NULL;
	if (idlen != strlen(PSK_IDENTITY) || memcmp(id, PSK_IDENTITY, idlen) != 0)
		return 1; /* not ours: the handshake fails (no certificate to fall back to) */
	*ret = psk_session(ssl);
	return *ret ? 1 : 0;
}

int rpc_tls_new(const struct rpc_key *key, bool server, struct rpc_tls **ret)
{
	struct rpc_tls *t = calloc(1, sizeof(*t));
	if (!t)
		return -ENOMEM;
	unsigned len = sizeof(t->psk);
	t->ctx = SSL_CTX_new(server ? TLS_server_method() : TLS_client_method());
	if (!t->ctx ||
	    !HMAC(EVP_sha256(), key->b, RPC_KEY_SIZE, (const uint8_t *)PSK_LABEL, strlen(PSK_LABEL),
		  t->psk, &len) ||
	    !SSL_CTX_set_min_proto_version(t->ctx, TLS1_3_VERSION) ||
	    !SSL_CTX_set_ciphersuites(t->ctx, "TLS_AES_128_GCM_SHA256")) {
		rpc_tls_free(t);
		ERR_clear_error();
		return -EPROTO;
	}
	SSL_CTX_set_app_data(t->ctx, t);
	SSL_CTX_set_options(t->ctx, SSL_OP_NO_TICKET | SSL_OP_IGNORE_UNEXPECTED_EOF);
	SSL_CTX_set_session_cache_mode(t->ctx, SSL_SESS_CACHE_OFF);
	SSL_CTX_set_mode(t->ctx, SSL_MODE_RELEASE_BUFFERS);
	SSL_CTX_set_read_ahead(t->ctx, 1);
	SSL_CTX_set_default_read_buffer_len(t->ctx, READ_AHEAD);
	if (server) {
		SSL_CTX_set_num_tickets(t->ctx, 0);
		SSL_CTX_set_psk_find_session_callback(t->ctx, server_psk);
	} else {
		SSL_CTX_set_psk_use_session_callback(t->ctx, client_psk);
	}
	*ret = t;
	return 0;
}

void rpc_tls_free(struct rpc_tls *t)
{
	if (!t)
		return;
	SSL_CTX_free(t->ctx);
	OPENSSL_cleanse(t->psk, sizeof(t->psk));
	free(t);
}

/* What a failed SSL call needs before it is called again. */
enum { TLS_WANT_READ = 1, TLS_WANT_WRITE = 2 };

/* Classifies the failure ret of an SSL call: TLS_WANT_READ/WRITE, or
 * -errno with *why. Clears the thread's error queue. */
static int tls_failure(SSL *ssl, int ret, const char **why)
{
	int e = SSL_get_error(ssl, ret), saved = errno;
	unsigned long err = ERR_peek_last_error();
	ERR_clear_error();
	*why = "connection closed";
	switch (e) {
	case SSL_ERROR_WANT_READ:
		return TLS_WANT_READ;
	case SSL_ERROR_WANT_WRITE:
		return TLS_WANT_WRITE;
	case SSL_ERROR_ZERO_RETURN:
		return -ECONNRESET;
	case SSL_ERROR_SYSCALL:
		return saved && saved != EPIPE ? -saved : -ECONNRESET;
	}
	/* A server whose PSK binder does not verify answers with a fatal
	 * alert (OpenSSL 3.0 sends illegal_parameter, RFC 8446 says
	 * decrypt_error); both sides run this same configuration, so either
	 * alert in the handshake means another key. */
	int reason = ERR_GET_REASON(err);
	if (reason == SSL_R_BINDER_DOES_NOT_VERIFY || reason == SSL_R_TLSV1_ALERT_DECRYPT_ERROR ||
	    reason == SSL_R_SSLV3_ALERT_ILLEGAL_PARAMETER) {
		*why = "TLS: the peer does not hold our cluster key (PSK binder mismatch)";
		return -EKEYREJECTED;
	}
	const char *s = ERR_reason_error_string(err);
	*why = s ? s : "TLS protocol error";
	return -EPROTO;
}

/* Waits for what a failed SSL call wants, until deadline. */
static int tls_wait(const struct rpc_tls_conn *tc, int want, int64_t deadline)
{
	return tcp_wait_fd(tc->fd, want == TLS_WANT_READ ? POLLIN : POLLOUT, deadline);
}

static struct rpc_tls_conn *conn_new(struct rpc_tls *t, int fd, bool server)
{
	struct rpc_tls_conn *tc = calloc(1, sizeof(*tc));
	if (!tc)
		return NULL;
	tc->fd = fd;
	tc->ssl = SSL_new(t->ctx);
	if (!tc->ssl || !SSL_set_fd(tc->ssl, fd)) {
		SSL_free(tc->ssl);
		free(tc);
		ERR_clear_error();
		return NULL;
	}
	if (server) {
		SSL_set_accept_state(tc->ssl);
		return tc;
	}
	SSL_set_connect_state(tc->ssl);
	BIO *buf = BIO_new(BIO_f_buffer()), *sock = BIO_new_socket(fd, BIO_NOCLOSE);
	if (!buf || !sock || BIO_set_write_buffer_size(buf, CLIENT_WRITE_BUFFER) <= 0) {
		BIO_free(buf);
		BIO_free(sock);
		rpc_tls_conn_free(tc);
		ERR_clear_error();
		return NULL;
	}
	SSL_set0_wbio(tc->ssl, BIO_push(buf, sock));
	return tc;
}

void rpc_tls_conn_free(struct rpc_tls_conn *tc)
{
	if (!tc)
		return;
	SSL_free(tc->ssl);
	free(tc);
}

/* Writes n bytes (SSL_write retried with the same arguments until all is
 * out, as OpenSSL requires), waiting until deadline. */
static int write_all(struct rpc_tls_conn *tc, const void *buf, size_t n, int64_t deadline)
{
	for (;;) {
		size_t done;
		ERR_clear_error();
		if (SSL_write_ex(tc->ssl, buf, n, &done))
			return 0;
		const char *why;
		int w = tls_failure(tc->ssl, 0, &why);
		if (w < 0)
			return w;
		int r = tls_wait(tc, w, deadline);
		if (r < 0)
			return r;
	}
}

/* Writes out what a client's write buffer holds (a server has none). */
static int flush(struct rpc_tls_conn *tc, int64_t deadline)
{
	BIO *wbio = SSL_get_wbio(tc->ssl);
	while (BIO_flush(wbio) <= 0) {
		int e = errno;
		if (!BIO_should_retry(wbio))
			return e && e != EPIPE ? -e : -ECONNRESET;
		int r = tls_wait(tc, TLS_WANT_WRITE, deadline);
		if (r < 0)
			return r;
	}
	return 0;
}

int rpc_tls_sendv(struct rpc_tls_conn *tc, const struct iovec *iov, int iovcnt, int timeout_ms)
{
	int64_t deadline = strata_mono_ms() + timeout_ms;
	uint8_t stage[TLS_RECORD_MAX];
	size_t staged = 0;
	int r = 0;
	for (int i = 0; i < iovcnt && r == 0; i++) {
		const uint8_t *p = iov[i].iov_base;
		size_t left = iov[i].iov_len;
		while (left && r == 0) {
			if (staged == 0 && left >= TLS_RECORD_MAX) {
				/* bulk data: records straight from the caller's buffer */
				r = write_all(tc, p, left, deadline);
				break;
			}
			size_t n = left < TLS_RECORD_MAX - staged ? left : TLS_RECORD_MAX - staged;
			memcpy(stage + staged, p, n);
			staged += n;
			p += n;
			left -= n;
			if (staged == TLS_RECORD_MAX) {
				r = write_all(tc, stage, staged, deadline);
				staged = 0;
			}
		}
	}
	if (r == 0 && staged)
		r = write_all(tc, stage, staged, deadline);
	return r < 0 ? r : flush(tc, deadline);
}

/* One SSL_read_ex: bytes read, 0 at the peer's close, -EAGAIN (or
 * TLS_WANT_WRITE's wait done, -EAGAIN too) or -errno. */
static ssize_t read_some(struct rpc_tls_conn *tc, void *buf, size_t n, int *ret_want)
{
	size_t got;
	ERR_clear_error();
	if (SSL_read_ex(tc->ssl, buf, n, &got))
		return (ssize_t)got;
	const char *why;
	int w = tls_failure(tc->ssl, 0, &why);
	if (w == -ECONNRESET)
		return 0;
	if (w < 0)
		return w;
	*ret_want = w;
	return -EAGAIN;
}

ssize_t rpc_tls_recv(struct rpc_tls_conn *tc, void *buf, size_t n)
{
	BIO *rbio = SSL_get_rbio(tc->ssl);
	uint64_t before = BIO_number_read(rbio);
	int want = 0;
	ssize_t r = read_some(tc, buf, n, &want);
	if (r > 0)
		tc->partial = false;
	else if (r == -EAGAIN && BIO_number_read(rbio) != before)
		tc->partial = true;
	if (want == TLS_WANT_WRITE) /* a TLS message to answer: rare, short */
		tls_wait(tc, want, strata_mono_ms() + 1000);
	return r;
}

bool rpc_tls_partial(const struct rpc_tls_conn *tc)
{
	return tc->partial;
}

bool rpc_tls_buffered(struct rpc_tls_conn *tc)
{
	if (SSL_pending(tc->ssl) > 0)
		return true;
	if (!SSL_has_pending(tc->ssl))
		return false;
	/* read ahead, not decrypted: decrypt the next record if it is whole (an
	 * incomplete one waits for the rest, which epoll reports) */
	uint8_t b;
	size_t n;
	ERR_clear_error();
	if (SSL_peek_ex(tc->ssl, &b, 1, &n))
		return true;
	const char *why;
	return tls_failure(tc->ssl, 0, &why) < 0; /* an error: let the reader see it */
}

int rpc_tls_accept(struct rpc_tls *t, int fd, struct rpc_tls_conn **ret)
{
	*ret = conn_new(t, fd, true);
	return *ret ? 0 : -ENOMEM;
}

int rpc_tls_handshake(struct rpc_tls_conn *tc, const char **why)
{
	for (;;) {
		ERR_clear_error();
		int ret = SSL_do_handshake(tc->ssl);
		if (ret == 1)
			return 1;
		int w = tls_failure(tc->ssl, ret, why);
		if (w < 0)
			return w;
		if (w == TLS_WANT_READ)
			return 0;
		/* our handshake messages fit in the socket buffer: only a
		 * peer that reads nothing gets here, and the handshake deadline
		 * bounds it */
		int r = tls_wait(tc, w, strata_mono_ms() + RPC_HANDSHAKE_TIMEOUT_MS);
		if (r < 0) {
			*why = "the peer reads nothing of the TLS handshake";
			return r;
		}
	}
}

/* ---- client transport ----------------------------------------------------- */
static struct rpc_tls_conn *as_tls(struct transport_conn *c)
{
	return (struct rpc_tls_conn *)c;
}

/* True if the first bytes the server sent are the wire magic: a plain
 * server's refusal of our ClientHello (rpc_tls.h). */
static bool server_speaks_plain(int fd)
{
	uint8_t b[4], magic[4];
	le32_put(magic, WIRE_MAGIC);
	ssize_t n = recv(fd, b, sizeof(b), MSG_PEEK);
	return n > 0 && memcmp(b, magic, (size_t)n) == 0;
}

/* The client's TLS handshake on the non-blocking socket of tc. Until the
 * server's first bytes are there, OpenSSL reads from an empty memory BIO
 * (it writes the ClientHello to the socket): those bytes are looked at
 * before OpenSSL consumes them. */
static int client_handshake(struct rpc_tls_conn *tc, int64_t deadline)
{
	BIO *empty = BIO_new(BIO_s_mem());
	if (!empty)
		return -ENOMEM;
	BIO_set_mem_eof_return(empty, -1); /* empty: "retry", not EOF */
	SSL_set0_rbio(tc->ssl, empty);
	bool looked = false;
	for (;;) {
		ERR_clear_error();
		int ret = SSL_connect(tc->ssl);
		if (ret == 1)
			return 0;
		const char *why;
		int w = tls_failure(tc->ssl, ret, &why);
		if (w < 0)
			return w;
		int r = tls_wait(tc, w, deadline);
		if (r < 0)
			return r;
		if (w == TLS_WANT_READ && !looked) {
			looked = true;
			if (server_speaks_plain(tc->fd))
				return RPC_ERR_PEER_PLAIN;
			BIO *sock = BIO_new_socket(tc->fd, BIO_NOCLOSE);
			if (!sock)
				return -ENOMEM;
			SSL_set0_rbio(tc->ssl, sock);
		}
	}
}

static int tls_dial(const char *addr, int timeout_ms, void *arg, struct transport_conn **ret)
{
	struct rpc_tls *t = arg;
	if (!t)
		return -ENOKEY;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	int fd = tcp_connect(addr, timeout_ms);
	if (fd < 0)
		return fd;
	struct rpc_tls_conn *tc = conn_new(t, fd, false);
	int r = tc ? client_handshake(tc, deadline) : -ENOMEM;
	if (r == 0)
		r = tcp_set_blocking(fd);
	if (r < 0) {
		rpc_tls_conn_free(tc);
		close(fd);
		return r;
	}
	*ret = (struct transport_conn *)tc;
	return 0;
}

static int tls_sendv(struct transport_conn *c, const struct iovec *iov, int iovcnt, int timeout_ms)
{
	struct rpc_tls_conn *tc = as_tls(c);
	int r = tcp_set_timeouts(tc->fd, &tc->timeout_ms, timeout_ms);
	return r < 0 ? r : rpc_tls_sendv(tc, iov, iovcnt, timeout_ms);
}

/* Reads into buf until n bytes or the deadline: the blocking socket's
 * SO_RCVTIMEO is the call's timeout, so a want is a timeout. */
static ssize_t recv_wait(struct rpc_tls_conn *tc, void *buf, size_t n, int64_t deadline)
{
	for (;;) {
		int want = 0;
		ssize_t r = read_some(tc, buf, n, &want);
		if (r == 0)
			return -ECONNRESET;
		if (r != -EAGAIN)
			return r;
		int w = tls_wait(tc, want, deadline);
		if (w < 0)
			return w;
	}
}

static int tls_recv_exact(struct transport_conn *c, void *buf, size_t n, int timeout_ms)
{
	struct rpc_tls_conn *tc = as_tls(c);
	int r = tcp_set_timeouts(tc->fd, &tc->timeout_ms, timeout_ms);
	if (r < 0)
		return r;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	for (size_t got = 0; got < n;) {
		ssize_t k = recv_wait(tc, (uint8_t *)buf + got, n - got, deadline);
		if (k < 0)
			return (int)k;
		got += (size_t)k;
	}
	return 0;
}

static ssize_t tls_recvv(struct transport_conn *c, struct iovec *iov, int iovcnt, int timeout_ms)
{
	struct rpc_tls_conn *tc = as_tls(c);
	int r = tcp_set_timeouts(tc->fd, &tc->timeout_ms, timeout_ms);
	if (r < 0)
		return r;
	ssize_t got = recv_wait(tc, iov[0].iov_base, iov[0].iov_len, strata_mono_ms() + timeout_ms);
	if (got < 0)
		return got;
	/* then what is decrypted already, without waiting */
	for (int i = 0; i < iovcnt; i++) {
		size_t off = i == 0 ? (size_t)got : 0;
		while (off < iov[i].iov_len && SSL_pending(tc->ssl) > 0) {
			int want = 0;
			ssize_t k = read_some(tc, (uint8_t *)iov[i].iov_base + off,
					      iov[i].iov_len - off, &want);
			if (k <= 0)
				return got;
			off += (size_t)k;
			got += k;
		}
		if (off < iov[i].iov_len)
			break;
	}
	return got;
}

static bool tls_hung_up(struct transport_conn *c)
{
	struct rpc_tls_conn *tc = as_tls(c);
	struct pollfd p = {.fd = tc->fd, .events = POLLIN};
	/* an idle connection has nothing to read, decrypted or not */
	return SSL_has_pending(tc->ssl) || poll(&p, 1, 0) != 0;
}

static void tls_close(struct transport_conn *c)
{
	if (!c)
		return;
	struct rpc_tls_conn *tc = as_tls(c);
	int fd = tc->fd;
	rpc_tls_conn_free(tc);
	close(fd);
}

const struct transport_ops transport_tls = {
    .name = "tls",
    .dial = tls_dial,
    .sendv = tls_sendv,
    .recv_exact = tls_recv_exact,
    .recvv = tls_recvv,
    .hung_up = tls_hung_up,
    .close = tls_close,
};
