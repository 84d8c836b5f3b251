/* chunk_io.h — positioned file I/O of the chunk engine, every mutating step
 * passing a fault point: in tests (chunk_store_fault_after) the n-th step
 * from now tears its write (only the first half of its pages reach the
 * file) and ends the process as kill -9 would, so that every step of a
 * write can be made the last one before a crash. Inactive otherwise (one
 * relaxed load per step). */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Exit status of a process the fault point ended. */
#define CHUNK_FAULT_EXIT 86

struct chunk_fault {
	int countdown; /* __atomic; > 0: steps left before the crash */
};

/* Writes all of buf at off. Returns 0, -ENOSPC (a short write) or -errno. */
int chunk_io_pwrite(struct chunk_fault *f, int fd, const void *buf, size_t len, uint64_t off);
/* Reads up to len bytes at off, until len or end of file. Returns the count
 * or -errno. */
ssize_t chunk_io_pread_most(int fd, void *buf, size_t len, uint64_t off);
/* Reads all len bytes at off. Returns 0, -EIO (end of file first) or -errno. */
int chunk_io_pread(int fd, void *buf, size_t len, uint64_t off);
/* A mutating step that is not a write (ftruncate, rename, unlink, sync):
 * the fault point before it. */
void chunk_io_step(struct chunk_fault *f);
int chunk_io_ftruncate(struct chunk_fault *f, int fd, uint64_t len);
int chunk_io_fdatasync(struct chunk_fault *f, int fd);
