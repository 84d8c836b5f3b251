/* test_inroot.c — unit tests of inroot.h on a temporary directory taken as
 * a sandbox's root (no namespaces needed): planted symlinks (absolute,
 * "../.." and through /proc magic links) resolve inside the root for reads,
 * writes and parent creation; a path of 1,500 missing directories is made
 * without deep recursion; owners come from the root's own /etc/passwd; a
 * recycled root is told by its identity; an upload with an owner over a
 * name the sandbox made a symlink (to /etc/shadow) replaces the link and
 * leaves the target alone; a failed upload leaves the old file whole; a
 * file whose lease is being broken gives -EAGAIN in bounded time. Exit 0
 * pass, 1 fail, 77 skip. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/clock.h"
#include "sandbox/sandboxd/inroot.h"
#include "tests/testutil.h"

/* Writes text to path as an upload does; commit false: as a failed one. */
static int put_as(int root, const char *path, const char *text, const struct sbd_owner *o,
		  bool commit)
{
	struct sbd_inroot_file f;
	int r = sbd_inroot_file_open(root, path, 0644, false, true, false, o, &f);
	if (r < 0)
		return r;
	EXPECT(write(f.fd, text, strlen(text)) == (ssize_t)strlen(text));
	if (!commit) {
		sbd_inroot_file_abort(&f);
		return 0;
	}
	return sbd_inroot_file_commit(&f);
}

static void put(int root, const char *path, const char *text)
{
	EXPECT(put_as(root, path, text, NULL, true) == 0);
}

/* The contents of file dir/rel ("" when missing). */
static const char *slurp(const char *dir, const char *rel)
{
	static char buf[256];
	char p[4096];
	snprintf(p, sizeof(p), "%s%s", dir, rel);
	buf[0] = 0;
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	if (fd >= 0) {
		ssize_t n = read(fd, buf, sizeof(buf) - 1);
		buf[n > 0 ? n : 0] = 0;
		close(fd);
	}
	return buf;
}

/* Whether dir/rel holds a leftover temporary file of an upload. */
static bool has_tmp(const char *dir, const char *rel)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s%s", dir, rel);
	DIR *dp = opendir(p);
	bool found = false;
	for (struct dirent *de; dp && (de = readdir(dp));)
		found |= !strncmp(de->d_name, ".strata-upload.", 15);
	if (dp)
		closedir(dp);
	return found;
}

/* Review item 10: the user swaps a file it owns for a symlink to
 * /etc/shadow; an upload with user= must not truncate nor chown the
 * target, only replace the link. */
static void test_owner_upload_over_symlink(const char *dir, int root)
{
	char p[4096], q[4096];
	put(root, "/etc/shadow", "root:secret\n");
	snprintf(p, sizeof(p), "%s/etc/shadow", dir);
	EXPECT(chmod(p, 0600) == 0);
	EXPECT(mkdir(strcat(strcpy(q, dir), "/home"), 0755) == 0);
	EXPECT(mkdir(strcat(q, "/u"), 0755) == 0);
	EXPECT(symlink("/etc/shadow", strcat(q, "/.bashrc")) == 0);
	struct sbd_owner u = {.set = true, .uid = 1000, .gid = 1000};
	EXPECT(put_as(root, "/home/u/.bashrc", "alias x=y\n", &u, true) == 0);
	struct stat st;
	EXPECT(stat(p, &st) == 0 && st.st_uid == 0 && (st.st_mode & 07777) == 0600);
	EXPECT(!strcmp(slurp(dir, "/etc/shadow"), "root:secret\n"));
	EXPECT(lstat(q, &st) == 0 && S_ISREG(st.st_mode) && st.st_uid == 1000);
	EXPECT(!strcmp(slurp(dir, "/home/u/.bashrc"), "alias x=y\n"));
	/* append never follows the last name */
	snprintf(q, sizeof(q), "%s/home/u/log", dir);
	EXPECT(symlink("/etc/shadow", q) == 0);
	struct sbd_inroot_file f;
	EXPECT(sbd_inroot_file_open(root, "/home/u/log", 0644, false, true, true, &u, &f) ==
	       -ELOOP);
	/* a directory made for user= is opened by its parent, not by path */
	int fd = sbd_inroot_mkdirs(root, "/home/u/new/sub", 0700, &u);
	EXPECT(fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == 1000);
	if (fd >= 0)
		close(fd);
}

/* Review item 6: a failed upload leaves the file it would have replaced
 * as it was, and no temporary file; a replaced file keeps owner and mode. */
static void test_failed_upload_keeps_old(const char *dir, int root)
{
	char p[4096];
	put(root, "/keep/f", "old contents");
	snprintf(p, sizeof(p), "%s/keep/f", dir);
	EXPECT(chown(p, 1234, 1235) == 0 && chmod(p, 0640) == 0);
	EXPECT(put_as(root, "/keep/f", "new, cut short", NULL, false) == 0);
	EXPECT(!strcmp(slurp(dir, "/keep/f"), "old contents"));
	EXPECT(!has_tmp(dir, "/keep"));
	put(root, "/keep/f", "new");
	struct stat st;
	EXPECT(stat(p, &st) == 0 && st.st_uid == 1234 && st.st_gid == 1235 &&
	       (st.st_mode & 07777) == 0640);
	EXPECT(!strcmp(slurp(dir, "/keep/f"), "new"));
	EXPECT(!has_tmp(dir, "/keep"));
	struct sbd_inroot_file f;
	EXPECT(sbd_inroot_file_open(root, "/keep", 0644, false, true, false, NULL, &f) == -EISDIR);
}

