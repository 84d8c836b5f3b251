/* agent_guest.c — strata-agent as the init of a VM sandbox's guest
 * ("strata-agent --guest", the initramfs's /init; sandbox/vm/guest.sh
 * builds it, sandbox/vm/README.md describes the guest).
 *
 * The kernel runs it as pid 1 of the whole guest, in the initramfs. Before
 * it serves the protocol it makes the sandbox's root, as the container
 * backend's staging and START do on a host:
 *
 *   1. devtmpfs on /dev, proc, sysfs;
 *   2. loads the kernel modules listed in /modules.list (virtio, block,
 *      console, EROFS, overlay, ext4; dependencies first) from /lib, each
 *      with the "module.param=value" words of the kernel command line, as
 *      modprobe would (virtio_mmio.device= on the microvm machine);
 *   3. finds its disks by their virtio serial numbers (QEMU's serial=):
 *      "meta", the image's EROFS metadata, "blob0".."blobN-1" its blobs
 *      (read-only devices, the EROFS extra devices in that order), "disk"
 *      the writable disk (ext4, made by the host on a sparse file of the
 *      sandbox's disk limit);
 *   4. mounts the image read-only (multi-device EROFS: device=... for the
 *      blobs) on /lower, the disk on /disk, the overlay of both on /root
 *      (nodev, as in containers), moves /dev, /proc and /sys into it, and
 *      makes it the root (MS_MOVE onto / and chroot: an initramfs cannot
 *      be pivoted away);
 *   5. sets the hostname (strata.hostname=), opens the virtio-serial port
 *      named "strata" (virtconsole's /dev/vportNpM; there is no udev to
 *      make /dev/virtio-ports/strata) and waits for the host to be on its
 *      other end, then serves on it like any agent.
 *
 * Everything runs as root of the guest: the VM is the isolation boundary,
 * and no capability or seccomp filter is dropped inside it. When the
 * stream closes the agent powers the guest off (agent.c). A step that
 * fails is printed on the console (the host keeps it in its log) and the
 * guest powers off: the host sees its VMM exit. */
#include "sandbox/agent/agent.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define GUEST_MAX_BLOBS 64
#define GUEST_DEVICE_WAIT_MS 10000
#define GUEST_HOST_WAIT_MS 30000

static char cmdline[4096];

static void sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	nanosleep(&ts, NULL);
}

static int guest_fail(const char *step, int err)
{
	fprintf(stderr, "strata-agent: guest: %s: %s\n", step, strerror(err));
	return -err;
}

/* The value of key= on the kernel command line, copied into buf; NULL when
 * it is not there. */
static const char *cmdline_get(const char *key, char *buf, size_t cap)
{
	size_t kl = strlen(key);
	for (const char *p = cmdline; *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		size_t n = strcspn(p, " \n");
		if (n > kl && !strncmp(p, key, kl) && p[kl] == '=') {
			snprintf(buf, cap, "%.*s", (int)(n - kl - 1), p + kl + 1);
			return buf;
		}
		p += n;
	}
	return NULL;
}

/* "param=value ..." for module m: its words of the command line. */
static void module_params(const char *m, char *buf, size_t cap)
{
	size_t ml = strlen(m), used = 0;
	buf[0] = 0;
	for (const char *p = cmdline; *p;) {
		while (*p == ' ' || *p == '\n')
			p++;
		size_t n = strcspn(p, " \n");
		if (n > ml + 1 && !strncmp(p, m, ml) && p[ml] == '.' && used + n + 2 < cap)
			used += (size_t)snprintf(buf + used, cap - used, "%s%.*s", used ? " " : "",
						 (int)(n - ml - 1), p + ml + 1);
		p += n;
	}
}

