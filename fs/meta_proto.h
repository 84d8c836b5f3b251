/* meta_proto.h — payloads of the strata-meta messages (MSG_META_*,
 * MSG_MGMT_* in proto.h): one request struct for every namespace message,
 * one for the management messages, and codecs for the replies. Encoders and
 * decoders are hand-written with wbuf/rbuf (wire.h); fields are appended,
 * never reordered, so a newer minor version stays readable.
 *
 * Which request fields each message carries is listed next to
 * meta_req_encode in meta_proto.c. Decoders never read past the payload and
 * return -EBADMSG on any malformed input (fuzzed by tests/meta/fuzz_meta_proto.c). */
#pragma once
#include <stdbool.h>
#include <stdint.h>
#include "fs/types.h"
#include "fs/wire.h"
#include "fs/meta_client.h"

#define META_CLIENT_ID_MAX 64
#define MGMT_MAX_TARGETS 64
#define META_READDIR_MAX 1024
/* MSG_META_OPEN with ino 0 and this flag closes every session of the
 * request's client_id (a fresh mount clears its predecessor's sessions).
 * The reply's session field holds the number closed. */
#define META_OPEN_CLEAR_SESSIONS 0x80000000u

struct meta_req {
	uint64_t ino, parent, newparent, session, rdev, length;
	int64_t slength, mtime_ns; /* close: length (-1 none); mtime (-1 none) */
	uint32_t mode, uid, gid, flags, max;
	bool want_attrs;
	char name[STRATA_NAME_MAX + 1], newname[STRATA_NAME_MAX + 1];
	char client_id[META_CLIENT_ID_MAX + 1];
	char target[STRATA_PATH_MAX + 1]; /* symlink target; readdir "after" */
	struct strata_setattr sa;
	const void *value; /* setxattr: points into the request buffer */
	uint32_t value_len;
	struct meta_opid op; /* mutations: the operation id (conn 0: none) */
};

/* Returns 0, -EINVAL for a type that is not a namespace message, or the
 * wbuf's error. */
int meta_req_encode(uint16_t type, const struct meta_req *r, struct wbuf *b);
/* Returns 0, -EINVAL (unknown type) or -EBADMSG. ret->value points into b. */
int meta_req_decode(uint16_t type, struct rbuf *b, struct meta_req *ret);

/* MSG_MGMT_REGISTER / MSG_MGMT_HEARTBEAT request. */
struct mgmt_req {
	uint32_t node_id;
	char addr[64];
	int ntargets;
	struct mgmt_target_info targets[MGMT_MAX_TARGETS];
};
int mgmt_req_encode(uint16_t type, const struct mgmt_req *r, struct wbuf *b);
int mgmt_req_decode(uint16_t type, struct rbuf *b, struct mgmt_req *ret);
/* Register reply: the node id and the target ids in request order. */
void mgmt_register_reply_put(struct wbuf *b, uint32_t node_id, const uint32_t *ids, int n);
int mgmt_register_reply_get(struct rbuf *b, uint32_t *ret_node_id, uint32_t *ids, int n);

/* MSG_META_CLOSE_MANY request: n u32 (1..META_CLOSE_MANY_MAX), then per
 * item ino u64, session u64, length i64, mtime i64. Reply: n u32, then a
 * status per item (u32: 0 or a negative errno). The getters return 0 or
 * -EBADMSG. */
void meta_close_many_put(struct wbuf *b, const struct meta_close_item *items, uint32_t n);
int meta_close_many_get(struct rbuf *b, struct meta_close_item *items, uint32_t *ret_n);
void meta_close_many_reply_put(struct wbuf *b, const int *results, uint32_t n);
int meta_close_many_reply_get(struct rbuf *b, int *results, uint32_t n);

/* Reply pieces. The getters return 0 or -EBADMSG (rbuf_done checked). */
void meta_attr_put(struct wbuf *b, const struct strata_attr *a);
void meta_attr_read(struct rbuf *b, struct strata_attr *a); /* no rbuf_done */
int meta_attr_get(struct rbuf *b, struct strata_attr *a);
void meta_statfs_put(struct wbuf *b, const struct strata_statfs *s);
int meta_statfs_get(struct rbuf *b, struct strata_statfs *s);

