#!/bin/bash
# Replicated regions across a partition (issue 24): four hosts in network
# namespaces on one segment (a partition needs them: 77 without). The
# coordinator and the writer's agent W on A, owners O1 on B and O2 on C,
# the readers' agents R1 and R2 on D (W, R1, R2 lend 2 MiB pools: no room
# for a 4 MiB chunk, so nothing is rebuilt while O1 is away).
#  1. r (32 MiB, 4 MiB chunks, --replicas 2: every chunk on O1 and O2)
#     filled with seed 5 (written by a guest on W). R2 reads it (its agent has r's layout cached),
#     and a guest on R2 maps r and holds the mapping, reading nothing yet.
#  2. A guest on W maps r writable and writes seed 6 into the first half
#     of the pages (write-back every 100 ms: some in flight), then B is
#     cut off the segment (its bridge port down: no frame to or from
#     anyone, the coordinator included) and the guest writes seed 6 into
#     the other half and flushes: the flush succeeds once the coordinator
#     let O1's lease run out (default lease, 5 s) and dropped it from r's
#     set (every replica on O1 MISSING, its extents fenced), and unmaps.
#     O1 holds seed 5 on every page the writes after the cut went to.
#  3. B joins the segment again but cannot reach A (a blackhole route to
#     A in B's namespace): O1 serves its pages and cannot hear its fence.
#     The held guest on R2 (its mapping's layout came before the cut, and
#     was updated while B was away) reads every page, and a guest on R1
#     (its agent never had r) reads every page: every page seed 6, none
#     seed 5 (fp_guest vhold classifies every page; `touch` verifies
#     every page).
#  4. The route goes: B is whole again. At once R2 (its cached layout)
#     and R1 read every page again: every page seed 6. O1 logs its fence
#     ("fenced extent"), and r comes back to 2 SYNC replicas without a
#     command (fp_repl state); R1 reads every page again after that.
#  5. Once O1 cleared its fenced extents, a region placed on them (one
#     replica, on O1) is filled and read back: its reads must not be
#     refused as the old replicas' were (they were, ESTALE, while agents
#     never dropped a fence; FP_PARTITION_REUSE=0 leaves the step out).
# The negative control: FP_PARTITION_CONTROL=1 puts R2 on B, on O1's side
# of the partition: its agent cannot sync the new layout, and O1 has not
# heard its fence, so the held guest reads O1's stale pages (seed 5: the
# window docs/design.md names) and the test fails in step 3: it can.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
fp_hosts_lan A B C D || fp_skip "a partition needs network namespaces"
CONTROL=${FP_PARTITION_CONTROL:-0}
RH=D
[ "$CONTROL" = 1 ] && RH=B
MB=${FP_PARTITION_MB:-${FP_REPL_MB:-32}}
PAGES=$((MB * 256))
HALF=$((PAGES / 2))
GUEST=$FP_BIN/tests/fp_guest
fp_coord_start A
fp_node_start B O1
fp_node_start C O2
fp_cli A O1 region create r --size "${MB}M" --chunk-size 4M --replicas 2 >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
fp_repl state "$FP_COORD" r >"$FP_TMP/st0.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st0.out")"
grep -q '^state: replicas=2 .* missing=0 rebuilding=0 ' "$FP_TMP/st0.out" ||
	{ cat "$FP_TMP/st0.out" >&2; fp_fail "r is not 2 replicas in sync"; }
O1ID=$(fp_node_id_log O1)
[ -n "$O1ID" ] || fp_fail "no node id of O1"
NREC=$(grep -c '^rec: ' "$FP_TMP/st0.out")
NO1=$(grep -cE "^rec: [0-9]+ [0-9]+ $O1ID " "$FP_TMP/st0.out")
[ "$NO1" = $((NREC / 2)) ] || { cat "$FP_TMP/st0.out" >&2; fp_fail "O1 does not hold one replica of every chunk"; }
FP_POOL=2M fp_node_start A W --writeback-ms 100 --fault-timeout-ms 60000
# filled through W (`farpage fill` writes only the chunks of the node's own
# pool, and a replicated region's are none: every replica is written back)
fp_cli A W touch r --write --seed 5 --threads 4 >"$FP_TMP/f.out" 2>&1
fp_touch_ok "r filled with seed 5 (both replicas)" "$FP_TMP/f.out"
FP_POOL=2M fp_node_start D R1
FP_POOL=2M fp_node_start "$RH" R2
fp_log "r: $NREC replicas, $NO1 on O1 (node $O1ID); cached reader R2 on $RH$([ "$CONTROL" = 1 ] && echo " (the negative control)")"

