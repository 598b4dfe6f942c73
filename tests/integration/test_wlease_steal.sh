#!/bin/bash
# A writer whose agent restarts while another host takes the write lease
# (loopback, agents A, C, D and B, the owner of every page), 10 seeded
# rounds:
#   1. a guest on A maps r writable, writes seed a into every page and
#      flushes (0): D reads seed a on every page, from B's pool
#   2. A's agent is killed -9 and restarted at once, but the guest cannot
#      reach it yet (its socket path is a symlink, taken away meanwhile):
#      C maps writable (the dead agent's lease ended with its instance),
#      writes seed c into every page, flushes and unmaps: D reads seed c
#   3. the guest can reach the restarted agent again: handing its mapping
#      over needs its lease back, but C held it since (a newer
#      generation): the lease is lost, for good. The guest writes seed a2
#      into every page: each write is SIGBUS, its flush and unmap fail,
#      and D still reads seed c on every page (the old code handed the
#      mapping over, took a fresh lease and sent A's cache home: every
#      page of C's reverted)
#   4. (once) a guest on A2 writes and flushes seed a, writes seed a2
#      (left only in A2's cache), and A2's agent is stopped (SIGSTOP)
#      until the coordinator has it down: C maps writable, writes seed c,
#      flushes and unmaps. A2's agent goes on; the guest writes seed a3
#      and flushes: B refuses the write-backs of A2's superseded lease
#      generation, the flush fails, and from then on every write of the
#      guest is SIGBUS; D reads seed c on every page
#   5. (once) the same on A3, but C only maps writable and unmaps (it
#      writes nothing): B never saw the newer generation and takes A3's
#      pages, but the flush asks the coordinator, which has A3's lease
#      lost: the flush fails, then every write is SIGBUS
#   6. (once) the same on A4 with C writing, but the guest is killed while
#      its agent is stopped: the agent's write-backs for the dead process
#      are refused, dropped, and a writable map on A4 works again
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
ROUNDS=${FP_WLEASE_ROUNDS:-10}
SIZE=16M
PAGES=$(($(numfmt --from=iec $SIZE) / 4096))
fp_hosts_loopback H
fp_coord_start H --lease-ms 2000
fp_node_start H B
fp_node_start H A --cache-size 64M --writeback-ms 200
fp_node_start H C --cache-size 64M --writeback-ms 200
fp_node_start H D
b=$(fp_node_id B)
owners=$(printf "$b,%.0s" $(seq $(($(numfmt --from=iec $SIZE) / (2 << 20)))))
fp_cli H B region create r --size $SIZE --owners "${owners%,}" >/dev/null 2>&1 ||
	fp_fail "create r"
# The guest's way to A's agent: taken away while C writes.
LINK=$FP_TMP/a-link.sock

# D reads seed $1 on every page ($2: what for).
owner_has() {
	fp_cli H D touch r --seed "$1" >"$FP_TMP/d.out" 2>&1 ||
		{ cat "$FP_TMP/d.out" >&2; fp_fail "round $r: $2: B's pool does not hold seed $1 on every page"; }
	fp_touch_ok "round $r: $2: B's pool holds seed $1 on every page" "$FP_TMP/d.out"
}

