/* types.h — the values that cross process boundaries: inode attributes,
 * file layouts, the routing table. Shared by meta, chunkserver and clients. */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

typedef uint64_t strata_ino_t;
#define STRATA_ROOT_INO 1ull
#define STRATA_NAME_MAX 255
#define STRATA_PATH_MAX 4096
#define STRATA_XATTR_NAME_MAX 255
#define STRATA_XATTR_SIZE_MAX 65536
#define STRATA_DEFAULT_CHUNK_SIZE (1u << 20)
#define STRATA_MIN_CHUNK_SIZE (64u << 10)
#define STRATA_MAX_CHUNK_SIZE (64u << 20)

/* Where a file's bytes live. Chunk i of a file is stored on chain
 * chain_of(layout, i) (see layout_chain_for_chunk in layout.h). The layout is
 * fixed when the file is created, inherited from its directory. */
struct strata_layout {
	uint32_t chunk_size;  /* power of two, STRATA_MIN..MAX_CHUNK_SIZE */
	uint32_t table_id;    /* chain table the file is striped over */
	uint32_t stripe_seed; /* first chain index; spreads files over chains */
};

struct strata_attr {
	strata_ino_t ino;
	uint32_t mode; /* S_IFMT type bits | permission bits */
	uint32_t nlink;
	uint32_t uid, gid;
	uint64_t size;
	uint64_t rdev;
	int64_t atime_ns, mtime_ns, ctime_ns; /* since the epoch */
	uint64_t generation;		      /* bumps when an inode number is reused */
	struct strata_layout layout;	      /* regular files and directories */
};

/* setattr: which fields of struct strata_setattr to apply. */
enum {
	STRATA_SET_MODE = 1 << 0,
	STRATA_SET_UID = 1 << 1,
	STRATA_SET_GID = 1 << 2,
	STRATA_SET_SIZE = 1 << 3,
	STRATA_SET_ATIME = 1 << 4,
	STRATA_SET_MTIME = 1 << 5,
	STRATA_SET_ATIME_NOW = 1 << 6,
	STRATA_SET_MTIME_NOW = 1 << 7,
	STRATA_SET_CTIME = 1 << 8,
	STRATA_SET_LAYOUT = 1 << 9,    /* directories only: chunk_size for new files */
	STRATA_SET_REPLICAS = 1 << 10, /* directories only: replication factor for new files */
};
struct strata_setattr {
	uint32_t valid;
	uint32_t mode, uid, gid;
	uint64_t size;
	int64_t atime_ns, mtime_ns, ctime_ns;
	uint32_t chunk_size;
	uint32_t replicas; /* STRATA_SET_REPLICAS: 1..STRATA_MAX_REPLICAS */
};

struct strata_statfs {
	uint64_t total_bytes, free_bytes, avail_bytes;
	uint64_t total_inodes, used_inodes;
	uint32_t bsize, namemax;
};

/* ---- routing: targets and chains ---------------------------------------
 * A target is one directory on one chunkserver's disk. A chain is an ordered
 * list of targets (head first) holding the same chunks; with one replica a
 * chain has one target. A chain table is the list of chains a layout stripes
 * over; strata-meta keeps tables per replication factor (every chain of a
 * table was formed with the table's factor). Versions let a cached copy be
 * recognised as stale. */
#define STRATA_MAX_REPLICAS 5

enum strata_target_state {
	TARGET_SERVING = 0,
	TARGET_SYNCING = 1,
	TARGET_WAITING = 2,
	TARGET_OFFLINE = 3,
};

struct strata_target {
	uint32_t target_id;
	uint32_t node_id;
	uint8_t state; /* enum strata_target_state */
	char addr[64]; /* chunkserver "host:port" */
};

struct strata_chain {
	uint32_t chain_id;
	uint32_t version;
	uint8_t ntargets;
	uint32_t targets[STRATA_MAX_REPLICAS]; /* target ids, head first */
	uint8_t want; /* replication factor it was formed with (0: unknown, old peer) */
};

struct strata_chain_table {
	uint32_t table_id;
	uint32_t nchains;
	uint32_t *chain_ids; /* chain ids in striping order */
	uint8_t replicas;    /* replication factor of its chains (0: unknown, old peer) */
};

/* The whole routing table as fetched from strata-meta. */
struct strata_routing {
	uint64_t version;  /* bumps on any change */
	uint32_t lease_ms; /* node lease of strata-meta (0 from an old server) */
	uint32_t ntargets, nchains, ntables;
	struct strata_target *targets;
	struct strata_chain *chains;
	struct strata_chain_table *tables;
};
