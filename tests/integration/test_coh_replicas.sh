#!/bin/bash
# Coherent regions of two replicas (issue 39, item 2: the home's state
# survives its host; docs/design.md, "Coherent regions of two replicas"):
# five hosts in network namespaces on one segment (77 without), the
# coordinator on H (lease 2 s), agents O1 and O2 (the owners: region f is
# coherent, --replicas 2, its one chunk on both: the home of its pages is
# its first replica in sync) and B and C (tests/helpers/fp_coh "pages"
# programs on 64 pages: page i holds V + i).
#  0. f is placed on the extents of a single-writer region s that B
#     wrote under its lease and that was deleted: the owners still hold
#     that lease's generation there, which the coherent writes to a
#     replica (generation 1) must not be held against.
#  1. B writes 1000 and flushes; C reads 1000 (copies to read); B writes
#     2000 and keeps the pages modified (nothing written back).
#  2. The home's agent is killed. C reads 2000, never 1000 (the last
#     bytes the dead home took) and no SIGBUS: B's agent wrote the pages
#     it held modified to every replica when its home's connection ended
#     (a salvage each), and the other replica, home once the coordinator
#     took the dead one out of the set, served them only once every node
#     up had synced that layout (B's agent syncs it once they are there).
#  3. B reads 2000, writes 3000 and flushes; C reads 3000 (B's pages
#     recalled). f is rebuilt onto another node; then the second home's
#     agent is killed too: C reads 3000 and B writes 4000 and C reads it,
#     on the rebuilt replica, which took every page its home took (each
#     page written to the other replicas before its message goes home).
#  4. Region g (coherent, two replicas): fp_coh's spinlock-protected
#     counter on B and C, N each, while g's home's agent is killed: it
#     ends at exactly 2 x N and each host's word at N.
#  5. The gate: region h likewise; B's agent takes new layouts 3 s late
#     (FARPAGE_TEST_RELAYOUT_DELAY_MS). B writes 1000 and flushes, C
#     reads it, B writes 2000 and keeps it; h's home is cut off the
#     segment (no connection ends: B learns only from the layout). C
#     reads 2000: its map asks the new home nothing until every node up
#     synced the layout that moved it, and B syncs it only once its pages
#     are on the replicas.
# Without the salvage C reads 1000 in step 2; without the writes to the
# other replicas before a page goes home, 2000 in step 3; without the
# gate the counter of step 4 ends short (6000 of 8000); if the owners held
# s's generation against the writes to replicas, B's flush in step 1
# times out.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: a coherent map needs the cache"
fp_hosts_lan H O1 O2 D B C || fp_skip "six hosts need network namespaces"
COH=$FP_BIN/tests/fp_coh
P=64
N=${FP_COH_N:-4000}
fp_coord_start H --lease-ms 2000
# (no periodic write-back: what B keeps modified is only in B)
NOWB="--writeback-ms 3600000"
for x in O1 O2 D B C; do
	fp_node_start "$x" "$x" --metrics-listen "${FP_HOST_IP[$x]}:0" --fault-timeout-ms 120000 $NOWB
done
o1=$(fp_node_id O1)
o2=$(fp_node_id O2)
# 0. f goes where a single-writer region was written (its lease
# generation is at each owner's extent still): the writes to replicas
# carry none, and must be taken there
fp_cli H O1 region create s --size 4M --owners "$o1,$o2" >"$FP_TMP/s.c" 2>&1 ||
	fp_fail "create s: $(cat "$FP_TMP/s.c")"
fp_cli B B fill s --all >"$FP_TMP/s.fill" 2>&1 || fp_fail "fill s: $(cat "$FP_TMP/s.fill")"
fp_cli H O1 region delete s >"$FP_TMP/s.d" 2>&1 || fp_fail "delete s: $(cat "$FP_TMP/s.d")"
for x in O1 O2; do
	fp_wait_log "$FP_TMP/$x.log" "cleared 1 extents" 60 || fp_fail "$x did not clear s's extent"
