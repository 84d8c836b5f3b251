/* fuzz_meta_records.c — libFuzzer entry point over every value decoder of
 * the meta store (meta/records.c): the first input byte picks the record
 * (inode, dentry, counter, session, GC entry, target, chain, table), the
 * rest is the value (and for chains and tables, a 5-byte key before it).
 * Nothing may crash or read out of bounds; a fixed-size record that
 * decodes must encode back to the same bytes (the dentry: to its type
 * bits). */
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "meta/ns-internal.h"

static void fixed_records(uint8_t pick, const uint8_t *p, size_t n)
{
	uint8_t raw[GC_REC_LEN];
	struct dentry d;
	struct ns_gc_item it;
	uint64_t v;

	if (pick == 1 && dentry_decode(p, n, &d) == 0) {
		dentry_encode(&d, raw);
		if (memcmp(raw, p, 9) || (d.mode & 0170000) != le32_get(raw + 9))
			__builtin_trap();
	} else if (pick == 2 && counter_decode(p, n, &v) == 0) {
		counter_encode(v, raw);
		if (memcmp(raw, p, COUNTER_REC_LEN))
			__builtin_trap();
	} else if (pick == 4 && gc_decode(p, n, &it) == 0) {
		struct inode in = {.a = {.size = it.size, .layout = it.layout}};
		gc_encode(&in, raw);
		if (memcmp(raw, p, GC_REC_LEN))
			__builtin_trap();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t pick = data[0] % 8;
	const uint8_t *p = data + 1;
	size_t n = size - 1;
	struct inode in;
	struct session_rec s;
	struct cluster_target t;
	struct strata_chain c;
	struct rbuf b;
	uint32_t nids;

	switch (pick) {
	case 0:
		inode_decode(p, n, &in);
		break;
	case 3:
		session_decode(p, n, &s);
		break;
	case 5:
		cluster_target_decode(p, n, &t);
		break;
	case 6:
		if (n >= 5)
			cluster_chain_decode(p, 5, p + 5, n - 5, &c);
		break;
	case 7:
		if (n >= 5 && cluster_table_decode(p, 5, p + 5, n - 5, &b, &nids) == 0)
			for (uint32_t i = 0; i < nids; i++)
				rbuf_get_u32(&b);
		break;
	default:
		fixed_records(pick, p, n);
	}
	return 0;
}
