/* netns.c — the chunkservers of a multi-node home as separate hosts on this
 * machine: each in its own network namespace with its own address on a veth
 * pair to a bridge in the root namespace, where strata-meta (listening on
 * the bridge's address), strata-fuse and strata-sandboxd stay. The same
 * recipe as tests/replication/netns.sh, in other names and another /16:
 *
 *   bridge  stu<tag>br                         10.78.Y.1/24
 *   node i  netns strata-<tag>-cs<i>, veth stu<tag>c<i> on the bridge,
 *           its peer eth0 inside the namespace 10.78.Y.(10+i)/24
 *
 * tag is 8 hex digits of a hash of the home's path, so two homes never share
 * a name; Y is picked once per home among the /24s that no interface address
 * or route of this machine overlaps (under a lock, so that parallel `up`s
 * pick different ones) and is kept in H/run/net for the next `up`.
 * The replication tests use strn*, strbr*, strv* and 10.77.*: no clash.
 *
 * Nothing leaves the machine: the /24 is on-link only, no forwarding is
 * enabled, no NAT, no default route inside the namespaces.
 *
 * Each node's namespace uses TCP reno (NODE_CC), like tests/replication/
 * netns.sh: the machine's default may pace (bbr, on the VM this was measured
 * on), which costs a forwarding chunkserver about a quarter of its CPU in
 * hrtimer work that hosts on a real network would not see at that scale
 * (chunkserver/README.md "What a replicated write costs"). Only the node
 * namespaces are changed; a kernel that refuses it keeps its default (logged
 * in net.log, not an error).
 *
 * Invariants:
 *  1. H/run/net lists every bridge, namespace and veth of this home before it
 *     is created (so a crash in between leaves nothing `down` cannot find),
 *     and `down` deletes exactly what it lists.
 *  2. A bridge of our name that exists but is not listed there is not ours:
 *     it is never used nor deleted.
 *  3. cli_net_up is idempotent: it creates what is missing and re-applies
 *     addresses and link state (`ip addr replace`, `ip link set up`).
 *
 * `ip` (iproute2) does the work, one fork/exec per step; its stderr goes to
 * H/log/net.log after a "+ ip ..." line, and the last line of that log is the
 * error reported. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <ifaddrs.h>
#include <inttypes.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/wait.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "tools/cli.h"

#define NET_A 10 /* 10.78.Y.0/24 */
#define NET_B 78
#define NETNS_DIR "/run/netns" /* where `ip netns add` binds them */
#define NET_LOCK "/run/strata-net.lock"
#define NSFS_MAGIC 0x6e736673
#define NODE_HOST_BASE 10 /* node i is .(10+i) */
#define NODE_CC "reno"	  /* TCP congestion control inside the node namespaces */

/* ---- names ------------------------------------------------------------------ */

char *cli_net_ns_name(const struct cli_net *n, int node, char *buf, size_t cap)
{
	snprintf(buf, cap, "strata-%s-cs%d", n->tag, node);
	return buf;
}

char *cli_net_ns_path(const struct cli_net *n, int node, char *buf, size_t cap)
{
	char name[64];
	snprintf(buf, cap, NETNS_DIR "/%s", cli_net_ns_name(n, node, name, sizeof(name)));
	return buf;
}

static char *veth_name(const struct cli_net *n, int node, char *buf, size_t cap)
{
	snprintf(buf, cap, "stu%sc%d", n->tag, node); /* at most 14 < IFNAMSIZ */
	return buf;
}

char *cli_net_ip(const struct cli_net *n, int node, char *buf, size_t cap)
{
	snprintf(buf, cap, "%d.%d.%d.%d", NET_A, NET_B, n->subnet,
		 node == 0 ? 1 : NODE_HOST_BASE + node);
	return buf;
}

static bool link_exists(const char *ifname)
{
	char p[64];
	snprintf(p, sizeof(p), "/sys/class/net/%s", ifname);
	return access(p, F_OK) == 0;
}

