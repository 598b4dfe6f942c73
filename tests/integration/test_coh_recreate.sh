#!/bin/bash
# A coherent region deleted while a host holds its pages modified, and a
# new one placed on the same extents (docs/design.md, "Coherent regions:
# failures"): on loopback a coordinator and agents A (the home of every
# page) and B; no periodic write-back (what B holds stays modified).
# tests/helpers/fp_coh "pages" programs write and check word 0 of 64
# pages (page i holds V + i).
#  1. Regions keep and d, both homed on A. B's program on keep writes 1000
#     and B's program on d writes 2000: B holds all 128 pages modified.
#  2. d is deleted while B's program maps it; once A cleared d's extents
#     (B has seen the delete), the program is killed: what B's agent gives
#     back of d is refused for want of a grant, so A's directory still
#     lists d's pages as B's.
#  3. d is made again; it lies on the same extents of A's pool (checked
#     with region show). A new program on B writes 3000 there and reads
#     it back: A dropped the deleted region's entries (its
#     farpage_pagesrv_coherence_stale_pages_total counts them) instead of
#     taking B's requests for a protocol error.
#  4. B's program on keep still reads its 1000 and flushes it home: B's
#     connection to A never closed. Another program on A's own agent reads
#     1000 there.
# Without the entries dropped (a build where A keeps them), A closes B's
# connection at B's first write in 3: B's writes to keep are lost and its
# program there gets SIGBUS.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: a coherent map needs the cache"
P=64
fp_hosts_loopback H
fp_coord_start H
for x in A B; do
	fp_node_start H "$x" --metrics-listen 127.0.0.1:0 --writeback-ms 3600000
done
a=$(fp_node_id A)
mk() {
	fp_cli H A region create "$1" --size 2M --owners "$a" --coherent >"$FP_TMP/$1.c" 2>&1 ||
		fp_fail "create $1: $(cat "$FP_TMP/$1.c")"
}
# pool_off REGION: the pool offset of its chunk on A
pool_off() {
	fp_cli H A region show "$1" --json 2>/dev/null |
		python3 -c 'import json,sys; print(json.load(sys.stdin)["records"][0]["pool_offset"])'
}
cleared() { grep -c "node $a (A): [0-9]* extents cleared after deletes" "$FP_TMP/coord.log"; }

# 1.
mk keep
mk d
off=$(pool_off d)
[ -n "$off" ] || fp_fail "region show d: no pool offset"
fp_coh_pages Bk keep "$P" B
fp_coh_pages Bd d "$P" B
fp_coh_say Bk "write 1000" "wrote 1000"
fp_coh_say Bd "write 2000" "wrote 2000"
fp_log "1: B holds keep's pages (1000) and d's (2000) modified"
# 2.
c0=$(cleared)
fp_cli H A region delete d >"$FP_TMP/del.out" 2>&1 || fp_fail "delete d: $(cat "$FP_TMP/del.out")"
end=$(fp_deadline 120)
while [ "$(cleared)" -le "$c0" ]; do
	[ "$(date +%s)" -le "$end" ] || fp_fail "A never cleared d's extents"
	sleep 0.1
done
kill -KILL "${FP_COH_PID[Bd]}" 2>/dev/null
wait "${FP_COH_PID[Bd]}" 2>/dev/null
eval "exec ${FP_COH_FD[Bd]}>&-"
fp_log "2: d deleted while B held its pages; A cleared its extents"
# 3.
mk d
[ "$(pool_off d)" = "$off" ] || fp_fail "d made again at A's pool offset $(pool_off d), not $off"
fp_coh_pages Bd2 d "$P" B
fp_coh_say Bd2 "write 3000" "wrote 3000"
fp_coh_check Bd2 3000 "$P"
fp_coh_say Bd2 flush "flushed 0"
fp_log "3: d made again on the same extents: B wrote and read 3000"
# 4.
fp_coh_check Bk 1000 "$P"
fp_coh_say Bk flush "flushed 0"
fp_coh_pages Ak keep "$P" A
fp_coh_check Ak 1000 "$P"
grep -q "connection closed" "$FP_TMP/B.log" && fp_fail "B's connection to A closed: $(grep "connection closed" "$FP_TMP/B.log" | head -n1)"
stale=$(fp_metric A farpage_pagesrv_coherence_stale_pages_total)
[ "${stale:-0}" -ge 1 ] || fp_fail "A dropped ${stale:-0} entries of the deleted region"
fp_coh_end Bk Bd2 Ak
fp_log "4: B's pages of keep stayed B's (1000, flushed home; A reads 1000); A dropped $stale entries of the deleted region"
exit 0
