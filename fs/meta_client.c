/* meta_client.c — the client API of strata-meta (meta_client.h) over
 * rpc_call: each function fills a struct meta_req, encodes it with
 * meta_proto.c, calls, and decodes the reply. Names, xattr sizes and
 * symlink targets are checked here too, so a caller gets -EINVAL,
 * -ENAMETOOLONG, -ERANGE or -E2BIG without a round trip (the server checks
 * again). Read-only calls are sent RPC_IDEMPOTENT (retried once on a fresh
 * connection after a transport error). */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "fs/meta_client.h"
#include "fs/meta_proto.h"
#include "fs/proto.h"
#include "fs/sbnode_proto.h"

struct meta_client {
	struct rpc_client *rpc;
	char client_id[META_CLIENT_ID_MAX + 1];
	/* calls sent, by message type (MSG_META_* - MSG_META_PING): what
	 * strata-fuse reports as trusted.strata.meta_calls */
	_Atomic uint64_t calls[META_CALL_TYPES];
};

struct meta_client *meta_client_new(const char *addr, const char *client_id,
				    const struct rpc_client_opts *opts)
{
	struct meta_client *mc = calloc(1, sizeof(*mc));
	struct timespec ts;

	if (!mc)
		return NULL;
	mc->rpc = rpc_client_new(addr, opts);
	if (!mc->rpc) {
		free(mc);
		return NULL;
	}
	if (client_id && client_id[0]) {
		snprintf(mc->client_id, sizeof(mc->client_id), "%s", client_id);
	} else {
		clock_gettime(CLOCK_REALTIME, &ts);
		snprintf(mc->client_id, sizeof(mc->client_id), "anon-%d-%lld.%09ld", (int)getpid(),
			 (long long)ts.tv_sec, ts.tv_nsec);
	}
	return mc;
}

void meta_client_free(struct meta_client *mc)
{
	if (!mc)
		return;
	rpc_client_free(mc->rpc);
	free(mc);
}

static void reply_donep(struct rpc_reply *r)
{
	rpc_reply_done(r);
}
#define _cleanup_reply_ __attribute__((cleanup(reply_donep)))

uint64_t meta_client_calls(struct meta_client *mc, uint16_t type)
{
	if (type < MSG_META_PING || type >= MSG_META_PING + META_CALL_TYPES)
		return 0;
	return atomic_load_explicit(&mc->calls[type - MSG_META_PING], memory_order_relaxed);
}

int meta_keeps_opids(struct meta_client *mc)
{
	int minor = rpc_client_peer_minor(mc->rpc);

	return minor < 0 ? -1 : minor >= 2;
}

/* Encodes req for type and calls; *rep must be released by the caller. A
 * mutation with an operation id is as safe to resend as a read once the
 * server keeps ids. */
static int call(struct meta_client *mc, uint16_t type, const struct meta_req *req, unsigned flags,
		struct rpc_reply *rep)
{
	struct wbuf w;
	int r;

	if (req->op.conn && meta_keeps_opids(mc) == 1)
		flags |= RPC_IDEMPOTENT;
	if (type >= MSG_META_PING && type < MSG_META_PING + META_CALL_TYPES)
		atomic_fetch_add_explicit(&mc->calls[type - MSG_META_PING], 1,
					  memory_order_relaxed);
	wbuf_init(&w);
	r = meta_req_encode(type, req, &w);
	if (r == 0)
		r = rpc_call(mc->rpc, type, &w, flags, rep);
	wbuf_done(&w);
	return r;
}

static int call_empty(struct meta_client *mc, uint16_t type, const struct meta_req *req,
		      unsigned flags)
{
	_cleanup_reply_ struct rpc_reply rep = {0};

	return call(mc, type, req, flags, &rep);
}

static int call_attr(struct meta_client *mc, uint16_t type, const struct meta_req *req,
		     unsigned flags, struct strata_attr *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct strata_attr a;
	struct rbuf b;
	int r = call(mc, type, req, flags, &rep);

	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	r = meta_attr_get(&b, &a);
	if (r == 0 && ret)
		*ret = a;
	return r;
}

/* Copies a name into a request field after checking it. */
static int set_name(char *dst, const char *name)
{
	int r = meta_name_check(name);

	if (r == 0)
		memcpy(dst, name, strlen(name) + 1);
	return r;
}

