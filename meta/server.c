/* server.c — dispatch of strata-meta requests to the engine.
 *
 * Namespace messages are decoded into one struct meta_req (meta_proto.h) and
 * dispatched through a table indexed by type - MSG_META_PING; each entry is
 * a short function that calls ns_* and encodes the reply. Management
 * messages have their own request struct (heap: it holds up to 64 targets). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fs/chunk_proto.h"
#include "fs/cleanup.h"
#include "fs/layout.h"
#include "fs/log.h"
#include "fs/rpc.h"
#include "fs/meta_proto.h"
#include "meta/ns.h"
#include "fs/proto.h"
#include "meta/sbnodes.h"
#include "meta/server.h"
#include "fs/sbnode_proto.h"

typedef int (*op_fn)(struct ns *ns, const struct meta_req *q, struct wbuf *w);

static int attr_reply(int r, const struct strata_attr *a, struct wbuf *w)
{
	if (r == 0)
		meta_attr_put(w, a);
	return r;
}

static int op_ping(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return 0;
}

static int op_lookup(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;

	return attr_reply(ns_lookup(ns, q->parent, q->name, &a), &a, w);
}

static int op_getattr(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;

	return attr_reply(ns_getattr(ns, q->ino, &a), &a, w);
}

static int op_setattr(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;

	return attr_reply(ns_setattr(ns, q->ino, &q->sa, &a), &a, w);
}

static int op_mknod(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;
	int r = ns_mknod(ns, &q->op, q->parent, q->name, q->mode, q->rdev, q->uid, q->gid, &a);

	return attr_reply(r, &a, w);
}

static int op_mkdir(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;

	return attr_reply(ns_mkdir(ns, &q->op, q->parent, q->name, q->mode, q->uid, q->gid, &a), &a,
			  w);
}

static int op_create(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;
	uint64_t sid;
	int r = ns_create(ns, &q->op, q->parent, q->name, q->mode, q->uid, q->gid, q->flags,
			  q->client_id, &a, &sid);

	if (r == 0) {
		meta_attr_put(w, &a);
		wbuf_put_u64(w, sid);
	}
	return r;
}

/* unlink and rmdir answer the removed inode and the parent as they are
 * after the removal (wire minor 3), or nothing when the answer comes from
 * the operation's record (a resent request): the client then knows less. */
static int remove_reply(struct ns *ns, const struct meta_req *q, bool dir, struct wbuf *w)
{
	struct ns_answer a = {0};
	int r = ns_remove(ns, &q->op, q->parent, q->name, dir, &a);

	if (r == 0 && a.attr.ino != 0) {
		meta_attr_put(w, &a.attr);
		meta_attr_put(w, &a.parent);
	}
	return r;
}

static int op_unlink(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return remove_reply(ns, q, false, w);
}

static int op_rmdir(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return remove_reply(ns, q, true, w);
}

/* rename answers what it changed (as unlink does): the moved inode, the
 * old and the new parent, a u8 saying whether an inode was replaced (or
 * exchanged) and then that one; nothing from a record or for a no-op. */
static int op_rename(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct ns_answer a = {0};
	int r = ns_rename_answer(ns, &q->op, q->parent, q->name, q->newparent, q->newname, q->flags,
				 &a);

	if (r == 0 && a.attr.ino != 0) {
		meta_attr_put(w, &a.attr);
		meta_attr_put(w, &a.parent);
		meta_attr_put(w, &a.newparent);
		wbuf_put_u8(w, a.has_other);
		if (a.has_other)
			meta_attr_put(w, &a.other);
	}
	return r;
}

static int op_link(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;

	return attr_reply(ns_link(ns, &q->op, q->ino, q->newparent, q->newname, &a), &a, w);
}

static int op_symlink(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_attr a;
	int r = ns_symlink(ns, &q->op, q->parent, q->name, q->target, q->uid, q->gid, &a);

	return attr_reply(r, &a, w);
}

static int op_readlink(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	char buf[STRATA_PATH_MAX + 1];
	int r = ns_readlink(ns, q->ino, buf, sizeof(buf));

	if (r >= 0)
		wbuf_put_str(w, buf);
	return r < 0 ? r : 0;
}

struct rd_reply {
	struct wbuf *w;
	bool attrs;
};

static int rd_put(void *ctx, const struct meta_dirent *d)
{
	struct rd_reply *c = ctx;

	meta_readdir_put(c->w, d, c->attrs);
	return c->w->err;
}

