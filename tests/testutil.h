/* testutil.h — the check macros shared by C unit tests.
 *
 * CHECK and CHECK_EQ print the expression and its location and exit 1 at
 * the first failure. EXPECT prints the same, counts the failure in
 * test_failures and goes on, for tests that report every failing check of a
 * run; such a test ends with `return test_result("name");`. */
#pragma once
#include <stdio.h>
#include <stdlib.h>

#define CHECK(expr)                                                                                \
	do {                                                                                       \
		if (!(expr)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);   \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)
#define CHECK_EQ(a, b)                                                                             \
	do {                                                                                       \
		long long _a = (long long)(a), _b = (long long)(b);                                \
		if (_a != _b) {                                                                    \
			fprintf(stderr, "%s:%d: %s == %s failed: %lld != %lld\n", __FILE__,        \
				__LINE__, #a, #b, _a, _b);                                         \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static int test_failures __attribute__((unused));
#define EXPECT(expr)                                                                               \
	do {                                                                                       \
		if (!(expr)) {                                                                     \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #expr);   \
			test_failures++;                                                           \
		}                                                                                  \
	} while (0)

/* Returns the exit status of a test that used EXPECT: 0, or 1 after
 * printing how many checks failed. */
static inline int test_result(const char *name)
{
	if (!test_failures)
		return 0;
	fprintf(stderr, "%s: %d check(s) failed\n", name, test_failures);
	return 1;
}
