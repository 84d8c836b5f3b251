/* pool.c — kept-alive connections from the apiserver to the nodes: a
 * connect and a node's accept per forwarded request would cost more than
 * the forwarding. A kept connection is reused for 20 s at most (the nodes
 * close idle ones after 60 s: --idle-conn-timeout), at most
 * POOL_PER_NODE per address. */
#include <errno.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fs/clock.h"
#include "sandbox/apiserver/apiserver.h"

#define POOL_SLOTS 1024
#define POOL_PER_NODE 64
#define POOL_IDLE_MS 20000

struct slot {
	char addr[API_ADDR_MAX];
	int fd;
	int64_t since_ms;
};

struct api_pool {
	pthread_mutex_t mu;
	struct slot s[POOL_SLOTS];
	int n;
};

struct api_pool *api_pool_new(void)
{
	struct api_pool *p = calloc(1, sizeof(*p));
	if (p)
		pthread_mutex_init(&p->mu, NULL);
	return p;
}

void api_pool_free(struct api_pool *p)
{
	if (!p)
		return;
	for (int i = 0; i < p->n; i++)
		close(p->s[i].fd);
	pthread_mutex_destroy(&p->mu);
	free(p);
}

static int dial(const char *addr)
{
	char host[API_ADDR_MAX];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	if (getaddrinfo(host, colon + 1, &hints, &ai) || !ai)
		return -EHOSTUNREACH;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
	int r = fd < 0 ? -errno : 0;
	if (fd >= 0) {
		struct timeval tv = {.tv_sec = 2};
		int one = 1;
		/* a connect that does not complete in 2 s: the node is gone */
		setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
		if (connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
			r = errno == EINPROGRESS ? -ETIMEDOUT : -errno;
			close(fd);
		} else {
			tv.tv_sec = 30; /* a send the node does not take in 30 s */
			setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
		}
	}
	freeaddrinfo(ai);
	return r < 0 ? r : fd;
}

int api_pool_get(struct api_pool *p, const char *addr, bool *ret_reused)
{
	int64_t now = strata_mono_ms();
	int fd = -1;
	pthread_mutex_lock(&p->mu);
	for (int i = p->n - 1; i >= 0 && fd < 0; i--) {
		if (strcmp(p->s[i].addr, addr))
			continue;
		if (now - p->s[i].since_ms < POOL_IDLE_MS)
			fd = p->s[i].fd;
		else
			close(p->s[i].fd);
		p->s[i] = p->s[--p->n];
	}
	pthread_mutex_unlock(&p->mu);
	*ret_reused = fd >= 0;
	return fd >= 0 ? fd : dial(addr);
}

void api_pool_put(struct api_pool *p, const char *addr, int fd)
{
	int same = 0;
	pthread_mutex_lock(&p->mu);
	for (int i = 0; i < p->n; i++)
		same += !strcmp(p->s[i].addr, addr);
	if (p->n < POOL_SLOTS && same < POOL_PER_NODE) {
		struct slot *s = &p->s[p->n++];
		snprintf(s->addr, sizeof(s->addr), "%s", addr);
		s->fd = fd;
		s->since_ms = strata_mono_ms();
		fd = -1;
	}
	pthread_mutex_unlock(&p->mu);
	if (fd >= 0)
		close(fd);
}
