#!/bin/bash
# Configures and builds farpage into a build directory.
#   scripts/build.sh [BUILD_DIR] [extra cmake args...]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$SRC/build}
shift || true
mkdir -p "$B"
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo -DFARPAGE_WERROR=ON "$@" >"$B/cmake-configure.log" 2>&1 ||
	{ cat "$B/cmake-configure.log" >&2; exit 1; }
# The filter's status must not hide the build's: a failed build fails here.
cmake --build "$B" -j"$(nproc)" 2>&1 | { grep -vE '^\[ *[0-9]+%\]|^gmake|^make' || true; }
exit "${PIPESTATUS[0]}"
