/* rpc_roles.c — which role may send which request (rpc_role_may): the one
 * table strata-meta and the chunkservers check every request against
 * (rpc_server_opts.may), listed in fs/README.md "Roles".
 *
 * Why each row: the mount (fuse) and the image service work on the
 * namespace and on chunk data; the admin tools (fsck, `strata admin`) may do
 * everything a client can and the cluster-admin operations (fsck and its
 * repairs, the admin view, registration); a chunkserver registers itself,
 * heartbeats, reports resync progress, forwards writes down its chain and
 * resyncs replicas; strata-meta probes chunkservers and removes garbage
 * chunks; a sandboxd renews its lease and an apiserver reads the sandbox
 * node table (role sandbox, nothing else). A directory's layout change (setattr with
 * STRATA_SET_LAYOUT or STRATA_SET_REPLICAS) is checked by strata-meta's handler, which decodes the
 * request: admin only. */
#include "fs/proto.h"
#include "fs/rpc_auth.h"

#define R(x) (1u << (x))
#define CLIENTS (R(RPC_ROLE_FUSE) | R(RPC_ROLE_IMAGESVC) | R(RPC_ROLE_ADMIN))
#define EVERYONE (CLIENTS | R(RPC_ROLE_CHUNKSERVER) | R(RPC_ROLE_META))
#define ADMIN R(RPC_ROLE_ADMIN)
#define CHUNKSERVER R(RPC_ROLE_CHUNKSERVER)

/* The roles (bit set) that may send type; 0: nobody. */
static unsigned roles_of(uint16_t type)
{
	if (type == MSG_META_PING || type == MSG_CHUNK_PING || type == MSG_MGMT_ROUTING)
		return EVERYONE;
	if ((type > MSG_META_PING && type <= MSG_META_SET_LENGTH) || type == MSG_META_CLOSE_MANY)
		return CLIENTS; /* the namespace */
	switch (type) {
	case MSG_META_FSCK:
	case MSG_META_FSCK_CHUNKS:
	case MSG_META_FSCK_RESYNC:
	case MSG_MGMT_NODES:
		return ADMIN;
	case MSG_MGMT_SBNODE_REPORT:
	case MSG_MGMT_SBNODES:
		return ADMIN | R(RPC_ROLE_SANDBOX);
	case MSG_MGMT_REGISTER:
	case MSG_MGMT_HEARTBEAT:
	case MSG_MGMT_SYNC_DONE:
		return ADMIN | CHUNKSERVER;
	case MSG_MGMT_REPORT: /* "target T does not answer": meta probes it itself */
		return CLIENTS | CHUNKSERVER;
	case MSG_CHUNK_READ:
	case MSG_CHUNK_READ_MANY:
	case MSG_CHUNK_STAT:
		return EVERYONE;
	case MSG_CHUNK_WRITE:
	case MSG_CHUNK_WRITE_EX:
	case MSG_CHUNK_TRUNCATE:
	case MSG_CHUNK_SYNC:
		return CLIENTS | CHUNKSERVER; /* a chain forwards what clients write */
	case MSG_CHUNK_REMOVE:
	case MSG_CHUNK_REMOVE_FILE:
		return CLIENTS | CHUNKSERVER | R(RPC_ROLE_META); /* unlink, chains, GC */
	case MSG_CHUNK_LIST:
	case MSG_CHUNK_PUT:
	case MSG_CHUNK_PUT_PART:
		return ADMIN | CHUNKSERVER; /* resync */
	default:
		return 0;
	}
}

bool rpc_role_may(uint8_t role, uint16_t type)
{
	return role > RPC_ROLE_NONE && role < RPC_ROLE_MAX && (roles_of(type) & R(role));
}
