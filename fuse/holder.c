/* holder.c — strata-fuse-holder: keeps the FUSE connection of a strata
 * mount alive while strata-fuse is dead, so that a successor can take it
 * over (fs/fuse_holder.h, fuse/README.md "Surviving a crash").
 *
 *   strata-fuse-holder --listen-fd N --socket PATH   (started by strata-fuse)
 *
 * strata-fuse binds the socket and starts the holder with the listening
 * socket as fd N. The holder serves DEPOSIT (keep this /dev/fuse fd and the
 * INIT request), TAKE (a duplicate of it), STATUS and STOP, from peers of its
 * own uid only. It never reads the FUSE device: it only holds a reference,
 * which keeps the kernel from aborting the connection when strata-fuse
 * dies. Once a second it checks (poll with no events, so no wake-up per
 * FUSE request) whether the kernel aborted the connection anyway (the mount
 * was unmounted); then it exits. SIGTERM: exit (the connection ends with it
 * if nobody else holds it). */
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/fuse_holder.h"
#include "fs/log.h"

#define HOLDER_MAX_CLIENTS 16
#define HOLDER_CHECK_MS 1000 /* how often the connection is looked at */

struct holder {
	int lfd;
	int fuse_fd; /* -1: holding nothing */
	int owner;   /* the depositor's connection while it lasts, else -1 */
	struct fuse_holder_info info;
	int clients[HOLDER_MAX_CLIENTS];
	int nclients;
	bool stop;
};

static volatile sig_atomic_t g_term;

static void on_term(int sig)
{
	(void)sig;
	g_term = 1;
}

/* True if the peer of socket c has not closed it (a strata-fuse that died
 * closed its end before any successor could ask). */
static bool peer_alive(int c)
{
	struct pollfd p = {.fd = c, .events = POLLIN | POLLRDHUP};

	return poll(&p, 1, 0) >= 0 && !(p.revents & (POLLHUP | POLLRDHUP | POLLERR));
}

/* True if the kernel still has the connection (no POLLERR). */
static bool connected(int fd)
{
	struct pollfd p = {.fd = fd, .events = 0};

	return poll(&p, 1, 0) >= 0 && !(p.revents & (POLLERR | POLLHUP | POLLNVAL));
}

static void drop_fd(struct holder *h)
{
	if (h->fuse_fd >= 0)
		close(h->fuse_fd);
	h->fuse_fd = -1;
	h->info.flags = 0;
	h->info.init_len = 0;
	h->info.mount[0] = '\0';
	h->info.conn_id = 0;
}

static void fill_status(struct holder *h, struct fuse_holder_info *out)
{
	*out = h->info;
	out->pid = (uint32_t)getpid();
	out->flags = 0;
	if (h->fuse_fd >= 0)
		out->flags =
		    FUSE_HOLDER_F_HOLDING | (connected(h->fuse_fd) ? FUSE_HOLDER_F_CONNECTED : 0);
	if (h->owner >= 0 && peer_alive(h->owner))
		out->flags |= FUSE_HOLDER_F_SERVED;
}

