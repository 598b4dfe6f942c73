#!/bin/bash
# The systemd units and /etc/default/farpage (deploy/):
#   - systemd-analyze verify passes, with no warning, on both units as the
#     package installs them (unchanged, in a scratch root where the programs
#     are at /usr/bin); that it would warn is checked on a broken copy
#   - their exposure (systemd-analyze security --offline) stays low: a
#     dropped hardening line shows (the hardening itself was tried under
#     systemd 252 booted in a container: docs/operations.md)
#   - every variable the units read has a default in the unit and the same
#     value in farpage.env.example, and every variable there is read
#   - each ExecStart, with the example's variables substituted as systemd
#     does (${X}: one word, $X: split on spaces), starts the real daemon
#     (only the paths and listening ports moved into the test's directory):
#     coordinator and agent come up, the agent joins, both stop cleanly.
#     --metrics-listen is left out while a daemon does not have it (noted)
#   - FARPAGE_COORD_STORE=etcd://... (an etcd member, if installed) puts
#     the tables in etcd with the same command line
#   - with stderr as the journal's stream (JOURNAL_STREAM) the daemons'
#     lines carry a <N> priority and no time stamp
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
DEPLOY=$SRC/deploy
UNITS="farpage-coordinator.service farpage-node.service"
for b in "$FP_COORD_BIN" "$FP_NODE_BIN"; do
	[ -x "$b" ] || fp_fail "$b not built"
done
command -v systemd-analyze >/dev/null || fp_skip "no systemd-analyze (Debian: systemd)"

# A scratch root laid out as the package installs it. verify builds a start
# transaction, so the targets and slices the units reach are copied in too.
ROOT=$FP_TMP/root
sysdir=/lib/systemd/system
[ -f $sysdir/multi-user.target ] || sysdir=/usr/lib/systemd/system
mkdir -p "$ROOT/usr/bin" "$ROOT/lib/systemd/system" "$ROOT/etc/default" ||
	fp_fail "cannot make $ROOT"
cp "$FP_COORD_BIN" "$FP_NODE_BIN" "$ROOT/usr/bin/" &&
	cp $sysdir/*.target $sysdir/*.slice "$ROOT/lib/systemd/system/" &&
	cp "$DEPLOY/farpage.env.example" "$ROOT/etc/default/farpage" ||
	fp_fail "cannot fill $ROOT"
for u in $UNITS; do
	cp "$DEPLOY/$u" "$ROOT/lib/systemd/system/" || fp_fail "no $DEPLOY/$u"
done

# verify exits 0 on unknown keys and bad values: any output fails.
verify() { # unit...
	systemd-analyze verify --root="$ROOT" "$@" >"$FP_TMP/verify.out" 2>&1
	local rc=$?
	[ $rc = 0 ] && [ ! -s "$FP_TMP/verify.out" ]
}
# shellcheck disable=SC2086
verify $UNITS || { cat "$FP_TMP/verify.out" >&2; fp_fail "systemd-analyze verify"; }
fp_log "ok: systemd-analyze verify: $UNITS"
u=$ROOT/lib/systemd/system/farpage-broken.service
sed 's/^Restart=/Restrat=/' "$DEPLOY/farpage-node.service" >"$u"
verify farpage-broken.service && fp_fail "verify did not see a misspelt key"
rm -f "$ROOT/usr/bin/farpage-node"
verify farpage-node.service && fp_fail "verify did not see a missing program"
cp "$FP_NODE_BIN" "$ROOT/usr/bin/" && rm -f "$u"
fp_log "ok: verify sees a misspelt key and a missing program"

# Exposure: 10 = none of the hardening. The coordinator is at 1.9, the
# agent (root, no device or system call filter) at 4.6.
declare -A MAXEXP=([farpage-coordinator.service]=2.5 [farpage-node.service]=5.0)
for u in $UNITS; do
	e=$(systemd-analyze security --offline=yes --root="$ROOT" "$u" 2>/dev/null |
		sed -n 's/.*Overall exposure level for [^ ]*: \([0-9.]*\).*/\1/p')
	if [ -z "$e" ]; then
		fp_log "note: systemd-analyze security --offline gave no figure for $u"
		continue
	fi
	awk -v e="$e" -v m="${MAXEXP[$u]}" 'BEGIN { exit !(e <= m) }' ||
		fp_fail "$u: exposure $e above ${MAXEXP[$u]}: has hardening been dropped?"
	fp_log "ok: $u exposure $e"