/* A request's operation id: op's, or none. */
static struct meta_opid opid(const struct meta_opid *op)
{
	return op && op->conn ? *op : (struct meta_opid){0};
}

int meta_ping(struct meta_client *mc)
{
	struct meta_req q = {0};

	return call_empty(mc, MSG_META_PING, &q, RPC_IDEMPOTENT);
}

int meta_lookup(struct meta_client *mc, strata_ino_t parent, const char *name,
		struct strata_attr *ret_attr)
{
	struct meta_req q = {.parent = parent};
	int r = set_name(q.name, name);

	return r ?: call_attr(mc, MSG_META_LOOKUP, &q, RPC_IDEMPOTENT, ret_attr);
}

int meta_getattr(struct meta_client *mc, strata_ino_t ino, struct strata_attr *ret_attr)
{
	struct meta_req q = {.ino = ino};

	return call_attr(mc, MSG_META_GETATTR, &q, RPC_IDEMPOTENT, ret_attr);
}

int meta_setattr(struct meta_client *mc, strata_ino_t ino, const struct strata_setattr *sa,
		 struct strata_attr *ret_attr)
{
	struct meta_req q = {.ino = ino, .sa = *sa};

	return call_attr(mc, MSG_META_SETATTR, &q, 0, ret_attr);
}

int meta_mknod(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
	       const char *name, uint32_t mode, uint64_t rdev, uint32_t uid, uint32_t gid,
	       struct strata_attr *ret_attr)
{
	struct meta_req q = {
	    .op = opid(op), .parent = parent, .mode = mode, .rdev = rdev, .uid = uid, .gid = gid};
	int r = set_name(q.name, name);

	return r ?: call_attr(mc, MSG_META_MKNOD, &q, 0, ret_attr);
}

int meta_mkdir(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
	       const char *name, uint32_t mode, uint32_t uid, uint32_t gid,
	       struct strata_attr *ret_attr)
{
	struct meta_req q = {
	    .op = opid(op), .parent = parent, .mode = mode, .uid = uid, .gid = gid};
	int r = set_name(q.name, name);

	return r ?: call_attr(mc, MSG_META_MKDIR, &q, 0, ret_attr);
}

/* Reply of create: attr then session. */
static int attr_session_get(const struct rpc_reply *rep, struct strata_attr *ret_attr,
			    uint64_t *ret_session)
{
	struct strata_attr a;
	struct rbuf b;

	rbuf_init(&b, rep->data, rep->len);
	meta_attr_read(&b, &a);
	uint64_t sid = rbuf_get_u64(&b);
	if (rbuf_done(&b) < 0)
		return -EBADMSG;
	if (ret_attr)
		*ret_attr = a;
	if (ret_session)
		*ret_session = sid;
	return 0;
}

int meta_create(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name, uint32_t mode, uint32_t uid, uint32_t gid, uint32_t flags,
		struct strata_attr *ret_attr, uint64_t *ret_session)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {
	    .op = opid(op), .parent = parent, .mode = mode, .uid = uid, .gid = gid, .flags = flags};
	int r = set_name(q.name, name);

	if (r < 0)
		return r;
	memcpy(q.client_id, mc->client_id, sizeof(q.client_id));
	r = call(mc, MSG_META_CREATE, &q, 0, &rep);
	return r ?: attr_session_get(&rep, ret_attr, ret_session);
}

int meta_remove(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name, bool dir, struct meta_removed *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {.op = opid(op), .parent = parent};
	struct meta_removed m = {0};
	struct rbuf b;
	int r = set_name(q.name, name);

	if (r == 0)
		r = call(mc, dir ? MSG_META_RMDIR : MSG_META_UNLINK, &q, 0, &rep);
	if (r < 0)
		return r;
	if (rep.len > 0) { /* empty from an older server or a resent request */
		rbuf_init(&b, rep.data, rep.len);
		if (meta_attr_get(&b, &m.inode) == 0 && meta_attr_get(&b, &m.parent) == 0)
			m.known = true;
	}
	if (ret)
		*ret = m;
	return 0;
}

int meta_unlink(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name)
{
	return meta_remove(mc, op, parent, name, false, NULL);
}

int meta_rmdir(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
	       const char *name)
{
	return meta_remove(mc, op, parent, name, true, NULL);
}

