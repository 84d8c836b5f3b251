/* backend_vm.c — the "qemu" backend (a VM per sandbox, libstrata_vm,
 * sandbox/vm/README.md) and the "firecracker" one, which answers
 * unavailable with the reason.
 *
 * A qemu sandbox: the image as an EROFS metadata file (and its blobs) on
 * read-only virtio disks, a writable disk of disk_mb (ext4 in a sparse
 * file under the state dir), vcpus = the cpu limit rounded up, RAM = the
 * memory limit, the VMM contained as a worker of the isolation library in a
 * cgroup of its own; strata-agent is the guest's init and serves the same
 * protocol as in containers over a virtio-serial port. Everything the agent
 * serves goes through the container backend's agent half (backend.h,
 * sbd_agent_box_*): the exec plumbing, files and deadlines are the
 * container backend's own code, on a channel made by sbx_attach_agent.
 *
 * Images: a registered directory is converted once into an EROFS image
 * (mkfs.erofs, kept under the state dir per directory and rebuilt when the
 * directory changes, chunked on a blob device). An image of the store is
 * attached as the node mounts it (sbd_image_erofs): the node cache's
 * CACHE/HEX/meta.img and its blobs on the strata mount, read lazily and
 * verified through strata-fuse and the node chunk cache.
 *
 * A VMM that exits (kill -9, a guest panic) is noticed at the next tick
 * (its pidfd): the sandbox is failed with the reason. VMs are not
 * persistent: the VMM dies with sandboxd (the worker's PDEATHSIG), and a
 * restarted sandboxd finds them gone. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <spawn.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "fs/log.h"
#include "sandbox/sandboxd/sandboxd.h"

#ifdef STRATA_HAVE_VM
#include "sandbox/container/strata_sandbox.h"
#include "sandbox/container/worker.h"
#include "sandbox/vm/vmm.h"
#endif

extern char **environ;

struct vm_box;

struct vm_backend {
	struct sbd_backend b;
	char kind[16];
	struct sandboxd *d;
	struct sbd_backend *container;
	struct strata_err why; /* unavailable: the reason */
	char dir[PATH_MAX];    /* <state>/vm */
	char kernel[PATH_MAX], initrd[PATH_MAX];
	bool kvm;
	bool snapshots; /* warm starts ($STRATA_VM_SNAPSHOTS=0: off) */
	struct sbx_workers *ws;
	pthread_mutex_t lock;	 /* boxes (creates run on threads, the tick on the loop) */
	pthread_mutex_t convert; /* image conversions, one at a time (off the loop's lock) */
	struct vm_box *boxes;
};

#ifndef STRATA_HAVE_VM

static void vm_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	struct vm_backend *vb = b->priv;
	*k = (struct sbd_caps){0};
	k->why = vb->why;
}

static int vm_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	struct vm_backend *vb = b->priv;
	return strata_err_set(e, -ENODEV, "%s", vb->why.msg);
}

static void vm_init(struct vm_backend *vb)
{
	strata_err_set(&vb->why, -ENODEV, "the %s backend was not built (no libstrata_vm)",
		       vb->kind);
}

#else /* STRATA_HAVE_VM */

struct vm_box {
	struct vm_backend *vb;
	struct sbd_sandbox *sb;
	struct vmm *v;
	int disk_fd;
	char dir[PATH_MAX]; /* <state>/vm/<id>: disk.img, console.log */
	bool failed;
	bool warm; /* restored from its shape's snapshot */
	struct vm_box *next;
};

static void vm_caps(struct sbd_backend *b, struct sbd_caps *k)
{
	struct vm_backend *vb = b->priv;
	bool ok = vb->why.code == 0;
	*k = (struct sbd_caps){.available = ok,
			       .exec = ok,
			       .exec_stream = ok,
			       .exec_stdin = ok,
			       .exec_stdin_stream = ok,
			       .python = ok,
			       .files = ok,
			       .tar = ok,
			       .pause = ok,
			       .limits_memory = ok,
			       .limits_cpu = ok,
			       .limits_disk = ok,
			       .metrics = ok,
			       .disk_reason = "an ext4 disk of disk_mb in a sparse file",
			       .userns_reason = "a VM: the guest kernel is the boundary"};
	k->why = vb->why;
}

