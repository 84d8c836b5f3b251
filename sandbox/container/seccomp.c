/* seccomp.c — the sandbox's system call filter and capability set.
 *
 * The filter is an allow list modelled on Docker's default profile
 * (moby/profiles/seccomp/default.json) and stricter in places: default action
 * EPERM; clone only without namespace flags; clone3 answers ENOSYS (so libc
 * falls back to clone, whose flags we can see); socket only for AF_UNIX,
 * AF_INET/AF_INET6 stream and datagram, and AF_NETLINK (no raw or packet
 * sockets); personality only with the harmless values; ioctl but the three
 * that set inode flags and project ids (FS_IOC_SETFLAGS, its 32-bit form,
 * FS_IOC_FSSETXATTR): root in a sandbox owns its files and keeps
 * CAP_FOWNER, and could otherwise move them to project 0 or clear the
 * inherit flag, out of its writable layer's quota (layer.c). Not allowed at all,
 * among others: mount, umount2, pivot_root, unshare, setns, ptrace,
 * process_vm_readv/writev, kexec_*, init/finit/delete_module, reboot, swapon,
 * keyctl/add_key/request_key, bpf, perf_event_open, userfaultfd, io_uring_*,
 * open_by_handle_at, the new mount API, acct, quotactl, settimeofday and
 * clock_settime, syslog, iopl/ioperm, lookup_dcookie.
 *
 * It is compiled once per runtime into a sealed memfd holding the BPF
 * program; the staged agent reads it and loads it at START (one prctl), so
 * the agent needs no libseccomp. Only the native architecture is allowed;
 * other ABIs (i386, x32) are killed.
 *
 * On x86-64 the program is generated here (build_ranges): the allowed
 * syscall numbers form ~35 contiguous ranges, and a binary search over them
 * takes ~110 instructions where libseccomp's tree over single numbers
 * (optimize level 2) takes ~420. Every sandbox's START converts, JITs and
 * emulates the whole program (the kernel runs it once per syscall number
 * to build its action cache), ~0.1 ms for libseccomp's: the short one costs
 * a quarter of that. The generated program uses only what that cache
 * understands (loads of nr and arch, JEQ/JGE/JGT/JSET, RET), so every
 * unconditionally allowed syscall still bypasses the filter. Its decisions
 * are those of libseccomp's program for the same rules, which is still
 * built and used elsewhere (and as the fallback); tests/sandbox/
 * test_seccomp.c compares the two over every syscall number, architecture
 * and the argument values that matter. */
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/capability.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <seccomp.h>
#include <stddef.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <sys/personality.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

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

/* The ioctl commands refused (compared as the kernel does, low 32 bits),
 * sorted. Their numbers are fixed by the ABI (linux/fs.h). */
static const uint32_t ioctl_denied[] = {
    0x40046602, /* FS_IOC32_SETFLAGS */
    0x40086602, /* FS_IOC_SETFLAGS */
    0x401c5820, /* FS_IOC_FSSETXATTR */
};

/* libseccomp has no "not one of": ioctl is allowed by one masked-equality
 * rule per branch off the binary trie of the refused commands, i.e. for
 * each refused value and bit k, "the bits above k as in it, bit k not",
 * unless another refused value takes that branch (then its own rules
 * cover what is below). At most 3 x 32 rules. */
static int add_ioctl(scmp_filter_ctx ctx)
{
	for (size_t i = 0; i < ARRAY_SIZE(ioctl_denied); i++) {
		uint32_t v = ioctl_denied[i];
		for (int k = 31; k >= 0; k--) {
			uint32_t mask = ~0u << k, want = (v ^ (1u << k)) & mask;
			bool taken = false;
			for (size_t j = 0; j < ARRAY_SIZE(ioctl_denied) && !taken; j++)
				taken = (ioctl_denied[j] & mask) == want;
			/* Taken by an earlier value: its rules cover the branch. */
			if (taken)
				continue;
			int r = seccomp_rule_add(ctx, SCMP_ACT_ALLOW, SCMP_SYS(ioctl), 1,
						 SCMP_A1_32(SCMP_CMP_MASKED_EQ, mask, want));
			if (r < 0)
				return r;
		}
	}
	return 0;
}

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
	return r == 0 ? add_ioctl(ctx) : r;
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

/* ---- the generated program (x86-64) ---------------------------------------- */

#if defined(__x86_64__)
#define PROG_MAX 256
#define X32_SYSCALL_BIT 0x40000000u

/* Built back to front, so that every jump target is already placed. */
struct prog {
	struct sock_filter f[PROG_MAX];
	int pos; /* first instruction; the program is f[pos..PROG_MAX-1] */
	bool overflow;
};

/* Emits an instruction before the others; jt, jf: absolute indices of
 * its targets (jumps only go forward, at most 255 instructions). */