int meta_rename_ex(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		   const char *name, strata_ino_t newparent, const char *newname, uint32_t flags,
		   struct meta_renamed *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {
	    .op = opid(op), .parent = parent, .newparent = newparent, .flags = flags};
	struct meta_renamed m = {0};
	struct rbuf b;
	int r = set_name(q.name, name) ?: set_name(q.newname, newname);

	if (r == 0)
		r = call(mc, MSG_META_RENAME, &q, 0, &rep);
	if (r < 0)
		return r;
	if (rep.len > 0) { /* empty from an older server, a record or a no-op */
		rbuf_init(&b, rep.data, rep.len);
		meta_attr_read(&b, &m.inode);
		meta_attr_read(&b, &m.parent);
		meta_attr_read(&b, &m.newparent);
		m.has_other = rbuf_get_u8(&b) != 0;
		if (m.has_other)
			meta_attr_read(&b, &m.other);
		m.known = rbuf_done(&b) == 0;
	}
	if (ret)
		*ret = m;
	return 0;
}

int meta_rename(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		const char *name, strata_ino_t newparent, const char *newname, uint32_t flags)
{
	return meta_rename_ex(mc, op, parent, name, newparent, newname, flags, NULL);
}

int meta_link(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino,
	      strata_ino_t newparent, const char *newname, struct strata_attr *ret_attr)
{
	struct meta_req q = {.op = opid(op), .ino = ino, .newparent = newparent};
	int r = set_name(q.newname, newname);

	return r ?: call_attr(mc, MSG_META_LINK, &q, 0, ret_attr);
}

int meta_symlink(struct meta_client *mc, const struct meta_opid *op, strata_ino_t parent,
		 const char *name, const char *target, uint32_t uid, uint32_t gid,
		 struct strata_attr *ret_attr)
{
	struct meta_req q = {.op = opid(op), .parent = parent, .uid = uid, .gid = gid};
	int r = set_name(q.name, name);

	if (r < 0)
		return r;
	if (!target || !target[0])
		return -ENOENT;
	if (strlen(target) >= STRATA_PATH_MAX)
		return -ENAMETOOLONG;
	memcpy(q.target, target, strlen(target) + 1);
	return call_attr(mc, MSG_META_SYMLINK, &q, 0, ret_attr);
}

int meta_readlink(struct meta_client *mc, strata_ino_t ino, char *buf, size_t cap)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {.ino = ino};
	char target[STRATA_PATH_MAX + 1];
	struct rbuf b;
	int r = call(mc, MSG_META_READLINK, &q, RPC_IDEMPOTENT, &rep);

	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	rbuf_get_str(&b, target, sizeof(target));
	if (rbuf_done(&b) < 0)
		return -EBADMSG;
	size_t n = strlen(target);
	if (n + 1 > cap)
		return -ERANGE;
	memcpy(buf, target, n + 1);
	return (int)n;
}

int meta_readdir(struct meta_client *mc, strata_ino_t ino, const char *after, bool want_attrs,
		 struct meta_dirent *ents, int max, int *ret_more)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {.ino = ino, .want_attrs = want_attrs};
	struct rbuf b;
	int r;

	if (max <= 0)
		return -EINVAL;
	q.max = (uint32_t)STRATA_MIN(max, META_READDIR_MAX);
	if (after && strlen(after) > STRATA_NAME_MAX)
		return -ENAMETOOLONG;
	snprintf(q.target, sizeof(q.target), "%s", after ? after : "");
	r = call(mc, MSG_META_READDIR, &q, RPC_IDEMPOTENT, &rep);
	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return meta_readdir_get(&b, ents, (int)q.max, ret_more);
}

int meta_statfs(struct meta_client *mc, struct strata_statfs *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {0};
	struct rbuf b;
	int r = call(mc, MSG_META_STATFS, &q, RPC_IDEMPOTENT, &rep);

	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return meta_statfs_get(&b, ret);
}

static int xattr_name(char *dst, const char *name)
{
	if (!name || !name[0])
		return -EINVAL;
	if (strlen(name) > STRATA_XATTR_NAME_MAX)
		return -ERANGE;
	memcpy(dst, name, strlen(name) + 1);
	return 0;
}

int meta_setxattr(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino,
		  const char *name, const void *value, size_t size, uint32_t flags)
{
	struct meta_req q = {.op = opid(op), .ino = ino, .flags = flags, .value = value};
	int r = xattr_name(q.name, name);

	if (r < 0)
		return r;
	if (size > STRATA_XATTR_SIZE_MAX)
		return -E2BIG;
	q.value_len = (uint32_t)size;
	return call_empty(mc, MSG_META_SETXATTR, &q, 0);
}