static int load_modules(void)
{
	FILE *f = fopen("/modules.list", "re");
	char name[64], path[128], params[1024];
	if (!f)
		return errno == ENOENT ? 0 : guest_fail("/modules.list", errno);
	while (fscanf(f, "%63s", name) == 1) {
		snprintf(path, sizeof(path), "/lib/%s.ko", name);
		module_params(name, params, sizeof(params));
		int fd = open(path, O_RDONLY | O_CLOEXEC);
		if (fd < 0 || (syscall(SYS_finit_module, fd, params, 0) < 0 && errno != EEXIST))
			fprintf(stderr, "strata-agent: guest: module %s: %s\n", name,
				strerror(errno));
		if (fd >= 0)
			close(fd);
	}
	fclose(f);
	return 0;
}

/* The /dev name of the virtio disk whose serial is serial, waiting for it
 * to appear; -ENOENT past the deadline. */
static int find_disk(const char *serial, char *dev, size_t cap)
{
	char path[300], buf[64];
	for (int waited = 0; waited < GUEST_DEVICE_WAIT_MS; waited += 10) {
		DIR *d = opendir("/sys/block");
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (strncmp(de->d_name, "vd", 2))
				continue;
			snprintf(path, sizeof(path), "/sys/block/%s/serial", de->d_name);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
			if (fd >= 0)
				close(fd);
			while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == ' '))
				n--;
			if (n >= 0 && (buf[n] = 0, !strcmp(buf, serial))) {
				snprintf(dev, cap, "/dev/%s", de->d_name);
				closedir(d);
				return 0;
			}
		}
		if (d)
			closedir(d);
		sleep_ms(10);
	}
	return -ENOENT;
}

static int mount_image(void)
{
	char dev[300], opts[GUEST_MAX_BLOBS * 24 + 8], nb[16], serial[16];
	long blobs = cmdline_get("strata.blobs", nb, sizeof(nb)) ? strtol(nb, NULL, 10) : 0;
	size_t used = 0;
	opts[0] = 0;
	if (blobs < 0 || blobs > GUEST_MAX_BLOBS)
		return guest_fail("strata.blobs", EINVAL);
	for (long i = 0; i < blobs; i++) {
		snprintf(serial, sizeof(serial), "blob%ld", i);
		if (find_disk(serial, dev, sizeof(dev)) < 0)
			return guest_fail(serial, ENOENT);
		used += (size_t)snprintf(opts + used, sizeof(opts) - used, "%sdevice=%s",
					 used ? "," : "", dev);
	}
	if (find_disk("meta", dev, sizeof(dev)) < 0)
		return guest_fail("the image's metadata disk", ENOENT);
	if (mount(dev, "/lower", "erofs", MS_RDONLY, opts) < 0)
		return guest_fail("mount of the image (erofs)", errno);
	if (find_disk("disk", dev, sizeof(dev)) < 0)
		return guest_fail("the writable disk", ENOENT);
	if (mount(dev, "/disk", "ext4", MS_NOSUID | MS_NODEV, "") < 0)
		return guest_fail("mount of the writable disk (ext4)", errno);
	if ((mkdir("/disk/u", 0755) < 0 && errno != EEXIST) ||
	    (mkdir("/disk/w", 0700) < 0 && errno != EEXIST))
		return guest_fail("the overlay's directories", errno);
	if (mount("overlay", "/root", "overlay", MS_NODEV,
		  "lowerdir=/lower,upperdir=/disk/u,workdir=/disk/w") < 0)
		return guest_fail("mount of the overlay", errno);
	return 0;
}

static int enter_root(void)
{
	if (ag_move_into("/dev", "/root/dev") < 0 || ag_move_into("/proc", "/root/proc") < 0 ||
	    ag_move_into("/sys", "/root/sys") < 0)
		return guest_fail("moving /dev, /proc, /sys into the root", errno);
	if (chdir("/root") < 0 || mount(".", "/", NULL, MS_MOVE, NULL) < 0 || chroot(".") < 0 ||
	    chdir("/") < 0)
		return guest_fail("entering the root", errno);
	/* What images expect beside devtmpfs; failures are not fatal. */
	mkdir("/dev/pts", 0755);
	mkdir("/dev/shm", 01777);
	mount("devpts", "/dev/pts", "devpts", MS_NOSUID | MS_NOEXEC, "newinstance,ptmxmode=0666");
	mount("shm", "/dev/shm", "tmpfs", MS_NOSUID | MS_NODEV, "mode=1777");
	char host[65];
	if (!cmdline_get("strata.hostname", host, sizeof(host)))
		snprintf(host, sizeof(host), "sandbox");
	sethostname(host, strlen(host));
	return 0;
}

