/* devbuf.c — keeping the buffers the FUSE device is read into mapped and
 * writable, so that a kill -9 of strata-fuse cannot fail a request.
 *
 * read(2) of /dev/fuse copies the request into the daemon's buffer through
 * get_user_pages (fs/fuse/dev.c fuse_copy_fill). When a page of the buffer
 * is not mapped yet (a worker's fresh buffer: libfuse mallocs one per
 * worker thread, ~1 MiB, at its first read) or write-protected (copy on
 * write after a fork), the copy takes the slow path, which gives up at
 * once when SIGKILL is pending; fuse_dev_do_read then ends the request
 * with EIO. Such a request is neither answered by the dead daemon nor in
 * the processing queue that FUSE_NOTIFY_RESEND hands to the successor, so
 * the holder's promise breaks: a WRITE of the writeback cache killed so
 * makes the next fsync (or close) of the file fail with EIO and its data
 * is gone (README.md "What a crash of strata-fuse loses"). Seen under
 * tests/fuse/create_storm.sh with strata-fuse killed shortly after start,
 * while many workers were new.
 *
 * So each reading thread writes to every page of its buffer before its
 * first read into it (and again after a fork of this process), and the
 * kernel's copy finds them mapped and writable (get_user_pages' fast path,
 * which does not look at signals). Costs one page fault per page per
 * worker thread (~260 for 1 MiB), once. A page swapped out later would
 * reopen the window; strata-fuse's buffers are in use, and machines that
 * run it rarely swap. */
#include <stdatomic.h>
#include <stdint.h>
#include <unistd.h>

#include "fuse/fuse-internal.h"

static atomic_uint forks; /* bumped after each fork: buffers are COW-shared */

static __thread struct {
	void *buf;
	size_t len;
	unsigned forks;
} t_ready;

void sfs_devbuf_ready(void *buf, size_t len)
{
	unsigned f = atomic_load_explicit(&forks, memory_order_relaxed);
	volatile char *p = buf;
	size_t page = (size_t)sysconf(_SC_PAGESIZE);

	if (len == 0 || (buf == t_ready.buf && len <= t_ready.len && f == t_ready.forks))
		return;
	/* the buffer is about to be overwritten by the read: its bytes do not
	 * matter, only that each page is present and writable */
	for (size_t i = 0; i < len; i += page)
		p[i] = 0;
	p[len - 1] = 0;
	t_ready.buf = buf;
	t_ready.len = len;
	t_ready.forks = f;
}

void sfs_devbuf_forked(void)
{
	atomic_fetch_add_explicit(&forks, 1, memory_order_relaxed);
}