/* getxattr/listxattr size convention: cap 0 asks for the size. */
static int blob_reply(const struct rpc_reply *rep, void *buf, size_t cap)
{
	struct rbuf b;
	uint32_t n;

	rbuf_init(&b, rep->data, rep->len);
	const void *p = rbuf_get_blob(&b, &n);
	if (rbuf_done(&b) < 0 || n > INT32_MAX)
		return -EBADMSG;
	if (cap == 0)
		return (int)n;
	if (n > cap)
		return -ERANGE;
	if (n)
		memcpy(buf, p, n);
	return (int)n;
}

int meta_getxattr(struct meta_client *mc, strata_ino_t ino, const char *name, void *buf, size_t cap)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {.ino = ino};
	int r = xattr_name(q.name, name);

	if (r < 0)
		return r;
	r = call(mc, MSG_META_GETXATTR, &q, RPC_IDEMPOTENT, &rep);
	return r ?: blob_reply(&rep, buf, cap);
}

int meta_listxattr(struct meta_client *mc, strata_ino_t ino, char *buf, size_t cap)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {.ino = ino};
	int r = call(mc, MSG_META_LISTXATTR, &q, RPC_IDEMPOTENT, &rep);

	return r ?: blob_reply(&rep, buf, cap);
}

int meta_removexattr(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino,
		     const char *name)
{
	struct meta_req q = {.op = opid(op), .ino = ino};
	int r = xattr_name(q.name, name);

	return r ?: call_empty(mc, MSG_META_REMOVEXATTR, &q, 0);
}

static int session_reply(const struct rpc_reply *rep, uint64_t *ret)
{
	struct rbuf b;

	rbuf_init(&b, rep->data, rep->len);
	uint64_t v = rbuf_get_u64(&b);
	if (rbuf_done(&b) < 0)
		return -EBADMSG;
	*ret = v;
	return 0;
}

int meta_open(struct meta_client *mc, const struct meta_opid *op, strata_ino_t ino, uint32_t flags,
	      uint64_t *ret_session)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {
	    .op = opid(op), .ino = ino, .flags = flags & ~META_OPEN_CLEAR_SESSIONS};
	int r;

	if (ino == 0)
		return -EINVAL;
	memcpy(q.client_id, mc->client_id, sizeof(q.client_id));
	r = call(mc, MSG_META_OPEN, &q, 0, &rep);
	return r ?: session_reply(&rep, ret_session);
}

int meta_clear_sessions(struct meta_client *mc)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct meta_req q = {.ino = 0, .flags = META_OPEN_CLEAR_SESSIONS};
	uint64_t n = 0;
	int r;

	memcpy(q.client_id, mc->client_id, sizeof(q.client_id));
	r = call(mc, MSG_META_OPEN, &q, RPC_IDEMPOTENT, &rep);
	if (r == 0)
		r = session_reply(&rep, &n);
	return r < 0 ? r : (int)STRATA_MIN(n, (uint64_t)INT32_MAX);
}

int meta_close(struct meta_client *mc, strata_ino_t ino, uint64_t session, int64_t length,
	       int64_t mtime_ns)
{
	struct meta_req q = {
	    .ino = ino, .session = session, .slength = length, .mtime_ns = mtime_ns};

	return call_empty(mc, MSG_META_CLOSE, &q, 0);
}

int meta_close_many(struct meta_client *mc, const struct meta_close_item *items, uint32_t n,
		    int *results)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	struct rbuf b;
	int r;

	if (n == 0 || n > META_CLOSE_MANY_MAX)
		return -EINVAL;
	atomic_fetch_add_explicit(&mc->calls[MSG_META_CLOSE_MANY - MSG_META_PING], 1,
				  memory_order_relaxed);
	wbuf_init(&w);
	meta_close_many_put(&w, items, n);
	r = w.err ?: rpc_call(mc->rpc, MSG_META_CLOSE_MANY, &w, 0, &rep);
	wbuf_done(&w);
	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return meta_close_many_reply_get(&b, results, n);
}