static int op_readdir(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct rd_reply c = {w, q->want_attrs};
	size_t off = meta_readdir_begin(w, q->want_attrs);
	int more = 0;
	int max = (int)STRATA_MIN(q->max ? q->max : META_READDIR_MAX, META_READDIR_MAX);
	int n = ns_readdir(ns, q->ino, q->target, q->want_attrs, max, rd_put, &c, &more);

	if (n < 0)
		return n;
	meta_readdir_end(w, off, (uint32_t)n, more);
	return w->err;
}

static int op_statfs(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	struct strata_statfs s;
	int r = ns_statfs(ns, &s);

	if (r == 0)
		meta_statfs_put(w, &s);
	return r;
}

static int op_setxattr(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return ns_setxattr(ns, &q->op, q->ino, q->name, q->value, q->value_len, q->flags);
}

static int op_getxattr(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	_cleanup_free_ void *v = NULL;
	size_t n = 0;
	int r = ns_getxattr(ns, q->ino, q->name, &v, &n);

	if (r == 0)
		wbuf_put_blob(w, v, (uint32_t)n);
	return r;
}

static int op_listxattr(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	_cleanup_free_ char *list = NULL;
	size_t n = 0;
	int r = ns_listxattr(ns, q->ino, &list, &n);

	if (r == 0)
		wbuf_put_blob(w, list, (uint32_t)n);
	return r;
}

static int op_removexattr(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return ns_removexattr(ns, &q->op, q->ino, q->name);
}

static int op_open(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	uint64_t sid = 0;
	int r;

	if (q->ino == 0 && (q->flags & META_OPEN_CLEAR_SESSIONS)) {
		r = ns_clear_sessions(ns, q->client_id);
		sid = r < 0 ? 0 : (uint64_t)r;
	} else {
		r = ns_open_file(ns, &q->op, q->ino, q->flags, q->client_id, &sid);
	}
	if (r >= 0)
		wbuf_put_u64(w, sid);
	return r < 0 ? r : 0;
}

static int op_close(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return ns_close_file(ns, q->ino, q->session, q->slength, q->mtime_ns);
}

static int op_sync(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return ns_sync(ns);
}

static int op_set_length(struct ns *ns, const struct meta_req *q, struct wbuf *w)
{
	return ns_set_length(ns, q->ino, q->length, q->mtime_ns);
}

static const op_fn meta_ops[] = {
    [MSG_META_PING - MSG_META_PING] = op_ping,
    [MSG_META_LOOKUP - MSG_META_PING] = op_lookup,
    [MSG_META_GETATTR - MSG_META_PING] = op_getattr,
    [MSG_META_SETATTR - MSG_META_PING] = op_setattr,
    [MSG_META_MKNOD - MSG_META_PING] = op_mknod,
    [MSG_META_MKDIR - MSG_META_PING] = op_mkdir,
    [MSG_META_CREATE - MSG_META_PING] = op_create,
    [MSG_META_UNLINK - MSG_META_PING] = op_unlink,
    [MSG_META_RMDIR - MSG_META_PING] = op_rmdir,
    [MSG_META_RENAME - MSG_META_PING] = op_rename,
    [MSG_META_LINK - MSG_META_PING] = op_link,
    [MSG_META_SYMLINK - MSG_META_PING] = op_symlink,
    [MSG_META_READLINK - MSG_META_PING] = op_readlink,
    [MSG_META_READDIR - MSG_META_PING] = op_readdir,
    [MSG_META_STATFS - MSG_META_PING] = op_statfs,
    [MSG_META_SETXATTR - MSG_META_PING] = op_setxattr,
    [MSG_META_GETXATTR - MSG_META_PING] = op_getxattr,
    [MSG_META_LISTXATTR - MSG_META_PING] = op_listxattr,
    [MSG_META_REMOVEXATTR - MSG_META_PING] = op_removexattr,
    [MSG_META_OPEN - MSG_META_PING] = op_open,
    [MSG_META_CLOSE - MSG_META_PING] = op_close,
    [MSG_META_SYNC - MSG_META_PING] = op_sync,
    [MSG_META_SET_LENGTH - MSG_META_PING] = op_set_length,
};

/* A directory's layout (chunk size, replication factor) is the cluster
 * administrator's to change (rpc_roles.c): the mount may not. A call
 * without a peer is local. */
static bool may_setattr(const struct meta_req *q, const struct rpc_peer *peer)
{
	return !peer || peer->role == RPC_ROLE_ADMIN ||
	       !(q->sa.valid & (STRATA_SET_LAYOUT | STRATA_SET_REPLICAS));
}

