/* ns-internal.h — what the files of the meta engine share: the key schema,
 * the value records, the engine struct and the helpers every operation uses.
 * Not for use outside meta/. The schema is described in README.md.
 *
 * Invariants (checked by tests/meta/test_meta_ns.c):
 *  1. Every dentry D(parent,name) points at an existing inode I(ino) whose
 *     type bits match the dentry's; a directory has exactly one dentry and
 *     I(dir).parent names the directory holding it (root: itself).
 *  2. nlink of a directory = 2 + number of directory entries that are
 *     directories; nlink of anything else = number of dentries naming it.
 *  3. An inode with nlink 0 exists only while it has sessions; it then has
 *     an orphan marker O(ino). When its last session closes (or its last
 *     link goes with no session open) the inode, its xattrs and symlink
 *     target are deleted and a regular file is queued in G(ino) in the same
 *     batch.
 *  4. Every session S(ino,sid) has a client index U(client,ino,sid) and the
 *     reverse.
 *  5. Counters M(*) are updated in the batch of the mutation that consumes
 *     them, so ids are never reused across restarts.
 *  6. Mutations hold ns->mu from their first read to kv_write.
 *  7. Every operation record R(conn,unique) has its age entry
 *     Q(time,conn,unique) and the reverse (ns->opids, counted at open, is
 *     their number). A record is written in the batch of the mutation it
 *     answers and only for a success (ns_opid.c). */
#pragma once
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include "meta/kv.h"
#include "meta/ns.h"
#include "meta/sbnodes.h"
#include "fs/wire.h"

struct ns_live {
	uint32_t node_id; /* or target id (probes) */
	int64_t heard_ms;
};
#define NS_PROBE_SLOTS 256

/* key tags: first byte of every key */
enum {
	K_COUNTER = 'M', /* M name                     -> u64 */
	K_INODE = 'I',	 /* I ino(be64)                -> inode record */
	K_DENTRY = 'D',	 /* D parent(be64) name        -> dentry record */
	K_XATTR = 'X',	 /* X ino(be64) name           -> value bytes */
	K_SYMLINK = 'L', /* L ino(be64)                -> target bytes */
	K_SESSION = 'S', /* S ino(be64) sid(be64)      -> session record */
	K_CLIENT = 'U',	 /* U client 0x00 ino sid      -> empty */
	K_ORPHAN = 'O',	 /* O ino(be64)                -> empty */
	K_GC = 'G',	 /* G ino(be64)                -> gc record */
	K_NODE = 'N',	 /* N node(be32)               -> node record */
	K_TARGET = 'T',	 /* T target(be32)             -> target record */
	K_CHAIN = 'H',	 /* H chain(be32)              -> chain record */
	K_TABLE = 'B',	 /* B table(be32)              -> table record */
	K_OPID = 'R',	 /* R conn(be64) unique(be64)  -> operation record */
	K_OPAGE = 'Q',	 /* Q time(be64) conn unique   -> empty: records oldest first */
};
#define REC_VERSION 1

#define KEY_MAX (1 + NS_CLIENT_ID_MAX + 1 + 8 + 8 + STRATA_NAME_MAX + 8)
struct key {
	uint8_t b[KEY_MAX];
	size_t len;
};

void key_init(struct key *k, uint8_t tag);
void key_u64(struct key *k, uint64_t v);
void key_u32(struct key *k, uint32_t v);
void key_str(struct key *k, const char *s);
uint64_t key_get_u64(const uint8_t *p);
uint32_t key_get_u32(const uint8_t *p);
/* Common shapes. */
void key_id(struct key *k, uint8_t tag, uint32_t id); /* N, T, H, B: tag id(be32) */
void key_ino(struct key *k, uint8_t tag, uint64_t ino);
void key_dentry(struct key *k, uint64_t parent, const char *name);
void key_named(struct key *k, uint8_t tag, uint64_t ino, const char *name);
void key_session(struct key *k, uint64_t ino, uint64_t sid);
void key_client(struct key *k, const char *client, uint64_t ino, uint64_t sid);
void key_counter(struct key *k, const char *name);