/* The virtio-serial port named name, opened; then waits until the host is
 * on its other end (until then the port reads as hung up). */
static int open_port(const char *name)
{
	char path[300], buf[64];
	for (int waited = 0; waited < GUEST_DEVICE_WAIT_MS; waited += 10) {
		DIR *d = opendir("/sys/class/virtio-ports");
		struct dirent *de;
		while (d && (de = readdir(d))) {
			if (de->d_name[0] == '.')
				continue;
			snprintf(path, sizeof(path), "/sys/class/virtio-ports/%s/name", de->d_name);
			int fd = open(path, O_RDONLY | O_CLOEXEC);
			ssize_t n = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
			if (fd >= 0)
				close(fd);
			while (n > 0 && buf[n - 1] == '\n')
				n--;
			if (n < 0 || (buf[n] = 0, strcmp(buf, name)))
				continue;
			snprintf(path, sizeof(path), "/dev/%s", de->d_name);
			closedir(d);
			fd = open(path, O_RDWR | O_CLOEXEC | O_NOCTTY);
			if (fd < 0)
				return guest_fail(path, errno);
			for (int w = 0; w < GUEST_HOST_WAIT_MS; w += 10) {
				struct pollfd p = {.fd = fd, .events = POLLOUT};
				if (poll(&p, 1, 0) == 1 && !(p.revents & POLLHUP))
					return fd;
				sleep_ms(10);
			}
			close(fd);
			return guest_fail("waiting for the host on the port", ETIMEDOUT);
		}
		if (d)
			closedir(d);
		sleep_ms(10);
	}
	return guest_fail("no virtio-serial port named strata", ENOENT);
}

/* fds 0-2 on the console: the kernel opens it for init only when the
 * initramfs has a /dev/console, and the agent needs 0 taken (agent.c). */
static void console_stdio(void)
{
	if (fcntl(0, F_GETFD) >= 0)
		return;
	int fd = open("/dev/console", O_RDWR | O_NOCTTY);
	if (fd < 0)
		fd = open("/dev/null", O_RDWR);
	while (fd >= 0 && fd < 2)
		fd = dup(fd);
}

int ag_guest_init(struct agent *a)
{
	a->guest = true;
	mkdir("/dev", 0755);
	mkdir("/proc", 0555);
	mkdir("/sys", 0555);
	if (mount("devtmpfs", "/dev", "devtmpfs", MS_NOSUID, "mode=0755") < 0 && errno != EBUSY)
		return guest_fail("devtmpfs", errno);
	if (mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0 ||
	    mount("sysfs", "/sys", "sysfs", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
		return guest_fail("proc and sysfs", errno);
	console_stdio();
	/* Its first line in userspace: the boot's floor for bench/sandbox/vm.sh. */
	(void)!write(2, "strata-agent: guest init\n", 26);
	int fd = open("/proc/cmdline", O_RDONLY | O_CLOEXEC);
	ssize_t n = fd >= 0 ? read(fd, cmdline, sizeof(cmdline) - 1) : -1;
	if (fd >= 0)
		close(fd);
	cmdline[n > 0 ? n : 0] = 0;
	int r = load_modules();
	if (r == 0) {
		mkdir("/lower", 0755);
		mkdir("/disk", 0755);
		mkdir("/root", 0755);
		r = mount_image();
	}
	if (r == 0)
		r = enter_root();
	if (r < 0)
		return r;
	fd = open_port("strata");
	if (fd < 0)
		return fd;
	a->ctl = fd;
	a->port = fd; /* kept across hosts: a restarted sandboxd connects again */
	return 0;
}
