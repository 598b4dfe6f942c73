#!/bin/bash
# Unmodified programs on far memory (issue 40; docs/bench.md, "Programs on
# far memory"): Debian's redis-server and memcached under `farpage run`,
# their heap in a region all owned by another agent, host A's cache for
# them at 100, 75, 50 and 25 % of their data, against `farpage run
# --local-only` (the same preload and jemalloc on local memory: the
# ceiling). On loopback: a coordinator, agent B (owns the region) and
# agent A (the program's host), as tests/integration/test_run_redis.sh.
#   bench/programs.sh [--bin BUILD_DIR] [--data SIZE] [--value-size N]
#                     [--requests N] [--warmup N] [--runs N] [--same-server]
#                     [--pcts "100 75 50 25"] [--progs "redis memcached"]
#                     [--workloads "get:uniform set:uniform get:hot set:hot mix:hot"]
# For each program, the all-local run first (it measures the data), then
# one per cache size. Each workload runs on a server started afresh (none
# inherits the layout another left: memcached after uniform traffic is not
# memcached after a hot set's; --same-server: one server a cache size for
# all), loaded with DATA/VALUE keys "key:%012d" (values of
# VALUE bytes, in a shuffled order: the hot keys are spread over the
# heap). The workloads, with 4 clients: get and set with uniform
# keys, and get, set and a 90/10 get/set mix on a hot set (10 % of the
# keys get 90 % of the requests, the other 10 % go to any key). Each
# workload: WARMUP requests not timed (default: half the keys, at least
# REQUESTS/2; the cache settles on the hot set), then RUNS timed runs of
# REQUESTS. Clients: redis-benchmark -c 4 (the hot set through a Lua
# script, EVALSHA, that picks the key); memcached: a python3 load
# generator with 4 processes, one request in flight each, its own p99.
# memcached's hash table is sized for the keys at start (-o hashpower,
# a bucket for every 4 keys; as an operator who knows the item count
# does): grown by memcached itself it holds a key a bucket, and every
# lookup walks past other, cold items' headers (its chain links live in
# them), touching their pages. FP_MC_HASHPOWER=0: memcached's default.
#   programs_data: prog=P keys=N hot_keys=N value_bytes=N values_bytes=N
#                  data_bytes=N used_bytes=N region_bytes=N hashpower=N
#   programs_run: prog=P local_pct=100|75|50|25|local cache_bytes=N
#                 hwm_bytes=N load_secs=X load_fetched=N
#                 (hwm: the most of the servers; load: the first's)
#   programs: prog=P test=get|set|mix keys=uniform|hot local_pct=...
#             run=N ops=N p50_us=N p99_us=N fetched=N hits=N cache_bytes=N
#             data_bytes=N
# data_bytes: the program's anonymous resident memory the load added,
# all local; fetched: pages host A's agent fetched back during the run;
# hits: its faults on pages its cache held (mapped again: the clock's
# sampling, docs/design.md "Access sampling").
# FP_MC_OPTS: more memcached options (e.g. "-o no_lru_maintainer,no_lru_crawler");
# FP_A_OPTS: more options of agent A (e.g. "--readahead 0").
# Skips (77) without root, redis-server / redis-benchmark / memcached,
# jemalloc or /usr/bin/python3, in copy mode, or in a sanitizer build.
set -uo pipefail
DATA=512M
VAL=1024
REQS=100000
WARMUP=""
FRESH=1
RUNS=1
PCTS="100 75 50 25"
PROGS="redis memcached"
WORKLOADS="get:uniform set:uniform get:hot set:hot mix:hot"
while [ $# -gt 0 ]; do
	case $1 in
	--bin) FARPAGE_BIN=$(cd "${2:?--bin needs a directory}" && pwd); export FARPAGE_BIN; shift 2 ;;
	--data) DATA=${2:?--data needs a size}; shift 2 ;;
	--value-size) VAL=${2:?--value-size needs bytes}; shift 2 ;;
	--requests) REQS=${2:?--requests needs a number}; shift 2 ;;
	--warmup) WARMUP=${2:?--warmup needs a number}; shift 2 ;;
	--same-server) FRESH=0; shift ;;
	--runs) RUNS=${2:?--runs needs a number}; shift 2 ;;
	--pcts) PCTS=${2:?--pcts needs percentages}; shift 2 ;;
	--progs) PROGS=${2:?--progs needs redis, memcached or both}; shift 2 ;;
	--workloads) WORKLOADS=${2:?--workloads needs OP:KEYS words}; shift 2 ;;
	-h | --help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
	*) echo "programs.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
