/* peers.h — connections counted per peer, for sandboxd's per-peer cap: a
 * peer is the uid of a unix-socket client (SO_PEERCRED) or the address of a
 * TCP client (an IPv4-mapped IPv6 address counts as its IPv4 address).
 *
 * A table of the peers that hold connections: an entry exists while its
 * count is above zero, so the table never holds more entries than there
 * are connections. All of it runs on the loop thread. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct sbd_peer_key {
	uint8_t family; /* 0 unix (uid in addr[0..4)), 4 IPv4, 6 IPv6 */
	uint8_t addr[16];
};

struct sbd_peers;
struct sbd_peer;

/* Returns a new empty table (caller frees with sbd_peers_free), or NULL. */
struct sbd_peers *sbd_peers_new(void);
/* Frees the table and its entries; accepts NULL. Returns NULL. */
struct sbd_peers *sbd_peers_free(struct sbd_peers *t);

/* Fills *ret with the peer of connected socket fd (tcp: its address, else
 * the uid of the process that connected). Returns 0 or -errno. */
int sbd_peer_of(int fd, bool tcp, struct sbd_peer_key *ret);
/* Writes the peer as text ("uid 0", "127.0.0.1", "::1") into buf. */
void sbd_peer_str(const struct sbd_peer_key *k, char *buf, size_t size);

/* Counts one more connection of peer k unless it holds cap already.
 * Returns the entry (the table's; give it back with sbd_peers_put), or
 * NULL with *at_cap set when the peer holds cap connections (-ENOMEM
 * leaves it clear). */
struct sbd_peer *sbd_peers_take(struct sbd_peers *t, const struct sbd_peer_key *k, size_t cap,
				bool *at_cap);
/* Counts one connection of p less (p may be NULL: nothing to do); frees
 * the entry at zero. */
void sbd_peers_put(struct sbd_peers *t, struct sbd_peer *p);
/* The number of peers holding connections. */
size_t sbd_peers_count(const struct sbd_peers *t);
