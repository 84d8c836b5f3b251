/* usrbio_proto.c — the codec of the native client's contract
 * (usrbio_proto.h): control messages, their sending and receiving with fds
 * attached (SCM_RIGHTS), the ring layout, and the submission and
 * completion entries. Shared by strata-fuse (fuse/usrbio.c) and the client
 * library (sdk/c/usrbio.c); it depends on nothing but libc and fs/wire.h's
 * inline byte helpers, so the library needs no other part of strata. */
#include <errno.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/usrbio_proto.h"
#include "fs/wire.h"

_Static_assert(USRBIO_OFF_CQ_WAKE + 4 <= USRBIO_OFF_SQES, "ring header fits its page");

size_t usrbio_msg_encode(const struct usrbio_msg *m, uint8_t *buf)
{
	uint8_t *p = buf + USRBIO_HDR;

	le32_put(buf, USRBIO_MAGIC);
	le16_put(buf + 4, USRBIO_MAJOR);
	le16_put(buf + 6, USRBIO_MINOR);
	le16_put(buf + 8, m->type);
	le16_put(buf + 10, 0);
	le32_put(buf + 12, USRBIO_PAYLOAD);
	le32_put(p, m->sq_entries);
	le32_put(p + 4, m->cq_entries);
	le64_put(p + 8, m->buf_size);
	le32_put(p + 16, m->file_id);
	le32_put(p + 20, (uint32_t)m->status);
	le64_put(p + 24, m->value);
	le64_put(p + 32, m->file_size);
	return USRBIO_MSG_MAX;
}

int usrbio_msg_decode(const uint8_t *buf, size_t n, struct usrbio_msg *ret)
{
	const uint8_t *p = buf + USRBIO_HDR;
	uint16_t type;

	if (n < USRBIO_HDR || le32_get(buf) != USRBIO_MAGIC)
		return -EBADMSG;
	if (le16_get(buf + 4) != USRBIO_MAJOR)
		return -EPROTO;
	type = le16_get(buf + 8);
	/* a newer minor may append fields: at least ours, exactly as announced */
	if (le32_get(buf + 12) != n - USRBIO_HDR || n - USRBIO_HDR < USRBIO_PAYLOAD)
		return -EBADMSG;
	if (type < USRBIO_SETUP || type > USRBIO_REPLY)
		return -EBADMSG;
	*ret = (struct usrbio_msg){.type = type,
				   .sq_entries = le32_get(p),
				   .cq_entries = le32_get(p + 4),
				   .buf_size = le64_get(p + 8),
				   .file_id = le32_get(p + 16),
				   .status = (int32_t)le32_get(p + 20),
				   .value = le64_get(p + 24),
				   .file_size = le64_get(p + 32)};
	return 0;
}

#define FDS_MAX 3
#define FDS_ROOM 16 /* received at once; those past max_fds are closed */

int usrbio_msg_send(int sock, const struct usrbio_msg *m, const int *fds, int nfds, bool nonblock)
{
	uint8_t buf[USRBIO_MSG_MAX];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * FDS_MAX)];
	} c;
	size_t n = usrbio_msg_encode(m, buf);
	struct iovec iov = {.iov_base = buf, .iov_len = n};
	struct msghdr mh = {.msg_iov = &iov, .msg_iovlen = 1};
	ssize_t w;

	if (nfds < 0 || nfds > FDS_MAX)
		return -EINVAL;
	if (nfds > 0) {
		memset(&c, 0, sizeof(c));
		mh.msg_control = c.space;
		mh.msg_controllen = CMSG_SPACE(sizeof(int) * (size_t)nfds);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&mh);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int) * (size_t)nfds);
		memcpy(CMSG_DATA(cm), fds, sizeof(int) * (size_t)nfds);
	}
	do {
		w = sendmsg(sock, &mh, MSG_NOSIGNAL | (nonblock ? MSG_DONTWAIT : 0));
	} while (w < 0 && errno == EINTR);
	if (w < 0)
		return -errno;
	return (size_t)w == n ? 0 : -EIO;
}

