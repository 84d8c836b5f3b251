/* qemu.c — the VMM of a VM sandbox: qemu-system-x86_64's command line, its
 * start (contained as a worker, worker.h, or a plain child), the agent's
 * HELLO, and its end (vmm.h).
 *
 * The VMM's descriptors, as its command line names them:
 *   0 /dev/null (restoring: the snapshot), 1 and 2 the console log (the
 *   guest's ttyS0, through /proc/self/fd/1, and QEMU's own errors), 3
 *   /dev/null, 4 QMP (a socket chardev on a connected socketpair), 5 the
 *   writable disk, and from SBX_WORKER_FD_EXTRA
 *   on the kernel, the initramfs, the image's metadata and its blobs, all
 *   opened by the host and named /proc/self/fd/N on QEMU's command line:
 *   its root is the host's, read-only and with a /tmp of its own, and the
 *   magic link reopens the host's file (writable for the disk) wherever it
 *   is.
 * The agent's port (the virtserialport "strata") and a second QMP monitor
 * are listening abstract unix sockets of QEMU's (VMM_SOCK_AGENT,
 * VMM_SOCK_QMP) in the VMM's own network namespace: the host connects to
 * them by entering it (vmm_ns_connect), and a host that restarts connects
 * again (adopt.c) — nothing outside that namespace but root on the host can
 * reach them, unlike a path, which every VMM's read-only view of the host
 * would show. The guest's agent sees its host leave and come back as the
 * port's connection state.
 * The machine is q35 without defaults (no NIC, no VGA), its disks
 * virtio-blk-pci with serial numbers the guest finds them by
 * (agent_guest.c): "meta", "blob0".., "disk". (microvm would boot faster,
 * but Debian's kernel finds its virtio-mmio devices only through ACPI,
 * and under TCG that kernel waits forever calibrating its clock there.) */
#include <errno.h>
#include <stdarg.h>
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <linux/kvm.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/agent/proto.h"
#include "sandbox/container/worker.h"
#include "sandbox/vm/vmm-internal.h"

#define VMM_FD_CONSOLE 1
#define VMM_FD_QMP 4
#define VMM_FD_DISK 5
/* The files QEMU opens, as descriptors at SBX_WORKER_FD_EXTRA..: kernel,
 * initrd, meta, the blobs. */
#define VMM_FD_FILES SBX_WORKER_FD_EXTRA
#define VMM_NFILES (3 + VMM_MAX_BLOBS)
#define VMM_ARGV_MAX (64 + 4 * VMM_MAX_BLOBS)
_Static_assert(VMM_NFILES <= SBX_WORKER_EXTRA_MAX, "the worker passes them all");
/* What QEMU itself takes beyond the guest's RAM: its code, TCG's
 * translation buffer (capped at 64 MiB by tb-size), I/O buffers. */
#define VMM_OVERHEAD_MB 320
#define VMM_PIDS_MAX 256

int64_t vmm_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

int vmm_find_binary(const char *want, const char *name, char *buf, size_t cap)
{
	if (want && strchr(want, '/')) {
		snprintf(buf, cap, "%s", want);
		return access(buf, X_OK) == 0 ? 0 : -ENOENT;
	}
	if (want)
		name = want;
	const char *path = getenv("PATH");
	for (const char *p = path ? path : "/usr/bin:/bin"; *p;) {
		size_t n = strcspn(p, ":");
		if (n && (size_t)snprintf(buf, cap, "%.*s/%s", (int)n, p, name) < cap &&
		    access(buf, X_OK) == 0)
			return 0;
		p += n + (p[n] == ':');
	}
	return -ENOENT;
}

static int find_qemu(const char *want, char *buf, size_t cap)
{
	return vmm_find_binary(want, "qemu-system-x86_64", buf, cap);
}

int vmm_kvm_usable(struct strata_err *e)
{
	int fd = open("/dev/kvm", O_RDWR | O_CLOEXEC);
	if (fd < 0)
		return strata_err_set(e, -ENODEV, "/dev/kvm %s (%s)",
				      errno == ENOENT ? "is missing on this node"
						      : "cannot be opened",
				      strerror(errno));
	int v = ioctl(fd, KVM_GET_API_VERSION, 0);
	int err = errno;
	close(fd);
	if (v != 12)
		return strata_err_set(e, -ENODEV, "/dev/kvm is unusable (KVM_GET_API_VERSION: %s)",
				      v < 0 ? strerror(err) : "not 12");
	return 0;
}