static int emit(struct prog *p, uint16_t code, uint32_t k, int jt, int jf)
{
	if (p->pos == 0) {
		p->overflow = true;
		return 0;
	}
	int i = --p->pos;
	int ot = BPF_CLASS(code) == BPF_JMP && BPF_OP(code) != BPF_JA ? jt - i - 1 : 0;
	int of = BPF_CLASS(code) == BPF_JMP && BPF_OP(code) != BPF_JA ? jf - i - 1 : 0;
	if (ot < 0 || ot > 255 || of < 0 || of > 255)
		p->overflow = true;
	p->f[i] = (struct sock_filter){code, (uint8_t)ot, (uint8_t)of, k};
	return i;
}

static int emit_ld(struct prog *p, uint32_t off)
{
	return emit(p, BPF_LD | BPF_W | BPF_ABS, off, 0, 0);
}

static int emit_jmp(struct prog *p, uint16_t op, uint32_t k, int jt, int jf)
{
	return emit(p, BPF_JMP | op | BPF_K, k, jt, jf);
}

static int emit_ret(struct prog *p, uint32_t action)
{
	return emit(p, BPF_RET | BPF_K, action, 0, 0);
}

#define ARG_LO(n) ((uint32_t)(offsetof(struct seccomp_data, args) + 8 * (n)))
#define ARG_HI(n) (ARG_LO(n) + 4)

struct range {
	uint32_t lo, hi;
};

/* "nr is in one of r[a..b]", knowing lo <= nr <= hi. Returns the index of
 * the first instruction (or the target itself when no test is needed). */
static int emit_tree(struct prog *p, const struct range *r, int a, int b, uint32_t lo, uint32_t hi,
		     int allow, int deny)
{
	if (a == b) {
		int t = allow;
		if (r[a].hi < hi)
			t = emit_jmp(p, BPF_JGT, r[a].hi, deny, t);
		if (r[a].lo > lo)
			t = emit_jmp(p, BPF_JGE, r[a].lo, t, deny);
		return t;
	}
	int m = (a + b + 1) / 2;
	int right = emit_tree(p, r, m, b, r[m].lo, hi, allow, deny);
	int left = emit_tree(p, r, a, m - 1, lo, r[m].lo - 1, allow, deny);
	return emit_jmp(p, BPF_JGE, r[m].lo, right, left);
}

/* 64-bit argument n equal to one of v[0..n-1] (high half 0): ALLOW. */
static int emit_arg_in(struct prog *p, int arg, const uint32_t *v, size_t nv, int allow, int deny)
{
	int t = deny;
	for (size_t i = nv; i-- > 0;)
		t = emit_jmp(p, BPF_JEQ, v[i], allow, t);
	emit_ld(p, ARG_LO(arg));
	emit_jmp(p, BPF_JEQ, 0, p->pos, deny);
	return emit_ld(p, ARG_HI(arg));
}

static int cmp_u32(const void *a, const void *b)
{
	uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
	return x < y ? -1 : x > y;
}

/* The same decisions as add_allow_list + add_conditional under
 * seccomp_build's attributes (default EPERM, bad arch KILL_PROCESS). */
