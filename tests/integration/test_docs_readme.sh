#!/bin/bash
# The README's "Running a cluster by hand" runs as written: its sh block,
# line by line, on three hosts COORD, hosta and hostb, each a network
# namespace with a mount and a UTS namespace of its own (its own
# /etc/farpage, /var/lib/farpage and /run/farpage, and its host name), the
# build's programs first in PATH. Which host runs a line is the block's
# comment above it ("# on the coordinator's host", "# on hosta and on
# hostb", ...): a comment this test does not know fails it, as does any
# command that fails (asked again for up to 60 s while daemons start, as
# a person would), so the block cannot drift from what works. COORD in a
# line is the coordinator's address; `scp FILE root@HOST:PATH` copies FILE
# from the host running it to HOST's PATH, keeping its mode. Every daemon
# is ended at the end. The last touch must verify every page
# (mismatches=0).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
SRC=${FARPAGE_SRC:-$(cd "$(dirname "$0")/../.." && pwd)}
README=$SRC/README.md
for t in unshare nsenter mount; do command -v $t >/dev/null || fp_skip "no $t"; done
[ "$(id -u)" = 0 ] || fp_skip "not root: no mount namespaces"
# /etc/farpage may be made and removed by test_package's install and purge:
# the two take turns.
{ exec 9>/run/lock/farpage-test-etc.lock; } 2>/dev/null || exec 9>/tmp/farpage-test-etc.lock
flock 9

# The block: the first ```sh after the heading.
awk '/^## Running a cluster by hand/ { on = 1; next }
	on && /^```sh/ { inb = 1; next }
	inb && /^```/ { exit }
	inb { print }' "$README" >"$FP_TMP/block.sh"
[ -s "$FP_TMP/block.sh" ] || fp_fail "README.md: no sh block under '## Running a cluster by hand'"

fp_hosts_lan COORD hosta hostb || fp_skip "cannot make network namespaces"
# The namespaces' files: a private mount outside FP_TMP (removed before
# the at-exit commands run).
NS=/run/farpage-test-readme.$$.$RANDOM
mkdir -p "$NS" && mount --bind "$NS" "$NS" && mount --make-private "$NS" ||
	fp_fail "a private mount for the namespaces' files"
MADE=()
for d in /etc/farpage /var/lib/farpage /run/farpage; do
	[ -d $d ] && continue
	mkdir -m 0700 $d || fp_fail "cannot make the mount point $d"
	MADE+=("$d")
