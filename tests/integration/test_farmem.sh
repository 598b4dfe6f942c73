#!/bin/bash
# Far memory (cache mode, loopback, three agents A, B, C; the region is all
# B's):
#   1. a guest on A with a cache 8x smaller than the region writes a new
#      seed over every page (random order, 4 threads) and reads it back;
#      A's cache never held more than its size plus the stated slack (the
#      agent's high-water mark); pages were evicted and written home
#   2. a guest on A and one on C read the new seed on every page
#   3. a second writable map is refused naming the holder; a read-only
#      mapper gets SIGSEGV on a write
#   4. farpage_flush(), then kill -9 of the guest and of A's agent: C
#      reads every flushed page
#   5. the owner SIGSTOPped while a writer evicts: nothing is lost, the
#      writer resumes when the owner does
#   6. the flush command of the CLI
#   7. A's agent killed -9 with written pages only in its cache, then
#      restarted: the writer's mapping is handed over, nothing is lost
#   8. the background flusher sends home all that is written, every pass
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
SIZE=${FP_FARMEM_SIZE:-128M}
CACHE=${FP_FARMEM_CACHE:-16M}
# every agent's pool holds the whole region (B owns it all)
[ "$(numfmt --from=iec "$SIZE")" -gt "$(numfmt --from=iec "${FP_POOL:-256M}")" ] &&
	export FP_POOL=$SIZE
SLACK_PAGES=$FP_CACHE_SLACK_PAGES
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H A --cache-size "$CACHE" --writeback-ms 200
fp_node_start H C
b=$(fp_node_id B) a=$(fp_node_id A)
owners=$(printf "$b,%.0s" $(seq $(($(numfmt --from=iec "$SIZE") / (2 << 20)))))
fp_cli H B region create r --size "$SIZE" --owners "${owners%,}" >/dev/null 2>&1 ||
	fp_fail "create r"
fp_cli H B fill r --seed 1 >/dev/null 2>&1 || fp_fail "fill r"

# 1. writes over a cache 8x smaller than the region
fp_cli H A touch r --write --seed 7 --order rand --threads 4 >"$FP_TMP/w.out" 2>&1 ||
	{ cat "$FP_TMP/w.out" >&2; fp_fail "writing the new seed on A"; }
fp_touch_ok "A wrote seed 7 over $SIZE through a $CACHE cache" "$FP_TMP/w.out"
grep -q '^flush: done' "$FP_TMP/w.out" || { cat "$FP_TMP/w.out" >&2; fp_fail "touch --write did not flush"; }
limit=$(fp_cache_stat H A limit) max=$(fp_cache_stat H A resident_max) ev=$(fp_cache_stat H A evictions)
fmax=$(fp_cache_stat H A file_max)
wb=$(fp_cache_stat H A writebacks) dirty=$(fp_cache_stat H A dirty)
[ -n "$limit" ] && [ "$limit" -gt 0 ] || fp_fail "A reports no cache"
[ "$max" -le $((limit + SLACK_PAGES * 4096)) ] ||
	fp_fail "A's cache held $max bytes, over $limit + slack $((SLACK_PAGES * 4096))"
# the kernel's count: what the cache memfd had allocated when it was full
[ -n "$fmax" ] && [ "$fmax" -gt 0 ] || fp_fail "A reports no allocated size of its cache memfd"
[ "$fmax" -le $((limit + SLACK_PAGES * 4096)) ] ||
	fp_fail "A's cache memfd had $fmax bytes allocated, over $limit + slack $((SLACK_PAGES * 4096))"
pages=$(($(numfmt --from=iec "$SIZE") / 4096))
[ "$ev" -gt 0 ] || fp_fail "no page was evicted"
[ "$wb" -ge "$pages" ] || fp_fail "$wb pages written home, fewer than the $pages written"
[ "$dirty" = 0 ] || fp_fail "$dirty bytes still dirty after the flush"
fp_log "ok: A's cache: limit=$limit resident_max=$max memfd allocated at most $fmax (slack $((SLACK_PAGES * 4096))) evictions=$ev writebacks=$wb"

