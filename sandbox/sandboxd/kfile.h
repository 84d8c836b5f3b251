/* kfile.h — one write of a short value to a kernel control file (a cgroup's
 * limit or controller list): what the fncall backend does to set up its
 * cgroups. Inline and
 * allocation-free, so that it may run in a cloned child too. */
#pragma once
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

/* Writes v to path in one write(2). Returns 0 or -errno. */
static inline int sbd_kfile_write(const char *path, const char *v)
{
	int fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	int r = write(fd, v, strlen(v)) < 0 ? -errno : 0;
	close(fd);
	return r;
}
