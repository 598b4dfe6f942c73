#!/bin/bash
# Installs the Debian packages farpage needs to build, test, package and
# run the demo, if any are missing. Safe to run again.
set -euo pipefail
# systemd (systemd-analyze), prometheus (promtool), ansible-core, jq and
# curl check deploy/ (test_units, test_monitoring, test_ansible); lintian
# checks the Debian packages (test_package); jq also makes bench/auth.sh's
# JSON (bench/kv2json.jq). python3 runs the benchmark driver
# (bench/farpage-bench), python3-matplotlib draws its plot. The etcd
# client (common/etcd) needs libcurl; its tests start etcd-server's etcd
# themselves (tests/integration/t_etcd.h), etcd-client has etcdctl.
# libjemalloc2 is the allocator `farpage run` preloads (test_run).
# redis-server, redis-tools and memcached are the programs test_run_redis
# and test_run_memcached run under `farpage run` (redis-server's binary
# is redis-tools' redis-check-rdb, which the package links as
# /usr/bin/redis-server; redis-tools has redis-cli).
PKGS="build-essential cmake pkg-config libcbor-dev liburing-dev libibverbs-dev
  ibverbs-providers libcmocka-dev zlib1g-dev libssl-dev iproute2 procps
  python3 python3-matplotlib libmicrohttpd-dev libjson-c-dev help2man dpkg-dev file lintian
  systemd prometheus ansible-core jq curl libcurl4-openssl-dev etcd-server
  etcd-client libjemalloc2 redis-server redis-tools memcached"
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
# Packages of daemons (prometheus, etcd-server, redis-server, memcached)
# would start them where no systemd runs: only their programs are wanted
# here, not their services.
if [ ! -e /usr/sbin/policy-rc.d ]; then
	printf '#!/bin/sh\nexit 101\n' >/usr/sbin/policy-rc.d
	chmod 755 /usr/sbin/policy-rc.d
	trap 'rm -f /usr/sbin/policy-rc.d' EXIT
fi
apt-get -o DPkg::Lock::Timeout=600 update -qq
apt-get -o DPkg::Lock::Timeout=600 install -y -qq --no-install-recommends $missing >/dev/null
# prometheus is here for its promtool; its server is not wanted at the
# next boot either, unless it was there before.
case " $missing " in
*" prometheus "*)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now prometheus.service >/dev/null 2>&1 || true
	fi
	;;
esac
# etcd-server is here for the tests, which run their own etcd processes:
# its system service is neither running nor enabled afterwards (its
# package enables it, with or without a running systemd).
case " $missing " in
*" etcd-server "*)
	if [ -d /run/systemd/system ]; then
		systemctl disable --now etcd.service >/dev/null 2>&1 || true
	else
		systemctl disable etcd.service >/dev/null 2>&1 || true
		update-rc.d etcd disable >/dev/null 2>&1 || true
	fi
	;;
esac
# redis-server and memcached likewise: the tests start their own, on ports
# of their own.
for svc in redis-server memcached; do
	case " $missing " in
	*" $svc "*)
		if [ -d /run/systemd/system ]; then
			systemctl disable --now "$svc.service" >/dev/null 2>&1 || true
		else
			systemctl disable "$svc.service" >/dev/null 2>&1 || true
			update-rc.d "$svc" disable >/dev/null 2>&1 || true
		fi
		;;
	esac
done
