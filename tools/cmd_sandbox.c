/* cmd_sandbox.c — `strata sandbox create | exec | ls | rm`: the sandbox
 * runtime from the command line, over strata-sandboxd's HTTP API on its unix
 * socket (sandbox/sandboxd/API.md), found at --socket PATH, else
 * $STRATA_SANDBOXD_SOCKET, else <home>/run/sandboxd.sock; or over TCP with
 * a bearer token, a node's or a cluster's strata-apiserver: --url
 * http://HOST:PORT (else $STRATA_SANDBOXD_URL) with --token T (else
 * $STRATA_SANDBOXD_TOKEN); a home of several nodes (`strata up --nodes N`)
 * is its apiserver (H/run/apiserver.addr, the token of H/api.token).
 *
 *   strata sandbox create IMAGE [--backend B] [--cpu N] [--memory MB] [--ttl S]
 *                         [--label k=v]... [--userns|--no-userns] [--json]
 *                                                      prints the id
 *   strata sandbox exec ID [--timeout S] -- CMD...      streams the output;
 *                         exits with the command's status (128+N for signal N)
 *   strata sandbox ls [--json]
 *   strata sandbox rm ID...
 *
 * Requests and replies are JSON, through the codec sandboxd uses (fs/json.h). */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netdb.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "tools/cli.h"
#include "fs/json.h"

#define VERB "sandbox"

static void usage(FILE *f)
{
	fprintf(f,
		"Usage: strata sandbox create IMAGE [--backend fncall|container|firecracker|qemu]\n"
		"                             [--cpu N] [--memory MB] [--ttl S] [--label k=v]... "
		"[--json]\n"
		"                             [--userns|--no-userns] (a user namespace: the "
		"node's default)\n"
		"       strata sandbox exec ID [--timeout S] -- CMD...\n"
		"       strata sandbox ls [--json]\n"
		"       strata sandbox rm ID...\n"
		"\n"
		"Common options: --home DIR (default $STRATA_HOME, else ./.strata),\n"
		"                --socket PATH (default $STRATA_SANDBOXD_SOCKET, else "
		"HOME/run/sandboxd.sock)\n"
		"                --url http://HOST:PORT --token T (a node's TCP API or a "
		"cluster's\n"
		"                strata-apiserver; default $STRATA_SANDBOXD_URL, "
		"$STRATA_SANDBOXD_TOKEN;\n"
		"                a home of several nodes: its apiserver)\n");
}

struct http_resp {
	int status;
	bool chunked;
	char *body; /* unchunked responses */
	size_t len;
};

/* The bearer token of TCP requests (parsed configuration, set once). */
static const char *api_token;

/* "http://HOST:PORT": a TCP connection. */
static int connect_tcp(const char *url)
{
	char host[256];
	const char *hp = url + 7, *colon = strrchr(hp, ':');
	struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *ai = NULL;
	size_t hl = colon ? (size_t)(colon - hp) : 0;
	if (!colon || hl >= sizeof(host))
		return -EINVAL;
	memcpy(host, hp, hl);
	host[hl] = 0;
	if (getaddrinfo(host, colon + 1, &hints, &ai) || !ai)
		return -EHOSTUNREACH;
	int fd = socket(ai->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0), r = fd < 0 ? -errno : 0;
	if (fd >= 0 && connect(fd, ai->ai_addr, ai->ai_addrlen) < 0) {
		r = -errno;
		close(fd);
	}
	freeaddrinfo(ai);
	return r < 0 ? r : fd;
}

