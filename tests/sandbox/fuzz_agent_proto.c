/* fuzz_agent_proto.c — libFuzzer target for the agent protocol decoders
 * (sandbox/agent/proto.c): frame headers, EXEC requests, EXIT reports, START
 * requests, stat records, EXECS entries and the generic reader, as the agent and the host apply
 * them to bytes from the other side. */
#include <stdlib.h>
#include <string.h>

#include "sandbox/agent/proto.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static void walk_frames(const uint8_t *data, size_t size)
{
	while (size >= AG_HDR_SIZE) {
		struct ag_hdr h;
		if (ag_hdr_decode(data, &h) < 0)
			return;
		data += AG_HDR_SIZE;
		size -= AG_HDR_SIZE;
		size_t n = h.len < size ? h.len : size;
		struct ag_exec_req *q = NULL;
		if (ag_exec_decode(data, n, &q) == 0) {
			for (uint32_t i = 0; i < q->argc; i++)
				if (!q->argv[i] || strlen(q->argv[i]) > AG_MAX_PAYLOAD)
					abort();
			if (q->argv[q->argc] || q->env[q->envc])
				abort();
			free(q);
		}
		struct ag_exit x;
		ag_exit_decode(data, n, &x);
		struct ag_start_req st_req;
		if (ag_start_decode(data, n, &st_req) == 0 &&
		    strlen(st_req.hostname) >= sizeof(st_req.hostname))
			abort();
		struct ag_rd r;
		struct ag_stat st;
		static struct ag_exec_info info;
		ag_rd_init(&r, data, n);
		ag_rd_u32(&r); /* an EXECS reply: status, count, entries */
		for (uint32_t i = ag_rd_u32(&r); i && ag_exec_info_decode(&r, &info) == 0; i--)
			if (strlen(info.cmd) > AG_MAX_CMD ||
			    (info.state != AG_EXEC_RUNNING && info.state != AG_EXEC_ENDED))
				abort();
		ag_rd_init(&r, data, n);
		ag_stat_decode(&r, &st);
		free(ag_rd_strdup(&r, AG_MAX_PATH));
		uint32_t bl;
		ag_rd_blob(&r, AG_MAX_DATA, &bl);
		data += n;
		size -= n;
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	walk_frames(data, size);
	/* Whatever decodes must re-encode to something that decodes again. */
	struct ag_exec_req *q = NULL;
	if (ag_exec_decode(data, size, &q) == 0) {
		struct ag_wr w;
		struct ag_exec_req *q2 = NULL;
		ag_wr_init(&w);
		ag_exec_encode(&w, q);
		if (!w.err && ag_exec_decode(w.data, w.len, &q2) != 0)
			abort();
		if (q2 &&
		    (q2->argc != q->argc || q2->envc != q->envc || strcmp(q2->argv[0], q->argv[0])))
			abort();
		free(q2);
		ag_wr_done(&w);
		free(q);
	}
	return 0;
}
