/* fuzz_tenants.c — libFuzzer target (ctest: fuzz_sandboxd_tenants) for the
 * decoder of the tenants file (tenants.h: sbd_tenants_parse, which
 * sandboxd runs on whatever the file holds). A table that decodes keeps
 * its invariants (valid, unique names) and encodes (sbd_tenants_to_json)
 * into text that decodes to the same table. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "fs/json.h"
#include "sandbox/sandboxd/tenants.h"

static void same_table(const struct sbd_tenants *a, const struct sbd_tenants *b)
{
	if (a->n != b->n)
		abort();
	for (size_t i = 0; i < a->n; i++) {
		const struct sbd_tenant *x = &a->v[i], *y = &b->v[i];
		if (strcmp(x->name, y->name) || memcmp(x->salt, y->salt, sizeof(x->salt)) ||
		    memcmp(x->hash, y->hash, sizeof(x->hash)) || x->admin != y->admin ||
		    x->max_sandboxes != y->max_sandboxes || x->memory_mb != y->memory_mb ||
		    (x->cpu < 0) != (y->cpu < 0) || x->created_at != y->created_at)
			abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct sbd_tenants t, again = {0};
	struct strata_err e = {0};
	if (sbd_tenants_parse((const char *)data, size, &t, &e) == 0) {
		for (size_t i = 0; i < t.n; i++)
			if (!sbd_tenant_name_valid(t.v[i].name) ||
			    sbd_tenants_find(&t, t.v[i].name) != &t.v[i])
				abort();
		struct jw w;
		jw_init(&w);
		sbd_tenants_to_json(&t, &w);
		if (!w.err && sbd_tenants_parse(w.buf, w.len, &again, &e) != 0)
			abort(); /* what we write must read back */
		if (!w.err)
			same_table(&t, &again);
		jw_done(&w);
	}
	sbd_tenants_done(&again);
	sbd_tenants_done(&t);
	return 0;
}