static int build_ranges(struct prog *p)
{
	uint32_t nrs[ARRAY_SIZE(allowed)];
	struct range r[ARRAY_SIZE(allowed)];
	size_t n = 0, nr_ranges = 0;
	for (size_t i = 0; i < ARRAY_SIZE(allowed); i++) {
		int nr = seccomp_syscall_resolve_name(allowed[i]);
		if (nr == __NR_SCMP_ERROR || nr < 0)
			continue;
		if (nr == __NR_clone || nr == __NR_clone3 || nr == __NR_socket ||
		    nr == __NR_personality || nr == __NR_ioctl)
			return -EINVAL; /* conditional below, never in the list */
		nrs[n++] = (uint32_t)nr;
	}
	if (!n)
		return -EINVAL;
	qsort(nrs, n, sizeof(nrs[0]), cmp_u32);
	for (size_t i = 0; i < n; i++) {
		if (nr_ranges && nrs[i] <= r[nr_ranges - 1].hi + 1)
			r[nr_ranges - 1].hi = nrs[i];
		else
			r[nr_ranges++] = (struct range){nrs[i], nrs[i]};
	}

	p->pos = PROG_MAX;
	p->overflow = false;
	int enosys = emit_ret(p, SECCOMP_RET_ERRNO | ENOSYS);
	int deny = emit_ret(p, SECCOMP_RET_ERRNO | EPERM);
	int allow = emit_ret(p, SECCOMP_RET_ALLOW);
	/* personality: the harmless values only. */
	static const uint32_t pers[] = {0, 8, 0x20000, 0x20008, 0xffffffff};
	int personality = emit_arg_in(p, 0, pers, ARRAY_SIZE(pers), allow, deny);
	/* ioctl: all but the refused commands (the low half: the kernel's
	 * cmd is an unsigned int). */
	int ioctl = allow;
	for (size_t i = ARRAY_SIZE(ioctl_denied); i-- > 0;)
		ioctl = emit_jmp(p, BPF_JEQ, ioctl_denied[i], deny, ioctl);
	ioctl = emit_ld(p, ARG_LO(1));
	/* socket: AF_UNIX, AF_NETLINK; AF_INET/AF_INET6 stream or datagram
	 * (type & 0xf: SOCK_NONBLOCK and SOCK_CLOEXEC may be or-ed in). */
	int inet = emit_jmp(p, BPF_JEQ, SOCK_DGRAM, allow, deny);
	emit_jmp(p, BPF_JEQ, SOCK_STREAM, allow, inet);
	emit(p, BPF_ALU | BPF_AND | BPF_K, 0xf, 0, 0);
	inet = emit_ld(p, ARG_LO(1));
	static const uint32_t fam[] = {AF_UNIX, AF_NETLINK};
	int t = emit_jmp(p, BPF_JEQ, AF_INET6, inet, deny);
	t = emit_jmp(p, BPF_JEQ, AF_INET, inet, t);
	for (size_t i = ARRAY_SIZE(fam); i-- > 0;)
		t = emit_jmp(p, BPF_JEQ, fam[i], allow, t);
	emit_ld(p, ARG_LO(0));
	emit_jmp(p, BPF_JEQ, 0, p->pos, deny);
	int socket = emit_ld(p, ARG_HI(0));
	/* clone: no namespace flag (they all are in the low half). */
	emit_jmp(p, BPF_JSET, NS_FLAGS, deny, allow);
	int clone = emit_ld(p, ARG_LO(0));
	/* Everything else: the ranges. */
	int body = emit_tree(p, r, 0, (int)nr_ranges - 1, 0, UINT32_MAX, allow, deny);
	t = emit_jmp(p, BPF_JEQ, __NR_clone3, enosys, body);
	t = emit_jmp(p, BPF_JEQ, __NR_personality, personality, t);
	t = emit_jmp(p, BPF_JEQ, __NR_ioctl, ioctl, t);
	t = emit_jmp(p, BPF_JEQ, __NR_socket, socket, t);
	int special = emit_jmp(p, BPF_JEQ, __NR_clone, clone, t);
	/* Native architecture only; x32 numbers (but -1) are a bad arch too. */
	int kill = emit_ret(p, SECCOMP_RET_KILL_PROCESS);
	emit_jmp(p, BPF_JEQ, 0xffffffff, special, kill);
	emit_jmp(p, BPF_JGE, X32_SYSCALL_BIT, p->pos, special);
	emit_ld(p, offsetof(struct seccomp_data, nr));
	emit_jmp(p, BPF_JEQ, AUDIT_ARCH_X86_64, p->pos, kill);
	emit_ld(p, offsetof(struct seccomp_data, arch));
	return p->overflow ? -E2BIG : 0;
}

static int export_ranges(int *ret_fd)
{
	struct prog p;
	int r = build_ranges(&p);
	if (r < 0)
		return r;
	_cleanup_close_ int fd = memfd_create("seccomp", MFD_CLOEXEC | MFD_ALLOW_SEALING);
	size_t len = (PROG_MAX - (size_t)p.pos) * sizeof(struct sock_filter);
	if (fd < 0)
		return -errno;
	if (write(fd, &p.f[p.pos], len) != (ssize_t)len)
		return -EIO;
	if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0)
		return -errno;
	*ret_fd = TAKE_FD(fd);
	return 0;
}
#else
static int export_ranges(int *ret_fd)
{
	(void)ret_fd;
	return -ENOTSUP;
}
#endif

int seccomp_build(int *ret_fd)
{
	return export_ranges(ret_fd) == 0 ? 0 : seccomp_build_libseccomp(ret_fd);
}

int sbx_seccomp_program(int *ret_fd)
{
	return seccomp_build(ret_fd);
}

int seccomp_build_libseccomp(int *ret_fd)
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
	/* Docker's default set minus CAP_MKNOD, CAP_NET_RAW, CAP_SYS_CHROOT
	 * and CAP_AUDIT_WRITE. audit_write let root in a sandbox send
	 * AUDIT_USER_MSG records into the host's audit log (the kernel has
	 * one audit log, of the initial namespaces); without it PAM's audit
	 * module in an image logs a warning and goes on.
	 * chroot is what the classic escape needs (mkdir x; chroot x; cd
	 * ../..; chroot .): with it root reached the staging root, where the
	 * agent's socket was. The root is a pivot_root now (agent_stage.c),
	 * but a capability nothing in a sandbox needs is not kept. Never
	 * kept either: CAP_SYS_ADMIN, CAP_SYS_PTRACE (pidfd_getfd of the
	 * agent's channel), CAP_DAC_READ_SEARCH (open_by_handle_at). */
	static const int keep[] = {
	    CAP_CHOWN,	CAP_DAC_OVERRIDE, CAP_FOWNER,  CAP_FSETID,	     CAP_KILL,
	    CAP_SETGID, CAP_SETUID,	  CAP_SETPCAP, CAP_NET_BIND_SERVICE, CAP_SETFCAP};
	uint64_t m = 0;
	for (size_t i = 0; i < ARRAY_SIZE(keep); i++)
		m |= 1ull << keep[i];
	return m;
}
