#!/bin/bash
# Replicated regions (issue 24): what a second and third copy cost, and
# what losing an owner costs. Four hosts in network namespaces on one
# segment (loopback if namespaces can't be made): the coordinator and the
# guests' agents W (writer) and G (reader) on A, owners O1 on B and O2 on
# C, O3 on D. Every region is placed with --nodes, so the guests' agents
# own nothing and every page they touch is remote.
#   bench/replicas.sh [--bin BUILD_DIR] [--size SIZE] [--runs N]
#                     [--rebuild-size SIZE] [--fo-size SIZE]
#                     [--hot-size SIZE] [--lease-ms MS]
#                     [--heartbeat-ms MS]
#  1. Write-back: a region of --size on O1..O3 with 1, 2 and 3 replicas
#     (runs interleaved, a new region each), W (--writeback-ms 600000:
#     nothing goes home before the flush) writes every page with
#     `farpage touch --write` (1 thread, random order) and flushes:
#       replica_wb: run=N replicas=R bytes=N flush_secs=X MBps=X
#  2. Reads: regions of --size with 1 and 2 replicas, filled by W; G reads
#     every page (`farpage touch`, 1 thread, random order):
#       replica_read: run=N replicas=R p50_us=X p99_us=X max_us=X
#  3. Failover: fo and fw (--fo-size, 2 replicas on O1 and O2), rb
#     (--rebuild-size, 2 replicas on O1 and O2) and hot (--hot-size, 2
#     replicas on O2 and O3), all written by W. G reads fo and W writes fw
#     (1 thread each, random order) while O1 is killed -9, once G has
#     served a quarter of fo's pages:
#       replica_failover: role=reader|writer ended_after_kill=0|1
#                         p50_us=X p99_us=X max_us=X flush_secs=X
#     (max_us: the longest single page touch, the longest the guest
#     thread stood still; flush_secs: the writer's flush, which waits for
#     the replica set to change).
#  4. Rebuild: the coordinator sees O1 down (--lease-ms after its last
#     heartbeat) and has every lost replica copied to O3; G reads hot in
#     passes meanwhile (and before the kill, the baseline):
#       replica_rebuild: detect_ms=N secs=X chunks=N bytes=N MBps=X
#                        region_secs=X region_MBps=X
#       replica_rebuild_read: when=before|during passes=N samples=N
#                             p50_us=X p99_us=X max_us=X
#     detect_ms: kill to the first rebuild task; secs: first task to the
#     last replica of rb in sync, bytes: every chunk made in sync in that
#     window (fo and fw's too); region_*: rb's chunks alone. "during"
#     counts the passes wholly inside the window (partial=1 if none was,
#     then the ones that overlap it).
# Every page read is verified (farpage touch); a page that does not
# verify fails the script. Figures only; it never fails on speed.
set -uo pipefail
# The rebuild's timing reads the daemons' log stamps as the seconds of the
# clock modulo 100000 (now_ms, log_ms below).
export FARPAGE_LOG_TIME=short
HERE=$(cd "$(dirname "$0")" && pwd)
SIZE=256M
RUNS=3
RB_SIZE=1G
FO_SIZE=128M
HOT_SIZE=64M
LEASE_MS=""
HB_MS=1000
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); shift 2 ;;
	--size) SIZE=${2:?}; shift 2 ;;
	--runs) RUNS=${2:?}; shift 2 ;;
	--rebuild-size) RB_SIZE=${2:?}; shift 2 ;;
	--fo-size) FO_SIZE=${2:?}; shift 2 ;;
	--hot-size) HOT_SIZE=${2:?}; shift 2 ;;
	--lease-ms) LEASE_MS=${2:?}; shift 2 ;;
	--heartbeat-ms) HB_MS=${2:?}; shift 2 ;;
	-h | --help) sed -n '2,46p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "replicas.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
export FARPAGE_BIN
# shellcheck source=../tests/lib.sh
. "$HERE/../tests/lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
for v in SIZE RB_SIZE FO_SIZE HOT_SIZE; do
	b=$(numfmt --from=iec "${!v}" 2>/dev/null) || fp_fail "$v: '${!v}' is not a size"
	[ "$b" -gt 0 ] && [ $((b % (2 << 20))) = 0 ] || fp_fail "$v: whole 2 MiB chunks"
	printf -v "${v}_B" %s "$b"
