/* main.c — strata-apiserver: the cluster's sandbox API (issue 17).
 *
 *   strata-apiserver --meta HOST:PORT --listen HOST:PORT --token T
 *                    [--tenants FILE] [--key FILE] [--queue-max N]
 *                    [--queue-timeout S] [--refresh-ms MS]
 *                    [--max-connections N] [--log-level L]
 *
 * The same HTTP API as strata-sandboxd (sandbox/sandboxd/API.md), over TCP
 * with tokens, for a whole cluster: creations are placed on the nodes
 * strata-meta's table lists, and every later request goes to the node the
 * sandbox id names. Stateless: run any number; a dead one loses nothing.
 *
 * A thread per client connection: a request is either a short exchange
 * with a node or a stream the thread copies as it comes (an exec's output,
 * a file), and a blocking thread per connection keeps that plain; the
 * connections are bounded (--max-connections). */
#include <arpa/inet.h>
#include <errno.h>
#include <getopt.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include "fs/daemon.h"
#include "fs/log.h"
#include "fs/rpc_auth.h"
#include "sandbox/apiserver/apiserver.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: strata-apiserver --meta HOST:PORT --listen HOST:PORT --token T\n"
		   "                        [--tenants FILE] [--key FILE] [--queue-max N]\n"
		   "                        [--queue-timeout S] [--refresh-ms MS]\n"
		   "                        [--max-connections N] [--log-level L]\n"
		   "\n"
		   "  --meta HOST:PORT     strata-meta, whose sandbox node table places creations\n"
		   "  --listen HOST:PORT   the API (TCP; every request needs a bearer token)\n"
		   "  --token T            the operator's token (default $STRATA_SANDBOXD_TOKEN):\n"
		   "                       the nodes' --token, forwarded to them as it came\n"
		   "  --tenants FILE       the tenants file the nodes read too (default none)\n"
		   "  --key FILE           the cluster key (default $STRATA_KEY)\n"
		   "  --queue-max N        creations waiting for room at once (default 1024)\n"
		   "  --queue-timeout S    how long a creation waits for room without a\n"
		   "                       Strata-Queue-Timeout header (default 30)\n"
		   "  --refresh-ms MS      how often the node table is read (default 200)\n"
		   "  --max-connections N  client connections at once (default 1024)\n"
		   "  --addr-file F        write the address listened on (HOST:PORT) to F\n"
		   "  --log-level L        error|warn|info|debug (default info)\n");
}

static int parse_args(struct api_config *c, int argc, char **argv)
{
	static const struct option lo[] = {{"meta", 1, 0, 'm'},
					   {"listen", 1, 0, 'l'},
					   {"token", 1, 0, 't'},
					   {"tenants", 1, 0, 'T'},
					   {"key", 1, 0, 'k'},
					   {"queue-max", 1, 0, 'q'},
					   {"queue-timeout", 1, 0, 'Q'},
					   {"refresh-ms", 1, 0, 'r'},
					   {"max-connections", 1, 0, 'c'},
					   {"log-level", 1, 0, 'v'},
					   {"addr-file", 1, 0, 'a'},
					   {"help", 0, 0, 'h'},
					   {0}};
	int o;
	*c = (struct api_config){
	    .queue_max = 1024, .queue_timeout_ms = 30000, .refresh_ms = 200, .max_conns = 1024};
	while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		char *end = NULL;
		double v = optarg ? strtod(optarg, &end) : 0;
		bool num_ok = optarg && end != optarg && !*end && v >= 0;
		switch (o) {
		case 'a':
			c->addr_file = optarg;
			break;
		case 'm':
			c->meta_addr = optarg;
			break;
		case 'l':
			c->listen = optarg;
			break;
		case 't':
			c->token = optarg;
			break;
		case 'T':
			c->tenants_path = optarg;
			break;
		case 'k':
			c->key_path = optarg;
			break;
		case 'q':
			c->queue_max = (int64_t)v;
			break;
		case 'Q':
			c->queue_timeout_ms = (int64_t)(v * 1000);
			break;
		case 'r':
			c->refresh_ms = (int64_t)v;
			break;
		case 'c':
			c->max_conns = (int64_t)v;
			break;
		case 'v':
			if (log_level_parse(optarg) < 0)
				return -EINVAL;
			log_set_level(log_level_parse(optarg));
			num_ok = true;
			break;
		case 'h':
			usage(stdout);
			exit(0);
		default:
			return -EINVAL;
		}
		if (strchr("qQrc", o) && (!num_ok || (o == 'r' && v < 10) || (o == 'c' && v < 1))) {
			log_error(
			    "invalid number '%s' (--queue-max, --queue-timeout, --refresh-ms >= "
			    "10, --max-connections >= 1)",
			    optarg);
			return -EINVAL;
		}
	}
	if (!c->token && getenv("STRATA_SANDBOXD_TOKEN") && getenv("STRATA_SANDBOXD_TOKEN")[0])
		c->token = getenv("STRATA_SANDBOXD_TOKEN");
	if (optind < argc || !c->meta_addr || !c->listen || (!c->token && !c->tenants_path)) {
		log_error("--meta, --listen and --token (or --tenants) are needed");
		return -EINVAL;
	}
	return 0;
}

