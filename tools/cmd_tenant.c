/* cmd_tenant.c — `strata tenant add|list|rm|token|set`: the tenants of the
 * home's strata-sandboxd (HOME/tenants.json, sandbox/sandboxd/tenants.h;
 * docs/tenants.md), over the strata_tenants library.
 *
 * Every change is a read-modify-write of the file under an exclusive flock
 * of HOME/tenants.json.lock (two `strata tenant` at once cannot lose one
 * another's change), written atomically; sandboxd reads it again within a
 * second. A token is printed once, by add and token, on stdout alone (the
 * note around it goes to stderr), so that `TOKEN=$(strata tenant add x)`
 * works; it cannot be shown again, only replaced. */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <time.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/json.h"
#include "sandbox/sandboxd/tenants.h"
#include "tools/cli.h"

#define VERB "tenant"

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata tenant [--home DIR] [--json] add NAME [--admin] [QUOTAS]\n"
		   "       strata tenant [--home DIR] [--json] list\n"
		   "       strata tenant [--home DIR] rm NAME\n"
		   "       strata tenant [--home DIR] [--json] token NAME\n"
		   "       strata tenant [--home DIR] [--json] set NAME [--admin|--no-admin] "
		   "[QUOTAS]\n"
		   "\n"
		   "The tenants of this home's strata-sandboxd (HOME/tenants.json, mode 0600:\n"
		   "only a salted SHA-256 of each token is kept). sandboxd reads the file again\n"
		   "within a second of a change. A tenant sees and acts on its own sandboxes\n"
		   "only, within its quotas; an admin sees all and may use network \"host\".\n"
		   "\n"
		   "  add NAME     a new tenant (NAME: 1-63 of a-z 0-9 - _); prints its token\n"
		   "               once, on stdout\n"
		   "  list         the tenants, their quotas and whether they are admins\n"
		   "  rm NAME      removes the tenant: its token is refused from then on (its\n"
		   "               sandboxes are left, for an admin to see and delete)\n"
		   "  token NAME   a new token for the tenant (printed once); the old one is\n"
		   "               refused from then on\n"
		   "  set NAME     changes the admin flag or quotas given\n"
		   "\n"
		   "QUOTAS (all its sandboxes together; \"none\", the default, is no limit):\n"
		   "  --max-sandboxes N   sandboxes at once\n"
		   "  --cpu C             cores (a number, e.g. 2.5)\n"
		   "  --memory-mb M       memory_mb\n"
		   "\n"
		   "  --home DIR   cluster home (default $STRATA_HOME, else ./.strata)\n"
		   "  --json       machine-readable output\n");
}

/* What the options ask to change (set) or to give (add). */
struct tenant_args {
	int admin; /* -1 unchanged, 0 no, 1 yes */
	bool set_max, set_cpu, set_mem;
	int64_t max_sandboxes, memory_mb;
	double cpu;
};

/* "none" (-1) or an integer in [0, 2^40]. */
static int parse_quota(const char *s, int64_t *ret)
{
	if (!strcmp(s, "none")) {
		*ret = -1;
		return 0;
	}
	char *end;
	errno = 0;
	long long v = strtoll(s, &end, 10);
	if (errno || end == s || *end || v < 0 || v > (1LL << 40))
		return -EINVAL;
	*ret = v;
	return 0;
}

static int tenant_option(void *arg, int val, const char *value)
{
	struct tenant_args *a = arg;
	char *end;
	switch (val) {
	case 'a':
	case 'A':
		a->admin = val == 'a';
		return 0;
	case 'n':
		a->set_max = true;
		if (parse_quota(value, &a->max_sandboxes) == 0)
			return 0;
		cli_err(VERB, "--max-sandboxes: a count or none, not '%s'", value);
		return 2;
	case 'm':
		a->set_mem = true;
		if (parse_quota(value, &a->memory_mb) == 0)
			return 0;
		cli_err(VERB, "--memory-mb: a number of MB or none, not '%s'", value);
		return 2;
	default:
		a->set_cpu = true;
		a->cpu = !strcmp(value, "none") ? -1 : strtod(value, &end);
		if (!strcmp(value, "none") ||
		    (end != value && !*end && isfinite(a->cpu) && a->cpu >= 0 && a->cpu <= 1e6))
			return 0;
		cli_err(VERB, "--cpu: a number of cores or none, not '%s'", value);
		return 2;
	}
}

