#!/bin/bash
# Seeded chaos: a two-host cluster (network namespaces joined by a veth pair,
# loopback hosts if namespaces can't be made), the coordinator on host A with
# a data dir, agent "a" on host A and agent "b" on host B, two data regions
# whose chunks alternate between a and b, filled with a known pattern (most
# on both hosts, some on one host only: then only the other host maps them,
# and its agent has no layout of them cached before the first guest does).
# Agents "o1" on host A and "o2" on host B only own the writer rounds'
# regions (below). Every agent sends written pages home every 200 ms.
#
# Reader rounds (two of every three) start 1-4 guests (`farpage touch`
# with various --order, --threads, --prefetch, --local-too, on either host,
# each after a random delay) and, at a random moment after the first one
# started, kill -9 none, one or two of: the owner's agent, the guest's own
# agent, the coordinator. What was killed is restarted (the coordinator on
# the same address and data dir; agents under the same name, on the same or
# a new data port; sometimes the agents before the coordinator is back), at
# once, under the guests, or after they ended. Some rounds also delete a region a
# guest maps and create and fill another one (which may reuse its pool
# space), and a control-plane client creates and deletes small regions
# meanwhile. A restarted agent's pool is empty: the chunks it had are lost;
# between rounds such regions are mostly deleted and made again, some are
# kept for a round so that guests meet their lost chunks.
# About a third of the data regions made are replicated instead
# (`--replicas 2`, every chunk on o1 and o2, filled by a guest writing
# through a): guests on either host read them while one replica's owner
# is killed -9 (or both, or the guest's agent, the coordinator) and
# restarted; the coordinator rebuilds the lost replicas on other agents
# meanwhile (also on a or b), so each round takes the replicas' places
# from the coordinator (fp_repl state) before it starts. FP_CHAOS_REPL_PCT
# sets the share (percent, default 33). Not in copy mode (a guest's
# writes do not leave it there, so nothing could fill them).
#
# What must hold in reader rounds, whatever happens:
#  - every guest either passes with every page verified or fails loudly: a
#    SIGBUS, or a clean error message with a non-zero exit; never a wrong or
#    a zero page (wrong=0 zero=0 wherever a result line was printed), never
#    a crash, never a hang (--hang-s);
#  - a bad event costs only what it hits: a guest nothing was done to
#    passes; one under which only the coordinator died passes or gets a
#    clean error, never a SIGBUS; one whose region has chunks an agent
#    restart lost does not pass (SIGBUS or a clean error);
#  - a guest of a replicated region passes when every chunk kept an
#    in-sync replica on an agent not killed in the round, whichever
#    replica owners died (reads fail over): only its own agent's death,
#    the loss of every in-sync replica of a chunk, or its region's delete
#    under it excuse it (then anything but a wrong or zero page, a crash
#    or a hang), and the coordinator's death a clean error; a replicated
#    region with a chunk left without an in-sync replica is made again;
#  - every daemon that was not killed in a round still runs at its end, and
#    a restarted one comes up;
#  - every region change the coordinator acknowledged survives its restart:
#    acknowledged creates are listed, acknowledged deletes are not, and the
#    data regions' chunk tables are as created.
#
# Writer rounds (every third round). A region w (8 or 12 MiB, its 2 MiB
# chunks on o1 and o2 at random, both) is filled with seed s0 by its
# owners: every page is remote to both writers and goes home by write-back.
# W1 (fp_guest wplay) on one host maps w writable, writes seed s1 into a
# seeded set of pages, flushes, sometimes holds its mapping until W2 has
# ended, sometimes writes s2 into another set and flushes again, and
# unmaps. W2 on the other host starts at a seeded moment after one of W1's
# markers (its map, the start or the end of its first flush) and asks for
# the write lease every 50-200 ms for up to 3 s (9 s in a sanitizer build);
# once it has it, it writes s3 into a set, flushes and unmaps. Killed -9 at
# a seeded delay after W1's map (while it writes, with write-backs in
# flight), the start of W1's first or second flush, or the start of W2's
# flush: none, W1's agent, an owner, W1's agent and an owner, W2's agent,
# both owners, or both writers' agents; restarted under the writers (after
# a seeded delay) or after them. Then w is read on either host (fp_guest
# wverify: the seed each page's words are from) and deleted.
#
# The rule a writer round is judged by, per page p of w. A flush or an
# unmap that returned 0 acknowledges each page its writer wrote before it
# (not one whose write raised SIGBUS) with the seed it last wrote there.
# Writers hold the lease one after the other: W1 first (W2 starts after
# W1's map), W2 only once W1's lease was given back or lost. E(p) is the
# seed of the last acknowledgement of p by the latest holder that has one
# (s0 if none). M(p) holds the seeds written to p and never acknowledged
# (their writer was told: its flush or unmap failed, or that write raised
# SIGBUS), by that holder after that acknowledgement or by a later holder;
# an earlier holder's unacknowledged writes are not in it (the owner
# refuses the older generation once the later holder wrote the page).
#  - the owner's pool holds E(p) on every word when M(p) is empty; else
#    each word is one of E(p) and M(p) (a writer that was told may have
#    sent part of a page, or its older bytes). Never zeros, never another
#    seed, never a mix with no unacknowledged write;
#  - a page whose owner was killed (restarted with an empty pool) raises
#    SIGBUS when read, never returns bytes;
#  - one holder at a time: no flush or unmap of W1 that was called after
#    W2's writable map returned may return 0;
#  - each writer ends (no hang: the hang bound, twice for W1 whose hold
#    waits for W2, plus W2's lease budget), never crashes, never gets
#    SIGSEGV writing; W1's map succeeds (the fillers' lease is back); W2's
#    succeeds or gets -EBUSY, or, when something was killed, another error;
#  - every daemon not killed still runs, as in reader rounds.
# With FP_FAULT_MODE=copy, writes stay in the writers' processes (flushes
# say -EOPNOTSUPP): every page must hold s0.
#
#   tests/integration/test_chaos.sh [--seed N] [--rounds N] [--hang-s N]
#                                   [--writers N] [--stop] [--verbose]
#                                   [--keep DIR]
#
# --seed N   replay a run (default: random); the seed is printed first and
#            in every failure message. Choices and delays come from it (the
#            scheduling of the processes does not, so a replay makes the same
#            events at the same planned moments, not always the same bug).
# --rounds N rounds (default 30; FP_CHAOS_ROUNDS too).
# --writers N every N-th round is a writer round (default 3; 1: all of them;
#            0: none).
# --hang-s N a guest running longer than N s is a hang (default 20, 60 in a
#            sanitizer build).
# --stop     stop after the first failing round (default: run every round
#            and list every failure at the end).
# --verbose  each guest's result line and the round's timings too.
# --keep DIR copy the daemons' logs and the guests' outputs to DIR.
# One line per round, then
#   chaos: seed=S rounds=N guests=N passed=N sigbus=N clean_errors=N wrong=N zero=N
#          writer_rounds=N bad_pages=N repl_guests=N repl_passed=N failures=N time=S
# Exit status: 0 if nothing failed, 1 on any failure, 77 if the host can't run it.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ROUNDS=${FP_CHAOS_ROUNDS:-30}
WEVERY=3
SEED=""
HANG_S=""
VERBOSE=${FP_VERBOSE:-0}
STOP=0
KEEP=""
while [ $# -gt 0 ]; do
	case $1 in
	--seed) SEED=$2; shift 2 ;;
	--rounds) ROUNDS=$2; shift 2 ;;
	--hang-s) HANG_S=$2; shift 2 ;;
	--writers) WEVERY=$2; shift 2 ;;
	--verbose) VERBOSE=1; shift ;;
	--stop) STOP=1; shift ;;
	--keep) KEEP=$2; shift 2 ;;
	-h|--help) sed -n '2,/^set -uo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
	*) echo "test_chaos: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$SEED" ] || SEED=$(($(od -An -N4 -tu4 /dev/urandom) % 1000000000 + 1))
[[ $SEED =~ ^[0-9]+$ && $ROUNDS =~ ^[0-9]+$ && $WEVERY =~ ^[0-9]+$ ]] || { echo "test_chaos: --seed, --rounds and --writers take numbers" >&2; exit 2; }
echo "chaos: seed=$SEED rounds=$ROUNDS (replay: FARPAGE_BIN=${FARPAGE_BIN:-build} bash tests/integration/test_chaos.sh --seed $SEED --rounds $ROUNDS)"
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
ROUND=setup
# Every failure, also lib.sh's own, names the seed.
fp_fail() {
	fp_log "FAIL (chaos seed=$SEED round=$ROUND): $*"
	fp_dump_logs
	chaos_keep
	exit 1
}
# --keep DIR: the run's logs and guest outputs are copied there at the end.
chaos_keep() {
	[ -n "$KEEP" ] || return 0
	mkdir -p "$KEEP" && cp -r "$FP_TMP"/. "$KEEP"/ 2>/dev/null
	echo "chaos: logs and guest outputs kept in $KEEP"
}
fp_require

if [ -z "$HANG_S" ]; then
	HANG_S=20
	grep -qE '^FARPAGE_SANITIZE:[A-Z]*=.+' "$FP_BIN/CMakeCache.txt" 2>/dev/null && HANG_S=60
fi

