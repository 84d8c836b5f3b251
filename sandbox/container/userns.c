/* userns.c — the user namespace of a sandbox: root inside is an
 * unprivileged range of ids outside.
 *
 * Each sandbox (made with userns) gets a user namespace mapping
 * ids 0..65535 inside to a range of its own outside, SBX_USERNS_BASE +
 * idx * SBX_USERNS_SIZE, idx below SBX_USERNS_MAX. Its agent enters it at
 * START (agent_stage.c), after the mounts: every process of the sandbox is
 * then an id of the range on the host, and its capabilities count only in
 * a namespace that owns nothing (the sandbox's other namespaces stay the
 * host's user namespace's). A process that escaped everything else would
 * still be a uid no host file belongs to.
 *
 * A namespace needs a process to write its maps to: a short-lived child
 * (clone(CLONE_NEWUSER), on a small stack of ours, waiting on a pipe) whose
 * maps we write and whose namespace we keep an fd of, then it exits. That
 * costs a fork; ranges are therefore kept with their namespace after a
 * sandbox ends (the runtime's spares, like its cgroup slots) and serve the
 * next one: nothing of a sandbox outlives it in its user namespace (the
 * sandbox can make no namespace, mount, keyring or IPC object there:
 * seccomp.c, and its other namespaces are not owned by it).
 *
 * Ranges are shared by every runtime of the machine (sandboxd, tests, a
 * restarted sandboxd) through SBX_USERNS_DIR/<idx>: a runtime holds an
 * exclusive flock on the file of each range it uses, and the file names
 * the agent of a started sandbox ("<pid>\n"). A range whose file is not
 * locked is free unless that agent still lives in it (a persistent sandbox
 * whose host exited, waiting to be adopted: sbx_adopt locks it again).
 * Files are never removed (an unlink would race another runtime's open). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"

#define MAP_CHILD_STACK (64u << 10)

void userns_init(struct userns *u)
{
	*u = (struct userns){.fd = -1, .lock_fd = -1};
}

uint32_t userns_base(const struct userns *u)
{
	return u->fd >= 0 ? SBX_USERNS_BASE + u->idx * SBX_USERNS_SIZE : 0;
}

/* The first uid outside of pid's user namespace map ("0 <base> <n>"), or 0
 * when pid is in the host's (or is gone). */
static uint32_t map_base_of(pid_t pid)
{
	char p[64], buf[128];
	snprintf(p, sizeof(p), "/proc/%d/uid_map", (int)pid);
	_cleanup_close_ int fd = open(p, O_RDONLY | O_CLOEXEC);
	ssize_t n = fd < 0 ? -1 : read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return 0;
	buf[n] = 0;
	unsigned long in = 1, out = 0, len = 0;
	if (sscanf(buf, "%lu %lu %lu", &in, &out, &len) != 3 || in != 0 || len != SBX_USERNS_SIZE)
		return 0;
	return (uint32_t)out;
}

/* Locks range idx's file if no runtime and no live agent uses the range:
 * the locked fd, -EBUSY, or -errno. */
static int range_lock(uint32_t idx)
{
	char p[64];
	snprintf(p, sizeof(p), SBX_USERNS_DIR "/%u", idx);
	int fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0 && errno == ENOENT && mkdir(SBX_USERNS_DIR, 0700) < 0 && errno != EEXIST)
		return -errno;
	if (fd < 0)
		fd = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
		int e = errno;
		close(fd);
		return e == EWOULDBLOCK ? -EBUSY : -e;
	}
	char buf[32];
	ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
	int owner = 0;
	if (n > 0) {
		buf[n] = 0;
		owner = atoi(buf);
	}
	if (owner > 0 && map_base_of(owner) == SBX_USERNS_BASE + idx * SBX_USERNS_SIZE) {
		close(fd); /* an orphaned persistent sandbox's */
		return -EBUSY;
	}
	if (ftruncate(fd, 0) < 0) {
		int e = errno;
		close(fd);
		return -e;
	}
	return fd;
}

static int write_file(const char *path, const char *text)
{
	_cleanup_close_ int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	ssize_t n = write(fd, text, strlen(text));
	return n < 0 ? -errno : (size_t)n == strlen(text) ? 0 : -EIO;
}

/* A user namespace mapping 0..SBX_USERNS_SIZE-1 to base..: made by a child
 * that waits (on a pipe) while we write its maps and open its namespace. */
