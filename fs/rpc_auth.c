/* rpc_auth.c — the cluster key files, the process credential and the
 * handshake codec of rpc_auth.h (HMAC-SHA256 from OpenSSL's libcrypto, as
 * imagesvc's digests). */
#include "fs/rpc_auth.h"
#include <errno.h>
#include <fcntl.h>
#include <openssl/crypto.h>
#include <openssl/evp.h>
#include <openssl/hmac.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "fs/proto.h"

static const char *const role_names[RPC_ROLE_MAX] = {
    [RPC_ROLE_NONE] = "none",
    [RPC_ROLE_FUSE] = "fuse",
    [RPC_ROLE_IMAGESVC] = "imagesvc",
    [RPC_ROLE_ADMIN] = "admin",
    [RPC_ROLE_CHUNKSERVER] = "chunkserver",
    [RPC_ROLE_META] = "meta",
    [RPC_ROLE_SANDBOX] = "sandbox",
};

const char *rpc_role_name(uint8_t role)
{
	return role < RPC_ROLE_MAX ? role_names[role] : "?";
}

int rpc_role_parse(const char *s)
{
	for (int i = RPC_ROLE_NONE + 1; i < RPC_ROLE_MAX; i++)
		if (s && strcmp(s, role_names[i]) == 0)
			return i;
	return -EINVAL;
}

int rpc_key_load(const char *path, struct rpc_key *ret, struct strata_err *e)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY);
	struct stat st;
	if (fd < 0)
		return strata_err_set(e, -errno, "cannot open the cluster key %s: %s", path,
				      strerror(errno));
	if (fstat(fd, &st) < 0)
		return strata_err_set(e, -errno, "cannot stat the cluster key %s: %s", path,
				      strerror(errno));
	if (!S_ISREG(st.st_mode))
		return strata_err_set(e, -EINVAL, "the cluster key %s is not a regular file", path);
	if (st.st_mode & 077)
		return strata_err_set(e, -EPERM,
				      "the cluster key %s is open to group or others (mode %04o): "
				      "chmod 600 it",
				      path, (unsigned)(st.st_mode & 07777));
	if (st.st_size != RPC_KEY_SIZE)
		return strata_err_set(e, -EINVAL,
				      "the cluster key %s has %lld bytes, a key has exactly %d",
				      path, (long long)st.st_size, RPC_KEY_SIZE);
	struct rpc_key k;
	ssize_t n = pread(fd, k.b, sizeof(k.b), 0);
	if (n != (ssize_t)sizeof(k.b))
		return strata_err_set(e, n < 0 ? -errno : -EIO,
				      "cannot read the cluster key %s: %s", path,
				      n < 0 ? strerror(errno) : "short read");
	*ret = k;
	OPENSSL_cleanse(&k, sizeof(k));
	return 0;
}

