/* blobcache.c — verified lazy blob reads and the node chunk cache
 * (blobcache.h has the design and the invariants).
 *
 * Data structures, all under bc->lock: a hash table of cache entries by
 * digest with an LRU list (head = most recent), a hash table of the
 * digest tables attached to inodes, and one of the pinned table digests
 * (also kept as DIR/pins/INO, 32 bytes, for a successor). File I/O on cache files happens outside
 * the lock; a file evicted while a reader opens it is simply fetched again. */
#include "fuse/blobcache.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include <openssl/sha.h>

#include "fs/cleanup.h"
#include "fs/fdio.h"
#include "fs/log.h"
#include "fs/wire.h"

#define CACHE_BUCKETS 65536u
#define CACHE_SPAN_MAX (8u << 20) /* bytes fetched in one call */
#define CACHE_WAIT_S 5		  /* longest wait for another reader's fetch */

struct sfs_blob_table {
	struct blob_rec *v; /* sorted by offset */
	size_t n;
	uint8_t sha[32]; /* of the table's bytes as parsed */
};

struct cache_entry {
	uint8_t digest[32];
	uint64_t size;
	bool verified;
	struct cache_entry *hnext, *prev, *next;
};

struct tab_slot {
	uint64_t ino;
	struct sfs_blob_table *t;
	bool retired; /* replaced (its pin differs): found no more, freed at the end */
	struct tab_slot *next;
};

/* A pinned table digest (sfs_blobcache_pin), also in DIR/pins/INO. */
struct pin_slot {
	uint64_t ino;
	uint8_t sha[32];
	struct pin_slot *next;
};

struct fetch_claim {
	uint8_t digest[32];
	struct fetch_claim *next;
};

struct sfs_blobcache {
	char *dir;
	uint64_t limit;
	pthread_mutex_t lock;
	pthread_cond_t done;	      /* an in-flight fetch ended */
	struct fetch_claim *inflight; /* chunks being fetched (one fetch each) */
	struct cache_entry **buckets;
	struct cache_entry *head, *tail;
	struct tab_slot **tabs;
	size_t n_tabs;
	struct pin_slot **pins;
	struct sfs_blobcache_stats st;
	int stats_fd;
	uint64_t tmp_seq;
};

/* ---- tables -------------------------------------------------------------------------- */
static int rec_cmp(const void *a, const void *b)
{
	const struct blob_rec *x = a, *y = b;
	return x->off < y->off ? -1 : x->off > y->off;
}

static int take_rec(void *ctx, size_t i, const struct blob_rec *rec)
{
	((struct sfs_blob_table *)ctx)->v[i] = *rec;
	return 0;
}

int sfs_blob_table_parse(const void *buf, size_t len, struct sfs_blob_table **ret)
{
	size_t n;
	if (len > SFS_BLOB_TABLE_MAX || blob_table_count(buf, len, &n) < 0)
		return -EBADMSG;
	struct sfs_blob_table *t = calloc(1, sizeof(*t));
	if (!t || !(t->v = calloc(n + 1, sizeof(*t->v)))) {
		free(t);
		return -ENOMEM;
	}
	if (blob_table_decode(buf, len, take_rec, t) < 0) {
		sfs_blob_table_free(t);
		return -EBADMSG;
	}
	t->n = n;
	SHA256(buf, len, t->sha);
	if (n)
		qsort(t->v, n, sizeof(*t->v), rec_cmp);
	for (size_t i = 1; i < n; i++)
		if (t->v[i].off < t->v[i - 1].off + t->v[i - 1].len) { /* overlap */
			sfs_blob_table_free(t);
			return -EBADMSG;
		}
	*ret = t;
	return 0;
}

struct sfs_blob_table *sfs_blob_table_free(struct sfs_blob_table *t)
{
	if (t) {
		free(t->v);
		free(t);
	}
	return NULL;
}

static size_t tab_bucket(uint64_t ino)
{
	return (size_t)((ino * 0x9e3779b97f4a7c15ull) >> 48) & (CACHE_BUCKETS - 1);
}