# 1. R2's agent reads r (seed 5) and keeps its layout; a guest there maps
#    r and holds the mapping
fp_cli "$RH" R2 touch r --seed 5 --threads 4 >"$FP_TMP/r2a.out" 2>&1
fp_touch_ok "R2 reads the fill before the partition" "$FP_TMP/r2a.out"
mkfifo "$FP_TMP/vh.fifo" "$FP_TMP/w.fifo" || fp_fail "mkfifo"
exec {VH_FD}<>"$FP_TMP/vh.fifo"
exec {W_FD}<>"$FP_TMP/w.fifo"
fp_bg "$RH" env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[R2]}" "$GUEST" vhold r 6 5 \
	<"$FP_TMP/vh.fifo" >"$FP_TMP/vh.out" 2>&1
VH_PID=$FP_BG_PID
fp_wait_log "$FP_TMP/vh.out" '^fp_guest: holding' 60 ||
	{ cat "$FP_TMP/vh.out" >&2; fp_fail "the held reader on R2 did not map r"; }

# 2. writes, B cut off in the middle of them, the flush
fp_bg A env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$GUEST" wplay r 1 0 \
	"w6:0:$HALF:1" h "w6:$HALF:$PAGES:1" f u <"$FP_TMP/w.fifo" >"$FP_TMP/w.out" 2>&1
W_PID=$FP_BG_PID
fp_wait_log "$FP_TMP/w.out" '^wplay: holding' 120 ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer did not write the first half"; }
grep -q '^wplay: write seed=6 .* bus=-1 sig=0' "$FP_TMP/w.out" ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "the writer's first half failed"; }
fp_host_cut B
fp_log "B (O1$([ "$CONTROL" = 1 ] && echo ", R2")) cut off the segment"
echo go >&"$W_FD"
fp_wait_pid "$W_PID" 180
wrc=$?
grep -c '^wplay: write seed=6 .* bus=-1 sig=0' "$FP_TMP/w.out" | grep -qx 2 &&
	grep -q '^wplay: flush=0 ' "$FP_TMP/w.out" && grep -q '^wplay: unmap=0 ' "$FP_TMP/w.out" &&
	[ "$wrc" = 0 ] || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer's flush or unmap failed with O1 cut off (rc $wrc)"; }
fp_log "ok: the writer's flush succeeded with O1 cut off ($(grep -E '^wplay: (flushing|flush=)' "$FP_TMP/w.out" | tr '\n' ' '))"
fp_repl state "$FP_COORD" r >"$FP_TMP/st1.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st1.out")"
# rec: CHUNK REPLICA NODE OFF STATE (1: MISSING)
miss=$(grep -cE '^rec: .* 1$' "$FP_TMP/st1.out")
miss_o1=$(grep -cE "^rec: [0-9]+ [0-9]+ $O1ID [0-9a-fx]+ 1\$" "$FP_TMP/st1.out")
[ "$miss" = "$NO1" ] && [ "$miss_o1" = "$NO1" ] ||
	{ cat "$FP_TMP/st1.out" >&2; fp_fail "r while O1 is cut off: $miss missing, $miss_o1 of them on O1 (expected $NO1, all)"; }
fp_log "ok: every replica on O1 is MISSING ($(head -n1 "$FP_TMP/st1.out"))"
# R2's mapping has its new layout (its agent synced it while B was away)
if [ "$CONTROL" != 1 ]; then
	fp_wait_log "$FP_TMP/R2.log" 'map r: replica layout generation .*\([1-9][0-9]* replicas not in sync\)' 60 ||
		fp_fail "R2's mapping of r never got the layout without O1"
fi

# 3. B on the segment again, but cut from A: O1 serves, unfenced
${FP_HOST_RUN[B]} ip route add blackhole "${FP_HOST_IP[A]}/32" || fp_fail "blackhole route to A on B"
fp_host_heal B
# O1's page server answers D again (a TCP connect from D's namespace)
${FP_HOST_RUN[D]} timeout 60 bash -c 'until exec 3<>"/dev/tcp/${1%:*}/${1##*:}"; do sleep 0.1; done' _ \
	"$(head -n1 "$FP_TMP/O1.addr")" 2>/dev/null || fp_fail "O1's page server is not reachable from D after the heal"
fp_log "B on the segment again (O1 reachable from D), A still unreachable from B"
echo go >&"$VH_FD"
fp_cli D R1 touch r --seed 6 --threads 4 >"$FP_TMP/r1a.out" 2>&1
r1rc=$?
fp_wait_pid "$VH_PID" 180
vrc=$?
[ "$vrc" = 0 ] && grep -q "^wverify: pages=$PAGES\$" "$FP_TMP/vh.out" ||
	{ cat "$FP_TMP/vh.out" >&2; fp_fail "the held reader on R2 failed (rc $vrc)"; }
