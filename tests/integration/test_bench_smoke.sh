#!/bin/bash
# SPDX-License-Identifier: MIT
# farpage-bench smoke run: a 16 MiB region, one run of every figure, a
# quick far-memory run (a 4 MiB cache, one workload of each kind) and the
# quick scale parts (a 1 GiB map, 1 and 2 fault loops, dirty tracking A/B)
# and the quick replicated-region part (16 MiB regions, a 64 MiB rebuild)
# and the quick coordinator part (WAL store against etcd, if etcd is
# installed) and the quick migration part (a 512 MiB TCG guest, idle,
# where QEMU can run: not in a sanitizer build) and the quick programs
# part (redis-server and memcached under farpage run, 64 MiB of values,
# where they are installed) and the quick coherent-region part (three
# hosts of its own: ping-pong, partitioned writes, read-mostly). Checks
# that the JSON has every required key with a number and that the plot was
# drawn, both where they go by default (bench-results/ in the current
# directory), and that an awkward host name (quote, backslash, control
# character, a byte that is not UTF-8) leaves the JSON valid; that the
# driver's JSON and every program's JSON lines keep the shapes of
# bench/json-shapes.json (bench/json_shapes.py check), that every program
# answers --features, and that 'farpage-bench report' makes the results
# table and puts it between the markers of a copy of docs/bench.md; never
# looks at how fast anything was.
set -uo pipefail
BIN=${FARPAGE_BIN:?FARPAGE_BIN must name the build dir}
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
BENCH=$BIN/bench/farpage-bench
[ -x "$BENCH" ] || { echo "test_bench_smoke: $BENCH not built" >&2; exit 1; }
# --help lists every option (one a line, argparse's two spaces in) and
# docs/bench.md's option table has the same ones.
help_opts=$("$BENCH" --help | grep -oE '^  (-h, )?--[a-z-]+' | sed -E 's/^  (-h, )?//' | sort -u)
# shellcheck disable=SC2016 # the backquotes are markdown's
doc_opts=$(awk '/^\| option \| default \| meaning \|/ { t = 1; next } t && !/^\|/ { exit } t' \
	"$SRC/docs/bench.md" | grep -oE '^\| `(-h`, `)?--[a-z-]+' | sed -E 's/^\| `(-h`, `)?//' | sort -u)
if [ -z "$help_opts" ] || [ "$help_opts" != "$doc_opts" ]; then
	echo "test_bench_smoke: FAIL: --help and docs/bench.md's option table differ:" >&2
	diff <(echo "$help_opts") <(echo "$doc_opts") >&2
	exit 1
fi
# Every program says what it is and can do in one JSON line (--features),
# which the driver asks instead of reading --help.
for p in bench_uffd_floor bench_net_floor bench_memcpy bench_fault bench_farmem \
	bench_scale bench_seal bench_land bench_coord; do
	f=$("$BIN/bench/$p" --features 2>&1)
	if ! python3 -c 'import json,sys
o = json.loads(sys.argv[1])
sys.exit(0 if o.get("what") == "features" and o.get("prog") == sys.argv[2]
         and isinstance(o.get("options"), list) and isinstance(o.get("features"), list) else 1)' \
		"$f" "$p" 2>/dev/null; then
		echo "test_bench_smoke: FAIL: $p --features: '$f'" >&2
		exit 1
	fi
done
[ "$(id -u)" = 0 ] || { echo "test_bench_smoke: SKIP: needs root" >&2; exit 77; }
if command -v jq >/dev/null; then
	getnum() { jq -e "getpath(\$p | split(\".\")) | numbers" --arg p "$2" "$1" >/dev/null 2>&1; }
	getstr() { jq -r "getpath(\$p | split(\".\")) | strings" --arg p "$2" "$1" 2>/dev/null; }
elif command -v python3 >/dev/null; then
	getnum() {
		python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v[k]
sys.exit(0 if isinstance(v, (int, float)) and not isinstance(v, bool) else 1)' "$1" "$2" 2>/dev/null
	}
	getstr() {
		python3 -c 'import json,sys
v = json.load(open(sys.argv[1]))
for k in sys.argv[2].split("."):
    v = v.get(k, {}) if isinstance(v, dict) else {}
print(v if isinstance(v, str) else "")' "$1" "$2" 2>/dev/null
	}
else
	echo "test_bench_smoke: SKIP: neither jq nor python3 to read the JSON" >&2
	exit 77