int vmm_probe(const char *qemu, const char *kernel, const char *initrd, bool *ret_kvm,
	      struct strata_err *e)
{
	char bin[4096];
	if (find_qemu(qemu, bin, sizeof(bin)) < 0)
		return strata_err_set(e, -ENODEV, "no %s (Debian: apt-get install qemu-system-x86)",
				      qemu ? qemu : "qemu-system-x86_64");
	if (!kernel || !initrd || access(kernel, R_OK) < 0 || access(initrd, R_OK) < 0)
		return strata_err_set(e, -ENODEV,
				      "no guest kernel and initramfs (%s, %s: "
				      "sandbox/vm/guest.sh prepare)",
				      kernel ? kernel : "?", initrd ? initrd : "?");
	/* KVM only when asked: a /dev/kvm that opens is no proof that KVM_RUN
	 * enters the guest (scripts/testvm.sh's machine spins in it). */
	const char *k = getenv("STRATA_VM_KVM");
	*ret_kvm = k && !strcmp(k, "1") && access("/dev/kvm", R_OK | W_OK) == 0;
	return 0;
}

struct argv_buf {
	char *v[VMM_ARGV_MAX + 1];
	size_t n;
	int err;
};

static void arg(struct argv_buf *a, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void arg(struct argv_buf *a, const char *fmt, ...)
{
	va_list ap;
	char *s = NULL;
	va_start(ap, fmt);
	if (a->n >= VMM_ARGV_MAX || vasprintf(&s, fmt, ap) < 0) {
		a->err = -ENOMEM;
		s = NULL;
	}
	va_end(ap);
	if (s)
		a->v[a->n++] = s;
}

static void argv_free(struct argv_buf *a)
{
	for (size_t i = 0; i < a->n; i++)
		free(a->v[i]);
	a->n = 0;
}

static int build_argv(const struct vmm_config *c, const char *bin, struct argv_buf *a)
{
	arg(a, "%s", bin);
	arg(a, "-nodefaults");
	arg(a, "-no-user-config");
	arg(a, "-nographic");
	arg(a, "-no-reboot"); /* the guest's reboot is the agent's end (agent.c) */
	arg(a, "-M");
	arg(a, "q35");
	arg(a, "-accel");
	arg(a, c->kvm ? "kvm" : "tcg,thread=multi,tb-size=64");
	arg(a, "-cpu");
	arg(a, c->kvm ? "host" : "max");
	arg(a, "-smp");
	arg(a, "%u", c->vcpus ? c->vcpus : 1);
	arg(a, "-m");
	arg(a, "%llu", (unsigned long long)c->memory_mb);
	arg(a, "-kernel");
	arg(a, "/proc/self/fd/%d", VMM_FD_FILES);
	arg(a, "-initrd");
	arg(a, "/proc/self/fd/%d", VMM_FD_FILES + 1);
	arg(a, "-append");
	arg(a, "console=ttyS0 quiet panic=-1 rdinit=/init strata.blobs=%zu strata.hostname=%s",
	    c->nblobs, c->hostname ? c->hostname : "sandbox");
	arg(a, "-chardev");
	arg(a, "file,id=con,path=/proc/self/fd/%d", VMM_FD_CONSOLE);
	arg(a, "-serial");
	arg(a, "chardev:con");
	arg(a, "-chardev");
	arg(a, "socket,id=qmp,fd=%d", VMM_FD_QMP);
	arg(a, "-mon");
	arg(a, "chardev=qmp,mode=control");
	arg(a, "-chardev");
	arg(a, "socket,id=qmpa,path=%s,abstract=on,server=on,wait=off", VMM_SOCK_QMP);
	arg(a, "-mon");
	arg(a, "chardev=qmpa,mode=control");
	arg(a, "-drive");
	arg(a, "if=none,id=meta,file=/proc/self/fd/%d,format=raw,readonly=on", VMM_FD_FILES + 2);
	arg(a, "-device");
	arg(a, "virtio-blk-pci,drive=meta,serial=meta");
	for (size_t i = 0; i < c->nblobs; i++) {
		arg(a, "-drive");
		arg(a, "if=none,id=blob%zu,file=/proc/self/fd/%zu,format=raw,readonly=on", i,
		    VMM_FD_FILES + 3 + i);
		arg(a, "-device");
		arg(a, "virtio-blk-pci,drive=blob%zu,serial=blob%zu", i, i);
	}
	arg(a, "-drive");
	arg(a, "if=none,id=disk,file=/proc/self/fd/%d,format=raw,cache=unsafe,discard=unmap",
	    VMM_FD_DISK);
	arg(a, "-device");
	arg(a, "virtio-blk-pci,drive=disk,serial=disk");
	arg(a, "-device");
	arg(a, "virtio-serial-pci");
	arg(a, "-chardev");
	arg(a, "socket,id=agent,path=%s,abstract=on,server=on,wait=off", VMM_SOCK_AGENT);
	arg(a, "-device");
	arg(a, "virtserialport,chardev=agent,name=strata");
	if (c->incoming_fd >= 0) { /* the snapshot is the VMM's fd 0 */
		arg(a, "-incoming");
		arg(a, "fd:0");
	}
	a->v[a->n] = NULL;
	return a->err;
}

/* A plain child (no worker set): the fds at their numbers, dies with us. */
static int spawn_plain(struct vmm *v, const struct argv_buf *a, const int fds[6], const int *files,
		       size_t nfiles)
{
	pid_t pid = fork();
	if (pid < 0)
		return -errno;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (unshare(CLONE_NEWNET) < 0) /* its sockets' names: its own */
			_exit(126);
		int hi[6 + VMM_NFILES];
		/* out of the way first: the dup2s cannot clobber a source */
		for (size_t i = 0; i < 6 + nfiles; i++)
			hi[i] = fcntl(i < 6 ? fds[i] : files[i - 6], F_DUPFD,
				      VMM_FD_FILES + VMM_NFILES);
		for (size_t i = 0; i < 6 + nfiles; i++)
			if (hi[i] >= 0)
				dup2(hi[i], i < 6 ? (int)i : VMM_FD_FILES + (int)(i - 6));
		for (int fd = 6; fd < VMM_FD_FILES; fd++)
			close(fd);
		closefrom(VMM_FD_FILES + (int)nfiles);
		setsid();
		execv(a->v[0], a->v);
		_exit(127);
	}
	v->pid = pid;
	v->pidfd = (int)syscall(SYS_pidfd_open, pid, 0);
	return v->pidfd < 0 ? -errno : 0;
}

