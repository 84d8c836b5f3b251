/* test_meta_opid.c — operation ids in the strata-meta engine (meta/ns_opid.c):
 * every mutation that takes one, asked for twice with the same id, is done
 * once and answers the same both times (attributes, session); a failure is
 * not recorded; the records survive a reopen of the store; two threads
 * racing one id make one inode; the expiry keeps at most the limit, the
 * newest, and drops those past their time. */
#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "meta/ns.h"
#include "tests/testutil.h"
#include "tests/meta/ns_testutil.h"

#define ROOT STRATA_ROOT_INO

static uint64_t used_inodes(struct ns *ns)
{
	struct strata_statfs s;

	CHECK_EQ(ns_statfs(ns, &s), 0);
	return s.used_inodes;
}

static struct meta_opid id(uint64_t unique)
{
	return (struct meta_opid){.conn = 0x5eed5eed00000001ull, .unique = unique};
}

static void same_attr(const struct strata_attr *a, const struct strata_attr *b)
{
	CHECK_EQ(a->ino, b->ino);
	CHECK_EQ(a->mode, b->mode);
	CHECK_EQ(a->nlink, b->nlink);
	CHECK_EQ(a->ctime_ns, b->ctime_ns);
	CHECK_EQ(a->layout.stripe_seed, b->layout.stripe_seed);
}

/* mkdir, mknod, symlink, create, link: the second attempt answers the first's
 * attributes and makes nothing. */
static void test_entries(struct ns *ns, strata_ino_t d)
{
	struct meta_opid a = id(10), b = id(11), c = id(12), e = id(13), l = id(14);
	struct strata_attr x, y, p0, p1;
	uint64_t s1, s2, used;

	CHECK_EQ(ns_mkdir(ns, &a, d, "dir", 0755, 1, 2, &x), 0);
	used = used_inodes(ns);
	CHECK_EQ(ns_getattr(ns, d, &p0), 0);
	CHECK_EQ(ns_mkdir(ns, &a, d, "dir", 0755, 1, 2, &y), 0); /* not EEXIST */
	same_attr(&x, &y);
	CHECK_EQ(used_inodes(ns), used);
	CHECK_EQ(ns_getattr(ns, d, &p1), 0);
	CHECK_EQ(p1.nlink, p0.nlink);	    /* one subdirectory, not two */
	CHECK_EQ(p1.mtime_ns, p0.mtime_ns); /* the parent was not touched again */
	CHECK_EQ(ns_mkdir(ns, &b, d, "dir", 0755, 1, 2, &y), -EEXIST); /* another request */

	CHECK_EQ(ns_mknod(ns, &c, d, "node", S_IFIFO | 0600, 0, 1, 2, &x), 0);
	CHECK_EQ(ns_mknod(ns, &c, d, "node", S_IFIFO | 0600, 0, 1, 2, &y), 0);
	same_attr(&x, &y);
	CHECK_EQ(ns_symlink(ns, &e, d, "sym", "target", 1, 2, &x), 0);
	CHECK_EQ(ns_symlink(ns, &e, d, "sym", "target", 1, 2, &y), 0);
	same_attr(&x, &y);

	struct meta_opid cr = id(15);
	CHECK_EQ(
	    ns_create(ns, &cr, d, "file", 0644, 1, 2, O_CREAT | O_EXCL | O_RDWR, "cl", &x, &s1), 0);
	used = used_inodes(ns);
	CHECK_EQ(
	    ns_create(ns, &cr, d, "file", 0644, 1, 2, O_CREAT | O_EXCL | O_RDWR, "cl", &y, &s2), 0);
	same_attr(&x, &y);
	CHECK_EQ(s1, s2); /* the same session: no second one left open */
	CHECK_EQ(ns_session_count(ns, x.ino), 1);
	CHECK_EQ(used_inodes(ns), used);

	CHECK_EQ(ns_link(ns, &l, x.ino, d, "hard", &y), 0);
	CHECK_EQ(y.nlink, 2);
	CHECK_EQ(ns_link(ns, &l, x.ino, d, "hard", &y), 0);
	CHECK_EQ(y.nlink, 2);
	CHECK_EQ(ns_getattr(ns, x.ino, &y), 0);
	CHECK_EQ(y.nlink, 2);

	/* open: the same session again */
	struct meta_opid o = id(16);
	CHECK_EQ(ns_open_file(ns, &o, x.ino, O_RDONLY, "cl", &s1), 0);
	CHECK_EQ(ns_open_file(ns, &o, x.ino, O_RDONLY, "cl", &s2), 0);
	CHECK_EQ(s1, s2);
	CHECK_EQ(ns_session_count(ns, x.ino), 2);
}

