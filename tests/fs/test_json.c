/* test_json.c — unit tests of the JSON codec (fs/json.h): valid input
 * round-trips through the emitter, invalid input is refused with a reason,
 * limits hold, base64 both ways. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/json.h"
#include "tests/testutil.h"

static struct json *parse(const char *s)
{
	char err[128];
	return json_parse(s, strlen(s), err, sizeof(err));
}

static void test_json_valid(void)
{
	struct json *j = parse(" {\"a\": [1, -2.5e3, true, false, null], \"b\": "
			       "\"x\\u00e9\\ud83d\\ude00\\n\", \"c\": {}} ");
	EXPECT(j && j->type == JSON_OBJ && j->len == 3);
	struct json *a = json_get(j, "a");
	EXPECT(a && a->type == JSON_ARR && a->len == 5);
	int64_t v;
	EXPECT(json_int(a->child, 0, 10, &v) && v == 1);
	EXPECT(json_int(a->child->next, -10000, 10000, &v) && v == -2500);
	EXPECT(!json_int(a->child->next, 0, 10000, &v));
	EXPECT(a->child->next->num == -2500.0);
	EXPECT(!strcmp(json_cstr(json_get(j, "b")), "x\xc3\xa9\xf0\x9f\x98\x80\n"));
	const char *allowed[] = {"a", "b", NULL};
	EXPECT(!strcmp(json_unknown_field(j, allowed), "c"));
	struct jw w;
	jw_init(&w);
	json_emit(&w, j);
	struct json *k = json_parse(w.buf, w.len, NULL, 0);
	EXPECT(k && !strcmp(json_cstr(json_get(k, "b")), json_cstr(json_get(j, "b"))));
	json_free(k);
	jw_done(&w);
	json_free(j);
	j = parse("\"a\\u0000b\"");
	EXPECT(j && j->len == 3 && json_cstr(j) == NULL); /* NUL refused as a C string */
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
		EXPECT(!j && err[0]);
		json_free(j);
	}
	char deep[200];
	memset(deep, '[', 100);
	memset(deep + 100, ']', 100);
	EXPECT(!json_parse(deep, 200, NULL, 0));
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
	EXPECT(!strcmp(w.buf,
		       "{\"s\":\"q\\\"\\\\\\u0001\",\"i\":-42,\"a\":[true,null,\"aGVsbG8=\"]}"));
	jw_done(&w);
	uint8_t *out;
	size_t n;
	EXPECT(b64_decode("aGVsbG8=", 8, &out, &n) == 0 && n == 5 && !memcmp(out, "hello", 5));
	free(out);
	EXPECT(b64_decode("aGVsbG8", 7, &out, &n) == -EINVAL);
	EXPECT(b64_decode("aG=sbG8=", 8, &out, &n) == -EINVAL);
	EXPECT(b64_decode("", 0, &out, &n) == 0 && n == 0);
	free(out);
}

int main(void)
{
	test_json_valid();
	test_json_invalid();
	test_emitter();
	return test_result("test_json");
}
