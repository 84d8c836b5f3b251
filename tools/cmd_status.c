/* cmd_status.c — `strata status`: every daemon of the home with its pid,
 * address and state (running/starting/dead/stopped; strata-sandboxd: its
 * socket as the address, "starting" until it accepts), the network namespace
 * of each chunkserver that is a host of its own, and the mount.
 *
 * The status is gathered once into a struct status, then emitted as text or,
 * with --json, as one object for machines (through fs/json.h's writer):
 *   {"home":..., "network":{"mode":"netns"|"loopback"|"missing"|"none",
 *    "bridge":..,"addr":..}, "daemons":[{"name":..,"binary":..,"pid":..,
 *    "addr":..,"state":..,"netns":..},...], "meta":...,
 *    "mount":{"path":...,"state":...,"protected":..}, "fuse_holder":{"pid":..,"state":
 *    "none"|"idle"|"holding"|"waiting"|"aborted","takeovers":..}, "ok":true|false}
 * (the holder keeps the mount's FUSE connection across a crash of
 * strata-fuse: "holding" while strata-fuse serves it, "waiting" for the
 * next `strata up` after a crash; the mount's state is then "held"; the
 * mount is "protected" while a holder keeps the connection strata-fuse
 * serves, so that a crash of strata-fuse would not end it)
 * ("netns" is "" where the daemon runs in the root namespace or the node's
 * namespace is missing; a missing one counts as down.)
 * With several nodes (sandboxd per node and strata-apiserver, issue 17) the
 * sandbox nodes' table follows (tools/sbnodes.c; "sandbox_nodes" in JSON):
 * a lost node counts as down.
 * Exit status 0 when everything runs and the mount answers, 3 when not
 * (like `systemctl status`), 1 on errors. */
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include "fs/json.h"
#include "tools/cli.h"

#define VERB "status"

#include "fs/sbnode_proto.h"

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

struct daemon_status {
	struct cli_daemon d;
	pid_t pid;
	char addr[CLI_PATH];
	const char *state; /* running, starting, dead, stopped */
	char ns[64];	   /* its namespace, "" in the root one or when missing */
};

struct status {
	const struct cli_home *h;
	struct cli_net net;
	const char *net_mode;
	char bridge_ip[32];
	int n;
	struct daemon_status d[CLI_MAX_DAEMONS];
	char meta_addr[128];
	enum cli_mount_state mount;
	bool mount_held; /* strata-fuse dead, its connection kept by the holder */
	bool protected;	 /* a holder keeps the connection strata-fuse serves */
	int holder;	 /* cli_fuse_holder_status(): 1 one answers */
	struct fuse_holder_info hi;
	bool ok;
	struct sbnode_table sbn; /* several nodes: the sandbox nodes' leases and load */
	int sbn_err;
};