done

# The variables: unit defaults (Environment=) overridden by the example
# file (EnvironmentFile=), as systemd applies them.
declare -A DEF EX
envfile_read() { # file array
	local -n a=$2
	local k v
	while IFS= read -r line; do
		case $line in '#'* | '') continue ;; esac
		k=${line%%=*}
		v=${line#*=}
		v=${v#\"}
		v=${v%\"}
		a[$k]=$v
	done <"$1"
}
used=" "
for u in $UNITS; do
	while IFS= read -r line; do
		line=${line#Environment=}
		DEF[${line%%=*}]=${line#*=}
	done < <(grep '^Environment=' "$DEPLOY/$u")
	for v in $(grep '^ExecStart=' "$DEPLOY/$u" | grep -o '\$[{]*[A-Z_]*' | tr -d '${'); do
		used+="$v "
		[ -n "${DEF[$v]+x}" ] || fp_fail "$u reads \$$v and has no Environment= default for it"
	done
done
envfile_read "$DEPLOY/farpage.env.example" EX
for v in "${!DEF[@]}"; do
	[ -n "${EX[$v]+x}" ] || fp_fail "farpage.env.example does not set $v"
	[ "${EX[$v]}" = "${DEF[$v]}" ] ||
		fp_fail "$v: farpage.env.example says '${EX[$v]}', the unit's default '${DEF[$v]}'"
done
for v in "${!EX[@]}"; do
	case $used in *" $v "*) ;; *) fp_fail "farpage.env.example sets $v, which no unit reads" ;; esac
done
fp_log "ok: ${#EX[@]} variables: each read, with the same default in unit and example"

# ExecStart of unit $1 as argv (one word a line), variables substituted.
execstart() {
	local w v x
	set -f # words, not globs (it runs in a subshell)
	# shellcheck disable=SC2013
	for w in $(sed -n 's/^ExecStart=//p' "$DEPLOY/$1"); do
		case $w in
		'${'*'}')
			v=${w:2:${#w}-3}
			printf '%s\n' "${EX[$v]-${DEF[$v]}}"
			;;
		'$'*)
			v=${w:1}
			for x in ${EX[$v]-${DEF[$v]}}; do printf '%s\n' "$x"; done
			;;
		*) printf '%s\n' "$w" ;;
		esac
	done
}

unit_key() { sed -n "s/^$2=//p" "$DEPLOY/$1" | tail -n1; }

# Runs unit $1's command line with paths and ports moved into $FP_TMP and
# $3... appended; the daemon's pid in DPID, stderr in $FP_TMP/$2.log set up
# as the journal's stream. The paths moved must be the ones the unit has
# systemd make writable (ProtectSystem=strict leaves no other).
run_unit() {
	local unit=$1 log=$FP_TMP/$2.log prog args=() a skip=0 i
	shift 2
	mapfile -t args < <(execstart "$unit")
	[ "${#args[@]}" -gt 3 ] || fp_fail "$unit: no ExecStart"
	case ${args[0]} in
	/usr/bin/farpage-coordinator) prog=$FP_COORD_BIN ;;
	/usr/bin/farpage-node) prog=$FP_NODE_BIN ;;
	*) fp_fail "$unit runs ${args[0]}, not a farpage program in /usr/bin" ;;
	esac
	local have_metrics=1
	"$prog" --help 2>&1 | grep -- '--metrics-listen' >/dev/null || have_metrics=0
	local out=()
	for ((i = 1; i < ${#args[@]}; i++)); do
		a=${args[$i]}
		if [ $skip = 1 ]; then
			skip=0
			continue
		fi
		case $a in
		--listen | --data-listen | --metrics-listen)
			if [ "$a" = --metrics-listen ] && [ $have_metrics = 0 ]; then
				fp_log "note: $(basename "$prog") has no --metrics-listen yet: left out of the check"
				skip=1
				continue
			fi
			out+=("$a" 127.0.0.1:0)
			skip=1
			;;
		--data-dir)
			[ "${args[i + 1]}" = "/var/lib/$(unit_key "$unit" StateDirectory)" ] ||
				fp_fail "$unit: --data-dir ${args[i + 1]} is not its StateDirectory="
			out+=("$a" "$FP_TMP/state")
			skip=1
			;;
		--sock)
			[ "${args[i + 1]%/*}" = "/run/$(unit_key "$unit" RuntimeDirectory)" ] ||
				fp_fail "$unit: --sock ${args[i + 1]} is not in its RuntimeDirectory="
			out+=("$a" "$FP_TMP/run/agent.sock")
			skip=1
			;;
		--coordinator)
			out+=("$a" "$FP_COORD")
			skip=1
			;;
		--key-file)
			# "": the program's own search (ROLE.key, cluster.key)
			[ -z "${args[i + 1]}" ] || [ "${args[i + 1]%/*}" = /etc/farpage ] ||
				fp_fail "$unit: --key-file ${args[i + 1]} is not in /etc/farpage"
			out+=("$a" "$FARPAGE_KEY_FILE")
			skip=1
			;;
		*) out+=("$a") ;;
		esac
	done
	[ $skip = 0 ] || fp_fail "$unit: ${args[-1]} has no value"
	: >"$log"
	echo "${out[*]}" >"$FP_TMP/$(basename "$prog").args"
	JOURNAL_STREAM=$(stat -c '%d:%i' "$log") "$prog" "${out[@]}" "$@" 2>>"$log" &
	DPID=$!
	FP_PIDS+=("$DPID")
}

