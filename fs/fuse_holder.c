/* fuse_holder.c — the codec and the client side of the strata-fuse-holder
 * protocol (fuse_holder.h): encode/decode of the fixed little-endian
 * messages, sending and receiving them with an fd attached (SCM_RIGHTS),
 * and the one-shot calls strata-fuse and the CLI make. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/fuse_holder.h"
#include "fs/unix_seqpacket.h"
#include "fs/wire.h"

static bool has_payload(uint16_t type)
{
	return type == FUSE_HOLDER_DEPOSIT || type == FUSE_HOLDER_TAKE ||
	       type == FUSE_HOLDER_STATUS;
}

int fuse_holder_encode(uint16_t type, const struct fuse_holder_info *info, uint8_t *buf)
{
	size_t n = FUSE_HOLDER_HDR;

	le32_put(buf, FUSE_HOLDER_MAGIC);
	le16_put(buf + 4, FUSE_HOLDER_VERSION);
	le16_put(buf + 6, type);
	if (info && has_payload(type)) {
		size_t ml = strnlen(info->mount, sizeof(info->mount));

		if (info->init_len > FUSE_HOLDER_INIT_MAX || ml > FUSE_HOLDER_MOUNT_MAX)
			return -EINVAL;
		le32_put(buf + n, info->pid);
		le32_put(buf + n + 4, info->flags);
		le32_put(buf + n + 8, info->takeovers);
		le32_put(buf + n + 12, (uint32_t)info->init_len);
		le32_put(buf + n + 16, (uint32_t)ml);
		n += 20;
		memcpy(buf + n, info->init, info->init_len);
		n += info->init_len;
		memcpy(buf + n, info->mount, ml);
		n += ml;
		le64_put(buf + n, info->conn_id);
		n += 8;
	}
	le32_put(buf + 8, (uint32_t)(n - FUSE_HOLDER_HDR));
	return (int)n;
}

int fuse_holder_decode(const uint8_t *buf, size_t n, uint16_t *ret_type,
		       struct fuse_holder_info *ret_info)
{
	struct fuse_holder_info i = {0};
	size_t len, il, ml;

	if (n < FUSE_HOLDER_HDR || le32_get(buf) != FUSE_HOLDER_MAGIC)
		return -EBADMSG;
	if (le16_get(buf + 4) != FUSE_HOLDER_VERSION)
		return -EPROTO;
	len = le32_get(buf + 8);
	if (len != n - FUSE_HOLDER_HDR)
		return -EBADMSG;
	*ret_type = le16_get(buf + 6);
	if (!has_payload(*ret_type) || (len == 0 && *ret_type != FUSE_HOLDER_DEPOSIT))
		return 0; /* requests TAKE and STATUS have no payload */
	if (len < 20)
		return -EBADMSG;
	buf += FUSE_HOLDER_HDR;
	i.pid = le32_get(buf);
	i.flags = le32_get(buf + 4);
	i.takeovers = le32_get(buf + 8);
	il = le32_get(buf + 12);
	ml = le32_get(buf + 16);
	if (il > FUSE_HOLDER_INIT_MAX || ml > FUSE_HOLDER_MOUNT_MAX || 20 + il + ml > len)
		return -EBADMSG;
	i.init_len = il;
	memcpy(i.init, buf + 20, il);
	memcpy(i.mount, buf + 20 + il, ml);
	if (memchr(i.mount, '\0', ml))
		return -EBADMSG;
	if (len >= 20 + il + ml + 8)
		i.conn_id = le64_get(buf + 20 + il + ml);
	if (ret_info)
		*ret_info = i;
	return 0;
}

