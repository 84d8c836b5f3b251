/* test_fuse_holder.c — the strata-fuse-holder protocol (fs/fuse_holder.h):
 * encode/decode round trips, the limits, a newer major refused, and an fd
 * passed over a socketpair arrives as a working descriptor of the same
 * file. */
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/fuse_holder.h"
#include "fs/wire.h"
#include "tests/testutil.h"

static void test_roundtrip(void)
{
	struct fuse_holder_info in = {.pid = 42, .flags = FUSE_HOLDER_F_HOLDING, .takeovers = 3};
	struct fuse_holder_info out;
	uint8_t buf[FUSE_HOLDER_MSG_MAX];
	uint16_t type = 0;

	in.init_len = 104;
	memset(in.init, 0xab, in.init_len);
	strcpy(in.mount, "/tmp/x/mnt");
	in.conn_id = 0x0123456789abcdefull;
	int n = fuse_holder_encode(FUSE_HOLDER_DEPOSIT, &in, buf);
	EXPECT(n == FUSE_HOLDER_HDR + 20 + 104 + 10 + 8);
	memset(&out, 0, sizeof(out));
	EXPECT(fuse_holder_decode(buf, (size_t)n, &type, &out) == 0);
	EXPECT(type == FUSE_HOLDER_DEPOSIT && out.pid == 42 && out.takeovers == 3);
	EXPECT(out.init_len == 104 && memcmp(out.init, in.init, 104) == 0);
	EXPECT(strcmp(out.mount, "/tmp/x/mnt") == 0);
	EXPECT(out.conn_id == 0x0123456789abcdefull);
	/* a holder from before the conn id (the message ends after the mount):
	 * decoded, with conn id 0 */
	le32_put(buf + 8, (uint32_t)(n - 8 - FUSE_HOLDER_HDR));
	EXPECT(fuse_holder_decode(buf, (size_t)n - 8, &type, &out) == 0);
	EXPECT(out.conn_id == 0 && strcmp(out.mount, "/tmp/x/mnt") == 0);
	le32_put(buf + 8, (uint32_t)(n - FUSE_HOLDER_HDR));
	/* truncated, a wrong length, another major version */
	EXPECT(fuse_holder_decode(buf, (size_t)n - 1, &type, &out) == -EBADMSG);
	buf[4] = 2;
	EXPECT(fuse_holder_decode(buf, (size_t)n, &type, &out) == -EPROTO);
	/* a payload field past its limit is refused when encoding */
	in.init_len = FUSE_HOLDER_INIT_MAX + 1;
	EXPECT(fuse_holder_encode(FUSE_HOLDER_DEPOSIT, &in, buf) == -EINVAL);
	/* a request without payload */
	n = fuse_holder_encode(FUSE_HOLDER_TAKE, NULL, buf);
	EXPECT(n == FUSE_HOLDER_HDR);
	EXPECT(fuse_holder_decode(buf, (size_t)n, &type, NULL) == 0 && type == FUSE_HOLDER_TAKE);
}

static void test_fd_passing(void)
{
	struct fuse_holder_info in = {.init_len = 40}, out;
	struct stat a, b;
	uint16_t type = 0;
	int sp[2], fd = -1;
	char tmpl[] = "/tmp/fuse-holder-test.XXXXXX";
	int f = mkstemp(tmpl);

	EXPECT(f >= 0);
	unlink(tmpl);
	strcpy(in.mount, "/m");
	EXPECT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
	EXPECT(fuse_holder_send(sp[0], FUSE_HOLDER_DEPOSIT, &in, f) == 0);
	EXPECT(fuse_holder_recv(sp[1], &type, &out, &fd) == 0);
	EXPECT(type == FUSE_HOLDER_DEPOSIT && fd >= 0 && fd != f);
	EXPECT(fstat(f, &a) == 0 && fstat(fd, &b) == 0 && a.st_ino == b.st_ino);
	close(sp[0]);
	EXPECT(fuse_holder_recv(sp[1], &type, &out, &fd) == -ECONNRESET);
	close(sp[1]);
	close(f);
}

int main(void)
{
	test_roundtrip();
	test_fd_passing();
	return test_result("test_fuse_holder");
}
