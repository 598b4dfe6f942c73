#!/bin/bash
# Fault loops (--fault-threads 2; loopback, agents A and B, regions all B's):
#   1. one mapping at a time: its faults are read by one loop only (the
#      other loop's per-loop counter does not move), and the next mapping
#      goes to the other loop; every page verified byte for byte
#   2. four mappings at once, 4 threads each, random order: every page
#      verified; both loops served faults; the per-loop counters sum to
#      the agent's total, and the pages served remote to the pages touched
#      (read-ahead off: one fetch per page)
#   2b. one loop's connection to B cut (ss -K) and made again: the other
#      loop's connection is not fenced by it (each loop is a client of its
#      own at B): the writers of 3 see no write refused
#   3. (cache mode) a flush across loops: two writers, one per loop, each
#      writes and flushes its region (write-back every 10 minutes, so only
#      the flush sends pages home): when a flush returns, the owner's pool
#      holds every written page
#   4. (cache mode) the join waits for the loop with the data: a writer's
#      flush while the owner is stopped must not come back 0 (the other
#      loop, which has nothing of the region, answers at once), but as the
#      fault timeout's -ETIMEDOUT; once the owner runs again every page
#      reads right
set -uo pipefail
# shellcheck source=../lib.sh
. "$(dirname "$0")/../lib.sh"
fp_require
command -v curl >/dev/null || fp_skip "curl is not installed"
GUEST=$FP_BIN/tests/fp_guest
SIZE=8M
fp_hosts_loopback H
fp_coord_start H
fp_node_start H B
fp_node_start H A --fault-threads 2 --readahead 0 --writeback-ms 600000 \
	--fault-timeout-ms 3000 --metrics-listen 127.0.0.1:0
b=$(fp_node_id B)
grep -q "2 fault loop(s)" "$FP_TMP/A.log" || fp_fail "A does not run 2 fault loops"
owners=$(printf "$b,%.0s" $(seq $(($(numfmt --from=iec "$SIZE") / (2 << 20)))))
for r in r0 r1 r2 r3 w0 w1; do
	fp_cli H B region create "$r" --size "$SIZE" --owners "${owners%,}" >/dev/null 2>&1 ||
		fp_fail "create $r"
	fp_cli H B fill "$r" --seed 5 >/dev/null 2>&1 || fp_fail "fill $r"
done
pages=$(($(numfmt --from=iec "$SIZE") / 4096))
declare -A pid gp

m=$(sed -n 's/^metrics //p' "$FP_TMP/A.addr")
[ -n "$m" ] || fp_fail "A: no metrics address"
scrape() { curl -sf "http://$m/metrics" >"$FP_TMP/A.prom" || fp_fail "curl http://$m/metrics"; }
val() { awk -v s="$1" '$1 == s { print $2; exit }' "$FP_TMP/A.prom"; }
loopf() { val "farpage_fault_loop_faults_total{loop=\"$1\"}"; }

# 1. one mapping at a time
scrape
[ "$(val farpage_fault_loops)" = 2 ] || fp_fail "A's /metrics: not 2 fault loops"
seen=""
for r in r0 r1; do
	scrape
	f0=$(loopf 0) f1=$(loopf 1)
	fp_cli H A touch "$r" --seed 5 --threads 4 >"$FP_TMP/$r.out" 2>&1 ||
		{ cat "$FP_TMP/$r.out" >&2; fp_fail "touch $r"; }
	fp_touch_ok "A read $r" "$FP_TMP/$r.out"
	scrape
	d0=$(($(loopf 0) - f0)) d1=$(($(loopf 1) - f1))
	n=$(fp_field "$FP_TMP/$r.out" touch: pages)
	if [ "$d1" = 0 ] && [ "$d0" -ge "$n" ]; then
		l=0
	elif [ "$d0" = 0 ] && [ "$d1" -ge "$n" ]; then
		l=1
	else
		fp_fail "$r ($n pages): loop 0 read $d0 faults, loop 1 $d1 (want all on one loop)"
	fi
	[ "$seen" != "$l" ] || fp_fail "$r went to loop $l as the mapping before it"
	seen=$l
	fp_log "ok: $r: all $n pages faulted on loop $l (loop 0 +$d0, loop 1 +$d1)"
