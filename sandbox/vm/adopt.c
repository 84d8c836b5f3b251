/* adopt.c — a VMM outliving its host (vmm.h: persist, vmm_id, vmm_adopt,
 * vmm_agent_connect, vmm_release) and the sockets both hosts reach it by.
 *
 * A sandboxd that stops (or dies) leaves its VM sandboxes running: the VMM
 * is a worker without PDEATHSIG. Its host ends were our QMP socketpair
 * (gone with us) and the connection to the agent's port (QEMU sees it
 * close: the guest's port says its host left, and the agent ends the
 * session, its execs held). The next sandboxd finds the VMM by its recorded
 * pid, checks it is the same process (start time, pid namespace: a pid
 * reused since is refused) and reaches it through the two listening
 * sockets QEMU made in the VMM's own network namespace: the second QMP
 * monitor (a fresh session: greeting, capabilities, query-status) and the
 * agent's port, where it says it is a new host (PING with
 * AG_PING_NEW_HOST: the agent, whether or not it saw the old host leave —
 * a paused guest could not — starts a session and says HELLO).
 *
 * An adopted VMM is not our child: its exit is seen on its pidfd without a
 * status, and its cgroups (recorded) are removed by us after its kill. */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/un.h>
#include <unistd.h>

#include "fs/json.h"
#include "sandbox/agent/proto.h"
#include "sandbox/container/strata_sandbox.h"
#include "sandbox/vm/vmm-internal.h"

#define ADOPT_HELLO_MS 20000 /* a loaded TCG guest answers within seconds */
#define KILL_WAIT_MS 5000

struct ns_sock {
	int pidfd, fd, err;
};

/* On a thread of its own: a network namespace entered is the thread's, and
 * this one ends with it. */
static void *ns_sock_thread(void *p)
{
	struct ns_sock *n = p;
	if (setns(n->pidfd, CLONE_NEWNET) < 0)
		n->err = -errno;
	else if ((n->fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0)) < 0)
		n->err = -errno;
	return NULL;
}

static bool gone(int pidfd)
{
	return poll(&(struct pollfd){.fd = pidfd, .events = POLLIN}, 1, 0) > 0;
}

int vmm_ns_connect(int pidfd, const char *name, uint32_t timeout_ms, int *ret_fd)
{
	struct sockaddr_un sa = {.sun_family = AF_UNIX};
	size_t len = strlen(name);
	if (len + 1 > sizeof(sa.sun_path))
		return -ENAMETOOLONG;
	memcpy(sa.sun_path + 1, name, len); /* abstract: a NUL first */
	socklen_t sl = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
	int64_t end = vmm_now_ms() + timeout_ms;
	for (;;) {
		struct ns_sock n = {.pidfd = pidfd, .fd = -1};
		pthread_t t;
		int r = pthread_create(&t, NULL, ns_sock_thread, &n);
		if (r)
			return -r;
		pthread_join(t, NULL);
		if (n.err)
			return n.err == -EINVAL ? -ESRCH : n.err;
		if (connect(n.fd, (struct sockaddr *)&sa, sl) == 0) {
			*ret_fd = n.fd;
			return 0;
		}
		r = -errno;
		close(n.fd);
		if (r != -ECONNREFUSED && r != -ENOENT && r != -EINTR)
			return r;
		if (gone(pidfd))
			return -ECHILD;
		if (vmm_now_ms() >= end)
			return r;
		poll(NULL, 0, 10); /* QEMU has not made it yet */
	}
}

/* Reads n bytes of the agent's stream (buf NULL: drops them) by end. */
static int agent_read(struct vmm *v, uint8_t *buf, size_t n, int64_t end)
{
	uint8_t sink[4096];
	while (n) {
		struct pollfd p[2] = {{.fd = v->agent_fd, .events = POLLIN},
				      {.fd = v->pidfd, .events = POLLIN}};
		int64_t left = end - vmm_now_ms();
		if (left <= 0)
			return -ETIMEDOUT;
		if (poll(p, 2, (int)left) < 0 && errno != EINTR)
			return -errno;
		if (p[0].revents) {
			size_t want = buf ? n : (n < sizeof(sink) ? n : sizeof(sink));
			ssize_t k = read(v->agent_fd, buf ? buf : sink, want);
			if (k == 0)
				return -ECHILD;
			if (k < 0 && errno != EINTR && errno != EAGAIN)
				return -errno;
			if (k > 0) {
				n -= (size_t)k;
				buf = buf ? buf + k : NULL;
			}
		} else if (p[1].revents)
			return -ECHILD;
	}
	return 0;
}