done
# Every owner may hold a replica of every region at once.
export FP_POOL=$(((3 * SIZE_B + 2 * FO_SIZE_B + RB_SIZE_B + HOT_SIZE_B) / 1048576 + 64))M
fp_hosts_lan A B C D || fp_hosts_loopback A B C D
fp_coord_start A ${LEASE_MS:+--lease-ms "$LEASE_MS"}
for o in "B O1" "C O2" "D O3"; do
	# shellcheck disable=SC2086 # host and name
	fp_node_start $o --heartbeat-ms "$HB_MS"
done
# The guests' agents hold no chunk (a pool too small for one): the
# rebuild has one place to go, O3.
fp_node_start A W --heartbeat-ms "$HB_MS" --writeback-ms 600000 --pool-size 1M
fp_node_start A G --heartbeat-ms "$HB_MS" --pool-size 1M
declare -A ID
for n in O1 O2 O3 W G; do
	for ((i = 0; i < 600; i++)); do
		ID[$n]=$(fp_node_id "$n")
		[ -n "${ID[$n]}" ] && break
		sleep 0.1
	done
	[ -n "${ID[$n]}" ] || fp_fail "agent $n never joined"
done
ALL=${ID[O1]},${ID[O2]},${ID[O3]}

# mk NAME SIZE R NODES: a region on NODES with R replicas.
mk() {
	fp_cli A W region create "$1" --size "$2" --replicas "$3" --nodes "$4" \
		>"$FP_TMP/mk.out" 2>&1 || fp_fail "create $1: $(cat "$FP_TMP/mk.out")"
}
rm_region() {
	fp_cli A W region delete "$1" >"$FP_TMP/rm.out" 2>&1 || fp_fail "delete $1: $(cat "$FP_TMP/rm.out")"
}
# touch NODE OUT ARGS...: farpage touch on agent NODE (host A), every page
# verified; prints nothing, fails the script on a bad page.
touch_ok() {
	local n=$1 out=$2
	shift 2
	fp_cli A "$n" touch "$@" >"$out" 2>&1
	local rc=$?
	[ $rc = 0 ] || { cat "$out" >&2; fp_fail "touch $* on $n: rc $rc"; }
	fp_touch_ok "$n touch $*" "$out" 2>/dev/null
}
# fill NAME SEED: W writes every page (and flushes): every replica has it.
fill() { touch_ok W "$FP_TMP/fill.out" "$1" --write --seed "$2" --threads 2 --order seq; }
f() { fp_field "$1" touch: "$2"; }
# now_ms: the wall clock in the coordinator's log's form (seconds modulo
# 100000, milliseconds: FARPAGE_LOG_TIME=short, exported above).
now_ms() { local n; n=$(date +%s%N); echo $(((n / 1000000) % 100000000)); }
# log_ms LINE: its [SSSSS.mmm] stamp in ms.
log_ms() { sed -n 's/^[^[]*\[\([0-9]*\)\.\([0-9]*\)\].*/\1\2/p' <<<"$1" | sed 's/^0*\([0-9]\)/\1/'; }
# pct P FILE: nearest-rank percentile (per mille P) of ns samples, in us.
pct() { sort -n "$2" | awk -v p="$1" '{ v[NR] = $1 } END { if (!NR) { print "nan"; exit }
	i = int((NR * p + 999) / 1000); if (i < 1) i = 1; if (i > NR) i = NR; printf "%.1f", v[i] / 1000 }'; }

# 1. write-back with 1, 2, 3 replicas
for ((run = 1; run <= RUNS; run++)); do
	for r in 1 2 3; do
		mk wb "$SIZE" "$r" "$ALL"
		touch_ok W "$FP_TMP/wb.out" wb --write --seed $((run + 10)) --order rand
		fs=$(sed -n 's/^flush: done in \([0-9.]*\) s.*/\1/p' "$FP_TMP/wb.out")
		[ -n "$fs" ] || { cat "$FP_TMP/wb.out" >&2; fp_fail "wb: no flush time"; }
		echo "replica_wb: run=$run replicas=$r bytes=$SIZE_B flush_secs=$fs" \
			"MBps=$(awk -v b="$SIZE_B" -v s="$fs" 'BEGIN { printf "%.1f", (s > 0 ? b / 1e6 / s : 0) }')"
		rm_region wb
	done
