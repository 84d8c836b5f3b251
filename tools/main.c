/* main.c — the `strata` command line: dispatches to one file per verb
 * (cmd_<verb>.c). Every verb has --help, exits 0 on success and non-zero with
 * one line on stderr otherwise. Clients find the cluster through --home or
 * $STRATA_HOME (default ./.strata). */
#include <stdio.h>
#include <string.h>
#include "tools/cli.h"

struct verb {
	const char *name;
	int (*fn)(int argc, char **argv);
	const char *summary;
};

static const struct verb verbs[] = {
    {"up", cmd_up, "start (or repair) a cluster on this machine"},
    {"down", cmd_down, "unmount and stop the cluster"},
    {"restart", cmd_restart, "restart strata-fuse without unmounting"},
    {"admin", cmd_admin, "cluster map: nodes, targets, chains; replica verify"},
    {"fsck", cmd_fsck, "check (and --repair) namespace, chunks and replicas online"},
    {"status", cmd_status, "show the daemons, their addresses and the mount"},
    {"image", cmd_image, "import, pull, list, remove, prefetch and mount images"},
    {"sandbox", cmd_sandbox, "create, exec in, list and remove sandboxes"},
    {"tenant", cmd_tenant, "tenants of sandboxd: tokens, quotas, admins"},
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata VERB [OPTIONS]   (strata VERB --help for each)\n\nVerbs:\n");
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		fprintf(f, "  %-8s %s\n", verbs[i].name, verbs[i].summary);
	fprintf(f,
		"\nThe cluster is found through --home DIR or $STRATA_HOME (default ./.strata).\n");
}

int main(int argc, char **argv)
{
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h") || !strcmp(argv[1], "help")) {
		usage(stdout);
		return 0;
	}
	for (size_t i = 0; i < sizeof(verbs) / sizeof(verbs[0]); i++)
		if (!strcmp(argv[1], verbs[i].name))
			return verbs[i].fn(argc - 1, argv + 1);
	cli_err(NULL, "unknown verb '%s' (see strata --help)", argv[1]);
	return 2;
}