/* Runs argv, its output to /dev/null; 0 when it exits 0. */
static int run(char *const argv[])
{
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, environ);
	posix_spawn_file_actions_destroy(&fa);
	int st = 0;
	if (r != 0)
		return -r;
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* A registered directory's EROFS image, made once (mkfs.erofs) into
 * <state>/vm/images/<hash>.erofs, its file data in 1 MiB chunks on a blob
 * device beside it (<hash>.blob, as the store's images have theirs: the
 * guest reads only the chunks it touches), made again when the
 * directory's mtime is newer. Called with vb->convert held. */
static int dir_image(struct vm_backend *vb, const char *rootfs, char *out, size_t cap, char *blob,
		     size_t bcap, struct strata_err *e)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a of the path */
	for (const char *p = rootfs; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	char dir[PATH_MAX + 16], tmp[PATH_MAX + 64];
	snprintf(dir, sizeof(dir), "%s/images", vb->dir);
	mkdir(dir, 0700);
	snprintf(out, cap, "%s/%016" PRIx64 ".erofs", dir, h);
	snprintf(blob, bcap, "%s/%016" PRIx64 ".blob", dir, h);
	struct stat si, sd;
	if (stat(rootfs, &sd) < 0)
		return strata_err_set(e, -errno, "image %s: %s", rootfs, strerror(errno));
	if (stat(out, &si) == 0 && si.st_mtime >= sd.st_mtime && access(blob, R_OK) == 0)
		return 0;
	char blobopt[PATH_MAX + 16];
	snprintf(tmp, sizeof(tmp), "%s.tmp", out);
	snprintf(blobopt, sizeof(blobopt), "--blobdev=%s", blob);
	unlink(out);
	char *argv[] = {"mkfs.erofs", "--quiet", "--preserve-mtime", "--chunksize=1048576",
			blobopt,      tmp,	 (char *)rootfs,     NULL};
	int r = run(argv);
	if (r == 0 && rename(tmp, out) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return strata_err_set(e, -ENOEXEC, "cannot convert image %s to EROFS for a VM%s",
				      rootfs,
				      r == -ENOENT ? " (no mkfs.erofs: apt-get install erofs-utils)"
						   : " (mkfs.erofs failed)");
	}
	return 0;
}

/* The image's EROFS files: the store's as mounted, or a registered
 * directory converted. */
static int image_files(struct vm_backend *vb, struct sbd_sandbox *sb, char *meta, size_t cap,
		       char ***ret_blobs, size_t *ret_n, struct strata_err *e)
{
	*ret_blobs = NULL;
	*ret_n = 0;
	if (sbd_image_is_store(sb->img))
		return sbd_image_erofs(vb->d, sb->img, meta, cap, ret_blobs, ret_n, e);
	char blob[PATH_MAX];
	pthread_mutex_lock(&vb->convert);
	int r = dir_image(vb, sb->rootfs, meta, cap, blob, sizeof(blob), e);
	pthread_mutex_unlock(&vb->convert);
	if (r < 0)
		return r;
	if (!(*ret_blobs = calloc(1, sizeof(char *))) || !((*ret_blobs)[0] = strdup(blob))) {
		free(*ret_blobs);
		*ret_blobs = NULL;
		return -ENOMEM;
	}
	*ret_n = 1;
	return 0;
}

static void free_strv(char **v, size_t n)
{
	for (size_t i = 0; v && i < n; i++)
		free(v[i]);
	free(v);
}

static void box_files_remove(struct vm_box *box)
{
	char p[PATH_MAX + 32];
	snprintf(p, sizeof(p), "%s/disk.img", box->dir);
	unlink(p);
	snprintf(p, sizeof(p), "%s/console.log", box->dir);
	unlink(p);
	rmdir(box->dir);
}

static void box_free(struct vm_box *box)
{
	vmm_free(box->v);
	if (box->disk_fd >= 0)
		close(box->disk_fd);
	box_files_remove(box);
	free(box);
}

/* Warm starts: the first VM of a shape (image, kernel, vCPUs, RAM, disk
 * size) is saved right after its agent said HELLO (its RAM and devices,
 * vmm_save, and a copy of its disk); later creates of that shape restore
 * the pair instead of booting. <images>/<key>.snap and .disk; a .snap.tmp
 * claims the saving (one at a time, stale ones removed at start). */