bool cli_net_ns_exists(const struct cli_net *n, int node)
{
	char p[128];
	struct statfs sfs;
	return statfs(cli_net_ns_path(n, node, p, sizeof(p)), &sfs) == 0 &&
	       sfs.f_type == NSFS_MAGIC;
}

bool cli_net_pid_in(const struct cli_net *n, int node, pid_t pid)
{
	char self[64], ns[128];
	struct stat a, b;

	snprintf(self, sizeof(self), "/proc/%d/ns/net", (int)pid);
	return stat(self, &a) == 0 && stat(cli_net_ns_path(n, node, ns, sizeof(ns)), &b) == 0 &&
	       a.st_ino == b.st_ino && a.st_dev == b.st_dev;
}

/* ---- H/run/net ------------------------------------------------------------------ */

/* Lines "key=value": subnet=10.78.Y.0/24, then bridge=, netns=, veth= for
 * what exists (or is about to). */
static char *record_path(const struct cli_home *h, char *buf)
{
	return cli_path(buf, h, "run/net");
}

void cli_net_load(const struct cli_home *h, struct cli_net *ret)
{
	char path[CLI_PATH], line[256];
	uint32_t x = 2166136261u; /* FNV-1a of the home's path */
	FILE *f;

	memset(ret, 0, sizeof(*ret));
	for (const char *p = h->home; *p; p++)
		x = (x ^ (unsigned char)*p) * 16777619u;
	snprintf(ret->tag, sizeof(ret->tag), "%08" PRIx32, x);
	snprintf(ret->bridge, sizeof(ret->bridge), "stu%sbr", ret->tag);
	f = fopen(record_path(h, path), "re");
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		int a, b, y;
		if (sscanf(line, "subnet=%d.%d.%d.0/24", &a, &b, &y) == 3 && a == NET_A &&
		    b == NET_B && y >= 1 && y <= 254)
			ret->subnet = y;
		else if (!strncmp(line, "bridge=", 7))
			ret->created = true;
	}
	fclose(f);
	ret->on = ret->created && ret->subnet && link_exists(ret->bridge);
}

/* Writes the record: the subnet, and with nodes > 0 every name of them. */
static int record_write(const struct cli_home *h, const struct cli_net *n, int nodes)
{
	char path[CLI_PATH], text[64 * (2 * CLI_MAX_NODES + 4)], name[64];
	size_t len = 0;

	len += (size_t)snprintf(text + len, sizeof(text) - len, "subnet=%d.%d.%d.0/24\n", NET_A,
				NET_B, n->subnet);
	if (nodes > 0)
		len += (size_t)snprintf(text + len, sizeof(text) - len, "bridge=%s\n", n->bridge);
	for (int i = 1; i <= nodes; i++) {
		len += (size_t)snprintf(text + len, sizeof(text) - len, "netns=%s\n",
					cli_net_ns_name(n, i, name, sizeof(name)));
		len += (size_t)snprintf(text + len, sizeof(text) - len, "veth=%s\n",
					veth_name(n, i, name, sizeof(name)));
	}
	return cli_write_file(record_path(h, path), text);
}

/* ---- running ip ------------------------------------------------------------------ */

static bool find_ip(char *buf, size_t cap)
{
	static const char *const dirs[] = {"/usr/sbin", "/sbin", "/usr/bin", "/bin"};
	const char *path = getenv("PATH");
	char copy[CLI_PATH], *save = NULL;

	snprintf(copy, sizeof(copy), "%s", path ? path : "");
	for (char *d = strtok_r(copy, ":", &save); d; d = strtok_r(NULL, ":", &save)) {
		snprintf(buf, cap, "%s/ip", d);
		if (d[0] == '/' && access(buf, X_OK) == 0)
			return true;
	}
	for (size_t i = 0; i < sizeof(dirs) / sizeof(dirs[0]); i++) {
		snprintf(buf, cap, "%s/ip", dirs[i]);
		if (access(buf, X_OK) == 0)
			return true;
	}
	return false;
}

