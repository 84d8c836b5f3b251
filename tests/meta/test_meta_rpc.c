/* test_meta_rpc.c — strata-meta through meta_client: starts the real
 * daemon on port 0 (--addr-file), runs every operation over RPC with the
 * client-side conventions (xattr size queries, -ERANGE, readdir paging,
 * name checks), the management calls, a malformed request (-EBADMSG), then
 * kill -9 and a restart on the same store: every acknowledged mutation must
 * still be there. Finally SIGTERM must stop the daemon with status 0. */
#include <errno.h>
#include <pthread.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sys/xattr.h>
#include <time.h>
#include <unistd.h>
#include "fs/meta_client.h"
#include "fs/proto.h"
#include "fs/rpc.h"
#include "tests/testutil.h"
#include "tests/fs/testkey.h"

#define ROOT STRATA_ROOT_INO

struct daemon {
	pid_t pid;
	char addr[128];
};

static void read_addr(const char *path, char *out, size_t cap)
{
	for (int i = 0; i < 1500; i++) {
		FILE *f = fopen(path, "r");
		if (f) {
			bool ok = fgets(out, (int)cap, f) != NULL;
			fclose(f);
			if (ok) {
				out[strcspn(out, "\n")] = 0;
				return;
			}
		}
		usleep(10000);
	}
	fprintf(stderr, "strata-meta did not write %s\n", path);
	exit(1);
}

static void start_meta(const char *bin, const char *dir, struct daemon *d)
{
	char db[512], addr_file[512], log[512];

	snprintf(db, sizeof(db), "%s/db", dir);
	snprintf(addr_file, sizeof(addr_file), "%s/addr", dir);
	snprintf(log, sizeof(log), "%s/meta.log", dir);
	unlink(addr_file);
	d->pid = fork();
	CHECK(d->pid >= 0);
	if (d->pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execl(bin, bin, "--listen", "127.0.0.1:0", "--db", db, "--addr-file", addr_file,
		      "--log-level", "debug", (char *)NULL);
		_exit(127);
	}
	read_addr(addr_file, d->addr, sizeof(d->addr));
}

static int stop_meta(struct daemon *d, int sig)
{
	int status = 0;

	kill(d->pid, sig);
	CHECK_EQ(waitpid(d->pid, &status, 0), d->pid);
	return status;
}

