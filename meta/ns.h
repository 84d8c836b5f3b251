/* ns.h — the strata-meta engine: namespace, open-file sessions, GC queue and
 * cluster map, stored in a kv.h store. The RPC layer (server.c) and the unit
 * tests call it directly; it never logs and never talks to the network.
 *
 * Every function returns 0 (or a count where stated) or a negative errno
 * with the meaning listed in fs/meta_client.h. Every mutation is one atomic
 * kv batch; mutations are serialized by one mutex per engine, reads take no
 * lock (see README.md, "Concurrency"). Thread-safe. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "fs/types.h"
#include "fs/meta_client.h"

struct ns;

#define NS_CLIENT_ID_MAX 64    /* bytes of a client id */
#define NS_READDIR_MAX 1024    /* entries per readdir call */
#define NS_XATTR_COUNT_MAX 256 /* xattrs per inode */
#define NS_MAX_TARGETS 64      /* targets per registering node */
#define NS_TOTAL_INODES (1ull << 40)

/* ---- operation ids (ns_opid.c; README.md "Operation ids") ----------------
 * The mutations below take the client's id of the operation (`op`, NULL or
 * conn 0: none). One that carries an id strata-meta has carried out already
 * is answered from its record instead of being done again: the same
 * attributes, session and success as the first time. The record is written
 * in the batch of the mutation (so it is exactly as durable), only for a
 * success (a failure changed nothing: doing it again is a valid answer to
 * a request whose first answer was never seen), and kept NS_OPID_TTL_MS,
 * at most NS_OPID_MAX of them (the oldest go first; ns_opid_expire). */
#define NS_OPID_TTL_MS (3600ll * 1000) /* an hour: a takeover long after a crash */
#define NS_OPID_MAX (1u << 20)	       /* records kept, ~100 bytes each */
/* What a mutation answered (ns_mutate): the new or linked inode's
 * attributes, the session it opened. */
struct ns_answer {
	struct strata_attr attr;
	uint64_t session;
	/* unlink and rmdir: the parent after the removal (attr is the removed
	 * inode's, nlink counting the links left). Not kept in the operation's
	 * record: an answer from the record has attr.ino 0 (unknown). */
	struct strata_attr parent;
	/* rename: attr is the moved inode's, other the replaced (or exchanged)
	 * one's when has_other, parent and newparent the directories after */
	bool has_other;
	struct strata_attr other, newparent;
};
/* Limits of the records (tests): at most max, for ttl_ms. Returns 0 or -EINVAL. */
int ns_set_opid_limits(struct ns *ns, uint32_t max, int64_t ttl_ms);
/* Removes the records past their time or beyond the limit, the oldest
 * first, in batches that each hold the mutation lock briefly. Returns how
 * many went, or -errno. */
int ns_opid_expire(struct ns *ns);
/* Records kept now. */
uint64_t ns_opid_count(struct ns *ns);
/* Mutations answered from their record since the engine opened. */
uint64_t ns_opid_answered(struct ns *ns);

/* Opens the engine on the store in directory dir (created if missing; the
 * root directory, inode 1, is created on first open). why[why_cap] gets a
 * text on failure. Owned by the caller; free with ns_close. */
int ns_open(const char *dir, struct ns **ret, char *why, size_t why_cap);
void ns_close(struct ns *ns);
/* Makes every acknowledged mutation durable. */
int ns_sync(struct ns *ns);
/* Syncs only if something was written since the last sync (the timer). */
int ns_sync_if_dirty(struct ns *ns);

int ns_lookup(struct ns *ns, strata_ino_t parent, const char *name, struct strata_attr *ret);
int ns_getattr(struct ns *ns, strata_ino_t ino, struct strata_attr *ret);
int ns_setattr(struct ns *ns, strata_ino_t ino, const struct strata_setattr *sa,
	       struct strata_attr *ret);
