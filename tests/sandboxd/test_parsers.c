/* test_parsers.c — unit tests of strata-sandboxd's JSON parser/emitter,
 * base64 and HTTP request head parser: valid input round-trips, invalid
 * input is refused with a reason, limits hold. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "http.h"
#include "json.h"

static int failures;
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);      \
			failures++;                                                                \
		}                                                                                  \
	} while (0)

static struct json *parse(const char *s)
{
	char err[128];
	return json_parse(s, strlen(s), err, sizeof(err));
}

static void test_json_valid(void)
{
	struct json *j = parse(" {\"a\": [1, -2.5e3, true, false, null], \"b\": "
			       "\"x\\u00e9\\ud83d\\ude00\\n\", \"c\": {}} ");
	CHECK(j && j->type == JSON_OBJ && j->len == 3);
	struct json *a = json_get(j, "a");
	CHECK(a && a->type == JSON_ARR && a->len == 5);
	int64_t v;
	CHECK(json_int(a->child, 0, 10, &v) && v == 1);
	CHECK(json_int(a->child->next, -10000, 10000, &v) && v == -2500);
	CHECK(!json_int(a->child->next, 0, 10000, &v));
	CHECK(a->child->next->num == -2500.0);
	CHECK(!strcmp(json_cstr(json_get(j, "b")), "x\xc3\xa9\xf0\x9f\x98\x80\n"));
	const char *allowed[] = {"a", "b", NULL};
	CHECK(!strcmp(json_unknown_field(j, allowed), "c"));
	struct jw w;
	jw_init(&w);
	json_emit(&w, j);
	struct json *k = json_parse(w.buf, w.len, NULL, 0);
	CHECK(k && !strcmp(json_cstr(json_get(k, "b")), json_cstr(json_get(j, "b"))));
	json_free(k);
	jw_done(&w);
	json_free(j);
	j = parse("\"a\\u0000b\"");
	CHECK(j && j->len == 3 && json_cstr(j) == NULL); /* NUL refused as a C string */
	json_free(j);
}

static void test_json_invalid(void)
{
	const char *bad[] = {"",	   "{",	      "[1,]",	     "{\"a\" 1}",
			     "{\"a\":1,}", "01",      "1.",	     "-",
			     "+1",	   "\"\\x\"", "\"\\ud800\"", "\"\\udc00\"",
			     "tru",	   "nul",     "[1 2]",	     "{\"a\":1,\"a\":2}",
			     "\"a\nb\"",   "1 2",     "1e400",	     "{1:2}"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
		char err[128] = "";
		struct json *j = json_parse(bad[i], strlen(bad[i]), err, sizeof(err));
		if (j)
			fprintf(stderr, "accepted: %s\n", bad[i]);
		CHECK(!j && err[0]);
		json_free(j);
	}
	char deep[200];
	memset(deep, '[', 100);
	memset(deep + 100, ']', 100);
	CHECK(!json_parse(deep, 200, NULL, 0));
}

static void test_emitter(void)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "s", "q\"\\\x01");
	jw_kint(&w, "i", -42);
	jw_key(&w, "a");
	jw_arr(&w);
	jw_bool(&w, true);
	jw_null(&w);
	jw_b64(&w, "hello", 5);
	jw_arr_end(&w);
	jw_obj_end(&w);
	CHECK(!strcmp(w.buf,
		      "{\"s\":\"q\\\"\\\\\\u0001\",\"i\":-42,\"a\":[true,null,\"aGVsbG8=\"]}"));
	jw_done(&w);
	uint8_t *out;
	size_t n;
	CHECK(b64_decode("aGVsbG8=", 8, &out, &n) == 0 && n == 5 && !memcmp(out, "hello", 5));
	free(out);
	CHECK(b64_decode("aGVsbG8", 7, &out, &n) == -EINVAL);
	CHECK(b64_decode("aG=sbG8=", 8, &out, &n) == -EINVAL);
	CHECK(b64_decode("", 0, &out, &n) == 0 && n == 0);
	free(out);
}

static void test_http(void)
{
	struct http_req r;
	char why[128];
	const char *ok = "POST /v1/x%20y?path=%2Ftmp%2Fa+b&k HTTP/1.1\r\nContent-Length: 5\r\n"
			 "Connection: close\r\nAuthorization: Bearer t\r\n\r\nhello";
	CHECK(http_parse_head(ok, strlen(ok), 100, &r, why, sizeof(why)) == 0);
	CHECK(!strcmp(r.method, "POST") && !strcmp(r.path, "/v1/x y") && r.content_length == 5);
	CHECK(!r.keep_alive && !strcmp(r.auth, "Bearer t"));
	bool bad = false;
	char *v = http_query_get(r.query, "path", &bad);
	CHECK(v && !strcmp(v, "/tmp/a b") && !bad);
	free(v);
	v = http_query_get(r.query, "k", &bad);
	CHECK(v && !v[0]);
	free(v);
	CHECK(!http_query_get(r.query, "pat", &bad));
	v = http_query_get("path=%00", "path", &bad);
	CHECK(!v && bad);
	http_req_done(&r);
	CHECK(http_parse_head("GET / HTTP/1.1\r\n", 16, 100, &r, why, sizeof(why)) == -EAGAIN);
	const char *big = "POST / HTTP/1.1\r\nContent-Length: 101\r\n\r\n";
	CHECK(http_parse_head(big, strlen(big), 100, &r, why, sizeof(why)) == -413);
	const char *te = "POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n";
	CHECK(http_parse_head(te, strlen(te), 100, &r, why, sizeof(why)) == -501);
	const char *v2 = "GET / HTTP/2.0\r\n\r\n";
	CHECK(http_parse_head(v2, strlen(v2), 100, &r, why, sizeof(why)) == -505);
	const char *nul = "GET /a%00b HTTP/1.1\r\n\r\n";
	CHECK(http_parse_head(nul, strlen(nul), 100, &r, why, sizeof(why)) == -400);
	const char *dup = "POST / HTTP/1.1\r\nContent-Length: 1\r\nContent-Length: 1\r\n\r\n";
	CHECK(http_parse_head(dup, strlen(dup), 100, &r, why, sizeof(why)) == -400);
	char *huge = malloc(HTTP_MAX_HEAD + 10);
	memset(huge, 'a', HTTP_MAX_HEAD + 10);
	CHECK(http_parse_head(huge, HTTP_MAX_HEAD + 10, 100, &r, why, sizeof(why)) == -431);
	free(huge);
}

int main(void)
{
	test_json_valid();
	test_json_invalid();
	test_emitter();
	test_http();
	if (failures)
		fprintf(stderr, "%d checks failed\n", failures);
	return failures ? 1 : 0;
}
