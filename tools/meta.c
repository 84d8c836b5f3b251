/* meta.c — the CLI's few questions to strata-meta: does it answer, and how many
 * targets has it registered.
 *
 * Built against fs/meta_client.h when libstrata_fs provides it
 * (STRATA_HAVE_META_CLIENT, set by tools/CMakeLists.txt); otherwise "answers"
 * degrades to "accepts a TCP connection". */
#include <errno.h>
#include <netdb.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <fcntl.h>
#include "fs/cleanup.h"
#include "tools/cli.h"
#ifdef STRATA_HAVE_META_CLIENT
#include "fs/meta_client.h"
#include "fs/rpc_auth.h"
#include "fs/sbnode_proto.h"
#endif

/* Splits "host:port" or "[v6]:port". */
static int split_addr(const char *addr, char *host, size_t hcap, char *port, size_t pcap)
{
	const char *colon = strrchr(addr, ':');
	size_t hl;

	if (!colon || !colon[1])
		return -EINVAL;
	hl = (size_t)(colon - addr);
	if (hl >= 2 && addr[0] == '[' && addr[hl - 1] == ']') {
		addr++;
		hl -= 2;
	}
	if (hl >= hcap || strlen(colon + 1) >= pcap)
		return -EINVAL;
	memcpy(host, addr, hl);
	host[hl] = '\0';
	snprintf(port, pcap, "%s", colon + 1);
	return 0;
}

int cli_tcp_probe(const char *addr, int timeout_ms)
{
	char host[256], port[16];
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	int r;

	if (split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0)
		return -EINVAL;
	if (getaddrinfo(host[0] ? host : "127.0.0.1", port, &hints, &ai) != 0 || !ai)
		return -EHOSTUNREACH;
	_cleanup_close_ int fd =
	    socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
	if (fd < 0) {
		r = -errno;
		freeaddrinfo(ai);
		return r;
	}
	r = connect(fd, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	if (r == 0)
		return 0;
	if (errno != EINPROGRESS)
		return -errno;
	struct pollfd p = {.fd = fd, .events = POLLOUT};
	if (poll(&p, 1, timeout_ms) <= 0)
		return -ETIMEDOUT;
	int err = 0;
	socklen_t len = sizeof(err);
	if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0)
		return -errno;
	return err ? -err : 0;
}

#ifdef STRATA_HAVE_META_CLIENT
static struct meta_client *client(const char *addr)
{
	struct rpc_client_opts o = {.timeout_ms = 2000, .connect_timeout_ms = 1000, .max_conns = 1};
	return meta_client_new(addr, "strata-cli", &o);
}

int cli_meta_ping(const char *addr)
{
	struct meta_client *mc = client(addr);
	int r;

	if (!mc)
		return -ENOMEM;
	r = meta_ping(mc);
	meta_client_free(mc);
	return r;
}

int cli_meta_targets(const char *addr)
{
	struct meta_client *mc = client(addr);
	struct strata_routing rt;
	int r;

	if (!mc)
		return -ENOMEM;
	memset(&rt, 0, sizeof(rt));
	r = mgmt_routing(mc, &rt);
	if (r >= 0) {
		r = (int)rt.ntargets;
		strata_routing_done(&rt);
	}
	meta_client_free(mc);
	return r;
}
int cli_meta_sbnodes(const struct cli_home *h, const char *addr, struct sbnode_table *ret)
{
	char key[CLI_PATH];
	struct strata_err e = {0};
	if (!rpc_auth_default() &&
	    rpc_auth_setup(cli_path(key, h, CLI_KEY_FILE), RPC_ROLE_ADMIN, &e) < 0)
		return e.code ? e.code : -ENOKEY;
	struct meta_client *mc = client(addr);
	if (!mc)
		return -ENOMEM;
	int r = mgmt_sbnodes(mc, ret);
	meta_client_free(mc);
	return r;
}
#else
int cli_meta_sbnodes(const struct cli_home *h, const char *addr, struct sbnode_table *ret)
{
	return -ENOSYS;
}

int cli_meta_ping(const char *addr)
{
	return cli_tcp_probe(addr, 1000);
}

int cli_meta_targets(const char *addr)
{
	return -ENOSYS;
}
#endif
