/* restart.c — the planned restart of strata-fuse (SIGUSR2): the running
 * daemon hands its FUSE connection to the next one instead of unmounting,
 * so that the mounts stacked on it (EROFS image mounts, the sandboxes'
 * overlays) and every open file keep working across an upgrade or restart
 * (fuse/README.md "Restarting without unmounting").
 *
 * SIGUSR2 while strata-fuse-holder keeps the connection (takeover.c says so
 * through fs->held): the session loop ends as for SIGTERM. Requests being
 * served finish and are answered (libfuse runs them with cancellation off
 * and joins its workers); the ones still queued in the kernel wait there,
 * and one read by a worker as it was cancelled is resent to the successor
 * (FUSE_NOTIFY_RESEND). Then pending lengths are recorded in meta (the
 * successor knows only meta's), the connection to the holder is closed (the
 * holder hands the fd only to a TAKE once its depositor is gone) and the
 * daemon exits 0 without unmounting and without closing the meta sessions,
 * which are the file handles the kernel holds. The next strata-fuse (`strata
 * restart fuse`, or `strata up`) takes the connection over as after a crash.
 *
 * SIGUSR2 while no holder keeps the connection (none, or it died and its
 * replacement is not in yet): ignored with a line in the log, since exiting
 * would end the mount; SIGTERM still stops. */
#include <errno.h>
#include <signal.h>
#include <string.h>
#include <unistd.h>

#include "fs/log.h"
#include "fuse/fuse-internal.h"

/* The signal handler's view of the daemon: a handler gets no argument.
 * Set once before the handler is installed, cleared after it is removed. */
static struct sfs *g_restart_fs;
static volatile sig_atomic_t g_restart;

static void on_restart(int sig)
{
	static const char refused[] =
	    "strata-fuse: SIGUSR2 ignored: no strata-fuse-holder keeps the FUSE connection, "
	    "a restart now would end the mount (SIGTERM stops)\n";
	struct sfs *fs = g_restart_fs;

	(void)sig;
	if (!fs || !fs->se)
		return;
	if (!atomic_load(&fs->held)) {
		if (write(STDERR_FILENO, refused, sizeof(refused) - 1) < 0) {
			/* nowhere to say it */
		}
		return;
	}
	g_restart = 1;
	/* The thread interrupted (no SA_RESTART) is libfuse's: a worker's read
	 * or the main thread's wait returns EINTR and sees the session exited;
	 * our helper threads block every signal (sfs_thread_start). */
	fuse_session_exit(fs->se);
}

int sfs_restart_arm(struct sfs *fs)
{
	struct sigaction sa = {.sa_handler = on_restart};

	sigemptyset(&sa.sa_mask);
	g_restart_fs = fs;
	return sigaction(SIGUSR2, &sa, NULL) < 0 ? -errno : 0;
}

void sfs_restart_disarm(void)
{
	signal(SIGUSR2, SIG_IGN);
	g_restart_fs = NULL;
}

bool sfs_restart_requested(void)
{
	return g_restart != 0;
}

static void record_length(struct sfs *fs, struct sfs_inode *in)
{
	pthread_mutex_lock(&in->lock);
	int r = sfs_record_length_locked(fs, in);
	pthread_mutex_unlock(&in->lock);
	if (r < 0)
		log_warn_errno(r, "Failed to record the length of inode %llu before the restart",
			       (unsigned long long)in->ino);
}

void sfs_restart_handover(struct sfs *fs)
{
	fs->handing_over = true; /* sfs_op_destroy keeps the sessions */
	sfs_inode_foreach(fs, record_length);
	sfs_takeover_done(fs, false);
	log_info("Handed the FUSE connection of %s to strata-fuse-holder for the next "
		 "strata-fuse: exiting without unmounting",
		 fs->o.mountpoint);
}
