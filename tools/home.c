/* home.c — the home directory of a cluster on this machine: where it is, its
 * saved shape (strata.conf), its layout and the daemons it runs.
 *
 * strata.conf is "key=value" lines: nodes, targets, replicas, mount, netns
 * (1: chunkservers in their own network namespaces, 0: on loopback). It is
 * written by the first `strata up` and read by every later command, so that
 * `strata up` on an existing home brings back the same cluster.
 *
 * cluster.key is the cluster's 32-byte key (fs/rpc_auth.h), made by the
 * first `strata up` (mode 0600, never replaced) and given to every daemon
 * with --key; the CLI's own calls prove it with the role admin. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "fs/rpc_auth.h"
#include "fs/rpc_tls.h"
#include "tools/cli.h"

char *cli_path(char *buf, const struct cli_home *h, const char *fmt, ...)
{
	char rel[CLI_PATH];
	va_list ap;

	va_start(ap, fmt);
	vsnprintf(rel, sizeof(rel), fmt, ap);
	va_end(ap);
	snprintf(buf, CLI_PATH, "%s/%s", h->home, rel);
	return buf;
}

int cli_read_file(const char *path, char *buf, size_t cap)
{
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	ssize_t n;

	if (cap == 0)
		return -EINVAL;
	buf[0] = '\0';
	if (fd < 0)
		return -errno;
	n = read(fd, buf, cap - 1);
	if (n < 0)
		return -errno;
	buf[n] = '\0';
	while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r' || buf[n - 1] == ' '))
		buf[--n] = '\0';
	return (int)n;
}

void cli_last_line(const char *path, char *out, size_t cap)
{
	FILE *f = fopen(path, "re");
	char line[512];

	out[0] = '\0';
	if (!f)
		return;
	while (fgets(line, sizeof(line), f)) {
		size_t n = strlen(line);
		while (n && (line[n - 1] == '\n' || line[n - 1] == '\r'))
			line[--n] = '\0';
		if (n)
			snprintf(out, cap, "%s", line);
	}
	fclose(f);
}

int cli_write_file(const char *path, const char *text)
{
	char tmp[CLI_PATH + 16];
	size_t len = strlen(text);
	int fd;

	snprintf(tmp, sizeof(tmp), "%s.tmp%d", path, (int)getpid());
	fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (write(fd, text, len) != (ssize_t)len) {
		int r = errno ? -errno : -EIO;
		close(fd);
		unlink(tmp);
		return r;
	}
	if (close(fd) < 0 || rename(tmp, path) < 0) {
		int r = -errno;
		unlink(tmp);
		return r;
	}
	return 0;
}

int cli_mkdir_p(const char *path, mode_t mode)
{
	char buf[CLI_PATH];
	size_t len = strlen(path);

	if (len == 0 || len >= sizeof(buf))
		return -ENAMETOOLONG;
	memcpy(buf, path, len + 1);
	for (char *p = buf + 1; *p; p++) {
		if (*p != '/')
			continue;
		*p = '\0';
		if (mkdir(buf, mode) < 0 && errno != EEXIST)
			return -errno;
		*p = '/';
	}
	if (mkdir(buf, mode) < 0 && errno != EEXIST)
		return -errno;
	return 0;
}

/* Makes p absolute and drops trailing slashes (the path may not exist). */
static int absolutize(const char *p, char *out, size_t cap)
{
	char cwd[CLI_PATH];
	int n;

	if (p[0] == '/') {
		n = snprintf(out, cap, "%s", p);
	} else {
		if (!getcwd(cwd, sizeof(cwd)))
			return -errno;
		if (p[0] == '.' && p[1] == '/')
			p += 2;
		n = snprintf(out, cap, "%s/%s", cwd, p);
	}
	if (n < 0 || (size_t)n >= cap)
		return -ENAMETOOLONG;
	while (n > 1 && out[n - 1] == '/')
		out[--n] = '\0';
	return 0;
}