for ((r = 1; r <= ROUNDS; r++)); do
	sa=$((100 + r)) sc=$((200 + r)) sa2=$((300 + r))
	ln -sfn "${FP_NODE_SOCK[A]}" "$LINK"
	rm -f "$FP_TMP/g.fifo"
	mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_TIMEOUT_MS=120000 FARPAGE_AGENT_SOCK=$LINK \
		"$GUEST" wsteal r $sa $sa2 <"$FP_TMP/g.fifo" >"$FP_TMP/g$r.out" 2>&1 &
	gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$FP_TMP/g$r.out" "flushed $PAGES pages" 60 ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: A's writer did not write and flush"; }
	owner_has $sa "A flushed"

	rm -f "$LINK"
	kill -KILL "${FP_NODE_PID[A]}"
	wait "${FP_NODE_PID[A]}" 2>/dev/null
	fp_node_start H A --cache-size 64M --writeback-ms 200
	fp_cli H C touch r --write --seed $sc >"$FP_TMP/c$r.out" 2>&1 ||
		{ cat "$FP_TMP/c$r.out" >&2; fp_fail "round $r: C could not write (A's agent restarted)"; }
	fp_touch_ok "round $r: C wrote seed $sc" "$FP_TMP/c$r.out"
	grep -q '^flush: done' "$FP_TMP/c$r.out" || fp_fail "round $r: C did not flush"
	owner_has $sc "C flushed and unmapped"

	# The guest finds the agent again: its resume is refused (or, in the
	# old code, accepted). Refused, libfarpage drops the cache and only
	# then starts poisoning ("... now raise SIGBUS"): the lines saying the
	# lease is lost come before the cache is dropped, and a write let go
	# on them could still land in a page about to be dropped.
	ln -sfn "${FP_NODE_SOCK[A]}" "$LINK"
	fp_wait_log "$FP_TMP/g$r.out" "pages not yet fetched now raise SIGBUS|handed over to the restarted agent" 60 ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: A's guest never met its restarted agent"; }
	echo go >&7
	fp_wait_pid "$gp" 120 || { cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: A's guest did not end"; }
	exec 7>&-
	line=$(grep '^wsteal:' "$FP_TMP/g$r.out")
	[ -n "$line" ] || { cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: A's guest printed no result"; }
	fp_log "round $r: A's guest: $line"
	owner_has $sc "after A's lost writer"
	sigbus=$(fp_field "$FP_TMP/g$r.out" wsteal: sigbus)
	written=$(fp_field "$FP_TMP/g$r.out" wsteal: written)
	flush=$(fp_field "$FP_TMP/g$r.out" wsteal: flush)
	unmap=$(fp_field "$FP_TMP/g$r.out" wsteal: unmap)
	[ "$sigbus" = "$PAGES" ] && [ "$written" = 0 ] ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: A wrote after losing its lease: $line"; }
	[ "$flush" != 0 ] && [ "$unmap" != 0 ] ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: A's flush or unmap said 0 after losing its lease: $line"; }
	fp_log "ok: round $r: A lost its lease: SIGBUS on each write, flush=$flush unmap=$unmap"
	grep -q "process handed over region r" "$FP_TMP/A.log" &&
		fp_fail "round $r: A's restarted agent took the lost writer's mapping over"
done
fp_log "ok: $ROUNDS rounds: the owner always held the last acknowledged writer's bytes"

# 4./5. A guest's agent stopped (a partition from the coordinator) with
#    written pages only in its cache while another host takes the lease:
#    stale_case AGENT SEED C_SEED: C writes C_SEED over every page (the
#    owner then refuses the stopped agent's older generation), or with
#    C_SEED 0 only maps writable and unmaps (`fill`: C owns no page), so
#    the owner has not seen the newer generation: the coordinator,
#    asked at the flush, tells the writer its lease is lost.
stale_case() {
	local n=$1 s=$2 cs=$3 line
	r=$n
	fp_node_start H "$n" --cache-size 64M --writeback-ms 600000
	rm -f "$FP_TMP/s.fifo"
	mkfifo "$FP_TMP/s.fifo" && exec 7<>"$FP_TMP/s.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$n]} "$GUEST" wstale r "$s" $((s + 1)) $((s + 2)) \
		<"$FP_TMP/s.fifo" >"$FP_TMP/s$n.out" 2>&1 &
	gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$FP_TMP/s$n.out" "written $PAGES pages" 60 ||
		{ cat "$FP_TMP/s$n.out" >&2; fp_fail "$n's writer did not write"; }
	owner_has "$s" "$n flushed seed $s, wrote $((s + 1)) unflushed"
	kill -STOP "${FP_NODE_PID[$n]}"
	for ((i = 0; i < 600; i++)); do
		fp_cli H C status 2>/dev/null | awk -v n="$n" '$2 == n && / DOWN /' | grep -q . && break
		sleep 0.05
	done
	[ $i -lt 600 ] || { kill -CONT "${FP_NODE_PID[$n]}"; fp_fail "the coordinator never had the stopped agent $n down"; }
	if [ "$cs" != 0 ]; then
		fp_cli H C touch r --write --seed "$cs" >"$FP_TMP/cs.out" 2>&1 ||
			{ kill -CONT "${FP_NODE_PID[$n]}"; cat "$FP_TMP/cs.out" >&2; fp_fail "C could not write while $n was down"; }
		fp_touch_ok "C wrote seed $cs while $n's agent was stopped" "$FP_TMP/cs.out"
		owner_has "$cs" "C flushed and unmapped"
	else
		# C owns nothing of r: fill maps it writable (taking the
		# lease), writes nothing, says so (exit 1) and unmaps.
		fp_cli H C fill r >"$FP_TMP/cs.out" 2>&1 || grep -q "nothing written" "$FP_TMP/cs.out" ||
			{ kill -CONT "${FP_NODE_PID[$n]}"; cat "$FP_TMP/cs.out" >&2; fp_fail "C could not map writable while $n was down"; }
		fp_log "C took the write lease and gave it back while $n's agent was stopped, writing nothing"
	fi
	kill -CONT "${FP_NODE_PID[$n]}"
	echo go >&7
	fp_wait_pid "$gp" 120 || { cat "$FP_TMP/s$n.out" >&2; fp_fail "$n's guest did not end"; }
	exec 7>&-
	line=$(grep '^wstale:' "$FP_TMP/s$n.out")
	[ -n "$line" ] || { cat "$FP_TMP/s$n.out" >&2; fp_fail "$n's guest printed no result"; }
	fp_log "$n's guest: $line"
	[ "$cs" != 0 ] && owner_has "$cs" "after $n's stale write-backs"
	[ "$(fp_field "$FP_TMP/s$n.out" wstale: flush1)" != 0 ] ||
		fp_fail "$n's flush said 0 though its lease was lost: $line"
	[ "$(fp_field "$FP_TMP/s$n.out" wstale: sigbus2)" = "$PAGES" ] &&
		[ "$(fp_field "$FP_TMP/s$n.out" wstale: written2)" = 0 ] &&
		[ "$(fp_field "$FP_TMP/s$n.out" wstale: flush2)" != 0 ] ||
		fp_fail "$n's guest could write on after its lease was lost: $line"
}

stale_case A2 401 404
grep -q "refused its write-back" "$FP_TMP/A2.log" ||
	fp_fail "A2's agent did not say its write-backs were refused"
fp_log "ok: A2's write-backs of a superseded generation were refused: flush failed, then SIGBUS on every write"
stale_case A3 501 0
grep -q "the coordinator says the write lease of map [0-9]* is lost" "$FP_TMP/A3.log" ||
	fp_fail "A3's flush did not say the coordinator had the lease lost"
grep -q "refused its write-back" "$FP_TMP/A3.log" &&
	fp_fail "B refused A3's write-backs: it should not have seen a newer generation"
fp_log "ok: A3's lease lost with no newer generation at the owner: the flush asked the coordinator and failed, then SIGBUS on every write"

# 6. The same writer killed while its agent is stopped: the agent, going
#    on, sends home what the dead process wrote; the owner refuses it; the
#    mapping is dropped (not retried for ever) and a writable map on that
#    host works again.
r=A4
fp_node_start H A4 --cache-size 64M --writeback-ms 600000
rm -f "$FP_TMP/s.fifo"
mkfifo "$FP_TMP/s.fifo" && exec 7<>"$FP_TMP/s.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A4]} "$GUEST" wstale r 601 602 603 <"$FP_TMP/s.fifo" >"$FP_TMP/sA4.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/sA4.out" "written $PAGES pages" 60 ||
	{ cat "$FP_TMP/sA4.out" >&2; fp_fail "A4's writer did not write"; }
kill -STOP "${FP_NODE_PID[A4]}"
for ((i = 0; i < 600; i++)); do
	fp_cli H C status 2>/dev/null | awk '$2 == "A4" && / DOWN /' | grep -q . && break
	sleep 0.05
done
[ $i -lt 600 ] || { kill -CONT "${FP_NODE_PID[A4]}"; fp_fail "the coordinator never had the stopped agent A4 down"; }
fp_cli H C touch r --write --seed 604 >"$FP_TMP/cs.out" 2>&1 ||
	{ kill -CONT "${FP_NODE_PID[A4]}"; cat "$FP_TMP/cs.out" >&2; fp_fail "C could not write while A4 was down"; }
owner_has 604 "C flushed and unmapped while A4 was stopped"
kill -KILL "$gp"
wait "$gp" 2>/dev/null
exec 7>&-
kill -CONT "${FP_NODE_PID[A4]}"
fp_cli H A4 touch r --write --seed 605 >"$FP_TMP/a4.out" 2>&1 &
tp=$!
fp_wait_pid "$tp" 60 || { cat "$FP_TMP/a4.out" >&2; fp_fail "a writable map on A4 after its dead writer's refused write-backs"; }
fp_touch_ok "A4 writes again after its dead writer's write-backs were refused" "$FP_TMP/a4.out"
owner_has 605 "A4's new writer flushed"
grep -q "refused its write-back" "$FP_TMP/A4.log" ||
	fp_fail "B did not refuse the dead writer's write-backs on A4"
fp_log "ok: a dead writer's refused write-backs were dropped, not retried: A4 maps writable again"
exit 0
