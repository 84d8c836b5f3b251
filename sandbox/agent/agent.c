/* agent.c — strata-agent main: the init process (pid 1) of a sandbox.
 *
 * Started by a backend with the protocol stream on fd 3 (AGENT_FD, or the
 * path given as argv[1] for a serial port). With "--guest", or as the
 * kernel's /init (the VMM appends words of its own to the kernel command
 * line, which the kernel would hand to init after a "--"), it is the init
 * of a VM sandbox's guest (agent_guest.c), on a virtio-serial port. With "--stage" it is a
 * pre-started container sandbox that still holds its privileges and waits
 * for START (agent_stage.c). It says HELLO, then serves requests until the
 * stream closes (a persistent container sandbox instead waits for a new host
 * on a nameless channel only the host can take, see ag_spare_make); when the agent exits, the
 * kernel kills everything else in the sandbox's pid namespace. See agent.h for the loop's
 * invariants and PROTOCOL.md for the messages. */
#include "sandbox/agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/reboot.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define AGENT_FD 3
#define AGENT_VERSION "strata-agent 1.4"

uint64_t ag_now_us(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000u + (uint64_t)ts.tv_nsec / 1000u;
}

void ag_reply_status(struct agent *a, uint16_t type, uint32_t id, int status)
{
	size_t off = ag_wr_begin(&a->out, type | AG_T_REPLY, id);
	ag_wr_u32(&a->out, (uint32_t)status);
	ag_wr_end(&a->out, off);
}

void ag_send_hello(struct agent *a)
{
	size_t off = ag_wr_begin(&a->out, AG_T_HELLO, 0);
	ag_wr_u32(&a->out, (uint32_t)getpid());
	ag_wr_u32(&a->out, AG_MAX_PAYLOAD);
	ag_wr_str(&a->out, AGENT_VERSION);
	ag_wr_end(&a->out, off);
}

int ag_take_fd(struct agent *a)
{
	if (!a->nfds)
		return -1;
	int fd = a->fds[0];
	memmove(a->fds, a->fds + 1, (--a->nfds) * sizeof(int));
	return fd;
}

static void dispatch(struct agent *a, const struct ag_hdr *h, const uint8_t *p)
{
	int r;
	if (a->staged && h->type != AG_T_START && h->type != AG_T_PING) {
		ag_reply_status(a, h->type, h->id, -EAGAIN); /* not started yet */
		return;
	}
	switch (h->type) {
	case AG_T_START:
		if (a->staged)
			ag_stage_start(a, h->id, p, h->len);
		else
			ag_reply_status(a, h->type, h->id, -EALREADY);
		break;
	case AG_T_EXEC:
		r = ag_exec_start(a, h->id, p, h->len);
		if (r < 0)
			ag_reply_status(a, h->type, h->id, r);
		break;
	case AG_T_STDIN:
		ag_exec_stdin(a, h->id, p, h->len);
		break;
	case AG_T_SIGNAL:
		ag_reply_status(a, h->type, h->id, ag_exec_signal(a, h->id, p, h->len));
		break;
	case AG_T_READ:
		ag_file_read(a, h->id, p, h->len);
		break;
	case AG_T_WRITE:
		ag_file_write(a, h->id, p, h->len);
		break;
	case AG_T_LIST:
		ag_file_list(a, h->id, p, h->len);
		break;
	case AG_T_STAT:
		ag_file_stat(a, h->id, p, h->len);
		break;
	case AG_T_MKDIR:
		ag_file_mkdir(a, h->id, p, h->len);
		break;
	case AG_T_REMOVE:
		ag_file_remove(a, h->id, p, h->len);
		break;
	case AG_T_PING:
		if (h->len >= 1 && p[0] == AG_PING_NEW_HOST) {
			/* A new host on the same stream (a VM's port; the old
			 * session's queued frames go first: the host skips them
			 * up to HELLO) */
			ag_exec_detach_all(a);
			a->orphan_since_us = 0;
			ag_send_hello(a);
		}
		ag_reply_status(a, h->type, h->id, 0);
		break;
	case AG_T_TAR_OUT:
		ag_tar_out(a, h->id, p, h->len);
		break;
	case AG_T_TAR_IN:
		ag_tar_in(a, h->id, p, h->len);
		break;
	case AG_T_EXECS:
		ag_exec_list(a, h->id);
		break;
	case AG_T_ATTACH:
		ag_exec_attach(a, h->id);
		break;
	default:
		ag_reply_status(a, h->type, h->id, -EOPNOTSUPP);
		break;
	}
}