done
ns_down() {
	local h d
	for h in COORD hosta hostb; do
		umount "$NS/$h.mnt" "$NS/$h.uts" 2>/dev/null
	done
	umount "$NS" 2>/dev/null
	rm -f "$NS"/*.mnt "$NS"/*.uts
	rmdir "$NS" 2>/dev/null
	for d in "${MADE[@]}"; do rmdir "$d" 2>/dev/null; done
	return 0
}
fp_at_exit ns_down
for h in COORD hosta hostb; do
	mkdir -p "$FP_TMP/$h/etc" "$FP_TMP/$h/lib" "$FP_TMP/$h/run" "$FP_TMP/$h/home" &&
		touch "$NS/$h.mnt" "$NS/$h.uts" || fp_fail "$h's directories"
	chmod 0700 "$FP_TMP/$h/etc"
	unshare --mount="$NS/$h.mnt" --uts="$NS/$h.uts" --propagation private sh -c "
		mount --bind '$FP_TMP/$h/etc' /etc/farpage &&
		mount --bind '$FP_TMP/$h/lib' /var/lib/farpage &&
		mount --bind '$FP_TMP/$h/run' /run/farpage && hostname $h" ||
		fp_fail "$h's mount and UTS namespaces"
done
PATHS=$FP_BIN/cli:$FP_BIN/node:$FP_BIN/coordinator:$PATH
# on_argv HOST CMD: ON_ARGV, the command that runs the shell line CMD as
# HOST, in its home directory (nsenter for the network too: `ip netns
# exec` makes a mount namespace of its own, into which a mount namespace's
# file is not copied). on HOST CMD: runs it.
on_argv() {
	ON_ARGV=(nsenter --net="/run/netns/${FP_HOST_RUN[$1]##* }" --mount="$NS/$1.mnt"
		--uts="$NS/$1.uts" -- env -u FARPAGE_KEY_FILE -u FARPAGE_AGENT_SOCK
		-u FARPAGE_COORDINATOR PATH="$PATHS" HOME="$FP_TMP/$1/home"
		bash -c "cd '$FP_TMP/$1/home' && $2")
}
on() {
	on_argv "$1" "$2"
	"${ON_ARGV[@]}"
}

# run HOST LINE: a daemon (ends in &) in the background, scp as said
# above, else the line, asked again for up to 60 s until it exits 0.
n=0
run() {
	local h=$1 line=$2 end out
	n=$((n + 1))
	out=$FP_TMP/cmd.$n.out
	if [[ $line =~ ^scp\ +([^ ]+)\ +root@([A-Za-z0-9]+):([^ ]+) ]]; then
		local from=${BASH_REMATCH[1]} to=${BASH_REMATCH[2]} path=${BASH_REMATCH[3]}
		[ -n "${FP_HOST_RUN[$to]:-}" ] || fp_fail "line $n: scp to an unknown host '$to': $line"
		local mode
		mode=$(on "$h" "stat -c %a '$from'") && on "$h" "cat '$from'" >"$FP_TMP/scp.$n" &&
			on "$to" "umask 077 && cat >'$path' && chmod $mode '$path'" <"$FP_TMP/scp.$n" ||
			fp_fail "line $n ($h): $line"
		fp_log "$h: $line"
		return
	fi
	if [[ $line == *'&' ]]; then
		# (no subshell: $! is the daemon, which bash and nsenter exec)
		on_argv "$h" "exec ${line%&}"
		"${ON_ARGV[@]}" >"$FP_TMP/$h.$n.log" 2>&1 &
		FP_PIDS+=($!)
		fp_log "$h: $line (pid $!)"
		return
	fi
	end=$(fp_deadline 60)
	until on "$h" "$line" >"$out" 2>&1; do
		[ "$(date +%s)" -le "$end" ] || { cat "$out" >&2; fp_fail "line $n ($h) failed: $line"; }
		sleep 0.5
	done
	fp_log "$h: $line"
	LAST_OUT=$out
}

hosts=""
while IFS= read -r line; do
	line=${line%"${line##*[![:space:]]}"}
	[ -n "$line" ] || continue
	if [[ $line =~ ^# ]]; then
		case $line in
		"# on the coordinator's host"*) hosts="COORD" ;;
		"# on hosta and on hostb"* | "# on hosta AND on hostb"*) hosts="hosta hostb" ;;
		"# where the admin key is"*) hosts="COORD" ;;
		"# then on either"*) hosts="hosta" ;;
		*) fp_fail "README block: a comment that names no host this test knows: $line" ;;
		esac
		continue
	fi
	[ -n "$hosts" ] || fp_fail "README block: a command before any host comment: $line"
	line=${line//COORD/${FP_HOST_IP[COORD]}}
	for h in $hosts; do run "$h" "$line"; done
done <"$FP_TMP/block.sh"

# The last command read every page back.
grep -q "^touch: .*mismatches=0" "${LAST_OUT:-/dev/null}" ||
	fp_fail "the README's last touch did not verify: $(cat "${LAST_OUT:-/dev/null}")"
grep -q "^touch: pages=[1-9]" "$LAST_OUT" || fp_fail "the last touch touched nothing: $(cat "$LAST_OUT")"
fp_log "ok: the README's cluster by hand ran as written on COORD, hosta and hostb ($(grep '^touch:' "$LAST_OUT" | cut -d' ' -f2-4))"
echo "test_docs_readme: passed"