static void apply(const struct tenant_args *a, struct sbd_tenant *tn)
{
	if (a->admin >= 0)
		tn->admin = a->admin;
	if (a->set_max)
		tn->max_sandboxes = a->max_sandboxes;
	if (a->set_cpu)
		tn->cpu = a->cpu;
	if (a->set_mem)
		tn->memory_mb = a->memory_mb;
}

/* The home's tenants file, locked: its path, the lock's fd, the table. */
struct tenants_file {
	char path[CLI_PATH];
	int lock_fd;
	struct sbd_tenants t;
};

/* Locks and reads the home's file (none yet: an empty table). Returns 0,
 * or 1 after the error line. */
static int file_open(const struct cli_home *h, struct tenants_file *f)
{
	char lock[CLI_PATH];
	struct strata_err e = {0};
	f->lock_fd = -1;
	int r = cli_mkdir_p(h->home, 0755);
	cli_path(f->path, h, "tenants.json");
	cli_path(lock, h, "tenants.json.lock");
	if (r == 0 && (f->lock_fd = open(lock, O_RDWR | O_CREAT | O_CLOEXEC, 0600)) < 0)
		r = -errno;
	if (r == 0 && flock(f->lock_fd, LOCK_EX) < 0)
		r = -errno;
	if (r < 0) {
		cli_err(VERB, "%s: %s", lock, strerror(-r));
		return 1;
	}
	r = sbd_tenants_load(f->path, &f->t, NULL, &e);
	if (r == -ENOENT)
		return 0;
	if (r < 0) {
		cli_err(VERB, "%s", e.msg[0] ? e.msg : strerror(-r));
		return 1;
	}
	return 0;
}

static void file_close(struct tenants_file *f)
{
	sbd_tenants_done(&f->t);
	if (f->lock_fd >= 0)
		close(f->lock_fd); /* the lock goes with it */
}

static int file_save(struct tenants_file *f)
{
	int r = sbd_tenants_save(f->path, &f->t);
	if (r < 0)
		cli_err(VERB, "cannot write %s: %s", f->path, strerror(-r));
	return r < 0 ? 1 : 0;
}

static void tenant_json(struct jw *w, const struct sbd_tenant *tn)
{
	jw_obj(w);
	jw_kstr(w, "name", tn->name);
	jw_kbool(w, "admin", tn->admin);
	sbd_tenant_quotas_json(w, tn);
	jw_kint(w, "created_at", tn->created_at);
	jw_obj_end(w);
}

static void quota_text(char *buf, size_t cap, int64_t v)
{
	if (v < 0)
		snprintf(buf, cap, "-");
	else
		snprintf(buf, cap, "%lld", (long long)v);
}

static int do_list(const struct sbd_tenants *t, bool json)
{
	if (json) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_key(&w, "tenants");
		jw_arr(&w);
		for (size_t i = 0; i < t->n; i++)
			tenant_json(&w, &t->v[i]);
		jw_arr_end(&w);
		jw_obj_end(&w);
		return cli_jw_print(&w) < 0 ? 1 : 0;
	}
	printf("%-24s %-5s %13s %8s %10s  %s\n", "NAME", "ADMIN", "MAX_SANDBOXES", "CPU",
	       "MEMORY_MB", "CREATED");
	for (size_t i = 0; i < t->n; i++) {
		const struct sbd_tenant *tn = &t->v[i];
		char max[24], mem[24], cpu[24], when[32] = "-";
		time_t at = (time_t)tn->created_at;
		struct tm tm;
		quota_text(max, sizeof(max), tn->max_sandboxes);
		quota_text(mem, sizeof(mem), tn->memory_mb);
		if (tn->cpu < 0)
			snprintf(cpu, sizeof(cpu), "-");
		else
			snprintf(cpu, sizeof(cpu), "%g", tn->cpu);
		if (at && gmtime_r(&at, &tm))
			strftime(when, sizeof(when), "%Y-%m-%dT%H:%M:%SZ", &tm);
		printf("%-24s %-5s %13s %8s %10s  %s\n", tn->name, tn->admin ? "yes" : "no", max,
		       cpu, mem, when);
	}
	return 0;
}

/* Prints a token made for tn: alone on stdout (or in the JSON), the note on
 * stderr. */
