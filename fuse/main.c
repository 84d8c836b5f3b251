/* main.c — strata-fuse: command line, mount, session loop, shutdown.
 *
 *   strata-fuse --meta HOST:PORT --mount DIR [--client-id ID] [--cache-dir DIR]
 *               [--foreground] [--log-level L]
 *               [--attr-timeout S] [--entry-timeout S] [--negative-timeout S]
 *               [--no-writeback-cache] [--retry-ms MS] [--cache-size MB]
 *               [--holder SOCKET] [--key FILE] [--tls] [--usrbio SOCKET]
 *
 * Its connections prove the cluster key (--key, else $STRATA_KEY) with the
 * role fuse (fs/rpc_auth.h): namespace and chunk data, no admin operation.
 *
 * With --holder, the FUSE connection is kept by strata-fuse-holder across a
 * crash of this daemon, and a new strata-fuse takes it over instead of
 * mounting (takeover.c).
 *
 * Start-up: check that strata-meta answers, then (unless --foreground) fork;
 * the child mounts with allow_other, default_permissions, fsname=strata,
 * subtype=strata, and tells the parent through a pipe whether the mount is
 * up, so the parent's exit status says whether mounting worked. The session
 * runs on libfuse's multi-threaded loop. SIGTERM/SIGINT/SIGHUP end the loop;
 * pending lengths are recorded, sessions closed and the mount removed.
 * SIGUSR2 (with --holder) ends it too but hands the connection over to the
 * next strata-fuse instead (restart.c): no unmount. A stale mount left by a
 * crashed predecessor (ENOTCONN) is detached first. */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <malloc.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "fs/daemon.h"
#include "fs/rpc_tls.h"
#include "fuse/fuse-internal.h"
#include "fs/log.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: strata-fuse --meta HOST:PORT --mount DIR [--client-id ID]\n"
		"                   [--cache-dir DIR] [--foreground] [--log-level L]\n"
		"                   [--attr-timeout S] [--entry-timeout S] [--negative-timeout S]\n"
		"                   [--no-writeback-cache] [--retry-ms MS] [--cache-size MB]\n"
		"                   [--holder SOCKET] [--key FILE] [--tls] [--usrbio SOCKET]\n"
		"  --key FILE  the cluster key (32 bytes, mode 0600; default $STRATA_KEY)\n"
		"  --usrbio SOCKET  serve the native client (sdk/c) on this unix socket\n"
		"  --tls       TLS for every connection (fs/rpc_tls.h; all of the cluster or\n"
		"              none; default $STRATA_TLS=1)\n");
}

enum {
	OPT_ATTR = 256,
	OPT_ENTRY,
	OPT_NEG,
	OPT_NOWB,
	OPT_RETRY,
	OPT_CACHE_SIZE,
	OPT_HOLDER,
	OPT_KEY,
	OPT_TLS,
	OPT_USRBIO
};

static int parse_seconds(const char *s, double *ret)
{
	char *end;
	double v = strtod(s, &end);

	if (end == s || *end || v < 0 || v > 3600)
		return -EINVAL;
	*ret = v;
	return 0;
}

/* --cache-size in MiB: 1 MiB .. 16 TiB. */
static int parse_cache_size(const char *s, uint64_t *ret)
{
	char *end;
	unsigned long long v = strtoull(s, &end, 10);

	if (end == s || *end || v < 1 || v > (16ull << 20))
		return -EINVAL;
	*ret = (uint64_t)v << 20;
	return 0;
}

