/* api_sandbox.c — a live sandbox's usage and the settings that may change
 * while it runs:
 *
 *   GET   /v1/sandboxes/{id}/metrics  what it uses now (the backend's usage:
 *                                     CPU, memory now and peak, pids, disk)
 *                                     and the execs it ran
 *   PATCH /v1/sandboxes/{id}          {"timeout": S} a new deadline S seconds
 *                                     from now (0: none), {"labels": {...}}
 *                                     a new set of labels; the sandbox back
 *
 * A PATCH is checked whole before anything changes, and persisted
 * (state.json) before the answer, so that a sandboxd restart keeps it. */
#include <errno.h>
#include <string.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/api-internal.h"

/* The longest timeout a PATCH may give: the longest ttl of a create. */
#define SBD_MAX_TIMEOUT_S (30LL * 86400)

static void jw_kfig(struct jw *w, const char *key, int64_t v)
{
	jw_key(w, key);
	if (v < 0)
		jw_null(w);
	else
		jw_int(w, v);
}

void sbd_api_metrics(struct sbd_conn *c, struct sbd_sandbox *sb)
{
	struct sbd_usage u;
	if (!sb->backend->usage) {
		sbd_conn_reply_error(c, 501, "unsupported",
				     "the %s backend reports no usage (its sandboxes hold no "
				     "processes between calls)",
				     sb->backend_name);
		return;
	}
	int r = sb->backend->usage(sb->backend, sb, &u);
	if (r < 0) {
		sbd_api_reply_errno(c, r, "metrics", NULL);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "id", sb->id);
	jw_kstr(&w, "state", sbd_state_name(sb->state));
	jw_key(&w, "cpu_seconds");
	if (u.cpu_us < 0)
		jw_null(&w);
	else
		jw_num(&w, (double)u.cpu_us / 1e6);
	jw_kfig(&w, "memory_bytes", u.memory_bytes);
	jw_kfig(&w, "memory_peak_bytes", u.memory_peak_bytes);
	jw_kint(&w, "memory_limit_bytes", sb->memory_mb << 20);
	jw_kfig(&w, "pids", u.pids);
	jw_kint(&w, "pids_limit", sb->pids);
	jw_kfig(&w, "disk_used_bytes", u.disk_bytes);
	jw_kint(&w, "disk_limit_bytes", sb->disk_mb << 20);
	jw_kint(&w, "execs", (int64_t)sb->execs_total);
	jw_kint(&w, "running_execs", sb->running_execs);
	jw_kint(&w, "uptime_s", sbd_wall_s() - sb->created_at);
	sbd_net_metrics(&w, sb);
	jw_obj_end(&w);
	sbd_conn_reply_json(c, 200, &w);
}

static const char *const update_fields[] = {"timeout", "labels", NULL};

void sbd_api_update(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body, size_t len)
{
	struct json *j = sbd_api_parse_body(c, body, len, update_fields);
	if (!j)
		return;
	struct strata_err err = {0};
	int64_t timeout = -1;
	struct sbd_api_int ints[] = {{"timeout", &timeout, 0, SBD_MAX_TIMEOUT_S}};
	struct sbd_sandbox fresh = {0}; /* the new labels, parsed before anything changes */
	const struct json *labels = json_get(j, "labels");
	int r = sbd_api_parse_ints(j, ints, ARRAY_SIZE(ints), &err);
	if (r == 0 && labels && labels->type != JSON_NULL)
		r = sbd_api_parse_labels(labels, &fresh, &err);
	json_free(j);
	if (r < 0) {
		sbd_sandbox_labels_free(&fresh);
		sbd_api_reply_errno(c, r, "update", err.msg);
		return;
	}
	/* Changed in memory for the persist, rolled back if it fails: the
	 * answer is an error then, and the sandbox must be what it says. */
	struct sbd_sandbox old = {.expires_at = sb->expires_at,
				  .ttl_s = sb->ttl_s,
				  .labels = sb->labels,
				  .nlabels = sb->nlabels};
	if (timeout >= 0) {
		int64_t now = sbd_wall_s();
		sb->expires_at = timeout ? now + timeout : 0;
		sb->ttl_s = timeout ? sb->expires_at - sb->created_at : 0;
	}
	if (fresh.labels) {
		sb->labels = fresh.labels;
		sb->nlabels = fresh.nlabels;
	}
	r = sbd_registry_persist(sbd_conn_daemon(c), sb);
	if (r < 0) {
		sb->expires_at = old.expires_at;
		sb->ttl_s = old.ttl_s;
		sb->labels = old.labels;
		sb->nlabels = old.nlabels;
		sbd_sandbox_labels_free(&fresh);
		sbd_api_reply_errno(c, r, "update", "the change could not be persisted");
		return;
	}
	if (fresh.labels)
		sbd_sandbox_labels_free(&old);
	sbd_api_reply_sandbox(c, 200, sb);
}
