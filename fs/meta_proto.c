/* meta_proto.c — encoders and decoders of the strata-meta payloads.
 *
 * A namespace request is the subset of struct meta_req's fields that its
 * message uses (req_fields below), always written in the order of the
 * F_* bits. So both sides agree from one table, and a field added later gets
 * the next bit and is appended at the end (older peers ignore trailing
 * bytes, see rbuf_done). Every decoder checks rbuf_done once at the end.
 * The optional trailing fields (F_REPLICAS, F_OPID) are read only when the
 * request carries them, so requests of older peers decode as before. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fs/meta_proto.h"
#include "fs/proto.h"

enum {
	F_INO = 1 << 0,
	F_PARENT = 1 << 1,
	F_NAME = 1 << 2,
	F_NEWPARENT = 1 << 3,
	F_NEWNAME = 1 << 4,
	F_MODE = 1 << 5,
	F_RDEV = 1 << 6,
	F_OWNER = 1 << 7, /* uid, gid */
	F_FLAGS = 1 << 8,
	F_CLIENT = 1 << 9,
	F_TARGET = 1 << 10, /* symlink target, readdir cursor */
	F_SA = 1 << 11,
	F_VALUE = 1 << 12,
	F_SESSION = 1 << 13,
	F_LENGTH = 1 << 14,
	F_SLENGTH = 1 << 15,
	F_MTIME = 1 << 16,
	F_READDIR = 1 << 17,  /* want_attrs, max */
	F_REPLICAS = 1 << 18, /* sa.replicas: optional, older peers omit it */
	F_OPID = 1 << 19,     /* op (conn, unique; 0: none): minor 2, older peers omit it */
	F_BAD = 1u << 31,
};

static uint32_t req_fields(uint16_t type)
{
	switch (type) {
	case MSG_META_PING:
	case MSG_META_STATFS:
	case MSG_META_SYNC:
		return 0;
	case MSG_META_LOOKUP:
		return F_PARENT | F_NAME;
	case MSG_META_UNLINK:
	case MSG_META_RMDIR:
		return F_PARENT | F_NAME | F_OPID;
	case MSG_META_GETATTR:
	case MSG_META_READLINK:
	case MSG_META_LISTXATTR:
		return F_INO;
	case MSG_META_SETATTR:
		return F_INO | F_SA | F_REPLICAS;
	case MSG_META_MKNOD:
		return F_PARENT | F_NAME | F_MODE | F_RDEV | F_OWNER | F_OPID;
	case MSG_META_MKDIR:
		return F_PARENT | F_NAME | F_MODE | F_OWNER | F_OPID;
	case MSG_META_CREATE:
		return F_PARENT | F_NAME | F_MODE | F_OWNER | F_FLAGS | F_CLIENT | F_OPID;
	case MSG_META_RENAME:
		return F_PARENT | F_NAME | F_NEWPARENT | F_NEWNAME | F_FLAGS | F_OPID;
	case MSG_META_LINK:
		return F_INO | F_NEWPARENT | F_NEWNAME | F_OPID;
	case MSG_META_SYMLINK:
		return F_PARENT | F_NAME | F_OWNER | F_TARGET | F_OPID;
	case MSG_META_READDIR:
		return F_INO | F_TARGET | F_READDIR;
	case MSG_META_SETXATTR:
		return F_INO | F_NAME | F_FLAGS | F_VALUE | F_OPID;
	case MSG_META_GETXATTR:
		return F_INO | F_NAME;
	case MSG_META_REMOVEXATTR:
		return F_INO | F_NAME | F_OPID;
	case MSG_META_OPEN:
		return F_INO | F_FLAGS | F_CLIENT | F_OPID;
	case MSG_META_CLOSE:
		return F_INO | F_SESSION | F_SLENGTH | F_MTIME;
	case MSG_META_SET_LENGTH:
		return F_INO | F_LENGTH | F_MTIME;
	default:
		return F_BAD;
	}
}

static void sa_put(struct wbuf *b, const struct strata_setattr *sa)
{
	wbuf_put_u32(b, sa->valid);
	wbuf_put_u32(b, sa->mode);
	wbuf_put_u32(b, sa->uid);
	wbuf_put_u32(b, sa->gid);
	wbuf_put_u64(b, sa->size);
	wbuf_put_i64(b, sa->atime_ns);
	wbuf_put_i64(b, sa->mtime_ns);
	wbuf_put_i64(b, sa->ctime_ns);
	wbuf_put_u32(b, sa->chunk_size);
}

