/* test_chainmap.c — the replication half of strata-meta's cluster map
 * (meta/chainmap.c), driven through the engine API on a temporary store:
 * chain formation once expect_nodes registered, distinct nodes per chain,
 * rotated heads, failure (offline, moved to the end, version bump), return
 * (waiting -> syncing -> serving through ns_sync_done, stale completion
 * refused), the last server of a dead chain, a replacement target filling a
 * lost replica, and lease expiry.
 *
 * Chain tables per replication factor (chainmap.c form_chains, tables.c):
 *   - 5 nodes: one table per factor 1..5, chains of r targets on r distinct
 *     nodes, no target in two chains, heads of a factor rotating, the root
 *     on the default factor;
 *   - a directory's factor (setattr STRATA_SET_REPLICAS): inherited by new
 *     files and directories, -EINVAL outside 1..5, -ENOTDIR on a file,
 *     -ERANGE for a factor the cluster has no table of;
 *   - the default factor first spans every node (--replicas 1, three nodes
 *     of one target: three chains of 1, no other factor);
 *   - one node: only factor 1, whatever --replicas says;
 *   - a node failure degrades the chains of every factor on it, none leaves
 *     its table; the last server of a one-replica chain serves again when it
 *     returns, the others resync;
 *   - a store written before tables had factors (no factor byte in table
 *     records, no want in chain records) opens with its table's factor
 *     derived from its chains. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "fs/layout.h"
#include "meta/ns-internal.h"
#include "tests/testutil.h"
#include "tests/meta/ns_testutil.h"

#define ROOT STRATA_ROOT_INO

static struct ns *open_opts(const char *dir, uint32_t replicas, uint32_t expect)
{
	struct ns *ns = test_ns_open(dir);
	CHECK_EQ(ns_set_cluster_opts(ns, 3000, replicas, expect), 0);
	return ns;
}

/* Registers node `port` with n (<= 8) targets of ids tids (NULL: new ones;
 * else the ids are filled in). Returns the node id. */
static uint32_t reg(struct ns *ns, int port, int n, uint32_t *tids)
{
	struct mgmt_target_info t[8] = {0};
	char addr[32];
	uint32_t node = 0;
	snprintf(addr, sizeof(addr), "10.0.0.%d:7000", port);
	for (int i = 0; i < n; i++) {
		t[i].target_id = tids ? tids[i] : 0;
		snprintf(t[i].path, sizeof(t[i].path), "/n%d/t%d", port, i);
	}
	CHECK_EQ(ns_register(ns, &node, addr, t, n), 0);
	for (int i = 0; tids && i < n; i++)
		tids[i] = t[i].target_id;
	return node;
}

static void routing(struct ns *ns, struct strata_routing *rt)
{
	strata_routing_done(rt);
	CHECK_EQ(ns_routing(ns, rt), 0);
}

static const struct strata_chain *chain_with(const struct strata_routing *rt, uint32_t t)
{
	for (uint32_t i = 0; i < rt->nchains; i++)
		if (chain_pos(&rt->chains[i], t) >= 0)
			return &rt->chains[i];
	return NULL;
}

