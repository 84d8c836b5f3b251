/* vmm.h — libstrata_vm: the VMM driver of the VM sandboxes (sandboxd's
 * "qemu" backend; sandbox/vm/README.md).
 *
 * One VM per sandbox: qemu-system-x86_64 (q35, TCG, or KVM when /dev/kvm
 * works) boots the guest of guest.sh (Debian's kernel, strata-agent as the
 * initramfs's init) with the image's EROFS metadata and its blobs as
 * read-only virtio disks, a writable disk (a sparse file of the disk limit,
 * ext4, vmm_disk_make) and a virtio-serial port on which the agent serves
 * its protocol (sandbox/agent/PROTOCOL.md). The VMM runs as a worker of the
 * container isolation library (worker.h: its own cgroup with the VM's
 * memory, pids and cpu, new mount, pid, uts, ipc and network namespaces, the
 * host's root read-only, no capabilities, no_new_privs and the sandboxes'
 * seccomp filter), so that a guest that escapes QEMU lands in a sandbox
 * too. It reaches nothing by name: the agent's port, QMP and the writable
 * disk are descriptors the host opened (the disk through /proc/self/fd,
 * whose magic link keeps the host's writable mount), and the read-only
 * files are opened by path on the read-only root.
 *
 * All functions return 0 or a negative errno with the reason in e; the
 * library never logs. One vmm is used by one thread at a time. */
#pragma once
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "fs/err.h"

struct sbx_workers;

/* How long the guest may take to say HELLO: a cold boot under TCG on a
 * loaded 2-core machine takes 10-20 s. */
#define VMM_BOOT_TIMEOUT_MS 120000
/* A QMP command's answer (QEMU answers from its main loop at once). */
#define VMM_QMP_TIMEOUT_MS 5000
#define VMM_MAX_BLOBS 64

struct vmm_config {
	const char *qemu;	  /* the binary; NULL: qemu-system-x86_64 on PATH */
	const char *kernel;	  /* guest.sh's vmlinuz */
	const char *initrd;	  /* guest.sh's initrd.img */
	const char *meta;	  /* the image's EROFS metadata file */
	const char *const *blobs; /* its blob files, the EROFS devices in order */
	size_t nblobs;		  /* <= VMM_MAX_BLOBS */
	int disk_fd;		  /* the writable disk, open read-write */
	unsigned vcpus;		  /* >= 1 */
	uint64_t memory_mb;	  /* the guest's RAM, >= 64 */
	const char *hostname;	  /* NULL: "sandbox" */
	int console_fd;		  /* the guest's console and QEMU's errors; -1: none */
	bool kvm;		  /* -accel kvm (else TCG) */
	struct sbx_workers *ws;	  /* contain the VMM (worker.h); NULL: a plain child */
	uint32_t boot_timeout_ms; /* 0: VMM_BOOT_TIMEOUT_MS */
	/* Restore instead of boot: a snapshot of vmm_save (read from its
	 * start), with disk_fd a copy of the saved VM's disk made after the
	 * save; -1: boot. The restored guest runs on from where it was saved
	 * (its agent says no HELLO again). */
	int incoming_fd;
	/* The VMM outlives us (no PDEATHSIG): a host that restarts adopts it
	 * again (vmm_adopt); vmm_release lets go of it. */
	bool persist;
};

struct vmm;

/* Starts the VMM and waits for the agent's HELLO (restoring: for the
 * incoming migration to complete, then resumes the guest). Returns 0 and *ret (the
 * guest is up, its agent ready on vmm_agent_fd), -ENOENT (no QEMU, kernel,
 * initrd or image file), -ETIMEDOUT (no HELLO in time), -ECHILD (the VMM
 * exited: its reason in e), -errno. */
int vmm_start(const struct vmm_config *c, struct vmm **ret, struct strata_err *e);
/* The host end of the agent's port (a stream socket, for sbx_attach_agent);
 * -1 once vmm_take_agent_fd took it. */
int vmm_agent_fd(const struct vmm *v);
int vmm_take_agent_fd(struct vmm *v);
/* The VMM's pidfd (readable once it exited) and pid. */
int vmm_pidfd(const struct vmm *v);
pid_t vmm_pid(const struct vmm *v);
/* One QMP command, synchronous: execute with arguments args (a JSON object
 * text, or NULL). *ret_reply (may be NULL; caller frees) is QEMU's answer,
 * the JSON text {"return": ...}. Returns 0, -EIO (QEMU answered an error: its desc in
 * e), -ETIMEDOUT, -EPIPE (the VMM is gone). */
int vmm_qmp(struct vmm *v, const char *execute, const char *args, char **ret_reply,
	    struct strata_err *e);
