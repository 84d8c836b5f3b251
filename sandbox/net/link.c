/* link.c — a box's veth pair over rtnetlink: the host end sx<slot> with
 * the gateway address, the other end made directly in the sandbox's
 * network namespace as eth0 with the sandbox's address and a default route
 * through the gateway (a /30 each: invariant 1 of net-internal.h). The
 * namespace's side is configured from a netlink socket opened inside it
 * (this thread enters it with setns for the moment of the socket() call: a
 * netlink socket stays bound to the namespace it was made in). Deleting
 * the host end deletes both, and the namespace is back to lo alone, as the
 * container runtime wants it for reuse (sandbox/container/netns.c). */
#include <errno.h>
#include <fcntl.h>
#include <arpa/inet.h>
#include <linux/if.h>
#include <linux/if_link.h>
#include <linux/if_addr.h>
#include <linux/neighbour.h>
#include <linux/netlink.h>
#include <linux/rtnetlink.h>
#include <linux/veth.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/net/net-internal.h"

struct req {
	struct nlmsghdr h;
	char buf[1024];
};

static void *attr(struct nlmsghdr *h, unsigned short type, const void *data, size_t len)
{
	struct rtattr *a = (struct rtattr *)((char *)h + NLMSG_ALIGN(h->nlmsg_len));
	a->rta_type = type;
	a->rta_len = (unsigned short)RTA_LENGTH(len);
	if (len)
		memcpy(RTA_DATA(a), data, len);
	h->nlmsg_len = NLMSG_ALIGN(h->nlmsg_len) + RTA_ALIGN(a->rta_len);
	return a;
}

static void nest_end(struct nlmsghdr *h, struct rtattr *a)
{
	a->rta_len = (unsigned short)((char *)h + h->nlmsg_len - (char *)a);
}

/* Sends h and waits for its ack. Returns 0 or the kernel's -errno. */
static int talk(int fd, struct nlmsghdr *h)
{
	static const struct sockaddr_nl k = {.nl_family = AF_NETLINK};
	h->nlmsg_flags |= NLM_F_REQUEST | NLM_F_ACK;
	if (sendto(fd, h, h->nlmsg_len, 0, (const struct sockaddr *)&k, sizeof(k)) < 0)
		return -errno;
	char buf[4096];
	for (;;) {
		ssize_t len = recv(fd, buf, sizeof(buf), 0);
		if (len < 0)
			return -errno;
		for (struct nlmsghdr *m = (struct nlmsghdr *)buf; NLMSG_OK(m, (size_t)len);
		     m = NLMSG_NEXT(m, len))
			if (m->nlmsg_type == NLMSG_ERROR)
				return ((struct nlmsgerr *)NLMSG_DATA(m))->error;
	}
}

static int nl_open(void)
{
	int fd = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_ROUTE);
	return fd < 0 ? -errno : fd;
}

static void link_msg(struct req *q, int type, unsigned flags, int ifindex)
{
	memset(q, 0, sizeof(*q));
	q->h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifinfomsg));
	q->h.nlmsg_type = (unsigned short)type;
	q->h.nlmsg_flags = (unsigned short)flags;
	struct ifinfomsg *i = NLMSG_DATA(&q->h);
	i->ifi_family = AF_UNSPEC;
	i->ifi_index = ifindex;
}

static int veth_new(int fd, const char *host, int ns_fd)
{
	struct req q;
	link_msg(&q, RTM_NEWLINK, NLM_F_CREATE | NLM_F_EXCL, 0);
	attr(&q.h, IFLA_IFNAME, host, strlen(host) + 1);
	struct rtattr *li = attr(&q.h, IFLA_LINKINFO, NULL, 0);
	attr(&q.h, IFLA_INFO_KIND, "veth", 4);
	struct rtattr *data = attr(&q.h, IFLA_INFO_DATA, NULL, 0);
	struct rtattr *peer = attr(&q.h, VETH_INFO_PEER, NULL, 0);
	q.h.nlmsg_len += sizeof(struct ifinfomsg); /* the peer's, zeroed */
	attr(&q.h, IFLA_IFNAME, "eth0", 5);
	attr(&q.h, IFLA_NET_NS_FD, &ns_fd, sizeof(ns_fd));
	nest_end(&q.h, peer);
	nest_end(&q.h, data);
	nest_end(&q.h, li);
	return talk(fd, &q.h);
}

static int link_up(int fd, int ifindex)
{
	struct req q;
	link_msg(&q, RTM_NEWLINK, 0, ifindex);
	struct ifinfomsg *i = NLMSG_DATA(&q.h);
	i->ifi_flags = i->ifi_change = IFF_UP;
	return talk(fd, &q.h);
}

