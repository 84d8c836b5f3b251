/* testutil.h — the CHECK macro shared by C unit tests: on failure print the
 * expression and location and exit 1. */
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