static void test_namespace(struct meta_client *mc)
{
	struct strata_attr a, f;
	uint64_t sid;
	char buf[256];

	CHECK_EQ(meta_ping(mc), 0);
	CHECK_EQ(meta_getattr(mc, ROOT, &a), 0);
	CHECK_EQ(a.mode, S_IFDIR | 0755);
	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "d", 0750, 10, 20, &a), 0);
	strata_ino_t d = a.ino;
	CHECK_EQ(a.uid, 10);
	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "d", 0750, 10, 20, &a), -EEXIST);
	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "..", 0750, 10, 20, &a), -EINVAL);
	CHECK_EQ(meta_create(mc, NULL, d, "f", 0644, 1, 1, O_CREAT | O_EXCL | O_RDWR, &f, &sid), 0);
	CHECK_EQ(meta_set_length(mc, f.ino, 9000, 12345), 0);
	CHECK_EQ(meta_close(mc, f.ino, sid, 10000, -1), 0);
	CHECK_EQ(meta_close(mc, f.ino, sid, -1, -1), -EBADF);
	CHECK_EQ(meta_lookup(mc, d, "f", &a), 0);
	CHECK_EQ(a.size, 10000);
	CHECK_EQ(a.mtime_ns, 12345);
	CHECK_EQ(meta_mknod(mc, NULL, d, "fifo", S_IFIFO | 0600, 0, 0, 0, &a), 0);
	CHECK_EQ(meta_symlink(mc, NULL, d, "s", "/some/where", 0, 0, &a), 0);
	CHECK_EQ(meta_readlink(mc, a.ino, buf, sizeof(buf)), 11);
	CHECK(strcmp(buf, "/some/where") == 0);
	CHECK_EQ(meta_readlink(mc, a.ino, buf, 4), -ERANGE);
	CHECK_EQ(meta_link(mc, NULL, f.ino, ROOT, "hard", &a), 0);
	CHECK_EQ(a.nlink, 2);
	CHECK_EQ(meta_link(mc, NULL, d, ROOT, "dlink", &a), -EPERM);
	CHECK_EQ(meta_rename(mc, NULL, ROOT, "hard", d, "hard2", 0), 0);
	CHECK_EQ(meta_rename(mc, NULL, ROOT, "d", d, "x", 0), -EINVAL);
	CHECK_EQ(meta_rmdir(mc, NULL, ROOT, "d"), -ENOTEMPTY);
	struct meta_removed rm;
	struct strata_attr before;
	CHECK_EQ(meta_getattr(mc, d, &before), 0);
	CHECK_EQ(meta_remove(mc, NULL, d, "hard2", false, &rm), 0);
	CHECK(rm.known); /* the removed inode and the parent after the removal */
	CHECK_EQ(rm.inode.ino, f.ino);
	CHECK_EQ(rm.inode.nlink, 1); /* "f" is left */
	CHECK_EQ(rm.parent.ino, d);
	CHECK(rm.parent.mtime_ns > before.mtime_ns); /* the removal's own change */
	CHECK_EQ(meta_lookup(mc, d, "hard2", &a), -ENOENT);
	CHECK_EQ(meta_remove(mc, NULL, d, "hard2", false, &rm), -ENOENT);
	struct strata_setattr sa = {.valid = STRATA_SET_MODE | STRATA_SET_MTIME_NOW, .mode = 0600};
	CHECK_EQ(meta_setattr(mc, f.ino, &sa, &a), 0);
	CHECK_EQ(a.mode, S_IFREG | 0600);
	CHECK(a.mtime_ns > 12345);
	sa = (struct strata_setattr){.valid = STRATA_SET_LAYOUT, .chunk_size = 1000};
	CHECK_EQ(meta_setattr(mc, d, &sa, &a), -EINVAL);
	CHECK_EQ(meta_open(mc, NULL, d, O_RDONLY, &sid), -EISDIR);
	CHECK_EQ(meta_open(mc, NULL, f.ino, O_RDWR, &sid), 0);
	CHECK_EQ(meta_clear_sessions(mc), 1);
	CHECK_EQ(meta_sync(mc), 0);

	/* batched closes: an orphan's two sessions in one request (the second
	 * is its last: the inode goes), a length recorded, an unknown session */
	uint64_t s1, s2, s3;
	struct strata_attr g, h;
	CHECK_EQ(meta_create(mc, NULL, d, "orph", 0644, 0, 0, O_CREAT | O_RDWR, &g, &s1), 0);
	CHECK_EQ(meta_open(mc, NULL, g.ino, O_RDONLY, &s2), 0);
	CHECK_EQ(meta_create(mc, NULL, d, "kept", 0644, 0, 0, O_CREAT | O_RDWR, &h, &s3), 0);
	CHECK_EQ(meta_unlink(mc, NULL, d, "orph"), 0);
	CHECK_EQ(meta_getattr(mc, g.ino, &a), 0); /* open: an orphan */
	struct meta_close_item items[] = {{g.ino, s1, -1, -1},
					  {g.ino, s2, -1, -1},
					  {h.ino, s3, 777, 4242},
					  {h.ino, 999999, -1, -1}};
	int res[4];
	CHECK_EQ(meta_close_many(mc, items, 4, res), 0);
	CHECK_EQ(res[0], 0);
	CHECK_EQ(res[1], 0);
	CHECK_EQ(res[2], 0);
	CHECK_EQ(res[3], -EBADF);
	CHECK_EQ(meta_getattr(mc, g.ino, &a), -ENOENT); /* its last session closed */
	CHECK_EQ(meta_lookup(mc, d, "kept", &a), 0);
	CHECK_EQ(a.size, 777);
	CHECK_EQ(a.mtime_ns, 4242);
	/* rename answers the moved inode, the one it replaced, both parents */
	struct strata_attr x1, x2, x3;
	struct meta_renamed mr;
	uint64_t sx;
	CHECK_EQ(meta_create(mc, NULL, d, "x1", 0644, 0, 0, O_CREAT | O_RDWR, &x1, &sx), 0);
	CHECK_EQ(meta_close(mc, x1.ino, sx, -1, -1), 0);
	CHECK_EQ(meta_create(mc, NULL, ROOT, "x2", 0644, 0, 0, O_CREAT | O_RDWR, &x2, &sx), 0);
	CHECK_EQ(meta_close(mc, x2.ino, sx, -1, -1), 0);
	CHECK_EQ(meta_rename_ex(mc, NULL, d, "x1", ROOT, "x2", 0, &mr), 0);
	CHECK(mr.known && mr.has_other);
	CHECK_EQ(mr.inode.ino, x1.ino);
	CHECK_EQ(mr.other.ino, x2.ino);
	CHECK_EQ(mr.other.nlink, 0); /* replaced: gone */
	CHECK_EQ(mr.parent.ino, d);
	CHECK_EQ(mr.newparent.ino, ROOT);
	CHECK_EQ(meta_create(mc, NULL, ROOT, "x3", 0644, 0, 0, O_CREAT | O_RDWR, &x3, &sx), 0);
	CHECK_EQ(meta_close(mc, x3.ino, sx, -1, -1), 0);
	CHECK_EQ(meta_rename_ex(mc, NULL, ROOT, "x2", ROOT, "x3", RENAME_EXCHANGE, &mr), 0);
	CHECK(mr.known && mr.has_other);
	CHECK_EQ(mr.inode.ino, x1.ino);
	CHECK_EQ(mr.other.ino, x3.ino);
	CHECK_EQ(mr.other.nlink, 1); /* exchanged: still there */
	CHECK_EQ(meta_rename_ex(mc, NULL, ROOT, "x2", ROOT, "x2", 0, &mr), 0);
	CHECK(!mr.known); /* the same inode under both names: nothing changed */
	CHECK_EQ(meta_close_many(mc, items, 0, res), -EINVAL);
	CHECK_EQ(meta_close_many(mc, items, META_CLOSE_MANY_MAX + 1, res), -EINVAL);
}

