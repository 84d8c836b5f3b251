/* ns_session.c — open-file sessions, file lengths and the GC queue.
 *
 * A session S(ino,sid) records that client `client` has ino open; its index
 * U(client,ino,sid) lets a fresh mount of the same client id close all of
 * its predecessor's sessions (ns_clear_sessions). While a session is open an
 * unlinked file stays as an orphan (nlink 0, O(ino)); the close that ends
 * the last session of an orphan deletes it and queues G(ino) in the same
 * batch. The GC thread (meta/gc.c) removes the queued file's chunks and then
 * the G entries of a batch (ns_gc_done_many). */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include "fs/cleanup.h"
#include "fs/proto.h"
#include "meta/ns-internal.h"

void ns_add_session(struct ns *ns, struct kv_batch *b, uint64_t ino, uint32_t flags,
		    const char *client, uint64_t *ret_sid)
{
	uint64_t sid = ns->next_session++;
	struct wbuf w;
	struct key k;

	wbuf_init(&w);
	session_encode(flags, ns_now(), client, &w);
	key_session(&k, ino, sid);
	kv_batch_put(b, k.b, k.len, w.data, w.len);
	wbuf_done(&w);
	key_client(&k, client, ino, sid);
	kv_batch_put(b, k.b, k.len, "", 0);
	ns_put_counter(b, "next_session", ns->next_session);
	*ret_sid = sid;
}

static int open_locked(struct ns *ns, struct kv_batch *b, uint64_t ino, uint32_t flags,
		       const char *client, uint64_t *ret_sid)
{
	struct inode in;
	int r = ns_get_inode(ns, ino, &in);

	if (r < 0)
		return r;
	if (mode_is_dir(in.a.mode))
		return -EISDIR;
	if (!mode_is_reg(in.a.mode))
		return -EINVAL;
	if (flags & O_TRUNC) {
		in.a.size = 0;
		in.a.mtime_ns = in.a.ctime_ns = ns_now();
		ns_put_inode(b, &in);
	}
	ns_add_session(ns, b, ino, flags, client, ret_sid);
	return 0;
}

struct open_args {
	uint64_t ino;
	uint32_t flags;
	const char *client;
};

static int open_build(struct ns *ns, struct kv_batch *b, void *arg, struct ns_answer *ret)
{
	const struct open_args *x = arg;

	return open_locked(ns, b, x->ino, x->flags, x->client, &ret->session);
}

int ns_open_file(struct ns *ns, const struct meta_opid *op, strata_ino_t ino, uint32_t flags,
		 const char *client_id, uint64_t *ret_session)
{
	struct open_args x = {ino, flags, client_id};
	struct ns_answer a;
	int r;

	if (strlen(client_id) > NS_CLIENT_ID_MAX)
		return -EINVAL;
	r = ns_mutate(ns, op, MSG_META_OPEN, open_build, &x, &a);
	if (r == 0)
		*ret_session = a.session;
	return r;
}

/* Reads the client id of session (ino, sid) into client[NS_CLIENT_ID_MAX+1]. */
static int session_client(struct ns *ns, uint64_t ino, uint64_t sid, char *client)
{
	_cleanup_free_ uint8_t *v = NULL;
	struct session_rec s;
	struct key k;
	size_t n;
	int r;

	key_session(&k, ino, sid);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r < 0)
		return r;
	r = session_decode(v, n, &s);
	if (r == 0)
		memcpy(client, s.client, sizeof(s.client));
	return r;
}

struct other_ctx {
	uint64_t sid;
	int found;
};

static int other_session(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct other_ctx *c = ctx;

	if (kl == 17 && key_get_u64(k + 9) != c->sid) {
		c->found = 1;
		return 1;
	}
	return 0;
}

/* Whether ino has a session other than sid. */
static int has_other_session(struct ns *ns, uint64_t ino, uint64_t sid)
{
	struct other_ctx c = {sid, 0};
	struct key k;

	key_ino(&k, K_SESSION, ino);
	int r = kv_scan(ns->kv, k.b, k.len, NULL, 0, other_session, &c);
	return r < 0 ? r : c.found;
}

static void apply_length(struct inode *in, int64_t length, int64_t mtime_ns)
{
	if (length >= 0 && (uint64_t)length > in->a.size)
		in->a.size = (uint64_t)length;
	if (mtime_ns >= 0)
		in->a.mtime_ns = in->a.ctime_ns = mtime_ns;
}

static int close_locked(struct ns *ns, struct kv_batch *b, uint64_t ino, uint64_t sid,
			int64_t length, int64_t mtime_ns)
{
	char client[NS_CLIENT_ID_MAX + 1];
	struct inode in;
	struct key k;
	int r = session_client(ns, ino, sid, client);

	if (r < 0)
		return r == -ENOENT ? -EBADF : r;
	if ((r = ns_get_inode(ns, ino, &in)) < 0)
		return r;
	key_session(&k, ino, sid);
	kv_batch_del(b, k.b, k.len);
	key_client(&k, client, ino, sid);
	kv_batch_del(b, k.b, k.len);
	apply_length(&in, length, mtime_ns);
	r = in.a.nlink > 0 ? 1 : has_other_session(ns, ino, sid);
	if (r < 0)
		return r;
	if (r == 0)
		return ns_destroy_inode(ns, b, &in); /* last close of an orphan */
	if (length >= 0 || mtime_ns >= 0)
		ns_put_inode(b, &in);
	return 0;
}

int ns_close_file(struct ns *ns, strata_ino_t ino, uint64_t session, int64_t length,
		  int64_t mtime_ns)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	int r;

	if (!b)
		return -ENOMEM;
	r = close_locked(ns, b, ino, session, length, mtime_ns);
	return r ?: ns_commit(ns, b);
}

