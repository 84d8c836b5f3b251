/* repl_probe.c — sends one MSG_CHUNK_READ straight to a chunkserver, naming
 * a target, chain and chain version of the caller's choosing, and prints the
 * reply status: the partition test uses it to check that a frozen replica
 * that comes back never serves what it held (it must answer -ESTALE or
 * -EAGAIN, not data, to a client still routing by the old chain version).
 *
 *   repl_probe ADDR TARGET CHAIN CHAIN_VER INO INDEX
 *   repl_probe ADDR TARGET CHAIN CHAIN_VER INO INDEX CLIENT_ID REQ_ID [FILL]
 *
 * The first form READs 64 KiB and prints "status N bytes M"; the second
 * sends a 4 KiB WRITE_EX at offset 0 with that client and request id (the
 * dedup and copy_rechain tests), every byte FILL (0 unless given, so that
 * a test can tell by the chunk's bytes which write it holds), and prints
 * "status N version V". Exits 0 if the call completed (any status), 2 on
 * usage errors, 1 on a transport failure. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/chunk_proto.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "tests/fs/testkey.h"

int main(int argc, char **argv)
{
	test_key_setup(RPC_ROLE_ADMIN);
	if (argc != 7 && argc != 9 && argc != 10) {
		fprintf(stderr, "usage: repl_probe ADDR TARGET CHAIN CHAIN_VER INO INDEX "
				"[CLIENT_ID REQ_ID [FILL]]\n");
		return 2;
	}
	static uint8_t data[4096];
	bool write = argc >= 9;
	if (argc == 10)
		memset(data, (int)strtoul(argv[9], NULL, 0), sizeof(data));
	uint16_t type = write ? MSG_CHUNK_WRITE_EX : MSG_CHUNK_READ;
	struct chunk_req q = {
	    .route = {(uint32_t)strtoul(argv[2], NULL, 0), (uint32_t)strtoul(argv[3], NULL, 0),
		      (uint32_t)strtoul(argv[4], NULL, 0)},
	    .ino = strtoull(argv[5], NULL, 0),
	    .index = (uint32_t)strtoul(argv[6], NULL, 0),
	    .off = 0,
	    .len = write ? sizeof(data) : 65536,
	    .chunk_size = 1u << 20,
	    .client_id = write ? strtoull(argv[7], NULL, 0) : 0,
	    .req_id = write ? strtoull(argv[8], NULL, 0) : 0,
	};
	struct rpc_client_opts o = {.timeout_ms = 5000, .max_conns = 1};
	struct rpc_client *c = rpc_client_new(argv[1], &o);
	if (!c)
		return 1;
	struct wbuf w;
	wbuf_init(&w);
	chunk_req_encode(type, &q, &w);
	if (write)
		wbuf_put_bytes(&w, data, sizeof(data));
	struct rpc_reply rep = {0};
	int r = rpc_call(c, type, &w, 0, &rep);
	struct chunk_stat st = {0};
	if (write && r == 0) {
		struct rbuf b;
		rbuf_init(&b, rep.data, rep.len);
		chunk_stat_get(&b, &st);
		printf("status %d version %llu\n", r, (unsigned long long)st.version);
	} else {
		printf("status %d bytes %zu\n", r, r == 0 ? rep.len : 0);
	}
	rpc_reply_done(&rep);
	wbuf_done(&w);
	rpc_client_free(c);
	return r == -ECONNREFUSED || r == -ETIMEDOUT || r == -ECONNRESET ? 1 : 0;
}
