#!/bin/bash
# What "dirty" means once a writer is gone (farpage_flush_final(),
# farpage_unmap(); docs/design.md, "Dirty tracking by scanning"): agents A
# (the writer's, cache mode, written pages found by scanning) and B (the
# owner of every page of r, 16 MiB = 4096 pages) on one host.
#   1. a guest writes every page, farpage_flush_final() and exits without
#      unmapping: a write after it is SIGSEGV; once its lease is given
#      back, A wrote exactly 4096 pages home and holds none dirty; B's
#      pool holds every page
#   2. farpage_unmap() (touch --write): exactly 4096 pages written home
#   3. the control: a plain flush and an exit: A cannot know what was
#      written after its last scan, and sends all 4096 home again (8192;
#      4096 when writes are found by faults, --dirty-tracking wp-fault);
#      the pages are right either way
# Before the change each of 1 and 2 wrote 8192 pages home.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
[ -x "$GUEST" ] || fp_fail "$GUEST not built"
fp_hosts_loopback H
fp_coord_start H
# (no background write-back pass while the guest writes: one that caught
# a page half written would send it home twice, and the counts below are
# what the flush and the exit send)
fp_node_start H A --writeback-ms 3600000
fp_node_start H B
ID_A=$(fp_node_id A) ID_B=$(fp_node_id B)
[ -n "$ID_A" ] && [ -n "$ID_B" ] || fp_fail "node ids: A=$ID_A B=$ID_B"
fp_cli H A region create r --size 16M --nodes "$ID_B" >/dev/null 2>&1 || fp_fail "create r"
PAGES=4096
# Written pages found by scanning (else by a fault per first write, which
# leaves nothing unknown at an exit: step 3 then sends each page once).
if grep -q "written pages are found by scanning" "$FP_TMP/A.log"; then
	AGAIN=2
else
	AGAIN=1
	fp_log "A finds written pages by faults: an exit after a plain flush sends nothing again"
fi

wb() { fp_cli H A stats --json | jq '.cache.writebacks'; }
dirty() { fp_cli H A stats --json | jq '.cache.dirty'; }
RELEASED="region 'r': write lease of node $ID_A released"
# released N: the coordinator has the Nth release of r's lease by A.
released() {
	fp_wait_log "$FP_TMP/coord.log" "$RELEASED" 60 "$1" || fp_fail "A did not give r's lease back a ${1}th time"
}
# b_has SEED: B's own pool holds SEED's pattern on every page of r.
b_has() {
	fp_cli H B touch r --seed "$1" --local-too >"$FP_TMP/b$1.out" 2>&1 ||
		fp_fail "B's pool does not hold seed $1: $(cat "$FP_TMP/b$1.out")"
	[ "$(fp_field "$FP_TMP/b$1.out" touch: verified)" = $PAGES ] || fp_fail "seed $1: not every page verified on B"
}

# --- 1. farpage_flush_final(), then an exit without unmap.
w0=$(wb)
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" wexit r 3 final >"$FP_TMP/g1.out" 2>&1 ||
	fp_fail "wexit final: $(cat "$FP_TMP/g1.out")"
grep -q "^wexit: segv=1" "$FP_TMP/g1.out" || fp_fail "a write after the final flush landed: $(cat "$FP_TMP/g1.out")"
released 1
w1=$(wb) d1=$(dirty)
[ $((w1 - w0)) = $PAGES ] && [ "$d1" = 0 ] ||
	fp_fail "final flush and exit: $((w1 - w0)) pages written home (not $PAGES), dirty $d1"
b_has 3
fp_log "ok: farpage_flush_final and exit: $((w1 - w0)) pages home, none again, dirty 0; a later write is SIGSEGV"

# --- 2. farpage_unmap().
fp_cli H A touch r --write --seed 4 >"$FP_TMP/t.out" 2>&1 || fp_fail "touch --write: $(cat "$FP_TMP/t.out")"
released 2
w2=$(wb)
[ $((w2 - w1)) = $PAGES ] || fp_fail "farpage_unmap: $((w2 - w1)) pages written home, not $PAGES"
b_has 4
fp_log "ok: farpage_unmap: $((w2 - w1)) pages home, none again"

# --- 3. The control: a plain flush, then an exit.
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" wexit r 5 plain >"$FP_TMP/g3.out" 2>&1 ||
	fp_fail "wexit plain: $(cat "$FP_TMP/g3.out")"
released 3
w3=$(wb) d3=$(dirty)
[ $((w3 - w2)) = $((AGAIN * PAGES)) ] && [ "$d3" = 0 ] ||
	fp_fail "plain flush and exit: $((w3 - w2)) pages written home (expected $((AGAIN * PAGES))), dirty $d3"
b_has 5
fp_log "ok: a plain flush and exit: $((w3 - w2)) pages written home, the pages right"
echo "test_flush_final: passed"
