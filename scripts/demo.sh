#!/bin/bash
# The two-node demo: two hosts (network namespaces joined by a veth pair),
# a coordinator, one agent per host, a 256 MiB region interleaved across
# them; host A touches every page and every byte is verified.
#   scripts/demo.sh [--size SIZE] [--transport auto|tcp|verbs]
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
"$SRC/scripts/deps.sh"
echo "=== building"
"$SRC/scripts/build.sh" "$SRC/build"
exec bash "$SRC/tests/two-node.sh" --bin "$SRC/build" --verbose "$@"
