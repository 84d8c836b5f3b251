/* tar.c — streaming tar reader (ustar, GNU, PAX) that treats every byte of
 * the archive as hostile.
 *
 * The reader pulls 512-byte headers from the source. GNU 'L'/'K' and PAX 'x'
 * headers are "meta" headers: their payload (bounded by max_meta) is parsed
 * into `pend`, which overrides fields of the next real header. A real header
 * becomes the current entry; its data is handed out by tar_read() and the
 * remainder (plus padding) is skipped by the next tar_next().
 *
 * Invariants:
 *  1. No payload larger than lim.max_meta is ever buffered; entry data is
 *     streamed to the caller, never buffered.
 *  2. Every header counts against lim.max_entries and every entry's size
 *     against lim.max_total, before any of its data is read.
 *  3. A path handed out is normalized and contains no ".." component, no NUL,
 *     and has components of at most 255 bytes.
 *  4. The first error is sticky; tar_next() after an error returns it again.
 *  5. The end of the archive is two zero blocks (or one, then end of
 *     stream); the source is then drained so that decoder errors in a
 *     compressed trailer still surface. A stream that just stops is an error. */
#include "imagesvc/tar.h"

#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/cleanup.h"

#define NAME_MAX_COMPONENT 255
#define SYMLINK_MAX 4095
#define XATTR_NAME_MAX_LEN 255
#define MAX_META_CHAIN 16

struct pending {
	char *path, *linkpath;
	bool has_size, has_uid, has_gid, has_mtime, has_major, has_minor;
	uint64_t size;
	uint32_t uid, gid, major, minor;
	int64_t mtime;
	uint32_t nsec;
	struct tar_xattr *xattrs;
	size_t n_xattrs;
};

struct tar_reader {
	struct tar_limits lim;
	img_read_fn fn;
	void *ctx;
	const char *(*src_why)(void *ctx);
	uint64_t remaining, pad;
	size_t entries;
	uint64_t total;
	struct tar_entry cur;
	struct pending pend;
	bool ended;
	int err;
	char msg[512];
	uint8_t blk[TAR_BLOCK];
};

void tar_limits_default(struct tar_limits *ret)
{
	*ret = (struct tar_limits){
	    .max_meta = 1u << 20,
	    .max_path = 4096,
	    .max_entries = 4u << 20,
	    .max_total = 64ull << 30,
	    .max_xattrs = 128,
	    .max_xattr_value = 65535,
	    .max_xattr_total = 192u << 10,
	};
}

static int set_err(struct tar_reader *r, int err, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static int set_err(struct tar_reader *r, int err, const char *fmt, ...)
{
	if (r->err)
		return r->err;
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(r->msg, sizeof(r->msg), fmt, ap);
	va_end(ap);
	r->err = err;
	return err;
}

static void xattrs_free(struct tar_xattr *x, size_t n)
{
	for (size_t i = 0; i < n; i++) {
		free(x[i].name);
		free(x[i].value);
	}
	free(x);
}

static void pending_done(struct pending *p)
{
	free(p->path);
	free(p->linkpath);
	xattrs_free(p->xattrs, p->n_xattrs);
	*p = (struct pending){0};
}

static bool pending_empty(const struct pending *p)
{
	return !p->path && !p->linkpath && !p->has_size && !p->has_uid && !p->has_gid &&
	       !p->has_mtime && !p->has_major && !p->has_minor && !p->n_xattrs;
}

static void entry_done(struct tar_entry *e)
{
	free(e->path);
	free(e->linkname);
	xattrs_free(e->xattrs, e->n_xattrs);
	*e = (struct tar_entry){0};
}

int tar_reader_new(const struct tar_limits *lim, img_read_fn fn, void *ctx, struct tar_reader **ret)
{
	struct tar_reader *r = calloc(1, sizeof(*r));
	if (!r)
		return -ENOMEM;
	if (lim)
		r->lim = *lim;
	else
		tar_limits_default(&r->lim);
	r->fn = fn;
	r->ctx = ctx;
	*ret = r;
	return 0;
}

void tar_reader_describe_source(struct tar_reader *r, const char *(*why)(void *ctx))
{
	r->src_why = why;
}

struct tar_reader *tar_reader_free(struct tar_reader *r)
{
	if (!r)
		return NULL;
	entry_done(&r->cur);
	pending_done(&r->pend);
	free(r);
	return NULL;
}

const char *tar_error(const struct tar_reader *r)
{
	return r->err ? r->msg : "no error";
}

/* ---- source access ------------------------------------------------------ */

static int source_failed(struct tar_reader *r, ssize_t n)
{
	const char *why = r->src_why ? r->src_why(r->ctx) : strerror((int)-n);
	return set_err(r, (int)n, "reading the layer: %s", why);
}

/* Reads exactly n bytes. A source that ends first is a truncated archive. */
static int read_full(struct tar_reader *r, void *buf, size_t n, const char *what)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = r->fn(r->ctx, (uint8_t *)buf + got, n - got);
		if (k == -EINTR)
			continue;
		if (k < 0)
			return source_failed(r, k);
		if (k == 0)
			return set_err(r, -EBADMSG, "truncated archive: it ends inside %s", what);
		got += (size_t)k;
	}
	return 0;
}