if [ "$(grep -c '^wverify: [0-9]' "$FP_TMP/vh.out")" != 1 ] ||
	! grep -q "^wverify: 0 $((PAGES - 1)) s0\$" "$FP_TMP/vh.out"; then
	stale=$(awk '$1 == "wverify:" && $4 == "s1" {n += $3 - $2 + 1} END {print n + 0}' "$FP_TMP/vh.out")
	grep '^wverify: ' "$FP_TMP/vh.out" | grep -v ' s0$' | head -n 20 >&2
	grep -E 'fenced|replica|generation' "$FP_TMP/O1.log" "$FP_TMP/R2.log" | tail -n 20 >&2
	fp_fail "the held reader on R2 (mapped before the partition) read $stale stale pages (seed 5: O1's); the runs of pages not seed 6 are above (s1: seed 5)"
fi
fp_log "ok: the held reader on R2 read every page seed 6 (O1 reachable, not fenced)"
[ "$r1rc" = 0 ] || { cat "$FP_TMP/r1a.out" >&2; fp_fail "R1's read failed (rc $r1rc)"; }
fp_touch_ok "R1 (no layout of r before) reads with O1 reachable, not fenced" "$FP_TMP/r1a.out"
grep -q 'fenced extent' "$FP_TMP/O1.log" && fp_fail "O1 heard its fence though it could not reach the coordinator"

# 4. whole again
${FP_HOST_RUN[B]} ip route del blackhole "${FP_HOST_IP[A]}/32" || fp_fail "removing the blackhole route"
fp_log "B whole again"
fp_cli "$RH" R2 touch r --seed 6 --threads 4 >"$FP_TMP/r2b.out" 2>&1 &
r2p=$!
FP_PIDS+=("$r2p")
fp_cli D R1 touch r --seed 6 --threads 4 --order rand >"$FP_TMP/r1b.out" 2>&1
fp_wait_pid "$r2p" 180
fp_touch_ok "R2 (r's layout cached) reads right after the heal" "$FP_TMP/r2b.out"
fp_touch_ok "R1 reads right after the heal" "$FP_TMP/r1b.out"
fp_wait_log "$FP_TMP/O1.log" 'fenced extent' 60 || fp_fail "O1 never heard its fence after the heal"
fp_log "ok: O1 heard its fence: $(grep -c 'fenced extent' "$FP_TMP/O1.log") extents ($(grep -m1 'fenced extent' "$FP_TMP/O1.log" | sed 's/.*fenced extent/fenced extent/'))"
end=$(fp_deadline 120)
ok=0
while [ "$(date +%s)" -le "$end" ]; do
	fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 &&
		grep -q '^state: .* missing=0 rebuilding=0 ' "$FP_TMP/st.out" && { ok=1; break; }
	sleep 0.1
done
[ "$ok" = 1 ] || { cat "$FP_TMP/st.out" >&2; fp_fail "r never came back to 2 in-sync replicas"; }
fp_log "ok: r is back to 2 in-sync replicas ($(head -n1 "$FP_TMP/st.out"))"
fp_cli D R1 touch r --seed 6 --threads 4 --order rand >"$FP_TMP/r1c.out" 2>&1
fp_touch_ok "R1 reads after the rebuild" "$FP_TMP/r1c.out"

# 5. O1's fenced extents, once cleared and freed,
#    serve the next region placed on them: q (one replica, every chunk
#    on O1) is filled there by O1 and read by R1.
[ "${FP_PARTITION_REUSE:-1}" = 1 ] || exit 0
fp_wait_log "$FP_TMP/O1.log" 'cleared [0-9]+ extents' 120 || fp_fail "O1 never cleared its fenced extents"
owners=$(for ((i = 0; i < MB / 4; i++)); do printf '%s,' "$O1ID"; done)
fp_cli A W region create q --size "${MB}M" --chunk-size 4M --owners "${owners%,}" >"$FP_TMP/cq.out" 2>&1 ||
	fp_fail "create q: $(cat "$FP_TMP/cq.out")"
fp_repl state "$FP_COORD" q >"$FP_TMP/stq.out" 2>&1 || fp_fail "state of q: $(cat "$FP_TMP/stq.out")"
fenced=" $(grep -E "^rec: [0-9]+ [0-9]+ $O1ID " "$FP_TMP/st0.out" | awk '{print $5}' | tr '\n' ' ')"
reused=0
for off in $(awk '$1 == "rec:" {print $5}' "$FP_TMP/stq.out"); do
	[[ $fenced == *" $off "* ]] && reused=$((reused + 1))
done
fp_log "q placed on O1: $reused of its $((MB / 4)) chunks on extents r's replicas had there (fenced, cleared)"
fp_cli B O1 fill q --seed 7 >"$FP_TMP/fq.out" 2>&1 || fp_fail "fill q: $(cat "$FP_TMP/fq.out")"
fp_cli D R1 touch q --seed 7 --threads 4 >"$FP_TMP/q.out" 2>&1
fp_touch_ok "R1 reads q from O1's reused extents" "$FP_TMP/q.out"
exit 0
