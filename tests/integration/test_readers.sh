#!/bin/bash
# Who may read a region (docs/security.md, section 7, "Readers"): agents
# a, b (the owner of every page) and c on one host; region r created with
# --readers a --writers b (b fills it: the writers may always read).
#   1. `region create`, `region show` and `status` (text and --json)
#      print the readers
#   2. b fills r; a read-only map on c is refused with EACCES naming the
#      readers, and c's agent reads no page; a reads every page
#   3. c's node key: looking r up (asking for grants) is refused with
#      EACCES naming the readers, as is changing r's readers ("needs the
#      admin key")
#   4. readers any: c reads every page; a guest on c holds r mapped
#   5. readers a again: c's next map is refused; c's agent, whose guest
#      still maps r, logs that the coordinator refused its grants'
#      renewal, with the coordinator's text
#   6. the coordinator restarts: the readers (a) are still r's, c is
#      refused again, a reads
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
FP_INSECURE=0 # readers are a node key's limit: there are keys here
ATTACK=$FP_BIN/tests/fp_attack
GUEST=$FP_BIN/tests/fp_guest
[ -x "$ATTACK" ] && [ -x "$GUEST" ] || fp_fail "$ATTACK or $GUEST not built"
SIZE=8M
PAGES=$(($(numfmt --from=iec $SIZE) / 4096))
# Grants are renewed at half their life: 5 s here (10 s, the least).
TTL=10000
fp_hosts_loopback H
fp_coord_start H --grant-ttl-ms $TTL
fp_node_start H a
fp_node_start H b
fp_node_start H c
ID_A=$(fp_node_id a) ID_B=$(fp_node_id b) ID_C=$(fp_node_id c)
[ -n "$ID_A" ] && [ -n "$ID_B" ] && [ -n "$ID_C" ] || fp_fail "node ids: a=$ID_A b=$ID_B c=$ID_C"
owners=$(printf "$ID_B,%.0s" $(seq $(($(numfmt --from=iec $SIZE) / (2 << 20)))))
REFUSED="region 'r': node $ID_C (c) may not read it; its readers: a ($ID_A); its writers: b ($ID_B)"
# The same as an extended regular expression (fp_wait_log).
REFUSED_RE=$(sed 's/[][().*^$+?{}|\]/\\&/g' <<<"$REFUSED")

# --- 1. The readers are printed.
fp_cli H a region create r --size $SIZE --owners "${owners%,}" --readers a --writers b \
	>"$FP_TMP/create.out" 2>&1 || fp_fail "create r: $(cat "$FP_TMP/create.out")"
grep -q "readers: $ID_A\$" "$FP_TMP/create.out" || fp_fail "create r: no readers line: $(cat "$FP_TMP/create.out")"
fp_cli H a region show r >"$FP_TMP/show.out" 2>&1 || fp_fail "region show: $(cat "$FP_TMP/show.out")"
grep -q "^  readers: a ($ID_A)\$" "$FP_TMP/show.out" || fp_fail "region show: readers: $(cat "$FP_TMP/show.out")"
grep -q "^  writers: b ($ID_B)\$" "$FP_TMP/show.out" || fp_fail "region show: writers: $(cat "$FP_TMP/show.out")"
fp_cli H a status >"$FP_TMP/st.out" 2>&1 || fp_fail "status: $(cat "$FP_TMP/st.out")"
grep -q "^      readers: a ($ID_A)\$" "$FP_TMP/st.out" || fp_fail "status: readers: $(cat "$FP_TMP/st.out")"
fp_cli H a status --json >"$FP_TMP/st.json" 2>&1 || fp_fail "status --json: $(cat "$FP_TMP/st.json")"
grep '"name": "r"' "$FP_TMP/st.json" | grep -q "\"readers\": \[ $ID_A \]" ||
	fp_fail "status --json: r's readers: $(cat "$FP_TMP/st.json")"
fp_log "ok: r's readers: $(grep readers: "$FP_TMP/show.out")"

# c maps r read-only and reads seed $1 on every page ($2: what for).
c_reads() {
	fp_cli H c touch r --seed "$1" >"$FP_TMP/c$1.out" 2>&1 ||
		{ cat "$FP_TMP/c$1.out" >&2; fp_fail "$2: c could not read r"; }
	fp_touch_ok "$2" "$FP_TMP/c$1.out"
	[ "$(fp_field "$FP_TMP/c$1.out" touch: verified)" = "$PAGES" ] || fp_fail "$2: not every page read"
}
# c's read-only map of r is refused, naming the readers ($1: what for).
c_refused() {
	fp_cli H c touch r --seed 11 >"$FP_TMP/cr.out" 2>&1 &&
		fp_fail "$1: c mapped r: $(cat "$FP_TMP/cr.out")"
	grep -qF "$REFUSED" "$FP_TMP/cr.out" ||
		fp_fail "$1: c's refusal names no readers: $(cat "$FP_TMP/cr.out")"
	grep -q '^touch:' "$FP_TMP/cr.out" && fp_fail "$1: c touched pages: $(cat "$FP_TMP/cr.out")"
	fp_log "ok: $1: $(head -c 200 "$FP_TMP/cr.out")"
}

