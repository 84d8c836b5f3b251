/* masks.c — hides what sbx_masks.h lists in a sandbox's /proc and /sys: the
 * one place that applies those lists, for the staging child of a container
 * sandbox (child.c) and for a worker (worker.c) alike; and the lists as
 * JSON for a worker that mounts a /proc of its own later (sandboxd's fncall
 * template, whose call processes each mount one).
 *
 * Files are covered by a bind of /dev/null, directories by a bind of an
 * empty read-only directory, and the kernel's knobs are bound read-only
 * onto themselves. A path this kernel lacks is skipped: masks_scan finds
 * once which exist, so that staging tries no mount on an absent one (a
 * caller without that knowledge passes NULL and every path is tried).
 *
 * Called between a clone and an exec: no malloc, no global writes (the
 * staging child runs in its parent's memory on cgroup v1, sandbox.c), and
 * built without ASan like child.c (it runs on that child's stack). */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <sys/mount.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"
#include "sandbox/container/sbx_masks.h"

static const struct {
	const char *const *paths;
	size_t n;
} mask_lists[MASK_LISTS] = {
    [MASK_PROC_FILES] = {proc_masked, ARRAY_SIZE(proc_masked)},
    [MASK_PROC_DIRS] = {proc_masked_dirs, ARRAY_SIZE(proc_masked_dirs)},
    [MASK_PROC_RO] = {proc_ro, ARRAY_SIZE(proc_ro)},
    [MASK_SYS_DIRS] = {sys_masked, ARRAY_SIZE(sys_masked)},
    [MASK_SYS_FILES] = {sys_masked_files, ARRAY_SIZE(sys_masked_files)},
};

static bool present_at(const uint32_t *present, int list, size_t i)
{
	return !present || (present[list] & (1u << i));
}

/* A mount whose target may legitimately be absent. */
static int mount_opt(const char *src, const char *dst, const char *type, unsigned long fl,
		     const char *data)
{
	return mount(src, dst, type, fl, data) < 0 && errno != ENOENT ? -1 : 0;
}

static int bind_ro(const char *p)
{
	if (mount(p, p, NULL, MS_BIND | MS_REC, NULL) < 0)
		return errno == ENOENT ? 0 : -1;
	return mount(NULL, p, NULL,
		     MS_BIND | MS_REMOUNT | MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL);
}

/* Hides directory dir under *empty (bound), or, with *empty NULL, under an
 * empty read-only tmpfs that then serves as *empty for the next ones. */
static int mask_dir(const char *dir, const char **empty)
{
	if (*empty)
		return mount_opt(*empty, dir, NULL, MS_BIND, NULL);
	if (mount("tmpfs", dir, "tmpfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, "mode=555") <
	    0)
		return errno == ENOENT ? 0 : -1;
	*empty = dir;
	return 0;
}

static int mask_list(int list, const char *null, const char **empty, const uint32_t *present)
{
	for (size_t i = 0; i < mask_lists[list].n; i++) {
		const char *p = mask_lists[list].paths[i];
		if (!present_at(present, list, i))
			continue;
		int r = list == MASK_PROC_FILES || list == MASK_SYS_FILES
			    ? mount_opt(null, p, NULL, MS_BIND, NULL)
			: list == MASK_PROC_RO ? bind_ro(p)
					       : mask_dir(p, empty);
		if (r < 0)
			return -1;
	}
	return 0;
}

int masks_proc(const char *null, const char **empty, const uint32_t *present)
{
	if (mask_list(MASK_PROC_FILES, null, empty, present) < 0 ||
	    mask_list(MASK_PROC_DIRS, null, empty, present) < 0)
		return -1;
	return mask_list(MASK_PROC_RO, null, empty, present);
}

int masks_sys(const char *null, const char **empty, const uint32_t *present)
{
	if (mask_list(MASK_SYS_DIRS, null, empty, present) < 0)
		return -1;
	return mask_list(MASK_SYS_FILES, null, empty, present);
}

void masks_scan(const char *dir, uint32_t present[MASK_LISTS])
{
	char p[128];
	for (int k = 0; k < MASK_LISTS; k++)
		present[k] = ~0u;
	for (int fs = 0; fs < 2; fs++) {
		if (fs == 0 ? mount("proc", dir, "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0
			    : mount("sysfs", dir, "sysfs",
				    MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) < 0)
			continue;
		for (int k = 0; k < MASK_LISTS; k++) {
			if ((k == MASK_SYS_DIRS || k == MASK_SYS_FILES) != (fs == 1))
				continue;
			for (size_t i = 0; i < mask_lists[k].n; i++) {
				/* "proc/x" or "sys/x": the part after the first '/' */
				const char *rel = strchr(mask_lists[k].paths[i], '/') + 1;
				snprintf(p, sizeof(p), "%s/%s", dir, rel);
				if (access(p, F_OK) < 0 && errno == ENOENT)
					present[k] &= ~(1u << i);
			}
		}
		umount2(dir, MNT_DETACH);
	}
}

/* snprintf at buf + *at, advancing *at; once past cap, nothing more is
 * written (and *at stays past it). */
static void append(char *buf, size_t cap, size_t *at, const char *fmt, ...)
{
	va_list ap;
	va_start(ap, fmt);
	int n = *at < cap ? vsnprintf(buf + *at, cap - *at, fmt, ap) : 0;
	va_end(ap);
	*at = n < 0 ? cap : *at + (size_t)n;
}

int masks_proc_json(char *buf, size_t cap)
{
	static const int lists[] = {MASK_PROC_FILES, MASK_PROC_DIRS, MASK_PROC_RO};
	size_t at = 0;
	append(buf, cap, &at, "[");
	for (size_t l = 0; l < ARRAY_SIZE(lists); l++) {
		append(buf, cap, &at, "%s[", l ? "," : "");
		for (size_t i = 0; i < mask_lists[lists[l]].n; i++)
			append(buf, cap, &at, "%s\"/%s\"", i ? "," : "",
			       mask_lists[lists[l]].paths[i]);
		append(buf, cap, &at, "]");
	}
	append(buf, cap, &at, "]");
	return at < cap ? 0 : -ENOSPC;
}
