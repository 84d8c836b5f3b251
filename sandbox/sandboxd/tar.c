/* tar.c — tar streams over backend file operations (see tar.h). */
#include "sandbox/sandboxd/tar.h"

#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

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

static void octal(char *dst, size_t w, uint64_t v)
{
	snprintf(dst, w, "%0*llo", (int)w - 1, (unsigned long long)v);
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
	char h[512] = {0};
	memcpy(h, name, nl < 100 ? nl : 99);
	octal(h + 100, 8, mode & 07777);
	octal(h + 108, 8, 0);
	octal(h + 116, 8, 0);
	octal(h + 124, 12, size);
	octal(h + 136, 12, mtime > 0 ? (uint64_t)mtime : 0);
	memset(h + 148, ' ', 8);
	h[156] = type;
	memcpy(h + 257, "ustar", 6);
	memcpy(h + 263, "00", 2);
	unsigned sum = 0;
	for (int i = 0; i < 512; i++)
		sum += (unsigned char)h[i];
	snprintf(h + 148, 8, "%06o", sum);
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

static uint64_t parse_octal(const char *p, size_t n)
{
	uint64_t v = 0;
	for (size_t i = 0; i < n && p[i]; i++)
		if (p[i] >= '0' && p[i] <= '7')
			v = v * 8 + (uint64_t)(p[i] - '0');
	return v;
}

/* The pax "path" record of an extended header, malloc'ed, or NULL. */
static char *pax_path(const uint8_t *p, size_t n)
{
	size_t off = 0;
	while (off < n) {
		char *end;
		unsigned long len = strtoul((const char *)p + off, &end, 10);
		if (!len || off + len > n || *end != ' ')
			return NULL;
		const char *kv = end + 1;
		size_t kvlen = (size_t)((const char *)p + off + len - kv);
		if (kvlen > 5 && !strncmp(kv, "path=", 5))
			return strndup(kv + 5, kvlen - 6); /* drop the newline */
		off += len;
	}
	return NULL;
}

/* Joins name under dir; refuses "..". */
static char *join(const char *dir, const char *name)
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
	size_t n = strlen(out);
	while (n > 1 && out[n - 1] == '/')
		out[--n] = 0;
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
	int r = 0;
	while (off + 512 <= n) {
		const uint8_t *h = p + off;
		bool zero = true;
		for (int i = 0; i < 512 && zero; i++)
			zero = !h[i];
		if (zero)
			break;
		uint64_t size = parse_octal((const char *)h + 124, 12);
		char type = (char)h[156];
		if (size > n - off - 512) {
			r = strata_err_set(e, -EINVAL, "truncated archive");
			break;
		}
		const uint8_t *data = h + 512;
		off += 512 + (size + 511) / 512 * 512;
		if (type == 'L' || type == 'x') {
			free(longname);
			longname =
			    type == 'L' ? strndup((const char *)data, size) : pax_path(data, size);
			continue;
		}
		if (type == 'g')
			continue;
		char name[257] = {0};
		if (!longname && h[345]) /* ustar prefix */
			snprintf(name, sizeof(name), "%.155s/%.100s", (const char *)h + 345,
				 (const char *)h);
		else
			memcpy(name, h, 100);
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
		v[cnt] = (struct entry){.path = join(dir, nm),
					.type = type,
					.mode = (uint32_t)parse_octal((const char *)h + 100, 8),
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
