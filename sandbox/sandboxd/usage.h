/* usage.h — reading one sandbox's usage from the host (usage.c): for the
 * backends' usage() (backend.h, struct sbd_usage). */
#pragma once
#include <stdint.h>
#include <sys/types.h>

#include "sandbox/sandboxd/backend.h"

/* Fills ret from the sandbox's memory and pids cgroup directories (the same
 * one on v2) and its root process (for the writable layer: sbd_disk_used).
 * A figure that cannot be read is -1. Returns 0, or -ENOENT when the
 * cgroups are gone (ret untouched). */
int sbd_usage_read(const char *memory_dir, const char *pids_dir, pid_t root_pid,
		   struct sbd_usage *ret);
/* The CPU time in µs of the processes in cgroup_dir (cgroup.procs) and of
 * the children they reaped, or -errno. */
int64_t sbd_usage_cpu_us(const char *cgroup_dir);
/* Bytes used on the writable layer of the sandbox whose root process is
 * root_pid (statfs of its root: an overlay reports its upper layer's
 * filesystem), or -errno. The one place that knows where the layer is. */
int64_t sbd_disk_used(pid_t root_pid);
