/* main.c — strata-chunkserver: serves the chunks of one or more targets.
 *
 *   strata-chunkserver --listen HOST:PORT --meta HOST:PORT --target DIR [--target DIR]...
 *                      [--key FILE] [--tls] [--addr-file F] [--log-level L] [--workers N]
 *                      [--fwd-workers N]
 *
 * Every connection, in and out, proves the cluster key (--key, else
 * $STRATA_KEY; fs/rpc_auth.h); this daemon's own calls state the role
 * chunkserver, and requests it serves are checked with rpc_role_may.
 *
 * Start-up: open every target (lock it, clean crash leftovers), start the RPC
 * server, register with strata-meta (retrying while it comes up) under the
 * node and target ids persisted in each target's target.id, persist the ids
 * it assigns, then write --addr-file. The main thread then heartbeats every
 * second with each target's free/total bytes until SIGTERM or SIGINT.
 *
 * The RPC server's workers are split in pools (service.h, cs_pool_of):
 * --workers for clients' requests, --fwd-workers for each chain position
 * 1.., two for probes; --fwd-workers 0 puts everything in one pool of
 * --workers (forwards may then wait on each other across nodes until they
 * time out: for tests). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "chunkserver/chunk_store.h"
#include "fs/cleanup.h"
#include "fs/daemon.h"
#include "fs/log.h"
#include "fs/meta_client.h"
#include "fs/rpc.h"
#include "fs/rpc_tls.h"
#include "chunkserver/replica.h"
#include "chunkserver/service.h"
#include "chunkserver/target_id.h"
#include "chunkserver/uring_pool.h"

#define CS_MAX_TARGETS 64
#define CS_WORKERS 16	 /* pool of clients' requests (--workers) */
#define CS_FWD_WORKERS 8 /* pool of each chain position 1.. (--fwd-workers) */
#define CS_CTL_WORKERS 2 /* pool of PING (strata-meta's probes) */
#define CS_MAX_WORKERS 256
#define REGISTER_TIMEOUT_MS 30000
#define HEARTBEAT_MS 500 /* well inside strata-meta's lease (3 s default) */

struct dtarget {
	const char *path;
	uint32_t stored_node_id, target_id;
	struct chunk_store *store;
};

struct daemon {
	const char *listen, *meta, *addr_file, *key;
	int ntargets;
	struct dtarget t[CS_MAX_TARGETS];
	struct cs_target svc_targets[CS_MAX_TARGETS];
	struct cs_service svc;
	struct uring_pool *pool;
	struct rpc_server *srv;
	struct meta_client *mc;
	struct repl *repl;
	int workers, fwd_workers; /* fwd_workers 0: one pool for everything */
	uint32_t node_id;
	char addr[80];
	sigset_t sigs;
};

static void usage(FILE *f)
{
	fprintf(f, "usage: strata-chunkserver --listen HOST:PORT --meta HOST:PORT --target DIR "
		   "[--target DIR]...\n"
		   "                          [--key FILE] [--addr-file F] "
		   "[--log-level error|warn|info|debug]\n"
		   "                          [--workers N] [--fwd-workers N]\n"
		   "  --key FILE  the cluster key (32 bytes, mode 0600; default $STRATA_KEY)\n"
		   "  --tls       TLS for every connection (fs/rpc_tls.h; all of the cluster or\n"
		   "              none; default $STRATA_TLS=1)\n");
}

