/* images.c — registered image directories of strata-sandboxd (images.h).
 *
 * An image here is a root filesystem directory registered by name, from
 * `--image NAME=DIR` or from a directory of NAME.json files. They come first
 * when a reference is resolved (an explicit choice of the node's operator,
 * and no round trip to the cluster); everything else is looked up in the
 * cluster's image store (image_store.c). Also the helpers both share: image
 * entries and JSON string arrays. */
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "fs/cleanup.h"
#include "sandbox/sandboxd/images-internal.h"
#include "sandbox/sandboxd/sandboxd.h"

static bool valid_name(const char *n)
{
	size_t len = strlen(n);
	if (!len || len > 200)
		return false;
	for (const char *p = n; *p; p++)
		if (!((*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') ||
		      (*p >= '0' && *p <= '9') || strchr("._-:/@", *p)))
			return false;
	return true;
}

void sbd_images_strv_free(char **v)
{
	for (char **e = v; e && *e; e++)
		free(*e);
	free(v);
}

void sbd_image_config_clear(struct sbd_image *im)
{
	sbd_images_strv_free(im->env);
	sbd_images_strv_free(im->entrypoint);
	sbd_images_strv_free(im->cmd);
	free(im->cwd);
	free(im->user);
	im->env = im->entrypoint = im->cmd = NULL;
	im->cwd = im->user = NULL;
}

void sbd_image_config_move(struct sbd_image *im, struct sbd_image *from)
{
	sbd_image_config_clear(im);
	im->env = from->env;
	im->entrypoint = from->entrypoint;
	im->cmd = from->cmd;
	im->cwd = from->cwd;
	im->user = from->user;
	from->env = from->entrypoint = from->cmd = NULL;
	from->cwd = from->user = NULL;
}

void sbd_image_free(struct sbd_image *im)
{
	if (!im)
		return;
	free(im->name);
	free(im->rootfs);
	sbd_image_config_clear(im);
	free(im->last_ref);
	free(im);
}

static int add(struct sandboxd *d, struct sbd_image *im)
{
	struct stat st;
	if (!valid_name(im->name))
		return -EINVAL;
	if (stat(im->rootfs, &st) < 0)
		return -errno;
	if (!S_ISDIR(st.st_mode))
		return -ENOTDIR;
	if (sbd_images_find(d, im->name) && !strcmp(sbd_images_find(d, im->name)->name, im->name))
		return -EEXIST;
	char *abs = realpath(im->rootfs, NULL);
	if (!abs)
		return -errno;
	free(im->rootfs);
	im->rootfs = abs;
	im->next = d->images;
	d->images = im;
	return 0;
}

int sbd_images_add_spec(struct sandboxd *d, const char *spec)
{
	const char *eq = strchr(spec, '=');
	if (!eq || eq == spec || !eq[1])
		return -EINVAL;
	struct sbd_image *im = calloc(1, sizeof(*im));
	if (!im)
		return -ENOMEM;
	im->name = strndup(spec, eq - spec);
	im->rootfs = strdup(eq + 1);
	if (!im->name || !im->rootfs) {
		sbd_image_free(im);
		return -ENOMEM;
	}
	int r = add(d, im);
	if (r < 0)
		sbd_image_free(im);
	return r;
}

char **sbd_images_str_array(const struct json *a, bool env)
{
	if (!a || a->type != JSON_ARR || a->len > SBD_MAX_ENV)
		return NULL;
	char **v = calloc(a->len + 1, sizeof(char *));
	size_t i = 0;
	for (struct json *c = a->child; v && c; c = c->next) {
		const char *s = json_cstr(c);
		if (!s || (env && !strchr(s, '=')) || !(v[i++] = strdup(s))) {
			sbd_images_strv_free(v);
			return NULL;
		}
	}
	return v;
}

static int load_one(struct sandboxd *d, int dfd, const char *fname)
{
	_cleanup_close_ int fd = openat(dfd, fname, O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		return -errno;
	char buf[65536];
	ssize_t n = read(fd, buf, sizeof(buf));
	if (n < 0)
		return -errno;
	struct json *j = json_parse(buf, (size_t)n, NULL, 0);
	const char *name = json_cstr(json_get(j, "name")), *root = json_cstr(json_get(j, "rootfs"));
	int r = -EINVAL;
	struct sbd_image *im = calloc(1, sizeof(*im));
	if (j && name && root && im) {
		im->name = strdup(name);
		im->rootfs = strdup(root);
		im->env =
		    json_get(j, "env") ? sbd_images_str_array(json_get(j, "env"), true) : NULL;
		im->entrypoint = sbd_images_str_array(json_get(j, "entrypoint"), false);
		im->cmd = sbd_images_str_array(json_get(j, "cmd"), false);
		const char *cwd = json_cstr(json_get(j, "cwd")),
			   *user = json_cstr(json_get(j, "user"));
		im->cwd = cwd ? strdup(cwd) : NULL;
		im->user = user ? strdup(user) : NULL;
		r = im->name && im->rootfs ? add(d, im) : -ENOMEM;
	}
	if (r < 0)
		sbd_image_free(im);
	json_free(j);
	return r;
}

int sbd_images_load_dir(struct sandboxd *d, const char *dir)
{
	DIR *dp = opendir(dir);
	if (!dp)
		return -errno;
	int count = 0;
	struct dirent *de;
	while ((de = readdir(dp))) {
		size_t n = strlen(de->d_name);
		if (n > 5 && !strcmp(de->d_name + n - 5, ".json") &&
		    load_one(d, dirfd(dp), de->d_name) == 0)
			count++;
	}
	closedir(dp);
	return count;
}

static size_t strv_len(char **v)
{
	size_t n = 0;
	while (v && v[n])
		n++;
	return n;
}

const char *sbd_image_rootfs(const struct sbd_image *im)
{
	return im->rootfs;
}

const char *sbd_image_name(const struct sbd_image *im, const char *ref)
{
	return im->hex[0] ? ref : im->name;
}

bool sbd_image_is_store(const struct sbd_image *im)
{
	return im && im->hex[0];
}

const char *sbd_image_digest(const struct sbd_image *im)
{
	return sbd_image_is_store(im) ? im->hex : NULL;
}

struct sbd_image_defaults sbd_image_defaults(const struct sbd_image *im)
{
	return (struct sbd_image_defaults){.env = im->env, .cwd = im->cwd, .user = im->user};
}

char **sbd_image_default_cmd(struct sandboxd *d, struct sbd_image *im)
{
	/* A store image's config was read at its acquire, or on a worker
	 * before the request came here (sbd_images_config). */
	size_t ne = im ? strv_len(im->entrypoint) : 0, nc = im ? strv_len(im->cmd) : 0, k = 0;
	char **v = ne + nc ? calloc(ne + nc + 1, sizeof(char *)) : NULL;
	for (size_t i = 0; v && i < ne + nc; i++)
		if (!(v[k++] = strdup(i < ne ? im->entrypoint[i] : im->cmd[i - ne]))) {
			sbd_images_strv_free(v);
			return NULL;
		}
	return v;
}

struct sbd_image *sbd_images_find(struct sandboxd *d, const char *name)
{
	for (struct sbd_image *im = d->images; im; im = im->next)
		if (!strcmp(im->name, name))
			return im;
	/* "x" matches "x:latest" and "x:latest" matches a plain "x". */
	size_t n = strlen(name);
	for (struct sbd_image *im = d->images; im; im = im->next) {
		size_t k = strlen(im->name);
		if (k == n + 7 && !strncmp(im->name, name, n) && !strcmp(im->name + n, ":latest"))
			return im;
		if (n == k + 7 && !strncmp(name, im->name, k) && !strcmp(name + k, ":latest"))
			return im;
	}
	return NULL;
}

void sbd_images_free(struct sandboxd *d)
{
	sbd_images_store_free(d);
	while (d->images) {
		struct sbd_image *im = d->images;
		d->images = im->next;
		sbd_image_free(im);
	}
}
