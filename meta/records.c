/* records.c — the key schema and value records of the meta store.
 *
 * Keys: a one-byte tag, then big-endian integers and raw names, so that
 * RocksDB's bytewise order is numeric order of ids and name order of
 * directory entries (see ns-internal.h for the list and README.md for the
 * layout). Values: a version byte (REC_VERSION) then little-endian fields
 * written with the wire.h codec; decoders refuse a newer version. */
#include <errno.h>
#include <string.h>
#include "meta/ns-internal.h"

void key_init(struct key *k, uint8_t tag)
{
	k->b[0] = tag;
	k->len = 1;
}

void key_u64(struct key *k, uint64_t v)
{
	for (int i = 7; i >= 0; i--)
		k->b[k->len++] = (uint8_t)(v >> (8 * i));
}

void key_u32(struct key *k, uint32_t v)
{
	for (int i = 3; i >= 0; i--)
		k->b[k->len++] = (uint8_t)(v >> (8 * i));
}

/* Appends s without its NUL; callers bound s (names <= 255, client ids
 * <= 64), and the key buffer is sized for the largest shape. */
void key_str(struct key *k, const char *s)
{
	size_t n = strnlen(s, sizeof(k->b) - k->len);

	memcpy(k->b + k->len, s, n);
	k->len += n;
}

uint64_t key_get_u64(const uint8_t *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v = v << 8 | p[i];
	return v;
}

uint32_t key_get_u32(const uint8_t *p)
{
	return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

void key_ino(struct key *k, uint8_t tag, uint64_t ino)
{
	key_init(k, tag);
	key_u64(k, ino);
}

void key_dentry(struct key *k, uint64_t parent, const char *name)
{
	key_named(k, K_DENTRY, parent, name);
}

void key_named(struct key *k, uint8_t tag, uint64_t ino, const char *name)
{
	key_ino(k, tag, ino);
	if (name)
		key_str(k, name);
}

void key_session(struct key *k, uint64_t ino, uint64_t sid)
{
	key_ino(k, K_SESSION, ino);
	key_u64(k, sid);
}

/* U client 0x00 ino sid: the 0x00 ends the client id, so the prefix of one
 * client never matches another whose id it begins. ino == 0 && sid == 0
 * with client set gives the prefix (caller trims to it). */
void key_client(struct key *k, const char *client, uint64_t ino, uint64_t sid)
{
	key_init(k, K_CLIENT);
	key_str(k, client);
	k->b[k->len++] = 0;
	key_u64(k, ino);
	key_u64(k, sid);
}

void key_counter(struct key *k, const char *name)
{
	key_init(k, K_COUNTER);
	key_str(k, name);
}

void inode_encode(const struct inode *in, struct wbuf *b)
{
	const struct strata_attr *a = &in->a;

	wbuf_put_u8(b, REC_VERSION);
	wbuf_put_u32(b, a->mode);
	wbuf_put_u32(b, a->nlink);
	wbuf_put_u32(b, a->uid);
	wbuf_put_u32(b, a->gid);
	wbuf_put_u64(b, a->size);
	wbuf_put_u64(b, a->rdev);
	wbuf_put_i64(b, a->atime_ns);
	wbuf_put_i64(b, a->mtime_ns);
	wbuf_put_i64(b, a->ctime_ns);
	wbuf_put_u64(b, a->generation);
	wbuf_put_u32(b, a->layout.chunk_size);
	wbuf_put_u32(b, a->layout.table_id);
	wbuf_put_u32(b, a->layout.stripe_seed);
	wbuf_put_u64(b, in->parent);
}

int inode_decode(const uint8_t *p, size_t len, struct inode *ret)
{
	struct rbuf b;
	struct inode in = {0};
	struct strata_attr *a = &in.a;

	rbuf_init(&b, p, len);
	if (rbuf_get_u8(&b) != REC_VERSION)
		return -EIO;
	a->mode = rbuf_get_u32(&b);
	a->nlink = rbuf_get_u32(&b);
	a->uid = rbuf_get_u32(&b);
	a->gid = rbuf_get_u32(&b);
	a->size = rbuf_get_u64(&b);
	a->rdev = rbuf_get_u64(&b);
	a->atime_ns = rbuf_get_i64(&b);
	a->mtime_ns = rbuf_get_i64(&b);
	a->ctime_ns = rbuf_get_i64(&b);
	a->generation = rbuf_get_u64(&b);
	a->layout.chunk_size = rbuf_get_u32(&b);
	a->layout.table_id = rbuf_get_u32(&b);
	a->layout.stripe_seed = rbuf_get_u32(&b);
	in.parent = rbuf_get_u64(&b);
	if (rbuf_done(&b) < 0)
		return -EIO;
	*ret = in;
	return 0;
}
