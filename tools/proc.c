/* proc.c — starting, finding and stopping daemons, and looking at the mount.
 *
 * A daemon is recorded by its pid file; it is alive only if that pid exists,
 * is not a zombie and runs the expected binary (pids get reused). Daemons are
 * started in their own session (setsid) so they outlive the shell that ran
 * `strata up`, with stderr appended to their log; a chunkserver of a
 * multi-node home is started inside its node's network namespace (setns in
 * the child, so the pid recorded is the daemon's own). */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <linux/close_range.h>
#include <time.h>
#include <unistd.h>
#include "fs/cleanup.h"
#include "tools/cli.h"

#define FUSE_SUPER_MAGIC 0x65735546

long long cli_now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (long long)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

void cli_sleep_ms(int ms)
{
	struct timespec ts = {ms / 1000, (long)(ms % 1000) * 1000000};
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
}

bool cli_pid_alive(pid_t pid, const char *binary)
{
	char path[64], buf[1024];
	int n;

	if (pid <= 0)
		return false;
	/* Reap it if it is our own child that exited. */
	if (waitpid(pid, NULL, WNOHANG) == pid)
		return false;
	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	n = cli_read_file(path, buf, sizeof(buf));
	if (n <= 0)
		return false;
	const char *rp = strrchr(buf, ')');
	if (!rp || rp[1] != ' ' || rp[2] == 'Z' || rp[2] == 'X')
		return false;
	if (!binary)
		return true;
	/* comm is the binary name cut to 15 characters. */
	const char *lp = strchr(buf, '(');
	if (lp && (size_t)(rp - lp - 1) == STRATA_MIN(strlen(binary), (size_t)15) &&
	    strncmp(lp + 1, binary, (size_t)(rp - lp - 1)) == 0)
		return true;
	/* Or argv[0]'s base name (a wrapper may have renamed the thread). */
	snprintf(path, sizeof(path), "/proc/%d/cmdline", (int)pid);
	_cleanup_close_ int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	n = (int)read(fd, buf, sizeof(buf) - 1);
	if (n <= 0)
		return false;
	buf[n] = '\0';
	const char *base = strrchr(buf, '/');
	base = base ? base + 1 : buf;
	return strcmp(base, binary) == 0;
}

pid_t cli_spawn(char *const argv[], const char *logpath)
{
	return cli_spawn_in(argv, logpath, NULL);
}

