/* main.c — the strata-meta daemon: parses the command line (CONVENTIONS.md),
 * opens the engine on --db, serves RPC on --listen, writes --addr-file once
 * serving, runs the WAL sync timer (100 ms), the lease check and the chunk GC
 * (meta/gc.h), and stops cleanly on SIGTERM/SIGINT (WAL synced on close).
 *
 *   strata-meta --listen HOST:PORT --db DIR [--key FILE] [--tls] [--addr-file F] [--log-level L]
 *
 * Every connection proves it holds the cluster key (--key, else $STRATA_KEY;
 * fs/rpc_auth.h) and each request is checked against the role it stated
 * (rpc_role_may; a layout change is checked in server.c). */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include "fs/chunk_client.h"
#include "fs/cleanup.h"
#include "fs/daemon.h"
#include "fs/rpc_tls.h"
#include "meta/gc.h"
#include "fs/log.h"
#include "fs/meta_client.h"
#include "meta/ns.h"
#include "fs/rpc.h"
#include "meta/server.h"
#include "meta/ticker.h"

#define GC_RETRY_MS 1000 /* failover window of one GC removal */

struct opts {
	const char *listen, *db, *addr_file, *key;
	int log_level;
	uint32_t lease_ms, replicas, expect_nodes;
};

struct daemon {
	struct ns *ns;
	struct rpc_server *srv;
	struct ticker *sync_t, *lease_t, *opid_t;
	uint64_t opid_answered; /* ns_opid_answered at the last tick */
	struct gc *gc;
	struct meta_client *mc; /* to ourselves: routing for the chunk client */
	struct chunk_client *cc;
	char self[96];
	int gc_failed_logged;
};

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata-meta --listen HOST:PORT --db DIR [--key FILE] [--addr-file F] "
		"[--log-level error|warn|info|debug]\n"
		"                   [--lease-ms MS (3000)] [--replicas N (3)] "
		"[--expect-nodes N (1)]\n"
		"\n"
		"  --replicas N      default replication factor (1..5): the root directory's\n"
		"                    and so of every directory that sets none; a cluster of\n"
		"                    fewer nodes gets their number. Chain tables of every\n"
		"                    factor 1..min(5, nodes) are formed; a directory picks\n"
		"                    one with `strata admin layout set DIR --replicas N`.\n"
		"  --expect-nodes N  form no chain before N nodes registered\n"
		"  --key FILE        the cluster key (32 bytes, mode 0600; default $STRATA_KEY)\n"
		"  --tls             TLS for every connection (fs/rpc_tls.h; all of the cluster\n"
		"                    or none; default $STRATA_TLS=1)\n");
}

static int parse_args(int argc, char **argv, struct opts *o)
{
	static const struct option lo[] = {
	    {"listen", required_argument, NULL, 'l'},
	    {"db", required_argument, NULL, 'd'},
	    {"addr-file", required_argument, NULL, 'a'},
	    {"log-level", required_argument, NULL, 'v'},
	    {"help", no_argument, NULL, 'h'},
	    {"lease-ms", required_argument, NULL, 'L'},
	    {"replicas", required_argument, NULL, 'R'},
	    {"expect-nodes", required_argument, NULL, 'E'},
	    {"key", required_argument, NULL, 'k'},
	    {"tls", no_argument, NULL, 'T'},
	    {NULL, 0, NULL, 0},
	};
	int c;

	*o = (struct opts){.log_level = LOG_LVL_INFO,
			   .lease_ms = NS_DEFAULT_LEASE_MS,
			   .replicas = NS_DEFAULT_REPLICAS,
			   .expect_nodes = 1};
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'l':
			o->listen = optarg;
			break;
		case 'd':
			o->db = optarg;
			break;
		case 'a':
			o->addr_file = optarg;
			break;
		case 'v':
			if ((o->log_level = log_level_parse(optarg)) < 0) {
				fprintf(stderr, "strata-meta: bad --log-level '%s'\n", optarg);
				return -EINVAL;
			}
			break;
		case 'L':
			o->lease_ms = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'R':
			o->replicas = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'E':
			o->expect_nodes = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'k':
			o->key = optarg;
			break;
		case 'T':
			rpc_tls_set_default(true);
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			usage(stderr);
			return -EINVAL;
		}
	}
	if (!o->listen || !o->db || optind != argc) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* "host:port" others can dial: a wildcard host becomes 127.0.0.1. */