/* Parses every complete frame in a->in. Returns -errno on a bad header. */
static int parse_frames(struct agent *a)
{
	size_t off = 0;
	while (a->in_len - off >= AG_HDR_SIZE) {
		struct ag_hdr h;
		int r = ag_hdr_decode(a->in + off, &h);
		if (r < 0)
			return r;
		if (a->in_len - off - AG_HDR_SIZE < h.len)
			break;
		dispatch(a, &h, a->in + off + AG_HDR_SIZE);
		off += AG_HDR_SIZE + h.len;
	}
	memmove(a->in, a->in + off, a->in_len - off);
	a->in_len -= off;
	return 0;
}

/* Reads from the stream, queueing fds that come with it (at most
 * AG_MAX_FDS; extra ones are closed). Falls back to read() on a stream that
 * is not a socket (a serial port). */
static ssize_t recv_ctl(struct agent *a, void *buf, size_t n)
{
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int) * AG_MAX_FDS)];
	} u;
	struct iovec iov = {.iov_base = buf, .iov_len = n};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	ssize_t k = recvmsg(a->ctl, &m, MSG_CMSG_CLOEXEC);
	if (k < 0 && errno == ENOTSOCK)
		return read(a->ctl, buf, n);
	for (struct cmsghdr *c = k >= 0 ? CMSG_FIRSTHDR(&m) : NULL; c; c = CMSG_NXTHDR(&m, c)) {
		if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS)
			continue;
		int *fds = (int *)CMSG_DATA(c);
		size_t nf = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
		for (size_t i = 0; i < nf; i++) {
			if (a->nfds < AG_MAX_FDS)
				a->fds[a->nfds++] = fds[i];
			else
				close(fds[i]);
		}
	}
	return k;
}

static int read_ctl(struct agent *a)
{
	for (int i = 0; i < 16; i++) {
		ssize_t n = recv_ctl(a, a->in + a->in_len, a->in_cap - a->in_len);
		if (n == 0) {
			a->ctl_eof = true;
			return 0;
		}
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		a->in_len += (size_t)n;
		int r = parse_frames(a);
		if (r < 0)
			return r;
		while (a->nfds && !a->staged) /* only START takes fds */
			close(ag_take_fd(a));
		if (a->out.len > AG_OUT_HIGH)
			break;
	}
	return 0;
}

static int flush_ctl(struct agent *a)
{
	while (a->out.len) {
		ssize_t n = write(a->ctl, a->out.data, a->out.len);
		if (n < 0)
			return errno == EAGAIN || errno == EINTR ? 0 : -errno;
		ag_wr_consume(&a->out, (size_t)n);
	}
	return 0;
}

/* Adds the exec pipes to the poll set. ref[i] remembers exec and stream. */
static nfds_t add_exec_fds(struct agent *a, struct pollfd *pfd, nfds_t n, struct ag_execp **ref,
			   int *stream)
{
	bool out_ok = a->out.len < AG_OUT_HIGH;
	for (struct ag_execp *e = a->execs; e; e = e->next) {
		bool rd = out_ok || e->detached; /* held output is bounded by its cap */
		int fds[3] = {rd ? e->out_fd : -1, rd ? e->err_fd : -1,
			      (e->in_buf.len || e->in_eof) ? e->in_fd : -1};
		for (int s = 0; s < 3; s++) {
			if (fds[s] < 0)
				continue;
			pfd[n] = (struct pollfd){.fd = fds[s], .events = s == 2 ? POLLOUT : POLLIN};
			ref[n] = e;
			stream[n] = s + 1;
			n++;
		}
	}
	return n;
}

static void handle_exec_events(struct agent *a, struct pollfd *pfd, nfds_t from, nfds_t n,
			       struct ag_execp **ref, int *stream)
{
	for (nfds_t i = from; i < n; i++) {
		if (!pfd[i].revents)
			continue;
		if (stream[i] == 3)
			ag_exec_feed(ref[i]);
		else
			ag_exec_pump(a, ref[i], stream[i]);
	}
}

/* The host went away (or broke the protocol). A persistent sandbox, and a
 * VM's guest, forget the session (what was queued for it is lost) and wait
 * for a new host;
 * its execs keep running, held: their output (up to each one's cap) and
 * exit wait for a host to ATTACH. Otherwise the agent ends, and the sandbox
 * with it. */
