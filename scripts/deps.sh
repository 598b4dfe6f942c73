#!/bin/bash
# Installs the Debian packages farpage needs to build, test, package and
# run the demo, if any are missing. Safe to run again.
set -euo pipefail
PKGS="build-essential cmake pkg-config libcbor-dev liburing-dev libibverbs-dev
  ibverbs-providers libcmocka-dev zlib1g-dev libssl-dev iproute2 procps
  gnuplot-nox libmicrohttpd-dev curl prometheus help2man dpkg-dev file"
missing=""
for p in $PKGS; do
	dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q 'ok installed' ||
		missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" != 0 ]; then
	echo "farpage: missing Debian packages:$missing (run as root to install them)" >&2
	exit 1
fi
echo "farpage: installing$missing"
export DEBIAN_FRONTEND=noninteractive
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
# prometheus is here for its promtool (test_metrics); its server, which
# the package starts, is not wanted: stopped, unless it was there before.
case " $missing " in
*" prometheus "*)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	fi
	;;
esac