done
# The coordinator frees them at each owner's next heartbeat after. (A
# loop that made and deleted f until both were free could go on for
# ever on a slow machine: each f deleted left its own extents to clear,
# at 0 on one owner while the other's 0 was still being cleared.)
for x in O1 O2; do
	fp_wait_log "$FP_TMP/coord.log" "node $(fp_node_id "$x") \\($x\\): 1 extents cleared after deletes" 60 ||
		fp_fail "the coordinator never freed s's extent on $x"
done
fp_cli H O1 region create f --size 2M --replicas 2 --nodes "$o1,$o2" --coherent \
	>"$FP_TMP/f.c" 2>&1 || fp_fail "create f: $(cat "$FP_TMP/f.c")"
fp_repl state "$FP_COORD" f >"$FP_TMP/st.out" 2>&1 || fp_fail "no state of f"
[ "$(awk '$1 == "rec:" && $5 != "0" { n++ } END { print n + 0 }' "$FP_TMP/st.out")" = 0 ] ||
	{ cat "$FP_TMP/st.out" >&2; fp_fail "f is not on s's extents"; }

# home NAME: the agent name of region NAME's home (its chunk 0's first
# replica in sync).
home() {
	local id
	fp_repl state "$FP_COORD" "$1" >"$FP_TMP/st.out" 2>&1 ||
		{ cat "$FP_TMP/st.out" >&2; fp_fail "no state of $1"; }
	id=$(awk '$1 == "rec:" && $2 == 0 && $6 == 0 { print $4; exit }' "$FP_TMP/st.out")
	for x in O1 O2 D B C; do
		[ -n "${FP_NODE_PID[$x]:-}" ] && [ "$(fp_node_id_log "$x")" = "$id" ] &&
			{ echo "$x"; return; }
	done
	cat "$FP_TMP/st.out" >&2
	fp_fail "$1's home is node ${id:-none}: no agent here"
}
# gone X: kill -9 agent X.
gone() {
	kill -KILL "${FP_NODE_PID[$1]}" 2>/dev/null
	wait "${FP_NODE_PID[$1]}" 2>/dev/null
	FP_NODE_PID[$1]=
}

REG=f
start() { fp_coh_pages "$1" "$REG" "$P"; }
say() { fp_coh_say "$@"; }

# modified: B writes 1000 and flushes, C reads it (copies to read), B
# writes 2000 and keeps it (nothing written back): the pages of steps 1
# and 5.
modified() {
	start B
	start C
	say B "write 1000" "wrote 1000"
	say B flush "flushed 0"
	fp_coh_check C 1000 "$P"
	say B "write 2000" "wrote 2000"
}

# 1.
modified
h1=$(home f)
fp_log "1: B wrote 1000 (flushed) and 2000 (kept); C held 1000; f's home: $h1"
# 2. The home dies.
gone "$h1"
fp_coh_check C 2000 "$P"
s=$(fp_metric B farpage_coherence_salvages_total)
[ "${s:-0}" -ge "$P" ] || fp_fail "B salvaged ${s:-0} pages, not $P"
h2=$(home f)
[ "$h2" != "$h1" ] || fp_fail "f's home is still $h1"
fp_log "2: $h1 killed: C reads B's 2000 from $h2 (B salvaged $s pages)"
# 3. Rebuilt; the second home dies.
fp_coh_check B 2000 "$P"
say B "write 3000" "wrote 3000"
say B flush "flushed 0"
fp_coh_check C 3000 "$P"
end=$(fp_deadline 180)
until fp_repl state "$FP_COORD" f >"$FP_TMP/st.out" 2>&1 &&
	grep -q '^state: .* missing=0 rebuilding=0 ' "$FP_TMP/st.out"; do
	[ "$(date +%s)" -le "$end" ] || { cat "$FP_TMP/st.out" >&2; fp_fail "f was not rebuilt"; }
	sleep 0.2
