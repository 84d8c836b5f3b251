/* disk.c — a VM sandbox's writable disk: a sparse file of its disk limit,
 * formatted ext4 on the host (the guest has no mkfs; agent_guest.c mounts
 * it under the overlay). No journal (the disk lives as long as its VM, and
 * a journal's writes would be I/O through the emulated disk), no reserved
 * blocks (the sandbox gets its whole limit), lazy inode tables (mkfs
 * writes a few MiB, not the limit). */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <spawn.h>
#include <stdio.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/vm/vmm.h"

extern char **environ;

#define DISK_MIN_BYTES (8ull << 20) /* ext4's own metadata needs a few MiB */

int vmm_disk_make(const char *path, uint64_t bytes, int *ret_fd, struct strata_err *e)
{
	if (bytes < DISK_MIN_BYTES)
		bytes = DISK_MIN_BYTES;
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (fd < 0)
		return strata_err_set(e, -errno, "cannot make the VM's disk %s: %s", path,
				      strerror(errno));
	if (ftruncate(fd, (off_t)bytes) < 0) {
		int r = -errno;
		close(fd);
		return strata_err_set(e, r, "cannot size the VM's disk to %" PRIu64 " bytes: %s",
				      bytes, strerror(-r));
	}
	char *argv[] = {"mkfs.ext4",
			"-q",
			"-F",
			"-O",
			"^has_journal",
			"-m",
			"0",
			"-E",
			"nodiscard,lazy_itable_init=1,lazy_journal_init=1",
			(char *)path,
			NULL};
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = posix_spawnp(&pid, "mkfs.ext4", &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	int st = 0;
	if (r == 0 && waitpid(pid, &st, 0) < 0)
		r = errno;
	if (r != 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
		close(fd);
		unlink(path);
		return strata_err_set(e, r ? -r : -EIO, "mkfs.ext4 of the VM's disk failed%s",
				      r == ENOENT ? " (no mkfs.ext4: apt-get install e2fsprogs)"
						  : "");
	}
	*ret_fd = fd;
	return 0;
}