/* One request of client c. Returns false when the client is to be dropped. */
static bool serve_one(struct holder *h, int c)
{
	struct fuse_holder_info in, out;
	uint16_t type;
	int fd = -1, r = fuse_holder_recv(c, &type, &in, &fd);

	if (r < 0)
		return false;
	switch (type) {
	case FUSE_HOLDER_DEPOSIT:
		if (fd < 0)
			return false;
		drop_fd(h);
		h->fuse_fd = fd;
		h->info.init_len = in.init_len;
		memcpy(h->info.init, in.init, in.init_len);
		snprintf(h->info.mount, sizeof(h->info.mount), "%s", in.mount);
		h->info.conn_id = in.conn_id;
		h->owner = c;
		log_info("Holding the FUSE connection of %s", h->info.mount);
		return fuse_holder_send(c, FUSE_HOLDER_OK, NULL, -1) == 0;
	case FUSE_HOLDER_TAKE:
		if (fd >= 0)
			close(fd);
		if (h->fuse_fd < 0 || !connected(h->fuse_fd))
			return fuse_holder_send(c, FUSE_HOLDER_NONE, NULL, -1) == 0;
		if (h->owner >= 0 && peer_alive(h->owner))
			return fuse_holder_send(c, FUSE_HOLDER_BUSY, NULL, -1) == 0;
		h->info.takeovers++;
		fill_status(h, &out);
		log_info("Handing the FUSE connection of %s to a successor", h->info.mount);
		return fuse_holder_send(c, FUSE_HOLDER_TAKE, &out, h->fuse_fd) == 0;
	case FUSE_HOLDER_STATUS:
		fill_status(h, &out);
		return fuse_holder_send(c, FUSE_HOLDER_STATUS, &out, -1) == 0;
	case FUSE_HOLDER_STOP:
		h->stop = true;
		fuse_holder_send(c, FUSE_HOLDER_OK, NULL, -1);
		return false;
	default:
		if (fd >= 0)
			close(fd);
		return false;
	}
}

static bool same_uid(int c)
{
	struct ucred cr;
	socklen_t l = sizeof(cr);

	return getsockopt(c, SOL_SOCKET, SO_PEERCRED, &cr, &l) == 0 && cr.uid == geteuid();
}

static void accept_one(struct holder *h)
{
	int c = accept4(h->lfd, NULL, NULL, SOCK_CLOEXEC);

	if (c < 0)
		return;
	if (!same_uid(c) || h->nclients == HOLDER_MAX_CLIENTS) {
		close(c);
		return;
	}
	h->clients[h->nclients++] = c;
}

static void loop(struct holder *h)
{
	while (!g_term && !h->stop) {
		struct pollfd p[HOLDER_MAX_CLIENTS + 1];
		int n = 0;

		p[n++] = (struct pollfd){.fd = h->lfd, .events = POLLIN};
		for (int i = 0; i < h->nclients; i++)
			p[n++] = (struct pollfd){.fd = h->clients[i], .events = POLLIN};
		if (poll(p, (nfds_t)n, HOLDER_CHECK_MS) < 0 && errno != EINTR)
			break;
		for (int i = h->nclients - 1; i >= 0; i--) {
			if (!p[i + 1].revents || serve_one(h, h->clients[i]))
				continue;
			if (h->owner == h->clients[i])
				h->owner = -1;
			close(h->clients[i]);
			h->clients[i] = h->clients[--h->nclients];
		}
		if (p[0].revents & POLLIN)
			accept_one(h);
		if (h->fuse_fd >= 0 && !connected(h->fuse_fd)) {
			log_info("The FUSE connection of %s ended (unmounted): exiting",
				 h->info.mount);
			break;
		}
	}
}

int main(int argc, char **argv)
{
	struct holder h = {.lfd = -1, .fuse_fd = -1, .owner = -1};
	struct sigaction sa = {.sa_handler = on_term};

	if (argc != 5 || strcmp(argv[1], "--listen-fd") != 0 || strcmp(argv[3], "--socket") != 0) {
		fprintf(stderr, "usage: strata-fuse-holder --listen-fd N --socket PATH "
				"(started by strata-fuse)\n");
		return 2;
	}
	h.lfd = atoi(argv[2]);
	log_init("strata-fuse-holder", LOG_LVL_INFO);
	prctl(PR_SET_NAME, "strata-fuse-holder");
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGHUP, SIG_IGN);
	signal(SIGPIPE, SIG_IGN);
	loop(&h);
	if (h.stop || h.fuse_fd >= 0)
		unlink(argv[4]); /* the socket is ours (strata-fuse binds a new one) */
	drop_fd(&h);
	for (int i = 0; i < h.nclients; i++)
		close(h.clients[i]);
	return 0;
}
