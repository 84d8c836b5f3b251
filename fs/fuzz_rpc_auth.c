/* fuzz_rpc_auth.c — libFuzzer entry point for the handshake of rpc_auth.h.
 *
 * The input is a stream of frames (40-byte header, payload) fed to the
 * server's state machine as a peer without the key would send them, and
 * its first frame is also given to a client as the server's challenge.
 * Nothing may crash or read past a frame; neither side may ever accept (the
 * server authenticating, the client answering a challenge) without a MAC
 * made with the key, which the input cannot hold. A genuine handshake with
 * the role and key bytes the input chooses must always succeed. */
#include <stddef.h>
#include <stdint.h>
#include <string.h>
#include "fs/rpc_auth.h"
#include "fs/wire.h"

static void genuine(const uint8_t *data, size_t size)
{
	struct rpc_cred cred = {.role = (uint8_t)(1 + data[0] % (RPC_ROLE_MAX - 1))};
	for (size_t i = 0; i < RPC_KEY_SIZE; i++)
		cred.key.b[i] = data[i % size];
	struct rpc_auth_server srv;
	struct rpc_auth_client cli;
	struct wbuf a, b;
	struct wire_hdr h;
	const char *why;
	wbuf_init(&a);
	wbuf_init(&b);
	rpc_auth_server_init(&srv, &cred.key);
	rpc_auth_client_hello(&cli, &cred, &a);
	if (wire_hdr_decode(a.data, &h, NULL) != 0 ||
	    rpc_auth_server_frame(&srv, &h, a.data + WIRE_HDR_SIZE, &b, &why) != 0 ||
	    wire_hdr_decode(b.data, &h, NULL) != 0)
		__builtin_trap();
	wbuf_reset(&a);
	if (rpc_auth_client_challenge(&cli, &h, b.data + WIRE_HDR_SIZE, &a, &why) != 0 ||
	    wire_hdr_decode(a.data, &h, NULL) != 0)
		__builtin_trap();
	wbuf_reset(&b);
	if (rpc_auth_server_frame(&srv, &h, a.data + WIRE_HDR_SIZE, &b, &why) != 1 ||
	    srv.role != cred.role)
		__builtin_trap();
	wbuf_done(&a);
	wbuf_done(&b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static const struct rpc_key key = {.b = {1, 2, 3, 4, 5, 6, 7, 8}};
	static const struct rpc_cred cred = {.key = {.b = {1, 2, 3, 4, 5, 6, 7, 8}},
					     .role = RPC_ROLE_FUSE};
	if (size == 0)
		return 0;
	genuine(data, size);
	struct rpc_auth_server srv;
	rpc_auth_server_init(&srv, &key);
	struct wbuf out;
	wbuf_init(&out);
	bool first = true;
	while (size >= WIRE_HDR_SIZE) {
		struct wire_hdr h;
		const char *why = NULL;
		if (wire_hdr_decode(data, &h, &why) != 0) {
			if (data[4] < WIRE_MAJOR && le32_get(data) == WIRE_MAGIC)
				rpc_auth_old_major_reply(data, &out);
			break;
		}
		if (size - WIRE_HDR_SIZE < h.payload_len)
			break;
		const uint8_t *p = data + WIRE_HDR_SIZE;
		if (first) {
			struct rpc_auth_client cli;
			struct wbuf c;
			wbuf_init(&c);
			rpc_auth_client_hello(&cli, &cred, &c);
			wbuf_reset(&c);
			if (rpc_auth_client_challenge(&cli, &h, p, &c, &why) == 0)
				__builtin_trap(); /* answered a challenge not made with the key */
			wbuf_done(&c);
			first = false;
		}
		wbuf_reset(&out);
		int r = rpc_auth_server_frame(&srv, &h, p, &out, &why);
		if (r == 1)
			__builtin_trap(); /* authenticated without the key */
		if (r < 0 && !why)
			__builtin_trap(); /* every refusal says why */
		if (r < 0)
			break;
		data += WIRE_HDR_SIZE + h.payload_len;
		size -= WIRE_HDR_SIZE + h.payload_len;
	}
	wbuf_done(&out);
	return 0;
}
