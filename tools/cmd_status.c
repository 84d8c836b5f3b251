/* cmd_status.c — `strata status`: every daemon of the home with its pid,
 * address and state (running/starting/dead/stopped; strata-sandboxd: its
 * socket as the address, "starting" until it accepts), and the mount.
 * --json prints one object for machines:
 *   {"home":..., "meta":..., "mount":{"path":...,"state":...},
 *    "daemons":[{"name":..,"binary":..,"pid":..,"addr":..,"state":..},...]}
 * Exit status 0 when everything runs and the mount answers, 3 when not
 * (like `systemctl status`), 1 on errors. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "cli.h"

#define VERB "status"

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata status [--home DIR] [--json]\n"
		   "\n"
		   "Shows every daemon of the cluster with its pid, address and state, and the\n"
		   "mount. Exit status: 0 all running and mounted, 3 something is down.\n"
		   "\n"
		   "  --home DIR   cluster home (default $STRATA_HOME, else ./.strata)\n"
		   "  --json       machine-readable output\n");
}

/* Prints s as a JSON string. */
static void json_str(const char *s)
{
	putchar('"');
	for (; *s; s++) {
		unsigned char ch = (unsigned char)*s;
		if (ch == '"' || ch == '\\')
			printf("\\%c", ch);
		else if (ch < 0x20)
			printf("\\u%04x", ch);
		else
			putchar(ch);
	}
	putchar('"');
}

int cmd_status(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"home", required_argument, NULL, 'H'},
	    {"json", no_argument, NULL, 'j'},
	    {"help", no_argument, NULL, 'h'},
	    {},
	};
	struct cli_home h;
	const char *home = NULL;
	bool json = false, all_ok = true;
	int o, r;
	struct stat st;

	opterr = 0;
	while ((o = getopt_long(argc, argv, ":h", opts, NULL)) != -1) {
		switch (o) {
		case 'H':
			home = optarg;
			break;
		case 'j':
			json = true;
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
		cli_err(VERB, "unexpected argument '%s' (see strata status --help)", argv[optind]);
		return 2;
	}
	if ((r = cli_home_resolve(home, &h)) < 0) {
		cli_err(VERB, "bad home directory: %s", strerror(-r));
		return 1;
	}
	if (stat(h.home, &st) < 0 || !h.have_conf) {
		cli_err(VERB, "no cluster at %s (start one with strata up)", h.home);
		return 1;
	}

	enum cli_mount_state ms = cli_mount_state(h.mount);
	char meta_addr[128] = "";
	if (json) {
		printf("{\"home\":");
		json_str(h.home);
		printf(",\"daemons\":[");
	} else {
		printf("cluster %s  (%d chunkserver(s) x %d target(s), %d replica(s))\n", h.home,
		       h.nodes, h.targets, h.replicas);
		printf("  %-8s %-8s %-22s %s\n", "NAME", "PID", "ADDRESS", "STATE");
	}
	for (int i = 0; i < cli_daemon_count(&h); i++) {
		struct cli_daemon d;
		char addr[CLI_PATH];
		pid_t pid;
		const char *state;

		cli_daemon_get(&h, i, &d);
		pid = cli_daemon_pid(&h, &d);
		cli_daemon_addr(&h, &d, addr, sizeof(addr));
		if (d.kind == D_FUSE)
			snprintf(addr, sizeof(addr), "%s", h.mount);
		if (d.kind == D_META)
			snprintf(meta_addr, sizeof(meta_addr), "%s", addr);
		if (pid == 0)
			state = "stopped";
		else if (cli_pid_alive(pid, d.binary))
			state = "running";
		else
			state = "dead";
		if (d.kind == D_SANDBOXD && !strcmp(state, "running") &&
		    cli_sandboxd_ping(addr) < 0)
			state = "starting"; /* alive, its socket not accepting yet */
		if (strcmp(state, "running") != 0)
			all_ok = false;
		if (json) {
			printf("%s{\"name\":", i ? "," : "");
			json_str(d.name);
			printf(",\"binary\":");
			json_str(d.binary);
			printf(",\"pid\":%d,\"addr\":", (int)pid);
			json_str(addr);
			printf(",\"state\":\"%s\"}", state);
		} else {
			printf("  %-8s %-8d %-22s %s\n", d.name, (int)pid, addr[0] ? addr : "-",
			       state);
		}
	}
	if (ms != MNT_OK)
		all_ok = false;
	if (json) {
		printf("],\"meta\":");
		json_str(meta_addr);
		printf(",\"mount\":{\"path\":");
		json_str(h.mount);
		printf(",\"state\":\"%s\"},\"ok\":%s}\n", cli_mount_state_name(ms),
		       all_ok ? "true" : "false");
	} else {
		printf("  mount  %s: %s\n", h.mount, cli_mount_state_name(ms));
	}
	return all_ok ? 0 : 3;
}
