/* takeover.c — surviving the death of strata-fuse: the FUSE connection is
 * kept by strata-fuse-holder (fuse/holder.c, fs/fuse_holder.h) and taken
 * over by the next strata-fuse, so that the mounts stacked on this one
 * (EROFS image mounts whose backing files are open here, the sandboxes'
 * overlays) never see it end.
 *
 * A fresh mount (no holder holds a connection): mount, read the first
 * request (always FUSE_INIT) ourselves, keep its bytes and let libfuse
 * answer it; then hand the holder a duplicate of the /dev/fuse fd with those
 * bytes and the mount point (spawning the holder if none listens). A
 * watcher thread keeps that connection to the holder: when the holder dies
 * it starts a new one and deposits again.
 *
 * A takeover (the holder holds a live connection of our mount point and no
 * strata-fuse is attached to it): a libfuse session on the received fd (the
 * "/dev/fd/N" mount point: no mount), the saved INIT replayed through
 * fuse_session_process_buf (libfuse negotiates exactly what the kernel
 * agreed to; the reply to the long-answered INIT is refused by the kernel
 * with ENOENT, which libfuse ignores), then FUSE_NOTIFY_RESEND (kernel >=
 * 6.9): the requests the dead daemon had read but not answered go back to
 * the queue, marked with FUSE_UNIQUE_RESEND, and are served again. Node ids
 * are meta inode numbers and file handles meta session ids (rebuilt at their
 * first use: ops_file.c, ops_dir.c), so everything the kernel holds stays
 * valid. Requests are read only from the shared fd (no clone_fd in
 * main.c): a request read through a cloned fd that dies with the daemon
 * would be aborted by the kernel instead of kept for the resend.
 *
 * A resent request that had been carried out before the death is carried
 * out again unless strata-meta answers it from its record: reads, lookups
 * and writes (same bytes at the same offset) are idempotent, and the
 * mutations go with the operation id of their request (opid.c; the
 * connection's id travels with the fd through the holder), so a create,
 * mkdir, unlink, rename ... the dead daemon had done answers as it did. */
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <linux/close_range.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/fuse_holder.h"
#include "fs/log.h"
#include "fuse/fuse-internal.h"

#define FUSE_OPCODE_INIT 26
#define FUSE_NOTIFY_RESEND_CODE 7 /* enum fuse_notify_code, kernel >= 6.9 */
#define HOLDER_RESPAWN_MS 1000	  /* between attempts to replace a dead holder */
#define HOLDER_BIN "strata-fuse-holder"

struct sfs_takeover {
	struct fuse_holder_info info; /* the INIT and the mount point we deposit */
	int fuse_fd;		      /* the session's (not ours to close) */
	int conn;		      /* to the holder; -1 while none */
	pthread_t watcher;
	bool watching;
	_Atomic bool stopping;
	char bin[PATH_MAX]; /* the holder binary, beside ours */
};

static struct sfs_takeover *tk_new(struct sfs *fs)
{
	struct sfs_takeover *tk = calloc(1, sizeof(*tk));
	char self[PATH_MAX];
	ssize_t n;

	if (!tk)
		return NULL;
	tk->conn = -1;
	tk->fuse_fd = -1;
	snprintf(tk->info.mount, sizeof(tk->info.mount), "%s", fs->o.mountpoint);
	n = readlink("/proc/self/exe", self, sizeof(self) - 1);
	self[n > 0 ? n : 0] = '\0';
	snprintf(tk->bin, sizeof(tk->bin), "%s/" HOLDER_BIN, dirname(self));
	return tk;
}

int sfs_takeover_take(struct sfs *fs, int *ret_fd)
{
	struct fuse_holder_info info;
	int fd = -1, r;

	*ret_fd = -1;
	if (!fs->o.holder)
		return 0;
	if (!fs->tk && !(fs->tk = tk_new(fs)))
		return -ENOMEM;
	r = fuse_holder_call(fs->o.holder, FUSE_HOLDER_TAKE, &info, &fd);
	if (r == -ENOENT || r == -ECONNREFUSED)
		return 0; /* no holder: a fresh mount */
	if (r == -EBUSY)
		return log_error_errno(r, "Another strata-fuse still serves %s", fs->o.mountpoint);
	if (r < 0)
		log_warn_errno(r, "Failed to ask the holder at %s: mounting anew", fs->o.holder);
	if (r <= 0)
		return 0;
	if (strcmp(info.mount, fs->o.mountpoint) != 0 || info.init_len < 40) {
		log_warn("The holder at %s keeps a connection of %s, not of %s: mounting anew",
			 fs->o.holder, info.mount, fs->o.mountpoint);
		close(fd);
		return 0;
	}
	fs->tk->info.init_len = info.init_len;
	memcpy(fs->tk->info.init, info.init, info.init_len);
	/* the connection's operation ids go on (opid.c); a holder too old to
	 * keep one gives 0: new ids, so a request resent now is done again */
	fs->conn_id = info.conn_id;
	if (!fs->conn_id)
		log_warn("The holder at %s keeps no connection id: requests resent after the "
			 "crash are carried out again (EEXIST/ENOENT possible)",
			 fs->o.holder);
	*ret_fd = fd;
	return 1;
}