int sfs_blobcache_attach(struct sfs_blobcache *bc, uint64_t ino, struct sfs_blob_table *t)
{
	struct tab_slot *s = calloc(1, sizeof(*s));
	int r = 0;
	pthread_mutex_lock(&bc->lock);
	for (struct tab_slot *p = bc->tabs[tab_bucket(ino)]; p; p = p->next)
		if (p->ino == ino && !p->retired)
			r = 1;
	if (r == 0 && !s)
		r = -ENOMEM;
	else if (r == 0 && bc->n_tabs >= SFS_BLOB_TABLES_MAX)
		r = -ENOSPC;
	if (r == 0) {
		*s = (struct tab_slot){ino, t, bc->tabs[tab_bucket(ino)]};
		bc->tabs[tab_bucket(ino)] = s;
		bc->n_tabs++;
	}
	pthread_mutex_unlock(&bc->lock);
	if (r != 0) {
		free(s);
		sfs_blob_table_free(t);
	}
	return r > 0 ? 0 : r;
}

const struct sfs_blob_table *sfs_blobcache_table(struct sfs_blobcache *bc, uint64_t ino)
{
	const struct sfs_blob_table *t = NULL;
	pthread_mutex_lock(&bc->lock);
	for (struct tab_slot *p = bc->tabs[tab_bucket(ino)]; p && !t; p = p->next)
		if (p->ino == ino && !p->retired)
			t = p->t;
	pthread_mutex_unlock(&bc->lock);
	return t;
}

const uint8_t *sfs_blob_table_sha(const struct sfs_blob_table *t)
{
	return t->sha;
}

void sfs_blobcache_detach(struct sfs_blobcache *bc, uint64_t ino)
{
	pthread_mutex_lock(&bc->lock);
	for (struct tab_slot *p = bc->tabs[tab_bucket(ino)]; p; p = p->next)
		if (p->ino == ino)
			p->retired = true; /* still counted in n_tabs: it is still held */
	pthread_mutex_unlock(&bc->lock);
}

/* ---- pins ------------------------------------------------------------------------------ */
static struct pin_slot *pin_find_locked(struct sfs_blobcache *bc, uint64_t ino)
{
	for (struct pin_slot *p = bc->pins[tab_bucket(ino)]; p; p = p->next)
		if (p->ino == ino)
			return p;
	return NULL;
}

/* Sets the pin of ino in memory (false: out of memory). */
static bool pin_set(struct sfs_blobcache *bc, uint64_t ino, const uint8_t sha[32])
{
	struct pin_slot *n = calloc(1, sizeof(*n));
	pthread_mutex_lock(&bc->lock);
	struct pin_slot *p = pin_find_locked(bc, ino);
	if (!p && n) {
		*n = (struct pin_slot){.ino = ino, .next = bc->pins[tab_bucket(ino)]};
		bc->pins[tab_bucket(ino)] = p = n;
		n = NULL;
	}
	if (p)
		memcpy(p->sha, sha, 32);
	pthread_mutex_unlock(&bc->lock);
	free(n);
	return p != NULL;
}

static void pin_path(const struct sfs_blobcache *bc, uint64_t ino, char *p, size_t cap)
{
	snprintf(p, cap, "%s/pins/%016" PRIx64, bc->dir, ino);
}

int sfs_blobcache_pin(struct sfs_blobcache *bc, uint64_t ino, const uint8_t sha[32])
{
	char p[PATH_MAX], tmp[PATH_MAX + 32];
	uint8_t cur[32];
	/* The usual case, the same pin again at every mount: no write (ext4
	 * flushes a file renamed over another, a millisecond each). */
	if (sfs_blobcache_pinned(bc, ino, cur) && !memcmp(cur, sha, 32))
		return 0;
	pin_path(bc, ino, p, sizeof(p));
	pthread_mutex_lock(&bc->lock);
	snprintf(tmp, sizeof(tmp), "%s.tmp%" PRIu64, p, bc->tmp_seq++);
	pthread_mutex_unlock(&bc->lock);
	/* On local disk first, so that a successor (restart, takeover) that
	 * loads the table again checks it too. */
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int r = fd < 0 ? -errno : strata_write_all(fd, sha, 32);
	if (r == 0 && rename(tmp, p) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return r;
	}
	return pin_set(bc, ino, sha) ? 0 : -ENOMEM;
}