static int spawn_worker(struct vmm *v, const struct vmm_config *c, const struct argv_buf *a,
			const int fds[6], const int *files, size_t nfiles)
{
	struct sbx_worker_config wc = {
	    .rootfs = "/",
	    .path = a->v[0],
	    .argv = a->v,
	    .hostname = c->hostname ? c->hostname : "sandbox",
	    .label = "strata-vmm",
	    .network = SBX_NET_NONE,
	    .fds = fds,
	    .nfds = 6,
	    .extra_fds = files,
	    .nextra = (unsigned)nfiles,
	    .memory_bytes = (c->memory_mb + VMM_OVERHEAD_MB) << 20,
	    .pids_max = VMM_PIDS_MAX,
	    .cpu_millis = (c->vcpus ? c->vcpus : 1) * 1000,
	    .survive_parent = c->persist,
	};
	int r = sbx_worker_spawn(c->ws, &wc, &v->w);
	if (r < 0)
		return r;
	v->worker = true;
	v->pid = v->w.pid;
	v->pidfd = v->w.pidfd;
	return 0;
}

/* The reason a VMM that exited gives, from its exit status. */
static void exit_reason(struct vmm *v, const siginfo_t *si, char *why, size_t cap)
{
	if (si->si_code == CLD_KILLED || si->si_code == CLD_DUMPED)
		snprintf(why, cap, "the VMM (qemu, pid %d) was killed by signal %d (%s)",
			 (int)v->pid, si->si_status, strsignal(si->si_status));
	else if (si->si_status == 0)
		snprintf(why, cap,
			 "the guest shut down or rebooted: a kernel panic, or its agent ended "
			 "(qemu, pid %d, exited 0; its console log says which)",
			 (int)v->pid);
	else
		snprintf(why, cap, "the VMM (qemu, pid %d) exited with status %d", (int)v->pid,
			 si->si_status);
}

