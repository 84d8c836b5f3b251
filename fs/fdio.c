/* fdio.c — whole-buffer reads and writes of files (see fdio.h). */
#include "fs/fdio.h"

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

/* write(2) at fd's offset when !positioned, else pwrite(2) at off. */
static int write_loop(int fd, const char *p, size_t n, bool positioned, uint64_t off)
{
	while (n > 0) {
		ssize_t k = positioned ? pwrite(fd, p, n, (off_t)off) : write(fd, p, n);
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

int strata_write_all(int fd, const void *buf, size_t n)
{
	return write_loop(fd, buf, n, false, 0);
}

int strata_pwrite_all(int fd, const void *buf, size_t n, uint64_t off)
{
	return write_loop(fd, buf, n, true, off);
}

ssize_t strata_read_all(int fd, void *buf, size_t n)
{
	size_t got = 0;
	while (got < n) {
		ssize_t k = read(fd, (char *)buf + got, n - got);
		if (k < 0 && errno == EINTR)
			continue;
		if (k < 0)
			return -errno;
		if (k == 0)
			break;
		got += (size_t)k;
	}
	return (ssize_t)got;
}