/* Whether ino is among items[0..n). */
static bool closing_ino(const struct meta_close_item *items, uint32_t n, uint64_t ino)
{
	for (uint32_t i = 0; i < n; i++)
		if (items[i].ino == ino)
			return true;
	return false;
}

int ns_close_files(struct ns *ns, const struct meta_close_item *items, uint32_t n, int *results)
{
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct kv_batch *b = kv_batch_new();
	uint32_t first = 0; /* items[first..i) are in b */
	int r = 0;

	if (!b)
		return -ENOMEM;
	for (uint32_t i = 0; i < n && r == 0; i++) {
		/* a close reads what earlier ones changed (the last session of
		 * an orphan): an inode already in the batch commits it first */
		if (closing_ino(items + first, i - first, items[i].ino)) {
			r = ns_commit(ns, b);
			kv_batch_free(b);
			b = r == 0 ? kv_batch_new() : NULL;
			r = r ?: (b ? 0 : -ENOMEM);
			first = i;
			if (r < 0)
				break;
		}
		results[i] = close_locked(ns, b, items[i].ino, items[i].session, items[i].length,
					  items[i].mtime_ns);
		if (results[i] < 0 && results[i] != -EBADF && results[i] != -ENOENT)
			r = results[i]; /* the store failed: what is in b is not known good */
	}
	if (r == 0)
		r = ns_commit(ns, b);
	kv_batch_free(b);
	return r;
}

struct clear_ctx {
	uint64_t ino[256], sid[256];
	int n;
};

static int clear_collect(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct clear_ctx *c = ctx;

	if (kl < 16)
		return -EIO;
	c->ino[c->n] = key_get_u64(k + kl - 16);
	c->sid[c->n] = key_get_u64(k + kl - 8);
	return ++c->n == (int)ARRAY_SIZE(c->ino) ? 1 : 0;
}

/* One round: closes up to 256 sessions of client, each in its own batch
 * (each is a complete close). Returns how many. */
static int clear_round(struct ns *ns, const char *client)
{
	struct clear_ctx c = {.n = 0};
	struct key prefix;
	int r;

	key_client(&prefix, client, 0, 0);
	prefix.len -= 16;
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	r = kv_scan(ns->kv, prefix.b, prefix.len, NULL, 0, clear_collect, &c);
	for (int i = 0; r >= 0 && i < c.n; i++) {
		_cleanup_batch_ struct kv_batch *b = kv_batch_new();
		if (!b)
			return -ENOMEM;
		r = close_locked(ns, b, c.ino[i], c.sid[i], -1, -1);
		if (r == 0)
			r = ns_commit(ns, b);
	}
	return r < 0 ? r : c.n;
}

int ns_clear_sessions(struct ns *ns, const char *client_id)
{
	int total = 0, r;

	if (!client_id[0] || strlen(client_id) > NS_CLIENT_ID_MAX)
		return -EINVAL;
	do {
		r = clear_round(ns, client_id);
		if (r < 0)
			return r;
		total += r;
	} while (r == 256);
	return total;
}

int ns_set_length(struct ns *ns, strata_ino_t ino, uint64_t length, int64_t mtime_ns)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	_cleanup_nsunlock_ struct ns *locked = ns_locked(ns);
	struct inode in;
	int r;

	if (!b)
		return -ENOMEM;
	if (length > INT64_MAX)
		return -EFBIG;
	if ((r = ns_get_inode(ns, ino, &in)) < 0)
		return r;
	if (!mode_is_reg(in.a.mode))
		return mode_is_dir(in.a.mode) ? -EISDIR : -EINVAL;
	apply_length(&in, (int64_t)length, mtime_ns);
	ns_put_inode(b, &in);
	return ns_commit(ns, b);
}

static int count_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	(*(int *)ctx)++;
	return 0;
}

int ns_session_count(struct ns *ns, strata_ino_t ino)
{
	struct key k;
	int n = 0;

	key_ino(&k, K_SESSION, ino);
	int r = kv_scan(ns->kv, k.b, k.len, NULL, 0, count_one, &n);
	return r < 0 ? r : n;
}

/* ---- GC queue ------------------------------------------------------------ */

struct gc_ctx {
	struct ns_gc_item *items;
	int max, n;
};

static int gc_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct gc_ctx *c = ctx;
	struct ns_gc_item *it;

	if (c->n >= c->max)
		return 1;
	it = &c->items[c->n];
	if (kl != 9 || gc_decode(v, vl, it) < 0)
		return 0; /* unreadable entry: skip, fsck reports it */
	it->ino = key_get_u64(k + 1);
	c->n++;
	return 0;
}

int ns_gc_list_after(struct ns *ns, strata_ino_t after, struct ns_gc_item *items, int max)
{
	struct gc_ctx c = {items, max, 0};
	uint8_t tag = K_GC;
	struct key start;
	int r;

	key_ino(&start, K_GC, after);
	r = kv_scan(ns->kv, &tag, 1, after ? start.b : NULL, after ? start.len : 0, gc_one, &c);
	return r < 0 ? r : c.n;
}

int ns_gc_list(struct ns *ns, struct ns_gc_item *items, int max)
{
	return ns_gc_list_after(ns, 0, items, max);
}

int ns_gc_done_many(struct ns *ns, const strata_ino_t *inos, int n)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct key k;

	if (!b)
		return -ENOMEM;
	if (n <= 0)
		return 0;
	for (int i = 0; i < n; i++) {
		key_ino(&k, K_GC, inos[i]);
		kv_batch_del(b, k.b, k.len);
	}
	return ns_commit(ns, b);
}

int ns_gc_done(struct ns *ns, strata_ino_t ino)
{
	return ns_gc_done_many(ns, &ino, 1);
}