static int lost_host(struct agent *a, int r)
{
	if (a->spare_fd < 0 && a->port < 0)
		return r < 0 ? r : -EPIPE;
	if (a->ctl >= 0 && a->ctl != a->port)
		close(a->ctl);
	/* A guest's port stays open: at its EOF the host left and the next
	 * may connect; after a frame it could not parse, it waits for that
	 * host to leave first (port_watch) */
	if (a->ctl >= 0 && a->ctl == a->port)
		a->port_hup = a->ctl_eof;
	a->ctl = -1;
	a->ctl_eof = false;
	a->orphan_since_us = ag_now_us();
	a->in_len = 0;
	a->out.len = 0;
	ag_exec_detach_all(a);
	while (a->nfds)
		close(ag_take_fd(a));
	return 0;
}

/* The channel of the next host of a persistent sandbox: a socketpair,
 * nameless, whose host end sits at AG_HOST_FD, where only a process that may
 * ptrace-attach to us (not dumpable: CAP_SYS_PTRACE in the host's user
 * namespace, which no sandbox has) can take it, with pidfd_getfd. Nothing in
 * the sandbox can reach, rename or replace it, as it could a socket with a
 * name (PROTOCOL.md says why this and not a listening socket). Replaces the
 * one there; -errno (then the sandbox can no longer be adopted). */
int ag_spare_make(struct agent *a)
{
	int sp[2];
	if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) < 0)
		return -errno;
	if (dup3(sp[1], AG_HOST_FD, O_CLOEXEC) < 0 ||
	    fcntl(sp[0], F_SETFL, fcntl(sp[0], F_GETFL) | O_NONBLOCK) < 0) {
		int r = -errno;
		close(sp[0]);
		close(sp[1]);
		return r;
	}
	close(sp[1]);
	if (a->spare_fd >= 0)
		close(a->spare_fd);
	a->spare_fd = sp[0];
	return 0;
}

/* A new host took AG_HOST_FD and wrote its first frame: it replaces any
 * current session. Our copy of its end goes (else its close would never
 * read as EOF here) and a new spare takes its place for the host after it;
 * the frame itself is read as the session's first. */
static void take_host(struct agent *a)
{
	int fd = a->spare_fd;
	lost_host(a, 0);
	a->spare_fd = -1;
	(void)!dup3(0, AG_HOST_FD, O_CLOEXEC); /* fd 0 is /dev/null */
	(void)ag_spare_make(a);
	a->ctl = fd;
	a->orphan_since_us = 0;
	ag_send_hello(a);
}

/* ms until an orphaned persistent sandbox gives up; -1 = never. */
static int orphan_left_ms(const struct agent *a)
{
	if (!a->orphan_timeout_ms || !a->orphan_since_us)
		return -1;
	uint64_t end = a->orphan_since_us + (uint64_t)a->orphan_timeout_ms * 1000;
	uint64_t now = ag_now_us();
	return now >= end ? 0 : (int)((end - now + 999) / 1000);
}

/* A guest without a host: its port says POLLHUP while no host is on the
 * other end (virtio-serial's host_connected; it cannot be waited for, so it
 * is looked at every 50 ms); once one was gone, the next one connected
 * takes the session. What a host that broke the protocol sends is drained
 * until it leaves; nothing is read after a POLLHUP (a host that left was
 * read up to its EOF, and a new one may be writing its first frame). */
static void port_watch(struct agent *a, int *timeout)
{
	struct pollfd p = {.fd = a->port, .events = POLLIN};
	int n = poll(&p, 1, 0);
	bool hup = n == 1 && p.revents & POLLHUP;
	if (n == 1 && !a->port_hup) { /* a host that broke the protocol: until it leaves */
		char b[4096];
		while (read(a->port, b, sizeof(b)) > 0)
			;
	}
	if (hup)
		a->port_hup = true;
	else if (a->port_hup) { /* a host is there (its first bytes, maybe) */
		a->ctl = a->port;
		a->port_hup = false;
		a->orphan_since_us = 0;
		ag_send_hello(a);
		return;
	}
	if (*timeout < 0 || *timeout > 50)
		*timeout = 50;
}