int vmm_exited(struct vmm *v, char *why, size_t cap)
{
	siginfo_t si = {0};
	if (!v->reaped && v->adopted) { /* not our child: no status to read */
		if (poll(&(struct pollfd){.fd = v->pidfd, .events = POLLIN}, 1, 0) <= 0)
			return 0;
		v->reaped = true;
		snprintf(
		    v->why, sizeof(v->why),
		    "the VMM (qemu, pid %d) exited (adopted from an earlier sandboxd: its exit "
		    "status is unknown; its console log says why)",
		    (int)v->pid);
	}
	if (!v->reaped) {
		int r;
		if (v->worker) {
			r = sbx_worker_reap(&v->w, false, &si);
			if (r <= 0)
				return r;
			v->pidfd = -1;
		} else {
			if (waitid(P_PIDFD, (id_t)v->pidfd, &si, WEXITED | WNOHANG) < 0)
				return -errno;
			if (si.si_pid == 0)
				return 0;
			close(v->pidfd);
			v->pidfd = -1;
		}
		v->reaped = true;
		exit_reason(v, &si, v->why, sizeof(v->why));
	}
	snprintf(why, cap, "%s", v->why);
	return 1;
}

static int start_fail(struct vmm *v, int r, const char *what, struct strata_err *e)
{
	char why[256] = "";
	if (r == -ECHILD || (v->pidfd >= 0 && vmm_exited(v, why, sizeof(why)) == 1)) {
		if (!why[0]) { /* the pidfd turned readable: reap it */
			for (int i = 0; i < 100 && vmm_exited(v, why, sizeof(why)) == 0; i++)
				usleep(10000);
		}
		strata_err_set(e, -ECHILD, "%s: %s (its console log says why)", what,
			       why[0] ? why : "the VMM exited");
		r = -ECHILD;
	} else
		strata_err_set(e, r, "%s: %s", what, strerror(-r));
	vmm_free(v);
	return r;
}

