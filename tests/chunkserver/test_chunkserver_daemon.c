/* test_chunkserver_daemon.c — starts the real strata-meta and
 * strata-chunkserver (port 0, --addr-file), writes and reads chunks through
 * chunk_client with routing fetched from strata-meta, stops the chunkserver
 * with SIGTERM (clean exit), restarts it on a new port and checks that it
 * kept its node and target ids (target.id) and that the client finds it again
 * and reads the same bytes; a byte flipped on disk gives -EIO and one log line
 * naming the chunk and block. Skips (77) while strata-meta is not built. */
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "fs/chunk_client.h"
#include "fs/meta_client.h"
#include "chunkserver/chunk_format.h"
#include "chunkserver/target_id.h"
#include "tests/testutil.h"
#include "tests/fs/testkey.h"

#define MiB (1u << 20)

static pid_t spawn(char *const argv[], const char *log)
{
	pid_t pid = fork();
	CHECK(pid >= 0);
	if (pid == 0) {
		int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0644);
		if (fd >= 0)
			dup2(fd, 2);
		execv(argv[0], argv);
		_exit(127);
	}
	return pid;
}

/* Waits up to 20 s for path; returns its first line in buf, or -1. */
static int wait_addr(const char *path, pid_t pid, char *buf, size_t cap)
{
	for (int i = 0; i < 2000; i++) {
		FILE *f = fopen(path, "r");
		if (f) {
			char *ok = fgets(buf, (int)cap, f);
			fclose(f);
			if (ok) {
				buf[strcspn(buf, "\n")] = 0;
				return 0;
			}
		}
		if (waitpid(pid, NULL, WNOHANG) == pid)
			return -1;
		usleep(10000);
	}
	return -1;
}

static void show_log(const char *log)
{
	char cmd[512];
	snprintf(cmd, sizeof(cmd), "tail -20 '%s' >&2", log);
	if (system(cmd) != 0)
		fprintf(stderr, "(no log)\n");
}

struct cluster {
	char dir[64], bin[512], meta_addr[128], cs_addr[128];
	char t1[128], t2[128], cs_log[128], cs_addrf[128];
	pid_t meta, cs;
};

static pid_t start_cs(struct cluster *c)
{
	char cs_bin[600];
	snprintf(cs_bin, sizeof(cs_bin), "%s/strata-chunkserver", c->bin);
	unlink(c->cs_addrf);
	char *argv[] = {cs_bin, "--listen", "127.0.0.1:0", "--meta",	  c->meta_addr, "--target",
			c->t1,	"--target", c->t2,	   "--addr-file", c->cs_addrf,	NULL};
	pid_t pid = spawn(argv, c->cs_log);
	if (wait_addr(c->cs_addrf, pid, c->cs_addr, sizeof(c->cs_addr)) < 0) {
		show_log(c->cs_log);
		CHECK(!"strata-chunkserver did not start");
	}
	return pid;
}

