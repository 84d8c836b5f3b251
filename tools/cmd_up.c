/* cmd_up.c — `strata up`: bring a cluster on this machine to "everything
 * running".
 *
 * With several chunkservers each is a separate host: its own network
 * namespace and address on a veth to a bridge (netns.c), strata-meta on the
 * bridge's address; `--no-netns`, or namespaces that cannot be made here
 * (with a one-line notice), keeps them on loopback ports.
 *
 * Order: the network, strata-meta, then the chunkservers (they register with meta), then
 * strata-fuse (it needs routing), then strata-sandboxd (the node agent; it
 * finds the image store through H/cluster.env, ready when H/run/sandboxd.sock
 * accepts). Each step first looks at what is already
 * there, so `up` is idempotent and also a repair: a daemon that died is
 * started again on the address it had (from H/run/<name>.addr), a stale
 * mount (its fuse daemon gone) is lazily unmounted before a new strata-fuse
 * mounts it again. If meta cannot get its old port back, the chunkservers
 * and the mount are restarted against the new address; a daemon running on
 * another network than this run's (the mode changed, a namespace was
 * recreated) is restarted too. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <linux/close_range.h>
#include <unistd.h>
#include "tools/cli.h"
#include "fs/types.h"
#include "fs/rpc_tls.h"

#define VERB "up"
/* The port of a chunkserver that has an address of its own. */
#define NODE_PORT 7000

struct up_ctx {
	struct cli_home h;
	int timeout_ms;
	const char *log_level;
	struct cli_net net;
	char meta_addr[128];
	bool meta_moved; /* meta came back on another address */
	int started, already;
};

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: strata up [--home DIR] [--mount DIR] [--nodes N] [--targets M] [--replicas R]\n"
	    "                 [--no-netns | --netns] [--tls] [--timeout S]\n"
	    "\n"
	    "Starts a cluster on this machine (strata-meta, N chunkservers with M targets\n"
	    "each, strata-fuse, strata-sandboxd) from the home DIR, or repairs one whose\n"
	    "daemons died. With N > 1 every chunkserver is a separate host: its own network\n"
	    "namespace and address (10.78.Y.(10+i)) on a veth to a bridge (10.78.Y.1, where\n"
	    "strata-meta listens); nothing is routed off the machine. Without root or\n"
	    "iproute2 the chunkservers listen on 127.0.0.1 ports instead (with a notice).\n"
	    "\n"
	    "  --home DIR      cluster home (default $STRATA_HOME, else ./.strata)\n"
	    "  --mount DIR     mount point (default <home>/mnt)\n"
	    "  --nodes N       chunkservers (default 1, at most %d)\n"
	    "  --targets M     target directories per chunkserver (default 2, at most %d)\n"
	    "  --replicas R    replicas per chain, on distinct nodes (default min(3, N))\n"
	    "  --no-netns      chunkservers on 127.0.0.1 ports, not namespaces (kept in the home)\n"
	    "  --netns         back to namespaces on a home made with --no-netns\n"
	    "  --tls           TLS 1.3 for every connection of the cluster, keyed by the\n"
	    "                  cluster key (kept in the home: its daemons get --tls, its\n"
	    "                  tools and cluster.env's STRATA_TLS=1 follow)\n"
	    "  --timeout S     seconds to wait for each daemon (default 60)\n"
	    "\n"
	    "Environment: STRATA_LOG_LEVEL (passed to the daemons as --log-level).\n"
	    "Writes <home>/cluster.env (STRATA_META, STRATA_MOUNT, STRATA_KEY) for clients;\n"
	    "the first up makes <home>/cluster.key (0600), the key every daemon and\n"
	    "client of the cluster proves on each connection.\n",
	    CLI_MAX_NODES, CLI_MAX_TARGETS);
}

/* STRATA_LOG_LEVEL, passed to the daemons (NULL when unset or empty). */
static const char *env_log_level(void)
{
	const char *l = getenv("STRATA_LOG_LEVEL");

	return l && *l ? l : NULL;
}

static int died(struct up_ctx *c, const struct cli_daemon *d, const char *what)
{
	char log[CLI_PATH], last[512];

	cli_path(log, &c->h, "log/%s.log", d->name);
	cli_last_line(log, last, sizeof(last));
	cli_err(VERB, "%s %s (log %s)%s%s", d->binary, what, log, last[0] ? ": " : "", last);
	return -ECHILD;
}

/* What a started daemon is waited for. */
struct wait {
	int (*ready)(struct up_ctx *c, const void *arg); /* 0 when ready, else -errno */
	const void *arg;
	int interval_ms;
	const char *died; /* died()'s words if it exits first; NULL: -ECHILD, no line */
};

