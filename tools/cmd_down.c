/* cmd_down.c — `strata down`: first the node agent (strata-sandboxd deletes
 * its sandboxes, then stops; a container sandbox it left behind, because it
 * was not running, hung or failed to delete it, is killed through its
 * cgroup, frozen or not, as its state in H/sandboxd says), then the image
 * mounts of the home (overlay and bind mounts of `strata image mount`, the
 * shared EROFS mounts, their leases): they hold files of the cluster's mount
 * open. Then unmount, and stop strata-fuse, strata-fuse-holder (which keeps
 * the mount's FUSE connection across a crash of strata-fuse; stopped first
 * when strata-fuse is dead), the chunkservers and
 * strata-meta (in that order: clients before servers), SIGTERM first and SIGKILL after a timeout;
 * last the network namespaces, veths and bridge `up` made for the chunkservers (what H/run/net
 * lists). Pid files are removed; address files (and the subnet in H/run/net) stay so that the next
 * `strata up` gets the same addresses back. */
#include <dirent.h>
#include <errno.h>
#include <ftw.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>
#include "tools/cli.h"
#include "fs/cgroup_kill.h"
#include "fs/cleanup.h"
#include "fs/json.h"
#include "imagesvc/mount.h"
#include "imagesvc/store.h"

#define VERB "down"
#define SANDBOX_KILL_WAIT_MS 5000 /* for the processes of one left-over sandbox */
#define STATE_MAX (1 << 20)	  /* a sandbox's state.json, as sandboxd reads it */

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata down [--home DIR] [--timeout S]\n"
		   "\n"
		   "Deletes the sandboxes of the node agent and stops it, unmounts the image\n"
		   "mounts and the cluster's mount and stops the other daemons (SIGTERM, then\n"
		   "SIGKILL after S seconds, default 10); deletes the network namespaces, veths\n"
		   "and bridge of the chunkservers. Data in the home stays.\n"
		   "\n"
		   "  --home DIR   cluster home (default $STRATA_HOME, else ./.strata)\n");
}

static int rm_entry(const char *path, const struct stat *st, int flag, struct FTW *ftw)
{
	(void)st;
	(void)ftw;
	return (flag == FTW_DP ? rmdir(path) : unlink(path)) < 0 && errno != ENOENT ? -1 : 0;
}

/* What `strata image mount` put at directories (CACHE/binds/KEY holds "HEX
 * KIND DIR"; an overlay's writable layer is CACHE/roots/KEY). */
