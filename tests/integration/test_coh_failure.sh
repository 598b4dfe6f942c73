#!/bin/bash
# Coherent regions when a host fails (issue 39, item 2; docs/design.md,
# "Coherent regions: failures"): four hosts in network namespaces on one
# segment (77 without), the coordinator on H (lease 2 s), agents A, B and
# C on hosts of their own; region f is coherent, every page homed on A.
# tests/helpers/fp_coh "pages" programs on B and C write and check word 0
# of 64 pages (page i holds V + i).
#  1. B writes 1000, flushes; C reads 1000 (copies to read); B writes
#     1500 and flushes (C's copies invalidated), then writes 2000 and
#     keeps the pages modified.
#  2. Host B dies: its agent and its program are killed. C reads every
#     page: 1500, the last bytes B gave back: never its own stale 1000 nor
#     the lost 2000, and no SIGBUS (the home took B's pages back when the
#     node list showed B down: A counts a reset).
#  3. B comes back (a new agent, same name) and reads 1500; it writes
#     3000 and keeps the pages modified. The coordinator dies and comes
#     back only after B's lease would have ended: B's agent gives its pages
#     home first (it says so), so C then reads 3000; B reads 3000 again and
#     writes and flushes 4000, which C reads.
#  4. B reads every page (copies to read) and is cut off the segment.
#     Once the node list shows B down, C writes 5000 (the home resets B:
#     nothing waits for it). B is joined again: it reads 5000, never its
#     copies of 4000 (its agent dropped them before its lease ended).
#  5. B's agent again, now writing back every 300 ms (1-4: never, so
#     what B kept is what it loses): B reads 5000, writes 6000 and
#     flushes: it keeps the pages modified, so writing 6500 asks for none
#     (no grant). Once its agent wrote the 64 pages back (its counter
#     says so), host B dies: C reads 6500.
# Each step fails without the part it tests: without the reset, C's reads
# in 2 wait until the fault timeout (SIGBUS, exit 3); without the lease's
# drop, B's stale copies read 4000 in 4; a flush that gives the pages up
# makes B ask for them again in 5, and without the write-back C reads
# 6000 there.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: a coherent map needs the cache"
fp_hosts_lan H A B C || fp_skip "a host cut off needs network namespaces"
P=64
fp_coord_start H --lease-ms 2000
# (no periodic write-back until step 5: what B keeps is what it loses)
NOWB="--writeback-ms 3600000"
for x in A B C; do
	fp_node_start "$x" "$x" --metrics-listen "${FP_HOST_IP[$x]}:0" --fault-timeout-ms 120000 $NOWB
done
a=$(fp_node_id A)
fp_cli H A region create f --size 2M --owners "$a" --coherent >"$FP_TMP/f.c" 2>&1 ||
	fp_fail "create f: $(cat "$FP_TMP/f.c")"

start() { fp_coh_pages "$1" f "$P"; }
say() { fp_coh_say "$@"; }

# 1.
start B
start C
say B "write 1000" "wrote 1000"
say B flush "flushed 0"
fp_coh_check C 1000 "$P"
say B "write 1500" "wrote 1500"
say B flush "flushed 0"
say B "write 2000" "wrote 2000"
fp_log "1: B wrote 1000 and 1500 (flushed) and 2000 (kept); C held 1000"
# 2. Host B dies.
kill -KILL "${FP_NODE_PID[B]}" "${FP_COH_PID[B]}" 2>/dev/null
wait "${FP_NODE_PID[B]}" "${FP_COH_PID[B]}" 2>/dev/null
eval "exec ${FP_COH_FD[B]}>&-"
fp_coh_check C 1500 "$P"
r=$(fp_metric A farpage_pagesrv_coherence_resets_total)
[ "${r:-0}" -ge 1 ] || fp_fail "A reset ${r:-0} hosts"
fp_log "2: B killed holding 2000: C reads 1500 (A reset ${r} hosts)"
# 3. B again; the coordinator away for longer than a lease.
fp_node_start B B --metrics-listen "${FP_HOST_IP[B]}:0" --fault-timeout-ms 120000 $NOWB
start B
fp_coh_check B 1500 "$P"
say B "write 3000" "wrote 3000"
kill -KILL "$FP_COORD_PID"
wait "$FP_COORD_PID" 2>/dev/null
fp_wait_log "$FP_TMP/B.log" "coherence: no answer from the coordinator" 60 ||
	fp_fail "B's agent did not give its pages home when its lease could end"
fp_wait_log "$FP_TMP/C.log" "coherence: no answer from the coordinator" 60 ||
	fp_fail "C's agent did not stop asking for pages when its lease could end"
fp_coord_respawn H --lease-ms 2000
fp_coh_check C 3000 "$P"
fp_coh_check B 3000 "$P"
say B "write 4000" "wrote 4000"
say B flush "flushed 0"
fp_coh_check C 4000 "$P"
fp_log "3: the coordinator away past the lease: B's 3000 went home first; C reads it"
# 4. B holds copies to read and is cut off.
fp_coh_check B 4000 "$P"
nd=$(grep -cE "coherence: the host of B .* is down" "$FP_TMP/A.log")
fp_host_cut B
fp_wait_log "$FP_TMP/A.log" "coherence: the host of B .* is down" 60 $((nd + 1)) ||
	{ fp_host_heal B; fp_fail "A was not told B is down"; }
say C "write 5000" "wrote 5000"
say C flush "flushed 0"
fp_host_heal B
fp_coh_check B 5000 "$P"
fp_log "4: B cut off holding 4000 to read: once healed it reads C's 5000"
# 5. A flush keeps the pages; the write-back bounds what a death loses.
kill -KILL "${FP_NODE_PID[B]}" "${FP_COH_PID[B]}" 2>/dev/null
wait "${FP_NODE_PID[B]}" "${FP_COH_PID[B]}" 2>/dev/null
eval "exec ${FP_COH_FD[B]}>&-"
fp_node_start B B --metrics-listen "${FP_HOST_IP[B]}:0" --fault-timeout-ms 120000 --writeback-ms 300
start B
fp_coh_check B 5000 "$P"
say B "write 6000" "wrote 6000"
say B flush "flushed 0"
g0=$(fp_metric B farpage_coherence_grants_total)
wb0=$(fp_metric B farpage_coherence_writebacks_total)
say B "write 6500" "wrote 6500"
g1=$(fp_metric B farpage_coherence_grants_total)
[ "${g1:-x}" = "${g0:-y}" ] || fp_fail "B asked again for pages it flushed: grants ${g0:-?} -> ${g1:-?}"
end=$(fp_deadline 60)
for (( ; ; )); do
	wb=$(fp_metric B farpage_coherence_writebacks_total)
	[ "${wb:-0}" -ge $((${wb0:-0} + P)) ] && break
	[ "$(date +%s)" -le "$end" ] || fp_fail "B's agent wrote back $((${wb:-0} - ${wb0:-0})) of $P pages in 60 s"
	sleep 0.1
done
kill -KILL "${FP_NODE_PID[B]}" "${FP_COH_PID[B]}" 2>/dev/null
wait "${FP_NODE_PID[B]}" "${FP_COH_PID[B]}" 2>/dev/null
eval "exec ${FP_COH_FD[B]}>&-"
fp_coh_check C 6500 "$P"
fp_log "5: B flushed 6000 and kept the pages (6500 asked for none); written back, then killed: C reads 6500"
# "end", not the fifo's end: the daemons started since hold it open too
fp_coh_end C
exit 0
