# bench/sandbox/ab_daemons.sh — what the A/B scripts of two builds'
# strata-sandboxd share (ab_api.sh, fncall_ab.sh): sourced after `set -euo
# pipefail` with NAME (for messages), DEF_CONCS and the script's arguments
# OLD_BIN_DIR NEW_BIN_DIR [ROUNDS [SECS [CONCS...]]]; sets OLD, NEW, ROUNDS,
# SECS, CONCS, BENCH (default OLD's sandbox_bench), work (a temp dir),
# state (one on /dev/shm), removed with the daemons at exit.
# ab_start IMAGE_ARG... starts each build's daemon (pid[OLD], pid[NEW]) on
# $work/OLD.sock and $work/NEW.sock with those --image arguments.
[ $# -ge 2 ] || { sed -n '2,16p' "$0" >&2; exit 2; }
[ "$(id -u)" -eq 0 ] || { echo "$NAME: needs root" >&2; exit 77; }
OLD=$(cd "$1" && pwd)
NEW=$(cd "$2" && pwd)
ROUNDS=${3:-2}
SECS=${4:-3}
shift $(($# < 4 ? $# : 4))
CONCS=${*:-$DEF_CONCS}
BENCH=${BENCH:-$OLD/sandbox_bench}
for d in "$OLD" "$NEW"; do
  for f in strata-sandboxd strata-agent; do
    [ -x "$d/$f" ] || { echo "$NAME: $d/$f missing" >&2; exit 1; }
  done
done
[ -x "$BENCH" ] || { echo "$NAME: $BENCH missing" >&2; exit 1; }

work=$(mktemp -d /var/tmp/strata-sbab.XXXXXX)
state=$(mktemp -d /dev/shm/strata-sbab.XXXXXX)
declare -A pid
cleanup() {
  for v in OLD NEW; do
    if [ -n "${pid[$v]:-}" ] && kill -0 "${pid[$v]}" 2>/dev/null; then
      "$BENCH" purge "$work/$v.sock" >/dev/null 2>&1 || true
      kill -TERM "${pid[$v]}" 2>/dev/null || true
      wait "${pid[$v]}" 2>/dev/null || true
    fi
  done
  rm -rf "$work" "$state"
}
trap cleanup EXIT
trap 'exit 130' INT TERM

ab_start() {
  local v d
  for v in OLD NEW; do
    d=${!v}
    mkdir -p "$state/$v"
    "$d/strata-sandboxd" --home "$work/home-$v" --socket "$work/$v.sock" \
      --state-dir "$state/$v" "$@" --log-level warn >"$work/$v.log" 2>&1 &
    pid[$v]=$!
    for _ in $(seq 200); do [ -S "$work/$v.sock" ] && break; sleep 0.05; done
    [ -S "$work/$v.sock" ] || { cat "$work/$v.log" >&2; exit 1; }
  done
}
