/* target_id.h — the identity record kept in every target directory
 * (<target>/target.id): the node id and target id strata-meta assigned, so
 * that a restarted chunkserver registers under the same ids. */
#pragma once
#include <stdint.h>

/* Returns 0 and the ids, -ENOENT if the target has no record yet, -EBADMSG if
 * the record is damaged, or -errno. */
int target_id_load(const char *target_dir, uint32_t *ret_node_id, uint32_t *ret_target_id);
/* Writes the record atomically (temp file, fsync, rename, fsync dir). */
int target_id_store(const char *target_dir, uint32_t node_id, uint32_t target_id);
