#!/usr/bin/env bash
# scripts/testvm.sh — runs a command as root inside a QEMU virtual machine
# that boots Debian 12's own kernel (linux-image-amd64) and sees this
# machine's file system: for the paths the development machine cannot take,
# above all a pure cgroup v2 hierarchy with every controller (this machine
# binds its controllers to cgroup v1), and Debian's stock kernel in place of
# the host's newer one.
#
#   scripts/testvm.sh prepare [--update] fetch the kernel (--update: a newer one
#                                        if apt has it), build the initramfs
#   scripts/testvm.sh run [opts] -- CMD  run CMD in a fresh VM; its exit status
#   scripts/testvm.sh check              exit 0 when `run` can work, else say why
#
# run options: --cpus N (2), --mem MiB (3072), --timeout S (900),
#              --cwd DIR (the current one), --log FILE (the guest's output
#              is copied there as well as to stderr), --cgroup-opts OPTS
#              (the cgroup2 mount's options: nsdelegate, as systemd mounts
#              it; "none" for none)
#
# The guest: the host's root, read-only over 9p (virtio), under an overlay
# whose upper layer is guest memory (whatever the command writes is gone with
# the VM); a scratch disk (XFS, $SCRATCH_SIZE sparse) on /scratch, TMPDIR;
# proc, sysfs, devtmpfs, devpts, tmpfs on /run and /dev/shm;
# cgroup2 alone on /sys/fs/cgroup with cpu, memory, pids, io and
# cpuset enabled for children; lo up, no other network. The command runs in
# bash with the caller's environment (exported variables) and directory.
# QEMU emulates the CPU (TCG: slow but real; the kernel's boot takes ~3 s
# here); STRATA_TESTVM_KVM=1 uses KVM instead where it works.
#
# The kernel is Debian's linux-image package, downloaded with `apt-get
# download` (no installation: nothing under /boot or /lib/modules changes),
# unpacked into $STRATA_TESTVM_DIR (default /var/cache/strata/testvm).
# Exit status of `run`: the command's, 77 when QEMU or the kernel is missing
# (run `prepare`), 124 on timeout, 125 when the guest did not report one.
set -euo pipefail

VMDIR=${STRATA_TESTVM_DIR:-/var/cache/strata/testvm}
SRC=$(cd "$(dirname "$0")/.." && pwd)
# Modules the initramfs loads, in dependency order: virtio over PCI, 9p over
# virtio, and overlayfs for the guest's writable root; the scratch disk
# (virtio-blk, XFS), and XFS and loop devices for the
# sandboxes' writable layers (sandbox/container/layer.c); FUSE for the
# pause tests' filesystem that never answers (test_sandbox_pause.c).
MODULES=(virtio_ring virtio virtio_pci_legacy_dev virtio_pci_modern_dev virtio_pci
	 9pnet 9pnet_virtio netfs fscache 9p overlay virtio_blk crc32c_generic libcrc32c xfs
	 loop fuse)
# The guest's scratch disk (a sparse file, XFS, on /scratch; TMPDIR there):
# what the tests write to disk there is not guest memory.
SCRATCH_SIZE=16G

die() { echo "testvm: $*" >&2; exit 1; }

usage() {
	sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'
}

. "$SRC/scripts/debian-kernel.sh"

