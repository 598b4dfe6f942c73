#!/bin/bash
# Who may use an agent's Unix socket (--allow-uid/--allow-gid, checked on
# the client's SO_PEERCRED credentials as it connects):
#   - the socket file is mode 0660 whatever the umask: another user is
#     stopped by the file system, the agent does not even see it
#   - with the socket made 0666 here (so the agent, not the file system,
#     decides), a user not allowed gets EACCES from `farpage stats` and
#     `farpage touch`, with the agent's reason, and the agent logs it
#   - a flood of 200 refused connections: a few log lines, the last of
#     them counting the ones not logged; no descriptors kept; root is served
#   - --allow-uid 65534: that user is served; --allow-gid G: a member of G
#     is, by a supplementary group or the primary one, a non-member is not;
#     root (the agent's own user) always is
#   - where there is a group farpage (made up here, in a mount namespace):
#     its members are served by default and the socket is in it; an agent
#     without CAP_CHOWN (as under its unit) warns unless it is in the group
#   - an unknown user or group name is a command-line error (exit 2)
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v setpriv >/dev/null || fp_skip "no setpriv (Debian: util-linux)"
NOBODY=65534
G=4242 # a gid nobody here has

# as SOCK SETPRIV_ARGS CLI_ARGS...: the CLI as uid NOBODY against SOCK.
as() {
	local sock=$1 ids=$2
	shift 2
	# shellcheck disable=SC2086
	env FARPAGE_AGENT_SOCK="$sock" setpriv --reuid $NOBODY $ids \
		"$FP_CLI_BIN" --coordinator "$FP_COORD" "$@"
}
NOGROUPS="--regid $NOBODY --clear-groups"
refusals() { grep -c "refused local client" "$FP_TMP/$1.log"; }

# The other user reaches the sockets' directory (not the logs' names).
chmod 0711 "$FP_TMP" || fp_fail "chmod $FP_TMP"
FP_POOL=64M
fp_hosts_loopback H
fp_coord_start H
umask 000
fp_node_start H n1
umask 022
S1=${FP_NODE_SOCK[n1]}
grep -q "$S1 serves uids 0 " "$FP_TMP/n1.log" ||
	fp_fail "n1 did not say who may use its socket"
fp_log "ok: $(grep -o "$S1 serves.*" "$FP_TMP/n1.log")"
[ "$(stat -c %a "$S1")" = 660 ] || fp_fail "socket mode $(stat -c %a "$S1") under umask 000, not 660"
fp_log "ok: socket mode 660 under umask 000"

fp_cli H n1 region create r --size 16M >"$FP_TMP/create.out" 2>&1 ||
	fp_fail "create r: $(cat "$FP_TMP/create.out")"
fp_cli H n1 stats >"$FP_TMP/root.out" 2>&1 || fp_fail "root: stats: $(cat "$FP_TMP/root.out")"
fp_cli H n1 touch r --expect-zero >"$FP_TMP/root.out" 2>&1 ||
	fp_fail "root: touch r: $(cat "$FP_TMP/root.out")"
fp_log "ok: root is served"

# The file system stops the other user first.
as "$S1" "$NOGROUPS" stats >"$FP_TMP/fs.out" 2>&1 && fp_fail "uid $NOBODY passed a 0660 socket"
grep -q "Permission denied" "$FP_TMP/fs.out" || fp_fail "uid $NOBODY on a 0660 socket: $(cat "$FP_TMP/fs.out")"
[ "$(refusals n1)" = 0 ] || fp_fail "the agent saw a client the file system should have stopped"
fp_log "ok: uid $NOBODY cannot open the 0660 socket"

# Then the agent: it refuses, says why, logs it.
chmod 0666 "$S1" || fp_fail "chmod $S1"
as "$S1" "$NOGROUPS" stats >"$FP_TMP/stats.out" 2>&1
rc=$?
[ $rc != 0 ] || fp_fail "uid $NOBODY was served stats: $(cat "$FP_TMP/stats.out")"
grep -q "Permission denied" "$FP_TMP/stats.out" || fp_fail "stats as uid $NOBODY: $(cat "$FP_TMP/stats.out")"
fp_wait_log "$FP_TMP/n1.log" "refused local client pid [0-9]+ uid $NOBODY gid $NOBODY: not allowed" 10 ||
	fp_fail "n1 did not log the refusal"
fp_log "ok: stats as uid $NOBODY: exit $rc, $(tail -n1 "$FP_TMP/stats.out")"
as "$S1" "$NOGROUPS" touch r --expect-zero >"$FP_TMP/touch.out" 2>&1 && fp_fail "uid $NOBODY mapped r"
grep -q "uid $NOBODY is not allowed to use this agent (--allow-uid/--allow-gid)" "$FP_TMP/touch.out" &&
	grep -q "Permission denied" "$FP_TMP/touch.out" ||
	fp_fail "touch as uid $NOBODY: $(cat "$FP_TMP/touch.out")"