static void find_bindir(struct cli_home *h)
{
	char exe[CLI_PATH];
	char probe[CLI_PATH + 32];
	const char *env = getenv("STRATA_BIN");
	ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);

	h->bindir[0] = '\0';
	if (n > 0) {
		exe[n] = '\0';
		char *slash = strrchr(exe, '/');
		if (slash) {
			*slash = '\0';
			snprintf(h->bindir, sizeof(h->bindir), "%s", exe);
		}
	}
	/* Next to the strata binary first; $STRATA_BIN if the daemons are not there. */
	snprintf(probe, sizeof(probe), "%s/strata-meta", h->bindir);
	if (access(probe, X_OK) != 0 && env && *env)
		snprintf(h->bindir, sizeof(h->bindir), "%s", env);
}

int cli_home_resolve(const char *home_opt, struct cli_home *ret)
{
	const char *src = home_opt;
	char conf[CLI_PATH];
	FILE *f;
	int r;

	memset(ret, 0, sizeof(*ret));
	if (!src || !*src)
		src = getenv("STRATA_HOME");
	if (!src || !*src)
		src = "./.strata";
	r = absolutize(src, ret->home, sizeof(ret->home));
	if (r < 0)
		return r;
	if (strlen(ret->home) > CLI_PATH - 64)
		return -ENAMETOOLONG;
	find_bindir(ret);
	ret->nodes = 1;
	ret->targets = 2;
	ret->replicas = 1;
	ret->netns = -1;
	cli_path(ret->mount, ret, "mnt");

	f = fopen(cli_path(conf, ret, "strata.conf"), "re");
	if (!f)
		return 0;
	ret->have_conf = true;
	char line[CLI_PATH + 32];
	while (fgets(line, sizeof(line), f)) {
		char *eq = strchr(line, '=');
		char *nl = strchr(line, '\n');
		int v;
		if (nl)
			*nl = '\0';
		if (!eq)
			continue;
		*eq = '\0';
		const char *val = eq + 1;
		if (!strcmp(line, "nodes") && cli_parse_int(val, 1, CLI_MAX_NODES, &v) == 0)
			ret->nodes = v;
		else if (!strcmp(line, "targets") &&
			 cli_parse_int(val, 1, CLI_MAX_TARGETS, &v) == 0)
			ret->targets = v;
		else if (!strcmp(line, "replicas") && cli_parse_int(val, 1, CLI_MAX_NODES, &v) == 0)
			ret->replicas = v;
		else if (!strcmp(line, "netns") && cli_parse_int(val, 0, 1, &v) == 0)
			ret->netns = v;
		else if (!strcmp(line, "tls") && cli_parse_int(val, 0, 1, &v) == 0)
			ret->tls = v;
		else if (!strcmp(line, "mount") && val[0] == '/')
			snprintf(ret->mount, sizeof(ret->mount), "%s", val);
	}
	fclose(f);
	return 0;
}

int cli_home_save(const struct cli_home *h)
{
	char path[CLI_PATH];
	char text[CLI_PATH + 128];
	int n;

	n = snprintf(text, sizeof(text), "nodes=%d\ntargets=%d\nreplicas=%d\nmount=%s\n", h->nodes,
		     h->targets, h->replicas, h->mount);
	if (h->netns >= 0 && n > 0 && (size_t)n < sizeof(text))
		n += snprintf(text + n, sizeof(text) - (size_t)n, "netns=%d\n", h->netns);
	if (h->tls && n > 0 && (size_t)n < sizeof(text))
		snprintf(text + n, sizeof(text) - (size_t)n, "tls=1\n");
	return cli_write_file(cli_path(path, h, "strata.conf"), text);
}

int cli_home_create(const struct cli_home *h)
{
	char p[CLI_PATH];
	int r;

	if ((r = cli_mkdir_p(h->home, 0755)) < 0)
		return r;
	if ((r = cli_mkdir_p(cli_path(p, h, "meta/db"), 0755)) < 0)
		return r;
	if ((r = cli_mkdir_p(cli_path(p, h, "run"), 0755)) < 0)
		return r;
	if ((r = cli_mkdir_p(cli_path(p, h, "log"), 0755)) < 0)
		return r;
	for (int n = 1; n <= h->nodes; n++)
		for (int t = 1; t <= h->targets; t++)
			if ((r = cli_mkdir_p(cli_path(p, h, "cs%d/t%d", n, t), 0755)) < 0)
				return r;
	r = rpc_key_create(cli_path(p, h, CLI_KEY_FILE), NULL);
	if (r < 0 && r != -EEXIST)
		return r;
	return cli_mkdir_p(h->mount, 0755);
}