done

# 2. four mappings at once, many threads each
scrape
f0=$(loopf 0) f1=$(loopf 1) rem0=$(val 'farpage_faults_total{kind="remote"}')
for r in r0 r1 r2 r3; do
	# shellcheck disable=SC2046 # the flag is word-split on purpose
	fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$FP_CLI_BIN" \
		--coordinator "$FP_COORD" $(fp_insecure_flag) touch "$r" --seed 5 \
		--threads 4 --order rand >"$FP_TMP/p$r.out" 2>&1
	pid[$r]=$FP_BG_PID
done
for r in r0 r1 r2 r3; do
	fp_wait_pid "${pid[$r]}" 120 || { cat "$FP_TMP/p$r.out" >&2; fp_fail "parallel touch of $r"; }
	fp_touch_ok "A read $r, with three other mappings at once" "$FP_TMP/p$r.out"
done
scrape
d0=$(($(loopf 0) - f0)) d1=$(($(loopf 1) - f1))
[ "$d0" -gt 0 ] && [ "$d1" -gt 0 ] || fp_fail "four mappings: loop 0 read $d0 faults, loop 1 $d1 (want both)"
total=$(val farpage_faults_read_total)
[ "$total" = $(($(loopf 0) + $(loopf 1))) ] ||
	fp_fail "farpage_faults_read_total=$total, not the sum of the loops' $(loopf 0) + $(loopf 1)"
drem=$(($(val 'farpage_faults_total{kind="remote"}') - rem0))
[ "$drem" = $((4 * pages)) ] || fp_fail "four mappings: $drem pages served remote, not the $((4 * pages)) touched"
st=$(fp_stat H A faults)
[ "$st" = "$total" ] || fp_fail "farpage stats says faults=$st, /metrics $total"
fp_log "ok: four mappings of $pages pages at once: loop 0 +$d0, loop 1 +$d1 faults; remote +$drem; total $total = the loops' sum = farpage stats"

# 3. a flush across loops
[ "${FP_FAULT_MODE:-}" = copy ] && { fp_log "copy mode: no flush to check"; exit 0; }

# 2b. one loop reconnects: a newer connection of the same client at B would
# fence the other loop's (its writes refused)
bport=$(head -n1 "$FP_TMP/B.addr" | sed 's/.*://')
conns=$(ss -tnH state established "( dport = :$bport )" | awk '{ print $3 }')
[ "$(wc -l <<<"$conns")" = 2 ] || fp_fail "A has not 2 connections to B's page server: $conns"
one=$(head -n1 <<<"$conns")
if ss -K state established "( dport = :$bport and sport = :${one##*:} )" >/dev/null 2>&1 &&
	! ss -tnH state established "( sport = :${one##*:} and dport = :$bport )" | grep -q .; then
	for r in r0 r1; do
		fp_cli H A touch "$r" --seed 5 >"$FP_TMP/k$r.out" 2>&1 ||
			{ cat "$FP_TMP/k$r.out" >&2; fp_fail "touch $r after the cut"; }
		fp_touch_ok "A read $r after one loop's connection was cut" "$FP_TMP/k$r.out"
	done
	fp_log "ok: cut $one (one loop's connection to B)"
	cut=1
else
	fp_log "ss -K cannot close sockets here: no connection cut"
	cut=0
fi
# one fifo each: a guest may read more than its line
mkfifo "$FP_TMP/w0.fifo" "$FP_TMP/w1.fifo" && exec 7<>"$FP_TMP/w0.fifo" 8<>"$FP_TMP/w1.fifo" ||
	fp_fail "fifo"