/* Returns 0, 1 (printed help), or -EINVAL (message printed). */
static int parse_args(int argc, char **argv, struct sfs_opts *o, int *level)
{
	static const struct option longopts[] = {
	    {"meta", required_argument, NULL, 'm'},
	    {"mount", required_argument, NULL, 'M'},
	    {"client-id", required_argument, NULL, 'c'},
	    {"cache-dir", required_argument, NULL, 'C'},
	    {"foreground", no_argument, NULL, 'f'},
	    {"log-level", required_argument, NULL, 'l'},
	    {"attr-timeout", required_argument, NULL, OPT_ATTR},
	    {"entry-timeout", required_argument, NULL, OPT_ENTRY},
	    {"negative-timeout", required_argument, NULL, OPT_NEG},
	    {"no-writeback-cache", no_argument, NULL, OPT_NOWB},
	    {"retry-ms", required_argument, NULL, OPT_RETRY},
	    {"cache-size", required_argument, NULL, OPT_CACHE_SIZE},
	    {"holder", required_argument, NULL, OPT_HOLDER},
	    {"key", required_argument, NULL, OPT_KEY},
	    {"tls", no_argument, NULL, OPT_TLS},
	    {"usrbio", required_argument, NULL, OPT_USRBIO},
	    {"help", no_argument, NULL, 'h'},
	    {0},
	};
	int c, bad = 0;

	while ((c = getopt_long(argc, argv, "h", longopts, NULL)) != -1) {
		switch (c) {
		case 'm':
			o->meta_addr = optarg;
			break;
		case 'M':
			o->mountpoint = optarg;
			break;
		case 'c':
			o->client_id = optarg;
			break;
		case 'C':
			o->cache_dir = optarg;
			break;
		case 'f':
			o->foreground = true;
			break;
		case 'l':
			*level = log_level_parse(optarg);
			bad |= *level < 0;
			break;
		case OPT_ATTR:
			bad |= parse_seconds(optarg, &o->attr_timeout) < 0;
			break;
		case OPT_ENTRY:
			bad |= parse_seconds(optarg, &o->entry_timeout) < 0;
			break;
		case OPT_NEG:
			bad |= parse_seconds(optarg, &o->negative_timeout) < 0;
			break;
		case OPT_NOWB:
			o->writeback = false;
			break;
		case OPT_RETRY:
			o->retry_ms = atoi(optarg);
			bad |= o->retry_ms < 0 || o->retry_ms > 600000;
			break;
		case OPT_CACHE_SIZE:
			bad |= parse_cache_size(optarg, &o->cache_bytes) < 0;
			break;
		case OPT_KEY:
			o->key = optarg;
			break;
		case OPT_TLS:
			rpc_tls_set_default(true);
			break;
		case OPT_HOLDER:
			o->holder = optarg;
			bad |= optarg[0] != '/' || strlen(optarg) >= 108; /* sun_path */
			break;
		case OPT_USRBIO:
			o->usrbio = optarg;
			bad |= optarg[0] != '/' || strlen(optarg) >= 108;
			break;
		case 'h':
			usage(stdout);
			return 1;
		default:
			bad = 1;
		}
	}
	if (bad || optind != argc || !o->meta_addr || !o->mountpoint) {
		usage(stderr);
		return -EINVAL;
	}
	return 0;
}

/* Detaches a dead mount left at path (stat fails with ENOTCONN). */
static void clear_stale_mount(const char *path)
{
	struct stat st;

	if (stat(path, &st) < 0 && errno == ENOTCONN) {
		log_warn("Detaching the stale mount at %s", path);
		if (umount2(path, MNT_DETACH) < 0)
			log_warn_errno(-errno, "Failed to detach %s", path);
	}
}

/* The absolute path of the mount point without looking at the mount point
 * itself: while a held connection waits for its successor, a stat of the
 * mount's root would wait too. realpath of the parent plus the last name. */
