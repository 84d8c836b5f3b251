/* create.c — POST /v1/sandboxes through the apiserver.
 *
 *   1. the body is read (at most 1 MiB) and what placement needs taken
 *      from it: image, backend, cpu (default 1), memory_mb (512; fncall
 *      sandboxes hold none of the node's memory budget, as sandboxd counts);
 *   2. a retry (`Strata-Attempt: N`, N > 1, with an idempotency_key: the
 *      SDK after a connection lost, maybe to a dead apiserver) first asks
 *      every live node for the sandbox of that key (POST ...?lookup=1,
 *      which waits for a create of it in flight): one found is the answer,
 *      so that a retry never makes a second sandbox;
 *   3. placement (nodes.c) picks a node, waiting in the queue up to the
 *      caller's deadline (`Strata-Queue-Timeout: S` seconds, else
 *      --queue-timeout) when the cluster is full;
 *   4. the body goes to that node as it came. A node that answers 503
 *      no_capacity (its own admission saw more than its report) or cannot
 *      be reached before the request went out is skipped, and the next
 *      pick tries another, within the same deadline. A node that took the
 *      request and failed after is not retried elsewhere: it may have made
 *      the sandbox (the client's retry, with its key, finds it).
 * The node's answer goes back as it is: the sandbox, whose id names the
 * node and whose "node" says it. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "fs/clock.h"
#include "fs/log.h"
#include "sandbox/apiserver/apiserver.h"

#define QUEUE_TIMEOUT_MAX_MS (600 * 1000)

struct create {
	struct api_place place;
	const char *idem;
	int64_t deadline_ms;
	bool retry;
};

/* What placement needs from the body; false after answering 400. */
static bool parse(struct api_client *c, const struct json *j, struct create *cr)
{
	const struct json *cpu = json_get(j, "cpu"), *mem = json_get(j, "memory_mb");
	const char *backend = json_cstr(json_get(j, "backend"));
	int64_t mb = 512;
	double cores = 1;
	if (!j || j->type != JSON_OBJ || !json_cstr(json_get(j, "image"))) {
		api_reply_error(c, 400, "bad_request",
				"a create is a JSON object with 'image' (a string)");
		return false;
	}
	if (cpu && cpu->type == JSON_NUM && cpu->num > 0 && cpu->num <= 1024)
		cores = cpu->num;
	if (mem && !json_int(mem, 1, 1 << 20, &mb))
		mb = 512; /* the node refuses it with the exact reason */
	cr->place.image = json_cstr(json_get(j, "image"));
	cr->place.cpu_milli = (uint32_t)(cores * 1000);
	cr->place.mem = backend && !strcmp(backend, "fncall") ? 0 : (uint64_t)mb << 20;
	cr->idem = json_cstr(json_get(j, "idempotency_key"));
	return true;
}

/* Step 2: the sandbox a lost attempt made. True when answered. */
static bool find_retried(struct api_client *c, const struct api_req *r, const char *body,
			 size_t len)
{
	uint32_t ids[256], lost[256];
	char addrs[256][API_ADDR_MAX];
	int nlost, n = api_nodes_list(c->a->nodes, ids, addrs, 256, lost, &nlost, 256);
	for (int i = 0; i < n; i++) {
		int status;
		char *rb = NULL;
		size_t rl = 0;
		bool sent;
		int e = api_exchange(c->a, addrs[i], "POST", "/v1/sandboxes?lookup=1", r->auth,
				     body, len, &status, &rb, &rl, &sent);
		if (e == 0 && status == 200) {
			api_reply_raw(c, 200, rb, rl);
			free(rb);
			return true;
		}
		free(rb);
	}
	return false;
}

static void no_room(struct api_client *c, int e, int64_t waited)
{
	atomic_fetch_add(&c->a->no_capacity_total, 1);
	if (e == -EBUSY)
		api_reply_error(c, 503, "no_capacity",
				"the cluster is full and %lld creations already wait for room",
				(long long)c->a->cfg.queue_max);
	else if (e == -ENODEV)
		api_reply_error(c, 503, "no_capacity", "no sandbox node is live in the cluster");
	else
		api_reply_error(
		    c, 503, "no_capacity",
		    "no node of the cluster had room within the deadline (waited %lld ms)",
		    (long long)waited);
}

/* Steps 3 and 4. */
static void place_and_forward(struct api_client *c, const struct api_req *r, struct create *cr,
			      const char *body, size_t len)
{
	int64_t waited = 0;
	for (;;) {
		uint32_t node;
		char addr[API_ADDR_MAX];
		int64_t w;
		int e = api_nodes_pick(c->a->nodes, &cr->place, cr->deadline_ms, &node, addr, &w);
		waited += w;
		if (e < 0) {
			no_room(c, e, waited);
			return;
		}
		int status = 0;
		char *rb = NULL;
		size_t rl = 0;
		bool sent;
		e = api_exchange(c->a, addr, "POST", "/v1/sandboxes", r->auth, body, len, &status,
				 &rb, &rl, &sent);
		bool full = e == 0 && status == 503 && strstr(rb ? rb : "", "\"no_capacity\"");
		if (e == 0 && !full) {
			if (status / 100 != 2)
				api_nodes_unpick(c->a->nodes, node, &cr->place);
			api_reply_raw(c, status, rb, rl);
			free(rb);
			return;
		}
		free(rb);
		api_nodes_unpick(c->a->nodes, node, &cr->place);
		if (e < 0 && sent) {
			api_reply_error(
			    c, 502, "bad_gateway",
			    "node %u took the create and failed (%s): retry with the same "
			    "idempotency_key to find what it made",
			    node, strerror(-e));
			c->close = true;
			return;
		}
		if (full)
			api_nodes_full(c->a->nodes, node);
		else
			api_nodes_down(c->a->nodes, node);
		if (cr->place.nexclude < API_EXCLUDE_MAX)
			cr->place.exclude[cr->place.nexclude++] = node;
	}
}

static int64_t deadline_of(struct api_client *c, const struct api_req *r)
{
	char v[32];
	int64_t ms = c->a->cfg.queue_timeout_ms;
	if (api_req_header(r, "Strata-Queue-Timeout", v, sizeof(v))) {
		double s = strtod(v, NULL);
		ms = s > 0 ? (int64_t)(s * 1000) : 0;
	}
	if (ms > QUEUE_TIMEOUT_MAX_MS)
		ms = QUEUE_TIMEOUT_MAX_MS;
	return strata_mono_ms() + ms;
}

void api_create(struct api_client *c, const struct api_req *r)
{
	struct create cr = {0};
	char v[16], err[128];
	char *body = NULL;
	size_t len = 0;
	cr.deadline_ms = deadline_of(c, r);
	cr.retry = api_req_header(r, "Strata-Attempt", v, sizeof(v)) && atoi(v) > 1;
	if (api_req_body(c, r, API_CREATE_BODY_MAX, &body, &len) < 0)
		return;
	struct json *j = json_parse(body, len, err, sizeof(err));
	atomic_fetch_add(&c->a->creates_total, 1);
	if (!j)
		api_reply_error(c, 400, "bad_request", "invalid JSON: %s", err);
	else if (parse(c, j, &cr) && !(cr.retry && cr.idem && find_retried(c, r, body, len)))
		place_and_forward(c, r, &cr, body, len);
	json_free(j);
	free(body);
}
