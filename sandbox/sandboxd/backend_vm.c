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
 * (its pidfd): the sandbox is failed with the reason. VMs are persistent:
 * the VMM outlives sandboxd (a worker without PDEATHSIG), its identity is
 * in the sandbox's state (backend_state: the VMM's pid, start time, pid
 * namespace and cgroups), and the next sandboxd adopts it (vm_adopt,
 * sandbox/vm/adopt.c); one it cannot adopt is kept failed with the reason
 * (a VMM that is still there is killed first: nothing runs unreachable). */
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

#include "fs/clock.h"
#include "fs/json.h"
#include "fs/log.h"
#include "sandbox/sandboxd/sandboxd.h"

#ifdef STRATA_HAVE_VM
#include "sandbox/container/strata_sandbox.h"
#include "sandbox/container/worker.h"
#include "sandbox/vm/vmm.h"
#include <xxhash.h>
#endif
#include "sandbox/vm/warm.h"

extern char **environ;

#define WARM_SAVING_MAX 16 /* shapes saved at once by one sandboxd */

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
	char tag[17];	/* names our snapshot temp dirs (warm_init) */
	char kernel_sum[VM_WARM_KEY_LEN + 1], initrd_sum[VM_WARM_KEY_LEN + 1];
	char vmm_sum[VM_WARM_KEY_LEN + 1];
	char shared_root[PATH_MAX];			   /* swept once (warm_root) */
	char saving[WARM_SAVING_MAX][VM_WARM_KEY_LEN + 1]; /* keys being saved here */
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
	bool warm;	    /* restored from its shape's snapshot */
	bool agent_pending; /* adopted paused: the agent is connected to at resume */
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
			       .persistent = ok,
			       .disk_reason = "an ext4 disk of disk_mb in a sparse file",
			       .userns_reason = "a VM: the guest kernel is the boundary"};
	k->why = vb->why;
}

/* Runs argv with env added to ours, its output to /dev/null; 0 when it
 * exits 0. */
static int run_env(char *const argv[], char *env)
{
	size_t n = 0;
	while (environ[n])
		n++;
	char **envp = calloc(n + 2, sizeof(char *));
	if (!envp)
		return -ENOMEM;
	memcpy(envp, environ, n * sizeof(char *));
	envp[n] = env; /* NULL: ours only */
	posix_spawn_file_actions_t fa;
	posix_spawn_file_actions_init(&fa);
	posix_spawn_file_actions_addopen(&fa, 1, "/dev/null", O_WRONLY, 0);
	posix_spawn_file_actions_addopen(&fa, 2, "/dev/null", O_WRONLY, 0);
	pid_t pid;
	int r = posix_spawnp(&pid, argv[0], &fa, NULL, argv, envp);
	posix_spawn_file_actions_destroy(&fa);
	free(envp);
	int st = 0;
	if (r != 0)
		return -r;
	if (waitpid(pid, &st, 0) < 0)
		return -errno;
	return WIFEXITED(st) && WEXITSTATUS(st) == 0 ? 0 : -EIO;
}

/* The content id of a converted directory (<hash>.id beside it): XXH3-128
 * of the sums of its metadata and blob, written once per conversion. */
static int dir_image_id(const char *meta, const char *blob, char *id, struct strata_err *e)
{
	char p[PATH_MAX + 8], tmp[PATH_MAX + 16], sums[2 * VM_WARM_KEY_LEN + 2];
	snprintf(p, sizeof(p), "%.4000s.id", meta);
	FILE *f = fopen(p, "re");
	bool ok = f && fscanf(f, "%32s", id) == 1 && strlen(id) == VM_WARM_KEY_LEN;
	if (f)
		fclose(f);
	if (ok)
		return 0;
	int r = vm_warm_file_sum(meta, sums, e);
	if (r == 0)
		r = vm_warm_file_sum(blob, sums + VM_WARM_KEY_LEN + 1, e);
	if (r < 0)
		return r;
	sums[VM_WARM_KEY_LEN] = ' ';
	XXH128_hash_t h = XXH3_128bits(sums, sizeof(sums) - 1);
	snprintf(id, VM_WARM_KEY_LEN + 1, "%016" PRIx64 "%016" PRIx64, (uint64_t)h.high64,
		 (uint64_t)h.low64);
	snprintf(tmp, sizeof(tmp), "%s.tmp", p);
	if ((f = fopen(tmp, "we"))) {
		ok = fprintf(f, "%s\n", id) > 0;
		ok = fclose(f) == 0 && ok;
		if (!ok || rename(tmp, p) < 0)
			unlink(tmp); /* computed again next time */
	}
	return 0;
}