/* Polls w->ready until it answers 0 (returns 0), daemon d (pid) exits
 * (-ECHILD) or the timeout passes: -ETIMEDOUT, with ready's last answer in
 * *ret_last for the caller's line. */
static int wait_ready(struct up_ctx *c, const struct cli_daemon *d, pid_t pid, const struct wait *w,
		      int *ret_last)
{
	long long deadline = cli_now_ms() + c->timeout_ms;

	while ((*ret_last = w->ready(c, w->arg)) < 0) {
		if (!cli_pid_alive(pid, d->binary))
			return w->died ? died(c, d, w->died) : -ECHILD;
		if (cli_now_ms() > deadline)
			return -ETIMEDOUT;
		cli_sleep_ms(w->interval_ms);
	}
	return 0;
}

static int file_there(struct up_ctx *c, const void *path)
{
	(void)c;
	return access(path, F_OK) == 0 ? 0 : -errno;
}

static int meta_answers(struct up_ctx *c, const void *arg)
{
	(void)arg;
	return cli_meta_ping(c->meta_addr);
}

static int mount_answers(struct up_ctx *c, const void *arg)
{
	(void)arg;
	return cli_mount_state(c->h.mount) == MNT_OK ? 0 : -ENOTCONN;
}

static int sandboxd_accepts(struct up_ctx *c, const void *sock)
{
	(void)c;
	return cli_sandboxd_ping(sock);
}

static int write_pid(struct up_ctx *c, const struct cli_daemon *d, pid_t pid)
{
	char path[CLI_PATH], buf[32];

	snprintf(buf, sizeof(buf), "%d\n", (int)pid);
	return cli_write_file(cli_path(path, &c->h, "run/%s.pid", d->name), buf);
}

/* True if `bin --help` mentions opt: options added to a daemon after the
 * command-line contract (CONVENTIONS.md) are passed only to binaries that
 * know them. */
static bool binary_has_option(const char *bin, const char *opt)
{
	char cmd[CLI_PATH + 64], line[512];
	bool found = false;
	FILE *p;

	if (strchr(bin, '\''))
		return false;
	/* The shell and the daemon's --help get none of the descriptors we
	 * inherited: one of a file on the mount, closed at their exit while no
	 * strata-fuse serves (a takeover or restart under way), would make that
	 * exit wait for the strata-fuse we are about to start. */
	syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC);
	snprintf(cmd, sizeof(cmd), "'%s' --help 2>&1", bin);
	p = popen(cmd, "re");
	if (!p)
		return false;
	while (fgets(line, sizeof(line), p))
		if (strstr(line, opt))
			found = true;
	pclose(p);
	return found;
}

/* Starts d with its command line; for daemons with an addr file, waits until
 * it is written. listen is "" for daemons that do not listen. */
static void sbnode_listen(const struct up_ctx *c, int i, char *buf, size_t cap);

