#!/bin/bash
# Flushes of a replicated region after both owners of a chunk died
# (issue 35): FP_LOST_ROUNDS (default 3) seeded rounds. Four hosts
# (network namespaces on one segment; loopback hosts if namespaces can't
# be made): the coordinator (--lease-ms 3000) and the writer's agent W on
# A, owners O1 on B, O2 on C, O3 on D (--rebuild-rate 64K: a rebuild of a
# 2 MiB chunk takes half a minute), the reader's agent RD on D. W and RD
# have 2 MiB pools that a one-replica region fills, so every replica is
# on O1, O2 or O3. Seed printed at the start (FP_SEED to repeat a run).
# Round k:
#  1. r<k> (8 MiB, 4 chunks, --replicas 2 on O1, O2, O3); the victims V1,
#     V2: the two owners of a seeded chunk c, in a seeded order.
#  2. A guest on W (fp_guest wloop) writes another seed into every page
#     and flushes, again and again. V1 is killed -9 at a seeded moment
#     0..0.5 s after the guest mapped r<k>; V2 then: odd rounds once c's
#     replica on V1 is being rebuilt from V2 onto the third owner (from
#     then on c's only copy but V2's is a REBUILDING one, which never
#     comes into sync), plus a seeded 0..0.5 s; even rounds at a seeded
#     0..0.5 s after V1 (the coordinator may or may not start that
#     rebuild before it has V2 down too).
#  3. Once the coordinator has both victims down (their leases ran out;
#     its layout of r<k> is then at rgen G) and W's agent has a layout of
#     r<k> of rgen G or later, c has no replica in sync and the guest is
#     told: its next FP_LOST_AFTER (default 5) flushes and its unmap must
#     each return -EIO (0 of them 0), and its agent's answer names the
#     lost chunks.
#  4. A guest on RD reads every page: each page of a lost chunk raises
#     SIGBUS, every other page holds the writer's last seed (its pages
#     went home through every failed flush).
#  5. The victims start again (new instances), r<k> is deleted.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
SEED=${FP_SEED:-$RANDOM}
ROUNDS=${FP_LOST_ROUNDS:-3}
AFTER=${FP_LOST_AFTER:-5}
CPAGES=512 # pages of a 2 MiB chunk
EIO=-5
fp_log "seed $SEED, rounds $ROUNDS, $AFTER flushes after each loss"
RANDOM=$SEED
fp_hosts_lan A B C D || fp_hosts_loopback A B C D
fp_coord_start A --lease-ms 3000
OWNERS=(O1 O2 O3)
declare -A HOST=([O1]=B [O2]=C [O3]=D)
OPOOL=$((ROUNDS * 16 + 32))M
for o in "${OWNERS[@]}"; do fp_node_start "${HOST[$o]}" "$o" --pool-size "$OPOOL" --rebuild-rate 64K; done
fp_node_start A W --writeback-ms 100 --pool-size 2M
fp_node_start D RD --pool-size 2M
for n in W RD; do
	[ -n "$(fp_node_id_log "$n")" ] || fp_fail "no node id of $n"
	fp_cli A W region create "pad$n" --size 2M --owners "$(fp_node_id_log "$n")" >"$FP_TMP/c.out" 2>&1 ||
		fp_fail "create pad$n: $(cat "$FP_TMP/c.out")"
done
mkfifo "$FP_TMP/g.fifo" || fp_fail "fifo"
# a seeded moment, 0..0.5 s (randomness, not synchronisation)
moment() { sleep "0.$(printf %03d $((RANDOM % 500)))"; }
# owner name of node id $1
name_of() {
	local o
	for o in "${OWNERS[@]}"; do [ "$(fp_node_id_log "$o")" = "$1" ] && echo "$o"; done
}
# the newest rgen of r$k W's agent has
w_rgen() {
	sed -n "s/.*map r$k: replica layout generation [0-9]* -> \([0-9]*\) .*/\1/p" "$FP_TMP/W.log" |
		sort -n | tail -n1
}
# chunks of r$k with no replica in sync, in $FP_TMP/st.out
lost_chunks() {
	awk '$1 == "rec:" { if ($6 == 0) s[$2] = 1; else if (!($2 in s)) s[$2] = 0 }
		END { for (c in s) if (!s[c]) print c }' "$FP_TMP/st.out" | sort -n | tr '\n' ' '
}

