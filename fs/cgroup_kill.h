/* cgroup_kill.h — ending every process of a sandbox's cgroup, frozen or not.
 *
 * What `strata down` and strata-sandboxd use for a container sandbox they
 * can no longer drive (its sandboxd is gone, or it could not be re-adopted):
 * the sandbox's cgroup is found from its agent's /proc/<pid>/cgroup, every
 * process in it is killed, and the cgroup is thawed. A frozen process does
 * not die of SIGKILL on cgroup v1 until its freezer cgroup is thawed (on v2
 * a fatal signal gets through, and cgroup.kill kills the whole cgroup): the
 * signal is sent first, so that a thawed process dies before it runs any of
 * its own code. Library code: no logging. */
#pragma once
#include <limits.h>
#include <stdbool.h>
#include <sys/types.h>

/* The cgroup of a process, as found from the host. */
struct cgk_target {
	char dir[PATH_MAX];	    /* its cgroup.procs lists every process (v1 pids or v2) */
	char freezer_dir[PATH_MAX]; /* v1: its freezer cgroup; "" for the root or none */
	bool v2;
};

/* Fills ret from /proc/<pid>/cgroup: the cgroup of the v1 hierarchy with the
 * pids controller, else the v2 one, and on v1 its freezer cgroup. The last
 * component of the cgroup's path must equal name, or start with it when
 * prefix is set (a sandbox's slot is "sbx-..."): anything else is not the
 * cgroup of one sandbox, and the answer is -ESTALE. Returns 0, -ESRCH (no
 * such process), -ENOENT (no such hierarchy mounted), -ESTALE. */
int cgk_target_of_pid(pid_t pid, const char *name, bool prefix, struct cgk_target *ret);

/* Kills every process of t (v2: cgroup.kill where the kernel has it; else
 * SIGKILL to each process in cgroup.procs), thaws it, and waits up to
 * wait_ms until no process is left, killing again what appeared meanwhile.
 * Returns the number of processes it saw at first (>= 0), or -ETIMEDOUT
 * when some are still there. */
int cgk_kill(const struct cgk_target *t, int wait_ms);
