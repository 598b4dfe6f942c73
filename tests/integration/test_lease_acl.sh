#!/bin/bash
# Who may hold a region's write lease (docs/security.md): agents o (the
# owner of every page), a, b and d (a reader) on one host, the region r
# created with --writers a.
#   1. b's node key asks the coordinator for r's write lease in b's own
#      name: refused (EACCES), as are changing r's writers and breaking
#      its lease with that key; a writable map on b fails with EACCES
#      naming the writers; a writable map on a works
#   2. a guest on a holds r writable (pages written, some only in a's
#      cache); the admin breaks the lease: the guest's next flush fails
#      with ENOLCK, then every write is SIGBUS; a new writable map on a
#      works
#   3. writers a,b: b maps writable and writes. A guest on b holds the
#      lease; writers set back to a: b's lease ends as in 2
#   4. the coordinator restarts: the writers (a) are still r's, b is
#      refused again, a writes
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
FP_INSECURE=0
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
ATTACK=$FP_BIN/tests/fp_attack
GUEST=$FP_BIN/tests/fp_guest
[ -x "$ATTACK" ] && [ -x "$GUEST" ] || fp_fail "$ATTACK or $GUEST not built"
SIZE=8M
PAGES=$(($(numfmt --from=iec $SIZE) / 4096))
fp_hosts_loopback H
fp_coord_start H
fp_node_start H o
fp_node_start H a --cache-size 64M --writeback-ms 600000
fp_node_start H b --cache-size 64M --writeback-ms 600000
fp_node_start H d
ID_O=$(fp_node_id o) ID_A=$(fp_node_id a) ID_B=$(fp_node_id b)
[ -n "$ID_O" ] && [ -n "$ID_A" ] && [ -n "$ID_B" ] || fp_fail "node ids: o=$ID_O a=$ID_A b=$ID_B"
owners=$(printf "$ID_O,%.0s" $(seq $(($(numfmt --from=iec $SIZE) / (2 << 20)))))
fp_cli H o region create r --size $SIZE --owners "${owners%,}" --writers a >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"
grep -q "writers: $ID_A\$" "$FP_TMP/create.out" || fp_fail "create r: no writers line: $(cat "$FP_TMP/create.out")"
fp_cli H o region show r >"$FP_TMP/show.out" 2>&1 || fp_fail "region show"
grep -q "writers: a ($ID_A)\$" "$FP_TMP/show.out" || fp_fail "region show: writers: $(cat "$FP_TMP/show.out")"
fp_cli H o status >"$FP_TMP/st.out" 2>&1 || fp_fail "status"
grep -q "writers: a ($ID_A)\$" "$FP_TMP/st.out" || fp_fail "status: writers: $(cat "$FP_TMP/st.out")"
fp_log "ok: r's writers: $(grep writers: "$FP_TMP/show.out")"

# d reads seed $1 on every page, from o's pool ($2: what for).
owner_has() {
	fp_cli H d touch r --seed "$1" >"$FP_TMP/o.out" 2>&1 ||
		{ cat "$FP_TMP/o.out" >&2; fp_fail "$2: o's pool does not hold seed $1 on every page"; }
	fp_touch_ok "$2: o's pool holds seed $1 on every page" "$FP_TMP/o.out"
}

# --- 1. b, not a writer.
"$FP_CLI_BIN" keygen --role node --name b --from "$FARPAGE_KEY_FILE" -o "$FP_TMP/b.key" >/dev/null ||
	fp_fail "keygen node b"
"$ATTACK" lease "$FP_COORD" "$FP_TMP/b.key" b r >"$FP_TMP/lease.out" 2>&1 ||
	fp_fail "b's node key: $(cat "$FP_TMP/lease.out")"
grep -q "write_lease: refused: .*writers: a ($ID_A)" "$FP_TMP/lease.out" ||
	fp_fail "b's lease refusal names no writers: $(cat "$FP_TMP/lease.out")"
