#!/bin/bash
# farpage run (docs/run.md): an unmodified program with its anonymous
# memory in a region. fp_heapcheck keeps SIZE bytes and more live through
# malloc, calloc, realloc, free, mmap, munmap, mremap, MADV_DONTNEED,
# four threads and the kernel's own reads and writes of it, and checks
# every byte.
#   a. --local-only (no agent): fp_heapcheck passes, the library placed its
#      mappings (its counters at exit), a MAP_FIXED file mapping and
#      mremap(MREMAP_FIXED) over them were refused; again with jemalloc
#      purging at once (every free page discarded)
#   b. refusals, each one line: a statically linked program, fork() in
#      the program (and fp_heapcheck --fork fails without farpage run: the
#      check can fail), a program not found, no agent (the CLI; and the
#      library itself: exit 127 before main(), never a run on local
#      memory), a bad command line; an exec of the program (env(1), its
#      own) keeps the region, its children (posix_spawn) run locally
#   c. a region of REGION all owned by B, agent A with a cache, an unknown
#      region refused; `farpage run --cache-size CACHE` of fp_heapcheck on
#      A passes, A's agent fetched pages back (cache misses grew) and
#      evicted, and the program's peak RSS stayed under CACHE plus the
#      agent's slack plus what the program keeps locally (measured alone),
#      below the data it checked
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
. "$(dirname "$0")/../run_prog.sh"
PROG=true
run_prog_require
LIB=$FP_BIN/run/libfarpage-run.so
HC=$FP_BIN/tests/fp_heapcheck
[ -x "$HC" ] || fp_fail "$HC is not built"
SIZE=${FP_RUN_SIZE:-96M}
REGION=${FP_RUN_REGION:-512M}
CACHE=${FP_RUN_CACHE:-32M}
SLACK=$RUN_PROG_SLACK
grep -q '^MALLOC_CONF=dss:disabled' "$FP_TMP/dry.out" ||
	{ cat "$FP_TMP/dry.out" >&2; fp_fail "--dry-run: no MALLOC_CONF=dss:disabled"; }

# hc_ok NAME OUT ERR: fp_heapcheck passed; its byte count in HC_BYTES, its
# peak RSS (kB) in HC_HWM; the library's counters (-v) in ERR.
hc_ok() {
	grep -q '^heapcheck: ok bytes=' "$2" || { cat "$2" "$3" >&2; fp_fail "$1: fp_heapcheck did not pass"; }
	HC_BYTES=$(fp_field "$2" "heapcheck: ok" bytes) HC_HWM=$(fp_field "$2" "heapcheck: ok" vmhwm_kb)
	grep -q '^heapcheck: region: .* refused (EINVAL)' "$2" ||
		{ cat "$2" >&2; fp_fail "$1: the MAP_FIXED and MREMAP_FIXED refusals were not checked"; }
	RUN_LINE=$(grep -o 'region r: placed=.*' "$3" | tail -n1)
	[ -n "$RUN_LINE" ] || { cat "$3" >&2; fp_fail "$1: no counters from the library at exit"; }
	RUN_PLACED=$(tr ' ' '\n' <<<"$RUN_LINE" | sed -n 's/^placed=//p')
	RUN_MAX=$(tr ' ' '\n' <<<"$RUN_LINE" | sed -n 's/^in_use_max=//p')
	RUN_DISC=$(tr ' ' '\n' <<<"$RUN_LINE" | sed -n 's/^discards=//p')
	RUN_LOST=$(tr ' ' '\n' <<<"$RUN_LINE" | sed -n 's/^lost=//p')
	[ "${RUN_PLACED:-0}" -gt 0 ] && [ "${RUN_MAX:-0}" -ge "$HC_BYTES" ] ||
		fp_fail "$1: the library placed $RUN_PLACED mappings, $RUN_MAX bytes at most, for $HC_BYTES bytes checked"
	[ "${RUN_DISC:-0}" -gt 0 ] || fp_fail "$1: nothing was discarded ($RUN_LINE)"
	[ "$RUN_LOST" = 0 ] || fp_fail "$1: discards failed ($RUN_LINE)"
}

# a. the same placement on local memory
"$FP_CLI_BIN" run -v --local-only --size "$REGION" r -- "$HC" --region "$SIZE" \
	>"$FP_TMP/a.out" 2>"$FP_TMP/a.err" ||
	{ cat "$FP_TMP/a.out" "$FP_TMP/a.err" >&2; fp_fail "--local-only: fp_heapcheck failed"; }
hc_ok "--local-only" "$FP_TMP/a.out" "$FP_TMP/a.err"
grep -q 'mmap(.*over local memory in place of region r: only private anonymous memory' "$FP_TMP/a.err" ||
	{ cat "$FP_TMP/a.err" >&2; fp_fail "--local-only: the refused MAP_FIXED mapping was not said"; }
