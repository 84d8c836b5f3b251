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
};

int64_t vmm_now_ms(void);
/* Reads QEMU's greeting and enters command mode (qmp_capabilities). */
int vmm_qmp_greet(struct vmm *v, struct strata_err *e);
/* Restoring: waits until the incoming migration completed, then resumes
 * the guest (it was saved paused). */
int vmm_wait_incoming(struct vmm *v, uint32_t timeout_ms, struct strata_err *e);
/* The answer of the command execute sent last (vmm_qmp without the send). */
int vmm_qmp_answer(struct vmm *v, const char *execute, char **ret_reply, struct strata_err *e);