pid_t cli_spawn_in(char *const argv[], const char *logpath, const char *netns_path)
{
	int errpipe[2];
	pid_t pid;
	int err = 0;

	if (pipe2(errpipe, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0) {
		int r = -errno;
		close(errpipe[0]);
		close(errpipe[1]);
		return r;
	}
	if (pid == 0) {
		int e;
		close(errpipe[0]);
		setsid();
		if (netns_path) {
			int ns = open(netns_path, O_RDONLY | O_CLOEXEC);
			if (ns < 0 || setns(ns, CLONE_NEWNET) < 0)
				goto fail;
			close(ns);
		}
		int in = open("/dev/null", O_RDONLY);
		int log = open(logpath, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (in < 0 || log < 0)
			goto fail;
		dup2(in, 0);
		dup2(log, 1);
		dup2(log, 2);
		if (in > 2)
			close(in);
		if (log > 2)
			close(log);
		/* Nothing else we hold (a caller's pipes, sockets) may outlive us in
		 * the daemon: mark every other fd close-on-exec. */
		if (syscall(SYS_close_range, 3u, ~0u, CLOSE_RANGE_CLOEXEC) < 0)
			for (int fd = 3; fd < 1024; fd++)
				if (fd != errpipe[1])
					fcntl(fd, F_SETFD, FD_CLOEXEC);
		signal(SIGPIPE, SIG_DFL);
		signal(SIGINT, SIG_DFL);
		signal(SIGTERM, SIG_DFL);
		execv(argv[0], argv);
	fail:
		e = errno;
		if (write(errpipe[1], &e, sizeof(e)) < 0) {
			/* nothing to do: the parent sees EOF */
		}
		_exit(127);
	}
	close(errpipe[1]);
	/* EOF means exec succeeded (the pipe is close-on-exec). */
	ssize_t n;
	do {
		n = read(errpipe[0], &err, sizeof(err));
	} while (n < 0 && errno == EINTR);
	close(errpipe[0]);
	if (n == (ssize_t)sizeof(err)) {
		waitpid(pid, NULL, 0);
		return -err;
	}
	return pid;
}

int cli_stop_pid(pid_t pid, const char *binary, int timeout_ms)
{
	long long deadline;

	if (!cli_pid_alive(pid, binary))
		return 0;
	if (kill(pid, SIGTERM) < 0 && errno != ESRCH)
		return -errno;
	deadline = cli_now_ms() + timeout_ms;
	while (cli_now_ms() < deadline) {
		if (!cli_pid_alive(pid, binary))
			return 0;
		cli_sleep_ms(50);
	}
	if (kill(pid, SIGKILL) < 0 && errno != ESRCH)
		return -errno;
	deadline = cli_now_ms() + 5000;
	while (cli_now_ms() < deadline) {
		if (!cli_pid_alive(pid, binary))
			return 0;
		cli_sleep_ms(20);
	}
	return -ETIMEDOUT;
}

/* Undoes mountinfo's octal escapes (\040 for a space) in place. */
static void unescape(char *s)
{
	char *w = s;
	for (char *r = s; *r; r++) {
		if (r[0] == '\\' && r[1] >= '0' && r[1] <= '3' && r[2] >= '0' && r[2] <= '7' &&
		    r[3] >= '0' && r[3] <= '7') {
			*w++ = (char)((r[1] - '0') * 64 + (r[2] - '0') * 8 + (r[3] - '0'));
			r += 3;
		} else {
			*w++ = *r;
		}
	}
	*w = '\0';
}

/* Finds the top-most mount at path; copies its fs type. Returns true if any. */
static bool mount_lookup(const char *path, char *fstype, size_t cap)
{
	FILE *f = fopen("/proc/self/mountinfo", "re");
	char *line = NULL;
	size_t len = 0;
	bool found = false;

	if (!f)
		return false;
	while (getline(&line, &len, f) > 0) {
		char *save = NULL, *tok;
		char *mp = NULL;
		int field = 0;
		bool after_dash = false;
		const char *type = NULL;

		for (tok = strtok_r(line, " \n", &save); tok; tok = strtok_r(NULL, " \n", &save)) {
			field++;
			if (field == 5)
				mp = tok;
			if (after_dash) {
				type = tok;
				break;
			}
			if (field > 6 && strcmp(tok, "-") == 0)
				after_dash = true;
		}
		if (!mp || !type)
			continue;
		unescape(mp);
		if (strcmp(mp, path) == 0) {
			found = true;
			snprintf(fstype, cap, "%s", type);
		}
	}
	free(line);
	fclose(f);
	return found;
}

/* statfs() + stat() in a child with a time limit: a hung fuse daemon must
 * not hang us. */
static int probe_with_timeout(const char *path, int timeout_ms)
{
	pid_t pid = fork();
	int status;
	long long deadline;

	if (pid < 0)
		return -errno;
	if (pid == 0) {
		/* statfs always reaches the daemon (stat may be answered from
		 * the kernel's attribute cache even when the daemon is gone). */
		struct statfs sfs;
		struct stat st;
		if (statfs(path, &sfs) < 0 || stat(path, &st) < 0)
			_exit(errno & 0x7f);
		_exit(sfs.f_type == FUSE_SUPER_MAGIC ? 0 : EMEDIUMTYPE);
	}
	deadline = cli_now_ms() + timeout_ms;
	for (;;) {
		pid_t w = waitpid(pid, &status, WNOHANG);
		if (w == pid)
			break;
		if (cli_now_ms() > deadline) {
			/* A child inside a FUSE request that reached the daemon
			 * cannot die before the daemon answers: do not wait for
			 * it (init reaps it once we exit). */
			kill(pid, SIGKILL);
			waitpid(pid, &status, WNOHANG);
			return -ETIMEDOUT;
		}
		cli_sleep_ms(10);
	}
	if (!WIFEXITED(status))
		return -EIO;
	return -WEXITSTATUS(status);
}

enum cli_mount_state cli_mount_state(const char *path)
{
	char type[64];

	if (!mount_lookup(path, type, sizeof(type)))
		return MNT_NONE;
	if (strncmp(type, "fuse", 4) != 0)
		return MNT_OTHER;
	return probe_with_timeout(path, 3000) == 0 ? MNT_OK : MNT_STALE;
}

const char *cli_mount_state_name(enum cli_mount_state s)
{
	switch (s) {
	case MNT_NONE:
		return "not mounted";
	case MNT_OK:
		return "mounted";
	case MNT_STALE:
		return "stale";
	case MNT_OTHER:
		return "other filesystem mounted";
	}
	return "?";
}

int cli_umount(const char *path)
{
	char type[64];

	if (!mount_lookup(path, type, sizeof(type)))
		return 0;
	if (umount2(path, 0) == 0)
		return 0;
	if (umount2(path, MNT_DETACH) == 0)
		return 0;
	return -errno;
}
