#!/bin/bash
# Runs INSIDE the SoftRoCE VM started by tests/vm/run.sh, as root, chrooted
# into the host's userspace (read-only 9p + tmpfs overlay); /out is the
# writable share that goes back to the host.
#
#   guest.sh --bin BUILD_DIR --src SOURCE_DIR [--out DIR]
#
# Sets up two SoftRoCE devices in one namespace, rxe0 on vA (10.0.0.1) and
# rxe1 on vB (10.0.0.2), the two ends of a veth pair, then runs:
#   a. $BIN/tests/test_xport_rdma with FARPAGE_RDMA_DEVS=rxe0,rxe1
#      (SKIP while it is not built; its exit 77 is a FAIL here: devices exist)
#   b. tests/two-node.sh over verbs (agent A on rxe0, agent B on rxe1); over
#      tcp while farpage-node has no --rdma-device yet
#   c. tests/vm/revoke.sh: a peer whose lease expired loses RDMA access to
#      a pool (its READ on the old QP fails) and gets it back with a fresh
#      exchange once it is up again (SKIP while fp_rdma_peer is not built)
#   d. tests/vm/replicas.sh: a region of two replicas over verbs (owners
#      on rxe1, the guests' agent on rxe0): every written page goes to
#      both as RDMA WRITEs (counted exactly), both hold it, and reads fail
#      over to the survivor when an owner is killed -9
# Exit status 0 only if every step that ran passed.
# Environment: FARPAGE_VM_SIZE (region size, default 16M),
# FARPAGE_VM_GID_INDEX (adds --gid-index N to both agents),
# FARPAGE_VM_STEPS (the steps to run, e.g. "d"; default all, "abcd"),
# FARPAGE_VM_RDMA_MR (window|read: FARPAGE_RDMA_MR of every step, the A/B
# switch of READs straight into a cache; with "read", a registration per
# READ, the registration checks of a. and b. fail, as they should).
set -uo pipefail
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
BIN=""
SRC=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
OUT=/tmp
# A step's hang bound, not a speed check: each step's own waits are
# bounded, and beside a CPU hog the replicas step alone took over 600 s
# under TCG (its write pass of 512 pages 3 minutes).
STEP_S=1200
while [ $# -gt 0 ]; do
	case $1 in
	--bin) BIN=$2; shift 2 ;;
	--src) SRC=$2; shift 2 ;;
	--out) OUT=$2; shift 2 ;;
	*) echo "guest.sh: unknown argument $1" >&2; exit 2 ;;
	esac
done
[ -n "$BIN" ] || { echo "guest.sh: --bin BUILD_DIR is required" >&2; exit 2; }
SIZE=${FARPAGE_VM_SIZE:-16M}
[ -n "${FARPAGE_VM_RDMA_MR:-}" ] && export FARPAGE_RDMA_MR=$FARPAGE_VM_RDMA_MR
IP_A=10.0.0.1
IP_B=10.0.0.2
VETH_MTU=9000 # > 4096 + headers: rxe active_mtu 4096, a 4 KiB READ is one packet

up() { local u; read -r u _ </proc/uptime; echo "$u"; }
now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN{printf "%.1f", b-a}'; }
T_GUEST=$(now)
echo "### guest: kernel $(uname -r), $(nproc) CPUs, $(awk '/MemTotal/{printf "%d MiB", $2/1024}' /proc/meminfo), uptime at start $(up)s"

# ------------------------------------------------------------ results
S_NAME=() S_RES=() S_SECS=() S_NOTE=()
record() { # name result secs note
	S_NAME+=("$1") S_RES+=("$2") S_SECS+=("$3") S_NOTE+=("$4")
	echo "=== [$1] $2 (${3}s)${4:+: $4}"
}