# ---------------------------------------------------------------- the dice
# A 64-bit LCG of our own: $RANDOM is also used by lib.sh, and command
# substitutions would run it in subshells. chaos_rand N sets R to 0..N-1.
RNG=$SEED
chaos_rand() {
	RNG=$((RNG * 6364136223846793005 + 1442695040888963407))
	R=$((((RNG >> 33) & 0x7fffffff) % $1))
}
# chaos_pick A B C...: R = one of the arguments.
chaos_pick() {
	chaos_rand $#
	shift "$R"
	R=$1
}
now_ms() {
	local t=${EPOCHREALTIME//[.,]/}
	NOW=$((t / 1000))
}
ms_s() { printf -v S '%d.%03d' $(($1 / 1000)) $(($1 % 1000)); }

# ----------------------------------------------------------- bookkeeping
FAILS=()
ROUND_FAILED=0
N_GUESTS=0 N_PASS=0 N_SIGBUS=0 N_CLEAN=0 N_WRONG=0 N_ZERO=0 N_WROUNDS=0 N_WPAGES_BAD=0
N_RGUESTS=0 N_RPASS=0
declare -A LOGOFF SANSEEN
# The last lines of the daemons' logs from this round that say something.
chaos_round_logs() {
	local d f
	for d in coord a b o1 o2; do
		f=$FP_TMP/$d.log
		[ -f "$f" ] || continue
		echo "    --- $d.log (this round, warnings and errors, last 15)"
		tail -n +"$((${LOGOFF[$d]:-0} + 1))" "$f" |
			grep -E 'warning|error|fatal|Sanitizer|runtime error|restarted|lost|poison|SIGBUS|joined' |
			tail -n 15 | sed 's/^/    /'
	done
}
# chaos_failure TEXT [FILE]: one failure of this round, with FILE's tail.
chaos_failure() {
	FAILS+=("seed=$SEED round=$ROUND: $1")
	ROUND_FAILED=1
	echo "chaos: FAIL seed=$SEED round=$ROUND: $1"
	if [ -n "${2:-}" ] && [ -f "$2" ]; then
		echo "    --- $(basename "$2") (last 12 lines)"
		tail -n 12 "$2" | sed 's/^/    /'
	fi
}

# ----------------------------------------------------------------- daemons
if fp_hosts_netns A B; then
	PLACEMENT="network namespaces ${FP_HOST_IP[A]}/${FP_HOST_IP[B]}"
else
	fp_log "chaos: cannot create network namespaces; using loopback hosts"
	fp_hosts_loopback A B
	PLACEMENT=loopback
fi
declare -A HOST_OF=([a]=A [b]=B [o1]=A [o2]=B) AGENT_OF=([A]=a [B]=b) OTHER=([a]=b [b]=a) OTHERH=([A]=B [B]=A)
declare -A FT ID
export FP_POOL=128M
fp_coord_start A
COORD_PID=$FP_COORD_PID
chaos_rand 1001; FT[a]=$((1000 + R))
chaos_rand 1001; FT[b]=$((1000 + R))
chaos_rand 1001; FT[o1]=$((1000 + R))
chaos_rand 1001; FT[o2]=$((1000 + R))
# Every agent sends written pages home every 200 ms (the writers' agents
# a and b then have write-backs in flight while their guests write).
WB_MS=200
fp_node_start A a --fault-timeout-ms "${FT[a]}" --writeback-ms $WB_MS
fp_node_start B b --fault-timeout-ms "${FT[b]}" --writeback-ms $WB_MS
fp_node_start A o1 --fault-timeout-ms "${FT[o1]}" --writeback-ms $WB_MS
fp_node_start B o2 --fault-timeout-ms "${FT[o2]}" --writeback-ms $WB_MS
echo "chaos: $PLACEMENT, coordinator $FP_COORD on A, fault timeouts a=${FT[a]} b=${FT[b]} o1=${FT[o1]} o2=${FT[o2]} ms, hang bound ${HANG_S} s"

# Is PID a live process (not a zombie)?
alive() {
	local st=""
	kill -0 "$1" 2>/dev/null || return 1
	read -r st <"/proc/$1/stat" 2>/dev/null
	st=${st##*) }
	[ "${st%% *}" != Z ]
}
# Forgets a reaped pid, so that cleanup never signals a reused one.
forget_pid() {
	local p keep=()
	for p in "${FP_PIDS[@]}"; do [ "$p" = "$1" ] || keep+=("$p"); done
	FP_PIDS=("${keep[@]}")
}
# kill -9 a daemon and reap it.
chaos_kill() { # a|b|coord
	local p
	if [ "$1" = coord ]; then p=$COORD_PID; else p=${FP_NODE_PID[$1]}; fi
	kill -KILL "$p" 2>/dev/null
	wait "$p" 2>/dev/null
	forget_pid "$p"
}
# The coordinator again, on the same address and data dir.
chaos_coord_restart() {
	fp_coord_respawn A
	COORD_PID=$FP_COORD_PID
}
# chaos_node_spawn NAME SAMEPORT: agent NAME again, under the same name
# (SAMEPORT=1: on its old data port), as fp_node_start starts it, without
# waiting for it: chaos_node_ready does. An agent joins the coordinator
# before it writes its address file, so it can be spawned while the
# coordinator is still down.
chaos_node_spawn() {
	local n=$1 h=${HOST_OF[$1]} listen
	listen=${FP_HOST_IP[$h]}:$(fp_port "$h")
	if [ "$2" = 1 ] && [ -s "$FP_TMP/$n.addr" ]; then
		listen=$(head -n1 "$FP_TMP/$n.addr")
	fi
	rm -f "$FP_TMP/$n.addr"
	${FP_HOST_RUN[$h]} "$FP_NODE_BIN" --coordinator "$FP_COORD" --name "$n" \
		--pool-size "$FP_POOL" --data-listen "$listen" \
		--addr-file "$FP_TMP/$n.addr" --sock "${FP_NODE_SOCK[$n]}" \
		--heartbeat-ms 200 --log-level "${FP_LOG_LEVEL:-info}" \
		--fault-timeout-ms "${FT[$n]}" --writeback-ms $WB_MS \
		${FP_FAULT_MODE:+--fault-mode "$FP_FAULT_MODE"} \
		${FP_FAULT_THREADS:+--fault-threads "$FP_FAULT_THREADS"} \
		${FP_DIRTY_TRACKING:+--dirty-tracking "$FP_DIRTY_TRACKING"} >>"$FP_TMP/$n.log" 2>&1 &
	FP_NODE_PID[$n]=$!
	FP_PIDS+=("$!")
}
# Waits for agent NAME's address file. An agent that died on the way is a
# failure; it gets one more start (the coordinator is up by then).
chaos_node_ready() {
	local n=$1 p=${FP_NODE_PID[$1]} rc i
	for ((i = 0; i < 3000; i++)); do
		[ -s "$FP_TMP/$n.addr" ] && return 0
		alive "$p" || break
		sleep 0.01
	done
	[ -s "$FP_TMP/$n.addr" ] && return 0
	alive "$p" && fp_fail "agent $n did not come back within 30 s"
	wait "$p" 2>/dev/null
	rc=$?
	forget_pid "$p"
	chaos_failure "restarted agent $n died before it was ready (exit $rc$([ "$rc" -gt 128 ] && echo ", signal $((rc - 128))"))" "$FP_TMP/$n.log"
	chaos_node_spawn "$n" 0
	fp_wait_file "$FP_TMP/$n.addr" 30 || fp_fail "agent $n did not come back (twice)"
}
# chaos_restart "VICTIMS": the coordinator and agents in VICTIMS again.
# AGENTS_FIRST=1: the agents are started before the coordinator is back
# (a host that reboots while the coordinator is down).
chaos_restart() {
	local v
	if [ "${AGENTS_FIRST:-0}" = 1 ]; then
		for v in a b o1 o2; do
			[[ " $1 " == *" $v "* ]] && chaos_node_spawn "$v" "${SAMEPORT[$v]:-0}"
		done
	fi
	[[ " $1 " == *" coord "* ]] && chaos_coord_restart
	for v in a b o1 o2; do
		[[ " $1 " == *" $v "* ]] || continue
		[ "${AGENTS_FIRST:-0}" = 1 ] || chaos_node_spawn "$v" "${SAMEPORT[$v]:-0}"
		chaos_node_ready "$v"
	done
	return 0
}
# ID[a], ID[b]: node ids as the coordinator has them now.
chaos_ids() {
	local n
	for n in a b o1 o2; do
		ID[$n]=$(fp_node_id $n)
		[ -n "${ID[$n]}" ] || return 1
	done
}
# Waits until the coordinator shows every agent up (up to 10 s).
chaos_wait_up() {
	local i j
	for ((i = 0; i < 200; i++)); do
		j=$(fp_cli A a --timeout-ms 1000 status --json 2>/dev/null)
		[ "$(echo "$j" | grep -c '"up": true')" -ge 4 ] && return 0
		sleep 0.05
	done
	return 1
}
chaos_ids || fp_fail "no node ids in status --json"

# ------------------------------------------------------------ data regions
# Slots of data regions; each has a name, a pattern seed, a size, a chunk
# table as created, and LOST: the agents whose chunks a restart lost.
NSLOT=2
declare -A SNAME SSEED SSIZE STABLE SLOST SFILLED SREPL RHOLD_OF
declare -A ACKED   # region name -> 1 while the coordinator acknowledged it exists
declare -A DELETED # region name -> 1 once its delete was acknowledged
GEN=0
# The chunk table of `region show`, owners and pool offsets.
chaos_table() { fp_cli A a region show "$1" 2>/dev/null | grep -E '^ +[0-9]+ +0x'; }
# Replicated data regions: a third of those made (FP_CHAOS_REPL_PCT
# percent; none in copy mode).
REPL_PCT=${FP_CHAOS_REPL_PCT:-33}
[ "${FP_FAULT_MODE:-}" = copy ] && REPL_PCT=0
# chaos_rholders NAME: RHOLD, the agents holding an in-sync replica of
# each chunk of replicated region NAME as the coordinator has them now
# ("o1 o2;o2 a;..."; an agent this run does not know by its id is "?").
# Returns 1 if the coordinator did not answer.
chaos_rholders() {
	local tag c r node off st n
	local -A nm=() hold=()
	for n in a b o1 o2; do nm[${ID[$n]:-x}]=$n; done
	RHOLD=""
	fp_repl state "$FP_COORD" "$1" >"$FP_TMP/rstate.out" 2>&1 || return 1
	n=-1
	# rec: CHUNK REPLICA NODE OFF STATE (0: in sync)
	while read -r tag c r node off st; do
		[ "$tag" = rec: ] || continue
		[ "$c" -gt "$n" ] && n=$c
		[ "$st" = 0 ] && hold[$c]="${hold[$c]:-} ${nm[$node]:-?}"
	done <"$FP_TMP/rstate.out"
	[ "$n" -ge 0 ] || return 1
	for ((c = 0; c <= n; c++)); do RHOLD="$RHOLD${c:+;}${hold[$c]:- }"; done
	RHOLD=${RHOLD#;}
	return 0
}
# chaos_rlost HOLD DOWN: is a chunk of HOLD (chaos_rholders) left with
# no in-sync replica on an agent not in DOWN?
chaos_rlost() {
	local ch t kept
	local IFS=';'
	for ch in $1; do
		kept=0
		IFS=' '
		for t in $ch; do [[ " $2 " == *" $t "* ]] || kept=1; done
		IFS=';'
		[ "$kept" = 1 ] || return 0
	done
	return 1
}
# chaos_region_new SLOT: a new region for SLOT, interleaved a,b or b,a,
# filled on both hosts. Returns 1 (with a failure recorded) if any step
# fails; the slot is then unusable (LOST=ab) until the next repair.
chaos_region_new() {
	local s=$1 name size seed nodes out=$FP_TMP/create.out
	GEN=$((GEN + 1))
	name=d${s}g$GEN
	seed=$((SEED % 100000 * 100 + GEN))
	chaos_pick 8 12 16 24 32; size=$R
	chaos_pick "${ID[a]},${ID[b]}" "${ID[b]},${ID[a]}"; nodes=$R
	SNAME[$s]=$name SSEED[$s]=$seed SSIZE[$s]=$size SLOST[$s]=ab
	# Mostly filled on both hosts; sometimes on one only: then only the
	# other host's agent maps it, and no agent has mapped it before the
	# first guest there does.
	chaos_pick ab ab ab ab ab a b; SFILLED[$s]=$R
	chaos_rand 100
	SREPL[$s]=0
	[ "$R" -lt "$REPL_PCT" ] && SREPL[$s]=1
	if [ "${SREPL[$s]}" = 1 ]; then
		# Replicated, on o1 and o2; `fill` writes only the chunks of its
		# node's pool (a replicated region's are none): a guest on a
		# writes every page, and each goes to both replicas.
		name=${name}r
		SNAME[$s]=$name SFILLED[$s]=ab
		if ! fp_cli A a region create "$name" --size "${size}M" --nodes "${ID[o1]},${ID[o2]}" --replicas 2 >"$out" 2>&1; then
			chaos_failure "create $name (${size} MiB, 2 replicas on o1, o2) failed: $(tail -n1 "$out")" "$out"
			return 1
		fi
		ACKED[$name]=1
		STABLE[$s]=""
		out=$FP_TMP/fill-$name.out
		if ! fp_cli A a touch "$name" --write --seed "$seed" --threads 4 >"$out" 2>&1; then
			chaos_failure "writing $name on A failed: $(grep '^farpage: ' "$out" | tail -n1)" "$out"
			return 1
		fi
		SLOST[$s]=""
		return 0
	fi
	if ! fp_cli A a region create "$name" --size "${size}M" --nodes "$nodes" >"$out" 2>&1; then
		chaos_failure "create $name (${size} MiB on nodes $nodes) failed: $(tail -n1 "$out")" "$out"
		return 1
	fi
	ACKED[$name]=1
	STABLE[$s]=$(chaos_table "$name")
	if [[ ${SFILLED[$s]} == *a* ]] && ! fp_cli A a fill "$name" --seed "$seed" >"$out" 2>&1; then
		chaos_failure "fill $name on A failed: $(tail -n1 "$out")" "$out"
		return 1
	fi
	if [[ ${SFILLED[$s]} == *b* ]] && ! fp_cli B b fill "$name" --seed "$seed" >"$out" 2>&1; then
		chaos_failure "fill $name on B failed: $(tail -n1 "$out")" "$out"
		return 1
	fi
	SLOST[$s]=""
	return 0
}
chaos_region_delete() { # name
	local out=$FP_TMP/delete.out
	if fp_cli A a region delete "$1" >"$out" 2>&1; then
		unset 'ACKED[$1]'
		return 0
	fi
	chaos_failure "delete $1 failed: $(tail -n1 "$out")" "$out"
	return 1
}
for ((s = 0; s < NSLOT; s++)); do
	chaos_region_new $s || fp_fail "setting up region slot $s"
done
RANDOM=$SEED # lib.sh's own uses of $RANDOM: repeatable too

# -------------------------------------------------------------- the guests
declare -A SAMEPORT
declare -a G_ARGS_ALL G_ATO_ALL G_LINE
declare -A G_HOST G_SLOT G_REG G_DESC G_PID G_RC G_DELAY G_END G_LOSTAT G_OUT G_CHURNED
# chaos_guest_start I: starts guest I as planned in G_*.
chaos_guest_start() {
	local i=$1 h=${G_HOST[$1]} n
	n=${AGENT_OF[$h]}
	ms_s "${G_DELAY[$i]}"
	# shellcheck disable=SC2086 # G_ARGS and FP_HOST_RUN are split on purpose
	(
		sleep "$S"
		echo "chaos-guest: started at $(( (${EPOCHREALTIME//[.,]/} / 1000) - T0 )) ms"
		exec ${FP_HOST_RUN[$h]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$n]}" \
			FARPAGE_AGENT_TIMEOUT_MS="$G_ATO" "$FP_CLI_BIN" \
			--coordinator "$FP_COORD" touch ${G_ARGS}
	) >"${G_OUT[$i]}" 2>&1 &
	G_PID[$i]=$!
}

# chaos_judge I HIT: the verdict of guest I. HIT says what was done to it:
# none (nothing it uses was killed or deleted), coord (only the
# coordinator died), lost (chunks it touches were lost before it started),
# any (an agent it uses died, or its region was deleted under it).
# Sets V (pass, sigbus, clean-error or FAIL:...).
chaos_judge() {
	local i=$1 hit=$2 f=${G_OUT[$1]} rc=${G_RC[$1]} l line="" msg=0 sbmsg=0 kv w z b p v
	while IFS= read -r l; do
		case $l in
		touch:*) line=$l ;;
		farpage:*) msg=1 ;;
		esac
		[[ $l == *SIGBUS* ]] && sbmsg=1
	done <"$f"
	G_LINE[$i]=$line
	if [ -n "$line" ]; then
		declare -A F=()
		for kv in $line; do [[ $kv == *=* ]] && F[${kv%%=*}]=${kv#*=}; done
		w=${F[wrong]:-} z=${F[zero]:-} b=${F[sigbus]:-} p=${F[pages]:-} v=${F[verified]:-}
		[[ $w =~ ^[0-9]+$ ]] && N_WRONG=$((N_WRONG + w))
		[[ $z =~ ^[0-9]+$ ]] && N_ZERO=$((N_ZERO + z))
		if [ "$w" != 0 ] || [ "$z" != 0 ]; then
			V="FAIL:read-bad-data(wrong=$w,zero=$z)"
			return
		fi
	fi
	if [ "$rc" = hang ]; then
		V="FAIL:hang(>${HANG_S}s)"
		return
	fi
	if [ "$rc" -ge 128 ]; then
		V="FAIL:killed-by-signal-$((rc - 128))"
		return
	fi
	if [ "$rc" = 0 ]; then
		if [ -z "$line" ]; then
			V="FAIL:exit-0-without-result-line"
		elif [ "$b" != 0 ] || [ "$v" != "$p" ]; then
			V="FAIL:exit-0-but-verified=$v/pages=$p,sigbus=$b"
		elif [ "${F[remote]:-0}" = 0 ]; then
			V="FAIL:no-remote-pages"
		elif [ "$hit" = lost ]; then
			V="FAIL:passed-though-chunks-it-touches-were-lost"
		else
			V=pass
		fi
		return
	fi
	if [ "$rc" != 1 ]; then
		V="FAIL:exit-$rc"
	elif [ -n "$line" ] && [ "${b:-0}" -gt 0 ]; then
		[ "$sbmsg" = 1 ] || { V="FAIL:sigbus=$b-but-no-SIGBUS-message"; return; }
		V=sigbus
	elif [ "$msg" = 1 ]; then
		V=clean-error
	else
		V="FAIL:exit-1-without-an-error-message"
	fi
	case $hit:$V in
	none:pass | coord:pass | coord:clean-error | any:* | lost:sigbus | lost:clean-error) ;;
	none:*) V="FAIL:$V-though-nothing-it-uses-was-killed" ;;
	coord:*) V="FAIL:$V-though-only-the-coordinator-died" ;;
	esac
}

