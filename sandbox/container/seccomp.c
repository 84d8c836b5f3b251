/* seccomp.c — the sandbox's system call filter and capability set.
 *
 * The filter is an allow list modelled on Docker's default profile
 * (moby/profiles/seccomp/default.json) and stricter in places: default action
 * EPERM; clone only without namespace flags; clone3 answers ENOSYS (so libc
 * falls back to clone, whose flags we can see); socket only for AF_UNIX,
 * AF_INET/AF_INET6 stream and datagram, and AF_NETLINK (no raw or packet
 * sockets); personality only with the harmless values. Not allowed at all,
 * among others: mount, umount2, pivot_root, unshare, setns, ptrace,
 * process_vm_readv/writev, kexec_*, init/finit/delete_module, reboot, swapon,
 * keyctl/add_key/request_key, bpf, perf_event_open, userfaultfd, io_uring_*,
 * open_by_handle_at, the new mount API, acct, quotactl, settimeofday and
 * clock_settime, syslog, iopl/ioperm, lookup_dcookie.
 *
 * It is compiled once per runtime with libseccomp and exported as a BPF
 * program into a sealed memfd; the staged agent reads it and loads it at
 * START (one prctl), so the agent needs no libseccomp. The program is a
 * binary tree over syscall numbers (libseccomp's optimize level 2). Only the native
 * architecture is allowed; other ABIs (i386, x32) are killed. */
#include <errno.h>
#include <fcntl.h>
#include <linux/filter.h>
#include <linux/capability.h>
#include <sched.h>
#include <seccomp.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox-internal.h"

