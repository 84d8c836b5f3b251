/* test_inode.c — unit test of strata-fuse's inode table (fuse/inode.c):
 * lookup counting, references from handles, forget, and the sizes reported
 * while a local length is pending. Runs under ASan in `make test`, so a
 * leaked or double-freed entry fails too. Exits 0 on success, 1 on failure. */
#include <stdio.h>
#include <string.h>

#include "fuse/fuse-internal.h"
#include "tests/testutil.h"

static struct strata_attr file_attr(strata_ino_t ino, uint64_t size)
{
	struct strata_attr a;

	memset(&a, 0, sizeof(a));
	a.ino = ino;
	a.mode = S_IFREG | 0644;
	a.nlink = 1;
	a.size = size;
	a.mtime_ns = 1000;
	a.layout.chunk_size = 1u << 20;
	a.layout.table_id = 1;
	return a;
}

static void test_lookup_forget(struct sfs *fs)
{
	struct strata_attr a = file_attr(42, 10);
	struct sfs_inode *in;

	sfs_inode_note(fs, &a, false, 0); /* not looked up: not kept */
	EXPECT(sfs_inode_get(fs, 42, false) == NULL);
	sfs_inode_note(fs, &a, true, 0);
	sfs_inode_note(fs, &a, true, 0);
	in = sfs_inode_get(fs, 42, false);
	EXPECT(in != NULL);
	if (in) {
		EXPECT(in->nlookup == 2);
		EXPECT(in->have_layout && in->layout.chunk_size == (1u << 20));
		EXPECT(in->size == 10);
	}
	sfs_inode_forget(fs, 42, 2);
	/* still referenced by `in` */
	EXPECT(fs->itable.count == 1);
	sfs_inode_put(fs, in);
	EXPECT(fs->itable.count == 0);
	EXPECT(sfs_inode_get(fs, 42, false) == NULL);
}

static void test_pending_length(struct sfs *fs)
{
	struct strata_attr a = file_attr(7, 100);
	struct sfs_inode *in;

	sfs_inode_note(fs, &a, true, 0);
	in = sfs_inode_get(fs, 7, false);
	EXPECT(in != NULL);
	if (!in)
		return;
	/* a local write past the end, not yet recorded in meta */
	in->size = 5000;
	in->size_dirty = true;
	in->data_written = true;
	in->write_mtime = 9000;
	a = file_attr(7, 100);
	sfs_inode_note(fs, &a, false, 0);
	EXPECT(a.size == 5000);
	EXPECT(a.mtime_ns == 9000);
	/* meta ahead of us (another writer): its size wins */
	a = file_attr(7, 8000);
	sfs_inode_note(fs, &a, false, 0);
	EXPECT(a.size == 8000 && in->size == 8000);
	/* recorded: meta's size is the truth again, even when smaller */
	in->size_dirty = false;
	in->data_written = false;
	a = file_attr(7, 3);
	sfs_inode_note(fs, &a, false, 0);
	EXPECT(a.size == 3 && in->size == 3);
	sfs_inode_put(fs, in);
	sfs_inode_forget(fs, 7, 1);
	EXPECT(fs->itable.count == 0);
}

/* A getattr whose meta call began before a local write + fsync replies with
 * the old size after the new one was recorded (size_dirty already cleared):
 * the stale reply must not shrink the local size, or reads of the new bytes
 * would be clamped short. A reply that began after the change is the truth. */
static void test_stale_reply(struct sfs *fs)
{
	struct strata_attr a = file_attr(9, 100);
	struct sfs_inode *in;

	sfs_inode_note(fs, &a, true, 0);
	in = sfs_inode_get(fs, 9, false);
	EXPECT(in != NULL);
	if (!in)
		return;
	uint64_t before = sfs_attr_stamp(fs); /* the racing getattr starts */
	pthread_mutex_lock(&in->lock);
	in->size = 5000; /* write past the end, then fsync recorded it */
	in->size_dirty = false;
	sfs_attr_changed_locked(fs, in);
	pthread_mutex_unlock(&in->lock);
	a = file_attr(9, 100); /* its reply: the size before the write */
	sfs_inode_note(fs, &a, false, before);
	EXPECT(in->size == 5000 && a.size == 5000);
	a = file_attr(9, 7000); /* a later reply (another writer) still counts */
	sfs_inode_note(fs, &a, false, sfs_attr_stamp(fs));
	EXPECT(in->size == 7000);
	sfs_inode_put(fs, in);
	sfs_inode_forget(fs, 9, 1);
	EXPECT(fs->itable.count == 0);
}

static void test_many(struct sfs *fs)
{
	for (strata_ino_t i = 1; i <= 10000; i++) {
		struct strata_attr a = file_attr(i * 65536, 1); /* collide in buckets */

		sfs_inode_note(fs, &a, true, 0);
	}
	EXPECT(fs->itable.count == 10000);
	for (strata_ino_t i = 1; i <= 10000; i += 2)
		sfs_inode_forget(fs, i * 65536, 1);
	EXPECT(fs->itable.count == 5000);
	EXPECT(sfs_inode_get(fs, 3 * 65536, false) == NULL);
	struct sfs_inode *in = sfs_inode_get(fs, 4 * 65536, false);
	EXPECT(in && in->ino == 4 * 65536);
	sfs_inode_put(fs, in);
	/* the rest is freed by sfs_itable_done */
}

int main(void)
{
	struct sfs fs;

	memset(&fs, 0, sizeof(fs));
	fs.attr_clock = 1; /* as strata-fuse starts it: stamp 0 means unknown */
	if (sfs_itable_init(&fs.itable) < 0) {
		fprintf(stderr, "out of memory\n");
		return 1;
	}
	test_lookup_forget(&fs);
	test_pending_length(&fs);
	test_stale_reply(&fs);
	test_many(&fs);
	sfs_itable_done(&fs.itable);
	return test_result("test_fuse_inode");
}
