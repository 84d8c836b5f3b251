/* sbx_probe.c — a static helper copied into the test rootfs as /bin/probe.
 * Each sub-command tries one thing a sandbox must not be able to do and
 * exits 0 if it was refused, 1 if it worked (a containment failure), 2 on
 * bad usage. It prints one line saying what happened. Harmless even if a
 * probe succeeds: nothing destructive is attempted (sysrq is only opened,
 * reboot uses POWER_OFF which in a pid namespace would only end the
 * sandbox, module loading passes an empty image, the image's device node is
 * a copy of /dev/null).
 *
 * Two more serve the reuse of network namespaces (test_sandbox_reuse.c):
 * "netdirty [linger]" leaves what a sandbox can leave in its network
 * namespace (listening, bound, connected TCP/UDP/unix sockets with unread
 * data, loopback traffic, files in /tmp and /dev/shm; with "linger" also a
 * TIME_WAIT socket and an IPv6 flow label, which outlive the process), and
 * "netclean" checks that a new sandbox sees none of it: exit 0 if clean.
 * Likewise for IPC namespaces: "ipcdirty [chmod]" leaves a SysV shared
 * memory segment (with data), message queue (with a message) and
 * semaphore set, and a POSIX message queue with a message (with "chmod"
 * also a changed mode of /dev/mqueue, which in a user namespace must be
 * refused: the host's root owns it); "ipcclean" checks that none of it
 * is visible (/dev/mqueue 01777, owned by the host's root as seen here), then makes and removes a
 * segment and prints its id (0 in a fresh namespace, more in one an earlier sandbox used).
 *
 * /dev, which a runtime's sandboxes share read-only: "devshared" tries to
 * change it (exit 0 if every attempt was refused), "devok" checks that the
 * devices, /dev/shm, /dev/mqueue and a pty work (exit 0 if they do).
 *
 * The control channel (issue 14): "caps" fails if a dangerous capability
 * is held, "staging" if any route (chroot escape, "..", /proc links, a
 * named socket) reaches the staging root or the agent's socket, and
 * "fakeagent" attempts the takeover (a fake agent in the background where
 * the agent's socket was) and always exits 0: the host's next adoption
 * shows whether it worked. */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/reboot.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <dirent.h>
#include <mqueue.h>
#include <poll.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/sysmacros.h>
#include <sys/ioctl.h>
#include <linux/audit.h>
#include <linux/fs.h>
#include <linux/netlink.h>
#include <unistd.h>

#include "sandbox/agent/proto.h"

static int refused(const char *what, long r)
{
	if (r < 0) {
		printf("%s: refused (%s)\n", what, strerror(errno));
		return 0;
	}
	printf("%s: ALLOWED\n", what);
	return 1;
}

static int probe_read(const char *path)
{
	int fd = open(path, O_RDONLY);
	if (fd < 0)
		return refused(path, -1);
	char buf[64];
	ssize_t n = read(fd, buf, sizeof(buf));
	close(fd);
	if (n <= 0) {
		printf("%s: no data (%zd)\n", path, n);
		return 0;
	}
	printf("%s: READ %zd bytes\n", path, n);
	return 1;
}

/* A user record (AUDIT_FIRST_USER_MSG: what the host's audit log would show) sent
 * on an audit netlink socket: exit 1 if the kernel took it. */
static int probe_audit(void)
{
	int s = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_AUDIT);
	if (s < 0)
		return refused("socket(NETLINK_AUDIT)", -1);
	struct {
		struct nlmsghdr h;
		char text[32];
	} m = {.h = {.nlmsg_len = NLMSG_LENGTH(sizeof(m.text)),
		     .nlmsg_type = AUDIT_FIRST_USER_MSG, /* a user record */
		     .nlmsg_flags = NLM_F_REQUEST | NLM_F_ACK,
		     .nlmsg_seq = 1}};
	snprintf(m.text, sizeof(m.text), "strata probe: sandbox audit");
	struct sockaddr_nl to = {.nl_family = AF_NETLINK};
	if (sendto(s, &m, m.h.nlmsg_len, 0, (struct sockaddr *)&to, sizeof(to)) < 0) {
		close(s);
		return refused("send AUDIT_USER_MSG", -1);
	}
	struct pollfd p = {.fd = s, .events = POLLIN};
	char buf[512];
	ssize_t n = poll(&p, 1, 2000) == 1 ? recv(s, buf, sizeof(buf), 0) : -1;
	close(s);
	struct nlmsghdr *h = (struct nlmsghdr *)buf;
	if (n >= (ssize_t)NLMSG_LENGTH(sizeof(struct nlmsgerr)) && h->nlmsg_type == NLMSG_ERROR) {
		int err = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
		if (err < 0) {
			printf("AUDIT_USER_MSG: refused (%s)\n", strerror(-err));
			return 0;
		}
	}
	printf("AUDIT_USER_MSG: ACCEPTED by the host's audit\n");
	return 1;
}

