/* fuzz_http.c — libFuzzer target for the API's HTTP request head parser
 * (the JSON codec has its own target, fs/fuzz_json.c). */
#include <stdint.h>
#include <stdlib.h>
#include "sandbox/sandboxd/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct strata_err err = {0};
	struct sbd_http_req req;
	if (sbd_http_parse_head((const char *)data, size, 1 << 20, &req, &err) == 0)
		sbd_http_req_done(&req);
	return 0;
}