fi

TMP=$(mktemp -d /tmp/farpage-bench-smoke.XXXXXX)
trap 'rm -rf "$TMP"' EXIT
# No --json or --png: the defaults, under bench-results/ of the current
# directory (here $TMP). In a UTS namespace whose host name has a quote, a
# backslash, a control character and a byte that is not UTF-8: the JSON
# (machine.hostname) must stay valid.
ODD_HOST=$(printf 'fp"h\\\001\377')
ODD_HOST_JSON=$(printf 'fp"h\\\001\357\277\275') # \377 as U+FFFD
# shellcheck disable=SC2016 # for the inner shell
(cd "$TMP" && exec unshare -u bash -c 'printf %s "$1" >/proc/sys/kernel/hostname && shift && exec "$@"' \
	_ "$ODD_HOST" env FARPAGE_SRC="$SRC" FP_KEEP="$TMP/keep" "$BENCH" --bin "$BIN" --size 16M --runs 1 \
	--farmem quick --farmem-cache 4M --farmem-secs 0.3 \
	--scale-map quick --scale-loops quick --scale-dirty quick --replica quick \
	--coord quick --migrate quick --programs quick --coherent quick) >"$TMP/out" 2>&1
rc=$?
if [ $rc = 77 ]; then
	tail -n3 "$TMP/out" >&2
	exit 77
fi
if [ $rc != 0 ]; then
	cat "$TMP/out" >&2
	echo "test_bench_smoke: FAIL: farpage-bench exited $rc" >&2
	exit 1
fi

[ -f "$TMP/bench-results/bench.json" ] ||
	{ echo "test_bench_smoke: FAIL: no bench-results/bench.json: $(ls "$TMP")" >&2; exit 1; }
ln -s bench-results/bench.json "$TMP/bench.json"
ln -s bench-results/bench-latency.png "$TMP/bench.png"
jq -e . "$TMP/bench.json" >/dev/null 2>&1 ||
	{ echo "test_bench_smoke: FAIL: bench.json is not valid JSON: $(jq . "$TMP/bench.json" 2>&1 | tail -1)" >&2; exit 1; }
[ "$(getstr "$TMP/bench.json" machine.hostname)" = "$ODD_HOST_JSON" ] ||
	{ echo "test_bench_smoke: FAIL: machine.hostname is '$(getstr "$TMP/bench.json" machine.hostname | od -c)'" >&2; exit 1; }
fail=0
for k in floors.uffd_p50_us floors.rtt_p50_us floors.stream_MBps \
	remote.seq.p50_us remote.seq.p99_us remote.rand.p50_us \
	remote.rand.p99_us fault_in.seq.t1_MBps fault_in.rand.t1_MBps \
	fault_in.rand.t4_MBps runs region.remote_pages scale.touched_mib \
	scale.g1.flush_us scale.g4.stale_us scale.g16.unmap_us; do
	if ! getnum "$TMP/bench.json" "$k"; then
		echo "test_bench_smoke: FAIL: $k missing or not a number" >&2
		fail=1
	fi
done
# The scale parts in their quick modes (bigmap.sh, fault_loops.sh,
# dirty_ab.sh, each on a loopback cluster of its own).
for s in map loops dirty; do
	st=$(getstr "$TMP/bench.json" "scale.$s.status")
	[ "$st" = measured ] || { echo "test_bench_smoke: FAIL: scale.$s.status is '$st'" >&2; fail=1; }
done
for k in scale.map.1G.map_ms scale.map.1G.flush_ms scale.map.1G.unmap_ms \
	scale.map.1G.map_ro_ms scale.map.1G.agent_hwm_kb \
	scale.loops.1.m1t1.MBps scale.loops.1.m1t4.MBps scale.loops.1.m2t2.MBps \
	scale.loops.2.m1t1.MBps scale.loops.2.m1t4.MBps scale.loops.2.m2t2.MBps \
	scale.dirty.wp-fault.touches_per_s scale.dirty.wp-fault.wp_faults_per_s \
	scale.dirty.scan.touches_per_s scale.dirty.scan.wp_faults_per_s \
	scale.dirty.scan.w50.t1.p99_us scale.dirty.wp-fault.w50.t1.p99_us; do
	if ! getnum "$TMP/bench.json" "$k"; then
		echo "test_bench_smoke: FAIL: $k missing or not a number" >&2
		fail=1
	fi