bool sfs_blobcache_pinned(struct sfs_blobcache *bc, uint64_t ino, uint8_t ret_sha[32])
{
	char p[PATH_MAX];
	pthread_mutex_lock(&bc->lock);
	struct pin_slot *s = pin_find_locked(bc, ino);
	if (s)
		memcpy(ret_sha, s->sha, 32);
	pthread_mutex_unlock(&bc->lock);
	if (s)
		return true;
	pin_path(bc, ino, p, sizeof(p));
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	uint8_t sha[32];
	if (fd < 0 || strata_read_all(fd, sha, 32) != 32)
		return false;
	pin_set(bc, ino, sha);
	memcpy(ret_sha, sha, 32);
	return true;
}

/* ---- cache index (caller holds bc->lock) ------------------------------------------ */
static size_t ent_bucket(const uint8_t *d)
{
	return (size_t)le32_get(d) & (CACHE_BUCKETS - 1);
}

static struct cache_entry *ent_find(struct sfs_blobcache *bc, const uint8_t *d)
{
	for (struct cache_entry *e = bc->buckets[ent_bucket(d)]; e; e = e->hnext)
		if (!memcmp(e->digest, d, 32))
			return e;
	return NULL;
}

static void lru_unlink(struct sfs_blobcache *bc, struct cache_entry *e)
{
	if (e->prev)
		e->prev->next = e->next;
	else
		bc->head = e->next;
	if (e->next)
		e->next->prev = e->prev;
	else
		bc->tail = e->prev;
	e->prev = e->next = NULL;
}

static void lru_push(struct sfs_blobcache *bc, struct cache_entry *e)
{
	e->prev = NULL;
	e->next = bc->head;
	if (bc->head)
		bc->head->prev = e;
	bc->head = e;
	if (!bc->tail)
		bc->tail = e;
}

static void chunk_path(const struct sfs_blobcache *bc, const uint8_t *d, char *buf, size_t cap)
{
	char hex[65];
	for (int i = 0; i < 32; i++)
		snprintf(hex + 2 * i, 3, "%02x", d[i]);
	snprintf(buf, cap, "%s/chunks/%.2s/%s", bc->dir, hex, hex);
}

static void ent_remove(struct sfs_blobcache *bc, struct cache_entry *e)
{
	struct cache_entry **pp = &bc->buckets[ent_bucket(e->digest)];
	while (*pp != e)
		pp = &(*pp)->hnext;
	*pp = e->hnext;
	lru_unlink(bc, e);
	bc->st.bytes -= e->size;
	bc->st.entries--;
	free(e);
}

/* Evicts from the LRU tail until the cache fits, sparing keep. */
static void evict_locked(struct sfs_blobcache *bc, const struct cache_entry *keep)
{
	char p[PATH_MAX];
	while (bc->st.bytes > bc->limit && bc->tail && bc->tail != keep) {
		struct cache_entry *e = bc->tail;
		chunk_path(bc, e->digest, p, sizeof(p));
		unlink(p);
		ent_remove(bc, e);
		bc->st.evicted++;
	}
}

static struct cache_entry *ent_add(struct sfs_blobcache *bc, const uint8_t *d, uint64_t size,
				   bool verified)
{
	struct cache_entry *e = ent_find(bc, d);
	if (e)
		return e;
	if (!(e = calloc(1, sizeof(*e))))
		return NULL;
	memcpy(e->digest, d, 32);
	e->size = size;
	e->verified = verified;
	e->hnext = bc->buckets[ent_bucket(d)];
	bc->buckets[ent_bucket(d)] = e;
	lru_push(bc, e);
	bc->st.bytes += size;
	bc->st.entries++;
	return e;
}

