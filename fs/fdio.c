/* fdio.c — whole-buffer writes to files (see fdio.h). */
#include "fs/fdio.h"

#include <errno.h>
#include <unistd.h>

int strata_write_all(int fd, const void *buf, size_t n)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t k = write(fd, p, n);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		p += k;
		n -= (size_t)k;
	}
	return 0;
}

int strata_pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	const char *p = buf;
	while (n > 0) {
		ssize_t k = pwrite(fd, p, n, (off_t)off);
		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return k < 0 ? -errno : -EIO;
		p += k;
		n -= (size_t)k;
		off += (uint64_t)k;
	}
	return 0;
}
