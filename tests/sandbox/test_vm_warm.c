/* test_vm_warm.c — the warm-start snapshot store (sandbox/vm/warm.h) on
 * plain files, no VM: a save restores to the same disk and state; the disk
 * checksum ignores holes; a flipped byte, a truncated file, a foreign or a
 * damaged manifest are each refused (-EBADMSG); two savers of one key
 * (the second finds the first's: 1, nothing of its own left); removal, and
 * a removal that finds a fresh snapshot in place of the bad one it read; the
 * sweep of dead savers' temp directories; the manifest codec's versions.
 * No privileges needed. */
#include <errno.h>
#include <fcntl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <unistd.h>

#include <xxhash.h>

#include "fs/wire.h"
#include "sandbox/vm/warm.h"
#include "tests/testutil.h"

#define DISK_BYTES (8u << 20)
#define STATE_BYTES 300000

static char base[256], root[300];
static struct vm_warm_seen last_seen; /* of the last restore() */
static const char *KEY = "0123456789abcdef0123456789abcdef";
static const char *KEY2 = "fedcba9876543210fedcba9876543210";

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 7 + seed);
}

/* A disk of DISK_BYTES with data in three places (one a partial block),
 * sparse or written out in full with zeros. */
static int make_disk(const char *path, bool sparse)
{
	static uint8_t zero[1 << 16], data[100000];
	int fd = open(path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	CHECK(fd >= 0);
	if (!sparse)
		for (off_t o = 0; o < DISK_BYTES; o += sizeof(zero))
			CHECK(pwrite(fd, zero, sizeof(zero), o) == (ssize_t)sizeof(zero));
	CHECK(ftruncate(fd, DISK_BYTES) == 0);
	fill(data, sizeof(data), 1);
	CHECK(pwrite(fd, data, 4096, 0) == 4096);
	CHECK(pwrite(fd, data, sizeof(data), 3 << 20) == (ssize_t)sizeof(data));
	CHECK(pwrite(fd, data, 10, DISK_BYTES - 10) == 10);
	return fd;
}

/* Saves KEY-like key from a disk and a state of STATE_BYTES; returns what
 * commit returned. */
static int save(const char *key, const char *tag, int disk_fd, unsigned seed)
{
	static uint8_t state[STATE_BYTES];
	struct vm_warm_save *s = NULL;
	struct strata_err e = {0};
	CHECK_EQ(vm_warm_save_begin(root, key, tag, &s, &e), 0);
	fill(state, sizeof(state), seed);
	CHECK(write(vm_warm_save_state_fd(s), state, sizeof(state)) == (ssize_t)sizeof(state));
	CHECK_EQ(vm_warm_save_disk(s, disk_fd, &e), 0);
	int r = vm_warm_save_commit(s, &e);
	if (r < 0)
		fprintf(stderr, "commit: %s\n", e.msg);
	return r;
}

static int restore(const char *key, char *why, size_t cap)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/restored.img", root);
	int disk = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600), sfd = -1;
	struct strata_err e = {0};
	CHECK(disk >= 0);
	int r = vm_warm_restore(root, key, disk, &sfd, &last_seen, &e);
	snprintf(why, cap, "%s", e.msg);
	if (r == 0)
		close(sfd);
	close(disk);
	return r;
}

static bool same_file(const char *a, int bfd)
{
	static uint8_t x[1 << 16], y[1 << 16];
	int afd = open(a, O_RDONLY);
	struct stat sa, sb;
	CHECK(afd >= 0 && fstat(afd, &sa) == 0 && fstat(bfd, &sb) == 0);
	bool same = sa.st_size == sb.st_size;
	for (off_t o = 0; same && o < sa.st_size; o += sizeof(x))
		same = pread(afd, x, sizeof(x), o) == pread(bfd, y, sizeof(y), o) &&
		       !memcmp(x, y, sizeof(x));
	close(afd);
	return same;
}