static void write_stats(struct sfs_blobcache *bc);

/* ---- open / scan ---------------------------------------------------------------------- */
struct scanned {
	uint8_t d[32];
	uint64_t size;
	int64_t mtime;
};

static int scanned_cmp(const void *a, const void *b) /* newest first */
{
	const struct scanned *x = a, *y = b;
	return x->mtime > y->mtime ? -1 : x->mtime < y->mtime;
}

static bool parse_hex(const char *s, uint8_t *d)
{
	if (strlen(s) != 64)
		return false;
	for (int i = 0; i < 32; i++) {
		unsigned v;
		if (sscanf(s + 2 * i, "%2x", &v) != 1 || !strchr("0123456789abcdef", s[2 * i]) ||
		    !strchr("0123456789abcdef", s[2 * i + 1]))
			return false;
		d[i] = (uint8_t)v;
	}
	return true;
}

static void scan_sub(const char *sub, struct scanned **v, size_t *n, size_t *cap)
{
	DIR *d = opendir(sub);
	if (!d)
		return;
	for (struct dirent *de; (de = readdir(d));) {
		char p[PATH_MAX];
		struct stat st;
		struct scanned s;
		snprintf(p, sizeof(p), "%s/%s", sub, de->d_name);
		if (de->d_name[0] == '.')
			continue;
		if (!parse_hex(de->d_name, s.d) || stat(p, &st) < 0 || !S_ISREG(st.st_mode)) {
			if (strstr(de->d_name, ".tmp"))
				unlink(p); /* a fetch interrupted by a crash */
			continue;
		}
		if (*n == *cap) {
			size_t nc = *cap ? *cap * 2 : 1024;
			struct scanned *nv = realloc(*v, nc * sizeof(*nv));
			if (!nv)
				break;
			*v = nv;
			*cap = nc;
		}
		s.size = (uint64_t)st.st_size;
		s.mtime = st.st_mtim.tv_sec * 1000000000ll + st.st_mtim.tv_nsec;
		(*v)[(*n)++] = s;
	}
	closedir(d);
}

/* Loads what a previous run left, oldest last in the LRU. */
static void scan(struct sfs_blobcache *bc)
{
	struct scanned *v = NULL;
	size_t n = 0, cap = 0;
	char sub[PATH_MAX];
	for (int i = 0; i < 256; i++) {
		snprintf(sub, sizeof(sub), "%s/chunks/%02x", bc->dir, i);
		scan_sub(sub, &v, &n, &cap);
	}
	if (n)
		qsort(v, n, sizeof(*v), scanned_cmp);
	for (size_t i = n; i-- > 0;) /* oldest first, so the newest end at the head */
		ent_add(bc, v[i].d, v[i].size, false);
	free(v);
	evict_locked(bc, NULL);
}

