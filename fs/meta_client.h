/* meta_client.h — blocking, thread-safe client of strata-meta.
 *
 * Every call returns 0 (or a non-negative count where stated) or a negative
 * errno with POSIX meaning: -ENOENT, -EEXIST, -ENOTDIR, -EISDIR, -ENOTEMPTY,
 * -EINVAL, -ENAMETOOLONG, -EXDEV, -ELOOP, -ENODATA, -ERANGE, -ENOSPC, ... and
 * transport errors (-ETIMEDOUT, -ECONNREFUSED, -ECONNRESET).
 *
 * Permission checks are the kernel's (the mount uses default_permissions);
 * strata-meta checks only structure (names, types, emptiness, loops).
 * Names are single path components: 1..255 bytes, no '/', no NUL, not "." or
 * "..": others give -EINVAL (or -ENAMETOOLONG). */
#pragma once
#include <stddef.h>
#include <stdbool.h>
#include <stdint.h>
#include "fs/types.h"
#include "fs/rpc.h"

struct meta_client;

/* The id of one mutation, the same on every attempt at it: the caller's own
 * retries and, for strata-fuse, the kernel's resend of a FUSE request after
 * a crash (fuse/README.md "Replayed requests"). A strata-meta of wire minor
 * >= 2 that carried out an id already answers it from its record instead
 * of doing it again (meta/README.md "Operation ids"), so a mutation whose
 * first answer was lost does not come back -EEXIST or -ENOENT. conn names
 * the issuer's connection (random, never reused; a FUSE connection keeps
 * its id across restarts of strata-fuse), unique the request within it.
 * The mutations below take one as `op`; NULL (or conn 0) means none. */
struct meta_opid {
	uint64_t conn, unique;
};

/* Returns a client for the strata-meta at addr ("host:port"); no connection is
 * made until the first call. client_id names this client's open-file
 * sessions (stable across restarts of the same mount, so stale sessions
 * can be cleared). Owned by the caller; free with meta_client_free. */
struct meta_client *meta_client_new(const char *addr, const char *client_id,
				    const struct rpc_client_opts *opts);
void meta_client_free(struct meta_client *mc);

int meta_ping(struct meta_client *mc);
int meta_lookup(struct meta_client *mc, strata_ino_t parent, const char *name,
		struct strata_attr *ret_attr);
int meta_getattr(struct meta_client *mc, strata_ino_t ino, struct strata_attr *ret_attr);
/* Applies sa (see STRATA_SET_*). A size change here changes only the recorded
 * length; the caller trims chunks on the chunkservers first when shrinking.
 * On a directory, STRATA_SET_LAYOUT sets the chunk size (-EINVAL unless a
 * power of two in 64 KiB..64 MiB) and STRATA_SET_REPLICAS the replication
 * factor (-EINVAL outside 1..5, -ERANGE when strata-meta has no chain table
 * of that factor) of files and directories created in it from then on; the
 * reply's layout.table_id is the table they get. -ENOTDIR on anything else. */
int meta_setattr(struct meta_client *mc, strata_ino_t ino, const struct strata_setattr *sa,
		 struct strata_attr *ret_attr);
/* Regular files (S_IFREG), fifos, sockets, character and block devices. */
int meta_mknod(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
	       const char *name, uint32_t mode, uint64_t rdev, uint32_t uid, uint32_t gid,
	       struct strata_attr *ret_attr);
int meta_mkdir(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
	       const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
	       struct strata_attr *ret_attr);
/* Creates a regular file and opens it (a session) in one step. With
 * O_EXCL in flags an existing name is -EEXIST; otherwise an existing regular
 * file is opened (and truncated to 0 with O_TRUNC). */
int meta_create(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name, uint32_t mode, uint32_t uid, uint32_t gid, uint32_t flags,
		struct strata_attr *ret_attr, uint64_t *ret_session);
int meta_unlink(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name);
int meta_rmdir(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
	       const char *name);
/* What an unlink or rmdir changed, as strata-meta answered it: the removed
 * inode (nlink = the links left; 0 when it is gone or only open) and the
 * parent, both after the removal. known is false when the server did not
 * say (an older server, or the answer of a resent request from its record). */
struct meta_removed {
	bool known;
	struct strata_attr inode, parent;
};
/* meta_unlink (dir false) or meta_rmdir (dir true); *ret (may be NULL) is
 * filled on success. */
int meta_remove(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name, bool dir, struct meta_removed *ret);
/* What a rename changed, as strata-meta answered it (known false as for
 * struct meta_removed): the moved inode, the inode it replaced (nlink = the
 * links left) or, for RENAME_EXCHANGE, the other one, when has_other, and
 * both parents, all after the rename. */