/* Replays the saved INIT through libfuse, as if the kernel had sent it. */
static int replay_init(struct sfs *fs)
{
	_cleanup_free_ void *mem = malloc(fs->tk->info.init_len);
	struct fuse_buf b = {.size = fs->tk->info.init_len, .mem = mem};

	if (!mem)
		return -ENOMEM;
	memcpy(mem, fs->tk->info.init, b.size);
	fuse_session_process_buf(fs->se, &b);
	return 0;
}

/* Asks the kernel to queue again what the dead daemon had read. */
static int notify_resend(int fd)
{
	uint8_t h[16] = {0};

	h[0] = sizeof(h); /* fuse_out_header: len, error = notify code, unique 0 */
	h[4] = FUSE_NOTIFY_RESEND_CODE;
	ssize_t w = write(fd, h, sizeof(h));
	return w == (ssize_t)sizeof(h) ? 0 : w < 0 ? -errno : -EIO;
}

int sfs_takeover_start(struct sfs *fs, int fd)
{
	char dev[32];
	int r;

	snprintf(dev, sizeof(dev), "/dev/fd/%d", fd);
	if (fuse_session_mount(fs->se, dev) != 0)
		return -EIO;
	fs->taken_over = true;
	fs->tk->fuse_fd = fd;
	if ((r = replay_init(fs)) < 0)
		return r;
	r = notify_resend(fd);
	if (r < 0)
		log_warn_errno(r, "The kernel refused FUSE_NOTIFY_RESEND (it needs Linux 6.9): "
				  "requests in flight at the crash fail");
	log_info("Took over the FUSE connection of %s from the holder", fs->o.mountpoint);
	return 0;
}

int sfs_takeover_first_request(struct sfs *fs)
{
	struct fuse_buf b = {.mem = NULL};
	int n;

	if (!fs->tk)
		return 0;
	fs->tk->fuse_fd = fuse_session_fd(fs->se);
	snprintf(fs->tk->info.mount, sizeof(fs->tk->info.mount), "%s", fs->o.mountpoint);
	do {
		n = fuse_session_receive_buf(fs->se, &b);
	} while (n == -EINTR);
	if (n <= 0) {
		free(b.mem);
		return n < 0 ? n : -EIO;
	}
	const uint8_t *p = b.mem;
	uint32_t op =
	    (uint32_t)p[4] | (uint32_t)p[5] << 8 | (uint32_t)p[6] << 16 | (uint32_t)p[7] << 24;
	if (n >= 40 && op == FUSE_OPCODE_INIT && (size_t)n <= FUSE_HOLDER_INIT_MAX) {
		fs->tk->info.init_len = (size_t)n;
		memcpy(fs->tk->info.init, b.mem, (size_t)n);
	} else {
		log_warn("The first FUSE request is not an INIT: no takeover possible");
	}
	fuse_session_process_buf(fs->se, &b);
	free(b.mem);
	return 0;
}

/* Binds the holder's socket (0600) and starts the holder on it, detached
 * (its own session, not our child). Returns 0 or -errno. */