# ------------------------------------------------------------ setup
ulimit -l unlimited # MRs pin memory
# bash process substitution (tests/lib.sh) needs /dev/fd; the bare devtmpfs
# has none
[ -e /dev/fd ] || ln -s /proc/self/fd /dev/fd
ip link set lo up   # nothing else brings lo up in this bare guest
setup() {
	local m i
	for m in veth rdma_rxe; do
		modprobe "$m" || { echo "modprobe $m failed"; return 1; }
	done
	ip link add vA mtu $VETH_MTU type veth peer name vB mtu $VETH_MTU || return 1
	# GID 0 is the IPv6 link-local address: usable at once (no duplicate
	# address detection, a second or more under TCG, during which a QP's
	# move to RTR cannot resolve the peer and fails ETIMEDOUT)
	sysctl -qw net.ipv6.conf.vA.accept_dad=0 net.ipv6.conf.vB.accept_dad=0 || return 1
	ip addr add $IP_A/24 dev vA && ip addr add $IP_B/24 dev vB || return 1
	ip link set vA up && ip link set vB up || return 1
	rdma link add rxe0 type rxe netdev vA || return 1
	rdma link add rxe1 type rxe netdev vB || return 1
	# Both addresses are local to this namespace, so 10.0.0.1 -> 10.0.0.2
	# would be short-cut through lo and RoCEv2 with IPv4 GIDs would not
	# work. Force locally generated traffic onto the veth wire (policy
	# routing + accept_local); incoming packets still hit the local table.
	# (IPv6 link-local GIDs, index 0, need none of this.)
	sysctl -qw net.ipv4.conf.all.rp_filter=0 net.ipv4.conf.vA.rp_filter=0 \
		net.ipv4.conf.vB.rp_filter=0 net.ipv4.conf.vA.accept_local=1 \
		net.ipv4.conf.vB.accept_local=1 || return 1
	ip route add $IP_B/32 dev vA src $IP_A table 100 &&
		ip route add $IP_A/32 dev vB src $IP_B table 101 &&
		ip rule add pref 10 to $IP_B iif lo lookup 100 &&
		ip rule add pref 11 to $IP_A iif lo lookup 101 &&
		ip rule add pref 100 lookup local &&
		ip rule del pref 0 || return 1
	ip neigh replace $IP_B lladdr "$(cat /sys/class/net/vB/address)" dev vA nud permanent &&
		ip neigh replace $IP_A lladdr "$(cat /sys/class/net/vA/address)" dev vB nud permanent || return 1
	# ... and each end's link-local neighbour known, as the IPv4 ones
	local llA llB
	llA=$(ip -6 -o addr show dev vA scope link | awk '{ sub(/\/.*/, "", $4); print $4 }')
	llB=$(ip -6 -o addr show dev vB scope link | awk '{ sub(/\/.*/, "", $4); print $4 }')
	[ -n "$llA" ] && [ -n "$llB" ] || { echo "no IPv6 link-local address on vA/vB"; return 1; }
	ip -6 neigh replace "$llB" lladdr "$(cat /sys/class/net/vB/address)" dev vA nud permanent &&
		ip -6 neigh replace "$llA" lladdr "$(cat /sys/class/net/vA/address)" dev vB nud permanent || return 1
	for ((i = 0; i < 100; i++)); do
		grep -q ACTIVE /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null &&
			grep -q ACTIVE /sys/class/infiniband/rxe1/ports/1/state 2>/dev/null && return 0
		sleep 0.1
	done
	echo "rxe ports did not become ACTIVE"
	return 1
}
# GID tables: up to 1024 sysfs entries per port; bash builtins only (a fork
# per entry costs ~0.1 s under TCG); stop at the first all-zero entry.
show_gids() {
	local d=$1 i g t n
	for ((i = 0; i < 16; i++)); do
		read -r g <"/sys/class/infiniband/$d/ports/1/gids/$i" 2>/dev/null || break
		[ "$g" = 0000:0000:0000:0000:0000:0000:0000:0000 ] && break
		read -r t <"/sys/class/infiniband/$d/ports/1/gid_attrs/types/$i" 2>/dev/null
		read -r n <"/sys/class/infiniband/$d/ports/1/gid_attrs/ndevs/$i" 2>/dev/null
		echo "  $d gid[$i] $g ${t:-?} ${n:-?}"
	done
}
t=$(now)
if setup_out=$(setup 2>&1); then
	SETUP_OK=1
	[ -n "$setup_out" ] && echo "$setup_out"
	echo "### rdma link:"; rdma link show
	echo "### ibv_devices:"; ibv_devices
	ibv_devinfo -d rxe0 | grep -E 'hca_id|transport|state|mtu|link_layer'
	echo "### GID tables:"; show_gids rxe0; show_gids rxe1
	echo "### rxe hw_counters: $(cd /sys/class/infiniband/rxe0/ports/1/hw_counters 2>/dev/null && echo *)"
	record "setup (veth vA/vB, rxe0/rxe1)" PASS "$(since "$t")" ""
