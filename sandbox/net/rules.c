/* rules.c — the nftables text of the node (table "inet strata", replaced
 * in one batch at start) and of each box (its policy chain and DNS sets),
 * and nft_apply, which hands a batch to libnftables: the kernel applies a
 * batch all or nothing, so a policy is never half in place.
 *
 * The path of a sandbox's packet (forward hook):
 *   sbx_out: spoofed source, IPv6, other sandboxes, the built-in ranges,
 *            the protected (cluster) entries, a way out other than the
 *            uplink, UDP 443 -> refused; else the box's chain (pmap).
 *   s<slot>: an open connection accepted by the current policy generation
 *            (ct mark) passes; else deny entries, allow entries, the DNS
 *            sets, the default -- the first that matches decides, and a new
 *            verdict is logged (NFLOG, prefix "<verdict> <rule>") and
 *            stamped on the connection (ct mark).
 *   sbx_rej: TCP gets a reset, anything else ICMP admin-prohibited.
 * To the node itself (input hook) a sandbox sends only DNS, redirected to
 * the resolver (prerouting); anything else is refused as "always:node". */
#include <arpa/inet.h>
#include <errno.h>
#include <nftables/libnftables.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "sandbox/net/net-internal.h"

void sb_printf(struct sbuf *b, const char *fmt, ...)
{
	for (;;) {
		va_list ap;
		va_start(ap, fmt);
		size_t room = b->cap - b->len;
		int k = vsnprintf(b->p ? b->p + b->len : NULL, b->p ? room : 0, fmt, ap);
		va_end(ap);
		if (k < 0) {
			b->oom = true;
			return;
		}
		if (b->p && (size_t)k < room) {
			b->len += (size_t)k;
			return;
		}
		size_t cap = (b->cap ? b->cap * 2 : 4096) + (size_t)k;
		char *p = realloc(b->p, cap);
		if (!p) {
			b->oom = true;
			return;
		}
		b->p = p;
		b->cap = cap;
	}
}

void ip4str(uint32_t a, char *buf)
{
	snprintf(buf, 16, "%u.%u.%u.%u", a >> 24, (a >> 16) & 255, (a >> 8) & 255, a & 255);
}

/* A rule of chain that refuses what match matches, logged as "deny why". */
static void deny(struct sbuf *b, const struct sbn_node *n, const char *chain, const char *match,
		 const char *why)
{
	sb_printf(
	    b, "add rule inet " SBN_TABLE " %s %s%slog group %u prefix \"deny %s\" goto sbx_rej\n",
	    chain, match, match[0] ? " " : "", (unsigned)n->nflog_group, why);
}

/* One rule per protected entry "CIDR[:tcp|udp:PORTS]" of the config. */
static void rules_protect(const struct sbn_node *n, struct sbuf *b)
{
	if (!n->protect)
		return;
	char *list = strdup(n->protect), *save = NULL;
	if (!list) {
		b->oom = true;
		return;
	}
	for (char *e = strtok_r(list, ",", &save); e; e = strtok_r(NULL, ",", &save)) {
		char *proto = strchr(e, ':'), *ports = NULL, m[128];
		if (proto) {
			*proto++ = 0;
			ports = strchr(proto, ':');
			if (ports)
				*ports++ = 0;
		}
		if (proto && ports)
			snprintf(m, sizeof(m), "ip daddr %s %s dport %s", e, proto, ports);
		else
			snprintf(m, sizeof(m), "ip daddr %s", e);
		deny(b, n, "sbx_out", m, "always:cluster");
	}
	free(list);
}

