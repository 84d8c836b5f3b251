/* spawn_agent.h — for tests of the agent protocol without namespaces: runs
 * $STRATA_BIN/strata-agent as a plain child on a socketpair (its fd 3) and
 * attaches the library to it. Used by tests/sandbox and tests/sandbox/sandboxd. */
#pragma once
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/container/strata_sandbox.h"

/* *ret_pid and *ret_raw_fd (the library's end of the stream) may be NULL. */
static inline int spawn_test_agent(struct sbx **ret, pid_t *ret_pid, int *ret_raw_fd)
{
	const char *bin = getenv("STRATA_BIN");
	char agent[4096];
	int sp[2];
	snprintf(agent, sizeof(agent), "%s/strata-agent", bin ? bin : ".");
	if (access(agent, X_OK) < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return -errno;
	pid_t pid = fork();
	if (pid == 0) {
		dup2(sp[1], 3);
		execl(agent, "strata-agent", (char *)NULL);
		_exit(127);
	}
	close(sp[1]);
	if (ret_pid)
		*ret_pid = pid;
	if (ret_raw_fd)
		*ret_raw_fd = sp[0];
	return sbx_attach_agent(sp[0], pid, ret);
}
