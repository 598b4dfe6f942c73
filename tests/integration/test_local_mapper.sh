#!/bin/bash
# What a read-only local mapper can write: nothing, whoever holds the
# region's write lease (loopback; regions A and C on n1 and n2 by halves,
# A's write lease held by a process on n1, C's by one on n2; n1 serves
# root and uid 65534):
#   - reopen-rw: MAP A read-only, MAP_FDS of a segment, /proc/self/fd/N
#     reopened O_RDWR and written: as uid 65534 the reopen is refused
#     (EACCES: the segments are mode 0600, the agent's); A's bytes are
#     unchanged. Root passes file modes (noted: the socket's --allow-uid
#     is the boundary for root, docs/security.md)
#   - uffd-upgrade: MAP C read-only (no lease), then MAP_UFFD without
#     RDONLY, a page written and the region flushed; and the same with
#     RESUME and a cache memfd of the client's own holding its page: the
#     agent refuses each (EPERM), logs it and ends the connection, as
#     root and as uid 65534; C's bytes at its owner are unchanged
#   - a writable map of A or C meanwhile is refused (the leases are held)
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v setpriv >/dev/null || fp_skip "no setpriv (Debian: util-linux)"
ATTACK=$FP_BIN/tests/fp_attack
GUEST=$FP_BIN/tests/fp_guest
[ -x "$ATTACK" ] || fp_fail "no $ATTACK"
NOBODY=65534
EVIL=0xbad
# as CMD...: CMD as uid NOBODY, no groups.
as() { setpriv --reuid $NOBODY --regid $NOBODY --clear-groups "$@"; }

# The other user reaches the sockets' directory.
chmod 0711 "$FP_TMP" || fp_fail "chmod $FP_TMP"
export FP_POOL=64M
fp_hosts_loopback H
fp_coord_start H
fp_node_start H n1 --allow-uid $NOBODY
fp_node_start H n2
S1=${FP_NODE_SOCK[n1]}
chmod 0666 "$S1" || fp_fail "chmod $S1"
n1=$(fp_node_id n1)
n2=$(fp_node_id n2)
HALF="$n1,$n2,$n1,$n2,$n1,$n2,$n1,$n2"
for r in A:11 C:33 R:44; do
	fp_cli H n1 region create "${r%:*}" --size 16M --owners "$HALF" >"$FP_TMP/create.out" 2>&1 ||
		fp_fail "create ${r%:*}: $(cat "$FP_TMP/create.out")"
	fp_cli H n1 fill "${r%:*}" --seed "${r#*:}" >"$FP_TMP/fill.out" 2>&1 ||
		fp_fail "fill ${r%:*}: $(cat "$FP_TMP/fill.out")"
done

# check NAME REGION SEED: every page of REGION (n1's own too) still SEED's.
check() {
	fp_cli H n1 touch "$2" --seed "$3" --local-too >"$FP_TMP/check.out" 2>&1 ||
		fp_fail "$1: touch $2: $(tail -n2 "$FP_TMP/check.out")"
	grep -q "pages=4096 .*verified=4096 wrong=0 zero=0" "$FP_TMP/check.out" ||
		fp_fail "$1: $2 changed: $(grep '^touch:' "$FP_TMP/check.out")"
	fp_log "ok: $1: $2 as written ($(grep -o 'verified=[0-9]* wrong=[0-9]*' "$FP_TMP/check.out"))"
}

