/* netns.c — network namespaces for network "none": loopback only, up.
 *
 * Creating a network namespace is one of the slow parts of starting a
 * container (the kernel sets up every per-net subsystem), so the runtime's
 * pool makes them ahead of time: netns_new unshares a namespace on the
 * calling thread, brings "lo" up, keeps an fd to it and moves the thread back
 * to where it was. The sandbox's child joins it with setns. */
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <sched.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <unistd.h>

#include "sandbox-internal.h"

int netns_lo_up(void)
{
	_cleanup_close_ int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	if (s < 0)
		return -errno;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	if (ioctl(s, SIOCGIFFLAGS, &ifr) < 0)
		return -errno;
	ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
	if (ioctl(s, SIOCSIFFLAGS, &ifr) < 0)
		return -errno;
	return 0;
}

int netns_new(int *ret_fd)
{
	_cleanup_close_ int orig = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	_cleanup_close_ int fd = -1;
	int r = 0;
	if (orig < 0)
		return -errno;
	if (unshare(CLONE_NEWNET) < 0)
		return -errno;
	fd = open("/proc/thread-self/ns/net", O_RDONLY | O_CLOEXEC);
	if (fd < 0)
		r = -errno;
	if (r == 0)
		r = netns_lo_up();
	if (setns(orig, CLONE_NEWNET) < 0)
		r = -errno; /* cannot happen as root; the thread would be stranded */
	if (r < 0)
		return r;
	*ret_fd = TAKE_FD(fd);
	return 0;
}