static int skip(struct tar_reader *r, uint64_t n)
{
	uint8_t buf[4096];
	while (n > 0) {
		size_t k = n < sizeof(buf) ? (size_t)n : sizeof(buf);
		int ret = read_full(r, buf, k, "entry data");
		if (ret < 0)
			return ret;
		n -= k;
	}
	return 0;
}

/* After the end-of-archive marker: consume the rest so that a compressed
 * stream's trailer is verified. Its content is padding and ignored. */
static int drain(struct tar_reader *r)
{
	uint8_t buf[4096];
	for (;;) {
		ssize_t k = r->fn(r->ctx, buf, sizeof(buf));
		if (k == -EINTR)
			continue;
		if (k < 0)
			return source_failed(r, k);
		if (k == 0)
			return 0;
	}
}

/* ---- header fields ------------------------------------------------------ */

/* Parses an octal or base-256 numeric field. Negative values (base-256 with a
 * 0xff lead byte) are allowed only if allow_neg. Returns 0 or -EBADMSG. */
static int parse_num(const uint8_t *f, size_t len, bool allow_neg, int64_t *ret)
{
	if (len > 0 && (f[0] & 0x80)) {
		if (f[0] == 0xff) {
			if (!allow_neg || len < 8)
				return -EBADMSG;
			for (size_t i = 0; i < len - 8; i++)
				if (f[i] != 0xff)
					return -EBADMSG;
			uint64_t v = 0;
			for (size_t i = len - 8; i < len; i++)
				v = v << 8 | f[i];
			if ((int64_t)v >= 0)
				return -EBADMSG;
			*ret = (int64_t)v;
			return 0;
		}
		if (f[0] != 0x80)
			return -EBADMSG;
		uint64_t v = 0;
		for (size_t i = 1; i < len; i++) {
			if (v > (UINT64_MAX >> 8))
				return -EBADMSG;
			v = v << 8 | f[i];
		}
		if (v > INT64_MAX)
			return -EBADMSG;
		*ret = (int64_t)v;
		return 0;
	}
	size_t i = 0;
	while (i < len && f[i] == ' ')
		i++;
	uint64_t v = 0;
	for (; i < len && f[i] >= '0' && f[i] <= '7'; i++) {
		if (v > (uint64_t)INT64_MAX >> 3)
			return -EBADMSG;
		v = v << 3 | (uint64_t)(f[i] - '0');
	}
	for (; i < len; i++)
		if (f[i] != ' ' && f[i] != '\0')
			return -EBADMSG;
	*ret = (int64_t)v;
	return 0;
}

static bool block_is_zero(const uint8_t *b)
{
	for (size_t i = 0; i < TAR_BLOCK; i++)
		if (b[i])
			return false;
	return true;
}

static int verify_checksum(const uint8_t *b)
{
	int64_t stored;
	if (parse_num(b + 148, 8, false, &stored) < 0)
		return -EBADMSG;
	uint64_t usum = 0;
	int64_t ssum = 0;
	for (size_t i = 0; i < TAR_BLOCK; i++) {
		uint8_t c = (i >= 148 && i < 156) ? ' ' : b[i];
		usum += c;
		ssum += (int8_t)c;
	}
	return ((int64_t)usum == stored || ssum == stored) ? 0 : -EBADMSG;
}

