/* sbx_test.h — shared set-up of the sandbox tests: a busybox-static root
 * filesystem in a temp dir, a runtime with its own cgroup subtree and state
 * dir, exec helpers that collect output, and CHECK. */
#pragma once
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>

#include "sandbox/container/strata_sandbox.h"

struct sbxt_env {
	char dir[256];	  /* temp dir holding everything */
	char rootfs[300]; /* busybox root */
	char state[300];
	char cgname[64];
	char agent[PATH_MAX];
	struct sbx_runtime *rt;
};

struct sbxt_out {
	char out[1 << 16], err[1 << 16];
	size_t out_len, err_len;
	size_t total;
};

extern int sbxt_failed;

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK failed: %s\n", __FILE__, __LINE__, #c);      \
			sbxt_failed = 1;                                                           \
		}                                                                                  \
	} while (0)

/* Builds the rootfs and a runtime (pool sizes as given). Returns 0, or an
 * exit status to end the test with (77 with a reason printed, or 1). */
int sbxt_setup(struct sbxt_env *e, unsigned pool);
/* Only the checks, the temp dir and the rootfs (no runtime). */
int sbxt_setup_root(struct sbxt_env *e);
void sbxt_teardown(struct sbxt_env *e);
/* Default sandbox config on e's rootfs. */
struct sbx_config sbxt_config(const struct sbxt_env *e);
/* Runs /bin/sh -c cmd; output into o (NULL: dropped). Returns sbx_exec's. */
int sbxt_sh(struct sbx *s, const char *cmd, uint32_t timeout_ms, struct sbxt_out *o,
	    struct sbx_exec_result *res);
/* Like sbxt_sh with full options. */
int sbxt_exec(struct sbx *s, const struct sbx_exec_opts *opts, struct sbxt_out *o,
	      struct sbx_exec_result *res);
/* Number of host mounts whose line in /proc/self/mountinfo mentions s
 * (host-unharmed checks: other tests mount and unmount concurrently, so only
 * our own paths are counted), less the runtime's own mount of the writable
 * layers' filesystem (state/layers, sandbox/container/layer.c); and
 * with that one (what a freed runtime must have left: none). */
int sbxt_mounts_with(const char *s);
int sbxt_mounts_all_with(const char *s);
/* A number from dir/file (a cgroup file), after key if not NULL ("max 3");
 * LONG_MIN if unreadable, LONG_MIN + 1 if the key differs. */
long sbxt_read_long(const char *dir, const char *file, const char *key);
