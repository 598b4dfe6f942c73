#!/bin/bash
# Live migration of a VM: farpage (the RAM stays in a region, farpage
# migrate hands it over) against QEMU's own precopy of the same guest on
# local RAM, over the same link (docs/bench.md, "Migration"). Hosts A
# (source), B (destination) and C (the region's owner) are network
# namespaces on one LAN; the stream goes from A to B in both cases.
# For each guest size an idle guest (it boots, writes 64 MiB once, then
# only waits) and a guest rewriting 64 MiB at --rate MiB/s are each
# migrated once by both. After each migration the guest is told to stop
# and checks its RAM on the destination ("vm-migrate: ok"): the script
# fails if it does not after farpage's migration, and says guest_ok=0
# after QEMU's. One line per migration:
#   migrate: size=BYTES how=farpage|precopy load=idle|writing
#            guest_ok=0|1 total_ms=N downtime_ms=N bytes=N
#            [preflush_pages=N predrop_pages=N switchover_pages=N
#            handover_ms=N] switchover_ms=N wall_ms=N
#
#   bench/migrate.sh [--bin BUILD_DIR] [--sizes "512M 2G 16G"] [--rate M]
#                    [--loads "idle writing"]
# Skips (77) without root, QEMU or namespaces, or in a sanitizer build.
set -uo pipefail
SIZES="512M 2G 16G"
LOADS="idle writing"
RATE=16
while [ $# -gt 0 ]; do
	case $1 in
	--bin) export FARPAGE_BIN=${2:?--bin needs a directory}; shift 2 ;;
	--sizes) SIZES=${2:?--sizes needs sizes}; shift 2 ;;
	--rate) RATE=${2:?--rate needs MiB/s}; shift 2 ;;
	--loads) LOADS=${2:?--loads needs idle, writing or both}; shift 2 ;;
	-h | --help) sed -n '2,19p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
	*) echo "migrate.sh: unknown argument $1 (see --help)" >&2; exit 2 ;;
	esac
done
[[ $RATE =~ ^[1-9][0-9]{0,4}$ ]] || { echo "migrate.sh: --rate $RATE: want MiB/s" >&2; exit 2; }
for l in $LOADS; do
	case $l in idle | writing) ;; *) echo "migrate.sh: --loads: $l is neither idle nor writing" >&2; exit 2 ;; esac
done
SRC=$(cd "$(dirname "$0")/.." && pwd)
. "$SRC/tests/lib.sh"
BOOT=$SRC/tests/vm/vmram-boot.sh
fp_require
vmram_require
command -v qemu-system-x86_64 >/dev/null || fp_skip "qemu-system-x86_64 is missing"
command -v python3 >/dev/null || fp_skip "python3 is missing (the precopy driver)"
max=0
for s in $SIZES; do
	b=$(numfmt --from=iec "$s") || fp_fail "--sizes: $s is not a size"
	[ "$b" -ge $((256 << 20)) ] && [ $((b % (2 << 20))) = 0 ] ||
		fp_fail "--sizes: $s: at least 256M, whole 2 MiB"
	[ "$b" -gt "$max" ] && max=$b
done
hard=$(ulimit -Hn)
[ "$hard" = unlimited ] || [ "$hard" -ge $((max / (2 << 20) + 1000)) ] ||
	fp_skip "open-files hard limit $hard: a pool of $((max >> 20)) MiB takes a descriptor per 2 MiB"

fp_hosts_lan A B C || fp_skip "cannot create network namespaces"
fp_coord_start C
FP_POOL=$max fp_node_start C C
fp_node_start A A
fp_node_start B B
c=$(fp_node_id C)

# boot NAME HOST WRAP|plain RAM LOAD [QEMU ARG...]: a guest in the
# background (VM[NAME]), its console input the fifo NAME.in (IN[NAME]),
# its monitor at $FP_TMP/NAME.qmp. WRAP: the region's name (farpage vm
# --movable); plain: QEMU's own RAM.
declare -A VM IN
boot() {
	local n=$1 h=$2 r=$3 ram=$4 load=$5 fd q=() w=() l=(--idle)
	shift 5
	for x in -qmp "unix:$FP_TMP/$n.qmp,server=on,wait=off" "$@"; do
		q+=(--qemu-arg "$x")
	done
	[ "$load" = writing ] && l=(--rate "$RATE")
	# shellcheck disable=SC2206,SC2207 # "ip netns exec NS", the flag: words
	if [ "$r" = plain ]; then
		w=(${FP_HOST_RUN[$h]})
	else
		w=(${FP_HOST_RUN[$h]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[$h]}"
			"$FP_CLI_BIN" --coordinator "$FP_COORD" $(fp_insecure_flag) vm --movable "$r" --)
	fi
	mkfifo "$FP_TMP/$n.in" || fp_fail "mkfifo"
	exec {fd}<>"$FP_TMP/$n.in"
	IN[$n]=$fd
	bash "$BOOT" --bin "$FP_BIN" --ram "$ram" --reserve-base 96M --reserve-size 64M \
		--seed 1 --loop "${l[@]}" --input "$FP_TMP/$n.in" "${q[@]}" \
		--accel tcg --timeout 3000 --log "$FP_TMP/$n.serial" -- "${w[@]}" \
		>"$FP_TMP/$n.out" 2>&1 &
	VM[$n]=$!
	FP_PIDS+=("$!")
	fp_wait_socket "$FP_TMP/$n.qmp" "${VM[$n]}" ||
		{ cat "$FP_TMP/$n.out" >&2; fp_fail "$n: QEMU made no QMP socket"; }
}
# running NAME LOAD: the guest's loop runs (idle: it wrote its range)
running() {
	local re='^vm-ram: loop round 1 ok'
	[ "$2" = idle ] && re='^vm-ram: write '
	fp_wait_log_wall "$FP_TMP/$1.serial" "$re" 1200 ||
		{ tail -n 20 "$FP_TMP/$1.serial" >&2; fp_fail "$1: the guest never ran"; }
}
# finish NAME: the guest told to stop; returns 1 (its console on stderr)
# unless it passed its check
finish() {
	echo q >&"${IN[$1]}"
	fp_wait_pid "${VM[$1]}" 1200
	tr -d '\r' <"$FP_TMP/$1.serial" | grep -q '^vm-migrate: ok ' && return 0
	tail -n 40 "$FP_TMP/$1.serial" >&2
	return 1
}

