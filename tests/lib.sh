# shellcheck shell=bash
# Helpers for farpage's shell tests: start a coordinator and agents on
# ephemeral ports, run the CLI against them, clean up on every exit path.
#
# Set FARPAGE_BIN to the build dir before sourcing. Hosts: "host" names run
# commands either in a network namespace (fp_hosts_netns) or directly
# (loopback). Every process started is killed and every namespace and temp
# file removed by fp_cleanup (an EXIT trap).

FP_BIN=${FARPAGE_BIN:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)/build}
FP_COORD_BIN=$FP_BIN/coordinator/farpage-coordinator
FP_NODE_BIN=$FP_BIN/node/farpage-node
FP_CLI_BIN=$FP_BIN/cli/farpage
FP_TMP=$(mktemp -d /tmp/farpage-test.XXXXXX)
# shellcheck source=procs.sh
. "$(dirname "${BASH_SOURCE[0]}")/procs.sh"
# Every process this test starts carries the tag: fp_cleanup finds and
# ends them all, also the ones whose parent (a subshell) is gone.
export FP_RUN_ID=$FP_TMP
FP_PIDS=()
FP_NETNS=()
declare -A FP_HOST_RUN FP_HOST_IP FP_NODE_PID FP_NODE_SOCK FP_NODE_HOST FP_LAN_PORT
FP_COORD=""
FP_COORD_PID=""
FP_VERBOSE=${FP_VERBOSE:-0}
# What ASan, LSan, UBSan and TSan reports start with.
FP_SAN_RE='ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|runtime error:'

fp_log() { echo "[$(date +%T)] $*" >&2; }
fp_fail() { fp_log "FAIL: $*"; fp_dump_logs; exit 1; }
fp_skip() { fp_log "SKIP: $*"; exit 77; }