static void snap_path(char *buf, size_t cap, const char *key, const char *file)
{
	snprintf(buf, cap, "%s/%s/%s", root, key, file);
}

static void test_roundtrip_and_holes(int disk)
{
	char p[300], why[512];
	CHECK_EQ(save(KEY, "t1", disk, 3), 0);
	CHECK_EQ(restore(KEY, why, sizeof(why)), 0);
	snprintf(p, sizeof(p), "%s/restored.img", root);
	CHECK(same_file(p, disk));
	struct stat st;
	CHECK(stat(p, &st) == 0);
	CHECK(st.st_blocks * 512 <= 256 << 10); /* the copy has holes, page-wise (~110 KiB) */
	/* the snapshot's disk: its 4 non-zero blocks, their index, the trailer */
	snap_path(p, sizeof(p), KEY, "disk");
	CHECK(stat(p, &st) == 0);
	CHECK_EQ(st.st_size, 4 * VM_WARM_BLOCK + 4 * 8 + VM_WARM_DISK_TRAILER);
	/* the same disk without holes sums the same */
	snprintf(p, sizeof(p), "%s/full.img", root);
	int full = make_disk(p, false);
	CHECK_EQ(save(KEY2, "t1", full, 3), 0);
	uint8_t a[VM_WARM_MANIFEST_BYTES], b[VM_WARM_MANIFEST_BYTES];
	struct vm_warm_manifest ma, mb;
	snap_path(p, sizeof(p), KEY, "manifest");
	int fd = open(p, O_RDONLY);
	CHECK(read(fd, a, sizeof(a)) == (ssize_t)sizeof(a));
	close(fd);
	snap_path(p, sizeof(p), KEY2, "manifest");
	fd = open(p, O_RDONLY);
	CHECK(read(fd, b, sizeof(b)) == (ssize_t)sizeof(b));
	close(fd);
	CHECK_EQ(vm_warm_manifest_decode(a, sizeof(a), &ma, NULL), 0);
	CHECK_EQ(vm_warm_manifest_decode(b, sizeof(b), &mb, NULL), 0);
	CHECK(ma.disk_sum == mb.disk_sum && ma.disk_bytes == DISK_BYTES);
	CHECK(ma.state_bytes == STATE_BYTES && ma.state_sum == mb.state_sum);
	close(full);
	CHECK_EQ(vm_warm_remove(root, KEY2, "t1", NULL), 0);
}

/* Damages file of KEY's snapshot with how, expects a refusal naming what,
 * then saves it again. */
static void damaged(int disk, const char *file, const char *how, const char *what)
{
	char p[300], why[512];
	snap_path(p, sizeof(p), KEY, file);
	int fd = open(p, O_RDWR);
	CHECK(fd >= 0);
	struct stat st;
	CHECK(fstat(fd, &st) == 0);
	if (!strcmp(how, "flip") || !strcmp(how, "index")) {
		off_t at = !strcmp(how, "index")   ? st.st_size - VM_WARM_DISK_TRAILER - 16 + 1
			   : !strcmp(file, "disk") ? st.st_size / 3
						   : st.st_size / 2;
		uint8_t c;
		CHECK(pread(fd, &c, 1, at) == 1);
		c ^= 0x10;
		CHECK(pwrite(fd, &c, 1, at) == 1);
	} else {
		CHECK(ftruncate(fd, st.st_size - 1) == 0);
	}
	close(fd);
	int r = restore(KEY, why, sizeof(why));
	if (r != -EBADMSG || !strstr(why, what))
		fprintf(stderr, "%s %s: %d (%s), want -EBADMSG about %s\n", how, file, r, why,
			what);
	CHECK_EQ(r, -EBADMSG);
	CHECK(strstr(why, what));
	CHECK_EQ(vm_warm_remove(root, KEY, "t1", NULL), 0);
	CHECK_EQ(restore(KEY, why, sizeof(why)), -ENOENT);
	CHECK_EQ(save(KEY, "t1", disk, 3), 0);
	CHECK_EQ(restore(KEY, why, sizeof(why)), 0);
}