static int probe_net(void)
{
	int s = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons(80)};
	inet_pton(AF_INET, "1.1.1.1", &sa.sin_addr);
	int r = connect(s, (struct sockaddr *)&sa, sizeof(sa));
	int fails = refused("connect 1.1.1.1:80", r);
	FILE *f = fopen("/proc/net/dev", "r");
	char line[256];
	int ifaces = 0;
	while (f && fgets(line, sizeof(line), f))
		if (strchr(line, ':') && !strstr(line, "lo:"))
			ifaces++;
	if (f)
		fclose(f);
	printf("interfaces besides lo: %d\n", ifaces);
	return fails || ifaces;
}

/* The classic chroot escape (root keeps CAP_SYS_CHROOT, as in Docker): what
 * it reaches must not let it write the shared lower layer. */
static int escape_chroot(void)
{
	mkdir("/tmp/esc", 0700);
	if (chroot("/tmp/esc") < 0)
		return -1;
	for (int i = 0; i < 64; i++)
		(void)!chdir("..");
	return chroot(".");
}

/* Where the staging root is after an escape: "/s" below the namespace's
 * template root (child.c), or "/" itself. */
static const char *staging_root(void)
{
	return access("/s/lower", F_OK) == 0 ? "/s" : "";
}

static int probe_chroot(void)
{
	char p[64];
	if (escape_chroot() < 0)
		return refused("chroot escape", -1);
	const char *st = staging_root();
	printf("escaped to the namespace's root; staging root at %s/\n", st);
	snprintf(p, sizeof(p), "%s/lower/escape-marker", st);
	int fd = open(p, O_WRONLY | O_CREAT, 0644);
	int fails = refused("write into the lower layer after a chroot escape", fd);
	snprintf(p, sizeof(p), "%s/lower/etc/passwd", st);
	fd = open(p, O_WRONLY | O_APPEND);
	fails |= refused("append to the lower layer's /etc/passwd", fd);
	if (*st) /* the template root is shared by all sandboxes */
		fails |= refused("create a file in the namespace's root",
				 open("/escape-marker", O_WRONLY | O_CREAT, 0644)) |
			 refused("mkdir in the namespace's root", mkdir("/escape-dir", 0755)) |
			 refused("create a file in the template's /e",
				 open("/e/escape-marker", O_WRONLY | O_CREAT, 0644)) |
			 refused("create a file in the template's /d (every sandbox's /dev)",
				 open("/d/escape-marker", O_WRONLY | O_CREAT, 0644));
	return fails;
}

/* /dev is shared by a runtime's sandboxes (a read-only bind): nothing in
 * it may change. */
static int probe_devshared(void)
{
	struct stat st;
	int fails =
	    refused("create a file in /dev", open("/dev/probe-mark", O_WRONLY | O_CREAT, 0644)) |
	    refused("mkdir in /dev", mkdir("/dev/probe-dir", 0755)) |
	    refused("unlink /dev/zero", unlink("/dev/zero")) |
	    refused("chmod /dev/null", chmod("/dev/null", 0600)) |
	    refused("chown /dev/urandom", chown("/dev/urandom", 1, 1)) |
	    refused("set the times of /dev/null", utimensat(AT_FDCWD, "/dev/null", NULL, 0)) |
	    refused("symlink in /dev", symlink("/etc/passwd", "/dev/probe-link"));
	if (stat("/dev/null", &st) < 0 || (st.st_mode & 07777) != 0666) {
		printf("/dev/null: not as made\n");
		fails = 1;
	}
	return fails;
}

