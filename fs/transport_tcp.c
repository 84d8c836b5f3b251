/* transport_tcp.c — the TCP implementation of struct transport_ops.
 *
 * Client connections are blocking sockets with SO_RCVTIMEO/SO_SNDTIMEO set to
 * the call's timeout (set again only when it changes), so a round trip is
 * one sendmsg and usually one recvmsg: no EAGAIN-then-poll dance per call.
 * Connecting is non-blocking with a poll() deadline. The server's sockets
 * (tcp_sendv_fd, tcp_recv_exact_fd) are non-blocking: a call that would
 * block waits in poll() for at most its timeout. TCP_NODELAY is set
 * (requests are small and latency bound) and socket buffers are enlarged for
 * 1 MiB chunk transfers. */
#include "fs/rpc.h"
#include "fs/transport_tcp.h"
#include "fs/clock.h"
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>
#include "fs/cleanup.h"

struct transport_conn {
	int fd;
	int timeout_ms; /* SO_RCVTIMEO/SO_SNDTIMEO now set; 0: none yet */
};

int addr_parse(const char *addr, char *host, size_t host_cap, uint16_t *ret_port)
{
	if (!addr)
		return -EINVAL;
	const char *colon = strrchr(addr, ':');
	if (!colon)
		return -EINVAL;
	const char *h = addr;
	size_t hlen = (size_t)(colon - addr);
	if (hlen >= 2 && h[0] == '[' && h[hlen - 1] == ']') {
		h++;
		hlen -= 2;
	}
	if (hlen >= host_cap)
		return -EINVAL;
	char *end;
	errno = 0;
	unsigned long port = strtoul(colon + 1, &end, 10);
	if (errno || end == colon + 1 || *end || port > 65535)
		return -EINVAL;
	memcpy(host, h, hlen);
	host[hlen] = '\0';
	*ret_port = (uint16_t)port;
	return 0;
}

int tcp_wait_fd(int fd, short events, int64_t deadline)
{
	for (;;) {
		int64_t left = deadline - strata_mono_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		struct pollfd p = {.fd = fd, .events = events};
		int n = poll(&p, 1, (int)left);
		if (n > 0)
			return 0;
		if (n == 0)
			return -ETIMEDOUT;
		if (errno != EINTR)
			return -errno;
	}
}

void tcp_tune_socket(int fd)
{
	int one = 1, buf = 4 << 20;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	setsockopt(fd, SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
}

static int connect_one(const struct addrinfo *ai, int64_t deadline)
{
	_cleanup_close_ int fd =
	    socket(ai->ai_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	tcp_tune_socket(fd);
	if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		if (errno != EINPROGRESS)
			return -errno;
		int r = tcp_wait_fd(fd, POLLOUT, deadline);
		if (r < 0)
			return r;
		int err = 0;
		socklen_t len = sizeof(err);
		if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
			return -errno;
		if (err)
			return -err;
	}
	return TAKE_FD(fd);
}

int tcp_connect(const char *addr, int timeout_ms)
{
	char host[256], port_s[8];
	uint16_t port;
	int r = addr_parse(addr, host, sizeof(host), &port);
	if (r < 0)
		return r;
	snprintf(port_s, sizeof(port_s), "%u", port);
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_NUMERICSERV};
	struct addrinfo *res = NULL;
	if (getaddrinfo(host[0] ? host : "127.0.0.1", port_s, &hints, &res) != 0)
		return -EHOSTUNREACH;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	int fd = -ECONNREFUSED;
	for (struct addrinfo *ai = res; ai; ai = ai->ai_next) {
		fd = connect_one(ai, deadline);
		if (fd >= 0)
			break;
	}
	freeaddrinfo(res);
	return fd;
}

int tcp_set_blocking(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	if (fl < 0 || fcntl(fd, F_SETFL, fl & ~O_NONBLOCK) < 0)
		return -errno;
	return 0;
}

static int tcp_dial(const char *addr, int timeout_ms, void *arg, struct transport_conn **ret)
{
	(void)arg;
	int fd = tcp_connect(addr, timeout_ms);
	if (fd < 0)
		return fd;
	int r = tcp_set_blocking(fd);
	if (r < 0) {
		close(fd);
		return r;
	}
	struct transport_conn *c = malloc(sizeof(*c));
	if (!c) {
		close(fd);
		return -ENOMEM;
	}
	c->fd = fd;
	c->timeout_ms = 0;
	*ret = c;
	return 0;
}

int tcp_set_timeouts(int fd, int *cur_ms, int timeout_ms)
{
	if (timeout_ms <= 0)
		timeout_ms = 1;
	if (*cur_ms == timeout_ms)
		return 0;
	struct timeval tv = {.tv_sec = timeout_ms / 1000, .tv_usec = (timeout_ms % 1000) * 1000};
	if (setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv)) < 0 ||
	    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv)) < 0)
		return -errno;
	*cur_ms = timeout_ms;
	return 0;
}

/* Maps a failed blocking socket call: a timeout is EAGAIN there. */
static int sock_err(int e)
{
	if (e == EAGAIN || e == EWOULDBLOCK)
		return -ETIMEDOUT;
	return e == EPIPE ? -ECONNRESET : -e;
}

