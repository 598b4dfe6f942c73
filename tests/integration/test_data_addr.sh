#!/bin/bash
# A node's data address is where every peer dials its page server: the
# coordinator takes one other than the address the node connects from
# only with a line that says so, or not at all (two network namespaces,
# A with the coordinator and agent a, B):
#  - warn (the default): agent b on B registers A's address as its own:
#    it joins, and the coordinator logs that it took an address that is
#    not the one b connects from;
#  - strict: the coordinator again with --data-addr-check strict; agent c
#    on B with A's address is refused (the agent ends, saying why, and
#    the refusal is in the coordinator's log), agent d on B with its own
#    address joins; a bad value of the option is a usage error.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
fp_hosts_netns A B || fp_skip "network namespaces cannot be made here"
IPA=${FP_HOST_IP[A]}
fp_coord_start A
fp_node_start A a
fp_node_start B b --data-addr "$IPA:$(fp_port A)"
grep -q "node b registers data address $IPA:[0-9]*, not the address it connects from (${FP_HOST_IP[B]})" \
	"$FP_TMP/coord.log" || fp_fail "the coordinator took b's data address on A without a word"
fp_log "ok: warn: $(grep -o 'node b registers data address.*(--data-addr-check warn' "$FP_TMP/coord.log" | head -n1)"

"$FP_COORD_BIN" --data-addr-check lax --help >"$FP_TMP/u.out" 2>&1
rc=$?
[ "$rc" = 2 ] && grep -q "warn or strict, not 'lax'" "$FP_TMP/u.out" ||
	{ cat "$FP_TMP/u.out" >&2; fp_fail "--data-addr-check lax: exit $rc"; }
kill -TERM "$FP_COORD_PID"
fp_wait_pid "$FP_COORD_PID" 60 >/dev/null
fp_coord_respawn A --data-addr-check strict
fp_node_refused B c "$FP_TMP/c.log" "agent c with A's address under strict" \
	--data-listen "${FP_HOST_IP[B]}:$(fp_port B)" --data-addr "$IPA:$(fp_port A)"
rc=$FP_REFUSED_RC
grep -q "data address $IPA:[0-9]* is not the address it connects from" "$FP_TMP/c.log" ||
	{ cat "$FP_TMP/c.log" >&2; fp_fail "agent c with A's address under strict: exit $rc, not the refusal"; }
grep -q "peer ${FP_HOST_IP[B]}:[0-9]*: node c: data address .* refused (--data-addr-check strict)" "$FP_TMP/coord.log" ||
	fp_fail "the coordinator did not log the refusal"
fp_log "ok: strict: c with A's address refused (exit $rc)"
fp_node_start B d
fp_log "ok: strict: d with its own address joined"
exit 0
