/* test_agent_proto.c — unit tests of the agent protocol codec: header
 * validation, EXEC round trip with argv/env, limits, truncated input. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/agent/proto.h"
#include "tests/testutil.h"

static void test_header(void)
{
	uint8_t h[AG_HDR_SIZE];
	struct ag_hdr d;
	ag_hdr_encode(AG_T_EXEC, 7, 100, h);
	EXPECT(ag_hdr_decode(h, &d) == 0 && d.type == AG_T_EXEC && d.id == 7 && d.len == 100);
	EXPECT(h[0] == 'S' && h[1] == 'A' && h[2] == 'G' && h[3] == 'T');
	h[4] = AG_MAJOR + 1;
	EXPECT(ag_hdr_decode(h, &d) == -EPROTONOSUPPORT);
	h[4] = AG_MAJOR;
	h[5] = 99; /* newer minor: served */
	EXPECT(ag_hdr_decode(h, &d) == 0);
	ag_hdr_encode(AG_T_EXEC, 7, AG_MAX_PAYLOAD + 1, h);
	EXPECT(ag_hdr_decode(h, &d) == -EMSGSIZE);
	h[0] ^= 1;
	EXPECT(ag_hdr_decode(h, &d) == -EPROTO);
}

static void test_exec_roundtrip(void)
{
	char *argv[] = {"/bin/echo", "a b", "", NULL};
	char *env[] = {"A=1", "PATH=/bin", NULL};
	struct ag_exec_req q = {.flags = AG_EXEC_F_STDIN,
				.uid = 5,
				.gid = 6,
				.timeout_ms = 1000,
				.output_cap = 1234,
				.cwd = "/tmp",
				.user = "",
				.argc = 3,
				.envc = 2,
				.argv = argv,
				.env = env};
	struct ag_wr w;
	ag_wr_init(&w);
	size_t off = ag_wr_begin(&w, AG_T_EXEC, 1);
	ag_exec_encode(&w, &q);
	EXPECT(ag_wr_end(&w, off) == 0);
	struct ag_hdr h;
	EXPECT(ag_hdr_decode(w.data, &h) == 0 && h.len == w.len - AG_HDR_SIZE);
	struct ag_exec_req *d = NULL;
	EXPECT(ag_exec_decode(w.data + AG_HDR_SIZE, h.len, &d) == 0);
	if (d) {
		EXPECT(d->argc == 3 && !strcmp(d->argv[1], "a b") && !strcmp(d->argv[2], ""));
		EXPECT(d->argv[3] == NULL && d->env[2] == NULL && !strcmp(d->env[1], "PATH=/bin"));
		EXPECT(!strcmp(d->cwd, "/tmp") && d->uid == 5 && d->output_cap == 1234);
		free(d);
	}
	/* Every truncation is refused cleanly. */
	for (size_t n = 0; n < h.len; n++) {
		d = NULL;
		EXPECT(ag_exec_decode(w.data + AG_HDR_SIZE, n, &d) < 0 && !d);
	}
	ag_wr_done(&w);
}

static void test_limits(void)
{
	struct ag_wr w;
	ag_wr_init(&w);
	for (int i = 0; i < 4; i++)
		ag_wr_u32(&w, 0);
	ag_wr_u64(&w, 0);
	ag_wr_str(&w, "");
	ag_wr_str(&w, "");
	ag_wr_u32(&w, 0); /* argc 0 */
	ag_wr_u32(&w, 0);
	struct ag_exec_req *d = NULL;
	EXPECT(ag_exec_decode(w.data, w.len, &d) == -EINVAL);
	w.len -= 8;
	ag_wr_u32(&w, AG_MAX_ARGS + 1);
	EXPECT(ag_exec_decode(w.data, w.len, &d) == -EBADMSG);
	ag_wr_done(&w);

	/* A string with a NUL inside is refused. */
	ag_wr_init(&w);
	ag_wr_blob(&w, "a\0b", 3);
	struct ag_rd r;
	ag_rd_init(&r, w.data, w.len);
	EXPECT(ag_rd_strdup(&r, 100) == NULL && r.err == -EBADMSG);
	ag_wr_done(&w);

	/* A frame over the limit is dropped by ag_wr_end. */
	ag_wr_init(&w);
	size_t off = ag_wr_begin(&w, AG_T_WRITE, 1);
	void *big = calloc(1, AG_MAX_PAYLOAD + 1);
	ag_wr_bytes(&w, big, AG_MAX_PAYLOAD + 1);
	EXPECT(ag_wr_end(&w, off) == -EMSGSIZE && w.len == 0);
	free(big);
	ag_wr_done(&w);
}

static void test_exit(void)
{
	struct ag_exit x = {.exit_code = -1,
			    .signo = 9,
			    .flags = AG_EXIT_F_TRUNCATED,
			    .stdout_bytes = 1ull << 40,
			    .stderr_bytes = 3,
			    .duration_us = 5};
	struct ag_exit y;
	struct ag_wr w;
	ag_wr_init(&w);
	ag_exit_encode(&w, &x);
	EXPECT(ag_exit_decode(w.data, w.len, &y) == 0);
	EXPECT(y.exit_code == -1 && y.signo == 9 && y.stdout_bytes == 1ull << 40 && y.flags == 2);
	EXPECT(ag_exit_decode(w.data, w.len - 1, &y) == -EBADMSG);
	ag_wr_done(&w);
}

/* EXECS entries: a round trip, the cmd limit, a bad state. */
static void test_exec_info(void)
{
	static struct ag_exec_info e = {.id = 0x80000003,
					.pid = 9,
					.state = AG_EXEC_ENDED,
					.held = 1,
					.age_us = 1234,
					.cmd = "sleep 3"},
				   d;
	struct ag_wr w;
	struct ag_rd r;
	ag_wr_init(&w);
	ag_exec_info_encode(&w, &e);
	ag_rd_init(&r, w.data, w.len);
	EXPECT(ag_exec_info_decode(&r, &d) == 0 && d.id == e.id && d.pid == 9 &&
	       d.state == AG_EXEC_ENDED && d.held == 1 && d.age_us == 1234 &&
	       !strcmp(d.cmd, "sleep 3"));
	w.data[8] = 7; /* state */
	ag_rd_init(&r, w.data, w.len);
	EXPECT(ag_exec_info_decode(&r, &d) == -EBADMSG);
	ag_wr_done(&w);
	static char long_cmd[AG_MAX_CMD + 2];
	memset(long_cmd, 'x', AG_MAX_CMD + 1);
	ag_wr_init(&w);
	ag_wr_u32(&w, 1);
	ag_wr_u32(&w, 2);
	ag_wr_u8(&w, AG_EXEC_RUNNING);
	ag_wr_u8(&w, 0);
	ag_wr_u64(&w, 0);
	ag_wr_str(&w, long_cmd); /* over AG_MAX_CMD */
	ag_rd_init(&r, w.data, w.len);
	EXPECT(ag_exec_info_decode(&r, &d) == -EBADMSG);
	ag_wr_done(&w);
}

int main(void)
{
	test_header();
	test_exec_info();
	test_exec_roundtrip();
	test_limits();
	test_exit();
	return test_result("sandbox_proto");
}
