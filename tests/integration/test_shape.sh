#!/bin/bash
# The sources stay in pieces a reader can hold: no .c or .h file outside
# tests/ over FP_SHAPE_MAX_LINES (1000) lines, and no function over
# FP_SHAPE_MAX_FUNC (120) lines. A function is what STYLE.md's layout makes
# of it: a line "{" in column 0 to the next "}" in column 0. Data tables
# close with "};" and are not counted. No daemon is started.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
MAX_LINES=${FP_SHAPE_MAX_LINES:-1000}
MAX_FUNC=${FP_SHAPE_MAX_FUNC:-120}

# The tracked sources when this is a git checkout, else every source file
# under the top folders (a tarball).
if git -C "$SRC" rev-parse --git-dir >/dev/null 2>&1; then
	files=$(git -C "$SRC" ls-files -- '*.c' '*.h' | grep -v '^tests/')
else
	files=$(cd "$SRC" && find . -path ./tests -prune -o -path './build*' -prune \
		-o \( -name '*.c' -o -name '*.h' \) -print | sed 's|^\./||')
fi
[ -n "$files" ] || fp_fail "no sources found under $SRC"

nfiles=0
bad=0
while IFS= read -r f; do
	[ -f "$SRC/$f" ] || continue
	nfiles=$((nfiles + 1))
	n=$(wc -l <"$SRC/$f")
	if [ "$n" -gt "$MAX_LINES" ]; then
		fp_log "$f: $n lines (at most $MAX_LINES)"
		bad=$((bad + 1))
	fi
	while IFS= read -r l; do
		fp_log "$l"
		bad=$((bad + 1))
	done < <(awk -v f="$f" -v max="$MAX_FUNC" '
		/^[A-Za-z_].*\(/ { head = $0 }
		/^\{$/ { start = FNR; name = head }
		/^\}$/ && start {
			if (FNR - start - 1 > max) {
				sub(/\(.*/, "", name)
				n = split(name, w, /[ *]+/)
				print f ":" start ": " w[n] "(): " FNR - start - 1 \
					" lines (at most " max ")"
			}
			start = 0
		}' "$SRC/$f")
done <<<"$files"

[ "$nfiles" -ge 100 ] || fp_fail "only $nfiles source files read under $SRC"
[ "$bad" -eq 0 ] || fp_fail "$bad file(s) or function(s) too long (above)"
fp_log "PASS: $nfiles source files, none over $MAX_LINES lines, no function over $MAX_FUNC"