bad() { echo "programs.sh: $*" >&2; exit 2; }
DATA_B=$(numfmt --from=iec "$DATA" 2>/dev/null) || bad "--data $DATA: not a size"
[[ $VAL =~ ^[1-9][0-9]*$ ]] && [ "$VAL" -ge 16 ] && [ "$VAL" -le 65536 ] ||
	bad "--value-size $VAL: want 16..65536 bytes"
[[ $REQS =~ ^[1-9][0-9]*$ ]] && [ "$REQS" -ge 100 ] || bad "--requests $REQS: want at least 100"
[[ $RUNS =~ ^[1-9][0-9]?$ ]] || bad "--runs $RUNS: want 1..99"
for p in $PCTS; do
	[[ $p =~ ^[1-9][0-9]?$|^100$ ]] || bad "--pcts: $p is not a percentage (1..100)"
done
for p in $PROGS; do
	case $p in redis | memcached) ;; *) bad "--progs: $p is neither redis nor memcached" ;; esac
done
for w in $WORKLOADS; do
	case $w in get:uniform | set:uniform | get:hot | set:hot | mix:hot) ;;
	*) bad "--workloads: $w is none of get:uniform set:uniform get:hot set:hot mix:hot" ;; esac
done
NKEYS=$((DATA_B / VAL))
[ "$NKEYS" -ge 1000 ] || bad "--data $DATA holds $NKEYS values of $VAL bytes: want at least 1000"
# memcached's hash table: 2^N buckets, N the least with 2^N >= 4 keys
MC_HASHPOWER=${FP_MC_HASHPOWER:-}
if [ -z "$MC_HASHPOWER" ]; then
	MC_HASHPOWER=12
	while [ $((1 << MC_HASHPOWER)) -lt $((NKEYS * 4)) ] && [ "$MC_HASHPOWER" -lt 32 ]; do
		MC_HASHPOWER=$((MC_HASHPOWER + 1))
	done
fi
[[ $MC_HASHPOWER =~ ^[0-9]+$ ]] && { [ "$MC_HASHPOWER" = 0 ] || [ "$MC_HASHPOWER" -le 32 ]; } ||
	bad "FP_MC_HASHPOWER=$MC_HASHPOWER: want 0 (memcached's default) or up to 32"
if [ -z "$WARMUP" ]; then
	WARMUP=$((REQS / 2))
	[ "$WARMUP" -ge $((NKEYS / 2)) ] || WARMUP=$((NKEYS / 2))
fi
[[ $WARMUP =~ ^[1-9][0-9]*$ ]] && [ "$WARMUP" -ge 100 ] || bad "--warmup $WARMUP: want at least 100"
HOT=$((NKEYS / 10))
# The region: jemalloc's address space for a heap of N bytes is 2-3 N
# (docs/run.md, "Sizes"), memcached's slabs ~1.2 N; whole 2 MiB chunks.
REGION_B=$(((3 * DATA_B + (256 << 20)) / (2 << 20) * (2 << 20)))
MC_MEM=$((2 * DATA_B / (1 << 20) + 64)) # memcached -m (MiB): every item kept

SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/lib.sh"
fp_require
grep -qE '^FARPAGE_SANITIZE:STRING=.+' "$FP_BIN/CMakeCache.txt" 2>/dev/null &&
	fp_skip "sanitizer build: an uninstrumented program cannot load the instrumented libfarpage-run.so"
[ "${FP_FAULT_MODE:-}" = copy ] &&
	fp_skip "copy mode: an anonymous map needs the agent's cache (FARPAGE_MAP_ANON), which copy mode has not"