static void sa_get(struct rbuf *b, struct strata_setattr *sa)
{
	sa->valid = rbuf_get_u32(b);
	sa->mode = rbuf_get_u32(b);
	sa->uid = rbuf_get_u32(b);
	sa->gid = rbuf_get_u32(b);
	sa->size = rbuf_get_u64(b);
	sa->atime_ns = rbuf_get_i64(b);
	sa->mtime_ns = rbuf_get_i64(b);
	sa->ctime_ns = rbuf_get_i64(b);
	sa->chunk_size = rbuf_get_u32(b);
}

static void req_put_ids(struct wbuf *b, uint32_t f, const struct meta_req *r)
{
	if (f & F_INO)
		wbuf_put_u64(b, r->ino);
	if (f & F_PARENT)
		wbuf_put_u64(b, r->parent);
	if (f & F_NAME)
		wbuf_put_str(b, r->name);
	if (f & F_NEWPARENT)
		wbuf_put_u64(b, r->newparent);
	if (f & F_NEWNAME)
		wbuf_put_str(b, r->newname);
	if (f & F_MODE)
		wbuf_put_u32(b, r->mode);
	if (f & F_RDEV)
		wbuf_put_u64(b, r->rdev);
	if (f & F_OWNER) {
		wbuf_put_u32(b, r->uid);
		wbuf_put_u32(b, r->gid);
	}
	if (f & F_FLAGS)
		wbuf_put_u32(b, r->flags);
}

static void req_put_rest(struct wbuf *b, uint32_t f, const struct meta_req *r)
{
	if (f & F_CLIENT)
		wbuf_put_str(b, r->client_id);
	if (f & F_TARGET)
		wbuf_put_str(b, r->target);
	if (f & F_SA)
		sa_put(b, &r->sa);
	if (f & F_VALUE)
		wbuf_put_blob(b, r->value, r->value_len);
	if (f & F_SESSION)
		wbuf_put_u64(b, r->session);
	if (f & F_LENGTH)
		wbuf_put_u64(b, r->length);
	if (f & F_SLENGTH)
		wbuf_put_i64(b, r->slength);
	if (f & F_MTIME)
		wbuf_put_i64(b, r->mtime_ns);
	if (f & F_READDIR) {
		wbuf_put_u8(b, r->want_attrs);
		wbuf_put_u32(b, r->max);
	}
	if (f & F_REPLICAS)
		wbuf_put_u32(b, r->sa.replicas);
	if (f & F_OPID) { /* always, zeros for none: a later field goes after it */
		wbuf_put_u64(b, r->op.conn);
		wbuf_put_u64(b, r->op.conn ? r->op.unique : 0);
	}
}

int meta_req_encode(uint16_t type, const struct meta_req *r, struct wbuf *b)
{
	uint32_t f = req_fields(type);

	if (f & F_BAD)
		return -EINVAL;
	req_put_ids(b, f, r);
	req_put_rest(b, f, r);
	return b->err;
}

static void req_get_ids(struct rbuf *b, uint32_t f, struct meta_req *r)
{
	if (f & F_INO)
		r->ino = rbuf_get_u64(b);
	if (f & F_PARENT)
		r->parent = rbuf_get_u64(b);
	if (f & F_NAME)
		rbuf_get_str(b, r->name, sizeof(r->name));
	if (f & F_NEWPARENT)
		r->newparent = rbuf_get_u64(b);
	if (f & F_NEWNAME)
		rbuf_get_str(b, r->newname, sizeof(r->newname));
	if (f & F_MODE)
		r->mode = rbuf_get_u32(b);
	if (f & F_RDEV)
		r->rdev = rbuf_get_u64(b);
	if (f & F_OWNER) {
		r->uid = rbuf_get_u32(b);
		r->gid = rbuf_get_u32(b);
	}
	if (f & F_FLAGS)
		r->flags = rbuf_get_u32(b);
}

static void req_get_rest(struct rbuf *b, uint32_t f, struct meta_req *r)
{
	if (f & F_CLIENT)
		rbuf_get_str(b, r->client_id, sizeof(r->client_id));
	if (f & F_TARGET)
		rbuf_get_str(b, r->target, sizeof(r->target));
	if (f & F_SA)
		sa_get(b, &r->sa);
	if (f & F_VALUE)
		r->value = rbuf_get_blob(b, &r->value_len);
	if (f & F_SESSION)
		r->session = rbuf_get_u64(b);
	if (f & F_LENGTH)
		r->length = rbuf_get_u64(b);
	if (f & F_SLENGTH)
		r->slength = rbuf_get_i64(b);
	if (f & F_MTIME)
		r->mtime_ns = rbuf_get_i64(b);
	if (f & F_READDIR) {
		r->want_attrs = rbuf_get_u8(b) != 0;
		r->max = rbuf_get_u32(b);
	}
	/* the last field, and optional: a request of an older peer ends before it */
	if ((f & F_REPLICAS) && !b->err && rbuf_remaining(b) >= 4)
		r->sa.replicas = rbuf_get_u32(b);
	/* optional too: an older client, or a mutation without an id */
	if ((f & F_OPID) && !b->err && rbuf_remaining(b) >= 16) {
		r->op.conn = rbuf_get_u64(b);
		r->op.unique = rbuf_get_u64(b);
		if (r->op.conn == 0)
			r->op.unique = 0; /* conn 0 is "none" */
	}
}

