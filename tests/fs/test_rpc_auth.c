/* test_rpc_auth.c — the handshake of fs/rpc_auth.h without sockets: exact
 * MAC vectors (computed independently with Python's hmac module), the two
 * state machines against each other, every refusal, the wire 1 answer, the
 * key files and the role table. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "fs/proto.h"
#include "fs/rpc_auth.h"
#include "fs/wire.h"
#include "tests/testutil.h"

static void from_hex(const char *hex, uint8_t *out, size_t n)
{
	for (size_t i = 0; i < n; i++)
		sscanf(hex + 2 * i, "%2hhx", &out[i]);
}

/* key 00 01 .. 1f, sn 32 x 0x11, cn 32 x 0x22, role fuse (1):
 * hmac.new(key, label + sn + cn + b"\x01", hashlib.sha256) */
static void test_vectors(void)
{
	struct rpc_key k;
	uint8_t sn[RPC_NONCE_SIZE], cn[RPC_NONCE_SIZE], mac[RPC_MAC_SIZE], want[RPC_MAC_SIZE];
	for (int i = 0; i < RPC_KEY_SIZE; i++)
		k.b[i] = (uint8_t)i;
	memset(sn, 0x11, sizeof(sn));
	memset(cn, 0x22, sizeof(cn));
	rpc_auth_mac(&k, true, sn, cn, RPC_ROLE_FUSE, mac);
	from_hex("ff7d6de2884919eac2da6ae5be4c8728f670ed5e3d99b3b257be17318431adf0", want, 32);
	CHECK(memcmp(mac, want, 32) == 0);
	rpc_auth_mac(&k, false, sn, cn, RPC_ROLE_FUSE, mac);
	from_hex("76b3328f16893e49f0de0accf91e8f01f4106af9bbf084bf931a0b2ad1d67c6c", want, 32);
	CHECK(memcmp(mac, want, 32) == 0);
	/* the role is bound: another role, another MAC */
	rpc_auth_mac(&k, false, sn, cn, RPC_ROLE_ADMIN, mac);
	CHECK(memcmp(mac, want, 32) != 0);
}

/* Decodes the one frame in b (header + payload) into h; returns the payload. */
static const uint8_t *frame_of(const struct wbuf *b, struct wire_hdr *h)
{
	CHECK(b->len >= WIRE_HDR_SIZE);
	CHECK_EQ(wire_hdr_decode(b->data, h, NULL), 0);
	CHECK_EQ(b->len, WIRE_HDR_SIZE + h->payload_len);
	CHECK_EQ(wire_payload_verify(b->data, h, b->data + WIRE_HDR_SIZE), 0);
	return b->data + WIRE_HDR_SIZE;
}

/* Runs a handshake of a client holding ckey as role against a server
 * holding skey. Returns the client's result of the challenge (or the
 * server's refusal), and the server's result of the proof in *ret_server. */
static int handshake(const struct rpc_key *skey, const struct rpc_key *ckey, uint8_t role,
		     int *ret_server, struct rpc_auth_server *srv)
{
	struct rpc_cred cred = {.key = *ckey, .role = role};
	struct rpc_auth_client cli;
	struct wbuf c2s, s2c;
	struct wire_hdr h;
	const char *why;
	wbuf_init(&c2s);
	wbuf_init(&s2c);
	rpc_auth_server_init(srv, skey);
	rpc_auth_client_hello(&cli, &cred, &c2s);
	const uint8_t *p = frame_of(&c2s, &h);
	CHECK_EQ(h.type, MSG_AUTH_HELLO);
	*ret_server = rpc_auth_server_frame(srv, &h, p, &s2c, &why);
	int r = 0;
	if (*ret_server == 0) {
		p = frame_of(&s2c, &h);
		wbuf_reset(&c2s);
		r = rpc_auth_client_challenge(&cli, &h, p, &c2s, &why);
		if (r == 0) {
			p = frame_of(&c2s, &h);
			CHECK_EQ(h.type, MSG_AUTH_PROOF);
			wbuf_reset(&s2c);
			*ret_server = rpc_auth_server_frame(srv, &h, p, &s2c, &why);
			CHECK_EQ(s2c.len, *ret_server == 1 ? 0 : WIRE_HDR_SIZE);
		}
	}
	wbuf_done(&c2s);
	wbuf_done(&s2c);
	return r;
}