static int print_token(const struct sbd_tenant *tn, const char *token, bool json, const char *what)
{
	if (json) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_key(&w, "tenant");
		tenant_json(&w, tn);
		jw_kstr(&w, "token", token);
		jw_obj_end(&w);
		return cli_jw_print(&w) < 0 ? 1 : 0;
	}
	fprintf(stderr,
		"strata tenant: %s '%s'; its token (shown only now: keep it, send it as\n"
		"\"Authorization: Bearer TOKEN\" or the SDK's token=):\n",
		what, tn->name);
	printf("%s\n", token);
	return 0;
}

/* add, token, rm, set on the locked file f; name is the operand. */
static int do_change(struct tenants_file *f, const char *op, const char *name,
		     const struct tenant_args *a, bool json)
{
	char token[SBD_TENANT_TOKEN_MAX];
	struct sbd_tenant *tn = sbd_tenants_find(&f->t, name);
	bool add = !strcmp(op, "add");
	if (!sbd_tenant_name_valid(name)) {
		cli_err(VERB,
			"'%s' is not a tenant name (1-63 of a-z 0-9 - _, not starting with "
			"- or _)",
			name);
		return 2;
	}
	if (add && tn) {
		cli_err(VERB, "tenant '%s' exists (a new token: strata tenant token %s)", name,
			name);
		return 1;
	}
	if (!add && !tn) {
		cli_err(VERB, "no tenant '%s' (strata tenant list)", name);
		return 1;
	}
	if (!strcmp(op, "rm")) {
		sbd_tenants_remove(&f->t, name);
		return file_save(f);
	}
	struct sbd_tenant fresh = {
	    .max_sandboxes = -1, .cpu = -1, .memory_mb = -1, .created_at = (int64_t)time(NULL)};
	if (add) {
		snprintf(fresh.name, sizeof(fresh.name), "%s", name);
		tn = &fresh;
	}
	apply(a, tn);
	int r = 0;
	if ((add || !strcmp(op, "token")) && (r = sbd_tenant_new_token(tn, token)) < 0) {
		cli_err(VERB, "cannot make a token: %s", strerror(-r));
		return 1;
	}
	if (add && (r = sbd_tenants_add(&f->t, tn)) < 0) {
		cli_err(VERB, "cannot add '%s': %s", name, strerror(-r));
		return 1;
	}
	if (file_save(f))
		return 1;
	if (!strcmp(op, "set"))
		return json ? do_list(&(struct sbd_tenants){.v = tn, .n = 1}, true) : 0;
	r = print_token(tn, token, json, add ? "added" : "new token for");
	explicit_bzero(token, sizeof(token));
	return r;
}

int cmd_tenant(int argc, char **argv)
{
	static const struct option own[] = {
	    {"admin", no_argument, NULL, 'a'},
	    {"no-admin", no_argument, NULL, 'A'},
	    {"max-sandboxes", required_argument, NULL, 'n'},
	    {"cpu", required_argument, NULL, 'c'},
	    {"memory-mb", required_argument, NULL, 'm'},
	    {},
	};
	struct tenant_args a = {.admin = -1};
	struct cli_opts o;
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME | CLI_OPT_JSON,
	    .own = own,
	    .on_opt = tenant_option,
	    .arg = &a,
	    .usage = usage,
	};
	int r = cli_parse_opts(&v, argc, argv, &o);
	if (r != CLI_GO)
		return r;
	const char *op = o.nargs > 0 ? o.args[0] : "";
	bool changes = a.admin >= 0 || a.set_max || a.set_cpu || a.set_mem;
	bool list = !strcmp(op, "list");
	bool takes_changes = !strcmp(op, "add") || !strcmp(op, "set");
	if ((!list && !takes_changes && strcmp(op, "rm") && strcmp(op, "token")) ||
	    o.nargs != (list ? 1 : 2)) {
		usage(stderr);
		return 2;
	}
	if (changes != takes_changes && (changes || !strcmp(op, "set"))) {
		cli_err(VERB,
			changes ? "%s takes no --admin, --no-admin or quota (see --help)"
				: "%s needs --admin, --no-admin or a quota (see --help)",
			op);
		return 2;
	}
	struct cli_home h;
	if (cli_home_open(VERB, o.home, &h) < 0)
		return 1;
	struct tenants_file f = {0};
	r = file_open(&h, &f);
	if (r == 0)
		r = list ? do_list(&f.t, o.json) : do_change(&f, op, o.args[1], &a, o.json);
	file_close(&f);
	return r;
}