fp_dump_logs() {
	local f
	for f in "$FP_TMP"/*.log; do
		[ -f "$f" ] || continue
		echo "----- $(basename "$f") (last 30 lines)" >&2
		tail -n 30 "$f" >&2
	done
}

fp_cleanup() {
	local p n
	for p in "${FP_PIDS[@]}"; do kill -CONT "$p" 2>/dev/null; kill -TERM "$p" 2>/dev/null; done
	for _ in $(seq 50); do
		n=0
		for p in "${FP_PIDS[@]}"; do kill -0 "$p" 2>/dev/null && n=1; done
		[ $n = 0 ] && break
		sleep 0.1
	done
	for p in "${FP_PIDS[@]}"; do kill -KILL "$p" 2>/dev/null; done
	wait 2>/dev/null
	fp_end_tagged
	for n in "${FP_NETNS[@]}"; do ip netns del "$n" 2>/dev/null; done
	# A sanitizer report from any daemon (*.log) or guest (*.out, *.err)
	# fails the test, whatever else passed.
	if grep -lE "$FP_SAN_RE" "$FP_TMP"/*.log "$FP_TMP"/*.out "$FP_TMP"/*.err \
		>/dev/null 2>&1; then
		grep -hE -A30 "$FP_SAN_RE" "$FP_TMP"/*.log "$FP_TMP"/*.out \
			"$FP_TMP"/*.err 2>/dev/null | head -80 >&2
		fp_log "FAIL: a sanitizer reported errors in a daemon or guest (above)"
		FP_RC=1
	fi
	# FP_KEEP=DIR (by hand): the logs and outputs of the run stay there.
	[ -n "${FP_KEEP:-}" ] && cp -r "$FP_TMP" "$FP_KEEP" 2>/dev/null
	rm -rf "$FP_TMP"
}
# fp_end_tagged: ends whatever this test started that is still running
# (started in a subshell whose PID was the one recorded, a daemon's
# child): TERM, then KILL. Each is named on stderr, and the test fails:
# a test ends every process it starts (fp_bg gives the PID to end).
fp_end_tagged() {
	local left i
	mapfile -t left < <(fp_tagged FP_RUN_ID "$FP_RUN_ID")
	[ ${#left[@]} = 0 ] && return 0
	fp_log "FAIL: the test left ${#left[@]} process(es) running (ended now):"
	FP_RC=1
	fp_tagged_show "${left[@]}" >&2
	kill -TERM "${left[@]}" 2>/dev/null
	for ((i = 0; i < 50; i++)); do
		mapfile -t left < <(fp_tagged FP_RUN_ID "$FP_RUN_ID")
		[ ${#left[@]} = 0 ] && return 0
		sleep 0.1
	done
	kill -KILL "${left[@]}" 2>/dev/null
}

# fp_bg HOST CMD...: starts CMD on HOST in the background as a simple
# command, so that $! (FP_BG_PID, also in FP_PIDS) is the command itself,
# not a subshell around it. CMD reads fp_bg's stdin (`fp_bg ... <FIFO`):
# without the explicit <&0 an asynchronous command's stdin is /dev/null,
# and a guest that holds until a line on stdin would go on at once.
fp_bg() {
	local h=$1
	shift
	# shellcheck disable=SC2086
	${FP_HOST_RUN[$h]} "$@" <&0 &
	FP_BG_PID=$!
	FP_PIDS+=("$FP_BG_PID")
}

FP_RC=0
FP_AT_EXIT=()
# fp_at_exit CMD: run CMD on exit, after processes and namespaces are gone.
fp_at_exit() { FP_AT_EXIT+=("$1"); }
fp_exit() {
	local rc=$? c
	fp_cleanup
	for c in "${FP_AT_EXIT[@]}"; do $c; done
	[ "$FP_RC" != 0 ] && [ "$rc" = 0 ] && rc=$FP_RC
	exit "$rc"
}
trap fp_exit EXIT

# fp_key: the run's cluster key (made once), which every daemon and CLI
# of the run finds through FARPAGE_KEY_FILE. FP_INSECURE=1: none, and
# everything runs with --insecure.
fp_key() {
	[ "${FP_INSECURE:-0}" = 1 ] && return 0
	if [ ! -s "$FP_TMP/cluster.key" ]; then
		"$FP_CLI_BIN" keygen -o "$FP_TMP/cluster.key" >/dev/null ||
			fp_fail "farpage keygen failed"
	fi
	export FARPAGE_KEY_FILE=$FP_TMP/cluster.key
}
# What the daemons and the CLI are given for FP_INSECURE=1.
fp_insecure_flag() { [ "${FP_INSECURE:-0}" = 1 ] && echo --insecure; }

fp_require() {
	local b
	for b in "$FP_COORD_BIN" "$FP_NODE_BIN" "$FP_CLI_BIN"; do
		[ -x "$b" ] || fp_fail "$b not built"
	done
	fp_key
	[ "$(id -u)" = 0 ] || fp_skip "needs root (userfaultfd for all processes, namespaces)"
	[ -e /proc/sys/vm/unprivileged_userfaultfd ] || [ -e /dev/userfaultfd ] ||
		fp_skip "kernel without userfaultfd"
}

# Every wait below is for something that must happen (a readiness marker,
# a process that must end): its bound only tells a hang from a slow
# machine, so it is never shorter than FP_WAIT_MIN seconds (default 60),
# whatever the caller asks: a loaded machine (CI, a user's busy host) may
# take seconds for what takes milliseconds here. A test that must see
# something NOT happen within a time does not use these.
# fp_deadline SECS: the time (date +%s) at which a wait of SECS gives up.
fp_deadline() {
	local s=${1:-20} min=${FP_WAIT_MIN:-60}
	[ "$s" -ge "$min" ] || s=$min
	echo $(($(date +%s) + s))
}

# Waits until file $1 exists and is non-empty (up to $2 s, default 20).
fp_wait_file() {
	local end
	end=$(fp_deadline "${2:-20}")
	while [ "$(date +%s)" -le "$end" ]; do
		[ -s "$1" ] && return 0
		sleep 0.05
	done
	return 1
}

# fp_wait_socket PATH PID [SECS]: waits until the Unix socket PATH exists
# (a QEMU's QMP monitor), while PID runs, up to SECS (default 300).
# Returns 1 if PID ended or the time ran out first.
fp_wait_socket() {
	local end=$((SECONDS + ${3:-300}))
	until [ -S "$1" ]; do
		kill -0 "$2" 2>/dev/null && [ $SECONDS -lt $end ] || return 1
		sleep 0.1
	done
}

# fp_hosts_loopback NAME...: hosts share the root namespace (127.0.0.1).
fp_hosts_loopback() {
	local h
	for h in "$@"; do
		FP_HOST_RUN[$h]=""
		FP_HOST_IP[$h]=127.0.0.1
	done
}

# fp_hosts_netns A B: two namespaces joined by a veth pair. Returns 1 if
# namespaces cannot be made (the caller falls back to loopback).
fp_hosts_netns() {
	local id=$$$RANDOM net a=$1 b=$2
	local na=fp${id}a nb=fp${id}b va=fpa${id: -8} vb=fpb${id: -8}
	net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
	ip netns add "$na" 2>/dev/null || return 1
	FP_NETNS+=("$na")
	ip netns add "$nb" 2>/dev/null || return 1
	FP_NETNS+=("$nb")
	ip link add "$va" netns "$na" type veth peer name "$vb" netns "$nb" 2>/dev/null || return 1
	ip -n "$na" addr add "$net.1/24" dev "$va" &&
		ip -n "$nb" addr add "$net.2/24" dev "$vb" &&
		ip -n "$na" link set lo up && ip -n "$nb" link set lo up &&
		ip -n "$na" link set "$va" up && ip -n "$nb" link set "$vb" up || return 1
	FP_HOST_RUN[$a]="ip netns exec $na"
	FP_HOST_RUN[$b]="ip netns exec $nb"
	FP_HOST_IP[$a]=$net.1
	FP_HOST_IP[$b]=$net.2
	FP_LINK_A=$va FP_LINK_B=$vb FP_NS_A=$na FP_NS_B=$nb
	return 0
}

# fp_hosts_lan NAME...: a namespace per host, all on one segment (a bridge
# in a namespace of its own, FP_LAN_NS: every frame between two hosts
# passes through it), at $net.1, $net.2, ... Returns 1 if namespaces
# cannot be made.
fp_hosts_lan() {
	local id=$$$RANDOM sw net i=1 h ns v
	sw=fp${id}s
	net=10.$((RANDOM % 200 + 20)).$((RANDOM % 250 + 1))
	ip netns add "$sw" 2>/dev/null || return 1
	FP_NETNS+=("$sw")
	FP_LAN_NS=$sw
	ip -n "$sw" link add br0 type bridge 2>/dev/null &&
		ip -n "$sw" link set br0 up || return 1
	for h in "$@"; do
		ns=fp${id}h$i
		v=fpl${id: -7}$i
		ip netns add "$ns" 2>/dev/null || return 1
		FP_NETNS+=("$ns")
		ip link add "$v" netns "$ns" type veth peer name "p$i" netns "$sw" 2>/dev/null &&
			ip -n "$sw" link set "p$i" master br0 && ip -n "$sw" link set "p$i" up &&
			ip -n "$ns" addr add "$net.$i/24" dev "$v" && ip -n "$ns" link set "$v" up &&
			ip -n "$ns" link set lo up || return 1
		FP_HOST_RUN[$h]="ip netns exec $ns"
		FP_HOST_IP[$h]=$net.$i
		FP_LAN_PORT[$h]=p$i
		i=$((i + 1))
	done
}

# fp_host_cut HOST / fp_host_heal HOST: a host of fp_hosts_lan cut off
# the segment (its port on the bridge down: no frame to or from any other
# host, the coordinator's included; its own connections stay open, their
# packets are lost until the heal), and joined again.
fp_host_cut() {
	[ -n "${FP_LAN_PORT[$1]:-}" ] || fp_fail "fp_host_cut $1: not a host of fp_hosts_lan"
	ip -n "$FP_LAN_NS" link set "${FP_LAN_PORT[$1]}" down || fp_fail "cannot cut $1 off"
}
fp_host_heal() {
	[ -n "${FP_LAN_PORT[$1]:-}" ] || fp_fail "fp_host_heal $1: not a host of fp_hosts_lan"
	ip -n "$FP_LAN_NS" link set "${FP_LAN_PORT[$1]}" up || fp_fail "cannot join $1 again"
}

# fp_port HOST: a TCP port that nothing on HOST's address uses now, below
# the kernel's ephemeral range (net.ipv4.ip_local_port_range, read in
# HOST's namespace). A daemon restarted on the port it listened on (as a
# service manager restarts it on its configured one) finds it free: port
# 0 gives an ephemeral port, which any outgoing connection from that
# address may take as its source port while the daemon is down ("Address
# already in use" at the restart, with SO_REUSEADDR or not).
fp_port() {
	local h=$1 lo p i
	read -r lo _ < <(${FP_HOST_RUN[$h]} cat /proc/sys/net/ipv4/ip_local_port_range)
	[ "${lo:-0}" -gt 12000 ] || lo=32768
	for ((i = 0; i < 100; i++)); do
		p=$((10000 + (RANDOM * 32768 + RANDOM) % (lo - 10000)))
		if [ -z "$(${FP_HOST_RUN[$h]} ss -Htan "( sport = :$p )")" ]; then
			echo "$p"
			return 0
		fi
	done
	fp_fail "no free port below $lo on host $h"
}

# fp_coord_spawn HOST LISTEN DIR [flags]: a coordinator on HOST, waits for
# its address file (FP_COORD_PID; the address is in $FP_TMP/coord.addr).
fp_coord_spawn() {
	local h=$1 listen=$2 dir=$3
	shift 3
	rm -f "$FP_TMP/coord.addr"
	fp_key
	# shellcheck disable=SC2046
	${FP_HOST_RUN[$h]} "$FP_COORD_BIN" --listen "$listen" $(fp_insecure_flag) \
		--addr-file "$FP_TMP/coord.addr" --data-dir "$dir" \
		--log-level "${FP_LOG_LEVEL:-info}" "$@" >>"$FP_TMP/coord.log" 2>&1 &
	FP_COORD_PID=$!
	FP_PIDS+=("$FP_COORD_PID")
	fp_wait_file "$FP_TMP/coord.addr" || fp_fail "coordinator did not start on $listen"
}

# fp_coord_start HOST [extra flags]
fp_coord_start() {
	local h=$1
	shift
	FP_COORD_HOST=$h
	fp_coord_spawn "$h" "${FP_HOST_IP[$h]}:$(fp_port "$h")" "$FP_TMP/coord" "$@"
	FP_COORD=$(head -n1 "$FP_TMP/coord.addr")
}

# fp_node_start HOST NAME [extra flags]: agent NAME on HOST.
fp_node_start() {
	local h=$1 n=$2
	shift 2
	rm -f "$FP_TMP/$n.addr"
	FP_NODE_SOCK[$n]=$FP_TMP/$n.sock
	FP_NODE_HOST[$n]=$h
	fp_key
	# shellcheck disable=SC2046
	${FP_HOST_RUN[$h]} "$FP_NODE_BIN" --coordinator "$FP_COORD" --name "$n" $(fp_insecure_flag) \
		--pool-size "${FP_POOL:-256M}" --data-listen "${FP_HOST_IP[$h]}:$(fp_port "$h")" \
		--addr-file "$FP_TMP/$n.addr" --sock "${FP_NODE_SOCK[$n]}" \
		--heartbeat-ms 200 --log-level "${FP_LOG_LEVEL:-info}" \
		${FP_FAULT_MODE:+--fault-mode "$FP_FAULT_MODE"} \
		${FP_FAULT_THREADS:+--fault-threads "$FP_FAULT_THREADS"} \
		${FP_DIRTY_TRACKING:+--dirty-tracking "$FP_DIRTY_TRACKING"} "$@" \
		>>"$FP_TMP/$n.log" 2>&1 &
	FP_NODE_PID[$n]=$!
	FP_PIDS+=("$!")
	fp_wait_file "$FP_TMP/$n.addr" || fp_fail "agent $n did not start"
}

# fp_node_refused HOST NAME LOG WHAT [flags]: agent NAME on HOST (an 8M
# pool, its socket in FP_TMP), which must refuse to start: its output in
# LOG, its exit status in FP_REFUSED_RC; fails (WHAT in the message) if it
# still runs after 60 s or exits 0.
fp_node_refused() {
	local h=$1 n=$2 log=$3 what=$4 p rc
	shift 4
	# shellcheck disable=SC2046
	${FP_HOST_RUN[$h]} "$FP_NODE_BIN" --coordinator "$FP_COORD" --name "$n" $(fp_insecure_flag) \
		--pool-size 8M --sock "$FP_TMP/$n.sock" "$@" >"$log" 2>&1 &
	p=$!
	FP_PIDS+=("$p")
	fp_wait_pid "$p" 60
	rc=$?
	[ "$rc" != 124 ] || fp_fail "$what: the agent did not end"
	[ "$rc" != 0 ] || { cat "$log" >&2; fp_fail "$what: the agent exited 0"; }
	FP_REFUSED_RC=$rc
}

# fp_metrics_page NODE: agent NODE's /metrics (started with
# --metrics-listen), read on NODE's host; fails if it cannot be read.
fp_metrics_page() {
	local m h=${FP_NODE_HOST[$1]:-} run=
	m=$(sed -n 's/^metrics //p' "$FP_TMP/$1.addr")
	[ -n "$m" ] || return 1
	[ -n "$h" ] && run=${FP_HOST_RUN[$h]}
	$run curl -sf "http://$m/metrics"
}

# fp_metric NODE SAMPLE: the value of SAMPLE (a metric name with its labels,
# as /metrics prints it) on agent NODE's /metrics; empty if absent.
fp_metric() {
	fp_metrics_page "$1" | awk -v s="$2" '$1 == s { print $2; exit }'
}

# fp_metric_dups NODE: the series (name and labels) that NODE's /metrics
# lists more than once (a scraper refuses such a page); fails if none
# could be read.
fp_metric_dups() {
	local page
	page=$(fp_metrics_page "$1") && [ -n "$page" ] || return 1
	grep -v '^#' <<<"$page" | awk '{print $1}' | sort | uniq -d
}

# fp_repl ARGS...: tests/fp_repl (a replicated region's states, its
# replicas' pools compared) on the coordinator's host, authenticated as
# the tests are.
fp_repl() {
	# shellcheck disable=SC2046
	${FP_HOST_RUN[$FP_COORD_HOST]} "$FP_BIN/tests/fp_repl" $(fp_insecure_flag) "$@"
}

# fp_repl_synced NAME GEN: region NAME has every replica in sync, at a
# replica generation past GEN (its state left in $FP_TMP/st.out).
fp_repl_synced() {
	fp_repl state "$FP_COORD" "$1" >"$FP_TMP/st.out" 2>&1 &&
		grep -q '^state: .* missing=0 rebuilding=0 ' "$FP_TMP/st.out" &&
		[ "$(fp_field "$FP_TMP/st.out" state: rgen)" -gt "$2" ]
}

# fp_node_id_log NAME: the node id agent NAME logged when it last joined
# (read from its log: known while the coordinator cannot be reached, and
# the new one after a restart).
fp_node_id_log() {
	sed -n "s/.* as node \([0-9]*\) ($1).*/\1/p" "$FP_TMP/$1.log" | tail -n1
}

