/* test_parse.c — unit tests of imagesvc/pull's parsers: image references,
 * URLs and redirects, WWW-Authenticate challenges, manifests, indexes and
 * platform selection, configs, stored credentials (Docker config.json). */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "tests/testutil.h"
#include "imagesvc/pull/http.h"
#include "imagesvc/pull/oci-internal.h"
#include "imagesvc/pull/registry.h"

static void test_refs(void)
{
	struct strata_err e = {0};
	struct registry_ref r;
	CHECK_EQ(registry_ref_parse("127.0.0.1:5000/busybox:v1", &r, &e), 0);
	CHECK(!strcmp(r.registry, "127.0.0.1:5000") && !strcmp(r.repo, "busybox"));
	CHECK(!strcmp(r.tag, "v1") && !r.digest && !r.scheme);
	registry_ref_done(&r);
	CHECK_EQ(registry_ref_parse("busybox", &r, &e), 0);
	CHECK(!strcmp(r.registry, "docker.io") && !strcmp(r.repo, "library/busybox"));
	CHECK(!strcmp(r.tag, "latest"));
	registry_ref_done(&r);
	CHECK_EQ(
	    registry_ref_parse("http://localhost/a/b@sha256:"
			       "0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef",
			       &r, &e),
	    0);
	CHECK(!strcmp(r.scheme, "http") && !strcmp(r.repo, "a/b") && !r.tag && r.digest);
	registry_ref_done(&r);
	CHECK_EQ(registry_ref_parse("host.example/UPPER:tag", &r, &e), -EINVAL);
	CHECK_EQ(registry_ref_parse("host.example/a:bad tag", &r, &e), -EINVAL);
	CHECK_EQ(registry_ref_parse("host.example/a@sha256:12", &r, &e), -EINVAL);
}

static void test_urls(void)
{
	struct http_url u, v;
	CHECK_EQ(http_url_parse("https://reg.example:8443/v2/x?y=1#frag", &u), 0);
	CHECK(u.tls && !strcmp(u.host, "reg.example") && !strcmp(u.port, "8443"));
	CHECK(!strcmp(u.path, "/v2/x?y=1"));
	CHECK_EQ(http_url_resolve(&u, "/blobs/1", &v), 0);
	CHECK(!strcmp(v.path, "/blobs/1") && !strcmp(v.port, "8443") && v.tls);
	http_url_done(&v);
	CHECK_EQ(http_url_resolve(&u, "rel", &v), 0);
	CHECK(!strcmp(v.path, "/v2/rel"));
	http_url_done(&v);
	CHECK_EQ(http_url_resolve(&u, "http://other:81/z", &v), 0);
	CHECK(!v.tls && !strcmp(v.host, "other") && !strcmp(v.port, "81"));
	http_url_done(&v);
	http_url_done(&u);
	CHECK_EQ(http_url_parse("http://[::1]:5000/", &u), 0);
	CHECK(!strcmp(u.host, "::1") && !strcmp(u.port, "5000"));
	http_url_done(&u);
	CHECK_EQ(http_url_parse("http://h/a\r\nX: y", &u), -EINVAL);
	CHECK_EQ(http_url_parse("ftp://h/", &u), -EINVAL);
	CHECK_EQ(http_url_parse("http://h:99999/", &u), -EINVAL);
}

static void test_challenge(void)
{
	char scheme[16];
	char *realm, *service, *scope;
	CHECK_EQ(registry_parse_challenge("Bearer realm=\"https://auth/token\",service=\"reg\","
					  "scope=\"repository:a:pull\"",
					  scheme, sizeof(scheme), &realm, &service, &scope),
		 0);
	CHECK(!strcmp(scheme, "Bearer") && !strcmp(realm, "https://auth/token"));
	CHECK(!strcmp(service, "reg") && !strcmp(scope, "repository:a:pull"));
	free(realm);
	free(service);
	free(scope);
	CHECK_EQ(registry_parse_challenge("Basic realm=x", scheme, sizeof(scheme), &realm, &service,
					  &scope),
		 0);
	CHECK(!strcmp(scheme, "Basic") && !strcmp(realm, "x") && !service);
	free(realm);
	CHECK_EQ(registry_parse_challenge("Bearer realm=\"unterminated", scheme, sizeof(scheme),
					  &realm, &service, &scope),
		 -EINVAL);
}

#define D1 "sha256:1111111111111111111111111111111111111111111111111111111111111111"
#define D2 "sha256:2222222222222222222222222222222222222222222222222222222222222222"

static void test_index(void)
{
	static const char idx[] =
	    "{\"schemaVersion\":2,\"mediaType\":\"" OCI_MT_INDEX "\",\"manifests\":["
	    "{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D1 "\",\"size\":10,"
	    "\"platform\":{\"os\":\"linux\",\"architecture\":\"arm64\",\"variant\":\"v8\"}},"
	    "{\"mediaType\":\"" OCI_MT_MANIFEST "\",\"digest\":\"" D2 "\",\"size\":11,"
	    "\"platform\":{\"os\":\"linux\",\"architecture\":\"amd64\"}}]}";
	struct strata_err e = {0};
	struct oci_desc *d;
	size_t n, pick;
	enum oci_doc_kind kind;
	CHECK_EQ(oci_doc_kind(idx, strlen(idx), NULL, &kind, &e), 0);
	CHECK_EQ(kind, OCI_DOC_INDEX);
	CHECK_EQ(oci_parse_index(idx, strlen(idx), NULL, &d, &n, &e), 0);
	CHECK_EQ(n, 2);
	CHECK_EQ(oci_select(d, n, NULL, &pick, &e), 0);
	CHECK_EQ(pick, 1);
	CHECK_EQ(oci_select(d, 1, NULL, &pick, &e), -ENOENT);
	CHECK(strstr(e.msg, "linux/arm64/v8"));
	free(d);
	struct oci_limits lim;
	oci_limits_default(&lim);
	lim.max_index_entries = 1;
	e = (struct strata_err){0};
	CHECK_EQ(oci_parse_index(idx, strlen(idx), &lim, &d, &n, &e), -EFBIG);
}

