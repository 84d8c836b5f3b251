/* testkey.h — the cluster key of a C test (fs/rpc_auth.h).
 *
 * ctest gives every test $STRATA_KEY (tests/CMakeLists.txt); daemons a test
 * starts inherit it. test_key_setup makes it this process's credential with
 * role; without it (a test run by hand) a fixed key serves tests whose
 * servers run in the same process. */
#pragma once
#include <stdio.h>
#include <string.h>
#include "fs/rpc_auth.h"

static inline void test_key_setup(uint8_t role)
{
	struct strata_err e = {0};
	if (rpc_auth_setup(NULL, role, &e) == 0)
		return;
	fprintf(stderr, "note: %s; using a fixed key\n", strata_err_msg(&e));
	struct rpc_cred c = {.role = role};
	memset(c.key.b, 0x5a, sizeof(c.key.b));
	rpc_auth_set_default(&c);
}
