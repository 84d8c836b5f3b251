/* test_child_status.c — how a staging child that fails reports it on cgroup
 * v1 (sandbox.c clone_vm): it runs in its parent's memory and writes
 * {step, errno} into child_args.status before it exits, so that when the
 * vfork-style clone returns the parent reads the failure there, without a
 * pipe. Here the child fails at joining the template mount namespace (an
 * invalid fd: EBADF), in a plain CLONE_VM | CLONE_VFORK child without new
 * namespaces: no privileges needed. Also that a child failing at its first
 * step, a cgroup join, reports that step, and that a second failure on the
 * same thread (the child uses its parent thread's TLS) reports its own. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"
#include "tests/sandbox/sbx_test.h"

/* Clones child_main_vm as sandbox.c does (without namespaces) and returns
 * the step it reported, with its errno in *err; 0 if none. */
static int run_child(struct child_args *a, int *err)
{
	static char stack[256 << 10] __attribute__((aligned(16)));
	int st[2] = {0, 0};
	a->status = st;
	a->err_fd = -1;
	pid_t pid =
	    clone(child_main_vm, stack + sizeof(stack), CLONE_VM | CLONE_VFORK | SIGCHLD, a);
	if (pid < 0)
		return -errno;
	int ws = 0;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	CHECK(WIFEXITED(ws) && WEXITSTATUS(ws) == 127);
	*err = st[1];
	return __atomic_load_n(&st[0], __ATOMIC_ACQUIRE);
}

static struct child_args base_args(void)
{
	struct child_args a;
	memset(&a, 0, sizeof(a));
	a.mntns_fd = a.netns_fd = a.ipcns_fd = -1;
	a.agent_fd = a.seccomp_fd = a.sock_fd = a.err_fd = -1;
	for (int i = 0; i < CG_NCTRL; i++)
		a.procs_fd[i] = -1;
	return a;
}

int main(void)
{
	int err = 0;
	struct child_args a = base_args();
	int step = run_child(&a, &err);
	CHECK(step > 0 && strcmp(child_step_name(step), "mount namespace") == 0);
	CHECK(err == EBADF);

	/* a "tasks" file that cannot be written (read-only fd): step "join
	 * cgroup", its errno */
	a = base_args();
	a.procs_fd[0] = open("/dev/null", O_RDONLY | O_CLOEXEC);
	CHECK(a.procs_fd[0] >= 0);
	step = run_child(&a, &err);
	CHECK(step > 0 && strcmp(child_step_name(step), "join cgroup") == 0);
	CHECK(err == EBADF);
	close(a.procs_fd[0]);

	/* and again the first failure, on the same thread */
	a = base_args();
	step = run_child(&a, &err);
	CHECK(step > 0 && strcmp(child_step_name(step), "mount namespace") == 0);
	fprintf(stderr, "child status: failures reported as step and errno\n");
	return sbxt_failed;
}