static int handle_meta(struct ns *ns, uint16_t type, struct rbuf *req, struct wbuf *reply,
		       const struct rpc_peer *peer)
{
	_cleanup_free_ struct meta_req *q = malloc(sizeof(*q));
	unsigned idx = (unsigned)type - MSG_META_PING;

	if (idx >= ARRAY_SIZE(meta_ops) || !meta_ops[idx])
		return -EOPNOTSUPP;
	if (!q)
		return -ENOMEM;
	if (meta_req_decode(type, req, q) < 0)
		return -EBADMSG;
	if (type == MSG_META_SETATTR && !may_setattr(q, peer)) {
		log_warn("refused a layout change of inode %llu from %s: role %s is not admin",
			 (unsigned long long)q->ino, peer->addr, rpc_role_name(peer->role));
		return -EPERM;
	}
	return meta_ops[idx](ns, q, reply);
}

static int handle_close_many(struct ns *ns, struct rbuf *req, struct wbuf *reply)
{
	_cleanup_free_ struct meta_close_item *items = malloc(META_CLOSE_MANY_MAX * sizeof(*items));
	int results[META_CLOSE_MANY_MAX];
	uint32_t n;
	int r;

	if (!items)
		return -ENOMEM;
	if (meta_close_many_get(req, items, &n) < 0)
		return -EBADMSG;
	r = ns_close_files(ns, items, n, results);
	if (r == 0)
		meta_close_many_reply_put(reply, results, n);
	return r;
}

static int handle_register(struct ns *ns, const struct mgmt_req *q, struct wbuf *w)
{
	_cleanup_free_ struct mgmt_target_info *t = calloc(MGMT_MAX_TARGETS, sizeof(*t));
	uint32_t ids[MGMT_MAX_TARGETS], node = q->node_id;
	int r;

	if (!t)
		return -ENOMEM;
	for (int i = 0; i < q->ntargets; i++)
		t[i] = q->targets[i];
	r = ns_register(ns, &node, q->addr, t, q->ntargets);
	if (r < 0)
		return r;
	for (int i = 0; i < q->ntargets; i++)
		ids[i] = t[i].target_id;
	mgmt_register_reply_put(w, node, ids, q->ntargets);
	return w->err;
}

static int handle_mgmt(struct ns *ns, uint16_t type, struct rbuf *req, struct wbuf *w)
{
	_cleanup_free_ struct mgmt_req *q = NULL;
	struct strata_routing rt;
	int r;

	if (type == MSG_MGMT_ROUTING) {
		if ((r = ns_routing(ns, &rt)) < 0)
			return r;
		meta_routing_put(w, &rt);
		strata_routing_done(&rt);
		return w->err;
	}
	if (type != MSG_MGMT_REGISTER && type != MSG_MGMT_HEARTBEAT)
		return -EOPNOTSUPP;
	if (!(q = malloc(sizeof(*q))))
		return -ENOMEM;
	if (mgmt_req_decode(type, req, q) < 0)
		return -EBADMSG;
	if (type == MSG_MGMT_REGISTER)
		return handle_register(ns, q, w);
	return ns_heartbeat(ns, q->node_id, q->targets, q->ntargets);
}

/* Is the chunkserver holding target_id reachable? 0 if it answers a PING
 * within PROBE_TIMEOUT_MS, else the transport error. */
#define PROBE_TIMEOUT_MS 500
static int probe_target(struct ns *ns, uint32_t target_id)
{
	struct strata_routing rt;
	char addr[64] = "";
	int r = ns_routing(ns, &rt);

	if (r < 0)
		return r;
	for (uint32_t i = 0; i < rt.ntargets; i++)
		if (rt.targets[i].target_id == target_id)
			snprintf(addr, sizeof(addr), "%s", rt.targets[i].addr);
	strata_routing_done(&rt);
	if (!addr[0])
		return -ENOENT;
	struct rpc_client_opts o = {
	    .timeout_ms = PROBE_TIMEOUT_MS, .connect_timeout_ms = PROBE_TIMEOUT_MS, .max_conns = 1};
	struct rpc_client *c = rpc_client_new(addr, &o);
	struct rpc_reply rep = {0};
	if (!c)
		return -ENOMEM;
	r = rpc_call(c, MSG_CHUNK_PING, NULL, 0, &rep);
	rpc_reply_done(&rep);
	rpc_client_free(c);
	return r;
}