/* An inode record: the attributes plus, for directories, the parent. */
struct inode {
	struct strata_attr a;
	uint64_t parent;
};
void inode_encode(const struct inode *in, struct wbuf *b);
int inode_decode(const uint8_t *p, size_t len, struct inode *ret);

struct dentry {
	uint64_t ino;
	uint32_t mode; /* type bits */
};

/* The namespace's other records (records.c). Decoders return 0 or -EIO (a
 * wrong length or version) and leave *ret alone on failure unless said. */
#define DENTRY_REC_LEN 13
void dentry_encode(const struct dentry *d, uint8_t ret[DENTRY_REC_LEN]); /* keeps type bits only */
int dentry_decode(const uint8_t *p, size_t len, struct dentry *ret);
#define COUNTER_REC_LEN 9
void counter_encode(uint64_t v, uint8_t ret[COUNTER_REC_LEN]);
int counter_decode(const uint8_t *p, size_t len, uint64_t *ret);
/* A session S(ino, sid): how it was opened, when, and by which client. */
struct session_rec {
	uint32_t flags;
	int64_t opened_ns;
	char client[NS_CLIENT_ID_MAX + 1];
};
void session_encode(uint32_t flags, int64_t opened_ns, const char *client, struct wbuf *b);
/* May fill *ret partly on failure. */
int session_decode(const uint8_t *p, size_t len, struct session_rec *ret);
/* An operation record R(conn, unique): which mutation (its MSG_META_*
 * type), when, and what it answered: the attributes of the inode it made
 * or linked (type mknod, mkdir, symlink, link, create) and the session it
 * opened (create, open). */
struct opid_rec {
	uint16_t type;
	int64_t done_ns;
	struct ns_answer a;
};
void opid_encode(const struct opid_rec *o, struct wbuf *b);
int opid_decode(const uint8_t *p, size_t len, struct opid_rec *ret);
void key_opid(struct key *k, const struct meta_opid *op);
void key_opage(struct key *k, int64_t done_ns, const struct meta_opid *op);
/* A GC queue entry G(ino): what the collector needs once the inode is gone. */
#define GC_REC_LEN 21
void gc_encode(const struct inode *in, uint8_t ret[GC_REC_LEN]);
int gc_decode(const uint8_t *p, size_t len, struct ns_gc_item *ret); /* not ret->ino (the key's) */

/* A chain table and its replication factor (tables.c keeps them in memory:
 * layouts resolve a factor to its newest table on every create). */
struct ns_table {
	uint32_t table_id;
	uint8_t replicas;
};

struct ns {
	struct kv *kv;
	pthread_mutex_t mu; /* serializes mutations (invariant 6) */
	uint64_t next_ino, next_session, next_gen;
	_Atomic uint64_t inodes; /* used inodes, read by statfs without mu */
	uint32_t next_node, next_target, next_chain, next_table;
	uint32_t newest_table; /* the default factor's newest table; 0: no chain table yet */
	/* chain tables and their factors, and the newest table of each factor
	 * (0: none); under mu, loaded by ns_open */
	struct ns_table *tables;
	uint32_t ntables, captables;
	uint32_t factor_table[STRATA_MAX_REPLICAS + 1];
	uint64_t routing_version;
	_Atomic uint64_t dirty; /* batches written since the last sync */
	/* replication (chainmap.c): options and in-memory liveness */
	uint32_t lease_ms, replicas, expect_nodes;
	pthread_mutex_t live_mu; /* guards the two arrays below */
	struct ns_live *live;	 /* node -> last heartbeat (monotonic ms) */
	uint32_t nlive, caplive;
	struct ns_prog *prog; /* target -> resync progress */
	uint32_t nprog, capprog;
	struct sbnodes *sbnodes;	       /* sandbox node leases (sbnodes.h), own lock */
	struct ns_live probes[NS_PROBE_SLOTS]; /* target -> last probe (ms); see ns_probe_due */
	/* operation records (ns_opid.c), under mu: how many (counted at
	 * open), their limits, and the age key the last expiry stopped
	 * after (so it does not walk the deleted keys again) */
	uint64_t opids;
	uint32_t opid_max;
	int64_t opid_ttl_ns;
	int64_t opid_last_ns;		/* the newest record's time */
	_Atomic uint64_t opid_answered; /* mutations answered from their record */
	struct key opid_cursor;
};

