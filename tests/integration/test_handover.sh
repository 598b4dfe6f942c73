#!/bin/bash
# The hand-over of a movable mapping's write lease (a VM's migration
# without QEMU): agents A and B map region r (chunks on A, B and O, so
# that each side has chunks of its own), R reads. Each side is an
# fp_guest "move" process driven by lines on a fifo.
#   1. A (movable) writes seed 11 and flushes, then writes seed 12 (only
#      in A's cache). B maps incoming and reads every page: its faults
#      wait, it cannot have read yet (seed 12 is nowhere but A's cache).
#      Before B maps, `farpage flush --drop r` on A: its pages go home,
#      then every one leaves A's cache (none left); A reads seed 12 on
#      every page, fetched again, then writes seed 12 again.
#   2. `farpage handover r` on A: every page sent home (4096), then B's
#      read finds seed 12 on every page; B writes seed 13 and flushes: R
#      reads seed 13.
#   3. A's next touches raise SIGBUS (B took the lease since): A reads
#      nothing stale, writes nothing.
#   4. B -> A2 (a new incoming map on A) the same way: A2 reads seed 13,
#      writes seed 14; R reads 14.
#   5. A2 hands over and nobody takes the lease: A2's next write takes it
#      back (the same generation) and goes home: R reads 15.
#   6. An incoming B2 (on C) while A2 holds the lease: its read waits,
#      then raises SIGBUS at the fault timeout; it never reads a page.
#   7. A handover of a map that is not movable, of none, or by another
#      user: refused.
# Without the wait of step 1 B reads seed 11 (wrong); without the flush in
# the hand-over it reads 11 for every page A wrote last.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: a movable map needs the cache"
GUEST=$FP_BIN/tests/fp_guest
SIZE=24M
PAGES=$(($(numfmt --from=iec $SIZE) / 4096))
fp_hosts_loopback H
fp_coord_start H
fp_node_start H O
# (uid 65534 may use A's socket: a hand-over of root's mapping by it is
# refused)
chmod 0711 "$FP_TMP" || fp_fail "chmod $FP_TMP"
fp_node_start H A --cache-size 64M --writeback-ms 60000 --allow-uid 65534
fp_node_start H B --cache-size 64M --writeback-ms 60000 --fault-timeout-ms 600000
fp_node_start H C --cache-size 64M --writeback-ms 60000 --fault-timeout-ms 2000
fp_node_start H R
a=$(fp_node_id A) b=$(fp_node_id B) o=$(fp_node_id O)
owners=$(printf "$a,$b,$o,%.0s" 1 2 3 4)
fp_cli H O region create r --size $SIZE --owners "${owners%,}" >/dev/null 2>&1 ||
	fp_fail "create r"

# side NAME AGENT in|out: an fp_guest move process fed from fd of NAME.
declare -A FD OUT N
side() {
	local s=$1 ag=$2 how=$3 fd
	rm -f "$FP_TMP/$s.fifo"
	mkfifo "$FP_TMP/$s.fifo" || fp_fail "fifo"
	exec {fd}<>"$FP_TMP/$s.fifo"
	FD[$s]=$fd OUT[$s]=$FP_TMP/$s.out N[$s]=0
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$ag]} "$GUEST" move r "$how" \
		<"$FP_TMP/$s.fifo" >"${OUT[$s]}" 2>&1 &
	FP_PIDS+=("$!")
	fp_wait_log "${OUT[$s]}" "^fp_guest: mapped" 60 ||
		{ cat "${OUT[$s]}" >&2; fp_fail "$s did not map"; }
}
# say SIDE COMMAND: sent; ask SIDE COMMAND: sent and answered (its line
# in $LINE).
say() {
	echo "$2" >&"${FD[$1]}"
	N[$1]=$((N[$1] + 1))
}
answer() {
	fp_wait_log "${OUT[$1]}" "^move: " 120 "${N[$1]}" ||
		{ cat "${OUT[$1]}" >&2; fp_fail "$1 did not answer '$2'"; }
	LINE=$(grep '^move: ' "${OUT[$1]}" | sed -n "${N[$1]}p")
	fp_log "$1: $LINE"
}
ask() {
	say "$1" "$2"
	answer "$1" "$2"
}
field() { tr ' ' '\n' <<<"$LINE" | sed -n "s/^$1=//p"; }
verified() { # side seed: every page read back as seed
	[ "$(field verified)" = "$PAGES" ] && [ "$(field wrong)" = 0 ] &&
		[ "$(field zero)" = 0 ] && [ "$(field sigbus)" = 0 ] ||
		fp_fail "$1 did not read seed $2 on every page: $LINE"
}
wrote() { # side
	[ "$(field written)" = "$PAGES" ] && [ "$(field sigbus)" = 0 ] ||
		fp_fail "$1 could not write every page: $LINE"
}
reader_has() { # seed what
	fp_cli H R touch r --seed "$1" >"$FP_TMP/r.out" 2>&1 ||
		{ cat "$FP_TMP/r.out" >&2; fp_fail "$2: R does not read seed $1 on every page"; }
	fp_touch_ok "$2: R reads seed $1 on every page" "$FP_TMP/r.out"
}
handover() { # agent: the pages it says it sent home in $HO
	fp_cli H "$1" handover r >"$FP_TMP/ho.out" 2>&1 ||
		{ cat "$FP_TMP/ho.out" >&2; fp_fail "handover on $1 failed"; }
	HO=$(sed -n 's/.*handed over, \([0-9]*\) pages sent home.*/\1/p' "$FP_TMP/ho.out")
	fp_log "handover on $1: $(cat "$FP_TMP/ho.out")"
}

