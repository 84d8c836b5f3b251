/* backend_agent_tar.c — tar archives of an agent box (a VM sandbox's
 * agent, backend.h: sbd_agent_tar_out, sbd_agent_tar_in), made and unpacked
 * by the agent itself (sandbox/agent/agent_tar.c: every file type, owners,
 * modes, mtimes, hard links and xattrs, which the core's archives over
 * READ/WRITE cannot see), the archive a file in the sandbox's root moved in
 * 1 MiB READ and WRITE chunks, then removed. The file has a random name at
 * the root; the sandbox's processes could touch it meanwhile, but only
 * their own archive. */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>

#include "sandbox/sandboxd/backend.h"

#ifndef STRATA_HAVE_CONTAINER
int sbd_agent_tar_out(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, uint64_t max,
		      uint8_t **ret, size_t *ret_len, struct strata_err *e)
{
	return -ENODEV;
}

int sbd_agent_tar_in(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir,
		     const uint8_t *p, size_t n, struct strata_err *e)
{
	return -ENODEV;
}
#else
#include "sandbox/container/strata_sandbox.h"

#define CHUNK (1u << 20)

static void archive_name(char *buf, size_t cap)
{
	uint64_t r = 0;
	(void)!getrandom(&r, sizeof(r), 0);
	snprintf(buf, cap, "/.strata-tar-%016" PRIx64, r);
}

int sbd_agent_tar_out(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir, uint64_t max,
		      uint8_t **ret, size_t *ret_len, struct strata_err *e)
{
	struct sbx *s = sbd_agent_box_sbx(sb);
	char archive[64];
	uint64_t size = 0;
	uint32_t members = 0;
	if (!s)
		return -ENODEV;
	archive_name(archive, sizeof(archive));
	int r = sbx_tar_out(s, dir, archive, &size, &members);
	if (r < 0) {
		if (r != -ENOENT && r != -ENOTDIR)
			sbx_file_remove(s, archive, false);
		return strata_err_set(e, r, "%s: %s", dir, strerror(-r));
	}
	uint8_t *buf = size <= max ? malloc(size ? size : 1) : NULL;
	r = size > max
		? strata_err_set(e, -EFBIG, "%s: its archive is %" PRIu64 " bytes, over %" PRIu64,
				 dir, size, max)
	    : buf ? 0
		  : -ENOMEM;
	for (uint64_t off = 0; r == 0 && off < size;) {
		void *d = NULL;
		size_t n = 0;
		r = sbx_file_read(s, archive, off, CHUNK, &d, &n, NULL);
		if (r == 0 && (n == 0 || n > size - off))
			r = -EIO; /* changed under us */
		if (r == 0)
			memcpy(buf + off, d, n);
		free(d);
		off += n;
	}
	sbx_file_remove(s, archive, false);
	if (r < 0) {
		free(buf);
		return e->code
			   ? r
			   : strata_err_set(e, r, "%s: reading its archive: %s", dir, strerror(-r));
	}
	*ret = buf;
	*ret_len = size;
	return 0;
}

int sbd_agent_tar_in(struct sbd_backend *b, struct sbd_sandbox *sb, const char *dir,
		     const uint8_t *p, size_t n, struct strata_err *e)
{
	struct sbx *s = sbd_agent_box_sbx(sb);
	char archive[64];
	uint32_t members = 0;
	if (!s)
		return -ENODEV;
	archive_name(archive, sizeof(archive));
	int r = 0;
	for (size_t off = 0; r == 0 && (off < n || off == 0);) {
		size_t k = n - off < CHUNK ? n - off : CHUNK;
		r = sbx_file_write_at(s, archive, off, p + off, k, 0600, off == 0);
		off += k;
		if (!n)
			break;
	}
	if (r == 0)
		r = sbx_tar_in(s, archive, dir, &members);
	sbx_file_remove(s, archive, false);
	if (r < 0)
		return strata_err_set(e, r, "unpacking into %s: %s", dir,
				      r == -EINVAL ? "a bad archive, or a member's name leaves it"
						   : strerror(-r));
	return (int)members;
}
#endif /* STRATA_HAVE_CONTAINER */
