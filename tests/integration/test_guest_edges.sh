#!/bin/bash
# Edges of the fault path on one machine (loopback), each once a way to a
# zero page, a hang or a dead fault loop:
#   - unmap under touching threads: SIGSEGV after the unmap, never zeroes
#   - poisoning that meets -EAGAIN (MADV_DONTNEED events all the time)
#   - descriptors that are not a non-blocking userfaultfd, handed to the
#     agent while another guest is served
#   - faults waiting for a free slot: counted once, poisoned at the
#     deadline of their fault (the owner stopped, slots never free)
#   - the fault loop finding no submission entry (test hook)
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
GUEST=$FP_BIN/tests/fp_guest
CLIENT=$FP_BIN/tests/fp_client
SEED=11
fp_hosts_loopback H
# A lease no step outlasts: n2 stopped in step 5 stays "up" for the
# coordinator, so its connections and the reads on them stay open.
fp_coord_start H --lease-ms 600000
# n1: the guests' agent for steps 1-4, which must never reach the fault
# timeout however slow the machine; small slot pool and no read-ahead, so
# faults queue for slots and each page is one fault; SQE refusals from the
# hook. n3: the same for steps 5-6, whose faults must time out (1.5 s).
FARPAGE_TEST_SQE_FAIL_EVERY=7 fp_node_start H n1 --fault-timeout-ms 600000 \
	--inflight 16 --readahead 0
fp_node_start H n3 --fault-timeout-ms 1500 --inflight 16 --readahead 0
fp_node_start H n2
n2=$(fp_node_id n2)
fp_cli H n1 region create r --size 16M --owners "$n2,$n2,$n2,$n2,$n2,$n2,$n2,$n2" \
	>"$FP_TMP/create.out" 2>&1 || fp_fail "create: $(cat "$FP_TMP/create.out")"
fp_cli H n2 fill r --seed $SEED >/dev/null 2>&1 || fp_fail "fill"
grep -q "test hook" "$FP_TMP/n1.log" || fp_fail "agent n1 did not take the SQE test hook"

# 1. Every page served although every 7th submission entry is refused.
fp_cli H n1 touch r --seed $SEED --order rand --threads 8 >"$FP_TMP/sqe.out" 2>&1 ||
	{ cat "$FP_TMP/sqe.out" >&2; fp_fail "touch with SQEs refused"; }
fp_touch_ok "fault loop short of submission entries" "$FP_TMP/sqe.out"

# 2. Faults that wait for one of the 16 slots are counted once: with no
#    read-ahead every remote page touched is exactly one fault.
before=$(fp_faults H n1)
kill -STOP "${FP_NODE_PID[n2]}"
fp_cli H n1 touch r --seed $SEED --order rand --threads 64 >"$FP_TMP/backlog.out" 2>&1 &
p=$!
# Readiness: the owner is stopped, so all 64 first faults pile up.
fp_wait_faults H n1 $((before + 64)) || fp_fail "the 64 faults never reached the agent"
kill -CONT "${FP_NODE_PID[n2]}"
fp_wait_pid $p 60 || { cat "$FP_TMP/backlog.out" >&2; fp_fail "touch with faults waiting for slots"; }
fp_touch_ok "64 threads on 16 slots" "$FP_TMP/backlog.out"
after=$(fp_faults H n1)
pages=$(fp_field "$FP_TMP/backlog.out" touch: remote)
[ $((after - before)) = "$pages" ] ||
	fp_fail "faults counted: $((after - before)) for $pages pages touched (a queued fault counted twice?)"
fp_log "ok: $pages faults counted for $pages pages, 48+ of them queued for a slot"

# 3. A descriptor that is not a non-blocking userfaultfd is refused; a
#    guest touching beside it is served (a read of a pipe would stop the
#    fault loop, and every guest of the host, for good).
fp_cli H n1 touch r --seed $SEED --order seq --threads 2 >"$FP_TMP/beside.out" 2>&1 &
p=$!
for kind in pipe eventfd blocking-uffd; do
	"$CLIENT" badfd "${FP_NODE_SOCK[n1]}" r $kind >"$FP_TMP/badfd-$kind.out" 2>&1 ||
		{ cat "$FP_TMP/badfd-$kind.out" >&2; fp_fail "$kind handed as a uffd"; }
	fp_log "ok: $(cat "$FP_TMP/badfd-$kind.out")"
