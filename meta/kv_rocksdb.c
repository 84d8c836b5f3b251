/* kv_rocksdb.c — kv.h on an embedded RocksDB (C API).
 *
 * Writes use a write-options object with sync=false and the WAL enabled:
 * a returned kv_write is in the WAL file (page cache) and survives kill -9 of
 * the daemon; kv_sync calls rocksdb_flush_wal(sync=1) to make it survive a
 * power loss too. Scans use an iterator bounded by the prefix's successor
 * (iterate_upper_bound), so RocksDB stops at the end of the prefix. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <rocksdb/c.h>
#include "meta/kv.h"
#include "fs/cleanup.h"

struct kv {
	rocksdb_t *db;
	rocksdb_options_t *opts;
	rocksdb_writeoptions_t *wopts;
	rocksdb_readoptions_t *ropts;
};

struct kv_batch {
	rocksdb_writebatch_t *wb;
};

static void copy_err(char *err, char *why, size_t cap)
{
	if (why && cap)
		snprintf(why, cap, "%s", err ? err : "unknown error");
	free(err);
}

int kv_open(const char *dir, struct kv **ret, char *why, size_t why_cap)
{
	struct kv *kv = calloc(1, sizeof(*kv));
	char *err = NULL;

	if (!kv)
		return -ENOMEM;
	kv->opts = rocksdb_options_create();
	rocksdb_options_set_create_if_missing(kv->opts, 1);
	rocksdb_options_set_max_background_jobs(kv->opts, 2);
	kv->wopts = rocksdb_writeoptions_create();
	rocksdb_writeoptions_set_sync(kv->wopts, 0);
	kv->ropts = rocksdb_readoptions_create();
	kv->db = rocksdb_open(kv->opts, dir, &err);
	if (!kv->db) {
		copy_err(err, why, why_cap);
		kv_close(kv);
		return -EIO;
	}
	*ret = kv;
	return 0;
}

void kv_close(struct kv *kv)
{
	if (!kv)
		return;
	if (kv->db) {
		kv_sync(kv);
		rocksdb_close(kv->db);
	}
	if (kv->ropts)
		rocksdb_readoptions_destroy(kv->ropts);
	if (kv->wopts)
		rocksdb_writeoptions_destroy(kv->wopts);
	if (kv->opts)
		rocksdb_options_destroy(kv->opts);
	free(kv);
}

struct kv_snap {
	const rocksdb_snapshot_t *snap;
	rocksdb_readoptions_t *ropts;
};

struct kv_snap *kv_snap_new(struct kv *kv)
{
	struct kv_snap *s = calloc(1, sizeof(*s));

	if (!s)
		return NULL;
	s->snap = rocksdb_create_snapshot(kv->db);
	s->ropts = rocksdb_readoptions_create();
	rocksdb_readoptions_set_snapshot(s->ropts, s->snap);
	return s;
}

void kv_snap_free(struct kv *kv, struct kv_snap *s)
{
	if (!s)
		return;
	rocksdb_readoptions_destroy(s->ropts);
	rocksdb_release_snapshot(kv->db, s->snap);
	free(s);
}

int kv_get(struct kv *kv, const void *key, size_t klen, void **ret_val, size_t *ret_len)
{
	return kv_get_at(kv, NULL, key, klen, ret_val, ret_len);
}

int kv_get_at(struct kv *kv, const struct kv_snap *s, const void *key, size_t klen, void **ret_val,
	      size_t *ret_len)
{
	char *err = NULL;
	size_t vlen = 0;
	char *v = rocksdb_get(kv->db, s ? s->ropts : kv->ropts, key, klen, &vlen, &err);

	if (err) {
		free(err);
		return -EIO;
	}
	if (!v)
		return -ENOENT;
	*ret_val = v; /* RocksDB's C API returns malloc'd memory */
	*ret_len = vlen;
	return 0;
}

int kv_exists(struct kv *kv, const void *key, size_t klen)
{
	_cleanup_free_ void *v = NULL;
	size_t n;

	return kv_get(kv, key, klen, &v, &n);
}

/* Smallest key greater than every key with this prefix: increments the last
 * byte that is not 0xff and cuts after it. Returns its length (0: none). */
