#!/bin/bash
# Written pages of a chunk whose owner restarted (loopback, agents O, the
# owner, W, the writer's, and R): a guest on W maps region w (one chunk,
# O's, filled with seed 5) writable, writes seed 6 into every page and
# flushes (0); O is killed -9 and started again (a new instance, an empty
# pool); once W's agent knows (a read of w on W gets SIGBUS), the guest
# writes seed 7 into every page (they are in its cache) and flushes:
#  - the flush and the unmap fail: those pages cannot go home (the
#    chunk's extent in O's pool is not w's any more);
#  - w is deleted and z created on O (the same extent, freed at once: the
#    pool it was placed in is gone): z, never written, reads as zeroes on
#    R, not as w's pages (the old agent wrote them into O's new pool and
#    said the flush was done).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
fp_hosts_loopback H
fp_coord_start H
fp_node_start H O
fp_node_start H W --writeback-ms 200
fp_node_start H R
fp_cli H O region create w --size 2M --owners "$(fp_node_id O)" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create w: $(cat "$FP_TMP/c.out")"
fp_cli H O fill w --seed 5 >/dev/null 2>&1 || fp_fail "fill w"
mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[W]} "$GUEST" wplay w 1 0 w6:0:512:1 f h w7:0:512:1 f u \
	<"$FP_TMP/g.fifo" >"$FP_TMP/g.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/g.out" '^wplay: holding' 60 || { cat "$FP_TMP/g.out" >&2; fp_fail "the writer did not write and flush"; }
grep -q '^wplay: flush=0 ' "$FP_TMP/g.out" || { cat "$FP_TMP/g.out" >&2; fp_fail "the first flush failed"; }
kill -KILL "${FP_NODE_PID[O]}"
wait "${FP_NODE_PID[O]}" 2>/dev/null
fp_node_start H O
# W's agent knows O restarted once a read of w there is refused.
for ((i = 0; i < 200; i++)); do
	fp_cli H W touch w --seed 5 >"$FP_TMP/t.out" 2>&1 || break
	sleep 0.1
done
grep -q SIGBUS "$FP_TMP/t.out" || { cat "$FP_TMP/t.out" >&2; fp_fail "a read of w on W never met the restarted owner"; }
echo go >&7
fp_wait_pid "$gp" 60 || { cat "$FP_TMP/g.out" >&2; fp_fail "the writer did not end"; }
exec 7>&-
fp_log "writer: $(grep -E '^wplay: (write|flush=|unmap=)' "$FP_TMP/g.out" | tail -n3 | tr '\n' ' ')"
grep -q '^wplay: write seed=7 .* written=512 ' "$FP_TMP/g.out" ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the writer did not write its cached pages"; }
[ "$(grep -c '^wplay: flush=0 ' "$FP_TMP/g.out")" = 1 ] ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "a flush of pages whose owner restarted said 0"; }
grep -q '^wplay: unmap=0 ' "$FP_TMP/g.out" &&
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the unmap said 0 though written pages could not go home"; }
grep -q 'restarted since the region was placed: written pages' "$FP_TMP/W.log" ||
	fp_fail "W's agent did not say it dropped the pages"
fp_log "ok: the flush and the unmap failed: the pages could not go home"
fp_cli H O region delete w >/dev/null 2>&1 || fp_fail "delete w"
fp_cli H O region create z --size 2M --owners "$(fp_node_id O)" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create z: $(cat "$FP_TMP/c.out")"
fp_cli H R touch z --expect-zero >"$FP_TMP/z.out" 2>&1 ||
	{ cat "$FP_TMP/z.out" >&2; fp_fail "z, never written, does not read as zeroes (w's writer wrote into O's new pool)"; }
fp_touch_ok "z, never written, reads as zeroes" "$FP_TMP/z.out"
exit 0
