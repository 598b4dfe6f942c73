#!/bin/bash
# Replicated regions (issue 24) over many failures: FP_REPL_ROUNDS (default 20)
# seeded rounds, each killing one owner -9 while a guest writes. Four
# hosts (network namespaces on one segment; loopback hosts if namespaces
# can't be made): the coordinator (--lease-ms 3000) and the writer's agent
# W on A, owners O1 on B, O2 on C, O3 on D, and the reader's agent RD on D.
# W and RD have 2 MiB pools that a one-replica region fills, so every
# replica is on O1, O2 or O3 (placement and rebuild take nodes with room).
# r (FP_REPL_MB, default 16 MiB, --replicas 2) has two replicas of each
# chunk on two of the three owners. Seed printed at the start (FP_SEED to
# repeat a run). Every page is written with seed SEED * 1000 first; round
# k, seed S = SEED * 1000 + k (each round writes other bytes, so a replica
# that missed a round's writes is found):
#  1. A guest on W writes S's pattern into every page of r (4 threads,
#     random order), verifies it and flushes; the victim (the next of
#     O1, O2, O3 in turn that holds a replica of r) is killed -9 at a
#     seeded moment 0..0.5 s after the guest mapped r. Odd rounds restart
#     it at once (same name and host, a new instance: the coordinator
#     drops its replicas when it joins); even rounds leave it dead (the
#     coordinator drops them when its lease runs out) and start it again
#     after the round, so that every round has three owners (room for
#     every rebuild). The writer: 0 SIGBUS, 0 wrong, 0 zero, every page,
#     the flush succeeds.
#  2. A guest on RD reads every page (4 threads): every page seed S.
#  3. The coordinator logs the victim's replicas leaving their sets (rgen
#     G), then (fp_repl state) r is back to 2 SYNC replicas of every chunk
#     at an rgen past G, with no command.
#  4. fp_repl compare reads both replicas of every chunk straight from the
#     owners' pools (their memfds through /proc/PID/fd): the two replicas
#     hold the same bytes, page by page, and every page is seed S.
# A live owner briefly seen down (a starved heartbeat) only adds replicas
# to rebuild: step 3 waits for all of them (a victim left dead is started
# again at once then: its pool may be the only room for them) and step 4
# compares whatever the layout is then; a compare that saw the layout
# change under it is made again. FP_REPLICAS=1 runs it with one replica:
# it fails in the first round (the writer gets SIGBUS: the owner of some
# of its pages restarted; or, killed after the writes, its flush fails
# with EIO), which shows it can.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
SEED=${FP_SEED:-$RANDOM}
R=${FP_REPLICAS:-2}
ROUNDS=${FP_REPL_ROUNDS:-20}
MB=${FP_REPL_MB:-16}
PAGES=$((MB << 8))
fp_log "seed $SEED, replicas $R, rounds $ROUNDS, $MB MiB"
RANDOM=$SEED
fp_hosts_lan A B C D || fp_hosts_loopback A B C D
fp_coord_start A --lease-ms 3000
OWNERS=(O1 O2 O3)
declare -A HOST=([O1]=B [O2]=C [O3]=D)
OPOOL=$((MB * 2 + 16))M
for o in "${OWNERS[@]}"; do fp_node_start "${HOST[$o]}" "$o" --pool-size "$OPOOL"; done
fp_node_start A W --writeback-ms 100 --pool-size 2M
fp_node_start D RD --pool-size 2M
for n in W RD; do
	[ -n "$(fp_node_id_log "$n")" ] || fp_fail "no node id of $n"
	fp_cli A W region create "pad$n" --size 2M --owners "$(fp_node_id_log "$n")" >"$FP_TMP/c.out" 2>&1 ||
		fp_fail "create pad$n: $(cat "$FP_TMP/c.out")"
done
fp_cli A W region create r --size "${MB}M" --replicas "$R" \
	--nodes "$(fp_node_id_log O1),$(fp_node_id_log O2),$(fp_node_id_log O3)" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/c.out")"
fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st.out")"
grep -q "^state: replicas=$R " "$FP_TMP/st.out" || { cat "$FP_TMP/st.out" >&2; fp_fail "r has not $R replicas"; }
# replicas of r on node $1 in $FP_TMP/st.out
held() { grep -cE "^rec: [0-9]+ [0-9]+ $1 " "$FP_TMP/st.out"; }
# lines in the coordinator's log matching $1
coord_count() { grep -cE "$1" "$FP_TMP/coord.log"; }

# compare SEED: both replicas of every chunk, from the live owners' pools
compare() {
	local o ids=()
	for o in "${OWNERS[@]}"; do
		kill -0 "${FP_NODE_PID[$o]}" 2>/dev/null && ids+=("$(fp_node_id_log "$o")=${FP_NODE_PID[$o]}")
	done
	fp_repl compare "$FP_COORD" r "$1" "${ids[@]}" >"$FP_TMP/cmp.out" 2>&1
}

# start_again: the dead victim V again (a new instance), joined
start_again() {
	local joined
	joined=$(coord_count "node $VID \($V\) joined")
	fp_node_start "${HOST[$V]}" "$V" --pool-size "$OPOOL"
	fp_wait_log "$FP_TMP/coord.log" "node $VID \($V\) joined" 60 $((joined + 1)) ||
		fp_fail "round $k: $V did not join again"
}

# round 0: every page written once (seed SEED * 1000), nothing killed
fp_cli A W touch r --write --seed $((SEED * 1000)) --threads 4 >"$FP_TMP/w0.out" 2>&1
fp_touch_ok "round 0: writer" "$FP_TMP/w0.out"

