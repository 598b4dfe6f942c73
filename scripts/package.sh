#!/bin/bash
# Builds the Debian packages (docs/packaging.md): a release build for the
# prefix /usr with Debian's hardening flags, without tests, packed by CPack
# into farpage, libfarpage0 and libfarpage-dev. Prints the .debs' paths.
#   scripts/package.sh [BUILD_DIR]          (default: build-pkg)
# FARPAGE_MAINTAINER="Name <address>" in the environment sets the
# packages' Maintainer (else CMake's default, docs/packaging.md).
set -euo pipefail
SRC=$(cd "$(dirname "$0")/.." && pwd)
B=${1:-$SRC/build-pkg}
"$SRC/scripts/deps.sh"
mkdir -p "$B"
B=$(cd "$B" && pwd)
# Debian's build flags with every hardening feature (dpkg-buildflags):
# -D_FORTIFY_SOURCE=2, -fstack-protector-strong, -Wl,-z,relro -Wl,-z,now ...
# Asked for in the source dir, whose path -ffile-prefix-map then drops.
flags() { (cd "$SRC" && DEB_BUILD_MAINT_OPTIONS=hardening=+all dpkg-buildflags --get "$1"); }
CFLAGS="$(flags CPPFLAGS) $(flags CFLAGS)"
LDFLAGS=$(flags LDFLAGS)
# The changelog's date: the last commit's, so a rebuild of the same
# sources makes the same changelog.
if [ -z "${SOURCE_DATE_EPOCH:-}" ]; then
	SOURCE_DATE_EPOCH=$(git -C "$SRC" log -1 --format=%ct 2>/dev/null || date +%s)
fi
export SOURCE_DATE_EPOCH
if [ -n "${FARPAGE_MAINTAINER:-}" ]; then
	maint=(-DFARPAGE_MAINTAINER="$FARPAGE_MAINTAINER")
else
	maint=(-UFARPAGE_MAINTAINER)
fi
# Every option that changes what is installed is given, so a build dir
# configured otherwise before cannot leak into the packages.
cmake -S "$SRC" -B "$B" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
	-DCMAKE_INSTALL_PREFIX=/usr -DBUILD_TESTING=OFF -DFARPAGE_SANITIZE= \
	-DFARPAGE_FUZZ=OFF -DFARPAGE_MANPAGES=ON -DFARPAGE_WERROR=ON \
	-DCMAKE_C_FLAGS="$CFLAGS" -DCMAKE_EXE_LINKER_FLAGS="$LDFLAGS" \
	-DCMAKE_SHARED_LINKER_FLAGS="$LDFLAGS" "${maint[@]}" \
	>"$B/cmake-configure.log" 2>&1 ||
	{ cat "$B/cmake-configure.log" >&2; exit 1; }
cmake --build "$B" -j"$(nproc)" >"$B/build.log" 2>&1 ||
	{ tail -n 50 "$B/build.log" >&2; exit 1; }
rm -f "$B"/*.deb
(cd "$B" && cpack -G DEB) >"$B/cpack.log" 2>&1 ||
	{ cat "$B/cpack.log" >&2; exit 1; }
ls "$B"/farpage_*.deb "$B"/libfarpage0_*.deb "$B"/libfarpage-dev_*.deb
