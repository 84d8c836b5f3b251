/* test_agent.c — strata-agent on its own, as a plain child process on a
 * socketpair (no namespaces, no root needed): exec with output, exit codes,
 * signals, stdin, env, cwd, timeouts and the output cap; the file
 * operations in a temp dir; unknown requests; a corrupt frame ends the
 * session. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/agent/proto.h"
#include "tests/sandbox/spawn_agent.h"
#include "sandbox/container/strata_sandbox.h"
#include "tests/testutil.h"

struct out {
	char buf[2][65536];
	size_t len[2];
	size_t total;
};

static int collect(void *ud, int stream, const void *d, size_t n)
{
	struct out *o = ud;
	size_t *l = &o->len[stream - 1];
	size_t k = n < sizeof(o->buf[0]) - 1 - *l ? n : sizeof(o->buf[0]) - 1 - *l;
	memcpy(o->buf[stream - 1] + *l, d, k);
	*l += k;
	o->buf[stream - 1][*l] = 0;
	o->total += n;
	return 0;
}

static int give_up(void *ud, int stream, const void *d, size_t n)
{
	return -ECANCELED;
}

static int run(struct sbx *s, struct sbx_exec_opts *o, struct out *out, struct sbx_exec_result *res)
{
	memset(out, 0, sizeof(*out));
	return sbx_exec(s, o, collect, out, res);
}

static void test_exec(struct sbx *s)
{
	static struct out o;
	struct sbx_exec_result r;
	const char *echo[] = {"/bin/sh", "-c", "echo hello; echo oops >&2; exit 3", NULL};
	struct sbx_exec_opts opts = {.argv = echo};
	EXPECT(run(s, &opts, &o, &r) == 0);
	EXPECT(!strcmp(o.buf[0], "hello\n") && !strcmp(o.buf[1], "oops\n"));
	EXPECT(r.exit_code == 3 && r.signo == 0 && !r.timed_out && !r.truncated);

	const char *sig[] = {"/bin/sh", "-c", "kill -TERM $$", NULL};
	opts = (struct sbx_exec_opts){.argv = sig};
	EXPECT(run(s, &opts, &o, &r) == 0 && r.signo == SIGTERM && r.exit_code == -1);

	const char *cat[] = {"cat", NULL};
	opts = (struct sbx_exec_opts){.argv = cat, .stdin_data = "abc", .stdin_len = 3};
	EXPECT(run(s, &opts, &o, &r) == 0 && !strcmp(o.buf[0], "abc") && r.exit_code == 0);

	/* the request's variables over Docker's defaults (PATH, HOME, HOSTNAME) */
	const char *env[] = {"/bin/sh", "-c", "echo $FOO $HOME; pwd; [ -n \"$PATH$HOSTNAME\" ]",
			     NULL};
	const char *envv[] = {"FOO=bar", "HOME=/h", NULL};
	opts = (struct sbx_exec_opts){.argv = env, .env = envv, .cwd = "/tmp"};
	EXPECT(run(s, &opts, &o, &r) == 0 && !strcmp(o.buf[0], "bar /h\n/tmp\n") && !r.exit_code);

	/* a start that fails says which step did */
	const char *nope[] = {"/nonexistent/binary", NULL};
	opts = (struct sbx_exec_opts){.argv = nope};
	EXPECT(run(s, &opts, &o, &r) == -ENOENT && r.failed_step == SBX_STEP_EXEC);
	opts = (struct sbx_exec_opts){.argv = echo, .cwd = "/nonexistent"};
	EXPECT(run(s, &opts, &o, &r) == -ENOENT && r.failed_step == SBX_STEP_CWD);
	opts = (struct sbx_exec_opts){.argv = echo, .user = "no-such-user-strata"};
	EXPECT(run(s, &opts, &o, &r) == -ENOENT && r.failed_step == SBX_STEP_USER);
	const char *noexec[] = {"/etc/passwd", NULL};
	opts = (struct sbx_exec_opts){.argv = noexec};
	EXPECT(run(s, &opts, &o, &r) == -EACCES && r.failed_step == SBX_STEP_EXEC);

	const char *slp[] = {"/bin/sh", "-c", "sleep 10; echo late", NULL};
	opts = (struct sbx_exec_opts){.argv = slp, .timeout_ms = 200};
	EXPECT(run(s, &opts, &o, &r) == 0 && r.timed_out && r.signo == SIGKILL);
	EXPECT(r.duration_us < 3000000 && o.len[0] == 0);

	/* Output floods while the client is still sending 1 MiB of stdin:
	 * neither side may block the other. */
	size_t big = 1 << 20;
	char *in = malloc(big);
	memset(in, 'x', big);
	const char *flood[] = {"/bin/sh", "-c", "yes | head -c 20000000; cat > /dev/null", NULL};
	opts = (struct sbx_exec_opts){.argv = flood,
				      .stdin_data = in,
				      .stdin_len = big,
				      .timeout_ms = 20000,
				      .output_cap = 64 << 20};
	EXPECT(run(s, &opts, &o, &r) == 0 && r.exit_code == 0 && o.total == 20000000);
	free(in);

	/* The output callback gives up: the exec is killed, its error returned,
	 * and the stream is still in sync for the next one. */
	const char *yes0[] = {"yes", NULL};
	opts = (struct sbx_exec_opts){.argv = yes0, .stdin_data = "", .stdin_len = 0};
	EXPECT(sbx_exec(s, &opts, give_up, NULL, &r) == -ECANCELED);
	opts = (struct sbx_exec_opts){.argv = echo};
	EXPECT(run(s, &opts, &o, &r) == 0 && r.exit_code == 3);

	const char *yes[] = {"yes", NULL};
	opts = (struct sbx_exec_opts){.argv = yes, .timeout_ms = 1000, .output_cap = 100000};
	EXPECT(run(s, &opts, &o, &r) == 0 && r.truncated && o.total == 100000);
	EXPECT(r.stdout_bytes > 100000 && r.timed_out);
}

