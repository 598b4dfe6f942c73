#!/bin/bash
# No circle of files in node/: the objects of the farpage_node library are
# read with nm (the functions and data each defines, and those it uses from
# others) into a graph of files, file A -> file B when A uses something B
# defines. A circle (B reaches A again, directly or through others) fails
# the test, named file by file with the symbol each step uses. Layers call
# down; upcalls go through ops or hooks tables (pointers set up by the
# layer above), which nm does not see as a use. No daemon is started.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
LIB=${FP_LAYERING_LIB:-$FP_BIN/node/libfarpage_node.a}
[ -r "$LIB" ] || fp_fail "$LIB not found (build first)"
command -v nm >/dev/null || fp_skip "nm (binutils) is not installed"

# "OBJ D SYM" for each symbol an object defines, "OBJ U SYM" for each it
# uses and does not define.
syms=$(nm -A -g "$LIB" 2>/dev/null | awk '
	{
		n = split($1, p, ":")
		obj = p[n - 1]
		sub(/\.o$/, "", obj)
		if ($2 == "U")
			print obj, "U", $3
		else if (NF == 3 && $2 ~ /^[A-Za-z]$/ && $2 != "w" && $2 != "v")
			print obj, "D", $3
	}')
[ -n "$syms" ] || fp_fail "nm found no symbols in $LIB"

report=$(echo "$syms" | awk '
	$2 == "D" { def[$3] = $1; obj[$1] = 1; next }
	{ use[++nu] = $1 SUBSEP $3; obj[$1] = 1 }
	END {
		for (o in obj)
			name[++n] = o
		# sorted, for a stable report
		for (i = 2; i <= n; i++)
			for (j = i; j > 1 && name[j - 1] > name[j]; j--) {
				t = name[j]; name[j] = name[j - 1]; name[j - 1] = t
			}
		for (i = 1; i <= n; i++)
			idx[name[i]] = i
		edges = 0
		for (k = 1; k <= nu; k++) {
			split(use[k], u, SUBSEP)
			if (!(u[2] in def) || def[u[2]] == u[1])
				continue
			a = idx[u[1]]; b = idx[def[u[2]]]
			if (!((a, b) in edge))
				edges++
			if (!((a, b) in edge) || u[2] < edge[a, b])
				edge[a, b] = u[2]
			reach[a, b] = 1
		}
		print "files " n " uses " edges
		# Warshall: reach[a, b] when a uses b through any chain
		for (k = 1; k <= n; k++)
			for (i = 1; i <= n; i++)
				if ((i, k) in reach)
					for (j = 1; j <= n; j++)
						if ((k, j) in reach)
							reach[i, j] = 1
		circles = 0
		for (i = 1; i <= n; i++) {
			if (i in done || !((i, i) in reach))
				continue
			members = ""
			for (j = 1; j <= n; j++)
				if (j == i || (((i, j) in reach) && ((j, i) in reach))) {
					done[j] = 1
					members = members " " name[j]
				}
			circles++
			print "circle:" members
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
		print "circles " circles
	}')
echo "$report" | while IFS= read -r l; do fp_log "$l"; done

read -r _ nfiles _ nuses < <(echo "$report" | head -n1)
# The graph is real: the library has its files and they use each other.
[ "${nfiles:-0}" -ge 15 ] || fp_fail "only ${nfiles:-0} files read from $LIB"
[ "${nuses:-0}" -ge 20 ] || fp_fail "only ${nuses:-0} uses between files"
n=$(echo "$report" | awk '$1 == "circles" { print $2 }')
[ "${n:-1}" -eq 0 ] || fp_fail "$n circle(s) of files in node/ (above)"
fp_log "PASS: $nfiles files, $nuses uses between them, no circle"
