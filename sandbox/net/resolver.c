/* resolver.c — each sandbox's view of DNS. The node redirects every UDP
 * query a sandbox sends to port 53 (any server address) to this resolver
 * (rules.c, prerouting), which knows the sandbox by its source address: a
 * name its policy denies gets NXDOMAIN at once; an allowed one is forwarded
 * to the upstream server, and the IPv4 addresses of the answer go into the
 * box's DNS sets (for max(TTL, SBN_TTL_MIN) seconds, at most SBN_TTL_MAX)
 * before the answer goes back, so that the connection that follows finds
 * them there. Addresses no policy may open (net-internal.h always_denied:
 * the node's pool, loopback, link-local, multicast) are never granted, which
 * is what defeats DNS rebinding onto them. Each answer is one record of the
 * box's log (name, type, verdict, rule, addresses granted and refused).
 * Queries in flight are remembered (struct sbn_pending) by the id this
 * resolver gave them upstream; one unanswered for 3 s gets SERVFAIL. */
#include <arpa/inet.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/json.h"
#include "sandbox/net/net-internal.h"

#define PENDING 1024 /* queries in flight on the node */
#define PENDING_TIMEOUT_S 3

struct sbn_pending {
	bool used;
	uint16_t id, up_id, qtype;
	struct sockaddr_in client;
	char box_id[64];
	char name[254];
	int64_t deadline;
};

int resolver_open(struct sbn_node *n)
{
	n->pending = calloc(PENDING, sizeof(*n->pending));
	if (!n->pending)
		return -ENOMEM;
	n->dns_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	n->up_fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (n->dns_fd < 0 || n->up_fd < 0)
		return -errno;
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons(n->resolver_port)};
	int one = 1;
	setsockopt(n->dns_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
	if (bind(n->dns_fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    connect(n->up_fd, (struct sockaddr *)&n->upstream, sizeof(n->upstream)) < 0)
		return -errno;
	return 0;
}

void resolver_close(struct sbn_node *n)
{
	if (n->dns_fd >= 0)
		close(n->dns_fd);
	if (n->up_fd >= 0)
		close(n->up_fd);
	n->dns_fd = n->up_fd = -1;
	free(n->pending);
	n->pending = NULL;
}

/* The offset after the name at off, or -1. */
static int skip_name(const uint8_t *m, size_t len, size_t off)
{
	for (int hops = 0; off < len && hops < 128; hops++) {
		uint8_t l = m[off];
		if (l == 0)
			return (int)off + 1;
		if ((l & 0xc0) == 0xc0)
			return off + 2 <= len ? (int)off + 2 : -1;
		off += 1 + (size_t)l;
	}
	return -1;
}

/* The question's name (lowercase, no trailing dot) and type; returns the
 * offset after the question, or -1. */
static int question(const uint8_t *m, size_t len, char *name, uint16_t *qtype)
{
	if (len < 12 || (m[4] << 8 | m[5]) != 1)
		return -1;
	size_t off = 12, o = 0;
	while (off < len && m[off]) {
		uint8_t l = m[off++];
		if ((l & 0xc0) || off + l > len || o + l + 1 > 253)
			return -1;
		if (o)
			name[o++] = '.';
		for (uint8_t i = 0; i < l; i++) {
			char c = (char)m[off + i];
			name[o++] = c >= 'A' && c <= 'Z' ? (char)(c + 32) : c;
		}
		off += l;
	}
	name[o] = 0;
	if (off + 5 > len)
		return -1;
	*qtype = (uint16_t)(m[off + 1] << 8 | m[off + 2]);
	return (int)off + 5;
}

/* Answers the query in m (qend bytes: header and question) with rcode. */
static void reply_rcode(struct sbn_node *n, uint8_t *m, size_t qend, int rcode,
			const struct sockaddr_in *to)
{
	m[2] = (uint8_t)(0x80 | (m[2] & 0x79)); /* QR, keep opcode and RD */
	m[3] = (uint8_t)(0x80 | rcode);		/* RA */
	memset(m + 6, 0, 6);			/* no answer, authority, additional */
	sendto(n->dns_fd, m, qend, 0, (const struct sockaddr *)to, sizeof(*to));
}

static const char *qtype_name(uint16_t t)
{
	switch (t) {
	case 1:
		return "A";
	case 28:
		return "AAAA";
	case 5:
		return "CNAME";
	case 15:
		return "MX";
	case 16:
		return "TXT";
	case 33:
		return "SRV";
	case 65:
		return "HTTPS";
	default:
		return "other";
	}
}

static void log_dns(struct sbn_box *bx, const char *name, uint16_t qtype, bool allow,
		    const char *rule, const uint32_t *ok, size_t nok, const uint32_t *bad,
		    size_t nbad, long ttl)
{
	struct jw w;
	char a[16];
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "kind", "dns");
	jw_kstr(&w, "name", name);
	jw_kstr(&w, "qtype", qtype_name(qtype));
	jw_kstr(&w, "verdict", allow ? "allow" : "deny");
	jw_kstr(&w, "rule", rule);
	if (allow) {
		jw_key(&w, "answers");
		jw_arr(&w);
		for (size_t i = 0; i < nok; i++) {
			ip4str(ok[i], a);
			jw_str(&w, a);
		}
		jw_arr_end(&w);
		if (nbad) {
			jw_key(&w, "refused_answers"); /* always-denied addresses */
			jw_arr(&w);
			for (size_t i = 0; i < nbad; i++) {
				ip4str(bad[i], a);
				jw_str(&w, a);
			}
			jw_arr_end(&w);
		}
		if (nok)
			jw_kint(&w, "ttl", ttl);
	}
	jw_obj_end(&w);
	size_t len;
	char *rec = jw_take(&w, &len);
	if (rec)
		netlog_write(bx, rec, len);
	free(rec);
}

