#!/bin/bash
# The docs' sessions run: every code block of README.md and docs/*.md that
# follows a line "<!-- runnable -->" is a session of "$ COMMAND" lines,
# each followed by the output it shows. The commands run in order, as
# written, in a network namespace and a mount namespace of their own (a
# private loopback, so the session's fixed ports collide with nothing; a
# private /tmp), with this build's programs first in PATH. A command ending
# in "&" starts a daemon (ended when the session is over). Every other
# command must exit 0; one that fails is asked again until it succeeds or
# 60 s pass (the daemons before it are still starting: what a person does
# by hand). Every output line the docs show is checked by its first word:
# the command printed a line starting the same way; and where a shown line
# says mismatches=0 (or wrong=0), so does the printed one.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
command -v unshare >/dev/null || fp_skip "no unshare(1)"

# blocks FILE: writes FP_TMP/blk.N.cmds (one command a line) and
# FP_TMP/blk.N.out.K (the output shown after command K) for each runnable
# block; prints N FILE:LINE per block.
nblk=0
blocks() {
	local f=$1 line ln=0 want=0 in=0 k=0 d
	while IFS= read -r line; do
		ln=$((ln + 1))
		if [ $in = 0 ]; then
			[ "$line" = "<!-- runnable -->" ] && { want=1; continue; }
			if [ $want = 1 ] && [[ $line == '```'* ]]; then
				in=1 want=0 k=0 nblk=$((nblk + 1))
				d=$FP_TMP/blk.$nblk
				: >"$d.cmds"
				echo "$f:$ln" >"$d.where"
				continue
			fi
			[ -n "$line" ] && want=0
			continue
		fi
		if [[ $line == '```'* ]]; then
			in=0
			continue
		fi
		if [[ $line == '$ '* ]]; then
			k=$((k + 1))
			echo "${line#\$ }" >>"$d.cmds"
			: >"$d.out.$k"
		elif [ $k -gt 0 ] && [ -n "$line" ]; then
			echo "$line" >>"$d.out.$k"
		fi
	done <"$f"
}
for f in "$SRC/README.md" "$SRC"/docs/*.md; do
	blocks "$f"
done
[ $nblk -gt 0 ] || fp_fail "no runnable block in README.md or docs/*.md"

# The runner of one block, inside the namespaces.
cat >"$FP_TMP/runner.sh" <<'RUN'
set -u
blk=$1 # relative to the working directory, which the /tmp below hides
ip link set lo up || exit 99
# The build directory may itself be under /tmp (a clone there): it is
# held open across the mount and bound back at its own path.
exec 4<"$FP_BIN_DIR" || exit 99
mount -t tmpfs tmpfs /tmp || exit 99
case $FP_BIN_DIR in
/tmp/*) mkdir -p "$FP_BIN_DIR" &&
		mount --no-canonicalize --bind /proc/self/fd/4 "$FP_BIN_DIR" || exit 99 ;;
esac
exec 4<&-
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null' EXIT
k=0
while IFS= read -r cmd; do
	k=$((k + 1))
	if [[ $cmd == *'&' ]]; then
		eval "${cmd%&} >\"$blk.got.$k\" 2>&1 &"
		pids+=("$!")
		echo 0 >"$blk.rc.$k"
		continue
	fi
	for ((t = 0; t < 120; t++)); do
		eval "$cmd" >"$blk.got.$k" 2>&1 </dev/null
		rc=$?
		[ $rc = 0 ] && break
		sleep 0.5
	done
	echo "$rc" >"$blk.rc.$k"
	[ $rc = 0 ] || exit 1
done 3<&0 <"$blk.cmds"
RUN

for ((b = 1; b <= nblk; b++)); do
	d=$FP_TMP/blk.$b
	where=$(cat "$d.where")
	fp_log "running the session at $where ($(wc -l <"$d.cmds") commands)"
	# (the working directory stays reachable under the private /tmp)
	(cd "$FP_TMP" && FP_BIN_DIR=$(cd "$FP_BIN" && pwd -P) &&
		export FP_BIN_DIR && PATH="$FP_BIN_DIR/cli:$FP_BIN_DIR/node:$FP_BIN_DIR/coordinator:$PATH" \
		exec unshare --net --mount --propagation private --fork \
		bash ./runner.sh "blk.$b") &
	pid=$!
	FP_PIDS+=("$pid")
	fp_wait_pid "$pid" 600
	rc=$?
	k=0
	while IFS= read -r cmd; do
		k=$((k + 1))
		[ -f "$d.rc.$k" ] || fp_fail "$where: '$cmd' did not run (an earlier command failed, or the runner died: $rc)"
		if [ "$(cat "$d.rc.$k")" != 0 ]; then
			fp_fail "$where: '$cmd' exits $(cat "$d.rc.$k"): $(head -c 600 "$d.got.$k")"
		fi
		[[ $cmd == *'&' ]] && continue
		while IFS= read -r exp; do
			w=${exp%% *}
			grep -q -- "^ *$(printf '%s' "$w" | sed 's/[][\.*^$/]/\\&/g')" "$d.got.$k" ||
				fp_fail "$where: '$cmd' printed no line starting '$w' (the docs show '$exp'): $(head -c 600 "$d.got.$k")"
			for z in mismatches=0 wrong=0; do
				if [[ $exp == *" $z "* || $exp == *" $z" ]]; then
					grep "^ *$w" "$d.got.$k" | grep -qE "(^| )$z( |$)" ||
						fp_fail "$where: '$cmd': $z in the docs, not in what it printed: $(grep "^ *$w" "$d.got.$k")"
				fi
			done
		done <"$d.out.$k"
	done <"$d.cmds"
	[ "$rc" = 0 ] || fp_fail "$where: the session ended with status $rc"
	fp_log "ok: $where: $k commands ran, their output as the docs show"
done
echo "docs run: $nblk sessions ok"
