#!/bin/bash
# Agents and the CLI given several coordinator addresses (--coordinator
# A,B,C) move to the next when one cannot be reached (loopback, one
# coordinator with the default WAL store, agents O, the owner, and R, the
# reader):
#  - the list starts with an address where nothing listens (DEAD): both
#    agents join through the next one, each saying once that it moved;
#  - the CLI's region create and status work through the same list; a
#    region made on O reads back right on R, page by page;
#  - the CLI given only addresses where nothing listens fails, one line
#    per address naming it and why;
#  - the coordinator is killed and started again on another port (NEW),
#    also in the agents' list (DEAD,OLD,NEW): the agents go on with it
#    within their heartbeats (no rejoin as other nodes, none counted down
#    after a lease), and a region made afterwards maps and reads right.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
fp_hosts_loopback H
dead=127.0.0.1:$(fp_port H)
fp_coord_start H
old=$FP_COORD
new=127.0.0.1:$(fp_port H)
while [ "$new" = "$dead" ] || [ "$new" = "$old" ]; do
	new=127.0.0.1:$(fp_port H)
done
# fp_node_start and fp_cli give the agents and the CLI $FP_COORD.
FP_COORD=$dead,$old,$new
fp_log "coordinators: $FP_COORD (only $old listens)"
fp_node_start H O
fp_node_start H R
for n in O R; do
	grep -q "coordinator $dead unreachable; trying $old" "$FP_TMP/$n.log" ||
		fp_fail "agent $n did not say it moved from $dead to $old"
	grep -q "joined $old as node" "$FP_TMP/$n.log" ||
		fp_fail "agent $n did not join through $old"
done
fp_log "ok: both agents joined through $old, the second address of the list"

# served REGION SEED WHAT: REGION made on O (4 chunks) through the list,
# filled with SEED there, and read by R, every page compared.
served() {
	local o
	o=$(fp_node_id O)
	[ -n "$o" ] || fp_fail "$3: no node id of O from status through $FP_COORD"
	fp_cli H O region create "$1" --size 8M --owners "$o,$o,$o,$o" >"$FP_TMP/c.out" 2>&1 ||
		fp_fail "create $1: $(cat "$FP_TMP/c.out")"
	fp_cli H O fill "$1" --seed "$2" >/dev/null 2>&1 || fp_fail "fill $1"
	fp_cli H R touch "$1" --seed "$2" >"$FP_TMP/t.out" 2>&1 || { cat "$FP_TMP/t.out" >&2; fp_fail "R reads $1"; }
	fp_touch_ok "$3" "$FP_TMP/t.out"
}
served r 3 "R reads r from O, made through the list"
fp_cli H O status >"$FP_TMP/st.out" 2>&1 || { cat "$FP_TMP/st.out" >&2; fp_fail "status through $FP_COORD"; }
[ "$(grep -cE '^ +[0-9]+ +(O|R) .* up ' "$FP_TMP/st.out")" = 2 ] ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "status through the list: O and R not both up"; }
fp_log "ok: status through the list shows O and R up"

# Nothing listens at either: one line per address, each named.
# shellcheck disable=SC2046
"$FP_CLI_BIN" --coordinator "$dead,$new" $(fp_insecure_flag) status >"$FP_TMP/x.out" 2>&1 &&
	{ cat "$FP_TMP/x.out" >&2; fp_fail "status with no coordinator up passed"; }
grep -q "coordinator $dead: Connection refused" "$FP_TMP/x.out" &&
	grep -q "coordinator $new: Connection refused" "$FP_TMP/x.out" ||
	{ cat "$FP_TMP/x.out" >&2; fp_fail "the CLI's error does not name each address"; }
fp_log "ok: no coordinator up: $(tr '\n' '|' <"$FP_TMP/x.out")"

o_id=$(fp_node_id O) r_id=$(fp_node_id R)
kill -KILL "$FP_COORD_PID"
wait "$FP_COORD_PID" 2>/dev/null
fp_log "coordinator on $old killed; again on $new, same data"
mark=$(wc -l <"$FP_TMP/coord.log")
fp_coord_spawn H "$new" "$FP_TMP/coord"
for n in O R; do
	fp_wait_log "$FP_TMP/$n.log" "coordinator $old unreachable; trying $new|coordinator $new reachable again" ||
		fp_fail "agent $n did not move to $new"
done
fp_log "ok: both agents moved to $new"
# A lease (5 s) and more: a node whose heartbeats the new coordinator did
# not take would be counted down by now.
sleep 7
fp_cli H O status >"$FP_TMP/st.out" 2>&1 || { cat "$FP_TMP/st.out" >&2; fp_fail "status after the move"; }
[ "$(grep -cE '^ +[0-9]+ +(O|R) .* up ' "$FP_TMP/st.out")" = 2 ] ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "after the move: O and R not both up at $new"; }
tail -n +"$((mark + 1))" "$FP_TMP/coord.log" | grep -E "is down|joined|restarted" &&
	fp_fail "the coordinator on $new counted a node down or saw it join again"
[ "$(fp_node_id O)" = "$o_id" ] && [ "$(fp_node_id R)" = "$r_id" ] ||
	fp_fail "node ids changed: O $o_id -> $(fp_node_id O), R $r_id -> $(fp_node_id R)"
for n in O R; do
	grep -q "joined $new" "$FP_TMP/$n.log" && fp_fail "agent $n joined again at $new"
	kill -0 "${FP_NODE_PID[$n]}" 2>/dev/null || fp_fail "agent $n is gone"
done
fp_log "ok: $new takes both agents' heartbeats (up after a lease, same ids, no rejoin)"
served s 4 "a region made after the move maps and reads right on R"
exit 0
