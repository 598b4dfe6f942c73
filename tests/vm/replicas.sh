#!/bin/bash
# A region of two replicas over real verbs (issue 24). Run by
# tests/vm/guest.sh inside the SoftRoCE VM (rxe0 and rxe1 on a veth pair);
# any host with two verbs devices and userfaultfd can run it, and without
# --devs it runs over TCP (the same checks but the one-sided one), which
# is how its logic is tried on a host without verbs.
#
#   tests/vm/replicas.sh --bin BUILD_DIR --addrs IP_A,IP_B
#                        [--devs DEV_A,DEV_B] [--gid-index N]
#                        [--size SIZE] [--replicas R]
#
# Three agents: owners O1 and O2 on DEV_B, the guests' agent W on DEV_A
# (its pool one chunk, taken by a region of its own: no rebuild task can
# be placed on it, so every page it reads comes from O1 or O2).
# 1. r (SIZE, default 2M, --replicas 2) is placed on O1 and O2 (each chunk
#    one replica on each) and filled with seed 5.
# 2. A guest on W writes seed 6 over every page and flushes (W's periodic
#    write-back off: each page goes home once, at the flush). W's counters
#    then state exactly: pages written back (farpage_cache_writebacks_total)
#    = pages written = N, and per owner pages written home with completed
#    writes (farpage_peer_write_pages_total{peer,transport="verbs"}) = N,
#    2N in all: every run of pages went to both replicas, one RDMA WRITE
#    each (farpage_peer_writes_total equal for O1 and O2, between N/16 and
#    N: a run is up to 16 pages); no write failed; and over verbs neither
#    owner's page server took a byte of it (one-sided WRITEs).
# 3. Each replica holds seed 6: a guest on O1 reads every page of r
#    (verified) from O1's own replica (O1 read nothing from O2), and the
#    same on O2.
# 4. Reads fail over: a guest on W (fp_guest hold) reads the first half
#    of r and holds; K, the owner of chunk 0's first replica, is killed
#    -9; the guest reads the first half again (cached) and the second
#    half. Every page verified, no SIGBUS; the first half's pages were
#    read from their chunks' first replicas, the second half's all from
#    the survivor S (W's reads of K and S grow by exactly that; the
#    pages of K's chunks among them failed over, or went to S at once
#    once the coordinator took K out). A second guest on W (a new
#    mapping: nothing cached) reads every page again after the kill, all
#    of them from the survivor S (W's reads of S grow by exactly N, of K
#    by 0: read-ahead is off, one READ per page).
# 5. Writes during a rebuild: O3 joins (--rebuild-rate 16K: the copy
#    takes two minutes) and K's replicas are rebuilt onto it while a writer on
#    W writes seed 7 over r, pass after pass, until r is in sync again
#    (the first pass written before O3 joins, flushed once r shows
#    rebuilding).
#    W's writes to O3 while it rebuilt went over TCP (its page server
#    marks them, so the copy does not overwrite them; an RDMA WRITE would
#    land unseen): W's tcp pages to O3 > 0, none failed; then O3's and
#    S's replicas each hold seed 7 on every page (read from their pools).
# The last line is the "replicas:" summary; exit 0 only if every check
# held, 77 if this host cannot run it. --replicas 1 is the negative
# control: step 2 then counts N, not 2N, and fails.
set -uo pipefail
HERE=$(cd "$(dirname "$0")" && pwd)
ADDRS=""
DEVS=""
GIDX=""
SIZE=2M
R=2
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "$2" && pwd); shift 2 ;;
	--addrs) ADDRS=$2; shift 2 ;;
	--devs) DEVS=$2; shift 2 ;;
	--gid-index) GIDX=$2; shift 2 ;;
	--size) SIZE=$2; shift 2 ;;
	--replicas) R=$2; shift 2 ;;
	-h|--help) sed -n '2,49p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "replicas: unknown argument $1" >&2; exit 2 ;;
	esac
done
case $ADDRS in *,*) ;; *) echo "replicas: --addrs IP_A,IP_B is required" >&2; exit 2 ;; esac
export FARPAGE_BIN
# shellcheck source=../lib.sh
. "$HERE/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
REPL_BIN=$FP_BIN/tests/fp_repl
[ -x "$REPL_BIN" ] || fp_fail "$REPL_BIN is not built"
[ -x "$FP_BIN/tests/fp_guest" ] || fp_fail "$FP_BIN/tests/fp_guest is not built"
N=$(($(numfmt --from=iec "$SIZE") / 4096))
ok() { fp_log "ok: $*"; }

