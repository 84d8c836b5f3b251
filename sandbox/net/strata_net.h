/* strata_net.h — network "egress" for sandboxes: a veth from the node into
 * the sandbox's network namespace, an address from the node's pool, NAT out
 * of the node's uplink, and a per-sandbox policy (CIDRs, ports, domain names)
 * enforced by nftables, a DNS resolver on the node that answers only allowed
 * names, and a JSONL decision log. sandbox/net/README.md has the design.
 *
 * One sbn_node per daemon (it owns the nftables table "inet strata" of the
 * daemon's network namespace, the resolver and the log reader thread); one
 * sbn_box per sandbox. Functions return 0 or -errno; where a message helps,
 * it goes into err (a caller's buffer of errcap bytes). The library does not
 * log. Thread-safe: every call may come from any thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

struct sbn_node;
struct sbn_box;
struct sbn_policy;

struct sbn_config {
	const char *uplink; /* the interface NAT goes out of (required) */
	const char *pool;   /* sandbox addresses, "A.B.C.D/N" (N <= 24); NULL: 10.213.0.0/16 */
	const char *upstream_dns; /* "A.B.C.D[:port]" the resolver forwards to (required) */
	const char *log_dir;	  /* where the per-sandbox JSONL logs go (required) */
	/* Always denied besides the built-in ranges: "CIDR[:tcp|udp:PORT[-PORT]]"
	 * entries separated by commas (the cluster's services), or NULL. */
	const char *protect;
	uint16_t resolver_port; /* the node-side port DNS is redirected to; 0: 5353 */
	uint16_t nflog_group;	/* NFLOG group of the decision log; 0: 4219 */
	size_t log_cap;		/* bytes per sandbox log; 0: 4 MiB */
};

/* Sets up the node: the nftables table (one atomic batch, replacing an
 * earlier daemon's), IPv4 forwarding, the resolver and log thread. Returns
 * 0 and *ret (free with sbn_node_free), -EINVAL (bad config, see err), or
 * -errno of the failing step. */
int sbn_node_new(const struct sbn_config *cfg, struct sbn_node **ret, char *err, size_t errcap);
/* Stops the thread, removes the table. Boxes must be detached first.
 * Accepts NULL. */
void sbn_node_free(struct sbn_node *n);

/* ---- policies ------------------------------------------------------------ */

/* An empty policy whose default verdict is allow (default_allow) or deny.
 * Returns NULL when out of memory. Free with sbn_policy_free (NULL ok). */
struct sbn_policy *sbn_policy_new(bool default_allow);
void sbn_policy_free(struct sbn_policy *p);
/* Adds an allow_out (allow) or deny_out entry: "CIDR", "CIDR:PORTS", "NAME",
 * "NAME:PORTS" where NAME is a domain name or "*.domain" (any name below
 * it), PORTS one port or a range "LO-HI" (TCP and UDP). Deny entries win
 * over allow entries. Returns 0, -EINVAL (message in err), -E2BIG (over
 * SBN_POLICY_MAX entries), -ENOMEM. */
#define SBN_POLICY_MAX 256
int sbn_policy_add(struct sbn_policy *p, bool allow, const char *entry, char *err, size_t errcap);
/* The policy as JSON ({"default":"deny","allow_out":[...],"deny_out":[...]}),
 * malloc'd (the caller frees), or NULL when out of memory. */
char *sbn_policy_json(const struct sbn_policy *p);
/* A copy, or NULL when out of memory. */
struct sbn_policy *sbn_policy_dup(const struct sbn_policy *p);
/* The verdict for name (lowercase, no trailing dot): true = allowed, and
 * *ret_rule the entry that decided ("default" when none), a pointer into p. */
bool sbn_policy_name(const struct sbn_policy *p, const char *name, const char **ret_rule);

/* ---- sandboxes ----------------------------------------------------------- */

/* Gives the sandbox whose first process is pid (in its own network
 * namespace, with only lo) its veth, address, route and policy p (taken
 * over, also on failure). id names its log file. Returns 0 and *ret,
 * -ENOSPC (the pool is used up), -errno (err says which step). */
int sbn_attach(struct sbn_node *n, const char *id, pid_t pid, struct sbn_policy *p,
	       struct sbn_box **ret, char *err, size_t errcap);
/* Replaces the box's policy in one atomic batch; connections already open
 * are checked against the new policy at their next packet. p is taken
 * over, also on failure. Returns 0 or -errno (err). */
int sbn_set_policy(struct sbn_box *b, struct sbn_policy *p, char *err, size_t errcap);
/* The box's policy (owned by the box, valid until the next sbn_set_policy
 * or sbn_detach; call from the thread that changes it). */
const struct sbn_policy *sbn_box_policy(const struct sbn_box *b);
/* Removes the veth (the namespace keeps only lo), the box's rules and sets,
 * and frees b; the log file stays (sbn_log_remove). Accepts NULL. */
void sbn_detach(struct sbn_box *b);
/* The sandbox's address and its gateway (the resolver's address), dotted. */
void sbn_box_address(const struct sbn_box *b, char *addr, char *gateway, size_t cap);
/* Bytes the sandbox sent (out) and received (in) through its veth. */
int sbn_box_bytes(const struct sbn_box *b, uint64_t *ret_out, uint64_t *ret_in);
/* The decision log of sandbox id: its JSONL text (malloc'd, *ret_len bytes,
 * at most max bytes from offset), -ENOENT (none). */
int sbn_log_read(struct sbn_node *n, const char *id, uint64_t offset, size_t max, char **ret,
		 size_t *ret_len);
/* Removes sandbox id's log file. */
void sbn_log_remove(struct sbn_node *n, const char *id);
