#!/usr/bin/env bash
# Checks that every tracked C source and header is formatted as .clang-format
# says (clang-format 14, Debian 12's). Exit 0 when all are, 1 with the list of
# files that differ and the command that fixes them. `make lint` runs it, and
# so does CI (.ci/run) before it builds.
set -euo pipefail
cd "$(dirname "$0")/.."
command -v clang-format >/dev/null || { echo "check-format: clang-format is missing (apt-get install clang-format)" >&2; exit 1; }
bad=()
while IFS= read -r f; do
	[ -f "$f" ] || continue
	clang-format --dry-run -Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done < <(git ls-files --cached --others --exclude-standard '*.c' '*.h')
if [ ${#bad[@]} -gt 0 ]; then
	echo "check-format: ${#bad[@]} file(s) differ from .clang-format:" >&2
	printf '  %s\n' "${bad[@]}" >&2
	echo "fix with: clang-format -i ${bad[*]}" >&2
	exit 1
fi
echo "check-format: $(git ls-files --cached --others --exclude-standard '*.c' '*.h' | wc -l) files formatted"