/* Returns 0, 1 after --help, or -EINVAL (message printed). */
static int parse_args(struct daemon *d, int argc, char **argv, int *ret_level)
{
	static const struct option opts[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"meta", required_argument, NULL, 'm'},
	    {"target", required_argument, NULL, 't'},
	    {"addr-file", required_argument, NULL, 'a'},
	    {"log-level", required_argument, NULL, 'L'},
	    {"help", no_argument, NULL, 'h'},
	    {"workers", required_argument, NULL, 'w'},
	    {"fwd-workers", required_argument, NULL, 'f'},
	    {"key", required_argument, NULL, 'k'},
	    {"tls", no_argument, NULL, 'T'},
	    {0},
	};
	int c;
	while ((c = getopt_long(argc, argv, "", opts, NULL)) != -1) {
		switch (c) {
		case 'l':
			d->listen = optarg;
			break;
		case 'm':
			d->meta = optarg;
			break;
		case 'a':
			d->addr_file = optarg;
			break;
		case 'k':
			d->key = optarg;
			break;
		case 'T':
			rpc_tls_set_default(true);
			break;
		case 't':
			if (d->ntargets == CS_MAX_TARGETS) {
				fprintf(stderr, "strata-chunkserver: at most %d targets\n",
					CS_MAX_TARGETS);
				return -EINVAL;
			}
			d->t[d->ntargets++].path = optarg;
			break;
		case 'L':
			if ((*ret_level = log_level_parse(optarg)) < 0) {
				fprintf(stderr, "strata-chunkserver: unknown log level '%s'\n",
					optarg);
				return -EINVAL;
			}
			break;
		case 'w':
		case 'f': {
			char *end;
			long n = strtol(optarg, &end, 10);
			if (*end || end == optarg || n < (c == 'w') || n > CS_MAX_WORKERS) {
				fprintf(stderr, "strata-chunkserver: --%s takes %d..%d\n",
					c == 'w' ? "workers" : "fwd-workers", c == 'w',
					CS_MAX_WORKERS);
				return -EINVAL;
			}
			*(c == 'w' ? &d->workers : &d->fwd_workers) = (int)n;
			break;
		}
		case 'h':
			usage(stdout);
			return 1;
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!d->listen || !d->meta || d->ntargets == 0 || optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

static void on_corrupt(void *arg, const struct chunk_corruption *c)
{
	const struct dtarget *t = arg;
	char blk[32] = "header";
	if (c->block >= 0)
		snprintf(blk, sizeof(blk), "block %lld", (long long)c->block);
	log_error("Corrupt chunk ino 0x%llx index %u on target %u (%s), %s: %s; returning EIO",
		  (unsigned long long)c->ino, c->index, t->target_id, t->path, blk, c->what);
}

static int open_targets(struct daemon *d)
{
	/* as many rings as worker threads: borrowing one never waits */
	int nthreads = d->workers;
	if (d->fwd_workers)
		nthreads += (CS_NPOOLS - 2) * d->fwd_workers + CS_CTL_WORKERS;
	int r = uring_pool_new(nthreads + 1, 64, &d->pool);
	if (r < 0)
		return log_error_errno(r, "Failed to set up io_uring");
	for (int i = 0; i < d->ntargets; i++) {
		struct dtarget *t = &d->t[i];
		struct chunk_store_opts o = {.on_corrupt = on_corrupt, .arg = t};
		r = chunk_store_open(t->path, d->pool, &o, &t->store);
		if (r == -EBUSY)
			return log_error_errno(r, "Target '%s' is in use by another process",
					       t->path);
		if (r == -EPROTONOSUPPORT)
			return log_error_errno(r,
					       "Target '%s' was written by a newer chunkserver "
					       "(its chunk format or journal is above format 2); "
					       "refusing to open it",
					       t->path);
		if (r == -EBADMSG)
			return log_error_errno(r, "Damaged %s/format", t->path);
		if (r < 0)
			return log_error_errno(r, "Failed to open target '%s'", t->path);
		r = target_id_load(t->path, &t->stored_node_id, &t->target_id);
		if (r == -EBADMSG)
			return log_error_errno(r, "Damaged %s/target.id", t->path);
		if (r < 0 && r != -ENOENT)
			return log_error_errno(r, "Failed to read %s/target.id", t->path);
		if (!d->node_id)
			d->node_id = t->stored_node_id;
		else if (t->stored_node_id && t->stored_node_id != d->node_id)
			log_warn("Target '%s' was registered by node %u, now node %u", t->path,
				 t->stored_node_id, d->node_id);
	}
	return 0;
}

/* The address peers should dial: the listen host, or for a wildcard listen
 * the local address of the route to strata-meta. */
static int advertise_addr(struct daemon *d)
{
	char host[64], mhost[64], port[8];
	uint16_t p, mp;
	if (addr_parse(d->listen, host, sizeof(host), &p) < 0 ||
	    addr_parse(d->meta, mhost, sizeof(mhost), &mp) < 0)
		return -EINVAL;
	p = rpc_server_port(d->srv);
	bool wild = !host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "::");
	if (wild) {
		struct addrinfo hints = {.ai_socktype = SOCK_DGRAM}, *ai = NULL;
		snprintf(port, sizeof(port), "%u", mp);
		snprintf(host, sizeof(host), "127.0.0.1");
		if (getaddrinfo(mhost[0] ? mhost : "127.0.0.1", port, &hints, &ai) == 0) {
			_cleanup_close_ int fd =
			    socket(ai->ai_family, SOCK_DGRAM | SOCK_CLOEXEC, 0);
			struct sockaddr_storage ss;
			socklen_t sl = sizeof(ss);
			if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) == 0 &&
			    getsockname(fd, (struct sockaddr *)&ss, &sl) == 0)
				getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), NULL, 0,
					    NI_NUMERICHOST);
			freeaddrinfo(ai);
		}
	}
	bool v6 = strchr(host, ':') != NULL;
	snprintf(d->addr, sizeof(d->addr), v6 ? "[%s]:%u" : "%s:%u", host, p);
	return 0;
}

