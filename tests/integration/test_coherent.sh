#!/bin/bash
# Coherent regions end to end (issue 39; docs/design.md, coherent/): on
# loopback a coordinator and agents A, B and C; `region create
# --coherent` with its chunks on A and B (the lock, the counter and the
# words are homed on A: A's own program reaches them through A's own page
# server, B's and C's over the network). Each host runs tests/helpers/
# fp_coh at once through its own agent: a barrier, a spinlock around a
# counter each reads and then writes plus one, false-sharing words, then
# host 0 checks the counter is hosts x N and each word N. Two hosts on
# one region, then three on another; every program exits 0 and unmaps
# (its pages go home), and the agents counted coherence messages. Then
# more pages than a connection takes at once, and a host whose cache is
# 16 times smaller than what it writes (D).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: a coherent map needs the cache"
COH=$FP_BIN/tests/fp_coh
N=${FP_COH_N:-200}
fp_hosts_loopback H
fp_coord_start H
for x in A B C; do fp_node_start H "$x" --metrics-listen 127.0.0.1:0; done
a=$(fp_node_id A)
b=$(fp_node_id B)

# run REGION HOST...: fp_coh on each HOST's agent at once, all checked.
run() {
	local region=$1 i=0 n pids=() rc
	shift
	n=$#
	fp_cli H A region create "$region" --size 8M --owners "$a,$b,$a,$b" --coherent \
		>"$FP_TMP/$region.c" 2>&1 || fp_fail "create $region: $(cat "$FP_TMP/$region.c")"
	grep -q "coherent" "$FP_TMP/$region.c" ||
		{ cat "$FP_TMP/$region.c" >&2; fp_fail "$region: the region does not say it is coherent"; }
	for x in "$@"; do
		FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$x]} "$COH" "$region" "$i" "$n" "$N" \
			>"$FP_TMP/$region.$x.out" 2>&1 &
		pids+=("$!")
		FP_PIDS+=("$!")
		i=$((i + 1))
	done
	i=0
	for x in "$@"; do
		fp_wait_pid "${pids[$i]}" 600
		rc=$?
		[ "$rc" = 0 ] || { cat "$FP_TMP/$region."*.out >&2; fp_fail "$region: host $x exited $rc"; }
		grep -q "^coherent: host $i done" "$FP_TMP/$region.$x.out" ||
			{ cat "$FP_TMP/$region.$x.out" >&2; fp_fail "$region: host $x did not finish"; }
		i=$((i + 1))
	done
	grep -q "^coherent: counter=$((n * N)) want=$((n * N)) words=ok" "$FP_TMP/$region.$1.out" ||
		{ cat "$FP_TMP/$region."*.out >&2; fp_fail "$region: $(grep '^coherent: counter' "$FP_TMP/$region.$1.out")"; }
	fp_log "$region: $n hosts: $(grep '^coherent: counter' "$FP_TMP/$region.$1.out")"
}

run coh2 A B
run coh3 A B C
# One coherent map of a region a host: a second on A is refused while the
# first holds it (EBUSY), and taken once the first unmapped.
rm -f "$FP_TMP/h.fifo"
mkfifo "$FP_TMP/h.fifo" && exec 7<>"$FP_TMP/h.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$COH" coh3 hold <"$FP_TMP/h.fifo" >"$FP_TMP/h1.out" 2>&1 7>&- &
hp=$!
FP_PIDS+=("$hp")
fp_wait_log "$FP_TMP/h1.out" '^coherent: holding' 60 ||
	{ cat "$FP_TMP/h1.out" >&2; fp_fail "the first coherent map of coh3 on A did not map"; }
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$COH" coh3 hold </dev/null >"$FP_TMP/h2.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "^coherent: map: Device or resource busy" "$FP_TMP/h2.out" ||
	{ cat "$FP_TMP/h2.out" >&2; fp_fail "a second coherent map of coh3 on A: exit $rc, not EBUSY"; }
exec 7>&-
fp_wait_pid "$hp" 60 || { cat "$FP_TMP/h1.out" >&2; fp_fail "the first map did not unmap"; }
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$COH" coh3 hold </dev/null >"$FP_TMP/h3.out" 2>&1 ||
	{ cat "$FP_TMP/h3.out" >&2; fp_fail "a coherent map of coh3 on A after the first unmapped"; }
fp_log "one coherent map of a region a host: the second refused EBUSY, a later one mapped"
# More pages than a connection takes messages at once (256): B writes
# 1024 pages and flushes (1024 PUTMs), C reads them all, and both unmap
# (C gives 1024 copies back): messages wait their turn, none is lost.
# B and C walk the pages in order: they ask for pages ahead.
fp_cli H A region create cohp --size 4M --owners "$a,$b" --coherent >"$FP_TMP/cohp.c" 2>&1 ||
	fp_fail "create cohp: $(cat "$FP_TMP/cohp.c")"
m0=$(fp_metric B farpage_coherence_messages_total)
w0=$(fp_metric B farpage_coherence_writebacks_total)
printf 'write 7000\nflush\nend\n' |
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[B]} timeout 300 "$COH" cohp pages 1024 >"$FP_TMP/p.B" 2>&1 ||
	{ cat "$FP_TMP/p.B" >&2; fp_fail "cohp: B's 1024 pages did not go home"; }