static int unmount_binds(const char *cache)
{
	char dir[CLI_PATH], rec[CLI_PATH + 300], text[CLI_PATH + 128];
	char hex[65], kind[16], target[CLI_PATH];
	int n = 0;
	struct dirent *de;

	snprintf(dir, sizeof(dir), "%s/binds", cache);
	DIR *dp = opendir(dir);
	while (dp && (de = readdir(dp))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(rec, sizeof(rec), "%s/%s", dir, de->d_name);
		if (cli_read_file(rec, text, sizeof(text)) > 0 &&
		    sscanf(text, "%64s %15s %4095[^\n]", hex, kind, target) == 3 &&
		    umount2(target, MNT_DETACH) == 0)
			n++;
		unlink(rec);
		snprintf(rec, sizeof(rec), "%s/roots/%s", cache, de->d_name);
		nftw(rec, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
	}
	if (dp)
		closedir(dp);
	return n;
}

static bool is_hex64(const char *s)
{
	return strlen(s) == 64 && strspn(s, "0123456789abcdef") == 64;
}

/* The shared EROFS mounts (CACHE/HEX/root): every reference is given back at
 * once (users set to 1, which also drops the holders' lines, then released:
 * unmount and lease dropped; a lingering mount with 0 users goes the same way). */
static int unmount_images(const struct cli_home *h, const char *cache)
{
	char root[CLI_PATH], path[CLI_PATH + 80];
	struct img_store *s = NULL;
	int n = 0;
	struct dirent *de;

	snprintf(root, sizeof(root), "%s/" IMG_STORE_SUBDIR, h->mount);
	if (cli_mount_state(h->mount) != MNT_OK || access(root, F_OK) < 0 ||
	    img_store_open(root, &s) < 0)
		s = NULL;
	DIR *dp = opendir(cache);
	while (dp && (de = readdir(dp))) {
		if (!is_hex64(de->d_name))
			continue;
		if (img_node_root(cache, de->d_name, root, sizeof(root)) < 0)
			continue;
		if (s) {
			snprintf(path, sizeof(path), "%s/%s/users", cache, de->d_name);
			cli_write_file(path, "1\n");
			if (img_node_release(s, cache, de->d_name, NULL) == 0) {
				n++;
				continue;
			}
		}
		if (umount2(root, MNT_DETACH) == 0) /* the store is gone: just unmount */
			n++;
	}
	if (dp)
		closedir(dp);
	img_store_free(s);
	return n;
}

int cli_images_unmount_all(const struct cli_home *h)
{
	char cache[CLI_PATH], markers[CLI_PATH];
	struct dirent *de;

	cli_path(cache, h, "cache/images");
	int n = unmount_binds(cache) + unmount_images(h, cache);
	/* strata-sandboxd's record of the references it held: given back above. */
	DIR *dp = opendir(cli_path(markers, h, "sandboxd/images"));
	while (dp && (de = readdir(dp)))
		if (is_hex64(de->d_name))
			unlinkat(dirfd(dp), de->d_name, 0);
	if (dp)
		closedir(dp);
	return n;
}

/* Deletes every sandbox through sandboxd's API in a child, so that a hung
 * sandboxd cannot hang `down`: the child is killed after timeout_s. Returns
 * the number deleted (at most 254 counted) or -errno. */
static int delete_sandboxes(const char *sock, int timeout_s)
{
	pid_t child = fork();
	int status = 0;
	if (child < 0)
		return -errno;
	if (child == 0) {
		int r = cli_sandboxd_delete_all(sock);
		_exit(r < 0 ? 255 : r > 254 ? 254 : r);
	}
	long long deadline = cli_now_ms() + timeout_s * 1000LL;
	while (waitpid(child, &status, WNOHANG) == 0) {
		if (cli_now_ms() > deadline) {
			kill(child, SIGKILL);
			waitpid(child, NULL, 0);
			return -ETIMEDOUT;
		}
		cli_sleep_ms(20);
	}
	if (!WIFEXITED(status) || WEXITSTATUS(status) == 255)
		return -EIO;
	return WEXITSTATUS(status);
}

/* The container sandbox whose sandboxd state is dir/state.json, if it still
 * runs: killed through its cgroup slot (its agent's pid must still be in
 * the slot recorded at its create; state of an older sandboxd without the
 * slot: any sandbox slot). Returns 1 when it was running, 0, or -errno. */
static int kill_left_sandbox(const char *dir)
{
	char path[CLI_PATH + 16];
	snprintf(path, sizeof(path), "%s/state.json", dir);
	_cleanup_free_ char *buf = malloc(STATE_MAX);
	int n = buf ? cli_read_file(path, buf, STATE_MAX) : -ENOMEM;
	if (n <= 0)
		return n == -ENOENT ? 0 : n;
	struct json *j = json_parse(buf, (size_t)n, NULL, 0);
	const struct json *bs = json_get(j, "backend_state");
	const char *slot = json_cstr(json_get(bs, "cgroup"));
	int64_t pid = 0;
	struct cgk_target t;
	int r = json_int(json_get(bs, "agent_pid"), 1, INT32_MAX, &pid) ? 0 : -EINVAL;
	if (r == 0)
		r = slot && slot[0] ? cgk_target_of_pid((pid_t)pid, slot, false, &t)
				    : cgk_target_of_pid((pid_t)pid, "sbx-", true, &t);
	json_free(j);
	if (r == -ESRCH || r == -ESTALE || r == -EINVAL)
		return 0; /* gone, or not a container sandbox */
	if (r == 0 && (r = cgk_kill(&t, SANDBOX_KILL_WAIT_MS)) >= 0 && t.freezer_dir[0])
		rmdir(t.freezer_dir);
	return r < 0 ? r : 1;
}

/* What a stopped (or dead) sandboxd left running: every sandbox with state
 * in H/sandboxd/sandboxes (persistent container sandboxes outlive their
 * sandboxd) is killed, and its state removed. Returns how many ran. */
static int kill_left_sandboxes(const struct cli_home *h, int node)
{
	char dir[CLI_PATH], sub[CLI_PATH + 300];
	int n = 0;
	struct dirent *de;
	DIR *dp = opendir(node > 1 ? cli_path(dir, h, "sandboxd-n%d/sandboxes", node)
				   : cli_path(dir, h, "sandboxd/sandboxes"));
	while (dp && (de = readdir(dp))) {
		if (de->d_name[0] == '.')
			continue;
		snprintf(sub, sizeof(sub), "%s/%s", dir, de->d_name);
		int r = kill_left_sandbox(sub);
		if (r < 0)
			fprintf(stderr, "strata down: warning: sandbox %s: %s\n", de->d_name,
				strerror(-r));
		else
			nftw(sub, rm_entry, 16, FTW_DEPTH | FTW_PHYS | FTW_MOUNT);
		n += r > 0;
	}
	if (dp)
		closedir(dp);
	return n;
}

/* A node agent: its sandboxes deleted through its API, then SIGTERM. */
static int down_sandboxd(const struct cli_home *h, int node, int timeout_s)
{
	struct cli_daemon d;
	char sock[CLI_PATH];
	int r;

	cli_daemon_get(h, h->nodes + 1 + node, &d);
	pid_t pid = cli_daemon_pid(h, &d);
	if (cli_pid_alive(pid, d.binary)) {
		r = delete_sandboxes(cli_sandboxd_socket_of(h, node, sock), timeout_s);
		if (r > 0)
			printf("strata: deleted %d sandbox(es)\n", r);
		else if (r < 0)
			fprintf(stderr, "strata down: warning: deleting the sandboxes: %s\n",
				strerror(-r));
		if ((r = cli_stop_pid(pid, d.binary, timeout_s * 1000)) < 0) {
			cli_err(VERB, "cannot stop sandboxd (pid %d): %s", (int)pid, strerror(-r));
			return r;
		}
	}
	if ((r = kill_left_sandboxes(h, node)) > 0)
		printf("strata: killed %d sandbox(es) that sandboxd left running\n", r);
	return 0;
}

/* The chunkservers' hosts: namespaces, veths and bridge, once they stopped. */
static int down_net(const struct cli_home *h)
{
	struct cli_net net;
	int r;

	cli_net_load(h, &net);
	if (!net.created)
		return 0;
	if ((r = cli_net_down(h, &net)) < 0) {
		cli_err(VERB, "cannot delete the network of the chunkservers: %s", net.err);
		return r;
	}
	if (r > 0)
		printf("strata: deleted bridge %s and the chunkservers' namespaces\n", net.bridge);
	return 0;
}

int cmd_down(int argc, char **argv)
{
	static const struct option own[] = {
	    {"timeout", required_argument, NULL, 'T'},
	    {},
	};
	struct cli_home h;
	struct cli_opts o;
	int timeout_s = 10, r, stopped = 0, failed = 0;
	struct stat st;
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME,
	    .own = own,
	    .on_opt = cli_timeout_option,
	    .arg = &(struct cli_timeout_arg){VERB, &timeout_s},
	    .usage = usage,
	    .no_operands = true,
	};

	if ((r = cli_parse_opts(&v, argc, argv, &o)) != CLI_GO)
		return r;
	if (cli_home_open(VERB, o.home, &h) < 0)
		return 1;
	if (stat(h.home, &st) < 0) {
		printf("strata: nothing to stop, %s does not exist\n", h.home);
		return 0;
	}

	/* Which daemons run now (strata-fuse exits by itself once unmounted). */
	bool was_alive[CLI_MAX_DAEMONS];
	for (int i = 0; i < cli_daemon_count(&h); i++) {
		struct cli_daemon d;
		cli_daemon_get(&h, i, &d);
		was_alive[i] = cli_pid_alive(cli_daemon_pid(&h, &d), d.binary);
	}

	for (int i = 1; i <= cli_sbnode_count(&h); i++)
		if (down_sandboxd(&h, i, timeout_s) < 0)
			failed++;
	/* A connection held for a dead strata-fuse would make every look at
	 * the mount wait: let it go (the holder of a live one exits by itself
	 * once the mount is gone, and is stopped below in any case). */
	struct cli_daemon fuse_d;
	cli_daemon_get(&h, h.nodes + 1, &fuse_d);
	if (!cli_pid_alive(cli_daemon_pid(&h, &fuse_d), fuse_d.binary) &&
	    cli_fuse_holder_stop(&h, timeout_s * 1000) > 0)
		stopped++;
	if ((r = cli_images_unmount_all(&h)) > 0)
		printf("strata: unmounted %d image mount(s)\n", r);

	/* Unmount while strata-fuse still runs, so it can exit on its own. */
	enum cli_mount_state ms = cli_mount_state(h.mount);
	if (ms == MNT_OK || ms == MNT_STALE) {
		if ((r = cli_umount(h.mount)) < 0) {
			cli_err(VERB, "cannot unmount %s: %s", h.mount, strerror(-r));
			failed++;
		}
	}
	for (int i = cli_daemon_count(&h) - 1; i >= 0; i--) {
		struct cli_daemon d;
		char path[CLI_PATH];
		pid_t pid;

		cli_daemon_get(&h, i, &d);
		pid = cli_daemon_pid(&h, &d);
		if (pid > 0 && cli_pid_alive(pid, d.binary)) {
			if ((r = cli_stop_pid(pid, d.binary, timeout_s * 1000)) < 0) {
				cli_err(VERB, "cannot stop %s (pid %d): %s", d.name, (int)pid,
					strerror(-r));
				failed++;
				continue;
			}
		}
		if (was_alive[i])
			stopped++;
		unlink(cli_path(path, &h, "run/%s.pid", d.name));
	}
	if ((r = cli_fuse_holder_stop(&h, timeout_s * 1000)) > 0)
		stopped++;
	else if (r < 0)
		cli_err(VERB, "cannot stop strata-fuse-holder: %s", strerror(-r));
	if (down_net(&h) < 0)
		failed++;
	/* The fuse daemon may have left the mount behind if it was killed. */
	if (cli_mount_state(h.mount) != MNT_NONE && cli_mount_state(h.mount) != MNT_OTHER)
		cli_umount(h.mount);
	if (failed)
		return 1;
	if (stopped)
		printf("strata: stopped %d daemon(s) of the cluster at %s\n", stopped, h.home);
	else
		printf("strata: nothing was running at %s\n", h.home);
	return 0;
}