static void test_xattr_readdir(struct meta_client *mc)
{
	struct meta_dirent ents[10];
	struct strata_attr a;
	char buf[64], name[32], after[256] = "";
	int more = 1, total = 0;

	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "many", 0755, 0, 0, &a), 0);
	strata_ino_t d = a.ino;
	for (int i = 0; i < 25; i++) {
		snprintf(name, sizeof(name), "n%02d", i);
		CHECK_EQ(meta_mknod(mc, NULL, d, name, S_IFREG | 0644, 0, 0, 0, &a), 0);
	}
	while (more) {
		int n = meta_readdir(mc, d, after, total % 2 == 0, ents, 10, &more);
		CHECK(n > 0 && n <= 10);
		for (int i = 0; i < n; i++) {
			snprintf(name, sizeof(name), "n%02d", total + i);
			CHECK(strcmp(ents[i].name, name) == 0);
		}
		snprintf(after, sizeof(after), "%s", ents[n - 1].name);
		total += n;
	}
	CHECK_EQ(total, 25);
	CHECK_EQ(meta_setxattr(mc, NULL, d, "user.k", "hello", 5, XATTR_CREATE), 0);
	CHECK_EQ(meta_setxattr(mc, NULL, d, "user.k", "hello", 5, XATTR_CREATE), -EEXIST);
	CHECK_EQ(meta_getxattr(mc, d, "user.k", NULL, 0), 5);
	CHECK_EQ(meta_getxattr(mc, d, "user.k", buf, 3), -ERANGE);
	CHECK_EQ(meta_getxattr(mc, d, "user.k", buf, sizeof(buf)), 5);
	CHECK(memcmp(buf, "hello", 5) == 0);
	CHECK_EQ(meta_getxattr(mc, d, "user.none", buf, sizeof(buf)), -ENODATA);
	CHECK_EQ(meta_listxattr(mc, d, NULL, 0), 7);
	CHECK_EQ(meta_listxattr(mc, d, buf, sizeof(buf)), 7);
	CHECK(memcmp(buf, "user.k", 7) == 0);
	CHECK_EQ(meta_removexattr(mc, NULL, d, "user.k"), 0);
	CHECK_EQ(meta_removexattr(mc, NULL, d, "user.k"), -ENODATA);
}

static void test_mgmt(struct meta_client *mc)
{
	struct mgmt_target_info t[2] = {{0, "/a", 1 << 30, 1 << 29}, {0, "/b", 1 << 30, 1 << 28}};
	struct strata_routing rt;
	struct strata_statfs sf;
	uint32_t node = 0;

	CHECK_EQ(mgmt_register(mc, &node, "127.0.0.1:9999", t, 2), 0);
	CHECK(node > 0 && t[0].target_id > 0 && t[1].target_id > t[0].target_id);
	CHECK_EQ(mgmt_heartbeat(mc, node, t, 2), 0);
	CHECK_EQ(mgmt_heartbeat(mc, node + 100, t, 2), -ENOENT);
	CHECK_EQ(mgmt_routing(mc, &rt), 0);
	CHECK_EQ(rt.ntargets, 2);
	CHECK_EQ(rt.nchains, 2);
	CHECK_EQ(rt.ntables, 1);
	CHECK_EQ(rt.tables[0].nchains, 2);
	CHECK_EQ(rt.tables[0].replicas, 1); /* one node: factor 1 */
	CHECK_EQ(rt.chains[0].want, 1);
	uint32_t table = rt.tables[0].table_id;
	strata_routing_done(&rt);
	/* a directory's replication factor */
	struct strata_attr a;
	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "repl", 0755, 0, 0, &a), 0);
	struct strata_setattr sa = {.valid = STRATA_SET_REPLICAS, .replicas = 1};
	CHECK_EQ(meta_setattr(mc, a.ino, &sa, &a), 0);
	CHECK_EQ(a.layout.table_id, table);
	sa.replicas = 3;
	CHECK_EQ(meta_setattr(mc, a.ino, &sa, &a), -ERANGE); /* no table of 3 */
	sa.replicas = 9;
	CHECK_EQ(meta_setattr(mc, a.ino, &sa, &a), -EINVAL);
	CHECK_EQ(meta_statfs(mc, &sf), 0);
	CHECK_EQ(sf.total_bytes, 2ull << 30);
	CHECK_EQ(sf.free_bytes, (1ull << 29) + (1ull << 28));
	CHECK_EQ(sf.namemax, 255);
}

