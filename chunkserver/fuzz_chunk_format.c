/* fuzz_chunk_format.c — libFuzzer entry point over the chunk engine's disk
 * decoders: the first byte picks one, the rest is what it reads.
 *   0-3  a format-2 header slot (bit 0: slot number, bit 1: superseded
 *        slots accepted): an accepted slot re-encodes to its own bytes
 *   4    a format-1 header: an accepted one has consistent block counts
 *   5    a journal file (<target>/journal in a temp directory): every record
 *        the replay hands out stays within the journal's limits
 * Nothing may crash or read out of bounds. */
#include <fcntl.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_io.h"
#include "chunkserver/chunk_journal.h"

static void slot(const uint8_t *p, size_t n, int sel)
{
	struct chunk_hdr h;
	const char *why;
	if (chunk_slot_decode(p, n, sel & 1, 7, 3, sel & 2, &h, &why) != 0)
		return;
	size_t len = chunk_slot_len(h.nblocks);
	uint8_t *raw = malloc(len);
	if (!raw || len > n || h.nblocks != chunk_nblocks(h.data_len))
		__builtin_trap();
	bool superseded = h.superseded;
	chunk_slot_encode(&h, sel & 1, raw);
	if (memcmp(raw + 4, p + 4, len - 4) != 0 || (!superseded && memcmp(raw, p, 4) != 0))
		__builtin_trap();
	free(raw);
	chunk_hdr_done(&h);
}

static void v1(const uint8_t *p, size_t n)
{
	struct chunk_hdr h;
	const char *why;
	if (chunk_v1_decode(p, n, 7, 3, &h, &why) != 0)
		return;
	if (h.nblocks != chunk_nblocks(h.data_len) || h.data_off > n ||
	    h.data_len > CHUNK_STORE_MAX_LEN)
		__builtin_trap();
	chunk_hdr_done(&h);
}

static int check_rec(void *arg, const struct chunk_jrec *r)
{
	(void)arg;
	if (r->nsums > CHUNK_MAX_BLOCKS || r->len > CHUNK_JOURNAL_MAX_DATA || (r->len && !r->data))
		__builtin_trap();
	uint8_t x = 0; /* touches every page of the record: in bounds */
	for (uint32_t i = 0; i < r->len; i += 4096)
		x ^= ((const uint8_t *)r->data)[i];
	for (uint32_t i = 0; i < r->nsums; i++)
		x ^= (uint8_t)r->sums[i];
	return x & 0; /* 0: keep replaying */
}

static void journal(const uint8_t *p, size_t n)
{
	char dir[] = "/tmp/fuzz-chunk-journal-XXXXXX";
	if (!mkdtemp(dir))
		return;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY);
	int fd = openat(dfd, "journal", O_RDWR | O_CREAT, 0644);
	if (fd >= 0 && write(fd, p, n) == (ssize_t)n) {
		struct chunk_journal *j;
		if (chunk_journal_open(dfd, NULL, &j) == 0) {
			chunk_journal_replay(j, check_rec, NULL);
			chunk_journal_free(j);
		}
	}
	if (fd >= 0)
		close(fd);
	unlinkat(dfd, "journal", 0);
	close(dfd);
	rmdir(dir);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t sel = data[0] % 6;
	if (sel < 4)
		slot(data + 1, size - 1, sel);
	else if (sel == 4)
		v1(data + 1, size - 1);
	else
		journal(data + 1, size - 1);
	return 0;
}
