/* store-internal.h — what store.c and store_import.c share: the store handle,
 * the writer lock, file helpers and the record codec. Not a public API. */
#pragma once
#include <limits.h>
#include <sys/types.h>

#include "imagesvc/store.h"
#include "imagesvc/image_auth.h"
#include "fs/fdio.h"

struct img_store {
	char *root;
	int lock_fd;
	int lock_depth;
	bool has_key; /* key: the image key (image_auth.h) */
	struct img_auth_key key;
	struct strata_err key_err; /* !has_key: why */
};

int store_lock(struct img_store *s);
void store_unlock(struct img_store *s);
int store_mkdir_p(const char *path);
int store_rm_rf(const char *path);
int store_write_file(const char *path, const void *data, size_t n);
/* The record of hex as stored, decoded but not verified (gc counts the
 * blobs of any record; resign upgrades format 1). Into buf[IMG_REC_MAX]
 * when buf is not NULL (the bytes; *ret_n their length). */
int store_record_load(struct img_store *s, const char *hex, struct img_record *ret, uint8_t *buf,
		      size_t *ret_n);
/* Encodes rec signed and writes it to path (tmp + rename). */
int store_record_write(struct img_store *s, const struct img_record *rec, const char *path,
		       struct strata_err *e);
/* -ENOKEY with the reason when the store has no key, else 0. */
int store_need_key(struct img_store *s, struct strata_err *e);
int store_ref_file(const char *name, char *out, size_t cap);
/* The name of the ref file `file` (escapes undone) into out[cap]. */
void store_ref_decode(const char *file, char *out, size_t cap);
/* Reads the ref in file; with verify its MAC is checked (-ENOKEY,
 * -EKEYEXPIRED: unsigned, -EKEYREJECTED: wrong). 0 and hex, or -errno. */
int store_read_ref(struct img_store *s, const char *file, char hex[65], bool verify);
/* Calls fn(ctx, ref file, hex) for every ref that parses (not verified). */
int store_for_each_ref(struct img_store *s, int (*fn)(void *, const char *, const char *),
		       void *ctx);
int img_store_set_ref(struct img_store *s, const char *name, const char *hex);
int store_gc_locked(struct img_store *s);
uint32_t store_max_blob(struct img_store *s);
void store_node_name(char *buf, size_t cap);
uint64_t store_now_s(void);