# fp_cli HOST NODE args...: the CLI on HOST talking to NODE's agent.
fp_cli() {
	local h=$1 n=$2
	shift 2
	# shellcheck disable=SC2046
	${FP_HOST_RUN[$h]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$n]:-}" \
		"$FP_CLI_BIN" --coordinator "$FP_COORD" $(fp_insecure_flag) "$@"
}

# Value of key=VALUE in the last line of $1 matching ^$2.
fp_field() { # file prefix key
	grep "^$2" "$1" | tail -n1 | tr ' ' '\n' | sed -n "s/^$3=//p"
}

# fp_stat HOST NODE KEY: KEY= of NODE's `farpage stats` (its faults line
# or its cache line: their keys differ; empty if absent).
fp_stat() {
	fp_cli "$1" "$2" stats 2>/dev/null | tr ' ' '\n' | sed -n "s/^$3=//p" | head -n1
}

# Pages an agent's cache may hold beyond its bound while reads and
# write-backs are in flight (the agent's FLOOP_CACHE_SLACK).
FP_CACHE_SLACK_PAGES=$((32 * 16 + 64 * 16 + 512))

# fp_cache_stat HOST NODE KEY: KEY= of the cache line of NODE's
# `farpage stats` (empty if its agent has no cache).
fp_cache_stat() {
	fp_cli "$1" "$2" stats 2>/dev/null | grep ' cache: ' | tr ' ' '\n' |
		sed -n "s/^$3=//p" | head -n1
}

