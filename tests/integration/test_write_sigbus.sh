#!/bin/bash
# A writable mapping whose owner goes away: every fault the agent gives up
# on ends in SIGBUS or the right bytes, whatever state the page is in, never
# a hang, never zeroes. Two hosts (network namespaces joined by a veth
# pair): the coordinator and agents "a" (the writer's, --cache-size 8M
# --fault-timeout-ms 3000) and "c" on host A, agent "b" on host B. Regions
# r1 (all b's) and r2 (all c's), 72 MiB each, filled with seed 1 by their
# owner. On each, a writer on A (fp_guest wcut) writes seed 7 over the
# first 64 MiB (the last 8 MiB are never touched), then:
#   1. r2: its owner c is killed -9 as the writer's flush starts (write-back
#      in flight, written pages still in the cache);
#   2. r1: the flush returns 0, then A's link goes down (b unreachable);
# and the writer's 64 threads read a spread of pages and write another:
# pages evicted after going home (their write-protect marker stays in the
# guest's page table), pages still in the cache (present, or paged out by
# the clock's sampling), pages never populated, pages written home or not.
# Each page read or written after the cut must hold its right bytes (seed
# 7, seed 1 for the untouched tail, seed 8 where it wrote) or raise SIGBUS;
# some must raise SIGBUS (evicted and never fetched pages cannot be had).
#
# A hang check, not a speed check: a guest thread touches at most 3 pages
# after the cut, each may wait out the 3 s fault timeout (9 s), plus 60 s
# of slack for a loaded machine: a writer still running 90 s after it was
# told to read hangs; it is killed and the test fails.
#
# With FP_FAULT_MODE=copy the same holds (written pages stay in the
# process, there is no flush: farpage_flush() says -EOPNOTSUPP).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
GUEST=$FP_BIN/tests/fp_guest
TIMEOUT_MS=3000
BOUND_S=90
NWRITE=16384 # 64 MiB of the 72
fp_hosts_netns A B || fp_skip "cannot make network namespaces"
fp_coord_start A
fp_node_start A a --cache-size 8M --fault-timeout-ms $TIMEOUT_MS
fp_node_start A c
fp_node_start B b
b=$(fp_node_id b) c=$(fp_node_id c)
[ -n "$b" ] && [ -n "$c" ] || fp_fail "node ids of b and c"
owners() { printf "$1,%.0s" $(seq 36) | sed 's/,$//'; }
fp_cli A a region create r1 --size 72M --owners "$(owners "$b")" >"$FP_TMP/c1.out" 2>&1 ||
	fp_fail "create r1: $(cat "$FP_TMP/c1.out")"
fp_cli A a region create r2 --size 72M --owners "$(owners "$c")" >"$FP_TMP/c2.out" 2>&1 ||
	fp_fail "create r2: $(cat "$FP_TMP/c2.out")"
fp_cli B b fill r1 --seed 1 >/dev/null 2>&1 || fp_fail "fill r1"
fp_cli A c fill r2 --seed 1 >/dev/null 2>&1 || fp_fail "fill r2"
copy=0
[ "${FP_FAULT_MODE:-}" = copy ] && copy=1

# wcut_start NAME REGION: a writer on A; returns once it has written
# (WFD: its stdin, WPID: its pid). A map refused because the filler's
# lease is still held is tried again.
wcut_start() {
	local name=$1 r=$2 try i
	mkfifo "$FP_TMP/$name.fifo" || fp_fail "fifo"
	exec {WFD}<>"$FP_TMP/$name.fifo"
	for ((try = 0; try < 20; try++)); do
		FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[a]} ${FP_HOST_RUN[A]} "$GUEST" wcut "$r" 7 1 $NWRITE \
			<"$FP_TMP/$name.fifo" >"$FP_TMP/$name.out" 2>&1 &
		WPID=$!
		FP_PIDS+=("$WPID")
		for ((i = 0; i < 120 * 20; i++)); do
			grep -q "written" "$FP_TMP/$name.out" && return 0
			kill -0 "$WPID" 2>/dev/null || break
			sleep 0.05
		done
		wait "$WPID" 2>/dev/null
		grep -q "mapped writable on node" "$FP_TMP/$name.out" || break
		sleep 0.2 # the filler's lease is being released: ask again
	done
	cat "$FP_TMP/$name.out" >&2
	fp_fail "$name: the writer did not write"
}

