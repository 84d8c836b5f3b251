/* raw_client.c — a client of a running cluster linked against
 * libstrata_fs, as an attacker would write it (issue 14, item 2):
 *
 *   raw_client META_ADDR CS_ADDR NAME [KEY_FILE]
 *
 * Without KEY_FILE it makes up a key; with it, it loads that file (as
 * nobody, the home's 0600 key is unreadable). Then it asks strata-meta for
 * the root's entry NAME (its attributes) and a chunkserver for a chunk read,
 * and a client with no key at all for the same. Prints what each answered
 * and exits 0 if everything was refused, 1 if anything was served, 3 if the
 * key file could not be loaded (printed). tests/fs/raw_client.sh runs it. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include "fs/meta_client.h"
#include "fs/proto.h"
#include "fs/rpc.h"

int main(int argc, char **argv)
{
	if (argc != 4 && argc != 5) {
		fprintf(stderr, "usage: raw_client META_ADDR CS_ADDR NAME [KEY_FILE]\n");
		return 2;
	}
	struct rpc_cred cred = {.role = RPC_ROLE_FUSE};
	if (argc == 5) {
		struct strata_err e = {0};
		if (rpc_key_load(argv[4], &cred.key, &e) < 0) {
			printf("key: %s\n", strata_err_msg(&e));
			return 3;
		}
	} else if (getrandom(cred.key.b, sizeof(cred.key.b), 0) != sizeof(cred.key.b)) {
		return 2;
	}
	int served = 0;
	struct rpc_client_opts o = {.timeout_ms = 3000, .max_conns = 1, .cred = &cred};
	struct meta_client *mc = meta_client_new(argv[1], "raw", &o);
	struct strata_attr a = {0};
	int r = meta_lookup(mc, STRATA_ROOT_INO, argv[3], &a);
	printf("meta lookup %s: %s (ino %llu, mode %o, size %llu)\n", argv[3],
	       r < 0 ? strerror(-r) : "served", (unsigned long long)a.ino, a.mode,
	       (unsigned long long)a.size);
	served += r >= 0;
	meta_client_free(mc);

	struct rpc_client *cs = rpc_client_new(argv[2], &o);
	struct rpc_reply rep = {0};
	r = rpc_call(cs, MSG_CHUNK_READ, NULL, 0, &rep);
	/* -EBADMSG: the request reached the handler (an empty read request) */
	printf("chunk read: %s\n", strerror(-r));
	served += r != -EKEYREJECTED;
	rpc_reply_done(&rep);
	rpc_client_free(cs);

	static const struct rpc_cred none; /* role 0: refused at the hello */
	o.cred = &none;
	mc = meta_client_new(argv[1], "raw", &o);
	r = meta_lookup(mc, STRATA_ROOT_INO, argv[3], &a);
	printf("meta lookup without a role: %s\n", r < 0 ? strerror(-r) : "served");
	served += r >= 0;
	meta_client_free(mc);
	return served ? 1 : 0;
}