int vmm_agent_wait(struct vmm *v, uint16_t type, uint32_t id, uint32_t timeout_ms)
{
	int64_t end = vmm_now_ms() + timeout_ms;
	for (;;) {
		uint8_t hdr[AG_HDR_SIZE];
		struct ag_hdr h;
		int r = agent_read(v, hdr, sizeof(hdr), end);
		if (r == 0)
			r = ag_hdr_decode(hdr, &h);
		if (r == 0) /* its payload follows at once */
			r = agent_read(v, NULL, h.len, vmm_now_ms() + VMM_QMP_TIMEOUT_MS);
		if (r < 0)
			return r;
		if (h.type == type && (!id || h.id == id))
			return 0;
	}
}

int vmm_agent_connect(struct vmm *v, struct strata_err *e)
{
	if (v->agent_fd >= 0)
		close(v->agent_fd);
	v->agent_fd = -1;
	int r = vmm_ns_connect(v->pidfd, VMM_SOCK_AGENT, VMM_QMP_TIMEOUT_MS, &v->agent_fd);
	if (r < 0)
		return strata_err_set(e, r, "cannot connect to the guest's agent port: %s",
				      strerror(-r));
	uint8_t f[AG_HDR_SIZE + 1];
	const uint32_t id = 1;
	ag_hdr_encode(AG_T_PING, id, 1, f);
	f[AG_HDR_SIZE] = AG_PING_NEW_HOST;
	if (send(v->agent_fd, f, sizeof(f), MSG_NOSIGNAL) != (ssize_t)sizeof(f))
		return strata_err_set(e, -errno, "the guest's agent port: %s", strerror(errno));
	r = vmm_agent_wait(v, AG_T_HELLO, 0, ADOPT_HELLO_MS);
	if (r == 0)
		r = vmm_agent_wait(v, AG_T_PING | AG_T_REPLY, id, VMM_QMP_TIMEOUT_MS);
	if (r < 0)
		return strata_err_set(e, r, "the guest's agent did not answer its new host: %s",
				      r == -ECHILD ? "the VMM exited" : strerror(-r));
	return 0;
}

int vmm_id(const struct vmm *v, struct vmm_id *ret)
{
	struct sbx_agent_id id;
	*ret = (struct vmm_id){0};
	int r = sbx_process_id(v->pid, v->pidfd, &id);
	if (r < 0)
		return r;
	ret->pid = id.pid;
	ret->start_time = id.start_time;
	ret->pidns_ino = id.pidns_ino;
	static const char *const ctrl[VMM_CGROUP_DIRS] = {"pids", "memory", "cpu"};
	for (int i = 0; v->worker && i < VMM_CGROUP_DIRS; i++) {
		char p[sizeof(ret->cgroup[0])];
		if (sbx_worker_cgroup_path(&v->w, ctrl[i], false, p, sizeof(p)) < 0)
			continue;
		bool dup = false; /* v2: one directory for all */
		for (int k = 0; k < i; k++)
			dup = dup || !strcmp(ret->cgroup[k], p);
		if (!dup)
			snprintf(ret->cgroup[i], sizeof(ret->cgroup[i]), "%s", p);
	}
	if (!ret->cgroup[1][0]) /* the memory charge is read from [1] */
		for (int k = 0; k < VMM_CGROUP_DIRS; k++)
			if (ret->cgroup[k][0] && k != 1) {
				snprintf(ret->cgroup[1], sizeof(ret->cgroup[1]), "%s",
					 ret->cgroup[k]);
				ret->cgroup[k][0] = 0;
				break;
			}
	return 0;
}

