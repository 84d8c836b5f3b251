/* sbnode_proto.c — codec of the sandbox nodes' lease messages (layout in
 * sbnode_proto.h). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include "fs/json.h"
#include "fs/sbnode_proto.h"

void sbnode_report_put(struct wbuf *b, const struct sbnode_report *r)
{
	uint32_t n = r->nimages < SBNODE_MAX_IMAGES ? r->nimages : SBNODE_MAX_IMAGES;

	wbuf_put_u32(b, r->node_id);
	wbuf_put_u64(b, r->incarnation);
	wbuf_put_str(b, r->api_addr);
	wbuf_put_u32(b, r->sandboxes);
	wbuf_put_u32(b, r->sbx_cap);
	wbuf_put_u32(b, r->creating);
	wbuf_put_u32(b, r->cpu_used);
	wbuf_put_u32(b, r->cpu_cap);
	wbuf_put_u64(b, r->mem_used);
	wbuf_put_u64(b, r->mem_cap);
	wbuf_put_u32(b, n);
	for (uint32_t i = 0; i < n; i++) {
		wbuf_put_str(b, r->images[i].name);
		wbuf_put_u32(b, r->images[i].sandboxes);
		wbuf_put_u8(b, r->images[i].mounted);
		wbuf_put_u64(b, r->images[i].cached_bytes);
	}
}

void sbnode_report_read(struct rbuf *b, struct sbnode_report *ret)
{
	memset(ret, 0, sizeof(*ret));
	ret->node_id = rbuf_get_u32(b);
	ret->incarnation = rbuf_get_u64(b);
	rbuf_get_str(b, ret->api_addr, sizeof(ret->api_addr));
	ret->sandboxes = rbuf_get_u32(b);
	ret->sbx_cap = rbuf_get_u32(b);
	ret->creating = rbuf_get_u32(b);
	ret->cpu_used = rbuf_get_u32(b);
	ret->cpu_cap = rbuf_get_u32(b);
	ret->mem_used = rbuf_get_u64(b);
	ret->mem_cap = rbuf_get_u64(b);
	ret->nimages = rbuf_get_u32(b);
	if (ret->node_id == 0 || ret->node_id > SBNODE_ID_MAX || ret->nimages > SBNODE_MAX_IMAGES) {
		b->err = -EBADMSG;
		ret->nimages = 0;
		return;
	}
	for (uint32_t i = 0; i < ret->nimages && !b->err; i++) {
		struct sbnode_image *im = &ret->images[i];
		rbuf_get_str(b, im->name, sizeof(im->name));
		im->sandboxes = rbuf_get_u32(b);
		im->mounted = rbuf_get_u8(b) != 0;
		im->cached_bytes = rbuf_get_u64(b);
	}
}

int sbnode_report_get(struct rbuf *b, struct sbnode_report *ret)
{
	sbnode_report_read(b, ret);
	return rbuf_done(b) < 0 ? -EBADMSG : 0;
}

void sbnode_reply_put(struct wbuf *b, uint32_t lease_ms, bool reconcile)
{
	wbuf_put_u32(b, lease_ms);
	wbuf_put_u8(b, reconcile);
}

int sbnode_reply_get(struct rbuf *b, uint32_t *ret_lease_ms, bool *ret_reconcile)
{
	uint32_t l = rbuf_get_u32(b);
	uint8_t rc = rbuf_get_u8(b);

	if (rbuf_done(b) < 0)
		return -EBADMSG;
	*ret_lease_ms = l;
	*ret_reconcile = rc != 0;
	return 0;
}

void sbnode_table_put(struct wbuf *b, const struct sbnode_table *t)
{
	wbuf_put_u32(b, t->lease_ms);
	wbuf_put_u32(b, t->n);
	for (uint32_t i = 0; i < t->n; i++) {
		sbnode_report_put(b, &t->nodes[i].r);
		wbuf_put_i64(b, t->nodes[i].age_ms);
		wbuf_put_u8(b, t->nodes[i].lost);
	}
}

int sbnode_table_get(struct rbuf *b, struct sbnode_table *ret)
{
	struct sbnode_table t = {0};

	memset(ret, 0, sizeof(*ret));
	t.lease_ms = rbuf_get_u32(b);
	t.n = rbuf_get_u32(b);
	if (b->err || t.n > SBNODE_MAX_NODES)
		return -EBADMSG;
	if (!(t.nodes = calloc(t.n ? t.n : 1, sizeof(*t.nodes))))
		return -ENOMEM;
	for (uint32_t i = 0; i < t.n && !b->err; i++) {
		sbnode_report_read(b, &t.nodes[i].r);
		t.nodes[i].age_ms = rbuf_get_i64(b);
		t.nodes[i].lost = rbuf_get_u8(b) != 0;
	}
	if (rbuf_done(b) < 0) {
		free(t.nodes);
		return -EBADMSG;
	}
	*ret = t;
	return 0;
}

void sbnode_table_done(struct sbnode_table *t)
{
	if (!t)
		return;
	free(t->nodes);
	t->nodes = NULL;
	t->n = 0;
}

void sbnode_entry_json(struct jw *w, const struct sbnode_entry *e)
{
	jw_kint(w, "node", e->r.node_id);
	jw_kstr(w, "addr", e->r.api_addr);
	jw_kstr(w, "state", e->lost ? "lost" : "live");
	jw_kint(w, "age_ms", e->age_ms);
	jw_kint(w, "sandboxes", e->r.sandboxes);
	jw_kint(w, "max_sandboxes", e->r.sbx_cap);
	jw_kint(w, "creating", e->r.creating);
	jw_kint(w, "cpu_milli", e->r.cpu_used);
	jw_kint(w, "cpu_budget_milli", e->r.cpu_cap);
	jw_kint(w, "memory_bytes", (int64_t)e->r.mem_used);
	jw_kint(w, "memory_budget_bytes", (int64_t)e->r.mem_cap);
	jw_key(w, "images");
	jw_arr(w);
	for (uint32_t j = 0; j < e->r.nimages; j++) {
		jw_obj(w);
		jw_kstr(w, "name", e->r.images[j].name);
		jw_kint(w, "sandboxes", e->r.images[j].sandboxes);
		jw_kbool(w, "mounted", e->r.images[j].mounted);
		jw_kint(w, "cached_bytes", (int64_t)e->r.images[j].cached_bytes);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}