# fp_touch_ok NAME OUTFILE: a `farpage touch` run passed: every page it
# touched verified, none wrong or zero, no SIGBUS, some pages remote.
fp_touch_ok() {
	local f=$2 w z b
	grep -q '^touch:' "$f" || { cat "$f" >&2; fp_fail "$1: touch printed no result line"; }
	w=$(fp_field "$f" touch: wrong) z=$(fp_field "$f" touch: zero) b=$(fp_field "$f" touch: sigbus)
	[ "$w" = 0 ] && [ "$z" = 0 ] && [ "$b" = 0 ] ||
		{ cat "$f" >&2; fp_fail "$1: wrong=$w zero=$z sigbus=$b"; }
	[ "$(fp_field "$f" touch: verified)" = "$(fp_field "$f" touch: pages)" ] ||
		{ cat "$f" >&2; fp_fail "$1: not every touched page verified"; }
	[ "$(fp_field "$f" touch: remote)" -gt 0 ] || fp_fail "$1: no remote pages"
	fp_log "ok: $1 ($(grep '^touch:' "$f" | tail -n1 | cut -d' ' -f2-7))"
}

# fp_touch_sigbus NAME OUTFILE RC: the run failed loudly with a SIGBUS,
# and every page it read before that verified: never a wrong or zero page.
fp_touch_sigbus() {
	local f=$2 w z b
	[ "$3" != 0 ] || { cat "$f" >&2; fp_fail "$1: touch passed, expected SIGBUS"; }
	grep -q '^touch:' "$f" || { cat "$f" >&2; fp_fail "$1: touch printed no result line"; }
	w=$(fp_field "$f" touch: wrong) z=$(fp_field "$f" touch: zero) b=$(fp_field "$f" touch: sigbus)
	[ "$w" = 0 ] && [ "$z" = 0 ] || { cat "$f" >&2; fp_fail "$1: a page read wrong data (wrong=$w zero=$z)"; }
	[ "${b:-0}" -gt 0 ] && grep -q SIGBUS "$f" || { cat "$f" >&2; fp_fail "$1: no SIGBUS reported"; }
	fp_log "ok: $1 (SIGBUS after $(fp_field "$f" touch: verified) verified pages, none wrong or zero)"
}

