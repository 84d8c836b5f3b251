/* test_peers.c — unit test of sandboxd's per-peer connection counts
 * (peers.h): a peer is refused at its cap and only at it, other peers are
 * counted apart, an entry goes when its last connection does (the table
 * never holds more peers than connections), and the peer of real sockets:
 * the uid of a unix-socket client, the address of a TCP one (IPv4-mapped
 * IPv6 counted as IPv4). Exit 0 pass, 1 fail. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdint.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox/sandboxd/peers.h"
#include "tests/testutil.h"

static struct sbd_peer_key ipv4(uint8_t last)
{
	struct sbd_peer_key k = {.family = 4, .addr = {127, 0, 0, last}};
	return k;
}

static void test_caps(void)
{
	struct sbd_peers *t = sbd_peers_new();
	CHECK(t);
	struct sbd_peer_key a = ipv4(2), b = ipv4(3);
	struct sbd_peer *held[3];
	bool at_cap;
	for (int i = 0; i < 3; i++) {
		held[i] = sbd_peers_take(t, &a, 3, &at_cap);
		CHECK(held[i] && !at_cap);
	}
	CHECK(!sbd_peers_take(t, &a, 3, &at_cap) && at_cap); /* a at its cap */
	struct sbd_peer *pb = sbd_peers_take(t, &b, 3, &at_cap);
	CHECK(pb && !at_cap); /* b is counted apart */
	CHECK_EQ(sbd_peers_count(t), 2);
	sbd_peers_put(t, held[0]);
	held[0] = sbd_peers_take(t, &a, 3, &at_cap); /* one place again */
	CHECK(held[0]);
	for (int i = 0; i < 3; i++)
		sbd_peers_put(t, held[i]);
	CHECK_EQ(sbd_peers_count(t), 1); /* a's entry is gone */
	sbd_peers_put(t, pb);
	sbd_peers_put(t, NULL);
	CHECK_EQ(sbd_peers_count(t), 0);
	CHECK(!sbd_peers_take(t, &a, 0, &at_cap) && at_cap); /* cap 0: nobody */
	sbd_peers_free(t);
}

static void test_socket_peers(void)
{
	int sv[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
	struct sbd_peer_key k;
	char s[64];
	CHECK(sbd_peer_of(sv[0], false, &k) == 0);
	uint32_t uid;
	memcpy(&uid, k.addr, sizeof(uid));
	CHECK(k.family == 0 && uid == (uint32_t)getuid());
	sbd_peer_str(&k, s, sizeof(s));
	char want[32];
	snprintf(want, sizeof(want), "uid %u", (unsigned)getuid());
	CHECK(!strcmp(s, want));
	close(sv[0]);
	close(sv[1]);

	/* A TCP client on an IPv6 listener from 127.0.0.1: an IPv4 peer. */
	int l = socket(AF_INET6, SOCK_STREAM, 0);
	if (l < 0) {
		fprintf(stderr, "no IPv6 sockets: the TCP part is not checked\n");
		return;
	}
	struct sockaddr_in6 a6 = {.sin6_family = AF_INET6, .sin6_addr = in6addr_any};
	socklen_t al = sizeof(a6);
	int zero = 0;
	setsockopt(l, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof(zero));
	CHECK(bind(l, (struct sockaddr *)&a6, sizeof(a6)) == 0 && listen(l, 4) == 0);
	CHECK(getsockname(l, (struct sockaddr *)&a6, &al) == 0);
	int c = socket(AF_INET, SOCK_STREAM, 0);
	struct sockaddr_in a4 = {.sin_family = AF_INET, .sin_port = a6.sin6_port};
	inet_pton(AF_INET, "127.0.0.1", &a4.sin_addr);
	CHECK(connect(c, (struct sockaddr *)&a4, sizeof(a4)) == 0);
	int fd = accept(l, NULL, NULL);
	CHECK(fd >= 0);
	CHECK(sbd_peer_of(fd, true, &k) == 0);
	CHECK(k.family == 4 && !memcmp(k.addr, "\x7f\0\0\x01", 4));
	sbd_peer_str(&k, s, sizeof(s));
	CHECK(!strcmp(s, "127.0.0.1"));
	close(fd);
	close(c);
	close(l);
}

int main(void)
{
	test_caps();
	test_socket_peers();
	return 0;
}
