/* test_chunk_rpc.c — the chunk client (fs/chunk_client.c) against the
 * chunkserver's request handler (chunkserver/service.c) over real TCP, in one
 * process and without strata-meta: the routing table is pinned with
 * chunk_client_set_routing. Covers 1 MiB writes and reads into the caller's
 * buffer, partial writes, short reads, holes, stat, truncate, remove_file
 * over two targets, sync, unknown targets (-ENXIO), malformed requests
 * (-EBADMSG), corruption (-EIO) and concurrent partial writes to one chunk. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/chunk_client.h"
#include "fs/chunk_proto.h"
#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_store.h"
#include "fs/log.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "chunkserver/service.h"
#include "tests/testutil.h"
#include "chunkserver/uring_pool.h"
#include "tests/fs/testkey.h"

#define MiB (1u << 20)

struct world {
	char dir[64];
	struct uring_pool *pool;
	struct cs_target targets[2];
	struct cs_service svc;
	struct rpc_server *srv;
	struct chunk_client *cc;
	struct strata_layout layout;
	char addr[64];
};

static void routing_for(struct world *w, uint32_t first_target_id, struct chunk_client *cc)
{
	struct strata_target t[2] = {{.target_id = first_target_id}, {.target_id = 22}};
	snprintf(t[0].addr, sizeof(t[0].addr), "%s", w->addr);
	snprintf(t[1].addr, sizeof(t[1].addr), "%s", w->addr);
	struct strata_chain c[2] = {
	    {.chain_id = 1, .version = 1, .ntargets = 1, .targets = {first_target_id}},
	    {.chain_id = 2, .version = 1, .ntargets = 1, .targets = {22}},
	};
	uint32_t ids[2] = {1, 2};
	struct strata_chain_table tb = {.table_id = 1, .nchains = 2, .chain_ids = ids};
	struct strata_routing r = {.version = 1,
				   .ntargets = 2,
				   .nchains = 2,
				   .ntables = 1,
				   .targets = t,
				   .chains = c,
				   .tables = &tb};
	CHECK_EQ(chunk_client_set_routing(cc, &r), 0);
}

static void world_up(struct world *w)
{
	snprintf(w->dir, sizeof(w->dir), "/tmp/strata-chunk-rpc-XXXXXX");
	CHECK(mkdtemp(w->dir));
	CHECK_EQ(uring_pool_new(5, 64, &w->pool), 0);
	for (int i = 0; i < 2; i++) {
		char p[128];
		snprintf(p, sizeof(p), "%s/t%d", w->dir, i);
		w->targets[i].target_id = 21 + i;
		struct chunk_store_opts o = {.target_id = 21 + i};
		CHECK_EQ(chunk_store_open(p, w->pool, &o, &w->targets[i].store), 0);
	}
	w->svc = (struct cs_service){w->targets, 2};
	struct rpc_server_opts so = {.name = "cs-test",
				     .listen = "127.0.0.1:0",
				     .workers = 4,
				     .handler = cs_handle,
				     .ctx = &w->svc};
	CHECK_EQ(rpc_server_start(&so, &w->srv), 0);
	snprintf(w->addr, sizeof(w->addr), "127.0.0.1:%u", rpc_server_port(w->srv));
	w->cc = chunk_client_new(NULL, NULL);
	CHECK(w->cc);
	routing_for(w, 21, w->cc);
	w->layout = (struct strata_layout){.chunk_size = 4 * MiB, .table_id = 1, .stripe_seed = 0};
}

static void world_down(struct world *w)
{
	chunk_client_free(w->cc);
	rpc_server_free(w->srv);
	for (int i = 0; i < 2; i++)
		chunk_store_free(w->targets[i].store);
	uring_pool_free(w->pool);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", w->dir);
	CHECK_EQ(system(cmd), 0);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 31 + seed + (i >> 9));
}

static void test_io(struct world *w)
{
	uint8_t *a = malloc(MiB), *b = malloc(2 * MiB);
	CHECK(a && b);
	fill(a, MiB, 1);
	struct chunk_id id = {.ino = 77, .index = 0};
	CHECK_EQ(chunk_read(w->cc, &w->layout, id, 0, 4096, b), 0); /* hole */
	CHECK_EQ(chunk_write(w->cc, &w->layout, id, 0, MiB, a, 0), 0);
	memset(b, 0, MiB);
	CHECK_EQ(chunk_read(w->cc, &w->layout, id, 0, MiB, b), MiB);
	CHECK(memcmp(a, b, MiB) == 0);
	CHECK_EQ(chunk_read(w->cc, &w->layout, id, MiB - 10, 4096, b), 10); /* short */
	CHECK(memcmp(b, a + MiB - 10, 10) == 0);

	fill(b, 5000, 2); /* partial, synced */
	CHECK_EQ(chunk_write(w->cc, &w->layout, id, 100000, 5000, b, CHUNK_WRITE_SYNC), 0);
	memcpy(a + 100000, b, 5000);
	CHECK_EQ(chunk_read(w->cc, &w->layout, id, 99000, 7000, b), 7000);
	CHECK(memcmp(b, a + 99000, 7000) == 0);

	struct chunk_stat st;
	CHECK_EQ(chunk_stat(w->cc, &w->layout, id, &st), 0);
	CHECK_EQ(st.version, 2);
	CHECK_EQ(st.length, MiB);
	CHECK_EQ(chunk_truncate(w->cc, &w->layout, id, 1000), 0);
	CHECK_EQ(chunk_stat(w->cc, &w->layout, id, &st), 0);
	CHECK_EQ(st.length, 1000);
	CHECK_EQ(chunk_read(w->cc, &w->layout, id, 0, MiB, b), 1000);
	CHECK(memcmp(a, b, 1000) == 0);
	struct chunk_id missing = {78, 0};
	CHECK_EQ(chunk_stat(w->cc, &w->layout, missing, &st), -ENOENT);
	CHECK_EQ(chunk_truncate(w->cc, &w->layout, missing, 10), 0);

	/* chunks 0..3 alternate between the two targets */
	for (uint32_t i = 0; i < 4; i++) {
		struct chunk_id c = {79, i};
		CHECK_EQ(chunk_write(w->cc, &w->layout, c, 0, 100, a, 0), 0);
	}
	struct chunk_meta m;
	CHECK_EQ(chunk_store_stat(w->targets[0].store, 79, 0, &m), 0);
	CHECK_EQ(chunk_store_stat(w->targets[1].store, 79, 1, &m), 0);
	CHECK_EQ(chunk_store_stat(w->targets[0].store, 79, 1, &m), -ENOENT);
	CHECK_EQ(chunk_remove_file(w->cc, &w->layout, 79, 1), 0);
	for (uint32_t i = 0; i < 4; i++) {
		struct chunk_id c = {79, i};
		CHECK_EQ(chunk_stat(w->cc, &w->layout, c, &st), i == 0 ? 0 : -ENOENT);
	}
	CHECK_EQ(chunk_remove_file(w->cc, &w->layout, 79, 0), 0);
	CHECK_EQ(chunk_stat(w->cc, &w->layout, (struct chunk_id){79, 0}, &st), -ENOENT);
	CHECK_EQ(chunk_sync(w->cc, &w->layout), 0);

	/* a chunk larger than one message: 6 MiB in a 8 MiB chunk */
	struct strata_layout big = w->layout;
	big.chunk_size = 8 * MiB;
	uint8_t *c6 = malloc(6 * MiB), *r6 = malloc(6 * MiB);
	CHECK(c6 && r6);
	fill(c6, 6 * MiB, 5);
	CHECK_EQ(chunk_write(w->cc, &big, (struct chunk_id){80, 0}, 0, 6 * MiB, c6, 0), 0);
	CHECK_EQ(chunk_read(w->cc, &big, (struct chunk_id){80, 0}, 0, 6 * MiB, r6), 6 * MiB);
	CHECK(memcmp(c6, r6, 6 * MiB) == 0);
	/* past the layout's chunk size: refused */
	CHECK_EQ(chunk_write(w->cc, &w->layout, id, 4 * MiB - 1, 2, a, 0), -EBADMSG);
	free(c6);
	free(r6);
	free(a);
	free(b);
}