static int spawn_holder(struct sfs *fs)
{
	struct sockaddr_un a = {.sun_family = AF_UNIX};
	char fdarg[16];
	char *argv[] = {fs->tk->bin, "--listen-fd", fdarg, "--socket", (char *)fs->o.holder, NULL};
	sigset_t all;
	int s, r = 0;
	pid_t pid;

	if (strlen(fs->o.holder) >= sizeof(a.sun_path))
		return -ENAMETOOLONG;
	if (access(fs->tk->bin, X_OK) < 0)
		return -errno; /* the exec would fail: say so, not "started" */
	strcpy(a.sun_path, fs->o.holder);
	s = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
	if (s < 0)
		return -errno;
	unlink(fs->o.holder);
	mode_t old = umask(077);
	if (bind(s, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(s, 8) < 0)
		r = -errno;
	umask(old);
	if (r < 0) {
		close(s);
		return r;
	}
	snprintf(fdarg, sizeof(fdarg), "%d", 3);
	sigemptyset(&all);
	pid = fork();
	if (pid == 0) {
		/* Only async-signal-safe calls until exec (we have threads). */
		setsid();
		if (fork() != 0)
			_exit(0);
		sigprocmask(SIG_SETMASK, &all, NULL);
		if (dup2(s, 3) < 0)
			_exit(127);
		syscall(SYS_close_range, 4u, ~0u, CLOSE_RANGE_CLOEXEC);
		execv(argv[0], argv);
		_exit(127);
	}
	close(s);
	if (pid < 0)
		return -errno;
	sfs_devbuf_forked(); /* our pages were shared copy-on-write meanwhile */
	waitpid(pid, NULL, 0);
	log_info("Started %s on %s", HOLDER_BIN, fs->o.holder);
	return 0;
}

/* Connects to the holder (starting one if none listens) and deposits. */
static int deposit(struct sfs *fs)
{
	struct sfs_takeover *tk = fs->tk;
	uint16_t type = 0;
	int c = fuse_holder_connect(fs->o.holder), r;

	if (c == -ENOENT || c == -ECONNREFUSED) {
		if ((r = spawn_holder(fs)) < 0)
			return r;
		c = fuse_holder_connect(fs->o.holder);
	}
	if (c < 0)
		return c;
	r = fuse_holder_send(c, FUSE_HOLDER_DEPOSIT, &tk->info, tk->fuse_fd);
	if (r == 0)
		r = fuse_holder_recv(c, &type, NULL, NULL);
	if (r == 0 && type != FUSE_HOLDER_OK)
		r = -EPROTO;
	if (r < 0) {
		close(c);
		return r;
	}
	tk->conn = c;
	return 0;
}

/* Holds the connection to the holder; replaces a holder that died. While
 * none has the connection the mount works but is unprotected: a crash of
 * strata-fuse would end it (`strata status` says so); that is logged once
 * per outage, and so is its end. */
static void *watch(void *arg)
{
	struct sfs *fs = arg;
	struct sfs_takeover *tk = fs->tk;
	bool warned = false;

	while (!tk->stopping) {
		if (tk->conn < 0) {
			int r = deposit(fs);
			if (r < 0 && !warned)
				log_warn_errno(
				    r,
				    "The mount %s is unprotected (a crash of strata-fuse "
				    "would end it): no strata-fuse-holder takes the FUSE "
				    "connection; retrying every %d ms",
				    fs->o.mountpoint, HOLDER_RESPAWN_MS);
			if (r < 0) {
				warned = true;
				usleep(HOLDER_RESPAWN_MS * 1000);
				continue;
			}
			atomic_store(&fs->held, true);
			log_info("The FUSE connection of %s is held again by %s", fs->o.mountpoint,
				 fs->o.holder);
			warned = false;
			continue;
		}
		char b;
		ssize_t n = recv(tk->conn, &b, 1, 0);
		if (n < 0 && (errno == EAGAIN || errno == EINTR))
			continue; /* the receive timeout: the holder is still there */
		if (tk->stopping)
			break;
		atomic_store(&fs->held, false);
		log_warn("strata-fuse-holder went away: starting a new one");
		close(tk->conn);
		tk->conn = -1;
	}
	return NULL;
}

int sfs_takeover_hold(struct sfs *fs)
{
	struct sfs_takeover *tk = fs->tk;
	int r;

	if (!tk || tk->info.init_len == 0)
		return 0;
	tk->info.conn_id = fs->conn_id;
	r = deposit(fs);
	atomic_store(&fs->held, r == 0);
	if (r < 0)
		log_warn_errno(r, "Failed to hand the FUSE connection to a holder (retrying)");
	else
		log_info("The FUSE connection is held by %s (a restart keeps the mount)",
			 fs->o.holder);
	r = sfs_thread_start(&tk->watcher, watch, fs);
	tk->watching = r == 0;
	return r;
}

void sfs_takeover_done(struct sfs *fs, bool stop_holder)
{
	struct sfs_takeover *tk = fs->tk;

	if (!tk)
		return;
	tk->stopping = true;
	atomic_store(&fs->held, false);
	if (tk->conn >= 0)
		shutdown(tk->conn, SHUT_RDWR); /* wakes the watcher */
	if (tk->watching)
		pthread_join(tk->watcher, NULL);
	if (tk->conn >= 0)
		close(tk->conn);
	if (stop_holder)
		fuse_holder_call(fs->o.holder, FUSE_HOLDER_STOP, NULL, NULL);
	free(tk);
	fs->tk = NULL;
}