int vmm_start(const struct vmm_config *c, struct vmm **ret, struct strata_err *e)
{
	char bin[4096];
	if (find_qemu(c->qemu, bin, sizeof(bin)) < 0)
		return strata_err_set(e, -ENOENT, "no qemu-system-x86_64");
	if (c->nblobs > VMM_MAX_BLOBS || c->memory_mb < 64 || c->disk_fd < 0)
		return strata_err_set(e, -EINVAL, "bad VM config (%zu blobs, %llu MiB)", c->nblobs,
				      (unsigned long long)c->memory_mb);
	struct vmm *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->pidfd = v->agent_fd = v->qmp_fd = -1;
	v->w.pidfd = v->w.cpu_fd = -1;
	struct argv_buf a = {.n = 0};
	int r = build_argv(c, bin, &a);
	if (r < 0) {
		argv_free(&a);
		free(v);
		return strata_err_set(e, r, "cannot build QEMU's command line");
	}
	int qm[2] = {-1, -1};
	int devnull = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, qm) < 0 || devnull < 0)
		r = -errno;
	int con = c->console_fd >= 0 ? c->console_fd : devnull;
	int fds[6] = {
	    c->incoming_fd >= 0 ? c->incoming_fd : devnull, con, con, devnull, qm[1], c->disk_fd};
	int files[VMM_NFILES];
	size_t nfiles = 0;
	const char *what = NULL;
	for (size_t i = 0; r == 0 && i < 3 + c->nblobs; i++) {
		const char *p = i == 0	 ? c->kernel
				: i == 1 ? c->initrd
				: i == 2 ? c->meta
					 : c->blobs[i - 3];
		files[nfiles] = p ? open(p, O_RDONLY | O_CLOEXEC) : -1;
		if (files[nfiles] < 0) {
			r = p ? -errno : -EINVAL;
			what = p ? p : "(none)";
		} else
			nfiles++;
	}
	if (r == 0)
		r = c->ws ? spawn_worker(v, c, &a, fds, files, nfiles)
			  : spawn_plain(v, &a, fds, files, nfiles);
	while (nfiles)
		close(files[--nfiles]);
	argv_free(&a);
	if (qm[1] >= 0) /* the VMM's end */
		close(qm[1]);
	if (devnull >= 0)
		close(devnull);
	v->qmp_fd = qm[0];
	if (r < 0 && what) {
		strata_err_set(e, r, "cannot open %s: %s", what, strerror(-r));
		vmm_free(v);
		return r;
	}
	if (r < 0)
		return start_fail(v, r, "cannot start the VMM", e);
	r = vmm_qmp_greet(v, e);
	if (r < 0)
		return start_fail(v, r, "QMP", e);
	/* QEMU listens on the agent's port before it greets on QMP; a restored
	 * guest must find its host there before it runs, or it would see the
	 * host leave and come back (its agent would say HELLO again) */
	r = vmm_ns_connect(v->pidfd, VMM_SOCK_AGENT, VMM_QMP_TIMEOUT_MS, &v->agent_fd);
	if (r < 0)
		return start_fail(v, r, "connecting to the agent's port", e);
	uint32_t wait_ms = c->boot_timeout_ms ? c->boot_timeout_ms : VMM_BOOT_TIMEOUT_MS;
	if (c->incoming_fd >= 0) {
		if ((r = vmm_wait_incoming(v, wait_ms, e)) < 0)
			return start_fail(v, r, "restoring the guest", e);
		*ret = v;
		return 0;
	}
	r = vmm_agent_wait(v, AG_T_HELLO, 0, wait_ms);
	if (r < 0)
		return start_fail(v, r, "the guest's agent did not come up", e);
	*ret = v;
	return 0;
}

int vmm_agent_fd(const struct vmm *v)
{
	return v->agent_fd;
}

int vmm_take_agent_fd(struct vmm *v)
{
	int fd = v->agent_fd;
	v->agent_fd = -1;
	return fd;
}

int vmm_pidfd(const struct vmm *v)
{
	return v->pidfd;
}

pid_t vmm_pid(const struct vmm *v)
{
	return v->pid;
}

int vmm_memory_bytes(struct vmm *v, uint64_t *ret)
{
	char path[4096], buf[64];
	if (v->adopted && v->cgroup[1][0])
		snprintf(path, sizeof(path), "%s", v->cgroup[1]);
	else if (!v->worker ||
		 sbx_worker_cgroup_path(&v->w, "memory", false, path, sizeof(path)) < 0)
		return -ENOENT;
	size_t n = strlen(path);
	snprintf(path + n, sizeof(path) - n, "/%s",
		 access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0 ? "memory.current"
									: "memory.usage_in_bytes");
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t k = fd >= 0 ? read(fd, buf, sizeof(buf) - 1) : -1;
	if (fd >= 0)
		close(fd);
	if (k <= 0)
		return -ENOENT;
	buf[k] = 0;
	*ret = strtoull(buf, NULL, 10);
	return 0;
}

void vmm_free(struct vmm *v)
{
	if (!v)
		return;
	if (v->worker)
		sbx_worker_free(&v->w); /* SIGKILL, reaped, its cgroups removed */
	else if (v->adopted)
		vmm_adopted_kill(v);
	else if (v->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, v->pidfd, SIGKILL, NULL, 0);
		siginfo_t si;
		waitid(P_PIDFD, (id_t)v->pidfd, &si, WEXITED);
		close(v->pidfd);
	}
	vmm_close_ends(v);
}

void vmm_close_ends(struct vmm *v)
{
	if (v->agent_fd >= 0)
		close(v->agent_fd);
	if (v->qmp_fd >= 0)
		close(v->qmp_fd);
	free(v->qmp_buf);
	free(v);
}