void resolver_query(struct sbn_node *n)
{
	uint8_t m[1500];
	for (;;) {
		struct sockaddr_in from;
		socklen_t fl = sizeof(from);
		ssize_t len = recvfrom(n->dns_fd, m, sizeof(m), 0, (struct sockaddr *)&from, &fl);
		if (len < 0)
			return;
		char name[256];
		uint16_t qtype = 0;
		int qend = question(m, (size_t)len, name, &qtype);
		pthread_mutex_lock(&n->mu);
		struct sbn_box *bx = node_box_by_addr(n, ntohl(from.sin_addr.s_addr));
		const char *rule = "default";
		if (qend < 0 || !bx) {
			if (len >= 12)
				reply_rcode(n, m, 12, bx ? 1 : 5, &from); /* FORMERR, REFUSED */
			pthread_mutex_unlock(&n->mu);
			continue;
		}
		if (!sbn_policy_name(bx->policy, name, &rule)) {
			log_dns(bx, name, qtype, false, rule, NULL, 0, NULL, 0, 0);
			reply_rcode(n, m, (size_t)qend, 3, &from); /* NXDOMAIN */
			pthread_mutex_unlock(&n->mu);
			continue;
		}
		size_t i = 0;
		while (i < PENDING && n->pending[i].used)
			i++;
		if (i == PENDING) {
			reply_rcode(n, m, (size_t)qend, 2, &from); /* SERVFAIL: too many */
			pthread_mutex_unlock(&n->mu);
			continue;
		}
		struct sbn_pending *p = &n->pending[i];
		p->used = true;
		p->id = (uint16_t)(m[0] << 8 | m[1]);
		p->up_id = (uint16_t)((++n->next_qid & 0x3f) << 10 | i);
		p->qtype = qtype;
		p->client = from;
		snprintf(p->box_id, sizeof(p->box_id), "%s", bx->id);
		snprintf(p->name, sizeof(p->name), "%s", name);
		p->deadline = mono_s() + PENDING_TIMEOUT_S;
		m[0] = (uint8_t)(p->up_id >> 8);
		m[1] = (uint8_t)p->up_id;
		pthread_mutex_unlock(&n->mu);
		send(n->up_fd, m, (size_t)len, 0);
	}
}

/* Remembers that bx's name resolved to addr until expires (mu held). */
static void grant_add(struct sbn_box *bx, const char *name, uint32_t addr, int64_t expires,
		      int64_t now)
{
	size_t k = 0;
	for (size_t i = 0; i < bx->ngrants; i++) { /* drop the expired */
		struct sbn_grant *g = &bx->grants[i];
		if (g->expires > now)
			bx->grants[k++] = *g;
	}
	bx->ngrants = k;
	for (size_t i = 0; i < bx->ngrants; i++) {
		struct sbn_grant *g = &bx->grants[i];
		if (g->addr == addr && !strcmp(g->name, name)) {
			g->expires = expires;
			return;
		}
	}
	if (!bx->grants) {
		bx->grants = calloc(SBN_GRANTS_MAX, sizeof(*bx->grants));
		if (!bx->grants)
			return;
	}
	if (bx->ngrants == SBN_GRANTS_MAX) /* the oldest goes: the set keeps it anyway */
		memmove(bx->grants, bx->grants + 1, (SBN_GRANTS_MAX - 1) * sizeof(*bx->grants));
	else
		bx->ngrants++;
	struct sbn_grant *g = &bx->grants[bx->ngrants - 1];
	g->addr = addr;
	g->expires = expires;
	snprintf(g->name, sizeof(g->name), "%s", name);
}

const char *grant_name(const struct sbn_box *bx, uint32_t addr)
{
	for (size_t i = bx->ngrants; i-- > 0;)
		if (bx->grants[i].addr == addr)
			return bx->grants[i].name;
	return NULL;
}