# The daemon's /metrics, where it has one: the port it bound (ss), a
# scrape, its build_info.
metrics_ok() { # program pid component its-other-address
	local p
	"$1" --help 2>&1 | grep -- '--metrics-listen' >/dev/null || return 0
	shift
	command -v curl >/dev/null || { fp_log "note: no curl: /metrics not scraped"; return 0; }
	for p in $(ss -Hltnp 2>/dev/null | grep "pid=$1," | awk '{print $4}' | sed 's/.*://'); do
		[ "$p" = "${3##*:}" ] && continue
		if curl -sf --max-time 2 "http://127.0.0.1:$p/metrics" >"$FP_TMP/$2.metrics" 2>/dev/null; then
			grep -q '^farpage_build_info{.*component=' "$FP_TMP/$2.metrics" ||
				fp_fail "$2: /metrics on port $p has no farpage_build_info{component=...}"
			fp_log "ok: $2 serves /metrics on port $p: $(grep '^farpage_build_info' "$FP_TMP/$2.metrics")"
			return 0
		fi
	done
	fp_fail "$2: no /metrics found on its ports"
}

# Waits for the daemon $2 to write $1; fails at once if it exits.
ready() { # file pid name
	local i
	for ((i = 0; i < 600; i++)); do
		[ -s "$1" ] && return 0
		kill -0 "$2" 2>/dev/null || break
		sleep 0.05
	done
	fp_fail "$3: its unit's command line did not start it: $(cat "$FP_TMP/$3.args")"
}

mkdir -p "$FP_TMP/run"
fp_key
run_unit farpage-coordinator.service coord --addr-file "$FP_TMP/coord.addr"
CPID=$DPID
ready "$FP_TMP/coord.addr" "$CPID" farpage-coordinator
FP_COORD=$(head -n1 "$FP_TMP/coord.addr")
fp_log "ok: coordinator up on $FP_COORD: $(cat "$FP_TMP/farpage-coordinator.args")"
run_unit farpage-node.service node --addr-file "$FP_TMP/node.addr"
NPID=$DPID
ready "$FP_TMP/node.addr" "$NPID" farpage-node
[ -S "$FP_TMP/run/agent.sock" ] || fp_fail "the agent has no socket"
fp_log "ok: agent up, data address $(head -n1 "$FP_TMP/node.addr"): $(cat "$FP_TMP/farpage-node.args")"
metrics_ok "$FP_COORD_BIN" "$CPID" coordinator "$FP_COORD"
metrics_ok "$FP_NODE_BIN" "$NPID" node "$(head -n1 "$FP_TMP/node.addr")"