/* Copies a fixed-width, maybe not NUL-terminated header string. */
static size_t field_len(const uint8_t *f, size_t cap)
{
	const void *z = memchr(f, 0, cap);
	return z ? (size_t)((const uint8_t *)z - f) : cap;
}

static bool is_posix_ustar(const uint8_t *b)
{
	return memcmp(b + 257, "ustar\0", 6) == 0;
}

/* ---- paths -------------------------------------------------------------- */

int tar_normalize_path(const char *in, size_t len, size_t max_path, char **ret)
{
	if (memchr(in, 0, len))
		return -EINVAL;
	_cleanup_free_ char *out = malloc(len + 1);
	if (!out)
		return -ENOMEM;
	size_t o = 0, i = 0;
	while (i < len) {
		while (i < len && in[i] == '/')
			i++;
		size_t s = i;
		while (i < len && in[i] != '/')
			i++;
		size_t c = i - s;
		if (c == 0 || (c == 1 && in[s] == '.'))
			continue;
		if (c == 2 && in[s] == '.' && in[s + 1] == '.')
			return -EINVAL;
		if (c > NAME_MAX_COMPONENT)
			return -ENAMETOOLONG;
		if (o)
			out[o++] = '/';
		memcpy(out + o, in + s, c);
		o += c;
	}
	out[o] = 0;
	if (o > max_path)
		return -ENAMETOOLONG;
	*ret = TAKE_PTR(out);
	return 0;
}

/* ---- PAX ---------------------------------------------------------------- */

static int parse_dec(const char *v, size_t n, uint64_t max, uint64_t *ret)
{
	if (n == 0 || n > 20)
		return -EBADMSG;
	uint64_t x = 0;
	for (size_t i = 0; i < n; i++) {
		if (v[i] < '0' || v[i] > '9')
			return -EBADMSG;
		unsigned d = (unsigned)(v[i] - '0');
		if (x > (max - d) / 10)
			return -EBADMSG;
		x = x * 10 + d;
	}
	*ret = x;
	return 0;
}

/* "[-]sec[.frac]" into seconds and nanoseconds (floor semantics). */
static int parse_pax_time(const char *v, size_t n, int64_t *ret_sec, uint32_t *ret_nsec)
{
	bool neg = n > 0 && v[0] == '-';
	size_t i = neg ? 1 : 0;
	const char *dot = memchr(v + i, '.', n - i);
	size_t ilen = dot ? (size_t)(dot - (v + i)) : n - i;
	uint64_t sec;
	if (parse_dec(v + i, ilen, INT64_MAX, &sec) < 0)
		return -EBADMSG;
	uint32_t nsec = 0;
	if (dot) {
		size_t flen = n - i - ilen - 1;
		uint32_t scale = 100000000;
		for (size_t k = 0; k < flen; k++) {
			char c = dot[1 + k];
			if (c < '0' || c > '9')
				return -EBADMSG;
			nsec += (uint32_t)(c - '0') * scale;
			scale /= 10;
		}
	}
	int64_t s = (int64_t)sec;
	if (neg) {
		s = -s;
		if (nsec) {
			s -= 1;
			nsec = 1000000000u - nsec;
		}
	}
	*ret_sec = s;
	*ret_nsec = nsec;
	return 0;
}

static int pax_set_str(struct tar_reader *r, char **dst, const char *v, size_t n)
{
	free(*dst);
	*dst = NULL;
	if (n == 0)
		return 0; /* an empty value removes the keyword */
	if (memchr(v, 0, n))
		return set_err(r, -EINVAL, "PAX header: string value contains a NUL byte");
	*dst = strndup(v, n);
	return *dst ? 0 : -ENOMEM;
}

