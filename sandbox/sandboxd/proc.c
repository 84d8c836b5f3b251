/* proc.c — stdin feeding, capped output forwarding, deadline and reaping of
 * one host process (see proc.h). */
#include "proc.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "loop.h"

struct sbd_proc {
	struct sbd_loop *loop;
	pid_t pid;
	struct sbd_watch w_pid, w_in, w_out, w_err, w_timer;
	int fd_pid, fd_in, fd_out, fd_err, fd_timer;
	uint8_t *in_buf;
	size_t in_len, in_off;
	uint64_t cap, forwarded;
	struct sbd_exit ex;
	struct sbd_exec_sink sink;
	struct timespec start;
	bool reaped;
	struct sbd_watch w_retry; /* while the sink is congested */
	int fd_retry;
	bool throttled;
};

static void close_watch(struct sbd_proc *p, struct sbd_watch *w, int *fd)
{
	sbd_watch_del(p->loop, w);
	if (*fd >= 0)
		close(*fd);
	*fd = -1;
}

static void proc_free(struct sbd_proc *p)
{
	close_watch(p, &p->w_pid, &p->fd_pid);
	close_watch(p, &p->w_in, &p->fd_in);
	close_watch(p, &p->w_out, &p->fd_out);
	close_watch(p, &p->w_err, &p->fd_err);
	close_watch(p, &p->w_timer, &p->fd_timer);
	close_watch(p, &p->w_retry, &p->fd_retry);
	free(p->in_buf);
	free(p);
}

static int64_t elapsed_us(const struct timespec *s)
{
	struct timespec n;
	clock_gettime(CLOCK_MONOTONIC, &n);
	return (int64_t)(n.tv_sec - s->tv_sec) * 1000000 + (n.tv_nsec - s->tv_nsec) / 1000;
}

static void maybe_finish(struct sbd_proc *p)
{
	if (!p->reaped || p->fd_out >= 0 || p->fd_err >= 0)
		return;
	p->ex.duration_us = elapsed_us(&p->start);
	struct sbd_exec_sink sink = p->sink;
	struct sbd_exit ex = p->ex;
	proc_free(p);
	sink.exit(sink.ctx, &ex);
}

/* Reads what is there; on EOF (or when the process is gone and the pipe
 * would block) closes the pipe. */
static void drain(struct sbd_proc *p, int stream, bool final)
{
	struct sbd_watch *w = stream == 1 ? &p->w_out : &p->w_err;
	int *fd = stream == 1 ? &p->fd_out : &p->fd_err;
	uint64_t *count = stream == 1 ? &p->ex.stdout_bytes : &p->ex.stderr_bytes;
	char buf[65536];
	for (int rounds = 0; *fd >= 0 && rounds < 16; rounds++) {
		ssize_t n = read(*fd, buf, sizeof(buf));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN && !final)
			return;
		if (n <= 0) {
			close_watch(p, w, fd);
			return;
		}
		*count += (uint64_t)n;
		uint64_t room = p->cap > p->forwarded ? p->cap - p->forwarded : 0;
		size_t fwd = (uint64_t)n < room ? (size_t)n : (size_t)room;
		if (fwd < (size_t)n)
			p->ex.truncated = true;
		if (fwd) {
			p->forwarded += fwd;
			p->sink.output(p->sink.ctx, stream, buf, fwd);
		}
	}
}

static bool congested(struct sbd_proc *p)
{
	return p->sink.congested && p->forwarded < p->cap && p->sink.congested(p->sink.ctx);
}

static void set_reading(struct sbd_proc *p, bool on)
{
	if (p->fd_out >= 0)
		sbd_watch_mod(p->loop, &p->w_out, on ? EPOLLIN : 0);
	if (p->fd_err >= 0)
		sbd_watch_mod(p->loop, &p->w_err, on ? EPOLLIN : 0);
	p->throttled = !on;
}

static void retry_io(void *ctx, uint32_t ev);

/* Stops reading output and looks again in 5 ms. */
static void throttle(struct sbd_proc *p)
{
	struct itimerspec its = {.it_value = {0, 5 * 1000000}};
	if (p->fd_retry < 0) {
		p->fd_retry = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
		if (p->fd_retry < 0 ||
		    sbd_watch_add(p->loop, &p->w_retry, p->fd_retry, EPOLLIN, retry_io, p) < 0) {
			close_watch(p, &p->w_retry, &p->fd_retry);
			return; /* cannot wait: keep reading */
		}
	}
	timerfd_settime(p->fd_retry, 0, &its, NULL);
	set_reading(p, false);
}

static void retry_io(void *ctx, uint32_t ev)
{
	struct sbd_proc *p = ctx;
	uint64_t x;
	if (read(p->fd_retry, &x, sizeof(x)) < 0 && errno == EAGAIN)
		return;
	if (congested(p))
		throttle(p);
	else
		set_reading(p, true);
}

static void out_io(void *ctx, uint32_t ev)
{
	struct sbd_proc *p = ctx;
	if (congested(p)) {
		throttle(p);
		return;
	}
	drain(p, 1, false);
	maybe_finish(p);
}

static void err_io(void *ctx, uint32_t ev)
{
	struct sbd_proc *p = ctx;
	if (congested(p)) {
		throttle(p);
		return;
	}
	drain(p, 2, false);
	maybe_finish(p);
}