struct meta_renamed {
	bool known, has_other;
	struct strata_attr inode, other, parent, newparent;
};
/* meta_rename, with *ret (may be NULL) filled on success. */
int meta_rename_ex(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		   const char *name, strata_ino_t newparent, const char *newname, uint32_t flags,
		   struct meta_renamed *ret);
/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (linux/fs.h values). */
int meta_rename(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name, strata_ino_t newparent, const char *newname, uint32_t flags);
int meta_link(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino,
	      strata_ino_t newparent, const char *newname, struct strata_attr *ret_attr);
int meta_symlink(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		 const char *name, const char *target, uint32_t uid, uint32_t gid,
		 struct strata_attr *ret_attr);
/* Copies the target, NUL-terminated, into buf[cap]. Returns its length, or
 * -ERANGE if it does not fit. */
int meta_readlink(struct meta_client *mc, strata_ino_t ino, char *buf, size_t cap);

struct meta_dirent {
	strata_ino_t ino;
	uint32_t mode; /* type bits at least; full attr when requested */
	char name[STRATA_NAME_MAX + 1];
	struct strata_attr attr; /* valid only with want_attrs */
};
/* Lists directory ino in name order, starting after `after` ("" = from the
 * start; "." and ".." are not returned). Fills up to max entries into ents
 * and *ret_more = 1 if more follow. Returns the number of entries. */
int meta_readdir(struct meta_client *mc, strata_ino_t ino, const char *after, bool want_attrs,
		 struct meta_dirent *ents, int max, int *ret_more);
int meta_statfs(struct meta_client *mc, struct strata_statfs *ret);

/* flags: XATTR_CREATE, XATTR_REPLACE or 0. */
int meta_setxattr(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino,
		  const char *name, const void *value, size_t size, uint32_t flags);
/* With cap == 0 returns the value size; otherwise copies it and returns its
 * size, or -ERANGE if cap is too small; -ENODATA if absent. */
int meta_getxattr(struct meta_client *mc, strata_ino_t ino, const char *name, void *buf,
		  size_t cap);
/* NUL-separated names, same size convention as getxattr. */
int meta_listxattr(struct meta_client *mc, strata_ino_t ino, char *buf, size_t cap);
int meta_removexattr(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino,
		     const char *name);

/* Opens a session on a regular file (flags as open(2); O_TRUNC truncates the
 * recorded length to 0). An unlinked file keeps its data while a session is
 * open. */
int meta_open(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino, uint32_t flags,
	      uint64_t *ret_session);
/* Closes a session; if length >= 0 it is first recorded as with
 * meta_set_length. */
int meta_close(struct meta_client *mc, strata_ino_t ino, uint64_t session, int64_t length,
	       int64_t mtime_ns);
/* One session to close with meta_close_many: as meta_close's arguments. */
struct meta_close_item {
	uint64_t ino, session;
	int64_t length, mtime_ns;
};
#define META_CLOSE_MANY_MAX 256 /* items per MSG_META_CLOSE_MANY */
/* Closes n (<= META_CLOSE_MANY_MAX) sessions in one request; results[i] is
 * what meta_close would have returned for items[i]. Returns 0 when the
 * server answered (each result then says), -EOPNOTSUPP from a server older
 * than the message (close them one by one), or a transport error (none
 * known to be closed). */
int meta_close_many(struct meta_client *mc, const struct meta_close_item *items, uint32_t n,
		    int *results);
/* Records that the file is at least `length` bytes long (writes past the
 * end): size = max(size, length); mtime set if mtime_ns >= 0. */
int meta_set_length(struct meta_client *mc, strata_ino_t ino, uint64_t length, int64_t mtime_ns);
/* Makes every acknowledged mutation durable (RocksDB WAL synced). */
int meta_sync(struct meta_client *mc);
/* Closes every open-file session recorded under this client's client_id
 * (those of a previous mount that died without closing). A mount calls it
 * once before its first open. Returns the number of sessions closed. */
int meta_clear_sessions(struct meta_client *mc);
/* The client id sessions are recorded under (generated when none was given). */
const char *meta_client_id(const struct meta_client *mc);
/* Whether the strata-meta answering this client keeps operation ids (wire
 * minor >= 2): 1, 0 (an older one: it ignores them), or -1 before its first
 * answer. */
int meta_keeps_opids(struct meta_client *mc);
/* Calls of one message type (MSG_META_*) this client has sent, retries
 * included: how tests and benchmarks count the round trips an operation
 * costs. */
#define META_CALL_TYPES 64
uint64_t meta_client_calls(struct meta_client *mc, uint16_t type);