static int connect_sock(const char *path)
{
	if (!strncmp(path, "http://", 7))
		return connect_tcp(path);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	if (strlen(path) >= sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	strcpy(sa.sun_path, path);
	int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
	if (fd < 0)
		return -errno;
	if (connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0) {
		int r = -errno;
		close(fd);
		return r;
	}
	return fd;
}

static int send_all(int fd, const char *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -errno;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

/* Sends one request; returns the connected fd with the response head read
 * into *resp (status, chunked) and what followed it in *rest. */
static int request(const char *sock, const char *method, const char *path, const char *body,
		   struct http_resp *resp, char **rest, size_t *rest_len)
{
	int fd = connect_sock(sock);
	if (fd < 0)
		return fd;
	char head[1024];
	size_t bl = body ? strlen(body) : 0;
	int n = snprintf(head, sizeof(head),
			 "%s %s HTTP/1.1\r\nHost: sandboxd\r\nConnection: close\r\n%s%s%s"
			 "Content-Type: application/json\r\nContent-Length: %zu\r\n\r\n",
			 method, path, api_token ? "Authorization: Bearer " : "",
			 api_token ? api_token : "", api_token ? "\r\n" : "", bl);
	int r = n > 0 && (size_t)n < sizeof(head) ? send_all(fd, head, (size_t)n) : -ENAMETOOLONG;
	if (r == 0 && bl)
		r = send_all(fd, body, bl);
	size_t len = 0, cap = 8192;
	char *buf = malloc(cap);
	char *end = NULL;
	while (r == 0 && buf && !end) {
		if (len + 1 >= cap && !(buf = realloc(buf, cap *= 2)))
			break;
		ssize_t k = recv(fd, buf + len, cap - len - 1, 0);
		if (k <= 0) {
			r = k < 0 ? -errno : -EPROTO;
			break;
		}
		len += (size_t)k;
		buf[len] = 0;
		end = strstr(buf, "\r\n\r\n");
	}
	if (r == 0 && (!buf || !end || sscanf(buf, "HTTP/1.1 %d", &resp->status) != 1))
		r = -EPROTO;
	if (r < 0) {
		free(buf);
		close(fd);
		return r;
	}
	*end = 0;
	resp->chunked = strcasestr(buf, "Transfer-Encoding: chunked") != NULL;
	*rest_len = len - (size_t)(end + 4 - buf);
	*rest = malloc(*rest_len + 1);
	memcpy(*rest, end + 4, *rest_len);
	free(buf);
	return fd;
}

/* A whole (unchunked) response: the body as a parsed JSON object. */
static int call(const char *sock, const char *method, const char *path, const char *body,
		int *ret_status, struct json **ret)
{
	struct http_resp resp = {0};
	char *rest = NULL;
	size_t len = 0;
	int fd = request(sock, method, path, body, &resp, &rest, &len);
	if (fd < 0)
		return fd;
	for (;;) {
		char tmp[8192];
		ssize_t k = recv(fd, tmp, sizeof(tmp), 0);
		if (k <= 0)
			break;
		rest = realloc(rest, len + (size_t)k + 1);
		memcpy(rest + len, tmp, (size_t)k);
		len += (size_t)k;
	}
	close(fd);
	*ret_status = resp.status;
	*ret = json_parse(rest, len, NULL, 0);
	free(rest);
	return *ret ? 0 : -EPROTO;
}

static int api_error(int status, struct json *j)
{
	struct json *e = json_get(j, "error");
	cli_err(VERB, "%s (HTTP %d)", json_cstr(json_get(e, "message")) ?: "error", status);
	json_free(j);
	return 1;
}

/* call() for a sub-command: 0 with *ret the reply, 1 after the API's error
 * line (the reply freed), -errno after "cannot reach". */
static int api_call(const char *sock, const char *method, const char *path, const char *body,
		    struct json **ret)
{
	int status;
	int r = call(sock, method, path, body, &status, ret);
	if (r < 0) {
		cli_err(VERB, "cannot reach sandboxd at %s: %s", sock, strerror(-r));
		return r;
	}
	return status >= 300 ? api_error(status, *ret) : 0;
}

static int cmd_create(const char *sock, int argc, char **argv)
{
	static const struct option o[] = {
	    {"backend", 1, 0, 'b'}, {"cpu", 1, 0, 'c'},	      {"memory", 1, 0, 'm'},
	    {"ttl", 1, 0, 't'},	    {"label", 1, 0, 'l'},     {"json", 0, 0, 'j'},
	    {"userns", 0, 0, 'u'},  {"no-userns", 0, 0, 'U'}, {0}};
	struct jw w, labels;
	jw_init(&w);
	jw_init(&labels);
	jw_obj(&w);
	jw_obj(&labels);
	bool json = false;
	int c, v;
	while ((c = getopt_long(argc, argv, "", o, NULL)) != -1) {
		char *eq;
		switch (c) {
		case 'b':
			jw_kstr(&w, "backend", optarg);
			break;
		case 'c':
			jw_key(&w, "cpu");
			jw_num(&w, atof(optarg));
			break;
		case 'm':
		case 't':
			if (cli_parse_int(optarg, 0, 1 << 30, &v) < 0) {
				cli_err(VERB, "--%s wants a number", c == 'm' ? "memory" : "ttl");
				goto usage_error;
			}
			jw_kint(&w, c == 'm' ? "memory_mb" : "ttl", v);
			break;
		case 'l':
			if (!(eq = strchr(optarg, '='))) {
				cli_err(VERB, "--label wants k=v");
				goto usage_error;
			}
			*eq = 0;
			jw_kstr(&labels, optarg, eq + 1);
			break;
		case 'j':
			json = true;
			break;
		case 'u':
		case 'U':
			jw_kbool(&w, "userns", c == 'u');
			break;
		default:
			usage(stderr);
			goto usage_error;
		}
	}
	if (optind + 1 != argc) {
		usage(stderr);
		goto usage_error;
	}
	jw_kstr(&w, "image", argv[optind]);
	jw_obj_end(&labels);
	jw_key(&w, "labels");
	jw_raw(&w, labels.buf, labels.len);
	jw_obj_end(&w);
	struct json *j = NULL;
	int r = api_call(sock, "POST", "/v1/sandboxes", w.buf, &j);
	jw_done(&w);
	jw_done(&labels);
	if (r != 0)
		return 1;
	if (json) {
		cli_json_print(j);
	} else {
		printf("%s\n", json_cstr(json_get(j, "id")));
	}
	json_free(j);
	return 0;
usage_error:
	jw_done(&w);
	jw_done(&labels);
	return 2;
}

/* Handles one line of the exec stream; sets *code on the exit event. */
static void exec_event(const char *line, size_t n, int *code)
{
	struct json *j = json_parse(line, n, NULL, 0);
	const char *type = json_cstr(json_get(j, "type"));
	struct json *data = json_get(j, "data");
	if (type && data && data->type == JSON_STR) {
		uint8_t *out;
		size_t len;
		if (b64_decode(data->str, data->len, &out, &len) == 0) {
			fwrite(out, 1, len, !strcmp(type, "stderr") ? stderr : stdout);
			fflush(!strcmp(type, "stderr") ? stderr : stdout);
			free(out);
		}
	} else if (type && !strcmp(type, "exit")) {
		int64_t v;
		const char *err = json_cstr(json_get(j, "error"));
		if (err)
			cli_err(VERB, "%s", err);
		if (json_int(json_get(j, "signal"), 1, 128, &v))
			*code = 128 + (int)v;
		else if (json_int(json_get(j, "exit_code"), -1, 255, &v))
			*code = v < 0 ? 1 : (int)v;
		if (json_get(j, "truncated") && json_get(j, "truncated")->b)
			cli_err(VERB, "output was truncated at the output cap");
		if (json_get(j, "timed_out") && json_get(j, "timed_out")->b)
			cli_err(VERB, "the command ran past its timeout and was killed");
	}
	json_free(j);
}

/* De-chunks the stream in buf, handling each complete line. Returns bytes
 * consumed. */
static size_t exec_consume(char *buf, size_t len, struct jw *lines, int *code)
{
	size_t off = 0;
	for (;;) {
		char *crlf = memmem(buf + off, len - off, "\r\n", 2);
		if (!crlf)
			break;
		size_t n = strtoul(buf + off, NULL, 16);
		size_t start = (size_t)(crlf + 2 - buf);
		if (len < start + n + 2)
			break;
		jw_append(lines, buf + start, n);
		off = start + n + 2;
		if (n == 0)
			break;
	}
	char *nl;
	while (lines->len && (nl = memchr(lines->buf, '\n', lines->len))) {
		size_t k = (size_t)(nl - lines->buf);
		exec_event(lines->buf, k, code);
		memmove(lines->buf, nl + 1, lines->len - k - 1);
		lines->len -= k + 1;
	}
	return off;
}

static int cmd_exec(const char *sock, int argc, char **argv)
{
	static const struct option o[] = {{"timeout", 1, 0, 't'}, {0}};
	int c, timeout = 0;
	if (argc < 3) {
		usage(stderr);
		return 2;
	}
	const char *id = argv[1];
	argc--; /* options follow the id: parse argv[1..] as if it were argv[0..] */
	argv++;
	while ((c = getopt_long(argc, argv, "+", o, NULL)) != -1) {
		if (c != 't' || cli_parse_int(optarg, 1, 86400, &timeout) < 0) {
			usage(stderr);
			return 2;
		}
	}
	if (optind >= argc) {
		usage(stderr);
		return 2;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "cmd");
	jw_arr(&w);
	for (int i = optind; i < argc; i++)
		jw_str(&w, argv[i]);
	jw_arr_end(&w);
	if (timeout)
		jw_kint(&w, "timeout", timeout);
	jw_obj_end(&w);
	char path[128];
	snprintf(path, sizeof(path), "/v1/sandboxes/%.40s/exec", id);
	struct http_resp resp = {0};
	char *rest = NULL;
	size_t len = 0;
	int fd = request(sock, "POST", path, w.buf, &resp, &rest, &len);
	jw_done(&w);
	if (fd < 0) {
		cli_err(VERB, "cannot reach sandboxd at %s: %s", sock, strerror(-fd));
		return 1;
	}
	if (!resp.chunked) { /* an error answer */
		char tmp[4096];
		ssize_t k;
		while ((k = recv(fd, tmp, sizeof(tmp), 0)) > 0) {
			rest = realloc(rest, len + (size_t)k);
			memcpy(rest + len, tmp, (size_t)k);
			len += (size_t)k;
		}
		close(fd);
		struct json *j = json_parse(rest, len, NULL, 0);
		free(rest);
		return api_error(resp.status, j);
	}
	int code = 1;
	struct jw lines;
	jw_init(&lines);
	for (;;) {
		size_t used = exec_consume(rest, len, &lines, &code);
		memmove(rest, rest + used, len - used);
		len -= used;
		rest = realloc(rest, len + 65536);
		ssize_t k = recv(fd, rest + len, 65536, 0);
		if (k <= 0)
			break;
		len += (size_t)k;
	}
	close(fd);
	free(rest);
	jw_done(&lines);
	return code;
}

static int cmd_ls(const char *sock, int argc, char **argv)
{
	bool json = argc > 1 && !strcmp(argv[1], "--json");
	struct json *j = NULL;
	if (api_call(sock, "GET", "/v1/sandboxes", NULL, &j) != 0)
		return 1;
	struct json *list = json_get(j, "sandboxes");
	if (json) {
		cli_json_print(list);
	} else {
		printf("%-20s %-24s %-10s %-8s %s\n", "ID", "IMAGE", "BACKEND", "STATE", "LABELS");
		for (struct json *s = list ? list->child : NULL; s; s = s->next) {
			printf("%-20s %-24s %-10s %-8s", json_cstr(json_get(s, "id")),
			       json_cstr(json_get(s, "image")), json_cstr(json_get(s, "backend")),
			       json_cstr(json_get(s, "state")));
			struct json *l = json_get(s, "labels");
			for (struct json *k = l ? l->child : NULL; k; k = k->next)
				printf(" %s=%s", k->key, json_cstr(k) ?: "");
			printf("\n");
		}
	}
	json_free(j);
	return 0;
}

static int cmd_rm(const char *sock, int argc, char **argv)
{
	int rc = 0;
	if (argc < 2) {
		usage(stderr);
		return 2;
	}
	for (int i = 1; i < argc; i++) {
		char path[128];
		snprintf(path, sizeof(path), "/v1/sandboxes/%.40s", argv[i]);
		struct json *j = NULL;
		int r = api_call(sock, "DELETE", path, NULL, &j);
		if (r < 0)
			return 1;
		if (r > 0)
			rc = 1;
		else
			json_free(j);
	}
	return rc;
}

/* True if a sub-command's options (before a "--", after which a command's
 * own arguments follow) ask for help: every sub-command answers --help and
 * -h with the usage, on stdout, exit 0, like every other verb. */
static bool sub_wants_help(int argc, char **argv)
{
	for (int i = 1; i < argc && strcmp(argv[i], "--"); i++)
		if (!strcmp(argv[i], "--help") || !strcmp(argv[i], "-h"))
			return true;
	return false;
}

int cli_sandboxd_delete_all(const char *sock)
{
	int status, n = 0, first = 0;
	struct json *j = NULL;
	int r = call(sock, "GET", "/v1/sandboxes", NULL, &status, &j);
	if (r < 0 || status >= 300) {
		json_free(j);
		return r < 0 ? r : -EIO;
	}
	struct json *list = json_get(j, "sandboxes");
	for (struct json *s = list ? list->child : NULL; s; s = s->next) {
		char path[128];
		struct json *k = NULL;
		snprintf(path, sizeof(path), "/v1/sandboxes/%.40s",
			 json_cstr(json_get(s, "id")) ?: "");
		r = call(sock, "DELETE", path, NULL, &status, &k);
		json_free(k);
		if (r == 0 && status < 300)
			n++;
		else if (!first)
			first = r < 0 ? r : -EIO;
	}
	json_free(j);
	return first < 0 ? first : n;
}

/* --socket PATH, --url URL, --token T. */
static int sandbox_option(void *arg, int val, const char *value)
{
	const char **where = arg;
	if (val == 'u' && strncmp(value, "http://", 7)) {
		cli_err(VERB, "--url wants http://HOST:PORT, not '%s'", value);
		return 2;
	}
	if (val == 't')
		api_token = value;
	else
		*where = value;
	return 0;
}

/* The home's endpoint: its apiserver when it has several nodes, else node
 * 1's socket (into path[CLI_PATH]). */
static const char *home_endpoint(const struct cli_home *h, char *path, char *token, size_t cap)
{
	char addr[128], f[CLI_PATH];
	if (h->nodes > 1 &&
	    cli_read_file(cli_path(f, h, "run/apiserver.addr"), addr, sizeof(addr)) > 0) {
		snprintf(path, CLI_PATH, "http://%s", addr);
		if (!api_token && cli_read_file(cli_path(f, h, "api.token"), token, cap) > 0)
			api_token = token;
		return path;
	}
	return cli_sandboxd_socket(h, path);
}

int cmd_sandbox(int argc, char **argv)
{
	static const struct option own[] = {
	    {"socket", required_argument, NULL, 's'},
	    {"url", required_argument, NULL, 'u'},
	    {"token", required_argument, NULL, 't'},
	    {},
	};
	const char *sock = getenv("STRATA_SANDBOXD_SOCKET");
	char token[128];
	if ((!sock || !sock[0]) && getenv("STRATA_SANDBOXD_URL"))
		sock = getenv("STRATA_SANDBOXD_URL");
	if (getenv("STRATA_SANDBOXD_TOKEN") && getenv("STRATA_SANDBOXD_TOKEN")[0])
		api_token = getenv("STRATA_SANDBOXD_TOKEN");
	struct cli_opts o;
	/* the common options come before the sub-command, which has its own */
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME,
	    .own = own,
	    .on_opt = sandbox_option,
	    .arg = &sock,
	    .usage = usage,
	    .stop_at_operand = true,
	};
	int r = cli_parse_opts(&v, argc, argv, &o);

	if (r != CLI_GO)
		return r;
	if (o.nargs == 0) {
		usage(stderr);
		return 2;
	}
	char path[CLI_PATH];
	if (!sock || !sock[0]) {
		struct cli_home h;
		if (cli_home_open(VERB, o.home, &h) < 0)
			return 1;
		sock = home_endpoint(&h, path, token, sizeof(token));
	}
	const char *sub = o.args[0];
	int sargc = o.nargs;
	char **sargv = o.args;
	if (sub_wants_help(sargc, sargv)) {
		usage(stdout);
		return 0;
	}
	/* 0, not 1: glibc then reads the ordering of the sub-command's optstring
	 * afresh instead of keeping the '+' of the parse above */
	optind = 0;
	if (!strcmp(sub, "create"))
		return cmd_create(sock, sargc, sargv);
	if (!strcmp(sub, "exec"))
		return cmd_exec(sock, sargc, sargv);
	if (!strcmp(sub, "ls"))
		return cmd_ls(sock, sargc, sargv);
	if (!strcmp(sub, "rm"))
		return cmd_rm(sock, sargc, sargv);
	cli_err(VERB, "unknown sub-command '%s' (create, exec, ls, rm)", sub);
	return 2;
}