static int make_ns(uint32_t base)
{
	int pfd[2];
	if (pipe2(pfd, O_CLOEXEC) < 0)
		return -errno;
	void *stack = mmap(NULL, MAP_CHILD_STACK, PROT_READ | PROT_WRITE,
			   MAP_PRIVATE | MAP_ANONYMOUS | MAP_STACK, -1, 0);
	if (stack == MAP_FAILED) {
		int e = errno;
		close(pfd[0]);
		close(pfd[1]);
		return -e;
	}
	/* CLONE_VM: no copy of our page tables; CLONE_FILES: our close of the
	 * write end is the child's (its read returns EOF). */
	pid_t pid = clone(child_userns_wait, (char *)stack + MAP_CHILD_STACK,
			  CLONE_NEWUSER | CLONE_VM | CLONE_FILES | SIGCHLD, &pfd[0]);
	int r = pid < 0 ? -errno : 0;
	char p[64], map[64];
	snprintf(map, sizeof(map), "0 %u %u\n", base, SBX_USERNS_SIZE);
	int fd = -1;
	if (r == 0) {
		snprintf(p, sizeof(p), "/proc/%d/uid_map", (int)pid);
		r = write_file(p, map);
	}
	if (r == 0) {
		snprintf(p, sizeof(p), "/proc/%d/gid_map", (int)pid);
		r = write_file(p, map);
	}
	if (r == 0) {
		snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)pid);
		fd = open(p, O_RDONLY | O_CLOEXEC);
		r = fd < 0 ? -errno : 0;
	}
	close(pfd[1]); /* the child's read returns: it exits */
	if (pid > 0)
		while (waitpid(pid, NULL, __WALL) < 0 && errno == EINTR)
			;
	close(pfd[0]);
	munmap(stack, MAP_CHILD_STACK);
	return r < 0 ? r : fd;
}

int userns_new(struct sbx_runtime *rt, struct userns *ret)
{
	uint32_t start = __atomic_fetch_add(&rt->userns_next, 1, __ATOMIC_RELAXED);
	for (uint32_t i = 0; i < SBX_USERNS_MAX; i++) {
		uint32_t idx = (start + i) % SBX_USERNS_MAX;
		int lock = range_lock(idx);
		if (lock == -EBUSY)
			continue;
		if (lock < 0)
			return lock;
		int fd = make_ns(SBX_USERNS_BASE + idx * SBX_USERNS_SIZE);
		if (fd < 0) {
			close(lock);
			return fd;
		}
		__atomic_store_n(&rt->userns_next, idx + 1, __ATOMIC_RELAXED);
		*ret = (struct userns){.fd = fd, .lock_fd = lock, .idx = idx};
		return 0;
	}
	return -EUSERS;
}

void userns_set_owner(struct userns *u, pid_t pid)
{
	char buf[32];
	int n = snprintf(buf, sizeof(buf), "%d\n", (int)pid);
	if (u->lock_fd >= 0)
		(void)!pwrite(u->lock_fd, buf, (size_t)n, 0);
}

int userns_adopt(pid_t pid, struct userns *ret)
{
	uint32_t base = map_base_of(pid);
	if (!base)
		return -ENOENT; /* made without one */
	if (base < SBX_USERNS_BASE || (base - SBX_USERNS_BASE) % SBX_USERNS_SIZE ||
	    (base - SBX_USERNS_BASE) / SBX_USERNS_SIZE >= SBX_USERNS_MAX)
		return -ESTALE;
	uint32_t idx = (base - SBX_USERNS_BASE) / SBX_USERNS_SIZE;
	char p[64];
	snprintf(p, sizeof(p), SBX_USERNS_DIR "/%u", idx);
	int lock = open(p, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
	if (lock < 0)
		return -errno;
	if (flock(lock, LOCK_EX | LOCK_NB) < 0) {
		/* Another runtime still holds it (the sandbox is adopted
		 * twice): the namespace without the range, never recycled. */
		close(lock);
		lock = -1;
	}
	snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)pid);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		int e = errno;
		if (lock >= 0)
			close(lock);
		return e == ENOENT ? -ESRCH : -e;
	}
	*ret = (struct userns){.fd = fd, .lock_fd = lock, .idx = idx};
	userns_set_owner(ret, pid);
	return 0;
}

void userns_close(struct userns *u)
{
	if (u->fd >= 0)
		close(u->fd);
	if (u->lock_fd >= 0)
		close(u->lock_fd); /* the file keeps its agent: an adopter knows it */
	userns_init(u);
}

void userns_free(struct userns *u)
{
	if (u->lock_fd >= 0)
		(void)!ftruncate(u->lock_fd, 0);
	userns_close(u);
}