int meta_req_decode(uint16_t type, struct rbuf *b, struct meta_req *ret)
{
	uint32_t f = req_fields(type);

	if (f & F_BAD)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	req_get_ids(b, f, ret);
	req_get_rest(b, f, ret);
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	if ((f & F_VALUE) && !ret->value)
		ret->value = ""; /* empty blob */
	return 0;
}

/* ---- management ---------------------------------------------------------- */

static void target_put(struct wbuf *b, const struct mgmt_target_info *t)
{
	wbuf_put_u32(b, t->target_id);
	wbuf_put_str(b, t->path);
	wbuf_put_u64(b, t->total_bytes);
	wbuf_put_u64(b, t->free_bytes);
}

static void target_get(struct rbuf *b, struct mgmt_target_info *t)
{
	t->target_id = rbuf_get_u32(b);
	rbuf_get_str(b, t->path, sizeof(t->path));
	t->total_bytes = rbuf_get_u64(b);
	t->free_bytes = rbuf_get_u64(b);
}

int mgmt_req_encode(uint16_t type, const struct mgmt_req *r, struct wbuf *b)
{
	if (type != MSG_MGMT_REGISTER && type != MSG_MGMT_HEARTBEAT)
		return -EINVAL;
	if (r->ntargets < 0 || r->ntargets > MGMT_MAX_TARGETS)
		return -EINVAL;
	wbuf_put_u32(b, r->node_id);
	wbuf_put_str(b, r->addr);
	wbuf_put_u32(b, r->ntargets);
	for (int i = 0; i < r->ntargets; i++)
		target_put(b, &r->targets[i]);
	/* appended later: the targets' filesystem ids, u32 count then u64 each */
	wbuf_put_u32(b, r->ntargets);
	for (int i = 0; i < r->ntargets; i++)
		wbuf_put_u64(b, r->targets[i].fsid);
	return b->err;
}

/* The optional trailing section of filesystem ids (absent: all 0). */
static int fsids_get(struct rbuf *b, struct mgmt_req *r)
{
	if (rbuf_get_u32(b) != (uint32_t)r->ntargets)
		return -EBADMSG;
	for (int i = 0; i < r->ntargets && !b->err; i++)
		r->targets[i].fsid = rbuf_get_u64(b);
	return b->err;
}

int mgmt_req_decode(uint16_t type, struct rbuf *b, struct mgmt_req *ret)
{
	if (type != MSG_MGMT_REGISTER && type != MSG_MGMT_HEARTBEAT)
		return -EINVAL;
	memset(ret, 0, sizeof(*ret));
	ret->node_id = rbuf_get_u32(b);
	rbuf_get_str(b, ret->addr, sizeof(ret->addr));
	uint32_t n = rbuf_get_u32(b);
	if (n > MGMT_MAX_TARGETS)
		return -EBADMSG;
	ret->ntargets = (int)n;
	for (uint32_t i = 0; i < n && !b->err; i++)
		target_get(b, &ret->targets[i]);
	if (!b->err && rbuf_remaining(b) > 0 && fsids_get(b, ret) < 0)
		return -EBADMSG;
	return rbuf_done(b) < 0 ? -EBADMSG : 0;
}

void mgmt_register_reply_put(struct wbuf *b, uint32_t node_id, const uint32_t *ids, int n)
{
	wbuf_put_u32(b, node_id);
	wbuf_put_u32(b, (uint32_t)n);
	for (int i = 0; i < n; i++)
		wbuf_put_u32(b, ids[i]);
}

int mgmt_register_reply_get(struct rbuf *b, uint32_t *ret_node_id, uint32_t *ids, int n)
{
	uint32_t node = rbuf_get_u32(b);
	uint32_t got = rbuf_get_u32(b);

	if (b->err || got != (uint32_t)n)
		return -EBADMSG;
	for (int i = 0; i < n; i++)
		ids[i] = rbuf_get_u32(b);
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret_node_id = node;
	return 0;
}

/* ---- replies ------------------------------------------------------------- */

