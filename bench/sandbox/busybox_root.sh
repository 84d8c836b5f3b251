# bench/sandbox/busybox_root.sh — sourced by the bench scripts (run.sh,
# ab_api.sh, sdk.sh): `busybox_root DIR` builds the busybox-static root filesystem their
# sandboxd registers as image "bb".
busybox_root() {
  local r=$1
  mkdir -p "$r"/{bin,sbin,etc,tmp,proc,dev,sys,root,usr/bin}
  cp "$(command -v busybox || echo /bin/busybox)" "$r/bin/busybox"
  for a in sh true sleep echo cat ls; do ln -s busybox "$r/bin/$a"; done
  printf 'root:x:0:0:root:/root:/bin/sh\n' >"$r/etc/passwd"
  printf 'root:x:0:\n' >"$r/etc/group"
}
