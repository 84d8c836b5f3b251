/* auth.c — who a request is, what it may see, and how much it may hold:
 * sandboxd's side of the tenants file (tenants.h; operators' guide in
 * docs/tenants.md, the API's side in API.md "Authentication and tenants").
 *
 * Who a request is (sbd_auth_request, at every request head):
 *   - "Authorization: Bearer T" with T the --token (or
 *     $STRATA_SANDBOXD_TOKEN): the operator, admin;
 *   - with T a tenant's token: that tenant (admin when the file says so);
 *   - any other Authorization header: refused (401), on either transport;
 *   - none, on the unix socket, from uid 0 or sandboxd's own uid: the
 *     operator, as before tenants existed; from another uid, or none on
 *     TCP: refused (401).
 *
 * What it may see (sbd_who_sees): an admin every sandbox; a tenant only
 * those it created (sbd_sandbox.tenant, persisted in state.json, so a
 * restart keeps it). Another tenant's sandbox is answered as one that does
 * not exist (404), so that its id tells nothing.
 *
 * The table is read at start and again within a second of a change of the
 * file (the timer's tick stats it: a new inode, size, mtime or ctime), so
 * `strata tenant rm` or `token` revokes a token within a second with no
 * signal to send. */
#include <errno.h>
#include <string.h>
#include <unistd.h>

#include "fs/log.h"
#include "sandbox/sandboxd/sandboxd.h"

static void who_operator(struct sbd_who *ret)
{
	*ret = (struct sbd_who){.tenant = "", .admin = true};
}

int sbd_auth_request(struct sandboxd *d, bool tcp, uint32_t uid, const char *authz,
		     struct sbd_who *ret, const char **ret_why)
{
	if (!authz) {
		if (!tcp && (uid == 0 || uid == (uint32_t)geteuid())) {
			who_operator(ret);
			return 0;
		}
		*ret_why = tcp ? "missing bearer token"
			       : "a bearer token is needed (only root and sandboxd's own user "
				 "are the operator without one)";
		return -EACCES;
	}
	const char *token = !strncmp(authz, "Bearer ", 7) ? authz + 7 : NULL;
	/* A tenant's first: one hash, none when no tenant has the name. */
	const struct sbd_tenant *tn = token ? sbd_tenants_match(&d->tenants, token) : NULL;
	if (tn) {
		*ret = (struct sbd_who){.admin = tn->admin};
		memcpy(ret->tenant, tn->name, sizeof(ret->tenant));
		return 0;
	}
	if (token && d->cfg.token && sbd_secret_equal(token, d->cfg.token)) {
		who_operator(ret);
		return 0;
	}
	*ret_why = "missing or wrong bearer token";
	return -EACCES;
}

bool sbd_who_owns(const struct sbd_who *w, const char *owner)
{
	return !strcmp(owner ? owner : "", w->tenant);
}

bool sbd_who_sees(const struct sbd_who *w, const struct sbd_sandbox *sb)
{
	return w->admin || (sb->tenant && sbd_who_owns(w, sb->tenant));
}

static bool same_file(const struct stat *a, const struct stat *b)
{
	return a->st_ino == b->st_ino && a->st_dev == b->st_dev && a->st_size == b->st_size &&
	       a->st_mtim.tv_sec == b->st_mtim.tv_sec && a->st_mtim.tv_nsec == b->st_mtim.tv_nsec &&
	       a->st_ctim.tv_sec == b->st_ctim.tv_sec && a->st_ctim.tv_nsec == b->st_ctim.tv_nsec;
}

void sbd_tenants_reload(struct sandboxd *d)
{
	const char *path = d->cfg.tenants_path;
	struct stat st;
	if (!path)
		return;
	if (stat(path, &st) < 0) {
		if (errno == ENOENT && d->tenants_file) {
			log_info("tenants: %s is gone: no tenant token is accepted", path);
			sbd_tenants_done(&d->tenants);
			d->tenants_file = false;
		}
		return;
	}
	if (d->tenants_file && same_file(&st, &d->tenants_st))
		return;
	struct sbd_tenants t;
	struct strata_err e = {0};
	int r = sbd_tenants_load(path, &t, &st, &e);
	if (r < 0) {
		sbd_tenants_done(&t);
		/* Logged once per change of the file: its stat is remembered. */
		log_error("tenants: %s (the previous table of %zu tenants is kept)",
			  e.msg[0] ? e.msg : strerror(-r), d->tenants.n);
		d->tenants_st = st;
		d->tenants_file = true;
		return;
	}
	sbd_tenants_done(&d->tenants);
	d->tenants = t;
	d->tenants_st = st;
	d->tenants_file = true;
	log_info("tenants: %zu read from %s", t.n, path);
}

static void usage_add(struct sbd_tenant_usage *u, const struct sbd_sandbox *sb)
{
	u->sandboxes++;
	u->cpu += sb->cpu;
	u->memory_mb += sb->memory_mb;
}

void sbd_tenant_usage(struct sandboxd *d, const struct sbd_who *w, struct sbd_tenant_usage *ret)
{
	*ret = (struct sbd_tenant_usage){0};
	for (const struct sbd_sandbox *sb = d->sandboxes; sb; sb = sb->next)
		if (sbd_who_owns(w, sb->tenant))
			usage_add(ret, sb);
	sbd_api_creating_usage(d, w->tenant[0] ? w->tenant : NULL, ret);
}

int sbd_tenant_admit(struct sandboxd *d, const struct sbd_who *w, const struct sbd_sandbox *sb,
		     struct strata_err *e)
{
	const struct sbd_tenant *tn =
	    w->tenant[0] ? sbd_tenants_find(&d->tenants, w->tenant) : NULL;
	if (!tn || (tn->max_sandboxes < 0 && tn->cpu < 0 && tn->memory_mb < 0))
		return 0; /* the operator, or no quota: the node's admission alone */
	struct sbd_tenant_usage u;
	sbd_tenant_usage(d, w, &u);
	if (tn->max_sandboxes >= 0 && u.sandboxes + 1 > tn->max_sandboxes)
		return strata_err_set(
		    e, -EDQUOT, "tenant '%s' quota: max_sandboxes %lld, %lld in use", tn->name,
		    (long long)tn->max_sandboxes, (long long)u.sandboxes);
	/* A thousandth of a core of slack: sums of decimal fractions. */
	if (tn->cpu >= 0 && u.cpu + sb->cpu > tn->cpu + 1e-3)
		return strata_err_set(e, -EDQUOT,
				      "tenant '%s' quota: cpu %g cores, %g in use, %g requested",
				      tn->name, tn->cpu, u.cpu, sb->cpu);
	if (tn->memory_mb >= 0 && u.memory_mb + sb->memory_mb > tn->memory_mb)
		return strata_err_set(e, -EDQUOT,
				      "tenant '%s' quota: memory_mb %lld, %lld in use, %lld "
				      "requested",
				      tn->name, (long long)tn->memory_mb, (long long)u.memory_mb,
				      (long long)sb->memory_mb);
	return 0;
}
