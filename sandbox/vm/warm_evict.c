/* warm_evict.c — the warm-start snapshot store kept bounded (warm.h:
 * vm_warm_evict): least recently used first, never the one a restore holds.
 *
 * A snapshot's last use is its directory's mtime: the rename that published
 * it, then each restore's futimens. Its size is what its files hold (their
 * st_size: the strata mount's st_blocks say nothing of the cluster's
 * copies). A restore keeps a shared flock on the state file until QEMU and
 * sandboxd closed it; the eviction takes it exclusively, without waiting,
 * before it renames the directory aside and removes it: a snapshot being
 * restored is skipped, and a restore that comes during the removal finds
 * the lock taken (warm.c: as if there were no snapshot) or no directory. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/vm/warm.h"

struct snap {
	char key[VM_WARM_KEY_LEN + 1];
	struct timespec used;
	uint64_t bytes;
};

static bool is_key(const char *name)
{
	if (strlen(name) != VM_WARM_KEY_LEN)
		return false;
	for (const char *p = name; *p; p++)
		if (!((*p >= '0' && *p <= '9') || (*p >= 'a' && *p <= 'f')))
			return false;
	return true;
}

static uint64_t dir_bytes(int dfd)
{
	static const char *const files[] = {"state", "disk", "manifest"};
	uint64_t n = 0;
	struct stat st;
	for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++)
		if (fstatat(dfd, files[i], &st, AT_SYMLINK_NOFOLLOW) == 0)
			n += (uint64_t)st.st_size;
	return n;
}

static int older(const void *a, const void *b)
{
	const struct snap *x = a, *y = b;
	if (x->used.tv_sec != y->used.tv_sec)
		return x->used.tv_sec < y->used.tv_sec ? -1 : 1;
	return x->used.tv_nsec < y->used.tv_nsec ? -1 : x->used.tv_nsec > y->used.tv_nsec;
}

/* The snapshots under root, in *ret (caller frees). */
static int list(const char *root, struct snap **ret, size_t *ret_n)
{
	DIR *d = opendir(root);
	if (!d)
		return -errno;
	struct snap *v = NULL;
	size_t n = 0, cap = 0;
	struct dirent *de;
	while ((de = readdir(d))) {
		struct stat st;
		if (!is_key(de->d_name) ||
		    fstatat(dirfd(d), de->d_name, &st, AT_SYMLINK_NOFOLLOW) < 0 ||
		    !S_ISDIR(st.st_mode))
			continue;
		int fd = openat(dirfd(d), de->d_name, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
		if (fd < 0)
			continue;
		if (n == cap) {
			cap = cap ? 2 * cap : 16;
			struct snap *nv = realloc(v, cap * sizeof(*v));
			if (!nv) {
				close(fd);
				break;
			}
			v = nv;
		}
		v[n] = (struct snap){.used = st.st_mtim, .bytes = dir_bytes(fd)};
		snprintf(v[n].key, sizeof(v[n].key), "%s", de->d_name);
		n++;
		close(fd);
	}
	closedir(d);
	if (n)
		qsort(v, n, sizeof(*v), older);
	*ret = v;
	*ret_n = n;
	return 0;
}

/* Removes root/key unless a restore holds it. 0, -EBUSY, -errno. */
static int evict_one(const char *root, const char *key, const char *tag)
{
	char dir[PATH_MAX];
	if ((size_t)snprintf(dir, sizeof(dir), "%s/%s", root, key) >= sizeof(dir))
		return -ENAMETOOLONG;
	int dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (dfd < 0)
		return -errno;
	struct vm_warm_seen seen;
	vm_warm_seen_of(dfd, &seen);
	int lock = openat(dfd, "state", O_RDONLY | O_CLOEXEC);
	int r =
	    lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) < 0 && errno == EWOULDBLOCK ? -EBUSY : 0;
	if (r == 0)
		r = vm_warm_remove(root, key, tag, &seen); /* -ESTALE: replaced, kept */
	if (lock >= 0)
		close(lock); /* the lock goes with it, after the removal */
	close(dfd);
	return r;
}

int vm_warm_evict(const char *root, uint64_t max_bytes, const char *keep, const char *tag,
		  uint64_t *ret_bytes)
{
	struct snap *v = NULL;
	size_t n = 0;
	int r = list(root, &v, &n), removed = 0;
	uint64_t total = 0;
	for (size_t i = 0; r == 0 && i < n; i++)
		total += v[i].bytes;
	for (size_t i = 0; r == 0 && i < n && total > max_bytes; i++) {
		if (keep && !strcmp(v[i].key, keep))
			continue;
		if (evict_one(root, v[i].key, tag) == 0) {
			total -= v[i].bytes;
			removed++;
		}
	}
	free(v);
	if (ret_bytes)
		*ret_bytes = total;
	return r < 0 ? r : removed;
}
