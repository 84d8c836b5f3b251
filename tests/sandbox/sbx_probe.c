/* sbx_probe.c — a static helper copied into the test rootfs as /bin/probe.
 * Each sub-command tries one thing a sandbox must not be able to do and
 * exits 0 if it was refused, 1 if it worked (a containment failure), 2 on
 * bad usage. It prints one line saying what happened. Harmless even if a
 * probe succeeds: nothing destructive is attempted (sysrq is only opened,
 * reboot uses POWER_OFF which in a pid namespace would only end the
 * sandbox, module loading passes an empty image, the image's device node is
 * a copy of /dev/null). */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/reboot.h>
#include <netinet/in.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <poll.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/sysmacros.h>
#include <unistd.h>

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

static int probe_chroot(void)
{
	if (escape_chroot() < 0)
		return refused("chroot escape", -1);
	int fd = open("/lower/escape-marker", O_WRONLY | O_CREAT, 0644);
	int fails = refused("write into the lower layer after a chroot escape", fd);
	fd = open("/lower/etc/passwd", O_WRONLY | O_APPEND);
	return fails | refused("append to the lower layer's /etc/passwd", fd);
}

/* A persistent agent listens outside the sandbox's root: a process inside
 * that gets there must not be served. */
static int probe_hijack(void)
{
	if (escape_chroot() < 0)
		return refused("chroot escape", -1);
	struct sockaddr_un sa = {.sun_family = AF_UNIX, .sun_path = "/agent.sock"};
	int fd = socket(AF_UNIX, SOCK_STREAM, 0);
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return refused("connect to the agent's socket", -1);
	struct pollfd p = {.fd = fd, .events = POLLIN};
	char buf[64];
	ssize_t n = poll(&p, 1, 2000) == 1 ? read(fd, buf, sizeof(buf)) : 0;
	printf("agent socket from inside: %s\n", n > 0 ? "SERVED" : "closed without a word");
	return n > 0;
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
	if (!strcmp(w, "agentmem"))
		return refused("open /proc/1/mem", open("/proc/1/mem", O_RDONLY)) ||
		       refused("readlink /proc/1/fd/3 (the control stream)",
			       readlink("/proc/1/fd/3", (char[64]){0}, 63)) ||
		       refused("open /proc/1/fd/3", open("/proc/1/fd/3", O_RDWR));
	if (!strcmp(w, "devnode"))
		return refused("open a device node of the image", open("/devnode", O_RDWR));
	if (!strcmp(w, "chroot-escape"))
		return refused("open_by_handle_at",
			       syscall(SYS_open_by_handle_at, AT_FDCWD, NULL, 0));
	return 2;
}
