/* test_usrbio_proto.c — the native client's contract (fs/usrbio_proto.h)
 * alone: messages round-trip, malformed ones and other majors are refused,
 * fds travel and extra ones are closed, submissions are checked, the ring
 * shapes and sizes hold. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/usrbio_proto.h"
#include "fs/wire.h"
#include "tests/testutil.h"

static void test_msg(void)
{
	struct usrbio_msg m = {.type = USRBIO_REPLY,
			       .sq_entries = 8,
			       .cq_entries = 16,
			       .buf_size = 1ull << 33,
			       .file_id = 7,
			       .status = -EXDEV,
			       .value = 99,
			       .file_size = 12345},
			  d;
	uint8_t buf[USRBIO_MSG_MAX + 8];
	size_t n = usrbio_msg_encode(&m, buf);

	CHECK_EQ(n, USRBIO_MSG_MAX);
	CHECK_EQ(usrbio_msg_decode(buf, n, &d), 0);
	CHECK(!memcmp(&m, &d, sizeof(m)) ||
	      (d.type == m.type && d.status == m.status && d.buf_size == m.buf_size &&
	       d.value == m.value && d.file_size == m.file_size && d.file_id == m.file_id));
	CHECK_EQ(usrbio_msg_decode(buf, n - 1, &d), -EBADMSG); /* length field disagrees */
	CHECK_EQ(usrbio_msg_decode(buf, 8, &d), -EBADMSG);
	le16_put(buf + 4, USRBIO_MAJOR + 1);
	CHECK_EQ(usrbio_msg_decode(buf, n, &d), -EPROTO);
	le16_put(buf + 4, USRBIO_MAJOR);
	le16_put(buf + 8, 77);
	CHECK_EQ(usrbio_msg_decode(buf, n, &d), -EBADMSG); /* unknown type */
	le16_put(buf + 8, USRBIO_SETUP);
	le32_put(buf + 12, USRBIO_PAYLOAD + 8); /* a newer minor's longer payload */
	CHECK_EQ(usrbio_msg_decode(buf, n + 8, &d), 0);
	buf[0] ^= 1;
	CHECK_EQ(usrbio_msg_decode(buf, n, &d), -EBADMSG);
}

static void test_fds(void)
{
	int sp[2], fds[3], nfds, pipes[6];
	struct usrbio_msg m = {.type = USRBIO_SETUP}, d;

	CHECK_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sp), 0);
	for (int i = 0; i < 3; i++)
		CHECK_EQ(pipe(pipes + 2 * i), 0);
	int send_fds[3] = {pipes[0], pipes[2], pipes[4]};
	CHECK_EQ(usrbio_msg_send(sp[0], &m, send_fds, 3, false), 0);
	CHECK_EQ(usrbio_msg_recv(sp[1], &d, fds, 1, &nfds), 0); /* room for one: two closed */
	CHECK_EQ(nfds, 1);
	CHECK(fds[0] >= 0);
	close(fds[0]);
	CHECK_EQ(usrbio_msg_send(sp[0], &m, send_fds, 4, false), -EINVAL);
	/* garbage with an fd: refused, the fd closed */
	CHECK_EQ(send(sp[0], "junk", 4, 0), 4);
	CHECK_EQ(usrbio_msg_recv(sp[1], &d, fds, 3, &nfds), -EBADMSG);
	CHECK_EQ(nfds, 0);
	close(sp[0]);
	CHECK_EQ(usrbio_msg_recv(sp[1], &d, fds, 3, &nfds), -ECONNRESET);
	close(sp[1]);
	for (int i = 0; i < 6; i++)
		close(pipes[i]);
}

static void test_sqe(void)
{
	struct usrbio_sqe s = {.op = USRBIO_OP_READ,
			       .buf_index = 2,
			       .file_id = 9,
			       .off = 1 << 20,
			       .buf_off = 4096,
			       .len = 4096,
			       .user_data = 0xabcdef},
			  d;
	uint8_t raw[USRBIO_SQE_SIZE];

	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), 0);
	CHECK(d.op == s.op && d.buf_index == 2 && d.file_id == 9 && d.off == s.off &&
	      d.buf_off == 4096 && d.len == 4096 && d.user_data == 0xabcdef);
	raw[45] = 1;
	CHECK_EQ(usrbio_sqe_decode(raw, &d), -EINVAL);
	CHECK_EQ(d.user_data, 0xabcdef); /* for the error completion */
	s.len = USRBIO_MAX_IO + 1;
	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), -EINVAL);
	s.len = USRBIO_MAX_IO;
	s.off = (uint64_t)INT64_MAX;
	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), -EINVAL);
	s.off = 0;
	s.buf_off = UINT64_MAX;
	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), -EINVAL);
	s = (struct usrbio_sqe){.op = USRBIO_OP_FSYNC, .flags = USRBIO_SQE_F_DATASYNC};
	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), 0);
	s.len = 1;
	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), -EINVAL);
	s = (struct usrbio_sqe){.op = 0, .len = 1};
	usrbio_sqe_encode(&s, raw);
	CHECK_EQ(usrbio_sqe_decode(raw, &d), -EINVAL);

	struct usrbio_cqe c = {.user_data = 5, .result = -EBADF}, cd;
	uint8_t cr[USRBIO_CQE_SIZE];
	usrbio_cqe_encode(&c, cr);
	usrbio_cqe_decode(cr, &cd);
	CHECK(cd.user_data == 5 && cd.result == -EBADF);
}

static void test_shape(void)
{
	CHECK(usrbio_shape_ok(1, 1));
	CHECK(usrbio_shape_ok(32, 64));
	CHECK(!usrbio_shape_ok(0, 8));
	CHECK(!usrbio_shape_ok(3, 8));
	CHECK(!usrbio_shape_ok(16, 8));
	CHECK(!usrbio_shape_ok(USRBIO_MAX_ENTRIES, USRBIO_MAX_ENTRIES * 2));
	CHECK_EQ(usrbio_cqes_offset(32), 4096 + 32 * 64);
	CHECK_EQ(usrbio_ring_size(32, 64), 8192);
	CHECK_EQ(usrbio_ring_size(USRBIO_MAX_ENTRIES / 2, USRBIO_MAX_ENTRIES) % 4096, 0);
}

int main(void)
{
	test_msg();
	test_fds();
	test_sqe();
	test_shape();
	return 0;
}
