/* policy.c — a sandbox's egress policy: allow_out and deny_out entries
 * (CIDRs, domain names with wildcards, each with an optional port or port
 * range) and a default verdict; their parsing, and the matching the
 * resolver (names) and the decision log (addresses) do. The kernel's
 * matching of the same entries is rules.c's; this file names the entry
 * that decided. Order of decision: deny entries, then allow entries, then
 * the default; the always-denied ranges come before all of them. */
#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "fs/json.h"
#include "sandbox/net/net-internal.h"

struct sbn_policy *sbn_policy_new(bool default_allow)
{
	struct sbn_policy *p = calloc(1, sizeof(*p));
	if (p)
		p->default_allow = default_allow;
	return p;
}

void sbn_policy_free(struct sbn_policy *p)
{
	if (!p)
		return;
	for (size_t i = 0; i < p->n; i++) {
		free(p->rules[i].name);
		free(p->rules[i].text);
	}
	free(p->rules);
	free(p);
}

int parse_cidr(const char *s, size_t len, uint32_t *ret_net, int *ret_plen)
{
	char buf[32];
	unsigned a[4], plen = 32;
	char tail;
	if (len >= sizeof(buf))
		return -EINVAL;
	memcpy(buf, s, len);
	buf[len] = 0;
	int k = sscanf(buf, "%3u.%3u.%3u.%3u/%2u%c", &a[0], &a[1], &a[2], &a[3], &plen, &tail);
	if (k != 4 && k != 5)
		return -EINVAL;
	if (k == 4 && strchr(buf, '/'))
		return -EINVAL;
	if (a[0] > 255 || a[1] > 255 || a[2] > 255 || a[3] > 255 || plen > 32)
		return -EINVAL;
	uint32_t net = a[0] << 24 | a[1] << 16 | a[2] << 8 | a[3];
	uint32_t mask = plen ? ~0u << (32 - plen) : 0;
	*ret_net = net & mask;
	*ret_plen = (int)plen;
	return 0;
}

/* A domain name or "*.name": labels of letters, digits, '-' and '_',
 * lowercased into out. */
static int parse_name(const char *s, size_t len, char *out, size_t cap)
{
	if (len == 0 || len >= cap || len > 253)
		return -EINVAL;
	size_t i = 0, label = 0;
	bool digits = true; /* the last label so far: a name's is never all digits */
	if (len > 2 && s[0] == '*' && s[1] == '.') {
		out[0] = '*', out[1] = '.';
		i = 2;
	}
	for (; i < len; i++) {
		char c = (char)tolower((unsigned char)s[i]);
		if (c == '.') {
			if (label == 0 || out[i - 1] == '-')
				return -EINVAL;
			label = 0;
			digits = true;
		} else if (isalnum((unsigned char)c) || c == '-' || c == '_') {
			if (++label > 63 || (c == '-' && label == 1))
				return -EINVAL;
			digits = digits && isdigit((unsigned char)c);
		} else {
			return -EINVAL;
		}
		out[i] = c;
	}
	out[len] = 0;
	return label && !digits && out[len - 1] != '-' ? 0 : -EINVAL;
}

static int parse_ports(const char *s, uint16_t *lo, uint16_t *hi)
{
	unsigned a, b;
	char tail;
	int k = sscanf(s, "%5u-%5u%c", &a, &b, &tail);
	if (k == 1 && !strchr(s, '-'))
		b = a;
	else if (k != 2)
		return -EINVAL;
	if (a < 1 || b > 65535 || a > b)
		return -EINVAL;
	*lo = (uint16_t)a;
	*hi = (uint16_t)b;
	return 0;
}

int sbn_policy_add(struct sbn_policy *p, bool allow, const char *entry, char *err, size_t errcap)
{
	if (p->n >= SBN_POLICY_MAX) {
		snprintf(err, errcap, "over %d policy entries", SBN_POLICY_MAX);
		return -E2BIG;
	}
	struct sbn_rule r = {.allow = allow};
	const char *colon = strrchr(entry, ':');
	size_t hlen = colon ? (size_t)(colon - entry) : strlen(entry);
	char name[256];
	if (colon && parse_ports(colon + 1, &r.lo, &r.hi) < 0) {
		snprintf(err, errcap, "'%s': the port must be N or LO-HI in 1..65535", entry);
		return -EINVAL;
	}
	r.ports = colon != NULL;
	if (parse_cidr(entry, hlen, &r.net, &r.plen) == 0) {
		r.is_name = false;
	} else if (parse_name(entry, hlen, name, sizeof(name)) == 0) {
		r.is_name = true;
		/* A name's addresses are granted port by port (rules.c). */
		if (r.ports && r.hi - r.lo >= SBN_NAME_PORTS_MAX) {
			snprintf(err, errcap, "'%s': a name's port range spans at most %d ports",
				 entry, SBN_NAME_PORTS_MAX);
			return -EINVAL;
		}
	} else {
		snprintf(
		    err, errcap,
		    "'%s' is neither an IPv4 CIDR nor a domain name (\"*.example.com\" for the "
		    "names below one), with an optional \":PORT\" or \":LO-HI\"",
		    entry);
		return -EINVAL;
	}
	struct sbn_rule *v = realloc(p->rules, (p->n + 1) * sizeof(*v));
	if (!v)
		return -ENOMEM;
	p->rules = v;
	r.text = strdup(entry);
	r.name = r.is_name ? strdup(name) : NULL;
	if (!r.text || (r.is_name && !r.name)) {
		free(r.text);
		free(r.name);
		return -ENOMEM;
	}
	p->rules[p->n++] = r;
	return 0;
}