static const char *const allowed[] = {
    "accept",
    "accept4",
    "access",
    "adjtimex",
    "alarm",
    "arch_prctl",
    "bind",
    "brk",
    "cachestat",
    "capget",
    "capset",
    "chdir",
    "chmod",
    "chown",
    "chroot",
    "clock_getres",
    "clock_gettime",
    "clock_nanosleep",
    "close",
    "close_range",
    "connect",
    "copy_file_range",
    "creat",
    "dup",
    "dup2",
    "dup3",
    "epoll_create",
    "epoll_create1",
    "epoll_ctl",
    "epoll_pwait",
    "epoll_pwait2",
    "epoll_wait",
    "eventfd",
    "eventfd2",
    "execve",
    "execveat",
    "exit",
    "exit_group",
    "faccessat",
    "faccessat2",
    "fadvise64",
    "fallocate",
    "fanotify_mark",
    "fchdir",
    "fchmod",
    "fchmodat",
    "fchmodat2",
    "fchown",
    "fchownat",
    "fcntl",
    "fdatasync",
    "fgetxattr",
    "flistxattr",
    "flock",
    "fork",
    "fremovexattr",
    "fsetxattr",
    "fstat",
    "fstatfs",
    "fsync",
    "ftruncate",
    "futex",
    "futex_requeue",
    "futex_wait",
    "futex_waitv",
    "futex_wake",
    "futimesat",
    "getcpu",
    "getcwd",
    "getdents",
    "getdents64",
    "getegid",
    "geteuid",
    "getgid",
    "getgroups",
    "getitimer",
    "getpeername",
    "getpgid",
    "getpgrp",
    "getpid",
    "getppid",
    "getpriority",
    "getrandom",
    "getresgid",
    "getresuid",
    "getrlimit",
    "get_robust_list",
    "getrusage",
    "getsid",
    "getsockname",
    "getsockopt",
    "get_thread_area",
    "gettid",
    "gettimeofday",
    "getuid",
    "getxattr",
    "inotify_add_watch",
    "inotify_init",
    "inotify_init1",
    "inotify_rm_watch",
    "io_cancel",
    "ioctl",
    "io_destroy",
    "io_getevents",
    "io_pgetevents",
    "ioprio_get",
    "ioprio_set",
    "io_setup",
    "io_submit",
    "kill",
    "landlock_add_rule",
    "landlock_create_ruleset",
    "landlock_restrict_self",
    "lchown",
    "lgetxattr",
    "link",
    "linkat",
    "listen",
    "listxattr",
    "llistxattr",
    "lremovexattr",
    "lseek",
    "lsetxattr",
    "lstat",
    "madvise",
    "map_shadow_stack",
    "membarrier",
    "memfd_create",
    "mincore",
    "mkdir",
    "mkdirat",
    "mknod",
    "mknodat",
    "mlock",
    "mlock2",
    "mlockall",
    "mmap",
    "mprotect",
    "mq_getsetattr",
    "mq_notify",
    "mq_open",
    "mq_timedreceive",
    "mq_timedsend",
    "mq_unlink",
    "mremap",
    "msgctl",
    "msgget",
    "msgrcv",
    "msgsnd",
    "msync",
    "munlock",
    "munlockall",
    "munmap",
    "nanosleep",
    "newfstatat",
    "open",
    "openat",
    "openat2",
    "pause",
    "pidfd_open",
    "pidfd_send_signal",
    "pipe",
    "pipe2",
    "pkey_alloc",
    "pkey_free",
    "pkey_mprotect",
    "poll",
    "ppoll",
    "prctl",
    "pread64",
    "preadv",
    "preadv2",
    "prlimit64",
    "process_mrelease",
    "pselect6",
    "pwrite64",
    "pwritev",
    "pwritev2",
    "read",
    "readahead",
    "readlink",
    "readlinkat",
    "readv",
    "recvfrom",
    "recvmmsg",
    "recvmsg",
    "remap_file_pages",
    "removexattr",
    "rename",
    "renameat",
    "renameat2",
    "restart_syscall",
    "rmdir",
    "rseq",
    "rt_sigaction",
    "rt_sigpending",
    "rt_sigprocmask",
    "rt_sigqueueinfo",
    "rt_sigreturn",
    "rt_sigsuspend",
    "rt_sigtimedwait",
    "rt_tgsigqueueinfo",
    "sched_getaffinity",
    "sched_getattr",
    "sched_getparam",
    "sched_get_priority_max",
    "sched_get_priority_min",
    "sched_getscheduler",
    "sched_rr_get_interval",
    "sched_setaffinity",
    "sched_setattr",
    "sched_setparam",
    "sched_setscheduler",
    "sched_yield",
    "seccomp",
    "select",
    "semctl",
    "semget",
    "semop",
    "semtimedop",
    "sendfile",
    "sendmmsg",
    "sendmsg",
    "sendto",
    "setfsgid",
    "setfsuid",
    "setgid",
    "setgroups",
    "setitimer",
    "setpgid",
    "setpriority",
    "setregid",
    "setresgid",
    "setresuid",
    "setreuid",
    "setrlimit",
    "set_robust_list",
    "setsid",
    "setsockopt",
    "set_thread_area",
    "set_tid_address",
    "setuid",
    "setxattr",
    "shmat",
    "shmctl",
    "shmdt",
    "shmget",
    "shutdown",
    "sigaltstack",
    "signalfd",
    "signalfd4",
    "socketpair",
    "splice",
    "stat",
    "statfs",
    "statx",
    "symlink",
    "symlinkat",
    "sync",
    "sync_file_range",
    "syncfs",
    "sysinfo",
    "tee",
    "tgkill",
    "time",
    "timer_create",
    "timer_delete",
    "timer_getoverrun",
    "timer_gettime",
    "timer_settime",
    "timerfd_create",
    "timerfd_gettime",
    "timerfd_settime",
    "times",
    "tkill",
    "truncate",
    "umask",
    "uname",
    "unlink",
    "unlinkat",
    "utime",
    "utimensat",
    "utimes",
    "vfork",
    "vmsplice",
    "wait4",
    "waitid",
    "write",
    "writev",
};