done
# Replicated regions in their quick mode (bench/replicas.sh: four hosts of
# its own, an owner killed -9, its replicas rebuilt).
st=$(getstr "$TMP/bench.json" replica.status)
[ "$st" = measured ] || { echo "test_bench_smoke: FAIL: replica.status is '$st'" >&2; fail=1; }
for k in replica.wb.r1.MBps replica.wb.r2.MBps replica.wb.r3.MBps replica.wb.r3.flush_secs \
	replica.read.r1.p99_us replica.read.r2.p99_us replica.failover.reader.max_us \
	replica.failover.writer.max_us replica.failover.writer.flush_secs replica.failover.stall_ms \
	replica.rebuild.MBps replica.rebuild.detect_ms replica.rebuild.read.during.p99_us \
	replica.ratios.wb_r2_vs_r1 replica.ratios.rebuild_vs_stream; do
	if ! getnum "$TMP/bench.json" "$k"; then
		echo "test_bench_smoke: FAIL: $k missing or not a number" >&2
		fail=1
	fi
done
grep -q "^failover: reader's longest stall" "$TMP/out" ||
	{ echo "test_bench_smoke: FAIL: no replica rows printed" >&2; fail=1; }
# Coherent regions in their quick mode (bench/coherent.sh; copy mode has
# no coherent map).
st=$(getstr "$TMP/bench.json" coherent.status)
case $st in
measured)
	for k in coherent.rtt_us coherent.pingpong.us_per_move coherent.pingpong.rtts_per_move \
		coherent.pingpong_replicated.us_per_move \
		coherent.partitioned.coherent.secs coherent.partitioned.single.secs \
		coherent.partitioned.ratio.ns_per_write coherent.readmostly.coherent.reads_per_s \
		coherent.readmostly.readonly.reads_per_s coherent.readmostly.ratio; do
		getnum "$TMP/bench.json" "$k" ||
			{ echo "test_bench_smoke: FAIL: $k missing or not a number" >&2; fail=1; }
	done
	grep -q '^coherent: ownership ping-pong' "$TMP/out" ||
		{ echo "test_bench_smoke: FAIL: no coherent rows printed" >&2; fail=1; } ;;
*) echo "test_bench_smoke: FAIL: coherent.status is '$st'" >&2; fail=1 ;;
esac
# The coordinator in its quick mode (bench_coord: its own etcd and
# coordinators), where etcd is installed.
st=$(getstr "$TMP/bench.json" coord.status)
case $st in
measured)
	for k in coord.wal.create_p50_ms coord.wal.create_p99_ms coord.etcd.create_p50_ms \
		coord.etcd.create_p99_ms coord.wal.heartbeats_per_s coord.etcd.heartbeats_per_s \
		coord.failover.ttl2.median_ms coord.failover_ms_median \
		coord.ratios.create_p99_etcd_vs_wal; do
		if ! getnum "$TMP/bench.json" "$k"; then
			echo "test_bench_smoke: FAIL: $k missing or not a number" >&2
			fail=1
		fi
	done
	grep -q '^coord: region create p99, etcd' "$TMP/out" ||
		{ echo "test_bench_smoke: FAIL: no coordinator rows printed" >&2; fail=1; }
	;;
"n/a (bench_coord: "*"etcd is not installed"*)
	echo "test_bench_smoke: coordinator not checked: $st" >&2 ;;
*) echo "test_bench_smoke: FAIL: coord.status is '$st'" >&2; fail=1 ;;
esac
t=$(getstr "$TMP/bench.json" transport)
case $t in
tcp | verbs) ;;
*) echo "test_bench_smoke: FAIL: transport is '$t'" >&2; fail=1 ;;
esac
# Far memory needs the cache (a kernel with MINOR faults on shmem).
fm=$(getstr "$TMP/bench.json" farmem.status)
case $fm in
measured) ;;
"n/a (host A's agent serves faults by copying"*)
	echo "test_bench_smoke: far memory not checked: $fm" >&2 ;;
