/* netns.c — network namespaces for network "none": loopback only, up.
 *
 * Making a network namespace is the largest single kernel cost of a sandbox
 * (setup_net runs every per-net subsystem's init: loopback registration,
 * sysctl tables, proc and sysfs entries; cleanup_net undoes it all in a
 * kworker), so the runtime reuses them: when a sandbox with network "none"
 * is destroyed and all its processes are gone, its namespace goes back to a
 * spare list (runtime.c) if netns_recyclable says it holds nothing of the
 * old sandbox, and the next staging joins it with setns instead of
 * clone(CLONE_NEWNET).
 *
 * What a sandbox could have left in its namespace, and why the check is
 * enough:
 *   - configuration (links, addresses, routes, rules, netfilter, qdiscs,
 *     netns ids): needs CAP_NET_ADMIN, which a sandbox never has (not in its
 *     bounding set, no_new_privs; seccomp.c sbx_caps_keep); sysctls: /proc/sys
 *     is read-only inside. Checked anyway: exactly one interface, lo, with
 *     the flags we set.
 *   - sockets, including orphaned TCP sockets, sockets in flight in
 *     SCM_RIGHTS messages and sockets passed to some other process: every
 *     user socket counts in "sockets: used" of /proc/net/sockstat of its
 *     namespace until it is freed; TIME_WAIT sockets count in "tw". Both
 *     must be 0 (a sandbox that made TCP connections on lo leaves TIME_WAIT
 *     sockets for 60 s: its namespace is then simply not reused).
 *   - IP fragments awaiting reassembly (FRAG, FRAG6 inuse/memory 0) and
 *     IPv6 flow labels, which linger after their socket (ip6_flowlabel empty).
 * What does carry over: cumulative statistics (lo's packet and byte
 * counters, the SNMP MIBs in /proc/net/snmp, netstat, snmp6) and the
 * namespace's inode number. A sandbox can thus learn how much loopback
 * traffic earlier sandboxes made, nothing of its content or endpoints.
 * Runtimes that must not allow even that set sbx_runtime_config.fresh_netns. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox-internal.h"

#define LO_FLAGS (IFF_UP | IFF_LOOPBACK | IFF_RUNNING)

int netns_lo_up(void)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	if (s < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return -errno;
	return 0;
}

int netns_open(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

/* Reads a small /proc file of the calling thread's network namespace. */
static ssize_t read_net(const char *name, char *buf, size_t cap)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/thread-self/net/%s", name);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = read(fd, buf, cap - 1);
	if (n < 0)
		return -errno;
	buf[n] = 0;
	return n;
}

/* The number after key in a /proc/net table ("TCP: inuse 0 orphan 0 tw 0"),
 * or -1. */
static long field(const char *text, const char *line, const char *key)
{
	const char *l = strstr(text, line);
	const char *eol = l ? strchr(l, '\n') : NULL;
	const char *k = l ? strstr(l, key) : NULL;
	long v = -1;
	if (!k || (eol && k > eol) || sscanf(k + strlen(key), " %ld", &v) != 1)
		return -1;
	return v;
}

static size_t count_lines(const char *s)
{
	size_t n = 0;
	for (; *s; s++)
		n += *s == '\n';
	return n;
}

/* The checks of netns_recyclable, in the namespace (the calling thread). */
static bool empty_here(void)
{
	char buf[4096];
	if (read_net("sockstat", buf, sizeof(buf)) <= 0 ||
	    field(buf, "sockets:", "used") != 0 || field(buf, "TCP:", "inuse") != 0 ||
	    field(buf, "TCP:", "tw") != 0 || field(buf, "FRAG:", "inuse") != 0 ||
	    field(buf, "FRAG:", "memory") != 0)
		return false;
	ssize_t n = read_net("sockstat6", buf, sizeof(buf)); /* absent without IPv6 */
	if (n == 0 || (n > 0 && (field(buf, "FRAG6:", "inuse") != 0 ||
				 field(buf, "FRAG6:", "memory") != 0)))
		return false;
	n = read_net("ip6_flowlabel", buf, sizeof(buf)); /* header line only */
	if (n == 0 || (n > 0 && count_lines(buf) != 1))
		return false;
	/* Two header lines and lo. */
	if (read_net("dev", buf, sizeof(buf)) <= 0 || count_lines(buf) != 3 ||
	    !strstr(buf, " lo:"))
		return false;
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	return s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 &&
	       (ifr.ifr_flags & (LO_FLAGS | IFF_PROMISC | IFF_NOARP | IFF_ALLMULTI)) == LO_FLAGS;
}

bool netns_recyclable(int fd)
{
	_cleanup_close_ int orig = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (orig < 0 || setns(fd, CLONE_NEWNET) < 0)
		return false;
	bool ok = empty_here();
	/* Cannot fail as root; if it did, this thread would stay in the
	 * namespace, which is then not handed out again (the thread only
	 * stages sandboxes, which make or join their own). */
	if (setns(orig, CLONE_NEWNET) < 0)
		return false;
	return ok;
}