static int start_daemon(struct up_ctx *c, const struct cli_daemon *d, const char *listen,
			pid_t *ret_pid)
{
	char bin[CLI_PATH + 32], log[CLI_PATH], addrf[CLI_PATH], db[CLI_PATH];
	char tdirs[CLI_MAX_TARGETS][CLI_PATH], cache[CLI_PATH], client_id[64];
	char replicas[16], nodes[16], holder[CLI_PATH], key[CLI_PATH], usrbio[CLI_PATH];
	char node_id[16], tcp[64], sock[CLI_PATH];
	char *argv[40];
	int a = 0;
	pid_t pid;
	int r;

	snprintf(bin, sizeof(bin), "%s/%s", c->h.bindir, d->binary);
	if (access(bin, X_OK) != 0) {
		cli_err(VERB, "%s not found next to the strata binary (%s)", d->binary,
			c->h.bindir);
		return -ENOENT;
	}
	cli_path(log, &c->h, "log/%s.log", d->name);
	cli_path(addrf, &c->h, "run/%s.addr", d->name);
	argv[a++] = bin;
	if (d->kind == D_APISERVER || (d->kind == D_SANDBOXD && c->h.nodes > 1)) {
		/* in the cluster through meta: the key (TLS follows $STRATA_TLS) */
		argv[a++] = "--key";
		argv[a++] = cli_path(key, &c->h, CLI_KEY_FILE);
	} else if (d->kind != D_SANDBOXD) { /* the ones that talk to the cluster */
		argv[a++] = "--key";
		argv[a++] = cli_path(key, &c->h, CLI_KEY_FILE);
		if (c->h.tls)
			argv[a++] = "--tls";
	}
	/* the home decides, not an inherited $STRATA_TLS (a daemon without
	 * --tls would follow it) */
	setenv("STRATA_TLS", c->h.tls ? "1" : "0", 1);
	switch (d->kind) {
	case D_META:
		argv[a++] = "--listen";
		argv[a++] = (char *)listen;
		argv[a++] = "--db";
		argv[a++] = cli_path(db, &c->h, "meta/db");
		argv[a++] = "--addr-file";
		argv[a++] = addrf;
		if (binary_has_option(bin, "--replicas")) {
			snprintf(replicas, sizeof(replicas), "%d", c->h.replicas);
			snprintf(nodes, sizeof(nodes), "%d", c->h.nodes);
			argv[a++] = "--replicas";
			argv[a++] = replicas;
			argv[a++] = "--expect-nodes";
			argv[a++] = nodes;
		}
		break;
	case D_CS:
		argv[a++] = "--listen";
		argv[a++] = (char *)listen;
		argv[a++] = "--meta";
		argv[a++] = c->meta_addr;
		for (int t = 0; t < c->h.targets; t++) {
			argv[a++] = "--target";
			argv[a++] = cli_path(tdirs[t], &c->h, "cs%d/t%d", d->index, t + 1);
		}
		argv[a++] = "--addr-file";
		argv[a++] = addrf;
		break;
	case D_FUSE: {
		/* Stable across restarts of this mount, distinct per host. */
		char host[40] = "localhost";
		gethostname(host, sizeof(host) - 1);
		snprintf(client_id, sizeof(client_id), "%s-%s", host, d->name);
	}
		cli_path(cache, &c->h, "cache");
		if ((r = cli_mkdir_p(cache, 0755)) < 0)
			return r;
		argv[a++] = "--meta";
		argv[a++] = c->meta_addr;
		argv[a++] = "--mount";
		argv[a++] = c->h.mount;
		argv[a++] = "--client-id";
		argv[a++] = client_id;
		argv[a++] = "--cache-dir";
		argv[a++] = cache;
		argv[a++] = "--foreground";
		if (binary_has_option(bin, "--holder")) {
			argv[a++] = "--holder";
			argv[a++] = cli_fuse_holder_socket(&c->h, holder);
		}
		if (binary_has_option(bin, "--usrbio")) { /* the native client, sdk/c */
			argv[a++] = "--usrbio";
			argv[a++] = cli_path(usrbio, &c->h, "run/usrbio.sock");
		}
		break;
	case D_SANDBOXD:
		argv[a++] = "--home";
		argv[a++] = c->h.home;
		if (c->h.nodes == 1)
			break;
		/* a node of the cluster: its lease with meta, its TCP API for the
		 * apiserver (the token is $STRATA_SANDBOXD_TOKEN: up_tokens) */
		snprintf(node_id, sizeof(node_id), "%d", d->index);
		sbnode_listen(c, d->index, tcp, sizeof(tcp));
		argv[a++] = "--socket";
		argv[a++] = cli_sandboxd_socket_of(&c->h, d->index, sock);
		argv[a++] = "--meta";
		argv[a++] = c->meta_addr;
		argv[a++] = "--node-id";
		argv[a++] = node_id;
		argv[a++] = "--listen-tcp";
		argv[a++] = tcp;
		break;
	case D_APISERVER:
		argv[a++] = "--meta";
		argv[a++] = c->meta_addr;
		argv[a++] = "--listen";
		argv[a++] = (char *)listen;
		argv[a++] = "--addr-file";
		argv[a++] = addrf;
		break;
	}
	if (c->log_level) {
		argv[a++] = "--log-level";
		argv[a++] = (char *)c->log_level;
	}
	argv[a] = NULL;

	if (d->kind != D_FUSE)
		unlink(addrf);
	if ((d->kind == D_CS || (d->kind == D_SANDBOXD && c->h.nodes > 1)) && c->net.on) {
		char ns[128]; /* a node's daemons run on its host */
		pid = cli_spawn_in(argv, log, cli_net_ns_path(&c->net, d->index, ns, sizeof(ns)));
	} else {
		pid = cli_spawn(argv, log);
	}
	if (pid < 0) {
		cli_err(VERB, "cannot start %s: %s", bin, strerror((int)-pid));
		return (int)pid;
	}
	if ((r = write_pid(c, d, pid)) < 0) {
		cli_err(VERB, "cannot write the pid file of %s: %s", d->name, strerror(-r));
		return r;
	}
	*ret_pid = pid;
	if (d->kind == D_FUSE || d->kind == D_SANDBOXD)
		return 0;

	/* died: no line, the caller decides (retry on port 0 or report) */
	const struct wait w = {file_there, addrf, 20, NULL};
	r = wait_ready(c, d, pid, &w, &(int){0});
	if (r == -ETIMEDOUT)
		cli_err(VERB, "%s did not write %s within %d s", d->binary, addrf,
			c->timeout_ms / 1000);
	return r;
}