fp_log "ok: b's node key: $(tr '\n' ';' <"$FP_TMP/lease.out")"
for cmd in "lease-break r" "writers r b"; do
	# shellcheck disable=SC2086
	fp_cli H b --key-file "$FP_TMP/b.key" region $cmd >"$FP_TMP/nk.out" 2>&1 &&
		fp_fail "region $cmd with b's node key succeeded: $(cat "$FP_TMP/nk.out")"
	grep -q "needs the admin key" "$FP_TMP/nk.out" ||
		fp_fail "region $cmd with a node key: no clear refusal: $(cat "$FP_TMP/nk.out")"
done
fp_cli H b touch r --write --seed 5 >"$FP_TMP/b1.out" 2>&1 &&
	fp_fail "b mapped r writable: $(cat "$FP_TMP/b1.out")"
grep -q "writers: a ($ID_A)" "$FP_TMP/b1.out" ||
	fp_fail "b's writable map: the refusal names no writers: $(cat "$FP_TMP/b1.out")"
grep -qi "permission denied\|EACCES\|may not take" "$FP_TMP/b1.out" ||
	fp_fail "b's writable map: not EACCES: $(cat "$FP_TMP/b1.out")"
fp_log "ok: b cannot map r writable: $(head -c 200 "$FP_TMP/b1.out")"
fp_cli H a touch r --write --seed 6 >"$FP_TMP/a1.out" 2>&1 ||
	fp_fail "a could not map r writable: $(cat "$FP_TMP/a1.out")"
fp_touch_ok "a wrote seed 6" "$FP_TMP/a1.out"
owner_has 6 "a flushed and unmapped"

# --- 2./3. A guest on $1 holds r writable: seed $2 written and flushed,
# seed $2+1 written (in its agent's cache only); then `$3` (an admin's
# command) must end its lease: its flush fails, every write is SIGBUS.
lease_ended() {
	local n=$1 s=$2 line f1
	shift 2
	rm -f "$FP_TMP/g.fifo"
	mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$n]} "$GUEST" wstale r "$s" $((s + 1)) $((s + 2)) \
		<"$FP_TMP/g.fifo" >"$FP_TMP/g$n$s.out" 2>&1 &
	gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$FP_TMP/g$n$s.out" "written $PAGES pages" 60 ||
		{ cat "$FP_TMP/g$n$s.out" >&2; fp_fail "$n's writer did not write"; }
	owner_has "$s" "$n flushed seed $s"
	fp_cli H o "$@" >"$FP_TMP/admin.out" 2>&1 ||
		{ echo go >&7; fp_fail "$*: $(cat "$FP_TMP/admin.out")"; }
	fp_log "$*: $(cat "$FP_TMP/admin.out")"
	echo go >&7
	fp_wait_pid "$gp" 120 || { cat "$FP_TMP/g$n$s.out" >&2; fp_fail "$n's guest did not end"; }
	exec 7>&-
	line=$(grep '^wstale:' "$FP_TMP/g$n$s.out")
	[ -n "$line" ] || { cat "$FP_TMP/g$n$s.out" >&2; fp_fail "$n's guest printed no result"; }
	fp_log "$n's guest: $line"
	f1=$(fp_field "$FP_TMP/g$n$s.out" wstale: flush1)
	[ "$f1" = -37 ] || fp_fail "$n's flush after '$*' was $f1, not -ENOLCK (-37): $line"
	[ "$(fp_field "$FP_TMP/g$n$s.out" wstale: sigbus2)" = "$PAGES" ] &&
		[ "$(fp_field "$FP_TMP/g$n$s.out" wstale: written2)" = 0 ] &&
		[ "$(fp_field "$FP_TMP/g$n$s.out" wstale: flush2)" != 0 ] ||
		fp_fail "$n's guest could write on after '$*': $line"
	grep -q "the coordinator says the write lease of map [0-9]* is lost" "$FP_TMP/$n.log" ||
		fp_fail "$n's agent did not say the coordinator had its lease lost"
	fp_log "ok: '$*' ended $n's lease: flush -ENOLCK, then SIGBUS on every write"
}