static int resolve_mount(const char *path, char *out)
{
	char tmp[PATH_MAX], parent[PATH_MAX];
	size_t n = strlen(path);

	if (n == 0 || n >= sizeof(tmp))
		return -EINVAL;
	memcpy(tmp, path, n + 1);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = '\0';
	char *slash = strrchr(tmp, '/');
	const char *base = slash ? slash + 1 : tmp;
	if (!strcmp(base, ".") || !strcmp(base, "..") || !strcmp(tmp, "/"))
		return realpath(path, out) ? 0 : -errno;
	if (slash == tmp)
		snprintf(parent, sizeof(parent), "/");
	else if (slash) {
		*slash = '\0';
		snprintf(parent, sizeof(parent), "%s", tmp);
	} else
		snprintf(parent, sizeof(parent), ".");
	char rp[PATH_MAX];
	if (!realpath(parent, rp))
		return -errno;
	if (snprintf(out, PATH_MAX, "%s/%s", strcmp(rp, "/") ? rp : "", base) >= PATH_MAX)
		return -ENAMETOOLONG;
	return 0;
}

/* Default client id: "<hostname>:<absolute mount path>", stable across
 * restarts of the same mount. Ids longer than meta's limit would be cut and
 * could collide (and a new mount clears the sessions of its id), so a long
 * one becomes "<host>:<hash of the path>:<end of the path>". */
static uint64_t fnv1a(const char *s)
{
	uint64_t h = 0xcbf29ce484222325ull;

	for (; *s; s++)
		h = (h ^ (uint8_t)*s) * 0x100000001b3ull;
	return h;
}

static char *default_client_id(const char *mnt)
{
	char host[256] = "localhost", *out = NULL;
	size_t len = strlen(mnt);

	gethostname(host, sizeof(host) - 1);
	if (asprintf(&out, "%s:%s", host, mnt) < 0)
		return NULL;
	if (strlen(out) <= SFS_CLIENT_ID_MAX)
		return out;
	free(out);
	host[20] = '\0';
	if (asprintf(&out, "%s:%016llx:%s", host, (unsigned long long)fnv1a(mnt),
		     mnt + (len > 24 ? len - 24 : 0)) < 0)
		return NULL;
	return out;
}

/* Raises the per-mount readahead and dirty-page share (FUSE mounts start
 * with 128 KiB readahead and 1 % of the dirty limit). Best effort: runs on
 * its own thread because stat() of the mount needs the loop running. */
static void write_sysfs(unsigned maj, unsigned min, const char *knob, const char *val)
{
	char path[128];
	_cleanup_close_ int fd = -1;

	snprintf(path, sizeof(path), "/sys/class/bdi/%u:%u/%s", maj, min, knob);
	fd = open(path, O_WRONLY | O_CLOEXEC);
	if (fd < 0 || write(fd, val, strlen(val)) < 0)
		log_msg(LOG_LVL_DEBUG, -errno, "Could not set %s to %s", path, val);
}

static void *tune_bdi(void *arg)
{
	const char *mnt = arg;
	struct stat st;

	if (stat(mnt, &st) < 0)
		return NULL;
	write_sysfs(major(st.st_dev), minor(st.st_dev), "read_ahead_kb", "4096");
	write_sysfs(major(st.st_dev), minor(st.st_dev), "max_ratio", "40");
	return NULL;
}

static int check_meta(const struct sfs_opts *o)
{
	struct meta_client *mc = meta_client_new(o->meta_addr, o->client_id, NULL);
	int r;

	if (!mc)
		return -ENOMEM;
	r = meta_ping(mc);
	meta_client_free(mc);
	return r;
}

/* Forks; the parent waits for the child's verdict on the mount and exits
 * with it. Returns the write end of the pipe in the child. */
static int daemonize(void)
{
	int p[2];
	pid_t pid;
	char v = 1;

	if (pipe2(p, O_CLOEXEC) < 0)
		return -errno;
	pid = fork();
	if (pid < 0)
		return -errno;
	if (pid > 0) {
		close(p[1]);
		if (read(p[0], &v, 1) != 1)
			v = 1;
		_exit(v);
	}
	close(p[0]);
	setsid();
	if (chdir("/") < 0)
		return -errno;
	int nul = open("/dev/null", O_RDWR | O_CLOEXEC);
	if (nul >= 0) {
		dup2(nul, 0);
		dup2(nul, 1); /* stderr stays: it is the log */
		if (nul > 2)
			close(nul);
	}
	return p[1];
}

