/* rpc_tls.h — optional TLS 1.3 under the RPC frames, for networks the
 * cluster does not trust (rpc_tls.c).
 *
 * The authentication handshake of rpc_auth.h proves who is at the other
 * end but leaves the frames after it readable and rewritable by anyone on
 * the path. With TLS every byte of a connection, the handshake of
 * rpc_auth.h included, is encrypted and authenticated (AES-128-GCM).
 *
 * No certificates: both ends hold the cluster key, so the TLS session is
 * keyed by an external pre-shared key derived from it,
 * PSK = HMAC-SHA256(cluster key, "strata-tls-psk"), identity "strata"
 * (TLS 1.3, RFC 8446 section 4.2.11, with (EC)DHE: psk_dhe_ke, so a key
 * that leaks later does not decrypt recorded traffic). A peer without the
 * key fails the TLS handshake (-EKEYREJECTED on the client). The
 * authentication handshake still runs inside TLS: roles and limits apply
 * as without it.
 *
 * Client and server must agree. A TLS server peeks at the first byte of a
 * connection: anything but a TLS handshake record (0x16) is answered with a
 * plain refusal frame, status RPC_ERR_PEER_TLS, which a plain client reports
 * at once. A plain server that reads a TLS record where a frame header
 * belongs answers a plain refusal frame too (RPC_ERR_PEER_PLAIN); a TLS
 * client finding the wire magic where the server's TLS answer belongs
 * reports RPC_ERR_PEER_PLAIN.
 *
 * The client side is transport_tls (rpc.h's transport_ops, blocking socket
 * with timeouts, like transport_tcp). The server side is a set of
 * non-blocking calls that rpc_server.c drives from its epoll workers: a
 * TLS record that arrived in part is the part of a frame (the same
 * deadlines hold), and a record read ahead or decrypted but not yet read
 * is reported by rpc_tls_buffered so that the connection is served
 * without a new socket event. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <sys/uio.h>
#include "fs/rpc.h"

/* The first byte of a TLS handshake record (a ClientHello). */
#define RPC_TLS_RECORD_HANDSHAKE 0x16

/* The process default for rpc_*_opts.tls == RPC_TLS_DEFAULT: what
 * rpc_tls_set_default set (a daemon's --tls), else $STRATA_TLS == "1"
 * (cluster.env of a home made with `strata up --tls`). */
void rpc_tls_set_default(bool on);
bool rpc_tls_default(void);
/* Resolves a mode: true if it asks for TLS. */
bool rpc_tls_wanted(enum rpc_tls_mode mode);

/* A TLS context keyed by one cluster key: one per rpc_client and per
 * rpc_server. Returns 0, -ENOMEM or -EPROTO (OpenSSL refused to set up). */
struct rpc_tls;
int rpc_tls_new(const struct rpc_key *key, bool server, struct rpc_tls **ret);
void rpc_tls_free(struct rpc_tls *t);

/* ---- server side (non-blocking socket, driven by epoll) ------------------ */
struct rpc_tls_conn;
/* Starts the server side of TLS on an accepted socket (fd stays the
 * caller's). Returns 0 or -ENOMEM. */
int rpc_tls_accept(struct rpc_tls *t, int fd, struct rpc_tls_conn **ret);
/* Advances the TLS handshake with what has arrived. Returns 1 (done), 0
 * (wait for the socket to be readable) or -errno (-EKEYREJECTED: the peer
 * does not hold the key; *why says what failed, a static string). */
int rpc_tls_handshake(struct rpc_tls_conn *tc, const char **why);
/* Reads up to n decrypted bytes. Returns the bytes read (> 0), 0 at the
 * peer's close, -EAGAIN (nothing decrypted yet: wait for the socket) or
 * -errno. */
ssize_t rpc_tls_recv(struct rpc_tls_conn *tc, void *buf, size_t n);
/* True once bytes of a TLS record arrived that have not yet yielded a
 * decrypted byte (a partial record: a frame begun, for the deadlines). */
bool rpc_tls_partial(const struct rpc_tls_conn *tc);
/* True if decrypted bytes wait in the TLS buffers, or bytes read ahead
 * make a whole record (decrypted here): the socket may not be readable
 * though there is a frame to serve. */
bool rpc_tls_buffered(struct rpc_tls_conn *tc);
/* Sends all of iov (at most 8 entries) within timeout_ms, waiting in poll()
 * as tcp_sendv_fd does. Returns 0, -ECONNRESET, -ETIMEDOUT or -errno. */
int rpc_tls_sendv(struct rpc_tls_conn *tc, const struct iovec *iov, int iovcnt, int timeout_ms);
/* Frees the TLS state (not the socket). NULL ok. */
void rpc_tls_conn_free(struct rpc_tls_conn *tc);
