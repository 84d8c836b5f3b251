/* proc.h — runs the I/O of one exec'd host process inside sandboxd's loop:
 * feeds its stdin from a buffer, forwards stdout/stderr to an exec sink up
 * to an output cap (counting what it drops), kills it at its deadline, and
 * reports its exit through the pidfd. Used by backends whose commands are
 * host processes (fncall; container execs that are not run by the agent).
 *
 * Invariants:
 *  1. sink->exit is called exactly once, after the process was reaped and its
 *     pipes drained (or closed), unless sbd_proc_cancel ran first.
 *  2. The proc owns every fd it is given and closes them all. */
#pragma once
#include <stdint.h>
#include <sys/types.h>
#include "backend.h"

struct sbd_proc;

struct sbd_proc_fds {
	pid_t pid;
	int pidfd;
	int stdin_fd;  /* write end, or -1 */
	int stdout_fd; /* read ends */
	int stderr_fd;
};

/* Starts watching; copies stdin data. kill_pgrp: signal the process group.
 * Returns 0 and *ret (owned by the loop until exit/cancel) or -errno (the fds
 * are closed then too and the process killed). */
int sbd_proc_start(struct sbd_loop *loop, const struct sbd_proc_fds *fds,
		   const struct sbd_exec_req *req, const struct sbd_exec_sink *sink,
		   struct sbd_proc **ret);
/* Kills the process (SIGKILL), reaps it, frees everything; no sink calls. */
void sbd_proc_cancel(struct sbd_proc *p);