static uint64_t fnv(uint64_t h, const void *p, size_t n)
{
	for (size_t i = 0; i < n; i++)
		h = (h ^ ((const uint8_t *)p)[i]) * 1099511628211ull;
	return h;
}

static void warm_paths(struct vm_backend *vb, const struct vmm_config *c, uint64_t disk_mb,
		       char *snap, char *disk, size_t cap)
{
	uint64_t h = 1469598103934665603ull;
	const char *files[] = {c->meta, c->kernel, c->initrd};
	for (size_t i = 0; i < 3; i++) {
		struct stat st = {0};
		stat(files[i], &st);
		h = fnv(h, files[i], strlen(files[i]));
		h = fnv(h, &st.st_mtim, sizeof(st.st_mtim));
		h = fnv(h, &st.st_size, sizeof(st.st_size));
	}
	uint64_t shape[3] = {c->vcpus, c->memory_mb, disk_mb};
	h = fnv(h, shape, sizeof(shape));
	snprintf(snap, cap, "%.4000s/images/%016" PRIx64 ".snap", vb->dir, h);
	snprintf(disk, cap, "%.4000s/images/%016" PRIx64 ".disk", vb->dir, h);
}

static int copy_sparse(const char *from, const char *to)
{
	char *argv[] = {"cp", "--sparse=always", (char *)from, (char *)to, NULL};
	return run(argv);
}

/* Restores the pair into box (its disk a copy of the saved one). */
static int warm_restore(struct vm_box *box, struct vmm_config *c, const char *snap,
			const char *wdisk, const char *disk, struct strata_err *e)
{
	int fd = open(snap, O_RDONLY | O_CLOEXEC);
	if (fd < 0 || copy_sparse(wdisk, disk) < 0 ||
	    (box->disk_fd = open(disk, O_RDWR | O_CLOEXEC)) < 0) {
		if (fd >= 0)
			close(fd);
		return -ENOENT;
	}
	c->disk_fd = box->disk_fd;
	c->incoming_fd = fd;
	int r = vmm_start(c, &box->v, e);
	close(fd);
	c->incoming_fd = -1;
	return r;
}

/* Saves the freshly booted box as its shape's pair, unless one is being
 * saved; the box runs on. Best effort: a failure only costs warm starts. */