/* Readdir reply: u32 count, u8 more, u8 with_attrs, then entries. The
 * server writes the header with meta_readdir_begin, each entry with
 * meta_readdir_put and patches count/more with meta_readdir_end. */
size_t meta_readdir_begin(struct wbuf *b, bool with_attrs);
void meta_readdir_put(struct wbuf *b, const struct meta_dirent *d, bool with_attrs);
void meta_readdir_end(struct wbuf *b, size_t hdr_off, uint32_t count, bool more);
/* Decodes at most max entries; returns the count or -EBADMSG. */
int meta_readdir_get(struct rbuf *b, struct meta_dirent *ents, int max, int *ret_more);

/* Routing: version, targets, chains, tables, then appended sections older
 * peers stop before: lease_ms u32; tables' replicas (n u32, u8 each) and
 * chains' want (n u32, u8 each), read as 0 when absent. */
void meta_routing_put(struct wbuf *b, const struct strata_routing *r);
/* MSG_MGMT_REPORT: target id u32. MSG_MGMT_SYNC_DONE: chain u32, chain ver
 * u32, target u32, done u64, total u64, finished u8. MSG_MGMT_NODES reply:
 * lease_ms, replicas, expect_nodes u32; nodes (n u32; id u32, addr str,
 * age_ms i64, alive u8); targets (n u32; id, node, chain u32, state u8,
 * path str, total, free, sync_done, sync_total u64). All return 0 or
 * -EBADMSG. */
void mgmt_sync_put(struct wbuf *b, const struct mgmt_sync *s);
int mgmt_sync_get(struct rbuf *b, struct mgmt_sync *ret);
void mgmt_cluster_put(struct wbuf *b, const struct mgmt_cluster *c);
int mgmt_cluster_get(struct rbuf *b, struct mgmt_cluster *ret);
/* Fills *ret with heap arrays (strata_routing_done) or returns -EBADMSG /
 * -ENOMEM with *ret untouched. */
int meta_routing_get(struct rbuf *b, struct strata_routing *ret);

/* Checks a single path component. Returns 0, -EINVAL (empty, contains '/',
 * "." or "..") or -ENAMETOOLONG (> STRATA_NAME_MAX bytes). */
int meta_name_check(const char *name);

/* fsck. MSG_META_FSCK request: flags u32 (META_FSCK_REPAIR), max u32
 * (records wanted, clamped to META_FSCK_MAX_RECORDS). Reply: inodes, dirs,
 * files, dentries, sessions, orphans, gc_queued u64; nkinds u32 then
 * (found u32, repaired u32) per kind 1..nkinds; n u32, truncated u8, then n
 * records (kind u16, repaired u8, ino, parent, expected, actual u64, name
 * str). A decoder reads the kinds it knows and skips the others.
 * MSG_META_FSCK_CHUNKS request: flags u32, n u32 (<= META_FSCK_CHUNKS_MAX),
 * n x (ino u64, index u32, table u32). Reply: n u32, n x (verdict u8,
 * removed u8, err i32, first_orphan u32, size u64). All return 0 or
 * -EBADMSG (-ENOMEM for the report's records). */
void meta_fsck_req_put(struct wbuf *b, uint32_t flags, uint32_t max);
int meta_fsck_req_get(struct rbuf *b, uint32_t *ret_flags, uint32_t *ret_max);
void meta_fsck_report_put(struct wbuf *b, const struct meta_fsck_report *r);
int meta_fsck_report_get(struct rbuf *b, struct meta_fsck_report *ret);
void meta_fsck_chunks_req_put(struct wbuf *b, uint32_t flags, const struct meta_fsck_chunk *c,
			      uint32_t n);
/* *ret_items: heap array of *ret_n items (free()). */
int meta_fsck_chunks_req_get(struct rbuf *b, uint32_t *ret_flags,
			     struct meta_fsck_chunk **ret_items, uint32_t *ret_n);
void meta_fsck_chunks_reply_put(struct wbuf *b, const struct meta_fsck_chunk *c, uint32_t n);
/* Fills the reply fields of c[0..n) (n must match the reply). */
int meta_fsck_chunks_reply_get(struct rbuf *b, struct meta_fsck_chunk *c, uint32_t n);