struct sbn_policy *sbn_policy_dup(const struct sbn_policy *p)
{
	struct sbn_policy *q = sbn_policy_new(p->default_allow);
	char e[8];
	for (size_t i = 0; q && i < p->n; i++)
		if (sbn_policy_add(q, p->rules[i].allow, p->rules[i].text, e, sizeof(e)) < 0) {
			sbn_policy_free(q);
			return NULL;
		}
	return q;
}

char *sbn_policy_json(const struct sbn_policy *p)
{
	struct jw w;
	jw_init(&w);
	jw_obj(&w);
	jw_kstr(&w, "default", p->default_allow ? "allow" : "deny");
	for (int allow = 1; allow >= 0; allow--) {
		jw_key(&w, allow ? "allow_out" : "deny_out");
		jw_arr(&w);
		for (size_t i = 0; i < p->n; i++)
			if (p->rules[i].allow == allow)
				jw_str(&w, p->rules[i].text);
		jw_arr_end(&w);
	}
	jw_obj_end(&w);
	return jw_take(&w, NULL);
}

static bool name_matches(const char *pat, const char *name)
{
	if (pat[0] != '*')
		return !strcmp(pat, name);
	size_t pl = strlen(pat + 1), nl = strlen(name); /* ".example.com" */
	return nl > pl && !strcmp(name + nl - pl, pat + 1);
}

const struct sbn_rule *policy_match_name(const struct sbn_policy *p, const char *name)
{
	for (int allow = 0; allow <= 1; allow++)
		for (size_t i = 0; i < p->n; i++) {
			const struct sbn_rule *r = &p->rules[i];
			if (r->allow == allow && r->is_name && name_matches(r->name, name))
				return r;
		}
	return NULL;
}

bool sbn_policy_name(const struct sbn_policy *p, const char *name, const char **ret_rule)
{
	const struct sbn_rule *r = policy_match_name(p, name);
	*ret_rule = r ? r->text : "default";
	return r ? r->allow : p->default_allow;
}

static bool in_net(uint32_t addr, uint32_t net, int plen)
{
	uint32_t mask = plen ? ~0u << (32 - plen) : 0;
	return (addr & mask) == net;
}

const struct sbn_rule *policy_match_addr(const struct sbn_policy *p, uint32_t addr, int proto,
					 uint16_t port)
{
	for (int allow = 0; allow <= 1; allow++)
		for (size_t i = 0; i < p->n; i++) {
			const struct sbn_rule *r = &p->rules[i];
			if (r->allow != allow || r->is_name || !in_net(addr, r->net, r->plen))
				continue;
			if (!r->ports || (proto && port >= r->lo && port <= r->hi))
				return r;
		}
	return NULL;
}

/* The ranges no policy opens (rules.c puts the same ones in the kernel). */
const struct sbn_always sbn_always[] = {
    {"0.0.0.0/8", "always:this-network"},
    {"127.0.0.0/8", "always:loopback"},
    {"169.254.0.0/16", "always:link-local"},
    {"224.0.0.0/3", "always:multicast"},
};
const size_t sbn_nalways = sizeof(sbn_always) / sizeof(sbn_always[0]);

const char *always_denied(const struct sbn_node *n, uint32_t addr)
{
	for (size_t i = 0; i < sbn_nalways; i++) {
		uint32_t net;
		int plen;
		if (parse_cidr(sbn_always[i].cidr, strlen(sbn_always[i].cidr), &net, &plen) == 0 &&
		    in_net(addr, net, plen))
			return sbn_always[i].why;
	}
	if (in_net(addr, n->pool, (int)n->pool_plen))
		return "always:sandboxes";
	return NULL;
}
