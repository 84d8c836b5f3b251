/* fc_client.h — HTTP/1.1 over Firecracker's API unix socket (--api-sock).
 *
 * One connection per request ("Connection: close" is not relied on: the
 * response is framed by Content-Length). Invariants:
 *  1. Every request finishes by its deadline (timeout_ms from the call):
 *     connect, write and read are polled against it; -ETIMEDOUT otherwise.
 *  2. At most FC_RESP_MAX bytes of response are read; more is -EMSGSIZE.
 *  3. A non-2xx answer is -EIO with "firecracker: PUT /path: 400: <the
 *     fault_message of its JSON body>" in e (the raw body when not JSON). */
#pragma once
#include "sandbox/sandboxd/fc_requests.h"
#include "fs/err.h"

#define FC_RESP_MAX 65536

/* Sends r to the API socket at sock_path. Returns the HTTP status (2xx) or a
 * negative errno with the reason in e. body/blen (optional) receive the
 * response body, malloc'ed and NUL-terminated. */
int fc_send(const char *sock_path, const struct fc_req *r, int timeout_ms, char **body,
	    size_t *blen, struct strata_err *e);
