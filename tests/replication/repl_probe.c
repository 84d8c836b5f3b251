/* repl_probe.c — sends one MSG_CHUNK_READ straight to a chunkserver, naming
 * a target, chain and chain version of the caller's choosing, and prints the
 * reply status: the partition test uses it to check that a frozen replica
 * that comes back never serves what it held (it must answer -ESTALE or
 * -EAGAIN, not data, to a client still routing by the old chain version).
 *
 *   repl_probe ADDR TARGET CHAIN CHAIN_VER INO INDEX
 *
 * Prints "status N bytes M" and exits 0 if the call completed (any status),
 * 2 on usage errors, 1 on a transport failure. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "chunk_proto.h"
#include "proto.h"
#include "rpc.h"

int main(int argc, char **argv)
{
	if (argc != 7) {
		fprintf(stderr, "usage: repl_probe ADDR TARGET CHAIN CHAIN_VER INO INDEX\n");
		return 2;
	}
	struct chunk_req q = {
		.route = { (uint32_t)strtoul(argv[2], NULL, 0), (uint32_t)strtoul(argv[3], NULL, 0),
			   (uint32_t)strtoul(argv[4], NULL, 0) },
		.ino = strtoull(argv[5], NULL, 0),
		.index = (uint32_t)strtoul(argv[6], NULL, 0),
		.off = 0,
		.len = 65536,
	};
	struct rpc_client_opts o = { .timeout_ms = 5000, .max_conns = 1 };
	struct rpc_client *c = rpc_client_new(argv[1], &o);
	if (!c)
		return 1;
	struct wbuf w;
	wbuf_init(&w);
	chunk_req_encode(MSG_CHUNK_READ, &q, &w);
	struct rpc_reply rep = { 0 };
	int r = rpc_call(c, MSG_CHUNK_READ, &w, 0, &rep);
	printf("status %d bytes %zu\n", r, r == 0 ? rep.len : 0);
	rpc_reply_done(&rep);
	wbuf_done(&w);
	rpc_client_free(c);
	return r == -ECONNREFUSED || r == -ETIMEDOUT || r == -ECONNRESET ? 1 : 0;
}