/* Where node i's sandboxd serves TCP: its host's address, else loopback. */
static void sbnode_listen(const struct up_ctx *c, int i, char *buf, size_t cap)
{
	char ip[32];
	if (c->net.on)
		snprintf(buf, cap, "%s:%d", cli_net_ip(&c->net, i, ip, sizeof(ip)),
			 CLI_SBNODE_PORT);
	else
		snprintf(buf, cap, "127.0.0.1:%d", CLI_SBNODE_PORT + i);
}

/* The host d listens on: the bridge (meta) or its node's own address when
 * the chunkservers are hosts, else loopback. */
static void listen_host(const struct up_ctx *c, const struct cli_daemon *d, char *buf, size_t cap)
{
	if (c->net.on && (d->kind == D_META || d->kind == D_CS))
		cli_net_ip(&c->net, d->kind == D_CS ? d->index : 0, buf, cap);
	else
		snprintf(buf, cap, "127.0.0.1");
}

static bool addr_on_host(const char *addr, const char *host)
{
	size_t n = strlen(host);
	return strncmp(addr, host, n) == 0 && addr[n] == ':';
}

/* True if d, running as pid with address prev, is where this run wants it:
 * on its host and, for a chunkserver that is a host, in its namespace. */
static bool in_place(const struct up_ctx *c, const struct cli_daemon *d, pid_t pid,
		     const char *prev)
{
	char host[64];

	listen_host(c, d, host, sizeof(host));
	if (!prev[0] || !addr_on_host(prev, host))
		return false;
	return d->kind != D_CS || !c->net.on || cli_net_pid_in(&c->net, d->index, pid);
}

/* Starts d on its previous address if it had one on this host, else on a
 * free port (a chunkserver with an address of its own: NODE_PORT). */
static int start_listener(struct up_ctx *c, const struct cli_daemon *d, const char *prev,
			  pid_t *ret_pid)
{
	char host[64], want[128], any[128];
	int r;

	listen_host(c, d, host, sizeof(host));
	snprintf(any, sizeof(any), "%s:0", host);
	if (prev[0] && addr_on_host(prev, host))
		snprintf(want, sizeof(want), "%s", prev);
	else if (c->net.on && d->kind == D_CS)
		snprintf(want, sizeof(want), "%s:%d", host, NODE_PORT);
	else
		snprintf(want, sizeof(want), "%s", any);
	r = start_daemon(c, d, want, ret_pid);
	if (r == -ECHILD && strcmp(want, any) != 0) {
		fprintf(stderr, "strata up: %s could not listen on %s, using a free port\n",
			d->name, want);
		r = start_daemon(c, d, any, ret_pid);
	}
	if (r == -ECHILD)
		return died(c, d, "exited during start-up");
	return r;
}

static int up_meta(struct up_ctx *c)
{
	struct cli_daemon d;
	char prev[128];
	pid_t pid;
	int r;

	cli_daemon_get(&c->h, 0, &d);
	cli_daemon_addr(&c->h, &d, prev, sizeof(prev));
	pid = cli_daemon_pid(&c->h, &d);
	bool alive = cli_pid_alive(pid, d.binary);
	if (alive && in_place(c, &d, pid, prev)) {
		snprintf(c->meta_addr, sizeof(c->meta_addr), "%s", prev);
		c->already++;
	} else {
		if (alive)
			cli_stop_pid(pid, d.binary, 10000); /* on another network */
		if ((r = start_listener(c, &d, prev, &pid)) < 0)
			return r;
		cli_daemon_addr(&c->h, &d, c->meta_addr, sizeof(c->meta_addr));
		c->meta_moved = prev[0] && strcmp(prev, c->meta_addr) != 0;
		c->started++;
	}
	const struct wait w = {meta_answers, NULL, 50, "exited before answering"};
	int last;
	r = wait_ready(c, &d, pid, &w, &last);
	if (r != -ETIMEDOUT)
		return r;
	cli_err(VERB, "strata-meta at %s does not answer: %s", c->meta_addr, strerror(-last));
	return last;
}