void meta_attr_put(struct wbuf *b, const struct strata_attr *a)
{
	wbuf_put_u64(b, a->ino);
	wbuf_put_u32(b, a->mode);
	wbuf_put_u32(b, a->nlink);
	wbuf_put_u32(b, a->uid);
	wbuf_put_u32(b, a->gid);
	wbuf_put_u64(b, a->size);
	wbuf_put_u64(b, a->rdev);
	wbuf_put_i64(b, a->atime_ns);
	wbuf_put_i64(b, a->mtime_ns);
	wbuf_put_i64(b, a->ctime_ns);
	wbuf_put_u64(b, a->generation);
	wbuf_put_u32(b, a->layout.chunk_size);
	wbuf_put_u32(b, a->layout.table_id);
	wbuf_put_u32(b, a->layout.stripe_seed);
}

void meta_attr_read(struct rbuf *b, struct strata_attr *a)
{
	a->ino = rbuf_get_u64(b);
	a->mode = rbuf_get_u32(b);
	a->nlink = rbuf_get_u32(b);
	a->uid = rbuf_get_u32(b);
	a->gid = rbuf_get_u32(b);
	a->size = rbuf_get_u64(b);
	a->rdev = rbuf_get_u64(b);
	a->atime_ns = rbuf_get_i64(b);
	a->mtime_ns = rbuf_get_i64(b);
	a->ctime_ns = rbuf_get_i64(b);
	a->generation = rbuf_get_u64(b);
	a->layout.chunk_size = rbuf_get_u32(b);
	a->layout.table_id = rbuf_get_u32(b);
	a->layout.stripe_seed = rbuf_get_u32(b);
}

int meta_attr_get(struct rbuf *b, struct strata_attr *a)
{
	struct strata_attr tmp;

	meta_attr_read(b, &tmp);
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*a = tmp;
	return 0;
}

void meta_statfs_put(struct wbuf *b, const struct strata_statfs *s)
{
	wbuf_put_u64(b, s->total_bytes);
	wbuf_put_u64(b, s->free_bytes);
	wbuf_put_u64(b, s->avail_bytes);
	wbuf_put_u64(b, s->total_inodes);
	wbuf_put_u64(b, s->used_inodes);
	wbuf_put_u32(b, s->bsize);
	wbuf_put_u32(b, s->namemax);
}

int meta_statfs_get(struct rbuf *b, struct strata_statfs *s)
{
	struct strata_statfs t;

	t.total_bytes = rbuf_get_u64(b);
	t.free_bytes = rbuf_get_u64(b);
	t.avail_bytes = rbuf_get_u64(b);
	t.total_inodes = rbuf_get_u64(b);
	t.used_inodes = rbuf_get_u64(b);
	t.bsize = rbuf_get_u32(b);
	t.namemax = rbuf_get_u32(b);
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*s = t;
	return 0;
}

size_t meta_readdir_begin(struct wbuf *b, bool with_attrs)
{
	size_t off = b->len;

	wbuf_put_u32(b, 0);
	wbuf_put_u8(b, 0);
	wbuf_put_u8(b, with_attrs);
	return off;
}

void meta_readdir_put(struct wbuf *b, const struct meta_dirent *d, bool with_attrs)
{
	wbuf_put_u64(b, d->ino);
	wbuf_put_u32(b, d->mode);
	wbuf_put_str(b, d->name);
	if (with_attrs)
		meta_attr_put(b, &d->attr);
}

void meta_readdir_end(struct wbuf *b, size_t hdr_off, uint32_t count, bool more)
{
	if (b->err || hdr_off + 5 > b->len)
		return;
	le32_put(b->data + hdr_off, count);
	b->data[hdr_off + 4] = more;
}

int meta_readdir_get(struct rbuf *b, struct meta_dirent *ents, int max, int *ret_more)
{
	uint32_t n = rbuf_get_u32(b);
	uint8_t more = rbuf_get_u8(b);
	bool attrs = rbuf_get_u8(b) != 0;

	if (b->err || max < 0 || n > (uint32_t)max)
		return -EBADMSG;
	for (uint32_t i = 0; i < n && !b->err; i++) {
		struct meta_dirent *d = &ents[i];
		memset(d, 0, sizeof(*d));
		d->ino = rbuf_get_u64(b);
		d->mode = rbuf_get_u32(b);
		rbuf_get_str(b, d->name, sizeof(d->name));
		if (attrs)
			meta_attr_read(b, &d->attr);
	}
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret_more = more != 0;
	return (int)n;
}

/* ---- routing ------------------------------------------------------------- */

