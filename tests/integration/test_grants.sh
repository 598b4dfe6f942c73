#!/bin/bash
# A member can do at an owner's page server only what the coordinator
# granted it (docs/security.md, "Grants"). Loopback; B owns region r
# (16 MiB, writers: A); A writes it, R reads it, M is a member that never
# mapped it and holds a pair key with B (what its node key gets from the
# coordinator).
#   1. A writes seed 11 into every page and flushes; R reads seed 11.
#   2. M, at B's page server: a WRITE with lease generation 2^64-1 into
#      every 2 MiB segment of B's pool, grants it made up (a random key,
#      its own grant key, no MAC) and a READ of every segment: nothing is
#      taken, no byte comes back.
#   3. A writes seed 12 and flushes (0), R reads seed 12 on every page.
# Before grants every WRITE of M was taken: B then refused A's
# write-backs (ENOLCK) for good, and every READ of M was answered.
set -u
. "$(dirname "$0")/../lib.sh"
fp_require
# grants are checked on authenticated sessions only
FP_INSECURE=0
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"

GRANTS=$FP_BIN/tests/fp_grants
[ -x "$GRANTS" ] || fp_fail "$GRANTS not built"
FP_POOL=64M
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H A --cache-size 64M
fp_node_start H M
fp_node_start H R
b=$(fp_node_id B)
a=$(fp_node_id A)
[ -n "$b" ] && [ -n "$a" ] || fp_fail "no node ids"
fp_cli H B region create r --size 16M --owners "$b,$b,$b,$b,$b,$b,$b,$b" \
	--writers "$a" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"

fp_cli H A touch r --write --seed 11 >"$FP_TMP/a1.out" 2>&1 ||
	{ cat "$FP_TMP/a1.out" >&2; fp_fail "A could not write r"; }
fp_touch_ok "A wrote seed 11" "$FP_TMP/a1.out"
fp_cli H R touch r --seed 11 >"$FP_TMP/r1.out" 2>&1 ||
	{ cat "$FP_TMP/r1.out" >&2; fp_fail "R did not read seed 11"; }
fp_touch_ok "R reads seed 11 from B" "$FP_TMP/r1.out"

# B knows M (its handshake finds M's pair key).
fp_wait_log "$FP_TMP/M.log" "joined " 20 || fp_fail "M did not join"
B_DATA=$(head -n1 "$FP_TMP/B.addr")
"$GRANTS" "$B_DATA" "$FARPAGE_KEY_FILE" M B $((64 << 20)) >"$FP_TMP/m.out" 2>&1
rc=$?
cat "$FP_TMP/m.out"
[ $rc -eq 0 ] || fp_fail "M's requests without a grant were taken (rc $rc)"
grep -q "^grants: writes=32 taken=0 grants=3 taken=0 reads=32 got=0$" "$FP_TMP/m.out" ||
	fp_fail "unexpected result: $(cat "$FP_TMP/m.out")"
fp_log "B refused M's 32 writes, 3 made-up grants and 32 reads"
grep -q "grant" "$FP_TMP/B.log" || fp_fail "B did not log the refusals"

fp_cli H A touch r --write --seed 12 >"$FP_TMP/a2.out" 2>&1 ||
	{ cat "$FP_TMP/a2.out" >&2; fp_fail "A's write and flush failed after M's writes"; }
fp_touch_ok "A wrote seed 12 and flushed" "$FP_TMP/a2.out"
grep -q '^flush: done' "$FP_TMP/a2.out" || fp_fail "A did not flush"
fp_cli H R touch r --seed 12 >"$FP_TMP/r2.out" 2>&1 ||
	{ cat "$FP_TMP/r2.out" >&2; fp_fail "R did not read seed 12"; }
fp_touch_ok "R reads A's seed 12 on every page" "$FP_TMP/r2.out"
fp_log "PASS"