static int up_chunkservers(struct up_ctx *c)
{
	int r;

	for (int i = 1; i <= c->h.nodes; i++) {
		struct cli_daemon d;
		char prev[128];
		pid_t pid;

		cli_daemon_get(&c->h, i, &d);
		cli_daemon_addr(&c->h, &d, prev, sizeof(prev));
		pid = cli_daemon_pid(&c->h, &d);
		if (cli_pid_alive(pid, d.binary)) {
			if (!c->meta_moved && in_place(c, &d, pid, prev)) {
				c->already++;
				continue;
			}
			/* On the old meta, another network or a namespace since replaced. */
			cli_stop_pid(pid, d.binary, 10000);
		}
		if ((r = start_listener(c, &d, prev, &pid)) < 0)
			return r;
		c->started++;
	}

	/* Wait until meta knows every target (the chunkservers registered). */
	int want = c->h.nodes * c->h.targets;
	long long deadline = cli_now_ms() + c->timeout_ms;
	for (;;) {
		r = cli_meta_targets(c->meta_addr);
		if (r == -ENOSYS || r >= want)
			return 0;
		for (int i = 1; i <= c->h.nodes; i++) {
			struct cli_daemon d;
			cli_daemon_get(&c->h, i, &d);
			if (!cli_pid_alive(cli_daemon_pid(&c->h, &d), d.binary))
				return died(c, &d, "exited before registering");
		}
		if (cli_now_ms() > deadline) {
			if (r < 0)
				cli_err(VERB, "cannot read routing from strata-meta at %s: %s",
					c->meta_addr, strerror(-r));
			else
				cli_err(
				    VERB,
				    "only %d of %d targets registered with strata-meta after %d s",
				    r, want, c->timeout_ms / 1000);
			return -ETIMEDOUT;
		}
		cli_sleep_ms(100);
	}
}

/* Makes the mount point ready for a new strata-fuse: a daemon without a
 * working mount (or on the old meta) is replaced, a stale mount detached.
 * Returns 1 when the running daemon is fine as it is, 0, or -errno. */
static int clear_mount(struct up_ctx *c, const struct cli_daemon *d, pid_t pid)
{
	enum cli_mount_state ms = cli_mount_state(c->h.mount);
	int r;

	if (cli_pid_alive(pid, d->binary)) {
		if (ms == MNT_OK && !c->meta_moved)
			return 1;
		cli_umount(c->h.mount);
		cli_stop_pid(pid, d->binary, 10000);
		ms = cli_mount_state(c->h.mount);
	}
	if (ms == MNT_OK || ms == MNT_STALE) {
		/* Mounted but its daemon is gone (or unknown to us): detach it. */
		if ((r = cli_umount(c->h.mount)) < 0) {
			cli_err(VERB, "cannot unmount the stale mount %s: %s", c->h.mount,
				strerror(-r));
			return r;
		}
	} else if (ms == MNT_OTHER) {
		cli_err(VERB, "%s already has another filesystem mounted on it", c->h.mount);
		return -EBUSY;
	}
	if ((r = cli_mkdir_p(c->h.mount, 0755)) < 0) {
		cli_err(VERB, "cannot create the mount point %s: %s", c->h.mount, strerror(-r));
		return r;
	}
	return 0;
}

static int up_fuse(struct up_ctx *c)
{
	struct cli_daemon d;
	pid_t pid;
	int r;

	cli_daemon_get(&c->h, c->h.nodes + 1, &d);
	pid = cli_daemon_pid(&c->h, &d);
	/* strata-fuse died but its connection is held: the new one takes it
	 * over, and the mount (and everything stacked on it) stays. */
	bool held = !cli_pid_alive(pid, d.binary) && cli_fuse_holder_keeps(&c->h);
	if (!held) {
		r = clear_mount(c, &d, pid);
		if (r != 0) {
			c->already += r > 0;
			return r < 0 ? r : 0;
		}
	}
	if ((r = start_daemon(c, &d, "", &pid)) < 0)
		return r == -ECHILD ? died(c, &d, "exited during start-up") : r;
	c->started++;

	const struct wait w = {mount_answers, NULL, 50, "exited before the mount answered"};
	r = wait_ready(c, &d, pid, &w, &(int){0});
	if (r == -ETIMEDOUT)
		cli_err(VERB, "the mount %s did not answer within %d s", c->h.mount,
			c->timeout_ms / 1000);
	return r;
}

int cli_up_fuse(const struct cli_home *h, int timeout_ms)
{
	struct up_ctx c;
	struct cli_daemon meta;

	memset(&c, 0, sizeof(c));
	c.h = *h;
	c.timeout_ms = timeout_ms;
	c.log_level = env_log_level();
	cli_daemon_get(h, 0, &meta);
	cli_daemon_addr(h, &meta, c.meta_addr, sizeof(c.meta_addr));
	if (!c.meta_addr[0]) {
		cli_err(VERB, "no address of strata-meta in %s (strata up starts the cluster)",
			h->home);
		return -ENOENT;
	}
	return up_fuse(&c);
}

/* Waits until strata-sandboxd (pid) accepts on its socket. */
static int wait_sandboxd(struct up_ctx *c, const struct cli_daemon *d, pid_t pid)
{
	char sock[CLI_PATH];
	const struct wait w = {sandboxd_accepts, sock, 50, "exited before its socket accepted"};

	cli_sandboxd_socket_of(&c->h, d->index, sock);
	int r = wait_ready(c, d, pid, &w, &(int){0});
	if (r == -ETIMEDOUT)
		cli_err(VERB, "strata-sandboxd did not accept on %s within %d s", sock,
			c->timeout_ms / 1000);
	return r;
}