/* A sandbox node's lease (its report) and the sandbox node table. */
static int handle_sbnodes(struct ns *ns, uint16_t type, struct rbuf *req, struct wbuf *w)
{
	_cleanup_free_ struct sbnode_report *q = NULL;
	struct sbnode_table t;
	bool reconcile;
	int r;

	if (type == MSG_MGMT_SBNODES) {
		if (rbuf_done(req) < 0)
			return -EBADMSG;
		if ((r = sbnodes_list(ns_sbnodes(ns), &t)) < 0)
			return r;
		sbnode_table_put(w, &t);
		sbnode_table_done(&t);
		return w->err;
	}
	if (!(q = malloc(sizeof(*q))))
		return -ENOMEM;
	if (sbnode_report_get(req, q) < 0)
		return -EBADMSG;
	if ((r = sbnodes_report(ns_sbnodes(ns), q, &reconcile)) < 0) {
		if (r == -EEXIST)
			log_warn("sandbox node %u: a second sandboxd (%s) reports under the id "
				 "of a live one: refused",
				 q->node_id, q->api_addr);
		return r;
	}
	if (reconcile)
		log_warn("sandbox node %u (%s) is back after its lease lapsed: it removes the "
			 "sandboxes the cluster gave up on",
			 q->node_id, q->api_addr);
	sbnode_reply_put(w, sbnodes_lease_ms(ns_sbnodes(ns)), reconcile);
	return w->err;
}

/* Replication messages: failure reports, resync progress, the admin view. */
static int handle_repl(struct ns *ns, uint16_t type, struct rbuf *req, struct wbuf *w)
{
	struct mgmt_cluster c;
	struct mgmt_sync s;
	int r;

	switch (type) {
	case MSG_MGMT_REPORT: {
		uint32_t id = rbuf_get_u32(req);
		if (rbuf_done(req) < 0)
			return -EBADMSG;
		if (!ns_probe_due(ns, id))
			return 0; /* probed a moment ago */
		r = probe_target(ns, id);
		if (r == 0 || r == -ENOENT)
			return 0;
		log_warn("target %u did not answer a probe (%s): taking its node out of its chains",
			 id, strerror(-r));
		return ns_fail_target_node(ns, id);
	}
	case MSG_MGMT_SYNC_DONE:
		if (mgmt_sync_get(req, &s) < 0)
			return -EBADMSG;
		r = ns_sync_done(ns, &s);
		if (r == 0 && s.finished)
			log_info("target %u synced on chain %u: serving", s.target_id, s.chain_id);
		return r;
	case MSG_MGMT_SBNODE_REPORT:
	case MSG_MGMT_SBNODES:
		return handle_sbnodes(ns, type, req, w);
	case MSG_MGMT_NODES:
		if ((r = ns_cluster(ns, &c)) < 0)
			return r;
		mgmt_cluster_put(w, &c);
		mgmt_cluster_done(&c);
		return w->err;
	}
	return -EOPNOTSUPP;
}

/* ---- fsck ------------------------------------------------------------------- */

static void log_repairs(const struct meta_fsck_report *r, const char *peer)
{
	for (uint32_t i = 0; i < r->n; i++) {
		const struct meta_fsck_record *c = &r->rec[i];
		if (!c->repaired)
			continue;
		log_info("fsck (%s): repaired %s: ino %llu parent %llu name '%s' expected %llu "
			 "was %llu",
			 peer, meta_fsck_kind_name(c->kind), (unsigned long long)c->ino,
			 (unsigned long long)c->parent, c->name, (unsigned long long)c->expected,
			 (unsigned long long)c->actual);
	}
	if (r->truncated)
		log_info("fsck (%s): more repairs than the reply lists (see the totals)", peer);
}

/* The GC's removal path, sent from here: MSG_CHUNK_REMOVE_FILE to every
 * serving and syncing target of every chain of the layout's table, in chain
 * order (a syncing target's failure is ignored: resync brings it in line). */
#define FSCK_RM_TIMEOUT_MS 2000
static int fsck_remove(void *ctx, const struct strata_layout *layout, strata_ino_t ino,
		       uint32_t first_index)
{
	const struct strata_routing *rt = ctx;
	const struct strata_chain_table *t = routing_table(rt, layout->table_id);

	if (!t)
		return -ENXIO;
	for (uint32_t i = 0; i < t->nchains; i++) {
		const struct strata_chain *c = routing_chain(rt, t->chain_ids[i]);
		if (!c)
			return -ENXIO;
		if (chain_nserving(rt, c) == 0)
			return -EAGAIN;
		for (uint8_t j = 0; j < c->ntargets && j < STRATA_MAX_REPLICAS; j++) {
			uint8_t st = routing_state(rt, c->targets[j]);
			const struct strata_target *tg = routing_target(rt, c->targets[j]);
			if ((st != TARGET_SERVING && st != TARGET_SYNCING) || !tg)
				continue;
			struct chunk_req q = {.route = {tg->target_id, c->chain_id, c->version},
					      .ino = ino,
					      .index = first_index};
			struct rpc_client_opts o = {.timeout_ms = FSCK_RM_TIMEOUT_MS,
						    .connect_timeout_ms = FSCK_RM_TIMEOUT_MS,
						    .max_conns = 1};
			struct rpc_client *rc = rpc_client_new(tg->addr, &o);
			struct rpc_reply rep = {0};
			struct wbuf w;
			if (!rc)
				return -ENOMEM;
			wbuf_init(&w);
			int r = chunk_req_encode(MSG_CHUNK_REMOVE_FILE, &q, &w);
			if (r == 0)
				r = rpc_call(rc, MSG_CHUNK_REMOVE_FILE, &w, 0, &rep);
			wbuf_done(&w);
			rpc_reply_done(&rep);
			rpc_client_free(rc);
			if (r < 0 && st == TARGET_SERVING)
				return r;
		}
	}
	return 0;
}