static void test_errors(struct world *w)
{
	/* a target this server does not have */
	struct chunk_client *cc = chunk_client_new(NULL, NULL);
	CHECK(cc);
	routing_for(w, 99, cc);
	uint8_t buf[16];
	CHECK_EQ(chunk_read(cc, &w->layout, (struct chunk_id){1, 0}, 0, 16, buf), -ENXIO);
	chunk_client_free(cc);
	/* a layout whose table does not exist */
	struct strata_layout nolayout = {.chunk_size = MiB, .table_id = 9};
	CHECK_EQ(chunk_read(w->cc, &nolayout, (struct chunk_id){1, 0}, 0, 16, buf), -ENXIO);

	/* malformed and unknown requests */
	struct rpc_client *rc = rpc_client_new(w->addr, NULL);
	CHECK(rc);
	struct wbuf req;
	wbuf_init(&req);
	wbuf_put_u32(&req, 21);
	struct rpc_reply rep = {0};
	CHECK_EQ(rpc_call(rc, MSG_CHUNK_READ, &req, 0, &rep), -EBADMSG);
	rpc_reply_done(&rep);
	CHECK_EQ(rpc_call(rc, 0x02ff, &req, 0, &rep), -EOPNOTSUPP);
	rpc_reply_done(&rep);
	wbuf_reset(&req);
	CHECK_EQ(rpc_call(rc, MSG_CHUNK_PING, &req, 0, &rep), 0);
	rpc_reply_done(&rep);
	wbuf_done(&req);
	rpc_client_free(rc);

	/* corruption on disk comes back as EIO */
	uint8_t data[8192];
	fill(data, sizeof(data), 3);
	struct chunk_id id = {0x123, 0};
	CHECK_EQ(chunk_write(w->cc, &w->layout, id, 0, sizeof(data), data, 0), 0);
	char p[256];
	snprintf(p, sizeof(p), "%s/t0/chunks/23/%016llx/%08x", w->dir, 0x123ull, 0u);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	CHECK_EQ(pwrite(fd, "X", 1, CHUNK_V2_DATA_OFF + 100), 1);
	close(fd);
	CHECK_EQ(chunk_read(w->cc, &w->layout, id, 0, 10, data), -EIO);
}

