#!/bin/bash
# The docs' option tables say what the programs take: every long option a
# daemon's --help lists has a row in its table in docs/operations.md
# ("## Coordinator" / "## Node agent", "### Command line"), and every row
# there names an option the program takes. No daemon is started.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
DOC=$SRC/docs/operations.md
[ -r "$DOC" ] || fp_fail "$DOC not found"

# opts_help BIN: the long options --help names, one a line.
opts_help() {
	"$1" --help 2>&1 | grep -oE -- '(^|[ ,])--[a-z][a-z0-9-]+' | sed 's/^[ ,]*//' | sort -u
}
# opts_doc SECTION: the long options of the table rows under "## SECTION",
# "### Command line".
opts_doc() {
	awk -v sec="## $1" '
		$0 == sec { in_sec = 1; next }
		in_sec && /^## / { exit }
		in_sec && /^### / { in_cl = ($0 == "### Command line"); next }
		in_sec && in_cl && /^\| `/ { print }
	' "$DOC" | cut -d'|' -f2 | grep -oE -- '--[a-z][a-z0-9-]+' | sort -u
}

bad=0
check() { # BIN SECTION
	local bin=$1 sec=$2 h d
	h=$(opts_help "$bin")
	d=$(opts_doc "$sec")
	[ -n "$h" ] || fp_fail "$(basename "$bin") --help names no options"
	[ -n "$d" ] || fp_fail "docs/operations.md: no option table under '## $sec', '### Command line'"
	while read -r o; do
		[ "$o" = --help ] || [ "$o" = --version ] && continue
		grep -qxF -- "$o" <<<"$d" || { fp_log "docs/operations.md ($sec): no row for $o, which $(basename "$bin") --help lists"; bad=1; }
	done <<<"$h"
	while read -r o; do
		grep -qxF -- "$o" <<<"$h" || { fp_log "docs/operations.md ($sec): a row for $o, which $(basename "$bin") --help does not list"; bad=1; }
	done <<<"$d"
	fp_log "$(basename "$bin"): $(wc -l <<<"$h") options in --help, $(wc -l <<<"$d") in the docs"
}
check "$FP_COORD_BIN" Coordinator
check "$FP_NODE_BIN" "Node agent"
[ $bad = 0 ] || fp_fail "the option tables disagree with --help (above)"
echo "docs options: ok"