for n in node:$NPID coord:$CPID; do
	kill -TERM "${n#*:}"
	fp_wait_pid "${n#*:}" 20
	rc=$?
	[ $rc = 0 ] || fp_fail "${n%:*}: exit status $rc after SIGTERM"
done
fp_log "ok: both stopped cleanly on SIGTERM"

# FARPAGE_COORD_STORE=etcd://...: the same command line keeps the tables
# in etcd (a member on loopback, when etcd is installed).
if command -v etcd >/dev/null; then
	free_port() {
		local p i
		for ((i = 0; i < 100; i++)); do
			p=$((20000 + RANDOM % 12000))
			[ -z "$(ss -Htan "( sport = :$p )")" ] && { echo "$p"; return 0; }
		done
		fp_fail "no free port"
	}
	ecp=$(free_port)
	epp=$(free_port)
	[ "$ecp" != "$epp" ] || epp=$((ecp + 1))
	etcd --name u --data-dir "$FP_TMP/etcd" --listen-client-urls "http://127.0.0.1:$ecp" \
		--advertise-client-urls "http://127.0.0.1:$ecp" --listen-peer-urls "http://127.0.0.1:$epp" \
		--initial-advertise-peer-urls "http://127.0.0.1:$epp" --initial-cluster "u=http://127.0.0.1:$epp" \
		>"$FP_TMP/etcd.log" 2>&1 &
	EPID=$!
	FP_PIDS+=("$EPID")
	EX[FARPAGE_COORD_STORE]=etcd://127.0.0.1:$ecp
	mv "$FP_TMP/state" "$FP_TMP/state-wal" && mkdir -m 0700 "$FP_TMP/state" || fp_fail "cannot empty $FP_TMP/state"
	for ((i = 0; i < 100; i++)); do
		run_unit farpage-coordinator.service coord-etcd --addr-file "$FP_TMP/coord-etcd.addr"
		CPID=$DPID
		for ((j = 0; j < 100; j++)); do
			[ -s "$FP_TMP/coord-etcd.addr" ] && break 2
			kill -0 "$CPID" 2>/dev/null || break
			sleep 0.1
		done
		sleep 0.2 # etcd not serving yet: the unit would start it again
	done
	ready "$FP_TMP/coord-etcd.addr" "$CPID" farpage-coordinator
	grep -q -- "--store etcd://127.0.0.1:$ecp" "$FP_TMP/farpage-coordinator.args" ||
		fp_fail "FARPAGE_COORD_STORE=etcd://...: no --store etcd:// on the command line"
	grep -q "tables under /farpage/ at 127.0.0.1:$ecp" "$FP_TMP/coord-etcd.log" ||
		fp_fail "the coordinator does not keep its tables in etcd: $(cat "$FP_TMP/coord-etcd.log")"
	kill -TERM "$CPID"
	fp_wait_pid "$CPID" 20
	rc=$?
	[ $rc = 0 ] || fp_fail "coordinator on etcd: exit status $rc after SIGTERM"
	[ -z "$(ls -A "$FP_TMP/state" 2>/dev/null)" ] || fp_fail "on etcd it wrote its data directory"
	kill "$EPID"
	EX[FARPAGE_COORD_STORE]=wal
	fp_log "ok: FARPAGE_COORD_STORE=etcd://...: the unit's command line keeps the tables in etcd"
else
	fp_log "note: etcd is not installed (Debian: etcd-server): FARPAGE_COORD_STORE=etcd:// not run"
fi

# Journal format: "<N>" first, no "prog[time]" anywhere.
for n in coord node; do
	grep -q '^<6>' "$FP_TMP/$n.log" || fp_fail "$n: no <6> line in its journal-stream log"
	bad=$(grep -cv '^<[0-7]>' "$FP_TMP/$n.log")
	[ "$bad" = 0 ] || { grep -v '^<[0-7]>' "$FP_TMP/$n.log" | head -5 >&2; fp_fail "$n: $bad lines without a priority prefix"; }
	grep -q 'farpage-[a-z]*\[[0-9]' "$FP_TMP/$n.log" && fp_fail "$n: a time stamp in the journal stream"
done
fp_log "ok: journal-stream logs carry <N> priorities, no time stamps"
fp_log "PASS"
