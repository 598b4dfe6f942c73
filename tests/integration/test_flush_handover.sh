#!/bin/bash
# A flush in flight when the writer's agent dies (loopback, agents O, the
# owner of every page, W, the writer's, and R), FP_HANDOVER_ROUNDS rounds
# (default 3): a guest on W maps w writable and writes a new seed into
# every page; O is stopped (SIGSTOP), so that nothing can go home; the
# guest flushes, and once its flush has reached W's agent, that agent is
# killed -9 and started again at once; O goes on. farpage.h promises that
# a flush waits for the mapping to be handed to a restarted agent: the
# flush returns 0, and R reads the new seed on every page from O's pool
# (the old library returned -ECONNRESET at once, the pages not home).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
GUEST=$FP_BIN/tests/fp_guest
ROUNDS=${FP_HANDOVER_ROUNDS:-3}
PAGES=2048
fp_hosts_loopback H
fp_coord_start H
fp_node_start H O
W_FLAGS=(--cache-size 64M --writeback-ms 600000)
fp_node_start H W "${W_FLAGS[@]}"
fp_node_start H R
o=$(fp_node_id O)
fp_cli H O region create w --size 8M --owners "$o,$o,$o,$o" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create w: $(cat "$FP_TMP/c.out")"
fp_cli H O fill w --seed 5 >/dev/null 2>&1 || fp_fail "fill w"
cont_o() { kill -CONT "${FP_NODE_PID[O]}" 2>/dev/null; }
fp_at_exit cont_o
for ((r = 1; r <= ROUNDS; r++)); do
	seed=$((40 + r))
	rm -f "$FP_TMP/g.fifo"
	mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_TIMEOUT_MS=120000 FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[W]} \
		"$GUEST" wplay w 1 0 "w$seed:0:$PAGES:1" h f u <"$FP_TMP/g.fifo" >"$FP_TMP/g$r.out" 2>&1 7>&- &
	gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$FP_TMP/g$r.out" '^wplay: holding' 60 ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the writer did not write"; }
	grep -q "^wplay: write seed=$seed .* written=$PAGES " "$FP_TMP/g$r.out" ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the writer did not write every page"; }
	kill -STOP "${FP_NODE_PID[O]}"
	socks=$(find "/proc/$gp/fd" -lname 'socket:*' 2>/dev/null | wc -l)
	echo go >&7
	fp_wait_log "$FP_TMP/g$r.out" '^wplay: flushing' 60 ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the writer did not flush"; }
	# The flush has its own connection to the agent.
	for ((i = 0; i < 3000; i++)); do
		[ "$(find "/proc/$gp/fd" -lname 'socket:*' 2>/dev/null | wc -l)" -gt "$socks" ] && break
		sleep 0.01
	done
	grep -q '^wplay: flush=' "$FP_TMP/g$r.out" &&
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the flush ended with the owner stopped"; }
	kill -KILL "${FP_NODE_PID[W]}"
	wait "${FP_NODE_PID[W]}" 2>/dev/null
	fp_node_start H W "${W_FLAGS[@]}"
	kill -CONT "${FP_NODE_PID[O]}"
	fp_wait_pid "$gp" 120
	rc=$?
	exec 7>&-
	[ "$rc" = 0 ] || { cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the writer exited $rc"; }
	fp_log "round $r: writer: $(grep -E '^wplay: (flush=|unmap=)' "$FP_TMP/g$r.out" | tr '\n' ' ')"
	grep -q '^wplay: flush=0 ' "$FP_TMP/g$r.out" ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the flush across the agent's restart did not return 0"; }
	grep -q '^wplay: unmap=0 ' "$FP_TMP/g$r.out" ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the unmap did not return 0"; }
	grep -q 'handed over to the restarted agent' "$FP_TMP/g$r.out" ||
		{ cat "$FP_TMP/g$r.out" >&2; fp_fail "round $r: the mapping was not handed over"; }
	fp_cli H R touch w --seed $seed >"$FP_TMP/t.out" 2>&1 ||
		{ cat "$FP_TMP/t.out" >&2; fp_fail "round $r: O's pool does not hold seed $seed on every page"; }
	fp_touch_ok "round $r: the flush across W's restart returned 0 and O holds every page" "$FP_TMP/t.out"
done
exit 0
