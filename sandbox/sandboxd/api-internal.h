/* api-internal.h — what the files of strata-sandboxd's HTTP API share:
 * api.c (routing, the small requests and the helpers below), api_create.c,
 * api_exec.c, api_files.c and api_sandbox.c (one request family each). All of it runs on
 * the loop thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "fs/err.h"
#include "fs/json.h"
#include "sandbox/sandboxd/sandboxd.h"

/* Replies the HTTP error that negative errno r maps to: "what: why", else
 * "what: strerror(r)" when why is NULL or empty. */
void sbd_api_reply_errno(struct sbd_conn *c, int r, const char *what, const char *why);
/* Replies the error of an image look-up (images.h): 404 image_not_found
 * for -ENOENT, 503 store_unavailable when the image store did not answer
 * in time (-ETIMEDOUT), has too many calls waiting (-EAGAIN) or its mount
 * is not connected (-ENOTCONN), else as sbd_api_reply_errno. */
void sbd_api_reply_image_error(struct sbd_conn *c, int r, const char *what, const char *why);
/* Parses a JSON object body, refusing fields not in allowed (NULL-
 * terminated). Returns the tree (caller frees), or NULL after replying 400. */
struct json *sbd_api_parse_body(struct sbd_conn *c, const char *body, size_t len,
				const char *const *allowed);
/* Replies the sandbox's JSON with status. */
void sbd_api_reply_sandbox(struct sbd_conn *c, int status, const struct sbd_sandbox *sb);
/* A NULL-terminated "K=V" array (*ret, caller frees): base overlaid with the
 * JSON object e (NULL: base alone). Returns 0, -EINVAL with err, or
 * -ENOMEM. */
int sbd_api_parse_env(const struct json *e, char *const *base, char ***ret, struct strata_err *err);

/* An optional integer field and its bounds. */
struct sbd_api_int {
	const char *name;
	int64_t *dst; /* left alone when the field is absent or null */
	int64_t lo, hi;
};
/* Reads the n integer fields f of j. Returns 0 or -EINVAL with err. */
int sbd_api_parse_ints(const struct json *j, const struct sbd_api_int *f, size_t n,
		       struct strata_err *err);
/* The string field key of j, or NULL when absent or null; *bad is set when it
 * is not a string or longer than max. */
const char *sbd_api_opt_str(const struct json *j, const char *key, size_t max, bool *bad);
/* Replies 409 paused and returns true when sb is paused or being paused
 * (execs, stdin and files need it running). */
bool sbd_api_refuse_paused(struct sbd_conn *c, const struct sbd_sandbox *sb);
/* Whether query parameter key is given as "1", "true" or "". */
bool sbd_api_query_bool(const char *query, const char *key);

/* Parses the labels object l of a create or update into sb->labels (at most
 * SBD_MAX_LABELS; names 1-63 bytes without ',' '=', values up to 255 bytes).
 * Returns 0, -EINVAL with err, or -ENOMEM; what was parsed is sb's either
 * way. */
int sbd_api_parse_labels(const struct json *l, struct sbd_sandbox *sb, struct strata_err *err);

/* The request families. */
/* POST /v1/sandboxes; with ?lookup=1 (an apiserver finding the sandbox of
 * a retried create, sandbox/apiserver/README.md) it creates nothing: the
 * sandbox made with the body's idempotency_key (200, after one in flight
 * ended) or 404 not_found. */
void sbd_api_create(struct sbd_conn *c, const char *query, const char *body, size_t len);
void sbd_api_exec(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body, size_t len);
void sbd_api_exec_stdin(struct sbd_conn *c, struct sbd_sandbox *sb, const char *sub,
			const char *query, const char *body, size_t len);
/* api_pause.c: POST .../pause (pause true) and .../resume. */
void sbd_api_pause(struct sbd_conn *c, struct sbd_sandbox *sb, bool pause);
/* api_sandbox.c: GET .../metrics and PATCH /v1/sandboxes/{id}. */
void sbd_api_metrics(struct sbd_conn *c, struct sbd_sandbox *sb);
void sbd_api_update(struct sbd_conn *c, struct sbd_sandbox *sb, const char *body, size_t len);
/* The routes below .../execs (sub: what follows "execs/", "" for the list). */
void sbd_api_execs(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method, const char *sub,
		   const char *query, const char *body, size_t len);
void sbd_api_files(struct sbd_conn *c, struct sbd_sandbox *sb, const char *method, const char *sub,
		   const char *query, const char *body, size_t len);