static void report_ready(int *fd, char status)
{
	if (*fd >= 0) {
		if (write(*fd, &status, 1) < 0) {
			/* the parent is gone: nothing to tell */
		}
		close(*fd);
		*fd = -1;
	}
}

static int open_clients(struct sfs *fs)
{
	struct rpc_client_opts ro = {
	    .timeout_ms = 10000, .connect_timeout_ms = 2000, .max_conns = 64};
	struct strata_attr root;
	int r;

	fs->mc = meta_client_new(fs->o.meta_addr, fs->o.client_id, &ro);
	if (!fs->mc)
		return -ENOMEM;
	fs->cc = chunk_client_new(fs->mc, &ro);
	if (!fs->cc)
		return -ENOMEM;
	/* Tests only (tests/replication/fault.sh retry_id): a short same-id
	 * window, so that writes are retried by ops_file.c's loop instead. */
	const char *w = getenv("STRATA_TEST_CHUNK_RETRY_MS");
	if (w && *w)
		chunk_client_set_retry_ms(fs->cc, atoi(w));
	r = SFS_CALL(fs, SFS_IDEM, meta_getattr(fs->mc, STRATA_ROOT_INO, &root));
	if (r < 0)
		return r;
	/* Sessions left by a predecessor with our client id (it died without
	 * closing) would keep unlinked files alive for ever. Not after a
	 * takeover: they are the file handles the kernel still holds. */
	r = fs->taken_over ? 0 : SFS_CALL(fs, SFS_IDEM, meta_clear_sessions(fs->mc));
	if (r < 0)
		return r;
	if (r > 0)
		log_info("Closed %d sessions left by a previous mount as %s", r, fs->o.client_id);
	sfs_inode_note(fs, &root, true, 0); /* the root is never forgotten */
	if (meta_keeps_opids(fs->mc) == 0)
		log_warn("strata-meta at %s is older than wire 2.2 and keeps no operation ids: a "
			 "create, mkdir, unlink, rename ... resent after a crash of strata-fuse or "
			 "retried after a lost answer may fail with EEXIST or ENOENT; upgrade it",
			 fs->o.meta_addr);
	return 0;
}

static struct fuse_session *new_session(struct sfs *fs)
{
	char *argv[] = {"strata-fuse", "-o",
			"allow_other,default_permissions,fsname=strata,subtype=strata", NULL};
	struct fuse_args args = FUSE_ARGS_INIT(3, argv);
	struct fuse_session *se = fuse_session_new(&args, &sfs_ops, sizeof(sfs_ops), fs);

	fuse_opt_free_args(&args); /* libfuse may have grown the list */
	return se;
}

/* A fresh mount, or the connection taken over from the holder (held_fd). */
static int start_session(struct sfs *fs, int held_fd)
{
	int r;

	fs->se = new_session(fs);
	if (!fs->se)
		return -ENOMEM;
	if (held_fd >= 0)
		r = sfs_takeover_start(fs, held_fd);
	else
		r = fuse_session_mount(fs->se, fs->o.mountpoint) != 0 ? -EIO : 0;
	if (r == 0 && (r = sfs_opid_attach(fs)) < 0)
		log_error_errno(r, "Failed to read the FUSE device through opid.c");
	if (r == 0 && held_fd < 0)
		r = sfs_takeover_first_request(fs);
	if (r < 0) {
		if (held_fd < 0)
			fuse_session_unmount(fs->se);
		fuse_session_destroy(fs->se);
		fs->se = NULL;
	}
	return r;
}