static void test_handshake(void)
{
	struct rpc_key k1, k2;
	memset(k1.b, 1, sizeof(k1.b));
	memset(k2.b, 1, sizeof(k2.b));
	k2.b[31] = 2; /* one bit off */
	struct rpc_auth_server srv;
	int sr;
	CHECK_EQ(handshake(&k1, &k1, RPC_ROLE_FUSE, &sr, &srv), 0);
	CHECK_EQ(sr, 1);
	CHECK_EQ(srv.role, RPC_ROLE_FUSE);
	CHECK_EQ(srv.state, RPC_AUTH_DONE);
	/* wrong key: the client sees the server cannot prove ours, sends nothing */
	CHECK_EQ(handshake(&k1, &k2, RPC_ROLE_ADMIN, &sr, &srv), -EKEYREJECTED);
	CHECK_EQ(srv.state, RPC_AUTH_WAIT_PROOF);
	/* unknown roles are refused at the hello */
	CHECK_EQ(handshake(&k1, &k1, RPC_ROLE_NONE, &sr, &srv), 0);
	CHECK_EQ(sr, -EPERM);
	CHECK_EQ(handshake(&k1, &k1, RPC_ROLE_MAX, &sr, &srv), 0);
	CHECK_EQ(sr, -EPERM);
}

/* A client that skips the check and sends a forged proof, a request before
 * the handshake, an oversized hello: each refused with a status frame. */
static void test_refusals(void)
{
	struct rpc_key k;
	memset(k.b, 7, sizeof(k.b));
	struct rpc_auth_server srv;
	struct wbuf out;
	struct wire_hdr h = {.type = MSG_META_GETATTR, .req_id = 5};
	uint8_t p[64] = {0};
	const char *why;
	wbuf_init(&out);

	rpc_auth_server_init(&srv, &k);
	CHECK_EQ(rpc_auth_server_frame(&srv, &h, p, &out, &why), -EACCES);
	struct wire_hdr r;
	frame_of(&out, &r);
	CHECK(r.flags & WIRE_F_REPLY);
	CHECK_EQ(r.status, -EACCES);
	CHECK_EQ(r.req_id, 5);
	CHECK(why != NULL);

	rpc_auth_server_init(&srv, &k);
	h = (struct wire_hdr){.type = MSG_AUTH_HELLO, .payload_len = 1 + RPC_NONCE_SIZE};
	p[0] = RPC_ROLE_ADMIN;
	wbuf_reset(&out);
	CHECK_EQ(rpc_auth_server_frame(&srv, &h, p, &out, &why), 0);
	h = (struct wire_hdr){.type = MSG_AUTH_PROOF, .payload_len = RPC_MAC_SIZE};
	memset(p, 0xab, RPC_MAC_SIZE); /* forged */
	wbuf_reset(&out);
	CHECK_EQ(rpc_auth_server_frame(&srv, &h, p, &out, &why), -EKEYREJECTED);
	frame_of(&out, &r);
	CHECK_EQ(r.status, -EKEYREJECTED);
	CHECK_EQ(r.type, MSG_AUTH_PROOF);
	CHECK_EQ(srv.state, RPC_AUTH_FAILED);

	rpc_auth_server_init(&srv, &k);
	h = (struct wire_hdr){.type = MSG_AUTH_HELLO, .payload_len = RPC_AUTH_MAX_PAYLOAD + 1};
	wbuf_reset(&out);
	CHECK_EQ(rpc_auth_server_frame(&srv, &h, p, &out, &why), -EPROTO);
	rpc_auth_server_init(&srv, &k);
	h = (struct wire_hdr){.type = MSG_AUTH_HELLO, .payload_len = 5};
	CHECK_EQ(rpc_auth_server_frame(&srv, &h, p, &out, &why), -EPROTO);
	wbuf_done(&out);
}

/* A wire 1 request gets a wire 1 reply: major 1, minor 0, status
 * -EPROTONOSUPPORT, its type and req_id, a valid empty-payload checksum. */
static void test_old_major(void)
{
	uint8_t hdr[WIRE_HDR_SIZE] = {0};
	le32_put(hdr, WIRE_MAGIC);
	hdr[4] = 1;
	hdr[5] = 1;
	le16_put(hdr + 8, MSG_META_LOOKUP);
	le64_put(hdr + 16, 0x0102030405060708ull);
	struct wbuf out;
	wbuf_init(&out);
	CHECK_EQ(rpc_auth_old_major_reply(hdr, &out), 1);
	CHECK_EQ(out.len, WIRE_HDR_SIZE);
	const uint8_t *r = out.data;
	CHECK_EQ(le32_get(r), WIRE_MAGIC);
	CHECK_EQ(r[4], 1);
	CHECK_EQ(r[5], 0);
	CHECK_EQ(le16_get(r + 6), WIRE_F_REPLY);
	CHECK_EQ(le16_get(r + 8), MSG_META_LOOKUP);
	CHECK_EQ((int32_t)le32_get(r + 12), -EPROTONOSUPPORT);
	CHECK_EQ(le64_get(r + 16), 0x0102030405060708ull);
	CHECK_EQ(le32_get(r + 24), 0);
	CHECK_EQ(le64_get(r + 32), wire_xxh3_64("", 0, wire_xxh3_64(r, 32, 0)));
	wbuf_done(&out);
}

