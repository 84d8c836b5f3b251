/* test_images.c — unit tests of strata-sandboxd's image resolution without a
 * cluster (images.h): registered directories (--image NAME=DIR and
 * --images-dir JSON with env, cwd, user, entrypoint, cmd), the "x" / "x:latest"
 * alias, the image's own command, references that are neither registered nor
 * reachable in a store (-ENOENT with a reason naming the store, answered on
 * the loop after a worker looked), and the GET /v1/images listing. The
 * store path itself runs against a real cluster in test_image_store.sh.
 * Exit 0 pass, 1 fail. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "sandbox/sandboxd/images-internal.h"
#include "sandbox/sandboxd/loop.h"
#include "sandbox/sandboxd/pool.h"
#include "sandbox/sandboxd/sandboxd.h"
#include "tests/testutil.h"

/* What a store call answered (images.h), once the loop ran it. */
struct answer {
	struct sbd_image_waiter w;
	struct sbd_images_listing l;
	bool called;
	int r;
	struct sbd_image *im;
	struct strata_err e;
};

static void answered(struct sbd_image_waiter *w, int r, struct sbd_image *im,
		     const struct strata_err *e)
{
	struct answer *a = (struct answer *)w;
	a->called = true;
	a->r = r;
	a->im = im;
	if (e)
		a->e = *e;
}

static void listed(struct sbd_images_listing *l, int r, const struct strata_err *e)
{
	struct answer *a = (struct answer *)((char *)l - offsetof(struct answer, l));
	a->called = true;
	a->r = r;
	if (e)
		a->e = *e;
}

/* Runs d's loop until a was answered (10 s at most). */
static void run_until(struct sandboxd *d, struct answer *a)
{
	for (int i = 0; i < 1000 && !a->called; i++)
		CHECK_EQ(sbd_loop_run_once(d->loop, 10), 0);
	CHECK(a->called);
}

static void write_file(const char *path, const char *text)
{
	FILE *f = fopen(path, "w");
	CHECK(f);
	fputs(text, f);
	fclose(f);
}

static void strv_free(char **v)
{
	for (char **p = v; p && *p; p++)
		free(*p);
	free(v);
}

static void test_registered(struct sandboxd *d, const char *tmp)
{
	char spec[PATH_MAX + 16], root[PATH_MAX], jdir[PATH_MAX], json[2 * PATH_MAX];
	snprintf(root, sizeof(root), "%s/rootfs", tmp);
	CHECK(mkdir(root, 0755) == 0);
	snprintf(spec, sizeof(spec), "bb=%s", root);
	CHECK_EQ(sbd_images_add_spec(d, spec), 0);
	CHECK_EQ(sbd_images_add_spec(d, spec), -EEXIST);
	CHECK_EQ(sbd_images_add_spec(d, "nodir"), -EINVAL);
	CHECK_EQ(sbd_images_add_spec(d, "x=/nonexistent/dir"), -ENOENT);

	snprintf(jdir, sizeof(jdir), "%s/images", tmp);
	CHECK(mkdir(jdir, 0755) == 0);
	snprintf(
	    json, sizeof(json),
	    "{\"name\": \"py:3.11\", \"rootfs\": \"%s\", \"env\": [\"A=1\"], \"cwd\": \"/app\","
	    " \"user\": \"app\", \"entrypoint\": [\"/bin/sh\", \"-c\"], \"cmd\": [\"echo hi\"]}",
	    root);
	char p[PATH_MAX + 16];
	snprintf(p, sizeof(p), "%s/py.json", jdir);
	write_file(p, json);
	snprintf(p, sizeof(p), "%s/broken.json", jdir);
	write_file(p, "{\"name\": 1}");
	CHECK_EQ(sbd_images_load_dir(d, jdir), 1);

	struct sbd_image *im = sbd_images_find(d, "bb:latest"); /* alias of "bb" */
	CHECK(im && !strcmp(im->name, "bb") && !im->hex[0]);
	im = sbd_images_find(d, "py:3.11");
	CHECK(im && !strcmp(im->cwd, "/app") && !strcmp(im->user, "app"));
	CHECK(im->env && !strcmp(im->env[0], "A=1") && !im->env[1]);

	/* Acquiring a registered image takes no reference and needs no store. */
	struct strata_err why = {0};
	struct sbd_image *got = NULL;
	CHECK_EQ(sbd_images_acquire(d, "bb", &got, NULL, &why), 0);
	CHECK(got == sbd_images_find(d, "bb"));
	sbd_images_release(d, got); /* a no-op for a directory */

	/* Both registered images share the root: a sandbox's handle says which
	 * one it was made from. */
	char **cmd = sbd_image_default_cmd(d, im);
	CHECK(cmd && !strcmp(cmd[0], "/bin/sh") && !strcmp(cmd[1], "-c") &&
	      !strcmp(cmd[2], "echo hi") && !cmd[3]);
	strv_free(cmd);
	CHECK(sbd_image_default_cmd(d, got) == NULL); /* "bb" has no command */
	CHECK(sbd_image_default_cmd(d, NULL) == NULL);
	/* A re-adopted sandbox finds its image by the root: the first registered
	 * wins. */
	struct sbd_image *owner = sbd_images_adopt(d, im->rootfs);
	CHECK(owner == im || owner == got);
	CHECK(sbd_images_adopt(d, "/not/a/root") == NULL);
}