int sfs_blobcache_open(const char *dir, uint64_t max_bytes, struct sfs_blobcache **ret)
{
	char p[PATH_MAX];
	struct sfs_blobcache *bc = calloc(1, sizeof(*bc));
	if (!bc)
		return -ENOMEM;
	bc->dir = strdup(dir);
	bc->limit = max_bytes;
	bc->stats_fd = -1;
	bc->buckets = calloc(CACHE_BUCKETS, sizeof(*bc->buckets));
	bc->tabs = calloc(CACHE_BUCKETS, sizeof(*bc->tabs));
	bc->pins = calloc(CACHE_BUCKETS, sizeof(*bc->pins));
	pthread_mutex_init(&bc->lock, NULL);
	pthread_cond_init(&bc->done, NULL);
	if (!bc->dir || !bc->buckets || !bc->tabs || !bc->pins) {
		sfs_blobcache_free(bc);
		return -ENOMEM;
	}
	snprintf(p, sizeof(p), "%s/chunks", dir);
	if ((mkdir(dir, 0700) < 0 && errno != EEXIST) || (mkdir(p, 0700) < 0 && errno != EEXIST)) {
		int r = -errno;
		sfs_blobcache_free(bc);
		return r;
	}
	for (int i = 0; i < 256; i++) {
		snprintf(p, sizeof(p), "%s/chunks/%02x", dir, i);
		mkdir(p, 0700);
	}
	snprintf(p, sizeof(p), "%s/pins", dir);
	mkdir(p, 0700);
	snprintf(p, sizeof(p), "%s/stats", dir);
	bc->stats_fd = open(p, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
	scan(bc);
	write_stats(bc);
	*ret = bc;
	return 0;
}

struct sfs_blobcache *sfs_blobcache_free(struct sfs_blobcache *bc)
{
	if (!bc)
		return NULL;
	while (bc->head)
		ent_remove(bc, bc->head);
	for (size_t i = 0; bc->tabs && i < CACHE_BUCKETS; i++)
		for (struct tab_slot *s = bc->tabs[i], *nx; s; s = nx) {
			nx = s->next;
			sfs_blob_table_free(s->t);
			free(s);
		}
	for (size_t i = 0; bc->pins && i < CACHE_BUCKETS; i++)
		for (struct pin_slot *s = bc->pins[i], *nx; s; s = nx) {
			nx = s->next;
			free(s);
		}
	free(bc->pins);
	if (bc->stats_fd >= 0)
		close(bc->stats_fd);
	pthread_mutex_destroy(&bc->lock);
	pthread_cond_destroy(&bc->done);
	free(bc->tabs);
	free(bc->buckets);
	free(bc->dir);
	free(bc);
	return NULL;
}

void sfs_blobcache_get_stats(struct sfs_blobcache *bc, struct sfs_blobcache_stats *ret)
{
	pthread_mutex_lock(&bc->lock);
	*ret = bc->st;
	pthread_mutex_unlock(&bc->lock);
}

static void write_stats(struct sfs_blobcache *bc)
{
	struct sfs_blobcache_stats s;
	char buf[512];
	sfs_blobcache_get_stats(bc, &s);
	int n = snprintf(
	    buf, sizeof(buf),
	    "fetched_bytes %" PRIu64 "\nfetches %" PRIu64 "\nhits %" PRIu64 "\nmisses %" PRIu64
	    "\nbad %" PRIu64 "\nevicted %" PRIu64 "\nbytes %" PRIu64 "\nentries %" PRIu64 "\n",
	    s.fetched_bytes, s.fetches, s.hits, s.misses, s.bad, s.evicted, s.bytes, s.entries);
	if (bc->stats_fd >= 0 && pwrite(bc->stats_fd, buf, (size_t)n, 0) == n)
		(void)!ftruncate(bc->stats_fd, n);
}

/* ---- reads ------------------------------------------------------------------------------ */
/* Index of the first record whose padded end is past off. */
static size_t first_rec(const struct sfs_blob_table *t, uint64_t off)
{
	size_t lo = 0, hi = t->n;
	while (lo < hi) {
		size_t mid = (lo + hi) / 2;
		if (t->v[mid].off + blob_padded(t->v[mid].len) <= off)
			lo = mid + 1;
		else
			hi = mid;
	}
	return lo;
}

/* Copies the part of chunk data (the record's bytes) that falls in the
 * request [off, off+len) into buf. */
static void copy_part(const struct blob_rec *r, const uint8_t *data, uint64_t off, size_t len,
		      uint8_t *buf)
{
	uint64_t a = r->off > off ? r->off : off;
	uint64_t b = r->off + r->len < off + len ? r->off + r->len : off + len;
	if (a < b)
		memcpy(buf + (a - off), data + (a - r->off), b - a);
}

/* Serves r from the cache file if present. Returns 1 (served), 0 (miss) or
 * -errno. */
static int from_cache(struct sfs_blobcache *bc, const struct blob_rec *r, uint64_t off, size_t len,
		      uint8_t *buf)
{
	char p[PATH_MAX];
	bool verified;
	pthread_mutex_lock(&bc->lock);
	struct cache_entry *e = ent_find(bc, r->digest);
	verified = e && e->verified;
	if (e) {
		lru_unlink(bc, e);
		lru_push(bc, e);
	}
	pthread_mutex_unlock(&bc->lock);
	if (!e)
		return 0;
	chunk_path(bc, r->digest, p, sizeof(p));
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) { /* evicted meanwhile, or removed behind our back */
		pthread_mutex_lock(&bc->lock);
		if (errno == ENOENT && (e = ent_find(bc, r->digest)))
			ent_remove(bc, e);
		pthread_mutex_unlock(&bc->lock);
		return 0;
	}
	_cleanup_free_ uint8_t *data = malloc(r->len);
	if (!data)
		return -ENOMEM;
	if (pread(fd, data, r->len, 0) != (ssize_t)r->len)
		return 0;
	if (!verified) { /* first use since a restart */
		uint8_t d[32];
		SHA256(data, r->len, d);
		if (memcmp(d, r->digest, 32)) {
			unlink(p);
			return 0;
		}
		pthread_mutex_lock(&bc->lock);
		if ((e = ent_find(bc, r->digest)))
			e->verified = true;
		pthread_mutex_unlock(&bc->lock);
	}
	copy_part(r, data, off, len, buf);
	pthread_mutex_lock(&bc->lock);
	bc->st.hits++;
	pthread_mutex_unlock(&bc->lock);
	return 1;
}

