/* test_netns_check.c — netns_recyclable (netns.c) decides the same through
 * the files it keeps after a namespace's first check as through the setns
 * path of that first check: a namespace with lo up (as staging leaves it)
 * and a sysfs of it mounted (the sandbox's /sys, held by sys_fd) is
 * recyclable; with a socket left in it, with a TIME_WAIT socket, with lo
 * promiscuous or down, it is not; cleaned up, it is again. A helper process
 * makes the namespace and changes it on request; every state is checked
 * twice through the kept files of one struct netns and once through a fresh
 * one (setns, opens). Root (a network namespace, sysfs); 77 otherwise. */
#ifndef _GNU_SOURCE
#define _GNU_SOURCE
#endif
#include <errno.h>
#include <fcntl.h>
#include <net/if.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "sandbox/container/sandbox-internal.h"
#include "tests/sandbox/sbx_test.h"

static int lo_flags(int set, int clear)
{
	int s = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
	struct ifreq ifr;
	memset(&ifr, 0, sizeof(ifr));
	strcpy(ifr.ifr_name, "lo");
	int r = s >= 0 && ioctl(s, SIOCGIFFLAGS, &ifr) == 0 ? 0 : -1;
	ifr.ifr_flags = (short)((ifr.ifr_flags | set) & ~clear);
	if (r == 0)
		r = ioctl(s, SIOCSIFFLAGS, &ifr);
	if (s >= 0)
		close(s);
	return r;
}

/* A TCP connection over lo, closed by the client first: a TIME_WAIT
 * socket stays in the namespace for 60 s (no socket of ours left). */
static int time_wait(void)
{
	struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
	socklen_t len = sizeof(a);
	int l = socket(AF_INET, SOCK_STREAM, 0), c = socket(AF_INET, SOCK_STREAM, 0);
	if (l < 0 || c < 0 || bind(l, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(l, 1) < 0 ||
	    getsockname(l, (struct sockaddr *)&a, &len) < 0 ||
	    connect(c, (struct sockaddr *)&a, sizeof(a)) < 0)
		return -1;
	int s = accept(l, NULL, NULL);
	close(c); /* the active closer holds TIME_WAIT */
	char b;
	if (s >= 0)
		(void)!read(s, &b, 1); /* sees the FIN */
	close(s);
	close(l);
	return 0;
}

/* The helper: in a new network and mount namespace, lo up, sysfs on dir;
 * then one command byte at a time, answering with one byte (0 = done). */
static _Noreturn void helper(int fd, const char *dir)
{
	int held = -1;
	char cmd, ok = 1;
	if (unshare(CLONE_NEWNET | CLONE_NEWNS) == 0 &&
	    mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) == 0 &&
	    mount("sysfs", dir, "sysfs", MS_RDONLY | MS_NOSUID | MS_NODEV | MS_NOEXEC, NULL) == 0 &&
	    netns_lo_up() == 0)
		ok = 0;
	(void)!write(fd, &ok, 1);
	while (read(fd, &cmd, 1) == 1) {
		int r = 0;
		switch (cmd) {
		case 's': /* hold a socket */
			held = socket(AF_INET, SOCK_DGRAM, 0);
			r = held < 0 ? -1 : 0;
			break;
		case 'S': /* close it */
			r = close(held);
			held = -1;
			break;
		case 'p':
			r = lo_flags(IFF_PROMISC, 0);
			break;
		case 'P':
			r = lo_flags(0, IFF_PROMISC);
			break;
		case 'd':
			r = lo_flags(0, IFF_UP);
			break;
		case 'u':
			r = lo_flags(IFF_UP, 0);
			break;
		case 't':
			r = time_wait();
			break;
		}
		ok = r < 0 ? 1 : 0;
		(void)!write(fd, &ok, 1);
	}
	_exit(0);
}

