#!/bin/bash
# Big regions (loopback): a guest maps regions of 16, 64 and 256 GiB whose
# chunks are all on other agents, and one of 64 GiB with half its chunks in
# its own agent's pool; in each it writes 4096 pages spread over the whole
# range, flushes, unmaps, maps again read-only and verifies them (they come
# back from their owners). Pools are sparse memfds: only the pages written
# cost memory. Owners hold at most 32 GiB each (a descriptor per 2 MiB
# segment under the open-files hard limit), so 256 GiB takes 9 of them.
# The guest's and every agent's peak RSS are printed and must stay far
# below the region size (a leak or per-page-array check, not a speed test).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
# Its guests write, flush and read back from the owners.
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
ATTACK=$FP_BIN/tests/fp_attack
[ -x "$GUEST" ] && [ -x "$ATTACK" ] || fp_fail "no $GUEST or $ATTACK"

OWNERS=9
POOL=32G
# A 32 GiB pool takes 16384 descriptors, the agent's own come on top.
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge 17000 ] ||
	fp_skip "open-files hard limit $hard: a 32 GiB pool needs about 17000"
mmc=$(cat /proc/sys/vm/max_map_count)
[ "$mmc" -ge 20000 ] || fp_skip "vm.max_map_count $mmc: the half-local map needs 16384 mappings"
PAGES=4096
# Peak RSS allowed: far below any region here, far above what 4096 pages
# and the agents' own tables take.
GUEST_HWM_MAX=$((256 << 10)) # KiB
AGENT_HWM_MAX=$((512 << 10)) # KiB

fp_hosts_loopback H
fp_coord_start H
FP_POOL=$POOL fp_node_start H g --cache-size 256M
OWN=()
for ((i = 1; i <= OWNERS; i++)); do
	FP_POOL=$POOL fp_node_start H "o$i" --cache-size 64M
	OWN+=("$(fp_node_id "o$i")")
done
G=$(fp_node_id g)
ALL=$(
	IFS=,
	echo "${OWN[*]}"
)

# hwm PID: peak RSS of PID in KiB.
hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\).*/\1/p' "/proc/$1/status"; }

# big NAME SIZE NODES SEED EXPECT_LOCAL(0|1) [keep]
big() {
	local name=$1 size=$2 nodes=$3 seed=$4 want_local=$5 line rc
	fp_cli H g region create "$name" --size "$size" --nodes "$nodes" --wait 120 \
		>"$FP_TMP/create.out" 2>&1 || fp_fail "create $name: $(tail -n3 "$FP_TMP/create.out")"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[g]} "$GUEST" sparse "$name" "$seed" $PAGES \
		>"$FP_TMP/$name.out" 2>&1 &
	local pid=$!
	FP_PIDS+=("$pid")
	fp_wait_pid "$pid" 300
	rc=$?
	line=$(grep '^sparse: pages=' "$FP_TMP/$name.out")
	[ $rc = 0 ] && [ -n "$line" ] ||
		{ cat "$FP_TMP/$name.out" >&2; fp_fail "$name ($size): fp_guest exit $rc"; }
	[[ $line == "sparse: pages=$PAGES "*" verified=$PAGES wrong=0 zero=0 sigbus=0 "* ]] ||
		fp_fail "$name ($size): $line"
	local remote local_n ghwm
	remote=$(fp_field "$FP_TMP/$name.out" "sparse: pages" remote)
	local_n=$(fp_field "$FP_TMP/$name.out" "sparse: pages" local)
	if [ "$want_local" = 0 ]; then
		[ "$remote" = $PAGES ] || fp_fail "$name: $remote of $PAGES pages remote, want all"
	else
		[ "$remote" -gt $((PAGES / 4)) ] && [ "$local_n" -gt $((PAGES / 4)) ] ||
			fp_fail "$name: remote=$remote local=$local_n, want about half each"
	fi
	ghwm=$(fp_field "$FP_TMP/$name.out" "sparse: pages" hwm_kb)
	[ "$ghwm" -lt $GUEST_HWM_MAX ] || fp_fail "$name: guest peak RSS ${ghwm} KiB (bound $GUEST_HWM_MAX)"
	local rss="" n h
	for n in g $(seq -f 'o%g' 1 $OWNERS); do
		h=$(hwm "${FP_NODE_PID[$n]}")
		rss+=" $n=${h}K"
		[ "$h" -lt $AGENT_HWM_MAX ] || fp_fail "$name: agent $n peak RSS ${h} KiB (bound $AGENT_HWM_MAX)"
	done
	# The layout's cost follows the placement, not the size: the agent
	# got it from the coordinator and sent it on in runs, one per
	# interleave across the owners (a few if pools had holes), not a
	# record per chunk.
	local lay chunks runs parts
	lay=$(grep "process mapped region $name (" "$FP_TMP/g.log" | tail -n1)
	chunks=$(sed -n 's/.*layout of \([0-9]*\) chunks in.*/\1/p' <<<"$lay")
	runs=$(sed -n 's/.* chunks in \([0-9]*\) runs of.*/\1/p' <<<"$lay")
	parts=$(sed -n 's/.* runs of \([0-9]*\) parts).*/\1/p' <<<"$lay")
	[ -n "$parts" ] || fp_fail "$name: no layout line in g.log: $lay"
	[ "$chunks" = $(($(numfmt --from=iec "$size") / (2 << 20))) ] ||
		fp_fail "$name: layout of $chunks chunks"
	[ "$runs" -le 4 ] && [ "$parts" -le $((4 * OWNERS)) ] ||
		fp_fail "$name: layout of $chunks chunks in $runs runs of $parts parts (want O(owners))"
	fp_log "ok: $name ($size): $line"
	fp_log "    layout: $chunks chunks in $runs runs of $parts parts"
	fp_log "    $(grep '^sparse: map_ms' "$FP_TMP/$name.out")"
	fp_log "    agents' peak RSS:$rss"
	[ "${6:-}" = keep ] && return
	fp_cli H g region delete "$name" >"$FP_TMP/delete.out" 2>&1 ||
		fp_fail "delete $name: $(cat "$FP_TMP/delete.out")"
	# Its space is free again once its owners have cleared every chunk
	# (the coordinator logs how many extents each clear freed): the next
	# create then does not retry against a coordinator busy with the
	# clears (a slow build timed such retries out).
	CLEARED=$((CLEARED + $(numfmt --from=iec "$size") / (2 << 20)))
	local i got=0
	for ((i = 0; i < 300 * 20; i++)); do
		got=$(sed -n 's/.* \([0-9]*\) extents cleared after deletes.*/\1/p' "$FP_TMP/coord.log" |
			awk '{ s += $1 } END { print s + 0 }')
		[ "$got" -ge $CLEARED ] && break
		sleep 0.05
	done
	[ "$got" -ge $CLEARED ] || fp_fail "delete $name: $got of $CLEARED chunks cleared after 300 s"
}
CLEARED=0