/* A bad snapshot replaced by a good one (another node) after this node
 * read it: the removal with what it read keeps the good one. */
static void test_remove_replaced(int disk)
{
	char p[300], why[512];
	snap_path(p, sizeof(p), KEY, "manifest");
	CHECK(truncate(p, 10) == 0);
	CHECK_EQ(restore(KEY, why, sizeof(why)), -EBADMSG);
	struct vm_warm_seen bad = last_seen;
	CHECK_EQ(vm_warm_remove(root, KEY, "nodeB", NULL), 0);
	CHECK_EQ(save(KEY, "nodeB", disk, 3), 0);
	CHECK_EQ(vm_warm_remove(root, KEY, "t1", &bad), -ESTALE);
	CHECK_EQ(restore(KEY, why, sizeof(why)), 0);
	CHECK_EQ(vm_warm_remove(root, KEY, "t1", &last_seen), 0);
	CHECK_EQ(restore(KEY, why, sizeof(why)), -ENOENT);
	CHECK_EQ(save(KEY, "t1", disk, 3), 0);
}

static void test_foreign(int disk)
{
	char a[300], b[300], why[512];
	CHECK_EQ(save(KEY2, "t1", disk, 4), 0);
	snap_path(a, sizeof(a), KEY2, "manifest");
	snap_path(b, sizeof(b), KEY, "manifest");
	CHECK(rename(a, b) == 0); /* KEY2's manifest in KEY's directory */
	CHECK_EQ(restore(KEY, why, sizeof(why)), -EBADMSG);
	CHECK(strstr(why, "foreign"));
	CHECK_EQ(vm_warm_remove(root, KEY, "t1", NULL), 0);
	CHECK_EQ(vm_warm_remove(root, KEY2, "t1", NULL), 0);
	CHECK_EQ(save(KEY, "t1", disk, 3), 0);
}

/* Two savers of one key, both committing: the first rename wins, the second
 * answers 1 and leaves nothing; the published one is the first's. */
static void test_race(int disk)
{
	char why[512];
	CHECK_EQ(vm_warm_remove(root, KEY, "t1", NULL), 0);
	struct vm_warm_save *s1 = NULL, *s2 = NULL;
	struct strata_err e = {0};
	uint8_t st1[1000], st2[2000];
	fill(st1, sizeof(st1), 1);
	fill(st2, sizeof(st2), 2);
	CHECK_EQ(vm_warm_save_begin(root, KEY, "nodeA", &s1, &e), 0);
	CHECK_EQ(vm_warm_save_begin(root, KEY, "nodeB", &s2, &e), 0);
	CHECK(write(vm_warm_save_state_fd(s1), st1, sizeof(st1)) == sizeof(st1));
	CHECK(write(vm_warm_save_state_fd(s2), st2, sizeof(st2)) == sizeof(st2));
	CHECK_EQ(vm_warm_save_disk(s1, disk, &e), 0);
	CHECK_EQ(vm_warm_save_disk(s2, disk, &e), 0);
	CHECK_EQ(vm_warm_save_commit(s1, &e), 0);
	CHECK_EQ(vm_warm_save_commit(s2, &e), 1);
	CHECK_EQ(restore(KEY, why, sizeof(why)), 0);
	char p[300];
	struct stat st;
	snap_path(p, sizeof(p), KEY, "state");
	CHECK(stat(p, &st) == 0 && st.st_size == sizeof(st1));
	CHECK_EQ(vm_warm_sweep(root, "nobody", 3600), 0); /* no temp dir left */
}