# chaos_daemons: after a round, every daemon must be running: one that was
# not killed (VICTIMS) and died anyway, or a restarted one that died again,
# is a failure, and is brought back so that the next rounds have a whole
# cluster. Sets DOWN (what was down in the round); the data slots whose
# agents were down have lost chunks.
chaos_daemons() {
	local d p rc sig v s
	DOWN=$VICTIMS CASUALTIES=""
	for d in coord a b o1 o2; do
		if [ "$d" = coord ]; then p=$COORD_PID; else p=${FP_NODE_PID[$d]}; fi
		alive "$p" && continue
		wait "$p" 2>/dev/null
		rc=$?
		forget_pid "$p"
		sig=""
		[ "$rc" -gt 128 ] && sig=", signal $((rc - 128))"
		if [[ " $VICTIMS " == *" $d "* ]]; then
			chaos_failure "$d died again after its restart (exit $rc$sig)"
		else
			chaos_failure "$d died though it was not killed (exit $rc$sig)"
		fi
		chaos_round_logs
		CASUALTIES="$CASUALTIES $d"
	done
	if [ -n "$CASUALTIES" ]; then
		chaos_restart "$CASUALTIES"
		DOWN="$DOWN $CASUALTIES"
	fi
	if [ -n "$DOWN" ]; then
		now_ms; TT="$TT restarted=$((NOW - T0))"
		chaos_wait_up || chaos_failure "the coordinator does not show every agent up 10 s after the restarts"
		chaos_ids || chaos_failure "no node ids after the restarts"
	fi
	for v in a b; do
		if [[ " $DOWN " == *" $v "* ]]; then
			for ((s = 0; s < NSLOT; s++)); do
				[ "${SREPL[$s]}" = 1 ] && continue
				[[ ${SLOST[$s]} == *$v* ]] || SLOST[$s]=${SLOST[$s]}$v
			done
		fi
	done
	# A replicated region lost what the coordinator holds no in-sync
	# replica of (the agents that restarted joined again by now): it is
	# made again before the next round.
	[ -n "$DOWN" ] || return 0
	for ((s = 0; s < NSLOT; s++)); do
		[ "${SREPL[$s]}" = 1 ] && [ -z "${SLOST[$s]}" ] || continue
		if ! chaos_rholders "${SNAME[$s]}" || chaos_rlost "$RHOLD" ""; then
			SLOST[$s]=ab
		fi
	done
}

