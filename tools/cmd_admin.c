/* cmd_admin.c — `strata admin nodes | targets | chains | verify | layout`:
 * the cluster map as strata-meta holds it (mgmt_cluster, mgmt_routing), a
 * replica comparison, and directory layouts.
 *
 *   nodes    each chunkserver node: address, alive (within the lease), time
 *            since its last heartbeat; then each sandbox node (sandboxd's
 *            lease, fs/sbnode_proto.h): API address, live or lost, its
 *            sandboxes, cpu and memory admitted against its budgets, images
 *   targets  each target: node, chain, state (serving/syncing/waiting/
 *            offline), space, resync progress (chunks compared / to compare)
 *   chains   each chain: version, replication factor, targets head first
 *            with their states; then the chain tables, each with its
 *            replication factor (one table per factor: meta/tables.c)
 *   verify   for every chain, lists the chunks of every serving target
 *            (MSG_CHUNK_LIST) and compares version, length and checksum of
 *            each chunk on each of them with MSG_CHUNK_STAT; exit 0 when
 *            all replicas are equal, 1 when not (the differences listed);
 *            --deep: every replica reads and checks every block of every
 *            chunk (LIST with CHUNK_LF_VERIFY) and the lists must match
 *   layout get PATH
 *            the layout of PATH: replication factor, chain table, chunk size
 *            (of a directory: what new files and directories in it get)
 *   layout set PATH [--replicas N] [--chunk-size S]
 *            sets a directory's replication factor (1..5; strata-meta must
 *            have a chain table of that factor) and/or chunk size (a power
 *            of two, 64K..64M); only files and directories created after it
 *            use them (a file's layout is fixed at creation)
 *   PATH is a path in the strata namespace ("/" is its root); a path under
 *   the cluster's mount point ($STRATA_MOUNT, else the home's) is taken
 *   relative to the mount. Symlinks are not followed; ".." is refused.
 *
 * --json prints one object per verb. The cluster is found through --meta
 * HOST:PORT, else $STRATA_META, else the home (--home / $STRATA_HOME). */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "fs/chunk_proto.h"
#include "tools/chunks.h"
#include "fs/cleanup.h"
#include "fs/json.h"
#include "tools/cli.h"
#include "fs/layout.h"
#include "fs/meta_client.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "fs/sbnode_proto.h"

#define VERB "admin"

static const char *state_name(uint8_t s)
{
	static const char *n[] = {"serving", "syncing", "waiting", "offline"};
	return s < 4 ? n[s] : "unknown";
}

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata admin [--home DIR | --meta HOST:PORT] [--key FILE] [--json] "
		   "nodes|targets|chains|usage|verify [--deep]\n"
		   "       strata admin [...] layout get PATH\n"
		   "       strata admin [...] layout set PATH [--replicas N] [--chunk-size S]\n"
		   "\n"
		   "  nodes       chunkserver nodes, liveness and last heartbeat; sandbox nodes,\n"
		   "              their lease and load (sandboxes, cpu, memory, images)\n"
		   "  targets     targets with chain, state, space and resync progress\n"
		   "  usage       space and inodes of the cluster, and space per node\n"
		   "  chains      chains (version, replicas, targets head first) and chain\n"
		   "              tables with their replication factor\n"
		   "  verify      compare every chunk across the serving replicas of each chain\n"
		   "              (exit 1 if any differ)\n"
		   "  layout get  replication factor, chain table and chunk size of PATH\n"
		   "  layout set  a directory's replication factor (1..5) and/or chunk size\n"
		   "              (64K..64M, power of two) for files created in it from now on\n"
		   "\n"
		   "PATH is a path in the strata namespace (/ = its root), or a path under the\n"
		   "cluster's mount point ($STRATA_MOUNT or the home's mount).\n");
}

/* ---- nodes, targets ---------------------------------------------------- */

