/* sbx_masks.h — what a sandbox's /proc and /sys hide or make read-only
 * (paths relative to the sandbox root): Docker's lists and a few more,
 * applied by masks.c for the container library's staging (child.c) and its
 * workers (worker.c), and, as JSON from there, by the call processes of
 * sandboxd's fncall templates; a path this kernel lacks is skipped.
 *   proc_masked       files: /dev/null bound over each
 *   proc_masked_dirs  directories: an empty read-only tmpfs over each
 *   proc_ro           bound read-only onto themselves
 *   sys_masked        directories under /sys, as proc_masked_dirs
 *   sys_masked_files  files under /sys, as proc_masked
 * /proc/config.gz and /sys/kernel/vmcoreinfo: the host kernel's build
 * configuration and, in vmcoreinfo, the addresses of its symbols (a KASLR
 * leak) are nothing a sandbox needs to see. */
#pragma once

static const char *const proc_masked[] = {
    "proc/kcore",	 "proc/keys",	     "proc/key-users",	   "proc/timer_list",
    "proc/timer_stats",	 "proc/sched_debug", "proc/latency_stats", "proc/kpagecgroup",
    "proc/kpagecount",	 "proc/kpageflags",  "proc/kallsyms",	   "proc/vmallocinfo",
    "proc/pagetypeinfo", "proc/slabinfo",    "proc/config.gz",
};
static const char *const proc_masked_dirs[] = {"proc/acpi", "proc/scsi", "proc/asound",
					       "proc/driver"};
static const char *const proc_ro[] = {"proc/bus", "proc/fs", "proc/irq", "proc/sys",
				      "proc/sysrq-trigger"};
static const char *const sys_masked[] = {"sys/firmware", "sys/devices/virtual/powercap",
					 "sys/kernel/debug", "sys/kernel/security"};
static const char *const sys_masked_files[] = {"sys/kernel/vmcoreinfo"};
