/* fc_record — drives strata's Firecracker API client (sandbox/sandboxd/
 * fc_client.h) against a recorder: a unix socket server in this process that
 * writes every request it receives (method, path, body) as one JSON line to
 * argv[1] and answers 204. check_schema.py validates those lines against the
 * Firecracker OpenAPI subset beside it. The recorder also answers the ways a
 * Firecracker fails (400 with fault_message, no answer, an oversized answer)
 * and this program asserts the client's errors for them. */
#include "sandbox/sandboxd/fc_client.h"
#include "fs/json.h"

#include <errno.h>
#include <pthread.h>
#include <stdint.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

enum mode { M_OK, M_FAULT, M_SILENT, M_HUGE };
static volatile int mode;
static FILE *out;
static int lfd;

#define CHECK(c)                                                                                   \
	do {                                                                                       \
		if (!(c)) {                                                                        \
			fprintf(stderr, "%s:%d: check failed: %s\n", __FILE__, __LINE__, #c);      \
			exit(1);                                                                   \
		}                                                                                  \
	} while (0)

static void serve(int fd)
{
	static char buf[1 << 17];
	size_t len = 0;
	char *end = NULL;
	while (!end && len < sizeof(buf) - 1) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			return;
		len += (size_t)n;
		buf[len] = 0;
		end = strstr(buf, "\r\n\r\n");
	}
	if (!end)
		return;
	size_t hlen = (size_t)(end - buf) + 4, clen = 0;
	char *cl = strstr(buf, "Content-Length: ");
	if (cl && cl < end)
		clen = strtoul(cl + 16, NULL, 10);
	while (len < hlen + clen) {
		ssize_t n = read(fd, buf + len, sizeof(buf) - 1 - len);
		if (n <= 0)
			return;
		len += (size_t)n;
	}
	char method[16] = "", path[128] = "";
	sscanf(buf, "%15s %127s", method, path);
	if (mode == M_OK) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kstr(&w, "method", method);
		jw_kstr(&w, "path", path);
		jw_key(&w, "body");
		jw_strn(&w, buf + hlen, clen);
		jw_obj_end(&w);
		fwrite(w.buf, 1, w.len, out);
		fputc('\n', out);
		fflush(out);
		jw_done(&w);
		dprintf(
		    fd,
		    "HTTP/1.1 204 \r\nServer: Firecracker API\r\nConnection: keep-alive\r\n\r\n");
	} else if (mode == M_FAULT) {
		const char *b =
		    "{\"fault_message\":\"The requested operation is not supported in the "
		    "current state\"}";
		dprintf(fd,
			"HTTP/1.1 400 \r\nContent-Type: application/json\r\nContent-Length: "
			"%zu\r\n\r\n%s",
			strlen(b), b);
	} else if (mode == M_SILENT) {
		sleep(2);
	} else {
		dprintf(fd, "HTTP/1.1 200 \r\nContent-Length: %d\r\n\r\n", 200000);
		static char junk[100000];
		memset(junk, 'x', sizeof(junk));
		(void)!write(fd, junk, sizeof(junk));
	}
}

static void *server(void *arg)
{
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		if (fd < 0)
			return NULL;
		serve(fd);
		close(fd);
	}
}

static int64_t ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

static void send_ok(const char *sock, int built, struct fc_req *r)
{
	CHECK(built == 0);
	struct strata_err e = {0};
	int rc = fc_send(sock, r, 2000, NULL, NULL, &e);
	if (rc != 204)
		fprintf(stderr, "%s %s: %d %s\n", r->method, r->path, rc, e.msg);
	CHECK(rc == 204);
	fc_req_done(r);
}