# fp_wait_log_wall FILE REGEX SECS [COUNT]: fp_wait_log with SECS of
# wall-clock time (it counts polls, and a poll's forks take far longer
# under TCG: the VM tests).
fp_wait_log_wall() {
	local end=$((SECONDS + $3)) n
	for (( ; ; )); do
		n=$(grep -cE "$2" "$1" 2>/dev/null)
		[ "${n:-0}" -ge "${4:-1}" ] && return 0
		[ "$SECONDS" -ge "$end" ] && return 1
		sleep 0.1
	done
}

# fp_wait_log FILE REGEX [SECS] [COUNT]: waits until FILE has COUNT (default
# 1) lines matching REGEX (grep -E), up to SECS (default 20). Returns 1 if
# they never come.
fp_wait_log() {
	local end n
	end=$(fp_deadline "${3:-20}")
	while [ "$(date +%s)" -le "$end" ]; do
		n=$(grep -cE "$2" "$1" 2>/dev/null)
		[ "${n:-0}" -ge "${4:-1}" ] && return 0
		sleep 0.05
	done
	return 1
}

# fp_coord_respawn HOST [--fresh] [flags]: the coordinator again, on the
# address the agents know; --fresh: with a new, empty data directory (the
# tables are lost: other node ids, other cluster id).
fp_coord_respawn() {
	local h=$1 dir=$FP_TMP/coord
	shift
	if [ "${1:-}" = --fresh ]; then
		dir=$FP_TMP/coord.fresh.$RANDOM$RANDOM
		shift
	fi
	fp_coord_spawn "$h" "$FP_COORD" "$dir" "$@"
	[ "$(head -n1 "$FP_TMP/coord.addr")" = "$FP_COORD" ] ||
		fp_fail "coordinator came back on $(head -n1 "$FP_TMP/coord.addr"), not $FP_COORD"
}