int usrbio_msg_recv(int sock, struct usrbio_msg *ret, int *fds, int max_fds, int *ret_nfds)
{
	uint8_t buf[USRBIO_MSG_MAX + 64];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int) * FDS_ROOM)];
	} c;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr mh = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.space, .msg_controllen = sizeof(c)};
	int got = 0, r;
	ssize_t n;

	for (int i = 0; i < max_fds; i++)
		fds[i] = -1;
	*ret_nfds = 0;
	do {
		n = recvmsg(sock, &mh, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&mh); cm; cm = CMSG_NXTHDR(&mh, cm)) {
		if (cm->cmsg_level != SOL_SOCKET || cm->cmsg_type != SCM_RIGHTS)
			continue;
		size_t k = (cm->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < k; i++) {
			int fd;
			memcpy(&fd, CMSG_DATA(cm) + i * sizeof(int), sizeof(int));
			if (got < max_fds)
				fds[got++] = fd;
			else
				close(fd); /* more than the message may carry */
		}
	}
	*ret_nfds = got;
	r = (mh.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) ? -EBADMSG
						      : usrbio_msg_decode(buf, (size_t)n, ret);
	if (r < 0) {
		for (int i = 0; i < got; i++) {
			close(fds[i]);
			fds[i] = -1;
		}
		*ret_nfds = 0;
	}
	return r;
}

/* ---- rings ------------------------------------------------------------------ */
static bool pow2(uint32_t v)
{
	return v && !(v & (v - 1));
}

bool usrbio_shape_ok(uint32_t sq_entries, uint32_t cq_entries)
{
	return pow2(sq_entries) && pow2(cq_entries) && sq_entries <= cq_entries &&
	       cq_entries <= USRBIO_MAX_ENTRIES;
}

size_t usrbio_cqes_offset(uint32_t sq_entries)
{
	return USRBIO_OFF_SQES + (size_t)sq_entries * USRBIO_SQE_SIZE;
}

size_t usrbio_ring_size(uint32_t sq_entries, uint32_t cq_entries)
{
	size_t n = usrbio_cqes_offset(sq_entries) + (size_t)cq_entries * USRBIO_CQE_SIZE;

	return (n + 4095) & ~(size_t)4095;
}

void usrbio_sqe_encode(const struct usrbio_sqe *s, uint8_t out[USRBIO_SQE_SIZE])
{
	memset(out, 0, USRBIO_SQE_SIZE);
	out[0] = s->op;
	out[1] = s->flags;
	le16_put(out + 2, s->buf_index);
	le32_put(out + 4, s->file_id);
	le64_put(out + 8, s->off);
	le64_put(out + 16, s->buf_off);
	le32_put(out + 24, s->len);
	le64_put(out + 32, s->user_data);
}

static bool zero(const uint8_t *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (p[i])
			return false;
	return true;
}

int usrbio_sqe_decode(const uint8_t in[USRBIO_SQE_SIZE], struct usrbio_sqe *ret)
{
	struct usrbio_sqe s = {.op = in[0],
			       .flags = in[1],
			       .buf_index = le16_get(in + 2),
			       .file_id = le32_get(in + 4),
			       .off = le64_get(in + 8),
			       .buf_off = le64_get(in + 16),
			       .len = le32_get(in + 24),
			       .user_data = le64_get(in + 32)};
	uint64_t end;

	*ret = s;
	if (!zero(in + 28, 4) || !zero(in + 40, USRBIO_SQE_SIZE - 40))
		return -EINVAL;
	switch (s.op) {
	case USRBIO_OP_READ:
	case USRBIO_OP_WRITE:
		if (s.flags || s.len == 0 || s.len > USRBIO_MAX_IO)
			return -EINVAL;
		if (__builtin_add_overflow(s.off, (uint64_t)s.len, &end) || end > INT64_MAX ||
		    __builtin_add_overflow(s.buf_off, (uint64_t)s.len, &end))
			return -EINVAL;
		return 0;
	case USRBIO_OP_FSYNC:
		return (s.flags & ~USRBIO_SQE_F_DATASYNC) || s.len || s.off || s.buf_off ||
			       s.buf_index
			   ? -EINVAL
			   : 0;
	default:
		return -EINVAL;
	}
}

void usrbio_cqe_encode(const struct usrbio_cqe *c, uint8_t out[USRBIO_CQE_SIZE])
{
	le64_put(out, c->user_data);
	le32_put(out + 8, (uint32_t)c->result);
	le32_put(out + 12, 0);
}

void usrbio_cqe_decode(const uint8_t in[USRBIO_CQE_SIZE], struct usrbio_cqe *ret)
{
	ret->user_data = le64_get(in);
	ret->result = (int32_t)le32_get(in + 8);
}
