/* test_parsers.c — unit tests of strata-sandboxd's HTTP request head
 * parser: valid heads parse, invalid ones are refused with the status and a
 * reason, limits hold; pax extended headers' numbers (size, uid, gid,
 * mtime) parse and override a ustar header, malformed ones are refused.
 * (The JSON codec is tested in tests/fs/test_json.c.) Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/sandboxd/http.h"
#include "sandbox/sandboxd/tar.h"

static int failures;
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);      \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static void test_http(void)
{
	struct sbd_http_req r;
	struct strata_err why = {0};
	const char *ok = "POST /v1/x%20y?path=%2Ftmp%2Fa+b&k HTTP/1.1\r\nContent-Length: 5\r\n"
			 "Connection: close\r\nAuthorization: Bearer t\r\n\r\nhello";
	CHECK(sbd_http_parse_head(ok, strlen(ok), 100, &r, &why) == 0);
	CHECK(!strcmp(r.method, "POST") && !strcmp(r.path, "/v1/x y") && r.content_length == 5);
	CHECK(!r.keep_alive && !strcmp(r.auth, "Bearer t"));
	bool bad = false;
	char *v = sbd_http_query_get(r.query, "path", &bad);
	CHECK(v && !strcmp(v, "/tmp/a b") && !bad);
	free(v);
	v = sbd_http_query_get(r.query, "k", &bad);
	CHECK(v && !v[0]);
	free(v);
	CHECK(!sbd_http_query_get(r.query, "pat", &bad));
	v = sbd_http_query_get("path=%00", "path", &bad);
	CHECK(!v && bad);
	sbd_http_req_done(&r);
	CHECK(sbd_http_parse_head("GET / HTTP/1.1\r\n", 16, 100, &r, &why) == -EAGAIN);
	const char *big = "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n";
	CHECK(sbd_http_parse_head(big, strlen(big), 100, &r, &why) == -EFBIG && r.status == 413);
	strata_err_clear(&why);
	const char *te = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	CHECK(sbd_http_parse_head(te, strlen(te), 100, &r, &why) == 0 && r.chunked);
	sbd_http_req_done(&r);
	const char *te2 = "POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n";
	CHECK(sbd_http_parse_head(te2, strlen(te2), 100, &r, &why) == -EOPNOTSUPP &&
	      r.status == 501);
	const char *both =
	    "POST / HTTP/1.1\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n";
	CHECK(sbd_http_parse_head(both, strlen(both), 100, &r, &why) == -EBADMSG &&
	      r.status == 400);
	strata_err_clear(&why);
	const char *v2 = "GET / HTTP/2.0\r\n\r\n";
	CHECK(sbd_http_parse_head(v2, strlen(v2), 100, &r, &why) == -EPROTONOSUPPORT &&
	      r.status == 505);
	strata_err_clear(&why);
	const char *nul = "GET /a%00b HTTP/1.1\r\n\r\n";
	CHECK(sbd_http_parse_head(nul, strlen(nul), 100, &r, &why) == -EBADMSG && r.status == 400);
	strata_err_clear(&why);
	const char *dup = "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n";
	CHECK(sbd_http_parse_head(dup, strlen(dup), 100, &r, &why) == -EBADMSG && r.status == 400);
	strata_err_clear(&why);
	char *huge = malloc(SBD_HTTP_MAX_HEAD + 10);
	memset(huge, 'a', SBD_HTTP_MAX_HEAD + 10);
	CHECK(sbd_http_parse_head(huge, SBD_HTTP_MAX_HEAD + 10, 100, &r, &why) == -EMSGSIZE &&
	      r.status == 431);
	strata_err_clear(&why);
	free(huge);
	/* A bare CR before the blank line (found by sandboxd_fuzz_http). */
	const char *cr = "X / HTTP/1.1\r\r\n\r\n";
	CHECK(sbd_http_parse_head(cr, strlen(cr), 100, &r, &why) == -EBADMSG && r.status == 400);
	strata_err_clear(&why);
	const char *cr2 = "GET / HTTP/1.1\r\nA: b\r\r\n\r\n";
	CHECK(sbd_http_parse_head(cr2, strlen(cr2), 100, &r, &why) == -EBADMSG && r.status == 400);
	strata_err_clear(&why);
}

static void test_pax(void)
{
	static const char rec[] = "19 size=8589934592\n"
				  "15 uid=3000000\n"
				  "12 gid=2097\n"
				  "30 mtime=1700000000.123456789\n"
				  "18 path=a/long/nm\n";
	struct sbd_tar_pax x = {0};
	CHECK(sbd_tar_pax_parse(rec, strlen(rec), &x) == 0);
	CHECK(x.has_size && x.size == 8589934592ull && x.has_uid && x.uid == 3000000);
	CHECK(x.has_gid && x.gid == 2097 && x.has_mtime && x.mtime == 1700000000);
	CHECK(x.path && !strcmp(x.path, "a/long/nm") && !x.linkpath);
	struct sbd_tar_hdr h = {.size = 0, .uid = 0, .gid = 0, .mtime = 5};
	sbd_tar_pax_apply(&x, &h);
	CHECK(h.size == 8589934592ull && h.uid == 3000000 && h.gid == 2097 &&
	      h.mtime == 1700000000);
	sbd_tar_pax_clear(&x);
	CHECK(!x.has_size && !x.path);
	static const char *const bad[] = {"11 size=x1\n", "11 size=-1\n", "10 uid=1a\n",
					  "29 size=99999999999999999999\n"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		struct sbd_tar_pax y = {0};
		CHECK(sbd_tar_pax_parse(bad[i], strlen(bad[i]), &y) == -EINVAL);
		sbd_tar_pax_clear(&y);
	}
}

int main(void)
{
	test_http();
	test_pax();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