/* A registered directory's EROFS image, made once (mkfs.erofs) into
 * <state>/vm/images/<hash>.erofs, its file data in 1 MiB chunks on a blob
 * device beside it (<hash>.blob, as the store's images have theirs: the
 * guest reads only the chunks it touches), made again when the
 * directory's mtime is newer; id its content id (dir_image_id). The
 * conversion is reproducible (a fixed UUID and build time): the same
 * directory gives the same bytes, so the same id and snapshot key, on every
 * node. Called with vb->convert held. */
static int dir_image(struct vm_backend *vb, const char *rootfs, char *out, size_t cap, char *blob,
		     size_t bcap, char *id, struct strata_err *e)
{
	uint64_t h = 1469598103934665603ull; /* FNV-1a of the path */
	for (const char *p = rootfs; *p; p++)
		h = (h ^ (uint8_t)*p) * 1099511628211ull;
	char dir[PATH_MAX + 16], tmp[PATH_MAX + 64], idf[PATH_MAX + 8];
	snprintf(dir, sizeof(dir), "%s/images", vb->dir);
	mkdir(dir, 0700);
	snprintf(out, cap, "%s/%016" PRIx64 ".erofs", dir, h);
	snprintf(blob, bcap, "%s/%016" PRIx64 ".blob", dir, h);
	snprintf(idf, sizeof(idf), "%.4000s.id", out);
	struct stat si, sd;
	if (stat(rootfs, &sd) < 0)
		return strata_err_set(e, -errno, "image %s: %s", rootfs, strerror(errno));
	if (stat(out, &si) == 0 && si.st_mtime >= sd.st_mtime && access(blob, R_OK) == 0)
		return dir_image_id(out, blob, id, e);
	char blobopt[PATH_MAX + 16];
	snprintf(tmp, sizeof(tmp), "%s.tmp", out);
	snprintf(blobopt, sizeof(blobopt), "--blobdev=%s", blob);
	unlink(out);
	unlink(idf);
	/* mkfs.erofs clamps every mtime to SOURCE_DATE_EPOCH: a build time past
	 * them all (2096) keeps them */
	char *argv[] = {
	    "mkfs.erofs",	   "--quiet", "-U", "5f1a7a00-0000-4000-8000-000000000000",
	    "--chunksize=1048576", blobopt,   tmp,  (char *)rootfs,
	    "--preserve-mtime",	   NULL};
	int r = run_env(argv, "SOURCE_DATE_EPOCH=4000000000");
	if (r == 0 && rename(tmp, out) < 0)
		r = -errno;
	if (r < 0) {
		unlink(tmp);
		return strata_err_set(e, -ENOEXEC, "cannot convert image %s to EROFS for a VM%s",
				      rootfs,
				      r == -ENOENT ? " (no mkfs.erofs: apt-get install erofs-utils)"
						   : " (mkfs.erofs failed)");
	}
	return dir_image_id(out, blob, id, e);
}

/* The image's EROFS files: the store's as mounted, or a registered
 * directory converted; id (VM_WARM_KEY_LEN + 1 or more) its content id. */
