#!/bin/bash
# A region deleted while guests still map it (loopback, n2 owns it all and
# its pool holds exactly one such region, so the next region must reuse the
# same pool extents):
#   - a guest on another host that still maps it gets SIGBUS for pages it
#     had not fetched, never the next region's bytes
#   - the next region starts with zeroes, not the previous tenant's bytes
#   - a guest on the owner host (its chunks mapped straight from the pool)
#     keeps reading its own bytes; the space is cleared for the next region
#     only once it unmaps
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
GUEST=$FP_BIN/tests/fp_guest
fp_hosts_loopback H
fp_coord_start H
FP_POOL=64M fp_node_start H n1 --fault-timeout-ms 20000
FP_POOL=16M fp_node_start H n2
n2=$(fp_node_id n2)
OWN="$n2,$n2,$n2,$n2,$n2,$n2,$n2,$n2"
mkfifo "$FP_TMP/hold.fifo" && exec 7<>"$FP_TMP/hold.fifo" || fp_fail "fifo"

create() { # NAME [flags]: 16 MiB, all on n2
	local name=$1
	shift
	fp_cli H n1 region create "$name" --size 16M --owners "$OWN" "$@" >"$FP_TMP/create-$name.out" 2>&1
}
# hold HOST NODE REGION SEED remote|all: a guest that read half of the
# region and waits for a line on fd 7.
hold() {
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$2]} ${FP_HOST_RUN[$1]} "$GUEST" hold "$3" "$4" "$5" \
		<"$FP_TMP/hold.fifo" >"$FP_TMP/hold-$3.out" 2>&1 &
	HOLD_PID=$!
	fp_wait_log "$FP_TMP/hold-$3.out" "holding" 20 || { cat "$FP_TMP/hold-$3.out" >&2; fp_fail "holder of $3 did not start"; }
}
release() { # REGION: lets the holder go on, waits for its verdict (LINE)
	echo go >&7
	fp_wait_pid $HOLD_PID 30 || { cat "$FP_TMP/hold-$1.out" >&2; fp_fail "holder of $1 failed or hung"; }
	LINE=$(grep '^hold:' "$FP_TMP/hold-$1.out") || { cat "$FP_TMP/hold-$1.out" >&2; fp_fail "holder of $1: no result"; }
}

create A || fp_fail "create A: $(cat "$FP_TMP/create-A.out")"
fp_cli H n2 fill A --seed 1 >/dev/null 2>&1 || fp_fail "fill A"

# 1. A guest on n1 reads half of A; A is deleted and B made in its place
#    and filled. The guest's other half: SIGBUS, not B's pages.
hold H n1 A 1 remote
fp_cli H n1 region delete A >/dev/null 2>&1 || fp_fail "delete A"
create B || fp_fail "create B: $(cat "$FP_TMP/create-B.out")"
grep -q "chunk" "$FP_TMP/create-B.out" || fp_fail "create B printed no chunk map"
fp_cli H n2 fill B --seed 2 >/dev/null 2>&1 || fp_fail "fill B"
release A
[ "$(fp_field "$FP_TMP/hold-A.out" hold: wrong)" = 0 ] && [ "$(fp_field "$FP_TMP/hold-A.out" hold: zero)" = 0 ] ||
	fp_fail "a guest still mapping deleted A read wrong or zero pages: $LINE"
[ "$(fp_field "$FP_TMP/hold-A.out" hold: sigbus)" = 1 ] || fp_fail "a guest of deleted A was served: $LINE"
[ "$(fp_field "$FP_TMP/hold-A.out" hold: verified)" -ge 2048 ] || fp_fail "the half read before the delete changed: $LINE"
grep -q "region A (epoch [0-9]*) was deleted" "$FP_TMP/n1.log" || fp_fail "n1 did not say A was deleted"
fp_log "ok: guest of deleted A: $LINE"
fp_cli H n1 touch B --seed 2 >"$FP_TMP/b.out" 2>&1 || { cat "$FP_TMP/b.out" >&2; fp_fail "touch B"; }
fp_touch_ok "B, made in A's place, reads its own pages" "$FP_TMP/b.out"

# 2. B is deleted, C made in its place: C reads zeroes everywhere, from
#    the other host and on the owner itself, never B's bytes.
fp_cli H n1 region delete B >/dev/null 2>&1 || fp_fail "delete B"
create C || fp_fail "create C: $(cat "$FP_TMP/create-C.out")"
fp_cli H n1 touch C --expect-zero >"$FP_TMP/c1.out" 2>&1 || { cat "$FP_TMP/c1.out" >&2; fp_fail "C is not zero from n1"; }
fp_touch_ok "new region C reads zeroes from another host" "$FP_TMP/c1.out"
fp_cli H n2 touch C --expect-zero --local-too >"$FP_TMP/c2.out" 2>&1 || { cat "$FP_TMP/c2.out" >&2; fp_fail "C is not zero on its owner"; }
[ "$(fp_field "$FP_TMP/c2.out" touch: verified)" = 4096 ] || fp_fail "C on its owner: $(grep ^touch: "$FP_TMP/c2.out")"
fp_log "ok: new region C reads zeroes on its owner (4096 pages)"

# 3. A guest on n2 maps C (its chunks straight from n2's pool) and holds;
#    C is deleted: its space is not cleared under the guest, so D cannot
#    be placed yet; the guest reads its own bytes to the end; once it
#    unmaps, D gets the space, zeroed.
fp_cli H n2 fill C --seed 3 >/dev/null 2>&1 || fp_fail "fill C"
hold H n2 C 3 all
fp_cli H n1 region delete C >/dev/null 2>&1 || fp_fail "delete C"
create D --wait 2 && fp_fail "D was placed on extents a guest still maps"
grep -q "being cleared" "$FP_TMP/create-D.out" || fp_fail "create D: $(cat "$FP_TMP/create-D.out")"
fp_log "ok: D waits: $(grep -o "no free.*" "$FP_TMP/create-D.out" | head -n1)"
release C
[ "$(fp_field "$FP_TMP/hold-C.out" hold: verified)" = 6144 ] ||
	fp_fail "a guest mapping C from the owner's pool lost its bytes after the delete: $LINE"
fp_log "ok: guest of deleted C on its owner read its own pages to the end: $LINE"
create D || fp_fail "create D after the guest unmapped: $(cat "$FP_TMP/create-D.out")"
fp_cli H n1 touch D --expect-zero >"$FP_TMP/d.out" 2>&1 || { cat "$FP_TMP/d.out" >&2; fp_fail "D is not zero"; }
fp_touch_ok "D, in C's place after its guest left, reads zeroes" "$FP_TMP/d.out"
grep -q "extents .* of deleted regions" "$FP_TMP/n2.log" || fp_fail "n2 did not say it cleared extents"
echo "test_region_delete: all cases passed"
