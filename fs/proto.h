/* proto.h — message type numbers. Encoders and decoders for each message
 * live in meta_proto.c (0x01xx, 0x03xx) and chunk_proto.c (0x02xx).
 * Numbers are never reused; new messages take the next free number. */
#pragma once

enum strata_msg {
	/* metadata service: namespace */
	MSG_META_PING = 0x0100,
	MSG_META_LOOKUP,
	MSG_META_GETATTR,
	MSG_META_SETATTR,
	MSG_META_MKNOD,
	MSG_META_MKDIR,
	MSG_META_CREATE,
	MSG_META_UNLINK,
	MSG_META_RMDIR,
	MSG_META_RENAME,
	MSG_META_LINK,
	MSG_META_SYMLINK,
	MSG_META_READLINK,
	MSG_META_READDIR,
	MSG_META_STATFS,
	MSG_META_SETXATTR,
	MSG_META_GETXATTR,
	MSG_META_LISTXATTR,
	MSG_META_REMOVEXATTR,
	MSG_META_OPEN,
	MSG_META_CLOSE,
	MSG_META_SYNC,
	MSG_META_SET_LENGTH,
	MSG_META_FSCK,	      /* namespace check (and repair): meta/fsck.c */
	MSG_META_FSCK_CHUNKS, /* verdicts on listed chunks by inode (and removal) */
	MSG_META_FSCK_RESYNC, /* a damaged or stale replica: resync its target */
	MSG_META_CLOSE_MANY,  /* closes of several sessions in one request */

	/* chunkserver */
	MSG_CHUNK_PING = 0x0200,
	MSG_CHUNK_READ,
	MSG_CHUNK_WRITE,
	MSG_CHUNK_TRUNCATE,
	MSG_CHUNK_REMOVE,
	MSG_CHUNK_REMOVE_FILE,
	MSG_CHUNK_SYNC,
	MSG_CHUNK_STAT,
	MSG_CHUNK_WRITE_EX,  /* WRITE with client id + request id (exactly-once, chain forward) */
	MSG_CHUNK_LIST,	     /* a page of (ino, index, version, length, checksum): resync */
	MSG_CHUNK_PUT,	     /* replace a whole chunk with a given version: resync */
	MSG_CHUNK_PUT_PART,  /* one piece of a chunk larger than CHUNK_IO_MAX: resync */
	MSG_CHUNK_READ_MANY, /* several READs answered in one reply (the native client's batches) */

	/* metadata service: cluster management */
	MSG_MGMT_REGISTER = 0x0300,
	MSG_MGMT_HEARTBEAT,
	MSG_MGMT_ROUTING,
	MSG_MGMT_REPORT,	/* "target T did not answer": meta probes it, fails its node */
	MSG_MGMT_SYNC_DONE,	/* resync progress / completion of a target on a chain */
	MSG_MGMT_NODES,		/* admin: nodes with lease ages, target details */
	MSG_MGMT_SBNODE_REPORT, /* a sandbox node's lease and load (fs/sbnode_proto.h) */
	MSG_MGMT_SBNODES,	/* the sandbox node table: apiservers, `strata admin nodes` */

	/* the handshake that opens every connection (fs/rpc_auth.h) */
	MSG_AUTH_HELLO = 0x0400, /* role, client nonce; answered by the challenge */
	MSG_AUTH_PROOF,		 /* the client's MAC */
};
