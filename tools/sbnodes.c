/* sbnodes.c — the sandbox node table (fs/sbnode_proto.h) as `strata admin
 * nodes` and `strata status` show it: per node its lease (live or lost)
 * and load (sandboxes, cpu and memory admitted against its budgets,
 * images). */
#include <stdio.h>
#include "fs/json.h"
#include "fs/sbnode_proto.h"
#include "tools/cli.h"

void cli_sbnodes_json(struct jw *w, const struct sbnode_table *t)
{
	jw_key(w, "sandbox_nodes");
	jw_arr(w);
	for (uint32_t i = 0; t && i < t->n; i++) {
		jw_obj(w);
		sbnode_entry_json(w, &t->nodes[i]);
		jw_obj_end(w);
	}
	jw_arr_end(w);
}

void cli_sbnodes_print(const struct sbnode_table *t)
{
	if (!t->n)
		return;
	printf("\n%-6s %-22s %-5s %-9s %-11s %-11s %-13s %s\n", "SBNODE", "API", "STATE",
	       "SANDBOXES", "CPU", "MEMORY MiB", "LAST-REPORT", "IMAGES");
	for (uint32_t i = 0; i < t->n; i++) {
		const struct sbnode_entry *e = &t->nodes[i];
		char sbx[24], cpu[32], mem[32], age[32];
		snprintf(sbx, sizeof(sbx), "%u/%u", e->r.sandboxes, e->r.sbx_cap);
		snprintf(cpu, sizeof(cpu), "%.1f/%.0f", e->r.cpu_used / 1000.0,
			 e->r.cpu_cap / 1000.0);
		snprintf(mem, sizeof(mem), "%llu/%llu", (unsigned long long)(e->r.mem_used >> 20),
			 (unsigned long long)(e->r.mem_cap >> 20));
		snprintf(age, sizeof(age), "%lld ms ago", (long long)e->age_ms);
		printf("%-6u %-22s %-5s %-9s %-11s %-11s %-13s", e->r.node_id, e->r.api_addr,
		       e->lost ? "LOST" : "live", sbx, cpu, mem, age);
		for (uint32_t j = 0; j < e->r.nimages; j++)
			printf("%s%s(%u)", j ? "," : "", e->r.images[j].name,
			       e->r.images[j].sandboxes);
		printf("\n");
	}
}
