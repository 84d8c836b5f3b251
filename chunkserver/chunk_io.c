/* chunk_io.c — positioned I/O with fault points (chunk_io.h). */
#include "chunkserver/chunk_io.h"

#include <errno.h>
#include <stdbool.h>
#include <unistd.h>

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
	const uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = pwrite(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -ENOSPC;
		p += n, len -= (size_t)n, off += (uint64_t)n;
	}
	return 0;
}

int chunk_io_pread(int fd, void *buf, size_t len, uint64_t off)
{
	uint8_t *p = buf;
	while (len > 0) {
		ssize_t n = pread(fd, p, len, (off_t)off);
		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			return n < 0 ? -errno : -EIO;
		p += n, len -= (size_t)n, off += (uint64_t)n;
	}
	return 0;
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