/* Node i's agent, last. A build without it (no binary) still has a working
 * cluster: then there is nothing to start. */
static int up_sandboxd(struct up_ctx *c, int i)
{
	struct cli_daemon d;
	char bin[CLI_PATH + 32], sock[CLI_PATH];
	pid_t pid;
	int r;

	cli_daemon_get(&c->h, c->h.nodes + 1 + i, &d);
	snprintf(bin, sizeof(bin), "%s/%s", c->h.bindir, d.binary);
	if (access(bin, X_OK) != 0)
		return 0;
	pid = cli_daemon_pid(&c->h, &d);
	bool node_in_place = c->h.nodes == 1 || !c->net.on || cli_net_pid_in(&c->net, i, pid);
	if (cli_pid_alive(pid, d.binary)) {
		if (c->h.nodes == 1 || (!c->meta_moved && node_in_place)) {
			c->already++;
			return wait_sandboxd(c, &d, pid); /* it may still be starting */
		}
		cli_stop_pid(pid, d.binary, 10000); /* on the old meta or another host */
	}
	unlink(cli_sandboxd_socket_of(&c->h, i, sock)); /* the socket of a dead one */
	if ((r = start_daemon(c, &d, "", &pid)) < 0)
		return r == -ECHILD ? died(c, &d, "exited during start-up") : r;
	c->started++;
	return wait_sandboxd(c, &d, pid);
}

/* The operator's token of the nodes' TCP API and the apiserver (H/api.token,
 * 0600, made once): given to them as $STRATA_SANDBOXD_TOKEN, read by the
 * SDK from the home. */
static int up_token(struct up_ctx *c)
{
	char path[CLI_PATH], tok[80];
	uint8_t b[24];
	cli_path(path, &c->h, "api.token");
	if (cli_read_file(path, tok, sizeof(tok)) <= 0) {
		if (getrandom(b, sizeof(b), 0) != (ssize_t)sizeof(b))
			return -EIO;
		for (size_t i = 0; i < sizeof(b); i++)
			snprintf(tok + 2 * i, 3, "%02x", b[i]);
		mode_t old = umask(077);
		int r = cli_write_file(path, tok);
		umask(old);
		if (r < 0)
			return r;
	}
	setenv("STRATA_SANDBOXD_TOKEN", tok, 1);
	return 0;
}

/* The cluster's API over the nodes (several nodes only). */
static int up_apiserver(struct up_ctx *c)
{
	struct cli_daemon d;
	char prev[128], bin[CLI_PATH + 32];
	pid_t pid;

	cli_daemon_get(&c->h, cli_daemon_count(&c->h) - 1, &d);
	snprintf(bin, sizeof(bin), "%s/%s", c->h.bindir, d.binary);
	if (d.kind != D_APISERVER || access(bin, X_OK) != 0)
		return 0;
	cli_daemon_addr(&c->h, &d, prev, sizeof(prev));
	pid = cli_daemon_pid(&c->h, &d);
	if (cli_pid_alive(pid, d.binary)) {
		if (!c->meta_moved && prev[0]) {
			c->already++;
			return 0;
		}
		cli_stop_pid(pid, d.binary, 10000);
	}
	int r = start_listener(c, &d, prev, &pid);
	if (r == 0)
		c->started++;
	return r;
}

/* Chunkservers as separate hosts when there are several and namespaces can
 * be made here; else, with a notice, on loopback ports. */
static void up_net(struct up_ctx *c)
{
	char why[256];

	cli_net_load(&c->h, &c->net);
	c->net.on = false;
	if (c->h.nodes < 2 || c->h.netns == 0)
		return;
	if (cli_net_usable(why, sizeof(why)) == 0 && cli_net_up(&c->h, &c->net) == 0)
		return;
	fprintf(stderr, "strata up: notice: chunkservers on loopback ports, not namespaces: %s\n",
		c->net.err[0] ? c->net.err : why);
}

/* Loopback ports this time but a network of the home recorded (--no-netns,
 * a fallback): once the chunkservers have left it, it goes. */
static void drop_unused_net(struct up_ctx *c)
{
	if (c->net.on || !c->net.created)
		return;
	if (cli_net_down(&c->h, &c->net) < 0)
		fprintf(stderr, "strata up: warning: cannot delete the unused network: %s\n",
			c->net.err);
}

static int write_env(struct up_ctx *c)
{
	char path[CLI_PATH], key[CLI_PATH], text[4 * CLI_PATH];

	snprintf(text, sizeof(text),
		 "STRATA_HOME=%s\nSTRATA_META=%s\nSTRATA_MOUNT=%s\nSTRATA_KEY=%s\n%s", c->h.home,
		 c->meta_addr, c->h.mount, cli_path(key, &c->h, CLI_KEY_FILE),
		 c->h.tls ? "STRATA_TLS=1\n" : "");
	return cli_write_file(cli_path(path, &c->h, "cluster.env"), text);
}

