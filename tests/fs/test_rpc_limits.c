/* test_rpc_limits.c — the RPC server's authentication and limits (fs/rpc.h,
 * fs/rpc_auth.h) against the real strata-meta, started here on port 0 with
 * the suite's key ($STRATA_KEY) and stopped here, also on failure:
 *
 *  1. a client without the key, or with a wrong one, is refused and reads
 *     nothing of a 0600 file (neither its attributes nor its name); a raw
 *     request without the handshake gets no answer but a close;
 *  2. a fuse-role client cannot run admin operations (fsck, the admin view,
 *     registration, a directory's layout), an admin client can;
 *  3. 1,100 idle unauthenticated connections do not lock a client out;
 *  4. 40 authenticated connections announcing 8 MiB payloads keep
 *     strata-meta's VmRSS bounded (allocation follows the bytes that arrive);
 *  5. a connection that never completes its handshake is closed after
 *     RPC_HANDSHAKE_TIMEOUT_MS.
 * Each fails on the code before the handshake (1, 2, 5: everything served;
 * 3: the 1,025th connection refused; 4: meta grew by 40 x 8 MiB). */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include "fs/clock.h"
#include "fs/meta_client.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "tests/fs/testkey.h"
#include "tests/testutil.h"

#define FLOOD_CONNS 1100 /* more than RPC_MAX_CONNS: today's lock-out */
#define BIG_CONNS 40
#define RSS_SLACK_KB (64 << 10) /* 64 MiB: far below 40 x 8 MiB = 320 MiB */

static pid_t meta_pid;
static char meta_dir[] = "/tmp/test_rpc_limits.XXXXXX";
static char meta_addr[128];
static uint16_t meta_port;

static void stop_meta(void)
{
	if (meta_pid > 0) {
		kill(meta_pid, SIGKILL);
		waitpid(meta_pid, NULL, 0);
		meta_pid = 0;
		char cmd[128];
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", meta_dir);
		if (system(cmd) != 0)
			fprintf(stderr, "cannot remove %s\n", meta_dir);
	}
}

static void start_meta(void)
{
	const char *bindir = getenv("STRATA_BIN");
	char bin[512], db[300], af[300], log[300];
	snprintf(bin, sizeof(bin), "%s/strata-meta", bindir ? bindir : "bin");
	if (access(bin, X_OK) != 0) {
		printf("SKIP: %s is not built\n", bin);
		exit(77);
	}
	CHECK(mkdtemp(meta_dir));
	snprintf(db, sizeof(db), "%s/db", meta_dir);
	snprintf(af, sizeof(af), "%s/addr", meta_dir);
	snprintf(log, sizeof(log), "%s/meta.log", meta_dir);
	meta_pid = fork();
	CHECK(meta_pid >= 0);
	if (meta_pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execl(bin, bin, "--listen", "127.0.0.1:0", "--db", db, "--addr-file", af,
		      (char *)NULL);
		_exit(127);
	}
	atexit(stop_meta);
	for (int i = 0; i < 1500 && !meta_addr[0]; i++) {
		FILE *f = fopen(af, "r");
		if (f) {
			if (!fgets(meta_addr, sizeof(meta_addr), f))
				meta_addr[0] = 0;
			fclose(f);
		}
		if (!meta_addr[0])
			usleep(10000);
	}
	CHECK(meta_addr[0]);
	meta_addr[strcspn(meta_addr, "\n")] = 0;
	meta_port = (uint16_t)atoi(strrchr(meta_addr, ':') + 1);
}

static long meta_rss_kb(void)
{
	char path[64], line[256];
	long kb = -1;
	snprintf(path, sizeof(path), "/proc/%d/status", (int)meta_pid);
	FILE *f = fopen(path, "r");
	CHECK(f);
	while (fgets(line, sizeof(line), f))
		if (sscanf(line, "VmRSS: %ld kB", &kb) == 1)
			break;
	fclose(f);
	return kb;
}

static int raw_connect(void)
{
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	struct sockaddr_in in = {.sin_family = AF_INET, .sin_port = htons(meta_port)};
	in.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&in, sizeof(in)) == 0)
		return fd;
	if (fd >= 0)
		close(fd);
	return -1;
}

/* True if the server closes fd (EOF or reset) within ms. */
static bool closed_within(int fd, int ms)
{
	struct pollfd p = {.fd = fd, .events = POLLIN};
	if (poll(&p, 1, ms) <= 0)
		return false;
	char b[256];
	ssize_t n;
	while ((n = recv(fd, b, sizeof(b), MSG_DONTWAIT)) > 0)
		; /* a refusal frame may come first */
	return n == 0 || (n < 0 && errno == ECONNRESET);
}

