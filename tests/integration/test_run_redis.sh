#!/bin/bash
# Debian's redis-server under `farpage run` (docs/run.md, "Tested with"):
# a dataset about twice the cache, every sampled GET the value SET.
#   a. --local-only (the same preload and jemalloc on local memory, no
#      agent): redis-server's peak RSS once it answers PING is what it
#      keeps without data (the baseline); KEYS values of VAL bytes, each
#      derived from its key, loaded with `redis-cli --pipe`; a sample of
#      keys (the first, the last and SAMPLE random ones) read back with
#      redis-cli GET, byte for byte; its peak RSS then is above the data:
#      local memory holds it all, and the bound below could tell
#   b. a REGION all owned by B, redis-server on A under `farpage run
#      --cache-size CACHE`: the same load and check; A's agent fetched
#      pages back from B (cache misses grew), zero-filled at least the
#      data's pages (farpage_anon_zero_fills_total), the library placed at
#      least the data in the region (its counters at exit), and
#      redis-server's peak RSS stayed under CACHE plus the agent's slack
#      plus the baseline, which is below the data
#   Both end with `redis-cli shutdown nosave`: farpage run's exit status
#   is redis-server's, 0. FP_REDIS_SEED picks the sample again.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
grep -qE '^FARPAGE_SANITIZE:STRING=.+' "$FP_BIN/CMakeCache.txt" 2>/dev/null &&
	fp_skip "sanitizer build: an uninstrumented program cannot load the instrumented libfarpage-run.so"
[ "${FP_FAULT_MODE:-}" = copy ] &&
	fp_skip "copy mode: an anonymous map needs the agent's cache (FARPAGE_MAP_ANON), which copy mode has not"
REDIS=$(command -v redis-server) && RCLI=$(command -v redis-cli) ||
	fp_skip "redis-server or redis-cli is not installed (Debian packages redis-server and redis-tools; scripts/deps.sh installs them)"
PY=/usr/bin/python3
[ -x "$PY" ] || fp_skip "no /usr/bin/python3 (it makes the dataset; scripts/deps.sh installs it)"
LIB=$FP_BIN/run/libfarpage-run.so
[ -f "$LIB" ] || fp_fail "$LIB is not built"
"$FP_CLI_BIN" run --dry-run --local-only --size 64M r -- "$REDIS" >"$FP_TMP/dry.out" 2>&1 ||
	{ grep -q "no libjemalloc" "$FP_TMP/dry.out" &&
		fp_skip "no libjemalloc.so.2 (Debian package libjemalloc2; scripts/deps.sh installs it)"; }
grep -q "^LD_PRELOAD=$(realpath "$LIB"):.*libjemalloc.so.2" "$FP_TMP/dry.out" ||
	{ cat "$FP_TMP/dry.out" >&2; fp_fail "--dry-run: LD_PRELOAD is not the library, then jemalloc"; }

KEYS=${FP_REDIS_KEYS:-20000}
VAL=4096 # bytes a value (hex digits: a multiple of 64)
SAMPLE=${FP_REDIS_SAMPLE:-500}
SEED=${FP_REDIS_SEED:-$RANDOM}
REGION=512M
CACHE=32M
DATA=$((KEYS * VAL))
# the agent's FLOOP_CACHE_SLACK: reads and write-backs in flight (pages)
SLACK=$(((32 * 16 + 64 * 16 + 512) * 4096))
HOST_IP=127.0.0.1
fp_hosts_loopback H
mkdir -p "$FP_TMP/redis-dir"

# The dataset: key:NNNNNN -> VAL hex digits of SHA-256 in counter mode
# over the key, so a value from another key, another offset or another
# page never matches.
cat >"$FP_TMP/redisdata.py" <<'EOF'
import hashlib, random, sys

def key(i):
    return "key:%06d" % i