void meta_routing_put(struct wbuf *b, const struct strata_routing *r)
{
	wbuf_put_u64(b, r->version);
	wbuf_put_u32(b, r->ntargets);
	for (uint32_t i = 0; i < r->ntargets; i++) {
		const struct strata_target *t = &r->targets[i];
		wbuf_put_u32(b, t->target_id);
		wbuf_put_u32(b, t->node_id);
		wbuf_put_u8(b, t->state);
		wbuf_put_str(b, t->addr);
	}
	wbuf_put_u32(b, r->nchains);
	for (uint32_t i = 0; i < r->nchains; i++) {
		const struct strata_chain *c = &r->chains[i];
		wbuf_put_u32(b, c->chain_id);
		wbuf_put_u32(b, c->version);
		wbuf_put_u8(b, c->ntargets);
		for (int j = 0; j < c->ntargets; j++)
			wbuf_put_u32(b, c->targets[j]);
	}
	wbuf_put_u32(b, r->ntables);
	for (uint32_t i = 0; i < r->ntables; i++) {
		const struct strata_chain_table *t = &r->tables[i];
		wbuf_put_u32(b, t->table_id);
		wbuf_put_u32(b, t->nchains);
		for (uint32_t j = 0; j < t->nchains; j++)
			wbuf_put_u32(b, t->chain_ids[j]);
	}
	wbuf_put_u32(b, r->lease_ms); /* appended: older peers stop before it */
	/* appended: the tables' replication factors, then the chains' */
	wbuf_put_u32(b, r->ntables);
	for (uint32_t i = 0; i < r->ntables; i++)
		wbuf_put_u8(b, r->tables[i].replicas);
	wbuf_put_u32(b, r->nchains);
	for (uint32_t i = 0; i < r->nchains; i++)
		wbuf_put_u8(b, r->chains[i].want);
}

/* A count read from the wire is trusted only as far as the bytes that
 * remain could hold that many items of min_size each. */
static int count_get(struct rbuf *b, size_t min_size, uint32_t *ret)
{
	uint32_t n = rbuf_get_u32(b);

	if (b->err || (uint64_t)n * min_size > rbuf_remaining(b))
		return -EBADMSG;
	*ret = n;
	return 0;
}

static int targets_get(struct rbuf *b, struct strata_routing *r)
{
	if (count_get(b, 11, &r->ntargets) < 0)
		return -EBADMSG;
	r->targets = calloc(r->ntargets ? r->ntargets : 1, sizeof(*r->targets));
	if (!r->targets)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->ntargets && !b->err; i++) {
		struct strata_target *t = &r->targets[i];
		t->target_id = rbuf_get_u32(b);
		t->node_id = rbuf_get_u32(b);
		t->state = rbuf_get_u8(b);
		rbuf_get_str(b, t->addr, sizeof(t->addr));
	}
	return b->err ? -EBADMSG : 0;
}

static int chains_get(struct rbuf *b, struct strata_routing *r)
{
	if (count_get(b, 9, &r->nchains) < 0)
		return -EBADMSG;
	r->chains = calloc(r->nchains ? r->nchains : 1, sizeof(*r->chains));
	if (!r->chains)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->nchains && !b->err; i++) {
		struct strata_chain *c = &r->chains[i];
		c->chain_id = rbuf_get_u32(b);
		c->version = rbuf_get_u32(b);
		c->ntargets = rbuf_get_u8(b);
		if (c->ntargets > STRATA_MAX_REPLICAS)
			return -EBADMSG;
		for (int j = 0; j < c->ntargets; j++)
			c->targets[j] = rbuf_get_u32(b);
	}
	return b->err ? -EBADMSG : 0;
}

static int tables_get(struct rbuf *b, struct strata_routing *r)
{
	if (count_get(b, 8, &r->ntables) < 0)
		return -EBADMSG;
	r->tables = calloc(r->ntables ? r->ntables : 1, sizeof(*r->tables));
	if (!r->tables)
		return -ENOMEM;
	for (uint32_t i = 0; i < r->ntables && !b->err; i++) {
		struct strata_chain_table *t = &r->tables[i];
		t->table_id = rbuf_get_u32(b);
		if (count_get(b, 4, &t->nchains) < 0)
			return -EBADMSG;
		t->chain_ids = calloc(t->nchains ? t->nchains : 1, sizeof(uint32_t));
		if (!t->chain_ids)
			return -ENOMEM;
		for (uint32_t j = 0; j < t->nchains; j++)
			t->chain_ids[j] = rbuf_get_u32(b);
	}
	return b->err ? -EBADMSG : 0;
}

/* The optional trailing factors (absent: 0, unknown); a count that does
 * not match the tables or chains above is malformed. */