static void test_files(struct sbx *s)
{
	char dir[] = "/tmp/strata-agent-test-XXXXXX", p[256], q[256];
	EXPECT(mkdtemp(dir) != NULL);
	snprintf(p, sizeof(p), "%s/f", dir);
	EXPECT(sbx_file_write(s, p, "data", 4, 0640) == 0);
	void *d = NULL;
	size_t n = 0;
	uint64_t size = 0;
	EXPECT(sbx_file_read(s, p, 0, 100, &d, &n, &size) == 0 && n == 4 && size == 4 &&
	       !memcmp(d, "data", 4));
	free(d);
	EXPECT(sbx_file_read(s, p, 2, 100, &d, &n, NULL) == 0 && n == 2);
	free(d);
	struct sbx_stat st;
	EXPECT(sbx_file_stat(s, p, &st) == 0 && st.type == 1 && st.size == 4 && st.mode == 0640);
	snprintf(q, sizeof(q), "%s/a/b/c", dir);
	EXPECT(sbx_file_mkdir(s, q, 0755, false) == -ENOENT);
	EXPECT(sbx_file_mkdir(s, q, 0755, true) == 0);
	EXPECT(sbx_file_mkdir(s, q, 0755, true) == 0);
	struct sbx_dirent *ents = NULL;
	size_t ne = 0;
	EXPECT(sbx_file_list(s, dir, &ents, &ne) == 0 && ne == 2);
	sbx_dirents_free(ents, ne);
	EXPECT(sbx_file_read(s, dir, 0, 10, &d, &n, NULL) == -EISDIR);
	snprintf(q, sizeof(q), "%s/fifo", dir);
	mkfifo(q, 0600);
	EXPECT(sbx_file_read(s, q, 0, 10, &d, &n, NULL) == -EINVAL); /* and no hang */
	snprintf(q, sizeof(q), "%s/a", dir);
	EXPECT(sbx_file_remove(s, q, false) == -ENOTEMPTY);
	EXPECT(sbx_file_remove(s, q, true) == 0);
	EXPECT(sbx_file_stat(s, q, &st) == -ENOENT);
	EXPECT(sbx_file_remove(s, dir, true) == 0);
	EXPECT(access(dir, F_OK) < 0);
}

/* An unknown request gets -EOPNOTSUPP; a corrupt header ends the agent. */
static void test_raw(int fd, pid_t pid)
{
	uint8_t h[AG_HDR_SIZE], in[AG_HDR_SIZE + 4];
	ag_hdr_encode(999, 42, 0, h);
	EXPECT(write(fd, h, sizeof(h)) == sizeof(h));
	ssize_t n = 0, k;
	while (n < (ssize_t)sizeof(in) && (k = read(fd, in + n, sizeof(in) - n)) > 0)
		n += k;
	struct ag_hdr d;
	EXPECT(n == sizeof(in) && ag_hdr_decode(in, &d) == 0 && d.id == 42 &&
	       d.type == (999 | AG_T_REPLY));
	EXPECT((int32_t)(in[16] | in[17] << 8 | in[18] << 16 | (uint32_t)in[19] << 24) ==
	       -EOPNOTSUPP);
	memset(h, 0xee, sizeof(h));
	EXPECT(write(fd, h, sizeof(h)) == sizeof(h));
	int status = 0;
	EXPECT(waitpid(pid, &status, 0) == pid && WIFEXITED(status));
}

int main(void)
{
	struct sbx *s = NULL;
	int raw = -1;
	int r = spawn_test_agent(&s, NULL, &raw);
	if (r < 0) {
		fprintf(stderr, "cannot start strata-agent: %s\n", strerror(-r));
		return 1;
	}
	test_exec(s);
	test_files(s);
	test_raw(raw, sbx_pid(s));
	sbx_destroy(s);
	return test_result("sandbox_agent");
}
