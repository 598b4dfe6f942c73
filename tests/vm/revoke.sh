#!/bin/bash
# A peer whose lease expired loses RDMA access to a pool (docs/security.md,
# section 5), over real verbs. Run by tests/vm/guest.sh inside the SoftRoCE
# VM (rxe0 and rxe1 on a veth pair); any host with two verbs devices and
# userfaultfd can run it.
#
#   tests/vm/revoke.sh --bin BUILD_DIR --addrs IP_A,IP_B --devs DEV_A,DEV_B
#                      [--gid-index N] [--lease-ms MS] [--size SIZE]
#
# 1. A coordinator with a short lease, agents hostA (DEV_A) and hostB
#    (DEV_B) over verbs, a region interleaved between them. A guest on A
#    reads every page, B's over RDMA READ, every byte verified.
# 2. An expelled peer: fp_rdma_peer joins as node "intruder" with a node
#    key of its own, exchanges endpoints with B through the coordinator as
#    an agent does, and reads one of B's pages with RDMA READ (verified).
#    Then it stops heartbeating. Once B logs the revocation, the same READ
#    on the same QP with B's rkey must end in an error completion with
#    nothing landed. It heartbeats again: B prepares its QP anew with a
#    fresh PSN, and a READ verifies again.
# 3. Agent A is stopped (SIGSTOP) until B revokes it, then continued: both
#    sides exchange endpoints again (B's QP with a fresh PSN) and the guest
#    on A reads every page again over verbs, verified.
#    When it quits, B revokes its new QP as well.
# 4. B's /metrics counts the three revocations, each logged once.
# 5. A peer the coordinator forgets: another fp_rdma_peer ("stray") joins,
#    connects to B and reads a page (verified); the coordinator, while the
#    stray still heartbeats (no lease of it can expire), is replaced by one
#    with fresh tables, which the stray never joins. B joins the new one;
#    its node list lacks the stray, so B moves the stray's QP to the error
#    state ("not in the coordinator's node list") and the stray's READ on
#    it fails.
# Readiness is read from the daemons' logs and the peer's answers, never
# from sleeps. The last line is the "revoke:" summary; exit 0 only if every
# check held, 77 if this host cannot run it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ADDRS=""
DEVS=""
GIDX=""
LEASE=2000
SIZE=8M
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "$2" && pwd); shift 2 ;;
	--addrs) ADDRS=$2; shift 2 ;;
	--devs) DEVS=$2; shift 2 ;;
	--gid-index) GIDX=$2; shift 2 ;;
	--lease-ms) LEASE=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	-h|--help) sed -n '2,26p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "revoke: unknown argument $1" >&2; exit 2 ;;
	esac