static int loop_once(struct agent *a)
{
	static struct pollfd pfd[3 + 3 * AG_MAX_EXECS];
	static struct ag_execp *ref[3 + 3 * AG_MAX_EXECS];
	static int stream[3 + 3 * AG_MAX_EXECS];
	int timeout = ag_exec_timeouts(a);

	if (a->ctl < 0 && a->port >= 0)
		port_watch(a, &timeout);
	if (a->ctl < 0) {
		a->out.len = 0; /* nobody to tell */
		int left = orphan_left_ms(a);
		if (left == 0)
			return -ETIMEDOUT; /* no host came back: end the sandbox */
		if (left > 0 && (timeout < 0 || left < timeout))
			timeout = left;
	}
	pfd[0] = (struct pollfd){.fd = a->ctl,
				 .events = (a->out.len ? POLLOUT : 0) |
					   (a->out.len < AG_OUT_HIGH ? POLLIN : 0)};
	pfd[1] = (struct pollfd){.fd = a->sigfd, .events = POLLIN};
	pfd[2] = (struct pollfd){.fd = a->spare_fd, .events = POLLIN};
	nfds_t n = add_exec_fds(a, pfd, 3, ref, stream);
	if (poll(pfd, n, timeout) < 0)
		return errno == EINTR ? 0 : -errno;
	if (pfd[1].revents) {
		struct signalfd_siginfo si[8];
		while (read(a->sigfd, si, sizeof(si)) > 0)
			;
	}
	handle_exec_events(a, pfd, 3, n, ref, stream);
	ag_reap(a); /* cheap: one WNOHANG waitpid when nothing exited */
	int r = 0;
	if (a->ctl >= 0 && pfd[0].revents & (POLLIN | POLLHUP | POLLERR))
		r = read_ctl(a);
	if (a->ctl >= 0 && r == 0 && (pfd[0].revents & POLLOUT || a->out.len))
		r = flush_ctl(a);
	if (r < 0 || a->ctl_eof)
		r = lost_host(a, r);
	if (r == 0 && pfd[2].revents & POLLIN)
		take_host(a);
	return r;
}

static int setup(struct agent *a, int argc, char **argv)
{
	memset(a, 0, sizeof(*a));
	a->spare_fd = -1;
	a->port = -1;
	a->oom_fd = -1;
	prctl(PR_SET_NAME, "strata-agent"); /* exec'd from a memfd: comm is "memfd:..." */
	/* Not dumpable: processes of the sandbox, even root with the same
	 * capabilities, cannot ptrace-access the agent (/proc/1/mem, /proc/1/fd,
	 * pidfd_getfd) and so cannot take over the control stream. Children
	 * become dumpable again when they exec. */
	prctl(PR_SET_DUMPABLE, 0);
	a->ctl = AGENT_FD;
	if (argc > 1 && !strcmp(argv[1], "--stage")) {
		int r = ag_stage_init(a);
		if (r < 0)
			return r;
	} else if ((argc > 1 && !strcmp(argv[1], "--guest")) ||
		   (getpid() == 1 && !strcmp(argv[0], "/init"))) {
		int r = ag_guest_init(a);
		if (r < 0)
			return r;
	} else if (argc > 1) {
		a->ctl = open(argv[1], O_RDWR | O_CLOEXEC | O_NOCTTY);
		if (a->ctl < 0)
			return -errno;
	}
	fcntl(a->ctl, F_SETFD, FD_CLOEXEC);
	if (fcntl(a->ctl, F_SETFL, fcntl(a->ctl, F_GETFL) | O_NONBLOCK) < 0)
		return -errno;
	sigset_t set;
	sigemptyset(&set);
	sigaddset(&set, SIGCHLD);
	sigprocmask(SIG_BLOCK, &set, NULL);
	signal(SIGPIPE, SIG_IGN);
	a->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
	if (a->sigfd < 0)
		return -errno;
	a->in_cap = AG_HDR_SIZE + AG_MAX_PAYLOAD;
	a->in = malloc(a->in_cap);
	if (!a->in)
		return -ENOMEM;
	ag_wr_init(&a->out);
	return 0;
}

/* The init of a VM ends the guest with it (its exit would panic the
 * kernel): the writable disk is synced and the guest reboots, which the
 * VMM, run with -no-reboot, takes as its exit (every machine can reboot;
 * microvm without ACPI cannot power off). */
static void guest_poweroff(void)
{
	sync();
	reboot(RB_AUTOBOOT);
	_exit(1);
}

int main(int argc, char **argv)
{
	static struct agent a;
	int r = setup(&a, argc, argv);
	if (r < 0 && a.guest)
		guest_poweroff();
	if (r < 0)
		return 111;
	chdir("/");
	ag_send_hello(&a);
	while (r == 0)
		r = loop_once(&a);
	/* Host is gone (or the stream broke): as pid 1, exiting tears the
	 * sandbox down; elsewhere, kill what we started. */
	for (struct ag_execp *e = a.execs; e; e = e->next)
		if (!e->ended)
			kill(-e->pid, SIGKILL);
	if (a.guest)
		guest_poweroff();
	return r < 0 ? 1 : 0;
}
