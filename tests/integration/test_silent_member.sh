#!/bin/bash
# A member that heartbeats but never reports a region epoch synced (node
# s, with its own node key) does not hold a delete's space for the
# others: o's 40 MiB pool holds region A, which is filled and deleted;
# region B of 40 MiB on o is then created (farpage region create waits
# while the space is "being cleared"): it is placed once the coordinator
# counts s down (--sync-timeout-ms), s is shown down, and B reads as
# zeroes (cleared), not A's pages.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
FP_INSECURE=0
MEMBER=$FP_BIN/tests/fp_member
[ -x "$MEMBER" ] || fp_fail "$MEMBER not built"
fp_hosts_loopback H
fp_coord_start H --sync-timeout-ms 3000
FP_POOL=40M fp_node_start H o
fp_node_start H g
o=$(fp_node_id o)
[ -n "$o" ] || fp_fail "no node id for o"
"$FP_CLI_BIN" keygen --role node --name s --from "$FARPAGE_KEY_FILE" -o "$FP_TMP/s.key" >/dev/null ||
	fp_fail "keygen node s"
fp_bg H "$MEMBER" silent "$FP_COORD" "$FP_TMP/s.key" s $((64 << 20)) >"$FP_TMP/s.out" 2>&1
fp_wait_log "$FP_TMP/s.out" "silent: node" 20 || fp_fail "s did not join: $(cat "$FP_TMP/s.out")"
s=$(sed -n 's/^silent: node //p' "$FP_TMP/s.out")
OWN=$(printf "$o,%.0s" $(seq 20))
OWN=${OWN%,}

fp_cli H g region create A --size 40M --owners "$OWN" >"$FP_TMP/a.out" 2>&1 || fp_fail "create A: $(cat "$FP_TMP/a.out")"
fp_cli H o fill A --seed 1 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill A on its owner o: $(cat "$FP_TMP/fill.out")"
fp_cli H g region delete A >"$FP_TMP/del.out" 2>&1 || fp_fail "delete A: $(cat "$FP_TMP/del.out")"
fp_cli H g region create B --size 40M --owners "$OWN" --wait 30 >"$FP_TMP/b.out" 2>&1 ||
	fp_fail "create B while s heartbeats without an epoch: $(cat "$FP_TMP/b.out")"
grep -q "node $s (s) did not report epoch [0-9]* synced within 3000 ms" "$FP_TMP/coord.log" ||
	fp_fail "the coordinator did not say it stopped waiting for s"
grep -q "silent: heartbeat" "$FP_TMP/s.out" && fp_fail "s's heartbeats were refused: $(cat "$FP_TMP/s.out")"
fp_cli H g node list >"$FP_TMP/nl.out" 2>&1 || fp_fail "node list: $(cat "$FP_TMP/nl.out")"
grep -Eq "^ *$s +s .* DOWN\$" "$FP_TMP/nl.out" || fp_fail "s is not shown down: $(cat "$FP_TMP/nl.out")"
fp_log "ok: B placed in A's space with s silent; $(grep -c . "$FP_TMP/b.out") lines from create"
fp_cli H g touch B --expect-zero >"$FP_TMP/t.out" 2>&1 || { cat "$FP_TMP/t.out" >&2; fp_fail "touch B"; }
fp_touch_ok "B reads as zeroes, not A's pages" "$FP_TMP/t.out"
