/* cmd_status.c — `strata status`: every daemon of the home with its pid,
 * address and state (running/starting/dead/stopped; strata-sandboxd: its
 * socket as the address, "starting" until it accepts), the network namespace
 * of each chunkserver that is a host of its own, and the mount.
 * --json prints one object for machines:
 *   {"home":..., "meta":..., "mount":{"path":...,"state":...},
 *    "network":{"mode":"netns"|"loopback"|"missing"|"none","bridge":..,"addr":..},
 *    "daemons":[{"name":..,"binary":..,"pid":..,"addr":..,"state":..,
 *                "netns":..},...]}
 * ("netns" is "" where the daemon runs in the root namespace or the node's
 * namespace is missing; a missing one counts as down.)
 * Exit status 0 when everything runs and the mount answers, 3 when not
 * (like `systemctl status`), 1 on errors. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "tools/cli.h"

#define VERB "status"

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata status [--home DIR] [--json]\n"
		   "\n"
		   "Shows every daemon of the cluster with its pid, address, state and network\n"
		   "namespace (chunkservers of a multi-node cluster), and the mount.\n"
		   "Exit status: 0 all running and mounted, 3 something is down.\n"
		   "\n"
		   "  --home DIR   cluster home (default $STRATA_HOME, else ./.strata)\n"
		   "  --json       machine-readable output\n");
}

/* The network's mode: "netns" (bridge and namespaces there), "missing" (made
 * by `up`, gone since: a reboot), "none" (not made: the chunkservers' last
 * addresses are not loopback, as after `down`) or "loopback". */
static const char *net_mode(const struct cli_home *h, const struct cli_net *net)
{
	struct cli_daemon d;
	char addr[128];

	if (net->on || net->created)
		return net->on ? "netns" : "missing";
	if (h->nodes < 2)
		return "loopback";
	cli_daemon_get(h, 1, &d);
	cli_daemon_addr(h, &d, addr, sizeof(addr));
	return addr[0] && strncmp(addr, "127.", 4) != 0 ? "none" : "loopback";
}

/* The network line. A home whose recorded bridge is gone (a reboot) is down
 * until `up` remakes it. */
static bool show_network(const struct cli_home *h, const struct cli_net *net, bool json)
{
	char ip[32];
	const char *mode = net_mode(h, net);

	cli_net_ip(net, 0, ip, sizeof(ip));
	if (json) {
		printf(",\"network\":{\"mode\":\"%s\",\"bridge\":", mode);
		cli_json_str(net->created ? net->bridge : "");
		printf(",\"addr\":");
		cli_json_str(net->created ? ip : "");
		printf("}");
	} else if (net->on) {
		printf("  network  bridge %s %s/24, every chunkserver in its own namespace\n",
		       net->bridge, ip);
	} else if (net->created) {
		printf("  network  bridge %s missing (strata up makes it again)\n", net->bridge);
	} else if (!strcmp(mode, "none")) {
		printf("  network  no bridge or namespaces (strata up makes them)\n");
	} else if (h->nodes > 1) {
		printf("  network  loopback ports\n");
	}
	return !net->created || net->on;
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
	struct cli_net net;
	cli_net_load(&h, &net);
	if (json) {
		printf("{\"home\":");
		cli_json_str(h.home);
	} else {
		printf("cluster %s  (%d chunkserver(s) x %d target(s), %d replica(s))\n", h.home,
		       h.nodes, h.targets, h.replicas);
	}
	all_ok = show_network(&h, &net, json);
	if (json)
		printf(",\"daemons\":[");
	else
		printf("  %-8s %-8s %-22s %-8s %s\n", "NAME", "PID", "ADDRESS", "STATE", "NETNS");
	for (int i = 0; i < cli_daemon_count(&h); i++) {
		struct cli_daemon d;
		char addr[CLI_PATH];
		pid_t pid;
		const char *state;
		char ns[64] = "";

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
		if (d.kind == D_CS && net.on) {
			if (cli_net_ns_exists(&net, d.index))
				cli_net_ns_name(&net, d.index, ns, sizeof(ns));
			else
				all_ok = false; /* its host is gone: up makes it again */
		}
		if (json) {
			printf("%s{\"name\":", i ? "," : "");
			cli_json_str(d.name);
			printf(",\"binary\":");
			cli_json_str(d.binary);
			printf(",\"pid\":%d,\"addr\":", (int)pid);
			cli_json_str(addr);
			printf(",\"state\":\"%s\",\"netns\":", state);
			cli_json_str(ns);
			printf("}");
		} else {
			if (!ns[0])
				snprintf(ns, sizeof(ns),
					 d.kind == D_CS && net.on ? "(missing)" : "-");
			printf("  %-8s %-8d %-22s %-8s %s\n", d.name, (int)pid,
			       addr[0] ? addr : "-", state, ns);
		}
	}
	if (ms != MNT_OK)
		all_ok = false;
	if (json) {
		printf("],\"meta\":");
		cli_json_str(meta_addr);
		printf(",\"mount\":{\"path\":");
		cli_json_str(h.mount);
		printf(",\"state\":\"%s\"},\"ok\":%s}\n", cli_mount_state_name(ms),
		       all_ok ? "true" : "false");
	} else {
		printf("  mount  %s: %s\n", h.mount, cli_mount_state_name(ms));
	}
	return all_ok ? 0 : 3;
}