# fp_node_id NAME: the node id the coordinator gives agent NAME now.
fp_node_id() {
	# shellcheck disable=SC2046
	${FP_HOST_RUN[$FP_COORD_HOST]} "$FP_CLI_BIN" --coordinator "$FP_COORD" $(fp_insecure_flag) status --json 2>/dev/null |
		tr '{' '\n' | grep "\"name\": \"$1\"" | sed -n 's/.*"id": \([0-9]*\).*/\1/p' | head -n1
}

# fp_wait_pid PID [SECS]: waits for PID (a child) to end, up to SECS
# (default 60): a hang detector. Returns its exit status, or 124 (and
# kills it) if it is still running then.
fp_wait_pid() {
	local end
	end=$(fp_deadline "${2:-60}")
	while [ "$(date +%s)" -le "$end" ]; do
		kill -0 "$1" 2>/dev/null || break
		sleep 0.05
	done
	if kill -0 "$1" 2>/dev/null; then
		kill -KILL "$1" 2>/dev/null
		wait "$1" 2>/dev/null
		return 124
	fi
	wait "$1"
}

# tests/fp_coh "pages" programs (test_coh_failure, test_coh_replicas,
# test_coh_recreate). fp_coh_pages X REGION P [NODE]: program X on agent
# NODE's socket (default: agent X's) for REGION's pages 0..P-1, fed
# through a fifo (its fd FP_COH_FD[X], its pid FP_COH_PID[X], its output
# $FP_TMP/X.prog, emptied), once it mapped.
declare -gA FP_COH_FD FP_COH_PID
fp_coh_pages() {
	local x=$1 node=${4:-$1} fd
	rm -f "$FP_TMP/$x.fifo"
	mkfifo "$FP_TMP/$x.fifo" || fp_fail "fifo"
	: >"$FP_TMP/$x.prog"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$node]} "$FP_BIN/tests/fp_coh" "$2" pages "$3" \
		<"$FP_TMP/$x.fifo" >>"$FP_TMP/$x.prog" 2>&1 &
	FP_COH_PID[$x]=$!
	FP_PIDS+=("$!")
	exec {fd}>"$FP_TMP/$x.fifo"
	FP_COH_FD[$x]=$fd
	fp_wait_log "$FP_TMP/$x.prog" '^coherent: mapped' 120 ||
		{ cat "$FP_TMP/$x.prog" >&2; fp_fail "fp_coh on $x did not map $2"; }
}

