/* vmm-internal.h — what qemu.c and qmp.c share: the VMM's state. */
#pragma once
#include <stdbool.h>
#include <stdint.h>

#include "sandbox/container/worker.h"
#include "sandbox/vm/vmm.h"

struct vmm {
	pid_t pid;
	int pidfd;    /* -1 once reaped */
	int agent_fd; /* the host end of the agent's port */
	int qmp_fd;
	bool worker; /* contained: w holds it */
	struct sbx_worker w;
	bool reaped;
	char why[256]; /* once reaped: how it ended */
	char *qmp_buf; /* QMP bytes read and not yet taken (a partial line) */
	size_t qmp_len, qmp_cap;
	bool adopted; /* vmm_adopt: not our child; its cgroups are these */
	char cgroup[VMM_CGROUP_DIRS][512];
};

/* The abstract socket names of the agent's port and of the second QMP
 * monitor, in the VMM's own network namespace. */
#define VMM_SOCK_AGENT "strata-agent"
#define VMM_SOCK_QMP "strata-qmp"

/* Connects to the abstract unix socket name in the network namespace of the
 * process of pidfd (a thread enters it to make the socket; the connect
 * then reaches that namespace's names), retrying while QEMU has not made
 * it yet, up to timeout_ms. 0 and *ret_fd, or -errno. */
int vmm_ns_connect(int pidfd, const char *name, uint32_t timeout_ms, int *ret_fd);
/* Reads the agent's frames until one of type (and, for a reply, id; 0:
 * any) within timeout_ms, skipping others (what an earlier host left
 * unread); watching the VMM's exit (-ECHILD). */
int vmm_agent_wait(struct vmm *v, uint16_t type, uint32_t id, uint32_t timeout_ms);
/* vmm_free of an adopted VMM: SIGKILL, its exit awaited on the pidfd (not
 * our child), its cgroups removed. */
void vmm_adopted_kill(struct vmm *v);
/* Closes our ends of the agent's stream and of QMP and frees v (the VMM
 * itself is the caller's: killed, or let go of). */
void vmm_close_ends(struct vmm *v);

int64_t vmm_now_ms(void);
/* Reads QEMU's greeting and enters command mode (qmp_capabilities). */
int vmm_qmp_greet(struct vmm *v, struct strata_err *e);
/* Restoring: waits until the incoming migration completed, then resumes
 * the guest (it was saved paused). */
int vmm_wait_incoming(struct vmm *v, uint32_t timeout_ms, struct strata_err *e);
/* The answer of the command execute sent last (vmm_qmp without the send). */
int vmm_qmp_answer(struct vmm *v, const char *execute, char **ret_reply, struct strata_err *e);
