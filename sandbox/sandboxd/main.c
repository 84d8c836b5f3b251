/* main.c — strata-sandboxd: the node agent. Parses the command line, sets
 * up the state dir, backends and images, re-adopts the sandboxes an earlier
 * sandboxd left running, and runs the event loop until SIGTERM/SIGINT. On
 * exit it leaves every sandbox running (their state is kept) and removes
 * only its socket (and its default state dir when no sandbox is left).
 *
 * The state dir defaults to a tmpfs, /run/strata/sandboxd-<hash of the
 * home's real path> (/dev/shm/strata/... where /run is not a tmpfs), with
 * HOME/sandboxd a symlink to it: state.json is rewritten on every create and
 * delete (~40 % of the loop thread on ext4), and sandbox state cannot
 * outlive a reboot anyway. It stays on disk, in HOME/sandboxd, when neither
 * is a writable tmpfs or when HOME/sandboxd is a directory holding
 * sandboxes of an earlier sandboxd.
 *
 *   strata-sandboxd [--home DIR] [--socket PATH] [--state-dir DIR]
 *                   [--image NAME=DIR]... [--images-dir DIR]
 *                   [--listen-tcp HOST:PORT --token T] [--tenants FILE]
 *                   [--max-sandboxes N]
 *                   [--memory-budget-mb N] [--pids-budget N] [--reserve-mb N]
 *                   [--max-body-mb N] [--max-body-total-mb N]
 *                   [--max-connections N] [--max-connections-per-peer N]
 *                   [--head-timeout S] [--body-timeout S] [--idle-conn-timeout S]
 *                   [--fncall-pool N] [--store-timeout S] [--log-level L]
 */
#include <dirent.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/signalfd.h>
#include <linux/magic.h>
#include <limits.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/daemon.h"
#include "fs/log.h"
#include "sandbox/container/strata_sandbox.h"
#include "fs/rpc_auth.h"
#include "fs/sbnode_proto.h"
#include "sandbox/sandboxd/lease.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/sandboxd.h"
#include "sandbox/sandboxd/store_call.h"
#include "sandbox/sandboxd/xfer.h"

