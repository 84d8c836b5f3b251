/* test_registry.c — unit tests of strata-sandboxd's registry without a
 * backend of its own (a fake one that counts): insert and find, admission
 * with its reason (struct strata_err), persistence (state.json), and the
 * on-destroy hooks that the API's exec streams register: run once each, in
 * order, before the backend's destroy, with the reason, and a hook removed
 * before is not run. Exit 0 pass, 1 fail. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandboxd/sandboxd.h"
#include "tests/testutil.h"

static int destroyed;	 /* the fake backend's destroy calls */
static int hooks_before; /* hooks run before destroy */
static char order[8];	 /* which hooks ran, in order */

static int fake_destroy(struct sbd_backend *b, struct sbd_sandbox *sb)
{
	destroyed++;
	return 0;
}

struct hook {
	struct sbd_destroy_hook h;
	char name;
	char why[64];
};

static void on_destroy(struct sbd_destroy_hook *h, struct sbd_sandbox *sb, const char *why)
{
	struct hook *k = (struct hook *)h;
	size_t n = strlen(order);
	order[n] = k->name;
	hooks_before += destroyed == 0;
	snprintf(k->why, sizeof(k->why), "%s", why);
}

static struct sbd_sandbox *new_sandbox(struct sbd_backend *b, const char *id)
{
	struct sbd_sandbox *sb = calloc(1, sizeof(*sb));
	CHECK(sb);
	snprintf(sb->id, sizeof(sb->id), "%s", id);
	sb->image = strdup("img");
	sb->rootfs = strdup("/");
	sb->backend_name = strdup("fake");
	sb->backend = b;
	sb->cwd = strdup("/");
	sb->user = strdup("");
	sb->memory_mb = 100;
	sb->pids = 10;
	sb->reserves = true;
	return sb;
}

int main(void)
{
	char tmp[] = "/tmp/strata-registry-test.XXXXXX", sbdir[96], state[128];
	CHECK(mkdtemp(tmp));
	snprintf(sbdir, sizeof(sbdir), "%s/sandboxes", tmp);
	CHECK(mkdir(sbdir, 0755) == 0);
	struct sbd_backend fake = {.name = "fake", .destroy = fake_destroy};
	struct sandboxd d = {.listen_fd = -1, .tcp_fd = -1, .timer_fd = -1, .signal_fd = -1};
	d.cfg.state_dir = tmp;
	d.cfg.home = tmp;
	d.cfg.max_sandboxes = 1;
	d.cfg.memory_budget_mb = 1000;
	d.cfg.pids_budget = 1000;

	/* Admission: one fits, a second is refused with a reason. */
	struct sbd_sandbox *sb = new_sandbox(&fake, "sb-0000000000000001");
	struct strata_err e = {0};
	CHECK_EQ(sbd_registry_admit(&d, sb, &e), 0);
	CHECK_EQ(e.code, 0);
	sbd_registry_insert(&d, sb);
	CHECK(sbd_registry_find(&d, "sb-0000000000000001") == sb);
	CHECK_EQ(d.mem_used_mb, 100);
	struct sbd_sandbox *other = new_sandbox(&fake, "sb-0000000000000002");
	CHECK_EQ(sbd_registry_admit(&d, other, &e), -ENOSPC);
	CHECK(e.code == -ENOSPC && strstr(e.msg, "the limit is 1"));
	sbd_sandbox_free(other);

	/* Persistence: state.json is written. */
	CHECK_EQ(sbd_registry_persist(&d, sb), 0);
	snprintf(state, sizeof(state), "%s/sb-0000000000000001/state.json", sbdir);
	CHECK(access(state, F_OK) == 0);

	/* Hooks: a, b and c registered, b removed again; destroy runs c then a
	 * (newest first), before the backend, with the reason. */
	struct hook a = {.h.fn = on_destroy, .name = 'a'}, b = {.h.fn = on_destroy, .name = 'b'},
		    c = {.h.fn = on_destroy, .name = 'c'};
	sbd_sandbox_hook_add(sb, &a.h);
	sbd_sandbox_hook_add(sb, &b.h);
	sbd_sandbox_hook_add(sb, &c.h);
	sbd_sandbox_hook_del(sb, &b.h);
	sbd_sandbox_hook_del(sb, &b.h); /* not there any more: a no-op */
	CHECK_EQ(sbd_registry_destroy(&d, sb, "deleted by request"), 0);
	CHECK(!strcmp(order, "ca"));
	CHECK_EQ(hooks_before, 2);
	CHECK_EQ(destroyed, 1);
	CHECK(!strcmp(a.why, "deleted by request") && !strcmp(c.why, "deleted by request"));
	CHECK(!b.why[0]);
	CHECK(sbd_registry_find(&d, "sb-0000000000000001") == NULL);
	CHECK_EQ(d.count, 0);
	CHECK_EQ(d.mem_used_mb, 0);
	CHECK_EQ(d.deletes_total, 1);

	/* The state goes with the worker's batch, or at the wait. */
	sbd_registry_unpersist_wait(&d);
	CHECK(access(state, F_OK) < 0);
	sbd_images_free(&d);

	char cmd[128];
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	CHECK(system(cmd) == 0);
	printf("ok\n");
	return 0;
}