static size_t prefix_successor(const uint8_t *prefix, size_t plen, uint8_t *out)
{
	memcpy(out, prefix, plen);
	while (plen > 0) {
		if (out[plen - 1] != 0xff) {
			out[plen - 1]++;
			return plen;
		}
		plen--;
	}
	return 0;
}

static int scan_iter(rocksdb_iterator_t *it, size_t plen, const void *prefix, const void *start,
		     size_t slen, kv_scan_fn fn, void *ctx)
{
	if (start) {
		rocksdb_iter_seek(it, start, slen);
		if (rocksdb_iter_valid(it)) {
			size_t kl;
			const char *k = rocksdb_iter_key(it, &kl);
			if (kl == slen && memcmp(k, start, slen) == 0)
				rocksdb_iter_next(it);
		}
	} else {
		rocksdb_iter_seek(it, prefix, plen);
	}
	for (; rocksdb_iter_valid(it); rocksdb_iter_next(it)) {
		size_t kl, vl;
		const char *k = rocksdb_iter_key(it, &kl);
		const char *v = rocksdb_iter_value(it, &vl);
		if (kl < plen || memcmp(k, prefix, plen) != 0)
			break;
		int r = fn(ctx, (const uint8_t *)k, kl, (const uint8_t *)v, vl);
		if (r != 0)
			return r < 0 ? r : 0;
	}
	return 0;
}

int kv_scan(struct kv *kv, const void *prefix, size_t plen, const void *start, size_t slen,
	    kv_scan_fn fn, void *ctx)
{
	return kv_scan_at(kv, NULL, prefix, plen, start, slen, fn, ctx);
}

int kv_scan_at(struct kv *kv, const struct kv_snap *s, const void *prefix, size_t plen,
	       const void *start, size_t slen, kv_scan_fn fn, void *ctx)
{
	_cleanup_free_ uint8_t *upper = malloc(plen ? plen : 1);
	rocksdb_readoptions_t *ro;
	rocksdb_iterator_t *it;
	char *err = NULL;
	int r;

	if (!upper)
		return -ENOMEM;
	ro = rocksdb_readoptions_create();
	size_t ulen = prefix_successor(prefix, plen, upper);
	if (ulen)
		rocksdb_readoptions_set_iterate_upper_bound(ro, (const char *)upper, ulen);
	if (s)
		rocksdb_readoptions_set_snapshot(ro, s->snap);
	it = rocksdb_create_iterator(kv->db, ro);
	r = scan_iter(it, plen, prefix, start, slen, fn, ctx);
	rocksdb_iter_get_error(it, &err);
	if (err) {
		free(err);
		r = r ? r : -EIO;
	}
	rocksdb_iter_destroy(it);
	rocksdb_readoptions_destroy(ro);
	return r;
}

struct kv_batch *kv_batch_new(void)
{
	struct kv_batch *b = calloc(1, sizeof(*b));

	if (!b)
		return NULL;
	b->wb = rocksdb_writebatch_create();
	return b;
}

void kv_batch_free(struct kv_batch *b)
{
	if (!b)
		return;
	rocksdb_writebatch_destroy(b->wb);
	free(b);
}

void kv_batch_put(struct kv_batch *b, const void *key, size_t klen, const void *val, size_t vlen)
{
	rocksdb_writebatch_put(b->wb, key, klen, val, vlen);
}

void kv_batch_del(struct kv_batch *b, const void *key, size_t klen)
{
	rocksdb_writebatch_delete(b->wb, key, klen);
}

int kv_batch_count(const struct kv_batch *b)
{
	return rocksdb_writebatch_count(b->wb);
}

int kv_write(struct kv *kv, struct kv_batch *b)
{
	char *err = NULL;

	rocksdb_write(kv->db, kv->wopts, b->wb, &err);
	if (err) {
		free(err);
		return -EIO;
	}
	return 0;
}

int kv_sync(struct kv *kv)
{
	char *err = NULL;

	rocksdb_flush_wal(kv->db, 1, &err);
	if (err) {
		free(err);
		return -EIO;
	}
	return 0;
}
