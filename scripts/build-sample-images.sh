#!/usr/bin/env bash
# scripts/build-sample-images.sh OUTDIR [busybox|debian-python|all]
#
# Builds the sample OCI images strata's tests, `make run` and the benchmark
# use, from Debian packages and with no internet beyond the configured Debian
# mirror. Each image is an OCI image layout (oci-layout, index.json tagged
# "latest", blobs/sha256/...) with several layers, written by this script
# itself (python3 standard library: tarfile, gzip, hashlib, json):
#
#   OUTDIR/busybox        ~1 MB: busybox-static with its applet links (gzip
#                         layer), /etc files (zstd layer), an app layer
#                         (plain tar) that deletes a file of the layer below
#                         (whiteout) and replaces a directory (opaque).
#                         Used by `make test`; builds in a second.
#   OUTDIR/debian-python  a few hundred MB: debootstrap --variant=minbase of
#                         bookworm (base layer), python3 installed with apt in
#                         a chroot (the diff is the second layer, whiteouts
#                         included) and a small app layer. Takes minutes; used
#                         by `make run` and the benchmark, never by `make test`.
#
# Results are cached: an image whose OUTDIR/NAME/.complete matches this
# script's version is not rebuilt. Images are built in a scratch directory
# (OUTDIR/.NAME.XXXXXX) and renamed into place, so an interrupted build
# leaves nothing half-written and concurrent builds do not collide.
# Builds are reproducible for busybox (fixed times, gzip mtime 0).
set -euo pipefail

VERSION=2
out=${1:?usage: build-sample-images.sh OUTDIR [busybox|debian-python|all]}
which=${2:-all}
mkdir -p "$out"
out=$(cd "$out" && pwd)

die() { echo "build-sample-images: $*" >&2; exit 1; }

need() {
	command -v "$1" >/dev/null 2>&1 || die "$1 is missing (scripts/install-deps.sh installs ${2:-$1})"
}