done

# 2. read faults, 1 replica against 2
for ((run = 1; run <= RUNS; run++)); do
	for r in 1 2; do
		mk rd "$SIZE" "$r" "$ALL"
		fill rd $((run + 20))
		touch_ok G "$FP_TMP/rd.out" rd --seed $((run + 20)) --order rand
		echo "replica_read: run=$run replicas=$r p50_us=$(f "$FP_TMP/rd.out" p50_us)" \
			"p99_us=$(f "$FP_TMP/rd.out" p99_us) max_us=$(f "$FP_TMP/rd.out" max_us)"
		rm_region rd
	done
done

# 3. failover: O1 killed -9 under a reader and a writer
mk fo "$FO_SIZE" 2 "${ID[O1]},${ID[O2]}"
mk fw "$FO_SIZE" 2 "${ID[O1]},${ID[O2]}"
mk rb "$RB_SIZE" 2 "${ID[O1]},${ID[O2]}"
mk hot "$HOT_SIZE" 2 "${ID[O2]},${ID[O3]}"
for r in fo fw hot; do fill "$r" 31; done
fill rb 32
# hot's reader: passes until $FP_TMP/stop, each "start_ms end_ms" in
# hot.N.t and its latencies in hot.N.lat.
hot_reader() {
	local i=0
	while [ ! -e "$FP_TMP/stop" ]; do
		i=$((i + 1))
		local t0
		t0=$(now_ms)
		fp_cli A G touch hot --seed 31 --order rand --lat-file "$FP_TMP/hot.$i.lat" \
			>"$FP_TMP/hot.$i.out" 2>&1 || { echo bad >"$FP_TMP/hot.bad"; return 1; }
		echo "$t0 $(now_ms)" >"$FP_TMP/hot.$i.t"
	done
}
# the baseline: two passes before the kill
for i in 1 2; do
	touch_ok G "$FP_TMP/hotb.$i.out" hot --seed 31 --order rand --lat-file "$FP_TMP/hotb.$i.lat"
done
cat "$FP_TMP"/hotb.*.lat >"$FP_TMP/before.lat"

f0=$(fp_faults A G)
fp_bg A env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[G]}" "$FP_CLI_BIN" --coordinator "$FP_COORD" \
	$(fp_insecure_flag) touch fo --seed 31 --order rand >"$FP_TMP/fo.out" 2>&1
rpid=$FP_BG_PID
fp_bg A env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$FP_CLI_BIN" --coordinator "$FP_COORD" \
	$(fp_insecure_flag) touch fw --write --seed 33 --order rand >"$FP_TMP/fw.out" 2>&1
wpid=$FP_BG_PID
fp_wait_faults A G $((f0 + FO_SIZE_B / 16384)) 120 || fp_fail "the reader of fo never faulted"
kill_ms=$(now_ms)
kill -KILL "${FP_NODE_PID[O1]}"
wait "${FP_NODE_PID[O1]}" 2>/dev/null
fp_log "O1 killed -9"
hot_reader &
hpid=$!
FP_PIDS+=("$hpid")
for p in "$rpid:reader:fo" "$wpid:writer:fw"; do
	IFS=: read -r pid role reg <<<"$p"
	fp_wait_pid "$pid" 600
	rc=$?
	end_ms=$(now_ms)
	[ $rc = 0 ] || { cat "$FP_TMP/$reg.out" >&2; fp_fail "the $role of $reg failed (rc $rc) when O1 died"; }
	fp_touch_ok "$role of $reg with O1 killed" "$FP_TMP/$reg.out" 2>/dev/null
	fs=$(sed -n 's/^flush: done in \([0-9.]*\) s.*/\1/p' "$FP_TMP/$reg.out")
	echo "replica_failover: role=$role ended_after_kill=$((end_ms > kill_ms))" \
		"p50_us=$(f "$FP_TMP/$reg.out" p50_us) p99_us=$(f "$FP_TMP/$reg.out" p99_us)" \
		"max_us=$(f "$FP_TMP/$reg.out" max_us)${fs:+ flush_secs=$fs}"
done