static int pax_xattr(struct tar_reader *r, struct pending *p, const char *name, size_t nlen,
		     const char *v, size_t vlen)
{
	if (nlen == 0 || nlen > XATTR_NAME_MAX_LEN || memchr(name, 0, nlen))
		return set_err(r, -EINVAL, "PAX header: invalid xattr name");
	if (vlen > r->lim.max_xattr_value)
		return set_err(r, -EFBIG,
			       "PAX header: xattr value of %zu bytes exceeds the limit %zu", vlen,
			       r->lim.max_xattr_value);
	struct tar_xattr *x = NULL;
	size_t total = nlen + vlen;
	for (size_t i = 0; i < p->n_xattrs; i++) {
		if (strlen(p->xattrs[i].name) == nlen && !memcmp(p->xattrs[i].name, name, nlen))
			x = &p->xattrs[i];
		else
			total += strlen(p->xattrs[i].name) + p->xattrs[i].len;
	}
	if (total > r->lim.max_xattr_total)
		return set_err(r, -EFBIG, "PAX header: xattrs of one entry exceed %zu bytes",
			       r->lim.max_xattr_total);
	if (!x) {
		if (p->n_xattrs >= r->lim.max_xattrs)
			return set_err(r, -E2BIG, "PAX header: more than %zu xattrs on one entry",
				       r->lim.max_xattrs);
		struct tar_xattr *nx = realloc(p->xattrs, (p->n_xattrs + 1) * sizeof(*nx));
		if (!nx)
			return -ENOMEM;
		p->xattrs = nx;
		x = &nx[p->n_xattrs];
		*x = (struct tar_xattr){.name = strndup(name, nlen)};
		if (!x->name)
			return -ENOMEM;
		p->n_xattrs++;
	}
	free(x->value);
	x->value = malloc(vlen ? vlen : 1);
	if (!x->value)
		return -ENOMEM;
	memcpy(x->value, v, vlen);
	x->len = (uint32_t)vlen;
	return 0;
}

static bool key_is(const char *k, size_t klen, const char *want)
{
	return strlen(want) == klen && !memcmp(k, want, klen);
}

static bool key_has_prefix(const char *k, size_t klen, const char *pfx)
{
	size_t n = strlen(pfx);
	return klen >= n && !memcmp(k, pfx, n);
}

static int pax_num(struct tar_reader *r, const char *k, size_t klen, const char *v, size_t vlen,
		   uint64_t max, uint64_t *ret)
{
	if (parse_dec(v, vlen, max, ret) < 0)
		return set_err(r, -EBADMSG, "PAX header: bad number for '%.*s'", (int)klen, k);
	return 0;
}

static int pax_apply(struct tar_reader *r, struct pending *p, const char *k, size_t klen,
		     const char *v, size_t vlen)
{
	uint64_t x = 0;
	int ret = 0;
	if (key_is(k, klen, "path"))
		return pax_set_str(r, &p->path, v, vlen);
	if (key_is(k, klen, "linkpath"))
		return pax_set_str(r, &p->linkpath, v, vlen);
	if (key_has_prefix(k, klen, "GNU.sparse."))
		return set_err(r, -EOPNOTSUPP, "sparse files (PAX GNU.sparse.*) are not supported");
	if (key_has_prefix(k, klen, "SCHILY.xattr."))
		return pax_xattr(r, p, k + 13, klen - 13, v, vlen);
	if (vlen == 0)
		return 0;
	if (key_is(k, klen, "size")) {
		ret = pax_num(r, k, klen, v, vlen, INT64_MAX, &p->size);
		p->has_size = ret == 0;
	} else if (key_is(k, klen, "uid")) {
		ret = pax_num(r, k, klen, v, vlen, UINT32_MAX, &x);
		p->uid = (uint32_t)x;
		p->has_uid = ret == 0;
	} else if (key_is(k, klen, "gid")) {
		ret = pax_num(r, k, klen, v, vlen, UINT32_MAX, &x);
		p->gid = (uint32_t)x;
		p->has_gid = ret == 0;
	} else if (key_is(k, klen, "SCHILY.devmajor")) {
		ret = pax_num(r, k, klen, v, vlen, UINT32_MAX, &x);
		p->major = (uint32_t)x;
		p->has_major = ret == 0;
	} else if (key_is(k, klen, "SCHILY.devminor")) {
		ret = pax_num(r, k, klen, v, vlen, UINT32_MAX, &x);
		p->minor = (uint32_t)x;
		p->has_minor = ret == 0;
	} else if (key_is(k, klen, "mtime")) {
		if (parse_pax_time(v, vlen, &p->mtime, &p->nsec) < 0)
			return set_err(r, -EBADMSG, "PAX header: bad mtime");
		p->has_mtime = true;
	}
	return ret; /* other keys (atime, ctime, uname, gname, ...) are ignored */
}