static void warm_save(struct vm_box *box, const char *snap, const char *wdisk, const char *disk)
{
	char tsnap[PATH_MAX + 8], tdisk[PATH_MAX + 8];
	struct strata_err e = {0};
	snprintf(tsnap, sizeof(tsnap), "%s.tmp", snap);
	snprintf(tdisk, sizeof(tdisk), "%s.tmp", wdisk);
	int fd = open(tsnap, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
	if (fd < 0)
		return; /* another create saves it */
	int r = vmm_save(box->v, fd, &e);
	if (r == 0)
		r = copy_sparse(disk, tdisk);
	if (r == 0 && (rename(tdisk, wdisk) < 0 || rename(tsnap, snap) < 0))
		r = -errno;
	close(fd);
	if (r < 0) {
		log_warn("sandbox %s: no warm-start snapshot: %s", box->sb->id,
			 e.msg[0] ? e.msg : strerror(-r));
		unlink(tsnap);
		unlink(tdisk);
	}
	if (vmm_resume(box->v, &e) < 0)
		log_warn("sandbox %s: resume after the snapshot: %s", box->sb->id, e.msg);
}

static int box_boot(struct vm_backend *vb, struct vm_box *box, struct sbd_sandbox *sb,
		    struct strata_err *e)
{
	char meta[PATH_MAX], disk[PATH_MAX + 32], con[PATH_MAX + 32];
	char snap[PATH_MAX], wdisk[PATH_MAX];
	char **blobs = NULL;
	size_t nblobs = 0;
	int r = image_files(vb, sb, meta, sizeof(meta), &blobs, &nblobs, e);
	if (r < 0)
		return r;
	snprintf(disk, sizeof(disk), "%s/disk.img", box->dir);
	snprintf(con, sizeof(con), "%s/console.log", box->dir);
	int confd = open(con, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	struct vmm_config c = {.kernel = vb->kernel,
			       .initrd = vb->initrd,
			       .meta = meta,
			       .blobs = (const char *const *)blobs,
			       .nblobs = nblobs,
			       .disk_fd = -1,
			       .vcpus = sb->cpu > 0 ? (unsigned)ceil(sb->cpu) : 1,
			       .memory_mb = (uint64_t)sb->memory_mb,
			       .hostname = "sandbox",
			       .console_fd = confd,
			       .kvm = vb->kvm,
			       .ws = vb->ws,
			       .incoming_fd = -1};
	warm_paths(vb, &c, (uint64_t)sb->disk_mb, snap, wdisk, sizeof(snap));
	bool warm = vb->snapshots && access(snap, R_OK) == 0;
	if (warm) {
		struct strata_err we = {0};
		r = warm_restore(box, &c, snap, wdisk, disk, &we);
		if (r < 0) { /* a pair that does not restore goes; boot instead */
			log_warn("sandbox %s: warm start failed (%s): booting", sb->id,
				 we.msg[0] ? we.msg : strerror(-r));
			unlink(snap);
			if (box->disk_fd >= 0)
				close(box->disk_fd);
			box->disk_fd = -1;
			warm = false;
		}
	}
	if (!warm) {
		r = vmm_disk_make(disk, (uint64_t)sb->disk_mb << 20, &box->disk_fd, e);
		c.disk_fd = box->disk_fd;
		if (r == 0)
			r = vmm_start(&c, &box->v, e);
		if (r == 0 && vb->snapshots)
			warm_save(box, snap, wdisk, disk);
	}
	box->warm = warm;
	if (confd >= 0)
		close(confd);
	free_strv(blobs, nblobs);
	return r;
}

static int vm_create(struct sbd_backend *b, struct sbd_sandbox *sb, struct strata_err *e)
{
	struct vm_backend *vb = b->priv;
	if (vb->why.code)
		return strata_err_set(e, -ENODEV, "%s", vb->why.msg);
	if (sb->net_host)
		return strata_err_set(e, -EOPNOTSUPP,
				      "network 'host' is not supported by the %s backend (its VMs "
				      "have no network)",
				      vb->kind);
	if (sb->userns_req == 1)
		return strata_err_set(e, -EOPNOTSUPP,
				      "user namespaces are not supported by the %s backend (the "
				      "guest kernel is the boundary)",
				      vb->kind);
	if (sb->memory_mb < 64)
		return strata_err_set(e, -EINVAL, "a VM needs memory_mb >= 64");
	struct vm_box *box = calloc(1, sizeof(*box));
	if (!box)
		return -ENOMEM;
	box->vb = vb;
	box->sb = sb;
	box->disk_fd = -1;
	snprintf(box->dir, sizeof(box->dir), "%s/%s", vb->dir, sb->id);
	if (mkdir(box->dir, 0700) < 0 && errno != EEXIST) {
		free(box);
		return strata_err_set(e, -errno, "cannot make %s: %s", box->dir, strerror(errno));
	}
	int r = box_boot(vb, box, sb, e);
	struct sbx *s = NULL;
	if (r == 0 && (r = sbx_attach_agent(vmm_take_agent_fd(box->v), 0, &s)) < 0)
		strata_err_set(e, r, "cannot attach to the guest's agent: %s", strerror(-r));
	if (r == 0 && (r = sbd_agent_box_attach(vb->container, sb, s, box)) < 0) {
		sbx_destroy(s);
		strata_err_set(e, r, "cannot attach to the guest's agent: %s", strerror(-r));
	}
	if (r < 0) {
		box_free(box);
		return r;
	}
	pthread_mutex_lock(&vb->lock);
	box->next = vb->boxes;
	vb->boxes = box;
	pthread_mutex_unlock(&vb->lock);
	return 0;
}

static int vm_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ESRCH; /* its VMM died with the sandboxd that made it */
}

static struct vm_box *box_of(struct sbd_sandbox *sb)
{
	return sbd_agent_box_outer(sb);
}

static int vm_pause(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct strata_err e = {0};
	int r = vmm_pause(box_of(sb)->v, &e);
	if (r < 0)
		log_warn("sandbox %s: pause: %s", sb->id, e.msg);
	return r;
}

static int vm_resume(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct strata_err e = {0};
	int r = vmm_resume(box_of(sb)->v, &e);
	if (r < 0)
		log_warn("sandbox %s: resume: %s", sb->id, e.msg);
	return r;
}

static int vm_usage(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_usage *ret)
{
	struct vm_box *box = box_of(sb);
	uint64_t mem = 0;
	struct stat st;
	*ret = (struct sbd_usage){.cpu_us = -1, .memory_peak_bytes = -1, .pids = -1};
	ret->memory_bytes = box && vmm_memory_bytes(box->v, &mem) == 0 ? (int64_t)mem : -1;
	ret->disk_bytes = box && fstat(box->disk_fd, &st) == 0 ? (int64_t)st.st_blocks * 512 : -1;
	return 0;
}

static void box_unlist(struct vm_backend *vb, struct vm_box *box)
{
	pthread_mutex_lock(&vb->lock);
	for (struct vm_box **p = &vb->boxes; *p; p = &(*p)->next)
		if (*p == box) {
			*p = box->next;
			break;
		}
	pthread_mutex_unlock(&vb->lock);
}

static int vm_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct vm_box *box = box_of(sb);
	if (!box)
		return 0;
	box_unlist(b->priv, box);
	sbd_agent_box_destroy(sb); /* the agent's channel */
	box_free(box);		   /* the VMM, its disk */
	return 0;
}