*) echo "test_bench_smoke: FAIL: farmem.status is '$fm'" >&2; fail=1 ;;
esac
# Live migration needs QEMU and an uninstrumented build (its script
# skips otherwise): measured, the figures are there.
mg=$(getstr "$TMP/bench.json" migrate.status)
case $mg in
measured)
	for k in migrate.512M.farpage.total_ms migrate.512M.farpage.downtime_ms \
		migrate.512M.farpage.bytes migrate.512M.precopy.total_ms \
		migrate.512M.farpage.switchover_ms migrate.512M.precopy.switchover_ms; do
		getnum "$TMP/bench.json" "$k" ||
			{ echo "test_bench_smoke: FAIL: no number at $k" >&2; fail=1; }
	done ;;
"n/a (migrate.sh: "*) echo "test_bench_smoke: live migration not checked: $mg" >&2 ;;
*) echo "test_bench_smoke: FAIL: migrate.status is '$mg'" >&2; fail=1 ;;
esac
if [ "$fm" = measured ]; then
	keys="farmem.r4x.zipf.w50.t4.touches_per_s farmem.r4x.zipf.w50.t4.hit_ratio
		farmem.r4x.zipf.w50.t4.p50_us farmem.r4x.zipf.w50.t4.p99_us
		farmem.r4x.zipf.w50.t4.wb_MBps farmem.r4x.zipf.w50.t4.flush_secs
		farmem.ceiling.r4x.zipf.w50.t4.hit_ratio farmem.ab.continue.seq_MBps
		farmem.ab.continue.rand_MBps farmem.ab.copy.seq_MBps
		farmem.ab.copy.rand_MBps farmem.floor.seq_t1 farmem.cache_bytes"
	[ "$(getstr "$TMP/bench.json" farmem.policy.status)" = measured ] &&
		keys="$keys farmem.policy.clock.hit_ratio farmem.policy.fifo.hit_ratio"
	for k in $keys; do
		if ! getnum "$TMP/bench.json" "$k"; then
			echo "test_bench_smoke: FAIL: $k missing or not a number" >&2
			fail=1
		fi
	done
	grep -q '^r4x zipf, 50 % writes, 4 thr' "$TMP/out" ||
		{ echo "test_bench_smoke: FAIL: no far-memory table printed" >&2; fail=1; }