static void test_malformed(const char *addr)
{
	struct rpc_client *c = rpc_client_new(addr, NULL);
	struct rpc_reply rep = {0};
	struct wbuf w;

	wbuf_init(&w);
	wbuf_put_u8(&w, 1); /* LOOKUP wants u64 + str */
	CHECK_EQ(rpc_call(c, MSG_META_LOOKUP, &w, 0, &rep), -EBADMSG);
	rpc_reply_done(&rep);
	CHECK_EQ(rpc_call(c, MSG_MGMT_REGISTER, &w, 0, &rep), -EBADMSG);
	rpc_reply_done(&rep);
	/* a type no role may send (rpc_roles.c fails closed): refused */
	CHECK_EQ(rpc_call(c, 0x01ff, &w, 0, &rep), -EPERM);
	rpc_reply_done(&rep);
	wbuf_done(&w);
	rpc_client_free(c);
}

struct bench_arg {
	struct meta_client *mc;
	strata_ino_t dir;
	int id, n;
};

static void *bench_main(void *p)
{
	struct bench_arg *b = p;
	struct strata_attr a;
	uint64_t sid;
	char name[32];

	for (int i = 0; i < b->n; i++) {
		snprintf(name, sizeof(name), "t%d-%05d", b->id, i);
		CHECK_EQ(meta_create(b->mc, NULL, b->dir, name, 0644, 0, 0,
				     O_CREAT | O_EXCL | O_RDWR, &a, &sid),
			 0);
	}
	return NULL;
}

/* A figure, not a pass/fail bound: creates/s over RPC from 4 threads. */
static void bench_create(struct meta_client *mc)
{
	struct bench_arg b[4];
	pthread_t th[4];
	struct timespec t0, t1;
	struct strata_attr a;

	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "bench", 0755, 0, 0, &a), 0);
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (int i = 0; i < 4; i++) {
		b[i] = (struct bench_arg){mc, a.ino, i, 1000};
		CHECK_EQ(pthread_create(&th[i], NULL, bench_main, &b[i]), 0);
	}
	for (int i = 0; i < 4; i++)
		pthread_join(th[i], NULL);
	clock_gettime(CLOCK_MONOTONIC, &t1);
	double s = (double)(t1.tv_sec - t0.tv_sec) + (t1.tv_nsec - t0.tv_nsec) / 1e9;
	fprintf(stderr, "bench: 4000 meta_create over RPC (4 threads) in %.2f s: %.0f/s\n", s,
		4000 / s);
	CHECK_EQ(meta_clear_sessions(mc), 4000);
}

/* Acknowledged, never explicitly synced mutations survive kill -9. */
static void write_before_kill(struct meta_client *mc, strata_ino_t *ret_dir)
{
	struct strata_attr a;
	char name[32];

	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "crash", 0755, 0, 0, &a), 0);
	*ret_dir = a.ino;
	for (int i = 0; i < 200; i++) {
		snprintf(name, sizeof(name), "c%03d", i);
		CHECK_EQ(meta_mknod(mc, NULL, a.ino, name, S_IFREG | 0644, 0, 0, 0, NULL), 0);
	}
	CHECK_EQ(meta_rename(mc, NULL, a.ino, "c000", ROOT, "renamed", 0), 0);
	CHECK_EQ(meta_setxattr(mc, NULL, a.ino, "user.last", "1", 1, 0), 0);
}

/* Operation ids over the wire (meta/ns_opid.c): the same id twice is one
 * mutation with one answer; the record survives kill -9 of strata-meta. */
static const struct meta_opid g_op_mkdir = {0xfeedf00d, 7}, g_op_create = {0xfeedf00d, 9};
static struct strata_attr g_op_attr;
static uint64_t g_op_session;

