/* adopt.c — finding a persistent sandbox's agent again after its host
 * restarted, and making sure that what answers is that agent.
 *
 * A host records the agent's identity at create (sbx_agent_id: pid, start
 * time, pid namespace). Adoption (sbx_adopt) then:
 *
 *   1. opens a pidfd of the pid and checks the process is the recorded agent:
 *      pid 1 of its pid namespace, the recorded start time and namespace
 *      inode, all read while the pidfd says it lives (so the pid was not
 *      reused between the reads) — else -EPERM;
 *   2. takes the host end of the agent's channel with
 *      pidfd_getfd(pidfd, AG_HOST_FD): a nameless socketpair the agent made,
 *      which no process of the sandbox can reach (no path, no name in any
 *      namespace; the agent is not dumpable and the sandbox has no
 *      CAP_SYS_PTRACE) — and checks its peer (SO_PEERCRED) is the agent;
 *   3. writes PING (the agent takes a new host when it writes first), reads
 *      HELLO and PING's reply;
 *   4. finds the cgroup slot, the writable layer and the user namespace
 *      and its range (userns.c; locked again, recycled when it ends).
 *
 * Steps 2 and 3 wait for a paused sandbox (its cgroup asked to freeze, the
 * record the kernel keeps across hosts): its frozen agent cannot answer,
 * and sbx_resume takes the channel after the thaw (freezer.c).
 *
 * Nothing in the sandbox can answer in the agent's place: before, the agent
 * listened on a socket in its staging root, which a root process that
 * escaped its chroot could rename and replace by its own (issue 14). */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "sandbox/agent/proto.h"
#include "sandbox/container/sandbox-internal.h"

#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#define ADOPT_TIMEOUT_MS 10000

static bool exited(int pidfd)
{
	return poll(&(struct pollfd){.fd = pidfd, .events = POLLIN}, 1, 0) > 0;
}

/* Reads a /proc/<pid>/ file (small) into buf as a string. */
static int read_proc(pid_t pid, const char *leaf, char *buf, size_t cap)
{
	char p[64];
	snprintf(p, sizeof(p), "/proc/%d/%s", (int)pid, leaf);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return errno == ENOENT ? -ESRCH : -errno;
	ssize_t n = read(fd, buf, cap - 1);
	int e = errno;
	close(fd);
	if (n < 0)
		return e == ESRCH ? -ESRCH : -e;
	buf[n] = 0;
	return 0;
}

/* Field 22 of /proc/<pid>/stat. The name in field 2 may hold spaces and
 * parentheses: fields are counted from its last ')'. */
static int start_time_of(pid_t pid, uint64_t *ret)
{
	char buf[1024];
	int r = read_proc(pid, "stat", buf, sizeof(buf));
	if (r < 0)
		return r;
	char *q = strrchr(buf, ')');
	for (int field = 2; q && field < 22; field++)
		q = strchr(q + 1, ' ');
	if (!q)
		return -EBADMSG;
	*ret = strtoull(q + 1, NULL, 10);
	return 0;
}

/* True when pid is pid 1 of its own pid namespace (the last NSpid entry),
 * as an agent is. */
static int is_ns_init(pid_t pid)
{
	char buf[4096];
	int r = read_proc(pid, "status", buf, sizeof(buf));
	if (r < 0)
		return r;
	char *l = strstr(buf, "\nNSpid:");
	char *end = l ? strchr(l + 1, '\n') : NULL;
	if (!end)
		return -EBADMSG;
	*end = 0;
	char *last = strrchr(l, '\t');
	return last && !strcmp(last + 1, "1");
}

/* pid's identity, read while pidfd says it lives. -EPERM if it is not pid 1
 * of a pid namespace (no agent). */
static int read_id(pid_t pid, int pidfd, struct sbx_agent_id *ret)
{
	char p[64];
	struct stat st = {0};
	struct sbx_agent_id id = {.pid = pid};
	int r = start_time_of(pid, &id.start_time);
	if (r == 0) {
		snprintf(p, sizeof(p), "/proc/%d/ns/pid", (int)pid);
		r = stat(p, &st) < 0 ? (errno == ENOENT ? -ESRCH : -errno) : 0;
		id.pidns_ino = st.st_ino;
	}
	int init = r == 0 ? is_ns_init(pid) : r;
	if (exited(pidfd))
		return -ESRCH;
	if (init < 0)
		return init;
	if (!init)
		return -EPERM;
	*ret = id;
	return 0;
}

int sbx_process_id(pid_t pid, int pidfd, struct sbx_agent_id *ret)
{
	return read_id(pid, pidfd, ret);
}