# chaos_repair: lost regions are deleted and made again (some are left
# lost for a round: guests touching them must get SIGBUS), and now and
# then an intact one is replaced, as in normal operation.
chaos_repair() {
	local s
	for ((s = 0; s < NSLOT; s++)); do
		chaos_rand 100
		if [ "${SLOST[$s]}" = ab ] || { [ -n "${SLOST[$s]}" ] && [ "$R" -lt 70 ]; } ||
			{ [ -z "${SLOST[$s]}" ] && [ "$R" -lt 10 ]; }; then
			if [ -n "${ACKED[${SNAME[$s]}]:-}" ]; then
				chaos_region_delete "${SNAME[$s]}" && DELETED[${SNAME[$s]}]=1
			fi
			chaos_region_new "$s"
		fi
	done
}

# ------------------------------------------------------------ writer rounds
GUEST=$FP_BIN/tests/fp_guest
# How long a second writer keeps asking for the write lease while another
# holds it (ms): an outcome, not a bound (sanitizer builds start agents
# slower).
WBUDGET=3000
[ "$HANG_S" -gt 20 ] && WBUDGET=9000
# Copy mode (FP_FAULT_MODE=copy): writes to remote pages stay in the
# writer's process (its flushes say -EOPNOTSUPP): the owners keep the
# first seed on every page.
WCOPY=0
[ "${FP_FAULT_MODE:-}" = copy ] && WCOPY=1

# w_spec SEED: W_SPEC, a write step of fp_guest wplay over a seeded part
# of the writer region: pages FROM, FROM+STEP, ... below TO.
w_spec() {
	local from to step
	chaos_rand $((WPAGES / 4)); from=$R
	chaos_rand $((WPAGES / 4)); to=$((WPAGES - R))
	chaos_pick 1 1 2 3; step=$R
	W_SPEC="w$1:$from:$to:$step"
}
# w_count FILE REGEX: W_N, the lines of FILE matching REGEX.
w_count() {
	W_N=$(grep -cE "$2" "$1" 2>/dev/null)
	W_N=${W_N:-0}
}
# w_field LINE KEY: W_F, KEY='s value in LINE ("k=v k=v ...").
w_field() {
	local kv
	W_F=""
	for kv in $1; do
		[ "${kv%%=*}" = "$2" ] && W_F=${kv#*=}
	done
}

# w_apply FILE: what the writer whose output is FILE did, applied to the
# model of the region (WE: per page, the index of the seed the last
# acknowledged flush covering it wrote; WM: per page, the seeds of writes
# since that no flush acknowledged). Writers are applied in the order they
# held the lease. A write step makes each page it wrote pending with its
# seed, and a maybe (also the page whose write raised SIGBUS: it may be
# written in part); a flush or unmap that returned 0 acknowledges every
# pending page (its maybes of that writer are gone: its last bytes are
# home). Then a page this writer acknowledged has its seed and only the
# maybes it wrote after; the others keep theirs and gain its maybes.
w_apply() {
	local -A pend=() mw=() ack=()
	local l seed from step n bus k p j
	[ "$WCOPY" = 1 ] && return 0
	while IFS= read -r l; do
		case $l in
		"wplay: write "*)
			w_field "$l" seed; seed=$W_F
			w_field "$l" from; from=$W_F
			w_field "$l" step; step=$W_F
			w_field "$l" written; n=$W_F
			w_field "$l" bus; bus=$W_F
			k=${WSIDX[$seed]}
			for ((j = 0; j < n; j++)); do
				p=$((from + j * step))
				pend[$p]=$k
				mw[$p]="${mw[$p]:-} $k"
			done
			[ "$bus" -ge 0 ] && mw[$bus]="${mw[$bus]:-} $k"
			;;
		"wplay: flush=0 "* | "wplay: unmap=0 "*)
			for p in "${!pend[@]}"; do
				ack[$p]=${pend[$p]}
				mw[$p]=""
			done
			pend=()
			;;
		esac
	done <"$1"
	for p in "${!ack[@]}"; do
		WE[$p]=${ack[$p]}
		WM[$p]=""
	done
	for p in "${!mw[@]}"; do
		[ -n "${mw[$p]}" ] && WM[$p]="${WM[$p]:-}${mw[$p]}"
	done
}

# w_guest_verdict N FILE RC: writer N's run: ended (no hang, no crash),
# with its end line; V is ok or FAIL:...
w_guest_verdict() {
	local f=$2 rc=$3 m
	V=ok
	if [ "$rc" = hang ]; then V="FAIL:W$1 hung (>${HANG_S}s)"; return; fi
	if [ "$rc" -ge 128 ]; then V="FAIL:W$1 killed by signal $((rc - 128))"; return; fi
	if [ "$rc" != 0 ] || ! grep -q '^wplay: end' "$f"; then V="FAIL:W$1 exit $rc without its end line"; return; fi
	if grep -E '^wplay: write ' "$f" | grep -vq ' sig=0 \| sig=7 '; then
		V="FAIL:W$1 got SIGSEGV writing its writable mapping"
		return
	fi
	m=$(grep -m1 '^wplay: map=' "$f")
	w_field "$m" map
	case $1:$W_F in
	1:0 | 2:0 | 2:-16) ;;
	1:*) V="FAIL:W1's writable map failed ($W_F) before anything was killed" ;;
	2:*) [ -n "$DOWN" ] || V="FAIL:W2's writable map failed ($W_F) though nothing was killed" ;;
	esac
}