struct ns_prog {
	uint32_t target_id;
	uint64_t done, total;
};

int64_t ns_now(void);
void ns_lock(struct ns *ns);
void ns_unlock(struct ns *ns);
/* Cleanup helper: `_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);` */
static inline struct ns *ns_locked(struct ns *ns)
{
	ns_lock(ns);
	return ns;
}
static inline void ns_unlockp(struct ns **ns)
{
	if (*ns)
		ns_unlock(*ns);
}
#define _cleanup_nsunlock_ __attribute__((cleanup(ns_unlockp), unused))

/* Reads inode ino: 0, -ENOENT, -EIO. */
int ns_get_inode(struct ns *ns, uint64_t ino, struct inode *ret);
/* Reads inode ino and requires a directory: also -ENOTDIR. */
int ns_get_dir(struct ns *ns, uint64_t ino, struct inode *ret);
int ns_get_dentry(struct ns *ns, uint64_t parent, const char *name, struct dentry *ret);
void ns_put_inode(struct kv_batch *b, const struct inode *in);
void ns_put_dentry(struct kv_batch *b, uint64_t parent, const char *name, const struct dentry *d);
void ns_put_counter(struct kv_batch *b, const char *name, uint64_t v);
int ns_get_counter(struct ns *ns, const char *name, uint64_t *ret);
/* kv_write and bookkeeping (dirty count). */
int ns_commit(struct ns *ns, struct kv_batch *b);
/* One mutation (ns_opid.c): under mu, answers op from its record if it was
 * carried out already; else build adds the mutation to b and fills *ret
 * (returning 0 or -errno), op's record of *ret is added, and b is
 * committed. ret may be NULL. */
typedef int (*ns_build_fn)(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret);
int ns_mutate(struct ns *ns, const struct meta_opid *op, uint16_t type, ns_build_fn build,
	      void *arg, struct ns_answer *ret);
/* Loads the record count and limits (ns_open). */
int ns_opid_load(struct ns *ns);
/* Adds deletes for every key under prefix. */
int ns_batch_del_prefix(struct ns *ns, struct kv_batch *b, const struct key *prefix);
/* True if any key starts with prefix (0/1 or -errno). */
int ns_prefix_any(struct ns *ns, const struct key *prefix);
/* Drops one link of in (already loaded, dentry removal is the caller's):
 * nlink--, and when it reaches 0 either orphans it (sessions open) or
 * deletes it and queues GC. Adds everything to b. */
int ns_drop_link(struct ns *ns, struct kv_batch *b, struct inode *in);
/* Deletes inode in and everything hanging off it; queues a regular file
 * for GC. */
int ns_destroy_inode(struct ns *ns, struct kv_batch *b, const struct inode *in);
uint32_t ns_stripe_seed(uint64_t ino);
/* Name and type checks shared by the entry operations. */
static inline bool mode_is_dir(uint32_t m)
{
	return (m & 0170000) == 0040000;
}
static inline bool mode_is_reg(uint32_t m)
{
	return (m & 0170000) == 0100000;
}
/* Adds a session on ino for client to b; *ret_sid gets its id (consumes
 * the next_session counter). */
void ns_add_session(struct ns *ns, struct kv_batch *b, uint64_t ino, uint32_t flags,
		    const char *client, uint64_t *ret_sid);
/* 0 if directory ino has no entries, -ENOTEMPTY, or -errno. */
int ns_dir_empty(struct ns *ns, uint64_t ino);

/* Cluster map records (records.c; cluster.c, chainmap.c and tables.c use
 * them). Each cluster_put_* adds the record under its key to b. */