# 2. everyone reads the new seed
fp_cli H A touch r --seed 7 >"$FP_TMP/ra.out" 2>&1 || { cat "$FP_TMP/ra.out" >&2; fp_fail "A reading seed 7"; }
fp_touch_ok "A reads seed 7 on every page" "$FP_TMP/ra.out"
fp_cli H C touch r --seed 7 >"$FP_TMP/rc.out" 2>&1 || { cat "$FP_TMP/rc.out" >&2; fp_fail "C reading seed 7"; }
fp_touch_ok "C reads seed 7 on every page" "$FP_TMP/rc.out"

# 3. one writer; read-only mappers cannot write
mkfifo "$FP_TMP/hold.fifo" && exec 7<>"$FP_TMP/hold.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" whold r 9 <"$FP_TMP/hold.fifo" >"$FP_TMP/whold.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/whold.out" "flushed" 60 || { cat "$FP_TMP/whold.out" >&2; fp_fail "writer did not start"; }
fp_cli H C touch r --write --seed 9 >"$FP_TMP/busy.out" 2>&1 && fp_fail "a second writable map was granted"
grep -q "mapped writable on node $a (A)" "$FP_TMP/busy.out" ||
	{ cat "$FP_TMP/busy.out" >&2; fp_fail "the refusal does not name the holder"; }
fp_log "ok: a second writable map is refused: $(grep -o "region 'r' is mapped writable on node [0-9]* ([A-Za-z]*)" "$FP_TMP/busy.out" | tail -n1)"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[C]} "$GUEST" rdonly-write r >"$FP_TMP/ro.out" 2>&1 ||
	{ cat "$FP_TMP/ro.out" >&2; fp_fail "a read-only mapper could write"; }
fp_log "ok: read-only mapper: $(cat "$FP_TMP/ro.out")"
# C reads the writer's flushed data meanwhile
fp_cli H C touch r --seed 9 >"$FP_TMP/r9.out" 2>&1 || { cat "$FP_TMP/r9.out" >&2; fp_fail "C reading the holder's flush"; }
fp_touch_ok "C reads what the writer flushed" "$FP_TMP/r9.out"

# 4. flushed, then the guest and A's agent die: nothing flushed is lost
kill -KILL "$gp" "${FP_NODE_PID[A]}"
wait "$gp" "${FP_NODE_PID[A]}" 2>/dev/null
fp_cli H C touch r --seed 9 >"$FP_TMP/r9k.out" 2>&1 || { cat "$FP_TMP/r9k.out" >&2; fp_fail "C after A died"; }
fp_touch_ok "kill -9 of the writer and its agent: C reads every flushed page" "$FP_TMP/r9k.out"
fp_node_start H A --cache-size "$CACHE" --writeback-ms 200
# The dead agent's lease ends with its instance: A writes again.

# 5. the owner stops while A evicts (written pages must go home first)
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$FP_CLI_BIN" --coordinator "$FP_COORD" \
	touch r --write --seed 11 --order rand --threads 4 >"$FP_TMP/stop.out" 2>&1 &
tp=$!
ev0=$(fp_cache_stat H A evictions)
for ((i = 0; i < 400; i++)); do
	[ "$(fp_cache_stat H A evictions)" -gt "${ev0:-0}" ] && break
	sleep 0.05
done
kill -STOP "${FP_NODE_PID[B]}"
sleep 2 # the outage itself, not a wait for anything
kill -CONT "${FP_NODE_PID[B]}"
fp_wait_pid "$tp" 120 || { cat "$FP_TMP/stop.out" >&2; fp_fail "writer across the owner's stop"; }
fp_touch_ok "writer went on after the owner's stop" "$FP_TMP/stop.out"
fp_cli H C touch r --seed 11 >"$FP_TMP/r11.out" 2>&1 || { cat "$FP_TMP/r11.out" >&2; fp_fail "C reading seed 11"; }
fp_touch_ok "C reads every page written across the owner's stop" "$FP_TMP/r11.out"

