/* list.c — the routes of one sandbox (by the node its id names) and the
 * list of all of them (every live node's, merged).
 *
 * A sandbox whose node is lost (its lease lapsed: sandbox/cluster/README.md)
 * is answered from the id alone: GET says {"id", "node", "state": "lost"},
 * DELETE says deleted (the node removes it when it returns: reconcile), and
 * every other request 409 `lost`. The list says which nodes were not asked
 * (`lost_nodes`): their sandboxes are not in it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fs/log.h"
#include "sandbox/apiserver/apiserver.h"

#define LIST_NODES_MAX 1024

uint32_t api_id_node(const char *id)
{
	uint32_t node = 0;
	if (strncmp(id, "sb-", 3))
		return 0;
	for (int i = 3; i < 7; i++) {
		char ch = id[i];
		int v = ch >= '0' && ch <= '9'	 ? ch - '0'
			: ch >= 'a' && ch <= 'f' ? ch - 'a' + 10
						 : -1;
		if (v < 0)
			return 0;
		node = node * 16 + (uint32_t)v;
	}
	return node;
}

static void lost_answer(struct api_client *c, const struct api_req *r, const char *id,
			uint32_t node, bool whole)
{
	struct jw w;
	jw_init(&w);
	if (whole && !strcmp(r->h.method, "GET")) {
		jw_obj(&w);
		jw_kstr(&w, "id", id);
		jw_kint(&w, "node", node);
		jw_kstr(&w, "state", "lost");
		jw_kstr(&w, "failed_reason", "its node's lease lapsed: the cluster gave it up");
		jw_obj_end(&w);
		api_reply_json(c, 200, &w);
	} else if (whole && !strcmp(r->h.method, "DELETE")) {
		jw_obj(&w);
		jw_kbool(&w, "deleted", true);
		jw_kbool(&w, "clean", false);
		jw_kstr(&w, "state", "lost");
		jw_obj_end(&w);
		api_reply_json(c, 200, &w);
	} else {
		jw_done(&w);
		api_reply_error(
		    c, 409, "lost",
		    "sandbox %s is lost: its node %u's lease lapsed (the node removes it "
		    "when it returns)",
		    id, node);
	}
}

void api_route_sandbox(struct api_client *c, const struct api_req *r, const char *rest)
{
	char id[32], addr[API_ADDR_MAX];
	size_t n = strcspn(rest, "/");
	uint32_t node = n < sizeof(id) ? api_id_node(rest) : 0;
	int status = 0;
	if (n < sizeof(id)) {
		memcpy(id, rest, n);
		id[n] = 0;
	}
	int e = node ? api_nodes_route(c->a->nodes, node, addr) : -ENOENT;
	if (e == 0 && (e = api_proxy(c, r, addr, &status)) == 0) {
		if (!strcmp(r->h.method, "DELETE") && !rest[n] && status == 200)
			api_nodes_released(c->a->nodes, node);
		return;
	}
	/* answered here: the body (if any) is not read, the connection ends */
	if (r->h.content_length || r->h.chunked)
		c->close = true;
	ibuf_consume(&c->in, r->h.head_len);
	if (e == -EHOSTDOWN)
		lost_answer(c, r, id, node, !rest[n]);
	else if (e == -ENOENT)
		api_reply_error(c, 404, "not_found", "no sandbox '%.*s'", (int)(n < 64 ? n : 64),
				rest);
	else
		api_reply_error(c, 503, "unavailable", "node %u of sandbox %s does not answer: %s",
				node, id, strerror(-e));
}

/* One node's list, its sandboxes appended to w. Returns the status. */
static int one_list(struct api_client *c, const struct api_req *r, const char *addr, struct jw *w,
		    char **ret_err, size_t *ret_len)
{
	char path[4096];
	char *rb = NULL, err[64];
	size_t rl = 0;
	int status = 0;
	bool sent;
	snprintf(path, sizeof(path), "/v1/sandboxes%s%s", r->h.query[0] ? "?" : "", r->h.query);
	int e = api_exchange(c->a, addr, "GET", path, r->auth, NULL, 0, &status, &rb, &rl, &sent);
	if (e < 0)
		return -1;
	struct json *j = status == 200 ? json_parse(rb, rl, err, sizeof(err)) : NULL;
	const struct json *arr = json_get(j, "sandboxes");
	for (const struct json *s = arr ? arr->child : NULL; s; s = s->next)
		json_emit(w, s);
	json_free(j);
	if (status != 200) {
		*ret_err = rb;
		*ret_len = rl;
	} else {
		free(rb);
	}
	return status;
}

void api_list(struct api_client *c, const struct api_req *r)
{
	static _Thread_local uint32_t ids[LIST_NODES_MAX], lost[LIST_NODES_MAX];
	static _Thread_local char addrs[LIST_NODES_MAX][API_ADDR_MAX];
	int nlost, n = api_nodes_list(c->a->nodes, ids, addrs, LIST_NODES_MAX, lost, &nlost,
				      LIST_NODES_MAX);
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "sandboxes");
	jw_arr(&w);
	for (int i = 0; i < n; i++) {
		char *eb = NULL;
		size_t el = 0;
		int status = one_list(c, r, addrs[i], &w, &eb, &el);
		if (status == 400 || status == 401 || status == 403) { /* the caller's error */
			jw_done(&w);
			api_reply_raw(c, status, eb ? eb : "", el);
			free(eb);
			return;
		}
		free(eb);
		if (status < 0 && nlost < LIST_NODES_MAX)
			lost[nlost++] = ids[i]; /* not answering: not in the list either */
	}
	jw_arr_end(&w);
	jw_key(&w, "lost_nodes");
	jw_arr(&w);
	for (int i = 0; i < nlost; i++)
		jw_int(&w, lost[i]);
	jw_arr_end(&w);
	jw_obj_end(&w);
	api_reply_json(c, 200, &w);
}
