/* ns.c — the meta engine's lifetime and the helpers every operation uses:
 * opening the store (and creating the root directory on first start),
 * counters, reading and writing inode and dentry records, committing a
 * batch, and dropping links (orphans, the GC queue).
 *
 * The operations themselves live in ns_entry.c (create and remove names),
 * ns_rename.c, ns_attr.c (attributes, xattrs, readdir, statfs),
 * ns_session.c (open files, GC queue) and cluster.c (cluster map). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include "fs/cleanup.h"
#include "meta/ns-internal.h"

int64_t ns_now(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_REALTIME, &ts);
	return (int64_t)ts.tv_sec * 1000000000 + ts.tv_nsec;
}

void ns_lock(struct ns *ns)
{
	pthread_mutex_lock(&ns->mu);
}

void ns_unlock(struct ns *ns)
{
	pthread_mutex_unlock(&ns->mu);
}

int ns_get_counter(struct ns *ns, const char *name, uint64_t *ret)
{
	_cleanup_free_ uint8_t *v = NULL;
	struct key k;
	size_t n;
	int r;

	key_counter(&k, name);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r < 0)
		return r;
	return counter_decode(v, n, ret);
}

void ns_put_counter(struct kv_batch *b, const char *name, uint64_t v)
{
	uint8_t val[COUNTER_REC_LEN];
	struct key k;

	counter_encode(v, val);
	key_counter(&k, name);
	kv_batch_put(b, k.b, k.len, val, sizeof(val));
}

/* Loads a counter or uses dflt when it was never written. */
static int counter_or(struct ns *ns, const char *name, uint64_t dflt, uint64_t *ret)
{
	int r = ns_get_counter(ns, name, ret);

	if (r == -ENOENT) {
		*ret = dflt;
		return 0;
	}
	return r;
}

int ns_get_inode(struct ns *ns, uint64_t ino, struct inode *ret)
{
	_cleanup_free_ uint8_t *v = NULL;
	struct key k;
	size_t n;
	int r;

	key_ino(&k, K_INODE, ino);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r < 0)
		return r;
	r = inode_decode(v, n, ret);
	if (r < 0)
		return r;
	ret->a.ino = ino;
	return 0;
}

int ns_get_dir(struct ns *ns, uint64_t ino, struct inode *ret)
{
	int r = ns_get_inode(ns, ino, ret);

	if (r < 0)
		return r;
	return mode_is_dir(ret->a.mode) ? 0 : -ENOTDIR;
}

int ns_get_dentry(struct ns *ns, uint64_t parent, const char *name, struct dentry *ret)
{
	_cleanup_free_ uint8_t *v = NULL;
	struct key k;
	size_t n;
	int r;

	key_dentry(&k, parent, name);
	r = kv_get(ns->kv, k.b, k.len, (void **)&v, &n);
	if (r < 0)
		return r;
	return dentry_decode(v, n, ret);
}

void ns_put_inode(struct kv_batch *b, const struct inode *in)
{
	struct wbuf w;
	struct key k;

	wbuf_init(&w);
	inode_encode(in, &w);
	key_ino(&k, K_INODE, in->a.ino);
	kv_batch_put(b, k.b, k.len, w.data, w.len);
	wbuf_done(&w);
}

void ns_put_dentry(struct kv_batch *b, uint64_t parent, const char *name, const struct dentry *d)
{
	uint8_t val[DENTRY_REC_LEN];
	struct key k;

	dentry_encode(d, val);
	key_dentry(&k, parent, name);
	kv_batch_put(b, k.b, k.len, val, sizeof(val));
}

int ns_commit(struct ns *ns, struct kv_batch *b)
{
	int r = kv_write(ns->kv, b);

	if (r == 0)
		atomic_fetch_add(&ns->dirty, 1);
	return r;
}

struct del_ctx {
	struct kv_batch *b;
};

static int del_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct del_ctx *c = ctx;

	kv_batch_del(c->b, k, kl);
	return 0;
}

int ns_batch_del_prefix(struct ns *ns, struct kv_batch *b, const struct key *prefix)
{
	struct del_ctx c = {b};

	return kv_scan(ns->kv, prefix->b, prefix->len, NULL, 0, del_one, &c);
}

static int found_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	*(int *)ctx = 1;
	return 1;
}

int ns_prefix_any(struct ns *ns, const struct key *prefix)
{
	int found = 0;
	int r = kv_scan(ns->kv, prefix->b, prefix->len, NULL, 0, found_one, &found);

	return r < 0 ? r : found;
}

/* GC record: version, size, layout. */
static void put_gc(struct kv_batch *b, const struct inode *in)
{
	uint8_t val[GC_REC_LEN];
	struct key k;

	gc_encode(in, val);
	key_ino(&k, K_GC, in->a.ino);
	kv_batch_put(b, k.b, k.len, val, sizeof(val));
}

int ns_destroy_inode(struct ns *ns, struct kv_batch *b, const struct inode *in)
{
	struct key k;
	int r;

	key_named(&k, K_XATTR, in->a.ino, NULL);
	r = ns_batch_del_prefix(ns, b, &k);
	if (r < 0)
		return r;
	key_ino(&k, K_INODE, in->a.ino);
	kv_batch_del(b, k.b, k.len);
	key_ino(&k, K_SYMLINK, in->a.ino);
	kv_batch_del(b, k.b, k.len);
	key_ino(&k, K_ORPHAN, in->a.ino);
	kv_batch_del(b, k.b, k.len);
	if (mode_is_reg(in->a.mode))
		put_gc(b, in);
	ns->inodes--;
	ns_put_counter(b, "inodes", ns->inodes);
	return 0;
}

