/* daemon.h — process set-up shared by the strata daemons. */
#pragma once

/* Raises the soft RLIMIT_NOFILE to the hard limit; logs a warning if it
 * cannot. A daemon holds an fd per connection, open chunk, sandbox (agent
 * stream, pidfd, cgroup files) or kept namespace, and the usual soft default
 * of 1024 runs out long before memory does (sandboxd with 1,000 sandboxes
 * needs several thousand). No daemon uses select(), so fds above 1024 are
 * safe. Sandboxes get the usual limit back (sandbox/container/child.c).
 * Call after log_init(). */
void daemon_raise_fd_limit(void);

/* Loads the cluster key (--key path, else $STRATA_KEY) as the process
 * credential with role (rpc_auth_setup); logs the reason and returns
 * -errno if the key is missing, unreadable or malformed; notes whether
 * connections use TLS (rpc_tls_default: --tls, set before). Call after
 * log_init(), before any thread. */
int daemon_load_key(const char *path, int role);