int ns_mknod(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	     uint32_t mode, uint64_t rdev, uint32_t uid, uint32_t gid, struct strata_attr *ret);
int ns_mkdir(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	     uint32_t mode, uint32_t uid, uint32_t gid, struct strata_attr *ret);
int ns_symlink(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	       const char *target, uint32_t uid, uint32_t gid, struct strata_attr *ret);
/* create + open in one batch (see meta_create). */
int ns_create(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	      uint32_t mode, uint32_t uid, uint32_t gid, uint32_t flags, const char *client_id,
	      struct strata_attr *ret, uint64_t *ret_session);
int ns_unlink(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name);
/* ns_unlink (dir false) or ns_rmdir (dir true), answering the removed inode
 * and the parent as they are after it (see struct ns_answer). */
int ns_remove(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	      bool dir, struct ns_answer *ret);
int ns_rmdir(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name);
/* ns_rename, answering what it changed (struct ns_answer; attr.ino 0 when
 * it changed nothing: the same inode under both names). */
int ns_rename_answer(struct ns *ns, const struct meta_opid *op, strata_ino_t parent,
		     const char *name, strata_ino_t newparent, const char *newname, uint32_t flags,
		     struct ns_answer *ret);
int ns_rename(struct ns *ns, const struct meta_opid *op, strata_ino_t parent, const char *name,
	      strata_ino_t newparent, const char *newname, uint32_t flags);
int ns_link(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, strata_ino_t newparent,
	    const char *newname, struct strata_attr *ret);
/* Copies the target NUL-terminated into buf[cap]; returns its length or
 * -ERANGE. */
int ns_readlink(struct ns *ns, strata_ino_t ino, char *buf, size_t cap);

/* Calls fn for up to max (<= NS_READDIR_MAX) entries of directory ino after
 * name `after`, in name order; d->attr is filled when want_attrs. Sets
 * *ret_more when more entries follow. Returns the count. */
typedef int (*ns_dirent_fn)(void *ctx, const struct meta_dirent *d);
int ns_readdir(struct ns *ns, strata_ino_t ino, const char *after, bool want_attrs, int max,
	       ns_dirent_fn fn, void *ctx, int *ret_more);
int ns_statfs(struct ns *ns, struct strata_statfs *ret);

int ns_setxattr(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, const char *name,
		const void *value, size_t size, uint32_t flags);
/* Returns 0 and a malloc'd value (owned by the caller). */
int ns_getxattr(struct ns *ns, strata_ino_t ino, const char *name, void **ret_val, size_t *ret_len);
/* Returns 0 and a malloc'd NUL-separated name list (owned by the caller). */
int ns_listxattr(struct ns *ns, strata_ino_t ino, char **ret_list, size_t *ret_len);
int ns_removexattr(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, const char *name);

/* Sessions: see README.md, "Sessions". */
int ns_open_file(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, uint32_t flags,
		 const char *client_id, uint64_t *ret_session);
/* Closes items[0..n) as ns_close_file would, in one commit (or a few: two
 * sessions of one inode commit apart), results[i] each one's answer.
 * Returns 0, or the store's error (then none is known closed). */
int ns_close_files(struct ns *ns, const struct meta_close_item *items, uint32_t n, int *results);
int ns_close_file(struct ns *ns, strata_ino_t ino, uint64_t session, int64_t length,
		  int64_t mtime_ns);
/* Closes every session of client_id; returns how many. */
int ns_clear_sessions(struct ns *ns, const char *client_id);
int ns_set_length(struct ns *ns, strata_ino_t ino, uint64_t length, int64_t mtime_ns);
/* Number of open sessions on ino (tests, fsck). */
int ns_session_count(struct ns *ns, strata_ino_t ino);

/* GC queue: inodes whose last link and last session are gone. */
struct ns_gc_item {
	strata_ino_t ino;
	uint64_t size;
	struct strata_layout layout;
};
/* Fills up to max queued items; returns the count. */
int ns_gc_list(struct ns *ns, struct ns_gc_item *items, int max);
/* Same, in inode order from the first queued inode > after (0: the first). */
int ns_gc_list_after(struct ns *ns, strata_ino_t after, struct ns_gc_item *items, int max);
/* Removes ino from the queue (its chunks are gone). */
int ns_gc_done(struct ns *ns, strata_ino_t ino);
/* Removes n inodes from the queue in one write batch. Returns 0 or -errno. */
int ns_gc_done_many(struct ns *ns, const strata_ino_t *inos, int n);

