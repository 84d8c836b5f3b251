/* net-internal.h — what the files of sandbox/net share.
 *
 * Pieces: node.c (the node: table, slots, thread), policy.c (parsing and
 * matching of entries), rules.c (the nftables text of the node and of a
 * box), link.c (the veth pair over rtnetlink), resolver.c (the DNS view of
 * each sandbox), nflog.c (connections' verdicts from NFLOG), netlog.c (the
 * JSONL files).
 *
 * Invariants:
 *  1. A box's slot s gives its addresses: gateway pool+4s+1, sandbox
 *     pool+4s+2 (a /30 per veth); slot 0 is never used.
 *  2. Every change of the ruleset is one nft batch (nft_apply): the kernel
 *     applies it all or nothing.
 *  3. Every connection of a box carries ct mark = the generation of the box's
 *     policy that accepted it; a packet of a connection whose mark is not
 *     the box's current generation is judged again (policy changes apply to
 *     open connections). Generations are unique per node, so a slot's next
 *     box never inherits an earlier box's verdicts.
 *  4. node->mu guards the slots, the boxes' policies, grants and logs, and
 *     the nft context. */
#pragma once
#include <netinet/in.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "sandbox/net/strata_net.h"

#define SBN_TABLE "strata"
#define SBN_HOST_PREFIX "sx" /* host end of a box's veth: sx<slot> */
#define SBN_GRANTS_MAX 1024  /* DNS answers remembered per box */
#define SBN_TTL_MIN 30	     /* seconds an answer's address stays allowed, at least */
#define SBN_TTL_MAX 86400
#define SBN_NAME_PORTS_MAX 64 /* ports of a name's entry (granted one by one) */

struct sbn_rule {
	bool allow;
	bool is_name;
	uint32_t net; /* host order */
	int plen;
	char *name; /* lowercase; "*.x" matches names below x */
	bool ports; /* else any port, any protocol */
	uint16_t lo, hi;
	char *text; /* as given */
};

struct sbn_policy {
	bool default_allow;
	struct sbn_rule *rules;
	size_t n;
};

/* An address a DNS answer allowed, for its name's rule. */
struct sbn_grant {
	uint32_t addr;
	int64_t expires; /* monotonic seconds */
	char name[254];
};

struct sbn_box {
	struct sbn_node *node;
	char id[64];
	unsigned slot;
	uint32_t addr, gw; /* host order */
	int ifindex;	   /* host end */
	char ifname[16];
	struct sbn_policy *policy;
	uint32_t gen;
	struct sbn_grant *grants;
	size_t ngrants;
	int log_fd;
	uint64_t log_bytes, log_dropped;
};

struct sbn_pending; /* resolver.c */

struct sbn_node {
	pthread_mutex_t mu;
	struct nft_ctx *nft;
	char uplink[16];
	uint32_t pool, pool_plen; /* host order */
	unsigned nslots, next_slot;
	struct sbn_box **slots;
	uint32_t gen;
	struct sockaddr_in upstream;
	uint16_t resolver_port, nflog_group;
	char *log_dir;
	size_t log_cap;
	char *protect; /* nft elements of the protected set, or NULL */
	int home_net;  /* the daemon's network namespace */
	int dns_fd, up_fd, nflog_fd, stop_fd;
	struct sbn_pending *pending;
	uint16_t next_qid;
	pthread_t thread;
	bool thread_started;
};

/* policy.c */
/* The first entry deciding a TCP/UDP connection to addr:port (proto 0: any
 * other protocol), grants aside; NULL: the default. */
const struct sbn_rule *policy_match_addr(const struct sbn_policy *p, uint32_t addr, int proto,
					 uint16_t port);
/* The deciding rule for a name, or NULL (default). */
const struct sbn_rule *policy_match_name(const struct sbn_policy *p, const char *name);
/* Parses "A.B.C.D[/N]" into host order; returns 0 or -EINVAL. */
int parse_cidr(const char *s, size_t len, uint32_t *ret_net, int *ret_plen);
/* The built-in always-denied ranges and the reason each is logged with. */
struct sbn_always {
	const char *cidr, *why;
};
extern const struct sbn_always sbn_always[];
extern const size_t sbn_nalways;
/* Whether addr is always denied (built-in ranges or the node's pool). */
const char *always_denied(const struct sbn_node *n, uint32_t addr);

/* rules.c: nft text appended to a growing buffer. */
struct sbuf {
	char *p;
	size_t len, cap;
	bool oom;
};
void sb_printf(struct sbuf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
void rules_node(const struct sbn_node *n, struct sbuf *b);
void rules_box_add(const struct sbn_box *bx, struct sbuf *b);
void rules_box_policy(const struct sbn_box *bx, struct sbuf *b); /* flush + refill */
void rules_box_del(const struct sbn_box *bx, struct sbuf *b);
/* The elements of the box's DNS set for its grants still allowed by its policy. */
void rules_box_grants(const struct sbn_box *bx, struct sbuf *b, int64_t now);
/* Applies a batch (n->mu held). Returns 0 or -EINVAL with nft's message. */
int nft_apply(struct sbn_node *n, const char *text, char *err, size_t errcap);
void ip4str(uint32_t a, char *buf); /* buf of 16 bytes */

/* link.c */
/* Makes veth bx->ifname (host) / eth0 (in the namespace of pid), addresses
 * and routes; fills bx->ifindex. */
int link_add(struct sbn_box *bx, pid_t pid, int home_net, char *err, size_t errcap);
void link_del(const struct sbn_box *bx);

/* resolver.c: the thread's DNS parts. */
int resolver_open(struct sbn_node *n);
void resolver_query(struct sbn_node *n);
void resolver_answer(struct sbn_node *n);
void resolver_expire(struct sbn_node *n, int64_t now);
void resolver_close(struct sbn_node *n);
/* The name a grant of bx holds for addr, or NULL (mu held). */
const char *grant_name(const struct sbn_box *bx, uint32_t addr);

/* nflog.c */
int nflog_open(struct sbn_node *n);
void nflog_read(struct sbn_node *n);

/* netlog.c: one JSONL record (mu held); rec is a JSON object's text
 * without its time (added first). */
void netlog_write(struct sbn_box *bx, const char *rec, size_t len);
int netlog_open(struct sbn_box *bx);
int64_t mono_s(void);

/* node.c */
struct sbn_box *node_box_by_addr(struct sbn_node *n, uint32_t addr);  /* mu held */
struct sbn_box *node_box_by_ifindex(struct sbn_node *n, int ifindex); /* mu held */