def val(k, size):
    kb = k.encode()
    return b"".join(hashlib.sha256(b"%s/%d" % (kb, j)).digest()
                    for j in range(size // 64)).hex().encode()

mode = sys.argv[1]
out = sys.stdout.buffer
if mode == "resp":          # resp N SIZE: SET commands for redis-cli --pipe
    n, size = int(sys.argv[2]), int(sys.argv[3])
    for i in range(n):
        k = key(i).encode()
        v = val(key(i), size)
        out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n"
                  % (len(k), k, len(v), v))
elif mode == "sample":      # sample N COUNT SEED: the first, the last, COUNT others
    n, c, seed = int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
    for i in [0, n - 1] + random.Random(seed).sample(range(1, n - 1), c):
        out.write(b"%s\n" % key(i).encode())
elif mode == "values":      # values SIZE < keys: each key's value, a line each
    size = int(sys.argv[2])
    for line in sys.stdin:
        out.write(val(line.strip(), size) + b"\n")
else:
    sys.exit("redisdata.py: unknown mode " + mode)
EOF
"$PY" "$FP_TMP/redisdata.py" sample "$KEYS" "$SAMPLE" "$SEED" >"$FP_TMP/keys" ||
	fp_fail "cannot pick the sample"
sed 's/^/GET /' "$FP_TMP/keys" >"$FP_TMP/gets"
"$PY" "$FP_TMP/redisdata.py" values "$VAL" <"$FP_TMP/keys" >"$FP_TMP/want" ||
	fp_fail "cannot make the sample's values"
[ "$(wc -l <"$FP_TMP/want")" = $((SAMPLE + 2)) ] && [ "$(wc -c <"$FP_TMP/want")" = $(((SAMPLE + 2) * (VAL + 1))) ] ||
	fp_fail "the sample's values are not $((SAMPLE + 2)) lines of $VAL bytes"
fp_log "dataset: $KEYS keys of $VAL bytes ($DATA bytes), sample of $((SAMPLE + 2)) keys (FP_REDIS_SEED=$SEED)"

# shellcheck disable=SC2086
rcli() { ${FP_HOST_RUN[H]} "$RCLI" -h "$HOST_IP" -p "$RPORT" "$@"; }

# redis_start NAME RUN-ARGS...: redis-server under `farpage run -v
# RUN-ARGS` on A's agent (RPID: farpage run execs it, so it is the server),
# on a free port of its own, until it answers PING; its output in NAME.log.
redis_start() {
	local name=$1 end
	shift
	RPORT=$(fp_port H)
	# shellcheck disable=SC2046
	fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]:-$FP_TMP/none.sock}" \
		"$FP_CLI_BIN" ${FP_COORD:+--coordinator "$FP_COORD"} $(fp_insecure_flag) run -v "$@" -- \
		"$REDIS" --bind "$HOST_IP" --port "$RPORT" --save "" --appendonly no \
		--daemonize no --dir "$FP_TMP/redis-dir" >"$FP_TMP/$name.log" 2>&1
	RPID=$FP_BG_PID
	end=$(fp_deadline 120)
	until [ "$(rcli ping 2>/dev/null)" = PONG ]; do
		kill -0 "$RPID" 2>/dev/null || fp_fail "$name: redis-server ended before it answered PING"
		[ "$(date +%s)" -le "$end" ] || fp_fail "$name: redis-server did not answer PING on port $RPORT"
		sleep 0.1
	done
	[ "$(cat "/proc/$RPID/comm" 2>/dev/null)" = redis-server ] ||
		fp_fail "$name: process $RPID is $(cat "/proc/$RPID/comm" 2>/dev/null), not redis-server"
}

# redis_hwm: redis-server's peak RSS (kB) so far.
redis_hwm() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$RPID/status"; }

# redis_load_check NAME: the dataset SET through redis-cli --pipe, then the
# sample read back with GET and compared byte for byte.
redis_load_check() {
	local name=$1 n line
	# shellcheck disable=SC2086
	"$PY" "$FP_TMP/redisdata.py" resp "$KEYS" "$VAL" |
		timeout 300 ${FP_HOST_RUN[H]} "$RCLI" -h "$HOST_IP" -p "$RPORT" --pipe --pipe-timeout 300 \
			>"$FP_TMP/$name.pipe" 2>&1 ||
		{ cat "$FP_TMP/$name.pipe" >&2; fp_fail "$name: redis-cli --pipe failed"; }
	grep -q "^errors: 0, replies: $KEYS\$" "$FP_TMP/$name.pipe" ||
		{ cat "$FP_TMP/$name.pipe" >&2; fp_fail "$name: not $KEYS SETs without an error"; }
	n=$(rcli dbsize)
	[ "$n" = "$KEYS" ] || fp_fail "$name: DBSIZE $n, not $KEYS"
	# shellcheck disable=SC2086
	timeout 300 ${FP_HOST_RUN[H]} "$RCLI" -h "$HOST_IP" -p "$RPORT" <"$FP_TMP/gets" >"$FP_TMP/$name.got" 2>&1 ||
		{ head -c 2000 "$FP_TMP/$name.got" >&2; fp_fail "$name: redis-cli GET failed"; }
	if ! cmp -s "$FP_TMP/want" "$FP_TMP/$name.got"; then
		line=$(cmp "$FP_TMP/want" "$FP_TMP/$name.got" 2>&1 | sed -n 's/.* line \([0-9]*\)$/\1/p')
		fp_log "$name: the first difference is at line ${line:-?} of the sample, key $(sed -n "${line:-1}p" "$FP_TMP/keys")"
		fp_log "  want: $(sed -n "${line:-1}p" "$FP_TMP/want" | head -c 160)"
		fp_log "  got:  $(sed -n "${line:-1}p" "$FP_TMP/$name.got" | head -c 160)"
		fp_fail "$name: GET did not return the value SET ($(wc -c <"$FP_TMP/$name.got") bytes read, $(wc -c <"$FP_TMP/want") wanted)"
	fi
	fp_log "ok: $name: $KEYS SETs ($(rcli info memory | tr -d '\r' | grep '^used_memory_human:')), $((SAMPLE + 2)) GETs byte for byte"
}