/* The id of the filesystem holding path (statvfs f_fsid, else st_dev), so
 * that strata-meta counts targets sharing one filesystem once; 0 unknown. */
static uint64_t target_fsid(const char *path)
{
	struct statvfs sv;
	struct stat st;

	if (statvfs(path, &sv) == 0 && sv.f_fsid != 0)
		return (uint64_t)sv.f_fsid;
	return stat(path, &st) == 0 ? (uint64_t)st.st_dev : 0;
}

static void fill_infos(struct daemon *d, struct mgmt_target_info *infos)
{
	for (int i = 0; i < d->ntargets; i++) {
		struct mgmt_target_info *m = &infos[i];
		memset(m, 0, sizeof(*m));
		m->target_id = d->t[i].target_id;
		snprintf(m->path, sizeof(m->path), "%s", d->t[i].path);
		chunk_store_space(d->t[i].store, &m->total_bytes, &m->free_bytes);
		m->fsid = target_fsid(d->t[i].path);
	}
}

/* Persists the ids strata-meta assigned and publishes the targets to the
 * request handler. */
static int adopt_ids(struct daemon *d, const struct mgmt_target_info *infos)
{
	for (int i = 0; i < d->ntargets; i++) {
		struct dtarget *t = &d->t[i];
		if (t->stored_node_id != d->node_id || t->target_id != infos[i].target_id) {
			int r = target_id_store(t->path, d->node_id, infos[i].target_id);
			if (r < 0)
				return log_error_errno(r, "Failed to write %s/target.id", t->path);
			t->stored_node_id = d->node_id;
		}
		t->target_id = infos[i].target_id;
		d->svc_targets[i] = (struct cs_target){t->target_id, t->store};
	}
	d->svc.targets = d->svc_targets;
	__atomic_store_n(&d->svc.ntargets, d->ntargets, __ATOMIC_RELEASE);
	return 0;
}

/* Returns true if SIGTERM/SIGINT arrived within timeout_ms. */
static bool wait_signal(struct daemon *d, int timeout_ms)
{
	struct timespec ts = {timeout_ms / 1000, (long)(timeout_ms % 1000) * 1000000};
	int s = sigtimedwait(&d->sigs, NULL, &ts);
	return s == SIGTERM || s == SIGINT;
}

/* Registers, retrying while strata-meta is unreachable. Returns 0, -ECANCELED
 * on a signal, or -errno. */
static int register_node(struct daemon *d)
{
	struct mgmt_target_info infos[CS_MAX_TARGETS];
	int r = 0;
	for (int waited = 0; waited <= REGISTER_TIMEOUT_MS; waited += 200) {
		fill_infos(d, infos);
		uint32_t node = d->node_id;
		r = mgmt_register(d->mc, &node, d->addr, infos, d->ntargets);
		if (r == 0) {
			d->node_id = node;
			return adopt_ids(d, infos);
		}
		if (r != -ECONNREFUSED && r != -ETIMEDOUT && r != -ECONNRESET)
			break;
		if (wait_signal(d, 200))
			return -ECANCELED;
	}
	return log_error_errno(r, "Failed to register with strata-meta at %s", d->meta);
}

static int write_addr_file(const char *path, const char *addr)
{
	char tmp[4096];
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (!f)
		return -errno;
	int ok = fprintf(f, "%s\n", addr) > 0;
	ok = (fclose(f) == 0) && ok;
	if (!ok || rename(tmp, path) < 0) {
		int r = errno ? -errno : -EIO;
		unlink(tmp);
		return r;
	}
	return 0;
}