else
	SETUP_OK=0
	echo "$setup_out"
	echo "### dmesg:"; dmesg | tail -20
	record "setup (veth vA/vB, rxe0/rxe1)" FAIL "$(since "$t")" "$(echo "$setup_out" | tail -n1)"
fi

# ------------------------------------------------------------ counters
# hw_counters of both rxe ports, as "dev/name value" lines.
hw_snap() {
	local d f v
	for d in rxe0 rxe1; do
		for f in /sys/class/infiniband/$d/ports/1/hw_counters/*; do
			[ -f "$f" ] || continue
			read -r v <"$f" 2>/dev/null || continue
			echo "$d/${f##*/} $v"
		done
		read -r v <"/sys/class/net/$([ $d = rxe0 ] && echo vA || echo vB)/statistics/tx_packets"
		echo "$d/veth_tx_packets $v"
	done
}
# Prints the counters that changed between two snapshots; sets HW_DELTA[k].
declare -A HW_DELTA
hw_delta() { # before after
	local k v b
	HW_DELTA=()
	declare -A before
	while read -r k v; do before[$k]=$v; done <<<"$1"
	while read -r k v; do
		b=${before[$k]:-0}
		HW_DELTA[$k]=$((v - b))
		[ "$v" != "$b" ] && printf '  %-34s %12s -> %-12s (+%s)\n' "$k" "$b" "$v" $((v - b))
	done <<<"$2"
	return 0
}

# ------------------------------------------------------------ a. device tests
step_xport_rdma() {
	local name="test_xport_rdma (rxe0,rxe1)" t rc b=$BIN/tests/test_xport_rdma
	echo; echo "=== [$name] $b"
	if [ ! -x "$b" ]; then
		record "$name" SKIP 0 "$b not built yet"
		return
	fi
	t=$(now)
	# Its READs must all succeed: an ACK timeout of 537 ms (not 67),
	# so that TCG on a busy host, which can stall rxe's replies past
	# the default's half second of retries, does not fail them.
	(cd /tmp && FARPAGE_RDMA_DEVS=rxe0,rxe1 FARPAGE_RDMA_TIMEOUT=17 \
		timeout -k 10 300 "$b")
	rc=$?
	case $rc in
	0) record "$name" PASS "$(since "$t")" "" ;;
	77) record "$name" FAIL "$(since "$t")" "exit 77 (skip) although rxe0 and rxe1 exist" ;;
	124 | 137) record "$name" FAIL "$(since "$t")" "timed out after 300 s" ;;
	*) record "$name" FAIL "$(since "$t")" "exit $rc" ;;
	esac
}

