/* stats.c — what this mount's requests cost: FUSE requests received, by
 * opcode, and strata-meta calls sent, by message type, read as the text of
 * the node-local xattr SFS_STATS_XATTR ("trusted.strata.stats") on any
 * inode of the mount, and the chunk reads (fs/chunk_client.h's counters):
 *
 *   getfattr --only-values -n trusted.strata.stats /mnt
 *   fuse.LOOKUP 2001
 *   meta.lookup 2001
 *   ...
 *
 * Why: the cost of a metadata operation is its round trips (FUSE's and
 * meta's), and they are what the caches of this daemon exist to cut; tests
 * assert the count per operation (tests/fuse/meta_calls.sh) and benchmarks
 * print it. Counters only grow; a reader takes differences. Only nonzero
 * counters are listed. The counting is a relaxed atomic add per request. */
#include <errno.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/proto.h"
#include "fuse/fuse-internal.h"

#define FUSE_OPCODES 64

static _Atomic uint64_t fuse_requests[FUSE_OPCODES];

/* include/uapi/linux/fuse.h, enum fuse_opcode */
static const char *const fuse_opcode_names[FUSE_OPCODES] = {
    [1] = "LOOKUP",	   [2] = "FORGET",	   [3] = "GETATTR",
    [4] = "SETATTR",	   [5] = "READLINK",	   [6] = "SYMLINK",
    [8] = "MKNOD",	   [9] = "MKDIR",	   [10] = "UNLINK",
    [11] = "RMDIR",	   [12] = "RENAME",	   [13] = "LINK",
    [14] = "OPEN",	   [15] = "READ",	   [16] = "WRITE",
    [17] = "STATFS",	   [18] = "RELEASE",	   [20] = "FSYNC",
    [21] = "SETXATTR",	   [22] = "GETXATTR",	   [23] = "LISTXATTR",
    [24] = "REMOVEXATTR",  [25] = "FLUSH",	   [26] = "INIT",
    [27] = "OPENDIR",	   [28] = "READDIR",	   [29] = "RELEASEDIR",
    [30] = "FSYNCDIR",	   [31] = "GETLK",	   [32] = "SETLK",
    [33] = "SETLKW",	   [34] = "ACCESS",	   [35] = "CREATE",
    [36] = "INTERRUPT",	   [37] = "BMAP",	   [38] = "DESTROY",
    [39] = "IOCTL",	   [40] = "POLL",	   [41] = "NOTIFY_REPLY",
    [42] = "BATCH_FORGET", [43] = "FALLOCATE",	   [44] = "READDIRPLUS",
    [45] = "RENAME2",	   [46] = "LSEEK",	   [47] = "COPY_FILE_RANGE",
    [48] = "SETUPMAPPING", [49] = "REMOVEMAPPING", [50] = "SYNCFS",
    [51] = "TMPFILE",	   [52] = "STATX",
};

/* fs/proto.h, MSG_META_PING onwards, in order */
static const char *const meta_call_names[] = {
    "ping",   "lookup",	    "getattr",	"setattr",     "mknod",	      "mkdir",	    "create",
    "unlink", "rmdir",	    "rename",	"link",	       "symlink",     "readlink",   "readdir",
    "statfs", "setxattr",   "getxattr", "listxattr",   "removexattr", "open",	    "close",
    "sync",   "set_length", "fsck",	"fsck_chunks", "fsck_resync", "close_many",
};
_Static_assert(sizeof(meta_call_names) / sizeof(meta_call_names[0]) ==
		   MSG_META_CLOSE_MANY - MSG_META_PING + 1,
	       "a name for every meta message type");

void sfs_stats_request(uint32_t opcode)
{
	if (opcode < FUSE_OPCODES)
		atomic_fetch_add_explicit(&fuse_requests[opcode], 1, memory_order_relaxed);
}

/* Appends "prefix.name count\n" to the stream if count is nonzero. */
static void put_counter(FILE *f, const char *prefix, const char *name, unsigned num, uint64_t count)
{
	if (count == 0)
		return;
	if (name)
		fprintf(f, "%s.%s %llu\n", prefix, name, (unsigned long long)count);
	else
		fprintf(f, "%s.%u %llu\n", prefix, num, (unsigned long long)count);
}

int sfs_stats_text(struct sfs *fs, char **ret, size_t *ret_len)
{
	size_t nmeta = sizeof(meta_call_names) / sizeof(meta_call_names[0]);
	struct chunk_client_stats cs;
	FILE *f = open_memstream(ret, ret_len);

	if (!f)
		return -ENOMEM;
	for (unsigned op = 0; op < FUSE_OPCODES; op++)
		put_counter(f, "fuse", fuse_opcode_names[op], op,
			    atomic_load_explicit(&fuse_requests[op], memory_order_relaxed));
	for (unsigned t = 0; t < META_CALL_TYPES; t++)
		put_counter(f, "meta", t < nmeta ? meta_call_names[t] : NULL, t,
			    meta_client_calls(fs->mc, (uint16_t)(MSG_META_PING + t)));
	chunk_client_stats(fs->cc, &cs);
	put_counter(f, "chunk", "read", 0, cs.reads);
	put_counter(f, "chunk", "read_many", 0, cs.read_many);
	put_counter(f, "chunk", "read_many_ranges", 0, cs.read_many_ranges);
	put_counter(f, "chunk", "read_many_retried", 0, cs.read_many_retried);
	if (fclose(f) != 0)
		return -ENOMEM;
	return 0;
}