static void print_summary(struct up_ctx *c)
{
	char p[CLI_PATH];

	if (c->started == 0)
		printf("strata: the cluster at %s is already up\n", c->h.home);
	else if (c->already)
		printf("strata: restarted %d daemon(s) of the cluster at %s\n", c->started,
		       c->h.home);
	else
		printf("strata: cluster up at %s\n", c->h.home);
	for (int i = 0; i < cli_daemon_count(&c->h); i++) {
		struct cli_daemon d;
		char addr[128];
		cli_daemon_get(&c->h, i, &d);
		cli_daemon_addr(&c->h, &d, addr, sizeof(addr));
		printf("  %-8s pid %-7d %-21s log %s\n", d.name, (int)cli_daemon_pid(&c->h, &d),
		       d.kind == D_FUSE || (d.kind == D_SANDBOXD && c->h.nodes == 1) ? "-" : addr,
		       cli_path(p, &c->h, "log/%s.log", d.name));
	}
	if (c->net.on) {
		char br[32], first[32], last[32];
		printf("  net    bridge %s %s/24; nodes in netns strata-%s-cs<i>, %s..%s\n",
		       c->net.bridge, cli_net_ip(&c->net, 0, br, sizeof(br)), c->net.tag,
		       cli_net_ip(&c->net, 1, first, sizeof(first)),
		       cli_net_ip(&c->net, c->h.nodes, last, sizeof(last)));
	} else if (c->h.nodes > 1) {
		printf("  net    loopback ports (no namespaces)\n");
	}
	printf("  mount  %s\n", c->h.mount);
	if (cli_sandboxd_ping(cli_sandboxd_socket(&c->h, p)) == 0)
		printf("  api    %s   (strata-sandboxd: Python SDK, strata sandbox)\n", p);
	if (c->h.nodes > 1) {
		struct cli_daemon d;
		char addr[128];
		cli_daemon_get(&c->h, cli_daemon_count(&c->h) - 1, &d);
		cli_daemon_addr(&c->h, &d, addr, sizeof(addr));
		if (addr[0])
			printf(
			    "  api    http://%s   (strata-apiserver over %d nodes: SDK url= with "
			    "the token in %s/api.token, or STRATA_HOME)\n",
			    addr, c->h.nodes, c->h.home);
	}
	printf("  env    %s   (STRATA_HOME=%s for clients)\n", cli_path(p, &c->h, "cluster.env"),
	       c->h.home);
	printf("  stop   strata down --home %s\n", c->h.home);
}

/* What the command line asks for; 0 (netns: -1) where it says nothing. */
struct up_args {
	const char *mount;
	int nodes, targets, replicas, timeout_s, netns;
	bool tls;
};

/* One of up's own options: a number in its range, or a flag. */
static int up_option(void *arg, int val, const char *value)
{
	struct up_args *a = arg;
	static const struct {
		int val, lo, hi;
		const char *fmt;
	} nums[] = {
	    {'n', 1, CLI_MAX_NODES, "--nodes wants a number from 1 to %d, not '%s'"},
	    {'t', 1, CLI_MAX_TARGETS, "--targets wants a number from 1 to %d, not '%s'"},
	    {'r', 1, STRATA_MAX_REPLICAS, "--replicas wants a number from 1 to %d, not '%s'"},
	    {'T', 1, 3600, "--timeout wants seconds (1..%d), not '%s'"},
	};
	int *dst[] = {&a->nodes, &a->targets, &a->replicas, &a->timeout_s};

	if (val == 'm') {
		a->mount = value;
		return 0;
	}
	if (val == 'N' || val == 'S') {
		a->netns = val == 'S';
		return 0;
	}
	if (val == 'L') {
		a->tls = true;
		return 0;
	}
	for (size_t i = 0; i < sizeof(nums) / sizeof(*nums); i++) {
		if (nums[i].val != val)
			continue;
		if (cli_parse_int(value, nums[i].lo, nums[i].hi, dst[i]) == 0)
			return 0;
		cli_err(VERB, nums[i].fmt, nums[i].hi, value);
		return 2;
	}
	return 2;
}

/* True if a daemon of the home runs (TLS cannot be turned on under it). */
static bool any_daemon_alive(const struct cli_home *h)
{
	for (int i = 0; i < cli_daemon_count(h); i++) {
		struct cli_daemon d;
		cli_daemon_get(h, i, &d);
		if (cli_pid_alive(cli_daemon_pid(h, &d), d.binary))
			return true;
	}
	return false;
}