static void usage(FILE *f)
{
	fprintf(
	    f,
	    "Usage: strata-sandboxd [OPTIONS]\n"
	    "  --home DIR             cluster home (default $STRATA_HOME or ./.strata)\n"
	    "  --socket PATH          API socket (default HOME/run/sandboxd.sock)\n"
	    "  --firecracker PATH     the firecracker binary (default: firecracker on PATH)\n"
	    "  --vm-snapshots-max-mb N the qemu backend's warm-start snapshots kept per\n"
	    "                         store (the state dir's, the strata mount's): least\n"
	    "                         recently used removed past it (default 4096)\n"
	    "  --state-dir DIR        sandbox state (default /run/strata/sandboxd-HASH or\n"
	    "                         /dev/shm/strata/..., a tmpfs, linked from HOME/sandboxd)\n"
	    "  --image NAME=DIR       register a root filesystem directory as image NAME\n"
	    "  --images-dir DIR       register every DIR/*.json {\"name\",\"rootfs\",...}\n"
	    "  --listen-tcp HOST:PORT also serve TCP (needs --token, $STRATA_SANDBOXD_TOKEN or a\n"
	    "                         tenants file: every request with a bearer token)\n"
	    "  --token T              the operator's bearer token (admin), for TCP clients\n"
	    "  --tenants FILE         tenants and their hashed tokens and quotas (default\n"
	    "                         HOME/tenants.json, made by `strata tenant add`; read\n"
	    "                         again within a second of a change)\n"
	    "  --max-sandboxes N      admission: sandboxes on this node (default 4096)\n"
	    "  --memory-budget-mb N   admission: sum of memory_mb (default 32 x RAM)\n"
	    "  --pids-budget N        admission: sum of pids (default 4 x pid_max)\n"
	    "  --reserve-mb N         refuse creates below this MemAvailable (default 128)\n"
	    "  --max-body-mb N        largest buffered request body (default 64; file\n"
	    "                         uploads of container sandboxes stream: no limit)\n"
	    "  --max-body-total-mb N  buffered request bodies of all connections together\n"
	    "                         (default 128; past it 503 overloaded)\n"
	    "  --max-connections N    connections at once (default 4096, at most half the\n"
	    "                         open file limit; past it 503 overloaded)\n"
	    "  --max-connections-per-peer N  of one uid (unix socket) or address (TCP)\n"
	    "                         (default 1024)\n"
	    "  --head-timeout S       a request head must arrive within S s (default 10)\n"
	    "  --body-timeout S       a buffered body within S s + 1 s per 256 KiB (default 10)\n"
	    "  --idle-conn-timeout S  an idle keep-alive connection is closed (default 60)\n"
	    "  --fncall-pool N        warm fncall workers per image (default 2)\n"
	    "  --store-timeout S      a call into the cluster's image store (a name looked\n"
	    "                         up, a config read, an image mounted) may take S s\n"
	    "                         (default 5, 0.1-3600); past it the request answers\n"
	    "                         503 store_unavailable (strata-fuse stopped or hung)\n"
	    "  --exec-keep-budget-mb N  output kept for background execs without a\n"
	    "                         client, all sandboxes together (default 256; one\n"
	    "                         sandbox a quarter); past it dropped (truncated)\n"
	    "  --fresh-netns          new network and IPC namespaces per sandbox (default:\n"
	    "                         reuse finished ones that hold nothing; sandbox/README.md)\n"
	    "  --net-uplink IFACE     network \"egress\": NAT out of IFACE "
	    "(sandbox/net/README.md)\n"
	    "  --net-dns ADDR[:PORT]  the DNS server the node's resolver forwards allowed names "
	    "to\n"
	    "  --net-pool CIDR        the sandboxes' addresses (default 10.213.0.0/16, a /30 "
	    "each)\n"
	    "  --net-protect LIST     always denied besides the node itself and link-local:\n"
	    "                         CIDR[:tcp|udp:PORT[-PORT]],... (the cluster's services)\n"
	    "  --net-resolver-port N  the node-side port DNS is redirected to (default 5353)\n"
	    "  --no-userns            container sandboxes without a user namespace unless a\n"
	    "                         create asks (\"userns\": true); default: one wherever\n"
	    "                         the kernel and the image's filesystem allow\n"
	    "  --disk-dir DIR         container layers in DIR (XFS or ext4 mounted with\n"
	    "                         prjquota), a project quota each (default: a sparse XFS\n"
	    "                         image, loop-mounted, made on first use)\n"
	    "  --disk-image FILE      that image (default HOME/sandboxd-layers.img, or the\n"
	    "                         state dir's container/layers.img when it is on disk)\n"
	    "  --disk-quota           refuse to start the container backend without quotas\n"
	    "  --disk-tmpfs           layers in memory (tmpfs, within the memory limit)\n"
	    "  --meta HOST:PORT       join the cluster: renew this node's lease with\n"
	    "                         strata-meta (needs --node-id and --listen-tcp)\n"
	    "  --node-id N            this node's id in the cluster, 1..65535 (in sandbox ids)\n"
	    "  --advertise HOST:PORT  the API address apiservers reach (default --listen-tcp)\n"
	    "  --key FILE             the cluster key (default $STRATA_KEY)\n"
	    "  --cpu-budget CORES     cores of sandbox cpu placement counts (default 64 x cpus)\n"
	    "  --log-level L          error|warn|info|debug (default info)\n");
}

static int64_t mem_total_mb(void)
{
	FILE *f = fopen("/proc/meminfo", "re");
	long long kb = 0;
	if (f) {
		if (fscanf(f, "MemTotal: %lld kB", &kb) != 1)
			kb = 0;
		fclose(f);
	}
	return kb ? kb / 1024 : 4096;
}

static int64_t pid_max(void)
{
	FILE *f = fopen("/proc/sys/kernel/pid_max", "re");
	long long v = 32768;
	if (f) {
		if (fscanf(f, "%lld", &v) != 1)
			v = 32768;
		fclose(f);
	}
	return v;
}

static void defaults(struct sandboxd_config *c)
{
	c->max_sandboxes = 4096;
	c->memory_budget_mb = 32 * mem_total_mb(); /* limits, not reservations */
	c->pids_budget = 4 * pid_max();
	c->reserve_mb = 128;
	c->max_body = 64LL << 20;
	c->max_body_total = SBD_MAX_BODY_TOTAL_DEFAULT;
	c->max_conns = SBD_MAX_CONNS_DEFAULT;
	c->max_conns_per_peer = SBD_MAX_CONNS_PER_PEER_DEFAULT;
	c->head_timeout_ms = SBD_HEAD_TIMEOUT_MS_DEFAULT;
	c->body_timeout_ms = SBD_BODY_TIMEOUT_MS_DEFAULT;
	c->idle_conn_timeout_ms = SBD_IDLE_CONN_TIMEOUT_MS_DEFAULT;
	c->default_output_cap = 1LL << 20;
	c->max_output_cap = 64LL << 20;
	c->exec_keep_budget = SBD_EXEC_KEEP_BUDGET;
	c->default_timeout_ms = 60000;
	c->max_timeout_ms = 24LL * 3600 * 1000;
	c->fncall_pool = 2;
	c->store_timeout_ms = SBD_STORE_TIMEOUT_MS_DEFAULT;
	c->vm_snapshots_max_mb = SBD_VM_SNAPSHOTS_MAX_MB_DEFAULT;
}

