/* options.c — how every verb reads its command line: the options they share
 * (--home DIR, --meta HOST:PORT, --json, --help), the verb's own options
 * through a callback, the operands, and what the shared ones point to (the
 * home, strata-meta's address), with the CLI's one-line errors for them.
 *
 * One parser so that every verb answers a bad option, a missing value, an
 * unexpected operand and --help the same way; a verb only lists its own
 * options and says what each one does. */
#include <errno.h>
#include <getopt.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "tools/cli.h"

/* getopt_long values of the shared options: above every character, so
 * that a verb's own options keep theirs. */
enum { VAL_HOME = 0x100, VAL_META, VAL_JSON, VAL_KEY };

void cli_err(const char *verb, const char *fmt, ...)
{
	va_list ap;
	fprintf(stderr, "strata%s%s: ", verb ? " " : "", verb ? verb : "");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
}

void cli_bad_option(const char *verb, int o, char **argv)
{
	const char *opt = optind > 0 ? argv[optind - 1] : "?";

	if (o == ':')
		cli_err(verb, "option '%s' needs a value (see strata %s --help)", opt, verb);
	else if (optopt)
		cli_err(verb, "unknown option '-%c' (see strata %s --help)", optopt, verb);
	else
		cli_err(verb, "unknown option '%s' (see strata %s --help)", opt, verb);
}

int cli_parse_int(const char *s, int lo, int hi, int *ret)
{
	char *end;
	long v;

	if (!s || !*s)
		return -EINVAL;
	errno = 0;
	v = strtol(s, &end, 10);
	if (errno || *end || v < lo || v > hi)
		return -EINVAL;
	*ret = (int)v;
	return 0;
}

int cli_timeout_option(void *arg, int val, const char *value)
{
	const struct cli_timeout_arg *t = arg;

	(void)val;
	if (cli_parse_int(value, 1, 3600, t->seconds) < 0) {
		cli_err(t->verb, "--timeout wants seconds (1..3600), not '%s'", value);
		return 2;
	}
	return 0;
}

/* The getopt_long table of verb v: the shared options it takes, its own,
 * --help. Returns the number of entries or -E2BIG. */
static int build_table(const struct cli_verb_opts *v, struct option *t, int cap)
{
	static const struct option shared[] = {
	    {"home", required_argument, NULL, VAL_HOME},
	    {"meta", required_argument, NULL, VAL_META},
	    {"json", no_argument, NULL, VAL_JSON},
	    {"key", required_argument, NULL, VAL_KEY},
	};
	/* --key goes with --meta: a verb that calls strata-meta proves the key */
	static const unsigned bit[] = {CLI_OPT_HOME, CLI_OPT_META, CLI_OPT_JSON, CLI_OPT_META};
	int n = 0;

	for (size_t i = 0; i < sizeof(shared) / sizeof(*shared); i++)
		if (v->common & bit[i])
			t[n++] = shared[i];
	for (const struct option *o = v->own; o && o->name; o++) {
		if (n + 2 > cap)
			return -E2BIG;
		t[n++] = *o;
	}
	t[n++] = (struct option){"help", no_argument, NULL, 'h'};
	t[n] = (struct option){0};
	return n;
}

/* One option getopt_long returned. Returns CLI_GO or the exit status. */
static int one_option(const struct cli_verb_opts *v, int o, char **argv, struct cli_opts *ret)
{
	switch (o) {
	case VAL_HOME:
		ret->home = optarg, ret->seen |= CLI_OPT_HOME;
		return CLI_GO;
	case VAL_META:
		ret->meta = optarg, ret->seen |= CLI_OPT_META;
		return CLI_GO;
	case VAL_JSON:
		ret->json = true, ret->seen |= CLI_OPT_JSON;
		return CLI_GO;
	case VAL_KEY:
		ret->key = optarg;
		return CLI_GO;
	case 'h':
		ret->help = true;
		if (!v->usage)
			return CLI_GO;
		v->usage(stdout);
		return 0;
	case ':':
	case '?':
		cli_bad_option(v->verb, o, argv);
		return 2;
	}
	int r = v->on_opt ? v->on_opt(v->arg, o, optarg) : 2;
	return r == 0 ? CLI_GO : r;
}

int cli_parse_opts(const struct cli_verb_opts *v, int argc, char **argv, struct cli_opts *ret)
{
	struct option table[48];
	int saved_opterr = opterr, o, rc = CLI_GO;

	memset(ret, 0, sizeof(*ret));
	if (build_table(v, table, (int)(sizeof(table) / sizeof(*table))) < 0) {
		cli_err(v->verb, "too many options");
		return 2;
	}
	/* optind 0 makes glibc start afresh, also taking the ordering ('+')
	 * from this optstring rather than from an earlier parse. */
	optind = 0;
	opterr = 0;
	while (rc == CLI_GO && !ret->help &&
	       (o = getopt_long(argc, argv, v->stop_at_operand ? "+:h" : ":h", table, NULL)) != -1)
		rc = one_option(v, o, argv, ret);
	/* sub-commands parse their own options after this one, with messages */
	opterr = saved_opterr;
	if (rc != CLI_GO)
		return rc;
	ret->args = argv + optind;
	ret->nargs = argc - optind;
	if (v->no_operands && ret->nargs > 0 && !ret->help) {
		cli_err(v->verb, "unexpected argument '%s' (see strata %s --help)", ret->args[0],
			v->verb);
		return 2;
	}
	return CLI_GO;
}

int cli_home_open(const char *verb, const char *home_opt, struct cli_home *ret)
{
	int r = cli_home_resolve(home_opt, ret);
	if (r < 0)
		cli_err(verb, "bad home directory: %s", strerror(-r));
	return r;
}

int cli_meta_addr(const char *opt_meta, const char *home, char *buf, size_t cap)
{
	if (opt_meta || getenv("STRATA_META")) {
		snprintf(buf, cap, "%s", opt_meta ? opt_meta : getenv("STRATA_META"));
		return 0;
	}
	struct cli_home h;
	int r = cli_home_resolve(home, &h);
	if (r < 0 || !h.have_conf)
		return r < 0 ? r : -ENOENT;
	buf[0] = 0;
	for (int i = 0; i < cli_daemon_count(&h); i++) {
		struct cli_daemon d;
		cli_daemon_get(&h, i, &d);
		if (d.kind == D_META)
			cli_daemon_addr(&h, &d, buf, cap);
	}
	return buf[0] ? 0 : -ENOENT;
}
