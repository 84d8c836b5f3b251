# debian-kernel.sh — sourced by scripts/testvm.sh and sandbox/vm/guest.sh,
# which both boot Debian's own kernel, downloaded with `apt-get download`
# and never installed.

# The versioned package linux-image-amd64 points at, e.g.
# linux-image-6.1.0-57-amd64 (empty when apt knows none).
kernel_package() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		sed -n 's/^ *Depends: \(linux-image-[0-9].*-amd64\)$/\1/p' | head -1
}