# 4. rebuild: every chunk of rb back to 2 in-sync replicas
end=$(fp_deadline 1800)
ok=0
while [ "$(date +%s)" -le "$end" ]; do
	[ -e "$FP_TMP/hot.bad" ] && break
	fp_cli A W region show rb >"$FP_TMP/show.out" 2>&1 &&
		grep -q 'health ok: 0 missing, 0 rebuilding' "$FP_TMP/show.out" && { ok=1; break; }
	sleep 0.2
done
touch "$FP_TMP/stop"
wait "$hpid"
[ -e "$FP_TMP/hot.bad" ] && { cat "$FP_TMP"/hot.*.out >&2; fp_fail "a reader of hot failed during the rebuild"; }
[ $ok = 1 ] || { cat "$FP_TMP/show.out" >&2; fp_fail "rb never came back to 2 in-sync replicas"; }
for o in "$FP_TMP"/hot.*.out; do fp_touch_ok "reader of hot" "$o" 2>/dev/null; done
first=$(grep -m1 -E "rebuild task [0-9]+ on node" "$FP_TMP/coord.log")
last=$(grep -E "region 'rb' chunk [0-9]+ replica [0-9]+ in sync again" "$FP_TMP/coord.log" | tail -n1)
[ -n "$first" ] && [ -n "$last" ] || fp_fail "no rebuild lines in the coordinator's log"
t_first=$(log_ms "$first") t_last=$(log_ms "$last")
rb_first=$(log_ms "$(grep -m1 -E "region 'rb' chunk [0-9]+ replica [0-9]+: rebuild task" "$FP_TMP/coord.log")")
chunks=0
rb_chunks=0
while read -r line; do
	t=$(log_ms "$line")
	[ "$t" -ge "$t_first" ] && [ "$t" -le "$t_last" ] || continue
	chunks=$((chunks + 1))
	[[ $line == *"region 'rb' "* ]] && rb_chunks=$((rb_chunks + 1))
done < <(grep -E "in sync again on node" "$FP_TMP/coord.log")
cs=2097152
awk -v d=$((kill_ms > t_first ? 0 : t_first - kill_ms)) -v ms=$((t_last - t_first)) \
	-v rms=$((t_last - rb_first)) -v c="$chunks" -v rc="$rb_chunks" -v cs=$cs 'BEGIN {
	s = ms / 1000; rs = rms / 1000; if (s <= 0) s = 0.001; if (rs <= 0) rs = 0.001
	printf "replica_rebuild: detect_ms=%d secs=%.3f chunks=%d bytes=%d MBps=%.1f region_secs=%.3f region_MBps=%.1f\n",
		d, s, c, c * cs, c * cs / 1e6 / s, rs, rc * cs / 1e6 / rs }'
# the passes of hot wholly inside the rebuild window, else those overlapping it
: >"$FP_TMP/during.lat"
partial=0
n=0
for t in "$FP_TMP"/hot.*.t; do
	[ -e "$t" ] || continue
	read -r a z <"$t"
	if [ "$a" -ge "$t_first" ] && [ "$z" -le "$t_last" ]; then
		cat "${t%.t}.lat" >>"$FP_TMP/during.lat"
		n=$((n + 1))
	fi
done
if [ $n = 0 ]; then
	partial=1
	for t in "$FP_TMP"/hot.*.t; do
		[ -e "$t" ] || continue
		read -r a z <"$t"
		if [ "$z" -ge "$t_first" ] && [ "$a" -le "$t_last" ]; then
			cat "${t%.t}.lat" >>"$FP_TMP/during.lat"
			n=$((n + 1))
		fi
	done
fi
for w in before during; do
	np=2
	[ $w = during ] && np=$n
	echo "replica_rebuild_read: when=$w passes=$np samples=$(grep -c . "$FP_TMP/$w.lat")" \
		"p50_us=$(pct 500 "$FP_TMP/$w.lat") p99_us=$(pct 990 "$FP_TMP/$w.lat")" \
		"max_us=$(pct 1000 "$FP_TMP/$w.lat")$([ $w = during ] && echo " partial=$partial")"
done
echo "replica_cfg: size=$SIZE_B rebuild_size=$RB_SIZE_B fo_size=$FO_SIZE_B hot_size=$HOT_SIZE_B" \
	"lease_ms=${LEASE_MS:-default} heartbeat_ms=$HB_MS runs=$RUNS"
