#!/bin/bash
# Live migration with the RAM left in farpage: Debian's qemu-system-x86_64,
# unmodified, boots once on host A with its 256 MiB of RAM in a region
# whose chunks are on A, B and C (network namespaces on one LAN, the
# coordinator on C). The guest (tests/vm/vmram_init.c, fpvm.loop=1)
# overwrites 32 MiB of its RAM round after round, each page checked for
# the round before just before it is overwritten: a write of the source
# that did not reach the destination fails the guest on that page.
#   1. A -> B (farpage migrate): the source QEMU quits, the destination
#      runs the guest's next rounds; the migration stream carried no RAM
#      (under 1/16 of it)
#   2. the destination (a QEMU waiting on A) killed -9 during the
#      pre-flush (held there: B's agent stopped until the kill): farpage
#      migrate fails, B's guest runs on
#   3. the link between B and A that carries the migration streams (a
#      veth pair of their own; the agents use the LAN) cut before the
#      stream: farpage migrate fails, B's guest runs on
#   3b. the destination stopped (SIGSTOP) during the pre-flush (held
#      there as in 2): the
#      hand-over runs, the switch-over times out, the source runs again
#      and takes the lease back; the destination, let go with its link
#      cut, waits; the link back, it gets the rest of its stream late,
#      starts, and ends (SIGBUS at its first touch of the RAM) without
#      running the guest: never both
#   4. B -> A with --keep-source: the guest runs at A while B's stopped
#      QEMU is still there; that one killed -9, it runs on
#   4b. A -> B again, the coordinator killed -9 and restarted as it
#      begins: the migration completes, or fails and the source runs on
#   5. the guest told to stop: its last round checks, QEMU exits 0, and
#      a reader on C finds the last round's pattern on every page of the
#      range (the pages went home when QEMU exited)
# Every serial console is searched for a FAIL line. Without the hand-over
# step 1 fails: the destination's QEMU, starting, waits for the lease the
# stopped source holds and dies of SIGBUS at the fault timeout (as step
# 4's would, the source kept); without its flush the guest fails its
# check on the first page the source wrote last.
#
#   tests/vm/migrate.sh    (FARPAGE_BIN: the build dir; FP_MIG_REPLICAS=2:
#                           the region of two replicas, every step the same)
# Skips (77) as root is missing, QEMU cannot run, or in a sanitizer build.
set -uo pipefail
ulimit -c 0 # step 2 kills a QEMU
case ${1:-} in
-h | --help) sed -n '2,38p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
'') ;;
*) echo "migrate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
esac
. "$(dirname "$0")/../lib.sh"
SRC=$(cd "$(dirname "$0")/../.." && pwd)
BOOT=$SRC/tests/vm/vmram-boot.sh
GUEST=$FP_BIN/tests/fp_guest
fp_require
vmram_require
command -v qemu-system-x86_64 >/dev/null || fp_skip "qemu-system-x86_64 is missing"

RAM=256M
RES_BASE=96M
RES_SIZE=32M
FIRST=$((96 << 8)) # the range's first page (guest-physical = RAM offset)
PAGES=$((32 << 8))
CHUNKS=128 # of 2 MiB
SEED=100