static void test_manifest_config(void)
{
	static const char man[] =
	    "{\"schemaVersion\":2,\"mediaType\":\"" DOCKER_MT_MANIFEST "\","
	    "\"config\":{\"mediaType\":\"x\",\"digest\":\"" D1 "\",\"size\":3},"
	    "\"layers\":[{\"mediaType\":\"application/vnd.docker.image.rootfs.diff.tar.gzip\","
	    "\"digest\":\"" D2 "\",\"size\":5}]}";
	struct strata_err e = {0};
	struct oci_manifest m;
	CHECK_EQ(oci_parse_manifest(man, strlen(man), NULL, &m, &e), 0);
	CHECK_EQ(m.n_layers, 1);
	CHECK_EQ(m.layers[0].size, 5);
	oci_manifest_done(&m);
	static const char bad[] = "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\","
				  "\"digest\":\"md5:00\",\"size\":3},\"layers\":[]}";
	CHECK(oci_parse_manifest(bad, strlen(bad), NULL, &m, &e) < 0);
	static const char foreign[] =
	    "{\"schemaVersion\":2,\"config\":{\"mediaType\":\"x\",\"digest\":\"" D1
	    "\",\"size\":3},\"layers\":[{\"mediaType\":"
	    "\"application/vnd.docker.image.rootfs.foreign.diff.tar.gzip\",\"digest\":\"" D2
	    "\",\"size\":5}]}";
	e = (struct strata_err){0};
	CHECK_EQ(oci_parse_manifest(foreign, strlen(foreign), NULL, &m, &e), -EOPNOTSUPP);

	static const char cfg[] = "{\"os\":\"linux\",\"architecture\":\"amd64\",\"config\":{"
				  "\"Cmd\":[\"/bin/sh\",\"-c\"],\"Env\":[\"A=1\"],\"User\":\"1:2\","
				  "\"WorkingDir\":\"/w\"},\"rootfs\":{\"type\":\"layers\","
				  "\"diff_ids\":[\"" D1 "\"]}}";
	struct oci_config c;
	e = (struct strata_err){0};
	CHECK_EQ(oci_parse_config(cfg, strlen(cfg), 1, &c, NULL, &e), 0);
	CHECK(!strcmp(c.cmd[1], "-c") && !c.cmd[2] && !c.entrypoint && !strcmp(c.user, "1:2"));
	CHECK(!strcmp(c.working_dir, "/w") && !strcmp(c.env[0], "A=1"));
	oci_config_done(&c);
	CHECK_EQ(oci_parse_config(cfg, strlen(cfg), 2, &c, NULL, &e), -EBADMSG);
	static const char arm[] = "{\"os\":\"linux\",\"architecture\":\"arm64\"}";
	e = (struct strata_err){0};
	CHECK_EQ(oci_parse_config(arm, strlen(arm), 0, &c, NULL, &e), -ENOENT);
	CHECK(strstr(e.msg, "linux/arm64"));
	static const char trailing[] = "{\"os\":\"linux\"} x";
	CHECK_EQ(oci_parse_config(trailing, strlen(trailing), 0, &c, NULL, &e), -EBADMSG);
}

static void test_creds(void)
{
	char path[] = "/tmp/imagepull-creds-XXXXXX";
	int fd = mkstemp(path);
	CHECK(fd >= 0);
	/* dGVzdGVyOnMzY3JldA== is base64("tester:s3cret") */
	static const char cfg[] =
	    "{\"auths\":{\"https://reg.example:5000/v1/\":{\"auth\":\"dGVzdGVyOnMzY3JldA==\"},"
	    "\"https://index.docker.io/v1/\":{\"username\":\"hub\",\"password\":\"pw\"},"
	    "\"bad.example\":{\"auth\":\"!!\"}}}";
	CHECK(write(fd, cfg, strlen(cfg)) == (ssize_t)strlen(cfg));
	close(fd);
	struct strata_err e = {0};
	char *u = NULL, *p = NULL;
	CHECK_EQ(registry_creds_lookup(path, "reg.example:5000", &u, &p, &e), 0);
	CHECK(!strcmp(u, "tester") && !strcmp(p, "s3cret"));
	free(u);
	free(p);
	CHECK_EQ(registry_creds_lookup(path, "docker.io", &u, &p, &e), 0);
	CHECK(!strcmp(u, "hub") && !strcmp(p, "pw"));
	free(u);
	free(p);
	CHECK_EQ(registry_creds_lookup(path, "other.example", &u, &p, &e), -ENOENT);
	CHECK_EQ(registry_creds_lookup(path, "bad.example", &u, &p, &e), -EINVAL);
	unlink(path);
	CHECK_EQ(registry_creds_lookup(path, "reg.example:5000", &u, &p, &e), -ENOENT);
}

int main(void)
{
	test_refs();
	test_urls();
	test_challenge();
	test_index();
	test_manifest_config();
	test_creds();
	return 0;
}