# chaos_wround: a writer round (see the top).
chaos_wround() {
	local i o ids="" x y out=$FP_TMP/wcreate.out t v g m n f base
	local w2_state=pending w2_due=0 k_state=pending k_due=0 r_state=none r_due=0 go_state=none
	local W1_PID W2_PID="" W1_RC="" W2_RC="" W2_T0=0 W1_FD vh vn vrc
	GEN=$((GEN + 1))
	WNAME=w${ROUND}g$GEN
	base=$((SEED % 100000 * 1000 + ROUND * 10))
	# the fill, W1's two passes, W2's
	WSEEDS=($((base + 1)) $((base + 2)) $((base + 3)) $((base + 4)))
	declare -gA WSIDX=()
	for i in 0 1 2 3; do WSIDX[${WSEEDS[$i]}]=$i; done
	chaos_pick 8 12; WSIZE=$R
	WPAGES=$((WSIZE * 256))
	WOWN=()
	for ((i = 0; i < WSIZE / 2; i++)); do chaos_pick o1 o2; WOWN[i]=$R; done
	if [[ " ${WOWN[*]} " != *" o1 "* ]]; then WOWN[0]=o1; elif [[ " ${WOWN[*]} " != *" o2 "* ]]; then WOWN[0]=o2; fi
	chaos_pick A B; WH=$R
	WOH=${OTHERH[$WH]}
	x=${AGENT_OF[$WH]} y=${AGENT_OF[$WOH]}
	w_spec "${WSEEDS[1]}"; W1_STEPS="$W_SPEC f"
	chaos_rand 10; W1_HOLD=0
	[ "$R" -lt 6 ] && W1_HOLD=1 W1_STEPS="$W1_STEPS h"
	chaos_rand 3; W1_TWO=0
	if [ "$R" -lt 2 ]; then
		W1_TWO=1
		w_spec "${WSEEDS[2]}"; W1_STEPS="$W1_STEPS $W_SPEC f"
	fi
	W1_STEPS="$W1_STEPS u"
	w_spec "${WSEEDS[3]}"; W2_STEPS="$W_SPEC f u"
	chaos_pick 50 100 200; W2_RETRY=$R
	W2_TRIES=$((WBUDGET / W2_RETRY))
	chaos_rand 1001; W1_ATO=$((1000 + R))
	chaos_rand 1001; W2_ATO=$((1000 + R))
	# W2 starts after a marker of W1: its map, its first flush's start or
	# end; then a delay.
	chaos_pick 'map=0' 'flushing' 'flushing' 'flush='; W2_AT=$R
	chaos_rand 400; W2_DELAY=$R
	# Victims: W1's agent, an owner, both, W2's agent, both owners, both
	# writers' agents.
	chaos_rand 100
	if [ "$R" -lt 10 ]; then WV=""
	elif [ "$R" -lt 40 ]; then WV=$x
	elif [ "$R" -lt 55 ]; then chaos_pick o1 o2; WV=$R
	elif [ "$R" -lt 70 ]; then chaos_pick o1 o2; WV="$x $R"
	elif [ "$R" -lt 80 ]; then WV=$y
	elif [ "$R" -lt 90 ]; then WV="o1 o2"
	else WV="a b"
	fi
	# ... killed after a marker (writer:marker:count): W1's first or
	# second flush's start (write-back in flight), its map (while it
	# writes, the periodic write-back running), W2's flush; then a delay.
	chaos_pick 1:flushing:1 1:flushing:1 1:flushing:1 1:map=0:1 1:flushing:2 2:flushing:1; WK_AT=$R
	[ "$W1_TWO" = 1 ] || [ "$WK_AT" != 1:flushing:2 ] || WK_AT=1:flushing:1
	chaos_rand 200; WK_DELAY=$R
	chaos_rand 4; WR_NOW=0
	[ "$R" -lt 3 ] && WR_NOW=1
	chaos_rand 500; WR_DELAY=$R
	for v in a b o1 o2; do chaos_rand 2; SAMEPORT[$v]=$R; done
	AGENTS_FIRST=0
	chaos_pick A B; vh=$R

	# --- the region, filled with the first seed by its owners (W1's
	#     writable map right after must find the fillers' lease given back)
	for o in "${WOWN[@]}"; do ids="$ids,${ID[$o]}"; done
	if ! fp_cli A a region create "$WNAME" --size "${WSIZE}M" --chunk-size 2M --owners "${ids#,}" >"$out" 2>&1; then
		chaos_failure "create $WNAME failed: $(tail -n1 "$out")" "$out"
		return
	fi
	ACKED[$WNAME]=1
	for o in o1 o2; do
		fp_cli "${HOST_OF[$o]}" "$o" fill "$WNAME" --seed "${WSEEDS[0]}" >"$out" 2>&1 && continue
		chaos_failure "fill $WNAME on $o failed: $(tail -n1 "$out")" "$out"
		chaos_region_delete "$WNAME" && DELETED[$WNAME]=1
		return
	done

	# --- go
	W1_OUT=$FP_TMP/r${ROUND}w1.out W2_OUT=$FP_TMP/r${ROUND}w2.out
	rm -f "$FP_TMP/w1.fifo"
	mkfifo "$FP_TMP/w1.fifo" || fp_fail "mkfifo"
	exec {W1_FD}<>"$FP_TMP/w1.fifo"
	[ -n "$WV" ] || k_state=none
	[ "$W1_HOLD" = 1 ] && go_state=pending
	KILLED_AT="" RESTARTED_AT=""
	now_ms; T0=$NOW
	# shellcheck disable=SC2086 # the steps are words
	fp_bg "$WH" env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$x]}" FARPAGE_AGENT_TIMEOUT_MS="$W1_ATO" \
		"$GUEST" wplay "$WNAME" 1 0 $W1_STEPS <"$FP_TMP/w1.fifo" >"$W1_OUT" 2>&1
	W1_PID=$FP_BG_PID
	while :; do
		now_ms; t=$((NOW - T0))
		if [ -z "$W1_RC" ]; then
			if ! alive "$W1_PID"; then
				wait "$W1_PID" 2>/dev/null
				W1_RC=$?
				forget_pid "$W1_PID"
			elif [ "$t" -gt $((2 * HANG_S * 1000 + WBUDGET)) ]; then
				kill -KILL "$W1_PID" 2>/dev/null
				wait "$W1_PID" 2>/dev/null
				forget_pid "$W1_PID"
				W1_RC=hang
			fi
		fi
		if [ -n "$W2_PID" ] && [ -z "$W2_RC" ]; then
			if ! alive "$W2_PID"; then
				wait "$W2_PID" 2>/dev/null
				W2_RC=$?
				forget_pid "$W2_PID"
			elif [ $((t - W2_T0)) -gt $((HANG_S * 1000 + WBUDGET)) ]; then
				kill -KILL "$W2_PID" 2>/dev/null
				wait "$W2_PID" 2>/dev/null
				forget_pid "$W2_PID"
				W2_RC=hang
			fi
		fi
		if [ $w2_state = pending ]; then
			w_count "$W1_OUT" "^wplay: $W2_AT"
			if [ "$W_N" -ge 1 ] || [ -n "$W1_RC" ]; then
				w2_state=armed w2_due=$((t + W2_DELAY))
			fi
		fi
		if [ $w2_state = armed ] && [ "$t" -ge "$w2_due" ]; then
			# shellcheck disable=SC2086
			fp_bg "$WOH" env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$y]}" FARPAGE_AGENT_TIMEOUT_MS="$W2_ATO" \
				"$GUEST" wplay "$WNAME" "$W2_TRIES" "$W2_RETRY" $W2_STEPS </dev/null >"$W2_OUT" 2>&1
			W2_PID=$FP_BG_PID W2_T0=$t w2_state=started
		fi
		if [ $k_state = pending ]; then
			IFS=: read -r g m n <<<"$WK_AT"
			if [ "$g" = 1 ]; then f=$W1_OUT v=$W1_RC; else f=$W2_OUT v=$W2_RC; fi
			w_count "$f" "^wplay: $m"
			if [ "$W_N" -ge "$n" ]; then
				k_state=armed k_due=$((t + WK_DELAY))
			elif [ -n "$v" ]; then
				k_state=skipped # its writer ended before that
			fi
		fi
		if [ $k_state = armed ] && [ "$t" -ge "$k_due" ]; then
			for v in $WV; do chaos_kill "$v"; done
			KILLED_AT=$t k_state=fired
			[ "$WR_NOW" = 1 ] && r_state=armed r_due=$((t + WR_DELAY))
		fi
		if [ $r_state = armed ] && [ "$t" -ge "$r_due" ]; then
			chaos_restart "$WV"
			now_ms; RESTARTED_AT=$((NOW - T0)) r_state=fired
		fi
		# W1's hold ends once W2 ended (and a restart planned under the
		# writers is done).
		if [ $go_state = pending ] && [ -n "$W2_RC" ] && [ $r_state != armed ]; then
			echo go >&"$W1_FD"
			go_state=fired
		fi
		[ -n "$W1_RC" ] && [ -n "$W2_RC" ] && [ $k_state != armed ] && [ $r_state != armed ] && break
		sleep 0.02
	done
	exec {W1_FD}>&-
	now_ms; T_GDONE=$((NOW - T0))
	if [ $k_state = fired ] && [ $r_state = none ]; then
		chaos_restart "$WV"
		now_ms; RESTARTED_AT=$((NOW - T0))
	fi
	VICTIMS=""
	[ $k_state = fired ] && VICTIMS=$WV
	chaos_daemons

	# --- the writers' verdicts
	w_guest_verdict 1 "$W1_OUT" "$W1_RC"
	[ "$V" = ok ] || chaos_failure "${V#FAIL:}" "$W1_OUT"
	w_guest_verdict 2 "$W2_OUT" "$W2_RC"
	[ "$V" = ok ] || chaos_failure "${V#FAIL:}" "$W2_OUT"
	# One holder at a time: once W2 mapped writable, no flush or unmap
	# of W1 called after that may return 0 (W1's lease is gone).
	local m2="" l call=0
	l=$(grep -m1 '^wplay: map=0 ' "$W2_OUT")
	if [ -n "$l" ] && [ "$WCOPY" = 0 ]; then
		w_field "$l" t; m2=$W_F
		while IFS= read -r l; do
			case $l in
			"wplay: flushing "* | "wplay: unmapping "*) w_field "$l" t; call=$W_F ;;
			"wplay: flush=0 "* | "wplay: unmap=0 "*)
				[ "$call" -gt "$m2" ] &&
					chaos_failure "W1's ${l#wplay: } acknowledged, called $((call - m2)) ms after W2 had taken the write lease: two holders" "$W1_OUT"
				;;
			esac
		done <"$W1_OUT"
	fi

	# --- every page on the owners, read on a host's agent
	V_OUT=$FP_TMP/r${ROUND}wv.out
	vn=${AGENT_OF[$vh]}
	fp_bg "$vh" env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$vn]}" "$GUEST" wverify "$WNAME" "${WSEEDS[@]}" >"$V_OUT" 2>&1
	fp_wait_pid "$FP_BG_PID" "$HANG_S"
	vrc=$?
	forget_pid "$FP_BG_PID"
	W_SUM=""
	if [ "$vrc" != 0 ] || ! grep -q "^wverify: pages=$WPAGES\$" "$V_OUT"; then
		chaos_failure "reading $WNAME on $vh failed (exit $vrc)" "$V_OUT"
	else
		w_judge_pages
	fi
	chaos_region_delete "$WNAME" && DELETED[$WNAME]=1

	# A sanitizer report in a daemon's log, first seen in this round.
	while IFS=: read -r f n; do
		[ "$n" -gt "${SANSEEN[$f]:-0}" ] &&
			chaos_failure "sanitizer report in $f (see the end of the run)" "$FP_TMP/$f"
		SANSEEN[$f]=$n
	done < <(cd "$FP_TMP" && grep -cE "$FP_SAN_RE" coord.log a.log b.log o1.log o2.log)

	local kills=none w1 w2
	if [ -n "$WV" ]; then
		kills="${WV// /+}@${WK_AT}+${WK_DELAY}ms"
		case $k_state in
		fired) kills="$kills=${KILLED_AT}ms restart@${RESTARTED_AT:-?}ms" ;;
		*) kills="$kills(not reached)" ;;
		esac
	fi
	w1=$(grep -E '^wplay: (map|flush|unmap)=' "$W1_OUT" | sed 's/^wplay: //; s/ .*//' | tr '\n' ',')
	w2=$(grep -E '^wplay: (map|flush|unmap)=' "$W2_OUT" | sed 's/^wplay: //; s/ .*//' | tr '\n' ',')
	echo "chaos: seed=$SEED round=$ROUND writers $WNAME(${WSIZE}M ${WOWN[*]}) kill=$kills W1[$WH:$W1_STEPS]=${w1%,}(rc=$W1_RC) W2[$WOH@$W2_AT+${W2_DELAY}ms:$W2_STEPS]=${w2%,}(rc=$W2_RC) pages:${W_SUM:- not read}$([ $ROUND_FAILED = 1 ] && echo "  <-- FAILED")"
	[ "$ROUND_FAILED" = 1 ] && chaos_round_logs
	N_WROUNDS=$((N_WROUNDS + 1))
}

