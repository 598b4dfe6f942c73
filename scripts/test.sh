#!/bin/bash
# The whole test suite: installs missing packages, builds farpage twice
# (normal, and with ASan+UBSan) and runs every test in both builds.
set -uo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
"$SRC/scripts/deps.sh" || exit 1
rc=0
run() { # name build-dir cmake-args...
	local name=$1 b=$2
	shift 2
	echo "=== $name build"
	if ! "$SRC/scripts/build.sh" "$b" "$@"; then
		echo "=== $name build FAILED"
		rc=1
		return
	fi
	echo "=== $name tests"
	ctest --test-dir "$b" --output-on-failure -j2 || rc=1
}
run normal "$SRC/build"
ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1} UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1} \
	run "ASan+UBSan" "$SRC/build-asan" -DFARPAGE_SANITIZE=address,undefined
[ $rc = 0 ] && echo "=== all tests passed (normal and ASan+UBSan builds)" || echo "=== TESTS FAILED"
exit $rc