fp_log "ok: --local-only: $HC_BYTES bytes checked, peak RSS $HC_HWM kB; $RUN_LINE"
MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0 "$FP_CLI_BIN" run -v --local-only --size "$REGION" r -- \
	"$HC" --region "$SIZE" >"$FP_TMP/a0.out" 2>"$FP_TMP/a0.err" ||
	{ cat "$FP_TMP/a0.out" "$FP_TMP/a0.err" >&2; fp_fail "--local-only, purging at once: fp_heapcheck failed"; }
hc_ok "--local-only, purging at once" "$FP_TMP/a0.out" "$FP_TMP/a0.err"
fp_log "ok: --local-only with jemalloc purging at once: $RUN_DISC discards; $RUN_LINE"
# what the program keeps locally besides its data (binary, libraries,
# stacks, the allocator's own): its peak RSS with 1 MiB of data
"$FP_CLI_BIN" run --local-only --size 64M r -- "$HC" 1M >"$FP_TMP/base.out" 2>&1 ||
	{ cat "$FP_TMP/base.out" >&2; fp_fail "fp_heapcheck 1M"; }
BASE_KB=$(fp_field "$FP_TMP/base.out" "heapcheck: ok" vmhwm_kb)

# b. refusals
if [ -x "$FP_BIN/tests/fp_static" ]; then
	"$FP_CLI_BIN" run --local-only --size 64M r -- "$FP_BIN/tests/fp_static" >"$FP_TMP/st.out" 2>&1 &&
		fp_fail "a statically linked program was run"
	grep -q "fp_static is statically linked: LD_PRELOAD cannot place its memory" "$FP_TMP/st.out" &&
		! grep -q "fp_static: ran" "$FP_TMP/st.out" || { cat "$FP_TMP/st.out" >&2; fp_fail "static program: $(head -n1 "$FP_TMP/st.out")"; }
	fp_log "ok: $(head -n1 "$FP_TMP/st.out")"
else
	fp_log "skipped: a statically linked program (no static libc: fp_static is not built)"
fi
"$HC" --fork >"$FP_TMP/fork0.out" 2>&1 && { cat "$FP_TMP/fork0.out" >&2; fp_fail "fp_heapcheck --fork passed without farpage run"; }
"$FP_CLI_BIN" run --local-only --size 256M r -- "$HC" --fork >"$FP_TMP/fork.out" 2>&1 ||
	{ cat "$FP_TMP/fork.out" >&2; fp_fail "fork() under farpage run was not refused with ENOMEM"; }
grep -q "fork is not supported under farpage run: the child would not have the heap" "$FP_TMP/fork.out" ||
	{ cat "$FP_TMP/fork.out" >&2; fp_fail "the fork refusal was not said"; }
fp_log "ok: fork refused: $(grep '^heapcheck: fork' "$FP_TMP/fork.out")"
"$FP_CLI_BIN" run --local-only --size 64M r -- fp-no-such-program >"$FP_TMP/nf.out" 2>&1 && fp_fail "a missing program ran"
grep -q "run: fp-no-such-program: command not found" "$FP_TMP/nf.out" || { cat "$FP_TMP/nf.out" >&2; fp_fail "missing program: $(cat "$FP_TMP/nf.out")"; }
FARPAGE_AGENT_SOCK=$FP_TMP/none.sock "$FP_CLI_BIN" run r -- "$HC" 1M >"$FP_TMP/na.out" 2>&1 && fp_fail "farpage run without an agent ran"
grep -q "run r: no agent socket at $FP_TMP/none.sock" "$FP_TMP/na.out" || { cat "$FP_TMP/na.out" >&2; fp_fail "no agent: $(cat "$FP_TMP/na.out")"; }
# the library alone, as a program started by hand with its variables
env FARPAGE_RUN_REGION=r FARPAGE_AGENT_SOCK="$FP_TMP/none.sock" LD_PRELOAD="$LIB" "$HC" 1M >"$FP_TMP/nl.out" 2>&1
rc=$?
[ $rc = 127 ] && ! grep -q '^heapcheck:' "$FP_TMP/nl.out" &&
	grep -q "cannot put fp_heapcheck's memory in region r: no agent socket at $FP_TMP/none.sock; not started (exit 127)" "$FP_TMP/nl.out" ||
	{ cat "$FP_TMP/nl.out" >&2; fp_fail "the library without an agent: exit $rc"; }