static int run_loop(struct sfs *fs)
{
	struct fuse_loop_config *cfg = fuse_loop_cfg_create();
	pthread_t tuner;
	int r;

	if (!cfg)
		return -ENOMEM;
	/* With a holder, every request is read from the one fd it shares: a
	 * request read through a clone would be aborted with the clone. */
	fuse_loop_cfg_set_clone_fd(cfg, fs->tk ? 0 : 1);
	fuse_loop_cfg_set_idle_threads(cfg, 8);
	fuse_loop_cfg_set_max_threads(cfg, 64);
	if (sfs_thread_start(&tuner, tune_bdi, (void *)fs->o.mountpoint) == 0)
		pthread_detach(tuner);
	r = fuse_session_loop_mt(fs->se, cfg);
	fuse_loop_cfg_destroy(cfg);
	return r;
}

/* The node chunk cache of image blobs, in <cache-dir>/blobcache. */
static int open_blobcache(struct sfs *fs)
{
	_cleanup_free_ char *dir = NULL;
	int r;

	if (!fs->o.cache_dir)
		return 0;
	if (asprintf(&dir, "%s/blobcache", fs->o.cache_dir) < 0)
		return -ENOMEM;
	r = sfs_blobcache_open(dir, fs->o.cache_bytes, &fs->bc);
	if (r < 0)
		return log_error_errno(r, "Failed to open the chunk cache in %s", dir);
	log_info("Chunk cache in %s, %llu MiB", dir, (unsigned long long)(fs->o.cache_bytes >> 20));
	return 0;
}

/* The end of a planned restart (restart.c): no unmount, no session closed. */
static int hand_over(struct sfs *fs)
{
	sfs_restart_handover(fs);
	fuse_remove_signal_handlers(fs->se);
	fuse_session_destroy(fs->se); /* closes our fd; the holder keeps its own */
	return 0;
}

static int serve(struct sfs *fs, int *ready_fd, int held_fd)
{
	int r = open_blobcache(fs);

	if (r < 0)
		return r;
	r = open_clients(fs);

	if (r < 0) {
		log_error_errno(r, "Failed to reach strata-meta at %s", fs->o.meta_addr);
		return r;
	}
	r = start_session(fs, held_fd);
	if (r < 0)
		return log_error_errno(r, "Failed to mount at %s", fs->o.mountpoint);
	if (fuse_set_signal_handlers(fs->se) != 0) {
		fuse_session_unmount(fs->se);
		fuse_session_destroy(fs->se);
		return log_error_errno(-EIO, "Failed to install signal handlers");
	}
	log_info("%s strata (meta %s) at %s as client %s, connection %016llx",
		 fs->taken_over ? "Serving" : "Mounted", fs->o.meta_addr, fs->o.mountpoint,
		 fs->o.client_id, (unsigned long long)fs->conn_id);
	if (fs->tk && (r = sfs_restart_arm(fs)) < 0)
		log_warn_errno(r, "Failed to install the SIGUSR2 handler (no planned restart)");
	sfs_takeover_hold(fs);
	sfs_usrbio_start(fs); /* the mount works without it: logged */
	if (sfs_closer_start(fs) < 0)
		log_warn("No batched closes: every release closes its session alone");
	report_ready(ready_fd, 0);
	r = run_loop(fs);
	sfs_closer_stop(fs); /* the queued releases answered before anything else */
	sfs_usrbio_stop(fs); /* its sessions are not the kernel's: closed in any case */
	sfs_restart_disarm();
	if (sfs_restart_requested())
		return hand_over(fs);
	log_info("Unmounting %s", fs->o.mountpoint);
	sfs_close_all(fs);
	fuse_remove_signal_handlers(fs->se);
	fuse_session_unmount(fs->se);
	/* A taken-over session has no mount of its own to remove (libfuse
	 * knows it as /dev/fd/N); an unmount done already fails harmlessly. */
	if (fs->taken_over && umount2(fs->o.mountpoint, 0) < 0 && errno == EBUSY)
		umount2(fs->o.mountpoint, MNT_DETACH);
	sfs_takeover_done(fs, true);
	fuse_session_destroy(fs->se);
	return r < 0 ? r : 0;
}