/* The status of a QMP query-status answer: "running", "paused", ... */
static int qmp_status(struct vmm *v, char *buf, size_t cap, struct strata_err *e)
{
	char *reply = NULL;
	int r = vmm_qmp(v, "query-status", NULL, &reply, e);
	if (r < 0)
		return r;
	struct json *j = json_parse(reply, strlen(reply), NULL, 0);
	const char *st = json_cstr(json_get(json_get(j, "return"), "status"));
	r = st ? 0 : strata_err_set(e, -EPROTO, "query-status: no status");
	if (st)
		snprintf(buf, cap, "%s", st);
	json_free(j);
	free(reply);
	return r;
}

/* The VMM of id, if the process with its pid is it: 0 and *ret (adopted,
 * no channel yet), -ESRCH, -EPERM (another process), -errno. */
static int find(const struct vmm_id *id, struct vmm **ret)
{
	struct vmm *v = calloc(1, sizeof(*v));
	if (!v)
		return -ENOMEM;
	v->agent_fd = v->qmp_fd = -1;
	v->w.pidfd = v->w.cpu_fd = -1;
	v->adopted = true;
	v->pid = id->pid;
	memcpy(v->cgroup, id->cgroup, sizeof(v->cgroup));
	v->pidfd = id->pid > 0 ? (int)syscall(SYS_pidfd_open, id->pid, 0) : -1;
	int r = v->pidfd < 0 ? -ESRCH : 0;
	struct sbx_agent_id now;
	if (r == 0)
		r = sbx_process_id(id->pid, v->pidfd, &now);
	if (r == 0 && (now.start_time != id->start_time || now.pidns_ino != id->pidns_ino))
		r = -EPERM;
	*ret = v;
	return r;
}

int vmm_kill_id(const struct vmm_id *id)
{
	struct vmm *v = NULL;
	int r = find(id, &v);
	if (r == 0)
		vmm_free(v); /* vmm_adopted_kill */
	else
		vmm_release(v);
	return r;
}

int vmm_adopt(const struct vmm_id *id, struct vmm **ret, bool *ret_paused, struct strata_err *e)
{
	struct vmm *v = NULL;
	int r = find(id, &v);
	if (r < 0) {
		strata_err_set(e, r, "the VMM (pid %d) %s", (int)id->pid,
			       r == -ESRCH   ? "is gone"
			       : r == -EPERM ? "is not the recorded process (its pid was reused)"
					     : strerror(-r));
		vmm_release(v);
		return r;
	}
	char st[64] = "";
	r = vmm_ns_connect(v->pidfd, VMM_SOCK_QMP, VMM_QMP_TIMEOUT_MS, &v->qmp_fd);
	if (r < 0)
		strata_err_set(e, r, "cannot connect to the VMM's QMP: %s", strerror(-r));
	if (r == 0)
		r = vmm_qmp_greet(v, e);
	if (r == 0)
		r = qmp_status(v, st, sizeof(st), e);
	if (r < 0) {
		vmm_release(v); /* the caller decides whether it is killed */
		return r;
	}
	*ret_paused = strcmp(st, "running") != 0;
	*ret = v;
	return 0;
}

void vmm_adopted_kill(struct vmm *v)
{
	if (v->pidfd >= 0) {
		syscall(SYS_pidfd_send_signal, v->pidfd, SIGKILL, NULL, 0);
		poll(&(struct pollfd){.fd = v->pidfd, .events = POLLIN}, 1, KILL_WAIT_MS);
		close(v->pidfd);
		v->pidfd = -1;
	}
	/* the kernel lets go of a dead task's cgroup a little after its exit */
	for (int i = 0; i < VMM_CGROUP_DIRS; i++)
		for (int t = 0; v->cgroup[i][0] && t < 50; t++) {
			if (rmdir(v->cgroup[i]) == 0 || errno == ENOENT)
				break;
			poll(NULL, 0, 20);
		}
}

void vmm_release(struct vmm *v)
{
	if (!v)
		return;
	if (v->worker)
		sbx_worker_release(&v->w);
	else if (v->pidfd >= 0)
		close(v->pidfd);
	vmm_close_ends(v);
}