fp_hosts_lan A B C || fp_skip "cannot create network namespaces"
# A second link between A and B only, for the migration streams (a
# migration network; the agents use the LAN): cut in steps 3 and 3b
ns_a=${FP_HOST_RUN[A]##* } ns_b=${FP_HOST_RUN[B]##* }
ml=10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
ml_a=fpm${ns_a: -9} ml_b=fpm${ns_b: -9}
ip link add "$ml_a" netns "$ns_a" type veth peer name "$ml_b" netns "$ns_b" &&
	ip -n "$ns_a" addr add "$ml.1/24" dev "$ml_a" && ip -n "$ns_b" addr add "$ml.2/24" dev "$ml_b" &&
	ip -n "$ns_a" link set "$ml_a" up && ip -n "$ns_b" link set "$ml_b" up ||
	fp_fail "cannot link A and B for the migration stream"
declare -A MIG_IP=([A]=$ml.1 [B]=$ml.2)
mig_link() { # up|down
	ip -n "$ns_a" link set "$ml_a" "$1" && ip -n "$ns_b" link set "$ml_b" "$1" ||
		fp_fail "cannot set the migration link $1"
}
fp_coord_start C
for h in A B C; do
	fp_node_start "$h" "$h"
done
a=$(fp_node_id A) b=$(fp_node_id B) c=$(fp_node_id C)
owners=$(printf "$a,$b,$c,%.0s" $(seq $((CHUNKS / 3 + 1))) | cut -d, -f1-$CHUNKS)
# FP_MIG_REPLICAS=2: the region has two replicas of every chunk, on two
# of A, B and C (the coordinator's placement), instead.
if [ "${FP_MIG_REPLICAS:-1}" -gt 1 ]; then
	place=(--replicas "$FP_MIG_REPLICAS" --nodes "$a,$b,$c")
else
	place=(--owners "$owners")
fi
fp_cli C C region create mig --size "$RAM" "${place[@]}" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create region mig: $(cat "$FP_TMP/create.out")"

# vm NAME HOST [QEMU ARG...]: a QEMU on HOST under farpage vm --movable
# with the region as its RAM, its console input the fifo NAME.in (fd in
# IN[NAME]), its monitor at $FP_TMP/NAME.qmp, in the background (VM[NAME]).
declare -A VM IN
vm() {
	local n=$1 h=$2 fd q=()
	shift 2
	for x in -qmp "unix:$FP_TMP/$n.qmp,server=on,wait=off" "$@"; do
		q+=(--qemu-arg "$x")
	done
	mkfifo "$FP_TMP/$n.in" || fp_fail "mkfifo"
	exec {fd}<>"$FP_TMP/$n.in"
	IN[$n]=$fd
	# shellcheck disable=SC2046 # the flag is one word or none
	bash "$BOOT" --bin "$FP_BIN" --ram "$RAM" --reserve-base "$RES_BASE" --reserve-size "$RES_SIZE" \
		--seed "$SEED" --loop --input "$FP_TMP/$n.in" "${q[@]}" \
		--accel tcg --timeout 3000 --log "$FP_TMP/$n.serial" -- \
		${FP_HOST_RUN[$h]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$h]}" \
		"$FP_CLI_BIN" --coordinator "$FP_COORD" $(fp_insecure_flag) vm --movable mig -- \
		>"$FP_TMP/$n.out" 2>&1 &
	VM[$n]=$!
	FP_PIDS+=("$!")
	fp_wait_socket "$FP_TMP/$n.qmp" "${VM[$n]}" ||
		{ cat "$FP_TMP/$n.out" >&2; fp_fail "$n: QEMU made no QMP socket"; }
}
# incoming NAME HOST: a destination, waiting for a migration
incoming() { vm "$1" "$2" -incoming defer; }
# qemu_pid NAME: the QEMU process of vm NAME
qemu_pid() { pgrep -f "^qemu-system-x86_64 .*unix:$FP_TMP/$1.qmp," | head -n1; }
# rounds NAME: the guest's rounds printed on NAME's console
rounds() { grep -c '^vm-ram: loop round' "$FP_TMP/$1.serial" 2>/dev/null; }
# runs_on NAME WHAT: the guest prints two more rounds on NAME's console
runs_on() {
	local n0
	n0=$(rounds "$1")
	fp_wait_log_wall "$FP_TMP/$1.serial" '^vm-ram: loop round' 900 $((n0 + 2)) ||
		{ tail -n 20 "$FP_TMP/$1.serial" >&2; fp_fail "$2: the guest does not run on $1"; }
}
# migrate HOST SRC DST DEST_HOST [flags]: farpage migrate on HOST (its
# agent), output in $FP_TMP/mig.out, exit status in MIG_RC
migrate() {
	local h=$1 s=$2 d=$3 dh=$4 port
	shift 4
	port=$(fp_port "$dh")
	fp_cli "$h" "$h" migrate "$@" mig "$FP_TMP/$s.qmp" "$FP_TMP/$d.qmp" \
		"tcp:${MIG_IP[$dh]}:$port" >"$FP_TMP/mig.out" 2>&1
	MIG_RC=$?
	sed 's/^/    /' "$FP_TMP/mig.out" >&2
}
# migrate_bg WHAT HOST SRC DST DEST_HOST OUT PHASE [flags]: farpage
# migrate on HOST in the background (its PID in MP), output in OUT; waits
# until it says PHASE (a line "migrate: PHASE")
migrate_bg() {
	local what=$1 h=$2 s=$3 d=$4 dh=$5 out=$6 phase=$7 port
	shift 7
	port=$(fp_port "$dh")
	fp_cli "$h" "$h" migrate "$@" mig "$FP_TMP/$s.qmp" "$FP_TMP/$d.qmp" \
		"tcp:${MIG_IP[$dh]}:$port" >"$out" 2>&1 &
	MP=$!
	FP_PIDS+=("$MP")
	fp_wait_log_wall "$out" "^migrate: $phase" 300 ||
		{ cat "$out" >&2; fp_fail "$what: farpage migrate never said '$phase'"; }
}
# migrated: farpage migrate said ok and its stream carried no RAM
migrated() {
	local bytes
	[ "$MIG_RC" = 0 ] && grep -q '^migrate: ok ' "$FP_TMP/mig.out" ||
		fp_fail "$1: farpage migrate exit $MIG_RC"
	bytes=$(fp_field "$FP_TMP/mig.out" 'migrate: ok' bytes)
	[ -n "$bytes" ] && [ "$bytes" -lt $(($(numfmt --from=iec $RAM) / 16)) ] ||
		fp_fail "$1: the migration stream carried $bytes bytes: the RAM was copied"
}
no_fail() {
	local f
	for f in "$FP_TMP"/*.serial; do
		tr -d '\r' <"$f" | grep -E '^vm-ram: (FAIL|first bad)' && fp_fail "$(basename "$f" .serial): the guest failed"
	done
	return 0
}
quit_vm() { # NAME: a QEMU that never ran the guest, ended (SIGTERM)
	kill "$(qemu_pid "$1")" 2>/dev/null
	fp_wait_pid "${VM[$1]}" 120 >/dev/null
}

vm a1 A
fp_wait_log_wall "$FP_TMP/a1.serial" '^vm-ram: loop round 2 ok' 900 ||
	{ cat "$FP_TMP/a1.out" >&2; tail -n 20 "$FP_TMP/a1.serial" >&2; fp_fail "the guest never ran on A"; }
fp_log "the guest runs on A: $(tr -d '\r' <"$FP_TMP/a1.serial" | grep -m1 '^vm-ram: write')"

# 1. A -> B
incoming b1 B
migrate A a1 b1 B
migrated "1. A -> B"
fp_wait_pid "${VM[a1]}" 120 || fp_fail "1. the source QEMU did not end after the migration"
runs_on b1 "1. A -> B"
no_fail
fp_log "ok: 1. A -> B: $(grep '^migrate: ok' "$FP_TMP/mig.out" | cut -d' ' -f3-8); the guest runs on B"

# 2. the destination killed -9 during the pre-flush (held there: the
# source's agent stopped until the kill)
incoming a2 A
kill -STOP "${FP_NODE_PID[B]}"
migrate_bg 2. B b1 a2 A "$FP_TMP/mig2.out" pre-flush
kill -KILL "$(qemu_pid a2)"
kill -CONT "${FP_NODE_PID[B]}"
fp_wait_pid "$MP" 900
rc=$?
sed 's/^/    /' "$FP_TMP/mig2.out" >&2
[ "$rc" = 1 ] || fp_fail "2. farpage migrate exit $rc with its destination killed"
fp_wait_pid "${VM[a2]}" 120 >/dev/null
runs_on b1 "2. destination killed"
no_fail
fp_log "ok: 2. the destination killed -9 before the switch-over: migrate failed, the guest runs on B"

# 3. the link between B and A cut
incoming a3 A
mig_link down
migrate B b1 a3 A
mig_link up
[ "$MIG_RC" = 1 ] || fp_fail "3. farpage migrate exit $MIG_RC over a cut link"
quit_vm a3
runs_on b1 "3. link cut"
no_fail
fp_log "ok: 3. the link B-A cut: migrate failed, the guest runs on B"

# 3b. the destination stopped (SIGSTOP) during the pre-flush (held as in 2): the
# stream's start and its device state fill the socket buffers, the
# hand-over runs, the destination does not run within
# --switchover-timeout 5, and the source runs again; the destination, let
# go with its link cut, waits; the link back, the rest of its stream
# arrives late, it starts, and its first touch of the RAM finds the lease
# taken
incoming a5 A
kill -STOP "${FP_NODE_PID[B]}"
migrate_bg 3b. B b1 a5 A "$FP_TMP/mig3.out" pre-flush --switchover-timeout 5
qp=$(qemu_pid a5)
kill -STOP "$qp"
kill -CONT "${FP_NODE_PID[B]}"
fp_wait_pid "$MP" 900
rc=$?
sed 's/^/    /' "$FP_TMP/mig3.out" >&2
grep -q '^migrate: hand-over' "$FP_TMP/mig3.out" || fp_fail "3b. the hand-over never ran"
[ "$rc" = 1 ] || fp_fail "3b. farpage migrate exit $rc with its destination stopped"
mig_link down
runs_on b1 "3b. switch-over timed out"
kill -CONT "$qp"
runs_on b1 "3b. the destination let go, cut off"
grep -q '^vm-ram: loop round' "$FP_TMP/a5.serial" && fp_fail "3b. the cut-off destination ran the guest"
mig_link up
fp_wait_pid "${VM[a5]}" 900
rc=$?
[ "$rc" != 0 ] && ! grep -q '^vm-ram: loop round' "$FP_TMP/a5.serial" ||
	{ tail -n 20 "$FP_TMP/a5.out" >&2; fp_fail "3b. the late destination ran the guest (exit $rc)"; }
runs_on b1 "3b. the destination gone"
no_fail
fp_log "ok: 3b. the destination stopped at the switch-over: the source ran again, the destination ended (exit $rc) without running the guest: $(grep -v '^farpage vm' "$FP_TMP/a5.out" | tail -n1)"

# 4. B -> A, the stopped source killed afterwards
incoming a4 A
migrate B b1 a4 A --keep-source
migrated "4. B -> A"
# the source QEMU still there (stopped, its mapping handed over)
kill -0 "$(qemu_pid b1)" 2>/dev/null || fp_fail "4. B's QEMU quit despite --keep-source"
runs_on a4 "4. B -> A, the source kept"
kill -KILL "$(qemu_pid b1)"
fp_wait_pid "${VM[b1]}" 120 >/dev/null
runs_on a4 "4. B -> A, the source killed"
no_fail
fp_log "ok: 4. B -> A: $(grep '^migrate: ok' "$FP_TMP/mig.out" | cut -d' ' -f3-8); B's QEMU killed -9, the guest runs on A"

# 4b. A -> B with the coordinator killed -9 and restarted as the
# migration begins: it completes, or fails with the source running on
incoming b6 B
migrate_bg 4b. A a4 b6 B "$FP_TMP/mig4.out" pre-flush
kill -KILL "$FP_COORD_PID"
wait "$FP_COORD_PID" 2>/dev/null
fp_coord_respawn C
fp_wait_pid "$MP" 900
rc=$?
sed 's/^/    /' "$FP_TMP/mig4.out" >&2
if [ "$rc" = 0 ]; then
	fp_wait_pid "${VM[a4]}" 120 || fp_fail "4b. the source QEMU did not end after the migration"
	LIVE=b6
	runs_on b6 "4b. migrated across a coordinator restart"
	how="it completed"
else
	LIVE=a4
	runs_on a4 "4b. migration failed across a coordinator restart"
	quit_vm b6
	how="it failed and the source runs on"
fi
no_fail
fp_log "ok: 4b. coordinator killed -9 and restarted during the migration: $how"

# 5. the end, and a reader on C
echo q >&"${IN[$LIVE]}"
fp_wait_pid "${VM[$LIVE]}" 900
rc=$?
last=$(tr -d '\r' <"$FP_TMP/$LIVE.serial" | grep '^vm-migrate: ok pages=8192 mismatches=0 ')
[ "$rc" = 0 ] && [ -n "$last" ] ||
	{ tail -n 20 "$FP_TMP/$LIVE.serial" >&2; fp_fail "5. QEMU exit $rc; no 'vm-migrate: ok pages=8192 mismatches=0' line"; }
no_fail
s=$(sed -n 's/.* seed=\([0-9]*\).*/\1/p' <<<"$last")
${FP_HOST_RUN[C]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[C]}" "$GUEST" wverify mig "$s" >"$FP_TMP/wv.out" 2>&1 ||
	{ cat "$FP_TMP/wv.out" >&2; fp_fail "5. the reader on C failed"; }
awk -v f=$FIRST -v l=$((FIRST + PAGES - 1)) '$1 == "wverify:" && $2 <= f && $3 >= l && $4 == "s0" { ok = 1 } END { exit !ok }' \
	"$FP_TMP/wv.out" || { grep -E "^wverify: " "$FP_TMP/wv.out" | head -n 40 >&2; fp_fail "5. C does not read seed $s on pages $FIRST..$((FIRST + PAGES - 1))"; }
fp_log "ok: 5. $last; C reads seed $s on all $PAGES pages"
fp_log "PASS"