done
fp_log "3: f rebuilt: $(grep -c '^rec:' "$FP_TMP/st.out") records in sync"
gone "$h2"
fp_coh_check C 3000 "$P"
say B "write 4000" "wrote 4000"
fp_coh_check C 4000 "$P"
h3=$(home f)
fp_log "3: $h2 killed: C reads 3000 from the rebuilt replica on $h3, then B's 4000"
fp_coh_end B C
# 4. A counter under a spinlock while the home dies.
fp_node_start O1 O1 --metrics-listen "${FP_HOST_IP[O1]}:0" --fault-timeout-ms 120000 $NOWB
fp_node_start O2 O2 --metrics-listen "${FP_HOST_IP[O2]}:0" --fault-timeout-ms 120000 $NOWB
fp_cli H O1 region create g --size 2M --replicas 2 \
	--nodes "$(fp_node_id_log O1),$(fp_node_id_log O2)" --coherent \
	>"$FP_TMP/g.c" 2>&1 || fp_fail "create g: $(cat "$FP_TMP/g.c")"
hg=$(home g)
# B and C stop halfway (the lock released; what they hold stays); the
# home dies then, and they go on at once, both asking while it is away
pids=()
declare -A GFD
for x in B C; do
	rm -f "$FP_TMP/g.$x.fifo"
	mkfifo "$FP_TMP/g.$x.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[$x]} FP_COH_PAUSE=$((N / 2)) "$COH" g "${#pids[@]}" 2 "$N" \
		<"$FP_TMP/g.$x.fifo" >"$FP_TMP/g.$x.out" 2>&1 &
	pids+=("$!")
	FP_PIDS+=("$!")
	exec {fd}>"$FP_TMP/g.$x.fifo"
	GFD[$x]=$fd
done
for x in B C; do
	fp_wait_log "$FP_TMP/g.$x.out" "^coherent: paused at $((N / 2))" 300 ||
		{ cat "$FP_TMP"/g.*.out >&2; fp_fail "g: $x did not get halfway"; }
done
g0=$(fp_metric "$hg" farpage_pagesrv_coherence_grants_total)
gone "$hg"
for x in B C; do
	echo go >&"${GFD[$x]}"
done
i=0
for x in B C; do
	fp_wait_pid "${pids[$i]}" 600
	rc=$?
	[ "$rc" = 0 ] || { cat "$FP_TMP"/g.*.out >&2; fp_fail "g: host $x exited $rc"; }
	i=$((i + 1))
done
grep -q "^coherent: counter=$((2 * N)) want=$((2 * N)) words=ok" "$FP_TMP/g.B.out" ||
	{ cat "$FP_TMP"/g.*.out >&2; fp_fail "g: $(grep '^coherent: counter' "$FP_TMP/g.B.out")"; }
fp_log "4: $hg killed after $g0 grants, B halfway: $(grep '^coherent: counter' "$FP_TMP/g.B.out") on $(home g)"
# 5. The gate: B hears of the new home 3 s after C does.
fp_node_start "$hg" "$hg" --metrics-listen "${FP_HOST_IP[$hg]}:0" --fault-timeout-ms 120000 $NOWB
gone B
FARPAGE_TEST_RELAYOUT_DELAY_MS=3000 fp_node_start B B --metrics-listen "${FP_HOST_IP[B]}:0" \
	--fault-timeout-ms 120000 $NOWB
fp_cli H O1 region create h --size 2M --replicas 2 \
	--nodes "$(fp_node_id_log O1),$(fp_node_id_log O2)" --coherent \
	>"$FP_TMP/h.c" 2>&1 || fp_fail "create h: $(cat "$FP_TMP/h.c")"
REG=h
modified
hh=$(home h)
fp_host_cut "$hh"
fp_coh_check C 2000 "$P"
fp_host_heal "$hh"
grep -q "replica layout generation .* -> " "$FP_TMP/B.log" ||
	fp_fail "B's agent never took h's new layout"
fp_log "5: $hh cut off holding h; C waited for B (layout 3 s late) and read B's 2000"
fp_coh_end B C
exit 0
