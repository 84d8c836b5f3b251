#!/bin/bash
# tests/vm/guest.sh — stage two of scripts/testvm.sh, pid 1 of the guest:
# the usual mounts, cgroup v2 alone with every controller, then the job the
# host wrote (job.sh in the shared directory), its exit status back in rc.
# Never run this on a host: it mounts over /sys/fs/cgroup and powers off.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
[ "$$" -eq 1 ] || { echo "guest.sh: only as the test VM's init" >&2; exit 2; }

fail() { echo "testvm guest: $*"; poweroff -f; }

mount_basics() {
	mount -t proc proc /proc
	mount -t sysfs sysfs /sys
	mount -t devtmpfs devtmpfs /dev
	mkdir -p /dev/pts /dev/shm /dev/mqueue
	mount -t devpts -o newinstance,ptmxmode=0666 devpts /dev/pts
	mount -t tmpfs -o mode=1777 tmpfs /dev/shm
	mount -t mqueue mqueue /dev/mqueue
	# /tmp and /var/tmp stay the overlay's (writable, in guest memory):
	# the job's own tree may live there (a CI clone in /tmp), and a tmpfs
	# over them would hide it.
	mount -t tmpfs -o mode=755 tmpfs /run
	# The scratch disk (scripts/testvm.sh): temporary files on a disk, so
	# that what tests write there (sandbox layers) is not guest memory.
	if [ -b /dev/vda ]; then
		mkdir -p /scratch && mount -t xfs /dev/vda /scratch && chmod 1777 /scratch &&
			export TMPDIR=/scratch
	fi
}

# cgroup v2 only: every controller the kernel has goes to the unified
# hierarchy because no v1 hierarchy is ever mounted here.
mount_cgroup2() {
	local opts
	opts=$(sed -n 's/.*testvm.cgopts=\([^ ]*\).*/\1/p' /proc/cmdline)
	[ "$opts" != none ] || opts=
	mount -t cgroup2 ${opts:+-o "$opts"} cgroup2 /sys/fs/cgroup || fail "cannot mount cgroup2"
	local c
	for c in $(cat /sys/fs/cgroup/cgroup.controllers); do
		echo "+$c" >/sys/fs/cgroup/cgroup.subtree_control 2>/dev/null ||
			echo "testvm guest: cannot enable $c"
	done
}

mount_basics
mount_cgroup2
mkdir -p /testvm-out
mount -t 9p -o trans=virtio,version=9p2000.L testvm_out /testvm-out || fail "no shared directory"
ip link set lo up 2>/dev/null || true
hostname strata-testvm
echo "testvm guest: $(uname -r), cgroup2 ($(grep -o 'cgroup2 [^ ]* [^ ]*' /proc/mounts)) controllers: $(cat /sys/fs/cgroup/cgroup.subtree_control)"

bash /testvm-out/job.sh </dev/null
echo $? >/testvm-out/rc
sync
umount /testvm-out
poweroff -f