# redis_stop NAME: SHUTDOWN NOSAVE; farpage run (redis-server) exits 0;
# the library's counters (-v) in RUN_LINE.
redis_stop() {
	local name=$1 rc
	rcli shutdown nosave >"$FP_TMP/$name.shut" 2>&1 ||
		{ cat "$FP_TMP/$name.shut" >&2; fp_fail "$name: redis-cli shutdown nosave failed"; }
	fp_wait_pid "$RPID" 120
	rc=$?
	[ "$rc" = 0 ] || fp_fail "$name: farpage run redis-server exited $rc after SHUTDOWN NOSAVE, not 0"
	RUN_LINE=$(grep -o 'region r: placed=.*' "$FP_TMP/$name.log" | tail -n1)
	[ -n "$RUN_LINE" ] || fp_fail "$name: no counters from the library at exit"
	fp_log "ok: $name: redis-server shut down, exit 0; $RUN_LINE"
}
run_field() { tr ' ' '\n' <<<"$RUN_LINE" | sed -n "s/^$1=//p"; }

# a. all local: the baseline and the ceiling
redis_start local --local-only --size "$REGION" r
BASE_KB=$(redis_hwm)
redis_load_check local
LOCAL_KB=$(redis_hwm)
redis_stop local
limit_kb=$((($(numfmt --from=iec "$CACHE") + SLACK) / 1024 + BASE_KB))
fp_log "local: peak RSS $BASE_KB kB without data, $LOCAL_KB kB with $((DATA / 1024)) kB of values; the bound: $limit_kb kB"
[ "$limit_kb" -lt $((DATA / 1024)) ] ||
	fp_fail "the bound ($limit_kb kB: cache, slack and baseline) is not below the data ($((DATA / 1024)) kB): it could not tell local memory"
[ "$LOCAL_KB" -gt $((DATA / 1024)) ] && [ "$LOCAL_KB" -gt "$limit_kb" ] ||
	fp_fail "--local-only: peak RSS $LOCAL_KB kB, not above the data ($((DATA / 1024)) kB) and the bound ($limit_kb kB)"

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
redis_start region --cache-size "$CACHE" r
READY_KB=$(redis_hwm)
grep -q "through the agent at ${FP_NODE_SOCK[A]}" "$FP_TMP/region.log" ||
	{ cat "$FP_TMP/region.log" >&2; fp_fail "farpage run -v did not name A's agent"; }
redis_load_check region
HWM_KB=$(redis_hwm)
miss=$(fp_cache_stat H A misses) fills=$(fp_metric A farpage_anon_zero_fills_total)
ev=$(fp_cache_stat H A evictions) resmax=$(fp_cache_stat H A resident_max)
redis_stop region
[ "${miss:-0}" -gt "$miss0" ] ||
	fp_fail "A's agent fetched nothing back (cache misses $miss0 -> ${miss:-?}): the data never left this host"
[ $((${fills:-0} - fills0)) -ge $((DATA / 4096)) ] ||
	fp_fail "A zero-filled $((${fills:-0} - fills0)) pages of the region, fewer than the data's $((DATA / 4096)): redis-server's values were not all in it"
[ "$(run_field in_use_max)" -ge "$DATA" ] ||
	fp_fail "the library had $(run_field in_use_max) bytes of the region in use at most, less than the $DATA bytes of values"
[ "$(run_field lost)" = 0 ] || fp_fail "discards failed ($RUN_LINE)"
[ "$HWM_KB" -le "$limit_kb" ] ||
	fp_fail "redis-server's peak RSS was $HWM_KB kB, over the cache $CACHE + slack $((SLACK >> 10)) kB + its own $BASE_KB kB = $limit_kb kB"
fp_log "ok: region r: $DATA bytes of values through a $CACHE cache: peak RSS $HWM_KB kB (at most $limit_kb; $LOCAL_KB all local), A fetched $((miss - miss0)) pages back, zero-filled $((fills - fills0)), evicted ${ev:-?}; A's cache held ${resmax:-?} bytes at most; peak RSS $READY_KB kB when it first answered"
fp_log PASS
