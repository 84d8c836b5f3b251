/* fc_client.c — HTTP/1.1 client of Firecracker's API socket (fc_client.h). */
#include "sandbox/sandboxd/fc_client.h"
#include "fs/json.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static int wait_fd(int fd, short ev, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = ev};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n < 0 && errno != EINTR)
			return -errno;
	}
}

static int write_all(int fd, const char *p, size_t n, int64_t deadline)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);
		if (w > 0) {
			p += w;
			n -= (size_t)w;
			continue;
		}
		if (w < 0 && errno == EINTR)
			continue;
		if (w < 0 && errno != EAGAIN)
			return -errno;
		int r = wait_fd(fd, POLLOUT, deadline);
		if (r < 0)
			return r;
	}
	return 0;
}

/* The end of the header block and the Content-Length, or 0 when the
 * headers are not complete yet; -EPROTO when malformed. */
static int parse_head(const char *buf, size_t len, size_t *hlen, size_t *clen, int *status)
{
	const char *end = NULL;
	for (size_t i = 0; i + 3 < len; i++)
		if (!memcmp(buf + i, "\r\n\r\n", 4)) {
			end = buf + i;
			break;
		}
	if (!end)
		return 0;
	if (len < 12 || memcmp(buf, "HTTP/1.", 7) || buf[8] != ' ')
		return -EPROTO;
	int st = 0;
	for (int i = 9; i < 12; i++) {
		if (buf[i] < '0' || buf[i] > '9')
			return -EPROTO;
		st = st * 10 + (buf[i] - '0');
	}
	*status = st;
	*clen = 0;
	const char *p = memchr(buf, '\n', (size_t)(end - buf));
	while (p && p < end) {
		p++;
		if ((size_t)(end - p) > 15 && !strncasecmp(p, "Content-Length:", 15)) {
			char *q;
			errno = 0;
			unsigned long long v = strtoull(p + 15, &q, 10);
			if (errno || q == p + 15 || v > FC_RESP_MAX)
				return -EMSGSIZE;
			*clen = (size_t)v;
		}
		p = memchr(p, '\n', (size_t)(end - p));
	}
	*hlen = (size_t)(end - buf) + 4;
	return 1;
}

int fc_send(const char *sock_path, const struct fc_req *r, int timeout_ms, char **body,
	    size_t *blen, struct strata_err *e)
{
	int64_t deadline = now_ms() + timeout_ms;
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (body)
		*body = NULL;
	if (strlen(sock_path) >= sizeof(sa.sun_path))
		return strata_err_set(e, -ENAMETOOLONG, "firecracker: socket path too long: %s",
				      sock_path);
	strcpy(sa.sun_path, sock_path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0)
		return strata_err_set(e, -errno, "firecracker: socket: %s", strerror(errno));
	int rc = 0;
	char *buf = NULL;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 && errno != EINPROGRESS) {
		rc = strata_err_set(e, -errno, "firecracker: connect %s: %s", sock_path,
				    strerror(errno));
		goto out;
	}
	char head[256];
	int hn = snprintf(head, sizeof(head),
			  "%s %s HTTP/1.1\r\nHost: localhost\r\nAccept: application/json\r\n"
			  "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			  r->method, r->path, r->body ? r->len : 0);
	if ((rc = write_all(fd, head, (size_t)hn, deadline)) < 0 ||
	    (r->body && (rc = write_all(fd, r->body, r->len, deadline)) < 0)) {
		strata_err_set(e, rc, "firecracker: %s %s: sending: %s", r->method, r->path,
			       strerror(-rc));
		goto out;
	}
	size_t cap = FC_RESP_MAX + 4096, len = 0, hlen = 0, clen = 0;
	int status = 0, got = 0;
	buf = malloc(cap + 1);
	if (!buf) {
		rc = strata_err_set(e, -ENOMEM, "firecracker: out of memory");
		goto out;
	}
	for (;;) {
		if (got && len >= hlen + clen)
			break;
		if (len == cap) {
			rc = strata_err_set(e, -EMSGSIZE,
					    "firecracker: %s %s: response over %d bytes", r->method,
					    r->path, FC_RESP_MAX);
			goto out;
		}
		ssize_t n = recv(fd, buf + len, cap - len, 0);
		if (n == 0) {
			rc = strata_err_set(e, -EPROTO, "firecracker: %s %s: connection closed %s",
					    r->method, r->path,
					    got ? "inside the body" : "before a response");
			goto out;
		}
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN) {
				rc = strata_err_set(e, -errno, "firecracker: %s %s: %s", r->method,
						    r->path, strerror(errno));
				goto out;
			}
			if ((rc = wait_fd(fd, POLLIN, deadline)) < 0) {
				strata_err_set(e, rc, "firecracker: %s %s: no answer in %d ms",
					       r->method, r->path, timeout_ms);
				goto out;
			}
			continue;
		}
		len += (size_t)n;
		if (!got) {
			got = parse_head(buf, len, &hlen, &clen, &status);
			if (got < 0) {
				rc =
				    strata_err_set(e, got, "firecracker: %s %s: malformed response",
						   r->method, r->path);
				goto out;
			}
		}
	}
	char *b = buf + hlen;
	b[clen] = 0;
	if (status < 200 || status > 299) {
		const char *msg = b;
		struct json *j = json_parse(b, clen, NULL, 0);
		const char *fm = json_cstr(json_get(j, "fault_message"));
		if (fm)
			msg = fm;
		rc = strata_err_set(e, -EIO, "firecracker: %s %s: %d: %.400s", r->method, r->path,
				    status, msg);
		json_free(j);
		goto out;
	}
	rc = status;
	if (body) {
		memmove(buf, b, clen + 1);
		*body = buf;
		buf = NULL;
		if (blen)
			*blen = clen;
	}
out:
	free(buf);
	close(fd);
	return rc;
}
