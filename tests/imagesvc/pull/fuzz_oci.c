/* fuzz_oci.c — libFuzzer target for what a registry or an image's author
 * controls in imagesvc/pull: manifests, indexes and configs (json-c under our
 * limits, platform selection), WWW-Authenticate challenges, image references
 * and redirect URLs. The first byte picks the parser. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "imagesvc/pull/http.h"
#include "imagesvc/pull/oci-internal.h"
#include "imagesvc/pull/registry.h"

static void fuzz_docs(const char *s, size_t n)
{
	struct strata_err e = {0};
	enum oci_doc_kind kind;
	struct oci_manifest m;
	struct oci_desc *d;
	size_t nd, pick;
	struct oci_config c;
	char ids[4][OCI_DIGEST_MAX];
	oci_doc_kind(s, n, NULL, &kind, &e);
	if (oci_parse_manifest(s, n, NULL, &m, &e) == 0)
		oci_manifest_done(&m);
	if (oci_parse_index(s, n, NULL, &d, &nd, &e) == 0) {
		oci_select(d, nd, NULL, &pick, &e);
		oci_select(d, nd, "latest", &pick, &e);
		free(d);
	}
	for (size_t layers = 0; layers < 4; layers++)
		if (oci_parse_config(s, n, layers, &c, layers ? ids : NULL, &e) == 0)
			oci_config_done(&c);
}

static void fuzz_strings(const char *s)
{
	struct strata_err e = {0};
	char scheme[16];
	char *realm, *service, *scope;
	if (registry_parse_challenge(s, scheme, sizeof(scheme), &realm, &service, &scope) == 0) {
		free(realm);
		free(service);
		free(scope);
	}
	struct registry_ref r;
	if (registry_ref_parse(s, &r, &e) == 0)
		registry_ref_done(&r);
	struct http_url u, v;
	if (http_url_parse("https://reg.example:5000/v2/a/blobs/x", &u) == 0) {
		if (http_url_resolve(&u, s, &v) == 0)
			http_url_done(&v);
		http_url_done(&u);
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1 || size > 65536)
		return 0;
	char *s = malloc(size);
	if (!s)
		return 0;
	memcpy(s, data + 1, size - 1);
	s[size - 1] = 0;
	if (data[0] & 1)
		fuzz_docs(s, size - 1);
	else
		fuzz_strings(s);
	free(s);
	return 0;
}
