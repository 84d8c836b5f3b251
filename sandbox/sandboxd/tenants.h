/* tenants.h — the tenants file of a sandboxd: who may use its API with a
 * token, and how much each may use. Shared by strata-sandboxd (which reads
 * it: auth.c) and `strata tenant` (which writes it: tools/cmd_tenant.c);
 * the library neither logs nor prints.
 *
 * The file is HOME/tenants.json (strata-sandboxd --tenants FILE), mode
 * 0600, replaced atomically (a temporary file, fsync, rename):
 *
 *   {"version": 1, "tenants": [
 *     {"name": "team-a", "salt": "<32 hex>", "hash": "<64 hex>",
 *      "admin": false, "max_sandboxes": 10, "cpu": 8, "memory_mb": 16384,
 *      "created_at": 1764680000}, ...]}
 *
 * hash is SHA-256(salt || token): the token itself is never stored, and is
 * shown once, when it is made (sbd_tenant_new_token). A token is
 * "NAME.SECRET", SECRET 64 hex digits from getrandom: the name picks the
 * entry (one hash per request, however many tenants), the hash decides,
 * compared in constant time (CRYPTO_memcmp). A quota that is null or absent
 * is no limit (the node's admission still applies).
 *
 * Invariants of a parsed table: names are unique and valid
 * (sbd_tenant_name_valid); at most SBD_TENANTS_MAX entries. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/stat.h>

#include "fs/err.h"

#define SBD_TENANT_NAME_MAX 63
#define SBD_TENANTS_MAX 4096
#define SBD_TENANT_SALT 16
#define SBD_TENANT_HASH 32
#define SBD_TENANT_SECRET 32 /* bytes; 64 hex digits in the token */
/* A token's length: NAME '.' SECRET and the NUL. */
#define SBD_TENANT_TOKEN_MAX (SBD_TENANT_NAME_MAX + 1 + 2 * SBD_TENANT_SECRET + 1)
/* The largest tenants file read (4,096 entries of ~250 bytes). */
#define SBD_TENANTS_FILE_MAX (4u << 20)

struct sbd_tenant {
	char name[SBD_TENANT_NAME_MAX + 1];
	uint8_t salt[SBD_TENANT_SALT];
	uint8_t hash[SBD_TENANT_HASH];
	bool admin;	       /* sees and acts on every sandbox; may use network "host" */
	int64_t max_sandboxes; /* -1: no limit */
	double cpu;	       /* cores, all its sandboxes together; < 0: no limit */
	int64_t memory_mb;     /* all its sandboxes together; -1: no limit */
	int64_t created_at;    /* wall seconds */
};

struct sbd_tenants {
	struct sbd_tenant *v;
	size_t n;
};

/* Whether name is a tenant's name: 1-63 bytes of [a-z0-9_-], starting with
 * a letter or digit. */
bool sbd_tenant_name_valid(const char *name);

/* Parses the text of a tenants file into *ret (an empty table first; the
 * caller frees it with sbd_tenants_done, also on failure). Returns 0 or
 * -EINVAL with the reason in e. */
int sbd_tenants_parse(const char *buf, size_t len, struct sbd_tenants *ret, struct strata_err *e);
/* Reads and parses the file at path; *ret_st (may be NULL) gets its stat.
 * A file that others than its owner may write, or owned by another user
 * than root or us, is refused (-EPERM): whoever can write it can make
 * tokens. Returns 0, -ENOENT when there is none, or -errno with e. */
int sbd_tenants_load(const char *path, struct sbd_tenants *ret, struct stat *ret_st,
		     struct strata_err *e);
struct jw;
/* Emits t as the text of a tenants file (what sbd_tenants_parse reads). */
void sbd_tenants_to_json(const struct sbd_tenants *t, struct jw *w);
/* Writes t to path atomically, mode 0600. Returns 0 or -errno. */
int sbd_tenants_save(const char *path, const struct sbd_tenants *t);
/* Frees the entries; accepts an empty table. */
void sbd_tenants_done(struct sbd_tenants *t);

/* The entry named name, or NULL. */
struct sbd_tenant *sbd_tenants_find(const struct sbd_tenants *t, const char *name);
/* Appends a copy of tn (its name unused and valid). Returns 0, -EEXIST,
 * -EINVAL, -E2BIG (SBD_TENANTS_MAX) or -ENOMEM. */
int sbd_tenants_add(struct sbd_tenants *t, const struct sbd_tenant *tn);
/* Removes the entry named name. Returns 0 or -ENOENT. */
int sbd_tenants_remove(struct sbd_tenants *t, const char *name);

/* Makes a new token for tn (a fresh salt and secret): its hash replaces
 * tn's, and the token goes to ret_token (SBD_TENANT_TOKEN_MAX bytes).
 * Returns 0 or -errno (getrandom). */
int sbd_tenant_new_token(struct sbd_tenant *tn, char ret_token[SBD_TENANT_TOKEN_MAX]);
/* The entry whose token token is, or NULL. */
const struct sbd_tenant *sbd_tenants_match(const struct sbd_tenants *t, const char *token);
/* Emits tn's quotas as members of the object w is in: max_sandboxes, cpu,
 * memory_mb, null where there is no limit (tn NULL: all null). */
void sbd_tenant_quotas_json(struct jw *w, const struct sbd_tenant *tn);
/* Whether the two strings are equal, in time that depends on neither's
 * contents (both are hashed, the digests compared with CRYPTO_memcmp). */
bool sbd_secret_equal(const char *a, const char *b);
