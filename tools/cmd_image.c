/* cmd_image.c — `strata image`: import, pull, ls, inspect, rm, prefetch,
 * mount, umount, gc, resign. A thin layer over imagesvc/ (store.h, mount.h,
 * prefetch.h) and imagesvc/pull/ (oci.h, registry.h): it finds the store on
 * the cluster's mount (<mount>/.strata/images) and the node cache
 * (<home>/cache/images), parses options, and prints results (text, or JSON
 * with --json) or one error line. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "tools/cli.h"
#include "imagesvc/image_auth.h"
#include "imagesvc/mount.h"
#include "imagesvc/pull/oci.h"
#include "imagesvc/prefetch.h"
#include "imagesvc/pull/registry.h"
#include "imagesvc/store.h"
#include "fs/json.h"

#define VERB "image"

enum {
	O_HOME = CLI_OPT_HOME,
	O_JSON = CLI_OPT_JSON,
	O_NAME = CLI_OPT_OWN << 0,
	O_INSECURE = CLI_OPT_OWN << 1,
	O_EAGER = CLI_OPT_OWN << 2,
	O_FORCE = CLI_OPT_OWN << 3,
	O_WRITABLE = CLI_OPT_OWN << 4,
	O_NOPF = CLI_OPT_OWN << 5,
	O_RECORD = CLI_OPT_OWN << 6,
	O_THREADS = CLI_OPT_OWN << 7,
	O_TAG = CLI_OPT_OWN << 8,
};

struct opts {
	const char *home, *name, *tag;
	bool json, insecure, eager, force, writable, no_prefetch, record, help;
	int threads, record_after;
	unsigned seen;
	char **pos;
	int npos;
};

struct ctx {
	struct cli_home h;
	struct img_store *s;
	char cache[CLI_PATH];
	struct opts o;
};

struct sub {
	const char *name;
	int (*fn)(struct ctx *c);
	unsigned allowed;
	int min_pos, max_pos;
	const char *usage;
};

static double now_s(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (double)ts.tv_sec + ts.tv_nsec / 1e9;
}

static int fail(const char *sub, const struct strata_err *e, int r)
{
	cli_err(VERB, "%s: %s", sub, e->code ? e->msg : strerror(-r));
	return 1;
}

/* ---- import / pull --------------------------------------------------------------- */
static int stage_dir(struct ctx *c, char *buf)
{
	cli_path(buf, &c->h, "cache/stage-%d-%lld", (int)getpid(), cli_now_ms());
	char parent[CLI_PATH];
	return cli_mkdir_p(cli_path(parent, &c->h, "cache"), 0755);
}

/* Default name of an imported PATH: its base name without extensions. */
static void default_name(const char *path, char *buf, size_t cap)
{
	char tmp[CLI_PATH];
	snprintf(tmp, sizeof(tmp), "%s", path);
	size_t n = strlen(tmp);
	while (n > 1 && tmp[n - 1] == '/')
		tmp[--n] = '\0';
	const char *b = strrchr(tmp, '/') ? strrchr(tmp, '/') + 1 : tmp;
	snprintf(buf, cap, "%s", b);
	char *dot = strchr(buf, '.');
	if (dot && dot != buf)
		*dot = '\0';
	for (char *p = buf; *p; p++)
		if (*p == ':' || (unsigned char)*p < 0x21)
			*p = '_';
}