/* Review item 4: a file whose lease is being broken makes openat2 answer
 * EAGAIN (O_NONBLOCK) for up to the 45 s lease-break-time: bounded. */
static void test_lease_bounded(const char *dir, int root)
{
	char p[4096];
	put(root, "/leased", "x");
	snprintf(p, sizeof(p), "%s/leased", dir);
	int fd = open(p, O_RDONLY | O_CLOEXEC);
	EXPECT(fd >= 0);
	signal(SIGIO, SIG_IGN); /* the lease break's signal to its holder */
	if (fd < 0 || fcntl(fd, F_SETLEASE, F_WRLCK) < 0) {
		fprintf(stderr, "note: no write lease here (%s): lease case not tested\n",
			strerror(errno));
		if (fd >= 0)
			close(fd);
		return;
	}
	struct stat st;
	int64_t t0 = strata_mono_ms();
	int r = sbd_inroot_open_read(root, "/leased", &st);
	int64_t took = strata_mono_ms() - t0;
	EXPECT(r == -EAGAIN);
	EXPECT(took < 10000);
	if (r >= 0)
		close(r);
	fcntl(fd, F_SETLEASE, F_UNLCK);
	close(fd);
}

static void test_symlinks_stay_inside(const char *dir, int root)
{
	char p[4096];
	snprintf(p, sizeof(p), "%s/tmp", dir);
	EXPECT(mkdir(p, 0755) == 0);
	const char *links[][2] = {{"/etc/passwd", "pw"},
				  {"../../../../../../etc", "up"},
				  {"/proc/self/root/etc", "magic"}};
	for (size_t i = 0; i < 3; i++) {
		snprintf(p, sizeof(p), "%s/tmp/%s", dir, links[i][1]);
		EXPECT(symlink(links[i][0], p) == 0);
	}
	put(root, "/etc/passwd", "root:x:0:0::/:/bin/sh\napp:x:1000:1001::/:/bin/sh\n");
	struct stat st;
	int fd = sbd_inroot_open_read(root, "/tmp/pw", &st);
	char buf[256] = {0};
	EXPECT(fd >= 0 && read(fd, buf, sizeof(buf) - 1) > 0 && !strncmp(buf, "root:x:0:0::/", 13));
	if (fd >= 0)
		close(fd);
	/* a write through "../.." lands in the root's /etc, not the host's */
	put(root, "/tmp/up/strata-inroot-test", "inside");
	EXPECT(access("/etc/strata-inroot-test", F_OK) < 0);
	snprintf(p, sizeof(p), "%s/etc/strata-inroot-test", dir);
	EXPECT(access(p, F_OK) == 0);
	EXPECT(sbd_inroot_open_read(root, "/tmp/magic/passwd", &st) < 0);
	struct sbd_inroot_file wf;
	EXPECT(sbd_inroot_file_open(root, "/tmp/magic/x", 0644, false, true, false, NULL, &wf) < 0);
	struct sbd_owner o;
	EXPECT(sbd_inroot_user(root, "app", &o) == 0 && o.uid == 1000 && o.gid == 1001);
	EXPECT(sbd_inroot_user(root, "nobody-here", &o) == -ENOENT);
	EXPECT(sbd_inroot_user(root, "7:8", &o) == 0 && o.uid == 7 && o.gid == 8);
}

static void test_deep_parents(int root)
{
	static char path[4096];
	size_t n = 0;
	n += (size_t)snprintf(path + n, sizeof(path) - n, "/deep");
	for (int i = 0; i < 1500; i++)
		n += (size_t)snprintf(path + n, sizeof(path) - n, "/d");
	snprintf(path + n, sizeof(path) - n, "/f");
	put(root, path, "x");
	struct stat st;
	int fd = sbd_inroot_open_read(root, path, &st);
	EXPECT(fd >= 0 && st.st_size == 1);
	if (fd >= 0)
		close(fd);
	struct sbd_inroot_file wf;
	EXPECT(sbd_inroot_file_open(root, "/nodir/f", 0644, false, false, false, NULL, &wf) ==
	       -ENOENT);
	struct sbd_owner o = {.set = true, .uid = 1234, .gid = 4321};
	fd = sbd_inroot_mkdirs(root, "/owned/a/b", 0700, &o);
	EXPECT(fd >= 0 && fstat(fd, &st) == 0 && st.st_uid == 1234 && (st.st_mode & 07777) == 0700);
	if (fd >= 0)
		close(fd);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "skip: needs root (owners, the host's /etc)\n");
		return 77;
	}
	char dir[] = "/tmp/strata-inroot-XXXXXX";
	if (!mkdtemp(dir))
		return 1;
	int root = open(dir, O_PATH | O_DIRECTORY | O_CLOEXEC);
	CHECK(root >= 0);
	test_symlinks_stay_inside(dir, root);
	test_deep_parents(root);
	test_owner_upload_over_symlink(dir, root);
	test_failed_upload_keeps_old(dir, root);
	test_lease_bounded(dir, root);
	/* the root of this process, then refused as another's identity */
	struct stat me;
	int fd = sbd_inroot_open_root(getpid(), NULL, &me);
	EXPECT(fd >= 0);
	if (fd >= 0)
		close(fd);
	struct stat other = me;
	other.st_ino++;
	EXPECT(sbd_inroot_open_root(getpid(), &other, NULL) == -ESRCH);
	close(root);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	EXPECT(system(cmd) == 0);
	if (test_failures)
		return 1;
	printf("ok\n");
	return 0;
}