static int stop(pid_t pid)
{
	int st;
	kill(pid, SIGTERM);
	CHECK_EQ(waitpid(pid, &st, 0), pid);
	return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

static void fill(uint8_t *p, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		p[i] = (uint8_t)(i * 13 + seed + (i >> 10));
}

/* Flips a data byte of chunk (1000, 0) on disk: the read must fail with EIO
 * and the chunkserver log must name the chunk and the block. */
static void corrupt_and_check_log(struct cluster *c, struct chunk_client *cc,
				  const struct strata_layout *layout)
{
	char p[300];
	int fd = -1;
	for (int i = 0; i < 2 && fd < 0; i++) {
		snprintf(p, sizeof(p), "%s/chunks/e8/%016llx/%08x", i ? c->t2 : c->t1, 1000ull, 0u);
		fd = open(p, O_RDWR);
	}
	CHECK(fd >= 0);
	uint8_t v;
	CHECK_EQ(pread(fd, &v, 1, CHUNK_V2_DATA_OFF + 3 * 65536 + 1), 1);
	v ^= 1;
	CHECK_EQ(pwrite(fd, &v, 1, CHUNK_V2_DATA_OFF + 3 * 65536 + 1), 1);
	close(fd);
	uint8_t buf[4096];
	CHECK_EQ(chunk_read(cc, layout, (struct chunk_id){1000, 0}, 3 * 65536, 4096, buf), -EIO);
	CHECK_EQ(chunk_read(cc, layout, (struct chunk_id){1000, 0}, 0, 4096, buf), 4096);
	char cmd[400];
	snprintf(cmd, sizeof(cmd), "grep -q 'Corrupt chunk ino 0x3e8 index 0 .*block 3' '%s'",
		 c->cs_log);
	if (system(cmd) != 0) {
		show_log(c->cs_log);
		CHECK(!"no corruption line in the chunkserver log");
	}
}

int main(void)
{
	test_key_setup(RPC_ROLE_ADMIN);
	struct cluster c = {0};
	const char *bin = getenv("STRATA_BIN");
	snprintf(c.bin, sizeof(c.bin), "%s", bin ? bin : "bin");
	char meta_bin[600];
	snprintf(meta_bin, sizeof(meta_bin), "%s/strata-meta", c.bin);
	if (access(meta_bin, X_OK) != 0) {
		fprintf(stderr, "skip: %s is not built yet\n", meta_bin);
		return 77;
	}
	snprintf(c.dir, sizeof(c.dir), "/tmp/strata-cs-daemon-XXXXXX");
	CHECK(mkdtemp(c.dir));
	char db[128], meta_addrf[128], meta_log[128];
	snprintf(db, sizeof(db), "%s/db", c.dir);
	snprintf(meta_addrf, sizeof(meta_addrf), "%s/meta.addr", c.dir);
	snprintf(meta_log, sizeof(meta_log), "%s/meta.log", c.dir);
	snprintf(c.t1, sizeof(c.t1), "%s/t1", c.dir);
	snprintf(c.t2, sizeof(c.t2), "%s/t2", c.dir);
	snprintf(c.cs_log, sizeof(c.cs_log), "%s/cs.log", c.dir);
	snprintf(c.cs_addrf, sizeof(c.cs_addrf), "%s/cs.addr", c.dir);

	char *margv[] = {meta_bin, "--listen",	  "127.0.0.1:0", "--db",
			 db,	   "--addr-file", meta_addrf,	 NULL};
	c.meta = spawn(margv, meta_log);
	if (wait_addr(meta_addrf, c.meta, c.meta_addr, sizeof(c.meta_addr)) < 0) {
		show_log(meta_log);
		CHECK(!"strata-meta did not start");
	}
	c.cs = start_cs(&c);

	struct meta_client *mc = meta_client_new(c.meta_addr, "test-cs-daemon", NULL);
	CHECK(mc);
	struct strata_routing rt = {0};
	CHECK_EQ(mgmt_routing(mc, &rt), 0);
	if (rt.ntables == 0 || rt.tables[0].nchains == 0) {
		fprintf(stderr,
			"skip: strata-meta made no chain table from the registered targets\n");
		stop(c.cs);
		stop(c.meta);
		return 77;
	}
	struct strata_layout layout = {.chunk_size = MiB, .table_id = rt.tables[0].table_id};
	strata_routing_done(&rt);

	struct chunk_client *cc = chunk_client_new(mc, NULL);
	CHECK(cc);
	uint8_t *a = malloc(MiB), *b = malloc(MiB);
	CHECK(a && b);
	for (uint32_t i = 0; i < 4; i++) {
		fill(a, MiB, i);
		CHECK_EQ(chunk_write(cc, &layout, (struct chunk_id){1000, i}, 0, MiB, a, 0), 0);
	}
	CHECK_EQ(chunk_sync(cc, &layout), 0);

	uint32_t n1, t1, n2, t2;
	CHECK_EQ(target_id_load(c.t1, &n1, &t1), 0);
	CHECK_EQ(target_id_load(c.t2, &n2, &t2), 0);
	CHECK(n1 != 0 && n1 == n2 && t1 != 0 && t2 != 0 && t1 != t2);

	CHECK_EQ(stop(c.cs), 0);
	c.cs = start_cs(&c); /* a new port: the client must refetch the routing */
	uint32_t n1b, t1b;
	CHECK_EQ(target_id_load(c.t1, &n1b, &t1b), 0);
	CHECK(n1b == n1 && t1b == t1);
	for (uint32_t i = 0; i < 4; i++) {
		fill(a, MiB, i);
		CHECK_EQ(chunk_read(cc, &layout, (struct chunk_id){1000, i}, 0, MiB, b), MiB);
		CHECK(memcmp(a, b, MiB) == 0);
	}
	corrupt_and_check_log(&c, cc, &layout);
	CHECK_EQ(chunk_remove_file(cc, &layout, 1000, 0), 0);
	CHECK_EQ(chunk_read(cc, &layout, (struct chunk_id){1000, 0}, 0, 10, b), 0);

	chunk_client_free(cc);
	meta_client_free(mc);
	CHECK_EQ(stop(c.cs), 0);
	stop(c.meta);
	free(a);
	free(b);
	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", c.dir);
	CHECK_EQ(system(cmd), 0);
	return 0;
}
