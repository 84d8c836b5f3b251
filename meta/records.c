/* records.c — the key schema and value records of the meta store.
 *
 * Keys: a one-byte tag, then big-endian integers and raw names, so that
 * RocksDB's bytewise order is numeric order of ids and name order of
 * directory entries (see ns-internal.h for the list and README.md for the
 * layout). Values: a version byte (REC_VERSION) then little-endian fields
 * written with the wire.h codec; decoders refuse a newer version.
 *
 * Here: the namespace's records (values after the version byte):
 *   I inode  : see inode_encode (attributes, layout, parent)
 *   D dentry : ino u64, type bits u32
 *   M counter: u64
 *   S session: flags u32, opened i64, client str
 *   G gc     : size u64, chunk_size u32, table_id u32, stripe_seed u32
 *   R opid   : type u16, done i64, parts u8 (1: inode, 2: session), then
 *              ino u64 and the inode record as a blob (u32 length), and
 *              session u64, each if its part is set
 *   Q opage  : empty (the key says it all)
 * and the cluster map's (cluster.c, chainmap.c, tables.c), keyed by tag and
 * a be32 id (key_id):
 *   N node   : addr str, last_seen i64
 *   T target : node u32, state u8, path str, addr str, total u64, free u64,
 *              last_seen i64, fsid u64 (appended; absent: 0)
 *   H chain  : version u32, n u8, target ids u32 x n, want u8 (appended;
 *              absent: n)
 *   B table  : n u32, chain ids u32 x n, replicas u8 (appended; absent: the
 *              smallest want of its chains, tables.c) */
#include <errno.h>
#include <string.h>
#include "fs/proto.h"
#include "meta/ns-internal.h"

void key_init(struct key *k, uint8_t tag)
{
	k->b[0] = tag;
	k->len = 1;
}

void key_u64(struct key *k, uint64_t v)
{
	for (int i = 7; i >= 0; i--)
		k->b[k->len++] = (uint8_t)(v >> (8 * i));
}

void key_u32(struct key *k, uint32_t v)
{
	for (int i = 3; i >= 0; i--)
		k->b[k->len++] = (uint8_t)(v >> (8 * i));
}

/* Appends s without its NUL; callers bound s (names <= 255, client ids
 * <= 64), and the key buffer is sized for the largest shape. */
void key_str(struct key *k, const char *s)
{
	size_t n = strnlen(s, sizeof(k->b) - k->len);

	memcpy(k->b + k->len, s, n);
	k->len += n;
}

uint64_t key_get_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

uint32_t key_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void key_id(struct key *k, uint8_t tag, uint32_t id)
{
	key_init(k, tag);
	key_u32(k, id);
}

void key_ino(struct key *k, uint8_t tag, uint64_t ino)
{
	key_init(k, tag);
	key_u64(k, ino);
}

void key_dentry(struct key *k, uint64_t parent, const char *name)
{
	key_named(k, K_DENTRY, parent, name);
}

void key_named(struct key *k, uint8_t tag, uint64_t ino, const char *name)
{
	key_ino(k, tag, ino);
	if (name)
		key_str(k, name);
}

void key_session(struct key *k, uint64_t ino, uint64_t sid)
{
	key_ino(k, K_SESSION, ino);
	key_u64(k, sid);
}

/* U client 0x00 ino sid: the 0x00 ends the client id, so the prefix of one
 * client never matches another whose id it begins. ino == 0 && sid == 0
 * with client set gives the prefix (caller trims to it). */
void key_client(struct key *k, const char *client, uint64_t ino, uint64_t sid)
{
	key_init(k, K_CLIENT);
	key_str(k, client);
	k->b[k->len++] = 0;
	key_u64(k, ino);
	key_u64(k, sid);
}

void key_counter(struct key *k, const char *name)
{
	key_init(k, K_COUNTER);
	key_str(k, name);
}

void key_opid(struct key *k, const struct meta_opid *op)
{
	key_init(k, K_OPID);
	key_u64(k, op->conn);
	key_u64(k, op->unique);
}

void key_opage(struct key *k, int64_t done_ns, const struct meta_opid *op)
{
	key_init(k, K_OPAGE);
	key_u64(k, done_ns < 0 ? 0 : (uint64_t)done_ns);
	key_u64(k, op->conn);
	key_u64(k, op->unique);
}

void inode_encode(const struct inode *in, struct wbuf *b)
{
	const struct strata_attr *a = &in->a;

	wbuf_put_u8(b, REC_VERSION);
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
	wbuf_put_u64(b, in->parent);
}

int inode_decode(const uint8_t *p, size_t len, struct inode *ret)
{
	struct rbuf b;
	struct inode in = {0};
	struct strata_attr *a = &in.a;

	rbuf_init(&b, p, len);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	a->mode = rbuf_get_u32(&b);
	a->nlink = rbuf_get_u32(&b);
	a->uid = rbuf_get_u32(&b);
	a->gid = rbuf_get_u32(&b);
	a->size = rbuf_get_u64(&b);
	a->rdev = rbuf_get_u64(&b);
	a->atime_ns = rbuf_get_i64(&b);
	a->mtime_ns = rbuf_get_i64(&b);
	a->ctime_ns = rbuf_get_i64(&b);
	a->generation = rbuf_get_u64(&b);
	a->layout.chunk_size = rbuf_get_u32(&b);
	a->layout.table_id = rbuf_get_u32(&b);
	a->layout.stripe_seed = rbuf_get_u32(&b);
	in.parent = rbuf_get_u64(&b);
	if (rbuf_done(&b) < 0)
		return -EIO;
	*ret = in;
	return 0;
}

