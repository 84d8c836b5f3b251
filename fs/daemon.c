/* daemon.c — process set-up shared by the strata daemons (see daemon.h). */
#include "fs/daemon.h"

#include <errno.h>
#include <sys/resource.h>

#include "fs/log.h"
#include "fs/rpc_auth.h"
#include "fs/rpc_tls.h"

void daemon_raise_fd_limit(void)
{
	struct rlimit rl;

	if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
		return;
	rl.rlim_cur = rl.rlim_max;
	if (setrlimit(RLIMIT_NOFILE, &rl) < 0)
		log_warn_errno(-errno, "Failed to raise the open file limit to %llu",
			       (unsigned long long)rl.rlim_max);
}

int daemon_load_key(const char *path, int role)
{
	struct strata_err e = {0};
	int r = rpc_auth_setup(path, (uint8_t)role, &e);
	if (r < 0)
		log_error("%s", strata_err_msg(&e));
	else if (rpc_tls_default())
		log_info("connections use TLS (--tls or $STRATA_TLS=1)");
	return r;
}