/* /dev works: exit 0 if every device, shm, mqueue and a pty do. */
static int probe_devok(void)
{
	char buf[64];
	int bad = 0;
	int fd = open("/dev/null", O_WRONLY);
	bad |= fd < 0 || write(fd, "x", 1) != 1;
	close(fd);
	fd = open("/dev/zero", O_RDONLY);
	bad |= fd < 0 || read(fd, buf, sizeof(buf)) != sizeof(buf) || buf[0] || buf[63];
	close(fd);
	fd = open("/dev/urandom", O_RDONLY);
	bad |= fd < 0 || read(fd, buf, 16) != 16;
	close(fd);
	fd = open("/dev/full", O_WRONLY);
	bad |= fd < 0 || write(fd, "x", 1) != -1 || errno != ENOSPC;
	close(fd);
	if (bad)
		printf("devok: null, zero, urandom or full misbehave\n");
	fd = open("/dev/shm/probe-shm", O_RDWR | O_CREAT, 0600);
	if (fd < 0 || write(fd, "shm", 3) != 3) {
		printf("devok: /dev/shm not writable (%s)\n", strerror(errno));
		bad = 1;
	}
	close(fd);
	int m = posix_openpt(O_RDWR | O_NOCTTY);
	const char *pts = m >= 0 && grantpt(m) == 0 && unlockpt(m) == 0 ? ptsname(m) : NULL;
	int sl = pts ? open(pts, O_RDWR | O_NOCTTY) : -1;
	ssize_t n = -1;
	if (sl >= 0 && write(m, "hi\n", 3) == 3) {
		struct pollfd p = {.fd = sl, .events = POLLIN};
		n = poll(&p, 1, 2000) == 1 ? read(sl, buf, sizeof(buf)) : -1;
	}
	if (n != 3) {
		printf("devok: pty (%s) failed (%s)\n", pts ? pts : "none", strerror(errno));
		bad = 1;
	}
	if (access("/dev/mqueue", W_OK) < 0 || access("/dev/pts/ptmx", F_OK) < 0) {
		printf("devok: /dev/mqueue or /dev/pts missing\n");
		bad = 1;
	}
	printf("devok: %s (pty %s)\n", bad ? "BROKEN" : "all work", pts ? pts : "none");
	return bad;
}

/* A persistent agent listens outside the sandbox's root: a process inside
 * that gets there must not be served. */
static int probe_hijack(void)
{
	if (escape_chroot() < 0)
		return refused("chroot escape", -1);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s/agent.sock", staging_root());
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return refused("connect to the agent's socket", -1);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char buf[64];
	ssize_t n = poll(&p, 1, 2000) == 1 ? read(fd, buf, sizeof(buf)) : 0;
	printf("agent socket from inside: %s\n", n > 0 ? "SERVED" : "closed without a word");
	return n > 0;
}

/* ---- the agent's channel (issue 14) -------------------------------------- */

/* Capabilities no sandbox may hold (bounding or effective set): chroot (the
 * classic escape), admin (mounts), ptrace (pidfd_getfd of the agent's
 * channel), dac_read_search (open_by_handle_at), module, rawio, mknod,
 * net_admin, boot, time, bpf, perfmon, audit_write (the host's audit log). */
static int probe_caps(void)
{
	static const int bad_caps[] = {18, 21, 19, 2, 16, 17, 27, 12, 22, 25, 39, 38, 29};
	static const char *const sets[] = {"CapBnd:", "CapEff:", "CapPrm:"};
	char line[256];
	int bad = 0;
	FILE *f = fopen("/proc/self/status", "re");
	if (!f)
		return 2;
	while (fgets(line, sizeof(line), f))
		for (size_t k = 0; k < sizeof(sets) / sizeof(sets[0]); k++) {
			if (strncmp(line, sets[k], strlen(sets[k])))
				continue;
			unsigned long long m = strtoull(line + strlen(sets[k]), NULL, 16);
			for (size_t i = 0; i < sizeof(bad_caps) / sizeof(bad_caps[0]); i++)
				if (m & (1ull << bad_caps[i])) {
					printf("caps: %s has capability %d\n", sets[k],
					       bad_caps[i]);
					bad = 1;
				}
			if (!bad)
				printf("caps: %s %llx\n", sets[k], m);
		}
	fclose(f);
	return bad;
}

/* Every way a root process inside could reach the staging root (the lower
 * mount, the upper layer, the agent's socket): a chroot escape, "..", and
 * /proc links of the agent and of itself; and any named socket of the
 * agent in the network namespace. Exit 1 if one leads there. */