# hold NODE REGION SEED: a writable mapping of REGION on NODE (its write
# lease), held until its fifo gets a line.
declare -A HOLD_PID
hold() {
	mkfifo "$FP_TMP/$2.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$1]} "$GUEST" whold "$2" "$3" \
		<>"$FP_TMP/$2.fifo" >"$FP_TMP/hold$2.out" 2>&1 &
	HOLD_PID[$2]=$!
	FP_PIDS+=("$!")
	fp_wait_log "$FP_TMP/hold$2.out" "flushed" 60 || fp_fail "holder of $2: $(cat "$FP_TMP/hold$2.out")"
}
hold n1 A 11
hold n2 C 33
for r in A:11 C:33; do
	fp_cli H n1 fill "${r%:*}" --seed "${r#*:}" >"$FP_TMP/busy.out" 2>&1 &&
		fp_fail "a writable map of ${r%:*} passed while another holds its lease"
	grep -q "region '${r%:*}' is mapped writable on node" "$FP_TMP/busy.out" ||
		fp_fail "a writable map of ${r%:*}: $(cat "$FP_TMP/busy.out")"
done
fp_log "ok: A's write lease held on n1, C's on n2; writable maps refused"

# (a) A read-only mapper reopens its segment read-write.
as "$ATTACK" reopen-rw "$S1" A $EVIL >"$FP_TMP/reopen.out" 2>&1
rc=$?
grep -q "^reopen-rw: uid=$NOBODY open=Permission denied written=0" "$FP_TMP/reopen.out" && [ $rc = 0 ] ||
	fp_fail "reopen-rw as uid $NOBODY: exit $rc: $(cat "$FP_TMP/reopen.out")"
fp_log "ok: uid $NOBODY: $(grep '^reopen-rw:' "$FP_TMP/reopen.out") (exit $rc)"
check "after reopen-rw as uid $NOBODY" A 11
# Root passes the segment's mode (CAP_DAC_OVERRIDE): noted, on R.
"$ATTACK" reopen-rw "$S1" R $EVIL >"$FP_TMP/reopen0.out" 2>&1
fp_log "note: root: $(grep '^reopen-rw:' "$FP_TMP/reopen0.out") (root passes file modes; --allow-uid is the boundary)"

# (b) A read-only map asks for a writable uffd (and flushes).
refusals=0
upgrade() { # WHO ARGS...
	local who=$1 out=$FP_TMP/upgrade.out rc
	shift
	"$@" >"$out" 2>&1
	rc=$?
	[ $rc = 77 ] && fp_skip "uffd-upgrade: $(cat "$out")"
	grep -q "^uffd-upgrade: map_uffd=refused closed=yes written=0 flush=-" "$out" && [ $rc = 0 ] ||
		fp_fail "uffd-upgrade $who: exit $rc: $(cat "$out")"
	grep -q "the agent said: .*read-only" "$out" || fp_fail "uffd-upgrade $who: no reason given: $(cat "$out")"
	refusals=$((refusals + 1))
	fp_wait_log "$FP_TMP/n1.log" "local client pid [0-9]+ uid [0-9]+: a read-only map asked for a writable uffd \\(region C, .*refused" 10 $refusals ||
		fp_fail "uffd-upgrade $who: n1 did not log the refusal"
	fp_log "ok: $who: $(grep '^uffd-upgrade: map_uffd' "$out") (exit $rc)"
	check "after uffd-upgrade $who" C 33
}
upgrade "as root" "$ATTACK" uffd-upgrade "$S1" C $EVIL
upgrade "as uid $NOBODY" as "$ATTACK" uffd-upgrade "$S1" C $EVIL
upgrade "with RESUME, as root" "$ATTACK" uffd-upgrade "$S1" C $EVIL resume
upgrade "with RESUME, as uid $NOBODY" as "$ATTACK" uffd-upgrade "$S1" C $EVIL resume
fp_log "ok: $(grep -m1 -o "local client pid [0-9]* uid [0-9]*: .*" "$FP_TMP/n1.log")"

# The holders write nothing more; the owners' bytes after they let go.
for r in A C; do
	echo go >"$FP_TMP/$r.fifo"
	fp_wait_pid "${HOLD_PID[$r]}" 60 || fp_fail "holder of $r: $(cat "$FP_TMP/hold$r.out")"
done
check "at the end" A 11
check "at the end" C 33
fp_log "PASS"
