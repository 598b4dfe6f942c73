#!/bin/bash
# Fault path on one machine (loopback): several guests at once, fork
# refused, an owner that stops and comes back (faults wait, then resume),
# an owner that dies (SIGBUS after the fault timeout, never zeroes), and an
# agent that dies under a waiting guest (SIGBUS, never zeroes). The guests'
# agent n1 has a fault timeout (600 s) that no step may reach, however
# loaded the machine: a step that must time out uses agent n3 (3 s).
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
GUEST=$FP_BIN/tests/fp_guest
SEED=7
fp_hosts_loopback H
fp_coord_start H
fp_node_start H n1 --fault-timeout-ms 600000 --spin-us 30 # spin path exercised too
fp_node_start H n2
fp_cli H n1 region create r --size 32M >"$FP_TMP/create.out" 2>&1 || fp_fail "create: $(cat "$FP_TMP/create.out")"
fp_cli H n1 fill r --seed $SEED >/dev/null 2>&1 || fp_fail "fill n1"
fp_cli H n2 fill r --seed $SEED >/dev/null 2>&1 || fp_fail "fill n2"

expect_ok() { fp_touch_ok "$@"; }
expect_sigbus() { fp_touch_sigbus "$@"; }

# 1. Two guests on one node at once, one of them with 4 threads.
fp_cli H n1 touch r --seed $SEED --order seq >"$FP_TMP/g1.out" 2>&1 &
p1=$!
fp_cli H n1 touch r --seed $SEED --order rand --threads 4 >"$FP_TMP/g2.out" 2>&1 &
p2=$!
fp_cli H n1 touch r --seed $SEED --order rand --threads 16 --prefetch >"$FP_TMP/g3.out" 2>&1 &
p3=$!
wait $p1 || { cat "$FP_TMP/g1.out" >&2; fp_fail "guest 1 failed"; }
wait $p2 || { cat "$FP_TMP/g2.out" >&2; fp_fail "guest 2 (4 threads) failed"; }
wait $p3 || { cat "$FP_TMP/g3.out" >&2; fp_fail "guest 3 (16 threads, prefetch) failed"; }
expect_ok "three guests at once: seq" "$FP_TMP/g1.out"
expect_ok "three guests at once: rand x4" "$FP_TMP/g2.out"
expect_ok "three guests at once: rand x16 with background prefetch" "$FP_TMP/g3.out"

# Stress: many threads racing on the same pages in several guests, with
# read-ahead and prefetch fetching the same pages at the same time.
for i in 1 2 3; do
	fp_cli H n1 touch r --seed $SEED --order rand --threads 32 --prefetch >"$FP_TMP/s$i.out" 2>&1 &
	eval "ps$i=\$!"
done
for i in 1 2 3; do
	eval "wait \$ps$i" || { cat "$FP_TMP/s$i.out" >&2; fp_fail "stress guest $i failed"; }
	expect_ok "stress guest $i (32 threads, prefetch)" "$FP_TMP/s$i.out"
done

# 2. fork() of a mapped process: the child does not get the range.
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} "$GUEST" fork r $SEED >"$FP_TMP/fork.out" 2>&1 ||
	{ cat "$FP_TMP/fork.out" >&2; fp_fail "fork"; }
grep -q "does not inherit" "$FP_TMP/fork.out" || fp_fail "fork: no warning printed"
fp_log "ok: fork refused in the child"

# 2a. Garbage on the agent's socket: those clients are cut off, a guest
#     touching at the same time and the next one are served.
fp_cli H n1 touch r --seed $SEED --order rand --threads 4 >"$FP_TMP/gb.out" 2>&1 &
pg=$!
"$GUEST" garbage "${FP_NODE_SOCK[n1]}" >"$FP_TMP/garbage.out" 2>&1 ||
	{ cat "$FP_TMP/garbage.out" >&2; fp_fail "garbage clients"; }
wait $pg || { cat "$FP_TMP/gb.out" >&2; fp_fail "guest beside the garbage clients failed"; }
expect_ok "guest served beside 4 garbage clients" "$FP_TMP/gb.out"
kill -0 "${FP_NODE_PID[n1]}" || fp_fail "agent died of garbage"

# 2b. MADV_DONTNEED (REMOVE) and a partial munmap (UNMAP) in a mapped guest.
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} "$GUEST" events r $SEED >"$FP_TMP/events.out" 2>&1 ||
	{ cat "$FP_TMP/events.out" >&2; fp_fail "uffd events"; }
fp_log "ok: $(tail -n1 "$FP_TMP/events.out" | sed 's/^fp_guest: //')"

# 3. The owner stops (SIGSTOP) mid-run: faults wait; it resumes: they finish.
kill -STOP "${FP_NODE_PID[n2]}"
f0=$(fp_faults H n1)
fp_cli H n1 touch r --seed $SEED --order rand --threads 4 >"$FP_TMP/stop.out" 2>&1 &
p=$!
# The 4 threads are blocked on faults the stopped owner cannot answer.
fp_wait_faults H n1 $((f0 + 4)) || fp_fail "the guest's faults never reached the agent"
kill -0 $p 2>/dev/null || { cat "$FP_TMP/stop.out" >&2; fp_fail "touch finished while the owner was stopped"; }
kill -CONT "${FP_NODE_PID[n2]}"
fp_wait_pid $p 60 || { cat "$FP_TMP/stop.out" >&2; fp_fail "touch failed after the owner came back"; }
expect_ok "owner stopped under faulting threads, then resumed" "$FP_TMP/stop.out"