# w_judge_pages: every page read (V_OUT) against the model (see the top).
w_judge_pages() {
	local -a WE=() WM=()
	local p from to cls k ok=0 maybe=0 lost=0 bad=0 ex="" owner allowed mask
	for ((p = 0; p < WPAGES; p++)); do WE[p]=0; done
	w_apply "$W1_OUT"
	w_apply "$W2_OUT"
	while read -r _ from to cls; do
		[[ $from =~ ^[0-9]+$ ]] || continue
		for ((p = from; p <= to; p++)); do
			owner=${WOWN[p / 512]}
			if [[ " $DOWN " == *" $owner "* ]]; then
				# its owner restarted: the chunk is lost, never read
				case $cls in
				bus | skip) lost=$((lost + 1)); continue ;;
				esac
				bad=$((bad + 1))
				[ $bad -le 5 ] && ex="$ex page $p: $cls though its owner $owner restarted (lost);"
				continue
			fi
			allowed=" ${WE[p]}${WM[p]:-} "
			case $cls in
			s[0-9])
				k=${cls#s}
				if [ "$k" = "${WE[p]}" ] && [ -z "${WM[p]:-}" ]; then ok=$((ok + 1)); continue; fi
				if [ -n "${WM[p]:-}" ] && [[ $allowed == *" $k "* ]]; then maybe=$((maybe + 1)); continue; fi
				;;
			m[0-9]*)
				mask=${cls#m}
				if [ -n "${WM[p]:-}" ]; then
					for k in 0 1 2 3; do
						((mask & (1 << k))) && [[ $allowed == *" $k "* ]] && mask=$((mask & ~(1 << k)))
					done
					if [ "$mask" = 0 ]; then maybe=$((maybe + 1)); continue; fi
				fi
				;;
			esac
			bad=$((bad + 1))
			[ $bad -le 5 ] && ex="$ex page $p ($owner): $cls, expected s${WE[p]}${WM[p]:+ or one of${WM[p]}};"
		done
	done <"$V_OUT"
	W_SUM=" exact=$ok maybe=$maybe lost=$lost bad=$bad"
	N_WPAGES_BAD=$((N_WPAGES_BAD + bad))
	[ $bad = 0 ] || chaos_failure "$bad pages of $WNAME are not what the rule allows (seeds s0..s3 = ${WSEEDS[*]}):$ex" "$V_OUT"
}

