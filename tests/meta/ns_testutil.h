/* ns_testutil.h — what the tests of the meta engine share (test_meta_ns,
 * test_meta_opid, tests/replication/test_chainmap). */
#pragma once
#include <stdio.h>
#include "meta/ns.h"
#include "tests/testutil.h"

/* Opens the engine on dir or fails the test with RocksDB's reason. */
static inline struct ns *test_ns_open(const char *dir)
{
	char why[256];
	struct ns *ns = NULL;
	int r = ns_open(dir, &ns, why, sizeof(why));

	if (r < 0)
		fprintf(stderr, "ns_open %s: %s\n", dir, why);
	CHECK(r == 0);
	return ns;
}
