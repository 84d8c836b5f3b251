/* rpc_auth.h — the cluster key and the handshake that opens every RPC
 * connection (wire major 2).
 *
 * Every daemon and client of a cluster holds the same 32-byte key (made by
 * `strata up` into the home, mode 0600). The first exchange on a connection
 * proves, in both directions, that the other end holds it, and binds the
 * role the client states (what it may do: rpc_role_may):
 *
 *   client -> server  HELLO      request frame, type MSG_AUTH_HELLO:
 *                                u8 role, client nonce cn[32]
 *   server -> client  CHALLENGE  reply frame, type MSG_AUTH_HELLO:
 *                                server nonce sn[32],
 *                                HMAC-SHA256(key, "strata-rpc-server" || sn || cn || role)
 *   client -> server  PROOF      request frame, type MSG_AUTH_PROOF:
 *                                HMAC-SHA256(key, "strata-rpc-client" || sn || cn || role)
 *
 * The server answers nothing when the proof holds: the client sends its
 * first request right behind the proof (one round trip per connection). A
 * refusal is a reply frame of type MSG_AUTH_HELLO or MSG_AUTH_PROOF carrying
 * only a status (-EKEYREJECTED: wrong key; -EPERM: unknown role; -EAGAIN:
 * connection caps), then the server closes. The client checks the server's
 * MAC before it answers, so it never sends a request to an impostor; the
 * two MACs carry different labels, so one side's answer is never the other
 * side's. The client speaks first so that a client of an older server gets
 * the connection closed at once instead of waiting for a challenge; a wire 1
 * client of this server gets a wire 1 reply saying -EPROTONOSUPPORT
 * (rpc_auth_old_major_reply) and the server logs "peer speaks wire 1, this
 * is wire 2: upgrade".
 *
 * The functions below are the codec and the two state machines; the socket
 * I/O is rpc_server.c's and rpc_client.c's. MACs are compared in constant
 * time (CRYPTO_memcmp). */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "fs/err.h"
#include "fs/wire.h"

#define RPC_KEY_SIZE 32
#define RPC_NONCE_SIZE 32
#define RPC_MAC_SIZE 32
/* The biggest handshake payload (the challenge: nonce and MAC); a larger
 * one is refused before anything is allocated for it. */
#define RPC_AUTH_MAX_PAYLOAD (RPC_NONCE_SIZE + RPC_MAC_SIZE)
/* The environment variable naming the key file of a program started
 * without --key (the test suite sets it; `strata up` passes --key). */
#define RPC_KEY_ENV "STRATA_KEY"

/* Who a client is (stated in the HELLO, bound by both MACs). */
enum rpc_role {
	RPC_ROLE_NONE = 0, /* not authenticated */
	RPC_ROLE_FUSE = 1, /* strata-fuse: the mount */
	RPC_ROLE_IMAGESVC = 2,
	RPC_ROLE_ADMIN = 3,	  /* the CLI's admin verbs, fsck */
	RPC_ROLE_CHUNKSERVER = 4, /* registration, heartbeats, chain forwarding, resync */
	RPC_ROLE_META = 5,	  /* strata-meta towards chunkservers: probes, GC */
	RPC_ROLE_SANDBOX = 6,	  /* sandboxd's lease, apiserver's node table (issue 17) */
	RPC_ROLE_MAX
};

struct rpc_key {
	uint8_t b[RPC_KEY_SIZE];
};
/* What a client presents: the key and its role. */
struct rpc_cred {
	struct rpc_key key;
	uint8_t role;
};

/* "fuse", "imagesvc", "admin", "chunkserver", "meta"; "none" or "?" else. */
const char *rpc_role_name(uint8_t role);
/* Returns the role named s, or -EINVAL. */
int rpc_role_parse(const char *s);

/* Reads the key file at path: exactly RPC_KEY_SIZE bytes, a regular file
 * not readable or writable by group or others. Returns 0, or -errno with e
 * saying what is wrong with which file (missing, unreadable, wrong size,
 * too open). */