static void store_chunk(struct sfs_blobcache *bc, const struct blob_rec *r, const uint8_t *data)
{
	char p[PATH_MAX], tmp[PATH_MAX + 32];
	uint64_t seq;
	pthread_mutex_lock(&bc->lock);
	seq = bc->tmp_seq++;
	bool have = ent_find(bc, r->digest) != NULL;
	pthread_mutex_unlock(&bc->lock);
	if (have || r->len > bc->limit)
		return;
	chunk_path(bc, r->digest, p, sizeof(p));
	snprintf(tmp, sizeof(tmp), "%s.%" PRIu64 ".tmp", p, seq);
	_cleanup_close_ int fd = open(tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0 || write(fd, data, r->len) != (ssize_t)r->len || rename(tmp, p) < 0) {
		if (fd >= 0)
			unlink(tmp);
		return; /* the cache is best effort; the read itself succeeded */
	}
	pthread_mutex_lock(&bc->lock);
	struct cache_entry *e = ent_add(bc, r->digest, r->len, true);
	if (e)
		evict_locked(bc, e);
	pthread_mutex_unlock(&bc->lock);
}

/* Fetches records v[i..j) (adjacent in the blob) in one call, verifies and
 * caches each, and copies the requested parts. */
static int fetch_span(struct sfs_blobcache *bc, const struct blob_rec *v, size_t i, size_t j,
		      uint64_t off, size_t len, uint8_t *buf, sfs_blob_fetch_fn fetch, void *ctx)
{
	uint64_t base = v[i].off, end = v[j - 1].off + v[j - 1].len;
	_cleanup_free_ uint8_t *data = malloc(end - base);
	if (!data)
		return -ENOMEM;
	int r = fetch(ctx, base, end - base, data);
	if (r < 0)
		return r;
	pthread_mutex_lock(&bc->lock);
	bc->st.fetches++;
	bc->st.fetched_bytes += end - base;
	bc->st.misses += j - i;
	pthread_mutex_unlock(&bc->lock);
	for (size_t k = i; k < j; k++) {
		uint8_t d[32];
		const uint8_t *p = data + (v[k].off - base);
		SHA256(p, v[k].len, d);
		if (memcmp(d, v[k].digest, 32)) {
			pthread_mutex_lock(&bc->lock);
			bc->st.bad++;
			pthread_mutex_unlock(&bc->lock);
			log_error("Image chunk at blob offset %" PRIu64 " (%u bytes) fails its "
				  "SHA-256 check: refusing to serve it (EIO)",
				  v[k].off, v[k].len);
			return -EIO;
		}
		store_chunk(bc, &v[k], p);
		copy_part(&v[k], p, off, len, buf);
	}
	return 0;
}

/* Claims the fetch of r: returns 1 if this thread must fetch it, 0 after
 * waiting for another thread's fetch of it (then look in the cache again),
 * or -ENOMEM. */