int cli_key_setup(const char *verb, const char *key_opt, const char *home_opt)
{
	char p[CLI_PATH];
	const char *path = key_opt;
	struct cli_home h;
	bool home = cli_home_resolve(home_opt, &h) == 0;
	if (!path && home && access(cli_path(p, &h, CLI_KEY_FILE), F_OK) == 0)
		path = p;
	if (home && h.tls)
		rpc_tls_set_default(true);
	struct strata_err e = {0};
	int r = rpc_auth_setup(path, RPC_ROLE_ADMIN, &e);
	if (r < 0)
		cli_err(verb, "%s%s", strata_err_msg(&e),
			r == -ENOKEY ? " (or run it where the home's cluster.key is)" : "");
	return r;
}

int cli_sbnode_count(const struct cli_home *h)
{
	return h->nodes > 1 ? h->nodes : 1;
}

int cli_daemon_count(const struct cli_home *h)
{
	return h->nodes + 2 + cli_sbnode_count(h) + (h->nodes > 1);
}

void cli_daemon_get(const struct cli_home *h, int i, struct cli_daemon *ret)
{
	memset(ret, 0, sizeof(*ret));
	if (i == 0) {
		ret->kind = D_META;
		ret->binary = "strata-meta";
		snprintf(ret->name, sizeof(ret->name), "meta");
	} else if (i <= h->nodes) {
		ret->kind = D_CS;
		ret->index = i;
		ret->binary = "strata-chunkserver";
		snprintf(ret->name, sizeof(ret->name), "cs%d", i);
	} else if (i == h->nodes + 1) {
		ret->kind = D_FUSE;
		ret->binary = "strata-fuse";
		snprintf(ret->name, sizeof(ret->name), "fuse");
	} else if (i <= h->nodes + 1 + cli_sbnode_count(h)) {
		ret->kind = D_SANDBOXD;
		ret->index = i - h->nodes - 1;
		ret->binary = "strata-sandboxd";
		if (ret->index == 1)
			snprintf(ret->name, sizeof(ret->name), "sandboxd");
		else
			snprintf(ret->name, sizeof(ret->name), "sandboxd%d", ret->index);
	} else {
		ret->kind = D_APISERVER;
		ret->binary = "strata-apiserver";
		snprintf(ret->name, sizeof(ret->name), "apiserver");
	}
}

pid_t cli_daemon_pid(const struct cli_home *h, const struct cli_daemon *d)
{
	char path[CLI_PATH], buf[32];
	int v;

	if (cli_read_file(cli_path(path, h, "run/%s.pid", d->name), buf, sizeof(buf)) <= 0)
		return 0;
	if (cli_parse_int(buf, 1, INT_MAX, &v) < 0)
		return 0;
	return (pid_t)v;
}

void cli_daemon_addr(const struct cli_home *h, const struct cli_daemon *d, char *buf, size_t cap)
{
	char path[CLI_PATH];

	if (d->kind == D_SANDBOXD) {
		snprintf(buf, cap, "%s", cli_sandboxd_socket_of(h, d->index, path));
		return;
	}
	if (cli_read_file(cli_path(path, h, "run/%s.addr", d->name), buf, cap) < 0)
		buf[0] = '\0';
}

char *cli_sandboxd_socket(const struct cli_home *h, char *buf)
{
	return cli_path(buf, h, "run/sandboxd.sock");
}

char *cli_sandboxd_socket_of(const struct cli_home *h, int node, char *buf)
{
	return node > 1 ? cli_path(buf, h, "run/sandboxd%d.sock", node)
			: cli_sandboxd_socket(h, buf);
}

int cli_sandboxd_ping(const char *sock)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(sock) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path, sock, strlen(sock) + 1);
	_cleanup_close_ int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	return connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 ? -errno : 0;
}