mid=0 # victims killed while the writer still ran
v=0
for ((k = 1; k <= ROUNDS; k++)); do
	S=$((SEED * 1000 + k))
	restart=$((k % 2))
	fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 || fp_fail "round $k: state of r: $(cat "$FP_TMP/st.out")"
	# the victim: the next owner in turn that holds a replica of r
	for ((i = 0; i < 3; i++)); do
		V=${OWNERS[$(((v + i) % 3))]}
		[ "$(held "$(fp_node_id_log "$V")")" -gt 0 ] && break
	done
	v=$(((v + i + 1) % 3))
	VID=$(fp_node_id_log "$V")
	LEFT="region 'r': [0-9]+ replicas on node $VID \($V\) left their sets"
	ANYLEFT="region 'r': [0-9]+ replicas on node [0-9]+ \(.*\) left their sets"
	nleft=$(coord_count "$LEFT") nany=$(coord_count "$ANYLEFT")
	fp_log "round $k: seed $S, kill -9 $V (node $VID, $(held "$VID") replicas)$([ $restart = 1 ] && echo ', restarted at once')"

	# 1. the writer, and the victim killed under it
	fp_cli A W touch r --write --seed "$S" --threads 4 --order rand >"$FP_TMP/w$k.out" 2>&1 &
	wp=$!
	FP_PIDS+=("$wp")
	fp_wait_log "$FP_TMP/W.log" 'mapped region r ' 30 $((k + 1)) || fp_fail "round $k: the writer did not map r"
	# a seeded moment within the writes (randomness, not synchronisation)
	sleep "0.$(printf %03d $((RANDOM % 500)))"
	during=after
	kill -0 "$wp" 2>/dev/null && during=during && mid=$((mid + 1))
	kill -KILL "${FP_NODE_PID[$V]}"
	fp_log "round $k: $V killed $during the writes"
	wait "${FP_NODE_PID[$V]}" 2>/dev/null
	[ "$restart" = 1 ] && fp_node_start "${HOST[$V]}" "$V" --pool-size "$OPOOL"
	fp_wait_pid "$wp" 180
	wrc=$?
	[ "$wrc" = 0 ] || { cat "$FP_TMP/w$k.out" >&2; fp_fail "round $k (seed $SEED): the writer failed (rc $wrc) when $V died"; }
	fp_touch_ok "round $k: writer, $V killed" "$FP_TMP/w$k.out"
	[ "$(fp_field "$FP_TMP/w$k.out" touch: pages)" = "$PAGES" ] || fp_fail "round $k: the writer did not write every page"

	# 2. a reader elsewhere
	fp_cli D RD touch r --seed "$S" --threads 4 --order rand >"$FP_TMP/r$k.out" 2>&1
	# wrong pages: the compare (steps 3, 4) says where they came from
	rbad=""
	if [ "$(fp_field "$FP_TMP/r$k.out" touch: sigbus)" = 0 ] &&
		[ "$(fp_field "$FP_TMP/r$k.out" touch: pages)" = "$PAGES" ] &&
		[ "$(fp_field "$FP_TMP/r$k.out" touch: wrong)$(fp_field "$FP_TMP/r$k.out" touch: zero)" != 00 ]; then
		cat "$FP_TMP/r$k.out" >&2
		rbad="wrong=$(fp_field "$FP_TMP/r$k.out" touch: wrong) zero=$(fp_field "$FP_TMP/r$k.out" touch: zero)"
		fp_log "round $k (seed $SEED): the reader read $rbad pages: on to the compare"
	else
		fp_touch_ok "round $k: reader" "$FP_TMP/r$k.out"
		[ "$(fp_field "$FP_TMP/r$k.out" touch: pages)" = "$PAGES" ] || fp_fail "round $k: the reader did not read every page"
	fi

	# 3. the victim's replicas left their sets, and were rebuilt
	fp_wait_log "$FP_TMP/coord.log" "$LEFT" 60 $((nleft + 1)) ||
		fp_fail "round $k: the coordinator never dropped $V's replicas"
	G=$(grep -E "$LEFT" "$FP_TMP/coord.log" | tail -n1 | sed -n 's/.*(rgen \([0-9]*\)).*/\1/p')
	for ((try = 1; ; try++)); do
		end=$(fp_deadline 120)
		ok=0
		while [ "$(date +%s)" -le "$end" ]; do
			# A live owner seen down (starved) while V is dead: its
			# replicas may have nowhere to go but V, so V comes back
			# now.
			if [ "$restart" = 0 ] && ! kill -0 "${FP_NODE_PID[$V]}" 2>/dev/null &&
				[ $(($(coord_count "$ANYLEFT") - nany)) -gt $(($(coord_count "$LEFT") - nleft)) ]; then
				fp_log "round $k: a live owner was seen down: $V started again before the rebuild"
				start_again
			fi
			fp_repl_synced r "$G" && { ok=1; break; }
			sleep 0.1
		done
		[ "$ok" = 1 ] || { cat "$FP_TMP/st.out" >&2; fp_fail "round $k (seed $SEED): r never came back to $R in-sync replicas"; }

		# 4. the replicas' bytes, page by page
		compare "$S:$((S - 1))" && break
		cat "$FP_TMP/cmp.out" >&2
		G=$(fp_field "$FP_TMP/cmp.out" compare: rgen)
		fp_repl state "$FP_COORD" r >"$FP_TMP/st.out" 2>&1 || fp_fail "round $k: state of r: $(cat "$FP_TMP/st.out")"
		# The same layout before and after: the bytes differ for real.
		# shellcheck disable=SC2015
		[ -n "$G" ] && [ "$(fp_field "$FP_TMP/st.out" state: rgen)" != "$G" ] && [ "$try" -lt 5 ] ||
			fp_fail "round $k (seed $SEED, victim $V$([ $restart = 1 ] && echo ', restarted')): the replicas of r differ from each other or from seed $S"
		fp_log "round $k: the layout changed under the compare (rgen $G -> $(fp_field "$FP_TMP/st.out" state: rgen)): again"
	done
	[ -z "$rbad" ] || { cat "$FP_TMP/cmp.out" >&2; fp_fail "round $k (seed $SEED, victim $V$([ $restart = 1 ] && echo ', restarted')): the reader read $rbad pages, while the replicas agree now"; }
	fp_log "ok: round $k: $(tail -n1 "$FP_TMP/cmp.out")"

	# back for the next rounds: a new instance with an empty pool
	[ "$restart" = 0 ] && ! kill -0 "${FP_NODE_PID[$V]}" 2>/dev/null && start_again
done
fp_log "ok: $ROUNDS rounds, $mid victims killed while the writer ran"
fp_log "rebuild tasks done: $(cat "$FP_TMP"/O*.log | grep -cE 'rebuild task [0-9]+ done')"
exit 0
