/* node.c — the node of network "egress": its nftables table, address pool
 * (slots, invariant 1 of net-internal.h), policy generations, and the
 * thread that serves the resolver and reads NFLOG; and the life of a box:
 * attach (veth, then one batch with its sets, chain and map entries),
 * policy changes (one batch), detach (one batch, then the veth). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <nftables/libnftables.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/net/net-internal.h"

static void *node_thread(void *arg)
{
	struct sbn_node *n = arg;
	struct pollfd p[4] = {{n->dns_fd, POLLIN, 0},
			      {n->up_fd, POLLIN, 0},
			      {n->nflog_fd, POLLIN, 0},
			      {n->stop_fd, POLLIN, 0}};
	for (;;) {
		int k = poll(p, 4, 1000);
		if (k < 0 && errno != EINTR)
			break;
		if (p[3].revents)
			break;
		if (p[0].revents)
			resolver_query(n);
		if (p[1].revents)
			resolver_answer(n);
		if (p[2].revents)
			nflog_read(n);
		resolver_expire(n, mono_s());
	}
	return NULL;
}

static int write_file(const char *path, const char *text)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, text, strlen(text)) < 0)
		return -errno;
	return 0;
}

/* Calls fn for each interface of the calling thread's network namespace
 * with its byte counters (/proc/thread-self/net/dev: unlike /sys/class/net,
 * which shows the namespace of whoever mounted /sys, it follows the
 * thread's namespace). Returns 0 or -errno. */
static int for_each_dev(void (*fn)(void *arg, const char *name, uint64_t rx, uint64_t tx),
			void *arg)
{
	FILE *f = fopen("/proc/thread-self/net/dev", "re");
	if (!f)
		return -errno;
	char line[512];
	while (fgets(line, sizeof(line), f)) {
		char *colon = strchr(line, ':'), *name = line;
		unsigned long long v[9];
		if (!colon)
			continue;
		*colon = 0;
		while (*name == ' ')
			name++;
		if (sscanf(colon + 1, "%llu %llu %llu %llu %llu %llu %llu %llu %llu", &v[0], &v[1],
			   &v[2], &v[3], &v[4], &v[5], &v[6], &v[7], &v[8]) == 9)
			fn(arg, name, v[0], v[8]);
	}
	fclose(f);
	return 0;
}

static void drop_stale(void *arg, const char *name, uint64_t rx, uint64_t tx)
{
	unsigned slot;
	char tail;
	if (sscanf(name, SBN_HOST_PREFIX "%u%c", &slot, &tail) != 1)
		return;
	struct sbn_box fake = {0};
	snprintf(fake.ifname, sizeof(fake.ifname), "%s", name);
	link_del(&fake);
}

/* Deletes the host ends a previous daemon left (its sandboxes' veths: with
 * the table replaced they carry nothing any more, and their names are the
 * slots this daemon hands out). */
static void drop_stale_links(void)
{
	(void)for_each_dev(drop_stale, NULL);
}

static int parse_config(struct sbn_node *n, const struct sbn_config *c, char *err, size_t errcap)
{
	if (!c->uplink || !c->uplink[0] || strlen(c->uplink) >= sizeof(n->uplink) ||
	    !if_nametoindex(c->uplink)) {
		snprintf(err, errcap, "uplink '%s': no such interface", c->uplink ?: "");
		return -EINVAL;
	}
	snprintf(n->uplink, sizeof(n->uplink), "%s", c->uplink);
	const char *pool = c->pool ?: "10.213.0.0/16";
	int plen;
	if (parse_cidr(pool, strlen(pool), &n->pool, &plen) < 0 || plen < 8 || plen > 24) {
		snprintf(err, errcap, "pool '%s': an IPv4 CIDR from /8 to /24", pool);
		return -EINVAL;
	}
	n->pool_plen = (uint32_t)plen;
	n->nslots = 1u << (32 - plen - 2);
	char up[64];
	unsigned port = 53;
	snprintf(up, sizeof(up), "%s", c->upstream_dns ?: "");
	char *colon = strchr(up, ':');
	if (colon) {
		*colon = 0;
		port = (unsigned)atoi(colon + 1);
	}
	n->upstream.sin_family = AF_INET;
	n->upstream.sin_port = htons((uint16_t)port);
	if (inet_pton(AF_INET, up, &n->upstream.sin_addr) != 1 || port == 0 || port > 65535) {
		snprintf(err, errcap, "upstream DNS '%s': an IPv4 address[:port]",
			 c->upstream_dns ?: "");
		return -EINVAL;
	}
	if (!c->log_dir) {
		snprintf(err, errcap, "no log directory");
		return -EINVAL;
	}
	if (c->protect) {
		for (const char *s = c->protect; *s; s++)
			if (!strchr("0123456789./:,-tcpud", *s)) {
				snprintf(err, errcap,
					 "protect '%s': CIDR[:tcp|udp:PORT[-PORT]] entries, commas "
					 "between",
					 c->protect);
				return -EINVAL;
			}
		n->protect = strdup(c->protect);
	}
	n->log_dir = strdup(c->log_dir);
	n->resolver_port = c->resolver_port ?: 5353;
	n->nflog_group = c->nflog_group ?: 4219;
	n->log_cap = c->log_cap ?: 4u << 20;
	n->slots = calloc(n->nslots, sizeof(*n->slots));
	return n->log_dir && n->slots ? 0 : -ENOMEM;
}