done
fp_wait_pid $p 60 || { cat "$FP_TMP/beside.out" >&2; fp_fail "guest beside the bad descriptors failed or hung"; }
fp_touch_ok "guest served beside bad descriptors" "$FP_TMP/beside.out"

# 4. Unmap under threads that touch: whatever they touch after the unmap
#    is SIGSEGV; a page read is the right one, never zeroes.
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n1]} "$GUEST" unmap-race r $SEED 30 >"$FP_TMP/unmap.out" 2>&1 ||
	{ cat "$FP_TMP/unmap.out" >&2; fp_fail "unmap-race"; }
line=$(grep '^unmap-race:' "$FP_TMP/unmap.out") || { cat "$FP_TMP/unmap.out" >&2; fp_fail "unmap-race: no result"; }
[ "$(fp_field "$FP_TMP/unmap.out" unmap-race: zero)" = 0 ] && [ "$(fp_field "$FP_TMP/unmap.out" unmap-race: wrong)" = 0 ] ||
	fp_fail "a page read after or during the unmap was wrong or zero: $line"
[ "$(fp_field "$FP_TMP/unmap.out" unmap-race: segv)" -gt 0 ] || fp_fail "no thread touched the range after the unmap: $line"
fp_log "ok: $line"

# 5. Faults queued for a slot end like the others. The owner is stopped
#    (alive for the coordinator, its connections open, its reads never
#    answered): 160 threads fault on 16 slots, 144 of them wait in the
#    backlog, and every one must get SIGBUS (none a wrong or zero page)
#    while the owner is still stopped. No clock is asserted on: the step
#    waits for the guest to end (up to 5 minutes: a hang). How long the
#    last thread waited is printed as a figure; a deadline that restarted
#    per slot generation would show there as about 10 fault timeouts.
t0=$(date +%s%N)
kill -STOP "${FP_NODE_PID[n2]}"
fp_cli H n3 touch r --seed $SEED --order rand --threads 160 >"$FP_TMP/late.out" 2>&1 &
p=$!
fp_wait_pid $p 300
rc=$?
kill -0 "${FP_NODE_PID[n2]}" && [ "$(ps -o stat= -p "${FP_NODE_PID[n2]}" | cut -c1)" = T ] ||
	fp_fail "the owner n2 did not stay stopped through step 5"
kill -CONT "${FP_NODE_PID[n2]}"
[ $rc != 124 ] || { cat "$FP_TMP/late.out" >&2; fp_fail "160 threads on 16 slots, owner stopped: a fault still waits after 5 minutes"; }
fp_touch_sigbus "160 threads on 16 slots, owner stopped" "$FP_TMP/late.out" $rc
b=$(fp_field "$FP_TMP/late.out" touch: sigbus)
[ "$b" = 160 ] || { cat "$FP_TMP/late.out" >&2; fp_fail "160 threads on 16 slots: $b got SIGBUS, expected all 160"; }
fp_log "ok: all 160 threads got SIGBUS while the owner was stopped, the last after $((($(date +%s%N) - t0) / 1000000)) ms (fault timeout 1500 ms)"

# 6. The owner dies; a thread faults on its page while another drops a
#    page with MADV_DONTNEED in a loop until 1 s past the fault timeout,
#    so poisoning meets -EAGAIN: the fault still ends in SIGBUS.
kill -KILL "${FP_NODE_PID[n2]}"
wait "${FP_NODE_PID[n2]}" 2>/dev/null
FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[n3]} "$GUEST" poison-race r 2500 >"$FP_TMP/poison.out" 2>&1 &
fp_wait_pid $! 300
case $? in
0) ;;
124) fp_fail "poison-race: the faulting thread still waits 5 minutes after the owner died (poison taken as done on -EAGAIN?)" ;;
*) cat "$FP_TMP/poison.out" >&2; fp_fail "poison-race" ;;
esac
line=$(grep '^poison-race:' "$FP_TMP/poison.out")
[ "$(fp_field "$FP_TMP/poison.out" poison-race: sigbus)" = 1 ] &&
	[ "$(fp_field "$FP_TMP/poison.out" poison-race: zero)" = 0 ] &&
	[ "$(fp_field "$FP_TMP/poison.out" poison-race: wrong)" = 0 ] || fp_fail "poison-race: $line"
fp_log "ok: $line"
echo "test_guest_edges: all cases passed"