struct cluster_target {
	uint32_t target_id, node_id;
	uint8_t state;
	char path[256];
	char addr[64];
	uint64_t total_bytes, free_bytes;
	int64_t last_seen_ns;
	uint64_t fsid; /* appended to the record; absent = 0 (unknown) */
};
/* A node record: its address and when it was last seen (ns_now). */
void cluster_put_node(struct kv_batch *b, uint32_t id, const char *addr, int64_t now);
/* Decodes a target record's value (not target_id: that is the key's).
 * Returns 0 or -EIO. */
int cluster_target_decode(const uint8_t *p, size_t len, struct cluster_target *ret);
void cluster_put_target(struct kv_batch *b, const struct cluster_target *t);
/* Reads target id's record (cluster.c): 0, -ENOENT, -EIO, or -errno. */
int cluster_get_target(struct ns *ns, uint32_t id, struct cluster_target *ret);
/* Chain records carry c->want (the replication factor it was formed with)
 * after the target ids; records without it read as want = n. */
void cluster_put_chain(struct kv_batch *b, const struct strata_chain *c);
int cluster_chain_decode(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
			 struct strata_chain *c);
/* A table record: chain ids[0..n) in striping order, then factor r.
 * Returns 0 or the encoder's error (wbuf err, -ENOMEM). */
int cluster_put_table(struct kv_batch *b, uint32_t table_id, uint8_t r, const uint32_t *ids, int n);
/* Reads a table record up to its chain ids: *ret_n of them follow in b,
 * then (in a record written since factors were kept) the factor u8.
 * Returns 0 or -EIO. */
int cluster_table_decode(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, struct rbuf *b,
			 uint32_t *ret_n);

/* Chain tables per replication factor (tables.c). */
/* Adds to b a new chain table of replication factor r: the ids[0..n) (every
 * chain of that factor, in striping order). It becomes the factor's newest;
 * the root directory moves to it when the root had that factor or no table. */
int cluster_new_table(struct ns *ns, struct kv_batch *b, uint8_t r, const uint32_t *ids, int n);
/* Moves the root directory to the newest table of its factor (the default
 * table when it has none yet). */
int cluster_point_root(struct ns *ns, struct kv_batch *b);
/* Sets ns->newest_table to the default table (see tables.c). */
void ns_pick_default_table(struct ns *ns);
void cluster_put_counters(struct ns *ns, struct kv_batch *b);
/* Loads the tables and their factors into ns (ns_open); a table record
 * written before factors were recorded gets the smallest `want` of its
 * chains. */
int cluster_load_tables(struct ns *ns);
/* The replication factor of table id (0: unknown table). */
uint8_t ns_table_factor(const struct ns *ns, uint32_t table_id);
/* The table new files get for a parent whose table is table_id: the newest
 * table of the same factor, or the default table (ns->newest_table) when
 * the parent has none. Under mu, as every use of the table list. */
uint32_t ns_table_for(const struct ns *ns, uint32_t table_id);
/* The newest table of factor r, or 0. */
uint32_t ns_factor_table(const struct ns *ns, uint32_t r);

/* chainmap.c: the in-memory view of targets and chains a mutation edits. */
struct cmap;
int cmap_load(struct ns *ns, struct cmap **ret);
void cmap_free(struct cmap *m);
/* Inserts or updates a registering target (node, addr, path, sizes). */
int cmap_upsert_target(struct cmap *m, const struct cluster_target *t, bool *ret_fresh);
/* The node's targets ids[0..n) come back (restarted: it registered again). */
void cmap_node_up(struct cmap *m, uint32_t node_id, const uint32_t *ids, int n, bool restarted);
/* Takes every target of the node out of its chains (offline, at the end). */
void cmap_node_down(struct cmap *m, uint32_t node_id);
/* Puts targets in no chain into chains (replacements, then new chains). */
int cmap_place(struct ns *ns, struct cmap *m, struct kv_batch *b);
/* Writes changed records to b; returns true if anything routing-relevant changed. */
bool cmap_write(struct cmap *m, struct kv_batch *b);
void ns_live_touch(struct ns *ns, uint32_t node_id);