static int listen_on(const char *addr)
{
	char host[256];
	const char *colon = strrchr(addr, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM, .ai_flags = AI_PASSIVE}, *ai = NULL;
	if (!colon || (size_t)(colon - addr) >= sizeof(host))
		return -EINVAL;
	memcpy(host, addr, (size_t)(colon - addr));
	host[colon - addr] = 0;
	if (getaddrinfo(host[0] ? host : NULL, colon + 1, &hints, &ai) || !ai)
		return -EADDRNOTAVAIL;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), one = 1, r = 0;
	if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) < 0 ||
	    bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || listen(fd, 1024) < 0)
		r = -errno;
	freeaddrinfo(ai);
	if (r < 0 && fd >= 0)
		close(fd);
	return r < 0 ? r : fd;
}

/* HOST:PORT of lfd into path (atomically: a reader never sees half). */
static int write_addr(int lfd, const char *path)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	char host[INET6_ADDRSTRLEN], port[16], tmp[4096];
	if (getsockname(lfd, (struct sockaddr *)&ss, &sl) < 0 ||
	    getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), port, sizeof(port),
			NI_NUMERICHOST | NI_NUMERICSERV))
		return log_error_errno(-EINVAL, "Failed to read the address listened on");
	snprintf(tmp, sizeof(tmp), "%s.tmp", path);
	FILE *f = fopen(tmp, "we");
	if (!f || fprintf(f, "%s:%s\n", host, port) < 0 || fclose(f) != 0 || rename(tmp, path) < 0)
		return log_error_errno(-errno, "Failed to write %s", path);
	return 0;
}

struct conn_arg {
	struct apiserver *a;
	int fd;
	char peer[64];
};

static void *conn_main(void *arg)
{
	struct conn_arg *ca = arg;
	api_client_serve(ca->a, ca->fd, ca->peer);
	atomic_fetch_sub(&ca->a->conns, 1);
	free(ca);
	return NULL;
}

static void refuse(int fd)
{
	static const char msg[] =
	    "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nConnection: "
	    "close\r\nContent-Length: 80\r\n\r\n{\"error\": {\"code\": \"overloaded\", "
	    "\"message\": "
	    "\"too many connections\"}}      \n";
	send_all(fd, msg, sizeof(msg) - 1);
	close(fd);
}

static void accept_one(struct apiserver *a, int lfd, pthread_attr_t *attr)
{
	struct sockaddr_storage ss;
	socklen_t sl = sizeof(ss);
	int fd = accept4(lfd, (struct sockaddr *)&ss, &sl, SOCK_CLOEXEC);
	if (fd < 0) {
		if (errno == EMFILE || errno == ENFILE)
			usleep(100000);
		return;
	}
	int one = 1;
	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	if (atomic_fetch_add(&a->conns, 1) >= a->cfg.max_conns) {
		atomic_fetch_sub(&a->conns, 1);
		refuse(fd);
		return;
	}
	struct conn_arg *ca = calloc(1, sizeof(*ca));
	pthread_t t;
	if (ca) {
		ca->a = a;
		ca->fd = fd;
		char host[INET6_ADDRSTRLEN] = "?";
		getnameinfo((struct sockaddr *)&ss, sl, host, sizeof(host), NULL, 0,
			    NI_NUMERICHOST);
		snprintf(ca->peer, sizeof(ca->peer), "%s", host);
	}
	if (!ca || pthread_create(&t, attr, conn_main, ca)) {
		free(ca);
		atomic_fetch_sub(&a->conns, 1);
		close(fd);
	}
}

int main(int argc, char **argv)
{
	struct apiserver a = {0};
	log_init("strata-apiserver", LOG_LVL_INFO);
	daemon_raise_fd_limit();
	signal(SIGPIPE, SIG_IGN);
	if (parse_args(&a.cfg, argc, argv) < 0) {
		usage(stderr);
		return 2;
	}
	if (daemon_load_key(a.cfg.key_path, RPC_ROLE_SANDBOX) < 0)
		return 1;
	pthread_mutex_init(&a.tmu, NULL);
	int lfd = listen_on(a.cfg.listen);
	if (lfd < 0) {
		log_error_errno(lfd, "Failed to listen on %s", a.cfg.listen);
		return 1;
	}
	if (!(a.pool = api_pool_new()) || !(a.nodes = api_nodes_new(&a)))
		return 1;
	if (a.cfg.addr_file && write_addr(lfd, a.cfg.addr_file) < 0)
		return 1;
	pthread_attr_t attr;
	pthread_attr_init(&attr);
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&attr, 256 << 10);
	log_info("serving on %s, nodes from strata-meta at %s", a.cfg.listen, a.cfg.meta_addr);
	for (;;) /* ends with SIGTERM's default action: nothing to save */
		accept_one(&a, lfd, &attr);
}