for r in w0 w1; do
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" whold "$r" 9 <"$FP_TMP/$r.fifo" \
		>"$FP_TMP/$r.out" 2>&1 &
	FP_PIDS+=("$!")
	gp[$r]=$!
	fp_wait_log "$FP_TMP/$r.out" "flushed" 60 || { cat "$FP_TMP/$r.out" >&2; fp_fail "writer of $r did not flush"; }
done
scrape
[ "$(val 'farpage_fault_loop_mappings{loop="0"}')" = 1 ] &&
	[ "$(val 'farpage_fault_loop_mappings{loop="1"}')" = 1 ] ||
	fp_fail "the two writers are not one on each loop: $(grep '^farpage_fault_loop_mappings' "$FP_TMP/A.prom" | tr '\n' ' ')"
for r in w0 w1; do
	fp_cli H B touch "$r" --seed 9 --local-too >"$FP_TMP/b$r.out" 2>&1 ||
		{ cat "$FP_TMP/b$r.out" >&2; fp_fail "B reading what A flushed of $r"; }
	n=$(fp_field "$FP_TMP/b$r.out" touch: verified)
	[ "$n" = "$pages" ] && [ "$(fp_field "$FP_TMP/b$r.out" touch: mismatches)" = 0 ] ||
		{ cat "$FP_TMP/b$r.out" >&2; fp_fail "B's pool: $n of $pages pages of $r verified after the flush"; }
	fp_log "ok: $r flushed from its loop: B's pool holds all $pages written pages"
done
scrape
we=$(val farpage_cache_writeback_errors_total)
[ "$cut" = 0 ] || [ "$we" = 0 ] ||
	fp_fail "$we write-backs refused after one loop reconnected (its connection fenced the other loop's)"
echo go >&7
echo go >&8
for r in w0 w1; do
	fp_wait_pid "${gp[$r]}" 60 || { cat "$FP_TMP/$r.out" >&2; fp_fail "writer of $r did not end"; }
done
fp_log "ok: both writers unmapped"

# 4. a flush across loops waits for the loop that has the data
mkfifo "$FP_TMP/cut.fifo" && exec 9<>"$FP_TMP/cut.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" wcut w0 11 9 "$pages" <"$FP_TMP/cut.fifo" \
	>"$FP_TMP/cut.out" 2>&1 &
FP_PIDS+=("$!")
cp=$!
fp_wait_log "$FP_TMP/cut.out" "written" 60 || { cat "$FP_TMP/cut.out" >&2; fp_fail "writer of w0 did not write"; }
kill -STOP "${FP_NODE_PID[B]}"
echo flush >&9
fp_wait_log "$FP_TMP/cut.out" "flush=" 60 || { kill -CONT "${FP_NODE_PID[B]}"; cat "$FP_TMP/cut.out" >&2; fp_fail "the flush did not end"; }
kill -CONT "${FP_NODE_PID[B]}"
fr=$(sed -n 's/^fp_guest: flush=//p' "$FP_TMP/cut.out")
[ "$fr" = -110 ] || { cat "$FP_TMP/cut.out" >&2; fp_fail "flush with the owner stopped: $fr, not -ETIMEDOUT (-110)"; }
echo read >&9
fp_wait_pid "$cp" 120 || { cat "$FP_TMP/cut.out" >&2; fp_fail "writer of w0 after the owner's stop"; }
grep -q '^wcut: read .* wrong=0 zero=0 sigbus=0' "$FP_TMP/cut.out" &&
	grep -q '^wcut: write .* wrong=0 zero=0 sigbus=0' "$FP_TMP/cut.out" ||
	{ cat "$FP_TMP/cut.out" >&2; fp_fail "w0 after the owner's stop: pages wrong"; }
fp_log "ok: a flush with the owner stopped waited for the loop with the data: $fr; then every page read right"
