/* test_fsck_ns.c — the meta engine's fsck (meta/fsck.c) on a temporary
 * store: a healthy tree (files, hard links, symlinks, an open orphan) is
 * clean; every kind of damage written straight into the store is found
 * with its count, --repair fixes it, a second check is clean, and the files
 * are still there; the chunk verdicts of ns_fsck_chunks and that its remove
 * callback runs for orphans only. */
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "meta/ns-internal.h"
#include "tests/testutil.h"

#define ROOT STRATA_ROOT_INO

static uint32_t total(const struct meta_fsck_report *r, bool repaired)
{
	uint32_t n = 0;

	for (int k = 1; k < FSCK_KIND_MAX; k++)
		n += repaired ? r->repaired[k] : r->found[k];
	return n;
}

static void check(struct ns *ns, uint32_t flags, struct meta_fsck_report *r)
{
	CHECK_EQ(ns_fsck(ns, flags, r), 0);
	for (uint32_t i = 0; i < r->n; i++)
		fprintf(stderr, "  %s %s ino %llu parent %llu '%s' expected %llu actual %llu\n",
			r->rec[i].repaired ? "repaired" : "found",
			meta_fsck_kind_name(r->rec[i].kind), (unsigned long long)r->rec[i].ino,
			(unsigned long long)r->rec[i].parent, r->rec[i].name,
			(unsigned long long)r->rec[i].expected,
			(unsigned long long)r->rec[i].actual);
}

static void clean(struct ns *ns)
{
	struct meta_fsck_report r;

	check(ns, 0, &r);
	CHECK_EQ(total(&r, false), 0);
	meta_fsck_report_done(&r);
}

static uint64_t mkfile(struct ns *ns, uint64_t parent, const char *name, uint64_t size)
{
	struct strata_attr a;
	uint64_t sid;

	CHECK_EQ(ns_create(ns, NULL, parent, name, 0644, 0, 0, O_CREAT | O_EXCL, "c1", &a, &sid),
		 0);
	CHECK_EQ(ns_close_file(ns, a.ino, sid, (int64_t)size, -1), 0);
	return a.ino;
}

static void put(struct ns *ns, const struct key *k, const void *v, size_t n)
{
	struct kv_batch *b = kv_batch_new();
	kv_batch_put(b, k->b, k->len, v, n);
	CHECK_EQ(kv_write(ns->kv, b), 0);
	kv_batch_free(b);
}

static void del(struct ns *ns, const struct key *k)
{
	struct kv_batch *b = kv_batch_new();
	kv_batch_del(b, k->b, k->len);
	CHECK_EQ(kv_write(ns->kv, b), 0);
	kv_batch_free(b);
}

static void put_inode(struct ns *ns, const struct inode *in)
{
	struct kv_batch *b = kv_batch_new();
	ns_put_inode(b, in);
	CHECK_EQ(kv_write(ns->kv, b), 0);
	kv_batch_free(b);
}

static void put_dentry(struct ns *ns, uint64_t parent, const char *name, uint64_t ino,
		       uint32_t mode)
{
	struct kv_batch *b = kv_batch_new();
	ns_put_dentry(b, parent, name, &(struct dentry){ino, mode});
	CHECK_EQ(kv_write(ns->kv, b), 0);
	kv_batch_free(b);
}

static int rm_calls;
static uint64_t rm_ino;
static uint32_t rm_first;
static int count_rm(void *ctx, const struct strata_layout *l, strata_ino_t ino, uint32_t first)
{
	rm_calls++;
	rm_ino = ino;
	rm_first = first;
	CHECK(l->chunk_size > 0);
	return 0;
}

