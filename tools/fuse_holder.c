/* fuse_holder.c — the CLI's view of strata-fuse-holder, the process that
 * keeps the cluster mount's FUSE connection alive while strata-fuse is dead
 * (fs/fuse_holder.h, fuse/README.md): where its socket is, what it holds,
 * and stopping it. `up` lets a new strata-fuse take a held connection over
 * instead of unmounting, `status` shows it, `down` stops it. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>
#include "tools/cli.h"

#define HOLDER_BINARY "strata-fuse-holder"

char *cli_fuse_holder_socket(const struct cli_home *h, char *buf)
{
	return cli_path(buf, h, "run/fuse-holder.sock");
}

int cli_fuse_holder_status(const struct cli_home *h, struct fuse_holder_info *ret)
{
	char sock[CLI_PATH];
	int r = fuse_holder_call(cli_fuse_holder_socket(h, sock), FUSE_HOLDER_STATUS, ret, NULL);

	if (r == -ENOENT || r == -ECONNREFUSED)
		return 0;
	return r < 0 ? r : 1;
}

bool cli_fuse_holder_keeps(const struct cli_home *h)
{
	struct fuse_holder_info hi;
	const uint32_t want = FUSE_HOLDER_F_HOLDING | FUSE_HOLDER_F_CONNECTED;

	return cli_fuse_holder_status(h, &hi) > 0 && (hi.flags & want) == want &&
	       !(hi.flags & FUSE_HOLDER_F_SERVED);
}

int cli_fuse_holder_stop(const struct cli_home *h, int timeout_ms)
{
	struct fuse_holder_info hi;
	char sock[CLI_PATH];
	int r = cli_fuse_holder_status(h, &hi);

	if (r <= 0)
		return r;
	cli_fuse_holder_socket(h, sock);
	if (fuse_holder_call(sock, FUSE_HOLDER_STOP, NULL, NULL) < 0)
		kill((pid_t)hi.pid, SIGTERM);
	r = cli_stop_pid((pid_t)hi.pid, HOLDER_BINARY, timeout_ms);
	unlink(sock);
	return r < 0 ? r : 1;
}
