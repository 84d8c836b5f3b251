/* usage.c — what one sandbox uses, read from the host: its memory and pids
 * cgroups (v1 or v2 file names, whichever the directory has), the CPU time
 * of its processes, and the usage of its writable layer. A backend with
 * cgroups and a root process (container) fills struct sbd_usage with these
 * for GET /v1/sandboxes/{id}/metrics.
 *
 * CPU time is summed over the processes of the sandbox's cgroup from
 * /proc/PID/stat (user + system, their own and that of the children they
 * reaped: every process of the sandbox descends from its agent, which
 * reaps orphans, so a process's time reaches the sum whether it still runs
 * or ended), not from a cgroup counter: on cgroup v1 the library manages
 * no cpuacct hierarchy (the one mounted beside cpu is not ours to use), and
 * its cgroups are reused from one sandbox to the next, so a cumulative
 * counter would also count the previous sandbox's time. The memory peak
 * has the same problem, which the library solves where it reuses cgroups
 * (cgroup.c: v1's is reset, a v2 cgroup that peaked high is not reused). */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/statfs.h>
#include <unistd.h>

#include "sandbox/sandboxd/usage.h"

/* Processes of one sandbox whose times are summed (its pids limit is lower
 * in practice; beyond this the sum stops: the loop must not be held). */
#define USAGE_MAX_PROCS 65536

/* Reads the start of a small kernel file into buf (NUL-terminated).
 * Returns false when it is absent or empty. */
static bool read_small(const char *path, char *buf, size_t cap)
{
	int fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return false;
	ssize_t n = read(fd, buf, cap - 1);
	close(fd);
	if (n <= 0)
		return false;
	buf[n] = 0;
	return true;
}

/* Reads the integer at the start of dir/file, or -1. */
static int64_t read_int(const char *dir, const char *file)
{
	char p[4200], buf[64];
	snprintf(p, sizeof(p), "%s/%s", dir, file);
	if (!read_small(p, buf, sizeof(buf)))
		return -1;
	char *end;
	long long v = strtoll(buf, &end, 10);
	return end == buf ? -1 : (int64_t)v;
}

/* The user + system time of pid and of its reaped children, in clock
 * ticks, or -1 (it ended meanwhile). */
static int64_t proc_ticks(long pid)
{
	char p[64], buf[1024];
	snprintf(p, sizeof(p), "/proc/%ld/stat", pid);
	if (!read_small(p, buf, sizeof(buf)))
		return -1;
	/* comm may hold anything, ')' and spaces included: fields follow the
	 * last ')'. After it: state (3) ... utime (14) stime cutime cstime. */
	char *s = strrchr(buf, ')');
	unsigned long long ut, st;
	long long cut, cst;
	if (!s || sscanf(s + 1, " %*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu %lld %lld",
			 &ut, &st, &cut, &cst) != 4)
		return -1;
	return (int64_t)(ut + st) + cut + cst;
}

int64_t sbd_usage_cpu_us(const char *cgroup_dir)
{
	char p[4200];
	snprintf(p, sizeof(p), "%s/cgroup.procs", cgroup_dir);
	FILE *f = fopen(p, "re");
	if (!f)
		return -errno;
	long hz = sysconf(_SC_CLK_TCK);
	int64_t ticks = 0;
	long pid;
	for (int i = 0; i < USAGE_MAX_PROCS && fscanf(f, "%ld", &pid) == 1; i++) {
		int64_t t = proc_ticks(pid);
		if (t > 0)
			ticks += t;
	}
	fclose(f);
	return hz > 0 ? ticks * 1000000 / hz : -EINVAL;
}

int64_t sbd_disk_used(pid_t root_pid)
{
	char p[64];
	struct statfs sf;
	snprintf(p, sizeof(p), "/proc/%d/root/", (int)root_pid);
	if (statfs(p, &sf) < 0)
		return -errno;
	return (int64_t)(sf.f_blocks - sf.f_bfree) * (int64_t)sf.f_bsize;
}

int sbd_usage_read(const char *memory_dir, const char *pids_dir, pid_t root_pid,
		   struct sbd_usage *ret)
{
	struct sbd_usage u = {-1, -1, -1, -1, -1};
	if (!memory_dir || !pids_dir)
		return -ENOENT;
	u.memory_bytes = read_int(memory_dir, "memory.current"); /* v2 */
	if (u.memory_bytes >= 0) {
		u.memory_peak_bytes = read_int(memory_dir, "memory.peak"); /* 5.19+ */
	} else {
		u.memory_bytes = read_int(memory_dir, "memory.usage_in_bytes");
		u.memory_peak_bytes = read_int(memory_dir, "memory.max_usage_in_bytes");
	}
	u.pids = read_int(pids_dir, "pids.current");
	if (u.memory_bytes < 0 || u.pids < 0)
		return -ENOENT; /* the cgroups are gone: the sandbox ended */
	u.cpu_us = sbd_usage_cpu_us(pids_dir);
	if (u.cpu_us < 0)
		u.cpu_us = -1;
	u.disk_bytes = sbd_disk_used(root_pid);
	if (u.disk_bytes < 0)
		u.disk_bytes = -1;
	*ret = u;
	return 0;
}
