# shellcheck shell=bash
# What test_run_redis.sh and test_run_memcached.sh share (sourced after
# tests/lib.sh): an unmodified server under `farpage run`, all local first
# (the baseline and the ceiling), then with its heap in a region through a
# bounded cache. The test defines, before run_prog_main:
#   PROG         the server's path (its name is its /proc comm)
#   DATA         bytes of values its load puts in it
#   REGION CACHE the region's size and farpage run's --cache-size
#   prog_start NAME RUN-ARGS...  the server under `farpage run -v
#                RUN-ARGS` (run_prog_spawn), until it answers
#   prog_load_check NAME  loads the dataset, reads a sample back byte for
#                byte
#   prog_shutdown NAME    asks the server to exit

# the agent's cache slack, bytes
RUN_PROG_SLACK=$((FP_CACHE_SLACK_PAGES * 4096))

# run_prog_require: skips (77) where `farpage run` of $PROG cannot be
# tested: a sanitizer build (an uninstrumented program cannot load the
# instrumented library), copy mode, no jemalloc.
run_prog_require() {
	local lib=$FP_BIN/run/libfarpage-run.so
	grep -qE '^FARPAGE_SANITIZE:STRING=.+' "$FP_BIN/CMakeCache.txt" 2>/dev/null &&
		fp_skip "sanitizer build: an uninstrumented program cannot load the instrumented libfarpage-run.so"
	[ "${FP_FAULT_MODE:-}" = copy ] &&
		fp_skip "copy mode: an anonymous map needs the agent's cache (FARPAGE_MAP_ANON), which copy mode has not"
	[ -f "$lib" ] || fp_fail "$lib is not built"
	"$FP_CLI_BIN" run --dry-run --local-only --size 64M r -- "$PROG" >"$FP_TMP/dry.out" 2>&1 ||
		{ grep -q "no libjemalloc" "$FP_TMP/dry.out" &&
			fp_skip "no libjemalloc.so.2 (Debian package libjemalloc2; scripts/deps.sh installs it)"; }
	grep -q "^LD_PRELOAD=$(realpath "$lib"):.*libjemalloc.so.2" "$FP_TMP/dry.out" ||
		{ cat "$FP_TMP/dry.out" >&2; fp_fail "--dry-run: LD_PRELOAD is not the library, then jemalloc"; }
}

# run_prog_spawn NAME RUN-ARGS... -- SERVER-ARGS...: $PROG under `farpage
# run -v RUN-ARGS` on A's agent, its output in NAME.log; PROG_PID (farpage
# run execs it: the server itself).
run_prog_spawn() {
	local name=$1
	shift
	# shellcheck disable=SC2046
	fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]:-$FP_TMP/none.sock}" \
		"$FP_CLI_BIN" ${FP_COORD:+--coordinator "$FP_COORD"} $(fp_insecure_flag) run -v "$@" \
		>"$FP_TMP/$name.log" 2>&1
	PROG_PID=$FP_BG_PID
}

