/* nflog.c — connections' verdicts, read back from NFLOG. Every deciding
 * rule of the ruleset logs the packet it decides on to the node's NFLOG
 * group with the prefix "<verdict> <rule>" (rules.c); the kernel sends its
 * first bytes over nfnetlink, and this file turns each into a record of the
 * box whose veth it came in by (NFULA_IFINDEX_INDEV): destination, port,
 * protocol, the name a DNS answer gave for that address, verdict, rule.
 * Why NFLOG rather than counters read back: a counter says how many, not
 * to where, and a log must name the destination and the rule; NFLOG is
 * asynchronous (the packet does not wait for us) and, with only the first
 * 48 bytes copied, cheap. A verdict is logged once per connection (the ct
 * mark stops later packets before the logging rules), plus each refused
 * packet (a refused connection sends one SYN, a retrying client several). */
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netfilter/nfnetlink_log.h>
#include <linux/netlink.h>
#include <netinet/ip.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/json.h"
#include "sandbox/net/net-internal.h"

static int cfg_cmd(int fd, uint16_t group, uint16_t family, const void *a, uint16_t atype,
		   size_t alen)
{
	struct {
		struct nlmsghdr h;
		struct nfgenmsg g;
		char buf[64];
	} q;
	memset(&q, 0, sizeof(q));
	q.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct nfgenmsg));
	q.h.nlmsg_type = (NFNL_SUBSYS_ULOG << 8) | NFULNL_MSG_CONFIG;
	q.h.nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK;
	q.g.nfgen_family = (uint8_t)family;
	q.g.version = NFNETLINK_V0;
	q.g.res_id = htons(group);
	struct nlattr *na = (struct nlattr *)((char *)&q + NLMSG_ALIGN(q.h.nlmsg_len));
	na->nla_type = atype;
	na->nla_len = (uint16_t)(NLA_HDRLEN + alen);
	memcpy((char *)na + NLA_HDRLEN, a, alen);
	q.h.nlmsg_len = NLMSG_ALIGN(q.h.nlmsg_len) + NLA_ALIGN(na->nla_len);
	struct sockaddr_nl k = {.nl_family = AF_NETLINK};
	if (sendto(fd, &q, q.h.nlmsg_len, 0, (struct sockaddr *)&k, sizeof(k)) < 0)
		return -errno;
	char buf[512];
	ssize_t len = recv(fd, buf, sizeof(buf), 0);
	if (len < 0)
		return -errno;
	struct nlmsghdr *m = (struct nlmsghdr *)buf;
	if (NLMSG_OK(m, (size_t)len) && m->nlmsg_type == NLMSG_ERROR)
		return ((struct nlmsgerr *)NLMSG_DATA(m))->error;
	return 0;
}

int nflog_open(struct sbn_node *n)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
	if (fd < 0)
		return -errno;
	struct nfulnl_msg_config_cmd bind = {.command = NFULNL_CFG_CMD_BIND};
	struct nfulnl_msg_config_mode mode = {.copy_range = htonl(48),
					      .copy_mode = NFULNL_COPY_PACKET};
	int r = cfg_cmd(fd, n->nflog_group, AF_UNSPEC, &bind, NFULA_CFG_CMD, sizeof(bind));
	if (r == 0)
		r = cfg_cmd(fd, n->nflog_group, AF_UNSPEC, &mode, NFULA_CFG_MODE, sizeof(mode));
	int big = 1 << 20;
	setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof(big));
	if (r < 0) {
		close(fd);
		return r;
	}
	return fd;
}

/* A record of one logged packet (mu held). */
static void record(struct sbn_node *n, int indev, const char *prefix, const uint8_t *pkt,
		   size_t len)
{
	struct sbn_box *bx = node_box_by_ifindex(n, indev);
	if (!bx || len < sizeof(struct iphdr))
		return;
	const struct iphdr *ip = (const struct iphdr *)pkt;
	if (ip->version != 4)
		return;
	size_t hl = (size_t)ip->ihl * 4;
	uint32_t dst = ntohl(ip->daddr);
	int port = -1;
	const char *proto = ip->protocol == IPPROTO_TCP	   ? "tcp"
			    : ip->protocol == IPPROTO_UDP  ? "udp"
			    : ip->protocol == IPPROTO_ICMP ? "icmp"
							   : "other";
	if ((ip->protocol == IPPROTO_TCP || ip->protocol == IPPROTO_UDP) && len >= hl + 4)
		port = pkt[hl + 2] << 8 | pkt[hl + 3];
	char d[16], verdict[8] = "";
	ip4str(dst, d);
	const char *rule = strchr(prefix, ' ');
	snprintf(verdict, sizeof(verdict), "%.*s", rule ? (int)(rule - prefix) : 0, prefix);
	rule = rule ? rule + 1 : prefix;
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "kind", "connect");
	jw_kstr(&w, "proto", proto);
	jw_kstr(&w, "dst", d);
	if (port >= 0)
		jw_kint(&w, "port", port);
	const char *name = grant_name(bx, dst);
	if (name)
		jw_kstr(&w, "name", name);
	jw_kstr(&w, "verdict", verdict);
	jw_kstr(&w, "rule", rule);
	jw_obj_end(&w);
	size_t rl;
	char *rec = jw_take(&w, &rl);
	if (rec)
		netlog_write(bx, rec, rl);
	free(rec);
}

void nflog_read(struct sbn_node *n)
{
	char buf[65536];
	for (;;) {
		ssize_t len = recv(n->nflog_fd, buf, sizeof(buf), MSG_DONTWAIT);
		if (len <= 0)
			return;
		for (struct nlmsghdr *m = (struct nlmsghdr *)buf; NLMSG_OK(m, (size_t)len);
		     m = NLMSG_NEXT(m, len)) {
			if ((m->nlmsg_type & 0xff) != NFULNL_MSG_PACKET ||
			    (m->nlmsg_type >> 8) != NFNL_SUBSYS_ULOG)
				continue;
			char prefix[128] = "";
			const uint8_t *pkt = NULL;
			size_t plen = 0;
			int indev = 0;
			size_t off = NLMSG_ALIGN(sizeof(struct nfgenmsg));
			size_t end = m->nlmsg_len - NLMSG_HDRLEN;
			const char *base = NLMSG_DATA(m);
			while (off + NLA_HDRLEN <= end) {
				const struct nlattr *a = (const struct nlattr *)(base + off);
				if (a->nla_len < NLA_HDRLEN || off + a->nla_len > end)
					break;
				const char *v = (const char *)a + NLA_HDRLEN;
				size_t vl = a->nla_len - NLA_HDRLEN;
				switch (a->nla_type & NLA_TYPE_MASK) {
				case NFULA_PREFIX:
					snprintf(prefix, sizeof(prefix), "%.*s", (int)vl, v);
					break;
				case NFULA_IFINDEX_INDEV:
					if (vl >= 4) {
						uint32_t x;
						memcpy(&x, v, 4);
						indev = (int)ntohl(x);
					}
					break;
				case NFULA_PAYLOAD:
					pkt = (const uint8_t *)v;
					plen = vl;
					break;
				}
				off += NLA_ALIGN(a->nla_len);
			}
			if (pkt) {
				pthread_mutex_lock(&n->mu);
				record(n, indev, prefix, pkt, plen);
				pthread_mutex_unlock(&n->mu);
			}
		}
	}
}