lease_ended a 101 region lease-break r
grep -q "write lease broken" "$FP_TMP/admin.out" || fp_fail "lease-break said: $(cat "$FP_TMP/admin.out")"
fp_wait_log "$FP_TMP/coord.log" "region 'r': write lease of node $ID_A broken \(by the admin\)" 5 ||
	fp_fail "the coordinator did not log the break"
fp_cli H a touch r --write --seed 7 >"$FP_TMP/a2.out" 2>&1 ||
	fp_fail "a could not map r writable after the break: $(cat "$FP_TMP/a2.out")"
fp_touch_ok "a writes again after the break" "$FP_TMP/a2.out"
owner_has 7 "a's new mapping flushed"

fp_cli H o region writers r a,nosuch >"$FP_TMP/w.out" 2>&1 && fp_fail "writers: a name that never joined was taken"
grep -q "no node named 'nosuch'" "$FP_TMP/w.out" || fp_fail "writers a,nosuch: $(cat "$FP_TMP/w.out")"
fp_cli H o region writers r 999 >"$FP_TMP/w.out" 2>&1 && fp_fail "writers: node id 999 was taken"
grep -q "unknown node 999" "$FP_TMP/w.out" || fp_fail "writers 999: $(cat "$FP_TMP/w.out")"
fp_cli H o region writers r a,$ID_B >"$FP_TMP/w.out" 2>&1 || fp_fail "region writers r a,b: $(cat "$FP_TMP/w.out")"
grep -q "writers: a ($ID_A), b ($ID_B)\$" "$FP_TMP/w.out" || fp_fail "region writers said: $(cat "$FP_TMP/w.out")"
fp_cli H b touch r --write --seed 8 >"$FP_TMP/b2.out" 2>&1 ||
	fp_fail "b could not map r writable once a writer: $(cat "$FP_TMP/b2.out")"
fp_touch_ok "b, now a writer, wrote seed 8" "$FP_TMP/b2.out"
owner_has 8 "b flushed"
lease_ended b 201 region writers r a
fp_wait_log "$FP_TMP/coord.log" "region 'r': write lease of node $ID_B broken \(no longer a writer\)" 5 ||
	fp_fail "the coordinator did not log the end of b's lease"

# --- 4. The writers survive a restart of the coordinator.
kill "$FP_COORD_PID"
fp_wait_pid "$FP_COORD_PID" 20 || fp_fail "the coordinator did not stop"
fp_coord_respawn H
fp_cli H o region show r >"$FP_TMP/show2.out" 2>&1 || fp_fail "region show after the restart"
grep -q "writers: a ($ID_A)\$" "$FP_TMP/show2.out" ||
	fp_fail "the writers did not survive the restart: $(cat "$FP_TMP/show2.out")"
"$ATTACK" lease "$FP_COORD" "$FP_TMP/b.key" b r >"$FP_TMP/lease2.out" 2>&1 ||
	fp_fail "b's node key after the restart: $(cat "$FP_TMP/lease2.out")"
fp_cli H b touch r --write --seed 9 >"$FP_TMP/b3.out" 2>&1 &&
	fp_fail "b mapped r writable after the restart: $(cat "$FP_TMP/b3.out")"
grep -q "writers: a ($ID_A)" "$FP_TMP/b3.out" || fp_fail "b after the restart: $(cat "$FP_TMP/b3.out")"
fp_cli H a touch r --write --seed 10 >"$FP_TMP/a3.out" 2>&1 ||
	fp_fail "a could not map r writable after the restart: $(cat "$FP_TMP/a3.out")"
fp_touch_ok "a writes after the restart" "$FP_TMP/a3.out"
owner_has 10 "a flushed after the restart"
fp_log "ok: after a restart the writers are still a; b refused, a writes"
fp_log "PASS"
