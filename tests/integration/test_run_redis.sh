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
. "$(dirname "$0")/../run_prog.sh"
PROG=$(command -v redis-server) && RCLI=$(command -v redis-cli) ||
	fp_skip "redis-server or redis-cli is not installed (Debian packages redis-server and redis-tools; scripts/deps.sh installs them)"
PY=/usr/bin/python3
[ -x "$PY" ] || fp_skip "no /usr/bin/python3 (it makes the dataset; scripts/deps.sh installs it)"
run_prog_require

KEYS=${FP_REDIS_KEYS:-20000}
VAL=4096 # bytes a value (hex digits: a multiple of 64)
SAMPLE=${FP_REDIS_SAMPLE:-500}
SEED=${FP_REDIS_SEED:-$RANDOM}
REGION=512M
CACHE=32M
DATA=$((KEYS * VAL))
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

# prog_start NAME RUN-ARGS...: redis-server under `farpage run -v
# RUN-ARGS` on A's agent, on a free port of its own, until it answers PING.
prog_start() {
	local name=$1
	shift
	RPORT=$(fp_port H)
	run_prog_spawn "$name" "$@" -- "$PROG" --bind "$HOST_IP" --port "$RPORT" --save "" \
		--appendonly no --daemonize no --dir "$FP_TMP/redis-dir"
	run_prog_wait "$name" redis_pong
}
redis_pong() { [ "$(rcli ping 2>/dev/null)" = PONG ]; }

# prog_load_check NAME: the dataset SET through redis-cli --pipe, then the
# sample read back with GET and compared byte for byte.
prog_load_check() {
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

# prog_shutdown NAME: SHUTDOWN NOSAVE.
prog_shutdown() {
	rcli shutdown nosave >"$FP_TMP/$1.shut" 2>&1 ||
		{ cat "$FP_TMP/$1.shut" >&2; fp_fail "$1: redis-cli shutdown nosave failed"; }
}

run_prog_main
