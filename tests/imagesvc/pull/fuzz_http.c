/* fuzz_http.c — libFuzzer target for the HTTP/1.1 response parser of
 * imagesvc/pull/http.c: status line, headers under their limits, body
 * framing (Content-Length, chunked with extensions and trailers, until
 * close). The input is what a hostile server sends; it is written into a
 * socketpair and read back through http_response_from_fd(). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "imagesvc/pull/http.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	static struct http_client *c;
	struct strata_err e = {0};
	if (!c) {
		struct http_opts o = {.timeout_ms = 1000, .max_header_bytes = 4096};
		if (http_client_new(&o, &c, &e) < 0)
			abort();
	}
	int sv[2];
	if (size > 60000 || socketpair(AF_UNIX, SOCK_STREAM, 0, sv) < 0)
		return 0;
	int buf = 1 << 20;
	setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &buf, sizeof(buf));
	setsockopt(sv[0], SOL_SOCKET, SO_RCVBUF, &buf, sizeof(buf));
	if (write(sv[1], data, size) != (ssize_t)size) {
		close(sv[0]);
		close(sv[1]);
		return 0;
	}
	close(sv[1]);
	struct http_response r;
	if (http_response_from_fd(c, sv[0], size && (data[0] & 1) ? "HEAD" : "GET", &r, &e) == 0) {
		char *body = NULL;
		size_t len = 0;
		if (http_read_body_all(&r, 8192, &body, &len, &e) == 0)
			free(body);
		http_header(&r, "Content-Type");
		http_response_done(&r);
	}
	return 0;
}