# fp_coh_say X LINE ANSWER: LINE to X's program, which must print ANSWER
# (a fixed string) as its next answer.
fp_coh_say() {
	local x=$1 n end got
	n=$(grep -c '^coherent: ' "$FP_TMP/$x.prog")
	echo "$2" >&"${FP_COH_FD[$x]}"
	end=$(fp_deadline 180)
	while [ "$(grep -c '^coherent: ' "$FP_TMP/$x.prog")" -le "$n" ]; do
		kill -0 "${FP_COH_PID[$x]}" 2>/dev/null || break
		[ "$(date +%s)" -le "$end" ] || break
		sleep 0.05
	done
	got=$(grep '^coherent: ' "$FP_TMP/$x.prog" | sed -n "$((n + 1))p")
	[ "$got" = "coherent: $3" ] ||
		{ cat "$FP_TMP/$x.prog" >&2; fp_fail "$x: '$2' answered '${got:-nothing}', not '$3'"; }
}

# fp_coh_check X V P: X's program reads its P pages, which must all hold
# value V (page i's words V + i).
fp_coh_check() {
	fp_coh_say "$1" "check $2" "check $2 pages=$3 match=$3 first=-"
}

# fp_coh_end X...: each X's program told to end; each must exit 0.
fp_coh_end() {
	local x
	for x in "$@"; do echo end >&"${FP_COH_FD[$x]}"; done
	for x in "$@"; do
		fp_wait_pid "${FP_COH_PID[$x]}" 120 ||
			{ cat "$FP_TMP/$x.prog" >&2; fp_fail "fp_coh on $x did not end well"; }
	done
}