/* ---- cluster management ------------------------------------------------- */
struct mgmt_target_info {
	uint32_t target_id; /* 0 = assign a new id */
	char path[256];	    /* informational */
	uint64_t total_bytes, free_bytes;
	/* The filesystem the target lives on, unique on its node (statvfs
	 * f_fsid); 0 = unknown. statfs counts each (node, fsid) once. Sent in a
	 * trailing section of the request (older peers skip or omit it). */
	uint64_t fsid;
};
/* A chunkserver announces itself and its targets. node_id 0 asks for a new
 * id. On return *ret_node_id holds the node's id and targets[i].target_id the
 * ids assigned (persist them beside the targets and send them next time). */
int mgmt_register(struct meta_client *mc, uint32_t *ret_node_id, const char *addr,
		  struct mgmt_target_info *targets, int ntargets);
int mgmt_heartbeat(struct meta_client *mc, uint32_t node_id, const struct mgmt_target_info *targets,
		   int ntargets);
/* Fetches the routing table. On success *ret is filled with heap arrays;
 * release with strata_routing_done. */
int mgmt_routing(struct meta_client *mc, struct strata_routing *ret);
void strata_routing_done(struct strata_routing *r);

/* ---- replication: failure reports, resync, admin ------------------------ */
/* Tells strata-meta that target_id did not answer (connection refused, reset
 * or timed out). strata-meta probes the target's node itself and, if the
 * probe fails too, takes the node's targets out of their chains at once
 * instead of waiting for the lease. Returns 0 (also when the probe
 * succeeded: nothing changes) or -errno. */
int mgmt_report(struct meta_client *mc, uint32_t target_id);

/* Resync of target_id on chain_id (at chain version chain_ver), sent by its
 * predecessor: progress (finished 0) or completion (finished 1, then the
 * target becomes serving if the chain is still at chain_ver; -ESTALE if not). */
struct mgmt_sync {
	uint32_t chain_id, chain_ver, target_id;
	uint64_t done, total; /* chunks compared so far / to compare */
	uint8_t finished;
};
int mgmt_sync_done(struct meta_client *mc, const struct mgmt_sync *s);

/* The admin view of the cluster map (besides mgmt_routing). */
struct mgmt_node_info {
	uint32_t node_id;
	char addr[64];
	int64_t age_ms; /* since the last heartbeat seen by this strata-meta run */
	uint8_t alive;	/* within the lease */
};
struct mgmt_target_detail {
	uint32_t target_id, node_id, chain_id; /* chain 0: spare, in no chain */
	uint8_t state;			       /* enum strata_target_state */
	char path[256];
	uint64_t total_bytes, free_bytes;
	uint64_t sync_done, sync_total; /* resync progress while syncing */
};
struct mgmt_cluster {
	uint32_t lease_ms, replicas, expect_nodes;
	uint32_t nnodes, ntargets;
	struct mgmt_node_info *nodes;	    /* heap, mgmt_cluster_done */
	struct mgmt_target_detail *targets; /* heap, mgmt_cluster_done */
};
int mgmt_cluster(struct meta_client *mc, struct mgmt_cluster *ret);

/* Sandbox nodes (fs/sbnode_proto.h). mgmt_sbnode_report renews r's lease:
 * returns 0 with the lease and whether the node must reconcile (it had been
 * lost), -EEXIST (another live sandboxd holds the node id) or the RPC
 * error. mgmt_sbnodes fills *ret (sbnode_table_done) or returns the error. */
struct sbnode_report;
struct sbnode_table;
int mgmt_sbnode_report(struct meta_client *mc, const struct sbnode_report *r,
		       uint32_t *ret_lease_ms, bool *ret_reconcile);
int mgmt_sbnodes(struct meta_client *mc, struct sbnode_table *ret);
void mgmt_cluster_done(struct mgmt_cluster *c);

