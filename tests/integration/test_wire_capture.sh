#!/bin/bash
# What a host on the path sees (docs/security.md, threat model). Hosts A, B
# and C share one segment; every frame between them crosses the bridge of
# FP_LAN_NS, where fp_sniff captures it with a packet socket. A cluster
# runs: the coordinator on C, agents on A and B, the CLI on A. Its agents
# join and exchange node lists (pair keys in them), a region on B is
# created, filled, read from A and written from A. Then the capture is
# searched for the cluster, admin, node and pair keys, the CBOR field names
# of the node list, the region's name and the pages' test pattern: none may
# be there. With --page-encryption off at both ends the pattern is there
# (what that option exposes), the keys are still not. And the static keys,
# given to fp_unseal afterwards as if stolen later, open none of the
# recorded sessions (forward secrecy).
set -u
. "$(dirname "$0")/../lib.sh"
fp_require
FP_INSECURE=0
fp_key
fp_hosts_lan A B C || fp_skip "cannot make network namespaces"
SNIFF=$FP_BIN/tests/fp_sniff
ATTACK=$FP_BIN/tests/fp_attack
[ -x "$SNIFF" ] || fp_fail "$SNIFF not built"
[ -x "$ATTACK" ] || fp_fail "$ATTACK not built"
UNSEAL=$FP_BIN/tests/fp_unseal
[ -x "$UNSEAL" ] || fp_fail "$UNSEAL not built"
FP_POOL=64M
PAGES=2048 # 8 MiB regions
IP_A=${FP_HOST_IP[A]}

# sniff_start DIR: the capture on the segment, into DIR.
sniff_start() {
	mkdir -p "$1"
	ip netns exec "$FP_LAN_NS" "$SNIFF" capture "$1" "$1.ready" >"$1.out" 2>&1 &
	SNIFF_PID=$!
	FP_PIDS+=("$SNIFF_PID")
	fp_wait_file "$1.ready" 20 || fp_fail "the capture did not start: $(cat "$1.out")"
}

# sniff_stop DIR: ends the capture; every frame must have been taken.
sniff_stop() {
	local f
	kill -TERM "$SNIFF_PID"
	fp_wait_pid "$SNIFF_PID" 60 || fp_fail "the capture did not end well: $(cat "$1.out")"
	grep -q '^capture:' "$1.out" || fp_fail "capture: no summary: $(cat "$1.out")"
	for f in drops truncated lost_flows gaps; do
		[ "$(fp_field "$1.out" capture: $f)" = 0 ] ||
			fp_fail "the capture is incomplete: $(cat "$1.out")"
	done
	fp_log "$(grep '^capture:' "$1.out")"
}

# unseal_none DIR MIN WHAT: the cluster key (every static key comes from
# it) and the captured handshakes open no record of DIR's sessions, of
# which there are at least MIN.
unseal_none() {
	local rc n
	"$UNSEAL" "$1" "$FARPAGE_KEY_FILE" >"$1.unseal" 2>&1
	rc=$?
	cat "$1.unseal" >&2
	[ $rc != 2 ] || fp_fail "fp_unseal failed"
	n=$(fp_field "$1.unseal" unseal: sessions)
	[ "${n:-0}" -ge "$2" ] || fp_fail "$3: only ${n:-0} sessions found in the capture"
	[ $rc = 0 ] || fp_fail "$3: recorded sessions open with the static keys (above)"
	fp_log "ok: $3: the static keys open no recorded session ($(tail -n1 "$1.unseal"))"
}

# bytes_of GLOB: bytes in the captured flows the glob names.
bytes_of() { cat $1 2>/dev/null | wc -c; }

# --- 1. Everything at its default: control and page data encrypted.
CAP1=$FP_TMP/cap1
sniff_start "$CAP1"
fp_coord_start C
fp_node_start A a
fp_node_start B b
ID_B=$(fp_node_id b)
[ -n "$ID_B" ] || fp_fail "no node id for b"
B_DATA=$(head -n1 "$FP_TMP/b.addr")
R1=wirecap-region-one
fp_cli A a region create $R1 --size 8M --owners "$ID_B,$ID_B,$ID_B,$ID_B" \
	>"$FP_TMP/create1.out" 2>&1 || fp_fail "create: $(cat "$FP_TMP/create1.out")"
fp_cli B b fill $R1 --seed 7 >"$FP_TMP/fill1.out" 2>&1 || fp_fail "fill: $(cat "$FP_TMP/fill1.out")"
fp_cli A a touch $R1 --seed 7 >"$FP_TMP/t1.out" 2>&1
fp_touch_ok "A reads B's pages" "$FP_TMP/t1.out"
fp_cli A a touch $R1 --seed 9 --write >"$FP_TMP/t1w.out" 2>&1
fp_touch_ok "A writes B's pages" "$FP_TMP/t1w.out"
fp_cli A a status >"$FP_TMP/st1.out" 2>&1 || fp_fail "status: $(cat "$FP_TMP/st1.out")"
# What the on-path host of the report did: a HELLO naming an unknown node
# at B's page server makes B's agent fetch a fresh node list.
${FP_HOST_RUN[C]} "$ATTACK" peer "$B_DATA" stranger b >"$FP_TMP/peer.out" 2>&1 ||
	fp_fail "a made-up peer got in: $(cat "$FP_TMP/peer.out")"

sniff_stop "$CAP1"

