/* freezer.c — pausing a sandbox: every one of its processes stopped by the
 * kernel's cgroup freezer, and let go again (sbx_pause, sbx_resume).
 *
 * Where: on cgroup v1 the freezer hierarchy, in which a slot has a
 * directory like its memory, pids and cpu ones (cgroup.c), joined by the
 * staging child with the others, so that every process of the sandbox is
 * in it from the start and none can be left out by a fork racing the
 * pause (sandboxd used to move the processes in at the first pause). On v2
 * the slot's one cgroup (cgroup.freeze).
 *
 * A freeze is asynchronous: the write asks, each task stops at its next
 * return to user space or freezable sleep, and the kernel then reports the
 * cgroup frozen (v1 freezer.state FROZEN, v2 cgroup.events "frozen 1"). A
 * task in an uninterruptible sleep that is not freezable (a FUSE request
 * whose server does not answer: a lazy image read through strata-fuse)
 * holds it off for as long as that lasts. sbx_pause polls for the state up
 * to its deadline, then thaws what froze and answers -ETIMEDOUT: a sandbox
 * is paused whole or not at all. sbx_pause_start and sbx_pause_poll are
 * its two halves, for a caller with an event loop that must not wait
 * (sandboxd), which polls on its own timer and gives up at its deadline.
 *
 * States. s->paused is the library's; the kernel's request flag (v1
 * freezer.self_freezing, v2 cgroup.freeze) is what outlives the host:
 *
 *   RUNNING --sbx_pause_start: ask--> FREEZING --sbx_pause_poll: frozen--> PAUSED
 *      ^  ^___ sbx_pause_poll(give_up): thaw, -ETIMEDOUT ___/ |        |
 *      |  \___ sbx_resume: thaw (the freeze is given up) ____/        |
 *      +--------------------------- sbx_resume: thaw ------------------+
 *   (sbx_pause: start, then poll with a back-off until the deadline)
 *   PAUSED --sbx_release; the host restarts; sbx_adopt finds the flag set-->
 *      PAUSED without a channel (the frozen agent cannot answer);
 *      sbx_resume thaws it and takes the channel (sbx_adopt_finish): on
 *      failure the sandbox is frozen again and stays PAUSED.
 *   PAUSED or FREEZING --sbx_destroy: SIGKILL, then thaw (sbx_thaw_killed).
 *      On v1 a frozen task dies only once thawed; killed first, it runs
 *      none of its own code again. v2 lets SIGKILL through, and the thaw
 *      keeps the slot from starting its next sandbox frozen. */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <time.h>

#include "fs/clock.h"
#include "sandbox/container/sandbox-internal.h"

/* Back-off of the polls for the frozen state: a busy sandbox freezes in
 * tens of microseconds (an IPI per running task), a large one in a few
 * milliseconds. */
#define POLL_FIRST_US 20
#define POLL_MAX_US 2000

/* The slot's freezer directory (v2: its one cgroup), or -1. */
static int slot_freezer_fd(const struct cg_driver *d, const struct cg_slot *cg)
{
	return cg && d->version ? cg->dir_fd[d->version == 2 ? 0 : CG_FREEZER] : -1;
}

static int freezer_fd(const struct sbx *s)
{
	return s->rt ? slot_freezer_fd(&s->rt->cg, s->cg) : -1;
}

static int ask(int version, int fd, bool freeze)
{
	if (version == 2)
		return cg_write_at(fd, "cgroup.freeze", freeze ? "1" : "0");
	return cg_write_at(fd, "freezer.state", freeze ? "FROZEN" : "THAWED");
}

/* 1 when the kernel says every task of the cgroup is frozen, 0 while some
 * are not (v1 FREEZING), or -errno. */
static int frozen(int version, int fd)
{
	char buf[256];
	ssize_t n =
	    cg_read_at(fd, version == 2 ? "cgroup.events" : "freezer.state", buf, sizeof(buf));
	if (n < 0)
		return (int)n;
	return version == 2 ? strstr(buf, "frozen 1") != NULL : !strncmp(buf, "FROZEN", 6);
}

