/* example_cat.c — the native client's example: copies a file of the strata
 * mount to stdout through the ring, with up to 16 reads of 1 MiB in flight.
 *
 *   strata-usrbio-cat FILE        (socket: $STRATA_USRBIO_SOCKET, else
 *                                  $STRATA_HOME/run/usrbio.sock)
 *
 * Open the file as usual (the kernel checks permissions), register the
 * descriptor, register one buffer, then keep the ring full and write the
 * pieces out in order as they complete. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "sdk/c/strata_usrbio.h"

#define QD 16
#define PIECE (1u << 20)

static int fail(const char *what, int r)
{
	fprintf(stderr, "strata-usrbio-cat: %s: %s\n", what, strerror(-r));
	return 1;
}

static int write_all(const char *p, size_t n)
{
	while (n > 0) {
		ssize_t w = write(STDOUT_FILENO, p, n);
		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -errno;
		p += w;
		n -= (size_t)w;
	}
	return 0;
}

int main(int argc, char **argv)
{
	struct strata_usrbio *u;
	struct strata_usrbio_buf *b;
	uint64_t size, next = 0, done = 0; /* pieces issued / written out */
	int32_t res[QD];
	bool ready[QD] = {false};
	int fd, id, r;

	if (argc != 2) {
		fprintf(stderr, "usage: strata-usrbio-cat FILE\n");
		return 2;
	}
	fd = open(argv[1], O_RDONLY);
	if (fd < 0)
		return fail(argv[1], -errno);
	if ((r = strata_usrbio_open(NULL, QD, &u)) < 0)
		return fail("connecting to strata-fuse", r);
	if ((r = strata_usrbio_buf_new(u, (size_t)QD * PIECE, &b)) < 0)
		return fail("registering the buffer", r);
	if ((id = strata_usrbio_reg_fd(u, fd, &size)) < 0)
		return fail("registering the file", id);
	close(fd); /* strata-fuse keeps a session of its own */
	char *base = strata_usrbio_buf_base(b);
	uint64_t pieces = (size + PIECE - 1) / PIECE;

	while (done < pieces) {
		while (next < pieces && next - done < QD) {
			size_t slot = next % QD;
			r = strata_usrbio_prep_read(u, id, b, base + slot * PIECE, PIECE,
						    next * PIECE, next);
			if (r < 0)
				return fail("queueing a read", r);
			next++;
		}
		strata_usrbio_submit(u);
		struct strata_usrbio_cqe c[QD];
		int n = strata_usrbio_wait(u, c, QD, 1, -1);
		if (n < 0)
			return fail("waiting", n);
		for (int i = 0; i < n; i++) {
			if (c[i].res < 0)
				return fail("reading", c[i].res);
			res[c[i].user_data % QD] = c[i].res;
			ready[c[i].user_data % QD] = true;
		}
		/* out in order: the pieces complete in any order */
		while (done < pieces && ready[done % QD]) {
			size_t slot = done % QD;
			if ((r = write_all(base + slot * PIECE, (size_t)res[slot])) < 0)
				return fail("writing stdout", r);
			ready[slot] = false;
			done++;
		}
	}
	strata_usrbio_close(u);
	return 0;
}
