/* test_sandbox_userns.c — root in a sandbox is not root on the host: the
 * sandbox runs in a user namespace whose root is an unprivileged uid of a
 * range of its own (sbx_uid_base), and a process in that namespace (setns
 * from here: a simulated escape of every other isolation) can neither write
 * a root-owned host file nor read /etc/shadow. The sandbox still works:
 * exec as root, image files read, files made inside are the range's
 * outside. A sandbox without (userns false, the library's default) is root as
 * before. Needs root; 77 otherwise. */
#include <errno.h>
#include <fcntl.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "tests/sandbox/sbx_test.h"

/* The "Uid:" line's real uid of pid, or -1. */
static long uid_of(pid_t pid)
{
	char p[64], buf[4096];
	snprintf(p, sizeof(p), "/proc/%d/status", (int)pid);
	FILE *f = fopen(p, "r");
	long uid = -1;
	while (f && fgets(buf, sizeof(buf), f))
		if (!strncmp(buf, "Uid:", 4))
			uid = strtol(buf + 4, NULL, 10);
	if (f)
		fclose(f);
	return uid;
}

/* In a child: joins the sandbox's user namespace as its root (uid 0
 * inside), then tries the host file and /etc/shadow. Exit status: bit 0
 * set if the host file could be opened for writing, bit 1 if shadow was
 * readable, 64 if the setns failed. */
static int escape(pid_t agent, const char *host_file)
{
	pid_t c = fork();
	if (c == 0) {
		char p[64];
		snprintf(p, sizeof(p), "/proc/%d/ns/user", (int)agent);
		int ns = open(p, O_RDONLY | O_CLOEXEC);
		if (ns < 0 || setns(ns, CLONE_NEWUSER) < 0 || syscall(SYS_setgroups, 0, NULL) < 0 ||
		    syscall(SYS_setresgid, 0, 0, 0) < 0 || syscall(SYS_setresuid, 0, 0, 0) < 0)
			_exit(64);
		int bad = 0;
		int fd = open(host_file, O_WRONLY | O_APPEND);
		if (fd >= 0 && write(fd, "pwned\n", 6) == 6)
			bad |= 1;
		fd = open("/etc/shadow", O_RDONLY);
		if (fd >= 0)
			bad |= 2;
		_exit(bad);
	}
	int st = 0;
	if (c < 0 || waitpid(c, &st, 0) != c || !WIFEXITED(st))
		return -1;
	return WEXITSTATUS(st);
}

int main(void)
{
	struct sbxt_env e;
	int r = sbxt_setup(&e, 2);
	if (r)
		return r;
	struct sbx_config cfg = sbxt_config(&e);
	cfg.userns = true;
	struct sbx *s = NULL, *old = NULL;
	/* First (before its filesystem type's answer is cached): a tree with
	 * a mount below that refuses is refused, as that tree's answer. */
	char why[200], sub[600], in[700];
	snprintf(sub, sizeof(sub), "%s/withproc", e.dir);
	snprintf(in, sizeof(in), "%s/proc", sub);
	if (mkdir(sub, 0755) == 0 && mkdir(in, 0755) == 0 &&
	    mount("proc", in, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0) {
		CHECK(sbx_runtime_userns_check(e.rt, sub, why, sizeof(why)) < 0);
		CHECK(strstr(why, "a mount below") != NULL);
		fprintf(stderr, "%s: %s\n", sub, why);
		umount2(in, MNT_DETACH);
	}
	/* What sandboxd asks before it gives a sandbox a user namespace: yes
	 * for the test's rootfs (ext4, XFS or tmpfs), no with the reason for a
	 * filesystem without idmapped mounts (proc), twice (cached). */
	r = sbx_runtime_userns_check(e.rt, e.rootfs, why, sizeof(why));
	if (r < 0)
		fprintf(stderr, "sbx_runtime_userns_check(%s): %s\n", e.rootfs, why);
	CHECK(r == 0);
	for (int i = 0; i < 2; i++) {
		CHECK(sbx_runtime_userns_check(e.rt, "/proc", why, sizeof(why)) < 0);
		CHECK(strstr(why, "does not support idmapped mounts") != NULL);
	}
	fprintf(stderr, "/proc: %s\n", why);
	CHECK(sbx_runtime_userns_check(e.rt, NULL, why, sizeof(why)) == 0);
	r = sbx_create(e.rt, &cfg, &s);
	if (r < 0) {
		fprintf(stderr, "sbx_create: %s\n", strerror(-r));
		sbxt_teardown(&e);
		return 1;
	}
	static struct sbxt_out o;
	struct sbx_exec_result res;
	uint32_t base = sbx_uid_base(s);
	fprintf(stderr, "uid base %#x\n", base);
	CHECK(base >= 0x10000000u && base % 65536 == 0);
	CHECK(uid_of(sbx_pid(s)) == (long)base); /* the agent, on the host */

	/* Root inside, working as root: exec, image files, new files. */
	CHECK(
	    sbxt_sh(
		s,
		"id -u; id -g; head -1 /etc/passwd; echo x > /made; mkdir /d1; chown 1000:1000 /d1",
		0, &o, &res) == 0 &&
	    res.exit_code == 0 && !strncmp(o.out, "0\n0\nroot:", 9));
	CHECK(sbxt_sh(s, "ls -ln / | grep ' bin'", 0, &o, &res) == 0 &&
	      strstr(o.out, " 0 ")); /* image's root */
	char p[PATH_MAX];
	struct stat st;
	snprintf(p, sizeof(p), "/proc/%d/root/made", (int)sbx_pid(s));
	CHECK(stat(p, &st) == 0 && st.st_uid == base && st.st_gid == base);
	snprintf(p, sizeof(p), "/proc/%d/root/d1", (int)sbx_pid(s));
	CHECK(stat(p, &st) == 0 && st.st_uid == base + 1000 && st.st_gid == base + 1000);
	/* A command's processes are the range's on the host too. */
	CHECK(sbxt_sh(s, "cat /proc/self/uid_map", 0, &o, &res) == 0 &&
	      strtoul(o.out + strspn(o.out, " 0"), NULL, 10) == base);

	/* The simulated escape: a process in the sandbox's user namespace. */
	char host_file[PATH_MAX];
	snprintf(host_file, sizeof(host_file), "%s/host-owned", e.dir);
	int fd = open(host_file, O_WRONLY | O_CREAT | O_TRUNC, 0644);
	CHECK(fd >= 0 && write(fd, "host\n", 5) == 5);
	if (fd >= 0)
		close(fd);
	int bad = escape(sbx_pid(s), host_file);
	fprintf(stderr, "escape: %d\n", bad);
	CHECK(bad == 0);
	CHECK(stat(host_file, &st) == 0 && st.st_size == 5);

	/* Ranges are recycled, not leaked: the next sandbox may take this one. */
	sbx_destroy(s);
	s = NULL;

	/* Without: root is root, as before. */
	cfg.userns = false;
	r = sbx_create(e.rt, &cfg, &old);
	CHECK(r == 0);
	if (r == 0) {
		CHECK(sbx_uid_base(old) == 0 && uid_of(sbx_pid(old)) == 0);
		CHECK(sbxt_sh(old, "echo x > /made", 0, &o, &res) == 0 && res.exit_code == 0);
		snprintf(p, sizeof(p), "/proc/%d/root/made", (int)sbx_pid(old));
		CHECK(stat(p, &st) == 0 && st.st_uid == 0);
		sbx_destroy(old);
	}
	sbxt_teardown(&e);
	fprintf(stderr, sbxt_failed ? "FAILED\n" : "ok\n");
	return sbxt_failed;
}