static int mkdir_p(const char *path)
{
	char buf[4096];
	snprintf(buf, sizeof(buf), "%s", path);
	for (char *p = buf + 1; *p; p++)
		if (*p == '/') {
			*p = 0;
			if (mkdir(buf, 0755) < 0 && errno != EEXIST)
				return -errno;
			*p = '/';
		}
	return mkdir(buf, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

/* Removes dir when it holds nothing but empty directories (what a
 * sandboxd leaves when it has no sandboxes: sandboxes/, images/, the
 * container runtime's dirs); never a file. True when dir is gone. */
static bool remove_empty_tree(const char *dir)
{
	DIR *dp = opendir(dir);
	struct dirent *de;
	while (dp && (de = readdir(dp))) {
		char p[PATH_MAX];
		if (de->d_type != DT_DIR || !strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (snprintf(p, sizeof(p), "%s/%s", dir, de->d_name) < (int)sizeof(p))
			remove_empty_tree(p);
	}
	if (dp)
		closedir(dp);
	return rmdir(dir) == 0 || errno == ENOENT;
}

/* The default state dir (see the top of this file); sets *ret_link to the
 * HOME/sandboxd symlink when it is the tmpfs one. */
static char *default_state_dir(const char *home, int64_t node, char **ret_link)
{
	char *link = NULL, abs[PATH_MAX], tgt[64];
	/* Several nodes of one home on this machine (`strata up --nodes`):
	 * node N > 1 has HOME/sandboxd-nN, and its own tmpfs dir (the hash
	 * covers the link's path). */
	if ((node > 1 ? asprintf(&link, "%s/sandboxd-n%lld", home, (long long)node)
		      : asprintf(&link, "%s/sandboxd", home)) < 0)
		return NULL;
	mkdir_p(home);
	if (!realpath(home, abs))
		snprintf(abs, sizeof(abs), "%s", home);
	uint64_t h = 0xcbf29ce484222325ull; /* FNV-1a */
	for (const char *c = abs; *c; c++)
		h = (h ^ (uint8_t)*c) * 0x100000001b3ull;
	for (int64_t n = node > 1 ? node : 0; n; n /= 10)
		h = (h ^ (uint8_t)('0' + n % 10)) * 0x100000001b3ull;
	struct stat st;
	if (lstat(link, &st) == 0 && S_ISDIR(st.st_mode) && !remove_empty_tree(link)) {
		log_info("state dir: %s holds sandboxes of an earlier sandboxd: kept on disk",
			 link);
		return link;
	}
	/* /run where it is a tmpfs; else /dev/shm (world-writable: our
	 * directory must be ours, mode 0700, no symlink). */
	static const char *const bases[][2] = {{"/run", "/run/strata"},
					       {"/dev/shm", "/dev/shm/strata"}};
	bool found = false;
	for (size_t i = 0; !found && i < ARRAY_SIZE(bases); i++) {
		struct statfs sf;
		if (statfs(bases[i][0], &sf) < 0 ||
		    (sf.f_type != TMPFS_MAGIC && sf.f_type != RAMFS_MAGIC))
			continue;
		if ((mkdir(bases[i][1], 0700) < 0 && errno != EEXIST) ||
		    lstat(bases[i][1], &st) < 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid() ||
		    (i > 0 && (st.st_mode & 077)))
			continue;
		snprintf(tgt, sizeof(tgt), "%s/sandboxd-%016llx", bases[i][1],
			 (unsigned long long)h);
		found = (mkdir(tgt, 0700) == 0 || errno == EEXIST) && lstat(tgt, &st) == 0 &&
			S_ISDIR(st.st_mode) && st.st_uid == geteuid() && chmod(tgt, 0700) == 0;
	}
	if (!found) {
		log_info("notice: neither /run nor /dev/shm is a writable tmpfs: sandbox state on "
			 "disk in %s",
			 link);
		return link;
	}
	char cur[PATH_MAX];
	ssize_t n = readlink(link, cur, sizeof(cur) - 1);
	if (n < 0 || (size_t)n != strlen(tgt) || memcmp(cur, tgt, (size_t)n) != 0) {
		char tmp[PATH_MAX];
		snprintf(tmp, sizeof(tmp), "%s.tmp%d", link, (int)getpid());
		unlink(tmp);
		if (symlink(tgt, tmp) < 0 || rename(tmp, link) < 0) {
			log_warn_errno(-errno, "Failed to link %s to the state dir %s", link, tgt);
			unlink(tmp);
		}
	}
	*ret_link = link;
	return strdup(tgt);
}

/* At a clean stop: the default tmpfs state dir goes when nothing is in it. */
static void remove_state_if_empty(struct sandboxd_config *c)
{
	if (c->state_link && remove_empty_tree(c->state_dir))
		unlink(c->state_link);
}

static bool parse_num(const char *s, int64_t lo, int64_t hi, int64_t *ret)
{
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < lo || v > hi)
		return false;
	*ret = v;
	return true;
}

enum {
	O_HOME = 256,
	O_SOCKET,
	O_STATE,
	O_IMAGE,
	O_IMAGES_DIR,
	O_TCP,
	O_TOKEN,
	O_MAXSB,
	O_MEM,
	O_PIDS,
	O_RESERVE,
	O_BODY,
	O_POOL,
	O_LOG,
	O_FRESH_NETNS,
	O_NO_USERNS,
	O_DISK_DIR,
	O_DISK_IMAGE,
	O_DISK_TMPFS,
	O_DISK_QUOTA,
	O_BODY_TOTAL,
	O_MAX_CONNS,
	O_MAX_CONNS_PEER,
	O_HEAD_TIMEOUT,
	O_BODY_TIMEOUT,
	O_IDLE_CONN_TIMEOUT,
	O_EXEC_KEEP,
	O_TENANTS,
	O_STORE_TIMEOUT,
	O_FIRECRACKER,
	O_VM_SNAPSHOTS_MAX,
	O_META,
	O_NODE_ID,
	O_ADVERTISE,
	O_KEY,
	O_CPU_BUDGET,
	O_NET_UPLINK,
	O_NET_POOL,
	O_NET_DNS,
	O_NET_PROTECT,
	O_NET_RESOLVER_PORT
};

static const struct option opts[] = {{"home", 1, 0, O_HOME},
				     {"socket", 1, 0, O_SOCKET},
				     {"state-dir", 1, 0, O_STATE},
				     {"image", 1, 0, O_IMAGE},
				     {"images-dir", 1, 0, O_IMAGES_DIR},
				     {"listen-tcp", 1, 0, O_TCP},
				     {"token", 1, 0, O_TOKEN},
				     {"max-sandboxes", 1, 0, O_MAXSB},
				     {"memory-budget-mb", 1, 0, O_MEM},
				     {"pids-budget", 1, 0, O_PIDS},
				     {"reserve-mb", 1, 0, O_RESERVE},
				     {"max-body-mb", 1, 0, O_BODY},
				     {"fncall-pool", 1, 0, O_POOL},
				     {"log-level", 1, 0, O_LOG},
				     {"fresh-netns", 0, 0, O_FRESH_NETNS},
				     {"no-userns", 0, 0, O_NO_USERNS},
				     {"disk-dir", 1, 0, O_DISK_DIR},
				     {"disk-image", 1, 0, O_DISK_IMAGE},
				     {"disk-tmpfs", 0, 0, O_DISK_TMPFS},
				     {"disk-quota", 0, 0, O_DISK_QUOTA},
				     {"max-body-total-mb", 1, 0, O_BODY_TOTAL},
				     {"max-connections", 1, 0, O_MAX_CONNS},
				     {"max-connections-per-peer", 1, 0, O_MAX_CONNS_PEER},
				     {"head-timeout", 1, 0, O_HEAD_TIMEOUT},
				     {"body-timeout", 1, 0, O_BODY_TIMEOUT},
				     {"idle-conn-timeout", 1, 0, O_IDLE_CONN_TIMEOUT},
				     {"exec-keep-budget-mb", 1, 0, O_EXEC_KEEP},
				     {"tenants", 1, 0, O_TENANTS},
				     {"store-timeout", 1, 0, O_STORE_TIMEOUT},
				     {"firecracker", 1, 0, O_FIRECRACKER},
				     {"vm-snapshots-max-mb", 1, 0, O_VM_SNAPSHOTS_MAX},
				     {"meta", 1, 0, O_META},
				     {"node-id", 1, 0, O_NODE_ID},
				     {"advertise", 1, 0, O_ADVERTISE},
				     {"key", 1, 0, O_KEY},
				     {"cpu-budget", 1, 0, O_CPU_BUDGET},
				     {"net-uplink", 1, 0, O_NET_UPLINK},
				     {"net-pool", 1, 0, O_NET_POOL},
				     {"net-dns", 1, 0, O_NET_DNS},
				     {"net-protect", 1, 0, O_NET_PROTECT},
				     {"net-resolver-port", 1, 0, O_NET_RESOLVER_PORT},
				     {"help", 0, 0, 'h'},
				     {0}};

static int parse_opt(struct sandboxd *d, int o, const char *arg, char ***images, size_t *nimages)
{
	struct sandboxd_config *c = &d->cfg;
	int64_t v = 0;
	switch (o) {
	case O_HOME:
		free(c->home);
		c->home = strdup(arg);
		return 0;
	case O_SOCKET:
		free(c->socket_path);
		c->socket_path = strdup(arg);
		return 0;
	case O_FRESH_NETNS:
		c->fresh_netns = true;
		return 0;
	case O_NET_UPLINK:
		free(c->net_uplink);
		c->net_uplink = strdup(arg);
		return 0;
	case O_NET_POOL:
		free(c->net_pool);
		c->net_pool = strdup(arg);
		return 0;
	case O_NET_DNS:
		free(c->net_dns);
		c->net_dns = strdup(arg);
		return 0;
	case O_NET_PROTECT:
		free(c->net_protect);
		c->net_protect = strdup(arg);
		return 0;
	case O_NET_RESOLVER_PORT:
		c->net_resolver_port = strtol(arg, NULL, 10);
		if (c->net_resolver_port < 1 || c->net_resolver_port > 65535) {
			log_error("--net-resolver-port: a port, 1-65535");
			return -EINVAL;
		}
		return 0;
	case O_NO_USERNS:
		c->no_userns = true;
		return 0;
	case O_DISK_DIR:
		free(c->disk_dir);
		c->disk_dir = strdup(arg);
		return 0;
	case O_DISK_IMAGE:
		free(c->disk_image);
		c->disk_image = strdup(arg);
		return 0;
	case O_DISK_TMPFS:
		c->disk_mode = SBX_DISK_TMPFS;
		return 0;
	case O_DISK_QUOTA:
		c->disk_mode = SBX_DISK_QUOTA;
		return 0;
	case O_STATE:
		free(c->state_dir);
		free(c->disk_dir);
		free(c->disk_image);
		c->state_dir = strdup(arg);
		return 0;
	case O_IMAGES_DIR:
		free(c->images_dir);
		c->images_dir = strdup(arg);
		return 0;
	case O_TCP:
		free(c->tcp_listen);
		c->tcp_listen = strdup(arg);
		return 0;
	case O_TOKEN:
		free(c->token);
		c->token = strdup(arg);
		return 0;
	case O_TENANTS:
		free(c->tenants_path);
		c->tenants_path = strdup(arg);
		return 0;
	case O_IMAGE: {
		char **n = realloc(*images, (*nimages + 1) * sizeof(char *));
		if (!n)
			return -ENOMEM;
		*images = n;
		n[(*nimages)++] = (char *)arg;
		return 0;
	}
	case O_FIRECRACKER:
		free(c->firecracker);
		c->firecracker = strdup(arg);
		return 0;
	case O_VM_SNAPSHOTS_MAX: {
		char *end;
		unsigned long long mb = strtoull(arg, &end, 10);
		if (end == arg || *end || mb > (1ull << 30))
			return -EINVAL;
		c->vm_snapshots_max_mb = (uint64_t)mb;
		return 0;
	}
	case O_META:
	case O_ADVERTISE:
	case O_KEY: {
		char **f = o == O_META	      ? &c->meta_addr
			   : o == O_ADVERTISE ? &c->advertise
					      : &c->key_path;
		free(*f);
		*f = strdup(arg);
		return 0;
	}
	case O_CPU_BUDGET: {
		char *end;
		double cores = strtod(arg, &end);
		if (end == arg || *end || !(cores >= 0.01 && cores <= 1e6))
			return -EINVAL;
		c->cpu_budget_milli = (int64_t)(cores * 1000);
		return 0;
	}
	case O_STORE_TIMEOUT: {
		char *end;
		double sec = strtod(arg, &end);
		if (end == arg || *end || !(sec >= 0.1 && sec <= 3600))
			return -EINVAL;
		c->store_timeout_ms = (int64_t)(sec * 1000);
		return 0;
	}
	case O_LOG:
		if (log_level_parse(arg) < 0)
			return -EINVAL;
		log_set_level(log_level_parse(arg));
		return 0;
	}
	if (!parse_num(arg, 0, INT64_MAX / 4, &v))
		return -EINVAL;
	switch (o) {
	case O_MAXSB:
		c->max_sandboxes = v;
		break;
	case O_NODE_ID:
		if (v < 1 || v > SBNODE_ID_MAX)
			return -EINVAL;
		c->node_id = v;
		break;
	case O_MEM:
		c->memory_budget_mb = v;
		break;
	case O_PIDS:
		c->pids_budget = v;
		break;
	case O_RESERVE:
		c->reserve_mb = v;
		break;
	case O_BODY:
		c->max_body = v << 20;
		break;
	case O_EXEC_KEEP:
		c->exec_keep_budget = v << 20;
		break;
	case O_POOL:
		c->fncall_pool = v > 64 ? 64 : (int)v;
		break;
	case O_BODY_TOTAL:
		c->max_body_total = v << 20;
		break;
	case O_MAX_CONNS:
	case O_MAX_CONNS_PEER:
		if (v < 1)
			return -EINVAL;
		*(o == O_MAX_CONNS ? &c->max_conns : &c->max_conns_per_peer) = v;
		break;
	case O_HEAD_TIMEOUT:
	case O_BODY_TIMEOUT:
	case O_IDLE_CONN_TIMEOUT:
		if (v < 1 || v > 86400)
			return -EINVAL;
		*(o == O_HEAD_TIMEOUT	? &c->head_timeout_ms
		  : o == O_BODY_TIMEOUT ? &c->body_timeout_ms
					: &c->idle_conn_timeout_ms) = v * 1000;
		break;
	default:
		return -EINVAL;
	}
	return 0;
}

/* --meta's companions: a node id, an address apiservers reach, the key. */
static int finish_cluster_config(struct sandboxd_config *c)
{
	if (!c->cpu_budget_milli) {
		long n = sysconf(_SC_NPROCESSORS_ONLN);
		c->cpu_budget_milli = 64 * 1000 * (n > 0 ? n : 1); /* limits, not reservations */
	}
	if (!c->meta_addr)
		return 0;
	if (!c->node_id || !c->tcp_listen) {
		log_error("--meta needs --node-id N and --listen-tcp HOST:PORT (apiservers forward "
			  "to this node's TCP API)");
		return -EINVAL;
	}
	if (!c->advertise && !(c->advertise = strdup(c->tcp_listen)))
		return -ENOMEM;
	if (strlen(c->advertise) > SBNODE_ADDR_MAX) {
		log_error("--advertise '%s': longer than %d bytes", c->advertise, SBNODE_ADDR_MAX);
		return -EINVAL;
	}
	return daemon_load_key(c->key_path, RPC_ROLE_SANDBOX);
}

static int finish_config(struct sandboxd_config *c)
{
	int e = finish_cluster_config(c);
	if (e < 0)
		return e;
	if (!c->home) {
		const char *h = getenv("STRATA_HOME");
		c->home = strdup(h && h[0] ? h : "./.strata");
	}
	if (!c->token && getenv("STRATA_SANDBOXD_TOKEN"))
		c->token = strdup(getenv("STRATA_SANDBOXD_TOKEN"));
	if (c->token && !c->token[0]) { /* an empty token would let "Bearer " in */
		free(c->token);
		c->token = NULL;
	}
	if (!c->socket_path && asprintf(&c->socket_path, "%s/run/sandboxd.sock", c->home) < 0)
		return -ENOMEM;
	if (!c->tenants_path && asprintf(&c->tenants_path, "%s/tenants.json", c->home) < 0)
		return -ENOMEM;
	if (!c->state_dir &&
	    !(c->state_dir = default_state_dir(c->home, c->node_id, &c->state_link)))
		return -ENOMEM;
	char sub[4200], sockdir[4096];
	snprintf(sub, sizeof(sub), "%s/sandboxes", c->state_dir);
	snprintf(sockdir, sizeof(sockdir), "%s", c->socket_path);
	char *slash = strrchr(sockdir, '/');
	if (slash && slash != sockdir) {
		*slash = 0;
		int r = mkdir_p(sockdir);
		if (r < 0)
			return log_error_errno(r, "Failed to create %s", sockdir);
	}
	int r = mkdir_p(sub);
	return r < 0 ? log_error_errno(r, "Failed to create %s", sub) : 0;
}

static int parse_args(struct sandboxd *d, int argc, char **argv)
{
	_cleanup_free_ char **images = NULL;
	size_t nimages = 0;
	int o;
	while ((o = getopt_long(argc, argv, "h", opts, NULL)) != -1) {
		if (o == 'h') {
			usage(stdout);
			exit(0);
		}
		if (o == '?' || parse_opt(d, o, optarg, &images, &nimages) < 0) {
			if (o != '?')
				log_error("invalid value for --%s: '%s'", opts[o - O_HOME].name,
					  optarg);
			usage(stderr);
			return -EINVAL;
		}
	}
	if (optind < argc) {
		log_error("unexpected argument '%s'", argv[optind]);
		return -EINVAL;
	}
	int r = finish_config(&d->cfg);
	for (size_t i = 0; r == 0 && i < nimages; i++)
		if ((r = sbd_images_add_spec(d, images[i])) < 0)
			log_error_errno(
			    r, "Invalid --image '%s' (want NAME=DIR, DIR an existing directory)",
			    images[i]);
	if (r == 0 && d->cfg.images_dir && (r = sbd_images_load_dir(d, d->cfg.images_dir)) < 0)
		log_error_errno(r, "Failed to load images from %s", d->cfg.images_dir);
	return r < 0 ? r : 0;
}

static void timer_io(void *ctx, uint32_t ev)
{
	struct sandboxd *d = ctx;
	uint64_t x;
	if (read(d->timer_fd, &x, sizeof(x)) < 0)
		return;
	sbd_registry_reap(d);
	sbd_tenants_reload(d);
	sbd_images_tick(d);
	sbd_lease_tick(d, d->lease);
	for (size_t i = 0; i < ARRAY_SIZE(d->backends); i++)
		if (d->backends[i] && d->backends[i]->tick)
			d->backends[i]->tick(d->backends[i]);
}

static void signal_io(void *ctx, uint32_t ev)
{
	struct sandboxd *d = ctx;
	struct signalfd_siginfo si;
	while (read(d->signal_fd, &si, sizeof(si)) == sizeof(si))
		if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT)
			d->stopping = true;
}

static int setup_loop(struct sandboxd *d)
{
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	d->signal_fd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	d->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	struct itimerspec its = {{1, 0}, {1, 0}};
	if (d->signal_fd < 0 || d->timer_fd < 0 || timerfd_settime(d->timer_fd, 0, &its, NULL) < 0)
		return -errno;
	int r = sbd_watch_add(d->loop, &d->w_signal, d->signal_fd, EPOLLIN, signal_io, d);
	return r < 0 ? r : sbd_watch_add(d->loop, &d->w_timer, d->timer_fd, EPOLLIN, timer_io, d);
}

static int setup_backends(struct sandboxd *d)
{
	/* The layers' image goes on disk: the default state dir is a tmpfs. */
	if (!d->cfg.disk_image && d->cfg.state_link &&
	    (d->cfg.node_id > 1
		 ? asprintf(&d->cfg.disk_image, "%s/sandboxd-layers-n%lld.img", d->cfg.home,
			    (long long)d->cfg.node_id)
		 : asprintf(&d->cfg.disk_image, "%s/sandboxd-layers.img", d->cfg.home)) < 0)
		d->cfg.disk_image = NULL;
	struct sbd_disk_opts disk = {
	    .mode = d->cfg.disk_mode, .dir = d->cfg.disk_dir, .image = d->cfg.disk_image};
	d->backends[0] =
	    sbd_backend_container_new(d->loop, d->cfg.state_dir, d->cfg.fresh_netns, &disk);
	struct sbd_caps k;
	if (d->backends[0]) {
		d->backends[0]->caps(d->backends[0], &k);
		if (k.available && k.disk_reason)
			log_info("container writable layers: %s%s",
				 k.limits_disk ? "" : "no disk limit, ", k.disk_reason);
		/* The images registered here show what user namespaces need:
		 * an idmapped mount of their filesystem; without one (images of
		 * the store only, checked at each create), the kernel's part. */
		sbd_backend_container_userns_probe(d->backends[0],
						   d->images ? sbd_image_rootfs(d->images) : NULL);
		d->backends[0]->caps(d->backends[0], &k);
		if (k.available)
			log_info("container user namespaces: %s%s",
				 !k.userns	    ? "no, "
				 : d->cfg.no_userns ? "on request"
						    : "on",
				 k.userns ? "" : k.userns_reason);
	}
	d->backends[1] = sbd_backend_fncall_new(d->loop, d->cfg.fncall_pool, d->backends[0]);
	d->backends[2] = sbd_backend_vm_new(d, d->backends[0], "firecracker");
	d->backends[3] = sbd_backend_vm_new(d, d->backends[0], "qemu");
	for (size_t i = 0; i < ARRAY_SIZE(d->backends); i++) {
		if (!d->backends[i])
			return -ENOMEM;
		struct sbd_caps k = {0};
		d->backends[i]->caps(d->backends[i], &k);
		if (k.available)
			log_info("backend %s: available", d->backends[i]->name);
		else
			log_info("backend %s: unavailable (%s)", d->backends[i]->name, k.why.msg);
	}
	return 0;
}

/* Returns false when threads are stuck in the image store: what they use
 * is left allocated, and the process must end without waiting for them
 * (main). */
static bool teardown(struct sandboxd *d)
{
	sbd_lease_stop(d->lease); /* the lease lapses: apiservers stop placing here */
	sbd_server_close(d);
	/* Image store calls in flight (bounded: stuck ones are abandoned);
	 * the creates that waited for their images go on. */
	bool stuck = sbd_images_drain(d) > 0;
	sbd_api_creates_drain(d);	/* creates in flight: finished, kept for adoption */
	sbd_xfer_shutdown(d);		/* file transfers in flight: cut, answered */
	sbd_registry_free_all(d);	/* the sandboxes keep running: only our memory */
	sbd_registry_unpersist_wait(d); /* before the state dir may be removed */
	sbd_pool_free(d->pool);
	sbd_net_stop(d);
	for (size_t i = ARRAY_SIZE(d->backends); i-- > 0;) /* fncall before container */
		if (d->backends[i])
			d->backends[i]->free(d->backends[i]);
	sbd_images_free(d);
	if (d->timer_fd >= 0)
		close(d->timer_fd);
	if (d->signal_fd >= 0)
		close(d->signal_fd);
	sbd_loop_free(d->loop);
	struct sandboxd_config *c = &d->cfg;
	remove_state_if_empty(c);
	free(c->home);
	free(c->state_dir);
	free(c->state_link);
	free(c->socket_path);
	free(c->tcp_listen);
	free(c->token);
	free(c->tenants_path);
	sbd_tenants_done(&d->tenants);
	free(c->images_dir);
	free(c->firecracker);
	free(c->meta_addr);
	free(c->advertise);
	free(c->key_path);
	free(c->net_uplink);
	free(c->net_pool);
	free(c->net_dns);
	free(c->net_protect);
	return !stuck;
}

/* The end of the process. A thread stuck in the image store (a request to
 * a stopped strata-fuse) cannot be joined, and exit()'s handlers (the
 * sanitizers' leak check stops every thread first) would wait for it:
 * _exit, whose exit_group ends it. */
static int finish(bool clean, int rc)
{
	if (clean)
		return rc;
	fflush(NULL);
	_exit(rc);
}

int main(int argc, char **argv)
{
	struct sandboxd d = {.listen_fd = -1, .tcp_fd = -1, .timer_fd = -1, .signal_fd = -1};
	log_init("strata-sandboxd", LOG_LVL_INFO);
	daemon_raise_fd_limit();
	defaults(&d.cfg);
	d.started_ms = sbd_now_ms();
	int r = parse_args(&d, argc, argv);
	if (r == 0 && (!(d.loop = sbd_loop_new()) || !(d.pool = sbd_pool_new())))
		r = -ENOMEM;
	if (r == 0)
		r = setup_loop(&d);
	if (r == 0)
		r = setup_backends(&d);
	if (r == 0)
		r = sbd_net_start(&d);
	if (r == 0) {
		sbd_registry_adopt_all(&d);
		sbd_images_reconcile(&d); /* before the loop serves (images.h) */
		sbd_tenants_reload(&d);
		r = sbd_server_listen(&d);
	}
	if (r == 0 && d.cfg.meta_addr) {
		if ((d.lease = sbd_lease_start(&d)))
			sbd_lease_tick(&d, d.lease); /* the first report at once */
		else
			r = -errno;
	}
	if (r < 0)
		return d.loop ? finish(teardown(&d), 1) : 1;
	log_info("serving on %s (%zu sandboxes adopted, state in %s)", d.cfg.socket_path, d.count,
		 d.cfg.state_dir);
	while (!d.stopping && (r = sbd_loop_run_once(d.loop, 1000)) == 0)
		;
	log_info("stopping; %zu sandboxes left running", d.count);
	return finish(teardown(&d), r < 0 ? 1 : 0);
}
