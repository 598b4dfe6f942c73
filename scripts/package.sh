#!/bin/bash
# Builds the Debian package (docs/packaging.md): a release build for the
# prefix /usr, without tests, packed by CPack. Prints the .deb's path.
#   scripts/package.sh [BUILD_DIR]          (default: build-pkg)
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$SRC/build-pkg}
"$SRC/scripts/deps.sh"
mkdir -p "$B"
B=$(cd "$B" && pwd)
# Every option that changes what is installed is given, so a build dir
# configured otherwise before cannot leak into the package.
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF -DFARPAGE_SANITIZE= \
	-DFARPAGE_FUZZ=OFF -DFARPAGE_MANPAGES=ON -DFARPAGE_WERROR=ON \
	>"$B/cmake-configure.log" 2>&1 ||
	{ cat "$B/cmake-configure.log" >&2; exit 1; }
cmake --build "$B" -j"$(nproc)" >"$B/build.log" 2>&1 ||
	{ tail -n 50 "$B/build.log" >&2; exit 1; }
rm -f "$B"/farpage_*.deb
(cd "$B" && cpack -G DEB) >"$B/cpack.log" 2>&1 ||
	{ cat "$B/cpack.log" >&2; exit 1; }
ls "$B"/farpage_*.deb