# fp_faults HOST NODE: page faults agent NODE has read so far.
fp_faults() {
	fp_cli "$1" "$2" stats 2>/dev/null | tr ' ' '\n' | sed -n 's/^faults=//p' | head -n1
}

# fp_wait_faults HOST NODE MIN [SECS]: waits until agent NODE has read at
# least MIN faults (guests are blocked on them): the readiness marker for
# "a guest waits on a fault now".
fp_wait_faults() {
	local end f
	end=$(fp_deadline "${4:-20}")
	while [ "$(date +%s)" -le "$end" ]; do
		f=$(fp_faults "$1" "$2")
		[ "${f:-0}" -ge "$3" ] && return 0
		sleep 0.05
	done
	return 1
}

# vmram_require: what a test booting QEMU on a region as its RAM needs
# (tests/vm/ram.sh, bigram.sh): skips (77) or fails saying why.
vmram_require() {
	[ "$(uname -m)" = x86_64 ] || fp_skip "boots Debian's amd64 kernel: needs an x86_64 host"
	grep -qE '^FARPAGE_SANITIZE:STRING=.+' "$FP_BIN/CMakeCache.txt" 2>/dev/null &&
		fp_skip "sanitizer build: an uninstrumented QEMU cannot load its preload library"
	[ -f "$FP_BIN/vm/libfarpage-preload.so" ] || fp_fail "$FP_BIN/vm/libfarpage-preload.so is not built"
	[ -x "$FP_BIN/tests/fp_vmram_init" ] || fp_fail "$FP_BIN/tests/fp_vmram_init is not built"
}
