/* api_network.c — network "egress" in sandboxd (sandbox/net/ does the
 * work): the policy fields of a create (allow_out, deny_out,
 * egress_default), attaching a created sandbox to the node's network and
 * detaching it before its backend destroys it, and the routes
 *   GET /v1/sandboxes/{id}/network       policy, address, bytes in and out
 *   PUT /v1/sandboxes/{id}/network       a new policy, applied atomically
 *   GET /v1/sandboxes/{id}/network/log   the decision log (JSONL)
 * API.md documents them. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/log.h"
#include "sandbox/sandboxd/api-internal.h"
#include "sandbox/sandboxd/backend.h"
#include "sandbox/sandboxd/http.h"

#ifdef STRATA_HAVE_NET
#include "sandbox/net/strata_net.h"

#define LOG_READ_MAX (1u << 20)

int sbd_net_parse(const struct json *j, struct sbn_policy **ret, struct strata_err *err)
{
	const struct json *allow = json_get(j, "allow_out"), *deny = json_get(j, "deny_out");
	bool bad = false;
	const char *def = sbd_api_opt_str(j, "egress_default", 5, &bad);
	if (bad || (def && strcmp(def, "allow") && strcmp(def, "deny")))
		return strata_err_set(err, -EINVAL, "egress_default must be \"allow\" or \"deny\"");
	for (int k = 0; k < 2; k++) {
		const struct json *a = k ? deny : allow;
		if (a && a->type != JSON_NULL && a->type != JSON_ARR)
			return strata_err_set(err, -EINVAL, "%s must be a list of strings",
					      k ? "deny_out" : "allow_out");
	}
	/* Without an explicit default: an allow list means "only these". */
	bool has_allow = allow && allow->type == JSON_ARR && allow->len;
	struct sbn_policy *p = sbn_policy_new(def ? !strcmp(def, "allow") : !has_allow);
	if (!p)
		return -ENOMEM;
	for (int k = 0; k < 2; k++) {
		const struct json *a = k ? deny : allow;
		for (const struct json *e = a && a->type == JSON_ARR ? a->child : NULL; e;
		     e = e->next) {
			char msg[200] = "";
			int r = e->type == JSON_STR
				    ? sbn_policy_add(p, !k, e->str, msg, sizeof(msg))
				    : -EINVAL;
			if (r < 0) {
				sbn_policy_free(p);
				return strata_err_set(err, r, "%s: %s",
						      k ? "deny_out" : "allow_out",
						      msg[0] ? msg : "entries must be strings");
			}
		}
	}
	*ret = p;
	return 0;
}

int sbd_net_attach(struct sandboxd *d, struct sbd_sandbox *sb, struct strata_err *err)
{
	if (!sb->net_egress)
		return 0;
	pid_t pid = sb->backend->net_pid ? sb->backend->net_pid(sb->backend, sb) : 0;
	if (pid <= 0)
		return strata_err_set(err, -EOPNOTSUPP, "backend '%s' has no network \"egress\"",
				      sb->backend_name);
	char msg[256] = "";
	struct sbn_policy *p = sb->net_policy;
	sb->net_policy = NULL;
	int r = sbn_attach(d->net, sb->id, pid, p, &sb->net_box, msg, sizeof(msg));
	if (r < 0)
		return strata_err_set(err, r, "network \"egress\": %s", msg);
	return 0;
}

void sbd_net_detach(struct sandboxd *d, struct sbd_sandbox *sb)
{
	sbn_detach(sb->net_box);
	sb->net_box = NULL;
	sbn_policy_free(sb->net_policy);
	sb->net_policy = NULL;
}

void sbd_net_forget(struct sandboxd *d, const char *id)
{
	if (d->net)
		sbn_log_remove(d->net, id);
}

void sbd_net_metrics(struct jw *w, const struct sbd_sandbox *sb)
{
	uint64_t out, in;
	if (sb->net_box && sbn_box_bytes(sb->net_box, &out, &in) == 0) {
		jw_kint(w, "net_bytes_out", (int64_t)out);
		jw_kint(w, "net_bytes_in", (int64_t)in);
	}
}

static void reply_network(struct sbd_conn *c, const struct sbd_sandbox *sb)
{
	char addr[16], gw[16];
	sbn_box_address(sb->net_box, addr, gw, sizeof(addr));
	char *pol = sbn_policy_json(sbn_box_policy(sb->net_box));
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "id", sb->id);
	jw_kstr(&w, "network", "egress");
	jw_kstr(&w, "address", addr);
	jw_kstr(&w, "gateway", gw);
	jw_key(&w, "policy");
	if (pol)
		jw_raw(&w, pol, strlen(pol));
	else
		jw_null(&w);
	sbd_net_metrics(&w, sb);
	jw_obj_end(&w);
	free(pol);
	sbd_conn_reply_json(c, 200, &w);
}