# 1.
side A A out
ask A "write 11"; wrote A
ask A flush; [ "$LINE" = "move: flush=0" ] || fp_fail "A's first flush: $LINE"
ask A "write 12"; wrote A
fp_cli H A flush --drop r >"$FP_TMP/drop.out" 2>&1 ||
	{ cat "$FP_TMP/drop.out" >&2; fp_fail "flush --drop on A"; }
dropped=$(sed -n 's/.*home; \([0-9]*\) pages left this host.s cache$/\1/p' "$FP_TMP/drop.out")
res=$(fp_cache_stat H A resident)
[ "$dropped" = "$PAGES" ] && [ "$res" = 0 ] ||
	fp_fail "flush --drop: '$(cat "$FP_TMP/drop.out")'; A's cache holds $res bytes"
ask A "verify 12"; verified A 12
res=$(fp_cache_stat H A resident)
[ "$res" = $((PAGES * 4096)) ] || fp_fail "A read every page, its cache holds $res bytes"
fp_log "ok: flush --drop: $dropped pages left A's cache, fetched again they hold seed 12"
ask A "write 12"; wrote A
side B B in
say B "verify 12"
# 2.
handover A
[ "$HO" = "$PAGES" ] || fp_fail "the hand-over sent $HO pages home, not the $PAGES A wrote"
answer B "verify 12"; verified B 12
fp_log "ok: B's reads waited for the hand-over and found A's last bytes"
ask B "write 13"; wrote B
ask B flush; [ "$LINE" = "move: flush=0" ] || fp_fail "B's flush: $LINE"
reader_has 13 "B wrote"
# 3.
ask A "verify 12"
[ "$(field sigbus)" = 1 ] && [ "$(field verified)" = 0 ] && [ "$(field wrong)" = 0 ] &&
	[ "$(field zero)" = 0 ] || fp_fail "A read after B took the lease: $LINE"
ask A "write 19"
[ "$(field written)" = 0 ] || fp_fail "A wrote after B took the lease: $LINE"
reader_has 13 "A's writes after the hand-over"
fp_log "ok: A, handed over, reads and writes nothing (SIGBUS)"
ask A unmap
# 4.
side A2 A in
say A2 "verify 13"
handover B
answer A2 "verify 13"; verified A2 13
ask A2 "write 14"; wrote A2
ask A2 flush; [ "$LINE" = "move: flush=0" ] || fp_fail "A2's flush: $LINE"
reader_has 14 "back on A"
ask B "verify 14"; [ "$(field sigbus)" = 1 ] || fp_fail "B read after handing over: $LINE"
ask B unmap
# 5.
handover A
ask A2 "write 15"; wrote A2
ask A2 flush; [ "$LINE" = "move: flush=0" ] || fp_fail "A2's flush after taking the lease back: $LINE"
reader_has 15 "A2 took its lease back"
fp_log "ok: a hand-over nobody took: the giver runs on"
# 6.
side B2 C in
ask B2 "verify 15"
[ "$(field sigbus)" = 1 ] && [ "$(field verified)" = 0 ] && [ "$(field wrong)" = 0 ] &&
	[ "$(field zero)" = 0 ] || fp_fail "B2 read while A2 held the lease: $LINE"
fp_log "ok: an incoming map never reads while another holds the lease"
ask B2 unmap
# 7.
if fp_cli H B handover r >"$FP_TMP/ho.out" 2>&1; then
	fp_fail "a handover with no mapping here succeeded"
fi
grep -q "no writable mapping" "$FP_TMP/ho.out" || { cat "$FP_TMP/ho.out" >&2; fp_fail "wrong refusal"; }
if command -v setpriv >/dev/null; then
	chmod 0666 "${FP_NODE_SOCK[A]}" || fp_fail "chmod A's socket"
	env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" setpriv --reuid 65534 --regid 65534 --clear-groups \
		"$FP_CLI_BIN" --coordinator "$FP_COORD" handover r >"$FP_TMP/ho.out" 2>&1 &&
		fp_fail "another user handed root's mapping over"
	grep -q "another user's" "$FP_TMP/ho.out" || { cat "$FP_TMP/ho.out" >&2; fp_fail "wrong refusal"; }
	ask A2 "write 17"; wrote A2
	fp_log "ok: another user cannot hand a mapping over"
fi
ask A2 unmap
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[A]} "$GUEST" whold r 16 <"$FP_TMP/A.fifo" >"$FP_TMP/w.out" 2>&1 &
wp=$!
FP_PIDS+=("$wp")
fp_wait_log "$FP_TMP/w.out" "flushed" 60 || { cat "$FP_TMP/w.out" >&2; fp_fail "whold"; }
if fp_cli H A handover r >"$FP_TMP/ho.out" 2>&1; then
	fp_fail "a handover of a mapping that is not movable succeeded"
fi
grep -q "not movable" "$FP_TMP/ho.out" || { cat "$FP_TMP/ho.out" >&2; fp_fail "wrong refusal"; }
echo go >&"${FD[A]}"
fp_wait_pid "$wp" 60 || fp_fail "whold did not end"
fp_log "ok: hand-overs of nothing or of a mapping that is not movable are refused"
exit 0