int rpc_key_create(const char *path, struct strata_err *e)
{
	struct rpc_key k;
	if (getrandom(k.b, sizeof(k.b), 0) != (ssize_t)sizeof(k.b))
		return strata_err_set(e, -EIO, "cannot get random bytes for the cluster key");
	_cleanup_close_ int fd =
	    open(path, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
	if (fd < 0) {
		int r = -errno;
		OPENSSL_cleanse(&k, sizeof(k));
		if (r == -EEXIST)
			return r;
		return strata_err_set(e, r, "cannot create the cluster key %s: %s", path,
				      strerror(-r));
	}
	ssize_t n = write(fd, k.b, sizeof(k.b));
	int r = n == (ssize_t)sizeof(k.b) && fsync(fd) == 0 ? 0 : (n < 0 ? -errno : -EIO);
	OPENSSL_cleanse(&k, sizeof(k));
	if (r < 0) {
		unlink(path);
		return strata_err_set(e, r, "cannot write the cluster key %s: %s", path,
				      strerror(-r));
	}
	return 0;
}

/* Parsed configuration (STYLE.md rule 7): set once before any thread. */
static struct rpc_cred default_cred;
static bool have_default;

void rpc_auth_set_default(const struct rpc_cred *c)
{
	default_cred = *c;
	have_default = true;
}

const struct rpc_cred *rpc_auth_default(void)
{
	return have_default ? &default_cred : NULL;
}

int rpc_auth_setup(const char *key_path, uint8_t role, struct strata_err *e)
{
	const char *path = key_path && *key_path ? key_path : getenv(RPC_KEY_ENV);
	if (!path || !*path)
		return strata_err_set(e, -ENOKEY,
				      "no cluster key: give --key FILE (or set $%s to its path)",
				      RPC_KEY_ENV);
	struct rpc_cred c = {.role = role};
	int r = rpc_key_load(path, &c.key, e);
	if (r < 0)
		return r;
	rpc_auth_set_default(&c);
	OPENSSL_cleanse(&c, sizeof(c));
	return 0;
}

void rpc_auth_mac(const struct rpc_key *key, bool server, const uint8_t sn[RPC_NONCE_SIZE],
		  const uint8_t cn[RPC_NONCE_SIZE], uint8_t role, uint8_t out[RPC_MAC_SIZE])
{
	static const char srv[] = "strata-rpc-server", cli[] = "strata-rpc-client";
	uint8_t msg[sizeof(srv) - 1 + 2 * RPC_NONCE_SIZE + 1];
	size_t off = 0;
	memcpy(msg, server ? srv : cli, sizeof(srv) - 1);
	off += sizeof(srv) - 1;
	memcpy(msg + off, sn, RPC_NONCE_SIZE);
	off += RPC_NONCE_SIZE;
	memcpy(msg + off, cn, RPC_NONCE_SIZE);
	off += RPC_NONCE_SIZE;
	msg[off++] = role;
	unsigned int len = RPC_MAC_SIZE;
	if (!HMAC(EVP_sha256(), key->b, RPC_KEY_SIZE, msg, off, out, &len))
		memset(out, 0, RPC_MAC_SIZE); /* never matches a real MAC's check below */
}

static void random_nonce(uint8_t n[RPC_NONCE_SIZE])
{
	if (getrandom(n, RPC_NONCE_SIZE, 0) != RPC_NONCE_SIZE)
		abort(); /* the kernel's generator failing leaves no safe nonce */
}

/* Appends a frame (header sealed over payload p[0..len)) to out. */
static void put_frame(struct wbuf *out, uint16_t type, uint16_t flags, int status, uint64_t req_id,
		      const void *p, size_t len)
{
	struct wire_hdr h = {.type = type, .flags = flags, .status = status, .req_id = req_id};
	uint8_t hdr[WIRE_HDR_SIZE];
	wire_hdr_seal(&h, p, len, hdr);
	wbuf_put_bytes(out, hdr, sizeof(hdr));
	wbuf_put_bytes(out, p, len);
}

void rpc_auth_server_init(struct rpc_auth_server *a, const struct rpc_key *key)
{
	*a = (struct rpc_auth_server){.key = key, .state = RPC_AUTH_WAIT_HELLO};
	random_nonce(a->sn);
}

void rpc_auth_refusal(const struct wire_hdr *h, int status, struct wbuf *out)
{
	put_frame(out, h->type, WIRE_F_REPLY, status, h->req_id, NULL, 0);
}

static int refuse(struct rpc_auth_server *a, const struct wire_hdr *h, int status, struct wbuf *out,
		  const char **why, const char *reason)
{
	a->state = RPC_AUTH_FAILED;
	rpc_auth_refusal(h, status, out);
	*why = reason;
	return status;
}

static int on_hello(struct rpc_auth_server *a, const struct wire_hdr *h, const uint8_t *payload,
		    struct wbuf *out, const char **why)
{
	if (h->type != MSG_AUTH_HELLO)
		return refuse(a, h, -EACCES, out, why, "request before the handshake");
	if (h->payload_len != 1 + RPC_NONCE_SIZE)
		return refuse(a, h, -EPROTO, out, why, "malformed handshake hello");
	uint8_t role = payload[0];
	if (role == RPC_ROLE_NONE || role >= RPC_ROLE_MAX)
		return refuse(a, h, -EPERM, out, why, "unknown role in the handshake");
	a->role = role;
	memcpy(a->cn, payload + 1, RPC_NONCE_SIZE);
	uint8_t ch[RPC_NONCE_SIZE + RPC_MAC_SIZE];
	memcpy(ch, a->sn, RPC_NONCE_SIZE);
	rpc_auth_mac(a->key, true, a->sn, a->cn, role, ch + RPC_NONCE_SIZE);
	put_frame(out, MSG_AUTH_HELLO, WIRE_F_REPLY, 0, h->req_id, ch, sizeof(ch));
	a->state = RPC_AUTH_WAIT_PROOF;
	return 0;
}

static int on_proof(struct rpc_auth_server *a, const struct wire_hdr *h, const uint8_t *payload,
		    struct wbuf *out, const char **why)
{
	if (h->type != MSG_AUTH_PROOF)
		return refuse(a, h, -EACCES, out, why, "request before the handshake's proof");
	if (h->payload_len != RPC_MAC_SIZE)
		return refuse(a, h, -EPROTO, out, why, "malformed handshake proof");
	uint8_t want[RPC_MAC_SIZE];
	rpc_auth_mac(a->key, false, a->sn, a->cn, a->role, want);
	bool ok = CRYPTO_memcmp(want, payload, RPC_MAC_SIZE) == 0;
	OPENSSL_cleanse(want, sizeof(want));
	if (!ok)
		return refuse(a, h, -EKEYREJECTED, out, why,
			      "handshake proof does not match the cluster key (wrong key)");
	a->state = RPC_AUTH_DONE;
	return 1;
}

int rpc_auth_server_frame(struct rpc_auth_server *a, const struct wire_hdr *h,
			  const uint8_t *payload, struct wbuf *out, const char **why)
{
	*why = NULL;
	if (h->flags & WIRE_F_REPLY)
		return refuse(a, h, -EPROTO, out, why, "reply frame sent to a server");
	if (h->payload_len > RPC_AUTH_MAX_PAYLOAD)
		return refuse(a, h, -EPROTO, out, why, "oversized handshake frame");
	switch (a->state) {
	case RPC_AUTH_WAIT_HELLO:
		return on_hello(a, h, payload, out, why);
	case RPC_AUTH_WAIT_PROOF:
		return on_proof(a, h, payload, out, why);
	default:
		*why = "handshake already over";
		return -EPROTO;
	}
}

int rpc_auth_old_major_reply(const uint8_t hdr[WIRE_HDR_SIZE], struct wbuf *out)
{
	uint8_t r[WIRE_HDR_SIZE] = {0};
	memcpy(r, hdr, 4); /* magic */
	r[4] = hdr[4];	   /* the peer's major, */
	r[5] = 0;	   /* minor 0: understood by every release of it */
	le16_put(r + 6, WIRE_F_REPLY);
	memcpy(r + 8, hdr + 8, 2); /* type */
	le32_put(r + 12, (uint32_t)-EPROTONOSUPPORT);
	memcpy(r + 16, hdr + 16, 8); /* req_id */
	/* empty payload: the checksum is XXH3-64 of nothing seeded with bytes 0..31 */
	le64_put(r + 32, wire_xxh3_64("", 0, wire_xxh3_64(r, 32, 0)));
	wbuf_put_bytes(out, r, sizeof(r));
	return hdr[4];
}

void rpc_auth_client_hello(struct rpc_auth_client *a, const struct rpc_cred *cred, struct wbuf *out)
{
	a->cred = cred;
	random_nonce(a->cn);
	uint8_t p[1 + RPC_NONCE_SIZE];
	p[0] = cred->role;
	memcpy(p + 1, a->cn, RPC_NONCE_SIZE);
	put_frame(out, MSG_AUTH_HELLO, 0, 0, 0, p, sizeof(p));
}

int rpc_auth_client_challenge(struct rpc_auth_client *a, const struct wire_hdr *h,
			      const uint8_t *payload, struct wbuf *out, const char **why)
{
	*why = NULL;
	if (!(h->flags & WIRE_F_REPLY) ||
	    (h->type != MSG_AUTH_HELLO && h->type != MSG_AUTH_PROOF)) {
		*why = "the server's first frame is not the handshake's challenge";
		return -EPROTO;
	}
	if (h->status < 0) {
		*why = "the server refused the handshake";
		return h->status;
	}
	if (h->type != MSG_AUTH_HELLO || h->payload_len != RPC_NONCE_SIZE + RPC_MAC_SIZE) {
		*why = "malformed handshake challenge";
		return -EPROTO;
	}
	const uint8_t *sn = payload;
	uint8_t want[RPC_MAC_SIZE];
	rpc_auth_mac(&a->cred->key, true, sn, a->cn, a->cred->role, want);
	bool ok = CRYPTO_memcmp(want, payload + RPC_NONCE_SIZE, RPC_MAC_SIZE) == 0;
	if (!ok) {
		OPENSSL_cleanse(want, sizeof(want));
		*why = "the server does not hold our cluster key (wrong key, or not our cluster)";
		return -EKEYREJECTED;
	}
	rpc_auth_mac(&a->cred->key, false, sn, a->cn, a->cred->role, want);
	put_frame(out, MSG_AUTH_PROOF, 0, 0, 0, want, sizeof(want));
	OPENSSL_cleanse(want, sizeof(want));
	return 0;
}