fi
# What security and the cache cost: the four configurations' rows.
sec=$(getstr "$TMP/bench.json" secure.status)
if [ "$sec" = measured ]; then
	for k in secure.defaults.seq_MBps secure.defaults.seqpf_MBps \
		secure.defaults.randpf_MBps secure.defaults.rand_p50_us \
		secure.noenc.seqpf_MBps secure.insecure.seqpf_MBps \
		secure.copy.seqpf_MBps secure.copy.rand_p50_us \
		secure.defaults.cost.seqpf.a_cpu_us secure.defaults.cost.seqpf.b_cpu_us \
		secure.targets.seqpf_vs_copy secure.parts.seal.r256k_ns \
		secure.parts.open.r4k_ns secure.parts.land.copy_shmem.r64_ns \
		secure.parts.land.pwrite_continue.r1_ns \
		secure.defaults.cost.seq.g_cpu_us secure.defaults.cost.seqpf.busy_cpus \
		secure.defaults.cost.seqpf.m_cpu_us secure.copy.cost.randpf.ceiling_MBps; do
		if ! getnum "$TMP/bench.json" "$k"; then
			echo "test_bench_smoke: FAIL: $k missing or not a number" >&2
			fail=1
		fi
	done
	# The machine's CPUs busy during a pass come from /proc/stat: some,
	# and not more than the CPUs there are, within what /proc/stat's
	# 10 ms ticks allow over a pass of a smoke run's few hundred ms
	# (2.6 of 2 seen on a loaded host): a figure in another unit (ticks,
	# percent) is far above twice the CPUs.
	busy=$(python3 -c 'import json,sys
print(json.load(open(sys.argv[1]))["secure"]["defaults"]["cost"]["seqpf"]["busy_cpus"])' \
		"$TMP/bench.json" 2>/dev/null)
	if ! awk -v b="$busy" -v n="$(nproc)" 'BEGIN { exit !(b > 0 && b <= 2 * n) }'; then
		echo "test_bench_smoke: FAIL: busy CPUs during a pass '$busy' (of $(nproc))" >&2
		fail=1
	fi
	grep -q '^sequential + prefetch, MB/s' "$TMP/out" ||
		{ echo "test_bench_smoke: FAIL: no security table printed" >&2; fail=1; }
else
	echo "test_bench_smoke: FAIL: secure.status is '$sec'" >&2
	fail=1
fi
# The plots: PNGs where the JSON says (matplotlib, if the interpreter the
# driver runs with has it).
PY=$(sed -n '1s/^#! *//p' "$BENCH")
if ${PY:-python3} -c 'import matplotlib' 2>/dev/null; then
	[ -s "$TMP/bench.png" ] && [ "$(head -c 8 "$TMP/bench.png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
		{ echo "test_bench_smoke: FAIL: no PNG plot" >&2; fail=1; }
	[ "$(getstr "$TMP/bench.json" plot)" = "$TMP/bench-results/bench-latency.png" ] ||
		{ echo "test_bench_smoke: FAIL: plot is '$(getstr "$TMP/bench.json" plot)'" >&2; fail=1; }
	# The second: fault-in MB/s by configuration, beside the first.
	fi_png=$TMP/bench-results/bench-fault-in.png
	[ "$(getstr "$TMP/bench.json" plot_fault_in)" = "$fi_png" ] ||
		{ echo "test_bench_smoke: FAIL: plot_fault_in is '$(getstr "$TMP/bench.json" plot_fault_in)'" >&2; fail=1; }
	[ -s "$fi_png" ] && [ "$(head -c 8 "$fi_png" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ] ||
		{ echo "test_bench_smoke: FAIL: no fault-in PNG plot" >&2; fail=1; }
else
	echo "test_bench_smoke: python3-matplotlib not installed; plot not checked" >&2
fi
# Every figure comes with its spread (min <= median <= max) and its runs
# (one number a run).
jq -e '[.remote.rand.p50_us_spread, .remote.rand.p50_us, .runs, (.remote.rand.p50_us_runs | length)]
	| (.[0] | length == 2) and .[0][0] <= .[1] and .[1] <= .[0][1] and .[3] == .[2]' \
	"$TMP/bench.json" >/dev/null 2>&1 ||
	{ echo "test_bench_smoke: FAIL: remote.rand.p50_us_spread / _runs do not fit the median" >&2; fail=1; }
grep -q '^remote fault seq p50' "$TMP/out" ||
	{ echo "test_bench_smoke: FAIL: no table printed" >&2; fail=1; }
# The shapes: the driver's JSON has every key of bench/json-shapes.json
# (of the parts measured here) with its type; every JSON line the programs
# printed (their output, kept by FP_KEEP) is of a kind, keys and types it
# knows.
python3 "$SRC/bench/json_shapes.py" check --driver "$TMP/bench.json" --outs "$TMP/keep" \
	--shapes "$SRC/bench/json-shapes.json" ||
	{ echo "test_bench_smoke: FAIL: the JSON's shape changed (above; docs/bench.md, \"The JSON's shape\")" >&2; fail=1; }
# The report: the results table from the run's JSON, and into a copy of
# docs/bench.md between its markers (the rest of the file as it was).
rep_out=$("$BENCH" report --json "$TMP/bench.json" --src "$SRC" 2>&1)
for want in '<!-- bench-results:begin -->' '| figure | median | spread (min..max) | floor | ratio |' \
	'| remote fault rand p50 |' '**load average**' '<!-- bench-results:end -->'; do
	grep -qF -- "$want" <<<"$rep_out" ||
		{ echo "test_bench_smoke: FAIL: farpage-bench report: no '$want' in: $rep_out" >&2; fail=1; }
done
cp "$SRC/docs/bench.md" "$TMP/bench.md"
if "$BENCH" report --json "$TMP/bench.json" --src "$SRC" --update-docs "$TMP/bench.md" 2>/dev/null; then
	strip() { sed '/^<!-- bench-results:begin -->$/,/^<!-- bench-results:end -->$/d' "$1"; }
	cmp -s <(strip "$SRC/docs/bench.md") <(strip "$TMP/bench.md") ||
		{ echo "test_bench_smoke: FAIL: report --update-docs changed more than its block" >&2; fail=1; }
	grep -qF '| remote fault rand p50 |' "$TMP/bench.md" ||
		{ echo "test_bench_smoke: FAIL: report --update-docs: no table in the copy" >&2; fail=1; }
else
	echo "test_bench_smoke: FAIL: farpage-bench report --update-docs failed" >&2
	fail=1
fi
if [ $fail != 0 ]; then
	cat "$TMP/out" >&2
	exit 1
fi
echo "test_bench_smoke: ok ($(grep -c . "$TMP/bench.json") JSON lines, transport $t, farmem $fm, migrate $mg)"