# --- 2. b fills r; c is refused and reads nothing; a reads every page.
fp_cli H b fill r --seed 11 >"$FP_TMP/fill.out" 2>&1 || fp_fail "b fills r: $(cat "$FP_TMP/fill.out")"
grep -q "^fill: region=r pages=$PAGES " "$FP_TMP/fill.out" || fp_fail "fill: $(cat "$FP_TMP/fill.out")"
c_refused "c, not a reader"
[ "$(fp_faults H c)" = 0 ] || fp_fail "c's agent read pages of r: faults=$(fp_faults H c)"
fp_cli H a touch r --seed 11 >"$FP_TMP/a1.out" 2>&1 || fp_fail "a could not read r: $(cat "$FP_TMP/a1.out")"
fp_touch_ok "a, a reader, reads seed 11" "$FP_TMP/a1.out"
[ "$(fp_field "$FP_TMP/a1.out" touch: verified)" = "$PAGES" ] || fp_fail "a: not every page read"

# --- 3. c's node key (as a hostile c would use it) can neither look r up
# nor change its readers.
"$FP_CLI_BIN" keygen --role node --name c --from "$FARPAGE_KEY_FILE" -o "$FP_TMP/c.key" >/dev/null ||
	fp_fail "keygen node c"
"$ATTACK" readers "$FP_COORD" "$FP_TMP/c.key" c r >"$FP_TMP/nk.out" 2>&1 ||
	fp_fail "c's node key: $(cat "$FP_TMP/nk.out")"
grep -qF "as-node: region_get: refused: $REFUSED" "$FP_TMP/nk.out" ||
	fp_fail "c's node key: the lookup's refusal names no readers: $(cat "$FP_TMP/nk.out")"
grep -q "as-node: region_readers: refused: .*needs the admin key" "$FP_TMP/nk.out" ||
	fp_fail "c's node key: no clear refusal to change the readers: $(cat "$FP_TMP/nk.out")"
fp_wait_log "$FP_TMP/coord.log" "refused: region 'r': node $ID_C \(c\) may not read it" 5 ||
	fp_fail "the coordinator did not log the refusal"
fp_log "ok: c's node key: $(tr '\n' ';' <"$FP_TMP/nk.out" | cut -c1-300)"

# --- 4. Any node reads: c too. A guest on c holds r mapped (half read).
fp_cli H a region readers r any >"$FP_TMP/r.out" 2>&1 || fp_fail "region readers r any: $(cat "$FP_TMP/r.out")"
grep -q "^region r: readers: any node\$" "$FP_TMP/r.out" || fp_fail "region readers said: $(cat "$FP_TMP/r.out")"
c_reads 11 "readers any: c reads seed 11"
mkfifo "$FP_TMP/hold.fifo" && exec 7<>"$FP_TMP/hold.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[c]} "$GUEST" hold r 11 remote <"$FP_TMP/hold.fifo" >"$FP_TMP/hold.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/hold.out" "holding" 30 || { cat "$FP_TMP/hold.out" >&2; fp_fail "c's guest did not map r"; }

# --- 5. Only a again: c's next map is refused, its agent's renewal too.
fp_cli H a region readers r a >"$FP_TMP/r.out" 2>&1 || fp_fail "region readers r a: $(cat "$FP_TMP/r.out")"
grep -q "^region r: readers: a ($ID_A)\$" "$FP_TMP/r.out" || fp_fail "region readers said: $(cat "$FP_TMP/r.out")"
fp_wait_log "$FP_TMP/coord.log" "region 'r': readers now a \($ID_A\)" 5 || fp_fail "the coordinator did not log the change"
c_refused "c, out of the readers again"
fp_wait_log "$FP_TMP/c.log" "region r: the coordinator refuses this node fresh grants \(EACCES\): $REFUSED_RE" \
	$((TTL / 1000 + 20)) || fp_fail "c's agent did not log the refused renewal of its grants"
fp_log "ok: c's agent: $(grep -m1 'refuses this node fresh grants' "$FP_TMP/c.log" | cut -c1-200)"
# (what the guest reads on is the page servers' business: it ends here)
kill "$gp" 2>/dev/null
fp_wait_pid "$gp" 20
exec 7>&-

# --- 6. The readers survive a restart of the coordinator.
kill "$FP_COORD_PID"
fp_wait_pid "$FP_COORD_PID" 20 || fp_fail "the coordinator did not stop"
fp_coord_respawn H --grant-ttl-ms $TTL
fp_cli H a region show r >"$FP_TMP/show2.out" 2>&1 || fp_fail "region show after the restart"
grep -q "^  readers: a ($ID_A)\$" "$FP_TMP/show2.out" ||
	fp_fail "the readers did not survive the restart: $(cat "$FP_TMP/show2.out")"
c_refused "c after the restart"
fp_cli H a touch r --seed 11 >"$FP_TMP/a2.out" 2>&1 || fp_fail "a after the restart: $(cat "$FP_TMP/a2.out")"
fp_touch_ok "a reads after the restart" "$FP_TMP/a2.out"
fp_log "PASS"