done
case $ADDRS in *,*) ;; *) echo "revoke: --addrs IP_A,IP_B is required" >&2; exit 2 ;; esac
case $DEVS in *,*) ;; *) echo "revoke: --devs DEV_A,DEV_B is required" >&2; exit 2 ;; esac
export FARPAGE_BIN
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
fp_require
[ "${FP_INSECURE:-0}" = 1 ] && fp_skip "the expelled peer needs a node key (FP_INSECURE=1)"
PEER_BIN=$FP_BIN/tests/fp_rdma_peer
[ -x "$PEER_BIN" ] || fp_fail "$PEER_BIN is not built"
DEV_A=${DEVS%,*} DEV_B=${DEVS#*,}
SEED=$((RANDOM + 1))
GARGS=()
[ -n "$GIDX" ] && GARGS=(--gid-index "$GIDX")
ok() { fp_log "ok: $*"; }

fp_hosts_loopback A B
FP_HOST_IP[A]=${ADDRS%,*}
FP_HOST_IP[B]=${ADDRS#*,}
export FP_POOL=64M
fp_coord_start A --lease-ms "$LEASE"
fp_node_start A hostA --transport verbs --rdma-device "$DEV_A" --readahead 0 \
	--metrics-listen "${FP_HOST_IP[A]}:0" "${GARGS[@]}"
fp_node_start B hostB --transport verbs --rdma-device "$DEV_B" --readahead 0 \
	--metrics-listen "${FP_HOST_IP[B]}:0" "${GARGS[@]}"
LA=$FP_TMP/hostA.log LB=$FP_TMP/hostB.log
fp_wait_log_wall "$LA" 'joined .* as node' 30 && fp_wait_log_wall "$LB" 'joined .* as node' 30 ||
	fp_fail "the agents did not join"
A_ID=$(fp_node_id hostA) B_ID=$(fp_node_id hostB)
[ -n "$A_ID" ] && [ -n "$B_ID" ] || fp_fail "no node ids for hostA/hostB"
# "queue pair to node N (NAME) ready": an agent connected its QP to N's
qp_ready() { echo "queue pair to node $1 \\($2\\) ready"; }
fp_wait_log_wall "$LA" "$(qp_ready "$B_ID" hostB)" 60 && fp_wait_log_wall "$LB" "$(qp_ready "$A_ID" hostA)" 60 ||
	fp_fail "hostA and hostB did not connect their queue pairs"
ok "hostA (node $A_ID, $DEV_A) and hostB (node $B_ID, $DEV_B) connected over verbs; lease ${LEASE} ms"

# guest_reads TAG: the guest on A reads the whole region, every byte
# verified, B's pages over verbs
guest_reads() {
	local out=$FP_TMP/touch-$1.out p0 p1
	p0=$(fp_metric hostA "farpage_peer_read_pages_total{peer=\"$B_ID\",transport=\"verbs\"}")
	fp_cli A hostA touch demo --seed "$SEED" --local-too >"$out" 2>&1 ||
		{ cat "$out" >&2; fp_fail "$1: touch failed"; }
	fp_touch_ok "$1" "$out"
	p1=$(fp_metric hostA "farpage_peer_read_pages_total{peer=\"$B_ID\",transport=\"verbs\"}")
	[ "${p1:-0}" -gt "${p0:-0}" ] 2>/dev/null ||
		fp_fail "$1: hostA read no pages of hostB over verbs (/metrics: ${p0:-none} -> ${p1:-none})"
	ok "$1: hostA read $((p1 - ${p0:-0})) pages of hostB with RDMA READ"
}

# ------------------------------------------------------------ 1. a guest on A
fp_cli A hostA region create demo --size "$SIZE" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "region create: $(cat "$FP_TMP/create.out")"
fp_cli A hostA fill demo --seed "$SEED" >"$FP_TMP/fillA.out" 2>&1 || fp_fail "fill on A: $(cat "$FP_TMP/fillA.out")"
fp_cli B hostB fill demo --seed "$SEED" >"$FP_TMP/fillB.out" 2>&1 || fp_fail "fill on B: $(cat "$FP_TMP/fillB.out")"
guest_reads "guest on A before"

# ------------------------------------------------------------ 2. the expelled peer
# peer_spawn NAME: fp_rdma_peer as node NAME (a node key of its own),
# commands on fd 7, answers in $PO, log in $PL, pid PEER_PID
peer_spawn() {
	"$FP_CLI_BIN" keygen --role node --name "$1" --from "$FARPAGE_KEY_FILE" \
		-o "$FP_TMP/$1.key" >/dev/null || fp_fail "farpage keygen --role node failed"
	mkfifo "$FP_TMP/$1.in" || fp_fail "mkfifo"
	PO=$FP_TMP/$1.out PL=$FP_TMP/$1.log
	"$PEER_BIN" --coordinator "$FP_COORD" --name "$1" --key-file "$FP_TMP/$1.key" \
		--target hostB --region demo --seed "$SEED" --device "$DEV_A" \
		--data-ip "${FP_HOST_IP[A]}" "${GARGS[@]}" <"$FP_TMP/$1.in" >"$PO" 2>"$PL" &
	PEER_PID=$!
	FP_PIDS+=("$PEER_PID")
	exec 7>"$FP_TMP/$1.in"
}
peer_spawn intruder
# peer CMD REGEX [SECS]: sends CMD; its answer (the next line) must match
peer() {
	local n
	n=$(grep -c . "$PO")
	echo "$1" >&7
	if ! fp_wait_log_wall "$PO" . "${3:-60}" $((n + 1)); then
		kill -0 "$PEER_PID" 2>/dev/null || fp_fail "fp_rdma_peer died at '$1'"
		fp_fail "fp_rdma_peer did not answer '$1'"
	fi
	PEER_LAST=$(tail -n1 "$PO")
	echo "  peer> $1: $PEER_LAST"
	echo "$PEER_LAST" | grep -qE "$2" || fp_fail "fp_rdma_peer: '$1' answered '$PEER_LAST', expected /$2/"
}
field() { echo "$1" | tr ' ' '\n' | sed -n "s/^$2=//p" | head -n1; }
fp_wait_log_wall "$PO" '^joined: ' 30 || fp_fail "fp_rdma_peer did not join: $(tail -n3 "$PL")"
I_ID=$(field "$(head -n1 "$PO")" node)
peer connect '^connected: ' 120
PSN1=$(field "$PEER_LAST" target_psn)
fp_wait_log_wall "$LB" "$(qp_ready "$I_ID" intruder)" 60 || fp_fail "hostB did not connect a queue pair to the intruder"
peer read '^read: ok verified '
ok "intruder (node $I_ID) read a page of hostB with RDMA READ (rkey $(field "$PEER_LAST" rkey), verified)"

peer stop '^heartbeats stopped'
REVOKED_RE="node $I_ID \\(intruder\\): lease expired: queue pair moved to the error state"
t0=$(date +%s.%N)
fp_wait_log_wall "$LB" "$REVOKED_RE" $((LEASE / 1000 + 30)) ||
	fp_fail "hostB did not revoke the intruder's queue pair after its lease expired"
ok "hostB revoked the intruder $(awk -v a="$t0" -v b="$(date +%s.%N)" 'BEGIN{printf "%.1f", b-a}') s after its last heartbeat: $(grep -E "$REVOKED_RE" "$LB" | tail -n1 | sed 's/^.*verbs: //')"
grep -E "node $I_ID \\(intruder\\) is down" "$FP_TMP/coord.log" | tail -n1 | sed 's/^/  coordinator: /'
# the same QP, the same rkey: an error completion, nothing landed
peer read '^read: failed status=-[0-9]+ .*error completion\) landed=0 posted=1 failed=1 '
ok "the intruder's RDMA READ on its old QP with hostB's rkey failed: $(grep 'RDMA READ failed' "$PL" | tail -n1 | sed 's/^.*fp_rdma_peer: //')"

peer start '^heartbeats resumed'
peer 'connect fresh' '^connected: ' 120
PSN2=$(field "$PEER_LAST" target_psn)
[ "$PSN1" != "$PSN2" ] || fp_fail "hostB's endpoint for the intruder kept its PSN $PSN1"
fp_wait_log_wall "$LB" "node $I_ID: QP [0-9]+ prepared again after its revocation, fresh PSN" 60 &&
	fp_wait_log_wall "$LB" "$(qp_ready "$I_ID" intruder)" 60 2 ||
	fp_fail "hostB did not prepare and connect a new queue pair for the intruder"
peer read '^read: ok verified '
ok "the intruder is up again: hostB's QP exchanged anew (PSN $PSN1 -> $PSN2), its READ verifies"
echo quit >&7
exec 7>&-
fp_wait_pid "$PEER_PID" 30 || fp_fail "fp_rdma_peer exited with status $?"
# gone for good: its lease runs out once more, and hostB revokes it again
fp_wait_log_wall "$LB" "$REVOKED_RE" $((LEASE / 1000 + 30)) 2 ||
	fp_fail "hostB did not revoke the intruder's new queue pair after it left"
ok "the intruder left: hostB revoked its new queue pair too"

# ------------------------------------------------------------ 3. agent A stopped
# B's PSN in its QP's last connect log line to node $1
b_psn() {
	grep -E "node $1: QP [0-9]+ connected to QP" "$LB" | tail -n1 | sed -n 's/.*PSN \(0x[0-9a-f]*\)\/.*/\1/p'
}
PSN_A1=$(b_psn "$A_ID")
nb=$(grep -cE "$(qp_ready "$A_ID" hostA)" "$LB")
na=$(grep -cE "$(qp_ready "$B_ID" hostB)" "$LA")
kill -STOP "${FP_NODE_PID[hostA]}"
fp_wait_log_wall "$LB" "node $A_ID \\(hostA\\): lease expired: queue pair moved to the error state" $((LEASE / 1000 + 30)) ||
	{ kill -CONT "${FP_NODE_PID[hostA]}"; fp_fail "hostB did not revoke hostA's queue pair while hostA was stopped"; }
kill -CONT "${FP_NODE_PID[hostA]}"
ok "hostA stopped: hostB revoked its queue pair; hostA continued"
fp_wait_log_wall "$LB" "node $A_ID: QP [0-9]+ prepared again after its revocation, fresh PSN" 60 &&
	fp_wait_log_wall "$LB" "$(qp_ready "$A_ID" hostA)" 60 $((nb + 1)) &&
	fp_wait_log_wall "$LA" "$(qp_ready "$B_ID" hostB)" 60 $((na + 1)) ||
	fp_fail "hostA and hostB did not exchange endpoints again after hostA came back"
PSN_A2=$(b_psn "$A_ID")
[ -n "$PSN_A1" ] && [ -n "$PSN_A2" ] && [ "$PSN_A1" != "$PSN_A2" ] ||
	fp_fail "hostB's QP to hostA: PSN '$PSN_A1' -> '$PSN_A2' (a fresh one expected)"
ok "hostA is up again: hostB's QP to it prepared anew (PSN $PSN_A1 -> $PSN_A2), hostA reconnected: $(grep -E "remote QP|error state" "$LA" | tail -n1 | sed 's/^.*xport_rdma: //')"
guest_reads "guest on A after its queue pairs came back"

# ------------------------------------------------------------ 4. counted
# hostB: the intruder twice (stopped, then gone), hostA once; each one
# logged once
rb=$(fp_metric hostB farpage_rdma_revocations_total)
ra=$(fp_metric hostA farpage_rdma_revocations_total)
lb=$(grep -c 'lease expired: queue pair moved to the error state' "$LB")
[ "$rb" = 3 ] && [ "$lb" = 3 ] ||
	fp_fail "hostB: farpage_rdma_revocations_total is '${rb:-none}' and $lb revocations logged, expected 3 (the intruder twice, hostA once)"
ok "farpage_rdma_revocations_total: hostB $rb (logged $lb), hostA ${ra:-none}"

# ------------------------------------------------------------ 5. forgotten
peer_spawn stray
fp_wait_log_wall "$PO" '^joined: ' 30 || fp_fail "the stray peer did not join: $(tail -n3 "$PL")"
S_ID=$(field "$(head -n1 "$PO")" node)
peer connect '^connected: ' 120
fp_wait_log_wall "$LB" "$(qp_ready "$S_ID" stray)" 60 || fp_fail "hostB did not connect a queue pair to the stray peer"
peer read '^read: ok verified '
ok "stray (node $S_ID) read a page of hostB with RDMA READ (verified)"
# The stray still heartbeats: the old coordinator has no reason to expire it.
kill -KILL "$FP_COORD_PID"
wait "$FP_COORD_PID" 2>/dev/null
grep -qE "node $S_ID \\(stray\\) is down" "$FP_TMP/coord.log" &&
	fp_fail "the old coordinator expired the stray's lease before it went; the step tests nothing"
fp_coord_respawn A --fresh --lease-ms "$LEASE"
ok "coordinator replaced by one with fresh tables at $FP_COORD"
FORGOT_RE="node $S_ID \\(unknown\\): not in the coordinator's node list: queue pair moved to the error state"
fp_wait_log_wall "$LB" "$FORGOT_RE" 120 || fp_fail "hostB did not revoke the queue pair of the peer the coordinator forgot"
ok "hostB revoked the forgotten peer: $(grep -E "$FORGOT_RE" "$LB" | tail -n1 | sed 's/^.*verbs: //')"
peer read '^read: failed status=-[0-9]+ .*error completion\) landed=0 posted=1 failed=1 '
ok "the forgotten peer's RDMA READ on its QP with hostB's rkey failed"
echo quit >&7
exec 7>&-
fp_wait_pid "$PEER_PID" 30 || fp_fail "fp_rdma_peer (stray) exited with status $?"
echo "revoke: expelled_read=failed forgotten_read=failed reconnect=ok psn_b_intruder=$PSN1->$PSN2 psn_b_hostA=$PSN_A1->$PSN_A2 revocations_b=$rb revocations_a=${ra:-?} lease_ms=$LEASE"