void rules_node(const struct sbn_node *n, struct sbuf *b)
{
	char pool[16], m[128];
	ip4str(n->pool, pool);
	const char *t = "inet " SBN_TABLE;
	const char *sx = "iifname \"" SBN_HOST_PREFIX "*\"";
	sb_printf(b, "add table %s\ndelete table %s\nadd table %s\n", t, t, t);
	sb_printf(b, "add set %s bind { type ifname . ipv4_addr; }\n", t);
	sb_printf(b, "add map %s pmap { type ifname : verdict; }\n", t);
	sb_printf(b, "add chain %s sbx_rej\n", t);
	sb_printf(b, "add rule %s sbx_rej meta l4proto tcp reject with tcp reset\n", t);
	sb_printf(b, "add rule %s sbx_rej reject with icmpx type admin-prohibited\n", t);
	sb_printf(b, "add chain %s sbx_out\n", t);
	deny(b, n, "sbx_out", "meta nfproto ipv4 iifname . ip saddr != @bind", "always:spoof");
	deny(b, n, "sbx_out", "meta nfproto ipv6", "always:ipv6");
	snprintf(m, sizeof(m), "ip daddr %s/%u", pool, n->pool_plen);
	deny(b, n, "sbx_out", m, "always:sandboxes");
	for (size_t i = 0; i < sbn_nalways; i++) {
		snprintf(m, sizeof(m), "ip daddr %s", sbn_always[i].cidr);
		deny(b, n, "sbx_out", m, sbn_always[i].why);
	}
	rules_protect(n, b);
	snprintf(m, sizeof(m), "oifname != \"%s\"", n->uplink);
	deny(b, n, "sbx_out", m, "always:route");
	deny(b, n, "sbx_out", "udp dport 443", "always:quic");
	sb_printf(b, "add rule %s sbx_out iifname vmap @pmap\n", t);
	deny(b, n, "sbx_out", "", "always:no-policy");
	/* Towards a sandbox: only what belongs to its own connections. */
	sb_printf(b, "add chain %s sbx_back\n", t);
	sb_printf(b, "add rule %s sbx_back ct state established,related accept\n", t);
	deny(b, n, "sbx_back", "", "always:inbound");
	sb_printf(
	    b,
	    "add chain %s forward { type filter hook forward priority filter; policy accept; }\n",
	    t);
	sb_printf(b, "add rule %s forward %s jump sbx_out\n", t, sx);
	sb_printf(b, "add rule %s forward oifname \"" SBN_HOST_PREFIX "*\" jump sbx_back\n", t);
	sb_printf(b,
		  "add chain %s input { type filter hook input priority filter; policy accept; }\n",
		  t);
	sb_printf(b, "add rule %s input %s udp dport %u ct status dnat accept\n", t, sx,
		  n->resolver_port);
	deny(b, n, "input", sx, "always:node");
	sb_printf(b,
		  "add chain %s pre { type nat hook prerouting priority dstnat; policy accept; }\n",
		  t);
	sb_printf(b, "add rule %s pre %s udp dport 53 redirect to :%u\n", t, sx, n->resolver_port);
	sb_printf(
	    b, "add chain %s post { type nat hook postrouting priority srcnat; policy accept; }\n",
	    t);
	sb_printf(b, "add rule %s post ip saddr %s/%u oifname \"%s\" masquerade\n", t, pool,
		  n->pool_plen, n->uplink);
}

/* The box's policy chain s<slot>: one rule per entry, in deciding order. */
static void rules_chain(const struct sbn_box *bx, struct sbuf *b)
{
	const struct sbn_node *n = bx->node;
	const struct sbn_policy *p = bx->policy;
	unsigned s = bx->slot, g = bx->gen;
	const char *t = "inet " SBN_TABLE;
	sb_printf(b, "add rule %s s%u ct state established,related ct mark 0x%x accept\n", t, s, g);
	for (int allow = 0; allow <= 1; allow++)
		for (size_t i = 0; i < p->n; i++) {
			const struct sbn_rule *r = &p->rules[i];
			if (r->allow != allow || r->is_name)
				continue;
			char net[16];
			ip4str(r->net, net);
			sb_printf(b, "add rule %s s%u ip daddr %s/%d", t, s, net, r->plen);
			if (r->ports)
				sb_printf(b, " meta l4proto { tcp, udp } th dport %u-%u", r->lo,
					  r->hi);
			sb_printf(b, " log group %u prefix \"%s %s %s\"", n->nflog_group,
				  allow ? "allow" : "deny", allow ? "allow_out" : "deny_out",
				  r->text);
			if (allow)
				sb_printf(b, " ct mark set 0x%x accept\n", g);
			else
				sb_printf(b, " goto sbx_rej\n");
		}
	sb_printf(
	    b,
	    "add rule %s s%u ip daddr @s%un log group %u prefix \"allow dns\" ct mark set 0x%x "
	    "accept\n",
	    t, s, s, n->nflog_group, g);
	sb_printf(
	    b,
	    "add rule %s s%u meta l4proto { tcp, udp } ip daddr . th dport @s%up log group %u "
	    "prefix \"allow dns\" ct mark set 0x%x accept\n",
	    t, s, s, n->nflog_group, g);
	if (p->default_allow)
		sb_printf(b,
			  "add rule %s s%u log group %u prefix \"allow default\" ct mark set 0x%x "
			  "accept\n",
			  t, s, n->nflog_group, g);
	else
		sb_printf(b, "add rule %s s%u log group %u prefix \"deny default\" goto sbx_rej\n",
			  t, s, n->nflog_group);
}