"$FP_CLI_BIN" run r >"$FP_TMP/us.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "Try 'farpage run --help'" "$FP_TMP/us.out" || { cat "$FP_TMP/us.out" >&2; fp_fail "a bad command line: exit $rc"; }
fp_log "ok: refused with one line: a missing program, no agent (the CLI; the library: exit 127), a bad command line"
# env(1) execs fp_heapcheck (the same process: it keeps the region), which
# checks 1 MiB in a child (posix_spawn: local memory) and then execs itself
# (the region again): the library says it is in place three times, never
# in the child
"$FP_CLI_BIN" run -v --local-only --size 256M r -- env "$HC" --spawn >"$FP_TMP/sp.out" 2>&1 ||
	{ cat "$FP_TMP/sp.out" >&2; fp_fail "env, a spawned child and an exec under farpage run"; }
n_env=$(grep -c "env's anonymous memory goes to" "$FP_TMP/sp.out")
n_hc=$(grep -c "fp_heapcheck's anonymous memory goes to" "$FP_TMP/sp.out")
n_ok=$(grep -c '^heapcheck: ok' "$FP_TMP/sp.out")
[ "$n_env" = 1 ] && [ "$n_hc" = 2 ] && [ "$n_ok" = 2 ] ||
	{ cat "$FP_TMP/sp.out" >&2; fp_fail "exec chain and child: the region was put in place $n_env times for env, $n_hc for fp_heapcheck (want 1 and 2: not in the child), $n_ok checks passed"; }
fp_log "ok: env's exec and fp_heapcheck's own keep the region, its posix_spawn child runs on local memory"

# c. far memory: the region all B's, A's cache bounded
fp_hosts_loopback H
fp_coord_start H
[ "$(numfmt --from=iec "$REGION")" -gt "$(numfmt --from=iec "${FP_POOL:-256M}")" ] &&
	export FP_POOL=$REGION
fp_node_start H B
fp_node_start H A --cache-size $(($(numfmt --from=iec "$CACHE") * 2)) --writeback-ms 200
b=$(fp_node_id B)
owners=$(printf "$b,%.0s" $(seq $(($(numfmt --from=iec "$REGION") / (2 << 20)))))
fp_cli H B region create r --size "$REGION" --owners "${owners%,}" >"$FP_TMP/create.out" 2>&1 ||
	{ cat "$FP_TMP/create.out" >&2; fp_fail "create r"; }
fp_cli H A run nosuch -- "$HC" 1M >"$FP_TMP/ns.out" 2>&1 && fp_fail "an unknown region ran"
grep -q "run: no region 'nosuch'" "$FP_TMP/ns.out" || { cat "$FP_TMP/ns.out" >&2; fp_fail "unknown region: $(cat "$FP_TMP/ns.out")"; }
fp_log "ok: $(grep "run: no region 'nosuch'" "$FP_TMP/ns.out")"
miss0=$(fp_cache_stat H A misses)
MALLOC_CONF=dirty_decay_ms:0,muzzy_decay_ms:0 fp_cli H A run -v --cache-size "$CACHE" r -- \
	"$HC" --region "$SIZE" >"$FP_TMP/c.out" 2>"$FP_TMP/c.err" ||
	{ cat "$FP_TMP/c.out" "$FP_TMP/c.err" >&2; fp_fail "fp_heapcheck under farpage run on region r failed"; }
hc_ok "region r" "$FP_TMP/c.out" "$FP_TMP/c.err"
grep -q "through the agent at ${FP_NODE_SOCK[A]}" "$FP_TMP/c.err" || { cat "$FP_TMP/c.err" >&2; fp_fail "farpage run -v did not name A's agent"; }
miss=$(fp_cache_stat H A misses) ev=$(fp_cache_stat H A evictions)
[ "${miss:-0}" -gt "${miss0:-0}" ] || fp_fail "A's agent fetched nothing back (cache misses ${miss0:-?} -> ${miss:-?}): the data never left this host"
[ "${ev:-0}" -gt 0 ] || fp_fail "A's agent evicted nothing"
limit_kb=$((($(numfmt --from=iec "$CACHE") + SLACK) / 1024 + BASE_KB))
[ "$HC_HWM" -le "$limit_kb" ] ||
	fp_fail "fp_heapcheck's peak RSS was $HC_HWM kB, over the cache $CACHE + slack $((SLACK >> 10)) kB + its own $BASE_KB kB"
[ "$HC_HWM" -lt $((HC_BYTES / 1024)) ] || fp_fail "peak RSS $HC_HWM kB, not below the $HC_BYTES bytes checked"
fp_log "ok: region r: $HC_BYTES bytes checked through a $CACHE cache, peak RSS $HC_HWM kB (at most $limit_kb), A fetched $((miss - miss0)) pages back, evicted $ev; $RUN_LINE"
exit 0