fp_hosts_loopback A B
FP_HOST_IP[A]=${ADDRS%,*}
FP_HOST_IP[B]=${ADDRS#*,}
if [ -n "$DEVS" ]; then
	T=verbs
	XA=(--transport verbs --rdma-device "${DEVS%,*}")
	XB=(--transport verbs --rdma-device "${DEVS#*,}")
	[ -n "$GIDX" ] && XA+=(--gid-index "$GIDX") XB+=(--gid-index "$GIDX")
else
	T=tcp
	XA=(--transport tcp) XB=(--transport tcp)
fi
export FP_POOL=32M # the pools are registered (pinned) whole over verbs
fp_coord_start A
fp_node_start B O1 "${XB[@]}" --readahead 0 --metrics-listen "${FP_HOST_IP[B]}:0"
fp_node_start B O2 "${XB[@]}" --readahead 0 --metrics-listen "${FP_HOST_IP[B]}:0"
fp_wait_log_wall "$FP_TMP/O1.log" 'joined .* as node' 60 && fp_wait_log_wall "$FP_TMP/O2.log" 'joined .* as node' 60 ||
	fp_fail "the owners did not join"
declare -A ID
ID[O1]=$(fp_node_id O1) ID[O2]=$(fp_node_id O2)
[ -n "${ID[O1]}" ] && [ -n "${ID[O2]}" ] || fp_fail "no node ids for O1/O2"

# metric NODE SAMPLE: a sample of NODE's /metrics (0 if absent: a peer
# not met yet has no series)
metric() {
	local v
	v=$(fp_metric "$1" "$2")
	echo "${v:-0}"
}
peer_m() { # NODE NAME PEER [TRANSPORT]: a per-peer sample
	if [ -n "${4:-}" ]; then
		metric "$1" "$2{peer=\"${ID[$3]}\",transport=\"$4\"}"
	else
		metric "$1" "$2{peer=\"${ID[$3]}\"}"
	fi
}
# shellcheck disable=SC2046 # no flag, or one
repl() { "$REPL_BIN" $(fp_insecure_flag) "$@"; }
# touch_check NAME OUT PAGES: a touch run verified PAGES pages, none
# wrong or zero, no SIGBUS
touch_check() {
	local w z b v p
	w=$(fp_field "$2" touch: wrong) z=$(fp_field "$2" touch: zero) b=$(fp_field "$2" touch: sigbus)
	v=$(fp_field "$2" touch: verified) p=$(fp_field "$2" touch: pages)
	[ "$w" = 0 ] && [ "$z" = 0 ] && [ "$b" = 0 ] && [ "$v" = "$3" ] && [ "$p" = "$3" ] ||
		{ cat "$2" >&2; fp_fail "$1: pages=$p verified=$v wrong=$w zero=$z sigbus=$b (expected $3 verified)"; }
}

# ------------------------------------------------------------ 1. placed, filled
fp_cli B O1 region create r --size "$SIZE" --replicas "$R" >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"
repl state "$FP_COORD" r >"$FP_TMP/st0.out" 2>&1 || fp_fail "state of r: $(cat "$FP_TMP/st0.out")"
grep -q "^state: replicas=$R .* missing=0 rebuilding=0 " "$FP_TMP/st0.out" ||
	{ cat "$FP_TMP/st0.out" >&2; fp_fail "r is not $R replicas in sync"; }
# rec: CHUNK REPLICA NODE OFF STATE; chunk 0's first replica is read first
first=$(awk '$1 == "rec:" && $2 == 0 && $3 == 0 { print $4 }' "$FP_TMP/st0.out")
K=""
for o in O1 O2; do
	[ "$first" = "${ID[$o]}" ] && K=$o
done
[ -n "$K" ] || { cat "$FP_TMP/st0.out" >&2; fp_fail "chunk 0's first replica is on neither owner"; }
S=O1
[ "$K" = O1 ] && S=O2
chunks=$(awk '$1 == "rec:" && $3 == 0' "$FP_TMP/st0.out" | wc -l)
ok "r ($SIZE, $N pages, $chunks chunks, $R replicas) on O1 (node ${ID[O1]}) and O2 (node ${ID[O2]}) over $T; chunk 0 read first from $K"
# (a replicated region's chunks have no single owner: through a mapping)
fp_cli B O1 fill --all r --seed 5 >"$FP_TMP/fill.out" 2>&1 || fp_fail "fill r: $(cat "$FP_TMP/fill.out")"

fp_node_start A W "${XA[@]}" --readahead 0 --writeback-ms 600000 --pool-size 2M \
	--metrics-listen "${FP_HOST_IP[A]}:0"
fp_wait_log_wall "$FP_TMP/W.log" 'joined .* as node' 60 || fp_fail "W did not join"
ID[W]=$(fp_node_id W)
[ -n "${ID[W]}" ] || fp_fail "no node id for W"
# W's pool, one chunk, taken: the coordinator cannot rebuild onto W
fp_cli A W region create pad --size 2M --owners "${ID[W]}" >"$FP_TMP/pad.out" 2>&1 ||
	fp_fail "create pad on W: $(cat "$FP_TMP/pad.out")"

# ------------------------------------------------------------ 2. writes go to both
wp0=$(peer_m W farpage_peer_write_pages_total O1 $T) wq0=$(peer_m W farpage_peer_write_pages_total O2 $T)
declare -A PSW
for o in O1 O2; do PSW[$o]=$(metric $o farpage_pagesrv_write_bytes_total); done
fp_cli A W touch r --write --seed 6 >"$FP_TMP/w.out" 2>&1 || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer failed"; }
touch_check "writer" "$FP_TMP/w.out" "$N"
grep -q '^flush: done' "$FP_TMP/w.out" || { cat "$FP_TMP/w.out" >&2; fp_fail "the writer did not flush"; }
# The fault loop publishes its per-peer counters on its tick: wait for
# the pages to show (they cannot grow any more: the writer is gone, its
# pages were home at the flush, and nothing else writes)
end=$((SECONDS + 60))
for (( ; ; )); do
	wb=$(metric W farpage_cache_writebacks_total)
	wp=$(($(peer_m W farpage_peer_write_pages_total O1 $T) - wp0))
	wq=$(($(peer_m W farpage_peer_write_pages_total O2 $T) - wq0))
	[ $((wp + wq)) -ge $((N * 2)) ] && break
	[ "$SECONDS" -ge "$end" ] && break
	sleep 0.2
done
wn1=$(peer_m W farpage_peer_writes_total O1 $T) wn2=$(peer_m W farpage_peer_writes_total O2 $T)
we1=$(peer_m W farpage_peer_write_errors_total O1) we2=$(peer_m W farpage_peer_write_errors_total O2)
fp_log "W: pages written back $wb; written home to O1 $wp pages in $wn1 writes ($we1 failed), to O2 $wq pages in $wn2 writes ($we2 failed)"
# Found by write-protect faults (the VM's 6.1 kernel), each page is dirty
# once and goes home at the flush; found by PAGEMAP_SCAN (6.7+), the
# unmap sends every page held home once more (docs/design.md, "Dirty
# tracking by scanning"): twice.
sc=$(metric W farpage_cache_dirty_scans_total)
exp=$N how="each once, at the flush"
[ "$sc" -gt 0 ] && exp=$((N * 2)) how="twice: at the flush, and at the unmap of a scanned mapping"
[ "$wb" = "$exp" ] || fp_fail "W wrote back $wb pages, expected $exp ($N written, $how)"
[ "$wp" = "$wb" ] && [ "$wq" = "$wb" ] ||
	fp_fail "pages written home with completed writes: O1 $wp, O2 $wq; expected $wb each (pages written back x 2 replicas in all)"
[ "$we1" = 0 ] && [ "$we2" = 0 ] || fp_fail "write-backs failed: O1 $we1, O2 $we2"
[ "$wn1" = "$wn2" ] && [ "$wn1" -ge $((wb / 16)) ] && [ "$wn1" -le "$wb" ] ||
	fp_fail "writes completed: O1 $wn1, O2 $wn2; expected equal (each run to both), between $((wb / 16)) and $wb"
if [ $T = verbs ]; then
	for o in O1 O2; do
		b=$(($(metric $o farpage_pagesrv_write_bytes_total) - PSW[$o]))
		[ "$b" = 0 ] || fp_fail "$o's page server took $b written bytes: the writes were not RDMA WRITEs"
	done
fi
ok "writes: $wb pages written back ($how) x $R replicas = $((wp + wq)) pages in $((wn1 + wn2)) completed $([ $T = verbs ] && echo "RDMA WRITEs, none through a page server" || echo writes)"

# own_check NODE OTHER SEED: a guest on NODE reads every page of r
# (SEED) from NODE's own replica: verified, nothing read from OTHER
own_check() {
	local r0 r1
	r0=$(peer_m "$1" farpage_peer_read_pages_total "$2" $T)
	fp_cli B "$1" touch r --seed "$3" --local-too >"$FP_TMP/own$3-$1.out" 2>&1 ||
		{ cat "$FP_TMP/own$3-$1.out" >&2; fp_fail "the guest on $1 (seed $3) failed"; }
	touch_check "guest on $1 (seed $3)" "$FP_TMP/own$3-$1.out" "$N"
	r1=$(peer_m "$1" farpage_peer_read_pages_total "$2" $T)
	[ "$r1" = "$r0" ] || fp_fail "the guest on $1 read $((r1 - r0)) pages from $2, not only $1's own replica"
}

# ------------------------------------------------------------ 3. both replicas hold them
own_check O1 O2 6
ok "O1's replica holds seed 6 on every page (read from O1's pool alone)"
own_check O2 O1 6
ok "O2's replica holds seed 6 on every page (read from O2's pool alone)"

# ------------------------------------------------------------ 4. reads fail over
# The first half's pages are read from their chunk's first replica (K's
# or S's), before the kill; the second half's all from S, after it.
H=$((N / 2))
CP=$(($(awk '$1 == "rec:" { n = $2 } END { print n + 1 }' "$FP_TMP/st0.out")))
CP=$((N / CP)) # pages per chunk
expK=0
for ((p = 0; p < H; p += CP)); do
	c=$((p / CP))
	f=$(awk -v c=$c '$1 == "rec:" && $2 == c && $3 == 0 { print $4 }' "$FP_TMP/st0.out")
	[ "$f" = "${ID[$K]}" ] && expK=$((expK + (H - p < CP ? H - p : CP)))
done
rk0=$(peer_m W farpage_peer_read_pages_total $K $T) rs0=$(peer_m W farpage_peer_read_pages_total $S $T)
fo0=$(metric W farpage_replica_failovers_total)
mkfifo "$FP_TMP/hold.in" || fp_fail "mkfifo"
${FP_HOST_RUN[A]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$FP_BIN/tests/fp_guest" hold r 6 all \
	<"$FP_TMP/hold.in" >"$FP_TMP/hold.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
exec 8>"$FP_TMP/hold.in"
fp_wait_log_wall "$FP_TMP/hold.out" '^fp_guest: holding' 300 ||
	{ cat "$FP_TMP/hold.out" >&2; fp_fail "the reader on W did not read the first half of r"; }
fp_log "the guest on W holds after the first $H pages: kill -9 $K (node ${ID[$K]})"
kill -KILL "${FP_NODE_PID[$K]}"
wait "${FP_NODE_PID[$K]}" 2>/dev/null
echo go >&8
exec 8>&-
fp_wait_pid "$gp" 300
grc=$?
# verified: the first half, again (cached), and the second half
grep -q "^hold: verified=$((H + N)) wrong=0 zero=0 sigbus=0" "$FP_TMP/hold.out" && [ "$grc" = 0 ] ||
	{ cat "$FP_TMP/hold.out" >&2; fp_fail "the reader when $K was killed (rc $grc): not every page verified"; }
# counters published on the fault loop's tick: every page read once,
# from exactly one replica (read-ahead off: one READ a page)
end=$((SECONDS + 60))
for (( ; ; )); do
	rk1=$(peer_m W farpage_peer_read_pages_total $K $T) rs1=$(peer_m W farpage_peer_read_pages_total $S $T)
	[ $((rk1 - rk0 + rs1 - rs0)) -ge "$N" ] || [ "$SECONDS" -ge "$end" ] && break
	sleep 0.2
done
ek=$(peer_m W farpage_peer_read_errors_total $K)
fo1=$(metric W farpage_replica_failovers_total)
[ $((rk1 - rk0)) = "$expK" ] && [ $((rs1 - rs0)) = $((N - expK)) ] ||
	fp_fail "reader when $K was killed: $((rk1 - rk0)) pages read from $K and $((rs1 - rs0)) from $S; expected $expK (the first half's on $K) and $((N - expK))"
ok "reader when $K was killed: $((H + N)) pages verified, $((rk1 - rk0)) read from $K before, $((rs1 - rs0)) from $S, $ek reads of $K failed, $((fo1 - fo0)) moved to $S at once"

fp_cli A W touch r --seed 6 >"$FP_TMP/r2.out" 2>&1 || { cat "$FP_TMP/r2.out" >&2; fp_fail "the reader after the kill failed"; }
touch_check "reader after $K was killed" "$FP_TMP/r2.out" "$N"
# counters published on the fault loop's tick
end=$((SECONDS + 60))
for (( ; ; )); do
	rs2=$(peer_m W farpage_peer_read_pages_total $S $T)
	[ $((rs2 - rs1)) -ge "$N" ] || [ "$SECONDS" -ge "$end" ] && break
	sleep 0.2
done
rk2=$(peer_m W farpage_peer_read_pages_total $K $T)
fo2=$(metric W farpage_replica_failovers_total)
[ $((rs2 - rs1)) = "$N" ] && [ "$rk2" = "$rk1" ] ||
	fp_fail "reader after the kill: $((rs2 - rs1)) pages read from $S, $((rk2 - rk1)) from $K; expected $N and 0"
repl state "$FP_COORD" r >"$FP_TMP/st1.out" 2>&1
ok "reader after $K was killed: all $N pages from $S, $((fo2 - fo1)) of them after a failed try of $K ($(head -n1 "$FP_TMP/st1.out"))"

# ------------------------------------------------------------ 5. writes during a rebuild
# O3 joins with --rebuild-rate 16K: the copy of K's replicas (every
# chunk's, 2 MiB) onto it takes two minutes, longer than the steps from
# its start to the writer's first flush on a loaded machine (at 128K,
# 16 s, the copy was done before that flush began, once). A writer on W writes seed 7 over every
# page and flushes, pass after pass, from the moment the coordinator
# shows r rebuilding until it is back to R replicas in sync. Its writes
# to O3 while O3 rebuilds must reach O3's page server (TCP, beside verbs):
# an RDMA WRITE would land unseen by the copy, which could then put S's
# older page over it. So W wrote home to O3 over tcp (> 0 pages, none
# failed), O3's page server took them, and afterwards O3's replica and
# S's hold seed 7 on every page (each read from its own pool). The first
# pass (fp_guest wresume) writes every page before O3 joins and flushes
# once r shows rebuilding: however slow the machine, that flush is made
# while O3 rebuilds (a pass started then may come too late: the copy
# may be done before it flushed).
mkfifo "$FP_TMP/w0.in" || fp_fail "mkfifo"
${FP_HOST_RUN[A]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[W]}" "$FP_BIN/tests/fp_guest" wresume r 7 \
	<"$FP_TMP/w0.in" >"$FP_TMP/w0.out" 2>&1 &
gp=$!
FP_PIDS+=("$gp")
exec 8>"$FP_TMP/w0.in"
fp_wait_log_wall "$FP_TMP/w0.out" '^fp_guest: written' 300 ||
	{ cat "$FP_TMP/w0.out" >&2; fp_fail "the writer on W did not write r"; }
lg0=$(grep -c 'fault: map r: replica layout generation' "$FP_TMP/W.log")
fp_node_start B O3 "${XB[@]}" --readahead 0 --rebuild-rate 16K --metrics-listen "${FP_HOST_IP[B]}:0"
fp_wait_log_wall "$FP_TMP/O3.log" 'joined .* as node' 60 || fp_fail "O3 did not join"
ID[O3]=$(fp_node_id O3)
[ -n "${ID[O3]}" ] || fp_fail "no node id for O3"
end=$((SECONDS + 180))
until repl state "$FP_COORD" r >"$FP_TMP/st2.out" 2>&1 && grep -q '^state: .* rebuilding=[1-9]' "$FP_TMP/st2.out"; do
	[ "$SECONDS" -ge "$end" ] && { cat "$FP_TMP/st2.out" >&2; fp_fail "r was not rebuilt onto O3 within 180 s"; }
	sleep 0.2
done
# the writer's mapping has the layout with O3 in it
fp_wait_log_wall "$FP_TMP/W.log" 'fault: map r: replica layout generation' 120 $((lg0 + 1)) ||
	fp_fail "the writer's mapping on W never had r's layout with O3 rebuilding"
fp_log "r is rebuilding onto O3 (node ${ID[O3]}): $(head -n1 "$FP_TMP/st2.out"); the writer flushes"
ps0=$(metric O3 farpage_pagesrv_write_bytes_total)
echo go >&8
exec 8>&-
fp_wait_pid "$gp" 300
grc=$?
grep -q "^wresume: flush=0 verified=$N wrong=0 zero=0 sigbus=0" "$FP_TMP/w0.out" && [ "$grc" = 0 ] ||
	{ cat "$FP_TMP/w0.out" >&2; fp_fail "the writer on W (rc $grc): its flush during the rebuild failed"; }
passes=1
end=$((SECONDS + 600))
for (( ; ; )); do
	repl state "$FP_COORD" r >"$FP_TMP/st3.out" 2>&1
	grep -q "^state: replicas=$R .* missing=0 rebuilding=0 " "$FP_TMP/st3.out" && break
	fp_cli A W touch r --write --seed 7 >"$FP_TMP/w7.out" 2>&1 || { cat "$FP_TMP/w7.out" >&2; fp_fail "the writer (pass $((passes + 1))) failed"; }
	touch_check "writer, pass $((passes + 1))" "$FP_TMP/w7.out" "$N"
	grep -q '^flush: done' "$FP_TMP/w7.out" || { cat "$FP_TMP/w7.out" >&2; fp_fail "the writer (pass $((passes + 1))) did not flush"; }
	passes=$((passes + 1))
	[ "$SECONDS" -ge "$end" ] && { cat "$FP_TMP/st3.out" >&2; fp_fail "r was not back to $R replicas in sync after $passes passes"; }
done
grep -q "^rec: .* ${ID[O3]} " "$FP_TMP/st3.out" || { cat "$FP_TMP/st3.out" >&2; fp_fail "no replica of r is on O3"; }
# counters published on the fault loop's tick (the writer is gone)
end=$((SECONDS + 60))
for (( ; ; )); do
	w3=$(peer_m W farpage_peer_write_pages_total O3 tcp)
	[ "$w3" -gt 0 ] || [ "$SECONDS" -ge "$end" ] || { sleep 0.2; continue; }
	sleep 0.5 # one more tick: the last pass's pages
	w3=$(peer_m W farpage_peer_write_pages_total O3 tcp)
	break
done
w3v=$(peer_m W farpage_peer_write_pages_total O3 verbs)
we3=$(peer_m W farpage_peer_write_errors_total O3)
ps3=$(($(metric O3 farpage_pagesrv_write_bytes_total) - ps0))
fp_log "W during and after the rebuild: $passes passes; written home to O3 $w3 pages over tcp, $w3v over verbs ($we3 failed); O3's page server took $ps3 bytes"
[ "$w3" -gt 0 ] || fp_fail "no write to O3 went over tcp while it rebuilt ($w3v pages over $T): a rebuild copy could overwrite them"
[ "$ps3" -gt 0 ] || fp_fail "O3's page server took no written byte while it rebuilt"
[ "$we3" = 0 ] || fp_fail "$we3 write-backs to O3 failed"
# W has two rows for O3 now (verbs and tcp): each series still once
dups=$(fp_metric_dups W) || fp_fail "W's /metrics could not be read"
[ -z "$dups" ] || fp_fail "W's /metrics lists series twice: $(echo $dups)"
own_check O3 "$S" 7
own_check "$S" O3 7
ok "writes during the rebuild onto O3: $passes passes of seed 7, $w3 pages to O3 over tcp while it rebuilt; O3's replica and $S's hold seed 7 on every page"
echo "replicas: transport=$T pages=$N replicas=$R writebacks=$wb write_pages_O1=$wp write_pages_O2=$wq writes_O1=$wn1 writes_O2=$wn2 killed=$K read_from_killed=$((rk1 - rk0)) failed_reads_killed=$ek read_from_survivor=$((rs1 - rs0))+$((rs2 - rs1)) failovers=$((fo1 - fo0))+$((fo2 - fo1)) rebuild_passes=$passes rebuild_tcp_pages_O3=$w3 sigbus=0 wrong=0 zero=0"
