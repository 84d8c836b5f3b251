/* zygote_micro.c — what an agent "fork server" (zygote) would save per
 * staging, against today's clone + exec of strata-agent (bench/sandbox/
 * README.md, "The agent as a fork server"). Built twice by zygote_micro.sh:
 *
 *   driver (gcc, dynamic, like sandboxd)  zygote_micro exec|zygote N AGENT ZYGOTE
 *   server (musl-gcc -static -DZYGOTE, a small process like the agent)
 *
 * exec    per iteration, as sandbox.c stages on cgroup v1: a socketpair,
 *         clone(CLONE_VM | CLONE_VFORK | CLONE_FILES | NEWPID | NEWUTS |
 *         PIDFD) on a kept stack; the child takes a private fd table
 *         (close_range UNSHARE), puts its socket end on fd 3 and execs the
 *         agent from a memfd with "--stage", which exits at once (no
 *         seccomp program on fd 4); the driver reads the stream's end and
 *         reaps through the pidfd.
 * zygote  the same through a fork server exec'd once: the driver sends a
 *         byte with five fds (the socket end, and four standing for the
 *         cgroup and namespace fds a staging passes), the server clones
 *         (CLONE_PARENT | NEWPID | NEWUTS: the driver stays the parent) a
 *         child that does the agent's two prctls and says hello with
 *         SCM_CREDENTIALS (its pid, translated for the driver) and exits;
 *         the server closes the fds and waits for the next request (no
 *         reply); the driver takes the pid from the hello, opens a pidfd,
 *         reaps.
 * fork    (server alone: ZYGOTE fork N) the lower bound of a fork server,
 *         no request: clone(NEWPID | NEWUTS) + exit + wait.
 *
 * Prints the CPU per iteration (this process and its reaped children: the
 * agents, the server). Neither does the staging work itself (cgroups,
 * mounts), which is the same both ways. */
#define _GNU_SOURCE
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

static double cpu_s(void)
{
	struct rusage a, b;
	getrusage(RUSAGE_SELF, &a);
	getrusage(RUSAGE_CHILDREN, &b);
	return (double)(a.ru_utime.tv_sec + a.ru_stime.tv_sec + b.ru_utime.tv_sec +
			b.ru_stime.tv_sec) +
	       (double)(a.ru_utime.tv_usec + a.ru_stime.tv_usec + b.ru_utime.tv_usec +
			b.ru_stime.tv_usec) /
		   1e6;
}

#ifdef ZYGOTE
static char image[100 << 10]; /* about the agent's size, touched */

static _Noreturn void child(int sock)
{
	prctl(PR_SET_NAME, "strata-agent");
	prctl(PR_SET_DUMPABLE, 0);
	struct ucred uc = {.pid = getpid(), .uid = 0, .gid = 0};
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(struct ucred))];
	} u;
	memset(&u, 0, sizeof(u));
	char hello = 'H';
	struct iovec iov = {&hello, 1};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_CREDENTIALS;
	c->cmsg_len = CMSG_LEN(sizeof(uc));
	memcpy(CMSG_DATA(c), &uc, sizeof(uc));
	_exit(sendmsg(sock, &m, 0) == 1 ? 0 : 2);
}

int main(int argc, char **argv)
{
	memset(image, 1, sizeof(image));
	if (argc > 2 && !strcmp(argv[1], "fork")) {
		int n = atoi(argv[2]);
		double c0 = cpu_s();
		for (int i = 0; i < n; i++) {
			long pid =
			    syscall(SYS_clone, CLONE_NEWPID | CLONE_NEWUTS | SIGCHLD, 0, 0, 0, 0);
			if (pid == 0) {
				prctl(PR_SET_NAME, "strata-agent");
				prctl(PR_SET_DUMPABLE, 0);
				image[0] = 2;
				_exit(0);
			}
			waitpid((pid_t)pid, NULL, 0);
		}
		printf("fork    %7.1f us CPU per iteration\n", (cpu_s() - c0) / n * 1e6);
		return 0;
	}
	for (;;) { /* the server: requests on fd 3 */
		char b;
		int fds[8], nf = 0;
		union {
			struct cmsghdr h;
			char b[CMSG_SPACE(8 * sizeof(int))];
		} u;
		struct iovec iov = {&b, 1};
		struct msghdr m = {.msg_iov = &iov,
				   .msg_iovlen = 1,
				   .msg_control = u.b,
				   .msg_controllen = sizeof(u.b)};
		if (recvmsg(3, &m, MSG_CMSG_CLOEXEC) <= 0)
			return 0;
		struct cmsghdr *c = CMSG_FIRSTHDR(&m);
		if (c) {
			nf = (int)((c->cmsg_len - CMSG_LEN(0)) / sizeof(int));
			memcpy(fds, CMSG_DATA(c), (size_t)nf * sizeof(int));
		}
		long pid =
		    syscall(SYS_clone, CLONE_PARENT | CLONE_NEWPID | CLONE_NEWUTS, 0, 0, 0, 0);
		if (pid == 0)
			child(fds[0]);
		for (int i = 0; i < nf; i++)
			close(fds[i]);
	}
}

