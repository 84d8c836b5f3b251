/* test_seccomp.c — the sandbox's seccomp program as seccomp.c generates it
 * (a binary search over ranges of syscall numbers) decides exactly as
 * libseccomp's program for the same rules: both are run here in a classic
 * BPF interpreter, for every syscall number up to 1100, numbers with the
 * x32 bit and other large ones, three architectures, and the argument
 * values the conditional rules (clone, socket, personality, ioctl) look at, with
 * and without high halves. Also checks what the kernel's action cache
 * (seccomp_cache_prepare) can follow: only loads of nr and arch, JEQ/JGE/
 * JGT/JSET/JA with constants, ALU AND, RET; so the generated program leaves
 * every unconditionally allowed syscall to the cache. No privileges needed. */
#include <errno.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"
#include "tests/sandbox/sbx_test.h"

struct prog {
	struct sock_filter *f;
	size_t n;
};

static int load(int (*build)(int *), struct prog *p)
{
	int fd;
	struct stat st;
	int r = build(&fd);
	if (r < 0)
		return r;
	if (fstat(fd, &st) < 0 || st.st_size <= 0 || st.st_size % 8)
		return -EINVAL;
	p->n = (size_t)st.st_size / 8;
	p->f = malloc((size_t)st.st_size);
	if (!p->f || pread(fd, p->f, (size_t)st.st_size, 0) != st.st_size)
		return -EIO;
	close(fd);
	return 0;
}

/* A classic BPF interpreter (the instructions seccomp accepts). Returns the
 * action, or 0xdead on a malformed program. */
static uint32_t run(const struct prog *p, const struct seccomp_data *d)
{
	uint32_t A = 0, X = 0, M[16] = {0};
	const uint8_t *data = (const uint8_t *)d;
	for (size_t pc = 0; pc < p->n; pc++) {
		const struct sock_filter *i = &p->f[pc];
		uint32_t k = i->k, src = BPF_SRC(i->code) == BPF_X ? X : k;
		switch (BPF_CLASS(i->code)) {
		case BPF_LD:
			if (i->code == (BPF_LD | BPF_W | BPF_ABS) && k % 4 == 0 &&
			    k + 4 <= sizeof(*d))
				memcpy(&A, data + k, 4);
			else if (i->code == (BPF_LD | BPF_IMM))
				A = k;
			else if (i->code == (BPF_LD | BPF_MEM) && k < 16)
				A = M[k];
			else if (i->code == (BPF_LD | BPF_W | BPF_LEN))
				A = sizeof(*d);
			else
				return 0xdead;
			break;
		case BPF_LDX:
			if (i->code == (BPF_LDX | BPF_IMM))
				X = k;
			else if (i->code == (BPF_LDX | BPF_MEM) && k < 16)
				X = M[k];
			else
				return 0xdead;
			break;
		case BPF_ST:
			if (k >= 16)
				return 0xdead;
			M[k] = A;
			break;
		case BPF_STX:
			if (k >= 16)
				return 0xdead;
			M[k] = X;
			break;
		case BPF_ALU:
			switch (BPF_OP(i->code)) {
			case BPF_ADD:
				A += src;
				break;
			case BPF_SUB:
				A -= src;
				break;
			case BPF_MUL:
				A *= src;
				break;
			case BPF_DIV:
				if (!src)
					return 0;
				A /= src;
				break;
			case BPF_MOD:
				if (!src)
					return 0;
				A %= src;
				break;
			case BPF_AND:
				A &= src;
				break;
			case BPF_OR:
				A |= src;
				break;
			case BPF_XOR:
				A ^= src;
				break;
			case BPF_LSH:
				A = src < 32 ? A << src : 0;
				break;
			case BPF_RSH:
				A = src < 32 ? A >> src : 0;
				break;
			case BPF_NEG:
				A = -A;
				break;
			default:
				return 0xdead;
			}
			break;
		case BPF_JMP: {
			bool c;
			switch (BPF_OP(i->code)) {
			case BPF_JA:
				pc += k;
				continue;
			case BPF_JEQ:
				c = A == src;
				break;
			case BPF_JGT:
				c = A > src;
				break;
			case BPF_JGE:
				c = A >= src;
				break;
			case BPF_JSET:
				c = (A & src) != 0;
				break;
			default:
				return 0xdead;
			}
			pc += c ? i->jt : i->jf;
			break;
		}
		case BPF_RET:
			return BPF_RVAL(i->code) == BPF_A ? A : k;
		case BPF_MISC:
			if (BPF_MISCOP(i->code) == BPF_TAX)
				X = A;
			else
				A = X;
			break;
		}
	}
	return 0xdead; /* fell off the end */
}

/* What the kernel's action cache can emulate (kernel/seccomp.c,
 * seccomp_is_const_allow), and the action when it can. */
static bool cache_emulable(const struct prog *p)
{
	for (size_t pc = 0; pc < p->n; pc++) {
		uint16_t c = p->f[pc].code;
		uint32_t k = p->f[pc].k;
		if (c == (BPF_LD | BPF_W | BPF_ABS) &&
		    k >= offsetof(struct seccomp_data, instruction_pointer))
			continue; /* argument loads: those syscalls are not cached, fine */
		if (c != (BPF_LD | BPF_W | BPF_ABS) && c != (BPF_RET | BPF_K) &&
		    c != (BPF_JMP | BPF_JA) && c != (BPF_JMP | BPF_JEQ | BPF_K) &&
		    c != (BPF_JMP | BPF_JGE | BPF_K) && c != (BPF_JMP | BPF_JGT | BPF_K) &&
		    c != (BPF_JMP | BPF_JSET | BPF_K) && c != (BPF_ALU | BPF_AND | BPF_K))
			return false;
	}
	return true;
}

