/* fdio.h — whole-buffer writes to files: the loops every writer of a file
 * needs around write(2) and pwrite(2), which may write less than asked or be
 * interrupted by a signal. (Sockets and pipes, where EAGAIN and EPIPE mean
 * something, have their own loops beside their event handling.) */
#pragma once
#include <stddef.h>
#include <stdint.h>

/* Writes all n bytes of buf at fd's offset, retrying on EINTR and short
 * writes. Returns 0, or -errno (-EIO if the kernel wrote nothing without an
 * error). */
int strata_write_all(int fd, const void *buf, size_t n);
/* The same at file offset off (pwrite: fd's offset is not moved). */
int strata_pwrite_all(int fd, const void *buf, size_t n, uint64_t off);
