/* test_vm_qemu.c — libstrata_vm with a real guest under QEMU (TCG here):
 * the image (a busybox root and 24 MiB of data no command reads) made by
 * img-mkimage, its EROFS metadata and blob as read-only disks; the VMM
 * contained as a worker; the agent's protocol over the virtio-serial port
 * (an exec, stdin, a file written on the overlay over the ext4 disk); the
 * blob read lazily (QMP query-blockstats: far fewer bytes than it holds);
 * pause over QMP (an exec does not answer until resume); a snapshot saved
 * and restored into a second VMM (QEMU migration to a file); kill -9 of the
 * VMM seen with its reason. Exits 77 without QEMU, the guest (build/guest,
 * sandbox/vm/guest.sh) or root. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "sandbox/container/worker.h"
#include "sandbox/vm/vmm.h"
#include "tests/sandbox/sbx_test.h"

#define DATA_MB 24

struct image {
	char meta[512], blob[512];
	uint64_t blob_bytes;
};

/* The test root (sbxt_setup_root's busybox) with /etc/motd and DATA_MB of
 * data, as one layer through img-mkimage. */
static int make_image(struct sbxt_env *env, struct image *im)
{
	char cmd[4096];
	const char *build = getenv("STRATA_BUILD");
	snprintf(cmd, sizeof(cmd),
		 "set -e; cd %s; echo hello-from-the-image > rootfs/etc/motd; mkdir -p rootfs/data;"
		 " head -c %dM /dev/urandom > rootfs/data/big; tar -C rootfs -cf layer.tar .;"
		 " mkdir -p store; %s/tests/img-mkimage store meta.img layer.tar > blobs.txt "
		 "2>/dev/null",
		 env->dir, DATA_MB, build ? build : ".");
	if (system(cmd) != 0)
		return -1;
	snprintf(im->meta, sizeof(im->meta), "%s/meta.img", env->dir);
	snprintf(cmd, sizeof(cmd), "%s/blobs.txt", env->dir);
	FILE *f = fopen(cmd, "r");
	char rel[256];
	if (!f || !fgets(rel, sizeof(rel), f)) {
		if (f)
			fclose(f);
		return -1;
	}
	fclose(f);
	rel[strcspn(rel, "\n")] = 0; /* relative to the store's parent */
	snprintf(im->blob, sizeof(im->blob), "%s/%s", env->dir, rel);
	struct stat st;
	if (stat(im->blob, &st) < 0)
		return -1;
	im->blob_bytes = (uint64_t)st.st_size;
	return 0;
}

static int64_t now_ms(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000 + ts.tv_nsec / 1000000;
}

struct op_state {
	bool done;
	int r;
	char out[256];
	size_t len;
};

static void op_output(void *ud, int stream, const void *p, size_t n)
{
	struct op_state *o = ud;
	if (o->len + n < sizeof(o->out)) {
		memcpy(o->out + o->len, p, n);
		o->len += n;
	}
}

static void op_exit(void *ud, int r, const struct sbx_exec_result *res)
{
	struct op_state *o = ud;
	o->done = true;
	o->r = r;
}

/* Drives the channel until the op is done or ms passed. */
static void drive(struct sbx *s, struct op_state *o, int ms)
{
	int64_t end = now_ms() + ms;
	while (!o->done && now_ms() < end) {
		struct pollfd p = {.fd = sbx_agent_fd(s), .events = sbx_chan_events(s)};
		if (poll(&p, 1, 50) > 0)
			sbx_chan_io(s, p.revents);
	}
}

static void test_pause(struct vmm *v, struct sbx *s)
{
	struct strata_err e = {0};
	CHECK(vmm_pause(v, &e) == 0);
	const char *argv[] = {"echo", "after-resume", NULL};
	struct sbx_exec_opts o = {.argv = argv, .timeout_ms = 60000};
	struct sbx_exec_cbs cbs = {.output = op_output, .exit = op_exit};
	struct op_state st = {0};
	struct sbx_exec_op *op = NULL;
	CHECK(sbx_exec_op_start(s, &o, &cbs, &st, &op) == 0);
	drive(s, &st, 1500);
	CHECK(!st.done); /* the guest's vCPUs are stopped: nobody answers */
	CHECK(vmm_resume(v, &e) == 0);
	drive(s, &st, 60000);
	CHECK(st.done && st.r == 0);
	CHECK(st.len == 13 && !memcmp(st.out, "after-resume\n", 13));
	sbx_exec_op_free(op);
}

