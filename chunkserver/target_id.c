/* target_id.c — reads and writes <target>/target.id.
 *
 * Record (little-endian, 32 bytes):
 *   0  u32 magic 0x44495453 ("STID")   4 u16 version 1   6 u16 reserved
 *   8  u32 record length (32)          12 u32 node_id    16 u32 target_id
 *   20 u32 reserved                    24 u64 XXH3-64 of bytes 0..23 */
#include "chunkserver/target_id.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "fs/cleanup.h"
#include "fs/wire.h"

#define TID_MAGIC 0x44495453u
#define TID_VERSION 1
#define TID_LEN 32

int target_id_load(const char *target_dir, uint32_t *ret_node_id, uint32_t *ret_target_id)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/target.id", target_dir);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	uint8_t rec[TID_LEN + 1];
	ssize_t n = pread(fd, rec, sizeof(rec), 0);
	if (n < 0)
		return -errno;
	if (n != TID_LEN || le32_get(rec) != TID_MAGIC || le16_get(rec + 4) != TID_VERSION ||
	    le32_get(rec + 8) != TID_LEN || le64_get(rec + 24) != XXH3_64bits(rec, 24))
		return -EBADMSG;
	*ret_node_id = le32_get(rec + 12);
	*ret_target_id = le32_get(rec + 16);
	return 0;
}

int target_id_store(const char *target_dir, uint32_t node_id, uint32_t target_id)
{
	char p[4096], tp[4096];
	snprintf(p, sizeof(p), "%s/target.id", target_dir);
	snprintf(tp, sizeof(tp), "%s/target.id.tmp", target_dir);
	uint8_t rec[TID_LEN] = {0};
	le32_put(rec, TID_MAGIC);
	le16_put(rec + 4, TID_VERSION);
	le32_put(rec + 8, TID_LEN);
	le32_put(rec + 12, node_id);
	le32_put(rec + 16, target_id);
	le64_put(rec + 24, XXH3_64bits(rec, 24));
	_cleanup_close_ int fd = open(tp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (pwrite(fd, rec, sizeof(rec), 0) != (ssize_t)sizeof(rec) || fsync(fd) < 0 ||
	    rename(tp, p) < 0) {
		int r = errno ? -errno : -EIO;
		unlink(tp);
		return r;
	}
	_cleanup_close_ int dfd = open(target_dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0 || fsync(dfd) < 0)
		return -errno;
	return 0;
}
