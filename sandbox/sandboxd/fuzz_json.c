/* fuzz_json.c — libFuzzer target for the API's parsers: the JSON parser
 * (with a round trip through the emitter) and the HTTP request head parser. */
#include <stdint.h>
#include <stdlib.h>
#include "http.h"
#include "json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	char err[128];
	struct json *j = json_parse((const char *)data, size, err, sizeof(err));
	if (j) {
		struct jw w;
		jw_init(&w);
		json_emit(&w, j);
		struct json *k = w.buf ? json_parse(w.buf, w.len, err, sizeof(err)) : NULL;
		if (w.buf && !k)
			abort(); /* what we emit must parse */
		json_free(k);
		jw_done(&w);
		json_free(j);
	}
	struct http_req req;
	if (http_parse_head((const char *)data, size, 1 << 20, &req, err, sizeof(err)) == 0)
		http_req_done(&req);
	return 0;
}