int main(void)
{
	char dir[] = "/tmp/test_fsck_ns.XXXXXX";
	char why[256];
	struct ns *ns;
	struct strata_attr a, d, d2;
	struct meta_fsck_report r;
	struct inode in;
	struct key k;
	uint64_t sid;

	CHECK(mkdtemp(dir) != NULL);
	CHECK_EQ(ns_open(dir, &ns, why, sizeof(why)), 0);

	/* a healthy tree */
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "d", 0755, 0, 0, &d), 0);
	CHECK_EQ(ns_mkdir(ns, NULL, d.ino, "d2", 0755, 0, 0, &d2), 0);
	uint64_t f1 = mkfile(ns, ROOT, "f1", 3 << 20);
	uint64_t f2 = mkfile(ns, d.ino, "f2", 100);
	uint64_t f3 = mkfile(ns, d2.ino, "f3", 0);
	CHECK_EQ(ns_link(ns, NULL, f1, d.ino, "f1-link", &a), 0);
	CHECK_EQ(ns_symlink(ns, NULL, ROOT, "sl", "f1", 0, 0, &a), 0);
	/* an open orphan: unlinked, a session still open (legitimate) */
	uint64_t orph;
	CHECK_EQ(ns_create(ns, NULL, ROOT, "orph", 0644, 0, 0, O_CREAT, "c2", &a, &sid), 0);
	orph = a.ino;
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "orph"), 0);
	/* a deleted file queued for GC */
	uint64_t gone = mkfile(ns, ROOT, "gone", 10);
	CHECK_EQ(ns_unlink(ns, NULL, ROOT, "gone"), 0);
	check(ns, 0, &r);
	CHECK_EQ(total(&r, false), 0);
	CHECK_EQ(r.orphans, 1);
	CHECK_EQ(r.sessions, 1);
	CHECK_EQ(r.gc_queued, 1);
	CHECK_EQ(r.dirs, 3);
	meta_fsck_report_done(&r);

	/* chunk verdicts */
	struct meta_fsck_chunk c[7] = {
	    {.ino = f1, .index = 2, .table_id = 1},	/* within 3 MiB */
	    {.ino = f1, .index = 3, .table_id = 1},	/* past the end */
	    {.ino = orph, .index = 9, .table_id = 1},	/* open */
	    {.ino = gone, .index = 0, .table_id = 1},	/* queued for GC */
	    {.ino = 999999, .index = 0, .table_id = 1}, /* no inode */
	    {.ino = d.ino, .index = 0, .table_id = 1},	/* a directory */
	    {.ino = f3, .index = 0, .table_id = 1},	/* empty file: any chunk is past the end */
	};
	CHECK_EQ(ns_fsck_chunks(ns, 0, c, 7, count_rm, NULL), 0);
	CHECK_EQ(c[0].verdict, FSCK_CHUNK_OK);
	CHECK_EQ(c[1].verdict, FSCK_CHUNK_BEYOND_EOF);
	CHECK_EQ(c[1].first_orphan, 3);
	CHECK_EQ(c[2].verdict, FSCK_CHUNK_OPEN);
	CHECK_EQ(c[3].verdict, FSCK_CHUNK_GC);
	CHECK_EQ(c[4].verdict, FSCK_CHUNK_NO_INODE);
	CHECK_EQ(c[5].verdict, FSCK_CHUNK_NOT_FILE);
	CHECK_EQ(c[6].verdict, FSCK_CHUNK_BEYOND_EOF);
	CHECK_EQ(c[6].first_orphan, 0);
	CHECK_EQ(rm_calls, 0);
	CHECK_EQ(ns_fsck_chunks(ns, META_FSCK_REPAIR, c, 4, count_rm, NULL), 0);
	CHECK_EQ(rm_calls, 1); /* only the orphan: f1 from chunk 3 */
	CHECK_EQ(rm_ino, f1);
	CHECK_EQ(rm_first, 3);
	CHECK(c[1].removed && !c[0].removed && !c[2].removed && !c[3].removed);

	/* damage, one of each kind */
	put_dentry(ns, d.ino, "ghost", 777777, 0100000);   /* dangling */
	put_dentry(ns, ROOT, "f1", f1, 0040000);	   /* wrong type bits */
	put_dentry(ns, ROOT, "d2-again", d2.ino, 0040000); /* a 2nd name of a dir */
	CHECK_EQ(ns_get_inode(ns, f2, &in), 0);		   /* nlink */
	in.a.nlink = 5;
	put_inode(ns, &in);
	key_dentry(&k, d2.ino, "f3"); /* unreachable file */
	del(ns, &k);
	key_ino(&k, K_ORPHAN, orph); /* open orphan, no marker */
	del(ns, &k);
	key_ino(&k, K_ORPHAN, f2); /* marker on a linked file */
	put(ns, &k, "", 0);
	key_client(&k, "c2", orph, sid); /* session without index */
	del(ns, &k);
	key_client(&k, "c9", f1, 4242); /* index without session */
	put(ns, &k, "", 0);
	uint8_t sess[32] = {REC_VERSION}; /* session on no inode */
	size_t sl = 1 + 4 + 8;
	sess[sl++] = 2, sess[sl++] = 0, sess[sl++] = 'c', sess[sl++] = '3';
	key_session(&k, 888888, 77);
	put(ns, &k, sess, sl);
	key_ino(&k, K_GC, f2); /* GC queue entry of a live file */
	uint8_t g[21] = {REC_VERSION};
	put(ns, &k, g, sizeof(g));
	key_named(&k, K_XATTR, 555555, "user.a"); /* an xattr of no inode */
	put(ns, &k, "v", 1);
	CHECK_EQ(ns_get_inode(ns, d.ino, &in), 0); /* a dir's parent field */
	in.parent = d2.ino;
	put_inode(ns, &in);
	struct kv_batch *b = kv_batch_new(); /* counters */
	ns_put_counter(b, "next_session", 5);
	ns_put_counter(b, "next_ino", 2);
	ns_put_counter(b, "inodes", 100);
	CHECK_EQ(kv_write(ns->kv, b), 0);
	kv_batch_free(b);

	static const uint16_t want[][2] = {
	    {FSCK_DANGLING_DENTRY, 1},
	    {FSCK_DENTRY_TYPE, 1},
	    {FSCK_DIR_LINKS, 1},
	    {FSCK_DIR_PARENT, 1},
	    {FSCK_NLINK, 1},
	    {FSCK_UNREACHABLE, 1},
	    {FSCK_ORPHAN_NO_MARKER, 1},
	    {FSCK_STALE_ORPHAN, 1},
	    {FSCK_SESSION_NO_INDEX, 1},
	    {FSCK_INDEX_NO_SESSION, 1},
	    {FSCK_SESSION_NO_INODE, 1},
	    {FSCK_GC_LIVE, 1},
	    {FSCK_COUNTER, 2},
	    {FSCK_INODE_COUNT, 1},
	    {FSCK_BAD_RECORD, 0},
	    {FSCK_STRAY_RECORD, 1},
	    {FSCK_SYMLINK_NO_TARGET, 0},
	};
	check(ns, 0, &r);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++) {
		if (r.found[want[i][0]] != want[i][1])
			fprintf(stderr, "kind %s: found %u, expected %u\n",
				meta_fsck_kind_name(want[i][0]), r.found[want[i][0]], want[i][1]);
		CHECK_EQ(r.found[want[i][0]], want[i][1]);
	}
	CHECK_EQ(total(&r, true), 0);
	meta_fsck_report_done(&r);

	/* repair, then clean */
	check(ns, META_FSCK_REPAIR, &r);
	for (size_t i = 0; i < sizeof(want) / sizeof(want[0]); i++)
		CHECK(r.repaired[want[i][0]] >= want[i][1]);
	meta_fsck_report_done(&r);
	clean(ns);

	/* nothing lost: every file is where it was or in lost+found */
	CHECK_EQ(ns_lookup(ns, ROOT, "f1", &a), 0);
	CHECK_EQ(a.ino, f1);
	CHECK_EQ(ns_lookup(ns, d.ino, "f1-link", &a), 0);
	CHECK_EQ(a.nlink, 2);
	CHECK_EQ(ns_lookup(ns, d.ino, "f2", &a), 0);
	CHECK_EQ(a.nlink, 1);
	CHECK_EQ(ns_lookup(ns, d.ino, "d2", &a), 0);
	CHECK_EQ(ns_lookup(ns, ROOT, "d2-again", &a), -ENOENT);
	CHECK_EQ(ns_lookup(ns, d.ino, "ghost", &a), -ENOENT);
	struct strata_attr lf;
	char name[32];
	snprintf(name, sizeof(name), "#%llu", (unsigned long long)f3);
	CHECK_EQ(ns_lookup(ns, ROOT, "lost+found", &lf), 0);
	CHECK_EQ(ns_lookup(ns, lf.ino, name, &a), 0);
	CHECK_EQ(a.ino, f3);
	CHECK_EQ(ns_getattr(ns, orph, &a), 0); /* the open orphan still open */
	CHECK_EQ(ns_session_count(ns, orph), 1);
	struct ns_gc_item gi[4];
	CHECK_EQ(ns_gc_list(ns, gi, 4), 1); /* only `gone`, not f2 */
	CHECK_EQ(gi[0].ino, gone);
	CHECK(lf.ino > f3); /* lost+found got a fresh number (next_ino repaired first) */
	struct strata_attr nf;
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "new", 0755, 0, 0, &nf), 0);
	CHECK(nf.ino > lf.ino);
	clean(ns);
	/* a cycle cut off from the root: x/y becomes y/x */
	struct strata_attr x, y;
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "x", 0755, 0, 0, &x), 0);
	CHECK_EQ(ns_mkdir(ns, NULL, x.ino, "y", 0755, 0, 0, &y), 0);
	mkfile(ns, y.ino, "deep", 5);
	key_dentry(&k, ROOT, "x");
	del(ns, &k);
	put_dentry(ns, y.ino, "x", x.ino, 0040000);
	CHECK_EQ(ns_get_inode(ns, x.ino, &in), 0);
	in.parent = y.ino;
	put_inode(ns, &in);
	check(ns, 0, &r);
	CHECK_EQ(r.found[FSCK_UNREACHABLE], 2);
	meta_fsck_report_done(&r);
	check(ns, META_FSCK_REPAIR, &r);
	CHECK_EQ(r.repaired[FSCK_UNREACHABLE], 2);
	meta_fsck_report_done(&r);
	clean(ns);
	snprintf(name, sizeof(name), "#%llu", (unsigned long long)y.ino);
	CHECK_EQ(ns_lookup(ns, lf.ino, name, &a), 0);
	CHECK_EQ(ns_lookup(ns, a.ino, "deep", &a), 0);

	/* a symlink without its target: reported, never repaired */
	CHECK_EQ(ns_lookup(ns, ROOT, "sl", &a), 0);
	key_ino(&k, K_SYMLINK, a.ino);
	del(ns, &k);
	check(ns, META_FSCK_REPAIR, &r);
	CHECK_EQ(r.found[FSCK_SYMLINK_NO_TARGET], 1);
	CHECK_EQ(total(&r, true), 0);
	meta_fsck_report_done(&r);
	put(ns, &k, "f1", 2);
	clean(ns);

	/* the last close of the orphan deletes it as usual */
	CHECK_EQ(ns_close_file(ns, orph, sid, -1, -1), 0);
	CHECK_EQ(ns_getattr(ns, orph, &a), -ENOENT);
	clean(ns);

	ns_close(ns);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
	CHECK_EQ(system(cmd), 0);
	printf("ok\n");
	return 0;
}