/* What the holder of the FUSE connection does (fuse/README.md). */
static const char *holder_state(const struct status *s)
{
	if (s->holder <= 0)
		return "none";
	if (!(s->hi.flags & FUSE_HOLDER_F_HOLDING))
		return "idle";
	if (!(s->hi.flags & FUSE_HOLDER_F_CONNECTED))
		return "aborted";
	return s->hi.flags & FUSE_HOLDER_F_SERVED ? "holding" : "waiting";
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

/* Daemon i: pid, address, state, namespace. Returns false when it is down. */
static bool gather_daemon(struct status *s, int i)
{
	struct daemon_status *ds = &s->d[i];
	const struct cli_daemon *d = &ds->d;
	bool ok;

	cli_daemon_get(s->h, i, &ds->d);
	ds->pid = cli_daemon_pid(s->h, d);
	cli_daemon_addr(s->h, d, ds->addr, sizeof(ds->addr));
	if (d->kind == D_FUSE)
		snprintf(ds->addr, sizeof(ds->addr), "%s", s->h->mount);
	if (d->kind == D_META)
		snprintf(s->meta_addr, sizeof(s->meta_addr), "%s", ds->addr);
	if (ds->pid == 0)
		ds->state = "stopped";
	else if (cli_pid_alive(ds->pid, d->binary))
		ds->state = "running";
	else
		ds->state = "dead";
	if (d->kind == D_SANDBOXD && !strcmp(ds->state, "running") &&
	    cli_sandboxd_ping(ds->addr) < 0)
		ds->state = "starting"; /* alive, its socket not accepting yet */
	ok = !strcmp(ds->state, "running");
	if (d->kind == D_SANDBOXD && s->h->nodes > 1 && s->net.on &&
	    cli_net_ns_exists(&s->net, d->index))
		cli_net_ns_name(&s->net, d->index, ds->ns, sizeof(ds->ns));
	if (d->kind == D_CS && s->net.on) {
		if (cli_net_ns_exists(&s->net, d->index))
			cli_net_ns_name(&s->net, d->index, ds->ns, sizeof(ds->ns));
		else
			ok = false; /* its host is gone: up makes it again */
	}
	return ok;
}

/* A home whose recorded bridge is gone (a reboot) is down until `up`
 * remakes it. */
static void gather(const struct cli_home *h, struct status *s)
{
	s->h = h;
	s->holder = cli_fuse_holder_status(h, &s->hi);
	/* A held connection with no strata-fuse: looking at the mount would
	 * wait until `strata up` starts one. */
	s->mount_held = cli_fuse_holder_keeps(h);
	s->mount = s->mount_held ? MNT_STALE : cli_mount_state(h->mount);
	const uint32_t served =
	    FUSE_HOLDER_F_HOLDING | FUSE_HOLDER_F_CONNECTED | FUSE_HOLDER_F_SERVED;
	s->protected = s->holder > 0 && (s->hi.flags & served) == served;
	cli_net_load(h, &s->net);
	s->net_mode = net_mode(h, &s->net);
	cli_net_ip(&s->net, 0, s->bridge_ip, sizeof(s->bridge_ip));
	s->ok = !s->net.created || s->net.on;
	s->n = cli_daemon_count(h);
	for (int i = 0; i < s->n; i++)
		s->ok &= gather_daemon(s, i);
	if (s->mount != MNT_OK)
		s->ok = false;
	s->sbn_err =
	    h->nodes > 1 && s->meta_addr[0] ? cli_meta_sbnodes(h, s->meta_addr, &s->sbn) : -ENOENT;
	for (uint32_t i = 0; s->sbn_err == 0 && i < s->sbn.n; i++)
		s->ok &= !s->sbn.nodes[i].lost;
}

static void emit_json(const struct status *s)
{
	struct jw w;

	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "home", s->h->home);
	jw_key(&w, "network");
	jw_obj(&w);
	jw_kstr(&w, "mode", s->net_mode);
	jw_kstr(&w, "bridge", s->net.created ? s->net.bridge : "");
	jw_kstr(&w, "addr", s->net.created ? s->bridge_ip : "");
	jw_obj_end(&w);
	jw_key(&w, "daemons");
	jw_arr(&w);
	for (int i = 0; i < s->n; i++) {
		const struct daemon_status *ds = &s->d[i];
		jw_obj(&w);
		jw_kstr(&w, "name", ds->d.name);
		jw_kstr(&w, "binary", ds->d.binary);
		jw_kint(&w, "pid", ds->pid);
		jw_kstr(&w, "addr", ds->addr);
		jw_kstr(&w, "state", ds->state);
		jw_kstr(&w, "netns", ds->ns);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_kstr(&w, "meta", s->meta_addr);
	jw_key(&w, "mount");
	jw_obj(&w);
	jw_kstr(&w, "path", s->h->mount);
	jw_kstr(&w, "state", s->mount_held ? "held" : cli_mount_state_name(s->mount));
	jw_kbool(&w, "protected", s->protected);
	jw_obj_end(&w);
	jw_key(&w, "fuse_holder");
	jw_obj(&w);
	jw_kint(&w, "pid", s->holder > 0 ? (int64_t)s->hi.pid : 0);
	jw_kstr(&w, "state", holder_state(s));
	jw_kint(&w, "takeovers", s->holder > 0 ? (int64_t)s->hi.takeovers : 0);
	jw_obj_end(&w);
	if (s->h->nodes > 1)
		cli_sbnodes_json(&w, s->sbn_err == 0 ? &s->sbn : NULL);
	jw_kbool(&w, "ok", s->ok);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static void emit_network(const struct status *s)
{
	if (s->net.on)
		printf("  network  bridge %s %s/24, every chunkserver in its own namespace\n",
		       s->net.bridge, s->bridge_ip);
	else if (s->net.created)
		printf("  network  bridge %s missing (strata up makes it again)\n", s->net.bridge);
	else if (!strcmp(s->net_mode, "none"))
		printf("  network  no bridge or namespaces (strata up makes them)\n");
	else if (s->h->nodes > 1)
		printf("  network  loopback ports\n");
}

static void emit_text(const struct status *s)
{
	const struct cli_home *h = s->h;

	printf("cluster %s  (%d chunkserver(s) x %d target(s), %d replica(s))\n", h->home, h->nodes,
	       h->targets, h->replicas);
	emit_network(s);
	printf("  %-8s %-8s %-22s %-8s %s\n", "NAME", "PID", "ADDRESS", "STATE", "NETNS");
	for (int i = 0; i < s->n; i++) {
		const struct daemon_status *ds = &s->d[i];
		const char *ns = ds->ns[0]			   ? ds->ns
				 : ds->d.kind == D_CS && s->net.on ? "(missing)"
								   : "-";
		printf("  %-8s %-8d %-22s %-8s %s\n", ds->d.name, (int)ds->pid,
		       ds->addr[0] ? ds->addr : "-", ds->state, ns);
	}
	printf("  mount  %s: %s%s\n", h->mount,
	       s->mount_held ? "held (strata-fuse is dead; strata up takes the connection over)"
			     : cli_mount_state_name(s->mount),
	       s->mount == MNT_OK && !s->protected
		   ? ", unprotected (no strata-fuse-holder keeps its FUSE connection: a crash of "
		     "strata-fuse would end it)"
		   : "");
	if (s->holder > 0)
		printf("  holder strata-fuse-holder pid %u: %s (%u takeover(s))\n", s->hi.pid,
		       holder_state(s), s->hi.takeovers);
	else
		printf("  holder none (a crash of strata-fuse ends the mount)\n");
	if (h->nodes > 1 && s->sbn_err == 0)
		cli_sbnodes_print(&s->sbn);
	else if (h->nodes > 1 && s->meta_addr[0])
		printf("  sandbox nodes: cannot read them from strata-meta: %s\n",
		       strerror(-s->sbn_err));
}

int cmd_status(int argc, char **argv)
{
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME | CLI_OPT_JSON,
	    .usage = usage,
	    .no_operands = true,
	};
	struct cli_opts o;
	struct cli_home h;
	struct status s = {0};
	struct stat st;
	int r = cli_parse_opts(&v, argc, argv, &o);

	if (r != CLI_GO)
		return r;
	if (cli_home_open(VERB, o.home, &h) < 0)
		return 1;
	if (stat(h.home, &st) < 0 || !h.have_conf) {
		cli_err(VERB, "no cluster at %s (start one with strata up)", h.home);
		return 1;
	}
	gather(&h, &s);
	if (o.json)
		emit_json(&s);
	else
		emit_text(&s);
	sbnode_table_done(&s.sbn);
	return s.ok ? 0 : 3;
}