static void test_form_and_fail(const char *dir)
{
	struct ns *ns = test_ns_open(dir);
	struct strata_routing rt = {0};
	uint32_t t1[3] = {0}, t2[3] = {0}, t3[3] = {0};
	CHECK_EQ(ns_set_cluster_opts(ns, 3000, 3, 3), 0);
	CHECK_EQ(ns_set_cluster_opts(ns, 3000, 6, 3), -EINVAL);
	reg(ns, 1, 3, t1);
	reg(ns, 2, 3, t2);
	routing(ns, &rt);
	CHECK_EQ(rt.nchains, 0); /* waits for the third node */
	uint32_t n3 = reg(ns, 3, 3, t3);
	routing(ns, &rt);
	/* 9 targets: factor 3 first, then one chain of 1 and one of 2, then
	 * another of 3; a table per factor */
	CHECK_EQ(rt.nchains, 4);
	CHECK_EQ(rt.ntables, 3);
	CHECK_EQ(rt.lease_ms, 3000);
	uint32_t heads[2], nr3 = 0;
	for (uint32_t i = 0; i < rt.nchains; i++) {
		const struct strata_chain *c = &rt.chains[i];
		if (c->want != 3)
			continue;
		CHECK(nr3 < 2);
		CHECK_EQ(c->ntargets, 3);
		CHECK_EQ(chain_nserving(&rt, c), 3);
		uint32_t nodes[3];
		for (int j = 0; j < 3; j++)
			nodes[j] = routing_target(&rt, c->targets[j])->node_id;
		CHECK(nodes[0] != nodes[1] && nodes[1] != nodes[2] && nodes[0] != nodes[2]);
		heads[nr3++] = nodes[0];
	}
	CHECK_EQ(nr3, 2);
	CHECK(heads[0] != heads[1]); /* rotated */

	/* node 3 fails: its targets go offline at the end of their chains */
	const struct strata_chain *c = chain_with(&rt, t3[0]);
	uint32_t cid = c->chain_id, ver = c->version;
	CHECK_EQ(ns_fail_target_node(ns, t3[0]), 0);
	routing(ns, &rt);
	c = routing_chain(&rt, cid);
	CHECK_EQ(c->version, ver + 1);
	CHECK_EQ(c->targets[2], t3[0]);
	CHECK_EQ(routing_state(&rt, t3[0]), TARGET_OFFLINE);
	CHECK_EQ(routing_state(&rt, t3[1]), TARGET_OFFLINE);
	CHECK_EQ(routing_state(&rt, t3[2]), TARGET_OFFLINE);
	CHECK_EQ(chain_nserving(&rt, c), 2);

	/* it comes back (heartbeat): waiting -> syncing (first waiting) */
	struct mgmt_target_info hb[3] = {{t3[0], "", 1, 1}, {t3[1], "", 1, 1}, {t3[2], "", 1, 1}};
	CHECK_EQ(ns_heartbeat(ns, n3, hb, 3), 0);
	routing(ns, &rt);
	c = routing_chain(&rt, cid);
	CHECK_EQ(routing_state(&rt, t3[0]), TARGET_SYNCING);
	CHECK_EQ(c->targets[2], t3[0]);
	/* completion at an old chain version is refused; at the current one it serves */
	struct mgmt_sync s = {cid, c->version - 1, t3[0], 5, 5, 1};
	CHECK_EQ(ns_sync_done(ns, &s), -ESTALE);
	s.chain_ver = c->version;
	CHECK_EQ(ns_sync_done(ns, &s), 0);
	routing(ns, &rt);
	CHECK_EQ(routing_state(&rt, t3[0]), TARGET_SERVING);

	/* a restarted serving node resyncs before serving again */
	reg(ns, 3, 3, t3);
	routing(ns, &rt);
	CHECK(routing_state(&rt, t3[0]) == TARGET_SYNCING ||
	      routing_state(&rt, t3[0]) == TARGET_WAITING);

	/* the admin view */
	struct mgmt_cluster mc;
	CHECK_EQ(ns_cluster(ns, &mc), 0);
	CHECK_EQ(mc.nnodes, 3);
	CHECK_EQ(mc.ntargets, 9);
	CHECK_EQ(mc.replicas, 3);
	mgmt_cluster_done(&mc);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* Every replica fails; only the last server may serve again directly. */
static void test_all_down(const char *dir)
{
	struct ns *ns = test_ns_open(dir);
	struct strata_routing rt = {0};
	uint32_t t[3][1] = {{0}}, n[3];
	CHECK_EQ(ns_set_cluster_opts(ns, 3000, 3, 3), 0);
	for (int i = 0; i < 3; i++)
		n[i] = reg(ns, 10 + i, 1, t[i]);
	routing(ns, &rt);
	CHECK_EQ(rt.nchains, 1);
	uint32_t cid = rt.chains[0].chain_id;
	uint32_t order[3];
	memcpy(order, rt.chains[0].targets, sizeof(order));
	/* tail, then middle, then head fail: the head served last */
	for (int k = 2; k >= 0; k--)
		CHECK_EQ(ns_fail_target_node(ns, order[k]), 0);
	routing(ns, &rt);
	const struct strata_chain *c = routing_chain(&rt, cid);
	CHECK_EQ(chain_nserving(&rt, c), 0);
	CHECK_EQ(c->targets[0], order[0]);
	/* the tail comes back first: it must wait */
	int tail_node = -1, head_node = -1;
	for (int i = 0; i < 3; i++) {
		if (t[i][0] == order[2])
			tail_node = i;
		if (t[i][0] == order[0])
			head_node = i;
	}
	struct mgmt_target_info hb = {order[2], "", 1, 1};
	CHECK_EQ(ns_heartbeat(ns, n[tail_node], &hb, 1), 0);
	routing(ns, &rt);
	CHECK_EQ(routing_state(&rt, order[2]), TARGET_WAITING);
	CHECK_EQ(chain_nserving(&rt, routing_chain(&rt, cid)), 0);
	/* the last server comes back: it serves, the waiting one syncs */
	hb.target_id = order[0];
	CHECK_EQ(ns_heartbeat(ns, n[head_node], &hb, 1), 0);
	routing(ns, &rt);
	CHECK_EQ(routing_state(&rt, order[0]), TARGET_SERVING);
	CHECK_EQ(routing_state(&rt, order[2]), TARGET_SYNCING);
	CHECK_EQ(routing_chain(&rt, cid)->targets[0], order[0]);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* An empty replacement target on the failed node fills the lost replica;
 * a node that stops heartbeating loses its lease. */
static void test_replace_and_lease(const char *dir)
{
	struct ns *ns = test_ns_open(dir);
	struct strata_routing rt = {0};
	uint32_t t[3][1] = {{0}}, n[3];
	CHECK_EQ(ns_set_cluster_opts(ns, 300, 3, 3), 0);
	for (int i = 0; i < 3; i++)
		n[i] = reg(ns, 20 + i, 1, t[i]);
	CHECK_EQ(ns_fail_target_node(ns, t[1][0]), 0);
	/* node 2 returns with a new, empty disk: a fresh target id */
	struct mgmt_target_info nt = {0, "/new", 1, 1};
	uint32_t node = n[1];
	CHECK_EQ(ns_register(ns, &node, "10.0.0.21:7000", &nt, 1), 0);
	routing(ns, &rt);
	const struct strata_chain *c = chain_with(&rt, nt.target_id);
	if (!c)
		for (uint32_t i = 0; i < rt.nchains; i++)
			fprintf(stderr, "chain %u: %u targets [%u %u %u] new %u\n",
				rt.chains[i].chain_id, rt.chains[i].ntargets,
				rt.chains[i].targets[0], rt.chains[i].targets[1],
				rt.chains[i].targets[2], nt.target_id);
	CHECK(c != NULL);
	CHECK_EQ(c->ntargets, 3);
	CHECK_EQ(chain_pos(c, t[1][0]), -1); /* the lost disk left the chain */
	CHECK_EQ(routing_state(&rt, nt.target_id), TARGET_SYNCING);
	/* leases: nobody heartbeats for longer than 300 ms */
	usleep(400 * 1000);
	CHECK(ns_lease_check(ns) >= 1);
	routing(ns, &rt);
	c = chain_with(&rt, nt.target_id);
	CHECK_EQ(chain_nserving(&rt, c), 0);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* ---- tables per replication factor ------------------------------------ */

/* The newest table of factor r in rt (0: none). */
static uint32_t table_of(const struct strata_routing *rt, uint8_t r)
{
	uint32_t id = 0;
	for (uint32_t i = 0; i < rt->ntables; i++)
		if (rt->tables[i].replicas == r && rt->tables[i].table_id > id)
			id = rt->tables[i].table_id;
	return id;
}

static uint8_t factor_of(const struct strata_routing *rt, uint32_t table_id)
{
	const struct strata_chain_table *t = routing_table(rt, table_id);
	return t ? t->replicas : 0;
}

/* Every table's chains have its factor, r targets on r nodes; no target is
 * in two chains. Returns the bitmask of factors with a table. */
static unsigned check_tables(const struct strata_routing *rt)
{
	unsigned factors = 0;
	for (uint32_t i = 0; i < rt->ntables; i++) {
		const struct strata_chain_table *t = &rt->tables[i];
		CHECK(t->replicas >= 1 && t->replicas <= STRATA_MAX_REPLICAS);
		factors |= 1u << t->replicas;
		for (uint32_t j = 0; j < t->nchains; j++) {
			const struct strata_chain *c = routing_chain(rt, t->chain_ids[j]);
			CHECK(c != NULL);
			CHECK_EQ(c->want, t->replicas);
			CHECK_EQ(c->ntargets, t->replicas);
			for (int a = 0; a < c->ntargets; a++)
				for (int b = a + 1; b < c->ntargets; b++)
					CHECK(routing_target(rt, c->targets[a])->node_id !=
					      routing_target(rt, c->targets[b])->node_id);
		}
	}
	for (uint32_t i = 0; i < rt->nchains; i++)
		for (uint32_t k = i + 1; k < rt->nchains; k++)
			for (int a = 0; a < rt->chains[i].ntargets; a++)
				CHECK_EQ(chain_pos(&rt->chains[k], rt->chains[i].targets[a]), -1);
	return factors;
}

static strata_ino_t mkdir_in(struct ns *ns, strata_ino_t parent, const char *name)
{
	struct strata_attr a;
	CHECK_EQ(ns_mkdir(ns, NULL, parent, name, 040755, 0, 0, &a), 0);
	return a.ino;
}

static struct strata_layout file_layout(struct ns *ns, strata_ino_t parent, const char *name)
{
	struct strata_attr a;
	CHECK_EQ(ns_mknod(ns, NULL, parent, name, 0100644, 0, 0, 0, &a), 0);
	return a.layout;
}

static int set_replicas(struct ns *ns, strata_ino_t ino, uint32_t r)
{
	struct strata_setattr sa = {.valid = STRATA_SET_REPLICAS, .replicas = r};
	struct strata_attr a;
	return ns_setattr(ns, ino, &sa, &a);
}

/* Five nodes of four targets, --replicas 3: factors 1..5 all get a table. */
static void test_five_nodes(const char *dir)
{
	struct ns *ns = open_opts(dir, 3, 5);
	struct strata_routing rt = {0};
	for (int i = 1; i <= 5; i++)
		reg(ns, 40 + i, 4, NULL);
	routing(ns, &rt);
	CHECK_EQ(check_tables(&rt), 0x3eu); /* 1..5 */
	/* 20 targets: 3 + 1 + 2 + 4 + 5 = 15, then one more chain of 3 */
	const struct strata_chain_table *t3 = routing_table(&rt, table_of(&rt, 3));
	CHECK_EQ(t3->nchains, 2);
	uint32_t h0 =
	    routing_target(&rt, routing_chain(&rt, t3->chain_ids[0])->targets[0])->node_id;
	uint32_t h1 =
	    routing_target(&rt, routing_chain(&rt, t3->chain_ids[1])->targets[0])->node_id;
	CHECK(h0 != h1); /* heads rotate within a factor */

	/* the root and what it holds: the default factor */
	struct strata_attr a;
	CHECK_EQ(ns_getattr(ns, ROOT, &a), 0);
	CHECK_EQ(factor_of(&rt, a.layout.table_id), 3);
	CHECK_EQ(factor_of(&rt, file_layout(ns, ROOT, "f").table_id), 3);

	/* a directory of factor 1 and one of factor 5 */
	strata_ino_t d1 = mkdir_in(ns, ROOT, "one"), d5 = mkdir_in(ns, ROOT, "five");
	CHECK_EQ(set_replicas(ns, d1, 1), 0);
	CHECK_EQ(set_replicas(ns, d5, 5), 0);
	CHECK_EQ(factor_of(&rt, file_layout(ns, d1, "f").table_id), 1);
	CHECK_EQ(factor_of(&rt, file_layout(ns, d5, "f").table_id), 5);
	strata_ino_t sub = mkdir_in(ns, d1, "sub"); /* inherited by subdirectories */
	CHECK_EQ(factor_of(&rt, file_layout(ns, sub, "f").table_id), 1);
	/* with the chunk size in the same call */
	struct strata_setattr sa = {.valid = STRATA_SET_REPLICAS | STRATA_SET_LAYOUT,
				    .replicas = 2,
				    .chunk_size = 4u << 20};
	CHECK_EQ(ns_setattr(ns, sub, &sa, &a), 0);
	CHECK_EQ(factor_of(&rt, a.layout.table_id), 2);
	struct strata_layout l = file_layout(ns, sub, "g");
	CHECK_EQ(factor_of(&rt, l.table_id), 2);
	CHECK_EQ(l.chunk_size, 4u << 20);
	/* errors */
	CHECK_EQ(set_replicas(ns, d1, 0), -EINVAL);
	CHECK_EQ(set_replicas(ns, d1, 6), -EINVAL);
	CHECK_EQ(ns_lookup(ns, d1, "f", &a), 0);
	CHECK_EQ(set_replicas(ns, a.ino, 1), -ENOTDIR);
	CHECK_EQ(set_replicas(ns, 999999, 1), -ENOENT);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* --replicas 1 on three nodes of one target: the default factor's round over
 * the nodes takes every target (no other factor gets one). */
static void test_round(const char *dir)
{
	struct ns *ns = open_opts(dir, 1, 3);
	struct strata_routing rt = {0};
	for (int i = 0; i < 3; i++)
		reg(ns, 60 + i, 1, NULL);
	routing(ns, &rt);
	CHECK_EQ(check_tables(&rt), 1u << 1);
	CHECK_EQ(rt.nchains, 3);
	CHECK_EQ(rt.ntables, 1);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* One node: chains of one replica only, whatever --replicas asks. */
static void test_one_node(const char *dir)
{
	struct ns *ns = open_opts(dir, 3, 1);
	struct strata_routing rt = {0};
	strata_ino_t early = mkdir_in(ns, ROOT, "early"); /* before any table */
	CHECK_EQ(set_replicas(ns, early, 1), -ERANGE);
	reg(ns, 50, 2, NULL);
	routing(ns, &rt);
	CHECK_EQ(check_tables(&rt), 1u << 1);
	CHECK_EQ(rt.nchains, 2);
	CHECK_EQ(set_replicas(ns, early, 2), -ERANGE);
	CHECK_EQ(set_replicas(ns, early, 1), 0);
	CHECK_EQ(factor_of(&rt, file_layout(ns, ROOT, "f").table_id), 1);
	/* a second node joins later: its targets form chains among themselves,
	 * a newer table of factor 1 that new files use at once */
	uint32_t old = table_of(&rt, 1);
	reg(ns, 51, 1, NULL);
	routing(ns, &rt);
	CHECK_EQ(check_tables(&rt), 1u << 1);
	CHECK(table_of(&rt, 1) > old);
	CHECK_EQ(file_layout(ns, early, "g").table_id, table_of(&rt, 1));
	CHECK_EQ(routing_table(&rt, old)->nchains, 2); /* the old table keeps its chains */
	strata_routing_done(&rt);
	ns_close(ns);
}

/* Three nodes of two targets: a chain of 3, of 1 and of 2. The node holding
 * the one-replica chain fails and returns. */
static void test_failure(const char *dir)
{
	struct ns *ns = open_opts(dir, 3, 3);
	struct strata_routing rt = {0};
	uint32_t tids[3][2] = {{0}}, nodes[3];
	for (int i = 0; i < 3; i++)
		nodes[i] = reg(ns, 20 + i, 2, tids[i]);
	routing(ns, &rt);
	CHECK_EQ(check_tables(&rt), 0xeu); /* 1, 2, 3 */
	CHECK_EQ(rt.nchains, 3);
	uint32_t solo_chain = routing_table(&rt, table_of(&rt, 1))->chain_ids[0];
	uint32_t solo = routing_chain(&rt, solo_chain)->targets[0];
	int k = 0;
	while (routing_target(&rt, solo)->node_id != nodes[k])
		k++;
	uint32_t ntables = rt.ntables;
	CHECK_EQ(ns_fail_target_node(ns, solo), 0);
	routing(ns, &rt);
	CHECK_EQ(rt.ntables, ntables);
	CHECK_EQ(check_tables(&rt), 0xeu);	    /* no chain left its table */
	for (uint32_t i = 0; i < rt.nchains; i++) { /* degraded where the node was */
		const struct strata_chain *c = &rt.chains[i];
		bool hit = chain_pos(c, tids[k][0]) >= 0 || chain_pos(c, tids[k][1]) >= 0;
		CHECK_EQ(chain_nserving(&rt, c), c->want - hit);
	}
	/* the node returns (heartbeat): the lone replica serves at once, the
	 * other chains' replicas resync */
	struct mgmt_target_info hb[2] = {{tids[k][0], "", 1, 1}, {tids[k][1], "", 1, 1}};
	CHECK_EQ(ns_heartbeat(ns, nodes[k], hb, 2), 0);
	routing(ns, &rt);
	CHECK_EQ(routing_state(&rt, solo), TARGET_SERVING);
	uint32_t other = tids[k][0] == solo ? tids[k][1] : tids[k][0];
	CHECK_EQ(routing_state(&rt, other), TARGET_SYNCING);
	const struct strata_chain *c = chain_with(&rt, other);
	struct mgmt_sync s = {c->chain_id, c->version, other, 1, 1, 1};
	CHECK_EQ(ns_sync_done(ns, &s), 0);
	routing(ns, &rt);
	CHECK_EQ(routing_state(&rt, other), TARGET_SERVING);
	/* a completion naming a chain the target is not in */
	s.chain_id = solo_chain;
	CHECK_EQ(ns_sync_done(ns, &s), -ENOENT);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* ---- a store of the single-table code ----------------------------------- */

struct strip {
	struct kv_batch *b;
	uint8_t tag;
};

/* Drops the last byte of every record with tag (the appended factor/want). */
static int strip_one(void *ctx, const uint8_t *k, size_t kl, const uint8_t *v, size_t vl)
{
	struct strip *s = ctx;
	kv_batch_put(s->b, k, kl, v, vl - 1);
	return 0;
}

static void make_legacy(const char *dir)
{
	struct kv *kv = NULL;
	char why[256];
	CHECK_EQ(kv_open(dir, &kv, why, sizeof(why)), 0);
	struct strip s = {kv_batch_new(), K_TABLE};
	CHECK_EQ(kv_scan(kv, &s.tag, 1, NULL, 0, strip_one, &s), 0);
	s.tag = K_CHAIN;
	CHECK_EQ(kv_scan(kv, &s.tag, 1, NULL, 0, strip_one, &s), 0);
	CHECK_EQ(kv_write(kv, s.b), 0);
	kv_batch_free(s.b);
	kv_close(kv);
}

static void test_legacy(const char *dir)
{
	struct ns *ns = open_opts(dir, 3, 3);
	struct strata_routing rt = {0};
	for (int i = 0; i < 3; i++)
		reg(ns, 30 + i, 1, NULL);
	strata_ino_t d = mkdir_in(ns, ROOT, "d");
	ns_close(ns);
	make_legacy(dir);
	ns = open_opts(dir, 3, 3);
	routing(ns, &rt);
	CHECK_EQ(rt.ntables, 1);
	CHECK_EQ(rt.tables[0].replicas, 3); /* from its chains */
	CHECK_EQ(rt.chains[0].want, 3);
	CHECK_EQ(file_layout(ns, d, "f").table_id, rt.tables[0].table_id);
	CHECK_EQ(set_replicas(ns, d, 3), 0);
	CHECK_EQ(set_replicas(ns, d, 1), -ERANGE);
	strata_routing_done(&rt);
	ns_close(ns);
}

int main(void)
{
	/* each test on a store of its own */
	static void (*const tests[])(const char *) = {
	    test_form_and_fail, test_all_down, test_replace_and_lease, test_five_nodes,
	    test_round,		test_one_node, test_failure,	       test_legacy,
	};
	char base[] = "/tmp/test_chainmap.XXXXXX", dir[300], cmd[400];
	CHECK(mkdtemp(base) != NULL);
	for (size_t i = 0; i < sizeof(tests) / sizeof(tests[0]); i++) {
		snprintf(dir, sizeof(dir), "%s/%zu", base, i);
		tests[i](dir);
	}
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	CHECK_EQ(system(cmd), 0);
	fprintf(stderr, "test_chainmap: ok\n");
	return 0;
}