/* Runs `ip ARGS...` (NULL-terminated), its stderr appended to H/log/net.log.
 * Returns 0, or -EIO with n->err = the command and ip's last line. */
static int __attribute__((sentinel)) ip(const struct cli_home *h, struct cli_net *n, ...)
{
	char bin[CLI_PATH], log[CLI_PATH], cmd[512] = "ip", last[256];
	char *argv[16];
	int a = 0, status = 0;
	va_list ap;
	pid_t pid;

	if (!find_ip(bin, sizeof(bin))) {
		snprintf(n->err, sizeof(n->err), "no ip command (install iproute2)");
		return -ENOENT;
	}
	argv[a++] = bin;
	va_start(ap, n);
	for (char *s; a < 15 && (s = va_arg(ap, char *));) {
		size_t len = strlen(cmd);
		argv[a++] = s;
		snprintf(cmd + len, sizeof(cmd) - len, " %s", s);
	}
	va_end(ap);
	argv[a] = NULL;

	/* The command first, so the log reads as a transcript. */
	FILE *f = fopen(cli_path(log, h, "log/net.log"), "ae");
	if (f) {
		fprintf(f, "+ %s\n", cmd);
		fclose(f);
	}
	pid = cli_spawn(argv, log);
	if (pid < 0) {
		snprintf(n->err, sizeof(n->err), "%s: %s", cmd, strerror((int)-pid));
		return (int)pid;
	}
	while (waitpid(pid, &status, 0) < 0 && errno == EINTR)
		;
	if (WIFEXITED(status) && WEXITSTATUS(status) == 0)
		return 0;
	cli_last_line(log, last, sizeof(last));
	snprintf(n->err, sizeof(n->err), "%s: %s", cmd, last);
	return -EIO;
}

int cli_net_usable(char *why, size_t cap)
{
	char bin[CLI_PATH];

	if (geteuid() != 0) {
		snprintf(why, cap, "not root (network namespaces need CAP_NET_ADMIN)");
		return -EPERM;
	}
	if (!find_ip(bin, sizeof(bin))) {
		snprintf(why, cap, "no ip command (install iproute2)");
		return -ENOENT;
	}
	if (access("/proc/self/ns/net", F_OK) != 0) {
		snprintf(why, cap, "this kernel has no network namespaces");
		return -EOPNOTSUPP;
	}
	return 0;
}

/* ---- the subnet ------------------------------------------------------------------ */

/* True if a.b.c.d/prefix (host order addr and mask) overlaps 10.78.y.0/24:
 * they overlap if they agree on the shorter of the two prefixes. */
static bool overlaps(uint32_t addr, uint32_t mask, int y)
{
	uint32_t net = ((uint32_t)NET_A << 24) | ((uint32_t)NET_B << 16) | ((uint32_t)y << 8);
	uint32_t m = mask & 0xffffff00u;
	return (addr & m) == (net & m);
}

/* True if no address of an interface but our bridge, and no route but the
 * default one or via our bridge, overlaps 10.78.y.0/24. */
static bool subnet_free(const struct cli_net *n, int y)
{
	struct ifaddrs *ifs = NULL;
	bool free_ = true;
	char line[256];

	if (getifaddrs(&ifs) == 0) {
		for (struct ifaddrs *i = ifs; i && free_; i = i->ifa_next) {
			if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET || !i->ifa_netmask ||
			    !strcmp(i->ifa_name, n->bridge))
				continue;
			uint32_t a =
			    ntohl(((struct sockaddr_in *)(void *)i->ifa_addr)->sin_addr.s_addr);
			uint32_t m =
			    ntohl(((struct sockaddr_in *)(void *)i->ifa_netmask)->sin_addr.s_addr);
			free_ = !overlaps(a, m, y);
		}
		freeifaddrs(ifs);
	}
	/* Iface Destination Gateway Flags RefCnt Use Metric Mask ... (hex, raw s_addr) */
	FILE *f = fopen("/proc/net/route", "re");
	while (f && free_ && fgets(line, sizeof(line), f)) {
		char ifname[32];
		unsigned dst, mask;
		if (sscanf(line, "%31s %x %*x %*x %*d %*d %*d %x", ifname, &dst, &mask) != 3 ||
		    mask == 0 || !strcmp(ifname, n->bridge))
			continue;
		free_ = !overlaps(ntohl(dst), ntohl(mask), y);
	}
	if (f)
		fclose(f);
	return free_;
}

