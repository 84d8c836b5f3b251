/* pull_tool.c — the test driver of imagesvc/pull: imports or pulls an image
 * into a staging directory and shows a stage as JSON, so that the tests in
 * this directory can compare it with the source. Until `strata image
 * import|pull` exist, this is also the way to stage an image by hand.
 *
 *   pull_tool import SRC STAGE [--tag T]
 *   pull_tool pull REF STAGE [--insecure] [--ca-file F] [--user USER:PASS]
 *             [--attempts N] [--backoff-ms MS] [--timeout-ms MS]
 *             [--max-header-bytes N] [--max-manifest N] [--auth-file CONFIG.json]
 *   pull_tool show STAGE [--verify]
 *
 * Exit status 0 on success; 1 with one line "pull_tool: ERRNAME: message" on
 * stderr; 2 for a usage error. */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <json-c/json.h>

#include "fs/cleanup.h"
#include "imagesvc/pull/oci.h"
#include "imagesvc/pull/registry.h"

static int fail(const struct strata_err *e, int r)
{
	fprintf(stderr, "pull_tool: %s: %s\n", strerrorname_np(-r) ? strerrorname_np(-r) : "?",
		e->msg[0] ? e->msg : strerror(-r));
	return 1;
}

static int usage(void)
{
	fprintf(stderr,
		"usage: pull_tool import SRC STAGE [--tag T]\n"
		"       pull_tool pull REF STAGE [--insecure] [--ca-file F] [--user U:P]\n"
		"                 [--attempts N] [--backoff-ms MS] [--timeout-ms MS]\n"
		"                 [--max-header-bytes N] [--max-manifest N] [--auth-file F]\n"
		"       pull_tool show STAGE [--verify]\n");
	return 2;
}

static struct json_object *strv(char **v)
{
	if (!v)
		return NULL;
	struct json_object *a = json_object_new_array();
	for (size_t i = 0; v[i]; i++)
		json_object_array_add(a, json_object_new_string(v[i]));
	return a;
}

static struct json_object *str(const char *s)
{
	return s ? json_object_new_string(s) : NULL;
}

static int show(const char *dir, bool verify)
{
	struct strata_err e = {0};
	struct oci_image *img = NULL;
	int r = oci_stage_load(dir, verify, &img, &e);
	if (r < 0)
		return fail(&e, r);
	struct json_object *o = json_object_new_object(), *layers = json_object_new_array();
	json_object_object_add(o, "name", str(img->name));
	json_object_object_add(o, "manifest_digest", str(img->manifest_digest));
	json_object_object_add(o, "config_digest", str(img->config_digest));
	json_object_object_add(o, "os", str(img->config.os));
	json_object_object_add(o, "architecture", str(img->config.architecture));
	json_object_object_add(o, "entrypoint", strv(img->config.entrypoint));
	json_object_object_add(o, "cmd", strv(img->config.cmd));
	json_object_object_add(o, "env", strv(img->config.env));
	json_object_object_add(o, "working_dir", str(img->config.working_dir));
	json_object_object_add(o, "user", str(img->config.user));
	static const char *const comp[] = {"none", "gzip", "zstd"};
	for (size_t i = 0; i < img->n_layers; i++) {
		struct json_object *l = json_object_new_object();
		json_object_object_add(l, "digest", str(img->layers[i].digest));
		json_object_object_add(l, "media_type", str(img->layers[i].media_type));
		json_object_object_add(l, "compression", str(comp[img->layers[i].compression]));
		json_object_object_add(l, "size",
				       json_object_new_int64((int64_t)img->layers[i].size));
		json_object_object_add(l, "path", str(img->layers[i].path));
		json_object_array_add(layers, l);
	}
	json_object_object_add(o, "layers", layers);
	printf("%s\n", json_object_to_json_string_ext(o, JSON_C_TO_STRING_PRETTY |
							     JSON_C_TO_STRING_NOSLASHESCAPE));
	json_object_put(o);
	oci_image_free(img);
	return 0;
}

static int pull(int argc, char **argv)
{
	static const struct option opts[] = {
	    {"insecure", no_argument, NULL, 'k'},
	    {"ca-file", required_argument, NULL, 'c'},
	    {"user", required_argument, NULL, 'u'},
	    {"attempts", required_argument, NULL, 'a'},
	    {"backoff-ms", required_argument, NULL, 'b'},
	    {"timeout-ms", required_argument, NULL, 't'},
	    {"max-header-bytes", required_argument, NULL, 'H'},
	    {"max-manifest", required_argument, NULL, 'M'},
	    {"auth-file", required_argument, NULL, 'f'},
	    {0},
	};
	struct registry_opts o = {0};
	struct oci_limits lim;
	oci_limits_default(&lim);
	o.lim = &lim;
	char *user = NULL;
	const char *auth_file = NULL;
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		switch (c) {
		case 'k':
			o.insecure = true;
			break;
		case 'c':
			o.ca_file = optarg;
			break;
		case 'u':
			user = optarg;
			break;
		case 'a':
			o.max_attempts = atoi(optarg);
			break;
		case 'b':
			o.backoff_ms = atoi(optarg);
			break;
		case 't':
			o.timeout_ms = atoi(optarg);
			break;
		case 'H':
			o.max_header_bytes = strtoul(optarg, NULL, 10);
			break;
		case 'f':
			auth_file = optarg;
			break;
		case 'M':
			lim.max_manifest = strtoul(optarg, NULL, 10);
			break;
		default:
			return usage();
		}
	}
	if (optind + 2 != argc)
		return usage();
	if (user) {
		char *colon = strchr(user, ':');
		if (!colon)
			return usage();
		*colon = 0;
		o.username = user;
		o.password = colon + 1;
	}
	struct strata_err e = {0};
	_cleanup_free_ char *fuser = NULL, *fpass = NULL;
	struct registry_ref ref = {0};
	int r = 0;
	if (auth_file && !user) {
		r = registry_ref_parse(argv[optind], &ref, &e);
		if (r == 0)
			r = registry_creds_lookup(auth_file, ref.registry, &fuser, &fpass, &e);
		registry_ref_done(&ref);
		if (r < 0 && r != -ENOENT)
			return fail(&e, r);
		o.username = fuser;
		o.password = fpass;
	}
	r = registry_pull(argv[optind], argv[optind + 1], &o, &e);
	return r < 0 ? fail(&e, r) : 0;
}

static int import(int argc, char **argv)
{
	static const struct option opts[] = {{"tag", required_argument, NULL, 't'}, {0}};
	const char *tag = NULL;
	for (int c; (c = getopt_long(argc, argv, "", opts, NULL)) != -1;) {
		if (c != 't')
			return usage();
		tag = optarg;
	}
	if (optind + 2 != argc)
		return usage();
	struct strata_err e = {0};
	int r = oci_import(argv[optind], tag, argv[optind + 1], NULL, &e);
	return r < 0 ? fail(&e, r) : 0;
}

int main(int argc, char **argv)
{
	if (argc < 2)
		return usage();
	const char *verb = argv[1];
	argv++;
	argc--;
	if (!strcmp(verb, "import"))
		return import(argc, argv);
	if (!strcmp(verb, "pull"))
		return pull(argc, argv);
	if (!strcmp(verb, "show") && (argc == 2 || (argc == 3 && !strcmp(argv[2], "--verify"))))
		return show(argv[1], argc == 3);
	return usage();
}