/* Parses "<len> <key>=<value>\n" records. */
static int pax_parse(struct tar_reader *r, const char *buf, size_t len, struct pending *p)
{
	size_t pos = 0;
	while (pos < len) {
		if (buf[pos] == 0) { /* NUL padding up to the end is tolerated */
			while (pos < len && buf[pos] == 0)
				pos++;
			if (pos < len)
				return set_err(r, -EBADMSG, "PAX header: data after NUL padding");
			break;
		}
		size_t i = pos, reclen = 0;
		while (i < len && buf[i] >= '0' && buf[i] <= '9' && i - pos < 8)
			reclen = reclen * 10 + (size_t)(buf[i++] - '0');
		if (i == pos || i >= len || buf[i] != ' ' || reclen < i - pos + 3 ||
		    reclen > len - pos || buf[pos + reclen - 1] != '\n')
			return set_err(r, -EBADMSG, "PAX header: malformed record at offset %zu",
				       pos);
		const char *key = buf + i + 1;
		size_t rest = pos + reclen - 1 - (i + 1);
		const char *eq = memchr(key, '=', rest);
		if (!eq || eq == key)
			return set_err(r, -EBADMSG, "PAX header: record without key at offset %zu",
				       pos);
		size_t klen = (size_t)(eq - key);
		int ret = pax_apply(r, p, key, klen, eq + 1, rest - klen - 1);
		if (ret < 0)
			return ret;
		pos += reclen;
	}
	return 0;
}

/* ---- meta headers --------------------------------------------------------- */

static int read_meta_payload(struct tar_reader *r, const uint8_t *hdr, char **ret, size_t *ret_len)
{
	int64_t size;
	if (parse_num(hdr + 124, 12, false, &size) < 0)
		return set_err(r, -EBADMSG, "extended header: bad size field");
	if ((uint64_t)size > r->lim.max_meta)
		return set_err(r, -EFBIG, "extended header of %lld bytes exceeds the limit %zu",
			       (long long)size, r->lim.max_meta);
	size_t padded = ((size_t)size + TAR_BLOCK - 1) & ~(size_t)(TAR_BLOCK - 1);
	_cleanup_free_ char *buf = malloc(padded + 1);
	if (!buf)
		return -ENOMEM;
	int err = read_full(r, buf, padded, "an extended header");
	if (err < 0)
		return err;
	buf[size] = 0;
	*ret_len = (size_t)size;
	*ret = TAKE_PTR(buf);
	return 0;
}

static int handle_meta(struct tar_reader *r, const uint8_t *hdr, char type)
{
	_cleanup_free_ char *buf = NULL;
	size_t len = 0;
	int err = read_meta_payload(r, hdr, &buf, &len);
	if (err < 0)
		return err;
	if (type == 'x')
		return pax_parse(r, buf, len, &r->pend);
	if (type == 'g') { /* validated, then ignored (documented in tar.h) */
		struct pending scratch = {0};
		err = pax_parse(r, buf, len, &scratch);
		pending_done(&scratch);
		return err;
	}
	/* GNU 'L' / 'K': the name up to the first NUL */
	char **dst = type == 'L' ? &r->pend.path : &r->pend.linkpath;
	free(*dst);
	*dst = strndup(buf, strnlen(buf, len));
	return *dst ? 0 : -ENOMEM;
}

/* ---- real entries ------------------------------------------------------- */

static int entry_type(struct tar_reader *r, char t, bool trailing_slash, enum tar_type *ret)
{
	switch (t) {
	case '0':
	case '\0':
	case '7':
		*ret = trailing_slash ? TAR_DIR : TAR_REG;
		return 0;
	case '1':
		*ret = TAR_HARDLINK;
		return 0;
	case '2':
		*ret = TAR_SYMLINK;
		return 0;
	case '3':
		*ret = TAR_CHR;
		return 0;
	case '4':
		*ret = TAR_BLK;
		return 0;
	case '5':
		*ret = TAR_DIR;
		return 0;
	case '6':
		*ret = TAR_FIFO;
		return 0;
	case 'S':
		return set_err(r, -EOPNOTSUPP, "GNU sparse entries are not supported");
	default:
		return set_err(r, -EOPNOTSUPP, "unsupported tar entry type 0x%02x",
			       (unsigned char)t);
	}
}

