/* tar.c — tar streams over backend file operations (see tar.h). */
#include "sandbox/sandboxd/tar.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/sandboxd.h"

struct buf {
	uint8_t *p;
	size_t len, cap, max;
};

static int buf_put(struct buf *b, const void *p, size_t n)
{
	if (b->len + n > b->max)
		return -EFBIG;
	if (b->len + n > b->cap) {
		size_t cap = b->cap ? b->cap : 65536;
		while (cap < b->len + n)
			cap *= 2;
		uint8_t *q = realloc(b->p, cap);
		if (!q)
			return -ENOMEM;
		b->p = q;
		b->cap = cap;
	}
	memcpy(b->p + b->len, p, n);
	b->len += n;
	return 0;
}

/* An octal field of w bytes (w - 1 digits and a NUL), or GNU base-256 when
 * v does not fit. */
static void put_num(char *dst, size_t w, uint64_t v)
{
	if (v < (1ull << (3 * (w - 1)))) {
		snprintf(dst, w, "%0*llo", (int)w - 1, (unsigned long long)v);
		return;
	}
	memset(dst, 0, w);
	dst[0] = (char)0x80;
	for (size_t i = w - 1; i > 0 && v; i--, v >>= 8)
		dst[i] = (char)(v & 0xff);
}

void sbd_tar_encode(char b[512], const struct sbd_tar_hdr *h)
{
	memset(b, 0, 512);
	size_t nl = strlen(h->name);
	memcpy(b, h->name, nl < 100 ? nl : 99);
	put_num(b + 100, 8, h->mode & 07777);
	put_num(b + 108, 8, h->uid);
	put_num(b + 116, 8, h->gid);
	put_num(b + 124, 12, h->size);
	put_num(b + 136, 12, h->mtime > 0 ? (uint64_t)h->mtime : 0);
	memset(b + 148, ' ', 8);
	b[156] = h->type;
	if (h->link) {
		size_t ll = strlen(h->link);
		memcpy(b + 157, h->link, ll < 100 ? ll : 99);
	}
	memcpy(b + 257, "ustar", 6);
	memcpy(b + 263, "00", 2);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)b[i];
	snprintf(b + 148, 8, "%06o", sum);
}

/* One header (with a GNU long-name record first when the name needs it). */
static int put_header(struct buf *b, const char *name, char type, uint32_t mode, uint64_t size,
		      int64_t mtime)
{
	size_t nl = strlen(name);
	if (nl >= 100) {
		int r = put_header(b, "././@LongLink", 'L', 0, nl + 1, 0);
		if (r < 0 || (r = buf_put(b, name, nl + 1)) < 0)
			return r;
		static const uint8_t zero[512];
		r = (nl + 1) % 512 ? buf_put(b, zero, 512 - (nl + 1) % 512) : 0;
		if (r < 0)
			return r;
	}
	char h[512];
	struct sbd_tar_hdr th = {
	    .name = name, .type = type, .mode = mode, .size = size, .mtime = mtime};
	sbd_tar_encode(h, &th);
	return buf_put(b, h, 512);
}

struct packer {
	struct sbd_backend *be;
	struct sbd_sandbox *sb;
	struct buf out;
	size_t entries;
	struct strata_err *err; /* the innermost failure wins */
};

static int pack_file(struct packer *pk, const char *path, const char *rel,
		     const struct sbd_stat *st)
{
	struct sbd_file_req f = {.op = SBD_F_READ, .path = path, .max = pk->out.max};
	int r = pk->be->file(pk->be, pk->sb, &f);
	if (r == 0)
		r = put_header(&pk->out, rel, '0', st->mode, f.out_len, st->mtime_s);
	if (r == 0 && f.out_len)
		r = buf_put(&pk->out, f.out_data, f.out_len);
	static const uint8_t zero[512];
	if (r == 0 && f.out_len % 512)
		r = buf_put(&pk->out, zero, 512 - f.out_len % 512);
	free(f.out_data);
	return r;
}

