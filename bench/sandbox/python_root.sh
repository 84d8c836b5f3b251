# bench/sandbox/python_root.sh — python_root DIR: a busybox root with the
# host's python3, its libraries, those of its extension modules (ctypes needs
# libffi: fncall's Python template uses it) and its stdlib (hard links where
# the file system allows: no copy, no network). Needs busybox_root.sh.
python_root() {
  local dir=$1 py pyver lib
  py=$(readlink -f /usr/bin/python3)
  pyver=$(basename "$py")
  busybox_root "$dir"
  cp "$py" "$dir/usr/bin/python3"
  for lib in $( (ldd "$py"; ldd /usr/lib/"$pyver"/lib-dynload/*.so 2>/dev/null) |
    grep -v ":$" | grep -o '/[^ ]*' | sort -u); do
    mkdir -p "$dir$(dirname "$lib")"
    cp -L "$lib" "$dir$lib"
  done
  mkdir -p "$dir/usr/lib"
  cp -al "/usr/lib/$pyver" "$dir/usr/lib/" 2>/dev/null || cp -a "/usr/lib/$pyver" "$dir/usr/lib/"
}
