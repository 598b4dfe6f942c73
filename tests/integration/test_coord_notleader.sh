#!/bin/bash
# A coordinator of the list that answers every request "not the leader"
# (the MSG_T_ERROR of COORD_ERR_NOT_LEADER, EREMCHG: fp_notleader, NL),
# ahead of one that serves (REAL, the WAL store; loopback, --insecure:
# fp_notleader speaks plain frames):
#  - an agent given NL,REAL joins through REAL, saying once that NL is not
#    the leader, and is up there after a lease;
#  - the CLI's status through the same list works; given NL and an address
#    where nothing listens it fails, one line per address with the reason;
#  - an agent given only NL keeps waiting for a leader (asking again every
#    second, said once), as for a coordinator that is down, and does not
#    give up.
set -uo pipefail
# shellcheck disable=SC2034 # read by lib.sh
FP_INSECURE=1
. "$(dirname "$0")/../lib.sh"
fp_require
[ -x "$FP_BIN/tests/fp_notleader" ] || fp_fail "$FP_BIN/tests/fp_notleader not built"
fp_hosts_loopback H
"$FP_BIN/tests/fp_notleader" "$FP_TMP/nl.addr" >"$FP_TMP/nl.out" 2>&1 &
FP_PIDS+=("$!")
fp_wait_file "$FP_TMP/nl.addr" || fp_fail "fp_notleader did not start"
nl=$(head -n1 "$FP_TMP/nl.addr")
fp_coord_start H
real=$FP_COORD
FP_COORD=$nl,$real
fp_log "coordinators: $FP_COORD ($nl is not the leader)"
fp_node_start H A
grep -q "coordinator $nl: not the leader; trying $real" "$FP_TMP/A.log" ||
	fp_fail "agent A did not say it moved from $nl, not the leader"
grep -q "joined $real as node" "$FP_TMP/A.log" || fp_fail "agent A did not join through $real"
fp_log "ok: agent A joined through $real after $nl said it is not the leader"
sleep 6 # a lease (5 s): A's heartbeats go to $real, not to $nl
fp_cli H A status >"$FP_TMP/st.out" 2>&1 || { cat "$FP_TMP/st.out" >&2; fp_fail "status through $FP_COORD"; }
grep -qE '^ +[0-9]+ +A .* up ' "$FP_TMP/st.out" ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "status through the list: A not up after a lease"; }
fp_log "ok: status through the list: A up after a lease"

dead=127.0.0.1:$(fp_port H)
"$FP_CLI_BIN" --insecure --coordinator "$nl,$dead" status >"$FP_TMP/x.out" 2>&1 &&
	{ cat "$FP_TMP/x.out" >&2; fp_fail "status with no leader up passed"; }
grep -q "coordinator $nl: not the leader (no leader yet)" "$FP_TMP/x.out" &&
	grep -q "coordinator $dead: Connection refused" "$FP_TMP/x.out" ||
	{ cat "$FP_TMP/x.out" >&2; fp_fail "the CLI's error does not name each address and why"; }
fp_log "ok: no leader: $(grep -v warning "$FP_TMP/x.out" | tr '\n' '|')"

# Only the follower: the agent waits (as for a coordinator that is down).
n0=$(grep -c '^answered:' "$FP_TMP/nl.out")
"$FP_NODE_BIN" --coordinator "$nl" --name B --insecure --pool-size 8M \
	--data-listen "127.0.0.1:$(fp_port H)" --sock "$FP_TMP/B.sock" \
	>"$FP_TMP/B.log" 2>&1 &
b=$!
FP_PIDS+=("$b")
fp_wait_log "$FP_TMP/B.log" "coordinator $nl: not the leader \(no leader yet\)" ||
	fp_fail "agent B did not say $nl is not the leader"
fp_wait_log "$FP_TMP/nl.out" "^answered:" 20 $((n0 + 8)) ||
	fp_fail "agent B did not ask $nl again"
kill -0 "$b" 2>/dev/null || { cat "$FP_TMP/B.log" >&2; fp_fail "agent B gave up with only a coordinator that is not the leader"; }
[ "$(grep -c "not the leader" "$FP_TMP/B.log")" = 1 ] ||
	{ cat "$FP_TMP/B.log" >&2; fp_fail "agent B said it more than once"; }
fp_log "ok: agent B waits for a leader, asking again ($(($(grep -c '^answered:' "$FP_TMP/nl.out") - n0)) answers), said once"
exit 0