fp_log "ok: touch as uid $NOBODY refused: $(grep -o "uid $NOBODY is not allowed.*" "$FP_TMP/touch.out")"
as "$S1" "--regid $NOBODY --groups $G" stats >/dev/null 2>&1 && fp_fail "uid $NOBODY in group $G served by n1"
fp_log "ok: a group n1 does not allow does not help"

# A flood of refused clients: a few lines, no descriptors kept.
nfd() { find "/proc/${FP_NODE_PID[n1]}/fd" -mindepth 1 | wc -l; }
fd0=$(nfd)
l0=$(refusals n1)
t0=$(date +%s)
export -f as
export FP_CLI_BIN FP_COORD NOBODY S1 NOGROUPS
# shellcheck disable=SC2016 # expanded by the inner bash
seq 200 | xargs -P 8 -I{} bash -c 'as "$S1" "$NOGROUPS" stats >/dev/null 2>&1 && echo served' >"$FP_TMP/flood.out"
[ ! -s "$FP_TMP/flood.out" ] || fp_fail "$(wc -l <"$FP_TMP/flood.out") flood clients were served"
l1=$(refusals n1)
secs=$(($(date +%s) - t0))
# One line a second at most (the second it began and the one it ended in).
[ $((l1 - l0)) -le $((secs + 2)) ] && [ $((l1 - l0)) -lt 100 ] ||
	fp_fail "200 refused clients in ${secs}s made $((l1 - l0)) log lines"
fd1=$(nfd)
[ "$fd1" -le $((fd0 + 16)) ] || fp_fail "n1 holds $fd1 descriptors after the flood, $fd0 before"
fp_cli H n1 stats >"$FP_TMP/root.out" 2>&1 || fp_fail "root after the flood: $(cat "$FP_TMP/root.out")"
fp_log "ok: 200 refused clients in ${secs}s, $((l1 - l0)) log lines, descriptors $fd0 -> $fd1, root still served"
# The next line logged (a second on) counts those not logged: every
# refusal is a line or in a count. 203: stats, touch and the group above.
mores() { grep -o "and [0-9]* more since the last such line" "$FP_TMP/n1.log"; }
m1=$(mores | wc -l)
for ((k = 1; k <= 200; k++)); do
	as "$S1" "$NOGROUPS" stats >/dev/null 2>&1
	[ "$(mores | wc -l)" -gt "$m1" ] && break
	sleep 0.05
done
[ "$(mores | wc -l)" -gt "$m1" ] || fp_fail "no log line counts the refusals not logged"
told=$(($(refusals n1) + $(mores | awk '{ n += $2 } END { print n + 0 }')))
[ "$told" -ge $((203 + k)) ] || fp_fail "lines and counts tell $told refusals of $((203 + k))"
fp_log "ok: then: ... $(mores | tail -n1); $told refusals told"

# --allow-uid: that user is served, root too.
fp_node_start H n2 --allow-uid $NOBODY
S2=${FP_NODE_SOCK[n2]}
chmod 0666 "$S2" || fp_fail "chmod $S2"
as "$S2" "$NOGROUPS" stats >"$FP_TMP/n2.out" 2>&1 || fp_fail "--allow-uid $NOBODY: $(cat "$FP_TMP/n2.out")"
fp_cli H n2 stats >/dev/null 2>&1 || fp_fail "root not served by n2"
[ "$(refusals n2)" = 0 ] || fp_fail "n2 refused someone"
fp_log "ok: --allow-uid $NOBODY: uid $NOBODY and root served"

# --allow-gid: members of the group, by a supplementary or the primary
# group; not others; root (the agent's own user) too.
fp_node_start H n3 --allow-gid $G
S3=${FP_NODE_SOCK[n3]}
chmod 0666 "$S3" || fp_fail "chmod $S3"
as "$S3" "--regid $NOBODY --groups $G" stats >"$FP_TMP/n3.out" 2>&1 ||
	fp_fail "--allow-gid $G, supplementary group $G: $(cat "$FP_TMP/n3.out")"
as "$S3" "--regid $G --clear-groups" stats >"$FP_TMP/n3.out" 2>&1 ||
	fp_fail "--allow-gid $G, primary group $G: $(cat "$FP_TMP/n3.out")"
as "$S3" "$NOGROUPS" stats >"$FP_TMP/n3.out" 2>&1 && fp_fail "--allow-gid $G served a non-member"
grep -q "Permission denied" "$FP_TMP/n3.out" || fp_fail "non-member on n3: $(cat "$FP_TMP/n3.out")"
fp_wait_log "$FP_TMP/n3.log" "refused local client pid [0-9]+ uid $NOBODY gid $NOBODY" 10 ||
	fp_fail "n3 did not log the refusal"
fp_cli H n3 stats >/dev/null 2>&1 || fp_fail "root not served by n3"
fp_log "ok: --allow-gid $G: members served (supplementary, primary), others not, root yes"