# run_prog_wait NAME CHECK-CMD...: until CHECK-CMD succeeds (the server
# answers), failing if the server ends first or after 120 s; then the
# process must be the server itself.
run_prog_wait() {
	local name=$1 comm=${PROG##*/} end
	shift
	end=$(fp_deadline 120)
	until "$@"; do
		kill -0 "$PROG_PID" 2>/dev/null || fp_fail "$name: $comm ended before it answered"
		[ "$(date +%s)" -le "$end" ] || fp_fail "$name: $comm did not answer"
		sleep 0.1
	done
	[ "$(cat "/proc/$PROG_PID/comm" 2>/dev/null)" = "$comm" ] ||
		fp_fail "$name: process $PROG_PID is $(cat "/proc/$PROG_PID/comm" 2>/dev/null), not $comm"
}

# run_prog_hwm: the server's peak RSS (kB) so far.
run_prog_hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$PROG_PID/status"; }

# run_prog_stop NAME: prog_shutdown; farpage run (the server) exits 0; the
# library's counters (-v) in RUN_LINE.
run_prog_stop() {
	local name=$1 comm=${PROG##*/} rc
	prog_shutdown "$name"
	fp_wait_pid "$PROG_PID" 120
	rc=$?
	[ "$rc" = 0 ] || fp_fail "$name: farpage run $comm exited $rc after its shutdown, not 0"
	RUN_LINE=$(grep -o 'region r: placed=.*' "$FP_TMP/$name.log" | tail -n1)
	[ -n "$RUN_LINE" ] || fp_fail "$name: no counters from the library at exit"
	fp_log "ok: $name: $comm shut down, exit 0; $RUN_LINE"
}
run_prog_field() { tr ' ' '\n' <<<"$RUN_LINE" | sed -n "s/^$1=//p"; }

# run_prog_main: a. all local, b. in region r (all B's) through A's cache.
run_prog_main() {
	local comm=${PROG##*/} base_kb local_kb limit_kb ready_kb hwm_kb owners
	local miss0 fills0 miss fills ev resmax

	# a. all local: the baseline and the ceiling
	prog_start local --local-only --size "$REGION" r
	base_kb=$(run_prog_hwm)
	prog_load_check local
	local_kb=$(run_prog_hwm)
	run_prog_stop local
	limit_kb=$((($(numfmt --from=iec "$CACHE") + RUN_PROG_SLACK) / 1024 + base_kb))
	fp_log "local: peak RSS $base_kb kB without data, $local_kb kB with $((DATA / 1024)) kB of values; the bound: $limit_kb kB"
	[ "$limit_kb" -lt $((DATA / 1024)) ] ||
		fp_fail "the bound ($limit_kb kB: cache, slack and baseline) is not below the data ($((DATA / 1024)) kB): it could not tell local memory"
	[ "$local_kb" -gt $((DATA / 1024)) ] && [ "$local_kb" -gt "$limit_kb" ] ||
		fp_fail "--local-only: peak RSS $local_kb kB, not above the data ($((DATA / 1024)) kB) and the bound ($limit_kb kB)"

	# b. far memory: the region all B's, A's cache bounded
	fp_coord_start H
	[ "$(numfmt --from=iec "$REGION")" -gt "$(numfmt --from=iec "${FP_POOL:-256M}")" ] &&
		export FP_POOL=$REGION
	fp_node_start H B
	fp_node_start H A --cache-size $(($(numfmt --from=iec "$CACHE") * 2)) --writeback-ms 200 \
		--metrics-listen 127.0.0.1:0
	owners=$(printf "$(fp_node_id B),%.0s" $(seq $(($(numfmt --from=iec "$REGION") / (2 << 20)))))
	fp_cli H B region create r --size "$REGION" --owners "${owners%,}" >"$FP_TMP/create.out" 2>&1 ||
		{ cat "$FP_TMP/create.out" >&2; fp_fail "create r"; }
	miss0=$(fp_cache_stat H A misses) fills0=$(fp_metric A farpage_anon_zero_fills_total)
	[ -n "$miss0" ] && [ -n "$fills0" ] || fp_fail "A's cache misses ($miss0) or zero fills ($fills0) cannot be read"
	prog_start region --cache-size "$CACHE" r
	ready_kb=$(run_prog_hwm)
	grep -q "through the agent at ${FP_NODE_SOCK[A]}" "$FP_TMP/region.log" ||
		{ cat "$FP_TMP/region.log" >&2; fp_fail "farpage run -v did not name A's agent"; }
	prog_load_check region
	hwm_kb=$(run_prog_hwm)
	miss=$(fp_cache_stat H A misses) fills=$(fp_metric A farpage_anon_zero_fills_total)
	ev=$(fp_cache_stat H A evictions) resmax=$(fp_cache_stat H A resident_max)
	run_prog_stop region
	[ "${miss:-0}" -gt "$miss0" ] ||
		fp_fail "A's agent fetched nothing back (cache misses $miss0 -> ${miss:-?}): the data never left this host"
	[ $((${fills:-0} - fills0)) -ge $((DATA / 4096)) ] ||
		fp_fail "A zero-filled $((${fills:-0} - fills0)) pages of the region, fewer than the data's $((DATA / 4096)): $comm's values were not all in it"
	[ "$(run_prog_field in_use_max)" -ge "$DATA" ] ||
		fp_fail "the library had $(run_prog_field in_use_max) bytes of the region in use at most, less than the $DATA bytes of values"
	[ "$(run_prog_field lost)" = 0 ] || fp_fail "discards failed ($RUN_LINE)"
	[ "$hwm_kb" -le "$limit_kb" ] ||
		fp_fail "$comm's peak RSS was $hwm_kb kB, over the cache $CACHE + slack $((RUN_PROG_SLACK >> 10)) kB + its own $base_kb kB = $limit_kb kB"
	fp_log "ok: region r: $DATA bytes of values through a $CACHE cache: peak RSS $hwm_kb kB (at most $limit_kb; $local_kb all local), A fetched $((miss - miss0)) pages back, zero-filled $((fills - fills0)), evicted ${ev:-?}; A's cache held ${resmax:-?} bytes at most; peak RSS $ready_kb kB when it first answered"
	fp_log PASS
}