# wcut_judge NAME WHAT: the writer ended within the bound and every page
# it touched after the cut held its right bytes or raised SIGBUS.
wcut_judge() {
	local name=$1 what=$2 rc f=$FP_TMP/$1.out ph n v s
	fp_wait_pid "$WPID" $BOUND_S
	rc=$?
	[ $rc = 124 ] && { cat "$f" >&2; fp_fail "$what: the writer still waits ${BOUND_S} s after the cut (hung on a fault the agent gave up on)"; }
	for ph in read write; do
		grep -q "^wcut: $ph " "$f" || { cat "$f" >&2; fp_fail "$what: no $ph result (exit $rc)"; }
		n=$(fp_field "$f" "wcut: $ph" pages) v=$(fp_field "$f" "wcut: $ph" verified)
		s=$(fp_field "$f" "wcut: $ph" sigbus)
		[ "$(fp_field "$f" "wcut: $ph" wrong)" = 0 ] && [ "$(fp_field "$f" "wcut: $ph" zero)" = 0 ] &&
			[ $((v + s)) = "$n" ] || { cat "$f" >&2; fp_fail "$what: $ph: $(grep "^wcut: $ph" "$f")"; }
	done
	[ $rc = 0 ] || { cat "$f" >&2; fp_fail "$what: the writer failed (exit $rc)"; }
	[ "$(fp_field "$f" "wcut: read" sigbus)" -gt 0 ] ||
		{ cat "$f" >&2; fp_fail "$what: no page raised SIGBUS: the give-up path was not taken"; }
	fp_log "ok: $what: $(grep '^wcut: read' "$f" | cut -d' ' -f2-); $(grep '^wcut: write' "$f" | cut -d' ' -f2-)"
}

# 1. The owner is killed -9 as the flush starts.
wcut_start kill r2
echo go >&"$WFD"
fp_wait_log "$FP_TMP/kill.out" "flushing" 60 || { cat "$FP_TMP/kill.out" >&2; fp_fail "kill: no flush"; }
kill -KILL "${FP_NODE_PID[c]}"
wait "${FP_NODE_PID[c]}" 2>/dev/null
fp_wait_log "$FP_TMP/kill.out" "flush=" $BOUND_S || { cat "$FP_TMP/kill.out" >&2; fp_fail "kill: the flush never returned"; }
fp_log "owner killed during write-back: $(grep -o 'flush=.*' "$FP_TMP/kill.out")"
echo go >&"$WFD"
wcut_judge kill "owner killed -9 during write-back"

# 2. The flush returns 0, then the link goes down.
wcut_start part r1
echo go >&"$WFD"
fp_wait_log "$FP_TMP/part.out" "flush=" $BOUND_S || { cat "$FP_TMP/part.out" >&2; fp_fail "part: the flush never returned"; }
if [ $copy = 1 ]; then
	grep -q "flush=-95" "$FP_TMP/part.out" || fp_fail "copy mode: flush: $(grep flush= "$FP_TMP/part.out")"
else
	grep -q "flush=0" "$FP_TMP/part.out" || fp_fail "flush before the partition: $(grep flush= "$FP_TMP/part.out")"
	ev=$(fp_cache_stat A a evictions)
	[ "${ev:-0}" -gt 0 ] || fp_fail "no page of the cache was evicted"
fi
ip -n "$FP_NS_A" link set "$FP_LINK_A" down || fp_fail "link down"
echo go >&"$WFD"
wcut_judge part "partition after the flush"
poisoned=$(fp_stat A a poisoned)
[ "${poisoned:-0}" -gt 0 ] || fp_fail "agent a reports no poisoned pages"
fp_log "agent a: poisoned=$poisoned"
echo "test_write_sigbus: all cases passed"