# The Debian mirror apt uses on this machine (deb822 or one-line sources).
debian_mirror() {
	local m
	m=$(grep -hs '^URIs:' /etc/apt/sources.list.d/*.sources 2>/dev/null |
		awk '{print $2}' | grep -v security | grep -m1 debian || true)
	if [ -z "$m" ]; then
		m=$(grep -hs '^deb ' /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null |
			awk '{print $2}' | grep -v security | grep -m1 debian || true)
	fi
	echo "${m:-http://deb.debian.org/debian}"
}

# Moves TMP/layout to OUTDIR/NAME unless a concurrent build got there first.
install_layout() {
	echo "$VERSION" >"$1/layout/.complete"
	if ! is_built "$2"; then
		rm -rf "$out/$2"
		mv -T "$1/layout" "$out/$2" 2>/dev/null || is_built "$2" ||
			die "cannot move the $2 image into $out"
	fi
	rm -rf "$1"
}

is_built() { [ "$(cat "$out/$1/.complete" 2>/dev/null)" = "$VERSION" ]; }

# The OCI layout writer. Usage:
#   oci-write LAYOUT TAG CONFIG_JSON LAYER_SPEC...
# LAYER_SPEC is COMPRESSION:KIND:ARGS with COMPRESSION gzip|zstd|none and KIND
#   dir:ROOT          every entry below ROOT
#   diff:LOWER:UPPER  what UPPER adds or changes over LOWER, plus whiteouts
#   tar:FILE          an existing uncompressed tar, as is
# CONFIG_JSON is the image config without rootfs/history (added here).
# SOURCE_DATE_EPOCH, when set, clamps every mtime (reproducible builds).
oci_write() {
	python3 - "$@" <<'PY'
import gzip, hashlib, json, os, shutil, stat, subprocess, sys, tarfile

layout, tag, config_json = sys.argv[1], sys.argv[2], sys.argv[3]
specs = sys.argv[4:]
epoch = os.environ.get("SOURCE_DATE_EPOCH")
epoch = int(epoch) if epoch else None
blobs = os.path.join(layout, "blobs", "sha256")
os.makedirs(blobs, exist_ok=True)

def put_blob(data):
    d = hashlib.sha256(data).hexdigest()
    with open(os.path.join(blobs, d), "wb") as f:
        f.write(data)
    return "sha256:" + d, len(data)

def put_blob_file(path):
    h = hashlib.sha256()
    n = 0
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
            n += len(b)
    d = h.hexdigest()
    os.replace(path, os.path.join(blobs, d))
    return "sha256:" + d, n

def walk(root):
    """Every path below root, parents before children, sorted."""
    out = []
    for dirpath, dirs, files in os.walk(root):
        dirs.sort()
        rel = os.path.relpath(dirpath, root)
        if rel != ".":
            out.append(rel)
        for n in sorted(files):
            out.append(os.path.normpath(os.path.join(rel, n)))
        # symlinks to directories are listed in dirs but not descended
        for n in list(dirs):
            if os.path.islink(os.path.join(dirpath, n)):
                out.append(os.path.normpath(os.path.join(rel, n)))
                dirs.remove(n)
    return out

def add(tar, root, rel):
    ti = tar.gettarinfo(os.path.join(root, rel), arcname=rel)
    ti.uname = ti.gname = ""
    if epoch is not None and ti.mtime > epoch:
        ti.mtime = epoch
    if ti.isreg():
        with open(os.path.join(root, rel), "rb") as f:
            tar.addfile(ti, f)
    else:
        tar.addfile(ti)

def same(a, b):
    try:
        sa, sb = os.lstat(a), os.lstat(b)
    except FileNotFoundError:
        return False
    if (stat.S_IFMT(sa.st_mode) != stat.S_IFMT(sb.st_mode) or sa.st_mode != sb.st_mode
            or sa.st_uid != sb.st_uid or sa.st_gid != sb.st_gid):
        return False
    if stat.S_ISLNK(sa.st_mode):
        return os.readlink(a) == os.readlink(b)
    if stat.S_ISREG(sa.st_mode):
        if sa.st_size != sb.st_size or int(sa.st_mtime) != int(sb.st_mtime):
            with open(a, "rb") as fa, open(b, "rb") as fb:
                return fa.read() == fb.read()
        return True
    if stat.S_ISCHR(sa.st_mode) or stat.S_ISBLK(sa.st_mode):
        return sa.st_rdev == sb.st_rdev
    return True  # directories, fifos: mode/owner compared above

def tar_dir(tar, root):
    for rel in walk(root):
        add(tar, root, rel)

def tar_diff(tar, lower, upper):
    done = set()
    up = walk(upper)
    upset = set(up)
    for rel in up:
        if same(os.path.join(lower, rel), os.path.join(upper, rel)):
            continue
        parents = []
        p = os.path.dirname(rel)
        while p and p not in done:
            parents.append(p)
            p = os.path.dirname(p)
        for p in reversed(parents):
            add(tar, upper, p)
            done.add(p)
        if rel not in done:
            add(tar, upper, rel)
            done.add(rel)
    # whiteouts for what UPPER removed (topmost removed path only)
    for rel in walk(lower):
        if rel in upset:
            continue
        parent = os.path.dirname(rel)
        if parent and parent not in upset:
            continue  # the parent itself is whited out
        wh = tarfile.TarInfo(os.path.join(parent, ".wh." + os.path.basename(rel)))
        wh.mtime = epoch or 0
        tar.addfile(wh)

def compress(raw_path, how):
    if how == "none":
        return raw_path, "application/vnd.oci.image.layer.v1.tar"
    if how == "gzip":
        dst = raw_path + ".gz"
        with open(raw_path, "rb") as src, open(dst, "wb") as f:
            with gzip.GzipFile(fileobj=f, mode="wb", mtime=0, compresslevel=6) as gz:
                for b in iter(lambda: src.read(1 << 20), b""):
                    gz.write(b)
        os.unlink(raw_path)
        return dst, "application/vnd.oci.image.layer.v1.tar+gzip"
    if how == "zstd":
        dst = raw_path + ".zst"
        subprocess.run(["zstd", "-q", "-3", "--rm", "-o", dst, raw_path], check=True)
        return dst, "application/vnd.oci.image.layer.v1.tar+zstd"
    sys.exit("unknown compression " + how)

def sha_file(path):
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for b in iter(lambda: f.read(1 << 20), b""):
            h.update(b)
    return "sha256:" + h.hexdigest()

layers, diff_ids, history = [], [], []
for i, spec in enumerate(specs):
    how, kind, rest = spec.split(":", 2)
    raw = os.path.join(layout, "layer%d.tar" % i)
    if kind == "tar":
        shutil.copyfile(rest, raw)
    else:
        with tarfile.open(raw, "w", format=tarfile.PAX_FORMAT) as tar:
            if kind == "dir":
                tar_dir(tar, rest)
            elif kind == "diff":
                lower, upper = rest.split(":", 1)
                tar_diff(tar, lower, upper)
            else:
                sys.exit("unknown layer kind " + kind)
    diff_ids.append(sha_file(raw))
    path, mt = compress(raw, how)
    d, n = put_blob_file(path)
    layers.append({"mediaType": mt, "digest": d, "size": n})
    history.append({"created": "1970-01-01T00:00:00Z", "created_by": "build-sample-images.sh %s" % spec.split(":")[1]})

config = json.loads(config_json)
config["rootfs"] = {"type": "layers", "diff_ids": diff_ids}
config["history"] = history
cd, cn = put_blob(json.dumps(config, sort_keys=True, separators=(",", ":")).encode())
manifest = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.manifest.v1+json",
    "config": {"mediaType": "application/vnd.oci.image.config.v1+json", "digest": cd, "size": cn},
    "layers": layers,
}
md, mn = put_blob(json.dumps(manifest, sort_keys=True, separators=(",", ":")).encode())
index = {
    "schemaVersion": 2,
    "mediaType": "application/vnd.oci.image.index.v1+json",
    "manifests": [{
        "mediaType": "application/vnd.oci.image.manifest.v1+json",
        "digest": md, "size": mn,
        "platform": {"architecture": "amd64", "os": "linux"},
        "annotations": {"org.opencontainers.image.ref.name": tag},
    }],
}
with open(os.path.join(layout, "index.json"), "w") as f:
    json.dump(index, f, sort_keys=True, separators=(",", ":"))
with open(os.path.join(layout, "oci-layout"), "w") as f:
    json.dump({"imageLayoutVersion": "1.0.0"}, f)
print("%s: %s, %d layers" % (layout, md, len(layers)))
PY
}

build_busybox() {
	[ -x /bin/busybox ] || die "/bin/busybox is missing (apt-get install busybox-static)"
	need zstd
	local tmp
	tmp=$(mktemp -d "$out/.busybox.XXXXXX")
	mkdir -p "$tmp/src/base/bin" "$tmp/src/etc" "$tmp/src/app"
	# Layer 0: busybox and a link per applet
	(
		cd "$tmp/src/base"
		mkdir -p sbin usr/bin usr/sbin tmp root
		chmod 1777 tmp && chmod 700 root
		cp /bin/busybox bin/busybox
		for a in $(/bin/busybox --list-full); do
			[ "$a" = bin/busybox ] && continue
			[ -e "$a" ] || ln -s /bin/busybox "$a"
		done
	)
	# Layer 1: /etc, a file and a directory the next layer removes
	(
		cd "$tmp/src/etc"
		mkdir -p etc var/old/sub
		printf 'root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/false\n' >etc/passwd
		printf 'root:x:0:\nnogroup:x:65534:\n' >etc/group
		echo strata-sample >etc/hostname
		echo 'this file is deleted by the app layer' >etc/motd
		echo old >var/old/sub/file
		echo old >var/old/keep
	)
	# Layer 2: the app; whiteout for /etc/motd, opaque /var/old
	(
		cd "$tmp/src/app"
		mkdir -p app etc var/old
		printf '#!/bin/sh\necho "hello from the strata busybox sample"\n' >app/hello.sh
		chmod 755 app/hello.sh
		ln app/hello.sh app/hello-hardlink.sh
		: >etc/.wh.motd
		: >var/old/.wh..wh..opq
		echo new >var/old/new
	)
	local cfg='{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
"config":{"Env":["PATH=/usr/sbin:/usr/bin:/sbin:/bin","STRATA_SAMPLE=busybox"],
"Cmd":["/app/hello.sh"],"WorkingDir":"/app","User":"0:0"}}'
	find "$tmp/src" -exec touch -h -d @1700000000 {} +
	SOURCE_DATE_EPOCH=1700000000 oci_write "$tmp/layout" latest "$cfg" \
		"gzip:dir:$tmp/src/base" "zstd:dir:$tmp/src/etc" "none:dir:$tmp/src/app"
	install_layout "$tmp" busybox
}

build_debian_python() {
	need debootstrap
	need chroot coreutils
	[ "$(id -u)" -eq 0 ] || die "debian-python needs root (debootstrap, chroot)"
	local tmp mirror
	mirror=$(debian_mirror)
	tmp=$(mktemp -d "$out/.debian-python.XXXXXX")
	echo "build-sample-images: debootstrap --variant=minbase bookworm from $mirror (minutes)" >&2
	debootstrap --variant=minbase bookworm "$tmp/base" "$mirror" >"$tmp/debootstrap.log" 2>&1 ||
		{ tail -20 "$tmp/debootstrap.log" >&2; die "debootstrap failed (log: $tmp/debootstrap.log)"; }
	rm -rf "$tmp/base/var/cache/apt/"*.bin "$tmp/base/var/lib/apt/lists/"*_* \
		"$tmp/base/var/cache/apt/archives/"*.deb \
		"$tmp/base/var/log/"*.log
	echo "build-sample-images: installing python3 in a copy (chroot apt-get)" >&2
	cp -a "$tmp/base" "$tmp/python"
	cp /etc/resolv.conf "$tmp/python/etc/resolv.conf"
	printf '#!/bin/sh\nexit 101\n' >"$tmp/python/usr/sbin/policy-rc.d"
	chmod 755 "$tmp/python/usr/sbin/policy-rc.d"
	{
		chroot "$tmp/python" apt-get update -qq &&
			DEBIAN_FRONTEND=noninteractive chroot "$tmp/python" \
				apt-get install -y -qq --no-install-recommends python3
	} >"$tmp/apt.log" 2>&1 || { tail -20 "$tmp/apt.log" >&2; die "apt-get in the chroot failed"; }
	chroot "$tmp/python" apt-get clean
	rm -rf "$tmp/python/var/lib/apt/lists/"*_* "$tmp/python/var/cache/apt/"*.bin \
		"$tmp/python/usr/sbin/policy-rc.d" "$tmp/python/var/log/"*.log
	cp "$tmp/base/etc/resolv.conf" "$tmp/python/etc/resolv.conf" 2>/dev/null ||
		rm -f "$tmp/python/etc/resolv.conf"
	mkdir -p "$tmp/app/app"
	cat >"$tmp/app/app/main.py" <<'EOF'
import platform, sys
print("hello from the strata debian-python sample, python", platform.python_version())
sys.exit(0)
EOF
	local cfg='{"architecture":"amd64","os":"linux","created":"1970-01-01T00:00:00Z",
"config":{"Env":["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin","LANG=C.UTF-8"],
"Cmd":["python3","/app/main.py"],"WorkingDir":"/app"}}'
	oci_write "$tmp/layout" latest "$cfg" \
		"gzip:dir:$tmp/base" "gzip:diff:$tmp/base:$tmp/python" "gzip:dir:$tmp/app"
	install_layout "$tmp" debian-python
}

need python3
case $which in
busybox | debian-python) list=$which ;;
all) list="busybox debian-python" ;;
*) die "unknown image '$which' (busybox, debian-python or all)" ;;
esac
for img in $list; do
	if is_built "$img"; then
		echo "build-sample-images: $out/$img is up to date"
		continue
	fi
	case $img in
	busybox) build_busybox ;;
	debian-python) build_debian_python ;;
	esac
done