int main(int argc, char **argv)
{
	if (argc != 2) {
		fprintf(stderr, "usage: fc_record OUT.jsonl\n");
		return 2;
	}
	/* The recorder's huge answer is cut off by the client on purpose: its
	 * write must fail with EPIPE, not kill this process (the test was
	 * flaky: SIGPIPE whenever the client closed first) */
	signal(SIGPIPE, SIG_IGN);
	out = fopen(argv[1], "w");
	CHECK(out);
	char dir[] = "/tmp/fc_record.XXXXXX";
	CHECK(mkdtemp(dir));
	char sock[128];
	snprintf(sock, sizeof(sock), "%s/api.sock", dir);
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	strcpy(sa.sun_path, sock);
	lfd = socket(AF_UNIX, SOCK_STREAM, 0);
	CHECK(lfd >= 0 && bind(lfd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
	      listen(lfd, 8) == 0);
	pthread_t t;
	pthread_create(&t, NULL, server, NULL);

	/* Every request the firecracker backend sends, as it sends them. */
	struct fc_req r;
	send_ok(sock, fc_req_machine_config(&r, 2, 512), &r);
	send_ok(sock,
		fc_req_boot_source(&r, "/g/vmlinuz", "/g/initrd.img",
				   "console=ttyS0 reboot=k panic=1 strata.agent=vsock:52"),
		&r);
	send_ok(sock, fc_req_boot_source(&r, "/g/vmlinuz", NULL, NULL), &r);
	send_ok(sock, fc_req_drive(&r, "meta", "/s/img/meta.erofs", true, false), &r);
	send_ok(sock, fc_req_drive(&r, "blob0", "/s/img/blob0", true, false), &r);
	send_ok(sock, fc_req_drive(&r, "disk", "/s/sb/disk.ext4", false, false), &r);
	send_ok(sock, fc_req_vsock(&r, 3, "/s/sb/vsock.sock"), &r);
	send_ok(sock, fc_req_start(&r), &r);
	send_ok(sock, fc_req_vm_state(&r, true), &r);
	send_ok(sock, fc_req_vm_state(&r, false), &r);
	send_ok(sock, fc_req_snapshot_create(&r, "/s/sb/vm.state", "/s/sb/vm.mem"), &r);
	send_ok(sock, fc_req_snapshot_load(&r, "/s/sb/vm.state", "/s/sb/vm.mem", true), &r);
	fclose(out);

	/* Builders refuse what Firecracker would. */
	CHECK(fc_req_drive(&r, "a/b", "/x", true, false) == -EINVAL);
	CHECK(fc_req_drive(&r, "", "/x", true, false) == -EINVAL);
	CHECK(fc_req_machine_config(&r, 33, 128) == -EINVAL);
	CHECK(fc_req_vsock(&r, 2, "/x") == -EINVAL);
	CHECK(fc_req_boot_source(&r, "", NULL, NULL) == -EINVAL);

	/* Firecracker's fault_message reaches the error. */
	struct strata_err e = {0};
	CHECK(fc_req_start(&r) == 0);
	mode = M_FAULT;
	CHECK(fc_send(sock, &r, 2000, NULL, NULL, &e) == -EIO);
	CHECK(strstr(e.msg, "PUT /actions: 400: The requested operation is not supported"));
	/* No answer: the deadline. */
	mode = M_SILENT;
	e = (struct strata_err){0};
	int64_t t0 = ms();
	CHECK(fc_send(sock, &r, 300, NULL, NULL, &e) == -ETIMEDOUT);
	int64_t took = ms() - t0;
	CHECK(took >= 290 && took < 1500);
	CHECK(strstr(e.msg, "no answer in 300 ms"));
	sleep(2); /* the recorder's silent connection ends */
	/* An answer over FC_RESP_MAX is refused, not read. */
	mode = M_HUGE;
	e = (struct strata_err){0};
	CHECK(fc_send(sock, &r, 2000, NULL, NULL, &e) == -EMSGSIZE);
	/* No Firecracker at all. */
	e = (struct strata_err){0};
	char gone[160];
	snprintf(gone, sizeof(gone), "%s/none.sock", dir);
	CHECK(fc_send(gone, &r, 500, NULL, NULL, &e) == -ENOENT);
	CHECK(strstr(e.msg, "connect"));
	fc_req_done(&r);
	unlink(sock);
	rmdir(dir);
	printf("fc_record: ok (took %lld ms for the deadline of 300)\n", (long long)took);
	return 0;
}
