#!/usr/bin/env bash
# sandbox/vm/guest.sh — the guest of VM sandboxes: Debian's own kernel and a
# small initramfs whose init is strata-agent (agent_guest.c).
#
#   sandbox/vm/guest.sh prepare --agent PATH --out DIR [--update]
#       DIR/vmlinuz     Debian's kernel (linux-image-amd64's package)
#       DIR/initrd.img  uncompressed newc cpio: /init (the agent), /lib/*.ko
#                       and /modules.list (load order, dependencies first),
#                       /dev/console
#       DIR/kernel.version
#   sandbox/vm/guest.sh check --out DIR   exit 0 when DIR holds a guest, else 77
#
# The kernel package is fetched once with `apt-get download` into
# $STRATA_VM_DIR (default /var/cache/strata/vm, beside scripts/testvm.sh's
# cache of the same package) and unpacked there, never installed: nothing
# under /boot or /lib/modules changes. --update fetches the package
# linux-image-amd64 names now. The initramfs is rebuilt when the agent is
# newer than it (uncompressed: under TCG a gunzip of it costs boot time).
set -euo pipefail

VMDIR=${STRATA_VM_DIR:-/var/cache/strata/vm}
# What the guest needs (agent_guest.c), dependencies are added: virtio on
# PCI (q35) and MMIO (microvm), disks, the serial port, the image (EROFS),
# the writable disk (ext4) and the overlay; vsock for Firecracker's guest.
WANT=(crc32c_generic virtio_pci virtio_mmio virtio_blk virtio_console erofs ext4 overlay
      vmw_vsock_virtio_transport)

die() { echo "guest.sh: $*" >&2; exit 1; }

. "$(dirname "$0")/../../scripts/debian-kernel.sh"

# Unpacks the package into $VMDIR/kernel (vmlinuz and the modules' tree).
fetch_kernel() {
	local pkg tmp
	pkg=$(kernel_package)
	[ -n "$pkg" ] || die "apt knows no linux-image-amd64 (apt-get update?)"
	mkdir -p "$VMDIR"
	tmp=$(mktemp -d "$VMDIR/fetch.XXXXXX")
	if ! ls "$VMDIR/$pkg"_*.deb >/dev/null 2>&1; then
		(cd "$tmp" && apt-get download -q "$pkg" >/dev/null 2>&1) ||
			{ rm -rf "$tmp"; die "apt-get download $pkg failed"; }
		mv "$tmp"/*.deb "$VMDIR/"
	fi
	dpkg-deb -x "$(ls "$VMDIR/$pkg"_*.deb | head -1)" "$tmp/x"
	rm -rf "$VMDIR/kernel"
	mkdir -p "$VMDIR/kernel"
	install -m 0644 "$tmp"/x/boot/vmlinuz-* "$VMDIR/kernel/vmlinuz"
	mv "$tmp"/x/lib/modules/* "$VMDIR/kernel/modules"
	echo "$pkg" >"$VMDIR/kernel/version"
	rm -rf "$tmp"
}

mod_path() { find "$VMDIR/kernel/modules" -name "$1.ko" | head -1; }
mod_deps() { grep -a -o -m1 'depends=[a-z0-9_,-]*' "$1" | head -1 | sed 's/^depends=//; s/,/ /g'; }

# Appends module $1 after its dependencies to ORDER (once each).
declare -a ORDER
add_module() {
	local m=$1 f d
	case " ${ORDER[*]:-} " in *" $m "*) return ;; esac
	f=$(mod_path "$m")
	[ -n "$f" ] || die "the kernel has no module $m"
	for d in $(mod_deps "$f"); do add_module "$d"; done
	ORDER+=("$m")
}

build_initrd() {
	local agent=$1 out=$2 ird m
	ird=$(mktemp -d "$out/initrd.XXXXXX")
	mkdir -p "$ird"/{lib,dev,proc,sys,lower,disk,root}
	install -m 0755 "$agent" "$ird/init"
	ORDER=()
	for m in "${WANT[@]}"; do add_module "$m"; done
	for m in "${ORDER[@]}"; do cp "$(mod_path "$m")" "$ird/lib/"; done
	printf '%s\n' "${ORDER[@]}" >"$ird/modules.list"
	mknod -m 600 "$ird/dev/console" c 5 1
	(cd "$ird" && find . | LC_ALL=C sort | busybox cpio -o -H newc 2>/dev/null) >"$out/initrd.img.tmp"
	mv "$out/initrd.img.tmp" "$out/initrd.img"
	rm -rf "$ird"
}

cmd_prepare() {
	local agent= out= update=0
	while [ $# -gt 0 ]; do
		case $1 in
		--agent) agent=$2; shift 2 ;;
		--out) out=$2; shift 2 ;;
		--update) update=1; shift ;;
		*) die "unknown option $1" ;;
		esac
	done
	[ -x "$agent" ] && [ -n "$out" ] || die "prepare --agent PATH --out DIR"
	! command -v file >/dev/null || file "$agent" | grep -q -E 'statically linked|static-pie' ||
		die "$agent is not static (the initramfs has no libraries)"
	if [ ! -s "$VMDIR/kernel/vmlinuz" ] ||
		{ [ "$update" = 1 ] && [ "$(cat "$VMDIR/kernel/version")" != "$(kernel_package)" ]; }; then
		fetch_kernel
	fi
	mkdir -p "$out"
	if [ ! -s "$out/vmlinuz" ] || ! cmp -s "$VMDIR/kernel/vmlinuz" "$out/vmlinuz"; then
		install -m 0644 "$VMDIR/kernel/vmlinuz" "$out/vmlinuz"
		rm -f "$out/initrd.img"
	fi
	cp "$VMDIR/kernel/version" "$out/kernel.version"
	if [ ! -s "$out/initrd.img" ] || [ "$agent" -nt "$out/initrd.img" ] || [ "$0" -nt "$out/initrd.img" ]; then
		build_initrd "$agent" "$out"
	fi
}

cmd_check() {
	[ "${1:-}" = --out ] && [ -n "${2:-}" ] || die "check --out DIR"
	[ -s "$2/vmlinuz" ] && [ -s "$2/initrd.img" ] ||
		{ echo "guest.sh: no guest in $2 (sandbox/vm/guest.sh prepare)" >&2; exit 77; }
}

case ${1:-} in
prepare) shift; cmd_prepare "$@" ;;
check) shift; cmd_check "$@" ;;
*) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//' >&2; exit 2 ;;
esac