/* Heartbeats until a signal; re-registers if strata-meta forgot the node. */
static void serve(struct daemon *d)
{
	bool failing = false;
	while (!wait_signal(d, HEARTBEAT_MS)) {
		struct mgmt_target_info infos[CS_MAX_TARGETS];
		fill_infos(d, infos);
		int r = mgmt_heartbeat(d->mc, d->node_id, infos, d->ntargets);
		if (r == -ENOENT)
			r = register_node(d);
		if (r == 0)
			r = repl_refresh(d->repl, 0);
		if (r < 0 && !failing)
			log_warn_errno(r, "Heartbeat to strata-meta at %s failed", d->meta);
		else if (r == 0 && failing)
			log_info("Heartbeats to strata-meta at %s succeed again", d->meta);
		failing = r < 0;
	}
}

static int start(struct daemon *d)
{
	int r = open_targets(d);
	if (r < 0)
		return r;
	struct rpc_server_opts so = {.name = "chunkserver",
				     .listen = d->listen,
				     .workers = d->workers,
				     .handler = cs_handle,
				     .ctx = &d->svc,
				     .may = rpc_role_may};
	if (d->fwd_workers) { /* invariant of cs_pool_of: no pool waits on itself */
		so.npools = CS_NPOOLS;
		so.pool_of = cs_pool_of;
		so.pool_workers[CS_POOL_CLIENT] = d->workers;
		for (int i = 1; i < CS_POOL_CONTROL; i++)
			so.pool_workers[i] = d->fwd_workers;
		so.pool_workers[CS_POOL_CONTROL] = CS_CTL_WORKERS;
	}
	r = rpc_server_start(&so, &d->srv);
	if (r < 0)
		return log_error_errno(r, "Failed to listen on %s", d->listen);
	if (advertise_addr(d) < 0)
		return log_error_errno(-EINVAL, "Bad address in --listen %s or --meta %s",
				       d->listen, d->meta);
	d->mc = meta_client_new(d->meta, "chunkserver", NULL);
	if (!d->mc)
		return log_error_errno(-ENOMEM, "Failed to create the meta client");
	if ((r = repl_new(d->mc, &d->svc, &d->repl)) < 0)
		return log_error_errno(r, "Failed to set up replication");
	d->svc.repl = d->repl;
	r = register_node(d);
	if (r < 0)
		return r;
	if ((r = repl_refresh(d->repl, 0)) < 0)
		log_warn_errno(r, "Failed to fetch the routing table (retrying every second)");
	if ((r = repl_start(d->repl)) < 0)
		return log_error_errno(r, "Failed to start the resync thread");
	if (d->addr_file && (r = write_addr_file(d->addr_file, d->addr)) < 0)
		return log_error_errno(r, "Failed to write %s", d->addr_file);
	log_info("Serving %d target(s) as node %u on %s", d->ntargets, d->node_id, d->addr);
	return 0;
}

static void stop(struct daemon *d)
{
	rpc_server_free(d->srv);
	repl_free(d->repl);
	meta_client_free(d->mc);
	for (int i = 0; i < d->ntargets; i++)
		chunk_store_free(d->t[i].store);
	uring_pool_free(d->pool);
}

int main(int argc, char **argv)
{
	struct daemon d = {.workers = CS_WORKERS, .fwd_workers = CS_FWD_WORKERS};
	int level = LOG_LVL_INFO;
	int r = parse_args(&d, argc, argv, &level);
	if (r != 0)
		return r > 0 ? 0 : 2;
	log_init("strata-chunkserver", level);
	daemon_raise_fd_limit();
	if (daemon_load_key(d.key, RPC_ROLE_CHUNKSERVER) < 0)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&d.sigs);
	sigaddset(&d.sigs, SIGTERM);
	sigaddset(&d.sigs, SIGINT);
	pthread_sigmask(SIG_BLOCK, &d.sigs, NULL); /* before any thread starts */
	r = start(&d);
	if (r == 0)
		serve(&d);
	stop(&d);
	if (r == 0)
		log_info("Stopped");
	return r == 0 || r == -ECANCELED ? 0 : 1;
}
