/* api_pause.c — POST /v1/sandboxes/{id}/pause and /resume.
 *
 * A pause answers once every process of the sandbox is frozen, which takes
 * its processes a trip through the scheduler (a tenth of a millisecond
 * when idle), or for as long as one sleeps where the freezer cannot stop it
 * (a FUSE read that does not come back). The loop does not wait: the
 * backend's pause starts the freeze (-EINPROGRESS), and a timer of the
 * request's (a timerfd, from 50 µs doubling to 5 ms) polls the backend
 * (pause_poll) until the sandbox is frozen or SBD_PAUSE_TIMEOUT_MS passed,
 * when the backend gives the freeze up (the sandbox runs on) and the
 * answer is 409 busy. Meanwhile the sandbox is "being paused": execs and
 * files answer 409 paused, a second pause 409 busy, and a delete ends the
 * wait (404). A client that leaves does not stop the pause. */
#include <errno.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "sandbox/sandboxd/api-internal.h"

#define POLL_FIRST_US 50
#define POLL_MAX_US 5000

struct sbd_pause_wait {
	struct sandboxd *d;
	struct sbd_conn *c; /* NULL once its client left */
	struct sbd_sandbox *sb;
	struct sbd_destroy_hook on_destroy;
	struct sbd_watch w; /* the timerfd */
	int64_t deadline_ms;
	long next_us;
};

/* The answer to a pause or resume that is done: the sandbox, or the error. */
static void pause_answer(struct sandboxd *d, struct sbd_conn *c, struct sbd_sandbox *sb, bool pause,
			 int r)
{
	if (r == 0) {
		sb->state = pause ? SBD_PAUSED : SBD_RUNNING;
		sb->last_active_ms = sbd_now_ms();
		sbd_registry_persist(d, sb);
	}
	if (!c)
		return;
	if (r == -ETIMEDOUT && pause)
		sbd_conn_reply_error(c, 409, "busy",
				     "pause: sandbox %s did not freeze within %u ms (a process "
				     "in a sleep the freezer cannot interrupt, e.g. a slow "
				     "filesystem read); it runs on, retry",
				     sb->id, SBD_PAUSE_TIMEOUT_MS);
	else if (r < 0)
		sbd_api_reply_errno(c, r, pause ? "pause" : "resume", NULL);
	else
		sbd_api_reply_sandbox(c, 200, sb);
}

void sbd_pause_wait_free(struct sbd_pause_wait *pw)
{
	if (!pw)
		return;
	int fd = pw->w.fd;
	sbd_watch_del(pw->d->loop, &pw->w);
	if (fd >= 0)
		close(fd);
	pw->sb->pause_wait = NULL;
	free(pw);
}

/* Ends the wait: the answer to the client (if it is still there), then the
 * connection's next request. */
static void pause_wait_end(struct sbd_pause_wait *pw, int r)
{
	struct sbd_conn *c = pw->c;
	struct sandboxd *d = pw->d;
	struct sbd_sandbox *sb = pw->sb;
	if (c)
		sbd_conn_set_abort(c, NULL, NULL);
	sbd_sandbox_hook_del(sb, &pw->on_destroy);
	sbd_pause_wait_free(pw);
	pause_answer(d, c, sb, true, r);
	if (c)
		sbd_conn_hold_done(c);
}

static int arm(struct sbd_pause_wait *pw)
{
	int64_t left_us = (pw->deadline_ms - sbd_now_ms()) * 1000;
	long us = left_us < pw->next_us ? (long)(left_us > 0 ? left_us : 1) : pw->next_us;
	pw->next_us = pw->next_us * 2 > POLL_MAX_US ? POLL_MAX_US : pw->next_us * 2;
	struct itimerspec its = {
	    .it_value = {.tv_sec = us / 1000000, .tv_nsec = us % 1000000 * 1000}};
	return timerfd_settime(pw->w.fd, 0, &its, NULL) < 0 ? -errno : 0;
}

static void pause_tick(void *ctx, uint32_t events)
{
	struct sbd_pause_wait *pw = ctx;
	uint64_t n;
	(void)events;
	(void)!read(pw->w.fd, &n, sizeof(n));
	struct sbd_backend *b = pw->sb->backend;
	int r = b->pause_poll(b, pw->sb, sbd_now_ms() >= pw->deadline_ms);
	if (r == -EINPROGRESS && arm(pw) == 0)
		return;
	if (r == -EINPROGRESS) /* a timer that could not be armed: given up */
		r = b->pause_poll(b, pw->sb, true);
	pause_wait_end(pw, r);
}

/* The client left: the pause goes on, unanswered. */
static void pause_client_gone(void *ctx)
{
	((struct sbd_pause_wait *)ctx)->c = NULL;
}

static void pause_sandbox_gone(struct sbd_destroy_hook *h, struct sbd_sandbox *sb, const char *why)
{
	struct sbd_pause_wait *pw =
	    (struct sbd_pause_wait *)((char *)h - offsetof(struct sbd_pause_wait, on_destroy));
	struct sbd_conn *c = pw->c;
	if (c)
		sbd_conn_set_abort(c, NULL, NULL);
	sbd_pause_wait_free(pw); /* the backend's destroy thaws what froze */
	if (!c)
		return;
	sbd_conn_reply_error(c, 404, "not_found", "pause: sandbox %s is gone (%s)", sb->id, why);
	sbd_conn_hold_done(c);
}

/* Waits for the freeze on a timer; the answer comes from pause_tick. */
static int pause_wait_start(struct sandboxd *d, struct sbd_conn *c, struct sbd_sandbox *sb)
{
	struct sbd_pause_wait *pw = calloc(1, sizeof(*pw));
	int fd = pw ? timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC) : -1;
	if (fd < 0) {
		free(pw);
		return pw ? -errno : -ENOMEM;
	}
	*pw = (struct sbd_pause_wait){.d = d,
				      .c = c,
				      .sb = sb,
				      .deadline_ms = sbd_now_ms() + SBD_PAUSE_TIMEOUT_MS,
				      .next_us = POLL_FIRST_US,
				      .w = {.fd = -1}};
	sb->pause_wait = pw;
	int r = sbd_watch_add(d->loop, &pw->w, fd, EPOLLIN, pause_tick, pw);
	if (r < 0)
		close(fd);
	if (r == 0)
		r = arm(pw);
	if (r < 0) {
		sbd_pause_wait_free(pw);
		return r;
	}
	pw->on_destroy.fn = pause_sandbox_gone;
	sbd_sandbox_hook_add(sb, &pw->on_destroy);
	sbd_conn_hold(c, true);
	sbd_conn_set_abort(c, pause_client_gone, pw);
	return 0;
}

void sbd_api_pause(struct sbd_conn *c, struct sbd_sandbox *sb, bool pause)
{
	struct sandboxd *d = sbd_conn_daemon(c);
	struct sbd_backend *b = sb->backend;
	if (sb->pause_wait) {
		sbd_conn_reply_error(c, 409, "busy", "sandbox %s is being paused; retry", sb->id);
		return;
	}
	if (pause != (sb->state == SBD_RUNNING)) {
		sbd_conn_reply_error(c, 409, pause ? "paused" : "not_paused",
				     "sandbox %s is already %s", sb->id, sbd_state_name(sb->state));
		return;
	}
	int r = pause ? b->pause(b, sb) : b->resume(b, sb);
	if (r == -EINPROGRESS && pause && b->pause_poll) {
		r = pause_wait_start(d, c, sb);
		if (r == 0)
			return;
		r = b->pause_poll(b, sb, true); /* no timer: given up at once */
	}
	pause_answer(d, c, sb, pause, r);
}