# The capture holds the traffic: control to C, and the pages from and to
# B's page server (8 MiB each way, sealed).
n=$(bytes_of "$CAP1/*-${FP_COORD/:/_}.tcp")
[ "$n" -gt 1000 ] || fp_fail "only $n bytes to the coordinator captured"
n=$(bytes_of "$CAP1/${B_DATA/:/_}-*.tcp")
[ "$n" -ge $((PAGES * 4096)) ] || fp_fail "only $n bytes from B's page server captured"
n=$(bytes_of "$CAP1/*-${B_DATA/:/_}.tcp")
[ "$n" -ge $((PAGES * 4096)) ] || fp_fail "only $n bytes to B's page server captured"

"$SNIFF" search "$CAP1" "$FARPAGE_KEY_FILE" --names a,b --string $R1 \
	--pages 7 $PAGES --pages 9 $PAGES >"$FP_TMP/search1.out" 2>&1
rc=$?
cat "$FP_TMP/search1.out" >&2
[ $rc != 2 ] || fp_fail "search failed"
[ $rc = 0 ] || fp_fail "secrets or pages crossed the segment in clear (above)"
fp_log "ok: no key, node-list field, region name or page in clear ($(tail -n1 "$FP_TMP/search1.out"))"
# a's and b's sessions at the coordinator, the CLI's, a's at b's page server
unseal_none "$CAP1" 4 "encrypted"

# A client that does not ask for encryption: refused, and logged why.
${FP_HOST_RUN[A]} "$ATTACK" ctl-clear "$FP_COORD" "$FARPAGE_KEY_FILE" >"$FP_TMP/clear.out" 2>&1 ||
	fp_fail "a control session in clear: $(cat "$FP_TMP/clear.out")"
grep -q "requires encryption" "$FP_TMP/clear.out" ||
	fp_fail "in-clear client: no clear reason: $(cat "$FP_TMP/clear.out")"
fp_wait_log "$FP_TMP/coord.log" "handshake refused.*did not ask for encryption" 10 ||
	fp_fail "the coordinator did not log why it refused an unencrypted session"
fp_log "ok: $(cat "$FP_TMP/clear.out")"

# Every session is logged with the identity it proved and where from.
fp_wait_log "$FP_TMP/coord.log" "peer $IP_A:[0-9]+: session as node a \(key id [0-9a-f]{16}\), encrypted" 5 ||
	fp_fail "the coordinator did not log node a's session"
fp_wait_log "$FP_TMP/coord.log" "peer ${FP_HOST_IP[B]}:[0-9]+: session as node b " 5 ||
	fp_fail "the coordinator did not log node b's session"
fp_wait_log "$FP_TMP/coord.log" "peer $IP_A:[0-9]+: session as admin \(key id" 5 ||
	fp_fail "the coordinator did not log the CLI's session"
fp_wait_log "$FP_TMP/b.log" "$IP_A:[0-9]+: session as peer a, page data encrypted" 5 ||
	fp_fail "b's page server did not log a's session"
fp_log "ok: sessions logged: $(grep -m1 'session as node a' "$FP_TMP/coord.log" | cut -c1-120)"

# --- 2. --page-encryption off at both ends: page data authenticated only,
# in clear on the segment; control frames still encrypted.
kill "${FP_NODE_PID[a]}" "${FP_NODE_PID[b]}"
fp_wait_pid "${FP_NODE_PID[a]}" 30
fp_wait_pid "${FP_NODE_PID[b]}" 30
CAP2=$FP_TMP/cap2
sniff_start "$CAP2"
fp_node_start A c --page-encryption off
fp_node_start B d --page-encryption off
ID_D=$(fp_node_id d)
[ -n "$ID_D" ] || fp_fail "no node id for d"
R2=wirecap-region-two
fp_cli A c region create $R2 --size 8M --owners "$ID_D,$ID_D,$ID_D,$ID_D" \
	>"$FP_TMP/create2.out" 2>&1 || fp_fail "create: $(cat "$FP_TMP/create2.out")"
fp_cli B d fill $R2 --seed 11 >"$FP_TMP/fill2.out" 2>&1 || fp_fail "fill: $(cat "$FP_TMP/fill2.out")"
fp_cli A c touch $R2 --seed 11 >"$FP_TMP/t2.out" 2>&1
fp_touch_ok "C reads D's pages, page encryption off" "$FP_TMP/t2.out"
sniff_stop "$CAP2"
fp_wait_log "$FP_TMP/d.log" "session as peer c, page data authenticated only" 5 ||
	fp_fail "d's page server did not log c's unencrypted session"
"$SNIFF" search "$CAP2" "$FARPAGE_KEY_FILE" --names a,b,c,d --string $R2 \
	>"$FP_TMP/search2.out" 2>&1 ||
	{ cat "$FP_TMP/search2.out" >&2; fp_fail "keys or control fields in clear with page encryption off"; }
"$SNIFF" search "$CAP2" "$FARPAGE_KEY_FILE" --pages 11 $PAGES >"$FP_TMP/search3.out" 2>&1
rc=$?
[ $rc = 1 ] && [ "$(fp_field "$FP_TMP/search3.out" search: pattern_hits)" -gt 0 ] ||
	{ cat "$FP_TMP/search3.out" >&2; fp_fail "page encryption off: the pages were not seen in clear (is the capture blind?)"; }
unseal_none "$CAP2" 4 "page encryption off"
fp_log "ok: page encryption off: pages in clear as documented ($(tail -n1 "$FP_TMP/search3.out")), no key or control field ($(tail -n1 "$FP_TMP/search2.out"))"
fp_log "PASS"