/* unlink, rmdir, rename, xattrs: the second attempt succeeds, as the first. */
static void test_removals(struct ns *ns, strata_ino_t d)
{
	struct meta_opid u = id(20), r = id(21), n = id(22), sx = id(23), rx = id(24);
	struct strata_attr a;

	CHECK_EQ(ns_unlink(ns, &u, d, "node"), 0);
	CHECK_EQ(ns_unlink(ns, &u, d, "node"), 0); /* not ENOENT */
	CHECK_EQ(ns_lookup(ns, d, "node", &a), -ENOENT);
	CHECK_EQ(ns_rmdir(ns, &r, d, "dir"), 0);
	CHECK_EQ(ns_rmdir(ns, &r, d, "dir"), 0);
	CHECK_EQ(ns_rename(ns, &n, d, "sym", d, "sym2", RENAME_NOREPLACE), 0);
	CHECK_EQ(ns_rename(ns, &n, d, "sym", d, "sym2", RENAME_NOREPLACE), 0);
	CHECK_EQ(ns_lookup(ns, d, "sym2", &a), 0);
	CHECK_EQ(ns_lookup(ns, d, "sym", &a), -ENOENT);
	CHECK_EQ(ns_lookup(ns, d, "file", &a), 0);
	CHECK_EQ(ns_setxattr(ns, &sx, a.ino, "user.k", "v", 1, XATTR_CREATE), 0);
	CHECK_EQ(ns_setxattr(ns, &sx, a.ino, "user.k", "v", 1, XATTR_CREATE), 0); /* not EEXIST */
	CHECK_EQ(ns_removexattr(ns, &rx, a.ino, "user.k"), 0);
	CHECK_EQ(ns_removexattr(ns, &rx, a.ino, "user.k"), 0); /* not ENODATA */
	CHECK_EQ(ns_removexattr(ns, NULL, a.ino, "user.k"), -ENODATA);
}

/* A failure writes no record: the id done again is done for real. An id
 * recorded for another type of request is not an answer either. */
static void test_failed_ops(struct ns *ns, strata_ino_t d)
{
	struct meta_opid f = id(30), t = id(31);
	struct strata_attr a;
	uint64_t before = ns_opid_count(ns);

	CHECK_EQ(ns_unlink(ns, &f, d, "later"), -ENOENT);
	CHECK_EQ(ns_opid_count(ns), before);
	CHECK_EQ(ns_mknod(ns, NULL, d, "later", S_IFREG | 0644, 0, 0, 0, &a), 0);
	CHECK_EQ(ns_unlink(ns, &f, d, "later"), 0);
	CHECK_EQ(ns_lookup(ns, d, "later", &a), -ENOENT);

	CHECK_EQ(ns_mkdir(ns, &t, d, "typed", 0755, 0, 0, &a), 0);
	CHECK_EQ(ns_rmdir(ns, &t, d, "typed"), 0); /* same id, another type: done */
	CHECK_EQ(ns_lookup(ns, d, "typed", &a), -ENOENT);
	/* without an id nothing is recorded and nothing answered */
	CHECK_EQ(ns_mkdir(ns, NULL, d, "plain", 0755, 0, 0, &a), 0);
	CHECK_EQ(ns_mkdir(ns, NULL, d, "plain", 0755, 0, 0, &a), -EEXIST);
	struct meta_opid none = {.conn = 0, .unique = 10};
	CHECK_EQ(ns_mkdir(ns, &none, d, "plain", 0755, 0, 0, &a), -EEXIST);
}

struct racer {
	struct ns *ns;
	strata_ino_t d;
	int r;
	struct strata_attr a;
};

static void *race(void *arg)
{
	struct racer *x = arg;
	struct meta_opid o = id(40);

	x->r = ns_mkdir(x->ns, &o, x->d, "raced", 0755, 0, 0, &x->a);
	return NULL;
}

/* The dead daemon's attempt and its successor's at once: one inode. */
static void test_race(struct ns *ns, strata_ino_t d)
{
	struct racer x[2] = {{ns, d, 1, {0}}, {ns, d, 1, {0}}};
	pthread_t t[2];
	uint64_t used = used_inodes(ns);

	for (int i = 0; i < 2; i++)
		CHECK_EQ(pthread_create(&t[i], NULL, race, &x[i]), 0);
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	CHECK_EQ(x[0].r, 0);
	CHECK_EQ(x[1].r, 0);
	CHECK_EQ(x[0].a.ino, x[1].a.ino);
	CHECK_EQ(used_inodes(ns), used + 1);
}

