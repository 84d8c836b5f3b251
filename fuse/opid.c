/* opid.c — the operation ids of strata-fuse's mutations (fs/meta_client.h
 * struct meta_opid, meta/README.md "Operation ids", README.md "Replayed
 * requests").
 *
 * A FUSE request the kernel resends after a takeover (FUSE_NOTIFY_RESEND,
 * takeover.c) keeps its `unique` and gains FUSE_UNIQUE_RESEND (bit 63).
 * Uniques never repeat within a connection, and the connection outlives
 * strata-fuse, so (connection id, unique without that bit) names one
 * request across the crash: the dead daemon's attempt and its successor's
 * carry the same op id, and strata-meta answers the second from its record
 * of the first.
 *
 * The connection id is random, made at a fresh mount and kept with the
 * connection by strata-fuse-holder (fs/fuse_holder.h conn_id), so every
 * successor uses it. libfuse 3.14 has no call that tells a handler its
 * request's unique; it does let the daemon read the device itself
 * (fuse_session_custom_io), and a request is processed by the thread that
 * read it. So sfs_read notes the header of the request it read in
 * thread-local storage, and sfs_op_of takes the unique from there when the
 * header's uid, gid and pid are the request's (fuse_req_ctx): a request
 * handled elsewhere than where it was read can never take another's id.
 *
 * Without the header (that check fails) an op gets a local id instead: a
 * random id of this process's life and a counter. Retries of the call are
 * still deduplicated; a resend after a crash is not. */
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/random.h>
#include <sys/uio.h>
#include <unistd.h>

#include "fs/log.h"
#include "fuse/fuse-internal.h"

#define FUSE_UNIQUE_RESEND (1ull << 63) /* include/uapi/linux/fuse.h, Linux >= 6.9 */
#define FUSE_IN_HEADER_LEN 40

/* The header of the request this thread read last (sfs_read). */
struct last_req {
	bool valid;
	uint64_t unique;
	uint32_t uid, gid, pid;
};
static __thread struct last_req t_last;

static uint32_t le32(const uint8_t *p)
{
	return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static ssize_t sfs_read(int fd, void *buf, size_t len, void *userdata)
{
	const uint8_t *p = buf;
	ssize_t n;

	(void)userdata;
	sfs_devbuf_ready(buf, len); /* or a kill -9 mid-copy fails the request */
	n = read(fd, buf, len);
	t_last.valid = n >= FUSE_IN_HEADER_LEN;
	if (t_last.valid) {
		/* fuse_in_header: len, opcode, unique, nodeid, uid, gid, pid */
		t_last.unique = (uint64_t)le32(p + 8) | (uint64_t)le32(p + 12) << 32;
		t_last.uid = le32(p + 24);
		t_last.gid = le32(p + 28);
		t_last.pid = le32(p + 32);
		sfs_stats_request(le32(p + 4));
		log_debug("FUSE request %u unique %#llx node %llu pid %u", le32(p + 4),
			  (unsigned long long)t_last.unique,
			  (unsigned long long)le32(p + 16) | (unsigned long long)le32(p + 20) << 32,
			  t_last.pid);
	}
	return n;
}

static ssize_t sfs_writev(int fd, struct iovec *iov, int count, void *userdata)
{
	(void)userdata;
	if (count > 0 && iov[0].iov_len >= 16) {
		const uint8_t *h = iov[0].iov_base; /* fuse_out_header: len, error, unique */
		log_debug("FUSE reply unique %#llx error %d",
			  (unsigned long long)le32(h + 8) | (unsigned long long)le32(h + 12) << 32,
			  (int)le32(h + 4));
	}
	return writev(fd, iov, count);
}

int sfs_opid_attach(struct sfs *fs)
{
	static const struct fuse_custom_io io = {.read = sfs_read, .writev = sfs_writev};

	return fuse_session_custom_io(fs->se, &io, fuse_session_fd(fs->se));
}

uint64_t sfs_opid_new_conn(void)
{
	uint64_t v = 0;

	while (v == 0)
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = (uint64_t)sfs_realtime_ns() ^ ((uint64_t)getpid() << 40);
	return v;
}

void sfs_op_of(struct sfs *fs, fuse_req_t req, struct sfs_op *ret)
{
	const struct fuse_ctx *c = fuse_req_ctx(req);

	memset(ret, 0, sizeof(*ret));
	if (fs->conn_id && t_last.valid && t_last.uid == c->uid && t_last.gid == c->gid &&
	    t_last.pid == (uint32_t)c->pid) {
		ret->id.conn = fs->conn_id;
		ret->id.unique = t_last.unique & ~FUSE_UNIQUE_RESEND;
		ret->resent = (t_last.unique & FUSE_UNIQUE_RESEND) != 0;
		return;
	}
	static atomic_bool warned;
	if (fs->conn_id && !atomic_exchange(&warned, true))
		log_warn("A FUSE request's header was not where it was read: its operation id is "
			 "local, so a resend of it after a crash would be carried out again");
	ret->id.conn = fs->life_id;
	ret->id.unique = atomic_fetch_add(&fs->life_ops, 1);
}