static void in_io(void *ctx, uint32_t ev)
{
	struct sbd_proc *p = ctx;
	while (p->in_off < p->in_len) {
		ssize_t n = write(p->fd_in, p->in_buf + p->in_off, p->in_len - p->in_off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0 && errno == EAGAIN)
			return;
		if (n < 0)
			break; /* EPIPE: the command does not read its stdin */
		p->in_off += (size_t)n;
	}
	close_watch(p, &p->w_in, &p->fd_in);
}

static void pid_io(void *ctx, uint32_t ev)
{
	struct sbd_proc *p = ctx;
	siginfo_t si = {0};
	if (waitid(P_PIDFD, (id_t)p->fd_pid, &si, WEXITED | WNOHANG) < 0 || si.si_pid == 0)
		return;
	p->reaped = true;
	if (si.si_code == CLD_EXITED) {
		p->ex.exit_code = si.si_status;
	} else {
		p->ex.exit_code = -1;
		p->ex.signo = si.si_status;
	}
	close_watch(p, &p->w_pid, &p->fd_pid);
	close_watch(p, &p->w_in, &p->fd_in);
	close_watch(p, &p->w_timer, &p->fd_timer);
	/* The process is gone; in a pid namespace so are its children. What is
	 * still in the pipes is read now; a pipe some other process still holds
	 * gets until the end of the drain. */
	drain(p, 1, true);
	drain(p, 2, true);
	maybe_finish(p);
}

static void timer_io(void *ctx, uint32_t ev)
{
	struct sbd_proc *p = ctx;
	uint64_t x;
	if (read(p->fd_timer, &x, sizeof(x)) < 0 && errno == EAGAIN)
		return;
	p->ex.timed_out = true;
	syscall(SYS_pidfd_send_signal, p->fd_pid, SIGKILL, NULL, 0);
	close_watch(p, &p->w_timer, &p->fd_timer);
}

static int nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);
	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

static int arm(struct sbd_proc *p, const struct sbd_exec_req *req)
{
	int r = 0;
	struct itimerspec its = {
	    .it_value = {req->timeout_ms / 1000, (req->timeout_ms % 1000) * 1000000}};
	p->fd_timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
	if (p->fd_timer < 0 || timerfd_settime(p->fd_timer, 0, &its, NULL) < 0)
		return -errno;
	if ((r = sbd_watch_add(p->loop, &p->w_timer, p->fd_timer, EPOLLIN, timer_io, p)) < 0 ||
	    (r = nonblock(p->fd_out)) < 0 || (r = nonblock(p->fd_err)) < 0 ||
	    (r = sbd_watch_add(p->loop, &p->w_out, p->fd_out, EPOLLIN, out_io, p)) < 0 ||
	    (r = sbd_watch_add(p->loop, &p->w_err, p->fd_err, EPOLLIN, err_io, p)) < 0 ||
	    (r = sbd_watch_add(p->loop, &p->w_pid, p->fd_pid, EPOLLIN, pid_io, p)) < 0)
		return r;
	if (p->fd_in >= 0) {
		if (!p->in_len) {
			close(p->fd_in);
			p->fd_in = -1;
		} else if ((r = nonblock(p->fd_in)) < 0 ||
			   (r = sbd_watch_add(p->loop, &p->w_in, p->fd_in, EPOLLOUT, in_io, p)) < 0)
			return r;
	}
	return 0;
}

int sbd_proc_start(struct sbd_loop *loop, const struct sbd_proc_fds *fds,
		   const struct sbd_exec_req *req, const struct sbd_exec_sink *sink,
		   struct sbd_proc **ret)
{
	struct sbd_proc *p = calloc(1, sizeof(*p));
	if (p) {
		p->w_pid.fd = p->w_in.fd = p->w_out.fd = p->w_err.fd = p->w_timer.fd = -1;
		p->w_retry.fd = p->fd_retry = -1;
		p->in_buf = req->stdin_len ? malloc(req->stdin_len) : NULL;
	}
	if (!p || (req->stdin_len && !p->in_buf)) {
		free(p);
		syscall(SYS_pidfd_send_signal, fds->pidfd, SIGKILL, NULL, 0);
		waitid(P_PIDFD, (id_t)fds->pidfd, &(siginfo_t){0}, WEXITED);
		int fd[] = {fds->pidfd, fds->stdin_fd, fds->stdout_fd, fds->stderr_fd};
		for (size_t i = 0; i < 4; i++)
			if (fd[i] >= 0)
				close(fd[i]);
		return -ENOMEM;
	}
	p->loop = loop;
	p->pid = fds->pid;
	p->fd_pid = fds->pidfd;
	p->fd_in = fds->stdin_fd;
	p->fd_out = fds->stdout_fd;
	p->fd_err = fds->stderr_fd;
	p->fd_timer = -1;
	p->fd_retry = -1;
	p->w_retry.fd = -1;
	if (req->stdin_len)
		memcpy(p->in_buf, req->stdin_data, req->stdin_len);
	p->in_len = req->stdin_len;
	p->cap = req->output_cap;
	p->sink = *sink;
	clock_gettime(CLOCK_MONOTONIC, &p->start);
	int r = arm(p, req);
	if (r < 0) {
		sbd_proc_cancel(p);
		return r;
	}
	*ret = p;
	return 0;
}

void sbd_proc_cancel(struct sbd_proc *p)
{
	if (!p)
		return;
	if (!p->reaped && p->fd_pid >= 0) {
		syscall(SYS_pidfd_send_signal, p->fd_pid, SIGKILL, NULL, 0);
		waitid(P_PIDFD, (id_t)p->fd_pid, &(siginfo_t){0}, WEXITED);
	}
	proc_free(p);
}