int main(int argc, char **argv)
{
	struct sfs fs = {.attr_clock = 1,
			 .o = {.writeback = true,
			       .attr_timeout = SFS_ATTR_TIMEOUT,
			       .entry_timeout = SFS_ENTRY_TIMEOUT,
			       .negative_timeout = SFS_NEGATIVE_TIMEOUT,
			       .retry_ms = 15000,
			       .cache_bytes = 8192ull << 20}};
	_cleanup_free_ char *client_id = NULL;
	char mnt[PATH_MAX];
	int level = LOG_LVL_INFO, r, ready_fd = -1, held_fd = -1;

	r = parse_args(argc, argv, &fs.o, &level);
	if (r != 0)
		return r > 0 ? 0 : 2;
	log_init("strata-fuse", (enum log_level)level);
	daemon_raise_fd_limit();
	if (daemon_load_key(fs.o.key, RPC_ROLE_FUSE) < 0)
		return 1;
	/* Keep freed I/O buffers in the heap: no mmap/munmap per 1 MiB request. */
	mallopt(M_MMAP_THRESHOLD, 64 << 20);
	mallopt(M_TRIM_THRESHOLD, 256 << 20);

	if (fs.o.holder) {
		/* A held connection first: the mount point must not be looked
		 * at while it waits for us. */
		if ((r = resolve_mount(fs.o.mountpoint, mnt)) < 0) {
			log_error_errno(r, "Failed to resolve mount point %s", fs.o.mountpoint);
			return 1;
		}
		fs.o.mountpoint = mnt;
		r = sfs_takeover_take(&fs, &held_fd);
		if (r < 0)
			return 1;
		fs.taken_over = r > 0;
	}
	/* operation ids (opid.c): the connection's goes on across a takeover */
	if (!fs.conn_id)
		fs.conn_id = sfs_opid_new_conn();
	fs.life_id = sfs_opid_new_conn();
	if (!fs.taken_over) {
		clear_stale_mount(fs.o.mountpoint);
		if (!realpath(fs.o.mountpoint, mnt)) {
			log_error_errno(-errno, "Failed to resolve mount point %s",
					fs.o.mountpoint);
			return 1;
		}
		fs.o.mountpoint = mnt;
	}
	if (!fs.o.client_id) {
		client_id = default_client_id(mnt);
		if (!client_id)
			return 1;
		fs.o.client_id = client_id;
	}
	if (strlen(fs.o.client_id) > SFS_CLIENT_ID_MAX) {
		log_error("--client-id is longer than %d bytes", SFS_CLIENT_ID_MAX);
		return 2;
	}
	r = check_meta(&fs.o);
	if (r < 0) {
		log_error_errno(r, "Failed to reach strata-meta at %s", fs.o.meta_addr);
		return 1;
	}
	if (!fs.o.foreground) {
		ready_fd = daemonize();
		if (ready_fd < 0) {
			log_error_errno(ready_fd, "Failed to daemonize");
			return 1;
		}
	}
	if (sfs_itable_init(&fs.itable) < 0 || sfs_handles_init(&fs) < 0 ||
	    sfs_dircache_init(&fs) < 0)
		return 1;
	r = serve(&fs, &ready_fd, held_fd);
	report_ready(&ready_fd, 1);
	sfs_blobcache_free(fs.bc);
	chunk_client_free(fs.cc);
	meta_client_free(fs.mc);
	sfs_itable_done(&fs.itable);
	sfs_takeover_done(&fs, false); /* a failed start: the holder keeps what it holds */
	sfs_handles_done(&fs);
	sfs_dircache_done(&fs);
	return r < 0 ? 1 : 0;
}