fetch_kernel() {
	local pkg tmp
	pkg=$(kernel_package)
	[ -n "$pkg" ] || die "apt knows no linux-image-amd64 (apt-get update?)"
	tmp=$(mktemp -d "$VMDIR/fetch.XXXXXX")
	(cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
		{ rm -rf "$tmp"; die "apt-get download $pkg failed"; }
	dpkg-deb -x "$tmp"/*.deb "$tmp/x"
	install -m 0644 "$tmp"/x/boot/vmlinuz-* "$VMDIR/vmlinuz"
	rm -rf "$VMDIR/modules"
	mkdir -p "$VMDIR/modules"
	local m f
	for m in "${MODULES[@]}"; do
		f=$(find "$tmp/x/lib/modules" -name "$m.ko" | head -1)
		[ -n "$f" ] || { rm -rf "$tmp"; die "$pkg has no module $m"; }
		cp "$f" "$VMDIR/modules/"
	done
	echo "$pkg" >"$VMDIR/kernel.version"
	rm -rf "$tmp"
}

# Stage one, the initramfs's /init: load the modules, mount the host's root
# (9p, read-only) under a tmpfs overlay and switch to it; stage two is
# tests/vm/guest.sh on that root, found through the kernel command line.
write_init() {
	cat >"$1" <<'EOF'
#!/bin/busybox sh
B=/bin/busybox
$B mount -t proc proc /proc
for m in $(cat /modules.list); do $B insmod /lib/$m.ko || echo "testvm: insmod $m failed"; done
$B mount -t 9p -o trans=virtio,version=9p2000.L,ro,msize=524288,cache=loose hostroot /lower ||
	{ echo "testvm: cannot mount the host's root"; $B poweroff -f; }
$B mount -t tmpfs -o mode=755 tmpfs /up && $B mkdir /up/u /up/w
$B mount -t overlay -o lowerdir=/lower,upperdir=/up/u,workdir=/up/w overlay /newroot ||
	{ echo "testvm: overlay root failed"; $B poweroff -f; }
stage2=$($B sed -n 's/.*testvm.stage2=\([^ ]*\).*/\1/p' /proc/cmdline)
$B umount /proc
exec $B switch_root /newroot /bin/bash "$stage2"
EOF
	chmod 0755 "$1"
}

build_initrd() {
	local ird
	ird=$(mktemp -d "$VMDIR/initrd.XXXXXX")
	mkdir -p "$ird"/{bin,lib,proc,lower,up,newroot}
	cp /bin/busybox "$ird/bin/busybox"
	cp "$VMDIR"/modules/*.ko "$ird/lib/"
	printf '%s\n' "${MODULES[@]}" >"$ird/modules.list"
	write_init "$ird/init"
	(cd "$ird" && find . | busybox cpio -o -H newc 2>/dev/null | gzip -1) >"$VMDIR/initrd.gz.tmp"
	mv "$VMDIR/initrd.gz.tmp" "$VMDIR/initrd.gz"
	rm -rf "$ird"
}

cmd_prepare() {
	command -v busybox >/dev/null || [ -x /bin/busybox ] || die "needs busybox (busybox-static)"
	mkdir -p "$VMDIR"
	# A kernel once fetched stays (asking apt costs a second per build);
	# --update fetches the one linux-image-amd64 names now.
	local m missing=0
	for m in "${MODULES[@]}"; do [ -s "$VMDIR/modules/$m.ko" ] || missing=1; done
	if [ ! -s "$VMDIR/vmlinuz" ] || [ "$missing" = 1 ] || { [ "${1:-}" = --update ] &&
		[ "$(cat "$VMDIR/kernel.version" 2>/dev/null)" != "$(kernel_package)" ]; }; then
		fetch_kernel
	elif [ -s "$VMDIR/initrd.gz" ] && [ "$VMDIR/initrd.gz" -nt "$0" ]; then
		return 0 # ready, and the initramfs is as this script makes it
	fi
	build_initrd
	echo "testvm: $(cat "$VMDIR/kernel.version") ready in $VMDIR" >&2
}

# Why `run` cannot work here, or nothing.
why_not() {
	command -v qemu-system-x86_64 >/dev/null || { echo "qemu-system-x86_64 missing (apt-get install qemu-system-x86)"; return; }
	[ -s "$VMDIR/vmlinuz" ] && [ -s "$VMDIR/initrd.gz" ] || { echo "no kernel in $VMDIR (scripts/testvm.sh prepare)"; return; }
	local m
	for m in "${MODULES[@]}"; do # a cache made before a module was added
		[ -s "$VMDIR/modules/$m.ko" ] || { echo "no module $m in $VMDIR (scripts/testvm.sh prepare)"; return; }
	done
	[ "$(id -u)" -eq 0 ] || echo "needs root (the guest's files are the host's, read as root)"
}

cmd_check() {
	local why
	why=$(why_not)
	[ -z "$why" ] || { echo "testvm: $why" >&2; exit 77; }
}

# TCG unless asked for KVM: this machine has a /dev/kvm whose KVM_RUN spins
# in the kernel and never enters the guest.
accel_args() {
	if [ "${STRATA_TESTVM_KVM:-0}" = 1 ]; then
		echo "-accel kvm -cpu host"
	else
		echo "-accel tcg,thread=multi -cpu max"
	fi
}

# Writes the command, its directory and the caller's exported environment
# into the shared directory, where guest.sh finds them.
write_job() {
	local out=$1 cwd=$2
	shift 2
	{
		export -p | grep -v -E '^declare -x (OLDPWD|PWD|SHLVL|_|TERM)='
		printf 'cd %q\n' "$cwd"
		printf '%q ' "$@"
		echo
	} >"$out/job.sh"
}

cmd_run() {
	local cpus=2 mem=3072 timeout_s=900 cwd=$PWD log= cgopts=nsdelegate
	while [ $# -gt 0 ]; do
		case $1 in
		--cpus) cpus=$2; shift 2 ;;
		--mem) mem=$2; shift 2 ;;
		--timeout) timeout_s=$2; shift 2 ;;
		--cwd) cwd=$2; shift 2 ;;
		--log) log=$2; shift 2 ;;
		--cgroup-opts) cgopts=$2; shift 2 ;;
		--) shift; break ;;
		*) die "unknown option $1 (see --help)" ;;
		esac
	done
	[ $# -gt 0 ] || die "run: no command (testvm.sh run -- CMD ...)"
	local why
	why=$(why_not)
	[ -z "$why" ] || { echo "testvm: $why" >&2; return 77; }
	local out
	out=$(mktemp -d /var/tmp/strata-testvm.XXXXXX)
	write_job "$out" "$cwd" "$@"
	truncate -s "$SCRATCH_SIZE" "$out/scratch.img"
	mkfs.xfs -q -f "$out/scratch.img" || die "mkfs.xfs of the scratch disk failed (xfsprogs)"
	local rc=0
	# shellcheck disable=SC2046 # accel_args is two words on purpose
	timeout --foreground "$timeout_s" qemu-system-x86_64 $(accel_args) \
		-smp "$cpus" -m "$mem" -nographic -no-reboot -nic none \
		-kernel "$VMDIR/vmlinuz" -initrd "$VMDIR/initrd.gz" \
		-append "console=ttyS0 quiet panic=-1 rdinit=/init testvm.stage2=$SRC/tests/vm/guest.sh testvm.cgopts=$cgopts" \
		-virtfs local,path=/,mount_tag=hostroot,security_model=passthrough,readonly=on,multidevs=remap \
		-virtfs local,path="$out",mount_tag=testvm_out,security_model=passthrough \
		-drive file="$out/scratch.img",if=virtio,format=raw,cache=unsafe \
		</dev/null >"$out/console" 2>&1 || rc=$?
	if [ -n "$log" ]; then cp "$out/console" "$log"; fi
	tr -d '\r' <"$out/console" | grep -v -E '^\x1b|SeaBIOS|Booting from ROM' >&2 || true
	if [ "$rc" -eq 124 ]; then
		echo "testvm: timed out after ${timeout_s}s" >&2
	elif [ -s "$out/rc" ]; then
		rc=$(cat "$out/rc")
	else
		echo "testvm: the guest reported no exit status (see its console above)" >&2
		rc=125
	fi
	rm -rf "$out"
	return "$rc"
}

case ${1:-} in
prepare) shift; cmd_prepare "$@" ;;
run) shift; cmd_run "$@" ;;
check) shift; cmd_check ;;
-h | --help | help) usage ;;
*) usage >&2; exit 2 ;;
esac