static int handle_fsck(struct ns *ns, uint16_t type, struct rbuf *req, struct wbuf *w,
		       const char *peer)
{
	uint32_t flags, max, n;
	int r;

	if (type == MSG_META_FSCK) {
		struct meta_fsck_report rep;
		if (meta_fsck_req_get(req, &flags, &max) < 0)
			return -EBADMSG;
		log_info("fsck (%s): namespace check%s", peer,
			 flags & META_FSCK_REPAIR ? " and repair" : "");
		if ((r = ns_fsck(ns, flags, &rep)) < 0)
			return r;
		log_repairs(&rep, peer);
		if (max == 0)
			max = META_FSCK_MAX_RECORDS;
		if (rep.n > max) {
			rep.n = max;
			rep.truncated = 1;
		}
		meta_fsck_report_put(w, &rep);
		meta_fsck_report_done(&rep);
		return w->err;
	}
	if (type == MSG_META_FSCK_RESYNC) {
		uint32_t tid = rbuf_get_u32(req);
		uint8_t st;
		if (rbuf_done(req) < 0)
			return -EBADMSG;
		r = ns_fsck_resync(ns, tid, &st);
		if (r == 0)
			log_info(
			    "fsck (%s): repaired a damaged replica: target %u is resynced from "
			    "its chain",
			    peer, tid);
		else
			log_info("fsck (%s): resync of target %u refused: %s", peer, tid,
				 strerror(-r));
		return r;
	}
	_cleanup_free_ struct meta_fsck_chunk *items = NULL;
	struct strata_routing rt = {0};
	if ((r = meta_fsck_chunks_req_get(req, &flags, &items, &n)) < 0)
		return r;
	/* the routing is read before the lock ns_fsck_chunks holds (ns_routing
	 * takes it too) */
	if ((flags & META_FSCK_REPAIR) && (r = ns_routing(ns, &rt)) < 0)
		return r;
	r = ns_fsck_chunks(ns, flags, items, n, fsck_remove, &rt);
	strata_routing_done(&rt);
	if (r < 0)
		return r;
	for (uint32_t i = 0; i < n; i++) {
		const struct meta_fsck_chunk *c = &items[i];
		if (c->verdict >= FSCK_CHUNK_NO_INODE && (flags & META_FSCK_REPAIR))
			log_info("fsck (%s): orphan chunks of inode %llu from index %u on table %u "
				 "(%s): %s",
				 peer, (unsigned long long)c->ino, c->first_orphan, c->table_id,
				 c->verdict == FSCK_CHUNK_NO_INODE   ? "no inode"
				 : c->verdict == FSCK_CHUNK_NOT_FILE ? "not a regular file"
								     : "past the end of the file",
				 c->removed ? "removed" : strerror(-c->err));
	}
	meta_fsck_chunks_reply_put(w, items, n);
	return w->err;
}

int meta_handle(void *ctx, uint16_t type, struct rbuf *req, struct wbuf *reply,
		const struct rpc_peer *peer)
{
	struct ns *ns = ctx;

	if (type >= MSG_MGMT_REGISTER && type <= MSG_MGMT_ROUTING)
		return handle_mgmt(ns, type, req, reply);
	if (type >= MSG_MGMT_REPORT && type <= MSG_MGMT_SBNODES)
		return handle_repl(ns, type, req, reply);
	if (type == MSG_META_FSCK || type == MSG_META_FSCK_CHUNKS || type == MSG_META_FSCK_RESYNC)
		return handle_fsck(ns, type, req, reply, peer ? peer->addr : "local");
	if (type == MSG_META_CLOSE_MANY)
		return handle_close_many(ns, req, reply);
	return handle_meta(ns, type, req, reply, peer);
}