# precopy SRC DST URI: QEMU's own migration, driven over QMP; prints
# "total_ms=N downtime_ms=N bytes=N switchover_ms=N wall_ms=N"
# (switchover_ms: from the source's STOP event to the destination's
# RESUME, QEMU's times of both, as farpage migrate gives it). The
# bandwidth limit is lifted (QEMU's default of 128 MiB/s would slow it
# below the link's).
precopy() {
	python3 - "$FP_TMP/$1.qmp" "$FP_TMP/$2.qmp" "$3" <<'EOF'
import json, socket, sys, time


events = {}


def qmp(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    f = s.makefile("rw")
    json.loads(f.readline())

    def cmd(name, **args):
        m = {"execute": name}
        if args:
            m["arguments"] = args
        f.write(json.dumps(m) + "\n")
        f.flush()
        while True:
            r = json.loads(f.readline())
            if "return" in r:
                return r["return"]
            if "error" in r:
                sys.exit(f"precopy: {name}: {r['error'].get('desc')}")
            if r.get("event") in ("STOP", "RESUME"):
                t = r.get("timestamp", {})
                events[(path, r["event"])] = (t.get("seconds", 0) * 1000000
                                              + t.get("microseconds", 0))
    cmd("qmp_capabilities")
    return cmd


t0 = time.monotonic()
src, dst = qmp(sys.argv[1]), qmp(sys.argv[2])
src("migrate-set-parameters", **{"max-bandwidth": 100 << 30})
dst("migrate-incoming", uri=sys.argv[3])
src("migrate", uri=sys.argv[3])
while True:
    st = src("query-migrate")
    if st.get("status") in ("completed", "failed", "cancelled"):
        break
    time.sleep(0.02)
if st["status"] != "completed":
    sys.exit(f"precopy: migration {st['status']}: {st.get('error-desc', '')}")
while dst("query-status").get("status") != "running":
    time.sleep(0.02)
src("query-status")  # reads the STOP event, if not read yet
stop = events.get((sys.argv[1], "STOP"), 0)
resume = events.get((sys.argv[2], "RESUME"), 0)
sw = round((resume - stop) / 1000) if stop and resume > stop else 0
src("quit")
print(f"total_ms={st.get('total-time', 0)} downtime_ms={st.get('downtime', 0)} "
      f"bytes={st.get('ram', {}).get('transferred', 0)} switchover_ms={sw} "
      f"wall_ms={int((time.monotonic() - t0) * 1000)}")
EOF
}

i=0
for size in $SIZES; do
	bytes=$(numfmt --from=iec "$size")
	r=m$i
	fp_cli C C region create "$r" --size "$size" --nodes "$c" --wait 120 >"$FP_TMP/create.out" 2>&1 ||
		fp_fail "create region $r: $(cat "$FP_TMP/create.out")"
	for load in $LOADS; do
		i=$((i + 1))
		# farpage: A -> B, the RAM in the region
		boot "f$i" A "$r" "$size" "$load"
		running "f$i" "$load"
		boot "g$i" B "$r" "$size" "$load" -incoming defer
		port=$(fp_port B)
		fp_cli A A migrate "$r" "$FP_TMP/f$i.qmp" "$FP_TMP/g$i.qmp" \
			"tcp:${FP_HOST_IP[B]}:$port" >"$FP_TMP/fm$i.out" 2>&1 ||
			{ cat "$FP_TMP/fm$i.out" >&2; fp_fail "farpage migrate of $size ($load) failed"; }
		fp_wait_pid "${VM[f$i]}" 120 >/dev/null
		finish "g$i" || fp_fail "g$i: the guest's check failed after farpage's migration"
		line=$(grep '^migrate: ok ' "$FP_TMP/fm$i.out" | sed 's/^migrate: ok region=[^ ]* //')
		echo "migrate: size=$bytes how=farpage load=$load guest_ok=1 $line"
		# QEMU's precopy of the same guest on local RAM
		boot "p$i" A plain "$size" "$load"
		running "p$i" "$load"
		boot "q$i" B plain "$size" "$load" -incoming defer
		port=$(fp_port B)
		line=$(precopy "p$i" "q$i" "tcp:${FP_HOST_IP[B]}:$port" 2>"$FP_TMP/pm$i.err") ||
			{ cat "$FP_TMP/pm$i.err" >&2; fp_fail "precopy of $size ($load) failed"; }
		fp_wait_pid "${VM[p$i]}" 120 >/dev/null
		# QEMU's own migration is measured even if the guest did not
		# survive it (guest_ok=0, its console on stderr)
		ok=1
		finish "q$i" || ok=0
		echo "migrate: size=$bytes how=precopy load=$load guest_ok=$ok $line"
	done
	fp_cli C C region delete "$r" >/dev/null 2>&1
done
echo "migrate_cfg: rate_MiBps=$RATE range_bytes=$((64 << 20)) sizes=${SIZES// /,}"