static void test_sweep(void)
{
	char p[300];
	snprintf(p, sizeof(p), "%s/.tmp-%s-mytag-1-0", root, KEY);
	CHECK(mkdir(p, 0700) == 0);
	snprintf(p, sizeof(p), "%s/.tmp-%s-mytag-1-0/state", root, KEY);
	CHECK(close(open(p, O_WRONLY | O_CREAT, 0600)) == 0);
	snprintf(p, sizeof(p), "%s/.tmp-%s-other-1-0", root, KEY); /* saving, fresh */
	CHECK(mkdir(p, 0700) == 0);
	snprintf(p, sizeof(p), "%s/.dead-%s-other-1-1", root, KEY); /* an old one */
	CHECK(mkdir(p, 0700) == 0);
	struct timeval old[2] = {{.tv_sec = 1000}, {.tv_sec = 1000}};
	CHECK(utimes(p, old) == 0);
	CHECK_EQ(vm_warm_sweep(root, "mytag", 3600), 2);
	CHECK(access(p, F_OK) < 0);
	snprintf(p, sizeof(p), "%s/.tmp-%s-other-1-0", root, KEY);
	CHECK(access(p, F_OK) == 0);
	snprintf(p, sizeof(p), "%s/%s/manifest", root, KEY); /* snapshots stay */
	CHECK(access(p, F_OK) == 0);
	CHECK_EQ(vm_warm_sweep(root, "other", 3600), 1);
}

static void set_used(const char *key, time_t t)
{
	char p[300];
	struct timeval tv[2] = {{.tv_sec = t}, {.tv_sec = t}};
	snprintf(p, sizeof(p), "%s/%s", root, key);
	CHECK(utimes(p, tv) == 0);
}

static bool has(const char *key)
{
	char p[300];
	snap_path(p, sizeof(p), key, "manifest");
	return access(p, F_OK) == 0;
}

/* The store kept under a bound: least recently used first (a restore is a
 * use), never the one just saved, never one a restore holds (its state fd
 * still open: the VMM reads it). */
static void test_evict(int disk)
{
	static const char *K[3] = {"a0000000000000000000000000000000",
				   "b0000000000000000000000000000000",
				   "c0000000000000000000000000000000"};
	char saved[300], why[512], p[300];
	uint64_t bytes = 0;
	snprintf(saved, sizeof(saved), "%s", root);
	snprintf(root, sizeof(root), "%s/evict", base);
	for (int i = 0; i < 3; i++) {
		CHECK_EQ(save(K[i], "t", disk, (unsigned)i), 0);
		set_used(K[i], 1000 * (i + 1));
	}
	CHECK_EQ(vm_warm_evict(root, UINT64_MAX, NULL, "t", &bytes), 0);
	uint64_t one = bytes / 3;
	CHECK(one > STATE_BYTES && bytes % 3 == 0);
	/* K[0], the oldest, is being restored: its state stays open */
	snprintf(p, sizeof(p), "%s/restored.img", base);
	int rdisk = open(p, O_RDWR | O_CREAT | O_TRUNC, 0600), sfd = -1;
	struct strata_err e = {0};
	CHECK_EQ(vm_warm_restore(root, K[0], rdisk, &sfd, NULL, &e), 0);
	set_used(K[0], 1000); /* (the restore made it the newest) */
	CHECK_EQ(vm_warm_evict(root, one + one / 2, K[2], "t", &bytes), 1);
	CHECK(has(K[0]) && !has(K[1]) && has(K[2]) && bytes == 2 * one);
	close(sfd); /* the restore is done: K[0] may go */
	CHECK_EQ(vm_warm_evict(root, one + one / 2, K[2], "t", &bytes), 1);
	CHECK(!has(K[0]) && has(K[2]) && bytes == one);
	/* a restore counts as a use: the older one goes */
	CHECK_EQ(save(K[1], "t", disk, 1), 0);
	set_used(K[1], 500);
	CHECK_EQ(restore(K[1], why, sizeof(why)), 0); /* now the newest */
	CHECK_EQ(vm_warm_evict(root, one, NULL, "t", &bytes), 1);
	CHECK(has(K[1]) && !has(K[2]) && bytes == one);
	/* one locked by an eviction: a restore finds none and removes nothing */
	snap_path(p, sizeof(p), K[1], "state");
	int lock = open(p, O_RDONLY);
	CHECK(lock >= 0 && flock(lock, LOCK_EX | LOCK_NB) == 0);
	CHECK_EQ(restore(K[1], why, sizeof(why)), -ENOENT);
	close(lock);
	CHECK(has(K[1]));
	close(rdisk);
	snprintf(root, sizeof(root), "%s", saved);
}