/* Whether the sandbox's agent has exited (its pidfd is readable). */
static bool agent_exited(const struct sbx *s)
{
	return s->pidfd >= 0 && poll(&(struct pollfd){.fd = s->pidfd, .events = POLLIN}, 1, 0) > 0;
}

int cg_freeze_requested(const struct cg_driver *d, const struct cg_slot *cg)
{
	int fd = slot_freezer_fd(d, cg);
	if (fd < 0)
		return -EOPNOTSUPP;
	char buf[16];
	ssize_t n = cg_read_at(fd, d->version == 2 ? "cgroup.freeze" : "freezer.self_freezing", buf,
			       sizeof(buf));
	return n < 0 ? (int)n : buf[0] == '1';
}

int cg_thaw(const struct cg_driver *d, const struct cg_slot *cg)
{
	int fd = slot_freezer_fd(d, cg);
	return fd < 0 ? 0 : ask(d->version, fd, false);
}

void sbx_thaw_killed(struct sbx *s)
{
	if (!s->paused && !s->freezing)
		return;
	(void)cg_thaw(&s->rt->cg, s->cg);
	s->paused = s->freezing = false;
}

int sbx_pause_start(struct sbx *s)
{
	int fd = freezer_fd(s);
	if (fd < 0)
		return -EOPNOTSUPP;
	if (s->paused)
		return -EALREADY;
	if (s->freezing)
		return -EBUSY;
	if (agent_exited(s))
		return -ESRCH;
	int r = ask(s->rt->cg.version, fd, true);
	if (r < 0)
		return r;
	s->freezing = true;
	return sbx_pause_poll(s, false);
}

int sbx_pause_poll(struct sbx *s, bool give_up)
{
	if (!s->freezing)
		return s->paused ? 0 : -EINVAL;
	int v = s->rt->cg.version, fd = freezer_fd(s);
	int r = frozen(v, fd);
	if (r == 1) {
		s->freezing = false;
		s->paused = true;
		return 0;
	}
	if (r == 0 && !give_up)
		return -EINPROGRESS;
	(void)ask(v, fd, false); /* whole or not at all */
	s->freezing = false;
	return r < 0 ? r : -ETIMEDOUT;
}

int sbx_pause(struct sbx *s, uint32_t timeout_ms)
{
	int64_t deadline = strata_mono_ms() + (timeout_ms ? timeout_ms : SBX_PAUSE_TIMEOUT_MS);
	long wait_us = POLL_FIRST_US;
	int r = sbx_pause_start(s);
	while (r == -EINPROGRESS) {
		int64_t left_ms = deadline - strata_mono_ms();
		long us =
		    left_ms * 1000 < wait_us ? (long)(left_ms > 0 ? left_ms : 0) * 1000 : wait_us;
		nanosleep(&(struct timespec){.tv_nsec = us * 1000}, NULL);
		wait_us = wait_us * 2 > POLL_MAX_US ? POLL_MAX_US : wait_us * 2;
		r = sbx_pause_poll(s, strata_mono_ms() >= deadline);
	}
	return r;
}

int sbx_resume(struct sbx *s)
{
	int fd = freezer_fd(s);
	if (fd < 0)
		return -EOPNOTSUPP;
	if (s->freezing) { /* a freeze under way is given up */
		s->freezing = false;
		return ask(s->rt->cg.version, fd, false);
	}
	if (!s->paused)
		return -EALREADY;
	int v = s->rt->cg.version;
	int r = ask(v, fd, false);
	if (r == 0 && s->ctl < 0) { /* adopted paused: its agent answers now */
		r = sbx_adopt_finish(s);
		if (r < 0) {
			/* Not to run while its host says paused; retried by the
			 * next sbx_resume. */
			s->paused = false;
			(void)sbx_pause(s, 0); /* paused again if it froze */
			return r;
		}
	}
	if (r == 0)
		s->paused = false;
	return r;
}

bool sbx_paused(const struct sbx *s)
{
	return s->paused;
}
