/* chunk_proto.c — encoders and decoders of the MSG_CHUNK_* payloads; the
 * field lists are in chunk_proto.h. */
#include "fs/chunk_proto.h"

#include <errno.h>
#include <string.h>
#include "fs/proto.h"

#define CHUNK_MSG_LAST MSG_CHUNK_PUT_PART

static bool has_route(uint16_t type)
{
	return type > MSG_CHUNK_PING && type <= CHUNK_MSG_LAST;
}

static bool has_index(uint16_t type)
{
	return type != MSG_CHUNK_SYNC && type != MSG_CHUNK_PING;
}

static bool chunk_size_ok(uint32_t cs)
{
	return cs >= STRATA_MIN_CHUNK_SIZE && cs <= STRATA_MAX_CHUNK_SIZE && (cs & (cs - 1)) == 0;
}

int chunk_req_encode(uint16_t type, const struct chunk_req *r, struct wbuf *b)
{
	if (type < MSG_CHUNK_PING || type > CHUNK_MSG_LAST)
		return -EINVAL;
	if (has_route(type)) {
		wbuf_put_u32(b, r->route.target_id);
		wbuf_put_u32(b, r->route.chain_id);
		wbuf_put_u32(b, r->route.chain_ver);
	}
	if (has_index(type)) {
		wbuf_put_u64(b, r->ino);
		wbuf_put_u32(b, r->index);
	}
	switch (type) {
	case MSG_CHUNK_READ:
		wbuf_put_u32(b, r->off);
		wbuf_put_u32(b, r->len);
		break;
	case MSG_CHUNK_WRITE:
		wbuf_put_u32(b, r->off);
		wbuf_put_u32(b, r->len);
		wbuf_put_u32(b, r->chunk_size);
		wbuf_put_u32(b, r->flags);
		break;
	case MSG_CHUNK_WRITE_EX:
		wbuf_put_u32(b, r->off);
		wbuf_put_u32(b, r->len);
		wbuf_put_u32(b, r->chunk_size);
		wbuf_put_u32(b, r->flags);
		wbuf_put_u64(b, r->client_id);
		wbuf_put_u64(b, r->req_id);
		break;
	case MSG_CHUNK_TRUNCATE:
		wbuf_put_u32(b, r->len);
		wbuf_put_u32(b, r->chunk_size);
		if ((r->flags & CHUNK_WF_FWD) || r->client_id) {
			wbuf_put_u32(b, r->flags & CHUNK_WF_FWD);
			wbuf_put_u64(b, r->client_id);
			wbuf_put_u64(b, r->req_id);
		}
		break;
	case MSG_CHUNK_LIST:
		wbuf_put_u32(b, r->len);
		wbuf_put_u32(b, r->flags);
		break;
	case MSG_CHUNK_PUT:
		wbuf_put_u64(b, r->version);
		wbuf_put_u32(b, r->len);
		wbuf_put_u32(b, r->chunk_size);
		wbuf_put_u32(b, r->flags);
		break;
	case MSG_CHUNK_PUT_PART:
		wbuf_put_u64(b, r->version);
		wbuf_put_u32(b, r->total);
		wbuf_put_u32(b, r->off);
		wbuf_put_u32(b, r->len);
		wbuf_put_u32(b, r->flags);
		wbuf_put_u64(b, r->tag);
		wbuf_put_u64(b, r->checksum);
		break;
	}
	return b->err;
}