static void test_key_files(void)
{
	char dir[] = "/tmp/test_rpc_auth.XXXXXX", path[256], link[256];
	CHECK(mkdtemp(dir));
	snprintf(path, sizeof(path), "%s/cluster.key", dir);
	snprintf(link, sizeof(link), "%s/link.key", dir);
	struct strata_err e = {0};
	struct rpc_key k1, k2;
	CHECK_EQ(rpc_key_load(path, &k1, &e), -ENOENT);
	CHECK(strstr(e.msg, path));
	CHECK_EQ(rpc_key_create(path, NULL), 0);
	struct stat st;
	CHECK(stat(path, &st) == 0 && (st.st_mode & 07777) == 0600 && st.st_size == 32);
	CHECK_EQ(rpc_key_load(path, &k1, NULL), 0);
	/* never replaced: a second create fails and the key stays */
	CHECK_EQ(rpc_key_create(path, NULL), -EEXIST);
	CHECK_EQ(rpc_key_load(path, &k2, NULL), 0);
	CHECK(memcmp(&k1, &k2, sizeof(k1)) == 0);
	/* a link planted where the key goes is not followed */
	CHECK(symlink("/tmp/elsewhere-rpc-auth", link) == 0);
	CHECK_EQ(rpc_key_create(link, NULL), -EEXIST);
	CHECK(access("/tmp/elsewhere-rpc-auth", F_OK) != 0);
	/* too open */
	CHECK(chmod(path, 0640) == 0);
	strata_err_clear(&e);
	CHECK_EQ(rpc_key_load(path, &k2, &e), -EPERM);
	CHECK(strstr(e.msg, "chmod 600"));
	/* wrong size */
	CHECK(chmod(path, 0600) == 0);
	int fd = open(path, O_WRONLY | O_APPEND);
	CHECK(fd >= 0 && write(fd, "x", 1) == 1);
	close(fd);
	strata_err_clear(&e);
	CHECK_EQ(rpc_key_load(path, &k2, &e), -EINVAL);
	CHECK(strstr(e.msg, "33 bytes"));
	/* no key at all */
	unsetenv(RPC_KEY_ENV);
	strata_err_clear(&e);
	CHECK_EQ(rpc_auth_setup(NULL, RPC_ROLE_ADMIN, &e), -ENOKEY);
	CHECK(strstr(e.msg, "--key"));
	CHECK(rpc_auth_default() == NULL);
	unlink(link);
	unlink(path);
	rmdir(dir);
}

static void test_roles(void)
{
	CHECK(rpc_role_may(RPC_ROLE_FUSE, MSG_META_GETATTR));
	CHECK(rpc_role_may(RPC_ROLE_FUSE, MSG_CHUNK_WRITE_EX));
	CHECK(!rpc_role_may(RPC_ROLE_FUSE, MSG_META_FSCK));
	CHECK(!rpc_role_may(RPC_ROLE_FUSE, MSG_MGMT_REGISTER));
	CHECK(!rpc_role_may(RPC_ROLE_FUSE, MSG_CHUNK_PUT));
	CHECK(!rpc_role_may(RPC_ROLE_IMAGESVC, MSG_META_FSCK_CHUNKS));
	CHECK(rpc_role_may(RPC_ROLE_ADMIN, MSG_META_FSCK));
	CHECK(rpc_role_may(RPC_ROLE_ADMIN, MSG_MGMT_NODES));
	CHECK(rpc_role_may(RPC_ROLE_CHUNKSERVER, MSG_MGMT_HEARTBEAT));
	CHECK(rpc_role_may(RPC_ROLE_CHUNKSERVER, MSG_CHUNK_PUT_PART));
	CHECK(!rpc_role_may(RPC_ROLE_CHUNKSERVER, MSG_META_UNLINK));
	CHECK(rpc_role_may(RPC_ROLE_META, MSG_CHUNK_REMOVE_FILE));
	CHECK(!rpc_role_may(RPC_ROLE_META, MSG_CHUNK_WRITE_EX));
	CHECK(!rpc_role_may(RPC_ROLE_ADMIN, 0x7777)); /* unknown: nobody */
	CHECK(!rpc_role_may(RPC_ROLE_NONE, MSG_META_PING));
	CHECK_EQ(rpc_role_parse("chunkserver"), RPC_ROLE_CHUNKSERVER);
	CHECK_EQ(rpc_role_parse("root"), -EINVAL);
	CHECK(!strcmp(rpc_role_name(RPC_ROLE_IMAGESVC), "imagesvc"));
}

int main(void)
{
	test_vectors();
	test_handshake();
	test_refusals();
	test_old_major();
	test_key_files();
	test_roles();
	printf("test_rpc_auth: ok\n");
	return 0;
}
