/* chunks.c — the CLI's calls to chunkservers (chunks.h). A connection per
 * call: verify and fsck talk to each target a few times per page of
 * chunks, and a deep listing may take long (30 s per call). */
#include <errno.h>
#include <stdlib.h>

#include "tools/chunks.h"
#include "fs/proto.h"
#include "fs/wire.h"

int cli_chunk_call(const struct strata_target *t, const struct strata_chain *ch, uint16_t type,
		   struct chunk_req *q, struct rpc_reply *rep)
{
	struct rpc_client_opts o = {.timeout_ms = 30000, .max_conns = 1};
	struct rpc_client *c = rpc_client_new(t->addr, &o);
	if (!c)
		return -ENOMEM;
	q->route = (struct chunk_route){t->target_id, ch->chain_id, ch->version};
	struct wbuf w;
	wbuf_init(&w);
	int r = chunk_req_encode(type, q, &w);
	if (r == 0)
		r = rpc_call(c, type, &w, RPC_IDEMPOTENT, rep);
	wbuf_done(&w);
	rpc_client_free(c);
	return r;
}

int cli_chunk_list_page(const struct strata_target *t, const struct strata_chain *ch, bool first,
			uint64_t ino, uint32_t index, uint32_t max, bool deep,
			struct chunk_list_ent *v, bool *more)
{
	struct chunk_req q = {.ino = ino,
			      .index = index,
			      .len = max,
			      .flags = (first ? CHUNK_LF_FIRST : 0) | (deep ? CHUNK_LF_VERIFY : 0)};
	struct rpc_reply rep = {0};
	int r = cli_chunk_call(t, ch, MSG_CHUNK_LIST, &q, &rep);
	if (r == 0) {
		struct rbuf b;
		rbuf_init(&b, rep.data, rep.len);
		r = chunk_list_get(&b, v, max, more);
	}
	rpc_reply_done(&rep);
	return r;
}

int cli_chunk_list_all(const struct strata_target *t, const struct strata_chain *ch, bool deep,
		       struct chunk_list_ent **ret, size_t *ret_n)
{
	struct chunk_list_ent *v = NULL;
	size_t n = 0;
	for (bool more = true; more;) {
		struct chunk_list_ent *nv = realloc(v, (n + CHUNK_LIST_MAX) * sizeof(*v));
		if (!nv) {
			free(v);
			return -ENOMEM;
		}
		v = nv;
		int r =
		    cli_chunk_list_page(t, ch, n == 0, n ? v[n - 1].ino : 0, n ? v[n - 1].index : 0,
					CHUNK_LIST_MAX, deep, v + n, &more);
		if (r < 0) {
			free(v);
			return r;
		}
		n += (size_t)r;
		if (r == 0)
			break;
	}
	*ret = v;
	*ret_n = n;
	return 0;
}

int cli_chunk_stat(const struct strata_target *t, const struct strata_chain *ch, uint64_t ino,
		   uint32_t index, struct chunk_stat *st)
{
	struct chunk_req q = {.ino = ino, .index = index};
	struct rpc_reply rep = {0};
	int r = cli_chunk_call(t, ch, MSG_CHUNK_STAT, &q, &rep);
	if (r == 0) {
		struct rbuf b;
		rbuf_init(&b, rep.data, rep.len);
		r = chunk_stat_get(&b, st);
	}
	rpc_reply_done(&rep);
	if (r == -ENOENT)
		*st = (struct chunk_stat){0};
	return r == -ENOENT ? 0 : r;
}