static struct meta_client *client_as(const struct rpc_cred *cred)
{
	struct rpc_client_opts o = {.timeout_ms = 5000, .max_conns = 4, .cred = cred};
	return meta_client_new(meta_addr, "test-limits", &o);
}

static void test_no_key(struct rpc_cred *admin)
{
	struct meta_client *mc = client_as(admin);
	struct strata_attr a;
	uint64_t sid;
	CHECK_EQ(meta_create(mc, NULL, STRATA_ROOT_INO, "secret", 0600, 0, 0, O_CREAT | O_RDWR, &a,
			     &sid),
		 0);
	CHECK_EQ(meta_close(mc, a.ino, sid, 5, -1), 0);
	strata_ino_t ino = a.ino;

	struct rpc_cred wrong = *admin;
	wrong.key.b[0] ^= 1;
	struct meta_client *bad = client_as(&wrong);
	struct strata_attr got = {0};
	CHECK_EQ(meta_lookup(bad, STRATA_ROOT_INO, "secret", &got), -EKEYREJECTED);
	CHECK_EQ(meta_getattr(bad, ino, &got), -EKEYREJECTED);
	CHECK_EQ(got.ino, 0);
	meta_client_free(bad);

	/* a raw LOOKUP without the handshake: closed, no reply frame */
	struct wbuf w;
	wbuf_init(&w);
	wbuf_put_u64(&w, STRATA_ROOT_INO);
	wbuf_put_str(&w, "secret");
	uint8_t hdr[WIRE_HDR_SIZE];
	struct wire_hdr h = {.type = MSG_META_LOOKUP, .req_id = 1};
	wire_hdr_seal(&h, w.data, w.len, hdr);
	int fd = raw_connect();
	CHECK(fd >= 0);
	CHECK(write(fd, hdr, sizeof(hdr)) == sizeof(hdr) &&
	      write(fd, w.data, w.len) == (ssize_t)w.len);
	uint8_t back[WIRE_HDR_SIZE];
	struct pollfd p = {.fd = fd, .events = POLLIN};
	CHECK(poll(&p, 1, 3000) == 1);
	ssize_t n = recv(fd, back, sizeof(back), MSG_WAITALL);
	if (n == WIRE_HDR_SIZE) /* a refusal: status only, no payload */
		CHECK((int32_t)le32_get(back + 12) < 0 && le32_get(back + 24) == 0);
	CHECK(closed_within(fd, 3000));
	close(fd);
	wbuf_done(&w);
	meta_client_free(mc);
}

static void test_roles(struct rpc_cred *admin)
{
	struct rpc_cred fuse = *admin;
	fuse.role = RPC_ROLE_FUSE;
	struct meta_client *mf = client_as(&fuse), *ma = client_as(admin);
	struct meta_fsck_report rep = {0};
	CHECK_EQ(meta_fsck(mf, META_FSCK_REPAIR, &rep), -EPERM);
	meta_fsck_report_done(&rep);
	CHECK_EQ(meta_fsck(ma, 0, &rep), 0);
	meta_fsck_report_done(&rep);
	struct mgmt_cluster c;
	CHECK_EQ(mgmt_cluster(mf, &c), -EPERM);
	CHECK_EQ(mgmt_cluster(ma, &c), 0);
	mgmt_cluster_done(&c);
	uint32_t node;
	struct mgmt_target_info ti = {.target_id = 0};
	CHECK_EQ(mgmt_register(mf, &node, "127.0.0.1:1", &ti, 1), -EPERM);
	struct strata_attr a;
	CHECK_EQ(meta_mkdir(mf, NULL, STRATA_ROOT_INO, "dir", 0755, 0, 0, &a), 0);
	struct strata_setattr sa = {.valid = STRATA_SET_REPLICAS, .replicas = 1};
	CHECK_EQ(meta_setattr(mf, a.ino, &sa, &a), -EPERM);
	/* admin passes the role check (no chain table of factor 1 yet: -ERANGE) */
	CHECK(meta_setattr(ma, a.ino, &sa, &a) != -EPERM);
	meta_client_free(mf);
	meta_client_free(ma);
}

static void raise_nofile(void)
{
	struct rlimit rl;
	CHECK(getrlimit(RLIMIT_NOFILE, &rl) == 0);
	if (rl.rlim_max < FLOOD_CONNS + 200) {
		printf("SKIP: RLIMIT_NOFILE hard limit %lu is below %d\n",
		       (unsigned long)rl.rlim_max, FLOOD_CONNS + 200);
		exit(77);
	}
	rl.rlim_cur = rl.rlim_max;
	CHECK(setrlimit(RLIMIT_NOFILE, &rl) == 0);
}