/* Cluster map: see README.md, "Cluster map". */
int ns_register(struct ns *ns, uint32_t *node_id, const char *addr,
		struct mgmt_target_info *targets, int ntargets);
int ns_heartbeat(struct ns *ns, uint32_t node_id, const struct mgmt_target_info *targets,
		 int ntargets);
/* Fills *ret with heap arrays; release with strata_routing_done. */
int ns_routing(struct ns *ns, struct strata_routing *ret);

/* ---- replication (chainmap.c; README.md "Chains and failures") ---------- */
#define NS_DEFAULT_LEASE_MS 3000
#define NS_DEFAULT_REPLICAS 3
/* lease_ms: a node silent that long is taken out of its chains (>= 200).
 * replicas: the default replication factor (1..STRATA_MAX_REPLICAS): the
 * root's and so of directories that set none (see tables.c); chains of every
 * factor 1..min(5, nodes) are formed (chainmap.c).
 * expect_nodes: no chain is formed before that many nodes registered (>= 1).
 * Call before serving. Returns 0 or -EINVAL. */
int ns_set_cluster_opts(struct ns *ns, uint32_t lease_ms, uint32_t replicas, uint32_t expect_nodes);
/* The sandbox node table (sbnodes.h; leases of lease_ms), owned by ns. */
struct sbnodes *ns_sbnodes(struct ns *ns);
/* Takes out of their chains the nodes whose lease ran out; returns how many. */
int ns_lease_check(struct ns *ns);
/* True if target_id was not probed in the last NS_PROBE_EVERY_MS (and
 * records this probe): failure reports of one target cost one probe. */
#define NS_PROBE_EVERY_MS 1000
bool ns_probe_due(struct ns *ns, uint32_t target_id);
/* Fails the node holding target_id at once (a probe of it failed). */
int ns_fail_target_node(struct ns *ns, uint32_t target_id);
/* Resync progress or completion (see mgmt_sync_done). */
int ns_sync_done(struct ns *ns, const struct mgmt_sync *s);
/* The admin view; release with mgmt_cluster_done. */
int ns_cluster(struct ns *ns, struct mgmt_cluster *ret);

/* ---- fsck (fsck.c; README.md "fsck") -------------------------------------- */
/* Checks the store on a snapshot (no lock: mutations go on); with
 * META_FSCK_REPAIR then repairs under the mutation lock what a re-scan of
 * the current state still finds. *ret: totals per kind and up to
 * META_FSCK_MAX_RECORDS records, findings first, then repairs
 * (meta_fsck_report_done). -EFBIG past the inodes one check can hold. */
int ns_fsck(struct ns *ns, uint32_t flags, struct meta_fsck_report *ret);
/* Removes the chunks of ino with index >= first_index on every chain of the
 * layout's table (MSG_CHUNK_REMOVE_FILE, as the GC does). */
typedef int (*ns_fsck_remove_fn)(void *ctx, const struct strata_layout *layout, strata_ino_t ino,
				 uint32_t first_index);
/* Fills the verdict of items[0..n) under the mutation lock; with
 * META_FSCK_REPAIR calls rm for every orphan before releasing it (rm must not
 * call back into the engine). Returns 0 or -errno. */
int ns_fsck_chunks(struct ns *ns, uint32_t flags, struct meta_fsck_chunk *items, uint32_t n,
		   ns_fsck_remove_fn rm, void *ctx);
/* Makes serving target target_id resync from the other serving replicas of
 * its chain (serving -> waiting -> syncing -> serving, as after a restart of
 * its node). -EBUSY if no other replica serves, -EALREADY if it is not
 * serving, -ENOENT if unknown. */
int ns_fsck_resync(struct ns *ns, uint32_t target_id, uint8_t *ret_state);
