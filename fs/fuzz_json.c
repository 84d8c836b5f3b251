/* fuzz_json.c — libFuzzer target for the JSON codec (fs/json.h): whatever
 * parses must survive a round trip through the emitter and parse again. */
#include <stdint.h>
#include <stdlib.h>
#include "fs/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[128];
	struct json *j = json_parse((const char *)data, size, err, sizeof(err));
	if (!j)
		return 0;
	struct jw w;
	jw_init(&w);
	json_emit(&w, j);
	struct json *k = w.buf ? json_parse(w.buf, w.len, err, sizeof(err)) : NULL;
	if (w.buf && !k)
		abort(); /* what we emit must parse */
	json_free(k);
	jw_done(&w);
	json_free(j);
	return 0;
}