#else /* the driver */
#include <linux/sched.h>
#include <sys/mman.h>
#include <sys/sendfile.h>
#include <sys/stat.h>

static int agent_fd, child_sock;

static int exec_child(void *arg)
{
	(void)arg;
	static char *const av[] = {"strata-agent", "--stage", NULL};
	static char *const ev[] = {NULL};
	syscall(SYS_close_range, agent_fd + 1, ~0U, 2 /* CLOSE_RANGE_UNSHARE */);
	dup2(child_sock, 3);
	syscall(SYS_execveat, agent_fd, "", av, ev, AT_EMPTY_PATH);
	_exit(127);
}

int main(int argc, char **argv)
{
	if (argc < 5) {
		fprintf(stderr, "usage: zygote_micro exec|zygote N AGENT ZYGOTE\n");
		return 2;
	}
	int n = atoi(argv[2]);
	bool zyg = !strcmp(argv[1], "zygote");
	int in = open(argv[3], O_RDONLY | O_CLOEXEC);
	struct stat st;
	if (in < 0 || fstat(in, &st) < 0)
		return 1;
	agent_fd = memfd_create("strata-agent", MFD_CLOEXEC);
	if (sendfile(agent_fd, in, NULL, (size_t)st.st_size) != st.st_size)
		return 1;
	int ctl[2], dummy[4];
	socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl);
	for (int i = 0; i < 4; i++)
		dummy[i] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	if (zyg) {
		struct clone_args ca = {.exit_signal = 0}; /* as staging children: no SIGCHLD */
		long p = syscall(SYS_clone3, &ca, sizeof(ca));
		if (p == 0) {
			dup2(ctl[1], 3);
			syscall(SYS_close_range, 4, ~0U, 0);
			execl(argv[4], "zygote", NULL);
			_exit(127);
		}
	}
	const size_t stack_size = 256 << 10;
	char *stack =
	    mmap(NULL, stack_size, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
	double c0 = cpu_s();
	for (int i = 0; i < n; i++) {
		int ss[2], pidfd = -1;
		char b;
		if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ss) < 0)
			return 1;
		if (!zyg) {
			child_sock = ss[1];
			if (clone(exec_child, stack + stack_size,
				  CLONE_VM | CLONE_VFORK | CLONE_FILES | CLONE_NEWPID |
				      CLONE_NEWUTS | CLONE_PIDFD,
				  NULL, &pidfd) < 0) {
				perror("clone");
				return 1;
			}
			close(ss[1]);
			if (read(ss[0], &b, 1) != 0) /* the agent exits without a hello */
				return 1;
		} else {
			int on = 1, fds[5] = {ss[1], dummy[0], dummy[1], dummy[2], dummy[3]};
			setsockopt(ss[0], SOL_SOCKET, SO_PASSCRED, &on, sizeof(on));
			union {
				struct cmsghdr h;
				char b[CMSG_SPACE(sizeof(fds))];
			} u;
			memset(&u, 0, sizeof(u));
			b = 1;
			struct iovec iov = {&b, 1};
			struct msghdr m = {.msg_iov = &iov,
					   .msg_iovlen = 1,
					   .msg_control = u.b,
					   .msg_controllen = sizeof(u.b)};
			struct cmsghdr *c = CMSG_FIRSTHDR(&m);
			c->cmsg_level = SOL_SOCKET;
			c->cmsg_type = SCM_RIGHTS;
			c->cmsg_len = CMSG_LEN(sizeof(fds));
			memcpy(CMSG_DATA(c), fds, sizeof(fds));
			if (sendmsg(ctl[0], &m, 0) != 1)
				return 1;
			close(ss[1]);
			union {
				struct cmsghdr h;
				char b[CMSG_SPACE(sizeof(struct ucred))];
			} v;
			struct iovec iv = {&b, 1};
			struct msghdr mm = {.msg_iov = &iv,
					    .msg_iovlen = 1,
					    .msg_control = v.b,
					    .msg_controllen = sizeof(v.b)};
			struct ucred uc;
			if (recvmsg(ss[0], &mm, 0) != 1 || !CMSG_FIRSTHDR(&mm))
				return 1;
			memcpy(&uc, CMSG_DATA(CMSG_FIRSTHDR(&mm)), sizeof(uc));
			pidfd = (int)syscall(SYS_pidfd_open, uc.pid, 0);
		}
		close(ss[0]);
		siginfo_t si;
		if (pidfd < 0 || waitid(P_PIDFD, (id_t)pidfd, &si, WEXITED | __WALL) < 0) {
			perror("waitid");
			return 1;
		}
		close(pidfd);
	}
	close(ctl[0]);
	if (zyg) {
		siginfo_t si;
		waitid(P_ALL, 0, &si, WEXITED | __WALL); /* the server, counted as a child */
	}
	printf("%-7s %7.1f us CPU per iteration\n", argv[1], (cpu_s() - c0) / n * 1e6);
	return 0;
}
#endif
