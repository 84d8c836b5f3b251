/* cmd_down.c — `strata down`: unmount, then stop strata-fuse, the chunkservers
 * and strata-meta (in that order: clients before servers), SIGTERM first and
 * SIGKILL after a timeout. Pid files are removed; address files stay so that
 * the next `strata up` gets the same ports back. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include "cli.h"

#define VERB "down"

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata down [--home DIR] [--timeout S]\n"
		   "\n"
		   "Unmounts the cluster's mount and stops its daemons (SIGTERM, then SIGKILL\n"
		   "after S seconds, default 10). Data in the home stays.\n"
		   "\n"
		   "  --home DIR   cluster home (default $STRATA_HOME, else ./.strata)\n");
}

int cmd_down(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"home", required_argument, NULL, 'H'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	struct cli_home h;
	const char *home = NULL;
	int timeout_s = 10, o, r, stopped = 0, failed = 0;
	struct stat st;

	opterr = 0;
	while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (o) {
		case 'H':
			home = optarg;
			break;
		case 'T':
			if (cli_parse_int(optarg, 1, 3600, &timeout_s) < 0) {
				cli_err(VERB, "--timeout wants seconds (1..3600), not '%s'",
					optarg);
				return 2;
			}
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			cli_bad_option(VERB, o, argv);
			return 2;
		}
	}
	if (optind < argc) {
		cli_err(VERB, "unexpected argument '%s' (see strata down --help)", argv[optind]);
		return 2;
	}
	if ((r = cli_home_resolve(home, &h)) < 0) {
		cli_err(VERB, "bad home directory: %s", strerror(-r));
		return 1;
	}
	if (stat(h.home, &st) < 0) {
		printf("strata: nothing to stop, %s does not exist\n", h.home);
		return 0;
	}

	/* Which daemons run now (strata-fuse exits by itself once unmounted). */
	bool was_alive[CLI_MAX_NODES + 2];
	for (int i = 0; i < cli_daemon_count(&h); i++) {
		struct cli_daemon d;
		cli_daemon_get(&h, i, &d);
		was_alive[i] = cli_pid_alive(cli_daemon_pid(&h, &d), d.binary);
	}

	/* Unmount while strata-fuse still runs, so it can exit on its own. */
	enum cli_mount_state ms = cli_mount_state(h.mount);
	if (ms == MNT_OK || ms == MNT_STALE) {
		if ((r = cli_umount(h.mount)) < 0) {
			cli_err(VERB, "cannot unmount %s: %s", h.mount, strerror(-r));
			failed++;
		}
	}
	for (int i = cli_daemon_count(&h) - 1; i >= 0; i--) {
		struct cli_daemon d;
		char path[CLI_PATH];
		pid_t pid;

		cli_daemon_get(&h, i, &d);
		pid = cli_daemon_pid(&h, &d);
		if (pid > 0 && cli_pid_alive(pid, d.binary)) {
			if ((r = cli_stop_pid(pid, d.binary, timeout_s * 1000)) < 0) {
				cli_err(VERB, "cannot stop %s (pid %d): %s", d.name, (int)pid,
					strerror(-r));
				failed++;
				continue;
			}
		}
		if (was_alive[i])
			stopped++;
		unlink(cli_path(path, &h, "run/%s.pid", d.name));
	}
	/* The fuse daemon may have left the mount behind if it was killed. */
	if (cli_mount_state(h.mount) != MNT_NONE && cli_mount_state(h.mount) != MNT_OTHER)
		cli_umount(h.mount);
	if (failed)
		return 1;
	if (stopped)
		printf("strata: stopped %d daemon(s) of the cluster at %s\n", stopped, h.home);
	else
		printf("strata: nothing was running at %s\n", h.home);
	return 0;
}
