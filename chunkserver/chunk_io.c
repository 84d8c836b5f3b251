/* chunk_io.c — positioned I/O with fault points (chunk_io.h). */
#include "chunkserver/chunk_io.h"

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "fs/fdio.h"

/* True if this step is the one to crash at (the countdown reached 0). */
static bool fault_now(struct chunk_fault *f)
{
	if (!f || __atomic_load_n(&f->countdown, __ATOMIC_RELAXED) <= 0)
		return false;
	return __atomic_sub_fetch(&f->countdown, 1, __ATOMIC_ACQ_REL) == 0;
}

/* What kill -9 in the middle of a write leaves: the write stops at a page
 * boundary (the kernel checks for a fatal signal between pages). */
static void tear_and_exit(int fd, const void *buf, size_t len, uint64_t off)
{
	size_t first = (off + len / 2) / 4096 * 4096;
	size_t n = first > off ? first - off : 0;
	if (n > 0 && pwrite(fd, buf, n, (off_t)off) < 0)
		_exit(CHUNK_FAULT_EXIT + 1);
	_exit(CHUNK_FAULT_EXIT);
}

void chunk_io_step(struct chunk_fault *f)
{
	if (fault_now(f))
		_exit(CHUNK_FAULT_EXIT);
}

int chunk_io_pwrite(struct chunk_fault *f, int fd, const void *buf, size_t len, uint64_t off)
{
	if (fault_now(f))
		tear_and_exit(fd, buf, len, off);
	int r = strata_pwrite_all(fd, buf, len, off);
	return r == -EIO ? -ENOSPC : r; /* nothing written and no error: no room */
}

ssize_t chunk_io_pread_most(int fd, void *buf, size_t len, uint64_t off)
{
	size_t got = 0;
	while (got < len) {
		ssize_t n = pread(fd, (uint8_t *)buf + got, len - got, (off_t)(off + got));
		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0)
			return -errno;
		if (n == 0)
			break;
		got += (size_t)n;
	}
	return (ssize_t)got;
}

int chunk_io_pread(int fd, void *buf, size_t len, uint64_t off)
{
	ssize_t n = chunk_io_pread_most(fd, buf, len, off);
	return n < 0 ? (int)n : (size_t)n < len ? -EIO : 0;
}

int chunk_io_ftruncate(struct chunk_fault *f, int fd, uint64_t len)
{
	chunk_io_step(f);
	return ftruncate(fd, (off_t)len) < 0 ? -errno : 0;
}

int chunk_io_fdatasync(struct chunk_fault *f, int fd)
{
	chunk_io_step(f);
	return fdatasync(fd) < 0 ? -errno : 0;
}