static int factors_get(struct rbuf *b, struct strata_routing *r)
{
	if (rbuf_remaining(b) < 4)
		return 0;
	if (rbuf_get_u32(b) != r->ntables)
		return -EBADMSG;
	for (uint32_t i = 0; i < r->ntables; i++)
		r->tables[i].replicas = rbuf_get_u8(b);
	if (rbuf_get_u32(b) != r->nchains)
		return -EBADMSG;
	for (uint32_t i = 0; i < r->nchains; i++)
		r->chains[i].want = rbuf_get_u8(b);
	return b->err ? -EBADMSG : 0;
}

int meta_routing_get(struct rbuf *b, struct strata_routing *ret)
{
	struct strata_routing r = {0};
	int e;

	r.version = rbuf_get_u64(b);
	e = targets_get(b, &r);
	if (e == 0)
		e = chains_get(b, &r);
	if (e == 0)
		e = tables_get(b, &r);
	if (e == 0 && rbuf_remaining(b) >= 4)
		r.lease_ms = rbuf_get_u32(b);
	if (e == 0)
		e = factors_get(b, &r);
	if (e == 0 && rbuf_done(b) < 0)
		e = -EBADMSG;
	if (e < 0) {
		strata_routing_done(&r);
		return e;
	}
	*ret = r;
	return 0;
}

void strata_routing_done(struct strata_routing *r)
{
	if (!r)
		return;
	for (uint32_t i = 0; r->tables && i < r->ntables; i++)
		free(r->tables[i].chain_ids);
	free(r->tables);
	free(r->chains);
	free(r->targets);
	memset(r, 0, sizeof(*r));
}