total_after=0 total_zero=0
declare -A DOWN # "is down" lines of each victim before its kill
for ((k = 1; k <= ROUNDS; k++)); do
	mid=$((k % 2))
	# 1. the region and its victims
	fp_cli A W region create "r$k" --size 8M --replicas 2 \
		--nodes "$(fp_node_id_log O1),$(fp_node_id_log O2),$(fp_node_id_log O3)" >"$FP_TMP/c.out" 2>&1 ||
		fp_fail "round $k: create r$k: $(cat "$FP_TMP/c.out")"
	fp_repl state "$FP_COORD" "r$k" >"$FP_TMP/st.out" 2>&1 || fp_fail "round $k: state of r$k: $(cat "$FP_TMP/st.out")"
	c=$((RANDOM % 4))
	mapfile -t ids < <(awk -v c="$c" '$1 == "rec:" && $2 == c { print $4 }' "$FP_TMP/st.out")
	[ "${#ids[@]}" = 2 ] || { cat "$FP_TMP/st.out" >&2; fp_fail "round $k: chunk $c has not 2 replicas"; }
	[ $((RANDOM % 2)) = 1 ] && ids=("${ids[1]}" "${ids[0]}")
	V1=$(name_of "${ids[0]}") V2=$(name_of "${ids[1]}")
	if [ -z "$V1" ] || [ -z "$V2" ] || [ "$V1" = "$V2" ]; then fp_fail "round $k: chunk $c on nodes ${ids[*]}"; fi
	for o in "${OWNERS[@]}"; do [ "$o" != "$V1" ] && [ "$o" != "$V2" ] && V3=$o; done
	base=$(((SEED * 100 + k) * 100000))
	fp_log "round $k: chunk $c on $V1 and $V2: kill -9 $V1, then $V2 $([ $mid = 1 ] && echo "once c is rebuilding onto $V3" || echo "at once"); seeds from $base"

	# 2. the writer, and the victims killed under it
	exec 7<>"$FP_TMP/g.fifo"
	${FP_HOST_RUN[A]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$GUEST" wloop "r$k" "$base" "$AFTER" \
		<"$FP_TMP/g.fifo" >"$FP_TMP/g$k.out" 2>&1 &
	gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$FP_TMP/g$k.out" '^wloop: k=0 ' 60 || { cat "$FP_TMP/g$k.out" >&2; fp_fail "round $k: the writer did not write and flush"; }
	grep -q '^wloop: k=0 .* flush=0 ' "$FP_TMP/g$k.out" || { cat "$FP_TMP/g$k.out" >&2; fp_fail "round $k: the first flush failed"; }
	for v in "$V1" "$V2"; do DOWN[$v]=$(grep -cE "node $(fp_node_id_log "$v") \($v\) is down" "$FP_TMP/coord.log"); done
	moment
	kill -KILL "${FP_NODE_PID[$V1]}"
	wait "${FP_NODE_PID[$V1]}" 2>/dev/null
	if [ "$mid" = 1 ]; then
		end=$(fp_deadline 60)
		until fp_repl state "$FP_COORD" "r$k" >"$FP_TMP/st.out" 2>&1 &&
			grep -qE "^rec: $c [01] $(fp_node_id_log "$V3") [^ ]+ 2$" "$FP_TMP/st.out"; do
			[ "$(date +%s)" -le "$end" ] || { cat "$FP_TMP/st.out" >&2; fp_fail "round $k: chunk $c never rebuilding onto $V3"; }
			sleep 0.1
		done
	fi
	moment
	kill -KILL "${FP_NODE_PID[$V2]}"
	wait "${FP_NODE_PID[$V2]}" 2>/dev/null
	fp_log "round $k: $V1 and $V2 killed at writer round $(grep -c '^wloop: k=' "$FP_TMP/g$k.out")"

	# 3. the loss, as the coordinator and W's agent see it: both victims
	# down (their lease ran out: every replica of theirs left its set
	# then, if the writer's report had not taken it out before)
	for v in "$V1" "$V2"; do
		fp_wait_log "$FP_TMP/coord.log" "node $(fp_node_id_log "$v") \($v\) is down" 60 $((${DOWN[$v]} + 1)) ||
			fp_fail "round $k: the coordinator never had $v down"
	done
	fp_repl state "$FP_COORD" "r$k" >"$FP_TMP/st.out" 2>&1 || fp_fail "round $k: state of r$k"
	G=$(fp_field "$FP_TMP/st.out" state: rgen)
	end=$(fp_deadline 60)
	until [ "$(w_rgen)" -ge "$G" ] 2>/dev/null; do
		[ "$(date +%s)" -le "$end" ] || fp_fail "round $k: W's agent never had r$k's layout of rgen $G"
		sleep 0.1
	done
	fp_repl state "$FP_COORD" "r$k" >"$FP_TMP/st.out" 2>&1 || fp_fail "round $k: state of r$k"
	lost=$(lost_chunks)
	[[ " $lost" == *" $c "* ]] || { cat "$FP_TMP/st.out" >&2; fp_fail "round $k: chunk $c is not lost (lost: '$lost')"; }
	fp_log "round $k: lost chunks $lost(rgen $G, W at $(w_rgen)); the writer is told"
	echo lost >&7
	fp_wait_pid "$gp" 180 || { cat "$FP_TMP/g$k.out" >&2; fp_fail "round $k: the writer did not end"; }
	exec 7>&-
	out=$FP_TMP/g$k.out
	grep -q '^wloop: end ' "$out" || { cat "$out" >&2; fp_fail "round $k: the writer ended without its end line"; }
	after=$(grep -c '^wloop: k=.* told=1 ' "$out")
	zero=$(grep -c '^wloop: k=.* flush=0 told=1 ' "$out")
	other=$(grep '^wloop: k=.* told=1 ' "$out" | grep -vc " flush=$EIO ")
	total_after=$((total_after + after)) total_zero=$((total_zero + zero))
	fp_log "round $k: $zero of $after flushes after the loss returned 0, $other not -EIO; $(grep '^wloop: unmap=' "$out")"
	[ "$after" = "$AFTER" ] || { cat "$out" >&2; fp_fail "round $k: $after flushes after the loss, not $AFTER"; }
	if [ "$zero" != 0 ] || [ "$other" != 0 ]; then
		cat "$out" >&2
		fp_fail "round $k (seed $SEED): $zero of $after flushes after the loss of chunks ${lost}returned 0, $other something else than -EIO"
	fi
	grep -q "^wloop: unmap=$EIO " "$out" || { cat "$out" >&2; fp_fail "round $k (seed $SEED): the unmap after the loss did not return -EIO"; }
	grep -qE "region r$k: [0-9]+ chunk\(s\) lost every replica \(chunk [0-9, ]*\b$c\b" "$out" ||
		{ cat "$out" >&2; fp_fail "round $k: the flush's error does not name lost chunk $c"; }
	grep -q 'restarted' "$out" && { cat "$out" >&2; fp_fail "round $k: the flush's error blames a restart"; }

	# 4. what went home: the last seed on every chunk that survives
	last=$(fp_field "$out" "wloop: end" last)
	${FP_HOST_RUN[D]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[RD]}" "$GUEST" wverify "r$k" "$last" >"$FP_TMP/v$k.out" 2>&1 ||
		{ cat "$FP_TMP/v$k.out" >&2; fp_fail "round $k: the reader failed"; }
	bad=$(awk '$1 == "wverify:" && NF == 4 && $4 != "s0" && $4 != "bus" && $4 != "skip"' "$FP_TMP/v$k.out")
	[ -z "$bad" ] || { cat "$FP_TMP/v$k.out" >&2; fp_fail "round $k (seed $SEED): pages not of the last seed $last: $bad"; }
	gone=$(awk '$1 == "wverify:" && NF == 4 && ($4 == "bus" || $4 == "skip") { n += $3 - $2 + 1 } END { print n + 0 }' "$FP_TMP/v$k.out")
	nlost=$(echo "$lost" | wc -w)
	[ "$gone" = $((nlost * CPAGES)) ] ||
		{ cat "$FP_TMP/v$k.out" >&2; fp_fail "round $k: $gone pages raised SIGBUS, not the $((nlost * CPAGES)) of the $nlost lost chunks"; }
	for ch in $lost; do
		awk -v f=$((ch * CPAGES)) '$1 == "wverify:" && $2 == f && $4 == "bus"' "$FP_TMP/v$k.out" | grep -q . ||
			{ cat "$FP_TMP/v$k.out" >&2; fp_fail "round $k: lost chunk $ch does not raise SIGBUS"; }
	done
	fp_log "ok: round $k: $((4 * CPAGES - gone)) pages of the surviving chunks hold seed $last, $gone of the lost ones raise SIGBUS"

	# 5. the victims again (new instances), the region gone
	for v in "$V1" "$V2"; do
		joined=$(grep -cE "node [0-9]+ \($v\) joined" "$FP_TMP/coord.log")
		fp_node_start "${HOST[$v]}" "$v" --pool-size "$OPOOL" --rebuild-rate 64K
		fp_wait_log "$FP_TMP/coord.log" "node [0-9]+ \($v\) joined" 60 $((joined + 1)) || fp_fail "round $k: $v did not join again"
	done
	fp_cli A W region delete "r$k" >"$FP_TMP/d.out" 2>&1 || fp_fail "round $k: delete r$k: $(cat "$FP_TMP/d.out")"
done
fp_log "ok: $ROUNDS rounds: $total_zero of $total_after flushes after a loss returned 0"
exit 0