int ns_drop_link(struct ns *ns, struct kv_batch *b, struct inode *in)
{
	struct key k;
	int r;

	in->a.ctime_ns = ns_now();
	if (mode_is_dir(in->a.mode))
		in->a.nlink = 0;
	else if (in->a.nlink > 0)
		in->a.nlink--;
	if (in->a.nlink > 0) {
		ns_put_inode(b, in);
		return 0;
	}
	key_ino(&k, K_SESSION, in->a.ino);
	r = ns_prefix_any(ns, &k);
	if (r < 0)
		return r;
	if (r) { /* open somewhere: keep it as an orphan until the last close */
		ns_put_inode(b, in);
		key_ino(&k, K_ORPHAN, in->a.ino);
		kv_batch_put(b, k.b, k.len, "", 0);
		return 0;
	}
	return ns_destroy_inode(ns, b, in);
}

uint32_t ns_stripe_seed(uint64_t ino)
{
	uint64_t x = ino + 0x9e3779b97f4a7c15ull; /* splitmix64 finaliser */

	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
	x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
	return (uint32_t)(x ^ (x >> 31));
}

static int load_counters(struct ns *ns)
{
	uint64_t v[9];
	int r = 0;

	r = r ?: counter_or(ns, "next_ino", STRATA_ROOT_INO + 1, &v[0]);
	r = r ?: counter_or(ns, "next_session", 1, &v[1]);
	r = r ?: counter_or(ns, "inodes", 0, &v[2]);
	r = r ?: counter_or(ns, "next_node", 1, &v[3]);
	r = r ?: counter_or(ns, "next_target", 1, &v[4]);
	r = r ?: counter_or(ns, "next_chain", 1, &v[5]);
	r = r ?: counter_or(ns, "next_table", 1, &v[6]);
	r = r ?: counter_or(ns, "newest_table", 0, &v[7]);
	r = r ?: counter_or(ns, "routing_version", 1, &v[8]);
	if (r < 0)
		return r;
	ns->next_ino = v[0];
	ns->next_session = v[1];
	ns->inodes = v[2];
	ns->next_node = (uint32_t)v[3];
	ns->next_target = (uint32_t)v[4];
	ns->next_chain = (uint32_t)v[5];
	ns->next_table = (uint32_t)v[6];
	ns->newest_table = (uint32_t)v[7];
	ns->routing_version = v[8];
	return 0;
}

/* First start: the root directory, mode 0755, owned by root, its own
 * parent, default chunk size. */
static int create_root(struct ns *ns)
{
	_cleanup_batch_ struct kv_batch *b = kv_batch_new();
	struct inode root = {0};
	int64_t now = ns_now();

	if (!b)
		return -ENOMEM;
	root.a.ino = STRATA_ROOT_INO;
	root.a.mode = 0040755;
	root.a.nlink = 2;
	root.a.atime_ns = root.a.mtime_ns = root.a.ctime_ns = now;
	root.a.generation = 1;
	root.a.layout.chunk_size = STRATA_DEFAULT_CHUNK_SIZE;
	root.parent = STRATA_ROOT_INO;
	ns->inodes = 1;
	ns_put_inode(b, &root);
	ns_put_counter(b, "inodes", 1);
	ns_put_counter(b, "next_ino", ns->next_ino);
	ns_put_counter(b, "format", 1);
	int r = ns_commit(ns, b);
	return r ?: kv_sync(ns->kv);
}

int ns_open(const char *dir, struct ns **ret, char *why, size_t why_cap)
{
	struct ns *ns = calloc(1, sizeof(*ns));
	struct inode root;
	int r;

	if (why && why_cap)
		why[0] = 0;
	if (!ns)
		return -ENOMEM;
	pthread_mutex_init(&ns->mu, NULL);
	pthread_mutex_init(&ns->live_mu, NULL);
	ns->lease_ms = NS_DEFAULT_LEASE_MS;
	ns->replicas = NS_DEFAULT_REPLICAS;
	ns->expect_nodes = 1;
	if (!(ns->sbnodes = sbnodes_new(ns->lease_ms))) {
		ns_close(ns);
		return -ENOMEM;
	}
	r = kv_open(dir, &ns->kv, why, why_cap);
	if (r == 0)
		r = load_counters(ns);
	if (r == 0)
		r = ns_opid_load(ns);
	if (r == 0)
		r = cluster_load_tables(ns);
	if (r == 0) {
		r = ns_get_inode(ns, STRATA_ROOT_INO, &root);
		if (r == -ENOENT)
			r = create_root(ns);
	}
	if (r < 0) {
		if (why && why_cap && !why[0])
			snprintf(why, why_cap, "%s", strerror(-r));
		ns_close(ns);
		return r;
	}
	*ret = ns;
	return 0;
}

struct sbnodes *ns_sbnodes(struct ns *ns)
{
	return ns->sbnodes;
}

void ns_close(struct ns *ns)
{
	if (!ns)
		return;
	kv_close(ns->kv);
	sbnodes_free(ns->sbnodes);
	pthread_mutex_destroy(&ns->mu);
	pthread_mutex_destroy(&ns->live_mu);
	free(ns->live);
	free(ns->prog);
	free(ns->tables);
	free(ns);
}

int ns_sync(struct ns *ns)
{
	uint64_t d = atomic_load(&ns->dirty);
	int r = kv_sync(ns->kv);

	if (r == 0)
		atomic_fetch_sub(&ns->dirty, d);
	return r;
}

int ns_sync_if_dirty(struct ns *ns)
{
	if (atomic_load(&ns->dirty) == 0)
		return 0;
	return ns_sync(ns);
}