int meta_name_check(const char *name)
{
	if (!name || !name[0] || strchr(name, '/'))
		return -EINVAL;
	if (strcmp(name, ".") == 0 || strcmp(name, "..") == 0)
		return -EINVAL;
	if (strlen(name) > STRATA_NAME_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* ---- replication management ---------------------------------------------- */

void mgmt_sync_put(struct wbuf *b, const struct mgmt_sync *s)
{
	wbuf_put_u32(b, s->chain_id);
	wbuf_put_u32(b, s->chain_ver);
	wbuf_put_u32(b, s->target_id);
	wbuf_put_u64(b, s->done);
	wbuf_put_u64(b, s->total);
	wbuf_put_u8(b, s->finished);
}

int mgmt_sync_get(struct rbuf *b, struct mgmt_sync *ret)
{
	struct mgmt_sync s;

	s.chain_id = rbuf_get_u32(b);
	s.chain_ver = rbuf_get_u32(b);
	s.target_id = rbuf_get_u32(b);
	s.done = rbuf_get_u64(b);
	s.total = rbuf_get_u64(b);
	s.finished = rbuf_get_u8(b);
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret = s;
	return 0;
}

void mgmt_cluster_put(struct wbuf *b, const struct mgmt_cluster *c)
{
	wbuf_put_u32(b, c->lease_ms);
	wbuf_put_u32(b, c->replicas);
	wbuf_put_u32(b, c->expect_nodes);
	wbuf_put_u32(b, c->nnodes);
	for (uint32_t i = 0; i < c->nnodes; i++) {
		wbuf_put_u32(b, c->nodes[i].node_id);
		wbuf_put_str(b, c->nodes[i].addr);
		wbuf_put_i64(b, c->nodes[i].age_ms);
		wbuf_put_u8(b, c->nodes[i].alive);
	}
	wbuf_put_u32(b, c->ntargets);
	for (uint32_t i = 0; i < c->ntargets; i++) {
		const struct mgmt_target_detail *t = &c->targets[i];
		wbuf_put_u32(b, t->target_id);
		wbuf_put_u32(b, t->node_id);
		wbuf_put_u32(b, t->chain_id);
		wbuf_put_u8(b, t->state);
		wbuf_put_str(b, t->path);
		wbuf_put_u64(b, t->total_bytes);
		wbuf_put_u64(b, t->free_bytes);
		wbuf_put_u64(b, t->sync_done);
		wbuf_put_u64(b, t->sync_total);
	}
}

void mgmt_cluster_done(struct mgmt_cluster *c)
{
	if (!c)
		return;
	free(c->nodes);
	free(c->targets);
	memset(c, 0, sizeof(*c));
}

static int cluster_nodes_get(struct rbuf *b, struct mgmt_cluster *c)
{
	if (count_get(b, 17, &c->nnodes) < 0)
		return -EBADMSG;
	c->nodes = calloc(c->nnodes ? c->nnodes : 1, sizeof(*c->nodes));
	if (!c->nodes)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->nnodes && !b->err; i++) {
		c->nodes[i].node_id = rbuf_get_u32(b);
		rbuf_get_str(b, c->nodes[i].addr, sizeof(c->nodes[i].addr));
		c->nodes[i].age_ms = rbuf_get_i64(b);
		c->nodes[i].alive = rbuf_get_u8(b);
	}
	return b->err ? -EBADMSG : 0;
}

static int cluster_targets_get(struct rbuf *b, struct mgmt_cluster *c)
{
	if (count_get(b, 49, &c->ntargets) < 0)
		return -EBADMSG;
	c->targets = calloc(c->ntargets ? c->ntargets : 1, sizeof(*c->targets));
	if (!c->targets)
		return -ENOMEM;
	for (uint32_t i = 0; i < c->ntargets && !b->err; i++) {
		struct mgmt_target_detail *t = &c->targets[i];
		t->target_id = rbuf_get_u32(b);
		t->node_id = rbuf_get_u32(b);
		t->chain_id = rbuf_get_u32(b);
		t->state = rbuf_get_u8(b);
		rbuf_get_str(b, t->path, sizeof(t->path));
		t->total_bytes = rbuf_get_u64(b);
		t->free_bytes = rbuf_get_u64(b);
		t->sync_done = rbuf_get_u64(b);
		t->sync_total = rbuf_get_u64(b);
	}
	return b->err ? -EBADMSG : 0;
}

int mgmt_cluster_get(struct rbuf *b, struct mgmt_cluster *ret)
{
	struct mgmt_cluster c = {0};
	int e;

	c.lease_ms = rbuf_get_u32(b);
	c.replicas = rbuf_get_u32(b);
	c.expect_nodes = rbuf_get_u32(b);
	e = cluster_nodes_get(b, &c);
	if (e == 0)
		e = cluster_targets_get(b, &c);
	if (e == 0 && rbuf_done(b) < 0)
		e = -EBADMSG;
	if (e < 0) {
		mgmt_cluster_done(&c);
		return e;
	}
	*ret = c;
	return 0;
}

/* ---- fsck -------------------------------------------------------------------- */

void meta_fsck_req_put(struct wbuf *b, uint32_t flags, uint32_t max)
{
	wbuf_put_u32(b, flags);
	wbuf_put_u32(b, max);
}

int meta_fsck_req_get(struct rbuf *b, uint32_t *ret_flags, uint32_t *ret_max)
{
	uint32_t f = rbuf_get_u32(b), m = rbuf_get_u32(b);

	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret_flags = f;
	*ret_max = m;
	return 0;
}

void meta_fsck_report_put(struct wbuf *b, const struct meta_fsck_report *r)
{
	wbuf_put_u64(b, r->inodes);
	wbuf_put_u64(b, r->dirs);
	wbuf_put_u64(b, r->files);
	wbuf_put_u64(b, r->dentries);
	wbuf_put_u64(b, r->sessions);
	wbuf_put_u64(b, r->orphans);
	wbuf_put_u64(b, r->gc_queued);
	wbuf_put_u32(b, FSCK_KIND_MAX - 1);
	for (int k = 1; k < FSCK_KIND_MAX; k++) {
		wbuf_put_u32(b, r->found[k]);
		wbuf_put_u32(b, r->repaired[k]);
	}
	wbuf_put_u32(b, r->n);
	wbuf_put_u8(b, r->truncated);
	for (uint32_t i = 0; i < r->n; i++) {
		const struct meta_fsck_record *c = &r->rec[i];
		wbuf_put_u16(b, c->kind);
		wbuf_put_u8(b, c->repaired);
		wbuf_put_u64(b, c->ino);
		wbuf_put_u64(b, c->parent);
		wbuf_put_u64(b, c->expected);
		wbuf_put_u64(b, c->actual);
		wbuf_put_str(b, c->name);
	}
}

int meta_fsck_report_get(struct rbuf *b, struct meta_fsck_report *ret)
{
	struct meta_fsck_report r = {0};

	r.inodes = rbuf_get_u64(b);
	r.dirs = rbuf_get_u64(b);
	r.files = rbuf_get_u64(b);
	r.dentries = rbuf_get_u64(b);
	r.sessions = rbuf_get_u64(b);
	r.orphans = rbuf_get_u64(b);
	r.gc_queued = rbuf_get_u64(b);
	uint32_t nk = rbuf_get_u32(b);
	if (nk > 1024 || rbuf_remaining(b) < (size_t)nk * 8)
		return -EBADMSG;
	for (uint32_t k = 1; k <= nk; k++) {
		uint32_t f = rbuf_get_u32(b), p = rbuf_get_u32(b);
		if (k < FSCK_KIND_MAX) {
			r.found[k] = f;
			r.repaired[k] = p;
		}
	}
	r.n = rbuf_get_u32(b);
	r.truncated = rbuf_get_u8(b);
	/* a record is at least 37 bytes: a count past that is malformed */
	if (b->err || r.n > rbuf_remaining(b) / 37)
		return -EBADMSG;
	if (r.n && !(r.rec = calloc(r.n, sizeof(*r.rec))))
		return -ENOMEM;
	for (uint32_t i = 0; i < r.n; i++) {
		struct meta_fsck_record *c = &r.rec[i];
		c->kind = rbuf_get_u16(b);
		c->repaired = rbuf_get_u8(b);
		c->ino = rbuf_get_u64(b);
		c->parent = rbuf_get_u64(b);
		c->expected = rbuf_get_u64(b);
		c->actual = rbuf_get_u64(b);
		rbuf_get_str(b, c->name, sizeof(c->name));
	}
	if (rbuf_done(b) < 0) {
		free(r.rec);
		return -EBADMSG;
	}
	*ret = r;
	return 0;
}

void meta_fsck_chunks_req_put(struct wbuf *b, uint32_t flags, const struct meta_fsck_chunk *c,
			      uint32_t n)
{
	wbuf_put_u32(b, flags);
	wbuf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		wbuf_put_u64(b, c[i].ino);
		wbuf_put_u32(b, c[i].index);
		wbuf_put_u32(b, c[i].table_id);
	}
}