static void test_flood(struct rpc_cred *admin)
{
	static int fds[FLOOD_CONNS];
	int n = 0;
	for (int i = 0; i < FLOOD_CONNS; i++)
		if ((fds[n] = raw_connect()) >= 0)
			n++;
	CHECK_EQ(n, FLOOD_CONNS);
	usleep(200 * 1000);
	int64_t t0 = strata_mono_ms();
	struct meta_client *mc = client_as(admin);
	CHECK_EQ(meta_ping(mc), 0);
	struct strata_attr a;
	CHECK_EQ(meta_getattr(mc, STRATA_ROOT_INO, &a), 0);
	CHECK(strata_mono_ms() - t0 < 2000);
	meta_client_free(mc);
	/* the flood was cut to the handshake cap, the oldest first */
	int open = 0;
	for (int i = 0; i < n; i++)
		open += !closed_within(fds[i], 0);
	CHECK(open <= RPC_HANDSHAKE_PEER_MAX + 1);
	for (int i = 0; i < n; i++)
		close(fds[i]);
}

/* An authenticated connection (the handshake by hand) that announces an
 * 8 MiB request and sends 4 KiB of it. */
static int big_announcer(const struct rpc_cred *cred)
{
	int fd = raw_connect();
	CHECK(fd >= 0);
	struct rpc_auth_client a;
	struct wbuf out;
	wbuf_init(&out);
	rpc_auth_client_hello(&a, cred, &out);
	CHECK(write(fd, out.data, out.len) == (ssize_t)out.len);
	uint8_t hdr[WIRE_HDR_SIZE], p[RPC_AUTH_MAX_PAYLOAD];
	struct wire_hdr h;
	const char *why;
	CHECK(recv(fd, hdr, sizeof(hdr), MSG_WAITALL) == sizeof(hdr));
	CHECK_EQ(wire_hdr_decode(hdr, &h, NULL), 0);
	CHECK(recv(fd, p, h.payload_len, MSG_WAITALL) == (ssize_t)h.payload_len);
	wbuf_reset(&out);
	CHECK_EQ(rpc_auth_client_challenge(&a, &h, p, &out, &why), 0);
	struct wire_hdr big = {.type = MSG_META_PING, .req_id = 9};
	static uint8_t junk[4096];
	wire_hdr_seal(&big, junk, sizeof(junk), hdr);
	le32_put(hdr + 24, WIRE_MAX_PAYLOAD); /* announce 8 MiB */
	wbuf_put_bytes(&out, hdr, sizeof(hdr));
	wbuf_put_bytes(&out, junk, sizeof(junk));
	CHECK(write(fd, out.data, out.len) == (ssize_t)out.len);
	wbuf_done(&out);
	return fd;
}

static void test_big_payloads(struct rpc_cred *admin)
{
	usleep(300 * 1000);
	long before = meta_rss_kb();
	int fds[BIG_CONNS];
	for (int i = 0; i < BIG_CONNS; i++)
		fds[i] = big_announcer(admin);
	usleep(500 * 1000);
	long after = meta_rss_kb();
	printf("strata-meta VmRSS %ld kB -> %ld kB with %d connections announcing 8 MiB\n", before,
	       after, BIG_CONNS);
	CHECK(after - before < RSS_SLACK_KB);
	struct meta_client *mc = client_as(admin);
	CHECK_EQ(meta_ping(mc), 0);
	meta_client_free(mc);
	for (int i = 0; i < BIG_CONNS; i++)
		close(fds[i]);
}

static void test_handshake_deadline(void)
{
	int fd = raw_connect();
	CHECK(fd >= 0);
	int64_t t0 = strata_mono_ms();
	CHECK(closed_within(fd, RPC_HANDSHAKE_TIMEOUT_MS + 3000));
	int64_t took = strata_mono_ms() - t0;
	CHECK(took >= RPC_HANDSHAKE_TIMEOUT_MS - 100);
	close(fd);
}

int main(void)
{
	test_key_setup(RPC_ROLE_ADMIN);
	if (!getenv(RPC_KEY_ENV)) {
		printf("SKIP: $%s is not set (strata-meta needs the key)\n", RPC_KEY_ENV);
		return 77;
	}
	raise_nofile();
	signal(SIGPIPE, SIG_IGN);
	start_meta();
	struct rpc_cred admin = *rpc_auth_default();
	test_no_key(&admin);
	test_roles(&admin);
	test_flood(&admin);
	test_big_payloads(&admin);
	test_handshake_deadline();
	printf("test_rpc_limits: ok\n");
	return 0;
}