#define NS_FLAGS                                                                                   \
	(CLONE_NEWNS | CLONE_NEWUTS | CLONE_NEWIPC | CLONE_NEWUSER | CLONE_NEWPID | CLONE_NEWNET | \
	 CLONE_NEWCGROUP | CLONE_NEWTIME)

static int add_allow_list(scmp_filter_ctx ctx)
{
	for (size_t i = 0; i < ARRAY_SIZE(allowed); i++) {
		int nr = seccomp_syscall_resolve_name(allowed[i]);
		if (nr == __NR_SCMP_ERROR || nr < 0)
			continue; /* not on this architecture */
		int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, nr, 0);
		if (r < 0)
			return r;
	}
	return 0;
}

static int add_conditional(scmp_filter_ctx ctx)
{
	static const int inet[] = {AF_INET, AF_INET6};
	static const int types[] = {SOCK_STREAM, SOCK_DGRAM};
	static const unsigned long pers[] = {0, 8, 0x20000, 0x20008, 0xffffffff};
	int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(clone), 1,
				 SCMP_A0(SCMP_CMP_MASKED_EQ, NS_FLAGS, 0));
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), SCMP_SYS(clone3), 0);
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				     SCMP_A0(SCMP_CMP_EQ, AF_UNIX));
	if (r == 0)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 1,
				     SCMP_A0(SCMP_CMP_EQ, AF_NETLINK));
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(inet) * ARRAY_SIZE(types); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(socket), 2,
				     SCMP_A0(SCMP_CMP_EQ, (scmp_datum_t)inet[i / 2]),
				     SCMP_A1(SCMP_CMP_MASKED_EQ, 0xf, (scmp_datum_t)types[i % 2]));
	for (size_t i = 0; r == 0 && i < ARRAY_SIZE(pers); i++)
		r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(personality), 1,
				     SCMP_A0(SCMP_CMP_EQ, pers[i]));
	return r;
}

/* Exports the program into a sealed memfd (what the staged agent loads). */
static int export_bpf(scmp_filter_ctx ctx, int *ret_fd)
{
	_cleanup_close_ int fd = memfd_create("seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	if (fd < 0)
		return -errno;
	int r = seccomp_export_bpf(ctx, fd);
	if (r < 0)
		return r;
	off_t size = lseek(fd, 0, SEEK_END);
	if (size <= 0 || size % (off_t)sizeof(struct sock_filter) || size > 65536)
		return -EINVAL;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}

int seccomp_build(int *ret_fd)
{
	scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ERRNO(EPERM));
	if (!ctx)
		return -ENOMEM;
	int r = seccomp_attr_set(ctx, SCMP_FLTATR_ACT_BADARCH, SCMP_ACT_KILL_PROCESS);
	if (r == 0)
		r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_NNP, 0); /* the agent sets it itself */
	/* A binary tree over syscall numbers instead of a linear chain: a
	 * syscall costs ~9 comparisons instead of up to ~350, and loading the
	 * filter is cheaper too (the kernel emulates it once per syscall number
	 * to build its action cache, with interrupts off). */
	if (r == 0)
		r = seccomp_attr_set(ctx, SCMP_FLTATR_CTL_OPTIMIZE, 2);
	if (r == 0)
		r = add_allow_list(ctx);
	if (r == 0)
		r = add_conditional(ctx);
	if (r == 0)
		r = export_bpf(ctx, ret_fd);
	seccomp_release(ctx);
	return r;
}

uint64_t sbx_caps_keep(void)
{
	/* Docker's default set minus CAP_MKNOD and CAP_NET_RAW. */
	static const int keep[] = {CAP_CHOWN,	   CAP_DAC_OVERRIDE, CAP_FOWNER,
				   CAP_FSETID,	   CAP_KILL,	     CAP_SETGID,
				   CAP_SETUID,	   CAP_SETPCAP,	     CAP_NET_BIND_SERVICE,
				   CAP_SYS_CHROOT, CAP_SETFCAP,	     CAP_AUDIT_WRITE};
	uint64_t m = 0;
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		m |= 1ull << keep[i];
	return m;
}
