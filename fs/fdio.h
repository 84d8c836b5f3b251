/* fdio.h — whole-buffer reads and writes of files: the loops every reader
 * and writer of a file needs around read(2), write(2) and pwrite(2), which
 * may move less than asked or be interrupted by a signal. (Sockets and pipes, where EAGAIN and
 * EPIPE mean something, have their own loops beside their event handling.) */
#pragma once
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* Writes all n bytes of buf at fd's offset, retrying on EINTR and short
 * writes. Returns 0, or -errno (-EIO if the kernel wrote nothing without an
 * error). */
int strata_write_all(int fd, const void *buf, size_t n);
/* The same at file offset off (pwrite: fd's offset is not moved). */
int strata_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
/* Reads up to n bytes into buf, retrying on EINTR and short reads, until n
 * or end of file. Returns the bytes read (less than n only at end of file),
 * or -errno. */
ssize_t strata_read_all(int fd, void *buf, size_t n);