/* Keeps the recorded subnet if it is still free, else picks one from the
 * tag on. Called under NET_LOCK. */
static int pick_subnet(struct cli_net *n)
{
	unsigned start = (unsigned)strtoul(n->tag, NULL, 16) % 254;

	if (n->subnet && subnet_free(n, n->subnet))
		return 0;
	for (unsigned k = 0; k < 254; k++) {
		int y = (int)((start + k) % 254) + 1;
		if (subnet_free(n, y)) {
			n->subnet = y;
			return 0;
		}
	}
	snprintf(n->err, sizeof(n->err), "no free %d.%d.Y.0/24 on this machine", NET_A, NET_B);
	return -EADDRNOTAVAIL;
}

/* ---- up -------------------------------------------------------------------------- */

/* The bridge with its address, up; the subnet chosen and recorded. Under a
 * lock: the address on the bridge is what other `up`s see as taken. If the
 * recorded subnet got taken meanwhile, the bridge's old address goes. */
static int bridge_up(const struct cli_home *h, struct cli_net *n)
{
	char addr[24], cidr[32];
	int old = n->subnet, r;

	_cleanup_close_ int lock = open(NET_LOCK, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	if (lock < 0 || flock(lock, LOCK_EX) < 0) {
		r = -errno;
		snprintf(n->err, sizeof(n->err), "cannot lock %s: %s", NET_LOCK, strerror(-r));
		return r;
	}
	if (link_exists(n->bridge) && !n->created) {
		snprintf(n->err, sizeof(n->err), "a bridge %s exists that this home did not create",
			 n->bridge);
		return -EEXIST;
	}
	if ((r = pick_subnet(n)) < 0)
		return r;
	if ((r = record_write(h, n, h->nodes)) < 0) {
		snprintf(n->err, sizeof(n->err), "cannot write %s/run/net: %s", h->home,
			 strerror(-r));
		return r;
	}
	n->created = true;
	if (!link_exists(n->bridge)) {
		if ((r = ip(h, n, "link", "add", n->bridge, "type", "bridge", NULL)) < 0)
			return r;
	} else if (old != n->subnet &&
		   (r = ip(h, n, "addr", "flush", "dev", n->bridge, NULL)) < 0) {
		return r;
	}
	snprintf(cidr, sizeof(cidr), "%s/24", cli_net_ip(n, 0, addr, sizeof(addr)));
	if ((r = ip(h, n, "addr", "replace", cidr, "dev", n->bridge, NULL)) < 0)
		return r;
	return ip(h, n, "link", "set", n->bridge, "up", NULL);
}

/* Node i's namespace and veth, created if missing (a namespace made afresh
 * gets a fresh veth pair: an old host side leads nowhere), then configured;
 * renumber: the subnet changed, the old address goes. */
static int node_up(const struct cli_home *h, struct cli_net *n, int i, bool renumber)
{
	char ns[64], path[128], veth[16], addr[24], cidr[32];
	bool fresh = !cli_net_ns_exists(n, i);
	int r;

	cli_net_ns_name(n, i, ns, sizeof(ns));
	veth_name(n, i, veth, sizeof(veth));
	if (fresh) {
		unlink(cli_net_ns_path(n, i, path, sizeof(path))); /* an unmounted leftover */
		if ((r = ip(h, n, "netns", "add", ns, NULL)) < 0)
			return r;
	}
	if (fresh || !link_exists(veth)) {
		if (link_exists(veth) && (r = ip(h, n, "link", "del", veth, NULL)) < 0)
			return r;
		if ((r = ip(h, n, "link", "add", veth, "type", "veth", "peer", "name", "eth0",
			    "netns", ns, NULL)) < 0)
			return r;
	} else if (renumber && (r = ip(h, n, "-n", ns, "addr", "flush", "dev", "eth0", NULL)) < 0) {
		return r;
	}
	snprintf(cidr, sizeof(cidr), "%s/24", cli_net_ip(n, i, addr, sizeof(addr)));
	if ((r = ip(h, n, "link", "set", veth, "master", n->bridge, "up", NULL)) < 0 ||
	    (r = ip(h, n, "-n", ns, "link", "set", "lo", "up", NULL)) < 0 ||
	    (r = ip(h, n, "-n", ns, "addr", "replace", cidr, "dev", "eth0", NULL)) < 0 ||
	    (r = ip(h, n, "-n", ns, "link", "set", "eth0", "up", NULL)) < 0)
		return r;
	/* best effort: a refusal only keeps the kernel's default */
	ip(h, n, "netns", "exec", ns, "sh", "-c",
	   "echo " NODE_CC " >/proc/sys/net/ipv4/tcp_congestion_control", NULL);
	n->err[0] = '\0';
	return 0;
}

int cli_net_up(const struct cli_home *h, struct cli_net *n)
{
	int old = n->subnet, r;

	n->on = false;
	if ((r = bridge_up(h, n)) < 0)
		return r;
	for (int i = 1; i <= h->nodes; i++)
		if ((r = node_up(h, n, i, old && old != n->subnet)) < 0)
			return r;
	n->on = true;
	return 0;
}

/* ---- down ------------------------------------------------------------------------ */

/* Deletes one recorded object if it is there. Returns 1, 0 or -errno. */
static int delete_one(const struct cli_home *h, struct cli_net *n, const char *key,
		      const char *name)
{
	char path[128];
	struct statfs sfs;
	int r;

	if (!strcmp(key, "netns")) {
		snprintf(path, sizeof(path), NETNS_DIR "/%s", name);
		if (statfs(path, &sfs) < 0 || sfs.f_type != NSFS_MAGIC)
			return unlink(path) == 0 ? 1 : 0; /* gone, or a leftover file */
		r = ip(h, n, "netns", "del", name, NULL);
	} else {
		/* A veth usually went with its namespace; a bridge is a link too. */
		if (!link_exists(name))
			return 0;
		r = ip(h, n, "link", "del", name, NULL);
		/* The kernel tears a deleted namespace down asynchronously: its
		 * veth can vanish between the check and the delete. Gone is
		 * what was wanted. */
		if (r < 0 && !link_exists(name)) {
			n->err[0] = '\0';
			return 0;
		}
	}
	return r < 0 ? r : 1;
}

int cli_net_down(const struct cli_home *h, struct cli_net *n)
{
	/* Namespaces first (their eth0 takes the host's veth with it), then
	 * what is left of the veths, then the bridge. */
	static const char *const order[] = {"netns", "veth", "bridge"};
	char path[CLI_PATH], line[256];
	int count = 0, failed = 0;

	for (size_t k = 0; k < sizeof(order) / sizeof(order[0]); k++) {
		FILE *f = fopen(record_path(h, path), "re");
		size_t kl = strlen(order[k]);
		while (f && fgets(line, sizeof(line), f)) {
			line[strcspn(line, "\n")] = '\0';
			if (strncmp(line, order[k], kl) || line[kl] != '=' || !line[kl + 1])
				continue;
			int r = delete_one(h, n, order[k], line + kl + 1);
			if (r < 0)
				failed = r;
			else
				count += r;
		}
		if (f)
			fclose(f);
	}
	if (failed)
		return failed; /* the record stays: the next `down` tries again */
	n->created = n->on = false;
	if (n->subnet)
		record_write(h, n, 0); /* the subnet, for the next `up` */
	else
		unlink(path);
	return count;
}