static void test_unknown_without_store(struct sandboxd *d)
{
	struct strata_err why = {0};
	struct sbd_image *got = NULL;
	struct answer a = {.w = {.fn = answered}};
	/* The home has no cluster.env and no mount: the store cannot be found,
	 * which a worker finds out (the loop never looks itself). */
	CHECK_EQ(sbd_images_acquire(d, "nope:latest", &got, &a.w, &why), -EINPROGRESS);
	CHECK(got == NULL && !a.called);
	run_until(d, &a);
	CHECK_EQ(a.r, -ENOENT);
	CHECK(a.im == NULL);
	CHECK(strstr(a.e.msg, "nope:latest") && strstr(a.e.msg, "no image store"));
}

static void test_listing(struct sandboxd *d)
{
	struct answer a = {.l = {.fn = listed}};
	struct strata_err why = {0};
	CHECK_EQ(sbd_images_list(d, &a.l, &why), -EINPROGRESS);
	run_until(d, &a);
	CHECK_EQ(a.r, 0);
	struct jw w = a.l.w;
	CHECK(w.err == 0);
	struct json *j = json_parse(w.buf, w.len, NULL, 0);
	struct json *list = json_get(j, "images");
	CHECK(list && list->type == JSON_ARR && list->len == 2);
	for (struct json *c = list->child; c; c = c->next)
		CHECK(!strcmp(json_cstr(json_get(c, "source")), "dir"));
	json_free(j);
	jw_done(&w);
}

int main(void)
{
	char tmp[] = "/tmp/strata-images-test.XXXXXX", home[64], state[64], cmd[128];
	CHECK(mkdtemp(tmp));
	snprintf(home, sizeof(home), "%s/home", tmp);
	snprintf(state, sizeof(state), "%s/state", tmp);
	CHECK(mkdir(home, 0755) == 0 && mkdir(state, 0755) == 0);
	struct sandboxd d = {.listen_fd = -1, .tcp_fd = -1, .timer_fd = -1, .signal_fd = -1};
	d.cfg.home = home;
	d.cfg.state_dir = state;
	d.cfg.store_timeout_ms = 5000;
	d.loop = sbd_loop_new();
	d.pool = sbd_pool_new();
	CHECK(d.loop && d.pool);

	test_registered(&d, tmp);
	test_unknown_without_store(&d);
	test_listing(&d);
	sbd_images_tick(&d);
	CHECK_EQ(sbd_images_drain(&d), 0);
	sbd_images_free(&d);
	CHECK(d.images == NULL && d.imgstore == NULL);
	sbd_pool_free(d.pool);
	sbd_loop_free(d.loop);

	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", tmp);
	CHECK(system(cmd) == 0);
	printf("ok\n");
	return 0;
}