/* Semantic checks of a decoded request. */
static int chunk_req_check(uint16_t type, const struct chunk_req *r)
{
	uint64_t end = (uint64_t)r->off + r->len;
	switch (type) {
	case MSG_CHUNK_READ:
		return r->len <= CHUNK_IO_MAX && end <= STRATA_MAX_CHUNK_SIZE ? 0 : -EBADMSG;
	case MSG_CHUNK_WRITE:
		return r->len <= CHUNK_IO_MAX && chunk_size_ok(r->chunk_size) &&
			       end <= r->chunk_size && (r->flags & ~CHUNK_WF_SYNC) == 0
			   ? 0
			   : -EBADMSG;
	case MSG_CHUNK_WRITE_EX:
		return r->len <= CHUNK_IO_MAX && chunk_size_ok(r->chunk_size) &&
			       end <= r->chunk_size &&
			       (r->flags & ~(CHUNK_WF_SYNC | CHUNK_WF_FWD)) == 0
			   ? 0
			   : -EBADMSG;
	case MSG_CHUNK_TRUNCATE:
		return chunk_size_ok(r->chunk_size) && r->len <= r->chunk_size &&
			       (r->flags & ~CHUNK_WF_FWD) == 0
			   ? 0
			   : -EBADMSG;
	case MSG_CHUNK_LIST:
		return r->len >= 1 && r->len <= CHUNK_LIST_MAX &&
			       (r->flags & ~(CHUNK_LF_FIRST | CHUNK_LF_VERIFY)) == 0
			   ? 0
			   : -EBADMSG;
	case MSG_CHUNK_PUT:
		return r->len <= CHUNK_IO_MAX && chunk_size_ok(r->chunk_size) &&
			       r->len <= r->chunk_size && (r->flags & ~CHUNK_PF_REMOVE) == 0
			   ? 0
			   : -EBADMSG;
	case MSG_CHUNK_PUT_PART:
		return r->len <= CHUNK_IO_MAX && r->total <= STRATA_MAX_CHUNK_SIZE &&
			       end <= r->total && r->version != 0 &&
			       (r->flags & ~(CHUNK_PP_FIRST | CHUNK_PP_LAST)) == 0
			   ? 0
			   : -EBADMSG;
	}
	return 0;
}

int chunk_req_decode(uint16_t type, struct rbuf *b, struct chunk_req *ret)
{
	if (type < MSG_CHUNK_PING || type > CHUNK_MSG_LAST)
		return -EINVAL;
	struct chunk_req r = {0};
	if (has_route(type)) {
		r.route.target_id = rbuf_get_u32(b);
		r.route.chain_id = rbuf_get_u32(b);
		r.route.chain_ver = rbuf_get_u32(b);
	}
	if (has_index(type)) {
		r.ino = rbuf_get_u64(b);
		r.index = rbuf_get_u32(b);
	}
	switch (type) {
	case MSG_CHUNK_READ:
		r.off = rbuf_get_u32(b);
		r.len = rbuf_get_u32(b);
		break;
	case MSG_CHUNK_WRITE:
		r.off = rbuf_get_u32(b);
		r.len = rbuf_get_u32(b);
		r.chunk_size = rbuf_get_u32(b);
		r.flags = rbuf_get_u32(b);
		if (rbuf_done(b) == 0 && chunk_req_check(type, &r) == 0)
			r.data = rbuf_get_bytes(b, r.len);
		break;
	case MSG_CHUNK_WRITE_EX:
		r.off = rbuf_get_u32(b);
		r.len = rbuf_get_u32(b);
		r.chunk_size = rbuf_get_u32(b);
		r.flags = rbuf_get_u32(b);
		r.client_id = rbuf_get_u64(b);
		r.req_id = rbuf_get_u64(b);
		if (rbuf_done(b) == 0 && chunk_req_check(type, &r) == 0)
			r.data = rbuf_get_bytes(b, r.len);
		break;
	case MSG_CHUNK_TRUNCATE:
		r.len = rbuf_get_u32(b);
		r.chunk_size = rbuf_get_u32(b);
		if (rbuf_remaining(b) >= 20) {
			r.flags = rbuf_get_u32(b);
			r.client_id = rbuf_get_u64(b);
			r.req_id = rbuf_get_u64(b);
		}
		break;
	case MSG_CHUNK_LIST:
		r.len = rbuf_get_u32(b);
		r.flags = rbuf_get_u32(b);
		break;
	case MSG_CHUNK_PUT:
		r.version = rbuf_get_u64(b);
		r.len = rbuf_get_u32(b);
		r.chunk_size = rbuf_get_u32(b);
		r.flags = rbuf_get_u32(b);
		if (rbuf_done(b) == 0 && chunk_req_check(type, &r) == 0)
			r.data = rbuf_get_bytes(b, r.len);
		break;
	case MSG_CHUNK_PUT_PART:
		r.version = rbuf_get_u64(b);
		r.total = rbuf_get_u32(b);
		r.off = rbuf_get_u32(b);
		r.len = rbuf_get_u32(b);
		r.flags = rbuf_get_u32(b);
		r.tag = rbuf_get_u64(b);
		r.checksum = rbuf_get_u64(b);
		if (rbuf_done(b) == 0 && chunk_req_check(type, &r) == 0)
			r.data = rbuf_get_bytes(b, r.len);
		break;
	}
	if (rbuf_done(b) < 0 || chunk_req_check(type, &r) < 0)
		return -EBADMSG;
	*ret = r;
	return 0;
}