# The group farpage where the host has one: allowed by default, and the
# socket goes to it, so its members pass the file system too (no chmod
# here). The agents see a copy of /etc/group with it, bind-mounted in a
# mount namespace of their own; the host's is not touched.
if getent group farpage >/dev/null; then
	fp_log "note: this host has a group farpage: the default with a made-up one not tried"
else
	GF=4343
	while getent group $GF >/dev/null; do GF=$((GF + 1)); done
	{ cat /etc/group && echo "farpage:x:$GF:"; } >"$FP_TMP/group"
	cat >"$FP_TMP/with-group" <<EOF
#!/bin/bash
exec unshare -m --propagation private bash -c 'mount --bind "\$0" /etc/group && exec "\$@"' "$FP_TMP/group" "\$@"
EOF
	chmod +x "$FP_TMP/with-group"
	if [ "$("$FP_TMP/with-group" getent group farpage 2>/dev/null)" != "farpage:x:$GF:" ]; then
		fp_log "note: no mount namespace for a group farpage: the default with one not tried"
	else
		FP_HOST_IP[G]=127.0.0.1 FP_HOST_RUN[G]="$FP_TMP/with-group"
		fp_node_start G n4
		S4=${FP_NODE_SOCK[n4]}
		grep -q "$S4 serves uids 0 and the members of group farpage (gid $GF)" "$FP_TMP/n4.log" ||
			fp_fail "n4 did not say it serves group farpage"
		[ "$(stat -c '%a %g' "$S4")" = "660 $GF" ] || fp_fail "n4 socket: $(stat -c '%a %g' "$S4"), not 660 $GF"
		as "$S4" "--regid $NOBODY --groups $GF" stats >"$FP_TMP/n4.out" 2>&1 ||
			fp_fail "a member of farpage on n4: $(cat "$FP_TMP/n4.out")"
		as "$S4" "--regid $GF --clear-groups" stats >"$FP_TMP/n4.out" 2>&1 ||
			fp_fail "primary group farpage on n4: $(cat "$FP_TMP/n4.out")"
		as "$S4" "$NOGROUPS" stats >/dev/null 2>&1 && fp_fail "n4 served a non-member of farpage"
		[ "$(refusals n4)" = 0 ] || fp_fail "n4 saw a client its socket's mode should have stopped"
		fp_log "ok: group farpage (gid $GF): allowed by default, socket 660 root:farpage, non-members stopped by it"
		# As under its unit: no CAP_CHOWN. Not in the group: the socket
		# keeps root's group (a warning says why); with the group as a
		# supplementary one (SupplementaryGroups=farpage) it goes to it.
		FP_HOST_IP[N]=127.0.0.1 FP_HOST_RUN[N]="$FP_TMP/with-group setpriv --bounding-set -chown"
		fp_node_start N n5
		grep -q "cannot give ${FP_NODE_SOCK[n5]} to group $GF" "$FP_TMP/n5.log" ||
			fp_fail "n5 (no CAP_CHOWN) did not warn about its socket's group"
		[ "$(stat -c '%a %g' "${FP_NODE_SOCK[n5]}")" = "660 0" ] ||
			fp_fail "n5 socket: $(stat -c '%a %g' "${FP_NODE_SOCK[n5]}")"
		fp_cli H n5 stats >/dev/null 2>&1 || fp_fail "root not served by n5"
		FP_HOST_IP[M]=127.0.0.1 FP_HOST_RUN[M]="$FP_TMP/with-group setpriv --bounding-set -chown --groups $GF"
		fp_node_start M n6
		[ "$(stat -c '%a %g' "${FP_NODE_SOCK[n6]}")" = "660 $GF" ] ||
			fp_fail "n6 socket: $(stat -c '%a %g' "${FP_NODE_SOCK[n6]}"), not 660 $GF"
		grep -q "cannot give" "$FP_TMP/n6.log" && fp_fail "n6 warned: $(grep "cannot give" "$FP_TMP/n6.log")"
		fp_log "ok: without CAP_CHOWN: a warning, or the group if the agent is in it"
	fi
fi

# Unknown names: a clear error, exit 2.
"$FP_NODE_BIN" --allow-gid no-such-group-fp >"$FP_TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "no group 'no-such-group-fp'" "$FP_TMP/bad.out" ||
	fp_fail "--allow-gid no-such-group-fp: exit $rc: $(cat "$FP_TMP/bad.out")"
"$FP_NODE_BIN" --allow-uid root,no-such-user-fp >"$FP_TMP/bad.out" 2>&1
rc=$?
[ $rc = 2 ] && grep -q "no user 'no-such-user-fp'" "$FP_TMP/bad.out" ||
	fp_fail "--allow-uid root,no-such-user-fp: exit $rc: $(cat "$FP_TMP/bad.out")"
fp_log "ok: unknown names are refused at start (exit 2)"
fp_log "PASS"
