/* test_layer_free.c — layer_free (sandbox/container/layer.c) removes a
 * writable layer's directory whatever tree the sandbox left in it: a tree
 * deeper than the removal's recursion is moved up in pieces over several
 * passes, whose names must not fall on those of an earlier pass (they did:
 * from 65 levels on every pass failed and the layer, its quota and its
 * space stayed). On a plain directory: no root, no quota needed (the
 * quota reset fails and is ignored, as layer_free does). */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"
#include "tests/sandbox/sbx_test.h"

/* A chain of depth directories d/d/... below dir_fd/name, a file at the end
 * and one beside every level. */
static int make_deep(int dir_fd, const char *name, int depth)
{
	if (mkdirat(dir_fd, name, 0755) < 0)
		return -errno;
	int fd = openat(dir_fd, name, O_RDONLY | O_DIRECTORY);
	for (int i = 0; fd >= 0 && i < depth; i++) {
		int f = openat(fd, "f", O_WRONLY | O_CREAT, 0644);
		if (f >= 0)
			close(f);
		if (mkdirat(fd, "d", 0755) < 0)
			break;
		int sub = openat(fd, "d", O_RDONLY | O_DIRECTORY);
		close(fd);
		fd = sub;
	}
	if (fd < 0)
		return -errno;
	close(fd);
	return 0;
}

static void test_depth(int depth)
{
	char tmpl[] = "/tmp/strata-layer-free-XXXXXX";
	CHECK(mkdtemp(tmpl) != NULL);
	struct layer_fs L;
	memset(&L, 0, sizeof(L));
	L.dir_fd = open(tmpl, O_RDONLY | O_DIRECTORY);
	L.lock_fd = -1;
	CHECK(L.dir_fd >= 0);
	CHECK(mkdirat(L.dir_fd, "p7", 0755) == 0);
	int p = openat(L.dir_fd, "p7", O_RDONLY | O_DIRECTORY);
	CHECK(p >= 0 && make_deep(p, "u", depth) == 0);
	close(p);
	int r = layer_free(&L, 7);
	struct stat st;
	bool gone = fstatat(L.dir_fd, "p7", &st, AT_SYMLINK_NOFOLLOW) < 0 && errno == ENOENT;
	fprintf(stderr, "a tree %d deep: layer_free %d (%s), directory %s\n", depth, r,
		strerror(-r), gone ? "gone" : "left");
	CHECK(r == 0 && gone);
	CHECK(layer_free(&L, 7) == 0); /* already gone: nothing to do */
	close(L.dir_fd);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", tmpl);
	CHECK(system(cmd) == 0);
}

int main(void)
{
	test_depth(10);
	test_depth(80);	 /* three passes */
	test_depth(300); /* ten */
	if (!sbxt_failed)
		fprintf(stderr, "layer_free: ok\n");
	return sbxt_failed;
}