int cmd_up(int argc, char **argv)
{
	static const struct option own[] = {
	    {"mount", required_argument, NULL, 'm'},
	    {"nodes", required_argument, NULL, 'n'},
	    {"targets", required_argument, NULL, 't'},
	    {"replicas", required_argument, NULL, 'r'},
	    {"timeout", required_argument, NULL, 'T'},
	    {"no-netns", no_argument, NULL, 'N'},
	    {"netns", no_argument, NULL, 'S'},
	    {"tls", no_argument, NULL, 'L'},
	    {},
	};
	struct up_ctx c;
	struct up_args a = {.timeout_s = 60, .netns = -1};
	struct cli_opts o;
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME,
	    .own = own,
	    .on_opt = up_option,
	    .arg = &a,
	    .usage = usage,
	    .no_operands = true,
	};
	int r;

	memset(&c, 0, sizeof(c));
	if ((r = cli_parse_opts(&v, argc, argv, &o)) != CLI_GO)
		return r;
	if (cli_home_open(VERB, o.home, &c.h) < 0)
		return 1;
	if (c.h.have_conf &&
	    ((a.nodes && a.nodes != c.h.nodes) || (a.targets && a.targets != c.h.targets))) {
		cli_err(VERB,
			"%s was created with --nodes %d --targets %d; remove it to change that",
			c.h.home, c.h.nodes, c.h.targets);
		return 1;
	}
	if (a.nodes)
		c.h.nodes = a.nodes;
	if (a.targets)
		c.h.targets = a.targets;
	if (a.netns >= 0)
		c.h.netns = a.netns;
	else if (c.h.netns < 0)
		c.h.netns = 1; /* nodes as hosts when there are several */
	if (a.tls && !c.h.tls && any_daemon_alive(&c.h)) {
		cli_err(VERB, "the cluster at %s runs without TLS: `strata down` it first",
			c.h.home);
		return 1;
	}
	c.h.tls |= a.tls;
	rpc_tls_set_default(c.h.tls); /* the home decides, not $STRATA_TLS */
	if (a.replicas)
		c.h.replicas = a.replicas;
	else if (!c.h.have_conf)
		c.h.replicas = c.h.nodes < 3 ? c.h.nodes : 3; /* chains on distinct nodes */
	if (c.h.replicas > c.h.nodes) {
		cli_err(VERB,
			"--replicas %d needs at least %d nodes (replicas live on distinct nodes)",
			c.h.replicas, c.h.replicas);
		return 1;
	}
	if (a.mount) {
		char cwd[CLI_PATH];
		if (a.mount[0] == '/')
			snprintf(c.h.mount, sizeof(c.h.mount), "%s", a.mount);
		else if (getcwd(cwd, sizeof(cwd)))
			snprintf(c.h.mount, sizeof(c.h.mount), "%s/%s", cwd, a.mount);
		size_t ml = strlen(c.h.mount);
		while (ml > 1 && c.h.mount[ml - 1] == '/')
			c.h.mount[--ml] = '\0';
	}
	c.timeout_ms = a.timeout_s * 1000;
	c.log_level = env_log_level();

	if ((r = cli_home_create(&c.h)) < 0) {
		cli_err(VERB, "cannot create the home %s: %s", c.h.home, strerror(-r));
		return 1;
	}
	if ((r = cli_home_save(&c.h)) < 0) {
		cli_err(VERB, "cannot write %s/strata.conf: %s", c.h.home, strerror(-r));
		return 1;
	}
	char key[CLI_PATH];
	if (cli_key_setup(VERB, cli_path(key, &c.h, CLI_KEY_FILE), NULL) < 0)
		return 1;
	up_net(&c);
	if (up_meta(&c) < 0 || up_chunkservers(&c) < 0)
		return 1;
	drop_unused_net(&c);
	if (up_fuse(&c) < 0)
		return 1;
	if ((r = write_env(&c)) < 0) {
		cli_err(VERB, "cannot write %s/cluster.env: %s", c.h.home, strerror(-r));
		return 1;
	}
	/* The storage cluster works without the node agents: their failure to
	 * start is reported (and shown by strata status) but not fatal. */
	if (c.h.nodes > 1 && up_token(&c) < 0)
		fprintf(stderr, "strata up: warning: cannot write %s/api.token\n", c.h.home);
	for (int i = 1; i <= cli_sbnode_count(&c.h); i++)
		if (up_sandboxd(&c, i) < 0)
			fprintf(stderr,
				"strata up: warning: the cluster is up without node %d's "
				"strata-sandboxd\n",
				i);
	if (up_apiserver(&c) < 0)
		fprintf(stderr, "strata up: warning: the cluster is up without strata-apiserver\n");
	print_summary(&c);
	return 0;
}