/* Moves cur and iovcnt past the n bytes just sent; returns the iovecs left. */
static int iov_advance(struct iovec **cur, int *iovcnt, size_t n)
{
	while (*iovcnt > 0 && n >= (*cur)->iov_len) {
		n -= (*cur)->iov_len;
		(*cur)++;
		(*iovcnt)--;
	}
	if (*iovcnt > 0) {
		(*cur)->iov_base = (char *)(*cur)->iov_base + n;
		(*cur)->iov_len -= n;
	}
	return *iovcnt;
}

int tcp_sendv_fd(int fd, const struct iovec *iov_in, int iovcnt, int timeout_ms)
{
	struct iovec iov[8];
	if (iovcnt > 8)
		return -EINVAL;
	memcpy(iov, iov_in, sizeof(*iov) * iovcnt);
	struct iovec *cur = iov;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	while (iovcnt > 0) {
		struct msghdr msg = {.msg_iov = cur, .msg_iovlen = iovcnt};
		ssize_t n = sendmsg(fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			if (errno != EAGAIN)
				return errno == EPIPE ? -ECONNRESET : -errno;
			int r = tcp_wait_fd(fd, POLLOUT, deadline);
			if (r < 0)
				return r;
			continue;
		}
		iov_advance(&cur, &iovcnt, (size_t)n);
	}
	return 0;
}

int tcp_recv_exact_fd(int fd, void *buf, size_t len, int timeout_ms)
{
	size_t got = 0;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	while (got < len) {
		ssize_t n = recv(fd, (char *)buf + got, len - got, 0);
		if (n > 0) {
			got += n;
			continue;
		}
		if (n == 0)
			return -ECONNRESET;
		if (errno == EINTR)
			continue;
		if (errno != EAGAIN)
			return -errno;
		int r = tcp_wait_fd(fd, POLLIN, deadline);
		if (r < 0)
			return r;
	}
	return 0;
}

static int tcp_sendv(struct transport_conn *c, const struct iovec *iov_in, int iovcnt,
		     int timeout_ms)
{
	struct iovec iov[8];
	if (iovcnt > 8)
		return -EINVAL;
	int r = tcp_set_timeouts(c->fd, &c->timeout_ms, timeout_ms);
	if (r < 0)
		return r;
	memcpy(iov, iov_in, sizeof(*iov) * iovcnt);
	struct iovec *cur = iov;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	while (iovcnt > 0) {
		struct msghdr msg = {.msg_iov = cur, .msg_iovlen = iovcnt};
		ssize_t n = sendmsg(c->fd, &msg, MSG_NOSIGNAL);
		if (n < 0) {
			if (errno == EINTR && strata_mono_ms() < deadline)
				continue;
			return sock_err(errno);
		}
		if (iov_advance(&cur, &iovcnt, (size_t)n) > 0 && strata_mono_ms() >= deadline)
			return -ETIMEDOUT;
	}
	return 0;
}

static int tcp_recv_exact(struct transport_conn *c, void *buf, size_t len, int timeout_ms)
{
	int r = tcp_set_timeouts(c->fd, &c->timeout_ms, timeout_ms);
	if (r < 0)
		return r;
	size_t got = 0;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	while (got < len) {
		ssize_t n = recv(c->fd, (char *)buf + got, len - got, MSG_WAITALL);
		if (n > 0) {
			got += n;
		} else if (n == 0) {
			return -ECONNRESET;
		} else if (errno != EINTR) {
			return sock_err(errno);
		}
		if (got < len && strata_mono_ms() >= deadline)
			return -ETIMEDOUT;
	}
	return 0;
}

static ssize_t tcp_recvv(struct transport_conn *c, struct iovec *iov, int iovcnt, int timeout_ms)
{
	int r = tcp_set_timeouts(c->fd, &c->timeout_ms, timeout_ms);
	if (r < 0)
		return r;
	int64_t deadline = strata_mono_ms() + timeout_ms;
	for (;;) {
		struct msghdr msg = {.msg_iov = iov, .msg_iovlen = iovcnt};
		ssize_t n = recvmsg(c->fd, &msg, 0);
		if (n > 0)
			return n;
		if (n == 0)
			return -ECONNRESET;
		if (errno != EINTR || strata_mono_ms() >= deadline)
			return sock_err(errno);
	}
}

static bool tcp_hung_up(struct transport_conn *c)
{
	struct pollfd p = {.fd = c->fd, .events = POLLIN};
	/* an idle connection has nothing to read: readable means EOF or error */
	return poll(&p, 1, 0) != 0;
}

static void tcp_close(struct transport_conn *c)
{
	if (!c)
		return;
	close(c->fd);
	free(c);
}

const struct transport_ops transport_tcp = {
    .name = "tcp",
    .dial = tcp_dial,
    .sendv = tcp_sendv,
    .recv_exact = tcp_recv_exact,
    .recvv = tcp_recvv,
    .hung_up = tcp_hung_up,
    .close = tcp_close,
};