/* Saves the running guest (a file written in it first), restores the pair
 * (snapshot, a copy of its disk) into a second VMM, which runs on with
 * the file there. The first stays paused. */
static void test_snapshot(struct vmm *v, struct sbx *s, struct vmm_config c, const char *dir,
			  int64_t boot_ms)
{
	struct sbxt_out o;
	struct sbx_exec_result res;
	struct strata_err e = {0};
	char snap[600], disk2[600], cmd[1400];
	memset(&o, 0, sizeof(o));
	CHECK(sbxt_sh(s, "echo before-the-snapshot > /marker && sync", 60000, &o, &res) == 0);
	snprintf(snap, sizeof(snap), "%s/snap.bin", dir);
	int fd = open(snap, O_RDWR | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	int64_t t0 = now_ms();
	CHECK(fd >= 0 && vmm_save(v, fd, &e) == 0);
	int64_t saved = now_ms();
	snprintf(disk2, sizeof(disk2), "%s/disk2.img", dir);
	snprintf(cmd, sizeof(cmd), "cp --sparse=always %s/disk.img %s", dir, disk2);
	CHECK(system(cmd) == 0);
	struct stat st;
	fstat(fd, &st);
	lseek(fd, 0, SEEK_SET);
	c.disk_fd = open(disk2, O_RDWR | O_CLOEXEC);
	c.incoming_fd = fd;
	struct vmm *v2 = NULL;
	int64_t t1 = now_ms();
	int r = vmm_start(&c, &v2, &e);
	int64_t restored = now_ms();
	CHECK(r == 0);
	if (r < 0) {
		fprintf(stderr, "restore: %s\n", e.msg);
		close(fd);
		close(c.disk_fd);
		return;
	}
	fprintf(stderr,
		"snapshot: %lld KiB saved in %lld ms; restored in %lld ms (cold boot %lld ms)\n",
		(long long)st.st_size / 1024, (long long)(saved - t0), (long long)(restored - t1),
		(long long)boot_ms);
	struct sbx *s2 = NULL;
	CHECK(sbx_attach_agent(vmm_take_agent_fd(v2), 0, &s2) == 0);
	memset(&o, 0, sizeof(o));
	CHECK(sbxt_sh(s2, "cat /marker /etc/motd", 60000, &o, &res) == 0);
	CHECK(!strcmp(o.out, "before-the-snapshot\nhello-from-the-image\n"));
	sbx_destroy(s2);
	vmm_free(v2);
	close(fd);
	close(c.disk_fd);
}

static void test_guest(struct vmm *v, struct sbx *s, const struct image *im)
{
	struct sbxt_out o;
	struct sbx_exec_result res;
	memset(&o, 0, sizeof(o));
	CHECK(sbxt_sh(s, "cat /etc/motd; hostname", 60000, &o, &res) == 0);
	CHECK(res.exit_code == 0);
	CHECK(strstr(o.out, "hello-from-the-image\n") != NULL);
	CHECK(strstr(o.out, "vmtest\n") != NULL);
	/* stdin, and the overlay over the writable disk */
	const char *argv[] = {"/bin/sh", "-c",
			      "cat > /tmp/in && wc -c < /tmp/in && df -k / | tail -1", NULL};
	struct sbx_exec_opts eo = {
	    .argv = argv, .timeout_ms = 60000, .stdin_data = "twelve bytes", .stdin_len = 12};
	memset(&o, 0, sizeof(o));
	CHECK(sbxt_exec(s, &eo, &o, &res) == 0 && res.exit_code == 0);
	CHECK(!strncmp(o.out, "12\n", 3));
	fprintf(stderr, "guest: %.*s", (int)o.out_len, o.out);
	CHECK(sbx_file_write(s, "/root-file", "abc", 3, 0644) == 0);
	void *d = NULL;
	size_t n = 0;
	CHECK(sbx_file_read(s, "/root-file", 0, 100, &d, &n, NULL) == 0 && n == 3 &&
	      !memcmp(d, "abc", 3));
	free(d);
	/* lazy: the guest read busybox and a few blocks, not the 24 MiB */
	uint64_t rd = 0;
	struct strata_err e = {0};
	CHECK(vmm_read_bytes(v, "blob0", &rd, &e) == 0);
	fprintf(stderr, "blob0: %llu of %llu bytes read\n", (unsigned long long)rd,
		(unsigned long long)im->blob_bytes);
	CHECK(rd > 0 && rd < im->blob_bytes / 4);
}

int main(void)
{
	struct sbxt_env env;
	struct image im;
	char guest[512], kernel[600], initrd[600], disk[600];
	const char *build = getenv("STRATA_BUILD");
	snprintf(guest, sizeof(guest), "%s/guest", build ? build : ".");
	snprintf(kernel, sizeof(kernel), "%s/vmlinuz", guest);
	snprintf(initrd, sizeof(initrd), "%s/initrd.img", guest);
	bool kvm;
	struct strata_err e = {0};
	if (vmm_probe(NULL, kernel, initrd, &kvm, &e) < 0) {
		printf("SKIP: %s\n", e.msg);
		return 77;
	}
	int r = sbxt_setup_root(&env);
	if (r)
		return r;
	if (make_image(&env, &im) < 0) {
		fprintf(stderr, "cannot make the test image\n");
		return 1;
	}
	struct sbx_workers *ws = NULL;
	struct sbx_workers_config wc = {.cgroup_name = "strata-vmtest"};
	CHECK(sbx_workers_new(&wc, &ws) == 0);
	int disk_fd = -1;
	snprintf(disk, sizeof(disk), "%s/disk.img", env.dir);
	CHECK(vmm_disk_make(disk, 64ull << 20, &disk_fd, &e) == 0);
	char console[600];
	snprintf(console, sizeof(console), "%s/console.log", env.dir);
	int con = open(console, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
	const char *blobs[] = {im.blob};
	struct vmm_config c = {.kernel = kernel,
			       .initrd = initrd,
			       .meta = im.meta,
			       .blobs = blobs,
			       .nblobs = 1,
			       .disk_fd = disk_fd,
			       .vcpus = 1,
			       .memory_mb = 256,
			       .hostname = "vmtest",
			       .console_fd = con,
			       .kvm = kvm,
			       .ws = ws,
			       .incoming_fd = -1};
	struct vmm *v = NULL;
	int64_t t0 = now_ms();
	r = vmm_start(&c, &v, &e);
	if (r < 0) {
		fprintf(stderr, "vmm_start: %s\n", e.msg);
		char cmd[700];
		snprintf(cmd, sizeof(cmd), "tail -20 %s >&2", console);
		(void)!system(cmd);
		return 1;
	}
	int64_t boot_ms = now_ms() - t0;
	fprintf(stderr, "booted to HELLO in %lld ms\n", (long long)boot_ms);
	struct sbx *s = NULL;
	CHECK(sbx_attach_agent(vmm_take_agent_fd(v), 0, &s) == 0);
	test_guest(v, s, &im);
	test_pause(v, s);
	test_snapshot(v, s, c, env.dir, boot_ms);
	/* kill -9 of the VMM: seen with its reason, the channel hangs up */
	char why[256] = "";
	CHECK(kill(vmm_pid(v), SIGKILL) == 0);
	struct pollfd p = {.fd = vmm_pidfd(v), .events = POLLIN};
	CHECK(poll(&p, 1, 10000) == 1);
	CHECK(vmm_exited(v, why, sizeof(why)) == 1);
	fprintf(stderr, "exited: %s\n", why);
	CHECK(strstr(why, "killed by signal 9") != NULL);
	struct sbxt_out o;
	memset(&o, 0, sizeof(o));
	CHECK(sbxt_sh(s, "true", 5000, &o, NULL) < 0); /* the agent is gone */
	sbx_destroy(s);
	vmm_free(v);
	sbx_workers_free(ws);
	close(disk_fd);
	close(con);
	sbxt_teardown(&env);
	return sbxt_failed;
}