static int self_addr(const char *listen, uint16_t port, char *out, size_t cap)
{
	char host[64];
	uint16_t p;
	int r = addr_parse(listen, host, sizeof(host), &p);

	if (r < 0)
		return r;
	if (!host[0] || !strcmp(host, "0.0.0.0") || !strcmp(host, "::") || !strcmp(host, "[::]"))
		snprintf(host, sizeof(host), "127.0.0.1");
	bool v6 = strchr(host, ':') && host[0] != '[';
	snprintf(out, cap, v6 ? "[%s]:%u" : "%s:%u", host, port);
	return 0;
}

static int write_addr_file(const char *path, const char *addr)
{
	_cleanup_free_ char *tmp = NULL;
	FILE *f;

	if (asprintf(&tmp, "%s.tmp", path) < 0)
		return -ENOMEM;
	if (!(f = fopen(tmp, "w")))
		return -errno;
	fprintf(f, "%s\n", addr);
	if (fclose(f) != 0)
		return -errno;
	return rename(tmp, path) < 0 ? -errno : 0;
}

static int sync_tick(void *ctx)
{
	struct daemon *d = ctx;
	int r = ns_sync_if_dirty(d->ns);

	if (r < 0)
		log_error_errno(r, "Failed to sync the metadata WAL");
	return -1;
}

static int gc_remove(void *ctx, const struct ns_gc_item *it)
{
	struct daemon *d = ctx;

	if (it->layout.table_id == 0)
		return 0; /* created with no targets: no chunk was ever written */
	int r = chunk_remove_file(d->cc, &it->layout, it->ino, 0);
	if (r < 0)
		log_debug("gc: removing chunks of inode %llu failed: %s",
			  (unsigned long long)it->ino, strerror(-r));
	return r;
}

static void gc_report(void *ctx, int read_error, const struct gc_stats *sweep, int wait_ms)
{
	struct daemon *d = ctx;

	if (read_error < 0)
		log_error_errno(read_error, "gc: failed to read the GC queue");
	if (sweep->done > 0)
		log_debug("gc: collected %d inodes", sweep->done);
	if (sweep->failed && !d->gc_failed_logged)
		log_warn("gc: %d inodes could not be collected yet; retrying with backoff "
			 "(next in %d ms)",
			 sweep->failed, wait_ms);
	d->gc_failed_logged = sweep->failed > 0;
}

static int lease_tick(void *ctx)
{
	struct daemon *d = ctx;
	int n = ns_lease_check(d->ns);

	if (n < 0)
		log_error_errno(n, "Failed to check node leases");
	else if (n > 0)
		log_warn("lease: %d target(s) went silent; taken out of their chains", n);
	return -1;
}

/* Operation records past their time or beyond the limit (ns_opid.c). */
#define OPID_EXPIRE_MS 1000
static int opid_tick(void *ctx)
{
	struct daemon *d = ctx;
	int n = ns_opid_expire(d->ns);
	uint64_t answered = ns_opid_answered(d->ns);

	if (n < 0)
		log_error_errno(n, "Failed to expire operation records");
	if (answered != d->opid_answered)
		log_info("%llu mutation(s) asked for again (a resend after a crash of strata-fuse, "
			 "a retry) answered from their records; %llu since start",
			 (unsigned long long)(answered - d->opid_answered),
			 (unsigned long long)answered);
	d->opid_answered = answered;
	return -1;
}