/* Once a second: a VMM that exited fails its sandbox with the reason. */
static void vm_tick(struct sbd_backend *b)
{
	struct vm_backend *vb = b->priv;
	char why[256];
	pthread_mutex_lock(&vb->lock);
	struct vm_box *dead = NULL;
	for (struct vm_box *box = vb->boxes; box; box = box->next)
		if (!box->failed && vmm_exited(box->v, why, sizeof(why)) == 1) {
			box->failed = true;
			dead = box;
			break; /* one per tick: sbd_registry_fail runs unlocked */
		}
	pthread_mutex_unlock(&vb->lock);
	if (dead)
		sbd_registry_fail(vb->d, dead->sb, why);
}

static void vm_free(struct sbd_backend *b)
{
	struct vm_backend *vb = b->priv;
	sbx_workers_free(vb->ws);
	pthread_mutex_destroy(&vb->lock);
	pthread_mutex_destroy(&vb->convert);
	free(vb);
}

/* Claims of savings that a dead sandboxd left (*.tmp in images/). */
static void warm_sweep(struct vm_backend *vb)
{
	char dir[PATH_MAX + 16], p[PATH_MAX + 300];
	snprintf(dir, sizeof(dir), "%s/images", vb->dir);
	mkdir(dir, 0700);
	DIR *d = opendir(dir);
	struct dirent *de;
	while (d && (de = readdir(d))) {
		size_t n = strlen(de->d_name);
		if (n > 4 && !strcmp(de->d_name + n - 4, ".tmp")) {
			snprintf(p, sizeof(p), "%s/%s", dir, de->d_name);
			unlink(p);
		}
	}
	if (d)
		closedir(d);
}

/* The guest: $STRATA_VM_GUEST, else guest/ beside the directory of our
 * binary (the build tree: build/bin/strata-sandboxd, build/guest). */
static void guest_paths(struct vm_backend *vb)
{
	char dir[PATH_MAX] = "";
	const char *env = getenv("STRATA_VM_GUEST");
	if (env && env[0])
		snprintf(dir, sizeof(dir), "%s", env);
	else {
		ssize_t n = readlink("/proc/self/exe", dir, sizeof(dir) - 16);
		dir[n > 0 ? n : 0] = 0;
		for (int i = 0; i < 2; i++) {
			char *slash = strrchr(dir, '/');
			if (slash)
				*slash = 0;
		}
		strcat(dir, "/guest");
	}
	snprintf(vb->kernel, sizeof(vb->kernel), "%.4000s/vmlinuz", dir);
	snprintf(vb->initrd, sizeof(vb->initrd), "%.4000s/initrd.img", dir);
}

/* The firecracker backend: what this node lacks for it (/dev/kvm, the
 * binary), else that its VM lifecycle is not built yet. The API client
 * (fc_client.h, fc_requests.h) is; sandbox/vm/README.md says what is left. */
