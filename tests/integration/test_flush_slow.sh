#!/bin/bash
# A flush over a slow link (two network namespaces): the coordinator and
# O, the owner of every page, and R, a reader, on host B; W, the writer's agent, on host A
# with a fault timeout of 2 s. A guest on W writes a new seed into every
# page of an 8 MiB region (2048 pages) and holds; then A's side of the link
# is limited to 8 Mbit/s (tc tbf), so sending the pages home takes about
# 8 s, four fault timeouts, while a page lands every few milliseconds.
# The guest flushes and unmaps: both return 0, and R reads the seed on every
# page from O. A flush times out only when no page lands home for the
# fault timeout: a slow owner, or a loaded host, is not an unreachable one
# (the old agent counted the timeout from the flush's start and returned
# -ETIMEDOUT, "owners cannot be reached", with the owner answering).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
[ "${FP_FAULT_MODE:-}" = copy ] && fp_skip "copy mode: writes to remote pages stay in the process"
command -v tc >/dev/null || fp_skip "tc (iproute2) is not installed"
GUEST=$FP_BIN/tests/fp_guest
PAGES=2048
fp_hosts_netns A B || fp_skip "network namespaces cannot be made here"
fp_coord_start B
fp_node_start B O
fp_node_start B R
fp_node_start A W --cache-size 64M --writeback-ms 600000 --fault-timeout-ms 2000
o=$(fp_node_id O)
fp_cli B O region create w --size 8M --owners "$o,$o,$o,$o" >"$FP_TMP/c.out" 2>&1 ||
	fp_fail "create w: $(cat "$FP_TMP/c.out")"
fp_cli B O fill w --seed 5 >/dev/null 2>&1 || fp_fail "fill w"
mkfifo "$FP_TMP/g.fifo" && exec 7<>"$FP_TMP/g.fifo" || fp_fail "fifo"
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[W]} ${FP_HOST_RUN[A]} \
	"$GUEST" wplay w 1 0 "w6:0:$PAGES:1" h f u <"$FP_TMP/g.fifo" >"$FP_TMP/g.out" 2>&1 7>&- &
gp=$!
FP_PIDS+=("$gp")
fp_wait_log "$FP_TMP/g.out" '^wplay: holding' 120 ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the writer did not write"; }
grep -q "^wplay: write seed=6 .* written=$PAGES " "$FP_TMP/g.out" ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the writer did not write every page"; }
ip -n "$FP_NS_A" link set "$FP_LINK_A" txqueuelen 10000 2>/dev/null
ip netns exec "$FP_NS_A" tc qdisc add dev "$FP_LINK_A" root tbf rate 8mbit \
	burst 16kb latency 5s || fp_fail "tc could not limit A's link"
echo go >&7
fp_wait_pid "$gp" 300
rc=$?
exec 7>&-
[ "$rc" = 0 ] || { cat "$FP_TMP/g.out" >&2; fp_fail "the writer exited $rc"; }
flush=$(sed -n 's/^wplay: flushing t=\([0-9]*\).*/\1/p' "$FP_TMP/g.out")
done_t=$(sed -n 's/^wplay: flush=[-0-9]* t=\([0-9]*\).*/\1/p' "$FP_TMP/g.out")
fp_log "writer: $(grep -E '^wplay: (flush=|unmap=)' "$FP_TMP/g.out" | tr '\n' ' ')(the flush took $((${done_t:-0} - ${flush:-0})) ms, the fault timeout is 2000)"
grep -q '^wplay: flush=0 ' "$FP_TMP/g.out" ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the flush over a slow link did not return 0"; }
grep -q '^wplay: unmap=0 ' "$FP_TMP/g.out" ||
	{ cat "$FP_TMP/g.out" >&2; fp_fail "the unmap did not return 0"; }
ip netns exec "$FP_NS_A" tc qdisc del dev "$FP_LINK_A" root 2>/dev/null
fp_cli B R touch w --seed 6 >"$FP_TMP/t.out" 2>&1 ||
	{ cat "$FP_TMP/t.out" >&2; fp_fail "O's pool does not hold seed 6 on every page"; }
fp_touch_ok "the flush over a slow link returned 0 and O holds every page" "$FP_TMP/t.out"
exit 0