static void print_import(struct ctx *c, const char *name, const struct oci_image *img,
			 const struct img_import_stats *st, double secs)
{
	if (!c->o.json) {
		printf("%s %s: %zu layers, %llu files, %llu bytes; %llu chunks (%llu new, %llu "
		       "deduplicated), %u blobs (%u new), metadata %llu bytes%s, %.2f s\n",
		       name ? name : "(no name)", img->manifest_digest, img->n_layers,
		       (unsigned long long)st->files, (unsigned long long)st->bytes,
		       (unsigned long long)st->chunks, (unsigned long long)st->chunks_new,
		       (unsigned long long)st->chunks_dedup, st->n_blobs, st->blobs_new,
		       (unsigned long long)st->meta_size, st->existed ? " (already stored)" : "",
		       secs);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	cli_jw_kstr0(&w, "name", name);
	jw_kstr(&w, "digest", img->manifest_digest);
	cli_jw_ku64(&w, "layers", img->n_layers);
	cli_jw_ku64(&w, "files", st->files);
	cli_jw_ku64(&w, "bytes", st->bytes);
	cli_jw_ku64(&w, "chunks", st->chunks);
	cli_jw_ku64(&w, "chunks_new", st->chunks_new);
	cli_jw_ku64(&w, "chunks_dedup", st->chunks_dedup);
	jw_kint(&w, "blobs", st->n_blobs);
	jw_kint(&w, "blobs_new", st->blobs_new);
	cli_jw_ku64(&w, "meta_size", st->meta_size);
	jw_kbool(&w, "existed", st->existed);
	cli_jw_ksecs(&w, "seconds", secs);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

/* Converts a loaded stage into the store under name. */
static int import_stage(struct ctx *c, const char *stage, const char *name, double t0)
{
	struct strata_err oe = {0};
	struct strata_err e = {0};
	struct oci_image *img = NULL;
	char man[CLI_PATH], cfg[CLI_PATH];
	int r = oci_stage_load(stage, false, &img, &oe);
	if (r < 0) {
		cli_err(VERB, "import: %s", oe.msg[0] ? oe.msg : strerror(-r));
		return 1;
	}
	struct img_layer_src *ls = calloc(img->n_layers + 1, sizeof(*ls));
	for (size_t i = 0; ls && i < img->n_layers; i++)
		ls[i] = (struct img_layer_src){img->layers[i].path, img->layers[i].digest};
	snprintf(man, sizeof(man), "%s/manifest.json", stage);
	snprintf(cfg, sizeof(cfg), "%s/config.json", stage);
	struct img_import_req req = {.manifest_digest = img->manifest_digest,
				     .name = name,
				     .manifest_path = man,
				     .config_path = cfg,
				     .layers = ls,
				     .n_layers = img->n_layers};
	struct img_import_stats st = {0};
	r = ls ? img_store_import(c->s, &req, &st, &e) : -ENOMEM;
	if (r == 0)
		print_import(c, name, img, &st, now_s() - t0);
	else
		fail("import", &e, r);
	free(ls);
	oci_image_free(img);
	return r < 0 ? 1 : 0;
}

static int rm_stage(const char *stage)
{
	char cmd[CLI_PATH + 32];
	snprintf(cmd, sizeof(cmd), "rm -rf -- '%s'", stage);
	return access(stage, F_OK) == 0 ? system(cmd) : 0;
}

static int sub_import(struct ctx *c)
{
	char stage[CLI_PATH], name[256];
	struct strata_err oe = {0};
	double t0 = now_s();
	const char *src = c->o.pos[0];
	if (stage_dir(c, stage) < 0)
		return cli_err(VERB, "import: cannot create the staging directory"), 1;
	if (c->o.name)
		snprintf(name, sizeof(name), "%s", c->o.name);
	else
		default_name(src, name, sizeof(name));
	int r = oci_import(src, c->o.tag, stage, NULL, &oe);
	if (r < 0)
		cli_err(VERB, "import: %s", oe.msg[0] ? oe.msg : strerror(-r));
	else
		r = import_stage(c, stage, name, t0) ? -EIO : 0;
	rm_stage(stage);
	return r < 0 ? 1 : 0;
}

static int sub_pull(struct ctx *c)
{
	char stage[CLI_PATH], name[512];
	struct strata_err oe = {0};
	struct registry_ref ref = {0};
	struct registry_opts ro = {.insecure = c->o.insecure};
	double t0 = now_s();
	int r = registry_ref_parse(c->o.pos[0], &ref, &oe);
	if (r < 0)
		return cli_err(VERB, "pull: %s", oe.msg[0] ? oe.msg : strerror(-r)), 1;
	if (c->o.name)
		snprintf(name, sizeof(name), "%s", c->o.name);
	else
		snprintf(name, sizeof(name), "%s:%s", ref.repo, ref.tag ? ref.tag : "latest");
	registry_ref_done(&ref);
	if (stage_dir(c, stage) < 0)
		return cli_err(VERB, "pull: cannot create the staging directory"), 1;
	r = registry_pull(c->o.pos[0], stage, &ro, &oe);
	if (r < 0)
		cli_err(VERB, "pull: %s", oe.msg[0] ? oe.msg : strerror(-r));
	else
		r = import_stage(c, stage, name, t0) ? -EIO : 0;
	rm_stage(stage);
	return r < 0 ? 1 : 0;
}

/* ---- ls / inspect ------------------------------------------------------------------ */
struct ls_ctx {
	struct ctx *c;
	int n;
	struct jw w; /* --json: the array */
};

static int ls_one(void *arg, const char *name, const char *hex)
{
	struct ls_ctx *l = arg;
	struct img_record rec;
	struct strata_err e = {0};
	char node[256] = "";
	if (img_store_record(l->c->s, hex, &rec, &e) < 0) {
		/* Not listed as usable, but not hidden either: say why. */
		if (name)
			cli_err(VERB, "ls: %s (named %s)", e.msg, name);
		else
			cli_err(VERB, "ls: %s", e.msg);
		return 0;
	}
	int leases = img_store_leases(l->c->s, hex, node, sizeof(node));
	if (l->c->o.json) {
		char digest[80];
		snprintf(digest, sizeof(digest), "sha256:%s", hex);
		jw_obj(&l->w);
		cli_jw_kstr0(&l->w, "name", name);
		jw_kstr(&l->w, "digest", digest);
		cli_jw_ku64(&l->w, "bytes", rec.bytes);
		jw_kint(&l->w, "layers", rec.n_layers);
		jw_kint(&l->w, "blobs", rec.n_blobs);
		cli_jw_ku64(&l->w, "meta_size", rec.meta_size);
		cli_jw_ku64(&l->w, "created", rec.created);
		jw_kint(&l->w, "mounted", leases > 0 ? leases : 0);
		jw_obj_end(&l->w);
	} else {
		if (l->n == 0)
			printf("%-32s %-12s %12s %6s %s\n", "NAME", "DIGEST", "BYTES", "LAYERS",
			       "MOUNTED");
		printf("%-32s %-12.12s %12llu %6u %s\n", name ? name : "<none>", hex,
		       (unsigned long long)rec.bytes, rec.n_layers, leases > 0 ? node : "-");
	}
	l->n++;
	img_record_done(&rec);
	return 0;
}

static int sub_ls(struct ctx *c)
{
	struct ls_ctx l = {c, 0};
	jw_init(&l.w);
	jw_arr(&l.w);
	int r = img_store_list(c->s, ls_one, &l);
	jw_arr_end(&l.w);
	if (c->o.json)
		cli_jw_print(&l.w);
	jw_done(&l.w);
	if (r < 0)
		return cli_err(VERB, "ls: %s", strerror(-r)), 1;
	return 0;
}

static void inspect_json(struct ctx *c, const char *hex, const struct img_record *rec,
			 const char *names, int leases, const char *node)
{
	char p[CLI_PATH], d[80];
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	snprintf(d, sizeof(d), "sha256:%s", hex);
	jw_kstr(&w, "digest", d);
	cli_jw_kstr0(&w, "names", names);
	cli_jw_ku64(&w, "bytes", rec->bytes);
	cli_jw_ku64(&w, "chunks", rec->chunks);
	cli_jw_ku64(&w, "chunks_new", rec->chunks_new);
	cli_jw_ku64(&w, "meta_size", rec->meta_size);
	cli_jw_ku64(&w, "created", rec->created);
	jw_kstr(&w, "mounted_on", leases > 0 ? node : "");
	jw_kbool(&w, "prefetch", img_prefetch_exists(c->s, hex));
	jw_key(&w, "layers");
	jw_arr(&w);
	for (uint32_t i = 0; i < rec->n_layers; i++) {
		memcpy(d, "sha256:", 7);
		img_digest_hex(rec->layers[i], d + 7);
		jw_str(&w, d);
	}
	jw_arr_end(&w);
	jw_key(&w, "blobs");
	jw_arr(&w);
	for (uint32_t i = 0; i < rec->n_blobs; i++) {
		img_store_blob_path(c->s, rec->blobs[i], "data", p, sizeof(p));
		jw_obj(&w);
		jw_kint(&w, "id", rec->blobs[i]);
		jw_kstr(&w, "path", p);
		jw_obj_end(&w);
	}
	jw_arr_end(&w);
	img_store_image_path(c->s, hex, "meta.img", p, sizeof(p));
	jw_kstr(&w, "meta", p);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static int sub_inspect(struct ctx *c)
{
	struct strata_err e = {0};
	struct img_record rec;
	char hex[65], names[1024], node[256] = "", lh[65], p[CLI_PATH];
	int r = img_store_resolve(c->s, c->o.pos[0], hex, &e);
	if (r < 0)
		return fail("inspect", &e, r);
	if ((r = img_store_record(c->s, hex, &rec, &e)) < 0)
		return fail("inspect", &e, r);
	img_store_names_of(c->s, hex, names, sizeof(names));
	int leases = img_store_leases(c->s, hex, node, sizeof(node));
	if (c->o.json) {
		inspect_json(c, hex, &rec, names, leases, node);
	} else {
		printf("digest     sha256:%s\nnames      %s\nbytes      %llu\nchunks     %llu "
		       "(%llu stored by this image)\nmetadata   %llu bytes\nmounted on %s\n"
		       "prefetch   %s\n",
		       hex, names[0] ? names : "-", (unsigned long long)rec.bytes,
		       (unsigned long long)rec.chunks, (unsigned long long)rec.chunks_new,
		       (unsigned long long)rec.meta_size, leases > 0 ? node : "-",
		       img_prefetch_exists(c->s, hex) ? "recorded" : "none");
		for (uint32_t i = 0; i < rec.n_layers; i++) {
			img_digest_hex(rec.layers[i], lh);
			printf("layer %-4u sha256:%s\n", i, lh);
		}
		for (uint32_t i = 0; i < rec.n_blobs; i++) {
			img_store_blob_path(c->s, rec.blobs[i], "data", p, sizeof(p));
			printf("blob  %-4u %s\n", i, p);
		}
	}
	img_record_done(&rec);
	return 0;
}

/* ---- rm / gc / prefetch ------------------------------------------------------------- */
static int sub_rm(struct ctx *c)
{
	struct strata_err e = {0};
	int r = img_store_rm(c->s, c->o.pos[0], c->o.force, &e);
	return r < 0 ? fail("rm", &e, r) : 0;
}

static int sub_gc(struct ctx *c)
{
	int r = img_store_gc(c->s);
	if (r < 0)
		return cli_err(VERB, "gc: %s", strerror(-r)), 1;
	if (c->o.json) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kint(&w, "blobs_removed", r);
		jw_obj_end(&w);
		cli_jw_print(&w);
	} else {
		printf("%d unreferenced blob(s) removed\n", r);
	}
	return 0;
}

/* resign: one error line per refusal, a summary at the end. */
static void resign_refused(void *arg, const char *what, const struct strata_err *e)
{
	if (strlen(what) == 64)
		cli_err(VERB, "resign: image %.12s not signed: %s", what, e->msg);
	else
		cli_err(VERB, "resign: %s", e->msg);
}

static int sub_resign(struct ctx *c)
{
	struct strata_err e = {0};
	struct img_resign_stats st = {0};
	int r = img_store_resign(c->s, resign_refused, c, &st, &e);
	if (r < 0)
		return fail("resign", &e, r);
	if (c->o.json) {
		struct jw w;
		jw_init(&w);
		jw_obj(&w);
		jw_kint(&w, "images_signed", st.images);
		jw_kint(&w, "names_signed", st.names);
		jw_kint(&w, "images_already_signed", st.signed_already);
		jw_kint(&w, "names_already_signed", st.names_signed_already);
		jw_kint(&w, "refused", st.refused);
		jw_obj_end(&w);
		cli_jw_print(&w);
	} else {
		printf("signed %u image(s) and %u name(s) (%u and %u were signed already); "
		       "%u refused\n",
		       st.images, st.names, st.signed_already, st.names_signed_already, st.refused);
	}
	return st.refused ? 1 : 0;
}

static void print_pf(struct ctx *c, const char *what, const struct img_prefetch_stats *st)
{
	if (!c->o.json) {
		printf("%s: %llu chunks, %llu bytes in %.3f s\n", what,
		       (unsigned long long)st->chunks, (unsigned long long)st->bytes, st->seconds);
		return;
	}
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "action", what);
	cli_jw_ku64(&w, "chunks", st->chunks);
	cli_jw_ku64(&w, "bytes", st->bytes);
	cli_jw_ksecs(&w, "seconds", st->seconds);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

/* Replays the list (or, eager, everything) through a mount of the image on
 * this node, mounting it for the duration if need be. */
static int prefetch_now(struct ctx *c, const char *hex, struct img_prefetch_stats *st,
			struct strata_err *e)
{
	char root[CLI_PATH];
	bool held = false;
	int r = 0;
	if (!c->o.eager && img_node_root(c->cache, hex, root, sizeof(root)) < 0) {
		r = img_node_acquire(c->s, c->cache, hex, root, sizeof(root), NULL, e);
		held = r == 0;
	}
	if (r == 0)
		r = img_prefetch_run(c->s, hex, root, c->o.eager, c->o.threads, st, e);
	if (held)
		img_node_release(c->s, c->cache, hex, NULL);
	return r;
}

static int sub_prefetch(struct ctx *c)
{
	struct strata_err e = {0};
	struct img_prefetch_stats st = {0};
	char hex[65], root[CLI_PATH];
	int r = img_store_resolve(c->s, c->o.pos[0], hex, &e);
	if (r < 0)
		return fail("prefetch", &e, r);
	if (c->o.record && img_node_root(c->cache, hex, root, sizeof(root)) < 0)
		return cli_err(VERB, "prefetch: image %.12s is not mounted on this node", hex), 1;
	if (c->o.record)
		r = img_prefetch_record(c->s, hex, root, &st, &e);
	else
		r = prefetch_now(c, hex, &st, &e);
	if (r < 0)
		return fail("prefetch", &e, r);
	print_pf(c, c->o.record ? "recorded" : c->o.eager ? "fetched (eager)" : "fetched", &st);
	return 0;
}

/* ---- mount / umount ------------------------------------------------------------------ */
/* Records the prefetch list record_after seconds from now, in a detached child. */
static void spawn_recorder(struct ctx *c, const char *hex, int after)
{
	pid_t pid = fork();
	if (pid != 0) {
		if (pid > 0)
			waitpid(pid, NULL, 0);
		return;
	}
	if (fork() != 0) /* the grandchild is reparented: nobody waits for it */
		_exit(0);
	setsid();
	freopen("/dev/null", "w", stdout);
	sleep((unsigned)after);
	char root[CLI_PATH];
	if (!img_prefetch_exists(c->s, hex) &&
	    img_node_root(c->cache, hex, root, sizeof(root)) == 0)
		img_prefetch_record(c->s, hex, root, NULL, NULL);
	_exit(0);
}

static void print_mount(const char *hex, const char *dir, bool fresh, uint64_t prefetched,
			double secs)
{
	char d[80];
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	snprintf(d, sizeof(d), "sha256:%s", hex);
	jw_kstr(&w, "digest", d);
	jw_kstr(&w, "dir", dir);
	jw_kbool(&w, "fresh", fresh);
	cli_jw_ku64(&w, "prefetched_bytes", prefetched);
	cli_jw_ksecs(&w, "seconds", secs);
	jw_obj_end(&w);
	cli_jw_print(&w);
}

static int sub_mount(struct ctx *c)
{
	struct strata_err e = {0};
	struct img_prefetch_stats st = {0};
	char hex[65];
	bool fresh = false;
	double t0 = now_s();
	int r = img_store_resolve(c->s, c->o.pos[0], hex, &e);
	if (r < 0)
		return fail("mount", &e, r);
	r = img_node_mount(c->s, c->cache, hex, c->o.pos[1], c->o.writable, &fresh, &e);
	if (r < 0)
		return fail("mount", &e, r);
	bool have_list = img_prefetch_exists(c->s, hex);
	char root[CLI_PATH];
	if (fresh && have_list && !c->o.no_prefetch &&
	    img_node_root(c->cache, hex, root, sizeof(root)) == 0 &&
	    img_prefetch_run(c->s, hex, root, false, c->o.threads, &st, &e) < 0)
		fprintf(stderr, "strata image: mount: warning: %s\n", e.msg);
	if (fresh && !have_list && c->o.record_after > 0)
		spawn_recorder(c, hex, c->o.record_after);
	if (c->o.json)
		print_mount(hex, c->o.pos[1], fresh, st.bytes, now_s() - t0);
	return 0;
}

static int sub_umount(struct ctx *c)
{
	struct strata_err e = {0};
	int r = img_node_umount(c->s, c->cache, c->o.pos[0], &e);
	return r < 0 ? fail("umount", &e, r) : 0;
}

/* ---- dispatch -------------------------------------------------------------------------- */
static const struct sub subs[] = {
    {"import", sub_import, O_HOME | O_JSON | O_NAME | O_TAG, 1, 1,
     "import PATH [--name NAME[:TAG]] [--tag T] [--json]\n"
     "      OCI image layout directory or docker-save tarball (--tag picks one image)"},
    {"pull", sub_pull, O_HOME | O_JSON | O_NAME | O_INSECURE, 1, 1,
     "pull REF [--insecure] [--name NAME[:TAG]] [--json]\n"
     "      [http[s]://]HOST[:PORT]/NAME[:TAG][@sha256:HEX] from an OCI registry"},
    {"ls", sub_ls, O_HOME | O_JSON, 0, 0, "ls [--json]"},
    {"inspect", sub_inspect, O_HOME | O_JSON, 1, 1, "inspect REF [--json]"},
    {"rm", sub_rm, O_HOME | O_FORCE, 1, 1,
     "rm REF [--force]   (refuses an image mounted on a node unless --force)"},
    {"prefetch", sub_prefetch, O_HOME | O_JSON | O_EAGER | O_RECORD | O_THREADS, 1, 1,
     "prefetch REF [--eager] [--record] [--threads N] [--json]\n"
     "      fetch the recorded files and ranges (--eager: every chunk) into the\n"
     "      node cache; --record: record the list now from what this node has read"},
    {"mount", sub_mount, O_HOME | O_JSON | O_WRITABLE | O_NOPF | O_RECORD | O_THREADS, 2, 2,
     "mount REF DIR [--writable] [--no-prefetch] [--record-after S] [--json]\n"
     "      read-only, or --writable: an overlay root with a fresh upper directory"},
    {"umount", sub_umount, O_HOME, 1, 1, "umount DIR"},
    {"gc", sub_gc, O_HOME | O_JSON, 0, 0, "gc [--json]   (remove unreferenced blobs)"},
    {"resign", sub_resign, O_HOME | O_JSON, 0, 0,
     "resign [--json]\n"
     "      sign the records and names of a store from before image signatures,\n"
     "      after checking every chunk against its digest table"},
};

static void usage(FILE *f)
{
	fprintf(f, "Usage: strata image SUBCOMMAND [--home DIR] ...\n\n");
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		fprintf(f, "  strata image %s\n", subs[i].usage);
	fprintf(f, "\nREF: name[:tag], sha256:HEX or a unique digest prefix. The store lives on "
		   "the\ncluster's mount (<mount>/.strata/images), the node cache in "
		   "<home>/cache/images.\n");
}

/* One of the image options of its own (which sub-command takes it is
 * checked after the parse, from o->seen). */
static int image_option(void *arg, int val, const char *value)
{
	struct opts *o = arg;

	switch (val) {
	case 'n':
		o->name = value, o->seen |= O_NAME;
		break;
	case 't':
		o->tag = value, o->seen |= O_TAG;
		break;
	case 'k':
		o->insecure = true, o->seen |= O_INSECURE;
		break;
	case 'e':
		o->eager = true, o->seen |= O_EAGER;
		break;
	case 'f':
		o->force = true, o->seen |= O_FORCE;
		break;
	case 'w':
		o->writable = true, o->seen |= O_WRITABLE;
		break;
	case 'P':
		o->no_prefetch = true, o->seen |= O_NOPF;
		break;
	case 'r':
		o->record = true, o->seen |= O_RECORD;
		break;
	case 'R':
		o->seen |= O_RECORD;
		if (cli_parse_int(value, 0, 3600, &o->record_after) < 0)
			return cli_err(VERB, "--record-after: 0..3600 seconds"), 2;
		break;
	case 'T':
		o->seen |= O_THREADS;
		if (cli_parse_int(value, 1, 64, &o->threads) < 0)
			return cli_err(VERB, "--threads: 1..64"), 2;
		break;
	}
	return 0;
}

/* Parses the options after the sub-command (argv[0]). Returns CLI_GO (help:
 * o->help) or the exit status of a usage error. */
static int parse(int argc, char **argv, struct opts *o)
{
	static const struct option own[] = {
	    {"name", required_argument, NULL, 'n'},
	    {"tag", required_argument, NULL, 't'},
	    {"insecure", no_argument, NULL, 'k'},
	    {"eager", no_argument, NULL, 'e'},
	    {"force", no_argument, NULL, 'f'},
	    {"writable", no_argument, NULL, 'w'},
	    {"no-prefetch", no_argument, NULL, 'P'},
	    {"record", no_argument, NULL, 'r'},
	    {"record-after", required_argument, NULL, 'R'},
	    {"threads", required_argument, NULL, 'T'},
	    {},
	};
	const struct cli_verb_opts v = {
	    .verb = VERB,
	    .common = CLI_OPT_HOME | CLI_OPT_JSON,
	    .own = own,
	    .on_opt = image_option,
	    .arg = o,
	};
	struct cli_opts co;
	int r = cli_parse_opts(&v, argc, argv, &co);

	if (r != CLI_GO)
		return r;
	o->home = co.home;
	o->json = co.json;
	o->seen |= co.seen;
	o->pos = co.args;
	o->npos = co.nargs;
	o->help = co.help;
	return CLI_GO;
}

static int open_store(struct ctx *c)
{
	char root[CLI_PATH];
	int r = cli_home_open(VERB, c->o.home, &c->h);
	if (r < 0)
		return r;
	if (cli_mount_state(c->h.mount) != MNT_OK)
		return cli_err(VERB, "the strata mount at %s is not up (run strata up)",
			       c->h.mount),
		       -ENOTCONN;
	snprintf(root, sizeof(root), "%s/" IMG_STORE_SUBDIR, c->h.mount);
	cli_path(c->cache, &c->h, "cache/images");
	/* The image key (imagesvc/image_auth.h) from the home's cluster key;
	 * without one, $STRATA_KEY's, else what signs or verifies says so. */
	char key[CLI_PATH];
	struct strata_err ke = {0};
	if (access(cli_path(key, &c->h, CLI_KEY_FILE), F_OK) == 0 && img_auth_load(key, &ke) < 0)
		return cli_err(VERB, "%s", ke.msg), ke.code;
	if ((r = img_store_open(root, &c->s)) < 0)
		cli_err(VERB, "cannot open the image store at %s: %s", root, strerror(-r));
	return r;
}

int cmd_image(int argc, char **argv)
{
	struct ctx c = {.o = {.record_after = 5}};
	const struct sub *sc = NULL;
	if (argc < 2 || !strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
		usage(argc < 2 ? stderr : stdout);
		return argc < 2 ? 2 : 0;
	}
	for (size_t i = 0; i < sizeof(subs) / sizeof(subs[0]); i++)
		if (!strcmp(argv[1], subs[i].name))
			sc = &subs[i];
	if (!sc)
		return cli_err(VERB, "unknown subcommand '%s' (see strata image --help)", argv[1]),
		       2;
	int r = parse(argc - 1, argv + 1, &c.o);
	if (r != CLI_GO)
		return r;
	if (c.o.help) {
		printf("Usage: strata image %s\n  --home DIR   cluster home (default "
		       "$STRATA_HOME, else ./.strata)\n",
		       sc->usage);
		return 0;
	}
	if (c.o.seen & ~sc->allowed)
		return cli_err(VERB, "%s: an option does not apply (see strata image %s --help)",
			       sc->name, sc->name),
		       2;
	if (c.o.npos < sc->min_pos || c.o.npos > sc->max_pos)
		return cli_err(VERB, "usage: strata image %s", sc->usage), 2;
	if (open_store(&c) < 0)
		return 1;
	r = sc->fn(&c);
	img_store_free(c.s);
	return r;
}
