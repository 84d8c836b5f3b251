/* proto.c — codec of the strata-agent protocol (see proto.h, PROTOCOL.md).
 *
 * Plain C with no dependency beyond libc, so that the static agent, the
 * sandbox library and the fuzz target compile the same file. Writers grow a
 * heap buffer and remember the first allocation failure; readers are bounded
 * cursors that turn every overrun into -EBADMSG. */
#include "sandbox/agent/proto.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

static void le_put(uint8_t *p, uint64_t v, int n)
{
	for (int i = 0; i < n; i++)
		p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le_get(const uint8_t *p, int n)
{
	uint64_t v = 0;
	for (int i = 0; i < n; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

void ag_hdr_encode(uint16_t type, uint32_t id, uint32_t len, uint8_t out[AG_HDR_SIZE])
{
	le_put(out, AG_MAGIC, 4);
	out[4] = AG_MAJOR;
	out[5] = AG_MINOR;
	le_put(out + 6, type, 2);
	le_put(out + 8, id, 4);
	le_put(out + 12, len, 4);
}

int ag_hdr_decode(const uint8_t in[AG_HDR_SIZE], struct ag_hdr *ret)
{
	if (le_get(in, 4) != AG_MAGIC)
		return -EPROTO;
	if (in[4] > AG_MAJOR || in[4] == 0)
		return -EPROTONOSUPPORT;
	ret->major = in[4];
	ret->minor = in[5];
	ret->type = (uint16_t)le_get(in + 6, 2);
	ret->id = (uint32_t)le_get(in + 8, 4);
	ret->len = (uint32_t)le_get(in + 12, 4);
	if (ret->len > AG_MAX_PAYLOAD)
		return -EMSGSIZE;
	return 0;
}

/* ---- writer --------------------------------------------------------------- */

void ag_wr_init(struct ag_wr *w)
{
	memset(w, 0, sizeof(*w));
}

void ag_wr_done(struct ag_wr *w)
{
	free(w->data);
	memset(w, 0, sizeof(*w));
}

static uint8_t *wr_grow(struct ag_wr *w, size_t n)
{
	if (w->err)
		return NULL;
	if (w->len + n > w->cap) {
		size_t cap = w->cap ? w->cap : 256;
		while (cap < w->len + n)
			cap *= 2;
		uint8_t *d = realloc(w->data, cap);
		if (!d) {
			w->err = -ENOMEM;
			return NULL;
		}
		w->data = d;
		w->cap = cap;
	}
	uint8_t *p = w->data + w->len;
	w->len += n;
	return p;
}

static void wr_le(struct ag_wr *w, uint64_t v, int n)
{
	uint8_t *p = wr_grow(w, (size_t)n);
	if (p)
		le_put(p, v, n);
}

void ag_wr_u8(struct ag_wr *w, uint8_t v)
{
	wr_le(w, v, 1);
}
void ag_wr_u16(struct ag_wr *w, uint16_t v)
{
	wr_le(w, v, 2);
}
void ag_wr_u32(struct ag_wr *w, uint32_t v)
{
	wr_le(w, v, 4);
}
void ag_wr_u64(struct ag_wr *w, uint64_t v)
{
	wr_le(w, v, 8);
}

void ag_wr_bytes(struct ag_wr *w, const void *p, size_t n)
{
	uint8_t *d = wr_grow(w, n);
	if (d && n)
		memcpy(d, p, n);
}

void ag_wr_blob(struct ag_wr *w, const void *p, uint32_t n)
{
	ag_wr_u32(w, n);
	ag_wr_bytes(w, p, n);
}

void ag_wr_str(struct ag_wr *w, const char *s)
{
	size_t n = s ? strlen(s) : 0;
	ag_wr_blob(w, s, (uint32_t)n);
}

size_t ag_wr_begin(struct ag_wr *w, uint16_t type, uint32_t id)
{
	size_t off = w->len;
	uint8_t *p = wr_grow(w, AG_HDR_SIZE);
	if (p)
		ag_hdr_encode(type, id, 0, p);
	return off;
}

int ag_wr_end(struct ag_wr *w, size_t off)
{
	if (w->err)
		return w->err;
	size_t len = w->len - off - AG_HDR_SIZE;
	if (len > AG_MAX_PAYLOAD) {
		w->len = off; /* drop the frame, keep what came before */
		return -EMSGSIZE;
	}
	le_put(w->data + off + 12, len, 4);
	return 0;
}

void ag_wr_consume(struct ag_wr *w, size_t n)
{
	if (n >= w->len) {
		w->len = 0;
		return;
	}
	memmove(w->data, w->data + n, w->len - n);
	w->len -= n;
}

/* ---- reader --------------------------------------------------------------- */

void ag_rd_init(struct ag_rd *r, const void *p, size_t len)
{
	r->p = p;
	r->len = len;
	r->off = 0;
	r->err = 0;
}

static const uint8_t *rd_take(struct ag_rd *r, size_t n)
{
	if (r->err || n > r->len - r->off) {
		r->err = -EBADMSG;
		return NULL;
	}
	const uint8_t *p = r->p + r->off;
	r->off += n;
	return p;
}

static uint64_t rd_le(struct ag_rd *r, int n)
{
	const uint8_t *p = rd_take(r, (size_t)n);
	return p ? le_get(p, n) : 0;
}

uint8_t ag_rd_u8(struct ag_rd *r)
{
	return (uint8_t)rd_le(r, 1);
}
uint16_t ag_rd_u16(struct ag_rd *r)
{
	return (uint16_t)rd_le(r, 2);
}
uint32_t ag_rd_u32(struct ag_rd *r)
{
	return (uint32_t)rd_le(r, 4);
}
uint64_t ag_rd_u64(struct ag_rd *r)
{
	return rd_le(r, 8);
}

const void *ag_rd_blob(struct ag_rd *r, uint32_t max, uint32_t *ret_len)
{
	uint32_t n = ag_rd_u32(r);
	if (r->err)
		return NULL;
	if (n > max) {
		r->err = -EBADMSG;
		return NULL;
	}
	const void *p = rd_take(r, n);
	if (p)
		*ret_len = n;
	return p;
}

char *ag_rd_strdup(struct ag_rd *r, uint32_t max)
{
	uint32_t n = 0;
	const char *p = ag_rd_blob(r, max, &n);
	if (!p)
		return NULL;
	if (memchr(p, 0, n)) {
		r->err = -EBADMSG;
		return NULL;
	}
	char *s = malloc((size_t)n + 1);
	if (!s) {
		r->err = -ENOMEM;
		return NULL;
	}
	memcpy(s, p, n);
	s[n] = 0;
	return s;
}

/* ---- EXEC ----------------------------------------------------------------- */

void ag_exec_encode(struct ag_wr *w, const struct ag_exec_req *q)
{
	ag_wr_u32(w, q->flags);
	ag_wr_u32(w, q->uid);
	ag_wr_u32(w, q->gid);
	ag_wr_u32(w, q->timeout_ms);
	ag_wr_u64(w, q->output_cap);
	ag_wr_str(w, q->cwd);
	ag_wr_str(w, q->user);
	ag_wr_u32(w, q->argc);
	for (uint32_t i = 0; i < q->argc; i++)
		ag_wr_str(w, q->argv[i]);
	ag_wr_u32(w, q->envc);
	for (uint32_t i = 0; i < q->envc; i++)
		ag_wr_str(w, q->env[i]);
}

/* Reads one string into the block at *cursor (or only measures it when
 * cursor is NULL). Returns the copy, or NULL when measuring or on error. */
static char *rd_str_into(struct ag_rd *r, uint32_t max, char **cursor, size_t *need)
{
	uint32_t n = 0;
	const char *p = ag_rd_blob(r, max, &n);
	if (!p)
		return NULL;
	if (memchr(p, 0, n)) {
		r->err = -EBADMSG;
		return NULL;
	}
	*need += (size_t)n + 1;
	if (!cursor)
		return NULL;
	char *s = *cursor;
	memcpy(s, p, n);
	s[n] = 0;
	*cursor += n + 1;
	return s;
}

/* One pass over an EXEC payload. With q == NULL only validates and sums the
 * sizes; otherwise fills q, whose string area starts at *cursor. */
static int exec_pass(const void *p, size_t len, struct ag_exec_req *q, char *cursor,
		     uint32_t *ret_argc, uint32_t *ret_envc, size_t *need)
{
	struct ag_rd r;
	struct ag_exec_req tmp;
	char **cur = q ? &cursor : NULL;
	struct ag_exec_req *o = q ? q : &tmp;

	ag_rd_init(&r, p, len);
	o->flags = ag_rd_u32(&r);
	o->uid = ag_rd_u32(&r);
	o->gid = ag_rd_u32(&r);
	o->timeout_ms = ag_rd_u32(&r);
	o->output_cap = ag_rd_u64(&r);
	o->cwd = rd_str_into(&r, AG_MAX_PATH, cur, need);
	o->user = rd_str_into(&r, 256, cur, need);
	uint32_t argc = ag_rd_u32(&r);
	if (r.err || argc == 0 || argc > AG_MAX_ARGS)
		return r.err ? r.err : (argc == 0 ? -EINVAL : -EBADMSG);
	for (uint32_t i = 0; i < argc && !r.err; i++) {
		char *s = rd_str_into(&r, AG_MAX_PAYLOAD, cur, need);
		if (q)
			q->argv[i] = s;
	}
	uint32_t envc = ag_rd_u32(&r);
	if (r.err || envc > AG_MAX_ARGS)
		return r.err ? r.err : -EBADMSG;
	for (uint32_t i = 0; i < envc && !r.err; i++) {
		char *s = rd_str_into(&r, AG_MAX_PAYLOAD, cur, need);
		if (q)
			q->env[i] = s;
	}
	if (r.err)
		return r.err;
	*ret_argc = argc;
	*ret_envc = envc;
	return 0;
}

int ag_exec_decode(const void *p, size_t len, struct ag_exec_req **ret)
{
	uint32_t argc = 0, envc = 0;
	size_t strings = 0;
	int r = exec_pass(p, len, NULL, NULL, &argc, &envc, &strings);
	if (r < 0)
		return r;

	size_t ptrs = ((size_t)argc + 1 + envc + 1) * sizeof(char *);
	struct ag_exec_req *q = calloc(1, sizeof(*q) + ptrs + strings);
	if (!q)
		return -ENOMEM;
	q->argv = (char **)(q + 1);
	q->env = q->argv + argc + 1;
	char *area = (char *)(q->env + envc + 1);
	size_t again = 0;
	r = exec_pass(p, len, q, area, &q->argc, &q->envc, &again);
	if (r < 0 || again != strings) { /* cannot happen: same bytes, same walk */
		free(q);
		return r < 0 ? r : -EBADMSG;
	}
	q->argv[argc] = NULL;
	q->env[envc] = NULL;
	*ret = q;
	return 0;
}

/* ---- EXIT, STAT ------------------------------------------------------------- */

void ag_exit_encode(struct ag_wr *w, const struct ag_exit *e)
{
	ag_wr_u32(w, (uint32_t)e->exit_code);
	ag_wr_u32(w, (uint32_t)e->signo);
	ag_wr_u32(w, e->flags);
	ag_wr_u64(w, e->stdout_bytes);
	ag_wr_u64(w, e->stderr_bytes);
	ag_wr_u64(w, e->duration_us);
}

int ag_exit_decode(const void *p, size_t len, struct ag_exit *e)
{
	struct ag_rd r;
	ag_rd_init(&r, p, len);
	e->exit_code = (int32_t)ag_rd_u32(&r);
	e->signo = (int32_t)ag_rd_u32(&r);
	e->flags = ag_rd_u32(&r);
	e->stdout_bytes = ag_rd_u64(&r);
	e->stderr_bytes = ag_rd_u64(&r);
	e->duration_us = ag_rd_u64(&r);
	return r.err;
}

void ag_stat_encode(struct ag_wr *w, const struct ag_stat *st)
{
	ag_wr_u8(w, st->type);
	ag_wr_u32(w, st->mode);
	ag_wr_u32(w, st->uid);
	ag_wr_u32(w, st->gid);
	ag_wr_u32(w, st->nlink);
	ag_wr_u64(w, st->size);
	ag_wr_u64(w, (uint64_t)st->mtime_ns);
}

void ag_stat_decode(struct ag_rd *r, struct ag_stat *st)
{
	st->type = ag_rd_u8(r);
	st->mode = ag_rd_u32(r);
	st->uid = ag_rd_u32(r);
	st->gid = ag_rd_u32(r);
	st->nlink = ag_rd_u32(r);
	st->size = ag_rd_u64(r);
	st->mtime_ns = (int64_t)ag_rd_u64(r);
}

void ag_start_encode(struct ag_wr *w, const struct ag_start_req *q)
{
	ag_wr_str(w, q->hostname);
	ag_wr_u64(w, q->disk_bytes);
	ag_wr_u64(w, q->disk_inodes);
	ag_wr_u64(w, q->caps_keep);
	ag_wr_u8(w, q->flags);
	ag_wr_u32(w, q->orphan_timeout_ms);
	ag_wr_u32(w, q->uid_base);
}

int ag_start_decode(const void *p, size_t len, struct ag_start_req *q)
{
	struct ag_rd r;
	uint32_t n = 0;
	ag_rd_init(&r, p, len);
	const char *h = ag_rd_blob(&r, sizeof(q->hostname) - 1, &n);
	q->disk_bytes = ag_rd_u64(&r);
	q->disk_inodes = ag_rd_u64(&r);
	q->caps_keep = ag_rd_u64(&r);
	q->flags = r.off < r.len ? ag_rd_u8(&r) : 0;
	q->orphan_timeout_ms = r.off < r.len ? ag_rd_u32(&r) : 0;
	q->uid_base = r.off < r.len ? ag_rd_u32(&r) : 0;
	if (r.err)
		return r.err;
	if (memchr(h, 0, n) || n == 0)
		return -EBADMSG;
	memcpy(q->hostname, h, n);
	q->hostname[n] = 0;
	return 0;
}

uint8_t ag_file_type(uint32_t m)
{
	switch (m & S_IFMT) {
	case S_IFREG:
		return AG_FT_REG;
	case S_IFDIR:
		return AG_FT_DIR;
	case S_IFLNK:
		return AG_FT_LNK;
	case S_IFCHR:
		return AG_FT_CHR;
	case S_IFBLK:
		return AG_FT_BLK;
	case S_IFIFO:
		return AG_FT_FIFO;
	case S_IFSOCK:
		return AG_FT_SOCK;
	default:
		return AG_FT_OTHER;
	}
}

void ag_exec_info_encode(struct ag_wr *w, const struct ag_exec_info *e)
{
	size_t n = strnlen(e->cmd, AG_MAX_CMD);
	ag_wr_u32(w, e->id);
	ag_wr_u32(w, e->pid);
	ag_wr_u8(w, e->state);
	ag_wr_u8(w, e->held);
	ag_wr_u64(w, e->age_us);
	ag_wr_blob(w, e->cmd, (uint32_t)n);
}

int ag_exec_info_decode(struct ag_rd *r, struct ag_exec_info *ret)
{
	uint32_t n = 0;
	ret->id = ag_rd_u32(r);
	ret->pid = ag_rd_u32(r);
	ret->state = ag_rd_u8(r);
	ret->held = ag_rd_u8(r);
	ret->age_us = ag_rd_u64(r);
	const void *cmd = ag_rd_blob(r, AG_MAX_CMD, &n);
	if (r->err || !cmd || memchr(cmd, 0, n) ||
	    (ret->state != AG_EXEC_RUNNING && ret->state != AG_EXEC_ENDED))
		return r->err = -EBADMSG;
	memcpy(ret->cmd, cmd, n);
	ret->cmd[n] = 0;
	return 0;
}

const char *ag_type_name(uint16_t type)
{
	static const char *const names[] = {
	    [AG_T_HELLO] = "HELLO",   [AG_T_EXEC] = "EXEC",	[AG_T_STDIN] = "STDIN",
	    [AG_T_SIGNAL] = "SIGNAL", [AG_T_OUTPUT] = "OUTPUT", [AG_T_EXIT] = "EXIT",
	    [AG_T_START] = "START",   [AG_T_READ] = "READ",	[AG_T_WRITE] = "WRITE",
	    [AG_T_LIST] = "LIST",     [AG_T_STAT] = "STAT",	[AG_T_MKDIR] = "MKDIR",
	    [AG_T_REMOVE] = "REMOVE", [AG_T_PING] = "PING",	[AG_T_TAR_OUT] = "TAR_OUT",
	    [AG_T_TAR_IN] = "TAR_IN", [AG_T_EXECS] = "EXECS",	[AG_T_ATTACH] = "ATTACH",
	};
	uint16_t t = type & (uint16_t)~AG_T_REPLY;
	if (t < sizeof(names) / sizeof(names[0]) && names[t])
		return names[t];
	return "?";
}