struct writer {
	struct world *w;
	int n;
};

/* Each thread writes its own 4 KiB slots of one chunk (16 slots per thread). */
static void *write_slots(void *arg)
{
	struct writer *wr = arg;
	uint8_t buf[4096];
	for (int i = 0; i < 16; i++) {
		int slot = i * 4 + wr->n;
		memset(buf, slot + 1, sizeof(buf));
		int r = chunk_write(wr->w->cc, &wr->w->layout, (struct chunk_id){90, 0},
				    (uint32_t)slot * 4096, 4096, buf, 0);
		if (r != 0)
			return (void *)1;
	}
	return NULL;
}

static void test_concurrent(struct world *w)
{
	pthread_t th[4];
	struct writer wr[4];
	for (int i = 0; i < 4; i++) {
		wr[i] = (struct writer){w, i};
		CHECK_EQ(pthread_create(&th[i], NULL, write_slots, &wr[i]), 0);
	}
	for (int i = 0; i < 4; i++) {
		void *ret;
		pthread_join(th[i], &ret);
		CHECK(ret == NULL);
	}
	uint8_t *buf = malloc(64 * 4096);
	CHECK(buf);
	CHECK_EQ(chunk_read(w->cc, &w->layout, (struct chunk_id){90, 0}, 0, 64 * 4096, buf),
		 64 * 4096);
	for (int s = 0; s < 64; s++)
		for (int j = 0; j < 4096; j++)
			CHECK_EQ(buf[s * 4096 + j], s + 1);
	struct chunk_stat st;
	CHECK_EQ(chunk_stat(w->cc, &w->layout, (struct chunk_id){90, 0}, &st), 0);
	CHECK_EQ(st.version, 64);
	free(buf);
}

int main(void)
{
	test_key_setup(RPC_ROLE_ADMIN);
	log_init("test_chunk_rpc", LOG_LVL_WARN);
	struct world w = {0};
	world_up(&w);
	test_io(&w);
	test_errors(&w);
	test_concurrent(&w);
	world_down(&w);
	return 0;
}