/* ---- the namespace's other records --------------------------------------- */

enum { OPID_INODE = 1, OPID_SESSION = 2 };

/* Which parts of an answer a mutation of type has (what it replies). */
static uint8_t opid_parts(uint16_t type)
{
	switch (type) {
	case MSG_META_MKNOD:
	case MSG_META_MKDIR:
	case MSG_META_SYMLINK:
	case MSG_META_LINK:
		return OPID_INODE;
	case MSG_META_CREATE:
		return OPID_INODE | OPID_SESSION;
	case MSG_META_OPEN:
		return OPID_SESSION;
	default:
		return 0;
	}
}

void opid_encode(const struct opid_rec *o, struct wbuf *b)
{
	uint8_t parts = opid_parts(o->type);

	wbuf_put_u8(b, REC_VERSION);
	wbuf_put_u16(b, o->type);
	wbuf_put_i64(b, o->done_ns);
	wbuf_put_u8(b, parts);
	if (parts & OPID_INODE) {
		struct inode in = {.a = o->a.attr};
		struct wbuf ib;

		wbuf_init(&ib);
		inode_encode(&in, &ib);
		wbuf_put_u64(b, o->a.attr.ino);
		if (ib.err)
			b->err = ib.err;
		else
			wbuf_put_blob(b, ib.data, (uint32_t)ib.len);
		wbuf_done(&ib);
	}
	if (parts & OPID_SESSION)
		wbuf_put_u64(b, o->a.session);
}

int opid_decode(const uint8_t *p, size_t len, struct opid_rec *ret)
{
	struct opid_rec o = {0};
	struct inode in;
	struct rbuf b;
	uint8_t parts;

	rbuf_init(&b, p, len);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	o.type = rbuf_get_u16(&b);
	o.done_ns = rbuf_get_i64(&b);
	parts = rbuf_get_u8(&b);
	if (parts & OPID_INODE) {
		uint64_t ino = rbuf_get_u64(&b);
		uint32_t n;
		const void *v = rbuf_get_blob(&b, &n);

		if (b.err || inode_decode(v, n, &in) < 0)
			return -EIO;
		o.a.attr = in.a;
		o.a.attr.ino = ino;
	}
	if (parts & OPID_SESSION)
		o.a.session = rbuf_get_u64(&b);
	if (rbuf_done(&b) < 0 || parts & ~(OPID_INODE | OPID_SESSION))
		return -EIO;
	*ret = o;
	return 0;
}

void dentry_encode(const struct dentry *d, uint8_t ret[DENTRY_REC_LEN])
{
	ret[0] = REC_VERSION;
	le64_put(ret + 1, d->ino);
	le32_put(ret + 9, d->mode & 0170000);
}

int dentry_decode(const uint8_t *p, size_t len, struct dentry *ret)
{
	struct rbuf b;
	struct dentry d;

	rbuf_init(&b, p, len);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	d.ino = rbuf_get_u64(&b);
	d.mode = rbuf_get_u32(&b);
	if (rbuf_done(&b) < 0)
		return -EIO;
	*ret = d;
	return 0;
}

void counter_encode(uint64_t v, uint8_t ret[COUNTER_REC_LEN])
{
	ret[0] = REC_VERSION;
	le64_put(ret + 1, v);
}

int counter_decode(const uint8_t *p, size_t len, uint64_t *ret)
{
	if (len != COUNTER_REC_LEN || p[0] != REC_VERSION)
		return -EIO;
	*ret = le64_get(p + 1);
	return 0;
}

void session_encode(uint32_t flags, int64_t opened_ns, const char *client, struct wbuf *b)
{
	wbuf_put_u8(b, REC_VERSION);
	wbuf_put_u32(b, flags);
	wbuf_put_i64(b, opened_ns);
	wbuf_put_str(b, client);
}

int session_decode(const uint8_t *p, size_t len, struct session_rec *ret)
{
	struct rbuf b;

	rbuf_init(&b, p, len);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	ret->flags = rbuf_get_u32(&b);
	ret->opened_ns = rbuf_get_i64(&b);
	rbuf_get_str(&b, ret->client, sizeof(ret->client));
	return rbuf_done(&b) < 0 ? -EIO : 0;
}

void gc_encode(const struct inode *in, uint8_t ret[GC_REC_LEN])
{
	ret[0] = REC_VERSION;
	le64_put(ret + 1, in->a.size);
	le32_put(ret + 9, in->a.layout.chunk_size);
	le32_put(ret + 13, in->a.layout.table_id);
	le32_put(ret + 17, in->a.layout.stripe_seed);
}