static void test_codec(void)
{
	struct vm_warm_manifest m = {.major = VM_WARM_MAJOR, .state_bytes = 5, .disk_sum = 9};
	struct vm_warm_manifest out;
	struct strata_err e = {0};
	uint8_t buf[VM_WARM_MANIFEST_BYTES + 8];
	snprintf(m.key, sizeof(m.key), "%s", KEY);
	vm_warm_manifest_encode(&m, buf);
	CHECK_EQ(vm_warm_manifest_decode(buf, VM_WARM_MANIFEST_BYTES, &out, &e), 0);
	CHECK(out.state_bytes == 5 && out.disk_sum == 9 && !strcmp(out.key, KEY));
	CHECK_EQ(vm_warm_manifest_decode(buf, VM_WARM_MANIFEST_BYTES - 1, &out, &e), -EBADMSG);
	/* a newer minor with 8 more bytes is read */
	memset(buf + 88, 0xee, 8);
	le16_put(buf + 10, VM_WARM_MINOR + 1);
	le32_put(buf + 12, sizeof(buf));
	le64_put(buf + sizeof(buf) - 8, XXH3_64bits(buf, sizeof(buf) - 8));
	CHECK_EQ(vm_warm_manifest_decode(buf, sizeof(buf), &out, &e), 0);
	CHECK(out.state_bytes == 5);
	le16_put(buf + 8, VM_WARM_MAJOR + 1);
	CHECK_EQ(vm_warm_manifest_decode(buf, sizeof(buf), &out, &e), -EPROTO);
	/* keys: every field counts, no path in them */
	struct vm_warm_shape s = {.image = KEY,
				  .kernel = KEY,
				  .initrd = KEY,
				  .vmm = KEY,
				  .vcpus = 1,
				  .memory_mb = 256,
				  .disk_mb = 128};
	char k1[VM_WARM_KEY_LEN + 1], k2[VM_WARM_KEY_LEN + 1];
	CHECK_EQ(vm_warm_key(&s, k1), 0);
	s.memory_mb = 257;
	CHECK_EQ(vm_warm_key(&s, k2), 0);
	CHECK(strcmp(k1, k2));
	s.image = "not hex";
	CHECK_EQ(vm_warm_key(&s, k2), -EINVAL);
}

int main(void)
{
	snprintf(base, sizeof(base), "/tmp/strata-vm-warm-XXXXXX");
	CHECK(mkdtemp(base));
	snprintf(root, sizeof(root), "%s/snaps", base); /* made by the first save */
	char p[300];
	snprintf(p, sizeof(p), "%s/disk.img", base);
	int disk = make_disk(p, true);
	test_codec();
	test_roundtrip_and_holes(disk);
	damaged(disk, "state", "flip", "state's checksum");
	damaged(disk, "state", "truncate", "state is");
	damaged(disk, "disk", "flip", "disk's checksum");
	damaged(disk, "disk", "truncate", "disk is");
	damaged(disk, "disk", "index", "index");
	damaged(disk, "manifest", "flip", "manifest");
	damaged(disk, "manifest", "truncate", "manifest");
	test_remove_replaced(disk);
	test_foreign(disk);
	test_race(disk);
	test_sweep();
	test_evict(disk);
	close(disk);
	char cmd[300];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", base);
	CHECK(system(cmd) == 0);
	printf("vm warm-start store: ok\n");
	return 0;
}
