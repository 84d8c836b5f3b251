/* test_inroot.c — unit tests of inroot.h on a temporary directory taken as
 * a sandbox's root (no namespaces needed): planted symlinks (absolute,
 * "../.." and through /proc magic links) resolve inside the root for reads,
 * writes and parent creation; a path of 1,500 missing directories is made
 * without deep recursion; owners come from the root's own /etc/passwd; a
 * recycled root is told by its identity. Exit 0 pass, 1 fail, 77 skip. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandboxd/inroot.h"
#include "tests/testutil.h"

static void put(int root, const char *path, const char *text)
{
	int fd = sbd_inroot_open_write(root, path, 0644, false, true, false, NULL);
	EXPECT(fd >= 0);
	if (fd >= 0) {
		EXPECT(write(fd, text, strlen(text)) == (ssize_t)strlen(text));
		close(fd);
	}
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
	EXPECT(sbd_inroot_open_write(root, "/tmp/magic/x", 0644, false, true, false, NULL) < 0);
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
	EXPECT(sbd_inroot_open_write(root, "/nodir/f", 0644, false, false, false, NULL) == -ENOENT);
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
