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
#include <stdint.h>
#include "types.h"
#include "rpc.h"

struct meta_client;

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
int meta_mknod(struct meta_client *mc, strata_ino_t parent, const char *name, uint32_t mode,
	       uint64_t rdev, uint32_t uid, uint32_t gid, struct strata_attr *ret_attr);
int meta_mkdir(struct meta_client *mc, strata_ino_t parent, const char *name, uint32_t mode,
	       uint32_t uid, uint32_t gid, struct strata_attr *ret_attr);
/* Creates a regular file and opens it (a session) in one step. With
 * O_EXCL in flags an existing name is -EEXIST; otherwise an existing regular
 * file is opened (and truncated to 0 with O_TRUNC). */
int meta_create(struct meta_client *mc, strata_ino_t parent, const char *name, uint32_t mode,
		uint32_t uid, uint32_t gid, uint32_t flags, struct strata_attr *ret_attr,
		uint64_t *ret_session);
int meta_unlink(struct meta_client *mc, strata_ino_t parent, const char *name);
int meta_rmdir(struct meta_client *mc, strata_ino_t parent, const char *name);
/* flags: 0, RENAME_NOREPLACE or RENAME_EXCHANGE (linux/fs.h values). */
int meta_rename(struct meta_client *mc, strata_ino_t parent, const char *name,
		strata_ino_t newparent, const char *newname, uint32_t flags);
int meta_link(struct meta_client *mc, strata_ino_t ino, strata_ino_t newparent,
	      const char *newname, struct strata_attr *ret_attr);
int meta_symlink(struct meta_client *mc, strata_ino_t parent, const char *name,
		 const char *target, uint32_t uid, uint32_t gid, struct strata_attr *ret_attr);
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
int meta_setxattr(struct meta_client *mc, strata_ino_t ino, const char *name, const void *value,
		  size_t size, uint32_t flags);
/* With cap == 0 returns the value size; otherwise copies it and returns its
 * size, or -ERANGE if cap is too small; -ENODATA if absent. */
int meta_getxattr(struct meta_client *mc, strata_ino_t ino, const char *name, void *buf,
		  size_t cap);
/* NUL-separated names, same size convention as getxattr. */
int meta_listxattr(struct meta_client *mc, strata_ino_t ino, char *buf, size_t cap);
int meta_removexattr(struct meta_client *mc, strata_ino_t ino, const char *name);

/* Opens a session on a regular file (flags as open(2); O_TRUNC truncates the
 * recorded length to 0). An unlinked file keeps its data while a session is
 * open. */
int meta_open(struct meta_client *mc, strata_ino_t ino, uint32_t flags, uint64_t *ret_session);
/* Closes a session; if length >= 0 it is first recorded as with
 * meta_set_length. */
int meta_close(struct meta_client *mc, strata_ino_t ino, uint64_t session, int64_t length,
	       int64_t mtime_ns);
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

/* ---- cluster management ------------------------------------------------- */
struct mgmt_target_info {
	uint32_t target_id; /* 0 = assign a new id */
	char path[256];     /* informational */
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
int mgmt_heartbeat(struct meta_client *mc, uint32_t node_id,
		   const struct mgmt_target_info *targets, int ntargets);
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
	uint8_t alive;  /* within the lease */
};
struct mgmt_target_detail {
	uint32_t target_id, node_id, chain_id; /* chain 0: spare, in no chain */
	uint8_t state;                         /* enum strata_target_state */
	char path[256];
	uint64_t total_bytes, free_bytes;
	uint64_t sync_done, sync_total; /* resync progress while syncing */
};
struct mgmt_cluster {
	uint32_t lease_ms, replicas, expect_nodes;
	uint32_t nnodes, ntargets;
	struct mgmt_node_info *nodes;       /* heap, mgmt_cluster_done */
	struct mgmt_target_detail *targets; /* heap, mgmt_cluster_done */
};
int mgmt_cluster(struct meta_client *mc, struct mgmt_cluster *ret);
void mgmt_cluster_done(struct mgmt_cluster *c);