static void nodes_json(const struct mgmt_cluster *c, const struct sbnode_table *t)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "lease_ms", c->lease_ms);
	jw_kint(&w, "replicas", c->replicas);
	jw_kint(&w, "expect_nodes", c->expect_nodes);
	jw_key(&w, "nodes");
	jw_arr(&w);
	for (uint32_t i = 0; i < c->nnodes; i++) {
		const struct mgmt_node_info *n = &c->nodes[i];
		jw_obj(&w);
		jw_kint(&w, "node", n->node_id);
		jw_kstr(&w, "addr", n->addr);
		jw_kbool(&w, "alive", n->alive);
		jw_kint(&w, "age_ms", n->age_ms);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	cli_sbnodes_json(&w, t);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static int show_nodes(struct meta_client *mc, const struct mgmt_cluster *c, bool json)
{
	struct sbnode_table t = {0};
	int r = mgmt_sbnodes(mc, &t);
	if (r < 0 && r != -EOPNOTSUPP) /* an older strata-meta has no sandbox nodes */
		cli_err(VERB, "cannot read the sandbox nodes: %s", rpc_strerror(r));
	if (json) {
		nodes_json(c, &t);
		sbnode_table_done(&t);
		return r < 0 && r != -EOPNOTSUPP;
	}
	printf("%-6s %-24s %-6s %s\n", "NODE", "ADDRESS", "ALIVE", "LAST-HEARTBEAT");
	for (uint32_t i = 0; i < c->nnodes; i++) {
		const struct mgmt_node_info *n = &c->nodes[i];
		printf("%-6u %-24s %-6s %lld ms ago\n", n->node_id, n->addr,
		       n->alive ? "yes" : "NO", (long long)n->age_ms);
	}
	cli_sbnodes_print(&t);
	sbnode_table_done(&t);
	return r < 0 && r != -EOPNOTSUPP;
}

static void targets_json(const struct mgmt_cluster *c)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_key(&w, "targets");
	jw_arr(&w);
	for (uint32_t i = 0; i < c->ntargets; i++) {
		const struct mgmt_target_detail *t = &c->targets[i];
		jw_obj(&w);
		jw_kint(&w, "target", t->target_id);
		jw_kint(&w, "node", t->node_id);
		jw_kint(&w, "chain", t->chain_id);
		jw_kstr(&w, "state", state_name(t->state));
		jw_kstr(&w, "path", t->path);
		cli_jw_ku64(&w, "total_bytes", t->total_bytes);
		cli_jw_ku64(&w, "free_bytes", t->free_bytes);
		cli_jw_ku64(&w, "sync_done", t->sync_done);
		cli_jw_ku64(&w, "sync_total", t->sync_total);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static int show_targets(const struct mgmt_cluster *c, bool json)
{
	if (json) {
		targets_json(c);
		return 0;
	}
	printf("%-7s %-5s %-6s %-8s %-18s %s\n", "TARGET", "NODE", "CHAIN", "STATE",
	       "FREE/TOTAL MiB", "RESYNC");
	for (uint32_t i = 0; i < c->ntargets; i++) {
		const struct mgmt_target_detail *t = &c->targets[i];
		char sz[32], rs[40] = "-";
		snprintf(sz, sizeof(sz), "%llu/%llu", (unsigned long long)(t->free_bytes >> 20),
			 (unsigned long long)(t->total_bytes >> 20));
		if (t->sync_total)
			snprintf(rs, sizeof(rs), "%llu/%llu chunks",
				 (unsigned long long)t->sync_done,
				 (unsigned long long)t->sync_total);
		printf("%-7u %-5u %-6u %-8s %-18s %s\n", t->target_id, t->node_id, t->chain_id,
		       state_name(t->state), sz, rs);
	}
	return 0;
}

/* ---- usage ---------------------------------------------------------------- */

static double pct(uint64_t part, uint64_t whole)
{
	return whole ? 100.0 * (double)part / (double)whole : 0.0;
}

/* One node's targets added up. */
static void node_space(const struct mgmt_cluster *c, uint32_t node_id, uint32_t *ret_n,
		       uint64_t *ret_total, uint64_t *ret_free)
{
	*ret_n = 0;
	*ret_total = *ret_free = 0;
	for (uint32_t i = 0; i < c->ntargets; i++)
		if (c->targets[i].node_id == node_id) {
			(*ret_n)++;
			*ret_total += c->targets[i].total_bytes;
			*ret_free += c->targets[i].free_bytes;
		}
}

static void usage_json(const struct mgmt_cluster *c, const struct strata_statfs *st)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	cli_jw_ku64(&w, "total_bytes", st->total_bytes);
	cli_jw_ku64(&w, "used_bytes", st->total_bytes - st->free_bytes);
	cli_jw_ku64(&w, "avail_bytes", st->avail_bytes);
	cli_jw_ku64(&w, "total_inodes", st->total_inodes);
	cli_jw_ku64(&w, "used_inodes", st->used_inodes);
	jw_key(&w, "nodes");
	jw_arr(&w);
	for (uint32_t i = 0; i < c->nnodes; i++) {
		const struct mgmt_node_info *n = &c->nodes[i];
		uint32_t nt;
		uint64_t total, free;
		node_space(c, n->node_id, &nt, &total, &free);
		jw_obj(&w);
		jw_kint(&w, "node", n->node_id);
		jw_kstr(&w, "addr", n->addr);
		jw_kbool(&w, "alive", n->alive);
		jw_kint(&w, "targets", nt);
		cli_jw_ku64(&w, "total_bytes", total);
		cli_jw_ku64(&w, "used_bytes", total - free);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

/* The cluster's space and inodes (statfs: a disk shared by several targets
 * counted once), then each node's targets as the chunkservers last reported
 * them (raw space: every replica counts). */
static int show_usage(struct meta_client *mc, const struct mgmt_cluster *c, bool json)
{
	struct strata_statfs st;
	int r = meta_statfs(mc, &st);
	if (r < 0) {
		cli_err(VERB, "cannot read the cluster's usage: %s", rpc_strerror(r));
		return 1;
	}
	if (json) {
		usage_json(c, &st);
		return 0;
	}
	uint64_t used = st.total_bytes - st.free_bytes;
	printf("cluster: %llu MiB used of %llu MiB (%.1f%%), %llu MiB available; "
	       "%llu inodes used\n\n%-6s %-24s %-7s %-12s %-12s %s\n",
	       (unsigned long long)(used >> 20), (unsigned long long)(st.total_bytes >> 20),
	       pct(used, st.total_bytes), (unsigned long long)(st.avail_bytes >> 20),
	       (unsigned long long)st.used_inodes, "NODE", "ADDRESS", "TARGETS", "USED MiB",
	       "TOTAL MiB", "USE%");
	for (uint32_t i = 0; i < c->nnodes; i++) {
		const struct mgmt_node_info *n = &c->nodes[i];
		uint32_t nt;
		uint64_t total, free;
		node_space(c, n->node_id, &nt, &total, &free);
		printf("%-6u %-24s %-7u %-12llu %-12llu %.1f%s\n", n->node_id, n->addr, nt,
		       (unsigned long long)((total - free) >> 20),
		       (unsigned long long)(total >> 20), pct(total - free, total),
		       n->alive ? "" : "  (not alive: last report)");
	}
	return 0;
}

/* ---- chains --------------------------------------------------------------- */

static void chain_json(struct jw *w, const struct strata_routing *rt, const struct strata_chain *ch)
{
	jw_obj(w);
	jw_kint(w, "chain", ch->chain_id);
	jw_kint(w, "version", ch->version);
	jw_kint(w, "replicas", ch->ntargets);
	jw_kint(w, "want", ch->want);
	jw_kint(w, "serving", chain_nserving(rt, ch));
	jw_key(w, "targets");
	jw_arr(w);
	for (int j = 0; j < ch->ntargets; j++) {
		const struct strata_target *t = routing_target(rt, ch->targets[j]);
		jw_obj(w);
		jw_kint(w, "target", ch->targets[j]);
		jw_kint(w, "node", t ? t->node_id : 0);
		jw_kstr(w, "state", state_name(routing_state(rt, ch->targets[j])));
		jw_kstr(w, "addr", t ? t->addr : "");
		jw_obj_end(w);
	}
	jw_arr_end(w);
	jw_obj_end(w);
}

static void chains_json(const struct strata_routing *rt)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	cli_jw_ku64(&w, "routing_version", rt->version);
	jw_key(&w, "chains");
	jw_arr(&w);
	for (uint32_t i = 0; i < rt->nchains; i++)
		chain_json(&w, rt, &rt->chains[i]);
	jw_arr_end(&w);
	jw_key(&w, "tables");
	jw_arr(&w);
	for (uint32_t i = 0; i < rt->ntables; i++) {
		const struct strata_chain_table *t = &rt->tables[i];
		jw_obj(&w);
		jw_kint(&w, "table", t->table_id);
		jw_kint(&w, "replicas", t->replicas);
		jw_key(&w, "chains");
		jw_arr(&w);
		for (uint32_t j = 0; j < t->nchains; j++)
			jw_int(&w, t->chain_ids[j]);
		jw_arr_end(&w);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static int show_chains(const struct strata_routing *rt, bool json)
{
	if (json) {
		chains_json(rt);
		return 0;
	}
	printf("%-6s %-8s %-9s %s\n", "CHAIN", "VERSION", "REPLICAS", "TARGETS (head first)");
	for (uint32_t i = 0; i < rt->nchains; i++) {
		const struct strata_chain *ch = &rt->chains[i];
		printf("%-6u %-8u %-9u ", ch->chain_id, ch->version, ch->ntargets);
		for (int j = 0; j < ch->ntargets; j++) {
			const struct strata_target *t = routing_target(rt, ch->targets[j]);
			printf("%s%u@n%u:%s", j ? " -> " : "", ch->targets[j], t ? t->node_id : 0,
			       state_name(routing_state(rt, ch->targets[j])));
		}
		printf("\n");
	}
	printf("\n%-6s %-9s %s\n", "TABLE", "REPLICAS", "CHAINS");
	for (uint32_t i = 0; i < rt->ntables; i++) {
		const struct strata_chain_table *t = &rt->tables[i];
		printf("%-6u %-9u ", t->table_id, t->replicas);
		for (uint32_t j = 0; j < t->nchains; j++)
			printf("%s%u", j ? " " : "", t->chain_ids[j]);
		printf("\n");
	}
	return 0;
}

/* ---- verify ---------------------------------------------------------------- */

static bool same_ent(const struct chunk_list_ent *a, const struct chunk_list_ent *b)
{
	return a->ino == b->ino && a->index == b->index && a->st.version == b->st.version &&
	       a->st.length == b->st.length && a->st.checksum == b->st.checksum;
}

/* One side of a --deep DIFF line: what target tid listed (version 0: a
 * chunk that failed its checks). */
static void print_deep_ent(uint32_t tid, const struct chunk_list_ent *e)
{
	if (!e) {
		printf(" target %u: none", tid);
		return;
	}
	printf(" target %u: ino %llu index %u v%llu len %u xxh3 %016llx", tid,
	       (unsigned long long)e->ino, e->index, (unsigned long long)e->st.version,
	       e->st.length, (unsigned long long)e->st.checksum);
}

/* --deep: every replica lists its chunks reading every block (a damaged
 * chunk lists as version 0); the lists must be identical. */
static int verify_deep(const struct strata_target *const *tg, int nt, const struct strata_chain *ch,
		       uint64_t *ret_chunks, uint64_t *ret_diffs)
{
	_cleanup_free_ struct chunk_list_ent *base = NULL;
	size_t nb = 0;
	int r = tg[0] ? cli_chunk_list_all(tg[0], ch, true, &base, &nb) : -ENXIO;
	if (r < 0)
		return r;
	*ret_chunks += nb;
	for (size_t i = 0; i < nb; i++)
		*ret_diffs += base[i].st.version == 0;
	for (int a = 1; a < nt; a++) {
		_cleanup_free_ struct chunk_list_ent *v = NULL;
		size_t n = 0;
		if ((r = tg[a] ? cli_chunk_list_all(tg[a], ch, true, &v, &n) : -ENXIO) < 0)
			return r;
		for (size_t i = 0; i < STRATA_MAX(n, nb); i++)
			if (i >= n || i >= nb || !same_ent(&v[i], &base[i])) {
				(*ret_diffs)++;
				printf("DIFF chain %u target %u entry %zu (ino %llu index %u)",
				       ch->chain_id, tg[a]->target_id, i,
				       (unsigned long long)(i < n ? v[i].ino : base[i].ino),
				       i < n ? v[i].index : base[i].index);
				print_deep_ent(tg[a]->target_id, i < n ? &v[i] : NULL);
				print_deep_ent(tg[0]->target_id, i < nb ? &base[i] : NULL);
				printf("\n");
			}
	}
	return 0;
}

/* Compares every chunk listed on any serving replica on all of them. */
static int verify_chain(const struct strata_routing *rt, const struct strata_chain *ch, bool json,
			bool deep, uint64_t *ret_chunks, uint64_t *ret_diffs)
{
	const struct strata_target *tg[STRATA_MAX_REPLICAS];
	int nt = 0;
	for (int j = 0; j < ch->ntargets; j++)
		if (routing_state(rt, ch->targets[j]) == TARGET_SERVING)
			tg[nt++] = routing_target(rt, ch->targets[j]);
	if (deep && nt > 0)
		return verify_deep(tg, nt, ch, ret_chunks, ret_diffs);
	for (int a = 0; a < nt; a++) {
		_cleanup_free_ struct chunk_list_ent *ents = NULL;
		size_t n = 0;
		int r = tg[a] ? cli_chunk_list_all(tg[a], ch, false, &ents, &n) : -ENXIO;
		if (r < 0)
			return r;
		for (size_t i = 0; i < n; i++) {
			struct chunk_stat st[STRATA_MAX_REPLICAS];
			bool differ = false;
			for (int b = 0; b < nt; b++) {
				if ((r = cli_chunk_stat(tg[b], ch, ents[i].ino, ents[i].index,
							&st[b])) < 0)
					return r;
				differ |= st[b].version != st[0].version ||
					  st[b].length != st[0].length ||
					  st[b].checksum != st[0].checksum;
			}
			*ret_chunks += a == 0;
			if (!differ || a > 0)
				continue;
			(*ret_diffs)++;
			if (!json)
				for (int b = 0; b < nt; b++)
					printf("DIFF chain %u ino %llu index %u target %u: v%llu "
					       "len %u "
					       "xxh3 %016llx\n",
					       ch->chain_id, (unsigned long long)ents[i].ino,
					       ents[i].index, tg[b]->target_id,
					       (unsigned long long)st[b].version, st[b].length,
					       (unsigned long long)st[b].checksum);
		}
	}
	return 0;
}

static int do_verify(const struct strata_routing *rt, bool json, bool deep)
{
	uint64_t chunks = 0, diffs = 0;
	for (uint32_t i = 0; i < rt->nchains; i++) {
		int r = verify_chain(rt, &rt->chains[i], json, deep, &chunks, &diffs);
		if (r < 0) {
			cli_err(VERB, "verify: chain %u: %s", rt->chains[i].chain_id,
				rpc_strerror(r));
			return 1;
		}
	}
	if (json) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kint(&w, "chains", rt->nchains);
		cli_jw_ku64(&w, "chunks", chunks);
		cli_jw_ku64(&w, "differences", diffs);
		jw_kbool(&w, "equal", !diffs);
		jw_obj_end(&w);
		cli_jw_print(&w);
	} else {
		printf("%u chain(s), %llu chunk(s) compared across serving replicas: %s\n",
		       rt->nchains, (unsigned long long)chunks,
		       diffs ? "REPLICAS DIFFER" : "all equal");
	}
	return diffs ? 1 : 0;
}

/* ---- layout ------------------------------------------------------------------ */

struct layout_args {
	const char *op, *path; /* op: "get" or "set" */
	char mount[CLI_PATH];  /* the cluster's mount point, or "" */
	int replicas;	       /* set: 0 = unchanged */
	uint32_t chunk_size;   /* set: 0 = unchanged */
};

/* Parses "4M", "64K", "1MiB", "65536" (binary units). Returns 0 or -EINVAL. */
static int parse_size(const char *s, uint32_t *ret)
{
	char *end;
	errno = 0;
	unsigned long long v = strtoull(s, &end, 10);
	int shift = *end == 'K' || *end == 'k' ? 10 : *end == 'M' || *end == 'm' ? 20 : 0;
	end += shift != 0;
	if (shift && (!strcmp(end, "iB") || !strcmp(end, "B")))
		end += strlen(end);
	if (errno || end == s || *end || v == 0 || v > (UINT32_MAX >> shift))
		return -EINVAL;
	*ret = (uint32_t)(v << shift);
	return 0;
}

/* PATH in the namespace: PATH itself, or relative to the mount it lies under. */
static const char *ns_path(const char *path, const char *mount)
{
	size_t n = strlen(mount);
	while (n > 1 && mount[n - 1] == '/')
		n--;
	if (n > 1 && !strncmp(path, mount, n) && (path[n] == '/' || !path[n]))
		return path[n] ? path + n : "/";
	return path;
}

/* Looks up an absolute namespace path component by component. */
static int walk(struct meta_client *mc, const char *path, struct strata_attr *ret)
{
	char name[STRATA_NAME_MAX + 1];
	if (path[0] != '/')
		return -EINVAL;
	int r = meta_getattr(mc, STRATA_ROOT_INO, ret);
	for (const char *p = path; r == 0 && *p;) {
		p += strspn(p, "/");
		size_t n = strcspn(p, "/");
		if (n > STRATA_NAME_MAX)
			return -ENAMETOOLONG;
		memcpy(name, p, n);
		name[n] = '\0';
		p += n;
		if (n == 0 || !strcmp(name, "."))
			continue;
		r = strcmp(name, "..") ? meta_lookup(mc, ret->ino, name, ret) : -EINVAL;
	}
	return r;
}

/* The table new entries of directory a get (the newest of its factor,
 * meta/tables.c); a file's own table. NULL: none yet. */
static const struct strata_chain_table *layout_table(const struct strata_routing *rt,
						     const struct strata_attr *a)
{
	const struct strata_chain_table *t = routing_table(rt, a->layout.table_id), *best = t;
	for (uint32_t i = 0; t && S_ISDIR(a->mode) && i < rt->ntables; i++)
		if (rt->tables[i].replicas == t->replicas &&
		    rt->tables[i].table_id > best->table_id)
			best = &rt->tables[i];
	return best;
}

static void print_layout(const char *path, const struct strata_attr *a,
			 const struct strata_routing *rt, bool json)
{
	const struct strata_chain_table *t = layout_table(rt, a);
	const char *kind = S_ISDIR(a->mode) ? "directory" : S_ISREG(a->mode) ? "file" : "other";
	if (json) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kstr(&w, "path", path);
		cli_jw_ku64(&w, "ino", a->ino);
		jw_kstr(&w, "type", kind);
		jw_kint(&w, "replicas", t ? t->replicas : 0);
		jw_kint(&w, "table", t ? t->table_id : 0);
		jw_kint(&w, "chains", t ? t->nchains : 0);
		jw_kint(&w, "chunk_size", a->layout.chunk_size);
		jw_obj_end(&w);
		cli_jw_print(&w);
		return;
	}
	printf("path:       %s (inode %llu, %s)\n", path, (unsigned long long)a->ino, kind);
	if (t)
		printf("replicas:   %u\ntable:      %u (%u chain%s)\n", t->replicas, t->table_id,
		       t->nchains, t->nchains == 1 ? "" : "s");
	else
		printf("replicas:   -\ntable:      none yet (new files get the default table)\n");
	printf("chunk size: %u KiB\n", a->layout.chunk_size >> 10);
}

/* "1 2 3": the factors strata-meta has tables of. */
static void factors(const struct strata_routing *rt, char *buf, size_t cap)
{
	size_t n = 0;
	buf[0] = '\0';
	for (unsigned r = 1; r <= STRATA_MAX_REPLICAS; r++)
		for (uint32_t i = 0; i < rt->ntables; i++)
			if (rt->tables[i].replicas == r) {
				n += (size_t)snprintf(buf + n, cap - n, "%s%u", n ? " " : "", r);
				break;
			}
}

static int layout_set_err(const struct layout_args *la, const struct strata_routing *rt, int r)
{
	char f[32];
	if (r == -ENOTDIR)
		cli_err(VERB, "%s: not a directory (a file's layout is fixed when it is created)",
			la->path);
	else if (r == -ERANGE) {
		factors(rt, f, sizeof(f));
		cli_err(VERB,
			"%s: no chain table with %d replicas (tables exist for: %s); a "
			"factor needs that many nodes with spare targets",
			la->path, la->replicas, f[0] ? f : "none");
	} else if (r == -EINVAL && la->chunk_size)
		cli_err(VERB, "--chunk-size must be a power of two from 64K to 64M");
	else if (r == -EPROTO)
		cli_err(VERB,
			"%s: strata-meta did not set the replication factor (a version "
			"without factors per directory?)",
			la->path);
	else
		cli_err(VERB, "%s: cannot set the layout: %s", la->path, rpc_strerror(r));
	return 1;
}

/* `set`: applies la's settings to the directory a (updated from the reply). */
static int layout_apply(struct meta_client *mc, const struct layout_args *la,
			const struct strata_routing *rt, struct strata_attr *a)
{
	struct strata_setattr sa = {.replicas = (uint32_t)la->replicas,
				    .chunk_size = la->chunk_size};
	sa.valid =
	    (la->replicas ? STRATA_SET_REPLICAS : 0) | (la->chunk_size ? STRATA_SET_LAYOUT : 0);
	int r = sa.valid ? meta_setattr(mc, a->ino, &sa, a) : 0;
	const struct strata_chain_table *t = layout_table(rt, a);
	if (r == 0 && la->replicas && (!t || t->replicas != la->replicas))
		return -EPROTO; /* a strata-meta from before factors ignores the request */
	return r;
}

static int do_layout(struct meta_client *mc, const struct layout_args *la, bool json)
{
	const char *path = ns_path(la->path, la->mount);
	struct strata_routing rt = {0};
	struct strata_attr a;
	int r = walk(mc, path, &a);
	if (r < 0) {
		cli_err(VERB, "%s: %s", la->path,
			r == -EINVAL ? "not an absolute path without '..'" : rpc_strerror(r));
		return 1;
	}
	if ((r = mgmt_routing(mc, &rt)) < 0) {
		cli_err(VERB, "cannot read the routing table: %s", rpc_strerror(r));
		return 1;
	}
	if ((r = layout_apply(mc, la, &rt, &a)) < 0)
		r = layout_set_err(la, &rt, r);
	else
		print_layout(path, &a, &rt, json);
	strata_routing_done(&rt);
	return r;
}

/* ---- entry ------------------------------------------------------------------- */

/* The cluster's mount point: $STRATA_MOUNT, else the home's (or ""). */
static void mount_of(const char *home, char *buf, size_t cap)
{
	struct cli_home h;
	buf[0] = '\0';
	if (getenv("STRATA_MOUNT"))
		snprintf(buf, cap, "%s", getenv("STRATA_MOUNT"));
	else if (cli_home_resolve(home, &h) == 0 && h.have_conf)
		snprintf(buf, cap, "%s", h.mount);
}

static int run(struct meta_client *mc, const char *what, bool json, bool deep,
	       const struct layout_args *la)
{
	struct mgmt_cluster c;
	struct strata_routing rt;
	int r;
	if (!strcmp(what, "layout"))
		return do_layout(mc, la, json);
	if (!strcmp(what, "nodes") || !strcmp(what, "targets") || !strcmp(what, "usage")) {
		if ((r = mgmt_cluster(mc, &c)) < 0) {
			cli_err(VERB, "cannot read the cluster map: %s", rpc_strerror(r));
			return 1;
		}
		r = !strcmp(what, "nodes")     ? show_nodes(mc, &c, json)
		    : !strcmp(what, "targets") ? show_targets(&c, json)
					       : show_usage(mc, &c, json);
		mgmt_cluster_done(&c);
		return r;
	}
	if ((r = mgmt_routing(mc, &rt)) < 0) {
		cli_err(VERB, "cannot read the routing table: %s", rpc_strerror(r));
		return 1;
	}
	r = !strcmp(what, "chains") ? show_chains(&rt, json) : do_verify(&rt, json, deep);
	strata_routing_done(&rt);
	return r;
}

/* The verb and its operands (args[0..n)); fills la for `layout`.
 * Returns the verb, or NULL for a usage error. */
static const char *parse_verb(int n, char **args, struct layout_args *la)
{
	static const char *const verbs[] = {"nodes", "targets", "chains", "verify", "usage"};
	const char *what = n > 0 ? args[0] : NULL;
	bool setting = la->replicas || la->chunk_size;
	if (what && !strcmp(what, "layout")) {
		if (n != 3 || (strcmp(args[1], "get") && strcmp(args[1], "set")))
			return NULL;
		la->op = args[1];
		la->path = args[2];
		return setting == !strcmp(la->op, "set") ? what : NULL;
	}
	for (size_t i = 0; what && !setting && n == 1 && i < sizeof(verbs) / sizeof(*verbs); i++)
		if (!strcmp(what, verbs[i]))
			return what;
	return NULL;
}

struct admin_args {
	bool deep;
	struct layout_args la;
};

/* --deep, --replicas N, --chunk-size S. */
static int admin_option(void *arg, int val, const char *value)
{
	struct admin_args *a = arg;

	if (val == 'd') {
		a->deep = true;
	} else if (val == 'r') {
		if (cli_parse_int(value, 1, STRATA_MAX_REPLICAS, &a->la.replicas) < 0) {
			cli_err(VERB, "--replicas must be 1..%d", STRATA_MAX_REPLICAS);
			return 2;
		}
	} else if (parse_size(value, &a->la.chunk_size) < 0) {
		cli_err(VERB, "--chunk-size: not a size (e.g. 1M, 64K): %s", value);
		return 2;
	}
	return 0;
}

int cmd_admin(int argc, char **argv)
{
	static const struct option own[] = {
	    {"deep", no_argument, NULL, 'd'},
	    {"replicas", required_argument, NULL, 'r'},
	    {"chunk-size", required_argument, NULL, 'c'},
	    {},
	};
	struct admin_args a = {0};
	struct cli_opts o;
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME | CLI_OPT_META | CLI_OPT_JSON,
	    .own = own,
	    .on_opt = admin_option,
	    .arg = &a,
	    .usage = usage,
	};
	int r = cli_parse_opts(&v, argc, argv, &o);

	if (r != CLI_GO)
		return r;
	const char *what = parse_verb(o.nargs, o.args, &a.la);
	if (!what) {
		usage(stderr);
		return 2;
	}
	mount_of(o.home, a.la.mount, sizeof(a.la.mount));
	char addr[128] = "";
	if (cli_meta_addr(o.meta, o.home, addr, sizeof(addr)) < 0) {
		cli_err(VERB, "no cluster found (use --meta HOST:PORT, $STRATA_META or --home)");
		return 1;
	}
	if (cli_key_setup(VERB, o.key, o.home) < 0)
		return 1;
	struct meta_client *mc = meta_client_new(addr, "strata-admin", NULL);
	if (!mc) {
		cli_err(VERB, "out of memory");
		return 1;
	}
	r = run(mc, what, o.json, a.deep, &a.la);
	meta_client_free(mc);
	return r;
}
