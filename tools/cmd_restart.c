/* cmd_restart.c — `strata restart fuse`: a new strata-fuse for the cluster's
 * mount without unmounting it (an upgrade, a leak, a changed option): files
 * open on the mount, the image mounts on it and the sandboxes on those keep
 * working, and a request made meanwhile waits, then is answered by the new
 * daemon (fuse/README.md "Restarting without unmounting").
 *
 * Only while strata-fuse-holder keeps the mount's FUSE connection (`strata
 * status`: holder `holding`): the running strata-fuse gets SIGUSR2, finishes
 * the requests it serves, records pending lengths, lets the holder hand the
 * connection on and exits; then `up`'s start of strata-fuse (cli_up_fuse)
 * starts one that takes the connection over. A strata-fuse that is dead
 * while its connection is held is just started (the takeover after a
 * crash). Without a holder a restart would end the mount: refused
 * (`strata down` and `up` restart it with a new mount). */
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"

#define VERB "restart"
#define RESTART_TIMEOUT_S 30 /* default: for the old daemon to go, then the new to answer */

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: strata restart [--home DIR] [--timeout S] fuse\n"
		"\n"
		"Restarts strata-fuse without unmounting: the running one hands the FUSE\n"
		"connection to strata-fuse-holder and exits (SIGUSR2), a new one takes it\n"
		"over. Open files, image mounts and sandboxes on the mount keep working;\n"
		"requests made meanwhile wait for the new daemon. Refused when no holder\n"
		"keeps the connection (strata status): that restart would end the mount.\n"
		"\n"
		"  --home DIR    cluster home (default $STRATA_HOME, else ./.strata)\n"
		"  --timeout S   seconds for the old daemon to exit and for the new one's\n"
		"                mount to answer, each (default %d)\n",
		RESTART_TIMEOUT_S);
}

/* Sends SIGUSR2 to the strata-fuse at pid and waits until it is gone.
 * Returns 0, or -errno after the error line. */
static int hand_over(const struct cli_home *h, const struct cli_daemon *d, pid_t pid, int timeout_s)
{
	struct fuse_holder_info hi;
	const uint32_t held =
	    FUSE_HOLDER_F_HOLDING | FUSE_HOLDER_F_CONNECTED | FUSE_HOLDER_F_SERVED;
	char log[CLI_PATH];

	if (cli_fuse_holder_status(h, &hi) <= 0 || (hi.flags & held) != held) {
		cli_err(VERB,
			"no strata-fuse-holder keeps the FUSE connection of %s: a restart would "
			"end the mount (see strata status; strata down and up remount it)",
			h->mount);
		return -ENOTCONN;
	}
	if (kill(pid, SIGUSR2) < 0) {
		cli_err(VERB, "cannot signal strata-fuse (pid %d): %s", (int)pid, strerror(errno));
		return -errno;
	}
	long long deadline = cli_now_ms() + timeout_s * 1000LL;
	while (cli_pid_alive(pid, d->binary)) {
		if (cli_now_ms() > deadline) {
			cli_err(VERB, "strata-fuse (pid %d) did not hand over within %d s (log %s)",
				(int)pid, timeout_s, cli_path(log, h, "log/%s.log", d->name));
			return -ETIMEDOUT;
		}
		cli_sleep_ms(5);
	}
	return 0;
}

int cmd_restart(int argc, char **argv)
{
	static const struct option own[] = {
	    {"timeout", required_argument, NULL, 'T'},
	    {},
	};
	struct cli_home h;
	struct cli_opts o;
	struct cli_daemon d;
	int timeout_s = RESTART_TIMEOUT_S, r;
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME,
	    .own = own,
	    .on_opt = cli_timeout_option,
	    .arg = &(struct cli_timeout_arg){VERB, &timeout_s},
	    .usage = usage,
	};

	if ((r = cli_parse_opts(&v, argc, argv, &o)) != CLI_GO)
		return r;
	if (o.nargs != 1 || strcmp(o.args[0], "fuse") != 0) {
		cli_err(VERB,
			"%s: only 'fuse' is restarted in place (strata down and up restart "
			"everything; see strata restart --help)",
			o.nargs ? o.args[0] : "what to restart is missing");
		return 2;
	}
	if (cli_home_open(VERB, o.home, &h) < 0)
		return 1;
	if (!h.have_conf) {
		cli_err(VERB, "no cluster at %s (start one with strata up)", h.home);
		return 1;
	}
	cli_daemon_get(&h, h.nodes + 1, &d);
	pid_t old = cli_daemon_pid(&h, &d);
	bool alive = cli_pid_alive(old, d.binary);
	if (!alive && !cli_fuse_holder_keeps(&h)) {
		cli_err(VERB, "strata-fuse is not running and no connection is held (strata up "
			      "mounts anew)");
		return 1;
	}
	long long t0 = cli_now_ms();
	if (alive && hand_over(&h, &d, old, timeout_s) < 0)
		return 1;
	long long t1 = cli_now_ms();
	if (!cli_fuse_holder_keeps(&h))
		fprintf(stderr,
			"strata restart: warning: the connection of %s was not kept; "
			"mounting anew\n",
			h.mount);
	if (cli_up_fuse(&h, timeout_s * 1000) < 0)
		return 1;
	printf("strata: restarted strata-fuse (pid %d, was %d) without unmounting %s: old one "
	       "gone after %lld ms, new one answering after %lld ms\n",
	       (int)cli_daemon_pid(&h, &d), alive ? (int)old : 0, h.mount, t1 - t0,
	       cli_now_ms() - t0);
	return 0;
}