# ------------------------------------------------------------ b. two-node
kv() { tr ' ' '\n' <<<"$1" | sed -n "s/^$2=//p" | head -n1; } # "line" key
step_two_node() {
	local verbs=0 name t rc out last why="" stats=$OUT/two-node-stats.txt
	local args=() before after mism remote tr_ a_remote b_id a_reads gidx
	local a_wbytes="" a_bytes="" direct="" landed="" wbs mrregs= mrwin= mrinv= mrdrops= mrahead= nwin
	if "$BIN/node/farpage-node" --help 2>&1 | grep -- --rdma-device >/dev/null; then
		verbs=1
		gidx=""
		if [ -n "${FARPAGE_VM_GID_INDEX:-}" ] &&
			"$BIN/node/farpage-node" --help 2>&1 | grep -- --gid-index >/dev/null; then
			gidx=" --gid-index $FARPAGE_VM_GID_INDEX"
		fi
		name="two-node (verbs, rxe0 <-> rxe1, $SIZE)"
		# Read-ahead off: every remote page is then exactly one fault and
		# one RDMA READ, which is what the counter check below compares
		# (read-ahead may fetch a page another fault already brought in).
		# A's cache holds 4 MiB, a quarter of the region: pages are
		# evicted (punched out of the memfd) and fetched again, their
		# windows of the cache (MR cache) invalidated before and
		# registered again by the next READ into them.
		args=(--transport verbs --a-args "--rdma-device rxe0 --readahead 0$gidx --metrics-listen $IP_A:0 --cache-size 4M"
			--b-args "--rdma-device rxe1 --readahead 0$gidx")
	else
		name="two-node (tcp, verbs not available yet)"
		args=(--transport tcp)
	fi
	out=$OUT/two-node.out
	rm -f "$stats"
	echo; echo "=== [$name] two-node.sh --size $SIZE --addrs $IP_A,$IP_B ${args[*]}"
	before=$(hw_snap)
	t=$(now)
	timeout -k 10 $STEP_S bash "$SRC/tests/two-node.sh" --bin "$BIN" --size "$SIZE" \
		--addrs "$IP_A,$IP_B" "${args[@]}" --keep-stats "$stats" --verbose 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	local secs; secs=$(since "$t")
	after=$(hw_snap)
	echo "--- rxe/veth counters that changed (before -> after):"
	hw_delta "$before" "$after"

	last=$(tail -n1 "$out")
	mism=$(kv "$last" mismatches)
	remote=$(kv "$last" remote)
	tr_=$(kv "$last" transport)
	[ "$rc" = 0 ] || why+="two-node.sh exit $rc$([ "$rc" = 124 ] && echo " (timed out after $STEP_S s)"); "
	case $last in two-node:*) ;; *) why+="last line is not the two-node: summary; " ;; esac
	[ "$mism" = 0 ] || why+="mismatches=${mism:-?}; "
	[ -n "$remote" ] && [ "$remote" -gt 0 ] 2>/dev/null || why+="remote=${remote:-?} (must be > 0); "

	# RDMA READ completions (host A's per-peer reads of host B, via the
	# coordinator) against the remote faults host A's agent resolved.
	a_remote="" a_reads=""
	if [ -s "$stats" ]; then
		echo "--- stats kept by two-node.sh:"
		grep -E '^(coordinator|host[AB]) ' "$stats"
		grep -E '"name": "host[AB]"' "$stats" | sed 's/, "data_addr".*"peers"/ ... "peers"/'
		a_remote=$(kv "$(grep '^hostA stats:' "$stats")" remote)
		b_id=$(grep '"name": "hostB"' "$stats" | sed -n 's/^ *{ *"id": \([0-9]*\),.*/\1/p')
		a_reads=$(grep '"name": "hostA"' "$stats" |
			sed -n "s/.*{ *\"node\": $b_id, \"transport\": \"[a-z]*\", \"reads\": \([0-9]*\),.*/\1/p")
		a_wbytes=$(grep '"name": "hostA"' "$stats" |
			sed -n "s/.*{ *\"node\": $b_id, [^}]*\"wbytes\": \([0-9]*\).*/\1/p")
		a_bytes=$(grep '"name": "hostA"' "$stats" |
			sed -n "s/.*{ *\"node\": $b_id, [^}]*\"bytes\": \([0-9]*\).*/\1/p")
		direct=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_cache_direct_read_pages_total" { print $4 }' "$stats")
		landed=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_cache_landing_copies_total" { print $4 }' "$stats")
		mrregs=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_rdma_mr_registrations_total" { print $4 }' "$stats")
		mrinv=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_rdma_mr_invalidations_total" { print $4 }' "$stats")
		mrwin=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_rdma_mr_window_registrations_total" { print $4 }' "$stats")
		mrdrops=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_rdma_mr_drops_total" { print $4 }' "$stats")
		mrahead=$(awk '$1 == "hostA" && $2 == "metric" && $3 == "farpage_rdma_mr_ahead_pages" { print $4 }' "$stats")
		echo "--- host A: pages read from host B ${a_bytes:+$((a_bytes / 4096))}, into the cache straight by RDMA READ ${direct:-?}, landed and copied ${landed:-?}"
		echo "--- host A: remote faults resolved ${a_remote:-?}, reads completed from host B (${tr_:-?}) ${a_reads:-?}"
		echo "--- host A: memory registrations for READs straight into the cache ${mrregs:-?} ($(awk -v r="${mrregs:-0}" -v d="${direct:-0}" 'BEGIN { if (d > 0) printf "%.4f", r / d; else printf "?" }') per READ; FARPAGE_RDMA_MR=${FARPAGE_RDMA_MR:-window}), of them windows ${mrwin:-?}, windows invalidated ${mrinv:-?}, given up for room ${mrdrops:-?}, pages allocated ahead now ${mrahead:-?} (docs/rdma.md)"
		echo "--- host A: pages written back $(kv "$last" writebacks), bytes written to host B (${tr_:-?}) ${a_wbytes:-?}"
	fi
	# Far memory: every page written back went as an RDMA WRITE (bytes
	# completed, a run of pages per WRITE).
	wbs=$(kv "$last" writebacks)
	if [ $verbs = 1 ]; then
		if ! [ "${wbs:-0}" -gt 0 ] 2>/dev/null; then
			why+="writebacks=${wbs:-?} (must be > 0); "
		elif [ -z "${a_wbytes:-}" ] || [ $((a_wbytes / 4096)) != "$wbs" ]; then
			why+="RDMA WRITE pages completed ($((${a_wbytes:-0} / 4096))) != pages written back ($wbs); "
		fi
	fi
	if [ $verbs = 1 ]; then
		[ "$tr_" = verbs ] || why+="transport=${tr_:-?} (expected verbs); "
		if [ -z "$a_remote" ] || [ -z "$a_reads" ]; then
			why+="no agent/peer counters from --keep-stats; "
		elif [ "$a_reads" != "$a_remote" ]; then
			why+="RDMA READs completed ($a_reads) != remote faults ($a_remote); "
		fi
		# Cache mode: every page read from B went straight into the
		# cache (the READ's pages registered for it), none was copied.
		if [ -z "$direct" ] || [ -z "$a_bytes" ]; then
			why+="no cache metrics or read bytes from --keep-stats; "
		elif [ "$direct" != $((a_bytes / 4096)) ] || [ "${landed:-x}" != 0 ]; then
			why+="pages READ straight into the cache ($direct) != pages read from host B ($((a_bytes / 4096))), or landing copies ${landed:-?} != 0; "
		fi
		# Read-ahead off: one page per READ. rxe on 6.1 has no
		# on-demand paging: where READs stream the cache is registered
		# in windows of 16 pages (64 KiB), each once until a page of it
		# is evicted (invalidated) or it is given up for room; random
		# READs register their own page. So the window registrations
		# follow the windows touched (at most the region's windows
		# plus one per invalidation or drop), not the faults, and the
		# sequential passes (two of the five) need far fewer
		# registrations than READs: under 0.9 per READ overall (a
		# registration per READ, FARPAGE_RDMA_MR=read, fails here).
		# Evictions did invalidate windows (the pages then verified
		# all the same).
		nwin=$(($(numfmt --from=iec "$SIZE") / 65536))
		if [ -z "$mrregs" ] || [ -z "$mrwin" ] || [ -z "$mrinv" ] || [ -z "$mrdrops" ]; then
			why+="no farpage_rdma_mr_(window_)registrations/invalidations/drops_total from --keep-stats; "
		elif [ "$mrwin" -gt $((nwin + mrinv + mrdrops)) ]; then
			why+="window registrations ($mrwin) > windows of the region ($nwin) + invalidated ($mrinv) + given up ($mrdrops); "
		elif [ -n "$direct" ] && [ $((mrregs * 10)) -gt $((direct * 9)) ]; then
			why+="memory registrations ($mrregs) > 0.9 per READ straight into the cache ($direct): registered per READ, not per window; "
		elif ! [ "$mrinv" -gt 0 ] 2>/dev/null; then
			why+="no window invalidated (mr_invalidations=$mrinv) although pages were evicted; "
		fi
		[ "${HW_DELTA[rxe0/sent_pkts]:-0}" -gt 0 ] || why+="rxe0 sent_pkts did not grow; "
		[ "${HW_DELTA[rxe1/sent_pkts]:-0}" -gt 0 ] || why+="rxe1 sent_pkts did not grow; "
	fi
	local note="${last#two-node: }"
	if [ -z "$why" ]; then
		[ $verbs = 1 ] && note+=" rdma_reads=$a_reads direct_pages=$direct mr_registrations=${mrregs:-?} mr_window_registrations=${mrwin:-?} mr_invalidations=${mrinv:-?} mr_drops=${mrdrops:-?} landing_copies=$landed rdma_write_pages=$((a_wbytes / 4096)) rxe0_sent+=${HW_DELTA[rxe0/sent_pkts]} rxe1_sent+=${HW_DELTA[rxe1/sent_pkts]}"
		record "$name" PASS "$secs" "$note"
	else
		record "$name" FAIL "$secs" "${why%; }"
	fi
}

