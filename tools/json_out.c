/* json_out.c — how the CLI prints --json: every document is built with
 * fs/json.h's writer (so strings are escaped and the result is valid JSON)
 * and printed as one line. The few value forms the writer lacks are here:
 * unsigned 64-bit numbers, seconds with three decimals, NULL as "". */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include "fs/json.h"
#include "tools/cli.h"

int cli_jw_print(struct jw *w)
{
	int r = w->err;
	if (r == 0)
		printf("%s\n", w->buf ? w->buf : "");
	jw_done(w);
	return r;
}

int cli_json_print(const struct json *j)
{
	struct jw w;
	jw_init(&w);
	json_emit(&w, j);
	return cli_jw_print(&w);
}

void cli_jw_ku64(struct jw *w, const char *k, uint64_t v)
{
	char b[24];
	int n = snprintf(b, sizeof(b), "%" PRIu64, v);
	jw_key(w, k);
	jw_raw(w, b, (size_t)n);
}

void cli_jw_ksecs(struct jw *w, const char *k, double v)
{
	char b[48];
	int n = snprintf(b, sizeof(b), "%.3f", v);
	jw_key(w, k);
	jw_raw(w, b, (size_t)n);
}

void cli_jw_kstr0(struct jw *w, const char *k, const char *v)
{
	jw_kstr(w, k, v ? v : "");
}
