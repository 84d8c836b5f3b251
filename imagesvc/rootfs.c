/* rootfs.c — sandbox roots as overlays over a shared image mount (rootfs.h).
 * The hot path is deliberately tiny (it is what a sandbox creation costs on
 * a node whose image is already mounted): mkdir, mkdir, mkdir, mount. */
#include "imagesvc/rootfs.h"

#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <unistd.h>

#include "imagesvc/store-internal.h"

static int sub(char *buf, const char *dir, const char *name)
{
	int n = snprintf(buf, PATH_MAX, "%s/%s", dir, name);
	return (n < 0 || n >= PATH_MAX) ? -ENAMETOOLONG : 0;
}

int img_rootfs_create(const char *lower, const char *scratch, const char *target)
{
	char upper[PATH_MAX], work[PATH_MAX], opts[3 * PATH_MAX + 64];
	int r = sub(upper, scratch, "upper");
	if (r == 0)
		r = sub(work, scratch, "work");
	if (r < 0)
		return r;
	int n =
	    snprintf(opts, sizeof(opts), "lowerdir=%s,upperdir=%s,workdir=%s", lower, upper, work);
	if (n < 0 || (size_t)n >= sizeof(opts) || n >= 4000)
		return -ENAMETOOLONG; /* mount data is one page */
	if (mkdir(scratch, 0700) < 0)
		return -errno;
	if (mkdir(upper, 0755) < 0 || mkdir(work, 0700) < 0 ||
	    mount("overlay", target, "overlay", 0, opts) < 0) {
		r = -errno;
		store_rm_rf(scratch);
		return r;
	}
	return 0;
}

int img_rootfs_remove(const char *scratch, const char *target)
{
	int r = 0;
	if (umount2(target, 0) < 0 && errno != EINVAL) {
		r = -errno;
		if (r == -EBUSY && umount2(target, MNT_DETACH) == 0)
			r = 0;
	}
	int r2 = store_rm_rf(scratch);
	return r < 0 ? r : r2;
}