/* The raw name: PAX/GNU override, else ustar prefix "/" name. */
static char *raw_name(struct tar_reader *r, const uint8_t *h)
{
	if (r->pend.path)
		return TAKE_PTR(r->pend.path);
	size_t nl = field_len(h, 100);
	size_t pl = is_posix_ustar(h) ? field_len(h + 345, 155) : 0;
	char *s = malloc(pl + nl + 2);
	if (!s)
		return NULL;
	size_t o = 0;
	if (pl) {
		memcpy(s, h + 345, pl);
		s[pl] = '/';
		o = pl + 1;
	}
	memcpy(s + o, h, nl);
	s[o + nl] = 0;
	return s;
}

static int header_num(struct tar_reader *r, const uint8_t *h, size_t off, size_t len,
		      const char *what, uint64_t max, uint64_t *ret)
{
	int64_t v;
	if (parse_num(h + off, len, false, &v) < 0 || (uint64_t)v > max)
		return set_err(r, -EBADMSG, "bad %s field in header of '%.100s'", what,
			       (const char *)h);
	*ret = (uint64_t)v;
	return 0;
}

static int fill_numbers(struct tar_reader *r, const uint8_t *h, struct tar_entry *e)
{
	struct pending *p = &r->pend;
	uint64_t v = 0;
	int64_t mt;
	int err;
	if ((err = header_num(r, h, 100, 8, "mode", UINT32_MAX, &v)) < 0)
		return err;
	e->mode = (uint32_t)v & 07777;
	if (!p->has_uid && (err = header_num(r, h, 108, 8, "uid", UINT32_MAX, &v)) < 0)
		return err;
	e->uid = p->has_uid ? p->uid : (uint32_t)v;
	if (!p->has_gid && (err = header_num(r, h, 116, 8, "gid", UINT32_MAX, &v)) < 0)
		return err;
	e->gid = p->has_gid ? p->gid : (uint32_t)v;
	if (!p->has_size && (err = header_num(r, h, 124, 12, "size", INT64_MAX, &v)) < 0)
		return err;
	e->size = p->has_size ? p->size : v;
	if (p->has_mtime) {
		e->mtime = p->mtime;
		e->mtime_nsec = p->nsec;
	} else if (parse_num(h + 136, 12, true, &mt) < 0) {
		return set_err(r, -EBADMSG, "bad mtime field in header");
	} else {
		e->mtime = mt;
	}
	if (e->type == TAR_CHR || e->type == TAR_BLK) {
		if (!p->has_major &&
		    (err = header_num(r, h, 329, 8, "devmajor", UINT32_MAX, &v)) < 0)
			return err;
		e->devmajor = p->has_major ? p->major : (uint32_t)v;
		if (!p->has_minor &&
		    (err = header_num(r, h, 337, 8, "devminor", UINT32_MAX, &v)) < 0)
			return err;
		e->devminor = p->has_minor ? p->minor : (uint32_t)v;
	}
	return 0;
}

static int fill_names(struct tar_reader *r, const uint8_t *h, struct tar_entry *e, const char *name)
{
	int err = tar_normalize_path(name, strlen(name), r->lim.max_path, &e->path);
	if (err < 0)
		return set_err(r, err, "refusing entry '%.200s': %s", name,
			       err == -EINVAL	      ? "'..' component or invalid name"
			       : err == -ENAMETOOLONG ? "name too long"
						      : strerror(-err));
	if (e->type != TAR_SYMLINK && e->type != TAR_HARDLINK)
		return 0;
	_cleanup_free_ char *link = r->pend.linkpath
					? TAKE_PTR(r->pend.linkpath)
					: strndup((const char *)h + 157, field_len(h + 157, 100));
	if (!link)
		return -ENOMEM;
	if (e->type == TAR_SYMLINK) {
		size_t n = strlen(link);
		if (n == 0 || n > SYMLINK_MAX)
			return set_err(r, n ? -ENAMETOOLONG : -EINVAL,
				       "symlink '%.200s': target empty or longer than %d bytes",
				       e->path, SYMLINK_MAX);
		e->linkname = TAKE_PTR(link);
		return 0;
	}
	err = tar_normalize_path(link, strlen(link), r->lim.max_path, &e->linkname);
	if (err < 0 || !e->linkname[0])
		return set_err(
		    r, err < 0 ? err : -EINVAL,
		    "refusing hard link '%.200s' -> '%.200s': target escapes or is invalid",
		    e->path, link);
	return 0;
}

