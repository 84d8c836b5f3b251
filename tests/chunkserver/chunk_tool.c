/* chunk_tool.c — looks at a chunkserver target from outside, for the fault
 * tests (tests/replication/fault.sh, crash_stream.sh):
 *
 *   chunk_tool stat CHUNK_FILE        version, length and checksum of one
 *                                     chunk file's current header (read
 *                                     only; the target may be in use)
 *   chunk_tool verify TARGET          opens the target as the chunkserver
 *                                     does (finishing journaled writes),
 *                                     reads and checks every block of every
 *                                     chunk; prints "chunks N bytes B"
 *   chunk_tool dump TARGET INO INDEX  opens the target, writes the chunk's
 *                                     data to stdout
 *
 * Exit: 0, 1 usage or error, 2 no such chunk, 3 a chunk failed its checks
 * (named on stderr). The target must not be in use for verify and dump. */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "chunkserver/chunk_format.h"
#include "chunkserver/chunk_store.h"
#include "chunkserver/uring_pool.h"

static int usage(void)
{
	fprintf(stderr,
		"usage: chunk_tool stat CHUNK_FILE | verify TARGET | dump TARGET INO INDEX\n");
	return 1;
}

/* ino and index from .../<ino %016x>/<index %08x>. */
static int parse_path(const char *path, uint64_t *ino, uint32_t *index)
{
	const char *slash = strrchr(path, '/');
	if (!slash || slash == path)
		return -1;
	const char *prev = slash - 1;
	while (prev > path && *prev != '/')
		prev--;
	if (*prev == '/')
		prev++;
	char inohex[17] = {0};
	if (slash - prev != 16 || strlen(slash + 1) != 8)
		return -1;
	memcpy(inohex, prev, 16);
	*ino = strtoull(inohex, NULL, 16);
	*index = (uint32_t)strtoul(slash + 1, NULL, 16);
	return 0;
}

static int cmd_stat(const char *path)
{
	uint64_t ino;
	uint32_t index;
	if (parse_path(path, &ino, &index) < 0)
		return usage();
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? 2 : 1;
	struct chunk_hdr h;
	const char *why = "";
	int r = chunk_hdr_read(fd, ino, index, false, &h, &why);
	close(fd);
	if (r < 0) {
		fprintf(stderr, "%s: %s\n", path, r == -EIO ? why : strerror(-r));
		return r == -EIO ? 3 : 1;
	}
	printf("version %" PRIu64 " length %u checksum %016" PRIx64 " format %u\n", h.version,
	       h.data_len, h.checksum, h.format);
	chunk_hdr_done(&h);
	return 0;
}

static void on_corrupt(void *arg, const struct chunk_corruption *c)
{
	(void)arg;
	fprintf(stderr, "corrupt chunk ino 0x%" PRIx64 " index %u block %" PRId64 ": %s\n", c->ino,
		c->index, c->block, c->what);
}

static int open_store(const char *dir, struct uring_pool **pool, struct chunk_store **cs)
{
	struct chunk_store_opts o = {.on_corrupt = on_corrupt};
	int r = uring_pool_new(1, 16, pool);
	if (r == 0 && (r = chunk_store_open(dir, *pool, &o, cs)) < 0)
		uring_pool_free(*pool);
	if (r < 0)
		fprintf(stderr, "chunk_tool: cannot open target %s: %s\n", dir, strerror(-r));
	return r;
}

static int cmd_verify(const char *dir)
{
	struct uring_pool *pool;
	struct chunk_store *cs;
	if (open_store(dir, &pool, &cs) < 0)
		return 1;
	struct chunk_key *keys = NULL;
	size_t n = 0;
	uint8_t *buf = malloc(CHUNK_STORE_MAX_LEN);
	int rc = buf && chunk_store_list(cs, &keys, &n) == 0 ? 0 : 1;
	uint64_t bytes = 0;
	for (size_t i = 0; rc != 1 && i < n; i++) {
		ssize_t k =
		    chunk_store_read(cs, keys[i].ino, keys[i].index, 0, CHUNK_STORE_MAX_LEN, buf);
		if (k < 0) {
			fprintf(stderr, "chunk ino 0x%" PRIx64 " index %u: %s\n", keys[i].ino,
				keys[i].index, strerror((int)-k));
			rc = 3;
		} else {
			bytes += (uint64_t)k;
		}
	}
	printf("chunks %zu bytes %" PRIu64 "\n", n, bytes);
	free(keys);
	free(buf);
	chunk_store_free(cs);
	uring_pool_free(pool);
	return rc;
}

static int cmd_dump(const char *dir, uint64_t ino, uint32_t index)
{
	struct uring_pool *pool;
	struct chunk_store *cs;
	if (open_store(dir, &pool, &cs) < 0)
		return 1;
	struct chunk_meta m;
	int rc = 0;
	uint8_t *buf = malloc(CHUNK_STORE_MAX_LEN);
	int r = buf ? chunk_store_stat(cs, ino, index, &m) : -ENOMEM;
	if (r == -ENOENT)
		rc = 2;
	else if (r < 0)
		rc = r == -EIO ? 3 : 1;
	ssize_t k = rc ? 0 : chunk_store_read(cs, ino, index, 0, m.length, buf);
	if (k < 0)
		rc = k == -EIO ? 3 : 1;
	if (rc == 0 && fwrite(buf, 1, (size_t)k, stdout) != (size_t)k)
		rc = 1;
	free(buf);
	chunk_store_free(cs);
	uring_pool_free(pool);
	return rc;
}

int main(int argc, char **argv)
{
	if (argc == 3 && strcmp(argv[1], "stat") == 0)
		return cmd_stat(argv[2]);
	if (argc == 3 && strcmp(argv[1], "verify") == 0)
		return cmd_verify(argv[2]);
	if (argc == 5 && strcmp(argv[1], "dump") == 0)
		return cmd_dump(argv[2], strtoull(argv[3], NULL, 0),
				(uint32_t)strtoul(argv[4], NULL, 0));
	return usage();
}