static int start_background(struct daemon *d, uint32_t lease_ms)
{
	int r;

	d->mc = meta_client_new(d->self, "strata-meta-gc", NULL);
	d->cc = d->mc ? chunk_client_new(d->mc, NULL) : NULL;
	if (!d->cc)
		return log_error_errno(-ENOMEM, "Failed to create the GC's chunk client");
	/* A removal that fails gives up after GC_RETRY_MS and stays queued:
	 * the collector retries it with backoff rather than blocking a pass. */
	chunk_client_set_retry_ms(d->cc, GC_RETRY_MS);
	struct gc_opts go = {.remove = gc_remove, .report = gc_report, .ctx = d};
	r = ticker_start(100, sync_tick, d, &d->sync_t);
	if (r == 0)
		r = gc_start(d->ns, &go, &d->gc);
	if (r == 0)
		r = ticker_start((int)STRATA_MAX(lease_ms / 6, 50u), lease_tick, d, &d->lease_t);
	if (r == 0)
		r = ticker_start(OPID_EXPIRE_MS, opid_tick, d, &d->opid_t);
	if (r < 0)
		return log_error_errno(r, "Failed to start background threads");
	return 0;
}

/* mkdir -p: --db may name a directory whose parents do not exist yet. */
static int mkdir_p(const char *path)
{
	_cleanup_free_ char *p = strdup(path);

	if (!p)
		return -ENOMEM;
	for (char *s = p + 1; *s; s++) {
		if (*s != '/')
			continue;
		*s = 0;
		if (mkdir(p, 0755) < 0 && errno != EEXIST)
			return -errno;
		*s = '/';
	}
	return mkdir(p, 0755) < 0 && errno != EEXIST ? -errno : 0;
}

static int start(struct daemon *d, const struct opts *o)
{
	char why[256] = "";
	int r = mkdir_p(o->db);

	if (r < 0)
		return log_error_errno(r, "Failed to create '%s'", o->db);
	r = ns_open(o->db, &d->ns, why, sizeof(why));

	if (r < 0)
		return log_error_errno(r, "Failed to open metadata store '%s' (%s)", o->db, why);
	r = ns_set_cluster_opts(d->ns, o->lease_ms, o->replicas, o->expect_nodes);
	if (r < 0)
		return log_error_errno(r,
				       "Bad --lease-ms (>= 200), --replicas (1..%d) or "
				       "--expect-nodes (>= 1)",
				       STRATA_MAX_REPLICAS);
	struct rpc_server_opts so = {.name = "meta",
				     .listen = o->listen,
				     .handler = meta_handle,
				     .ctx = d->ns,
				     .may = rpc_role_may};
	r = rpc_server_start(&so, &d->srv);
	if (r < 0)
		return log_error_errno(r, "Failed to listen on '%s'", o->listen);
	r = self_addr(o->listen, rpc_server_port(d->srv), d->self, sizeof(d->self));
	if (r < 0)
		return log_error_errno(r, "Bad listen address '%s'", o->listen);
	if ((r = start_background(d, o->lease_ms)) < 0)
		return r;
	if (o->addr_file && (r = write_addr_file(o->addr_file, d->self)) < 0)
		return log_error_errno(r, "Failed to write '%s'", o->addr_file);
	log_info("serving on %s, store %s", d->self, o->db);
	return 0;
}

static void stop(struct daemon *d)
{
	rpc_server_free(d->srv);
	ticker_stop(d->opid_t);
	ticker_stop(d->lease_t);
	gc_stop(d->gc);
	ticker_stop(d->sync_t);
	chunk_client_free(d->cc);
	meta_client_free(d->mc);
	ns_close(d->ns);
}

int main(int argc, char **argv)
{
	struct daemon d = {0};
	struct opts o;
	sigset_t set;
	int sig = 0, r;

	if (parse_args(argc, argv, &o) < 0)
		return 2;
	log_init("strata-meta", (enum log_level)o.log_level);
	daemon_raise_fd_limit();
	if (daemon_load_key(o.key, RPC_ROLE_META) < 0)
		return 1;
	signal(SIGPIPE, SIG_IGN);
	sigemptyset(&set);
	sigaddset(&set, SIGTERM);
	sigaddset(&set, SIGINT);
	pthread_sigmask(SIG_BLOCK, &set, NULL); /* threads inherit the mask */
	r = start(&d, &o);
	if (r == 0) {
		sigwait(&set, &sig);
		log_info("signal %d: stopping", sig);
	}
	stop(&d);
	return r < 0 ? 1 : 0;
}