static int addr_add(int fd, int ifindex, uint32_t addr, uint32_t peer)
{
	struct req q;
	memset(&q, 0, sizeof(q));
	q.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct ifaddrmsg));
	q.h.nlmsg_type = RTM_NEWADDR;
	q.h.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	struct ifaddrmsg *a = NLMSG_DATA(&q.h);
	a->ifa_family = AF_INET;
	a->ifa_prefixlen = 30;
	a->ifa_index = (unsigned)ifindex;
	uint32_t be = htonl(addr), bc = htonl((addr & ~3u) | 3u);
	(void)peer;
	attr(&q.h, IFA_LOCAL, &be, 4);
	attr(&q.h, IFA_ADDRESS, &be, 4);
	attr(&q.h, IFA_BROADCAST, &bc, 4);
	return talk(fd, &q.h);
}

static int route_default(int fd, int ifindex, uint32_t gw)
{
	struct req q;
	memset(&q, 0, sizeof(q));
	q.h.nlmsg_len = NLMSG_LENGTH(sizeof(struct rtmsg));
	q.h.nlmsg_type = RTM_NEWROUTE;
	q.h.nlmsg_flags = NLM_F_CREATE | NLM_F_EXCL;
	struct rtmsg *r = NLMSG_DATA(&q.h);
	r->rtm_family = AF_INET;
	r->rtm_table = RT_TABLE_MAIN;
	r->rtm_protocol = RTPROT_BOOT;
	r->rtm_scope = RT_SCOPE_UNIVERSE;
	r->rtm_type = RTN_UNICAST;
	uint32_t be = htonl(gw);
	attr(&q.h, RTA_GATEWAY, &be, 4);
	attr(&q.h, RTA_OIF, &ifindex, sizeof(ifindex));
	return talk(fd, &q.h);
}

/* A netlink socket of the network namespace ns_fd. */
static int nl_open_in(int ns_fd, int home_net)
{
	if (setns(ns_fd, CLONE_NEWNET) < 0)
		return -errno;
	int fd = nl_open();
	/* As root this cannot fail; if it did this thread would stay in the
	 * sandbox's namespace, so it is fatal to the attach either way. */
	if (setns(home_net, CLONE_NEWNET) < 0) {
		if (fd >= 0)
			close(fd);
		return -errno;
	}
	return fd;
}

/* The index of interface name, through fd's namespace. */
static int ifindex_of(int fd, const char *name)
{
	struct req q;
	link_msg(&q, RTM_GETLINK, 0, 0);
	attr(&q.h, IFLA_IFNAME, name, strlen(name) + 1);
	q.h.nlmsg_flags = NLM_F_REQUEST;
	static const struct sockaddr_nl k = {.nl_family = AF_NETLINK};
	if (sendto(fd, &q.h, q.h.nlmsg_len, 0, (const struct sockaddr *)&k, sizeof(k)) < 0)
		return -errno;
	char buf[8192];
	ssize_t len = recv(fd, buf, sizeof(buf), 0);
	if (len < 0)
		return -errno;
	struct nlmsghdr *m = (struct nlmsghdr *)buf;
	if (!NLMSG_OK(m, (size_t)len))
		return -EIO;
	if (m->nlmsg_type == NLMSG_ERROR)
		return ((struct nlmsgerr *)NLMSG_DATA(m))->error ?: -EIO;
	return ((struct ifinfomsg *)NLMSG_DATA(m))->ifi_index;
}

int link_add(struct sbn_box *bx, pid_t pid, int home_net, char *err, size_t errcap)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pid);
	_cleanup_close_ int ns = open(p, O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int host = nl_open();
	if (ns < 0 || host < 0) {
		snprintf(err, errcap, "%s: %s", ns < 0 ? p : "netlink", strerror(errno));
		return -errno;
	}
	const char *step = "veth";
	int r = veth_new(host, bx->ifname, ns);
	if (r == 0) {
		step = "host end";
		r = bx->ifindex = ifindex_of(host, bx->ifname);
	}
	if (r > 0)
		r = addr_add(host, bx->ifindex, bx->gw, bx->addr);
	if (r == 0)
		r = link_up(host, bx->ifindex);
	int in = -1;
	if (r == 0) {
		step = "sandbox end";
		r = in = nl_open_in(ns, home_net);
	}
	int eth = r >= 0 ? ifindex_of(in, "eth0") : r;
	r = eth;
	if (r > 0)
		r = addr_add(in, eth, bx->addr, bx->gw);
	if (r == 0)
		r = link_up(in, eth);
	if (r == 0)
		r = route_default(in, eth, bx->gw);
	if (in >= 0)
		close(in);
	if (r < 0) {
		snprintf(err, errcap, "%s %s: %s", step, bx->ifname, strerror(-r));
		link_del(bx);
	}
	return r < 0 ? r : 0;
}

void link_del(const struct sbn_box *bx)
{
	_cleanup_close_ int fd = nl_open();
	if (fd < 0)
		return;
	struct req q;
	link_msg(&q, RTM_DELLINK, 0, 0);
	attr(&q.h, IFLA_IFNAME, bx->ifname, strlen(bx->ifname) + 1);
	(void)talk(fd, &q.h);
}
