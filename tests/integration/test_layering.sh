#!/bin/bash
# No circle of files, and none of folders: the objects of every library
# and program (common, auth, metrics, json, etcd, uffd, libfarpage,
# coordinator, each folder of node/, cli; the list CMake writes to
# layering-objects.txt) are read with nm (the functions and data each
# defines, and those it uses from others) into a graph of files, file A ->
# file B when A uses something B defines, and from it a graph of folders
# (the folder of an object is that of its source: node/session,
# common/auth, coordinator...). A circle in either (B reaches A again,
# directly or through others) fails the test, named step by step with the
# symbol each step uses. Layers call down; upcalls go through ops or hooks
# tables (pointers set up by the layer above), which nm does not see as a
# use. And the session and the fault service (node/session, node/local)
# see the agent only through node_env.h: none of their sources names
# struct node_agent or includes agent.h; no node folder includes another's
# private header (*_int.h). No daemon is started.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
LIST=${FP_LAYERING_LIST:-$FP_BIN/layering-objects.txt}
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
[ -r "$LIST" ] || fp_fail "$LIST not found (build first)"
command -v nm >/dev/null || fp_skip "nm (binutils) is not installed"

# "FILE FOLDER D SYM" for each symbol an object defines, "FILE FOLDER U
# SYM" for each it uses and does not define; FILE is its source, relative
# to the source tree.
syms=""
nobj=0
while IFS=$'\t' read -r tgt sdir bdir objs; do
	[ -n "$tgt" ] || continue
	IFS=';' read -r -a list <<<"$objs"
	for o in "${list[@]}"; do
		[ -r "$o" ] || fp_fail "$o (of $tgt) not found (build first)"
		rel=${o#"$bdir/CMakeFiles/$tgt.dir/"}
		file=${sdir#"$SRC/"}/${rel%.o}
		nobj=$((nobj + 1))
		syms+=$(nm -g "$o" 2>/dev/null | awk -v f="$file" '
			BEGIN {
				d = f
				sub(/\/[^\/]*$/, "", d)
			}
			$1 == "U" { print f, d, "U", $2; next }
			NF == 3 && $2 ~ /^[A-Za-z]$/ && $2 != "w" && $2 != "v" {
				print f, d, "D", $3
			}')$'\n'
	done
done <"$LIST"
[ "$nobj" -ge 60 ] || fp_fail "only $nobj objects listed in $LIST"

# circles KIND: "A B SYM" edges on stdin (A uses SYM of B) -> a report:
# "nodes N uses E", then "circle: A B ..." and one way round each, then
# "circles C".
circles() {
	awk -v kind="$1" '
	{
		if (!($1 in idx)) { name[++n] = $1; idx[$1] = n }
		if (!($2 in idx)) { name[++n] = $2; idx[$2] = n }
		a = idx[$1]; b = idx[$2]
		if (a == b)
			next
		if (!((a, b) in edge))
			edges++
		if (!((a, b) in edge) || $3 < edge[a, b])
			edge[a, b] = $3
		reach[a, b] = 1
	}
	END {
		print kind " " n " uses " edges
		# Warshall: reach[a, b] when a uses b through any chain
		for (k = 1; k <= n; k++)
			for (i = 1; i <= n; i++)
				if ((i, k) in reach)
					for (j = 1; j <= n; j++)
						if ((k, j) in reach)
							reach[i, j] = 1
		# in name order, for a stable report
		for (i = 1; i <= n; i++)
			ord[i] = i
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && name[ord[j - 1]] > name[ord[j]]; j--) {
				t = ord[j]; ord[j] = ord[j - 1]; ord[j - 1] = t
			}
		found = 0
		for (oi = 1; oi <= n; oi++) {
			i = ord[oi]
			if (i in done || !((i, i) in reach))
				continue
			members = ""
			for (oj = 1; oj <= n; oj++) {
				j = ord[oj]
				if (j == i || (((i, j) in reach) && ((j, i) in reach))) {
					done[j] = 1
					members = members " " name[j]
				}
			}
			found++
			print "circle of " kind ":" members
			# one way round it: breadth first from i back to i
			delete prev
			delete seen
			qh = 1; qt = 0
			for (j = 1; j <= n; j++)
				if ((i, j) in edge && (j, i) in reach && !(j in seen)) {
					seen[j] = 1; prev[j] = i; q[++qt] = j
				}
			while (qh <= qt && !(i in seen)) {
				c = q[qh++]
				for (j = 1; j <= n; j++)
					if ((c, j) in edge && !(j in seen) &&
					    (j == i || ((j, i) in reach))) {
						seen[j] = 1; prev[j] = c; q[++qt] = j
					}
			}
			path = name[i]
			c = i
			do {
				p = prev[c]
				path = name[p] " -(" edge[p, c] ")-> " path
				c = p
			} while (c != i)
			print "  " path
		}
		print "circles " found
	}'
}

# The uses, resolved to the file (and folder) that defines each symbol.
uses=$(echo "$syms" | awk '
	NF == 4 && $3 == "D" { if (!($4 in def)) { def[$4] = $1; dir[$4] = $2 } next }
	NF == 4 { u[++n] = $1 " " $2 " " $4 }
	END {
		for (k = 1; k <= n; k++) {
			split(u[k], x, " ")
			if ((x[3] in def) && def[x[3]] != x[1])
				print x[1], def[x[3]], x[2], dir[x[3]], x[3]
		}
	}')
[ -n "$uses" ] || fp_fail "nm found no uses between the objects of $LIST"

frep=$(echo "$uses" | awk '{ print $1, $2, $5 }' | circles files)
drep=$(echo "$uses" | awk '$3 != $4 { print $3, $4, $5 }' | circles folders)
printf '%s\n%s\n' "$frep" "$drep" | while IFS= read -r l; do fp_log "$l"; done

read -r _ nfiles _ nuses < <(echo "$frep" | head -n1)
read -r _ ndirs _ ndiruses < <(echo "$drep" | head -n1)
# The graph is real: the libraries have their files and they use each
# other, across folders too.
[ "${nfiles:-0}" -ge 60 ] || fp_fail "only ${nfiles:-0} files read"
[ "${nuses:-0}" -ge 200 ] || fp_fail "only ${nuses:-0} uses between files"
[ "${ndirs:-0}" -ge 12 ] || fp_fail "only ${ndirs:-0} folders read"
fails=()
n=$(echo "$frep" | awk '$1 == "circles" { print $2 }')
[ "${n:-1}" -eq 0 ] || fails+=("$n circle(s) of files (above)")
n=$(echo "$drep" | awk '$1 == "circles" { print $2 }')
[ "${n:-1}" -eq 0 ] || fails+=("$n circle(s) of folders (above)")

# The session and the fault service reach the agent through node_env.h
# only (its fields are the agent's business).
agent=$(grep -nE 'struct[[:space:]]+node_agent\b|#include[[:space:]]+"agent\.h"' \
	"$SRC"/node/session/*.[ch] "$SRC"/node/local/*.[ch] 2>/dev/null)
if [ -n "$agent" ]; then
	echo "$agent" | while IFS= read -r l; do fp_log "agent: ${l#"$SRC/"}"; done
	fails+=("node/session or node/local names struct node_agent (above)")
fi

# A folder's private header (*_int.h) is its own: no other folder of
# node/ includes it (the include path would let the layers above).
priv=$(for f in "$SRC"/node/*/*.[ch]; do
	grep -o '#include "[a-z0-9_]*_int\.h"' "$f" | while read -r _ h; do
		h=${h//\"/}
		[ -e "$(dirname "$f")/$h" ] || echo "${f#"$SRC/"} includes $h"
	done
done)
if [ -n "$priv" ]; then
	echo "$priv" | while IFS= read -r l; do fp_log "private: $l"; done
	fails+=("a node folder includes another's private header (above)")
fi

[ "${#fails[@]}" -eq 0 ] || fp_fail "$(IFS=';'; echo "${fails[*]}" | sed 's/;/; /g')"
fp_log "PASS: $nfiles files, $nuses uses between them, $ndirs folders," \
	"$ndiruses uses between them, no circle"
