/* test_net_policy.c — sandbox/net's policy entries: what parses, what is
 * refused with which message, name matching (wildcards below a domain,
 * not the domain itself), deny over allow, the default, the JSON form. No
 * privileges needed. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/net/net-internal.h"

static int failed;
#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #c);      \
			failed = 1;                                                                \
		}                                                                                  \
	} while (0)

static int add(struct sbn_policy *p, bool allow, const char *e)
{
	char err[200] = "";
	int r = sbn_policy_add(p, allow, e, err, sizeof(err));
	if (r < 0 && !err[0])
		fprintf(stderr, "no message for '%s'\n", e), failed = 1;
	return r;
}

static bool name_ok(const struct sbn_policy *p, const char *n, const char *want_rule)
{
	const char *rule;
	bool ok = sbn_policy_name(p, n, &rule);
	if (strcmp(rule, want_rule))
		fprintf(stderr, "%s: rule %s, want %s\n", n, rule, want_rule), failed = 1;
	return ok;
}

int main(void)
{
	struct sbn_policy *p = sbn_policy_new(false);
	CHECK(add(p, true, "10.0.0.0/8") == 0);
	CHECK(add(p, true, "1.2.3.4:443") == 0);
	CHECK(add(p, true, "*.PyPI.org") == 0);
	CHECK(add(p, true, "github.com:22") == 0);
	CHECK(add(p, false, "10.9.0.0/16") == 0);
	CHECK(add(p, false, "evil.pypi.org") == 0);
	static const char *const bad[] = {
	    "10.0.0.0/33", "1.2.3",	  "a..b", "-", "x:0", "x:70000",   "x:9-3",
	    "a b",	   "1.2.3.4/8/1", "*",	  "",  "x:",  "256.1.1.1", "github.com:1-100"};
	for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++)
		CHECK(add(p, true, bad[i]) == -EINVAL);
	/* Names: a wildcard covers names below it, not itself; deny wins. */
	CHECK(name_ok(p, "files.pypi.org", "*.PyPI.org"));
	CHECK(!name_ok(p, "pypi.org", "default"));
	CHECK(!name_ok(p, "evil.pypi.org", "evil.pypi.org"));
	CHECK(name_ok(p, "github.com", "github.com:22"));
	CHECK(!name_ok(p, "notgithub.com", "default"));
	/* Addresses: deny entries first, ports only for TCP/UDP. */
	const struct sbn_rule *r = policy_match_addr(p, 0x0a090001, 6, 80);
	CHECK(r && !r->allow && !strcmp(r->text, "10.9.0.0/16"));
	r = policy_match_addr(p, 0x0a010001, 6, 80);
	CHECK(r && r->allow && !strcmp(r->text, "10.0.0.0/8"));
	CHECK(policy_match_addr(p, 0x01020304, 6, 443) != NULL);
	CHECK(policy_match_addr(p, 0x01020304, 6, 80) == NULL);
	CHECK(policy_match_addr(p, 0x01020304, 0, 0) == NULL); /* ICMP: no port */
	char *j = sbn_policy_json(p);
	if (j && !strstr(j, "github.com:22\"]"))
		fprintf(stderr, "json: %s\n", j);
	CHECK(j && !strcmp(j, "{\"default\":\"deny\",\"allow_out\":[\"10.0.0.0/8\",\"1.2.3.4:443\","
			      "\"*.PyPI.org\",\"github.com:22\"],\"deny_out\":[\"10.9.0.0/16\","
			      "\"evil.pypi.org\"]}"));
	free(j);
	struct sbn_policy *q = sbn_policy_dup(p);
	CHECK(q && q->n == p->n && !q->default_allow);
	sbn_policy_free(q);
	/* The limit. */
	struct sbn_policy *big = sbn_policy_new(true);
	for (int i = 0; i < SBN_POLICY_MAX; i++)
		CHECK(add(big, true, "10.0.0.0/8") == 0);
	CHECK(add(big, true, "10.0.0.0/8") == -E2BIG);
	sbn_policy_free(big);
	sbn_policy_free(p);
	return failed;
}