void chunk_stat_put(struct wbuf *b, const struct chunk_stat *s)
{
	wbuf_put_u64(b, s->version);
	wbuf_put_u32(b, s->length);
	wbuf_put_u64(b, s->checksum);
}

int chunk_stat_get(struct rbuf *b, struct chunk_stat *ret)
{
	struct chunk_stat s;
	s.version = rbuf_get_u64(b);
	s.length = rbuf_get_u32(b);
	s.checksum = rbuf_get_u64(b);
	if (rbuf_done(b) < 0 || s.length > STRATA_MAX_CHUNK_SIZE)
		return -EBADMSG;
	*ret = s;
	return 0;
}

void chunk_count_put(struct wbuf *b, uint32_t n)
{
	wbuf_put_u32(b, n);
}

int chunk_count_get(struct rbuf *b, uint32_t *ret)
{
	uint32_t n = rbuf_get_u32(b);
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret = n;
	return 0;
}

int chunk_read_reply_check(size_t n, uint32_t len)
{
	return n <= len ? 0 : -EBADMSG;
}

void chunk_list_put(struct wbuf *b, const struct chunk_list_ent *e, uint32_t n, bool more)
{
	wbuf_put_u32(b, n);
	wbuf_put_u8(b, more ? 1 : 0);
	for (uint32_t i = 0; i < n; i++) {
		wbuf_put_u64(b, e[i].ino);
		wbuf_put_u32(b, e[i].index);
		chunk_stat_put(b, &e[i].st);
	}
}

int chunk_list_get(struct rbuf *b, struct chunk_list_ent *ents, uint32_t cap, bool *ret_more)
{
	uint32_t n = rbuf_get_u32(b);
	uint8_t more = rbuf_get_u8(b);
	if (b->err || n > cap || (uint64_t)n * 32 > rbuf_remaining(b))
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		ents[i].ino = rbuf_get_u64(b);
		ents[i].index = rbuf_get_u32(b);
		ents[i].st.version = rbuf_get_u64(b);
		ents[i].st.length = rbuf_get_u32(b);
		ents[i].st.checksum = rbuf_get_u64(b);
	}
	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret_more = more != 0;
	return (int)n;
}

/* ---- READ_MANY ---- */
int chunk_read_many_encode(const struct chunk_req *reqs, uint32_t n, struct wbuf *b)
{
	uint64_t total = 0;
	if (n == 0 || n > CHUNK_READ_MANY_MAX)
		return -EINVAL;
	for (uint32_t i = 0; i < n; i++)
		total += reqs[i].len;
	if (total > CHUNK_IO_MAX)
		return -EINVAL;
	wbuf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		int r = chunk_req_encode(MSG_CHUNK_READ, &reqs[i], b);
		if (r < 0)
			return r;
	}
	return b->err;
}

int chunk_read_many_decode(struct rbuf *b, struct chunk_req *reqs, uint32_t cap)
{
	uint32_t n = rbuf_get_u32(b);
	uint64_t total = 0;
	if (b->err || n == 0 || n > CHUNK_READ_MANY_MAX || n > cap ||
	    rbuf_remaining(b) != (size_t)n * CHUNK_READ_MANY_ENTRY)
		return -EBADMSG;
	for (uint32_t i = 0; i < n; i++) {
		struct rbuf e;
		rbuf_init(&e, rbuf_get_bytes(b, CHUNK_READ_MANY_ENTRY), CHUNK_READ_MANY_ENTRY);
		if (chunk_req_decode(MSG_CHUNK_READ, &e, &reqs[i]) < 0)
			return -EBADMSG;
		total += reqs[i].len;
	}
	if (rbuf_done(b) < 0 || total > CHUNK_IO_MAX)
		return -EBADMSG;
	return (int)n;
}

int chunk_read_many_reply_get(struct rbuf *b, const struct chunk_req *reqs, uint32_t n,
			      struct chunk_read_ans *ans)
{
	for (uint32_t i = 0; i < n; i++) {
		int32_t status = (int32_t)rbuf_get_u32(b);
		uint32_t len = rbuf_get_u32(b);
		if (b->err || status > 0 || len > reqs[i].len || (status < 0 && len > 0))
			return -EBADMSG;
		ans[i] = (struct chunk_read_ans){.status = status, .len = len};
		ans[i].data = rbuf_get_bytes(b, len);
		if (b->err)
			return -EBADMSG;
	}
	return rbuf_done(b) < 0 || rbuf_remaining(b) ? -EBADMSG : 0;
}
