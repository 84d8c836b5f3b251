/* sbx_privs.h — the last step of every sandbox's set-up: what a process
 * keeps of root's privileges. strata-agent does it at START (agent_stage.c;
 * the agent is a static binary of its own, hence a header rather than a
 * function of the library) and the library's workers before their exec
 * (worker.c): one piece of code for both.
 *
 * In order: the bounding set is cut to keep, the ambient set cleared, the
 * permitted and effective sets made keep (inheritable empty), no_new_privs
 * set (nothing exec'd can gain a capability or an id back, root's exec
 * included), and the seccomp program loaded when one is given. No malloc:
 * a clone child calls it. */
#pragma once
#include <errno.h>
#include <linux/capability.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <stdint.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <unistd.h>

/* Returns 0 or -errno (the process is then half dropped: end it). filter
 * NULL (or len 0): no seccomp program. */
static inline int sbx_drop_privileges(uint64_t keep, const struct sock_filter *filter,
				      unsigned short len)
{
	/* Capabilities are numbered 0..CAP_LAST_CAP: the first EINVAL is past
	 * the last (the ~25 calls beyond it were a third of the prctls). */
	for (int c = 0; c < 64; c++)
		if (!(keep & (1ull << c)) && prctl(PR_CAPBSET_DROP, c, 0, 0, 0) < 0) {
			if (errno != EINVAL)
				return -errno;
			break;
		}
	if (prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0) < 0)
		return -errno;
	struct __user_cap_header_struct h = {.version = _LINUX_CAPABILITY_VERSION_3};
	struct __user_cap_data_struct d[2];
	memset(d, 0, sizeof(d));
	for (int i = 0; i < 2; i++)
		d[i].effective = d[i].permitted = (uint32_t)(keep >> (32 * i));
	if (syscall(SYS_capset, &h, d) < 0)
		return -errno;
	if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
		return -errno;
	if (!filter || !len)
		return 0;
	struct sock_fprog prog = {.len = len, .filter = (struct sock_filter *)filter};
	if (prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog, 0, 0) < 0)
		return -errno;
	return 0;
}