static int probe_staging(void)
{
	static const char *const from[] = {"/",
					   "/..",
					   "/../../..",
					   "/proc/self/root/..",
					   "/proc/self/cwd/../..",
					   "/proc/1/root",
					   "/proc/1/root/..",
					   "/proc/1/cwd/.."};
	static const char *const leaf[] = {"agent.sock",   "lower", "s/lower",
					   "s/agent.sock", "q/u",   "w/work"};
	char p[128], line[512];
	struct stat root, up;
	int bad = 0;
	if (escape_chroot() == 0)
		printf("staging: the chroot escape worked\n");
	for (size_t i = 0; i < sizeof(from) / sizeof(from[0]); i++)
		for (size_t j = 0; j < sizeof(leaf) / sizeof(leaf[0]); j++) {
			snprintf(p, sizeof(p), "%s/%s", from[i], leaf[j]);
			if (access(p, F_OK) == 0) {
				printf("staging: %s is reachable\n", p);
				bad = 1;
			}
		}
	if (stat("/", &root) == 0 && stat("/..", &up) == 0 &&
	    (root.st_dev != up.st_dev || root.st_ino != up.st_ino)) {
		printf("staging: / has something above it\n");
		bad = 1;
	}
	FILE *f = fopen("/proc/net/unix", "re");
	while (f && fgets(line, sizeof(line), f))
		if (strstr(line, "agent.sock")) {
			printf("staging: a named agent socket: %s", line);
			bad = 1;
		}
	if (f)
		fclose(f);
	if (!bad)
		printf("staging: nothing reachable\n");
	return bad;
}

/* A fake agent on listening socket l: HELLO to each host, every EXEC
 * answered at once with "fake\n" and exit 0, anything else with status 0
 * (EXECS: none). What a takeover of the control channel would serve. */
static void fake_serve(int l)
{
	for (;;) {
		int c = accept(l, NULL, NULL);
		if (c < 0)
			continue;
		struct ag_wr w;
		ag_wr_init(&w);
		size_t off = ag_wr_begin(&w, AG_T_HELLO, 0);
		ag_wr_u32(&w, 1);
		ag_wr_u32(&w, AG_MAX_PAYLOAD);
		ag_wr_str(&w, "strata-agent 1.3");
		ag_wr_end(&w, off);
		uint8_t hdr[AG_HDR_SIZE];
		static uint8_t body[AG_MAX_PAYLOAD];
		struct ag_hdr h;
		while (write(c, w.data, w.len) == (ssize_t)w.len) {
			w.len = 0;
			if (recv(c, hdr, sizeof(hdr), MSG_WAITALL) != sizeof(hdr) ||
			    ag_hdr_decode(hdr, &h) < 0 ||
			    (h.len && recv(c, body, h.len, MSG_WAITALL) != (ssize_t)h.len))
				break;
			off = ag_wr_begin(&w, h.type | AG_T_REPLY, h.id);
			ag_wr_u32(&w, 0);
			if (h.type == AG_T_EXECS)
				ag_wr_u32(&w, 0);
			if (h.type == AG_T_EXEC)
				ag_wr_u32(&w, 2);
			ag_wr_end(&w, off);
			if (h.type != AG_T_EXEC)
				continue;
			off = ag_wr_begin(&w, AG_T_OUTPUT, h.id);
			ag_wr_u8(&w, 1);
			ag_wr_blob(&w, "fake\n", 5);
			ag_wr_end(&w, off);
			off = ag_wr_begin(&w, AG_T_EXIT, h.id);
			ag_wr_u32(&w, 0);
			ag_wr_u32(&w, 0);
			ag_wr_u32(&w, 0);
			ag_wr_u64(&w, 5);
			ag_wr_u64(&w, 0);
			ag_wr_u64(&w, 1);
			ag_wr_end(&w, off);
		}
		ag_wr_done(&w);
		close(c);
	}
}

/* The takeover of issue 14: escape the chroot, move the agent's socket
 * aside and listen in its place with a fake agent (in the background), so
 * that the host's next adoption talks to the fake. Where the socket is out
 * of reach the fake listens at every place a host could once have looked,
 * which changes nothing. Prints where it listens; exit 0. */
static int probe_fakeagent(void)
{
	char sock[128], aside[160];
	bool escaped = escape_chroot() == 0;
	snprintf(sock, sizeof(sock), "%s/agent.sock", escaped ? staging_root() : "");
	snprintf(aside, sizeof(aside), "%s.real", sock);
	if (rename(sock, aside) == 0)
		printf("fakeagent: moved the agent's socket aside\n");
	int l = socket(AF_UNIX, SOCK_STREAM, 0);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", sock);
	unlink(sock);
	if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(l, 4) < 0) {
		printf("fakeagent: cannot listen at %s (%s)\n", sock, strerror(errno));
		return 0;
	}
	printf("fakeagent: a fake agent listens at %s%s\n", sock,
	       escaped ? " (after a chroot escape)" : "");
	fflush(stdout);
	if (fork() == 0) {
		setsid();
		int n = open("/dev/null", O_RDWR);
		dup2(n, 0);
		dup2(n, 1);
		dup2(n, 2);
		fake_serve(l);
	}
	return 0;
}

