/* transport_tcp.h — the socket helpers of transport_tcp.c that the server
 * (rpc_server.c) and the TLS transport (rpc_tls.c) build on. */
#pragma once
#include <poll.h>
#include <stdint.h>
#include <sys/uio.h>

/* TCP_NODELAY and 4 MiB socket buffers (1 MiB chunk transfers). */
void tcp_tune_socket(int fd);
/* Connects to "host:port" within timeout_ms. Returns a tuned, non-blocking
 * socket, or -errno (-EHOSTUNREACH for a name that does not resolve). */
int tcp_connect(const char *addr, int timeout_ms);
/* Clears O_NONBLOCK. Returns 0 or -errno. */
int tcp_set_blocking(int fd);
/* Sets SO_RCVTIMEO/SO_SNDTIMEO of a blocking socket to timeout_ms unless
 * *cur_ms (what is set now; 0: nothing yet) says so already. Returns 0 or -errno. */
int tcp_set_timeouts(int fd, int *cur_ms, int timeout_ms);
/* Waits in poll() until fd is ready for events or the monotonic deadline
 * (strata_mono_ms) passes. Returns 0, -ETIMEDOUT or -errno. */
int tcp_wait_fd(int fd, short events, int64_t deadline);
/* Non-blocking socket: sends all of iov (at most 8 entries), waiting in
 * poll() for at most timeout_ms in all. Returns 0, -ECONNRESET or -errno. */
int tcp_sendv_fd(int fd, const struct iovec *iov, int iovcnt, int timeout_ms);