PY=/usr/bin/python3
[ -x "$PY" ] || fp_skip "no /usr/bin/python3 (the datasets and memcached's load generator)"
for p in $PROGS; do
	case $p in
	redis)
		REDIS=$(command -v redis-server) && RCLI=$(command -v redis-cli) &&
			RBENCH=$(command -v redis-benchmark) ||
			fp_skip "redis-server, redis-cli or redis-benchmark is not installed (Debian packages redis-server and redis-tools; scripts/deps.sh installs them)"
		;;
	memcached)
		MC=$(command -v memcached) ||
			fp_skip "memcached is not installed (Debian package memcached; scripts/deps.sh installs it)"
		;;
	esac
done
LIB=$FP_BIN/run/libfarpage-run.so
[ -f "$LIB" ] || fp_fail "$LIB is not built"
"$FP_CLI_BIN" run --dry-run --local-only --size 64M r -- /bin/true >"$FP_TMP/dry.out" 2>&1 ||
	{ grep -q "no libjemalloc" "$FP_TMP/dry.out" &&
		fp_skip "no libjemalloc.so.2 (Debian package libjemalloc2; scripts/deps.sh installs it)"; }
grep -q "^LD_PRELOAD=$(realpath "$LIB"):.*libjemalloc.so.2" "$FP_TMP/dry.out" ||
	{ cat "$FP_TMP/dry.out" >&2; fp_fail "--dry-run: LD_PRELOAD is not the library, then jemalloc"; }

HOST_IP=127.0.0.1
SEED=40
fp_hosts_loopback H
fp_coord_start H
FP_POOL=$REGION_B fp_node_start H B
# A's own bound: room for the largest per-program cache (farpage run
# --cache-size bounds each program's mapping).
fp_node_start H A --cache-size "$REGION_B" ${FP_A_OPTS:-}
fp_cli H B region create progs --size "$REGION_B" --nodes "$(fp_node_id B)" \
	>"$FP_TMP/create.out" 2>&1 || { cat "$FP_TMP/create.out" >&2; fp_fail "create region progs"; }
fp_log "cluster on loopback: coordinator, agent B (owns region progs, $((REGION_B >> 20)) MiB), agent A (the programs); data $((DATA_B >> 20)) MiB = $NKEYS values of $VAL bytes, hot set $HOT keys; $REQS requests a run, $RUNS run(s)"

# The helper: the datasets (redis: RESP for redis-cli --pipe; memcached:
# sets over the text protocol), and memcached's load generator.
cat >"$FP_TMP/progs.py" <<'EOF'
import os, random, socket, struct, sys, time

def key(i):
    return b"key:%012d" % i

def order(n, seed):
    ks = list(range(n))
    random.Random(seed).shuffle(ks)
    return ks

def pick(rnd, n, hot):
    """hot: 90 % of the requests to keys 0..hot-1, 10 % to any key;
    uniform (hot == 0): any key."""
    if hot and rnd.random() < 0.9:
        return rnd.randrange(hot)
    return rnd.randrange(n)

def resp(n, size, seed):
    out = sys.stdout.buffer
    v = b"x" * size
    for i in order(n, seed):
        k = key(i)
        out.write(b"*3\r\n$3\r\nSET\r\n$%d\r\n%s\r\n$%d\r\n%s\r\n" % (len(k), k, size, v))

class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port))
        self.s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.buf = b""

    def until(self, end):
        while not self.buf.endswith(end):
            d = self.s.recv(1 << 16)
            if not d:
                sys.exit("mc: the connection closed")
            self.buf += d
        b, self.buf = self.buf, b""
        return b

def mc_load(host, port, n, size, seed):
    c = Conn(host, port)
    v = b"x" * size
    ks = order(n, seed)
    for b in range(0, n, 100):
        part = ks[b:b + 100]
        c.s.sendall(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), size, v) for i in part))
        got = b""
        while got.count(b"\r\n") < len(part):
            d = c.s.recv(1 << 16)
            if not d:
                sys.exit("mc: the connection closed")
            got += d
        if got != b"STORED\r\n" * len(part):
            sys.exit("mc: set: %r" % got[:200])

def mc_stats(host, port):
    c = Conn(host, port)
    c.s.sendall(b"stats\r\n")
    for l in c.until(b"END\r\n").decode().split("\r\n"):
        if l.startswith("STAT "):
            print(l[5:])

def mc_shutdown(host, port):
    c = Conn(host, port)
    c.s.sendall(b"shutdown\r\n")
    if c.s.recv(100):
        sys.exit("mc: shutdown answered")