big r16 16G "$ALL" 16 0
big r64 64G "$ALL" 64 0
big r256 256G "$ALL" 256 0
big h64 64G "$G,${OWN[0]}" 65 1 keep

# h64's chunks alternate between g and o1: the guest asks for g's segments
# 64 at a time as extents (one MAP_FDS, not one per chunk); extents that
# reach a chunk of o1, go backwards, overlap, do not add up to the size or
# ask for 65 segments are refused.
"$ATTACK" map-fds-ext "${FP_NODE_SOCK[g]}" h64 >"$FP_TMP/ext.out" 2>&1 ||
	{ cat "$FP_TMP/ext.out" >&2; fp_fail "map-fds-ext h64: $(grep '^map-fds-ext:' "$FP_TMP/ext.out")"; }
fp_log "ok: $(grep '^map-fds-ext:' "$FP_TMP/ext.out")"

# h64 takes 32768 mappings in the guest (16384 pool segments, 16384 runs of
# remote chunks): a guest that already holds 40000 cannot, nor one whose
# open-files limit cannot take a batch of segment descriptors. The map
# fails before mapping anything, with the limit and the fix named.
# limit_fail WHAT REGEX cmd...
limit_fail() {
	local what=$1 re=$2 rc
	shift 2
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[g]} "$@" >"$FP_TMP/limit.out" 2>&1
	rc=$?
	[ $rc = 1 ] && grep -Eq "$re" "$FP_TMP/limit.out" ||
		{ cat "$FP_TMP/limit.out" >&2; fp_fail "$what: exit $rc, no message naming the limit"; }
	fp_log "ok: $what: $(grep -Eo "$re.*" "$FP_TMP/limit.out" | head -n1)"
}
limit_fail "h64 with 40000 mappings held" "vm.max_map_count is [0-9]+: raise it" \
	"$GUEST" sparse h64 65 16 40000
limit_fail "h64 under 40 open files" "open-files limit is 40: raise it" \
	prlimit --nofile=40:40 "$GUEST" sparse h64 65 16
grep -h "sends requests without reading" "$FP_TMP"/*.log &&
	fp_fail "an agent took a waiting client for one that does not read"
grep -h "layouts come chunk by chunk" "$FP_TMP"/*.log &&
	fp_fail "an agent took the coordinator for one before layouts in runs"
fp_log "PASS"
