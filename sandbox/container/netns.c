/* netns.c — network namespaces for network "none": loopback only, up; and
 * whether a dead sandbox's network or IPC namespace may be reused (the IPC
 * part is at the end).
 *
 * Making a network namespace is the largest single kernel cost of a sandbox
 * (setup_net runs every per-net subsystem's init: loopback registration,
 * sysctl tables, proc and sysfs entries; cleanup_net undoes it all in a
 * kworker), so the runtime reuses them: when a sandbox with network "none"
 * is destroyed and all its processes are gone, its namespace goes back to a
 * spare list (runtime.c) if netns_recyclable says it holds nothing of the
 * old sandbox, and the next staging joins it with setns instead of
 * clone(CLONE_NEWNET). The check reads four files of the namespace's
 * /proc/net and lo's sysfs flags: its first check of a namespace opens
 * them from inside (setns) and keeps them with it (struct netns), later
 * ones pread them (each file stays bound to the namespace it was opened
 * in).
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
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/ipc.h>
#include <sys/msg.h>
#include <sys/sem.h>
#include <sys/shm.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

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
	/* Root of a sandbox's user namespace has no capability in this
	 * namespace (the host's user namespace owns it): ports below 1024 and
	 * ICMP echo sockets are open to every id here, as Docker sets them
	 * (absent sysctls are skipped). */
	static const char *const sysctl[][2] = {
	    {"/proc/sys/net/ipv4/ip_unprivileged_port_start", "0"},
	    {"/proc/sys/net/ipv4/ping_group_range", "0 2147483647"},
	};
	for (size_t i = 0; i < sizeof(sysctl) / sizeof(sysctl[0]); i++) {
		int fd = open(sysctl[i][0], O_WRONLY | O_CLOEXEC);
		if (fd < 0)
			continue;
		ssize_t n = write(fd, sysctl[i][1], strlen(sysctl[i][1]));
		close(fd);
		if (n < 0)
			return -errno;
	}
	return 0;
}

int netns_open(pid_t pid)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/ns/net", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	return fd < 0 ? -errno : fd;
}

void netns_init(struct netns *ns)
{
	ns->fd = ns->sys_fd = -1;
	for (int i = 0; i < NETNS_FILES; i++)
		ns->files[i] = -1;
	ns->kept = false;
}

void netns_close(struct netns *ns)
{
	if (ns->fd >= 0)
		close(ns->fd);
	if (ns->sys_fd >= 0)
		close(ns->sys_fd);
	for (int i = 0; i < NETNS_FILES; i++)
		if (ns->files[i] >= 0)
			close(ns->files[i]);
	netns_init(ns);
}

/* What netns_recyclable reads, by index into netns.files: four files of
 * the namespace's /proc/net and lo's flags in its sysfs. */
enum { NF_SOCKSTAT, NF_SOCKSTAT6, NF_FLOWLABEL, NF_DEV, NF_LO_FLAGS };
static const char *const nf_names[NETNS_FILES] = {
    [NF_SOCKSTAT] = "sockstat",
    [NF_SOCKSTAT6] = "sockstat6",     /* absent without IPv6 */
    [NF_FLOWLABEL] = "ip6_flowlabel", /* likewise */
    [NF_DEV] = "dev",
    [NF_LO_FLAGS] = "class/net/lo/flags", /* of sys_fd */
};

/* Reads file i of the namespace into buf (NUL-terminated): through the fd
 * kept from an earlier check, or (first check: dir is the calling
 * thread's /proc/thread-self/net, the thread being in the namespace)
 * opened now and kept. A /proc/net file is bound to the namespace it was
 * opened in, and a pread from offset 0 generates it anew. Returns its
 * length, or -errno (-ENOENT: the kernel has no such file). */
