#!/bin/bash
# The benchmark: installs missing packages, builds, and runs farpage-bench
# (two hosts in network namespaces, floors and farpage in one run).
#   scripts/bench.sh [farpage-bench options, e.g. --size 256M --runs 3]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
"$SRC/scripts/deps.sh"
"$SRC/scripts/build.sh" "$SRC/build"
exec "$SRC/build/bench/farpage-bench" --bin "$SRC/build" "$@"
