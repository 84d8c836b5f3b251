/* proxy.c — requests forwarded to the nodes.
 *
 * A proxied request goes out as the client sent it (its head, then its
 * body as it arrives), and the node's answer comes back as the node sends
 * it: an exec's ndjson stream or a file's chunks reach the client as soon
 * as the node writes them, and a client that leaves closes the node's
 * connection too (the node then cancels the exec, as it would for a client
 * of its own). A connection to a node is kept for the next request when
 * both ends keep it (pool.c). A kept connection the node closed meanwhile
 * is found at the first send or as an answer that never starts: the
 * request goes again on a new connection, once; a new connection that
 * fails is the node's failure, reported to the caller. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "sandbox/apiserver/apiserver.h"

#define EXCHANGE_BODY_MAX (256u << 20)

/* One try of an exchange on fd. Returns 0, or -errno with *ret_started
 * when any of the answer came. */
static int exchange_once(int fd, const char *head, size_t hlen, const char *body, size_t len,
			 struct resp_head *rh, char **ret_body, size_t *ret_len, bool *ret_started)
{
	struct ibuf in;
	int r;
	*ret_started = false;
	if ((r = send_all(fd, head, hlen)) < 0 || (len && (r = send_all(fd, body, len)) < 0))
		return r;
	if ((r = ibuf_init(&in, fd, 2 * SBD_HTTP_MAX_HEAD)) < 0)
		return r;
	r = resp_head_read(&in, false, rh);
	*ret_started = in.len > 0;
	if (r == 0) {
		ibuf_consume(&in, rh->head_len);
		r = read_body(&in, rh->kind, rh->length, EXCHANGE_BODY_MAX, ret_body, ret_len);
		if (in.len)
			rh->close = true; /* bytes nobody asked for: not reused */
	}
	ibuf_done(&in);
	return r;
}

int api_exchange(struct apiserver *a, const char *addr, const char *method, const char *path,
		 const char *auth, const char *body, size_t len, int *ret_status, char **ret_body,
		 size_t *ret_len, bool *ret_sent)
{
	char *head = NULL;
	int hlen = asprintf(&head,
			    "%s %s HTTP/1.1\r\nHost: strata\r\n%s%s%sContent-Type: "
			    "application/json\r\nContent-Length: %zu\r\n\r\n",
			    method, path, auth ? "Authorization: " : "", auth ? auth : "",
			    auth ? "\r\n" : "", len);
	int r = -ENOMEM;
	*ret_sent = false;
	for (int attempt = 0; hlen >= 0 && attempt < 2; attempt++) {
		bool reused, started;
		struct resp_head rh;
		int fd = api_pool_get(a->pool, addr, &reused);
		if (fd < 0) {
			r = fd;
			break;
		}
		r = exchange_once(fd, head, (size_t)hlen, body, len, &rh, ret_body, ret_len,
				  &started);
		if (r == 0) {
			*ret_status = rh.status;
			*ret_sent = true;
			if (rh.close)
				close(fd);
			else
				api_pool_put(a->pool, addr, fd);
			break;
		}
		close(fd);
		if (!reused || started) { /* the node's own failure */
			*ret_sent = started || r == -ECONNRESET;
			break;
		}
	}
	free(head);
	return r;
}

/* Sends r's head to addr on a kept or new connection. Returns the fd or
 * -errno (nothing reached the node). */
static int send_head(struct api_client *c, const struct api_req *r, const char *addr)
{
	for (int attempt = 0; attempt < 2; attempt++) {
		bool reused;
		int fd = api_pool_get(c->a->pool, addr, &reused);
		if (fd < 0)
			return fd;
		int e = send_all(fd, r->head, r->h.head_len);
		if (e == 0)
			return fd;
		close(fd);
		if (!reused)
			return e;
	}
	return -ECONNRESET;
}

/* The node's answer to the client: head, then body as it comes. */
static int relay_answer(struct api_client *c, struct ibuf *nin, bool head_req, struct resp_head *rh)
{
	int e = resp_head_read(nin, head_req, rh);
	if (e < 0) {
		api_reply_error(c, 502, "bad_gateway", "the node did not answer: %s", strerror(-e));
		c->close = true;
		return e;
	}
	if (send_all(c->in.fd, nin->b, rh->head_len) < 0)
		return -EPIPE;
	ibuf_consume(nin, rh->head_len);
	return pump_body(nin, c->in.fd, rh->kind, rh->length);
}

int api_proxy(struct api_client *c, const struct api_req *r, const char *addr, int *ret_status)
{
	enum body_kind kind = r->h.chunked	    ? BODY_CHUNKED
			      : r->h.content_length ? BODY_LEN
						    : BODY_NONE;
	bool head_req = !strcmp(r->h.method, "HEAD");
	struct resp_head rh = {0};
	struct ibuf nin;
	int fd = send_head(c, r, addr);
	if (fd < 0)
		return fd;
	ibuf_consume(&c->in, r->h.head_len);
	atomic_fetch_add(&c->a->proxied_total, 1);
	if (ibuf_init(&nin, fd, 2 * SBD_HTTP_MAX_HEAD) < 0) {
		close(fd);
		c->close = true;
		return 0;
	}
	int e = 0;
	if (r->h.expect_continue) { /* the node says 100 (or no) before the body */
		e = relay_answer(c, &nin, head_req, &rh);
		if (e == 0 && rh.status != 100)
			kind = BODY_NONE, c->close = true; /* the body never comes */
	}
	if (e == 0)
		e = pump_body(&c->in, fd, kind, r->h.content_length);
	if (e == 0)
		e = relay_answer(c, &nin, head_req, &rh);
	*ret_status = rh.status;
	if (e < 0 || rh.close || nin.len) {
		close(fd);
		c->close = true;
	} else {
		api_pool_put(c->a->pool, addr, fd);
	}
	if (!r->h.keep_alive)
		c->close = true;
	ibuf_done(&nin);
	return 0;
}