static ssize_t read_nf(struct netns *ns, int dir, int i, char *buf, size_t cap)
{
	if (!ns->kept && ns->files[i] < 0) {
		int at = i == NF_LO_FLAGS ? ns->sys_fd : dir;
		if (at < 0)
			return -EBADF;
		ns->files[i] = openat(at, nf_names[i], O_RDONLY | O_CLOEXEC);
		if (ns->files[i] < 0)
			return -errno;
	}
	if (ns->files[i] < 0)
		return -ENOENT; /* kept: it was absent */
	ssize_t n = pread(ns->files[i], buf, cap - 1, 0);
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

/* The checks of netns_recyclable; dir: see read_nf. */
static bool empty_ns(struct netns *ns, int dir)
{
	char buf[4096];
	if (read_nf(ns, dir, NF_SOCKSTAT, buf, sizeof(buf)) <= 0 ||
	    field(buf, "sockets:", "used") != 0 || field(buf, "TCP:", "inuse") != 0 ||
	    field(buf, "TCP:", "tw") != 0 || field(buf, "FRAG:", "inuse") != 0 ||
	    field(buf, "FRAG:", "memory") != 0)
		return false;
	ssize_t n = read_nf(ns, dir, NF_SOCKSTAT6, buf, sizeof(buf));
	if ((n < 0 && n != -ENOENT) || n == 0 ||
	    (n > 0 && (field(buf, "FRAG6:", "inuse") != 0 || field(buf, "FRAG6:", "memory") != 0)))
		return false;
	n = read_nf(ns, dir, NF_FLOWLABEL, buf, sizeof(buf)); /* header line only */
	if ((n < 0 && n != -ENOENT) || n == 0 || (n > 0 && count_lines(buf) != 1))
		return false;
	/* Two header lines and lo. */
	if (read_nf(ns, dir, NF_DEV, buf, sizeof(buf)) <= 0 || count_lines(buf) != 3 ||
	    !strstr(buf, " lo:"))
		return false;
	/* lo's device flags (dev->flags: promiscuous or all-multicast mode
	 * set for any reason shows here); IFF_RUNNING is not among them, lo
	 * is always oper up. */
	if (read_nf(ns, dir, NF_LO_FLAGS, buf, sizeof(buf)) <= 0)
		return false;
	unsigned long fl = strtoul(buf, NULL, 16);
	return (fl & (LO_FLAGS | IFF_PROMISC | IFF_NOARP | IFF_ALLMULTI)) ==
	       (LO_FLAGS & ~(unsigned long)IFF_RUNNING);
}

bool netns_recyclable(struct netns *ns, int home)
{
	if (ns->fd < 0)
		return false;
	if (ns->kept)
		return empty_ns(ns, -1);
	/* First check of this namespace: from inside (setns), opening the
	 * files that later checks read through their fds (~3 us instead of
	 * ~19: a setns each way, and proc's fresh lookup of every file). */
	_cleanup_close_ int orig =
	    home >= 0 ? -1 : open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (home < 0)
		home = orig;
	if (home < 0 || setns(ns->fd, CLONE_NEWNET) < 0)
		return false;
	_cleanup_close_ int dir = open("/proc/thread-self/net", O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	bool ok = dir >= 0 && empty_ns(ns, dir);
	/* Cannot fail as root; if it did, this thread would stay in the
	 * namespace, which is then not handed out again (the thread only
	 * stages sandboxes, which make or join their own). */
	if (setns(home, CLONE_NEWNET) < 0)
		return false;
	/* Kept only when every file opened (absent IPv6 ones aside): a
	 * check that stopped early left some unopened, and the next one
	 * comes here again. */
	ns->kept = ok;
	return ok;
}

/* ---- IPC namespaces ------------------------------------------------------
 *
 * Reused like network namespaces (a fresh one costs its sysctl tables and
 * an mqueue superblock, made at clone and freed by a kworker). What a
 * sandbox could leave in its IPC namespace: SysV shared memory segments,
 * message queues and semaphore sets (counted by the namespace: in_use of
 * SHM_INFO, MSG_INFO, SEM_INFO, plus queued messages and semaphores),
 * POSIX message queues (files in the namespace's mqueue filesystem, the
 * same superblock in every mount of it: listed through the first
 * sandbox's /dev/mqueue, kept open), and a changed mode or owner of that
 * filesystem's root (a sandbox's root may chmod it). The sysctls of the
 * namespace (kernel.shm*, msg*, sem, fs.mqueue.*) are under /proc/sys,
 * read-only inside. What carries over: the SysV id sequence (a later
 * sandbox's first segment does not get id 0) and the mqueue root's
 * timestamps, i.e. that earlier sandboxes made and removed objects, and
 * when. sbx_runtime_config.fresh_netns turns this reuse off too. */

int ipcns_open(pid_t pid, struct ipcns *ret)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/ns/ipc", (int)pid);
	ret->ns_fd = open(p, O_RDONLY | O_CLOEXEC);
	if (ret->ns_fd < 0)
		return -errno;
	snprintf(p, sizeof(p), "/proc/%d/root/dev/mqueue", (int)pid);
	ret->mq_fd = open(p, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (ret->mq_fd < 0) {
		int r = -errno;
		close(ret->ns_fd);
		ret->ns_fd = -1;
		return r;
	}
	return 0;
}

void ipcns_close(struct ipcns *ns)
{
	if (ns->ns_fd >= 0)
		close(ns->ns_fd);
	if (ns->mq_fd >= 0)
		close(ns->mq_fd);
	ns->ns_fd = ns->mq_fd = -1;
}

/* The mqueue filesystem's root is as the kernel made it and holds no queue. */
static bool mqueue_empty(int fd)
{
	struct stat st;
	if (fstat(fd, &st) < 0 || st.st_mode != (S_IFDIR | 01777) || st.st_uid || st.st_gid ||
	    lseek(fd, 0, SEEK_SET) < 0)
		return false;
	union {
		char b[1024];
		struct dirent64 align;
	} u;
	for (;;) {
		long n = syscall(SYS_getdents64, fd, u.b, sizeof(u.b));
		if (n <= 0)
			return n == 0;
		for (long off = 0; off < n;) {
			const struct dirent64 *d = (const struct dirent64 *)(u.b + off);
			if (strcmp(d->d_name, ".") && strcmp(d->d_name, ".."))
				return false;
			off += d->d_reclen;
		}
	}
}

union semun_info {
	int val;
	struct semid_ds *buf;
	unsigned short *array;
	struct seminfo *info;
};

/* No SysV object in the calling thread's IPC namespace. */
static bool sysv_empty_here(void)
{
	struct shm_info shm;
	struct msginfo msg;
	struct seminfo sem;
	return shmctl(0, SHM_INFO, (struct shmid_ds *)(void *)&shm) >= 0 && shm.used_ids == 0 &&
	       msgctl(0, MSG_INFO, (struct msqid_ds *)(void *)&msg) >= 0 && msg.msgpool == 0 &&
	       msg.msgmap == 0 && msg.msgtql == 0 &&
	       semctl(0, 0, SEM_INFO, (union semun_info){.info = &sem}) >= 0 && sem.semusz == 0 &&
	       sem.semaem == 0;
}

bool ipcns_recyclable(const struct ipcns *ns, int home)
{
	if (ns->ns_fd < 0 || ns->mq_fd < 0 || !mqueue_empty(ns->mq_fd))
		return false;
	_cleanup_close_ int orig =
	    home >= 0 ? -1 : open("/proc/thread-self/ns/ipc", O_RDONLY | O_CLOEXEC);
	if (home < 0)
		home = orig;
	if (home < 0 || setns(ns->ns_fd, CLONE_NEWIPC) < 0)
		return false;
	bool ok = sysv_empty_here();
	/* As in netns_recyclable: a thread left behind only stages sandboxes,
	 * which make or join their own IPC namespace. */
	if (setns(home, CLONE_NEWIPC) < 0)
		return false;
	return ok;
}