void rules_box_grants(const struct sbn_box *bx, struct sbuf *b, int64_t now)
{
	const char *t = "inet " SBN_TABLE;
	for (size_t i = 0; i < bx->ngrants; i++) {
		const struct sbn_grant *gr = &bx->grants[i];
		const struct sbn_rule *r = policy_match_name(bx->policy, gr->name);
		if (gr->expires <= now || !r || !r->allow)
			continue;
		char a[16];
		ip4str(gr->addr, a);
		long left = (long)(gr->expires - now);
		if (!r->ports)
			sb_printf(b, "add element %s s%un { %s timeout %lds }\n", t, bx->slot, a,
				  left);
		else
			for (unsigned port = r->lo; port <= r->hi; port++)
				sb_printf(b, "add element %s s%up { %s . %u timeout %lds }\n", t,
					  bx->slot, a, port, left);
	}
}

void rules_box_add(const struct sbn_box *bx, struct sbuf *b)
{
	const char *t = "inet " SBN_TABLE;
	unsigned s = bx->slot;
	char a[16];
	ip4str(bx->addr, a);
	sb_printf(b, "add set %s s%un { type ipv4_addr; flags timeout; }\n", t, s);
	sb_printf(b, "add set %s s%up { type ipv4_addr . inet_service; flags timeout; }\n", t, s);
	sb_printf(b, "add chain %s s%u\n", t, s);
	rules_chain(bx, b);
	sb_printf(b, "add element %s bind { \"%s\" . %s }\n", t, bx->ifname, a);
	sb_printf(b, "add element %s pmap { \"%s\" : goto s%u }\n", t, bx->ifname, s);
}

void rules_box_policy(const struct sbn_box *bx, struct sbuf *b)
{
	const char *t = "inet " SBN_TABLE;
	unsigned s = bx->slot;
	sb_printf(b, "flush chain %s s%u\n", t, s);
	rules_chain(bx, b);
	sb_printf(b, "flush set %s s%un\nflush set %s s%up\n", t, s, t, s);
	rules_box_grants(bx, b, mono_s());
}

void rules_box_del(const struct sbn_box *bx, struct sbuf *b)
{
	const char *t = "inet " SBN_TABLE;
	unsigned s = bx->slot;
	char a[16];
	ip4str(bx->addr, a);
	sb_printf(b, "delete element %s pmap { \"%s\" }\n", t, bx->ifname);
	sb_printf(b, "delete element %s bind { \"%s\" . %s }\n", t, bx->ifname, a);
	sb_printf(b, "delete chain %s s%u\n", t, s);
	sb_printf(b, "delete set %s s%un\ndelete set %s s%up\n", t, s, t, s);
}

int nft_apply(struct sbn_node *n, const char *text, char *err, size_t errcap)
{
	int r = nft_run_cmd_from_buffer(n->nft, text);
	const char *msg = nft_ctx_get_error_buffer(n->nft);
	if (r != 0) {
		if (err && errcap) {
			snprintf(err, errcap, "nft: %s", msg && msg[0] ? msg : "batch refused");
			char *nl = strchr(err, '\n'); /* the first message line suffices */
			if (nl)
				*nl = 0;
		}
		return -EINVAL;
	}
	return 0;
}