static void test_opids(struct meta_client *mc)
{
	const struct meta_opid other = {0xfeedf00d, 8}, unl = {0xfeedf00d, 10};
	struct strata_attr a, b;
	uint64_t s;

	CHECK_EQ(meta_keeps_opids(mc), 1);
	CHECK_EQ(meta_mkdir(mc, &g_op_mkdir, ROOT, "opdir", 0755, 0, 0, &g_op_attr), 0);
	CHECK_EQ(meta_mkdir(mc, &g_op_mkdir, ROOT, "opdir", 0755, 0, 0, &a), 0);
	CHECK_EQ(a.ino, g_op_attr.ino);
	CHECK_EQ(meta_mkdir(mc, &other, ROOT, "opdir", 0755, 0, 0, &a), -EEXIST);
	CHECK_EQ(meta_create(mc, &g_op_create, g_op_attr.ino, "f", 0644, 0, 0,
			     O_CREAT | O_EXCL | O_RDWR, &b, &g_op_session),
		 0);
	CHECK_EQ(meta_create(mc, &g_op_create, g_op_attr.ino, "f", 0644, 0, 0,
			     O_CREAT | O_EXCL | O_RDWR, &a, &s),
		 0);
	CHECK_EQ(a.ino, b.ino);
	CHECK_EQ(s, g_op_session);
	CHECK_EQ(meta_unlink(mc, &unl, g_op_attr.ino, "f"), 0);
	CHECK_EQ(meta_unlink(mc, &unl, g_op_attr.ino, "f"), 0);
	CHECK_EQ(meta_lookup(mc, g_op_attr.ino, "f", &a), -ENOENT);
}

static void check_opids_after_restart(struct meta_client *mc)
{
	struct strata_attr a;
	uint64_t s;

	CHECK_EQ(meta_mkdir(mc, &g_op_mkdir, ROOT, "opdir", 0755, 0, 0, &a), 0);
	CHECK_EQ(a.ino, g_op_attr.ino);
	CHECK_EQ(meta_create(mc, &g_op_create, g_op_attr.ino, "f", 0644, 0, 0,
			     O_CREAT | O_EXCL | O_RDWR, &a, &s),
		 0);
	CHECK_EQ(s, g_op_session);
	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "opdir", 0755, 0, 0, &a), -EEXIST);
}

static void check_after_restart(struct meta_client *mc, strata_ino_t dir)
{
	struct meta_dirent ents[300];
	struct strata_attr a;
	int more;

	CHECK_EQ(meta_lookup(mc, ROOT, "crash", &a), 0);
	CHECK_EQ(a.ino, dir);
	CHECK_EQ(meta_readdir(mc, dir, "", false, ents, 300, &more), 199);
	CHECK_EQ(meta_lookup(mc, ROOT, "renamed", &a), 0);
	CHECK_EQ(meta_getxattr(mc, dir, "user.last", NULL, 0), 1);
	CHECK_EQ(meta_lookup(mc, ROOT, "many", &a), 0);
	CHECK_EQ(meta_mkdir(mc, NULL, ROOT, "after", 0755, 0, 0, &a), 0);
	CHECK(a.ino > dir);
}

int main(void)
{
	test_key_setup(RPC_ROLE_ADMIN);
	const char *bindir = getenv("STRATA_BIN");
	char bin[512], dir[] = "/tmp/test_meta_rpc.XXXXXX", cmd[600];
	struct daemon d;
	strata_ino_t crash_dir;

	snprintf(bin, sizeof(bin), "%s/strata-meta", bindir ? bindir : "bin");
	if (access(bin, X_OK) != 0) {
		fprintf(stderr, "skip: %s not built\n", bin);
		return 77;
	}
	CHECK(mkdtemp(dir) != NULL);
	start_meta(bin, dir, &d);
	struct meta_client *mc = meta_client_new(d.addr, "rpc-test", NULL);
	test_namespace(mc);
	test_xattr_readdir(mc);
	test_mgmt(mc);
	test_malformed(d.addr);
	bench_create(mc);
	write_before_kill(mc, &crash_dir);
	test_opids(mc);
	meta_client_free(mc);
	int st = stop_meta(&d, SIGKILL);
	CHECK(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);

	start_meta(bin, dir, &d);
	mc = meta_client_new(d.addr, "rpc-test", NULL);
	check_after_restart(mc, crash_dir);
	check_opids_after_restart(mc);
	meta_client_free(mc);
	st = stop_meta(&d, SIGTERM);
	CHECK(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	CHECK_EQ(system(cmd), 0);
	fprintf(stderr, "test_meta_rpc: ok\n");
	return 0;
}