static int ask(int fd, char cmd)
{
	char ok = 1;
	return write(fd, &cmd, 1) == 1 && read(fd, &ok, 1) == 1 && ok == 0 ? 0 : -1;
}

/* Both ways agree with want: the kept files of *kept (twice), a fresh
 * struct netns (setns and opens; closed again). */
static void expect(struct netns *kept, pid_t pid, const char *dir, bool want, const char *what)
{
	bool a = netns_recyclable(kept, -1), b = netns_recyclable(kept, -1);
	struct netns fresh;
	char p[PATH_MAX];
	netns_init(&fresh);
	fresh.fd = netns_open(pid);
	snprintf(p, sizeof(p), "/proc/%d/root%s", (int)pid, dir);
	fresh.sys_fd = open(p, O_PATH | O_CLOEXEC);
	bool c = netns_recyclable(&fresh, -1);
	netns_close(&fresh);
	if (a != want || b != want || c != want) {
		fprintf(stderr, "%s: kept %d %d, fresh %d, want %d\n", what, a, b, c, want);
		sbxt_failed = 1;
	}
	CHECK(kept->kept || !want);
}

int main(void)
{
	if (geteuid() != 0) {
		fprintf(stderr, "SKIP: needs root (network namespaces, sysfs)\n");
		return 77;
	}
	char dir[] = "/tmp/strata-netns-check.XXXXXX";
	if (!mkdtemp(dir)) {
		perror("mkdtemp");
		return 1;
	}
	int sp[2];
	CHECK(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sp) == 0);
	pid_t pid = fork();
	if (pid == 0) {
		close(sp[0]);
		helper(sp[1], dir);
	}
	close(sp[1]);
	char ok = 1;
	if (pid < 0 || read(sp[0], &ok, 1) != 1 || ok != 0) {
		fprintf(stderr, "SKIP: no network namespace with sysfs here\n");
		if (pid > 0)
			kill(pid, SIGKILL);
		rmdir(dir);
		return 77;
	}

	struct netns ns;
	char p[PATH_MAX];
	netns_init(&ns);
	ns.fd = netns_open(pid);
	snprintf(p, sizeof(p), "/proc/%d/root%s", (int)pid, dir);
	ns.sys_fd = open(p, O_PATH | O_CLOEXEC);
	CHECK(ns.fd >= 0 && ns.sys_fd >= 0);
	/* Before the first check nothing is kept; after it, the files. */
	CHECK(!ns.kept);
	expect(&ns, pid, dir, true, "clean");
	int nfiles = 0;
	for (int i = 0; i < NETNS_FILES; i++)
		nfiles += ns.files[i] >= 0;
	CHECK(nfiles >= 3); /* sockstat, dev, lo's flags (and the IPv6 ones if any) */

	CHECK(ask(sp[0], 's') == 0);
	expect(&ns, pid, dir, false, "a socket held");
	CHECK(ask(sp[0], 'S') == 0);
	expect(&ns, pid, dir, true, "socket closed");
	CHECK(ask(sp[0], 'p') == 0);
	expect(&ns, pid, dir, false, "lo promiscuous");
	CHECK(ask(sp[0], 'P') == 0);
	expect(&ns, pid, dir, true, "lo not promiscuous");
	CHECK(ask(sp[0], 'd') == 0);
	expect(&ns, pid, dir, false, "lo down");
	CHECK(ask(sp[0], 'u') == 0);
	expect(&ns, pid, dir, true, "lo up");
	CHECK(ask(sp[0], 't') == 0);
	expect(&ns, pid, dir, false, "a TIME_WAIT socket");

	netns_close(&ns);
	CHECK(ns.fd == -1 && ns.sys_fd == -1 && !ns.kept);
	close(sp[0]);
	int ws;
	while (waitpid(pid, &ws, 0) < 0 && errno == EINTR)
		;
	rmdir(dir);
	fprintf(stderr, "netns check: kept files and setns agree\n");
	return sbxt_failed;
}
