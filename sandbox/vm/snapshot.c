/* snapshot.c — a VM's state saved to a file and restored from it, by QEMU's
 * migration (vmm.h: vmm_save, vmm_config.incoming_fd). The file goes to
 * QEMU as a descriptor both ways: saving, over QMP with SCM_RIGHTS
 * (getfd, then migrate "fd:NAME"); restoring, as the VMM's fd 0
 * (-incoming fd:0). Nothing is named by path: QEMU's root is read-only. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fs/json.h"
#include "sandbox/vm/vmm-internal.h"

#define SAVE_TIMEOUT_MS 120000

/* QMP getfd: the fd travels with the command's bytes. */
static int send_fd(struct vmm *v, int fd, const char *name, struct strata_err *e)
{
	char msg[128];
	int n = snprintf(msg, sizeof(msg),
			 "{\"execute\":\"getfd\",\"arguments\":{\"fdname\":\"%s\"}}\n", name);
	union {
		struct cmsghdr h;
		char b[CMSG_SPACE(sizeof(int))];
	} u;
	struct iovec iov = {.iov_base = msg, .iov_len = (size_t)n};
	struct msghdr m = {
	    .msg_iov = &iov, .msg_iovlen = 1, .msg_control = u.b, .msg_controllen = sizeof(u.b)};
	struct cmsghdr *c = CMSG_FIRSTHDR(&m);
	c->cmsg_level = SOL_SOCKET;
	c->cmsg_type = SCM_RIGHTS;
	c->cmsg_len = CMSG_LEN(sizeof(int));
	memcpy(CMSG_DATA(c), &fd, sizeof(int));
	if (sendmsg(v->qmp_fd, &m, MSG_NOSIGNAL) != n)
		return strata_err_set(e, -errno, "QMP getfd: %s", strerror(errno));
	return vmm_qmp_answer(v, "getfd", NULL, e);
}

/* The value of member key of the "return" object of a QMP answer. */
static int answer_str(const char *reply, const char *key, char *buf, size_t cap)
{
	struct json *j = json_parse(reply, strlen(reply), NULL, 0);
	const char *s = json_cstr(json_get(json_get(j, "return"), key));
	int r = s ? 0 : -ENOENT;
	if (s)
		snprintf(buf, cap, "%s", s);
	json_free(j);
	return r;
}

static void sleep_ms(int ms)
{
	poll(NULL, 0, ms);
}

int vmm_save(struct vmm *v, int fd, struct strata_err *e)
{
	char *reply = NULL, status[64] = "";
	int r = vmm_pause(v, e);
	/* the default bandwidth cap (32 MiB/s) is for a network, not a file */
	if (r == 0)
		r = vmm_qmp(v, "migrate-set-parameters", "{\"max-bandwidth\":107374182400}", NULL,
			    e);
	if (r == 0)
		r = send_fd(v, fd, "snap", e);
	if (r == 0)
		r = vmm_qmp(v, "migrate", "{\"uri\":\"fd:snap\"}", NULL, e);
	for (int64_t end = vmm_now_ms() + SAVE_TIMEOUT_MS; r == 0;) {
		r = vmm_qmp(v, "query-migrate", NULL, &reply, e);
		if (r == 0 && answer_str(reply, "status", status, sizeof(status)) == 0) {
			if (!strcmp(status, "completed")) {
				free(reply);
				return 0;
			}
			if (!strcmp(status, "failed") || !strcmp(status, "cancelled")) {
				char why[160] = "";
				answer_str(reply, "error-desc", why, sizeof(why));
				r = strata_err_set(e, -EIO, "saving the VM failed: %s",
						   why[0] ? why : status);
			}
		}
		free(reply);
		reply = NULL;
		if (r == 0 && vmm_now_ms() > end)
			r = strata_err_set(e, -ETIMEDOUT, "saving the VM: still %s", status);
		if (r == 0)
			sleep_ms(20);
	}
	return r;
}

int vmm_wait_incoming(struct vmm *v, uint32_t timeout_ms, struct strata_err *e)
{
	char *reply = NULL, status[64] = "";
	int64_t end = vmm_now_ms() + timeout_ms;
	for (int r = 0;;) {
		r = vmm_qmp(v, "query-status", NULL, &reply, e);
		if (r == 0 && answer_str(reply, "status", status, sizeof(status)) < 0)
			r = strata_err_set(e, -EPROTO, "query-status: no status");
		free(reply);
		reply = NULL;
		if (r < 0)
			return r;
		if (!strcmp(status, "running"))
			return 0;
		if (strcmp(status, "inmigrate")) /* saved paused: paused, postmigrate */
			return vmm_resume(v, e);
		if (vmm_now_ms() > end)
			return strata_err_set(e, -ETIMEDOUT, "the incoming migration did not end");
		sleep_ms(20);
	}
}