int sbx_agent_id(const struct sbx *s, struct sbx_agent_id *ret)
{
	if (s->pid <= 0 || s->pidfd < 0)
		return -ESRCH;
	return read_id(s->pid, s->pidfd, ret);
}

/* The host end of the agent's channel (AG_HOST_FD), if its peer is the
 * agent. /dev/null there (a staged or non-persistent agent) or nothing:
 * -ENOTCONN. */
static int take_channel(struct sbx *s)
{
	int fd = (int)syscall(SYS_pidfd_getfd, s->pidfd, AG_HOST_FD, 0);
	if (fd < 0)
		return errno == EBADF ? -ENOTCONN : -errno;
	struct ucred uc = {0};
	socklen_t len = sizeof(uc);
	int type = 0;
	socklen_t tl = sizeof(type);
	int r = 0;
	if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &tl) < 0 || type != SOCK_STREAM)
		r = -ENOTCONN;
	else if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &uc, &len) < 0)
		r = -errno;
	else if (uc.pid != s->pid || (uc.uid != 0 && uc.uid != userns_base(&s->userns)))
		r = -EPERM; /* a channel made by another process */
	if (r < 0) {
		close(fd);
		return r;
	}
	s->ctl = fd; /* pidfd_getfd's fd is close-on-exec */
	return 0;
}

/* The agent takes a new host once it writes: PING, then HELLO and PING's
 * reply come back. */
static int greet(struct sbx *s)
{
	uint8_t f[AG_HDR_SIZE];
	uint32_t id = ++s->next_id;
	ag_hdr_encode(AG_T_PING, id, 0, f);
	if (send(s->ctl, f, sizeof(f), MSG_NOSIGNAL) != (ssize_t)sizeof(f))
		return errno ? -errno : -EIO;
	int status = 0;
	int r = sbx_wait_hello(s);
	if (r == 0)
		r = sbx_wait_reply(s, AG_T_PING, id, ADOPT_TIMEOUT_MS, &status);
	return r < 0 ? r : status;
}

int sbx_adopt_finish(struct sbx *s)
{
	if (s->ctl >= 0)
		return 0;
	if (exited(s->pidfd))
		return -ESRCH;
	int r = take_channel(s);
	if (r == 0)
		r = greet(s);
	if (r < 0 && s->ctl >= 0) {
		close(s->ctl);
		s->ctl = -1;
	}
	if (r < 0 && exited(s->pidfd))
		r = -ESRCH;
	return r;
}

/* Checks the agent, finds its cgroups, takes its channel unless it is
 * paused (freezer.c), then finds its layer. */
int sbx_adopt(struct sbx_runtime *rt, const struct sbx_agent_id *id, struct sbx **ret)
{
	struct sbx *s = calloc(1, sizeof(*s));
	struct sbx_agent_id now;
	if (!s)
		return -ENOMEM;
	*s = (struct sbx){.rt = rt,
			  .pid = id->pid,
			  .ctl = -1,
			  .ipc = {-1, -1},
			  .layer = {.tree_fd = -1},
			  .persist = true};
	netns_init(&s->netns);
	userns_init(&s->userns);
	s->pidfd = id->pid > 0 ? (int)syscall(SYS_pidfd_open, id->pid, 0) : -1;
	int r = s->pidfd < 0 ? (errno == EINVAL || id->pid <= 0 ? -ESRCH : -errno) : 0;
	if (r == 0)
		r = read_id(id->pid, s->pidfd, &now);
	if (r == 0 && (now.start_time != id->start_time || now.pidns_ino != id->pidns_ino))
		r = -EPERM; /* the pid is another process's now */
	if (r == 0) {
		r = userns_adopt(id->pid, &s->userns);
		if (r == -ENOENT || r == -ESTALE) /* made without one, or not ours */
			r = 0;
	}
	int cg_r = r == 0 && rt->cg.version ? cg_slot_adopt(&rt->cg, id->pid, &s->cg) : 0;
	/* Paused by a host before us: its frozen agent answers at sbx_resume. */
	s->paused = r == 0 && cg_r == 0 && s->cg && cg_freeze_requested(&rt->cg, s->cg) == 1;
	/* Who answers is checked first: an impostor is -EPERM, wherever it is */
	if (r == 0 && !s->paused)
		r = sbx_adopt_finish(s);
	if (r == 0)
		r = cg_r;
	if (r == 0) {
		/* Its layer on disk, with the quota it had (-ENOENT: tmpfs). */
		r = layer_adopt(&rt->layers, id->pid, &s->layer);
		if (r == -ENOENT || r == -ESTALE) /* not ours to manage */
			r = 0;
	}
	if (r < 0) {
		sbx_release(s); /* never kill what we could not adopt */
		return r;
	}
	*ret = s;
	return 0;
}