static int pack_dir(struct packer *pk, const char *path, const char *rel, int depth)
{
	if (depth > TAR_MAX_DEPTH)
		return -ELOOP;
	struct sbd_file_req f = {.op = SBD_F_LIST, .path = path};
	int r = pk->be->file(pk->be, pk->sb, &f);
	for (size_t i = 0; r == 0 && i < f.nentries; i++) {
		const struct sbd_stat *e = &f.entries[i];
		if (!strcmp(e->name, ".") || !strcmp(e->name, ".."))
			continue;
		if (++pk->entries > TAR_MAX_ENTRIES) {
			r = -E2BIG;
			break;
		}
		char *cp = NULL, *cr = NULL;
		if (asprintf(&cp, "%s/%s", strcmp(path, "/") ? path : "", e->name) < 0 ||
		    asprintf(&cr, "%s%s%s", rel, rel[0] ? "/" : "", e->name) < 0) {
			free(cp);
			return -ENOMEM;
		}
		if (e->type == SBD_FT_DIR) {
			char *d = NULL;
			r = asprintf(&d, "%s/", cr) < 0
				? -ENOMEM
				: put_header(&pk->out, d, '5', e->mode, 0, e->mtime_s);
			free(d);
			if (r == 0)
				r = pack_dir(pk, cp, cr, depth + 1);
		} else if (e->type == SBD_FT_REG) {
			r = pack_file(pk, cp, cr, e);
		} /* symlinks and special files are left out */
		if (r < 0)
			strata_err_set(pk->err, r, "%s: %s", cp, strerror(-r));
		free(cp);
		free(cr);
	}
	free(f.entries);
	return r;
}

int sbd_tar_pack(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, uint64_t max,
		 uint8_t **ret, size_t *ret_len, struct strata_err *e)
{
	if (b->tar_out)
		return b->tar_out(b, sb, dir, max, ret, ret_len, e);
	struct packer pk = {.be = b, .sb = sb, .out.max = max, .err = e};
	int r = pack_dir(&pk, dir, "", 0);
	static const uint8_t zero[1024];
	if (r == 0)
		r = buf_put(&pk.out, zero, sizeof(zero));
	if (r < 0) {
		free(pk.out.p);
		return r;
	}
	*ret = pk.out.p ? pk.out.p : calloc(1, 1);
	*ret_len = pk.out.len;
	return 0;
}

/* ---- unpack ----------------------------------------------------------------- */

static uint64_t get_num(const char *p, size_t n)
{
	uint64_t v = 0;
	if ((unsigned char)p[0] & 0x80) { /* GNU base-256 */
		for (size_t i = 1; i < n; i++)
			v = v << 8 | (unsigned char)p[i];
		return v;
	}
	for (size_t i = 0; i < n && p[i]; i++)
		if (p[i] >= '0' && p[i] <= '7')
			v = v * 8 + (uint64_t)(p[i] - '0');
	return v;
}

int sbd_tar_decode(const char b[512], struct sbd_tar_hdr *h, char *name, char *link)
{
	bool zero = true;
	for (int i = 0; i < 512 && zero; i++)
		zero = !b[i];
	if (zero)
		return 1;
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += i >= 148 && i < 156 ? ' ' : (unsigned char)b[i];
	if (get_num(b + 148, 8) != sum)
		return -EINVAL;
	if (b[345] && !memcmp(b + 257, "ustar", 5)) /* ustar prefix */
		snprintf(name, 257, "%.155s/%.100s", b + 345, b);
	else
		snprintf(name, 257, "%.100s", b);
	snprintf(link, 101, "%.100s", b + 157);
	*h = (struct sbd_tar_hdr){.name = name,
				  .link = link,
				  .type = b[156],
				  .mode = (uint32_t)get_num(b + 100, 8),
				  .uid = get_num(b + 108, 8),
				  .gid = get_num(b + 116, 8),
				  .size = get_num(b + 124, 12),
				  .mtime = (int64_t)get_num(b + 136, 12)};
	return 0;
}

char *sbd_tar_pax_value(const char *p, size_t n, const char *key)
{
	size_t off = 0, kl = strlen(key);
	while (off < n) {
		char *end;
		unsigned long len = strtoul(p + off, &end, 10);
		if (!len || off + len > n || *end != ' ')
			return NULL;
		const char *kv = end + 1;
		size_t kvlen = (size_t)(p + off + len - kv);
		if (kvlen > kl + 1 && !strncmp(kv, key, kl) && kv[kl] == '=')
			return strndup(kv + kl + 1, kvlen - kl - 2); /* drop the newline */
		off += len;
	}
	return NULL;
}