def worker(host, port, n, hot, op, size, reqs, seed, t_go, path):
    """One client: REQS requests, one at a time; each timed alone."""
    c = Conn(host, port)
    rnd = random.Random(seed)
    v = b"x" * size
    lat = []
    misses = 0
    time.sleep(max(0.0, t_go - time.monotonic()))
    t0 = time.monotonic_ns()
    for _ in range(reqs):
        k = key(pick(rnd, n, hot))
        w = op == "set" or (op == "mix" and rnd.random() < 0.1)
        a = time.perf_counter_ns()
        if w:
            c.s.sendall(b"set %s 0 0 %d\r\n%s\r\n" % (k, size, v))
            r = c.until(b"\r\n")
            if r != b"STORED\r\n":
                sys.exit("mc: set %s: %r" % (k.decode(), r[:100]))
        else:
            c.s.sendall(b"get %s\r\n" % k)
            r = c.until(b"END\r\n")
            if len(r) < size:
                misses += 1
        lat.append(time.perf_counter_ns() - a)
    t1 = time.monotonic_ns()
    with open(path, "wb") as f:
        f.write(struct.pack("qqq", t0, t1, misses))
        f.write(struct.pack("%dq" % len(lat), *lat))

def mc_run(host, port, n, hot, op, size, reqs, procs, seed, tmp):
    """PROCS client processes (REQS in all); ops/s over the first start to
    the last end, latency percentiles over every request (nearest rank)."""
    t_go = time.monotonic() + 0.2
    pids = []
    for i in range(procs):
        pid = os.fork()
        if pid == 0:
            code = 0
            try:
                worker(host, port, n, hot, op, size, reqs // procs, seed * 1000 + i, t_go,
                       "%s/lat.%d" % (tmp, i))
            except SystemExit as e:
                print(e, file=sys.stderr)
                code = 1
            except BaseException as e:
                print("mc: %r" % e, file=sys.stderr)
                code = 1
            os._exit(code)
        pids.append(pid)
    bad = 0
    for p in pids:
        _, st = os.waitpid(p, 0)
        bad |= st != 0
    if bad:
        sys.exit("mc: a client failed")
    lat, starts, ends, misses = [], [], [], 0
    for i in range(procs):
        with open("%s/lat.%d" % (tmp, i), "rb") as f:
            b = f.read()
        t0, t1, m = struct.unpack_from("qqq", b)
        starts.append(t0)
        ends.append(t1)
        misses += m
        lat += struct.unpack_from("%dq" % ((len(b) - 24) // 8), b, 24)
        os.unlink("%s/lat.%d" % (tmp, i))
    lat.sort()
    pct = lambda q: lat[min(len(lat) - 1, max(0, -(-len(lat) * q // 100) - 1))]
    secs = (max(ends) - min(starts)) / 1e9
    print("ops=%d p50_us=%d p99_us=%d misses=%d requests=%d"
          % (round(len(lat) / secs), round(pct(50) / 1000), round(pct(99) / 1000), misses, len(lat)))

m = sys.argv[1]
a = sys.argv[2:]
if m == "resp":
    resp(int(a[0]), int(a[1]), int(a[2]))
elif m == "mc-load":
    mc_load(a[0], int(a[1]), int(a[2]), int(a[3]), int(a[4]))
elif m == "mc-stats":
    mc_stats(a[0], int(a[1]))
elif m == "mc-shutdown":
    mc_shutdown(a[0], int(a[1]))
elif m == "mc-run":
    mc_run(a[0], int(a[1]), int(a[2]), int(a[3]), a[4], int(a[5]), int(a[6]), int(a[7]),
           int(a[8]), a[9])
else:
    sys.exit("progs.py: unknown mode " + m)
EOF

# The hot set for redis-benchmark, which draws keys uniformly only
# (-r): EVALSHA of this script with __rand_int__ uniform over [0, 10 N):
# below 9 N (90 % of the requests) key r mod H (the hot keys 0..H-1),
# else key r - 9 N (any key). ARGV: r, N, H, op (get|set|mix), a second
# __rand_int__ (mix: 10 % are sets), the value's size (made here: no
# value on the wire).
cat >"$FP_TMP/hot.lua" <<'EOF'
local r = tonumber(ARGV[1])
local n = tonumber(ARGV[2])
local h = tonumber(ARGV[3])
local k
if r < 9 * n then k = r % h else k = r - 9 * n end
local key = string.format('key:%012d', k)
local op = ARGV[4]
if op == 'get' or (op == 'mix' and tonumber(ARGV[5]) % 10 ~= 0) then
	return redis.call('GET', key)
end
return redis.call('SET', key, string.rep('x', tonumber(ARGV[6])))
EOF

now() { date +%s.%N; }
since() { awk -v a="$1" -v b="$(now)" 'BEGIN { printf "%.2f", b - a }'; }
rss_anon() { sed -n 's/^RssAnon:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$1/status"; }
hwm_kb() { sed -n 's/^VmHWM:[[:space:]]*\([0-9]*\) kB$/\1/p' "/proc/$1/status"; }
# astat FIELD: host A's cache counter FIELD (misses, hits), 0 if none
astat() { local m; m=$(fp_cache_stat H A "$1"); echo "${m:-0}"; }

# start_prog PROG NAME RUN-ARGS...: PROG under `farpage run -v RUN-ARGS`
# on A's agent, on a free port (PORT; PPID_: the server, farpage run execs
# it), until it answers; its output in NAME.log.
start_prog() {
	local prog=$1 name=$2 end
	shift 2
	PORT=$(fp_port H)
	local cmd
	if [ "$prog" = redis ]; then
		cmd=("$REDIS" --bind "$HOST_IP" --port "$PORT" --save "" --appendonly no
			--daemonize no --dir "$FP_TMP")
	else
		cmd=("$MC" -m "$MC_MEM" -l "$HOST_IP" -p "$PORT" -U 0 -u root -A -t 4)
		[ "$MC_HASHPOWER" = 0 ] || cmd+=(-o "hashpower=$MC_HASHPOWER")
		# shellcheck disable=SC2206
		[ -n "${FP_MC_OPTS:-}" ] && cmd+=($FP_MC_OPTS)
	fi
	# shellcheck disable=SC2046
	fp_bg H env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[A]}" "$FP_CLI_BIN" --coordinator "$FP_COORD" \
		$(fp_insecure_flag) run -v "$@" -- "${cmd[@]}" >"$FP_TMP/$name.log" 2>&1
	SPID=$FP_BG_PID
	end=$(fp_deadline 120)
	until answers "$prog"; do
		kill -0 "$SPID" 2>/dev/null || { cat "$FP_TMP/$name.log" >&2; fp_fail "$name: $prog ended before it answered"; }
		[ "$(date +%s)" -le "$end" ] || fp_fail "$name: $prog did not answer on port $PORT"
		sleep 0.1
	done
}
answers() {
	if [ "$1" = redis ]; then
		[ "$("$RCLI" -h "$HOST_IP" -p "$PORT" ping 2>/dev/null)" = PONG ]
	else
		"$PY" "$FP_TMP/progs.py" mc-stats "$HOST_IP" "$PORT" >/dev/null 2>&1
	fi
}
stop_prog() {
	local prog=$1 name=$2 rc
	if [ "$prog" = redis ]; then
		"$RCLI" -h "$HOST_IP" -p "$PORT" shutdown nosave >"$FP_TMP/$name.shut" 2>&1
	else
		"$PY" "$FP_TMP/progs.py" mc-shutdown "$HOST_IP" "$PORT" >"$FP_TMP/$name.shut" 2>&1
	fi
	fp_wait_pid "$SPID" 120
	rc=$?
	[ "$rc" = 0 ] || { cat "$FP_TMP/$name.shut" "$FP_TMP/$name.log" >&2; fp_fail "$name: $prog exited $rc after its shutdown"; }
}

# load PROG NAME: every key set (shuffled order), checked all there.
load() {
	local prog=$1 name=$2 n
	if [ "$prog" = redis ]; then
		"$PY" "$FP_TMP/progs.py" resp "$NKEYS" "$VAL" "$SEED" |
			timeout 1800 "$RCLI" -h "$HOST_IP" -p "$PORT" --pipe --pipe-timeout 1800 >"$FP_TMP/$name.pipe" 2>&1 ||
			{ cat "$FP_TMP/$name.pipe" >&2; fp_fail "$name: redis-cli --pipe failed"; }
		grep -q "^errors: 0, replies: $NKEYS\$" "$FP_TMP/$name.pipe" ||
			{ cat "$FP_TMP/$name.pipe" >&2; fp_fail "$name: not $NKEYS SETs without an error"; }
		n=$("$RCLI" -h "$HOST_IP" -p "$PORT" dbsize)
		USED=$("$RCLI" -h "$HOST_IP" -p "$PORT" info memory | tr -d '\r' | sed -n 's/^used_memory://p')
	else
		timeout 1800 "$PY" "$FP_TMP/progs.py" mc-load "$HOST_IP" "$PORT" "$NKEYS" "$VAL" "$SEED" \
			>"$FP_TMP/$name.load" 2>&1 || { cat "$FP_TMP/$name.load" >&2; fp_fail "$name: the sets failed"; }
		"$PY" "$FP_TMP/progs.py" mc-stats "$HOST_IP" "$PORT" >"$FP_TMP/$name.stats" 2>&1
		n=$(sed -n 's/^curr_items //p' "$FP_TMP/$name.stats")
		local ev
		ev=$(sed -n 's/^evictions //p' "$FP_TMP/$name.stats")
		[ "$ev" = 0 ] || fp_fail "$name: memcached evicted $ev items (-m $MC_MEM)"
		USED=$(sed -n 's/^bytes //p' "$FP_TMP/$name.stats")
	fi
	[ "$n" = "$NKEYS" ] || fp_fail "$name: $prog holds $n keys, not $NKEYS"
}

# redis_script: the hot-set script loaded, checked on one key (SHA).
redis_script() {
	local v
	SHA=$("$RCLI" -h "$HOST_IP" -p "$PORT" script load "$(cat "$FP_TMP/hot.lua")") &&
		[[ $SHA =~ ^[0-9a-f]{40}$ ]] || fp_fail "redis: SCRIPT LOAD: $SHA"
	v=$("$RCLI" -h "$HOST_IP" -p "$PORT" evalsha "$SHA" 0 $((9 * NKEYS + 1)) "$NKEYS" "$HOT" get 0 "$VAL")
	[ "${#v}" = "$VAL" ] || fp_fail "redis: the hot-set script read ${#v} bytes, not $VAL"
}

# bench PROG TEST KEYS N: N requests of a workload (4 clients); prints
# "ops=N p50_us=N p99_us=N".
bench() {
	local prog=$1 t=$2 k=$3 n=$4 line f
	if [ "$prog" = redis ]; then
		local args=(-h "$HOST_IP" -p "$PORT" -c 4 -n "$n" --csv)
		if [ "$k" = uniform ]; then
			args+=(-r "$NKEYS" -d "$VAL" -t "$t")
		else
			args+=(-r $((10 * NKEYS)) evalsha "$SHA" 0 __rand_int__ "$NKEYS" "$HOT" "$t" __rand_int__ "$VAL")
		fi
		line=$(timeout 3600 "$RBENCH" "${args[@]}" 2>"$FP_TMP/rb.err" | tail -n1) ||
			{ cat "$FP_TMP/rb.err" >&2; fp_fail "redis-benchmark $t $k failed"; }
		# "TEST","rps","avg_ms","min_ms","p50_ms","p95_ms","p99_ms","max_ms"
		IFS=, read -r -a f <<<"${line//\"/}"
		local c=${#f[@]}
		[ "$c" -ge 8 ] && [[ ${f[c - 7]} =~ ^[0-9.]+$ ]] ||
			{ cat "$FP_TMP/rb.err" >&2; fp_fail "redis-benchmark $t $k: no result ('$line')"; }
		awk -v r="${f[c - 7]}" -v p50="${f[c - 4]}" -v p99="${f[c - 2]}" \
			'BEGIN { printf "ops=%d p50_us=%d p99_us=%d\n", r + 0.5, p50 * 1000 + 0.5, p99 * 1000 + 0.5 }'
	else
		local hot=0
		[ "$k" = hot ] && hot=$HOT
		line=$(timeout 3600 "$PY" "$FP_TMP/progs.py" mc-run "$HOST_IP" "$PORT" "$NKEYS" "$hot" "$t" \
			"$VAL" "$n" 4 "$((SEED + RANDOM))" "$FP_TMP" 2>"$FP_TMP/mc.err") ||
			{ cat "$FP_TMP/mc.err" >&2; fp_fail "the memcached load generator ($t $k) failed"; }
		[[ $line =~ misses=0 ]] || fp_fail "memcached: gets of keys it holds missed ($t $k: $line)"
		echo "${line%% misses=*}"
	fi
}

# up PROG PCT: PROG started for PCT (its cache; all local: measures the
# data, DATA_BYTES, the first time) and loaded: CACHE, LOAD_SECS,
# LOAD_FETCHED
up() {
	local prog=$1 pct=$2 name=$1-$2 rss0 m0 t0
	if [ "$pct" = local ]; then
		CACHE=0
		start_prog "$prog" "$name" --local-only --size "$REGION_B" progs
	else
		# whole MiB, at least 2
		CACHE=$(((pct * DATA_BYTES / 100 + (1 << 20) - 1) >> 20))
		[ "$CACHE" -ge 2 ] || CACHE=2
		CACHE=$((CACHE << 20))
		start_prog "$prog" "$name" --cache-size "$CACHE" progs
	fi
	rss0=$(rss_anon "$SPID")
	m0=$(astat misses)
	t0=$(now)
	load "$prog" "$name"
	LOAD_SECS=$(since "$t0")
	LOAD_FETCHED=0
	[ "$pct" = local ] || LOAD_FETCHED=$(($(astat misses) - m0))
	if [ -z "$DATA_BYTES" ]; then
		DATA_BYTES=$((($(rss_anon "$SPID") - rss0) * 1024))
		[ "$DATA_BYTES" -gt 0 ] || fp_fail "$name: the load added no resident memory"
		echo "programs_data: prog=$prog keys=$NKEYS hot_keys=$HOT value_bytes=$VAL values_bytes=$((NKEYS * VAL)) data_bytes=$DATA_BYTES used_bytes=$USED region_bytes=$REGION_B$([ "$prog" = memcached ] && echo " hashpower=$MC_HASHPOWER")"
	fi
	[ "$prog" = redis ] && redis_script
	fp_log "$name: loaded $NKEYS keys in $LOAD_SECS s (cache $((CACHE >> 20)) MiB of $((DATA_BYTES >> 20)) MiB)"
}

for prog in $PROGS; do
	DATA_BYTES=""
	for pct in local $PCTS; do
		hwm=0 n=0
		for w in $WORKLOADS; do
			t=${w%%:*} k=${w#*:}
			# each workload on a server loaded afresh (--same-server:
			# one server, loaded once, for all of them)
			if [ $n = 0 ] || [ "$FRESH" = 1 ]; then
				[ $n = 0 ] || stop_prog "$prog" "$prog-$pct"
				up "$prog" "$pct"
				[ $n = 0 ] && load_secs=$LOAD_SECS load_fetched=$LOAD_FETCHED
			fi
			n=$((n + 1))
			bench "$prog" "$t" "$k" "$WARMUP" >/dev/null # warm-up
			for ((r = 1; r <= RUNS; r++)); do
				m0=$(astat misses) h0=$(astat hits)
				res=$(bench "$prog" "$t" "$k" "$REQS")
				fetched=0 rehit=0
				[ "$pct" = local ] || fetched=$(($(astat misses) - m0)) rehit=$(($(astat hits) - h0))
				echo "programs: prog=$prog test=$t keys=$k local_pct=$pct run=$r $res fetched=$fetched hits=$rehit cache_bytes=$CACHE data_bytes=$DATA_BYTES"
			done
			h=$(hwm_kb "$SPID")
			[ "$h" -le "$hwm" ] || hwm=$h
		done
		echo "programs_run: prog=$prog local_pct=$pct cache_bytes=$CACHE hwm_bytes=$((hwm * 1024)) load_secs=$load_secs load_fetched=$load_fetched"
		stop_prog "$prog" "$prog-$pct"
	done
done
echo "programs_cfg: requests=$REQS runs=$RUNS value_bytes=$VAL data=$DATA_B pcts=${PCTS// /,} clients=4"