# step_script NAME SCRIPT HELPER: tests/vm/SCRIPT.sh between rxe0 and rxe1
# (SKIP while BIN/tests/HELPER is not built); its last "SCRIPT:" line is
# the summary, its first FAIL line the reason.
step_script() {
	local name=$1 s=$2 helper=$3
	local t rc out=$OUT/$s.out last args=()
	echo; echo "=== [$name] tests/vm/$s.sh --addrs $IP_A,$IP_B --devs rxe0,rxe1"
	if [ ! -x "$BIN/tests/$helper" ]; then
		record "$name" SKIP 0 "$BIN/tests/$helper not built yet"
		return
	fi
	[ -n "${FARPAGE_VM_GID_INDEX:-}" ] && args=(--gid-index "$FARPAGE_VM_GID_INDEX")
	t=$(now)
	timeout -k 10 $STEP_S bash "$SRC/tests/vm/$s.sh" --bin "$BIN" --addrs "$IP_A,$IP_B" \
		--devs rxe0,rxe1 "${args[@]}" 2>&1 | tee "$out"
	rc=${PIPESTATUS[0]}
	last=$(grep "^$s:" "$out" | tail -n1)
	if [ "$rc" = 0 ] && [ -n "$last" ]; then
		record "$name" PASS "$(since "$t")" "${last#"$s: "}"
	else
		record "$name" FAIL "$(since "$t")" "exit $rc$([ "$rc" = 124 ] && echo " (timed out after $STEP_S s)"): $(grep -m1 'FAIL' "$out" | sed 's/^\[[0-9:]*\] //')"
	fi
}

