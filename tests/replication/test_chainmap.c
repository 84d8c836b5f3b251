/* test_chainmap.c — the replication half of strata-meta's cluster map
 * (meta/chainmap.c), driven through the engine API on a temporary store:
 * chain formation once expect_nodes registered, distinct nodes per chain,
 * rotated heads, failure (offline, moved to the end, version bump), return
 * (waiting -> syncing -> serving through ns_sync_done, stale completion
 * refused), the last server of a dead chain, a replacement target filling a
 * lost replica, and lease expiry. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "layout.h"
#include "ns.h"
#include "../testutil.h"

static struct ns *open_ns(const char *dir)
{
	char why[256];
	struct ns *ns = NULL;
	int r = ns_open(dir, &ns, why, sizeof(why));
	if (r < 0)
		fprintf(stderr, "ns_open %s: %s\n", dir, why);
	CHECK(r == 0);
	return ns;
}

/* Registers node `port` with n targets (ids filled in tids). */
static uint32_t reg(struct ns *ns, int port, int n, uint32_t *tids)
{
	struct mgmt_target_info t[4] = { 0 };
	char addr[32];
	uint32_t node = 0;
	snprintf(addr, sizeof(addr), "10.0.0.%d:7000", port);
	for (int i = 0; i < n; i++) {
		t[i].target_id = tids[i];
		snprintf(t[i].path, sizeof(t[i].path), "/n%d/t%d", port, i);
	}
	CHECK_EQ(ns_register(ns, &node, addr, t, n), 0);
	for (int i = 0; i < n; i++)
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
	struct ns *ns = open_ns(dir);
	struct strata_routing rt = { 0 };
	uint32_t t1[2] = { 0 }, t2[2] = { 0 }, t3[2] = { 0 };
	CHECK_EQ(ns_set_cluster_opts(ns, 3000, 3, 3), 0);
	CHECK_EQ(ns_set_cluster_opts(ns, 3000, 6, 3), -EINVAL);
	reg(ns, 1, 2, t1);
	reg(ns, 2, 2, t2);
	routing(ns, &rt);
	CHECK_EQ(rt.nchains, 0); /* waits for the third node */
	uint32_t n3 = reg(ns, 3, 2, t3);
	routing(ns, &rt);
	CHECK_EQ(rt.nchains, 2);
	CHECK_EQ(rt.ntables, 1);
	CHECK_EQ(rt.lease_ms, 3000);
	uint32_t heads[2];
	for (int i = 0; i < 2; i++) {
		const struct strata_chain *c = &rt.chains[i];
		CHECK_EQ(c->ntargets, 3);
		CHECK_EQ(chain_nserving(&rt, c), 3);
		uint32_t nodes[3];
		for (int j = 0; j < 3; j++)
			nodes[j] = routing_target(&rt, c->targets[j])->node_id;
		CHECK(nodes[0] != nodes[1] && nodes[1] != nodes[2] && nodes[0] != nodes[2]);
		heads[i] = nodes[0];
	}
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
	CHECK_EQ(chain_nserving(&rt, c), 2);

	/* it comes back (heartbeat): waiting -> syncing (first waiting) */
	struct mgmt_target_info hb[2] = { { t3[0], "", 1, 1 }, { t3[1], "", 1, 1 } };
	CHECK_EQ(ns_heartbeat(ns, n3, hb, 2), 0);
	routing(ns, &rt);
	c = routing_chain(&rt, cid);
	CHECK_EQ(routing_state(&rt, t3[0]), TARGET_SYNCING);
	CHECK_EQ(c->targets[2], t3[0]);
	/* completion at an old chain version is refused; at the current one it serves */
	struct mgmt_sync s = { cid, c->version - 1, t3[0], 5, 5, 1 };
	CHECK_EQ(ns_sync_done(ns, &s), -ESTALE);
	s.chain_ver = c->version;
	CHECK_EQ(ns_sync_done(ns, &s), 0);
	routing(ns, &rt);
	CHECK_EQ(routing_state(&rt, t3[0]), TARGET_SERVING);

	/* a restarted serving node resyncs before serving again */
	reg(ns, 3, 2, t3);
	routing(ns, &rt);
	CHECK(routing_state(&rt, t3[0]) == TARGET_SYNCING ||
	      routing_state(&rt, t3[0]) == TARGET_WAITING);

	/* the admin view */
	struct mgmt_cluster mc;
	CHECK_EQ(ns_cluster(ns, &mc), 0);
	CHECK_EQ(mc.nnodes, 3);
	CHECK_EQ(mc.ntargets, 6);
	CHECK_EQ(mc.replicas, 3);
	mgmt_cluster_done(&mc);
	strata_routing_done(&rt);
	ns_close(ns);
}

/* Every replica fails; only the last server may serve again directly. */
static void test_all_down(const char *dir)
{
	struct ns *ns = open_ns(dir);
	struct strata_routing rt = { 0 };
	uint32_t t[3][1] = { { 0 } }, n[3];
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
	struct mgmt_target_info hb = { order[2], "", 1, 1 };
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
	struct ns *ns = open_ns(dir);
	struct strata_routing rt = { 0 };
	uint32_t t[3][1] = { { 0 } }, n[3];
	CHECK_EQ(ns_set_cluster_opts(ns, 300, 3, 3), 0);
	for (int i = 0; i < 3; i++)
		n[i] = reg(ns, 20 + i, 1, t[i]);
	CHECK_EQ(ns_fail_target_node(ns, t[1][0]), 0);
	/* node 2 returns with a new, empty disk: a fresh target id */
	struct mgmt_target_info nt = { 0, "/new", 1, 1 };
	uint32_t node = n[1];
	CHECK_EQ(ns_register(ns, &node, "10.0.0.21:7000", &nt, 1), 0);
	routing(ns, &rt);
	const struct strata_chain *c = chain_with(&rt, nt.target_id);
	if (!c)
		for (uint32_t i = 0; i < rt.nchains; i++)
			fprintf(stderr, "chain %u: %u targets [%u %u %u] new %u\n", rt.chains[i].chain_id,
				rt.chains[i].ntargets, rt.chains[i].targets[0], rt.chains[i].targets[1],
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

int main(void)
{
	char base[] = "/tmp/test_chainmap.XXXXXX", dir[300], cmd[400];
	CHECK(mkdtemp(base) != NULL);
	snprintf(dir, sizeof(dir), "%s/a", base);
	test_form_and_fail(dir);
	snprintf(dir, sizeof(dir), "%s/b", base);
	test_all_down(dir);
	snprintf(dir, sizeof(dir), "%s/c", base);
	test_replace_and_lease(dir);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	CHECK_EQ(system(cmd), 0);
	fprintf(stderr, "test_chainmap: ok\n");
	return 0;
}