int meta_set_length(struct meta_client *mc, strata_ino_t ino, uint64_t length, int64_t mtime_ns)
{
	struct meta_req q = {.ino = ino, .length = length, .mtime_ns = mtime_ns};

	return call_empty(mc, MSG_META_SET_LENGTH, &q, RPC_IDEMPOTENT);
}

int meta_sync(struct meta_client *mc)
{
	struct meta_req q = {0};

	return call_empty(mc, MSG_META_SYNC, &q, RPC_IDEMPOTENT);
}

const char *meta_client_id(const struct meta_client *mc)
{
	return mc->client_id;
}

/* ---- cluster management ------------------------------------------------- */

static int mgmt_fill(struct mgmt_req *q, uint32_t node_id, const char *addr,
		     const struct mgmt_target_info *targets, int ntargets)
{
	if (ntargets < 0 || ntargets > MGMT_MAX_TARGETS)
		return -EINVAL;
	if (addr && strlen(addr) >= sizeof(q->addr))
		return -EINVAL;
	q->node_id = node_id;
	snprintf(q->addr, sizeof(q->addr), "%s", addr ? addr : "");
	q->ntargets = ntargets;
	memcpy(q->targets, targets, (size_t)ntargets * sizeof(*targets));
	return 0;
}

static int mgmt_call(struct meta_client *mc, uint16_t type, const struct mgmt_req *q,
		     unsigned flags, struct rpc_reply *rep)
{
	struct wbuf w;
	int r;

	wbuf_init(&w);
	r = mgmt_req_encode(type, q, &w);
	if (r == 0)
		r = rpc_call(mc->rpc, type, &w, flags, rep);
	wbuf_done(&w);
	return r;
}

int mgmt_register(struct meta_client *mc, uint32_t *ret_node_id, const char *addr,
		  struct mgmt_target_info *targets, int ntargets)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	_cleanup_free_ struct mgmt_req *q = calloc(1, sizeof(*q));
	uint32_t ids[MGMT_MAX_TARGETS], node;
	struct rbuf b;
	int r;

	if (!q)
		return -ENOMEM;
	if ((r = mgmt_fill(q, *ret_node_id, addr, targets, ntargets)) < 0)
		return r;
	/* Idempotent: registering the same ids twice changes nothing, and a
	 * node that got no reply registers again with node id 0 anyway. */
	r = mgmt_call(mc, MSG_MGMT_REGISTER, q, 0, &rep);
	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	if ((r = mgmt_register_reply_get(&b, &node, ids, ntargets)) < 0)
		return r;
	*ret_node_id = node;
	for (int i = 0; i < ntargets; i++)
		targets[i].target_id = ids[i];
	return 0;
}

int mgmt_heartbeat(struct meta_client *mc, uint32_t node_id, const struct mgmt_target_info *targets,
		   int ntargets)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	_cleanup_free_ struct mgmt_req *q = calloc(1, sizeof(*q));
	int r;

	if (!q)
		return -ENOMEM;
	if ((r = mgmt_fill(q, node_id, NULL, targets, ntargets)) < 0)
		return r;
	return mgmt_call(mc, MSG_MGMT_HEARTBEAT, q, RPC_IDEMPOTENT, &rep);
}

int mgmt_routing(struct meta_client *mc, struct strata_routing *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct rbuf b;
	int r = rpc_call(mc->rpc, MSG_MGMT_ROUTING, NULL, RPC_IDEMPOTENT, &rep);

	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return meta_routing_get(&b, ret);
}

/* ---- replication management ---------------------------------------------- */

int mgmt_report(struct meta_client *mc, uint32_t target_id)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	int r;

	wbuf_init(&w);
	wbuf_put_u32(&w, target_id);
	r = w.err ?: rpc_call(mc->rpc, MSG_MGMT_REPORT, &w, RPC_IDEMPOTENT, &rep);
	wbuf_done(&w);
	return r;
}

int mgmt_sync_done(struct meta_client *mc, const struct mgmt_sync *s)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	int r;

	wbuf_init(&w);
	mgmt_sync_put(&w, s);
	r = w.err ?: rpc_call(mc->rpc, MSG_MGMT_SYNC_DONE, &w, RPC_IDEMPOTENT, &rep);
	wbuf_done(&w);
	return r;
}

int mgmt_cluster(struct meta_client *mc, struct mgmt_cluster *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct rbuf b;
	int r = rpc_call(mc->rpc, MSG_MGMT_NODES, NULL, RPC_IDEMPOTENT, &rep);

	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return mgmt_cluster_get(&b, ret);
}