# 4. The owner dies: after the fault timeout (3 s, agent n3) the guest
#    gets SIGBUS.
fp_node_start H n3 --fault-timeout-ms 3000
kill -KILL "${FP_NODE_PID[n2]}"
wait "${FP_NODE_PID[n2]}" 2>/dev/null
fp_cli H n3 touch r --seed $SEED --order seq >"$FP_TMP/dead.out" 2>&1
expect_sigbus "owner killed" "$FP_TMP/dead.out" $?
poisoned=$(fp_cli H n3 stats 2>&1 | tr ' ' '\n' | sed -n 's/^poisoned=//p' | head -n1)
[ "${poisoned:-0}" -gt 0 ] || fp_fail "agent reports no poisoned pages"
kill -KILL "${FP_NODE_PID[n3]}"
wait "${FP_NODE_PID[n3]}" 2>/dev/null

# 5. The owner comes back as a new process: its pool is new and empty. A
#    fresh mapping must not read those zeroes: SIGBUS at once, without
#    the fault timeout (n1's 600 s: a guest that waits for it is a hang).
fp_node_start H n2
fp_cli H n1 touch r --seed $SEED --order seq >"$FP_TMP/restart.out" 2>&1 &
p=$!
fp_wait_pid $p 300
rc=$?
[ $rc != 124 ] || { cat "$FP_TMP/restart.out" >&2; fp_fail "owner restarted: the guest waited for the fault timeout instead of failing at once"; }
expect_sigbus "owner restarted (data gone)" "$FP_TMP/restart.out" $rc
grep -q "owner restarted" "$FP_TMP/n1.log" || fp_fail "agent did not say the owner restarted"
# ... and on the restarted node itself its old chunks are not in its new
# pool: a local guest must not read that pool's zeroes either.
fp_cli H n2 touch r --seed $SEED --order seq --local-too >"$FP_TMP/restart-local.out" 2>&1
expect_sigbus "restarted node's own old chunks" "$FP_TMP/restart-local.out" $?
grep -q "this node restarted" "$FP_TMP/n2.log" || fp_fail "restarted agent did not say its pages are gone"
fp_cli H n1 status >"$FP_TMP/status.out" 2>&1
grep -q "LOST: [0-9]* chunks" "$FP_TMP/status.out" || fp_fail "status does not show the lost chunks: $(cat "$FP_TMP/status.out")"
fp_cli H n1 status --json | grep -q '"lost_chunks": [1-9]' || fp_fail "status --json: no lost_chunks"

# 6. The agent dies while the guest waits on a fault (the owner is
#    stopped): the guest's watchdog poisons after FARPAGE_AGENT_TIMEOUT_MS.
n1=$(fp_node_id n1)
n2=$(fp_node_id n2)
fp_cli H n1 region create r2 --size 8M --owners "$n1,$n2,$n1,$n2" >/dev/null 2>&1 || fp_fail "create r2"
kill -STOP "${FP_NODE_PID[n2]}"
f0=$(fp_faults H n1)
FARPAGE_AGENT_TIMEOUT_MS=1000 fp_cli H n1 touch r2 --order seq >"$FP_TMP/agent.out" 2>&1 &
p=$!
fp_wait_faults H n1 $((f0 + 1)) || fp_fail "the guest's fault never reached the agent"
kill -KILL "${FP_NODE_PID[n1]}"
fp_wait_pid $p 300
rc=$?
[ $rc = 124 ] && fp_fail "guest still blocked 5 minutes after its agent died"
expect_sigbus "agent killed under a waiting guest" "$FP_TMP/agent.out" $rc
grep -q "agent closed its socket" "$FP_TMP/agent.out" ||
	fp_fail "the guest's watchdog did not notice the agent's death"
grep -q "now raise SIGBUS" "$FP_TMP/agent.out" ||
	fp_fail "the guest's watchdog did not poison the unfetched pages"

# 7. The agent restarts (an upgrade) under a guest waiting on a fault: the
#    guest hands its uffd to the new agent, which serves every page.
kill -CONT "${FP_NODE_PID[n2]}"
fp_node_start H n1 --fault-timeout-ms 20000
fp_cli H n1 region create r3 --size 8M --owners "$n1,$n2,$n1,$n2" >/dev/null 2>&1 || fp_fail "create r3"
fp_cli H n1 fill r3 --seed $SEED >/dev/null 2>&1 && fp_cli H n2 fill r3 --seed $SEED >/dev/null 2>&1 ||
	fp_fail "fill r3"
kill -STOP "${FP_NODE_PID[n2]}"
f0=$(fp_faults H n1)
FARPAGE_AGENT_TIMEOUT_MS=20000 fp_cli H n1 touch r3 --seed $SEED --order seq >"$FP_TMP/resume.out" 2>&1 &
p=$!
fp_wait_faults H n1 $((f0 + 1)) || fp_fail "the guest's fault never reached the agent"
kill -KILL "${FP_NODE_PID[n1]}"
wait "${FP_NODE_PID[n1]}" 2>/dev/null
fp_node_start H n1
kill -CONT "${FP_NODE_PID[n2]}"
fp_wait_pid $p 60 || { cat "$FP_TMP/resume.out" >&2; fp_fail "guest failed across the agent restart"; }
expect_ok "agent restarted under a waiting guest: handed over, every page served" "$FP_TMP/resume.out"
grep -q "handed over to the restarted agent" "$FP_TMP/resume.out" || fp_fail "guest did not hand over"
grep -q "process handed over region r3" "$FP_TMP/n1.log" || fp_fail "new agent did not take the mapping over"
echo "test_faults: all cases passed"