/* A pax number: decimal digits (mtime: a sign and a fraction allowed). */
static bool pax_number(const char *v, bool is_time, uint64_t *ret, bool *neg)
{
	*neg = is_time && v[0] == '-';
	const char *s = v + *neg;
	uint64_t n = 0;
	size_t i = 0;
	for (; s[i] >= '0' && s[i] <= '9'; i++) {
		if (n > (UINT64_MAX - 9) / 10)
			return false;
		n = n * 10 + (uint64_t)(s[i] - '0');
	}
	if (!i || (s[i] && !(is_time && s[i] == '.')))
		return false;
	*ret = n;
	return true;
}

int sbd_tar_pax_parse(const char *p, size_t n, struct sbd_tar_pax *x)
{
	static const char *const keys[] = {"size", "uid", "gid", "mtime"};
	for (size_t k = 0; k < 4; k++) {
		_cleanup_free_ char *v = sbd_tar_pax_value(p, n, keys[k]);
		uint64_t num;
		bool neg;
		if (!v)
			continue;
		if (!pax_number(v, k == 3, &num, &neg) || (k == 3 && num > INT64_MAX))
			return -EINVAL;
		if (k == 0)
			x->has_size = true, x->size = num;
		else if (k == 1)
			x->has_uid = true, x->uid = num;
		else if (k == 2)
			x->has_gid = true, x->gid = num;
		else
			x->has_mtime = true, x->mtime = neg ? -(int64_t)num : (int64_t)num;
	}
	char *path = sbd_tar_pax_value(p, n, "path");
	char *link = sbd_tar_pax_value(p, n, "linkpath");
	if (path) {
		free(x->path);
		x->path = path;
	}
	if (link) {
		free(x->linkpath);
		x->linkpath = link;
	}
	return 0;
}

void sbd_tar_pax_apply(const struct sbd_tar_pax *x, struct sbd_tar_hdr *h)
{
	if (x->has_size)
		h->size = x->size;
	if (x->has_uid)
		h->uid = x->uid;
	if (x->has_gid)
		h->gid = x->gid;
	if (x->has_mtime)
		h->mtime = x->mtime;
}

void sbd_tar_pax_clear(struct sbd_tar_pax *x)
{
	free(x->path);
	free(x->linkpath);
	*x = (struct sbd_tar_pax){0};
}

char *sbd_tar_join(const char *dir, const char *name)
{
	for (const char *s = name; *s;) {
		while (*s == '/')
			s++;
		const char *e = strchrnul(s, '/');
		if (e - s == 2 && s[0] == '.' && s[1] == '.')
			return NULL;
		s = e;
	}
	char *out = NULL;
	if (asprintf(&out, "%s/%s", strcmp(dir, "/") ? dir : "", name) < 0)
		return NULL;
	/* collapse "//" and "/./", drop a trailing "/" */
	size_t o = 0;
	for (size_t i = 0; out[i];) {
		if (out[i] == '/' && (out[i + 1] == '/' ||
				      (out[i + 1] == '.' && (out[i + 2] == '/' || !out[i + 2])))) {
			i += out[i + 1] == '/' ? 1 : 2;
			continue;
		}
		out[o++] = out[i++];
	}
	while (o > 1 && out[o - 1] == '/')
		o--;
	out[o ? o : 1] = 0;
	if (!o)
		out[0] = '/';
	return out;
}

struct entry {
	char *path;
	char type;
	uint32_t mode;
	const uint8_t *data;
	size_t size;
};

static void entries_free(struct entry *v, size_t n)
{
	for (size_t i = 0; i < n; i++)
		free(v[i].path);
	free(v);
}

/* Parses the whole archive first, so that a bad name anywhere refuses it
 * before anything is written. */