int mgmt_sbnode_report(struct meta_client *mc, const struct sbnode_report *q,
		       uint32_t *ret_lease_ms, bool *ret_reconcile)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	struct rbuf b;
	int r;

	wbuf_init(&w);
	sbnode_report_put(&w, q);
	/* idempotent: a report repeated is the same lease renewed */
	r = w.err ?: rpc_call(mc->rpc, MSG_MGMT_SBNODE_REPORT, &w, RPC_IDEMPOTENT, &rep);
	wbuf_done(&w);
	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return sbnode_reply_get(&b, ret_lease_ms, ret_reconcile);
}

int mgmt_sbnodes(struct meta_client *mc, struct sbnode_table *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct rbuf b;
	int r = rpc_call(mc->rpc, MSG_MGMT_SBNODES, NULL, RPC_IDEMPOTENT, &rep);

	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return sbnode_table_get(&b, ret);
}

/* ---- fsck ------------------------------------------------------------------- */

int meta_fsck(struct meta_client *mc, uint32_t flags, struct meta_fsck_report *ret)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	struct rbuf b;
	int r;

	wbuf_init(&w);
	meta_fsck_req_put(&w, flags, META_FSCK_MAX_RECORDS);
	r = w.err ? w.err
		  : rpc_call(mc->rpc, MSG_META_FSCK, &w,
			     flags & META_FSCK_REPAIR ? 0 : RPC_IDEMPOTENT, &rep);
	wbuf_done(&w);
	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return meta_fsck_report_get(&b, ret);
}

void meta_fsck_report_done(struct meta_fsck_report *r)
{
	free(r->rec);
	r->rec = NULL;
	r->n = 0;
}

const char *meta_fsck_kind_name(uint16_t kind)
{
	static const char *const n[FSCK_KIND_MAX] = {
	    [FSCK_DANGLING_DENTRY] = "dangling-dentry",
	    [FSCK_DENTRY_TYPE] = "dentry-type",
	    [FSCK_DIR_LINKS] = "dir-links",
	    [FSCK_DIR_PARENT] = "dir-parent",
	    [FSCK_NLINK] = "nlink",
	    [FSCK_UNREACHABLE] = "unreachable",
	    [FSCK_ORPHAN_NO_MARKER] = "orphan-no-marker",
	    [FSCK_STALE_ORPHAN] = "stale-orphan-marker",
	    [FSCK_SESSION_NO_INDEX] = "session-no-index",
	    [FSCK_INDEX_NO_SESSION] = "index-no-session",
	    [FSCK_SESSION_NO_INODE] = "session-no-inode",
	    [FSCK_GC_LIVE] = "gc-queued-live",
	    [FSCK_COUNTER] = "counter",
	    [FSCK_INODE_COUNT] = "inode-count",
	    [FSCK_BAD_RECORD] = "bad-record",
	    [FSCK_STRAY_RECORD] = "stray-record",
	    [FSCK_SYMLINK_NO_TARGET] = "symlink-no-target",
	};
	return kind < FSCK_KIND_MAX && n[kind] ? n[kind] : "unknown";
}

int meta_fsck_chunks(struct meta_client *mc, uint32_t flags, struct meta_fsck_chunk *items,
		     uint32_t n)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	struct rbuf b;
	int r;

	if (n > META_FSCK_CHUNKS_MAX)
		return -EINVAL;
	wbuf_init(&w);
	meta_fsck_chunks_req_put(&w, flags, items, n);
	r = w.err ? w.err
		  : rpc_call(mc->rpc, MSG_META_FSCK_CHUNKS, &w,
			     flags & META_FSCK_REPAIR ? 0 : RPC_IDEMPOTENT, &rep);
	wbuf_done(&w);
	if (r < 0)
		return r;
	rbuf_init(&b, rep.data, rep.len);
	return meta_fsck_chunks_reply_get(&b, items, n);
}

int meta_fsck_resync(struct meta_client *mc, uint32_t target_id)
{
	_cleanup_reply_ struct rpc_reply rep = {0};
	struct wbuf w;
	int r;

	wbuf_init(&w);
	wbuf_put_u32(&w, target_id);
	r = w.err ? w.err : rpc_call(mc->rpc, MSG_META_FSCK_RESYNC, &w, 0, &rep);
	wbuf_done(&w);
	return r;
}