int gc_decode(const uint8_t *p, size_t len, struct ns_gc_item *ret)
{
	if (len != GC_REC_LEN || p[0] != REC_VERSION)
		return -EIO;
	ret->size = le64_get(p + 1);
	ret->layout.chunk_size = le32_get(p + 9);
	ret->layout.table_id = le32_get(p + 13);
	ret->layout.stripe_seed = le32_get(p + 17);
	return 0;
}

/* ---- cluster map records ------------------------------------------------- */

/* Starts a record value in w: the version byte. */
static void rec_begin(struct wbuf *w)
{
	wbuf_init(w);
	wbuf_put_u8(w, REC_VERSION);
}

/* Adds the value in w under key (tag, id) to b and frees w's buffer.
 * Returns w's encoding error (0 when it had none). */
static int rec_put_id(struct kv_batch *b, uint8_t tag, uint32_t id, struct wbuf *w)
{
	struct key k;
	int e = w->err;

	key_id(&k, tag, id);
	kv_batch_put(b, k.b, k.len, w->data, w->len);
	wbuf_done(w);
	return e;
}

void cluster_put_node(struct kv_batch *b, uint32_t id, const char *addr, int64_t now)
{
	struct wbuf w;

	rec_begin(&w);
	wbuf_put_str(&w, addr);
	wbuf_put_i64(&w, now);
	rec_put_id(b, K_NODE, id, &w);
}

void cluster_put_target(struct kv_batch *b, const struct cluster_target *t)
{
	struct wbuf w;

	rec_begin(&w);
	wbuf_put_u32(&w, t->node_id);
	wbuf_put_u8(&w, t->state);
	wbuf_put_str(&w, t->path);
	wbuf_put_str(&w, t->addr);
	wbuf_put_u64(&w, t->total_bytes);
	wbuf_put_u64(&w, t->free_bytes);
	wbuf_put_i64(&w, t->last_seen_ns);
	wbuf_put_u64(&w, t->fsid);
	rec_put_id(b, K_TARGET, t->target_id, &w);
}

int cluster_target_decode(const uint8_t *p, size_t len, struct cluster_target *ret)
{
	struct cluster_target t = {0};
	struct rbuf b;

	rbuf_init(&b, p, len);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	t.node_id = rbuf_get_u32(&b);
	t.state = rbuf_get_u8(&b);
	rbuf_get_str(&b, t.path, sizeof(t.path));
	rbuf_get_str(&b, t.addr, sizeof(t.addr));
	t.total_bytes = rbuf_get_u64(&b);
	t.free_bytes = rbuf_get_u64(&b);
	t.last_seen_ns = rbuf_get_i64(&b);
	if (!b.err && rbuf_remaining(&b) >= 8)
		t.fsid = rbuf_get_u64(&b);
	if (rbuf_done(&b) < 0)
		return -EIO;
	*ret = t;
	return 0;
}

void cluster_put_chain(struct kv_batch *b, const struct strata_chain *c)
{
	struct wbuf w;

	rec_begin(&w);
	wbuf_put_u32(&w, c->version);
	wbuf_put_u8(&w, c->ntargets);
	for (int i = 0; i < c->ntargets; i++)
		wbuf_put_u32(&w, c->targets[i]);
	wbuf_put_u8(&w, c->want);
	rec_put_id(b, K_CHAIN, c->chain_id, &w);
}

int cluster_chain_decode(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl,
			 struct strata_chain *c)
{
	struct rbuf b;

	if (kl != 5)
		return -EIO;
	memset(c, 0, sizeof(*c));
	rbuf_init(&b, v, vl);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	c->chain_id = key_get_u32(k + 1);
	c->version = rbuf_get_u32(&b);
	c->ntargets = rbuf_get_u8(&b);
	if (c->ntargets > STRATA_MAX_REPLICAS)
		return -EIO;
	for (int i = 0; i < c->ntargets; i++)
		c->targets[i] = rbuf_get_u32(&b);
	c->want = rbuf_remaining(&b) >= 1 ? rbuf_get_u8(&b) : c->ntargets;
	return rbuf_done(&b) < 0 ? -EIO : 0;
}

int cluster_put_table(struct kv_batch *b, uint32_t table_id, uint8_t r, const uint32_t *ids, int n)
{
	struct wbuf w;

	rec_begin(&w);
	wbuf_put_u32(&w, (uint32_t)n);
	for (int i = 0; i < n; i++)
		wbuf_put_u32(&w, ids[i]);
	wbuf_put_u8(&w, r);
	return rec_put_id(b, K_TABLE, table_id, &w);
}

int cluster_table_decode(const uint8_t *k, size_t kl, const uint8_t *v, size_t vl, struct rbuf *b,
			 uint32_t *ret_n)
{
	if (kl != 5 || vl < 5 || v[0] != REC_VERSION)
		return -EIO;
	rbuf_init(b, v + 1, vl - 1);
	*ret_n = rbuf_get_u32(b);
	return (uint64_t)*ret_n * 4 > rbuf_remaining(b) ? -EIO : 0;
}