int meta_fsck_chunks_req_get(struct rbuf *b, uint32_t *ret_flags,
			     struct meta_fsck_chunk **ret_items, uint32_t *ret_n)
{
	uint32_t flags = rbuf_get_u32(b), n = rbuf_get_u32(b);

	if (b->err || n > META_FSCK_CHUNKS_MAX || rbuf_remaining(b) < (size_t)n * 16)
		return -EBADMSG;
	struct meta_fsck_chunk *c = calloc(n ? n : 1, sizeof(*c));
	if (!c)
		return -ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		c[i].ino = rbuf_get_u64(b);
		c[i].index = rbuf_get_u32(b);
		c[i].table_id = rbuf_get_u32(b);
	}
	if (rbuf_done(b) < 0) {
		free(c);
		return -EBADMSG;
	}
	*ret_flags = flags;
	*ret_items = c;
	*ret_n = n;
	return 0;
}

void meta_fsck_chunks_reply_put(struct wbuf *b, const struct meta_fsck_chunk *c, uint32_t n)
{
	wbuf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		wbuf_put_u8(b, c[i].verdict);
		wbuf_put_u8(b, c[i].removed);
		wbuf_put_u32(b, (uint32_t)c[i].err);
		wbuf_put_u32(b, c[i].first_orphan);
		wbuf_put_u64(b, c[i].size);
	}
}

int meta_fsck_chunks_reply_get(struct rbuf *b, struct meta_fsck_chunk *c, uint32_t n)
{
	if (rbuf_get_u32(b) != n || b->err)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		c[i].verdict = rbuf_get_u8(b);
		c[i].removed = rbuf_get_u8(b);
		c[i].err = (int32_t)rbuf_get_u32(b);
		c[i].first_orphan = rbuf_get_u32(b);
		c[i].size = rbuf_get_u64(b);
	}
	return rbuf_done(b) < 0 ? -EBADMSG : 0;
}

void meta_close_many_put(struct wbuf *b, const struct meta_close_item *items, uint32_t n)
{
	wbuf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		wbuf_put_u64(b, items[i].ino);
		wbuf_put_u64(b, items[i].session);
		wbuf_put_i64(b, items[i].length);
		wbuf_put_i64(b, items[i].mtime_ns);
	}
}

int meta_close_many_get(struct rbuf *b, struct meta_close_item *items, uint32_t *ret_n)
{
	uint32_t n = rbuf_get_u32(b);

	if (b->err || n == 0 || n > META_CLOSE_MANY_MAX || rbuf_remaining(b) != (size_t)n * 32)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		items[i].ino = rbuf_get_u64(b);
		items[i].session = rbuf_get_u64(b);
		items[i].length = rbuf_get_i64(b);
		items[i].mtime_ns = rbuf_get_i64(b);
	}
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret_n = n;
	return 0;
}

void meta_close_many_reply_put(struct wbuf *b, const int *results, uint32_t n)
{
	wbuf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++)
		wbuf_put_u32(b, (uint32_t)results[i]);
}

int meta_close_many_reply_get(struct rbuf *b, int *results, uint32_t n)
{
	if (rbuf_get_u32(b) != n || b->err)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		int32_t r = (int32_t)rbuf_get_u32(b);

		results[i] = r > 0 || r < -4095 ? -EIO : r; /* only errnos */
	}
	return rbuf_done(b) < 0 ? -EBADMSG : 0;
}