grep -q "^coherent: flushed 0" "$FP_TMP/p.B" || { cat "$FP_TMP/p.B" >&2; fp_fail "cohp: B's flush failed"; }
printf 'check 7000\nend\n' |
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[C]} timeout 300 "$COH" cohp pages 1024 >"$FP_TMP/p.C" 2>&1 ||
	{ cat "$FP_TMP/p.C" >&2; fp_fail "cohp: C did not read and give back 1024 pages"; }
grep -q "^coherent: check 7000 pages=1024 match=1024 first=-" "$FP_TMP/p.C" ||
	{ cat "$FP_TMP/p.C" >&2; fp_fail "cohp: C did not read B's 1024 pages"; }
ah=$(fp_metric B farpage_coherence_ahead_total)
[ "${ah:-0}" -gt 0 ] || fp_fail "B wrote 1024 pages in order and asked for ${ah:-0} ahead"
# its writes took the pages with a GETM a run of 64, not one a page:
# what it sent but its write-backs (WB: the flush's, and the periodic
# one's if it came) and its unmap's 1024 PUTMs
msgs=$(($(fp_metric B farpage_coherence_messages_total) - ${m0:-0}))
wbs=$(($(fp_metric B farpage_coherence_writebacks_total) - ${w0:-0}))
gets=$((msgs - wbs - 1024))
[ "$wbs" -ge 1024 ] && [ "$gets" -gt 0 ] && [ "$gets" -lt 256 ] ||
	fp_fail "B's 1024 writes in order took $gets GETMs ($msgs messages, $wbs write-backs; a GETM a page: 1024)"
fp_log "1024 pages written and flushed by B: $gets GETMs, $wbs write-backs ($ah pages asked for ahead); read and given back by C"
# The cache's bound: agent D (one fault loop, --cache-size 4M: 1024
# pages) writes 16384 pages of a 64 MiB coherent region (both ends of
# each), flushes and reads them all back; C then reads them all. D's
# cache never held more than its bound and the slack (its pages went home
# as it went: PUTM), and every page read is the last written.
fp_node_start H D --metrics-listen 127.0.0.1:0 --cache-size 4M --fault-threads 1
owners=$(for ((k = 0; k < 32; k++)); do [ $((k % 2)) = 0 ] && printf '%s,' "$a" || printf '%s,' "$b"; done)
fp_cli H A region create cohe --size 64M --owners "${owners%,}" --coherent >"$FP_TMP/cohe.c" 2>&1 ||
	fp_fail "create cohe: $(cat "$FP_TMP/cohe.c")"
printf 'write 9000\nflush\ncheck 9000\nend\n' |
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[D]} timeout 600 "$COH" cohe pages 16384 >"$FP_TMP/e.D" 2>&1 ||
	{ cat "$FP_TMP/e.D" >&2; fp_fail "cohe: D did not write, flush and read 16384 pages"; }
grep -q "^coherent: flushed 0" "$FP_TMP/e.D" || { cat "$FP_TMP/e.D" >&2; fp_fail "cohe: D's flush failed"; }
grep -q "^coherent: check 9000 pages=16384 match=16384 first=-" "$FP_TMP/e.D" ||
	{ cat "$FP_TMP/e.D" >&2; fp_fail "cohe: D did not read back what it wrote"; }
printf 'check 9000\nend\n' |
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[C]} timeout 600 "$COH" cohe pages 16384 >"$FP_TMP/e.C" 2>&1 ||
	{ cat "$FP_TMP/e.C" >&2; fp_fail "cohe: C did not read 16384 pages"; }
grep -q "^coherent: check 9000 pages=16384 match=16384 first=-" "$FP_TMP/e.C" ||
	{ cat "$FP_TMP/e.C" >&2; fp_fail "cohe: C did not read D's pages"; }
ev=$(fp_metric D farpage_coherence_evicted_total)
max=$(fp_cache_stat H D resident_max)
fp_log "cohe: D wrote and read back 16384 pages, ${ev:-0} given home over its bound, its cache at most $max bytes; C read them"
[ "${ev:-0}" -gt 0 ] || fp_fail "cohe: D gave no page home over its bound"
[ -n "$max" ] && [ "$max" -le $(((4 << 20) + FP_CACHE_SLACK_PAGES * 4096)) ] ||
	fp_fail "cohe: D's cache held ${max:-?} bytes, over 4 MiB + slack"
# Real traffic: A homed the pages and granted them, to its own program
# and the others', and every host's mapping got pages and gave some up.
h=$(fp_metric A farpage_pagesrv_coherence_grants_total)
[ "${h:-0}" -gt 0 ] || fp_fail "A granted ${h:-0} pages as their home"
for x in A B C; do
	g=$(fp_metric "$x" farpage_coherence_grants_total)
	r=$(fp_metric "$x" farpage_coherence_invalidations_total)
	r2=$(fp_metric "$x" farpage_coherence_recalls_total)
	[ "${g:-0}" -gt 0 ] && [ $((${r:-0} + ${r2:-0})) -gt 0 ] ||
		fp_fail "$x: ${g:-0} grants, ${r:-0} invalidations, ${r2:-0} recalls"
	fp_log "$x: ${g:-0} pages granted, ${r:-0} invalidated, ${r2:-0} recalled"
done
fp_log "A as the home: $h grants"
exit 0