int rpc_key_load(const char *path, struct rpc_key *ret, struct strata_err *e);
/* Creates a new random key file at path (mode 0600, O_EXCL|O_NOFOLLOW: an
 * existing file or link is never replaced). Returns 0, -EEXIST if path
 * exists, or -errno (e says why). */
int rpc_key_create(const char *path, struct strata_err *e);

/* The process's credential, used by every rpc_client without its own
 * (rpc_client_opts.cred) and, its key, by every rpc_server without one: a
 * daemon's parsed configuration, set once at start-up before any thread. */
void rpc_auth_set_default(const struct rpc_cred *c);
/* Returns the process credential, or NULL if none was set. */
const struct rpc_cred *rpc_auth_default(void);
/* Loads the key from key_path, else from $STRATA_KEY, and makes it the
 * process credential with role. Returns 0, or -errno with e naming the
 * file and the problem (-ENOKEY when neither names a file). */
int rpc_auth_setup(const char *key_path, uint8_t role, struct strata_err *e);

/* HMAC-SHA256(key, label || sn || cn || role) into out. server selects the
 * label ("strata-rpc-server" or "strata-rpc-client"). */
void rpc_auth_mac(const struct rpc_key *key, bool server, const uint8_t sn[RPC_NONCE_SIZE],
		  const uint8_t cn[RPC_NONCE_SIZE], uint8_t role, uint8_t out[RPC_MAC_SIZE]);

/* ---- server side ----------------------------------------------------------- */
enum rpc_auth_state { RPC_AUTH_WAIT_HELLO, RPC_AUTH_WAIT_PROOF, RPC_AUTH_DONE, RPC_AUTH_FAILED };
struct rpc_auth_server {
	const struct rpc_key *key;
	enum rpc_auth_state state;
	uint8_t role;
	uint8_t sn[RPC_NONCE_SIZE], cn[RPC_NONCE_SIZE];
};
/* Starts a handshake with a fresh random server nonce. */
void rpc_auth_server_init(struct rpc_auth_server *a, const struct rpc_key *key);
/* Takes one whole frame of the handshake (header decoded, payload
 * verified). Appends to out the frame to send (may be none). Returns 0
 * (send out, wait for the next frame), 1 (authenticated: a->role holds;
 * nothing to send) or a negative errno (send out, then close; *why says why
 * in words, a static string). */
int rpc_auth_server_frame(struct rpc_auth_server *a, const struct wire_hdr *h,
			  const uint8_t *payload, struct wbuf *out, const char **why);
/* A frame header of an older major (hdr[4] < WIRE_MAJOR, magic valid):
 * appends to out a reply in that major's header format with status
 * -EPROTONOSUPPORT, echoing type and req_id. Returns the peer's major. */
int rpc_auth_old_major_reply(const uint8_t hdr[WIRE_HDR_SIZE], struct wbuf *out);
/* Appends a refusal of the request h (reply frame, status only). */
void rpc_auth_refusal(const struct wire_hdr *h, int status, struct wbuf *out);

/* ---- client side ----------------------------------------------------------- */
struct rpc_auth_client {
	const struct rpc_cred *cred;
	uint8_t cn[RPC_NONCE_SIZE];
};
/* Appends the HELLO frame to out (fresh client nonce). */
void rpc_auth_client_hello(struct rpc_auth_client *a, const struct rpc_cred *cred,
			   struct wbuf *out);
/* Takes the server's answer to the HELLO (header decoded, payload
 * verified) and appends the PROOF frame to out. Returns 0, the server's
 * refusal status, -EKEYREJECTED if the server does not hold our key (an
 * impostor, or our key is wrong), or -EPROTO (malformed); *why says why. */
int rpc_auth_client_challenge(struct rpc_auth_client *a, const struct wire_hdr *h,
			      const uint8_t *payload, struct wbuf *out, const char **why);

/* The cluster's table of which role may send which request (rpc_roles.c;
 * fs/README.md lists it). Unknown types are refused. strata-meta and the
 * chunkservers pass it as rpc_server_opts.may. */
bool rpc_role_may(uint8_t role, uint16_t type);