int main(void)
{
	struct prog ours, ref;
	int r = load(seccomp_build, &ours);
	CHECK(r == 0);
	CHECK(load(seccomp_build_libseccomp, &ref) == 0);
	if (sbxt_failed)
		return 1;
	fprintf(stderr, "seccomp program: %zu instructions (libseccomp's: %zu)\n", ours.n, ref.n);
#if defined(__x86_64__)
	CHECK(ours.n < ref.n / 2); /* the generated one is in use */
#endif
	CHECK(cache_emulable(&ours));

	static const uint32_t arches[] = {AUDIT_ARCH_X86_64, AUDIT_ARCH_I386, 0,
					  AUDIT_ARCH_AARCH64};
	static const uint64_t a0s[] = {0,
				       1,
				       2,
				       10,
				       16,
				       17,
				       8,
				       0x20000,
				       0x20008,
				       0xffffffff,
				       0x100000000ull,
				       0x100000001ull,
				       0x1ffffffffull,
				       0x100000002ull,
				       0x100000010ull,
				       0xffffffffffffffffull,
				       0x11,		      /* SIGCHLD: plain fork */
				       0x3d0f00,	      /* pthread_create's */
				       0x3d0f00 | 0x20000000, /* + CLONE_NEWPID */
				       0x80,		      /* CLONE_NEWTIME */
				       0x20000,		      /* CLONE_NEWNS */
				       0x02000000,	      /* CLONE_NEWCGROUP */
				       0x04000000,	      /* CLONE_NEWUTS */
				       0x08000000,	      /* CLONE_NEWIPC */
				       0x10000000,	      /* CLONE_NEWUSER */
				       0x40000000,	      /* CLONE_NEWNET */
				       0x80000000,
				       0x100000000ull | 0x11,
				       0x3};
	static const uint64_t a1s[] = {
	    0, SOCK_STREAM, SOCK_DGRAM, SOCK_RAW, SOCK_SEQPACKET,
	    SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, SOCK_DGRAM | SOCK_CLOEXEC,
	    SOCK_RAW | SOCK_CLOEXEC, 0x100000001ull, 0x100000003ull, 0x11, 0x12,
	    /* ioctl: the refused FS_IOC_SETFLAGS (and its
	       32-bit form) and FS_IOC_FSSETXATTR, with high
	       bits (ignored by the kernel), neighbours, and
	       allowed ones (FS_IOC_GETFLAGS, TCGETS) */
	    0x40086602, 0x40046602, 0x401c5820, 0xffffffff40086602ull, 0x100000000ull | 0x401c5820,
	    0x40086603, 0x401c5821, 0x401c5800, 0xc0086602, 0x80086601, 0x5401};
	uint32_t nrs[1300];
	size_t nn = 0;
	for (uint32_t nr = 0; nr <= 1100; nr++)
		nrs[nn++] = nr;
	static const uint32_t big[] = {
	    0x3fffffff,	      0x40000000, 0x40000001, 0x40000000 | 41, 0x40000000 | 56,
	    0x40000000 | 512, 0x7fffffff, 0x80000000, 0xfffffffe,      0xffffffff,
	    0x10000,	      4095,	  4096};
	for (size_t i = 0; i < ARRAY_SIZE(big); i++)
		nrs[nn++] = big[i];

	unsigned long runs = 0, mismatches = 0, allowed = 0;
	for (size_t ai = 0; ai < ARRAY_SIZE(arches); ai++) {
		for (size_t ni = 0; ni < nn; ni++) {
			uint32_t nr = nrs[ni];
			bool conditional = nr == SYS_clone || nr == SYS_socket ||
					   nr == SYS_personality || nr == SYS_clone3 ||
					   nr == SYS_ioctl;
			size_t n0 = conditional ? ARRAY_SIZE(a0s) : 1,
			       n1 = conditional ? ARRAY_SIZE(a1s) : 1;
			for (size_t i0 = 0; i0 < n0; i0++) {
				for (size_t i1 = 0; i1 < n1; i1++) {
					struct seccomp_data d = {.nr = (int)nr,
								 .arch = arches[ai],
								 .instruction_pointer = 0x401000};
					d.args[0] = conditional ? a0s[i0] : 0x5a5a5a5a5a5a5a5aull;
					d.args[1] = conditional ? a1s[i1] : 0;
					uint32_t x = run(&ours, &d), y = run(&ref, &d);
					runs++;
					allowed += x == SECCOMP_RET_ALLOW;
					if (x != y && mismatches++ < 10)
						fprintf(
						    stderr,
						    "arch %#x nr %u a0 %#llx a1 %#llx: ours %#x, "
						    "libseccomp %#x\n",
						    arches[ai], nr, (unsigned long long)d.args[0],
						    (unsigned long long)d.args[1], x, y);
					CHECK(x != 0xdead);
				}
			}
		}
	}
	fprintf(stderr, "%lu inputs, %lu allowed, %lu mismatches\n", runs, allowed, mismatches);
	CHECK(mismatches == 0);
	CHECK(allowed > 250);
	free(ours.f);
	free(ref.f);
	return sbxt_failed;
}