/* Stops and resumes the guest's vCPUs (QMP stop / cont). */
int vmm_pause(struct vmm *v, struct strata_err *e);
int vmm_resume(struct vmm *v, struct strata_err *e);
/* Bytes the guest read from the disk with serial (QMP query-blockstats). */
int vmm_read_bytes(struct vmm *v, const char *serial, uint64_t *ret, struct strata_err *e);
/* Saves the guest's whole state (RAM, devices) into fd, a regular file
 * open for writing (QMP getfd + migrate to it): the guest is paused first
 * and stays paused. Its disk is not in it: copy the disk file after this
 * returns (cache=unsafe: QEMU's writes are in the host's page cache, the
 * paused guest writes nothing more) to restore from the pair. Returns once
 * the migration completed; -EIO with QEMU's reason when it failed. */
int vmm_save(struct vmm *v, int fd, struct strata_err *e);

/* Who a running VMM is, as a host records it to adopt the VMM again after
 * a restart: its pid, start time and pid namespace (sbx_process_id: the
 * VMM is pid 1 of its own) and its cgroups' directories. */
#define VMM_CGROUP_DIRS 3
struct vmm_id {
	pid_t pid;
	uint64_t start_time, pidns_ino;
	char cgroup[VMM_CGROUP_DIRS][512]; /* pids, memory, cpu ("" none; v2: one) */
};
/* The identity of v (a contained VMM). 0, -ESRCH (it exited). */
int vmm_id(const struct vmm *v, struct vmm_id *ret);
/* Takes over a VMM that an earlier host started with persist: checks that
 * the process with id's pid is that VMM (its start time and pid namespace:
 * else -EPERM), connects to its second QMP monitor (an abstract socket in
 * the VMM's own network namespace, which only it and root on the host can
 * enter) and finds whether the guest runs or is paused (*ret_paused). The
 * agent is connected to with vmm_agent_connect (a paused guest answers
 * once resumed). Returns 0 and *ret, -ESRCH (the VMM is gone), -EPERM,
 * -errno with the reason in e. vmm_exited then says "unknown status": the
 * VMM is not our child. */
int vmm_adopt(const struct vmm_id *id, struct vmm **ret, bool *ret_paused, struct strata_err *e);
/* Kills the VMM of id if the process with its pid is it (SIGKILL, its
 * exit awaited, its cgroups removed): a VM that cannot be adopted must not
 * run on unreachable. 0, -ESRCH, -EPERM (another process: left alone). */
int vmm_kill_id(const struct vmm_id *id);
/* Connects to the guest's agent as its new host (its port is a listening
 * socket of QEMU's, in the VMM's network namespace): PING with
 * AG_PING_NEW_HOST, then the agent's HELLO and PING's reply (what an
 * earlier host left unread is skipped). The guest must run. The stream is
 * then vmm_agent_fd's. */
int vmm_agent_connect(struct vmm *v, struct strata_err *e);
/* Lets go of a persist VMM without stopping it (a host that stops; the
 * next one adopts it): closes our ends, frees v. The guest's agent sees
 * its host leave and waits for the next. */
void vmm_release(struct vmm *v);

/* Whether the VMM has exited: 1 with why (e.g. "the VMM (qemu, pid 123)
 * was killed by signal 9") once reaped, 0 while it runs. */
int vmm_exited(struct vmm *v, char *why, size_t cap);
/* The memory charged to the VMM's cgroup, or -ENOENT without one. */
int vmm_memory_bytes(struct vmm *v, uint64_t *ret);
/* Kills the VMM (SIGKILL), reaps it and frees v. Accepts NULL. */
void vmm_free(struct vmm *v);

/* The writable disk: a sparse file of bytes at path, ext4 without a
 * journal (mkfs.ext4 from e2fsprogs; the guest mounts it), open read-write
 * in *ret_fd. Returns 0 or -errno with the reason. */
int vmm_disk_make(const char *path, uint64_t bytes, int *ret_fd, struct strata_err *e);

/* A VMM binary as an absolute path (a worker execs a path): want when it
 * holds a '/', else want (or name when want is NULL) searched on $PATH.
 * 0 or -ENOENT. */
int vmm_find_binary(const char *want, const char *name, char *buf, size_t cap);

/* Whether KVM works here for a VMM that needs it (Firecracker): /dev/kvm
 * opens read-write and answers KVM_GET_API_VERSION 12. 0, or -ENODEV with
 * the reason in e. */
int vmm_kvm_usable(struct strata_err *e);

/* Whether VMs can run here: QEMU found, the guest's files there. 0 or
 * -ENODEV with the reason. kvm: /dev/kvm opens read-write. */
int vmm_probe(const char *qemu, const char *kernel, const char *initrd, bool *ret_kvm,
	      struct strata_err *e);