/* Records are in the store: a replay after a restart is still answered. */
static void test_reopen(const char *dir)
{
	struct ns *ns = test_ns_open(dir);
	struct meta_opid a = id(10), cr = id(15);
	struct strata_attr d, x;
	uint64_t n = ns_opid_count(ns), s;

	CHECK(n > 0);
	CHECK_EQ(ns_lookup(ns, ROOT, "op", &d), 0);
	CHECK_EQ(
	    ns_create(ns, &cr, d.ino, "file", 0644, 1, 2, O_CREAT | O_EXCL | O_RDWR, "cl", &x, &s),
	    0);
	CHECK_EQ(ns_mkdir(ns, &a, d.ino, "dir", 0755, 1, 2, &x), 0); /* removed since: the answer */
	CHECK_EQ(ns_opid_count(ns), n);
	ns_close(ns);
}

/* The limit keeps the newest records; time drops the rest. */
static void test_expiry(struct ns *ns, strata_ino_t d)
{
	struct strata_attr a;
	char name[32];
	uint64_t base = ns_opid_count(ns);

	CHECK_EQ(ns_set_opid_limits(ns, (uint32_t)base + 10, 3600 * 1000), 0);
	for (int i = 0; i < 30; i++) {
		struct meta_opid o = id(1000 + (uint64_t)i);
		snprintf(name, sizeof(name), "e%02d", i);
		CHECK_EQ(ns_mkdir(ns, &o, d, name, 0755, 0, 0, &a), 0);
	}
	CHECK_EQ(ns_opid_count(ns), base + 30);
	CHECK_EQ(ns_opid_expire(ns), 20);
	CHECK_EQ(ns_opid_count(ns), base + 10);
	CHECK_EQ(ns_opid_expire(ns), 0);
	/* the oldest went (done again: EEXIST), the newest are answered */
	struct meta_opid old = id(1000), young = id(1029);
	CHECK_EQ(ns_mkdir(ns, &old, d, "e00", 0755, 0, 0, &a), -EEXIST);
	CHECK_EQ(ns_mkdir(ns, &young, d, "e29", 0755, 0, 0, &a), 0);
	/* past their time: all of them */
	CHECK_EQ(ns_set_opid_limits(ns, 1000, 1), 0);
	usleep(5000);
	CHECK(ns_opid_expire(ns) > 0);
	CHECK_EQ(ns_opid_count(ns), 0);
	CHECK_EQ(ns_mkdir(ns, &young, d, "e29", 0755, 0, 0, &a), -EEXIST);
	CHECK_EQ(ns_set_opid_limits(ns, 0, 1), -EINVAL);
}

/* What a record costs the engine: mknod with and without ids, alternating
 * rounds in one run (figure only: machines differ). */
static void bench_ids(struct ns *ns, strata_ino_t d)
{
	double t[2] = {0, 0};
	struct strata_attr a;
	struct timespec t0, t1;
	char name[32];
	uint64_t u = 1u << 20;

	for (int round = 0; round < 10; round++)
		for (int with = 0; with < 2; with++) {
			clock_gettime(CLOCK_MONOTONIC, &t0);
			for (int i = 0; i < 1000; i++) {
				struct meta_opid o = id(u++);
				snprintf(name, sizeof(name), "b%d-%d-%d", round, with, i);
				CHECK_EQ(ns_mknod(ns, with ? &o : NULL, d, name, S_IFREG | 0644, 0,
						  0, 0, &a),
					 0);
			}
			clock_gettime(CLOCK_MONOTONIC, &t1);
			t[with] +=
			    (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
		}
	fprintf(stderr,
		"bench: mknod without ids %.0f/s, with ids %.0f/s (ratio %.3f; 10000 each, "
		"alternating rounds of 1000)\n",
		10000 / t[0], 10000 / t[1], t[0] / t[1]);
}

int main(void)
{
	char dir[] = "/tmp/test_meta_opid.XXXXXX";
	char cmd[256];
	struct strata_attr a;

	CHECK(mkdtemp(dir) != NULL);
	struct ns *ns = test_ns_open(dir);
	CHECK_EQ(ns_opid_count(ns), 0);
	CHECK_EQ(ns_mkdir(ns, NULL, ROOT, "op", 0755, 0, 0, &a), 0);
	test_entries(ns, a.ino);
	test_removals(ns, a.ino);
	test_failed_ops(ns, a.ino);
	test_race(ns, a.ino);
	ns_close(ns);
	test_reopen(dir);
	ns = test_ns_open(dir);
	CHECK_EQ(ns_lookup(ns, ROOT, "op", &a), 0);
	test_expiry(ns, a.ino);
	CHECK_EQ(ns_set_opid_limits(ns, NS_OPID_MAX, NS_OPID_TTL_MS), 0);
	bench_ids(ns, a.ino);
	ns_close(ns);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
	fprintf(stderr, "test_meta_opid: ok\n");
	return 0;
}