static const char *const policy_fields[] = {"allow_out", "deny_out", "egress_default", NULL};

static void put_policy(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body, size_t len)
{
	struct json *j = sbd_api_parse_body(c, body, len, policy_fields);
	if (!j)
		return;
	struct strata_err err = {0};
	struct sbn_policy *p = NULL;
	int r = sbd_net_parse(j, &p, &err);
	json_free(j);
	char msg[256] = "";
	if (r == 0 && (r = sbn_set_policy(sb->net_box, p, msg, sizeof(msg))) < 0)
		strata_err_set(&err, r, "%s", msg);
	if (r < 0) {
		sbd_api_reply_errno(c, r, "network policy", err.msg);
		return;
	}
	log_info("sandbox %s: network policy changed", sb->id);
	reply_network(c, sb);
}

static void get_log(struct sbd_conn *c, struct sandboxd *d, const struct sbd_sandbox *sb,
		    const char *query)
{
	bool bad = false;
	char *off = sbd_http_query_get(query, "offset", &bad);
	uint64_t offset = off ? strtoull(off, NULL, 10) : 0;
	free(off);
	char *text = NULL;
	size_t len = 0;
	int r = sbn_log_read(d->net, sb->id, offset, LOG_READ_MAX, &text, &len);
	if (r == -ENOENT) {
		sbd_conn_reply_raw(c, 200, "application/x-ndjson", "", 0);
		return;
	}
	if (r < 0) {
		sbd_api_reply_errno(c, r, "network log", NULL);
		return;
	}
	sbd_conn_reply_raw(c, 200, "application/x-ndjson", text, len);
	free(text);
}

void sbd_api_network(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method,
		     const char *sub, const char *query, const char *body, size_t len)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	if (!sb->net_box) {
		sbd_conn_reply_error(c, 409, "no_egress",
				     "sandbox %s has network \"%s\", not \"egress\"", sb->id,
				     sb->net_host ? "host" : "none");
		return;
	}
	if (!*sub && !strcmp(method, "GET"))
		reply_network(c, sb);
	else if (!*sub && !strcmp(method, "PUT"))
		put_policy(c, sb, body, len);
	else if (!strcmp(sub, "log") && !strcmp(method, "GET"))
		get_log(c, d, sb, query);
	else
		sbd_conn_reply_error(c, 404, "not_found",
				     "no route %s /v1/sandboxes/%s/network%s%s", method, sb->id,
				     *sub ? "/" : "", sub);
}

int sbd_net_start(struct sandboxd *d)
{
	const struct sandboxd_config *c = &d->cfg;
	if (!c->net_uplink)
		return 0;
	char logdir[4096], msg[256] = "";
	snprintf(logdir, sizeof(logdir), "%s/netlog", c->state_dir);
	struct sbn_config nc = {.uplink = c->net_uplink,
				.pool = c->net_pool,
				.upstream_dns = c->net_dns,
				.log_dir = logdir,
				.protect = c->net_protect,
				.resolver_port = (uint16_t)c->net_resolver_port};
	int r = sbn_node_new(&nc, &d->net, msg, sizeof(msg));
	if (r < 0)
		log_error_errno(r, "Network \"egress\" not available: %s", msg);
	else
		log_info("network \"egress\": uplink %s, pool %s, DNS upstream %s", c->net_uplink,
			 c->net_pool ?: "10.213.0.0/16", c->net_dns);
	return r;
}

void sbd_net_stop(struct sandboxd *d)
{
	sbn_node_free(d->net);
	d->net = NULL;
}

#else /* !STRATA_HAVE_NET: built without libnftables */

int sbd_net_parse(const struct json *j, struct sbn_policy **ret, struct strata_err *err)
{
	return strata_err_set(err, -EOPNOTSUPP, "strata-sandboxd was built without libnftables");
}
int sbd_net_attach(struct sandboxd *d, struct sbd_sandbox *sb, struct strata_err *err)
{
	return sb->net_egress ? strata_err_set(err, -EOPNOTSUPP, "no network \"egress\"") : 0;
}
void sbd_net_detach(struct sandboxd *d, struct sbd_sandbox *sb)
{
}
void sbd_net_forget(struct sandboxd *d, const char *id)
{
}
void sbd_net_metrics(struct jw *w, const struct sbd_sandbox *sb)
{
}
void sbd_api_network(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method,
		     const char *sub, const char *query, const char *body, size_t len)
{
	sbd_conn_reply_error(c, 501, "unsupported", "built without network \"egress\"");
}
int sbd_net_start(struct sandboxd *d)
{
	return d->cfg.net_uplink ? -EOPNOTSUPP : 0;
}
void sbd_net_stop(struct sandboxd *d)
{
}
#endif