/* ---- fsck (MSG_META_FSCK, MSG_META_FSCK_CHUNKS; meta/README.md "fsck") ---- */
/* What a namespace check finds. Names for output: meta_fsck_kind_name. */
enum meta_fsck_kind {
	FSCK_DANGLING_DENTRY = 1, /* dentry -> missing inode (or in a missing/non-dir parent) */
	FSCK_DENTRY_TYPE,	  /* dentry's type bits differ from the inode's */
	FSCK_DIR_LINKS,		  /* a directory named by more than one dentry */
	FSCK_DIR_PARENT,	  /* a directory's parent field is not the dir holding it */
	FSCK_NLINK,		  /* nlink differs from what the dentries say */
	FSCK_UNREACHABLE,	  /* no dentry, and not an orphan held open by a session */
	FSCK_ORPHAN_NO_MARKER,	  /* nlink 0 with sessions but no O marker */
	FSCK_STALE_ORPHAN,	  /* an O marker on an inode that is not an open orphan */
	FSCK_SESSION_NO_INDEX,	  /* S(ino,sid) without U(client,ino,sid) */
	FSCK_INDEX_NO_SESSION,	  /* U(client,ino,sid) without S(ino,sid) */
	FSCK_SESSION_NO_INODE,	  /* a session on an inode that does not exist */
	FSCK_GC_LIVE,		  /* queued for GC while the inode exists */
	FSCK_COUNTER,		  /* a next_* counter not above an id in use (name) */
	FSCK_INODE_COUNT,	  /* the `inodes` counter differs from the count */
	FSCK_BAD_RECORD,	  /* a record that does not decode (reported only) */
	FSCK_STRAY_RECORD,	  /* an xattr or symlink target of a missing inode (name:
				     "xattr"/"symlink") */
	FSCK_SYMLINK_NO_TARGET,	  /* a symlink inode without its target (reported only) */
	FSCK_KIND_MAX
};
#define META_FSCK_REPAIR 0x1u
/* Records one MSG_META_FSCK reply carries at most; the totals per kind are
 * always complete, `truncated` says records were left out. */
#define META_FSCK_MAX_RECORDS 1000
struct meta_fsck_record {
	uint16_t kind;
	uint8_t repaired;		/* 0: found; 1: a repair made (listed after the findings) */
	uint64_t ino, parent;		/* parent: the directory of the dentry, if any */
	uint64_t expected, actual;	/* nlink, counter values, type bits */
	char name[STRATA_NAME_MAX + 1]; /* dentry or counter name, or "" */
};
struct meta_fsck_report {
	uint64_t inodes, dirs, files, dentries, sessions, orphans, gc_queued;
	uint32_t found[FSCK_KIND_MAX], repaired[FSCK_KIND_MAX];
	uint32_t n;
	uint8_t truncated;
	struct meta_fsck_record *rec; /* heap: meta_fsck_report_done */
};
/* Checks the namespace on a consistent snapshot while strata-meta keeps
 * serving; with META_FSCK_REPAIR, re-checks under the mutation lock and
 * repairs what it can without losing data (each repair logged by
 * strata-meta). -EOPNOTSUPP from a strata-meta without fsck. */
int meta_fsck(struct meta_client *mc, uint32_t flags, struct meta_fsck_report *ret);
void meta_fsck_report_done(struct meta_fsck_report *r);
const char *meta_fsck_kind_name(uint16_t kind);

/* Chunks listed on the chunkservers, asked about by inode. verdicts: */
enum meta_fsck_verdict {
	FSCK_CHUNK_OK = 0,     /* a live regular file's, within its size */
	FSCK_CHUNK_OPEN,       /* the file has sessions: writes may be in flight */
	FSCK_CHUNK_GC,	       /* inode queued for GC: the collector removes it */
	FSCK_CHUNK_NO_INODE,   /* orphan: no inode, not queued */
	FSCK_CHUNK_NOT_FILE,   /* orphan: the inode is not a regular file */
	FSCK_CHUNK_BEYOND_EOF, /* orphan: at or past the chunk holding the end */
};
#define META_FSCK_CHUNKS_MAX 4096 /* items per MSG_META_FSCK_CHUNKS */
struct meta_fsck_chunk {
	/* request */
	uint64_t ino;
	uint32_t index;	   /* the lowest index listed for this inode on this table */
	uint32_t table_id; /* a chain table holding the chain it was listed on */
	/* reply */
	uint8_t verdict;
	uint8_t removed;       /* repair: chunks from first_orphan on were removed */
	int32_t err;	       /* repair: the removal's error, or 0 */
	uint32_t first_orphan; /* orphans: the first index that is not the file's */
	uint64_t size;
};
/* Asks strata-meta for the verdict on items[0..n) (n <= META_FSCK_CHUNKS_MAX)
 * under its mutation lock; with META_FSCK_REPAIR it also removes orphan
 * chunks (MSG_CHUNK_REMOVE_FILE from first_orphan on, the GC's path) while
 * still holding the lock, so no file can be created, opened or grown
 * in between. */
int meta_fsck_chunks(struct meta_client *mc, uint32_t flags, struct meta_fsck_chunk *items,
		     uint32_t n);
/* Has strata-meta take serving target_id out of service to be resynced from
 * the other serving replicas of its chain (as after a restart of its node).
 * MSG_META_FSCK_RESYNC: request target u32; reply empty. -EBUSY: no other
 * replica serves; -EALREADY: it is not serving; -ENOENT: no such target. */
int meta_fsck_resync(struct meta_client *mc, uint32_t target_id);