# ------------------------------------------------------------ c. revocation
step_revoke() {
	step_script "revoke (verbs, rxe0 <-> rxe1: expelled peer, stopped agent)" revoke fp_rdma_peer
}

# ------------------------------------------------------------ d. replicas
step_replicas() {
	step_script "replicas (verbs, rxe0 <-> rxe1: 2 replicas, writes to both, an owner killed)" replicas fp_repl
}

# FARPAGE_VM_STEPS: the steps to run (letters, default all: "abcd")
STEPS=${FARPAGE_VM_STEPS:-abcd}
if [ $SETUP_OK = 1 ]; then
	[[ $STEPS == *a* ]] && step_xport_rdma
	[[ $STEPS == *b* ]] && step_two_node
	[[ $STEPS == *c* ]] && step_revoke
	[[ $STEPS == *d* ]] && step_replicas
fi

# ------------------------------------------------------------ summary
echo
echo "### kernel warnings (last 10):"
dmesg --level=emerg,alert,crit,err,warn 2>/dev/null | tail -n 10
echo
echo "### guest steps took $(since "$T_GUEST")s; uptime at end $(up)s"
echo "### SUMMARY"
printf '  %-6s %7s  %s\n' RESULT SECONDS STEP
fail=0
for i in "${!S_NAME[@]}"; do
	printf '  %-6s %7s  %s\n' "${S_RES[$i]}" "${S_SECS[$i]}" "${S_NAME[$i]}"
	[ -n "${S_NOTE[$i]}" ] && printf '  %-6s %7s    %s\n' "" "" "${S_NOTE[$i]}"
	[ "${S_RES[$i]}" = FAIL ] && fail=1
done
if [ $fail = 0 ]; then echo "### VERDICT: PASS"; else echo "### VERDICT: FAIL"; fi
exit $fail
