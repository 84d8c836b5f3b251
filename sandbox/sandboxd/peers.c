/* peers.c — connections counted per peer (peers.h): a chained hash table
 * of the peers that hold connections, keyed by uid or address. */
#include "sandbox/sandboxd/peers.h"

#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

/* Buckets of the table: a power of two. Peers are few in practice (one
 * uid, a handful of addresses) and never more than connections (capped by
 * --max-connections), so chains stay short. */
#define PEER_BUCKETS 1024

struct sbd_peer {
	struct sbd_peer_key key;
	size_t count;
	struct sbd_peer *next;
	size_t bucket;
};

struct sbd_peers {
	struct sbd_peer *b[PEER_BUCKETS];
	size_t n;
};

struct sbd_peers *sbd_peers_new(void)
{
	return calloc(1, sizeof(struct sbd_peers));
}

struct sbd_peers *sbd_peers_free(struct sbd_peers *t)
{
	if (!t)
		return NULL;
	for (size_t i = 0; i < PEER_BUCKETS; i++)
		while (t->b[i]) {
			struct sbd_peer *p = t->b[i];
			t->b[i] = p->next;
			free(p);
		}
	free(t);
	return NULL;
}

int sbd_peer_of(int fd, bool tcp, struct sbd_peer_key *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (!tcp) {
		struct ucred cr;
		socklen_t l = sizeof(cr);
		if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &l) < 0)
			return -errno;
		memcpy(ret->addr, &cr.uid, sizeof(cr.uid));
		return 0;
	}
	struct sockaddr_storage ss;
	socklen_t l = sizeof(ss);
	if (getpeername(fd, (struct sockaddr *)&ss, &l) < 0)
		return -errno;
	if (ss.ss_family == AF_INET) {
		ret->family = 4;
		memcpy(ret->addr, &((struct sockaddr_in *)&ss)->sin_addr, 4);
	} else if (ss.ss_family == AF_INET6) {
		const struct in6_addr *a = &((struct sockaddr_in6 *)&ss)->sin6_addr;
		if (IN6_IS_ADDR_V4MAPPED(a)) {
			ret->family = 4;
			memcpy(ret->addr, a->s6_addr + 12, 4);
		} else {
			ret->family = 6;
			memcpy(ret->addr, a->s6_addr, 16);
		}
	} else {
		return -EAFNOSUPPORT;
	}
	return 0;
}

void sbd_peer_str(const struct sbd_peer_key *k, char *buf, size_t size)
{
	if (k->family == 0) {
		uint32_t uid;
		memcpy(&uid, k->addr, sizeof(uid));
		snprintf(buf, size, "uid %u", uid);
	} else if (!inet_ntop(k->family == 4 ? AF_INET : AF_INET6, k->addr, buf, (socklen_t)size)) {
		snprintf(buf, size, "?");
	}
}

static size_t bucket_of(const struct sbd_peer_key *k)
{
	uint64_t h = 0xcbf29ce484222325ull ^ k->family; /* FNV-1a */
	for (size_t i = 0; i < sizeof(k->addr); i++)
		h = (h ^ k->addr[i]) * 0x100000001b3ull;
	return (size_t)(h ^ (h >> 32)) & (PEER_BUCKETS - 1);
}

struct sbd_peer *sbd_peers_take(struct sbd_peers *t, const struct sbd_peer_key *k, size_t cap,
				bool *at_cap)
{
	*at_cap = false;
	size_t i = bucket_of(k);
	struct sbd_peer *p = t->b[i];
	while (p && memcmp(&p->key, k, sizeof(*k)))
		p = p->next;
	if (p && p->count >= cap) {
		*at_cap = true;
		return NULL;
	}
	if (!p) {
		if (cap == 0) {
			*at_cap = true;
			return NULL;
		}
		if (!(p = calloc(1, sizeof(*p))))
			return NULL;
		p->key = *k;
		p->bucket = i;
		p->next = t->b[i];
		t->b[i] = p;
		t->n++;
	}
	p->count++;
	return p;
}

void sbd_peers_put(struct sbd_peers *t, struct sbd_peer *p)
{
	if (!p || --p->count > 0)
		return;
	struct sbd_peer **pp = &t->b[p->bucket];
	while (*pp != p)
		pp = &(*pp)->next;
	*pp = p->next;
	t->n--;
	free(p);
}

size_t sbd_peers_count(const struct sbd_peers *t)
{
	return t ? t->n : 0;
}