static int build_entry(struct tar_reader *r, const uint8_t *h)
{
	struct tar_entry *e = &r->cur;
	_cleanup_free_ char *name = raw_name(r, h);
	if (!name)
		return -ENOMEM;
	size_t nl = strlen(name);
	int err = entry_type(r, (char)h[156], nl > 0 && name[nl - 1] == '/', &e->type);
	if (err < 0)
		return err;
	if ((err = fill_numbers(r, h, e)) < 0 || (err = fill_names(r, h, e, name)) < 0)
		return err;
	if (e->size > r->lim.max_total - r->total)
		return set_err(r, -EFBIG,
			       "entry '%.200s': layer expands beyond the limit of %llu bytes",
			       e->path, (unsigned long long)r->lim.max_total);
	r->total += e->size;
	r->remaining = e->size;
	r->pad = (TAR_BLOCK - (e->size % TAR_BLOCK)) % TAR_BLOCK;
	if (e->type != TAR_REG)
		e->size = 0; /* data of other types is skipped, never handed out */
	e->xattrs = TAKE_PTR(r->pend.xattrs);
	e->n_xattrs = r->pend.n_xattrs;
	r->pend.n_xattrs = 0;
	pending_done(&r->pend);
	return 1;
}

static int at_end(struct tar_reader *r)
{
	r->ended = true;
	if (!pending_empty(&r->pend))
		return set_err(r, -EBADMSG, "extended header without a following entry");
	/* The second zero block (or the end of the stream) and any padding. */
	int err = drain(r);
	return err < 0 ? err : 0;
}

static int next_header(struct tar_reader *r)
{
	for (unsigned chain = 0;; chain++) {
		uint8_t *h = r->blk;
		ssize_t k = r->fn(r->ctx, h, 1);
		if (k < 0)
			return source_failed(r, k);
		if (k == 0)
			return set_err(r, -EBADMSG, "truncated archive: no end-of-archive marker");
		int err = read_full(r, h + 1, TAR_BLOCK - 1, "a header");
		if (err < 0)
			return err;
		if (block_is_zero(h))
			return at_end(r);
		if (++r->entries > r->lim.max_entries)
			return set_err(r, -E2BIG, "more than %zu headers in the layer",
				       r->lim.max_entries);
		if (verify_checksum(h) < 0)
			return set_err(r, -EBADMSG,
				       "header checksum mismatch (not a tar archive?)");
		char t = (char)h[156];
		if (t == 'x' || t == 'g' || t == 'L' || t == 'K') {
			if (chain >= MAX_META_CHAIN)
				return set_err(r, -EBADMSG, "too many extended headers in a row");
			err = handle_meta(r, h, t);
			if (err < 0)
				return err;
			continue;
		}
		if (t == 'M' || t == 'V')
			return set_err(r, -EOPNOTSUPP, "multi-volume archives are not supported");
		return build_entry(r, h);
	}
}

int tar_next(struct tar_reader *r, const struct tar_entry **ret)
{
	if (r->err)
		return r->err;
	if (r->ended)
		return 0;
	entry_done(&r->cur);
	int err = skip(r, r->remaining + r->pad);
	if (err < 0)
		return err;
	r->remaining = r->pad = 0;
	err = next_header(r);
	if (err == 1)
		*ret = &r->cur;
	return err;
}

ssize_t tar_read(struct tar_reader *r, void *buf, size_t n)
{
	if (r->err)
		return r->err;
	if (r->remaining == 0 || n == 0)
		return 0;
	if (n > r->remaining)
		n = (size_t)r->remaining;
	for (;;) {
		ssize_t k = r->fn(r->ctx, buf, n);
		if (k == -EINTR)
			continue;
		if (k < 0)
			return source_failed(r, k);
		if (k == 0)
			return set_err(r, -EBADMSG,
				       "truncated archive: it ends inside the data of '%.200s'",
				       r->cur.path);
		r->remaining -= (uint64_t)k;
		return k;
	}
}