# 6. the CLI's flush (nothing mapped: nothing to send, at once)
fp_cli H A flush r >"$FP_TMP/flush.out" 2>&1 || { cat "$FP_TMP/flush.out" >&2; fp_fail "farpage flush"; }
grep -q "every written page is home" "$FP_TMP/flush.out" || fp_fail "flush output"
fp_log "ok: farpage flush"

# 7. A's agent dies with written pages still only in its cache and comes
#    back (an upgrade): the writer hands its mapping over, the new agent
#    takes every page in the cache as written, and they all go home
kill "${FP_NODE_PID[A]}"
wait "${FP_NODE_PID[A]}" 2>/dev/null
fp_node_start H A --cache-size "$CACHE" --writeback-ms 600000
mkfifo "$FP_TMP/wr.fifo" && exec 8<>"$FP_TMP/wr.fifo" || fp_fail "fifo"
FARPAGE_AGENT_TIMEOUT_MS=30000 FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} \
	"$GUEST" wresume r 13 <"$FP_TMP/wr.fifo" >"$FP_TMP/wr.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/wr.out" "written" 120 || { cat "$FP_TMP/wr.out" >&2; fp_fail "writer did not write"; }
dirty=$(fp_cache_stat H A dirty)
[ "${dirty:-0}" -gt 0 ] || fp_fail "no written page was left only in A's cache (dirty=${dirty:-?})"
kill -KILL "${FP_NODE_PID[A]}"
wait "${FP_NODE_PID[A]}" 2>/dev/null
fp_node_start H A --cache-size "$CACHE" --writeback-ms 200
echo go >&8
fp_wait_pid "$gp" 120 || { cat "$FP_TMP/wr.out" >&2; fp_fail "writer across its agent's restart"; }
grep -q "wresume: flush=0 .*wrong=0 zero=0 sigbus=0" "$FP_TMP/wr.out" ||
	{ cat "$FP_TMP/wr.out" >&2; fp_fail "writer across its agent's restart: $(tail -n1 "$FP_TMP/wr.out")"; }
grep -q "process handed over region r" "$FP_TMP/A.log" || fp_fail "the new agent did not take the mapping over"
fp_cli H C touch r --seed 13 >"$FP_TMP/r13.out" 2>&1 || { cat "$FP_TMP/r13.out" >&2; fp_fail "C reading seed 13"; }
fp_touch_ok "A's agent killed with $dirty written bytes only in its cache, restarted: the writer went on, C reads every page" "$FP_TMP/r13.out"

# 8. the background flusher sends home everything written, not only what
#    its write-back slots hold at its tick: a writer on D (a cache as large
#    as the region, so nothing is evicted; a pass every 5 s) writes the
#    whole region and waits; every page is home within three passes
fp_node_start H D --cache-size $(($(numfmt --from=iec "$SIZE") + (32 << 20))) --writeback-ms 5000
mkfifo "$FP_TMP/wb.fifo" && exec 9<>"$FP_TMP/wb.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[D]} "$GUEST" wresume r 15 <"$FP_TMP/wb.fifo" >"$FP_TMP/wb.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/wb.out" "written" 120 || { cat "$FP_TMP/wb.out" >&2; fp_fail "writer on D did not write"; }
for ((i = 0; i < 150; i++)); do
	dirty=$(fp_cache_stat H D dirty)
	[ "$dirty" = 0 ] && break
	sleep 0.1
done
[ "$dirty" = 0 ] ||
	fp_fail "$dirty written bytes not home after three of D's write-back passes ($(fp_cache_stat H D writebacks) pages went)"
echo go >&9
fp_wait_pid "$gp" 120 || { cat "$FP_TMP/wb.out" >&2; fp_fail "writer on D"; }
fp_log "ok: D's flusher sent all $SIZE written home without a flush ($(fp_cache_stat H D writebacks) pages)"
exit 0
