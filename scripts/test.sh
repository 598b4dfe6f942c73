#!/bin/bash
# The whole test suite: installs missing packages, builds farpage four
# times and runs the tests of each build:
#   normal       every test, incl. real RDMA verbs in a SoftRoCE VM
#   ASan+UBSan   every test but the VM one
#   TSan         every test but the VM one
#   fuzz         clang + libFuzzer: each fuzz target runs briefly
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
"$SRC/scripts/deps.sh" || exit 1
rc=0
failed=()
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
	ctest --test-dir "$b" --output-on-failure -j2 "${cargs[@]}" ||
		{ rc=1; failed+=("$name tests"); }
}
run normal "$SRC/build" --
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
	run "ASan+UBSan" "$SRC/build-asan" -- -DFARPAGE_SANITIZE=address,undefined
TSAN_OPTIONS=${TSAN_OPTIONS:-halt_on_error=0 second_deadlock_stack=1} \
	run TSan "$SRC/build-tsan" -- -DFARPAGE_SANITIZE=thread
CC=clang run fuzz "$SRC/build-fuzz" -L fuzz -- -DFARPAGE_FUZZ=ON
if [ $rc = 0 ]; then
	echo "=== all tests passed (normal, ASan+UBSan, TSan and fuzz builds)"
else
	echo "=== TESTS FAILED: ${failed[*]}"
fi
exit $rc
