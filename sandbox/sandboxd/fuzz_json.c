/* fuzz_json.c — libFuzzer target (ctest: fuzz_sandboxd_json) for
 * sandboxd's decoders of JSON it did not write itself: a persisted sandbox
 * (the "sandbox" of state.json, sbd_sandbox_from_json, read back at every
 * start) and the fields of request bodies that build one (env, labels:
 * sbd_api_parse_env, sbd_api_parse_labels). A sandbox that decodes must
 * encode (sbd_sandbox_to_json) into JSON that parses and decodes again.
 * The JSON codec alone has its own target (fs/fuzz_json.c), the HTTP head
 * parser too (fuzz_http.c). */
#include <stdint.h>
#include <stdlib.h>

#include "sandbox/sandboxd/api-internal.h"

static void decode_again(const struct sbd_sandbox *sb)
{
	struct jw w;
	jw_init(&w);
	sbd_sandbox_to_json(sb, 0, &w);
	struct json *k = w.err ? NULL : json_parse(w.buf, w.len, NULL, 0);
	if (!w.err && !k)
		abort(); /* what we emit must parse */
	struct sbd_sandbox *again = calloc(1, sizeof(*again));
	if (k && again && sbd_sandbox_from_json(k, again) < 0 && sb->image)
		abort(); /* and decode, once it decoded */
	sbd_sandbox_free(again);
	json_free(k);
	jw_done(&w);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct json *j = json_parse((const char *)data, size, NULL, 0);
	if (!j)
		return 0;
	struct sbd_sandbox *sb = calloc(1, sizeof(*sb));
	if (sb && sbd_sandbox_from_json(j, sb) == 0)
		decode_again(sb);
	sbd_sandbox_free(sb);

	struct strata_err err = {0};
	char **env = NULL;
	if (sbd_api_parse_env(json_get(j, "env"), NULL, &env, &err) == 0) {
		for (char **e = env; *e; e++)
			free(*e);
		free(env);
	}
	struct sbd_sandbox *lb = calloc(1, sizeof(*lb));
	if (lb)
		sbd_api_parse_labels(json_get(j, "labels"), lb, &err);
	sbd_sandbox_free(lb);
	json_free(j);
	return 0;
}