int sbn_node_new(const struct sbn_config *c, struct sbn_node **ret, char *err, size_t errcap)
{
	struct sbn_node *n = calloc(1, sizeof(*n));
	if (!n)
		return -ENOMEM;
	pthread_mutex_init(&n->mu, NULL);
	n->dns_fd = n->up_fd = n->nflog_fd = n->stop_fd = n->home_net = -1;
	n->next_slot = 1;
	int r = parse_config(n, c, err, errcap);
	if (r == 0 && mkdir(n->log_dir, 0750) < 0 && errno != EEXIST)
		r = -errno, snprintf(err, errcap, "%s: %s", n->log_dir, strerror(errno));
	if (r == 0 && (n->home_net = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC)) < 0)
		r = -errno, snprintf(err, errcap, "own network namespace: %s", strerror(errno));
	if (r == 0)
		drop_stale_links();
	if (r == 0 && !(n->nft = nft_ctx_new(NFT_CTX_DEFAULT)))
		r = -ENOMEM, snprintf(err, errcap, "libnftables: no context");
	if (r == 0) {
		nft_ctx_buffer_error(n->nft);
		nft_ctx_buffer_output(n->nft);
		struct sbuf b = {0};
		rules_node(n, &b);
		r = b.oom ? -ENOMEM : nft_apply(n, b.p, err, errcap);
		free(b.p);
	}
	if (r == 0 && (r = write_file("/proc/sys/net/ipv4/ip_forward", "1")) < 0)
		snprintf(err, errcap, "ip_forward: %s", strerror(-r));
	if (r == 0 && (r = resolver_open(n)) < 0)
		snprintf(err, errcap, "resolver on port %u: %s", n->resolver_port, strerror(-r));
	if (r == 0 && (r = n->nflog_fd = nflog_open(n)) < 0)
		snprintf(err, errcap, "NFLOG group %u: %s", n->nflog_group, strerror(-r));
	if (r >= 0 && (n->stop_fd = eventfd(0, EFD_CLOEXEC)) < 0)
		r = -errno;
	if (r >= 0 && (r = -pthread_create(&n->thread, NULL, node_thread, n)) == 0)
		n->thread_started = true;
	if (r < 0) {
		sbn_node_free(n);
		return r;
	}
	*ret = n;
	return 0;
}

void sbn_node_free(struct sbn_node *n)
{
	if (!n)
		return;
	if (n->thread_started) {
		uint64_t one = 1;
		(void)!write(n->stop_fd, &one, sizeof(one));
		pthread_join(n->thread, NULL);
	}
	/* The table stays: sandboxes outliving the daemon keep their policy
	 * (a removed table would leave their veths unfiltered). The next
	 * daemon replaces it, and refuses everything of veths it did not
	 * attach (no pmap entry: "always:no-policy"). */
	if (n->nft)
		nft_ctx_free(n->nft);
	resolver_close(n);
	if (n->nflog_fd >= 0)
		close(n->nflog_fd);
	if (n->stop_fd >= 0)
		close(n->stop_fd);
	if (n->home_net >= 0)
		close(n->home_net);
	free(n->slots);
	free(n->log_dir);
	free(n->protect);
	pthread_mutex_destroy(&n->mu);
	free(n);
}

struct sbn_box *node_box_by_addr(struct sbn_node *n, uint32_t addr)
{
	uint32_t off = addr - n->pool;
	unsigned s = off >> 2;
	if (s == 0 || s >= n->nslots || (off & 3) != 2)
		return NULL;
	return n->slots[s];
}

struct sbn_box *node_box_by_ifindex(struct sbn_node *n, int ifindex)
{
	for (unsigned s = 1; s < n->nslots; s++)
		if (n->slots[s] && n->slots[s]->ifindex == ifindex)
			return n->slots[s];
	return NULL;
}

/* A free slot, round robin: a slot freed now is taken again last (mu held). */
static unsigned slot_take(struct sbn_node *n, struct sbn_box *bx)
{
	for (unsigned i = 0; i < n->nslots; i++) {
		unsigned s = n->next_slot;
		n->next_slot = n->next_slot + 1 < n->nslots ? n->next_slot + 1 : 1;
		if (s && !n->slots[s]) {
			n->slots[s] = bx;
			return s;
		}
	}
	return 0;
}