static void fc_init(struct vm_backend *vb)
{
	struct strata_err kvm = {0};
	char bin[PATH_MAX];
	const char *want = vb->d->cfg.firecracker;
	bool have_kvm = vmm_kvm_usable(&kvm) == 0;
	bool have_bin = vmm_find_binary(want, "firecracker", bin, sizeof(bin)) == 0;
	char nobin[PATH_MAX + 80];
	if (want)
		snprintf(nobin, sizeof(nobin), "the firecracker binary %.4000s is not executable",
			 want);
	else
		snprintf(nobin, sizeof(nobin),
			 "no firecracker binary on PATH (sandboxd --firecracker PATH)");
	if (!have_kvm && !have_bin)
		strata_err_set(&vb->why, -ENODEV, "%s; %s", kvm.msg, nobin);
	else if (!have_kvm)
		strata_err_set(&vb->why, -ENODEV, "%s", kvm.msg);
	else if (!have_bin)
		strata_err_set(&vb->why, -ENODEV, "%s", nobin);
	else
		strata_err_set(&vb->why, -ENODEV,
			       "firecracker (%.3000s) and /dev/kvm are here, but the firecracker "
			       "backend's VM lifecycle is not built yet (sandbox/vm/README.md)",
			       bin);
}

static void vm_init(struct vm_backend *vb)
{
	if (strcmp(vb->kind, "qemu")) {
		fc_init(vb);
		return;
	}
	vb->b.create_threaded = true;
	vb->b.adopt = vm_adopt;
	vb->b.pause = vm_pause;
	vb->b.resume = vm_resume;
	vb->b.destroy = vm_destroy;
	vb->b.usage = vm_usage;
	vb->b.tick = vm_tick;
	vb->b.free = vm_free;
	sbd_agent_box_ops(vb->container, &vb->b);
	snprintf(vb->dir, sizeof(vb->dir), "%.4000s/vm", vb->d->cfg.state_dir);
	mkdir(vb->dir, 0700);
	const char *snaps = getenv("STRATA_VM_SNAPSHOTS");
	vb->snapshots = !snaps || strcmp(snaps, "0");
	warm_sweep(vb);
	guest_paths(vb);
	if (vmm_probe(NULL, vb->kernel, vb->initrd, &vb->kvm, &vb->why) < 0)
		return;
	struct sbx_workers_config wc = {.cgroup_name = "strata-vmm"};
	int r = sbx_workers_new(&wc, &vb->ws);
	if (r == 0 && sbx_workers_cgroup_version(vb->ws) == 0)
		r = -ENOTSUP;
	if (r < 0) {
		sbx_workers_free(vb->ws);
		vb->ws = NULL;
		strata_err_set(&vb->why, -ENODEV,
			       "the VMM cannot be contained here (the isolation library's workers: "
			       "%s)",
			       strerror(-r));
	}
}

#endif /* STRATA_HAVE_VM */

static int vm_adopt_none(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}

static int vm_exec_none(struct sbd_backend *b, struct sbd_sandbox *sb,
			const struct sbd_exec_req *req, const struct sbd_exec_sink *sink,
			void **ret_handle, struct strata_err *e)
{
	return vm_create(b, sb, e);
}

static void vm_exec_cancel_none(struct sbd_backend *b, void *handle)
{
}

static int vm_file_none(struct sbd_backend *b, struct sbd_sandbox *sb, struct sbd_file_req *req)
{
	return -ENODEV;
}

static int vm_op_none(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return -ENODEV;
}

static int vm_destroy_none(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	return 0;
}

static void vm_free_none(struct sbd_backend *b)
{
	free(b->priv);
}

struct sbd_backend *sbd_backend_vm_new(struct sandboxd *d, struct sbd_backend *container,
				       const char *kind)
{
	struct vm_backend *vb = calloc(1, sizeof(*vb));
	if (!vb)
		return NULL;
	snprintf(vb->kind, sizeof(vb->kind), "%s", kind);
	vb->d = d;
	vb->container = container;
	pthread_mutex_init(&vb->lock, NULL);
	pthread_mutex_init(&vb->convert, NULL);
	vb->b = (struct sbd_backend){
	    .name = vb->kind,
	    .loop = d->loop,
	    .priv = vb,
	    .caps = vm_caps,
	    .create = vm_create,
	    .adopt = vm_adopt_none,
	    .exec = vm_exec_none,
	    .exec_cancel = vm_exec_cancel_none,
	    .file = vm_file_none,
	    .pause = vm_op_none,
	    .resume = vm_op_none,
	    .destroy = vm_destroy_none,
	    .free = vm_free_none,
	};
	vm_init(vb);
	return &vb->b;
}