int fuse_holder_send(int sock, uint16_t type, const struct fuse_holder_info *info, int fd)
{
	uint8_t buf[FUSE_HOLDER_MSG_MAX];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int))];
	} c;
	int n = fuse_holder_encode(type, info, buf);
	struct iovec iov;
	struct msghdr m = {.msg_iov = &iov, .msg_iovlen = 1};

	if (n < 0)
		return n;
	iov = (struct iovec){.iov_base = buf, .iov_len = (size_t)n};
	if (fd >= 0) {
		memset(&c, 0, sizeof(c));
		m.msg_control = c.space;
		m.msg_controllen = sizeof(c.space);
		struct cmsghdr *cm = CMSG_FIRSTHDR(&m);
		cm->cmsg_level = SOL_SOCKET;
		cm->cmsg_type = SCM_RIGHTS;
		cm->cmsg_len = CMSG_LEN(sizeof(int));
		memcpy(CMSG_DATA(cm), &fd, sizeof(int));
	}
	ssize_t w;
	do {
		w = sendmsg(sock, &m, MSG_NOSIGNAL);
	} while (w < 0 && errno == EINTR);
	if (w < 0)
		return -errno;
	return w == n ? 0 : -EIO;
}

int fuse_holder_recv(int sock, uint16_t *ret_type, struct fuse_holder_info *ret_info, int *ret_fd)
{
	uint8_t buf[FUSE_HOLDER_MSG_MAX + 1];
	union {
		struct cmsghdr h;
		char space[CMSG_SPACE(sizeof(int))];
	} c;
	struct iovec iov = {.iov_base = buf, .iov_len = sizeof(buf)};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = c.space, .msg_controllen = sizeof(c)};
	int fd = -1, r;
	ssize_t n;

	if (ret_fd)
		*ret_fd = -1;
	do {
		n = recvmsg(sock, &m, MSG_CMSG_CLOEXEC);
	} while (n < 0 && errno == EINTR);
	if (n < 0)
		return -errno;
	if (n == 0)
		return -ECONNRESET;
	for (struct cmsghdr *cm = CMSG_FIRSTHDR(&m); cm; cm = CMSG_NXTHDR(&m, cm))
		if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_RIGHTS &&
		    cm->cmsg_len >= CMSG_LEN(sizeof(int)))
			memcpy(&fd, CMSG_DATA(cm), sizeof(int));
	r = (m.msg_flags & (MSG_TRUNC | MSG_CTRUNC))
		? -EBADMSG
		: fuse_holder_decode(buf, (size_t)n, ret_type, ret_info);
	if (r < 0 || !ret_fd) {
		if (fd >= 0)
			close(fd);
		return r;
	}
	*ret_fd = fd;
	return 0;
}

int fuse_holder_connect(const char *path)
{
	return unix_seqpacket_connect(path, FUSE_HOLDER_TIMEOUT_MS);
}

int fuse_holder_call(const char *path, uint16_t type, struct fuse_holder_info *ret_info,
		     int *ret_fd)
{
	struct fuse_holder_info info;
	uint16_t rt = 0;
	int s = fuse_holder_connect(path), fd = -1, r;

	if (s < 0)
		return s;
	r = fuse_holder_send(s, type, NULL, -1);
	if (r == 0)
		r = fuse_holder_recv(s, &rt, &info, type == FUSE_HOLDER_TAKE ? &fd : NULL);
	close(s);
	if (r < 0)
		return r;
	if (type == FUSE_HOLDER_TAKE && rt == FUSE_HOLDER_NONE)
		return 0;
	if (type == FUSE_HOLDER_TAKE && rt == FUSE_HOLDER_BUSY)
		return -EBUSY;
	if (rt != (type == FUSE_HOLDER_STOP ? FUSE_HOLDER_OK : type) ||
	    (type == FUSE_HOLDER_TAKE && fd < 0)) {
		if (fd >= 0)
			close(fd);
		return -EBADMSG;
	}
	if (ret_info)
		*ret_info = info;
	if (type == FUSE_HOLDER_TAKE) {
		*ret_fd = fd;
		return 1;
	}
	return 0;
}
