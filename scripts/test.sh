#!/bin/bash
# The whole test suite: installs missing packages, builds farpage four
# times and runs the tests of each build:
#   normal       every test, incl. real RDMA verbs in a SoftRoCE VM
#   copy mode    the integration tests again, agents forced to --fault-mode
#                copy (faults served by UFFDIO_COPY, no cache)
#   wp-fault, 2 fault loops
#                the tests that write through the cache again, agents with
#                --dirty-tracking wp-fault --fault-threads 2
#   ASan+UBSan   every test but the VM one, the bench smoke and
#                test_docs_readme
#   TSan         every test but the VM one, the bench smoke,
#                test_docs_readme and test_coord_ha (both stores)
#   fuzz         clang + libFuzzer: each fuzz target runs briefly
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
"$SRC/scripts/deps.sh" || exit 1
rc=0
failed=()
skipped=()
# shellcheck source=../tests/procs.sh
. "$SRC/tests/procs.sh"
# Every process the suite starts carries this tag; at the end none may be
# left (tests/procs.sh).
export FP_SUITE_ID="$$.$(date +%s%N)"
# skip_reason BUILD-DIR NAME: the test's last line that says why it skipped
# (or its last line), from ctest's log of the run.
skip_reason() {
	awk -v t="$2" '
		$0 ~ "^[0-9]+/[0-9]+ Testing: " t "$" { on = 1; out = 0; next }
		on && /^Output:/ { out = 1; getline; next }
		on && out && /^<end of output>/ { exit }
		on && out && NF { last = $0; if (tolower($0) ~ /skip/) why = $0 }
		END { print (why != "" ? why : last) }
	' "$1/Testing/Temporary/LastTest.log" 2>/dev/null | cut -c1-200
}
run() { # name build-dir ctest-args -- cmake-args...
	local name=$1 b=$2 cargs=()
	shift 2
	while [ $# -gt 0 ] && [ "$1" != -- ]; do
		cargs+=("$1")
		shift
	done
	shift
	echo "=== $name build"
	if ! "$SRC/scripts/build.sh" "$b" "$@"; then
		echo "=== $name build FAILED"
		rc=1
		failed+=("$name build")
		return
	fi
	echo "=== $name tests"
	rm -f "$b/Testing/Temporary/LastTestsFailed.log"
	# Four at a time (FP_CTEST_JOBS): most tests wait on daemons, links and
	# timeouts, and two at a time left half of two CPUs idle.
	"${CTEST_WRAP[@]}" ctest --test-dir "$b" --output-on-failure -j"${FP_CTEST_JOBS:-4}" "${cargs[@]}" \
		2>&1 | tee "$b/ctest-$$.out"
	if [ "${PIPESTATUS[0]}" != 0 ]; then
		rc=1
		local t list=()
		while IFS=: read -r _ t; do
			list+=("$t")
		done < <(cat "$b/Testing/Temporary/LastTestsFailed.log" 2>/dev/null)
		if [ ${#list[@]} -gt 0 ]; then
			failed+=("$name: ${list[*]}")
		else
			failed+=("$name tests")
		fi
	fi
	local t
	while read -r t; do
		skipped+=("$name: $t: $(skip_reason "$b" "$t")")
	done < <(sed -n 's/^ *[0-9]*\/[0-9]* *Test *#[0-9]*: \([^ ]*\) .*\*\*\*Skipped.*/\1/p' \
		"$b/ctest-$$.out" | sort -u)
	rm -f "$b/ctest-$$.out"
}
CTEST_WRAP=()
# san_run NAME BUILD-DIR -- CMAKE-ARGS: run() for a sanitizer build. Every
# report, whichever process wrote it (a test, a daemon or forked child whose
# exit status nobody checks, a guest), goes to a file in a fresh directory,
# BUILD-DIR/san-reports, instead of to a stderr that may be a log file no
# one reads (log_path: <tool>.<program>.<pid>). Any file there fails the
# stage and is printed. By hand (no log_path) reports go to stderr, where
# tests/lib.sh finds them in daemon logs and guest output.
san_run() {
	local name=$1 d=$2/san-reports f n
	if ! { rm -rf "$d" && mkdir -p "$d"; }; then
		rc=1
		failed+=("$name reports dir")
		return
	fi
	# The path is quoted: sanitizers split their options at ':', ',' and ' '.
	ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1}:log_path=\"$d/asan\":log_exe_name=1" \
	UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}:log_path=\"$d/ubsan\":log_exe_name=1" \
	TSAN_OPTIONS="${TSAN_OPTIONS:-halt_on_error=0 second_deadlock_stack=1} log_path=\"$d/tsan\" log_exe_name=1" \
		run "$@"
	n=$(find "$d" -type f | wc -l)
	if [ "$n" = 0 ]; then
		echo "=== $name: no sanitizer reports"
		return
	fi
	echo "=== $name: $n processes wrote sanitizer reports (in $d):"
	find "$d" -type f | sort | head -n 30 | while read -r f; do
		echo "----- $(basename "$f")"
		head -n 80 "$f"
	done
	[ "$n" -gt 30 ] && echo "----- ($((n - 30)) more files in $d)"
	rc=1
	failed+=("$name sanitizer reports")
}
run normal "$SRC/build" --
# The copy path (kernels without MINOR faults on shmem, agents on verbs):
# the integration tests again with every agent forced to it.
# Tests that do not fault pages in (security, packaging, units, monitoring,
# the coordinator alone, the etcd client, the page transport alone, the
# bench's smoke run, the docs, a new user's first steps) have nothing to do
# with the fault path: not again. Nor the wire capture, the lease
# ACLs and the local mappers' attacks, whose guests write pages home
# (copy mode keeps them in the process).
FP_FAULT_MODE=copy run "copy mode" "$SRC/build" -L integration \
	-E 'test_(security|wire_capture|lease_acl|local_mapper|peercred|units|ansible|monitoring|package|metrics|coord_|etcd_|xport_|bench_smoke|pagesrv_auth|docs_|first_steps)' --
# The other ways of the cache, which this machine's defaults pass over: a
# write-protect fault per first write (kernels without WP_ASYNC and
# PAGEMAP_SCAN) and two fault loops (hosts of 8 CPUs and more), together,
# for the tests that write through the cache and send pages home.
FP_DIRTY_TRACKING=wp-fault FP_FAULT_THREADS=2 run "wp-fault, 2 fault loops" "$SRC/build" \
	-R 'test_(farmem|dirty_scan|wb_lost_owner|wlease_|write_sigbus|region_delete|fault_loops|chaos|flush_handover|handover|flush_final|anon)' --
# Under the sanitizers, 6 rounds of test_replicas_rounds instead of 20
# (the normal stage runs all 20), and 3000 runs of each of
# test_coh_floop's litmus tests instead of 10^4 (TSan: 1000).
# One round of test_coord_failover's quorum part (each waits out the
# coordinators' etcd timeouts), 60 operations of its churn; 20 of
# test_coord_ha's. No bench smoke: the daemons and library it runs are
# the other tests' (its own code is the driver and the bench programs,
# tools that measure, not what farpage ships), and it is the stage's
# longest test. Nor test_docs_readme: it checks the README's commands,
# with the other tests' code, and its 1 GiB of faults takes minutes here.
FP_REPL_ROUNDS=6 FP_FAILOVER_QUORUM=1 FP_FAILOVER_OPS=60 FP_HA_OPS=20 FP_LITMUS_RUNS=3000 \
	san_run "ASan+UBSan" "$SRC/build-asan" -E 'test_bench_smoke|test_docs_readme' -- \
	-DFARPAGE_SANITIZE=address,undefined
# TSan of gcc 12 / LLVM 14 dies at start ("FATAL: ThreadSanitizer: unexpected
# memory mapping") when mmap randomisation has more than 28 bits
# (vm.mmap_rnd_bits; kernels allow up to 32). Its tests then run without
# address randomisation (setarch -R: a personality flag every child
# inherits, what TSan does itself since LLVM 18); no system setting changes.
[ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 0)" -gt 28 ] &&
	CTEST_WRAP=(setarch "$(uname -m)" -R)
# test_farmem's region still outgrows its cache (64M: 4 times); half the
# size halves the slowest TSan test.
# Under TSan, 10 chaos rounds instead of 20, an 8 MiB replicated region
# instead of 64 MiB, and no bench smoke: the code it runs is the other
# tests' (about 3 of TSan's 6 minutes).
# test_coord_ha's agents and guests are the other tests' code, and what
# is its own (the etcd store, the election) runs on the coordinator's
# one loop thread: not under TSan.
# TSan's processes are CPU-bound (5-15x slower): two at a time, or beside
# a CPU hog its tests outrun their bounds (test_xport_tcp past 300 s).
FP_FARMEM_SIZE=64M FP_CHAOS_ROUNDS=10 FP_REPL_MB=8 FP_REPL_ROUNDS=6 FP_LITMUS_RUNS=1000 \
	FP_FAILOVER_QUORUM=1 FP_FAILOVER_OPS=60 FP_CTEST_JOBS=2 san_run TSan "$SRC/build-tsan" \
	-E 'test_bench_smoke|test_coord_ha|test_docs_readme' -- -DFARPAGE_SANITIZE=thread
CTEST_WRAP=()
CC=clang run fuzz "$SRC/build-fuzz" -L fuzz -- -DFARPAGE_FUZZ=ON
# Nothing the suite started may outlive it.
mapfile -t left < <(fp_tagged FP_SUITE_ID "$FP_SUITE_ID")
if [ ${#left[@]} -gt 0 ]; then
	echo "=== ${#left[@]} process(es) the tests started are still running (ended now):"
	fp_tagged_show "${left[@]}"
	kill -KILL "${left[@]}" 2>/dev/null
	rc=1
	failed+=("processes left running")
fi
if [ ${#skipped[@]} -gt 0 ]; then
	echo "=== skipped (${#skipped[@]}):"
	printf '  %s\n' "${skipped[@]}"
fi
if [ $rc = 0 ]; then
	echo "=== all tests passed (normal, ASan+UBSan, TSan and fuzz builds)"
else
	msg=$(printf '%s; ' "${failed[@]}")
	echo "=== TESTS FAILED: ${msg%; }"
fi
exit $rc