# -------------------------------------------------------------- the rounds
T_START=$SECONDS
for ((ROUND = 1; ROUND <= ROUNDS; ROUND++)); do
	ROUND_FAILED=0 TT=""
	while read -r c f; do
		f=${f##*/}
		[ "$f" != total ] && LOGOFF[${f%.log}]=$c
	done < <(cd "$FP_TMP" && wc -l coord.log a.log b.log o1.log o2.log)

	if [ "$WEVERY" -gt 0 ] && [ $((ROUND % WEVERY)) = $((WEVERY - 1)) ]; then
		chaos_wround
		[ "$STOP" = 1 ] && [ ${#FAILS[@]} -gt 0 ] && break
		now_ms; T_CHECKED=$((NOW - T0))
		chaos_repair
		now_ms
		[ "$VERBOSE" = 1 ] && echo "    times (ms): writers-done=$T_GDONE$TT checked=$T_CHECKED repaired=$((NOW - T0))"
		continue
	fi
	# --- plan: guests (a replicated region's replicas as they are now)
	for ((s = 0; s < NSLOT; s++)); do
		RHOLD_OF[$s]=""
		[ "${SREPL[$s]}" = 1 ] && [ -z "${SLOST[$s]}" ] || continue
		if chaos_rholders "${SNAME[$s]}"; then
			RHOLD_OF[$s]=$RHOLD
		else
			chaos_failure "no replica states of ${SNAME[$s]}: $(tail -n1 "$FP_TMP/rstate.out")"
			SLOST[$s]=ab
		fi
	done
	chaos_rand 4; NG=$((R + 1))
	usable=()
	for ((s = 0; s < NSLOT; s++)); do [ "${SLOST[$s]}" = ab ] || usable+=("$s"); done
	[ ${#usable[@]} -gt 0 ] || NG=0
	G_ARGS_ALL=()
	for ((i = 1; i <= NG; i++)); do
		chaos_pick "${usable[@]}"; G_SLOT[$i]=$R
		# A host whose remote chunks hold the pattern: the other host filled.
		case ${SFILLED[${G_SLOT[$i]}]} in
		a) G_HOST[$i]=B ;;
		b) G_HOST[$i]=A ;;
		*) chaos_pick A B; G_HOST[$i]=$R ;;
		esac
		G_REG[$i]=${SNAME[${G_SLOT[$i]}]}
		chaos_pick seq rand; ord=$R
		chaos_pick 1 1 2 4 8; thr=$R
		chaos_rand 10; pf=""; [ "$R" -lt 3 ] && pf=--prefetch
		chaos_rand 10; lt=""
		[ "$R" -lt 3 ] && [[ ${SFILLED[${G_SLOT[$i]}]} == *${AGENT_OF[${G_HOST[$i]}]}* ]] && lt=--local-too
		chaos_rand 1001; ato=$((1000 + R))
		chaos_rand 250; G_DELAY[$i]=$R
		G_LOSTAT[$i]=${SLOST[${G_SLOT[$i]}]}
		G_OUT[$i]=$FP_TMP/r${ROUND}g$i.out
		G_ARGS_ALL[$i]="${G_REG[$i]} --seed ${SSEED[${G_SLOT[$i]}]} --order $ord --threads $thr $pf $lt"
		G_ATO_ALL[$i]=$ato
		G_DESC[$i]="${G_HOST[$i]}:${G_REG[$i]}(${SSIZE[${G_SLOT[$i]}]}M$([ "${SREPL[${G_SLOT[$i]}]}" = 1 ] && echo ",2 replicas"))/$ord/x$thr${pf:+/prefetch}${lt:+/local-too}@${G_DELAY[$i]}ms"
		G_CHURNED[$i]=0
		unset 'G_RC[$i]' 'G_END[$i]'
	done

	# --- plan: victims, relative to guest 1 (its own agent, the owner of
	#     its remote chunks) when there is one.
	gh=A
	[ "$NG" -gt 0 ] && gh=${G_HOST[1]}
	own=${AGENT_OF[$gh]} owner=${OTHER[${AGENT_OF[$gh]}]} both="a b"
	# A replicated region: the owner is one of its replicas' (not the
	# guest's own agent), "both" its two first chunk's replicas' owners.
	if [ "$NG" -gt 0 ] && [ "${SREPL[${G_SLOT[1]}]}" = 1 ]; then
		hl=()
		for t in ${RHOLD_OF[${G_SLOT[1]}]//;/ }; do
			[ "$t" != "$own" ] && [[ " ${hl[*]} " != *" $t "* ]] && hl+=("$t")
		done
		[ ${#hl[@]} -gt 0 ] || hl=(o1)
		chaos_pick "${hl[@]}"; owner=$R
		read -r -a hl <<<"${RHOLD_OF[${G_SLOT[1]}]%%;*}"
		both="o1 o2"
		[ ${#hl[@]} = 2 ] && both="${hl[*]}"
	fi
	chaos_rand 100
	if [ "$R" -lt 12 ]; then VICTIMS=""
	elif [ "$R" -lt 30 ]; then VICTIMS=$owner
	elif [ "$R" -lt 48 ]; then VICTIMS=$own
	elif [ "$R" -lt 64 ]; then VICTIMS=coord
	elif [ "$R" -lt 76 ]; then VICTIMS="$owner coord"
	elif [ "$R" -lt 88 ]; then VICTIMS="$own coord"
	else VICTIMS=$both
	fi
	# The kill comes this long after guest 1 started (its marker line).
	chaos_rand 300; T_KILL=$R
	chaos_rand 2; RESTART_NOW=$R
	chaos_rand 2; AGENTS_FIRST=$R
	chaos_rand 500; T_RESTART=$R
	chaos_rand 2; SAMEPORT[a]=$R
	chaos_rand 2; SAMEPORT[b]=$R
	chaos_rand 2; SAMEPORT[o1]=$R
	chaos_rand 2; SAMEPORT[o2]=$R
	# Sometimes a region a guest maps is deleted and replaced under it.
	CHURN=-1
	chaos_rand 100
	if [ "$NG" -gt 0 ] && [ "$R" -lt 25 ]; then
		CHURN=${G_SLOT[1]}
		chaos_rand 300; T_CHURN=$R
	fi
	chaos_rand 2; SCRATCH=$R
	[[ " $VICTIMS " == *" coord "* ]] && SCRATCH=1

	# --- go
	now_ms; T0=$NOW
	for ((i = 1; i <= NG; i++)); do
		G_ARGS=${G_ARGS_ALL[$i]} G_ATO=${G_ATO_ALL[$i]}
		chaos_guest_start "$i"
	done
	SCR_PID="" SCR_OUT=$FP_TMP/r${ROUND}scratch.acks
	rm -f "$FP_TMP/scratch.stop"
	if [ "$SCRATCH" = 1 ]; then
		(
			for ((k = 0; k < 8; k++)); do
				[ -e "$FP_TMP/scratch.stop" ] && break
				nm=s${ROUND}x$k
				fp_cli A a --timeout-ms 2000 region create "$nm" --size 2M --wait 0 \
					>/dev/null 2>&1 && echo "C $nm"
				if [ $((k % 2)) = 1 ]; then
					echo "d? s${ROUND}x$((k - 1))"
					fp_cli A a --timeout-ms 2000 region delete "s${ROUND}x$((k - 1))" \
						>/dev/null 2>&1 && echo "D s${ROUND}x$((k - 1))"
				fi
				sleep 0.05
			done
		) >"$SCR_OUT" 2>&1 &
		SCR_PID=$!
	fi
	CH_PID="" CH_OUT=$FP_TMP/r${ROUND}churn.out
	if [ "$CHURN" -ge 0 ]; then
		# The replacement's name and seed are planned here, made there.
		CH_OLD=${SNAME[$CHURN]}
		GEN=$((GEN + 1))
		CH_NEW=d${CHURN}g$GEN CH_SEED=$((SEED % 100000 * 100 + GEN))
		chaos_pick 8 12 16 24 32; CH_SIZE=$R
		(
			ms_s "$T_CHURN"; sleep "$S"
			echo "d? $CH_OLD"
			fp_cli A a region delete "$CH_OLD" >/dev/null 2>&1 || exit 0
			echo "D $CH_OLD"
			fp_cli A a region create "$CH_NEW" --size "${CH_SIZE}M" \
				--nodes "${ID[a]},${ID[b]}" >/dev/null 2>&1 && echo "C $CH_NEW" &&
				fp_cli A a fill "$CH_NEW" --seed "$CH_SEED" >/dev/null 2>&1 && echo "FA" &&
				fp_cli B b fill "$CH_NEW" --seed "$CH_SEED" >/dev/null 2>&1 && echo "FB"
		) >"$CH_OUT" 2>&1 &
		CH_PID=$!
		for ((i = 1; i <= NG; i++)); do
			[ "${G_SLOT[$i]}" = "$CHURN" ] && G_CHURNED[$i]=1
		done
	fi

	KILLED_AT="" RESTARTED_AT=""
	if [ -n "$VICTIMS" ]; then
		if [ "$NG" -gt 0 ]; then
			fp_wait_log "${G_OUT[1]}" '^chaos-guest: started' 10 ||
				chaos_failure "guest 1 did not start within 10 s"
		fi
		ms_s "$T_KILL"; sleep "$S"
		for v in $VICTIMS; do chaos_kill "$v"; done
		now_ms; KILLED_AT=$((NOW - T0))
		if [ "$RESTART_NOW" = 1 ]; then
			ms_s "$T_RESTART"; sleep "$S"
			chaos_restart "$VICTIMS"
			now_ms; RESTARTED_AT=$((NOW - T0))
		fi
	fi

	# --- wait for the guests, with a hang bound each
	pending=$NG
	while [ "$pending" -gt 0 ]; do
		now_ms
		pending=0
		for ((i = 1; i <= NG; i++)); do
			[ -n "${G_RC[$i]:-}" ] && continue
			if ! alive "${G_PID[$i]}"; then
				wait "${G_PID[$i]}" 2>/dev/null
				G_RC[$i]=$?
				G_END[$i]=$((NOW - T0))
			elif [ $((NOW - T0 - G_DELAY[$i])) -gt $((HANG_S * 1000)) ]; then
				kill -KILL "${G_PID[$i]}" 2>/dev/null
				wait "${G_PID[$i]}" 2>/dev/null
				G_RC[$i]=hang
				G_END[$i]=$((NOW - T0))
			else
				pending=$((pending + 1))
			fi
		done
		[ "$pending" -gt 0 ] && sleep 0.02
	done
	now_ms; T_GDONE=$((NOW - T0))
	[ -n "$CH_PID" ] && wait "$CH_PID"
	if [ -n "$SCR_PID" ]; then
		: >"$FP_TMP/scratch.stop"
		wait "$SCR_PID"
	fi
	if [ -n "$VICTIMS" ] && [ "$RESTART_NOW" = 0 ]; then
		chaos_restart "$VICTIMS"
		now_ms; RESTARTED_AT=$((NOW - T0))
	fi

	chaos_daemons

	now_ms; TT="$TT up=$((NOW - T0))"
	# --- the guests' verdicts
	VERDICTS=""
	for ((i = 1; i <= NG; i++)); do
		h=${G_HOST[$i]}
		n=${AGENT_OF[$h]}
		o=${OTHER[$n]}
		# What it touches: the other agent's chunks, and its own when lost
		# (they are not mapped from the pool then, they fault) or with
		# --local-too.
		hit=none
		if [ "${SREPL[${G_SLOT[$i]}]}" = 1 ]; then
			# Replicated: whatever replica owners died, as long as
			# every chunk kept an in-sync replica.
			[[ " $DOWN " == *" coord "* ]] && hit=coord
			[[ " $DOWN " == *" $n "* ]] && hit=any
			chaos_rlost "${RHOLD_OF[${G_SLOT[$i]}]}" "$DOWN" && hit=any
			[ "${G_CHURNED[$i]}" = 1 ] && hit=any
		else
			for t in $o $n; do [[ ${G_LOSTAT[$i]} == *$t* ]] && hit=lost; done
		fi
		if [ "$hit" = none ] && [ "${SREPL[${G_SLOT[$i]}]}" != 1 ]; then
			[[ " $DOWN " == *" coord "* ]] && hit=coord
			for t in $n $o; do [[ " $DOWN " == *" $t "* ]] && hit=any; done
			[ "${G_CHURNED[$i]}" = 1 ] && hit=any
		fi
		chaos_judge "$i" "$hit"
		N_GUESTS=$((N_GUESTS + 1))
		if [ "${SREPL[${G_SLOT[$i]}]}" = 1 ]; then
			N_RGUESTS=$((N_RGUESTS + 1))
			[ "$V" = pass ] && N_RPASS=$((N_RPASS + 1))
		fi
		case $V in
		pass) N_PASS=$((N_PASS + 1)) ;;
		sigbus) N_SIGBUS=$((N_SIGBUS + 1)) ;;
		clean-error) N_CLEAN=$((N_CLEAN + 1)) ;;
		esac
		if [[ $V == FAIL:* ]]; then
			chaos_failure "guest $i (${G_DESC[$i]}, hit=$hit, ran ${G_END[$i]}ms) ${V#FAIL:}" "${G_OUT[$i]}"
			chaos_round_logs
		fi
		[ "$VERBOSE" = 1 ] && echo "    g$i: rc=${G_RC[$i]} end=${G_END[$i]}ms $(grep '^chaos-guest:' "${G_OUT[$i]}") ${G_LINE[$i]} $(grep '^farpage: ' "${G_OUT[$i]}" | head -n2 | tr '\n' ' ')"
		why=""
		if [ "$V" = clean-error ]; then
			why=$(grep -m1 '^farpage: ' "${G_OUT[$i]}" | sed -e 's/^farpage: touch [^:]*: //' \
				-e 's/^cannot map it through the agent at [^:]*: /map refused: /' \
				-e 's/^no agent listens on .*/no agent listens/' | cut -c1-100)
			why="(${why})"
		fi
		VERDICTS="$VERDICTS g${i}[${G_DESC[$i]}]=$V$why"
	done

	now_ms; TT="$TT judged=$((NOW - T0))"
	# --- the churned region: the replacement becomes the slot's region
	if [ "$CHURN" -ge 0 ]; then
		grep -q "^D $CH_OLD" "$CH_OUT" && unset 'ACKED[$CH_OLD]' && DELETED[$CH_OLD]=1
		if grep -q "^d? $CH_OLD" "$CH_OUT" && ! grep -q "^D $CH_OLD" "$CH_OUT"; then
			# The delete was not acknowledged: done or not, the slot
			# gets a new region below.
			unset 'ACKED[$CH_OLD]'
			SLOST[$CHURN]=ab
			fp_cli A a region delete "$CH_OLD" >/dev/null 2>&1 && DELETED[$CH_OLD]=1
		fi
		if grep -q "^C $CH_NEW" "$CH_OUT"; then
			ACKED[$CH_NEW]=1
		fi
		if grep -q "^D $CH_OLD" "$CH_OUT"; then
			SNAME[$CHURN]=$CH_NEW SSEED[$CHURN]=$CH_SEED SSIZE[$CHURN]=$CH_SIZE SFILLED[$CHURN]=ab SREPL[$CHURN]=0
			STABLE[$CHURN]=$(grep -q "^C $CH_NEW" "$CH_OUT" && chaos_table "$CH_NEW")
			# Whole only if made and filled with no agent killed meanwhile.
			if grep -q '^FB' "$CH_OUT" && [[ " $DOWN " != *" a "* && " $DOWN " != *" b "* ]]; then
				SLOST[$CHURN]=""
			else
				SLOST[$CHURN]=ab
			fi
			# A replacement that may exist but was not acknowledged: the
			# repair below makes another one.
			grep -q "^C $CH_NEW" "$CH_OUT" || [ -z "$(fp_cli A a region list 2>/dev/null | awk -v n="$CH_NEW" '$1 == n')" ] ||
				fp_cli A a region delete "$CH_NEW" >/dev/null 2>&1
		fi
	fi

	now_ms; TT="$TT churn=$((NOW - T0))"
	# --- acknowledged state: every region the coordinator acknowledged is
	#     listed, every acknowledged delete is gone, chunk tables unchanged
	if [ -n "$SCR_PID" ]; then
		while read -r op nm; do
			case $op in
			C) ACKED[$nm]=1 ;;
			# A delete tried but not acknowledged: it may or may not
			# have been done; the region may or may not be listed.
			'd?') unset 'ACKED[$nm]' ;;
			D) DELETED[$nm]=1 ;;
			esac
		done <"$SCR_OUT"
	fi
	if fp_cli A a region list >"$FP_TMP/list.out" 2>&1; then
		listed=" $(awk 'NR > 1 {print $1}' "$FP_TMP/list.out" | tr '\n' ' ') "
		for nm in "${!ACKED[@]}"; do
			[[ $listed == *" $nm "* ]] && continue
			chaos_failure "region $nm, whose create was acknowledged, is not listed$([[ " $DOWN " == *" coord "* ]] && echo " after the coordinator restart")" "$FP_TMP/list.out"
			unset 'ACKED[$nm]' # reported once
		done
		for nm in "${!DELETED[@]}"; do
			[[ $listed == *" $nm "* ]] || continue
			chaos_failure "region $nm, whose delete was acknowledged, is listed again" "$FP_TMP/list.out"
			unset 'DELETED[$nm]'
		done
		for ((s = 0; s < NSLOT; s++)); do
			[[ " $DOWN " == *" coord "* ]] || break
			[ -n "${ACKED[${SNAME[$s]}]:-}" ] || continue
			if [ "${SREPL[$s]}" = 1 ]; then
				# its replicas move (rebuilds): still 2 of each chunk
				chaos_rholders "${SNAME[$s]}" && grep -q '^state: replicas=2 ' "$FP_TMP/rstate.out" ||
					chaos_failure "region ${SNAME[$s]}: not 2 replicas after the coordinator restart: $(head -n1 "$FP_TMP/rstate.out")"
				continue
			fi
			tbl=$(chaos_table "${SNAME[$s]}")
			[ "$tbl" = "${STABLE[$s]}" ] ||
				chaos_failure "region ${SNAME[$s]}: chunk table changed: was [$(echo "${STABLE[$s]}" | tr -s ' \n' ' ')] now [$(echo "$tbl" | tr -s ' \n' ' ')]"
		done
		# Scratch regions go (those whose create was not acknowledged too).
		for nm in $(awk 'NR > 1 && $1 ~ /^s[0-9]+x[0-9]+$/ {print $1}' "$FP_TMP/list.out"); do
			if fp_cli A a region delete "$nm" >/dev/null 2>&1; then
				unset 'ACKED[$nm]'
				DELETED[$nm]=1
			else
				chaos_failure "delete of scratch region $nm failed"
			fi
		done
	else
		chaos_failure "region list failed: $(tail -n1 "$FP_TMP/list.out")" "$FP_TMP/list.out"
	fi
	now_ms; TT="$TT listed=$((NOW - T0))"
	# A sanitizer report in a daemon's log, first seen in this round.
	while IFS=: read -r f c; do
		[ "$c" -gt "${SANSEEN[$f]:-0}" ] &&
			chaos_failure "sanitizer report in $f (see the end of the run)" "$FP_TMP/$f"
		SANSEEN[$f]=$c
	done < <(cd "$FP_TMP" && grep -cE "$FP_SAN_RE" coord.log a.log b.log o1.log o2.log)

	# --- one line for the round
	kills=none
	if [ -n "$VICTIMS" ]; then
		how="under the guests"
		[ "$RESTART_NOW" = 1 ] || how="after them"
		[[ " $VICTIMS " == *" coord "* && "$VICTIMS" == *[ab]* && $AGENTS_FIRST = 1 ]] && how="$how, agents first"
		for v in a b; do
			[[ " $VICTIMS " == *" $v "* ]] || continue
			if [ "${SAMEPORT[$v]}" = 1 ]; then how="$how, $v same port"; else how="$how, $v new port"; fi
		done
		kills="${VICTIMS// /+}@${KILLED_AT:-?}ms restart@${RESTARTED_AT:-?}ms($how)"
	fi
	extra=""
	[ "$CHURN" -ge 0 ] && extra=" churn=$CH_OLD->$CH_NEW@${T_CHURN}ms"
	[ -n "$SCR_PID" ] && extra="$extra scratch=$(grep -c '^C' "$SCR_OUT")c/$(grep -c '^D' "$SCR_OUT")d"
	echo "chaos: seed=$SEED round=$ROUND kill=$kills$extra guests:${VERDICTS:- none}$([ $ROUND_FAILED = 1 ] && echo "  <-- FAILED")"

	[ "$STOP" = 1 ] && [ ${#FAILS[@]} -gt 0 ] && break
	now_ms; T_CHECKED=$((NOW - T0))

	chaos_repair
	now_ms
	[ "$VERBOSE" = 1 ] && echo "    times (ms): guests-done=$T_GDONE$TT checked=$T_CHECKED repaired=$((NOW - T0))"
done
DONE=$((ROUND > ROUNDS ? ROUNDS : ROUND))
ROUND=end
echo "chaos: seed=$SEED rounds=$DONE guests=$N_GUESTS passed=$N_PASS sigbus=$N_SIGBUS clean_errors=$N_CLEAN wrong=$N_WRONG zero=$N_ZERO writer_rounds=$N_WROUNDS bad_pages=$N_WPAGES_BAD repl_guests=$N_RGUESTS repl_passed=$N_RPASS failures=${#FAILS[@]} time=$((SECONDS - T_START))s"
chaos_keep
if [ ${#FAILS[@]} -gt 0 ]; then
	echo "chaos: ${#FAILS[@]} failures (replay with --seed $SEED):"
	for f in "${FAILS[@]}"; do echo "  $f"; done
	exit 1
fi
exit 0
