/* store-internal.h — what store.c and store_import.c share: the store handle,
 * the writer lock, file helpers and the record codec. Not a public API. */
#pragma once
#include <limits.h>
#include <sys/types.h>

#include "imagesvc/store.h"
#include "fs/fdio.h"

struct img_store {
	char *root;
	int lock_fd;
	int lock_depth;
};

int store_lock(struct img_store *s);
void store_unlock(struct img_store *s);
int store_mkdir_p(const char *path);
int store_rm_rf(const char *path);
int store_write_file(const char *path, const void *data, size_t n);
size_t store_record_size(const struct img_record *rec);
void store_record_encode(const struct img_record *rec, uint8_t *buf);
int store_ref_file(const char *name, char *out, size_t cap);
int img_store_set_ref(struct img_store *s, const char *name, const char *hex);
int store_gc_locked(struct img_store *s);
uint32_t store_max_blob(struct img_store *s);
void store_node_name(char *buf, size_t cap);
uint64_t store_now_s(void);