static int image_files(struct vm_backend *vb, struct sbd_sandbox *sb, char *meta, size_t cap,
		       char ***ret_blobs, size_t *ret_n, char *id, size_t idcap,
		       struct strata_err *e)
{
	*ret_blobs = NULL;
	*ret_n = 0;
	if (sbd_image_is_store(sb->img)) {
		snprintf(id, idcap, "%s", sbd_image_digest(sb->img));
		return sbd_image_erofs(vb->d, sb->img, meta, cap, ret_blobs, ret_n, e);
	}
	char blob[PATH_MAX];
	pthread_mutex_lock(&vb->convert);
	int r = dir_image(vb, sb->rootfs, meta, cap, blob, sizeof(blob), id, e);
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

/* Warm starts (sandbox/vm/warm.h): the first VM of a shape (the contents
 * of image, kernel, initramfs and QEMU; vCPUs, RAM, disk size, the
 * accelerator) is saved right after its agent said HELLO (its RAM and
 * devices, vmm_save, and a copy of its disk); later creates of that shape
 * restore the pair, verified against its manifest, instead of booting. A
 * store image's snapshots are on the strata filesystem when the cluster's
 * mount is here (<mount>/.strata/vm-snapshots: every node of the cluster
 * restores what one saved), others in <state>/vm/snapshots. A snapshot that does not
 * verify or restore is removed and the create boots (and saves anew). */
#define WARM_SHARED_DIR ".strata/vm-snapshots"
#define WARM_STALE_S 3600 /* another node's temp dir this old: its saver died */

/* The snapshots' root for a create of sb (see above). Only a store image's
 * go to the strata mount: its create reads the store there already (its
 * record, on this thread), while a registered directory's never touched
 * the mount, and must not start to wait on a hung strata-fuse (a create
 * stuck there would hold sandboxd's shutdown too); a registered directory
 * is a node's own anyway. */
static void warm_root(struct vm_backend *vb, const struct sbd_sandbox *sb, char *buf, size_t cap)
{
	char mnt[PATH_MAX], top[PATH_MAX + 16];
	struct stat st;
	if (sbd_image_is_store(sb->img) && sbd_images_cluster_mount(vb->d, mnt, sizeof(mnt)) == 0 &&
	    (size_t)snprintf(top, sizeof(top), "%s/.strata", mnt) < sizeof(top) &&
	    stat(top, &st) == 0 && S_ISDIR(st.st_mode) &&
	    (size_t)snprintf(buf, cap, "%s/%s", mnt, WARM_SHARED_DIR) < cap &&
	    (mkdir(buf, 0700) == 0 || errno == EEXIST)) {
		pthread_mutex_lock(&vb->lock);
		bool first = strcmp(vb->shared_root, buf) != 0;
		if (first)
			snprintf(vb->shared_root, sizeof(vb->shared_root), "%s", buf);
		pthread_mutex_unlock(&vb->lock);
		if (first) { /* once per sandboxd: what an earlier one of ours left */
			log_info("qemu: warm-start snapshots in %s (the strata filesystem)", buf);
			vm_warm_sweep(buf, vb->tag, WARM_STALE_S);
		}
		return;
	}
	snprintf(buf, cap, "%s/snapshots", vb->dir);
}

/* The shape's key, or -EINVAL when a sum is missing (no warm start). */
static int warm_key(struct vm_backend *vb, const struct vmm_config *c, const char *image,
		    uint64_t disk_mb, char *key)
{
	struct vm_warm_shape sh = {.image = image,
				   .kernel = vb->kernel_sum,
				   .initrd = vb->initrd_sum,
				   .vmm = vb->vmm_sum,
				   .vcpus = c->vcpus,
				   .memory_mb = c->memory_mb,
				   .disk_mb = disk_mb,
				   .kvm = c->kvm};
	return vm_warm_key(&sh, key);
}

/* Takes (or, with take false, gives back) this sandboxd's claim on saving
 * key: one create saves a shape at a time here (other nodes may race: the
 * store keeps them apart). Returns whether taken. */
static bool warm_claim(struct vm_backend *vb, const char *key, bool take)
{
	bool ok = false;
	pthread_mutex_lock(&vb->lock);
	for (size_t i = 0; i < WARM_SAVING_MAX; i++)
		if (!strcmp(vb->saving[i], key)) {
			if (!take)
				vb->saving[i][0] = 0;
			pthread_mutex_unlock(&vb->lock);
			return false;
		}
	for (size_t i = 0; take && !ok && i < WARM_SAVING_MAX; i++)
		if (!vb->saving[i][0]) {
			snprintf(vb->saving[i], sizeof(vb->saving[i]), "%s", key);
			ok = true;
		}
	pthread_mutex_unlock(&vb->lock);
	return ok;
}

/* Restores root/key into box: 0 (warm), or < 0 and box as it was (boot).
 * A snapshot there that fails is removed, with the reason logged. */
static int warm_restore(struct vm_box *box, struct vmm_config *c, const char *root, const char *key,
			const char *disk)
{
	struct vm_backend *vb = box->vb;
	struct strata_err e = {0};
	int sfd = -1;
	int64_t t0 = strata_mono_ms(), t_verified = t0;
	box->disk_fd = open(disk, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	if (box->disk_fd < 0)
		return -errno;
	struct vm_warm_seen seen = {0};
	int r = vm_warm_restore(root, key, box->disk_fd, &sfd, &seen, &e);
	if (r == 0) {
		t_verified = strata_mono_ms();
		c->disk_fd = box->disk_fd;
		c->incoming_fd = sfd;
		r = vmm_start(c, &box->v, &e);
		close(sfd);
		c->incoming_fd = -1;
		c->disk_fd = -1;
	}
	if (r == 0) {
		log_debug("sandbox %s: warm start from %s/%s (verified and its disk copied in "
			  "%" PRId64 " ms, restored in %" PRId64 " ms)",
			  box->sb->id, root, key, t_verified - t0, strata_mono_ms() - t_verified);
		return 0;
	}
	if (r != -ENOENT) {
		int rr = vm_warm_remove(root, key, vb->tag, seen.ino ? &seen : NULL);
		log_warn("sandbox %s: the snapshot %s/%s does not restore (%s): %s; booting",
			 box->sb->id, root, key, e.msg[0] ? e.msg : strerror(-r),
			 rr == 0	 ? "removed"
			 : rr == -ESTALE ? "another replaced it meanwhile: kept"
					 : "already gone");
	}
	close(box->disk_fd);
	box->disk_fd = -1;
	return r;
}

/* Keeps root within --vm-snapshots-max-mb (warm.h: least recently used
 * first, never keep, never one being restored). */
static void warm_evict(struct vm_backend *vb, const char *root, const char *keep)
{
	uint64_t left = 0;
	int n = vm_warm_evict(root, vb->d->cfg.vm_snapshots_max_mb << 20, keep, vb->tag, &left);
	if (n > 0)
		log_info(
		    "qemu: evicted %d warm-start snapshots from %s (least recently used; %" PRIu64
		    " MiB left, at most %" PRIu64 ")",
		    n, root, left >> 20, vb->d->cfg.vm_snapshots_max_mb);
}

/* Saves the freshly booted box as its shape's snapshot, unless this
 * sandboxd saves it already; the box runs on. Best effort: a failure only
 * costs warm starts. */
static void warm_save(struct vm_box *box, const char *root, const char *key)
{
	struct vm_backend *vb = box->vb;
	struct vm_warm_save *s = NULL;
	struct strata_err e = {0};
	if (!warm_claim(vb, key, true))
		return;
	int64_t t0 = strata_mono_ms(), t_resumed = t0;
	int r = vm_warm_save_begin(root, key, vb->tag, &s, &e);
	bool paused = r == 0;
	if (r == 0)
		r = vmm_save(box->v, vm_warm_save_state_fd(s), &e);
	if (r == 0) /* the guest is paused: its disk holds still */
		r = vm_warm_save_disk(s, box->disk_fd, &e);
	if (paused && vmm_resume(box->v, &e) < 0)
		log_warn("sandbox %s: resume after the snapshot: %s", box->sb->id, e.msg);
	t_resumed = strata_mono_ms();
	if (r == 0)
		r = vm_warm_save_commit(s, &e); /* the syncs: with the guest running */
	else
		vm_warm_save_abort(s);
	if (r == 0)
		warm_evict(vb, root, key);
	if (r < 0)
		log_warn("sandbox %s: no warm-start snapshot in %s: %s", box->sb->id, root,
			 e.msg[0] ? e.msg : strerror(-r));
	else
		log_info("sandbox %s: %s %s/%s (the guest paused %" PRId64 " ms, %" PRId64
			 " ms in all)",
			 box->sb->id,
			 r == 0 ? "saved its shape's snapshot" : "another saver was first for",
			 root, key, t_resumed - t0, strata_mono_ms() - t0);
	warm_claim(vb, key, false);
}

static int box_boot(struct vm_backend *vb, struct vm_box *box, struct sbd_sandbox *sb,
		    struct strata_err *e)
{
	char meta[PATH_MAX], disk[PATH_MAX + 32], con[PATH_MAX + 32];
	char root[PATH_MAX], key[VM_WARM_KEY_LEN + 1], image[80] = "";
	char **blobs = NULL;
	size_t nblobs = 0;
	int r = image_files(vb, sb, meta, sizeof(meta), &blobs, &nblobs, image, sizeof(image), e);
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
			       .incoming_fd = -1,
			       .persist = true};
	bool warm = false,
	     keyed = vb->snapshots && warm_key(vb, &c, image, (uint64_t)sb->disk_mb, key) == 0;
	if (keyed) {
		warm_root(vb, sb, root, sizeof(root));
		warm = warm_restore(box, &c, root, key, disk) == 0;
	}
	if (!warm) {
		r = vmm_disk_make(disk, (uint64_t)sb->disk_mb << 20, &box->disk_fd, e);
		c.disk_fd = box->disk_fd;
		if (r == 0)
			r = vmm_start(&c, &box->v, e);
		if (r == 0 && keyed)
			warm_save(box, root, key);
	}
	box->warm = warm;
	if (confd >= 0)
		close(confd);
	free_strv(blobs, nblobs);
	return r;
}

/* sb's box, its directory <state>/vm/<id> named (not made). */
static struct vm_box *box_new(struct vm_backend *vb, struct sbd_sandbox *sb)
{
	struct vm_box *box = calloc(1, sizeof(*box));
	if (!box)
		return NULL;
	box->vb = vb;
	box->sb = sb;
	box->disk_fd = -1;
	snprintf(box->dir, sizeof(box->dir), "%s/%s", vb->dir, sb->id);
	return box;
}

static void box_list(struct vm_backend *vb, struct vm_box *box)
{
	pthread_mutex_lock(&vb->lock);
	box->next = vb->boxes;
	vb->boxes = box;
	pthread_mutex_unlock(&vb->lock);
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

/* What the next sandboxd needs to adopt the VM (persisted with the
 * sandbox): who its VMM is, and its cgroups. "agent_pid" and "cgroup" (the
 * last part of its pids cgroup's path) are the names `strata down` reads
 * to kill what a dead sandboxd left, as for containers. */
static void box_record(struct vm_box *box)
{
	struct vmm_id id;
	struct sbd_sandbox *sb = box->sb;
	free(sb->bstate);
	sb->bstate = NULL;
	if (vmm_id(box->v, &id) < 0)
		return; /* it exited already: the tick fails it */
	const char *slot = "";
	for (int i = VMM_CGROUP_DIRS - 1; i >= 0; i--)
		if (id.cgroup[i][0])
			slot = strrchr(id.cgroup[i], '/') ? strrchr(id.cgroup[i], '/') + 1 : "";
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kint(&w, "agent_pid", id.pid);
	jw_kint(&w, "vmm_start", (int64_t)id.start_time);
	jw_kint(&w, "vmm_pidns", (int64_t)id.pidns_ino);
	jw_kstr(&w, "cgroup", slot);
	jw_key(&w, "cgroups");
	jw_arr(&w);
	for (int i = 0; i < VMM_CGROUP_DIRS; i++)
		jw_str(&w, id.cgroup[i]);
	jw_arr_end(&w);
	jw_kbool(&w, "warm", box->warm);
	jw_obj_end(&w);
	sb->bstate = jw_take(&w, NULL);
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
	struct vm_box *box = box_new(vb, sb);
	if (!box)
		return -ENOMEM;
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
	box_record(box);
	box_list(vb, box);
	return 0;
}

static struct vm_box *box_of(struct sbd_sandbox *sb)
{
	return sbd_agent_box_outer(sb);
}

/* A sandbox adopted failed: no VMM, the reason in its state (a record
 * {"refused": why}, so that later sandboxds keep it failed too); delete
 * removes it. */
static int adopt_failed(struct vm_backend *vb, struct sbd_sandbox *sb, struct vm_box *box,
			const char *why)
{
	struct sbx *s = NULL;
	int r = sbx_attach_agent(-1, 0, &s);
	if (r == 0 && (r = sbd_agent_box_attach(vb->container, sb, s, box)) < 0)
		sbx_destroy(s);
	if (r < 0) {
		box_free(box);
		return r;
	}
	box->failed = true;
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "refused", why);
	jw_obj_end(&w);
	char *st = jw_take(&w, NULL);
	if (st) {
		free(sb->bstate);
		sb->bstate = st;
	}
	free(sb->failed_reason);
	sb->failed_reason = strdup(why);
	sb->state = SBD_FAILED;
	log_warn("sandbox %s not re-adopted: %s", sb->id, why);
	box_list(vb, box);
	return 0;
}

/* What the record of box_record holds, back into id. */
static bool record_read(const char *bstate, struct vmm_id *id, char *refused, size_t cap)
{
	struct json *j = json_parse(bstate, strlen(bstate), NULL, 0);
	int64_t pid = 0, start = 0, ns = 0;
	bool ok = json_int(json_get(j, "agent_pid"), 1, INT32_MAX, &pid) &&
		  json_int(json_get(j, "vmm_start"), 0, INT64_MAX, &start) &&
		  json_int(json_get(j, "vmm_pidns"), 0, INT64_MAX, &ns);
	*id = (struct vmm_id){
	    .pid = (pid_t)pid, .start_time = (uint64_t)start, .pidns_ino = (uint64_t)ns};
	struct json *cg = json_get(j, "cgroups");
	int i = 0;
	for (struct json *c = cg && cg->type == JSON_ARR ? cg->child : NULL;
	     c && i < VMM_CGROUP_DIRS; c = c->next, i++)
		snprintf(id->cgroup[i], sizeof(id->cgroup[i]), "%s", json_cstr(c) ?: "");
	snprintf(refused, cap, "%s", json_cstr(json_get(j, "refused")) ?: "");
	json_free(j);
	return ok;
}

/* Takes over a VM of an earlier sandboxd (vmm_adopt): running, its agent
 * is connected to as its new host now; paused, at resume (a stopped guest
 * cannot answer). A VMM that is gone, is not the recorded one, or whose
 * QMP or agent does not answer: the sandbox is kept failed with the
 * reason, and what still runs of it is killed. */
static int vm_adopt(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct vm_backend *vb = b->priv;
	struct vmm_id id;
	char refused[256] = "", why[600];
	struct strata_err e = {0};
	if (!sb->bstate)
		return -ENODEV;
	bool ok = record_read(sb->bstate, &id, refused, sizeof(refused));
	if (!ok && !refused[0])
		return -EINVAL;
	struct vm_box *box = box_new(vb, sb);
	if (!box)
		return -ENOMEM;
	if (refused[0]) /* by an earlier sandboxd */
		return adopt_failed(vb, sb, box, refused);
	if (vb->why.code) {
		snprintf(why, sizeof(why), "the qemu backend is unavailable here now: %s",
			 vb->why.msg);
		return adopt_failed(vb, sb, box, why);
	}
	bool paused = false;
	int r = vmm_adopt(&id, &box->v, &paused, &e);
	if (r == 0 && !paused)
		r = vmm_agent_connect(box->v, &e);
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/disk.img", box->dir);
	if (r == 0 && (box->disk_fd = open(p, O_RDWR | O_CLOEXEC)) < 0)
		r = strata_err_set(&e, -errno, "its disk %s: %s", p, strerror(errno));
	struct sbx *s = NULL;
	if (r == 0 && (r = sbx_attach_agent(paused ? -1 : vmm_take_agent_fd(box->v), 0, &s)) == 0 &&
	    (r = sbd_agent_box_attach(vb->container, sb, s, box)) < 0)
		sbx_destroy(s);
	if (r < 0) {
		if (box->v)
			vmm_free(box->v); /* killed: nothing runs on unreachable */
		else if (r != -ESRCH && r != -EPERM)
			vmm_kill_id(&id);
		box->v = NULL;
		snprintf(why, sizeof(why),
			 "the VM could not be re-adopted after sandboxd's restart: %s",
			 e.msg[0] ? e.msg : strerror(-r));
		return adopt_failed(vb, sb, box, why);
	}
	box->agent_pending = paused;
	if (!paused) /* what ran on meanwhile, followed again (a paused one's: at resume) */
		sbd_agent_box_find_orphans(sb);
	if (paused != (sb->state == SBD_PAUSED))
		log_warn("sandbox %s was recorded %s but its guest is %s: now %s", sb->id,
			 sbd_state_name(sb->state), paused ? "paused" : "running",
			 paused ? "paused" : "running");
	sb->state = paused ? SBD_PAUSED : SBD_RUNNING;
	box_list(vb, box);
	log_info("sandbox %s: re-adopted its VM (qemu, pid %d, %s)", sb->id, (int)id.pid,
		 paused ? "paused" : "running");
	return 0;
}

/* sandboxd is stopping: the VM runs on (persistent) for the next one to
 * adopt; its agent sees its host leave. */
static void vm_release(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct vm_box *box = box_of(sb);
	if (!box)
		return;
	box_unlist(b->priv, box);
	sbd_agent_box_destroy(sb); /* our end of the agent's stream */
	vmm_release(box->v);
	if (box->disk_fd >= 0)
		close(box->disk_fd);
	free(box);
}

static int vm_pause(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct strata_err e = {0};
	if (!box_of(sb)->v)
		return -ENODEV; /* failed at adoption */
	int r = vmm_pause(box_of(sb)->v, &e);
	if (r < 0)
		log_warn("sandbox %s: pause: %s", sb->id, e.msg);
	return r;
}

static int vm_resume(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	struct strata_err e = {0};
	struct vm_box *box = box_of(sb);
	if (!box->v)
		return -ENODEV;
	int r = vmm_resume(box->v, &e);
	struct sbx *s = NULL;
	if (r == 0 && box->agent_pending) { /* adopted paused: now it can answer */
		r = vmm_agent_connect(box->v, &e);
		if (r == 0 && (r = sbx_attach_agent(vmm_take_agent_fd(box->v), 0, &s)) == 0) {
			sbd_agent_box_rechannel(sb, s);
			sbd_agent_box_find_orphans(sb);
		}
		box->agent_pending = r < 0;
	}
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
	ret->memory_bytes =
	    box && box->v && vmm_memory_bytes(box->v, &mem) == 0 ? (int64_t)mem : -1;
	ret->disk_bytes = box && fstat(box->disk_fd, &st) == 0 ? (int64_t)st.st_blocks * 512 : -1;
	return 0;
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

/* What warm starts need once: this saver's tag (the host and state dir: an
 * earlier sandboxd of ours had the same), the local root swept, and the
 * content sums of the guest and QEMU (no sum: no warm starts). */
static void warm_init(struct vm_backend *vb)
{
	char host[256] = "", qemu[PATH_MAX], local[PATH_MAX + 16];
	struct strata_err e = {0};
	gethostname(host, sizeof(host) - 1);
	XXH64_hash_t t = XXH3_64bits_withSeed(vb->d->cfg.state_dir, strlen(vb->d->cfg.state_dir),
					      XXH3_64bits(host, strlen(host)));
	snprintf(vb->tag, sizeof(vb->tag), "%016" PRIx64, (uint64_t)t);
	snprintf(local, sizeof(local), "%s/snapshots", vb->dir);
	mkdir(local, 0700);
	vm_warm_sweep(local, vb->tag, 0);
	if (!vb->snapshots)
		return;
	warm_evict(vb, local, NULL); /* a smaller bound than the last sandboxd's */
	if (vmm_find_binary(NULL, "qemu-system-x86_64", qemu, sizeof(qemu)) < 0 ||
	    vm_warm_file_sum(qemu, vb->vmm_sum, &e) < 0 ||
	    vm_warm_file_sum(vb->kernel, vb->kernel_sum, &e) < 0 ||
	    vm_warm_file_sum(vb->initrd, vb->initrd_sum, &e) < 0) {
		log_warn("qemu: no warm starts: %s", e.msg[0] ? e.msg : "no qemu-system-x86_64");
		vb->snapshots = false;
	}
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
	vb->b.release = vm_release;
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
	guest_paths(vb);
	if (vmm_probe(NULL, vb->kernel, vb->initrd, &vb->kvm, &vb->why) < 0)
		return;
	warm_init(vb);
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