/* The A records of answer m; returns how many (at most cap). */
static size_t a_records(const uint8_t *m, size_t len, uint32_t *addrs, uint32_t *ttls, size_t cap)
{
	char name[256];
	uint16_t qt;
	int off = question(m, len, name, &qt);
	unsigned an = m[6] << 8 | m[7];
	size_t k = 0;
	for (unsigned i = 0; off > 0 && i < an; i++) {
		off = skip_name(m, len, (size_t)off);
		if (off < 0 || (size_t)off + 10 > len)
			break;
		const uint8_t *r = m + off;
		uint16_t type = (uint16_t)(r[0] << 8 | r[1]), cls = (uint16_t)(r[2] << 8 | r[3]);
		uint32_t ttl =
		    (uint32_t)r[4] << 24 | (uint32_t)r[5] << 16 | (uint32_t)r[6] << 8 | r[7];
		uint16_t rdlen = (uint16_t)(r[8] << 8 | r[9]);
		if ((size_t)off + 10 + rdlen > len)
			break;
		if (type == 1 && cls == 1 && rdlen == 4 && k < cap) {
			addrs[k] = (uint32_t)r[10] << 24 | (uint32_t)r[11] << 16 |
				   (uint32_t)r[12] << 8 | r[13];
			ttls[k++] = ttl;
		}
		off += 10 + rdlen;
	}
	return k;
}

/* Grants bx the answer's addresses (mu held): in its list and, in one
 * batch, in its DNS set. */
static void grant_answer(struct sbn_node *n, struct sbn_box *bx, const struct sbn_pending *p,
			 const uint8_t *m, size_t len)
{
	uint32_t addrs[64], ttls[64], ok[64], bad[64];
	size_t na = a_records(m, len, addrs, ttls, 64), nok = 0, nbad = 0;
	int64_t now = mono_s();
	long ttl_min = SBN_TTL_MAX;
	const char *rule = "default";
	sbn_policy_name(bx->policy, p->name, &rule);
	for (size_t i = 0; i < na; i++) {
		if (always_denied(n, addrs[i])) {
			bad[nbad++] = addrs[i];
			continue;
		}
		long ttl = ttls[i] < SBN_TTL_MIN   ? SBN_TTL_MIN
			   : ttls[i] > SBN_TTL_MAX ? SBN_TTL_MAX
						   : (long)ttls[i];
		if (ttl < ttl_min)
			ttl_min = ttl;
		grant_add(bx, p->name, addrs[i], now + ttl, now);
		ok[nok++] = addrs[i];
	}
	if (nok) {
		struct sbuf b = {0};
		/* Only this box's grants for this name: rules_box_grants would
		 * rewrite all of them. */
		size_t all = bx->ngrants;
		struct sbn_grant *g = bx->grants;
		struct sbn_box view = *bx;
		for (size_t i = 0; i < all; i++)
			if (!strcmp(g[i].name, p->name)) {
				view.grants = &g[i];
				view.ngrants = 1;
				rules_box_grants(&view, &b, now);
			}
		if (b.p && !b.oom)
			(void)nft_apply(n, b.p, NULL, 0);
		free(b.p);
	}
	log_dns(bx, p->name, p->qtype, true, rule, ok, nok, bad, nbad, ttl_min);
}

void resolver_answer(struct sbn_node *n)
{
	uint8_t m[4096];
	for (;;) {
		ssize_t len = recv(n->up_fd, m, sizeof(m), 0);
		if (len < 0)
			return;
		if (len < 12)
			continue;
		uint16_t id = (uint16_t)(m[0] << 8 | m[1]);
		pthread_mutex_lock(&n->mu);
		struct sbn_pending *p = &n->pending[id & (PENDING - 1)];
		if (!p->used || p->up_id != id) {
			pthread_mutex_unlock(&n->mu);
			continue;
		}
		p->used = false;
		struct sbn_box *bx = node_box_by_addr(n, ntohl(p->client.sin_addr.s_addr));
		if (bx && !strcmp(bx->id, p->box_id)) {
			grant_answer(n, bx, p, m, (size_t)len);
			m[0] = (uint8_t)(p->id >> 8);
			m[1] = (uint8_t)p->id;
			sendto(n->dns_fd, m, (size_t)len, 0, (struct sockaddr *)&p->client,
			       sizeof(p->client));
		}
		pthread_mutex_unlock(&n->mu);
	}
}

void resolver_expire(struct sbn_node *n, int64_t now)
{
	pthread_mutex_lock(&n->mu);
	for (size_t i = 0; i < PENDING; i++) {
		struct sbn_pending *p = &n->pending[i];
		if (!p->used || p->deadline > now)
			continue;
		p->used = false;
		/* SERVFAIL with the question alone: rebuilt from what we kept
		 * is more than needed; an empty header with the id suffices
		 * for clients to stop waiting. */
		uint8_t h[12] = {(uint8_t)(p->id >> 8), (uint8_t)p->id, 0x81, 0x82};
		sendto(n->dns_fd, h, sizeof(h), 0, (struct sockaddr *)&p->client,
		       sizeof(p->client));
	}
	pthread_mutex_unlock(&n->mu);
}
