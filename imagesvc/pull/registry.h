/* registry.h — pulling an image from an OCI distribution (registry v2) API.
 *
 * registry_pull() resolves REF to a manifest (an index or Docker manifest list
 * is resolved to its linux/amd64 manifest), downloads the config and every
 * layer blob, verifies each against its descriptor's size and SHA-256, and
 * writes a staged image directory (oci.h). Authentication follows the
 * registry's WWW-Authenticate challenge: Bearer (a token from the realm, for
 * the repository's pull scope; anonymous or with basic credentials) or Basic.
 * Blob downloads follow redirects (at most 5; credentials are not sent to
 * another host) and, when the connection breaks mid-blob, are retried with
 * exponential backoff, resuming with a Range request when the server allows
 * it; after max_attempts the pull fails with a clear error.
 *
 * References: [http[s]://]HOST[:PORT]/NAME[:TAG][@sha256:HEX]. A first
 * component without '.' or ':' (and not "localhost") means Docker Hub
 * (docker.io/library/NAME). The scheme is https unless given; with insecure,
 * certificates are not verified and a registry that does not speak TLS is
 * retried over plain http. */
#pragma once
#include <stdbool.h>
#include <stddef.h>

#include "imagesvc/pull/oci.h"

struct registry_ref {
	char *scheme;	/* "http", "https" or NULL when not given */
	char *registry; /* host[:port] as written ("docker.io" for Docker Hub) */
	char *repo;	/* e.g. "library/busybox" */
	char *tag;	/* NULL when only a digest was given */
	char *digest;	/* NULL unless @sha256:... was given */
};

/* Parses a reference; the tag defaults to "latest" when there is no digest.
 * Returns 0 and *ret (registry_ref_done it), -EINVAL or -ENOMEM. */
int registry_ref_parse(const char *s, struct registry_ref *ret, struct strata_err *e);
void registry_ref_done(struct registry_ref *r);

struct registry_opts {
	bool insecure;
	const char *ca_file;  /* extra trusted CA (PEM), may be NULL */
	const char *username; /* basic credentials, both NULL for anonymous */
	const char *password;
	int max_attempts;	      /* per request, on transient errors (default 4) */
	int backoff_ms;		      /* first retry delay, doubled each time (default 250) */
	int timeout_ms;		      /* network stall limit (default 30000) */
	size_t max_header_bytes;      /* response header block (default 64 KiB) */
	const struct oci_limits *lim; /* NULL for the defaults */
};

/* Pulls ref into the new stage directory stage_dir. Returns 0 or a negative
 * errno with e filled: -ENOENT (unknown repository, tag or platform),
 * -EACCES (authentication refused or needed), -EBADMSG (digest mismatch,
 * malformed document), -EFBIG (a limit), -EPROTO (HTTP or TLS), or the
 * transport error of the last attempt (-ECONNRESET, -ETIMEDOUT, ...). */
int registry_pull(const char *ref, const char *stage_dir, const struct registry_opts *o,
		  struct strata_err *e);

/* Looks up basic credentials for registry ("host[:port]" as in a reference)
 * in a Docker-style config.json: path, or when NULL $DOCKER_CONFIG/config.json
 * or ~/.docker/config.json. Reads "auths": {KEY: {"auth": base64("user:pass")}
 * or {"username", "password"}}, KEY being host[:port] or a URL of it (Docker
 * Hub: "https://index.docker.io/v1/"). Returns 0 with *ret_user and
 * *ret_pass (free()), -ENOENT when there are none, or a negative errno. */
int registry_creds_lookup(const char *path, const char *registry, char **ret_user, char **ret_pass,
			  struct strata_err *e);

/* Parses a WWW-Authenticate challenge: scheme into scheme[cap] ("Bearer",
 * "Basic"), and the realm, service and scope parameters (NULL when absent,
 * each free()). Exposed for tests. Returns 0, -EINVAL or -ENOMEM. */
int registry_parse_challenge(const char *h, char *scheme, size_t cap, char **realm, char **service,
			     char **scope);