/* ---- network namespace reuse --------------------------------------------- */

#define PROBE_PORT 7777

static int tcp_listener(int family)
{
	int s = socket(family, SOCK_STREAM, 0);
	struct sockaddr_in a4 = {.sin_family = AF_INET,
				 .sin_port = htons(PROBE_PORT),
				 .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6,
				  .sin6_port = htons(PROBE_PORT),
				  .sin6_addr = IN6ADDR_LOOPBACK_INIT};
	int r = family == AF_INET ? bind(s, (struct sockaddr *)&a4, sizeof(a4))
				  : bind(s, (struct sockaddr *)&a6, sizeof(a6));
	if (s < 0 || r < 0 || listen(s, 8) < 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

static int udp_bound(void)
{
	int s = socket(AF_INET, SOCK_DGRAM, 0);
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(PROBE_PORT + 1),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(a)) < 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

static int unix_abstract(void)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX, .sun_path = "\0strata-probe"};
	int s = socket(AF_UNIX, SOCK_STREAM, 0);
	if (s < 0 || bind(s, (struct sockaddr *)&a, sizeof(sa_family_t) + 13) < 0 ||
	    listen(s, 1) < 0) {
		if (s >= 0)
			close(s);
		return -1;
	}
	return s;
}

/* A connection to the listener l; fills *ret_acc with the accepted end. */
static int tcp_pair(int l, int *ret_acc)
{
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(PROBE_PORT),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int c = socket(AF_INET, SOCK_STREAM, 0);
	if (c < 0 || connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	*ret_acc = accept(l, NULL, NULL);
	return *ret_acc < 0 ? -1 : c;
}

/* struct in6_flowlabel_req of linux/in6.h (which clashes with netinet/in.h). */
struct flowlabel_req {
	struct in6_addr dst;
	uint32_t label;
	uint8_t action, share;
	uint16_t flags, expires, linger;
	uint32_t pad;
};

static int probe_netdirty(bool linger)
{
	int l4 = tcp_listener(AF_INET), l6 = tcp_listener(AF_INET6), u = udp_bound();
	int x = unix_abstract(), acc = -1, c = l4 >= 0 ? tcp_pair(l4, &acc) : -1;
	if (l4 < 0 || u < 0 || x < 0 || c < 0) {
		printf("netdirty: setting up failed (%s)\n", strerror(errno));
		return 1;
	}
	(void)l6; /* absent without IPv6 */
	static char data[4096];
	(void)!write(c, data, sizeof(data)); /* left unread in acc */
	struct sockaddr_in a = {.sin_family = AF_INET,
				.sin_port = htons(PROBE_PORT + 1),
				.sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	int d = socket(AF_INET, SOCK_DGRAM, 0);
	sendto(d, data, 1000, 0, (struct sockaddr *)&a, sizeof(a)); /* left unread in u */
	int f = open("/tmp/probe-mark", O_WRONLY | O_CREAT, 0644);
	int g = open("/dev/shm/probe-mark", O_WRONLY | O_CREAT, 0644);
	if (f >= 0)
		close(f);
	if (g >= 0)
		close(g);
	if (linger) {
		/* The client closes first: its end waits in TIME_WAIT for 60 s. */
		int acc2 = -1, c2 = tcp_pair(l4, &acc2);
		close(c2);
		usleep(20000);
		close(acc2);
		int s6 = socket(AF_INET6, SOCK_DGRAM, 0);
		struct flowlabel_req fr = {.dst = IN6ADDR_LOOPBACK_INIT,
					   .label = htonl(0x12345),
					   .action = 0 /* GET */,
					   .share = 255 /* ANY */,
					   .flags = 1 /* CREATE */,
					   .linger = 60};
		int r = setsockopt(s6, IPPROTO_IPV6, 32 /* IPV6_FLOWLABEL_MGR */, &fr, sizeof(fr));
		printf("netdirty: TIME_WAIT left, flow label %s\n",
		       r == 0 ? "left" : strerror(errno));
		fflush(stdout);
		return 0; /* both outlive us */
	}
	printf("netdirty: holding sockets\n");
	fflush(stdout);
	for (;;)
		pause();
}

/* Lines of a file after its header (-1 if unreadable). */
static int table_rows(const char *path)
{
	FILE *f = fopen(path, "re");
	char line[512];
	int n = -1;
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		n++;
	fclose(f);
	return n;
}

static long read_num(const char *path, int base)
{
	char buf[64] = "";
	FILE *f = fopen(path, "re");
	long v = -1;
	if (f && fgets(buf, sizeof(buf), f))
		v = strtol(buf, NULL, base);
	if (f)
		fclose(f);
	return v;
}

static int probe_netclean(void)
{
	static const char *const tables[] = {
	    "/proc/net/tcp", "/proc/net/tcp6", "/proc/net/udp",	 "/proc/net/udp6",
	    "/proc/net/raw", "/proc/net/raw6", "/proc/net/unix", "/proc/net/ip6_flowlabel"};
	int bad = 0;
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		int n = table_rows(tables[i]);
		if (n > 0) {
			printf("netclean: %s has %d entries\n", tables[i], n);
			bad = 1;
		}
	}
	char buf[4096] = "";
	FILE *f = fopen("/proc/net/sockstat", "re");
	size_t n = f ? fread(buf, 1, sizeof(buf) - 1, f) : 0;
	buf[n] = 0;
	if (f)
		fclose(f);
	if (!strstr(buf, "sockets: used 0\n") || !strstr(buf, " tw 0 ")) {
		printf("netclean: sockstat: %s", buf);
		bad = 1;
	}
	if (table_rows("/proc/net/dev") != 2 || read_num("/sys/class/net/lo/flags", 16) != 0x9 ||
	    read_num("/sys/class/net/lo/mtu", 10) != 65536) {
		printf("netclean: interfaces other than lo, or lo not as set up\n");
		bad = 1;
	}
	if (access("/tmp/probe-mark", F_OK) == 0 || access("/dev/shm/probe-mark", F_OK) == 0) {
		printf("netclean: files of an earlier sandbox\n");
		bad = 1;
	}
	int l4 = tcp_listener(AF_INET), u = udp_bound(), x = unix_abstract();
	if (l4 < 0 || u < 0 || x < 0) {
		printf("netclean: an earlier sandbox's port or name is taken (%s)\n",
		       strerror(errno));
		bad = 1;
	}
	/* A fresh lo has carried no packet; a reused one keeps its counters. */
	printf("netclean: %s; lo rx_bytes %ld\n", bad ? "NOT CLEAN" : "clean",
	       read_num("/sys/class/net/lo/statistics/rx_bytes", 10));
	return bad;
}

/* The uid that the host's root has here: 0, or in a user namespace that
 * does not map it, the kernel's overflow uid (what stat shows of it). */
static long host_root_uid(void)
{
	FILE *f = fopen("/proc/self/uid_map", "re");
	unsigned long in, out, len;
	long uid = -1;
	while (f && uid < 0 && fscanf(f, "%lu %lu %lu", &in, &out, &len) == 3)
		if (out == 0 && len > 0)
			uid = (long)in;
	if (f)
		fclose(f);
	return uid >= 0 ? uid : read_num("/proc/sys/kernel/overflowuid", 10);
}

static int probe_ipcdirty(bool chmod_mq)
{
	int shm = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
	char *p = shm >= 0 ? shmat(shm, NULL, 0) : (void *)-1;
	int msg = msgget(IPC_PRIVATE, IPC_CREAT | 0600);
	struct {
		long type;
		char text[16];
	} m = {1, "probe-secret"};
	int sem = semget(IPC_PRIVATE, 3, IPC_CREAT | 0600);
	struct mq_attr a = {.mq_maxmsg = 4, .mq_msgsize = 64};
	mqd_t q = mq_open("/probe-mark", O_CREAT | O_RDWR, 0600, &a);
	if (p == (void *)-1 || msg < 0 || sem < 0 || q == (mqd_t)-1 ||
	    msgsnd(msg, &m, sizeof(m.text), 0) < 0 || mq_send(q, "probe-secret", 12, 0) < 0) {
		printf("ipcdirty: setting up failed (%s)\n", strerror(errno));
		return 1;
	}
	strcpy(p, "probe-secret");
	shmdt(p);
	/* In a user namespace root inside does not own /dev/mqueue (the
	 * host's root made it): the chmod must be refused. */
	bool own = host_root_uid() == 0;
	if (chmod_mq && (chmod("/dev/mqueue", 0700) < 0) == own) {
		printf("ipcdirty: chmod /dev/mqueue %s (%s)\n", own ? "failed" : "was allowed",
		       strerror(errno));
		return 1;
	}
	printf("ipcdirty: left shm %d, msg %d, sem %d, mqueue /probe-mark%s\n", shm, msg, sem,
	       !chmod_mq ? ""
	       : own	 ? ", /dev/mqueue 0700"
			 : ", chmod /dev/mqueue refused");
	return 0; /* all of it outlives us */
}

static int probe_ipcclean(void)
{
	static const char *const tables[] = {"/proc/sysvipc/shm", "/proc/sysvipc/msg",
					     "/proc/sysvipc/sem"};
	int bad = 0;
	for (size_t i = 0; i < sizeof(tables) / sizeof(tables[0]); i++) {
		int n = table_rows(tables[i]);
		if (n != 0) {
			printf("ipcclean: %s has %d entries\n", tables[i], n);
			bad = 1;
		}
	}
	DIR *d = opendir("/dev/mqueue");
	struct dirent *e;
	while (d && (e = readdir(d)))
		if (strcmp(e->d_name, ".") && strcmp(e->d_name, "..")) {
			printf("ipcclean: /dev/mqueue/%s of an earlier sandbox\n", e->d_name);
			bad = 1;
		}
	if (d)
		closedir(d);
	struct stat st;
	if (!d || stat("/dev/mqueue", &st) < 0 || (st.st_mode & 07777) != 01777 ||
	    st.st_uid != host_root_uid()) {
		printf("ipcclean: /dev/mqueue missing or not as made\n");
		bad = 1;
	}
	mqd_t q = mq_open("/probe-mark", O_RDONLY);
	if (q != (mqd_t)-1 || errno != ENOENT) {
		printf("ipcclean: mq_open of an earlier queue: %s\n",
		       q != (mqd_t)-1 ? "opened" : strerror(errno));
		bad = 1;
	}
	struct shm_info si;
	struct msginfo mi;
	if (shmctl(0, SHM_INFO, (struct shmid_ds *)(void *)&si) < 0 || si.used_ids ||
	    msgctl(0, MSG_INFO, (struct msqid_ds *)(void *)&mi) < 0 || mi.msgpool || mi.msgmap) {
		printf("ipcclean: SysV objects of an earlier sandbox (SHM_INFO, MSG_INFO)\n");
		bad = 1;
	}
	int id = shmget(IPC_PRIVATE, 4096, IPC_CREAT | 0600);
	char *p = id >= 0 ? shmat(id, NULL, 0) : (void *)-1;
	if (p == (void *)-1 || p[0] || shmctl(id, IPC_RMID, NULL) < 0) {
		printf("ipcclean: a new segment failed or is not zeroed\n");
		bad = 1;
	}
	printf("ipcclean: %s; shm id %d\n", bad ? "NOT CLEAN" : "clean", id);
	return bad;
}

/* The writable layer's quota (sandbox/container/layer.c) holds only while
 * files keep their project id and directories the inherit flag: setting
 * either must be refused by seccomp (EPERM, also with high bits in the
 * command, which the kernel ignores), reading them not. */
static int probe_projid(void)
{
	int fd = open("/projid-probe", O_RDWR | O_CREAT | O_CLOEXEC, 0600);
	int dfd = open("/", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	struct fsxattr fx = {0};
	long flags = 0;
	if (fd < 0 || dfd < 0) {
		printf("projid: cannot open: %s\n", strerror(errno));
		return 1;
	}
	long r = syscall(SYS_ioctl, fd, FS_IOC_FSSETXATTR, &fx);
	int bad = r == 0 || errno != EPERM;
	printf("FS_IOC_FSSETXATTR (project 0): %s\n", r == 0 ? "ALLOWED" : strerror(errno));
	r = syscall(SYS_ioctl, fd, 0xffffffff00000000ull | FS_IOC_FSSETXATTR, &fx);
	bad |= r == 0 || errno != EPERM;
	printf("FS_IOC_FSSETXATTR, high bits set: %s\n", r == 0 ? "ALLOWED" : strerror(errno));
	r = syscall(SYS_ioctl, dfd, FS_IOC_SETFLAGS, &flags);
	bad |= r == 0 || errno != EPERM;
	printf("FS_IOC_SETFLAGS (clear inherit): %s\n", r == 0 ? "ALLOWED" : strerror(errno));
	r = syscall(SYS_ioctl, dfd, _IOW('f', 2, int), &flags);
	bad |= r == 0 || errno != EPERM;
	printf("FS_IOC32_SETFLAGS: %s\n", r == 0 ? "ALLOWED" : strerror(errno));
	/* Reading is fine (EPERM would be seccomp's; a tmpfs says ENOTTY). */
	r = syscall(SYS_ioctl, fd, FS_IOC_FSGETXATTR, &fx);
	bad |= r < 0 && errno == EPERM;
	printf("FS_IOC_FSGETXATTR: %s\n", r == 0 ? "allowed" : strerror(errno));
	unlink("/projid-probe");
	return bad;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return 2;
	const char *w = argv[1];
	if (!strcmp(w, "mount"))
		return refused("mount tmpfs", mount("none", "/mnt", "tmpfs", 0, NULL));
	if (!strcmp(w, "ptrace"))
		return refused("ptrace attach",
			       ptrace(PTRACE_ATTACH, argc > 2 ? atoi(argv[2]) : 1, 0, 0));
	if (!strcmp(w, "raw"))
		return refused("raw socket", socket(AF_INET, SOCK_RAW, IPPROTO_ICMP));
	if (!strcmp(w, "packet"))
		return refused("packet socket", socket(AF_PACKET, SOCK_RAW, 0));
	if (!strcmp(w, "reboot"))
		return refused("reboot",
			       syscall(SYS_reboot, LINUX_REBOOT_MAGIC1, LINUX_REBOOT_MAGIC2,
				       LINUX_REBOOT_CMD_POWER_OFF, NULL));
	if (!strcmp(w, "module"))
		return refused("init_module", syscall(SYS_init_module, "", 0, "")) ||
		       refused("finit_module", syscall(SYS_finit_module, 0, "", 0));
	if (!strcmp(w, "sysrq"))
		return refused("open /proc/sysrq-trigger for write",
			       open("/proc/sysrq-trigger", O_WRONLY));
	if (!strcmp(w, "kpagecgroup"))
		return probe_read("/proc/kpagecgroup");
	if (!strcmp(w, "kcore"))
		return probe_read("/proc/kcore");
	if (!strcmp(w, "kconfig"))
		return probe_read("/proc/config.gz");
	if (!strcmp(w, "vmcoreinfo"))
		return probe_read("/sys/kernel/vmcoreinfo");
	if (!strcmp(w, "audit"))
		return probe_audit();
	if (!strcmp(w, "userns"))
		return refused("unshare(CLONE_NEWUSER)", unshare(CLONE_NEWUSER));
	if (!strcmp(w, "bpf"))
		return refused("bpf", syscall(SYS_bpf, 0, NULL, 0)) || errno != EPERM;
	if (!strcmp(w, "keyctl"))
		return refused("keyctl", syscall(SYS_keyctl, 0, -1, 0)) || errno != EPERM;
	if (!strcmp(w, "mknod"))
		return refused("mknod block device",
			       mknod("/tmp/sda", S_IFBLK | 0600, makedev(8, 0)));
	if (!strcmp(w, "net"))
		return probe_net();
	if (!strcmp(w, "sysctl"))
		return refused("write /proc/sys/kernel/hostname",
			       open("/proc/sys/kernel/hostname", O_WRONLY));
	if (!strcmp(w, "hijack"))
		return probe_hijack();
	if (!strcmp(w, "chroot"))
		return probe_chroot();
	if (!strcmp(w, "caps"))
		return probe_caps();
	if (!strcmp(w, "staging"))
		return probe_staging();
	if (!strcmp(w, "fakeagent"))
		return probe_fakeagent();
	if (!strcmp(w, "agentmem"))
		return refused("open /proc/1/mem", open("/proc/1/mem", O_RDONLY)) ||
		       refused("readlink /proc/1/fd/3 (the control stream)",
			       readlink("/proc/1/fd/3", (char[64]){0}, 63)) ||
		       refused("open /proc/1/fd/3", open("/proc/1/fd/3", O_RDWR));
	if (!strcmp(w, "devnode"))
		return refused("open a device node of the image", open("/devnode", O_RDWR));
	if (!strcmp(w, "netdirty"))
		return probe_netdirty(argc > 2 && !strcmp(argv[2], "linger"));
	if (!strcmp(w, "netclean"))
		return probe_netclean();
	if (!strcmp(w, "devshared"))
		return probe_devshared();
	if (!strcmp(w, "devok"))
		return probe_devok();
	if (!strcmp(w, "ipcdirty"))
		return probe_ipcdirty(argc > 2 && !strcmp(argv[2], "chmod"));
	if (!strcmp(w, "ipcclean"))
		return probe_ipcclean();
	if (!strcmp(w, "projid"))
		return probe_projid();
	if (!strcmp(w, "chroot-escape"))
		return refused("open_by_handle_at",
			       syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0));
	return 2;
}