int sbn_attach(struct sbn_node *n, const char *id, pid_t pid, struct sbn_policy *p,
	       struct sbn_box **ret, char *err, size_t errcap)
{
	struct sbn_box *bx = calloc(1, sizeof(*bx));
	if (!bx || !p) {
		free(bx);
		sbn_policy_free(p);
		return -ENOMEM;
	}
	bx->node = n;
	bx->policy = p;
	bx->log_fd = -1;
	snprintf(bx->id, sizeof(bx->id), "%s", id);
	pthread_mutex_lock(&n->mu);
	bx->slot = slot_take(n, bx);
	bx->gen = ++n->gen;
	pthread_mutex_unlock(&n->mu);
	if (!bx->slot) {
		snprintf(err, errcap, "the node's address pool is used up (%u sandboxes)",
			 n->nslots - 1);
		sbn_policy_free(p);
		free(bx);
		return -ENOSPC;
	}
	bx->gw = n->pool + 4 * bx->slot + 1;
	bx->addr = bx->gw + 1;
	snprintf(bx->ifname, sizeof(bx->ifname), SBN_HOST_PREFIX "%u", bx->slot);
	int r = netlog_open(bx);
	if (r < 0)
		snprintf(err, errcap, "log of %s: %s", id, strerror(-r));
	if (r == 0)
		r = link_add(bx, pid, n->home_net, err, errcap);
	if (r == 0) {
		struct sbuf b = {0};
		rules_box_add(bx, &b);
		pthread_mutex_lock(&n->mu);
		r = b.oom ? -ENOMEM : nft_apply(n, b.p, err, errcap);
		pthread_mutex_unlock(&n->mu);
		free(b.p);
		if (r < 0)
			link_del(bx);
	}
	if (r < 0) {
		pthread_mutex_lock(&n->mu);
		n->slots[bx->slot] = NULL;
		pthread_mutex_unlock(&n->mu);
		if (bx->log_fd >= 0)
			close(bx->log_fd);
		sbn_policy_free(bx->policy);
		free(bx);
		return r;
	}
	*ret = bx;
	return 0;
}

int sbn_set_policy(struct sbn_box *bx, struct sbn_policy *p, char *err, size_t errcap)
{
	if (!p)
		return -ENOMEM;
	struct sbn_node *n = bx->node;
	pthread_mutex_lock(&n->mu);
	struct sbn_policy *old = bx->policy;
	uint32_t old_gen = bx->gen;
	bx->policy = p;
	bx->gen = ++n->gen;
	struct sbuf b = {0};
	rules_box_policy(bx, &b);
	int r = b.oom ? -ENOMEM : nft_apply(n, b.p, err, errcap);
	free(b.p);
	if (r < 0) { /* nothing changed in the kernel */
		bx->policy = old;
		bx->gen = old_gen;
		old = p;
	}
	pthread_mutex_unlock(&n->mu);
	sbn_policy_free(old);
	return r;
}

const struct sbn_policy *sbn_box_policy(const struct sbn_box *bx)
{
	return bx->policy;
}

void sbn_detach(struct sbn_box *bx)
{
	if (!bx)
		return;
	struct sbn_node *n = bx->node;
	struct sbuf b = {0};
	rules_box_del(bx, &b);
	pthread_mutex_lock(&n->mu);
	if (!b.oom)
		(void)nft_apply(n, b.p, NULL, 0);
	n->slots[bx->slot] = NULL;
	if (bx->log_dropped) {
		char rec[96];
		int k = snprintf(rec, sizeof(rec), "{\"kind\":\"log_full\",\"dropped\":%llu}",
				 (unsigned long long)bx->log_dropped);
		bx->log_bytes = 0; /* this one record goes past the cap */
		netlog_write(bx, rec, (size_t)k);
	}
	pthread_mutex_unlock(&n->mu);
	free(b.p);
	link_del(bx);
	if (bx->log_fd >= 0)
		close(bx->log_fd);
	sbn_policy_free(bx->policy);
	free(bx->grants);
	free(bx);
}

void sbn_box_address(const struct sbn_box *bx, char *addr, char *gateway, size_t cap)
{
	char a[16], g[16];
	ip4str(bx->addr, a);
	ip4str(bx->gw, g);
	snprintf(addr, cap, "%s", a);
	snprintf(gateway, cap, "%s", g);
}

struct bytes_of {
	const char *name;
	uint64_t rx, tx;
	bool found;
};

static void bytes_of(void *arg, const char *name, uint64_t rx, uint64_t tx)
{
	struct bytes_of *b = arg;
	if (!strcmp(name, b->name))
		b->rx = rx, b->tx = tx, b->found = true;
}

int sbn_box_bytes(const struct sbn_box *bx, uint64_t *ret_out, uint64_t *ret_in)
{
	/* The host end's receive counter is what the sandbox sent. */
	struct bytes_of b = {.name = bx->ifname};
	int r = for_each_dev(bytes_of, &b);
	if (r < 0)
		return r;
	if (!b.found)
		return -ENODEV;
	*ret_out = b.rx;
	*ret_in = b.tx;
	return 0;
}