static int parse_all(const char *dir, const uint8_t *p, size_t n, struct entry **ret, size_t *ret_n,
		     struct strata_err *e)
{
	struct entry *v = NULL;
	size_t cnt = 0, off = 0;
	char *longname = NULL;
	struct sbd_tar_pax pax = {0};
	int r = 0;
	while (off + 512 <= n) {
		const char *blk = (const char *)p + off;
		struct sbd_tar_hdr th;
		char name[257], link[101];
		int d = sbd_tar_decode(blk, &th, name, link);
		if (d == 1)
			break;
		if (d < 0) {
			r = strata_err_set(e, -EINVAL, "archive: a bad header block");
			break;
		}
		char type = th.type;
		bool meta = type == 'L' || type == 'K' || type == 'x' || type == 'g';
		if (!meta)
			sbd_tar_pax_apply(&pax, &th);
		uint64_t size = th.size;
		if (size > n - off - 512) {
			r = strata_err_set(e, -EINVAL, "truncated archive");
			break;
		}
		const uint8_t *data = p + off + 512;
		off += 512 + (size + 511) / 512 * 512;
		if (type == 'L') {
			free(longname);
			longname = strndup((const char *)data, size);
			continue;
		}
		if (type == 'x') {
			if ((r = sbd_tar_pax_parse((const char *)data, size, &pax)) < 0) {
				strata_err_set(e, r, "archive: a bad pax header");
				break;
			}
			if (pax.path) {
				free(longname);
				longname = pax.path;
				pax.path = NULL;
			}
			continue;
		}
		if (meta)
			continue;
		sbd_tar_pax_clear(&pax);
		const char *nm = longname ? longname : name;
		if (cnt >= TAR_MAX_ENTRIES) {
			r = -E2BIG;
			break;
		}
		struct entry *nv = realloc(v, (cnt + 1) * sizeof(*v));
		if (!nv) {
			r = -ENOMEM;
			break;
		}
		v = nv;
		v[cnt] = (struct entry){.path = sbd_tar_join(dir, nm),
					.type = type,
					.mode = th.mode,
					.data = data,
					.size = size};
		free(longname);
		longname = NULL;
		if (!v[cnt++].path) {
			r = strata_err_set(e, -EINVAL, "archive member '%s' leaves the destination",
					   nm);
			break;
		}
	}
	free(longname);
	sbd_tar_pax_clear(&pax);
	if (r < 0) {
		entries_free(v, cnt);
		return r;
	}
	*ret = v;
	*ret_n = cnt;
	return 0;
}

int sbd_tar_unpack(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, const uint8_t *p,
		   size_t n, struct strata_err *err)
{
	if (b->tar_in)
		return b->tar_in(b, sb, dir, p, n, err);
	struct entry *v = NULL;
	size_t cnt = 0;
	int r = parse_all(dir, p, n, &v, &cnt, err);
	if (r < 0)
		return r;
	struct sbd_file_req mk = {.op = SBD_F_MKDIR, .path = dir, .mode = 0755, .parents = true};
	r = b->file(b, sb, &mk);
	int files = 0;
	for (size_t i = 0; r == 0 && i < cnt; i++) {
		struct entry *e = &v[i];
		struct sbd_file_req f = {.path = e->path, .mode = e->mode & 07777};
		if (e->type == '5') {
			f.op = SBD_F_MKDIR;
			f.parents = true;
			f.mode = f.mode ? f.mode : 0755;
		} else if (e->type == '0' || e->type == 0 || e->type == '7') {
			f.op = SBD_F_WRITE;
			f.data = e->data;
			f.len = e->size;
			f.mode = f.mode ? f.mode : 0644;
			files++;
		} else {
			continue; /* links, devices, fifos: not unpacked */
		}
		r = b->file(b, sb, &f);
		if (r == -ENOENT && f.op == SBD_F_WRITE) { /* a parent not in the archive */
			char *slash = strrchr(e->path, '/');
			*slash = 0;
			struct sbd_file_req pm = {
			    .op = SBD_F_MKDIR, .path = e->path, .mode = 0755, .parents = true};
			r = slash == e->path ? 0 : b->file(b, sb, &pm);
			*slash = '/';
			if (r == 0)
				r = b->file(b, sb, &f);
		}
		if (r < 0)
			strata_err_set(err, r, "%s: %s", e->path, strerror(-r));
	}
	entries_free(v, cnt);
	return r < 0 ? r : files;
}