static int claim(struct sfs_blobcache *bc, const struct blob_rec *r, struct fetch_claim *slot)
{
	bool waited = false;
	struct timespec deadline;
	clock_gettime(CLOCK_REALTIME, &deadline);
	deadline.tv_sec += CACHE_WAIT_S;
	pthread_mutex_lock(&bc->lock);
	for (;;) {
		struct fetch_claim *f = bc->inflight;
		while (f && memcmp(f->digest, r->digest, 32))
			f = f->next;
		if (!f)
			break;
		/* A hostile table could repeat a digest and make two readers wait
		 * on each other: past the deadline, fetch it twice instead. */
		if (pthread_cond_timedwait(&bc->done, &bc->lock, &deadline) == ETIMEDOUT) {
			waited = false;
			break;
		}
		waited = true;
	}
	if (!waited) {
		memcpy(slot->digest, r->digest, 32);
		slot->next = bc->inflight;
		bc->inflight = slot;
	}
	pthread_mutex_unlock(&bc->lock);
	return waited ? 0 : 1;
}

static void release_claims(struct sfs_blobcache *bc, struct fetch_claim *slots, size_t n)
{
	pthread_mutex_lock(&bc->lock);
	for (struct fetch_claim **pp = &bc->inflight; *pp;) {
		if (*pp >= slots && *pp < slots + n)
			*pp = (*pp)->next;
		else
			pp = &(*pp)->next;
	}
	pthread_cond_broadcast(&bc->done);
	pthread_mutex_unlock(&bc->lock);
}

/* Serves record i from the cache or claims it for fetching. Returns 1
 * (served), 0 (claimed: fetch it) or -errno. */
static int serve_or_claim(struct sfs_blobcache *bc, const struct blob_rec *r, uint64_t off,
			  size_t len, uint8_t *buf, struct fetch_claim *slot)
{
	for (;;) {
		int got = from_cache(bc, r, off, len, buf);
		if (got != 0)
			return got;
		if (claim(bc, r, slot))
			return 0;
	}
}

int sfs_blobcache_read(struct sfs_blobcache *bc, const struct sfs_blob_table *t, uint64_t off,
		       size_t len, void *out, sfs_blob_fetch_fn fetch, void *ctx)
{
	uint8_t *buf = out;
	size_t first = first_rec(t, off), last = first, miss_start = SIZE_MAX, n_claims = 0;
	int r = 0;
	memset(buf, 0, len); /* padding, gaps and holes read as zeros */
	while (last < t->n && t->v[last].off < off + len)
		last++;
	struct fetch_claim *slots = calloc(last - first + 1, sizeof(*slots));
	if (!slots)
		return -ENOMEM;
	for (size_t i = first; r >= 0 && i <= last; i++) {
		bool in = i < last;
		int got = in ? serve_or_claim(bc, &t->v[i], off, len, buf, &slots[n_claims]) : 1;
		if (got < 0) {
			r = got;
			break;
		}
		bool adjacent = miss_start != SIZE_MAX && got == 0 &&
				t->v[i].off == t->v[i - 1].off + blob_padded(t->v[i - 1].len) &&
				t->v[i].off + t->v[i].len - t->v[miss_start].off <= CACHE_SPAN_MAX;
		if (miss_start != SIZE_MAX && !adjacent) {
			r = fetch_span(bc, t->v, miss_start, i, off, len, buf, fetch, ctx);
			miss_start = SIZE_MAX;
		}
		if (got == 0) {
			n_claims++;
			if (miss_start == SIZE_MAX)
				miss_start = i;
		}
	}
	if (r >= 0 && miss_start != SIZE_MAX) /* (an error above leaves it unfetched) */
		r = fetch_span(bc, t->v, miss_start, last, off, len, buf, fetch, ctx);
	release_claims(bc, slots, n_claims);
	free(slots);
	write_stats(bc); /* a few microseconds; reads are page-cache misses already */
	return r < 0 ? r : 0;
}
