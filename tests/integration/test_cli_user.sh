#!/bin/bash
# What a script and a new user see of the CLI (docs/cli.md, "JSON output"
# and the commands' pages): agents a and b on one host, region r (4 chunks,
# 2 each), region r2 with two replicas, regions big (256 MiB) and gib
# (1 GiB), all b's.
#   1. --json on region list, region show, node list, stats and status:
#      each is one JSON object (python3 -m json.tool reads it) whose
#      values are the cluster's: names, ids, sizes, owners, counters
#   2. address errors name what is wrong: "has no port", "unknown host"
#   3. a usage error is one line and a pointer to --help, never the usage
#   4. `farpage vm` takes its options after REGION too (--dry-run there
#      runs nothing and prints QEMU's command line), holding a's node key
#      only: the region's size comes from the agent, not the coordinator
#   5. fill: on a node that owns no chunk of the region it writes nothing
#      and says so, exit 1; fill --all writes every page from one host
#      (remote ones through the mapping) and another host verifies them
#   6. progress: touch (of 1 GiB) and fill --all on a terminal (a pty,
#      script(1)) draw a progress line (pages, MB/s, ETA); without a
#      terminal, or with --quiet, none; so does flush, of a writer's 256 MiB left
#      dirty in agent w's cache (--writeback-ms 600000)
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
command -v jq >/dev/null || fp_skip "jq is not installed"
fp_hosts_loopback H
export FP_POOL=1400M # b holds big and gib (1.25 GiB)
fp_coord_start H
fp_node_start H a
fp_node_start H b
ID_A=$(fp_node_id a) ID_B=$(fp_node_id b)
[ -n "$ID_A" ] && [ -n "$ID_B" ] || fp_fail "node ids: a=$ID_A b=$ID_B"
fp_cli H a region create r --size 8M --owners "$ID_A,$ID_B,$ID_A,$ID_B" >/dev/null 2>&1 ||
	fp_fail "create r"
fp_cli H a region create r2 --size 4M --replicas 2 >/dev/null 2>&1 || fp_fail "create r2"
fp_cli H a fill r --seed 3 >/dev/null 2>&1 || fp_fail "fill r on a"
fp_cli H b touch r --seed 3 >"$FP_TMP/touch.out" 2>&1 || fp_fail "touch r on b: $(cat "$FP_TMP/touch.out")"

# --- 1. --json
# json NAME CMD...: runs the CLI, checks stdout is one JSON object.
json() {
	local name=$1
	shift
	fp_cli H "$@" >"$FP_TMP/$name.json" 2>"$FP_TMP/$name.err" ||
		fp_fail "$*: exit $?: $(cat "$FP_TMP/$name.err")"
	python3 -m json.tool "$FP_TMP/$name.json" >/dev/null ||
		fp_fail "$*: not JSON: $(cat "$FP_TMP/$name.json")"
	[ "$(jq -r type "$FP_TMP/$name.json")" = object ] || fp_fail "$*: not one object"
}
# is NAME JQ WANT: jq's answer on NAME's JSON is WANT.
is() {
	local got
	got=$(jq -c "$2" "$FP_TMP/$1.json")
	[ "$got" = "$3" ] || fp_fail "$1 --json: $2 is $got, not $3: $(cat "$FP_TMP/$1.json")"
}
json list a region list --json
is list '[.regions[].name] | sort' '["r","r2"]'
is list '.regions[] | select(.name == "r") | [.size, .chunk_size, .chunks, .replicas]' "[8388608,2097152,4,1]"
is list '.regions[] | select(.name == "r2") | [.chunks, .replicas]' "[2,2]"
json show a region show r --json
is show '[.name, .size, .owners]' "[\"r\",8388608,[$ID_A,$ID_B,$ID_A,$ID_B]]"
is show '[.records[] | [.chunk, .offset, .node]]' \
	"[[0,0,$ID_A],[1,2097152,$ID_B],[2,4194304,$ID_A],[3,6291456,$ID_B]]"
is show '.lost_chunks' 0
json show2 a region show --json r2
is show2 '[.replicas, .health, (.records | length)]' '[2,"ok",4]'
is show2 '[.records[].state] | unique' '["in-sync"]'
json nodes a node list --json
is nodes "[.nodes[] | [.id, .name, .up]]" "[[$ID_A,\"a\",true],[$ID_B,\"b\",true]]"
is nodes '.gone' '[]'
json stats b stats --json
remote=$(fp_field "$FP_TMP/touch.out" touch: remote)
[ "${remote:-0}" -gt 0 ] || fp_fail "touch on b fetched nothing: $(cat "$FP_TMP/touch.out")"
is stats '.agent' "\"${FP_NODE_SOCK[b]}\""
is stats '.remote >= '"$remote" true
is stats '.errors' 0
# the text says the cache's sizes in units too, after its key=value words
# (copy mode: no cache)
fp_cli H b stats >"$FP_TMP/stats.txt" 2>&1 || fp_fail "stats"
[ "${FP_FAULT_MODE:-}" = copy ] || grep -qE '^stats cache: limit=[0-9]+ .* file_max=[0-9]+ \(limit [0-9.]+ [KMGT]?i?B, resident [0-9.]+ [KMGT]?i?B, dirty [0-9.]+ [KMGT]?i?B\)$' \
	"$FP_TMP/stats.txt" || fp_fail "stats: no sizes in units: $(cat "$FP_TMP/stats.txt")"
[ "${FP_FAULT_MODE:-}" = copy ] || [ "$(fp_cache_stat H b limit)" -gt 0 ] ||
	fp_fail "stats: the limit= word no longer parses"
json status a status --json
is status '[.nodes[].name]' '["a","b"]'
fp_log "ok: region list, region show, node list, stats and status --json are JSON with the cluster's values"

# --- 2. Address errors say what is wrong.
# err_is WANT CMD...: exit 1 or 2 and WANT in the one line said.
err_is() {
	local want=$1 rc
	shift
	"$@" >"$FP_TMP/e.out" 2>"$FP_TMP/e.err"
	rc=$?
	[ $rc = 1 ] || [ $rc = 2 ] || fp_fail "$*: exit $rc"
	grep -qF -- "$want" "$FP_TMP/e.err" || fp_fail "$*: not '$want': $(cat "$FP_TMP/e.err")"
}
err_is "'coord' has no port: give HOST:PORT" "$FP_CLI_BIN" --insecure --coordinator coord status
err_is "unknown host 'nosuchhost.invalid'" \
	"$FP_CLI_BIN" --insecure --coordinator nosuchhost.invalid:7700 status
fp_log "ok: 'has no port', 'unknown host'"

# --- 3. A usage error is one line and where to read more.
# usage_err WANT-CMD ARGS...: exit 2, two lines, the second "Try 'WANT-CMD --help'."
usage_err() {
	local want=$1 rc
	shift
	"$FP_CLI_BIN" "$@" >"$FP_TMP/u.out" 2>"$FP_TMP/u.err"
	rc=$?
	[ $rc = 2 ] || fp_fail "farpage $*: exit $rc, not 2"
	[ "$(wc -l <"$FP_TMP/u.err")" = 2 ] || fp_fail "farpage $*: not two lines: $(cat "$FP_TMP/u.err")"
	[ "$(sed -n 2p "$FP_TMP/u.err")" = "Try '$want --help'." ] ||
		fp_fail "farpage $*: no pointer to '$want --help': $(cat "$FP_TMP/u.err")"
	[ ! -s "$FP_TMP/u.out" ] || fp_fail "farpage $*: wrote to stdout"
}
usage_err "farpage" frob
usage_err "farpage"
usage_err "farpage region create" region create r --size 1x
usage_err "farpage region show" region show --frob r
usage_err "farpage node list" node list extra
usage_err "farpage stats" stats --bogus
usage_err "farpage vm" vm r --dry-run
fp_log "ok: usage errors are one line and 'Try ... --help'"

# --- 4. farpage vm: its options after REGION.
PRE=$FP_BIN/vm/libfarpage-preload.so
[ -e "$PRE" ] || fp_fail "$PRE not built"
NODE_KEY=$FP_TMP/a-node.key
if [ -n "${FARPAGE_KEY_FILE:-}" ]; then
	"$FP_CLI_BIN" keygen --role node --name a --from "$FARPAGE_KEY_FILE" -o "$NODE_KEY" >/dev/null ||
		fp_fail "keygen --role node --name a"
	# the node key cannot ask the coordinator as the admin...
	FARPAGE_KEY_FILE=$NODE_KEY fp_cli H a region list >"$FP_TMP/nk.out" 2>&1 &&
		fp_fail "region list with a node key worked: $(cat "$FP_TMP/nk.out")"
fi
# ... and farpage vm does not need to.
FARPAGE_KEY_FILE=$NODE_KEY fp_cli H a vm r --dry-run --preload "$PRE" -- qemu-system-x86_64 -nographic \
	>"$FP_TMP/vm.out" 2>&1 || fp_fail "vm r --dry-run -- qemu...: $(cat "$FP_TMP/vm.out")"
grep -q "size=8M,mem-path=/proc/self/fd/" "$FP_TMP/vm.out" || fp_fail "vm --dry-run: not r's size: $(cat "$FP_TMP/vm.out")"
grep -q "^qemu-system-x86_64 .*-nographic" "$FP_TMP/vm.out" ||
	fp_fail "vm --dry-run after REGION: no QEMU command line: $(cat "$FP_TMP/vm.out")"
grep -q "memory-backend-file" "$FP_TMP/vm.out" || fp_fail "vm --dry-run: no backend: $(cat "$FP_TMP/vm.out")"
fp_log "ok: farpage vm REGION --dry-run -- QEMU... with a node key only: runs nothing, prints the command with r's size"

# --- 5. fill writes what it says, or says why not.
fp_cli H a region create q --size 4M --owners "$ID_B,$ID_B" >/dev/null 2>&1 || fp_fail "create q"
fp_cli H a fill q --seed 4 >"$FP_TMP/fq.out" 2>"$FP_TMP/fq.err" && fp_fail "fill q on a (owns nothing) exited 0"
grep -q "owns no chunk of region q alone: nothing written ('farpage fill --all q'" "$FP_TMP/fq.err" ||
	fp_fail "fill q on a: $(cat "$FP_TMP/fq.err")"
[ "$(wc -l <"$FP_TMP/fq.err")" = 1 ] || fp_fail "fill q on a: not one line: $(cat "$FP_TMP/fq.err")"
if [ "${FP_FAULT_MODE:-}" = copy ]; then
	fp_cli H a fill --all q --seed 4 >"$FP_TMP/fq.out" 2>&1 && fp_fail "fill --all in copy mode exited 0"
	grep -q "serves faults by copying" "$FP_TMP/fq.out" || fp_fail "fill --all, copy mode: $(cat "$FP_TMP/fq.out")"
	fp_log "ok: fill on a non-owner exits 1 and says so; fill --all in copy mode refuses, saying why"
else
	fp_cli H a fill --all q --seed 4 >"$FP_TMP/fq.out" 2>&1 || fp_fail "fill --all q on a: $(cat "$FP_TMP/fq.out")"
	grep -q "^fill: region=q pages=1024 " "$FP_TMP/fq.out" || fp_fail "fill --all q: $(cat "$FP_TMP/fq.out")"
	fp_cli H b touch q --seed 4 --local-too >"$FP_TMP/tq.out" 2>&1 || fp_fail "touch q on b: $(cat "$FP_TMP/tq.out")"
	# b owns q: its own pool holds what a wrote and flushed.
	[ "$(fp_field "$FP_TMP/tq.out" touch: verified)" = 1024 ] &&
		[ "$(fp_field "$FP_TMP/tq.out" touch: mismatches)" = 0 ] ||
		fp_fail "q: not every page verified on b: $(cat "$FP_TMP/tq.out")"
	fp_log "ok: fill on a non-owner exits 1 and says so; fill --all from a wrote all 1024 pages, b verified them"
fi

# --- 6. A progress line on a terminal only.
for r in big:256M gib:1G; do
	fp_cli H a region create "${r%:*}" --size "${r#*:}" --nodes "$ID_B" >/dev/null 2>&1 || fp_fail "create ${r%:*}"
	fp_cli H b fill "${r%:*}" --seed 2 >/dev/null 2>&1 || fp_fail "fill ${r%:*}"
done
# on_pty OUT CMD...: runs CMD with a terminal for its stdin, stdout and stderr.
on_pty() {
	local out=$1
	shift
	script -qec "$(printf '%q ' "$@")" /dev/null </dev/null >"$out" 2>&1
}
CLI_A=(${FP_HOST_RUN[H]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[a]}" "$FP_CLI_BIN" --coordinator "$FP_COORD" $(fp_insecure_flag))
on_pty "$FP_TMP/pty.out" "${CLI_A[@]}" touch gib --seed 2 || fp_fail "touch gib on a pty: $(tr '\r' '\n' <"$FP_TMP/pty.out")"
grep -qE $'\rtouch gib: [0-9]+/262144 pages \([0-9]+%\) [0-9]+ MB/s ETA [0-9-]+:[0-9-]+' "$FP_TMP/pty.out" ||
	fp_fail "touch on a terminal drew no progress line: $(tr '\r' '\n' <"$FP_TMP/pty.out")"
grep -q "^touch: pages=262144 .*mismatches=0" "$FP_TMP/pty.out" || grep -q $'\rtouch: pages=262144 .*mismatches=0' "$FP_TMP/pty.out" ||
	fp_fail "touch on a pty: no last line: $(tr '\r' '\n' <"$FP_TMP/pty.out")"
on_pty "$FP_TMP/ptyq.out" "${CLI_A[@]}" --quiet touch big --seed 2 || fp_fail "touch --quiet on a pty"
grep -q "MB/s ETA" "$FP_TMP/ptyq.out" && fp_fail "--quiet drew a progress line"
fp_cli H a touch big --seed 2 >"$FP_TMP/np.out" 2>&1 || fp_fail "touch big, no terminal"
grep -q "MB/s ETA" "$FP_TMP/np.out" && fp_fail "a progress line without a terminal"
if [ "${FP_FAULT_MODE:-}" != copy ]; then
	on_pty "$FP_TMP/ptyf.out" "${CLI_A[@]}" fill --all big --seed 3 || fp_fail "fill --all big on a pty: $(tr '\r' '\n' <"$FP_TMP/ptyf.out")"
	grep -qE $'\rfill big: [0-9]+/65536 pages \([0-9]+%\) [0-9]+ MB/s ETA' "$FP_TMP/ptyf.out" ||
		fp_fail "fill --all on a terminal drew no progress line: $(tr '\r' '\n' <"$FP_TMP/ptyf.out")"
fi
if [ "${FP_FAULT_MODE:-}" != copy ]; then
	fp_node_start H w --writeback-ms 600000
	GUEST=$FP_BIN/tests/fp_guest
	mkfifo "$FP_TMP/w.fifo" && exec 8<>"$FP_TMP/w.fifo" || fp_fail "fifo"
	FARPAGE_AGENT_SOCK=${FP_NODE_SOCK[w]} "$GUEST" wresume big 6 <"$FP_TMP/w.fifo" >"$FP_TMP/w.out" 2>&1 &
	gp=$!
	FP_PIDS+=("$gp")
	fp_wait_log "$FP_TMP/w.out" "written" 120 || fp_fail "the writer did not write: $(cat "$FP_TMP/w.out")"
	CLI_W=(${FP_HOST_RUN[H]} env FARPAGE_AGENT_SOCK="${FP_NODE_SOCK[w]}" "$FP_CLI_BIN" --coordinator "$FP_COORD" $(fp_insecure_flag))
	on_pty "$FP_TMP/ptyfl.out" "${CLI_W[@]}" flush big || fp_fail "flush big on a pty: $(tr '\r' '\n' <"$FP_TMP/ptyfl.out")"
	grep -qE $'\rflush big: [0-9]+/[0-9]+ pages \([0-9]+%\) [0-9]+ MB/s ETA' "$FP_TMP/ptyfl.out" ||
		fp_fail "flush on a terminal drew no progress line: $(tr '\r' '\n' <"$FP_TMP/ptyfl.out")"
	grep -q "every written page is home" "$FP_TMP/ptyfl.out" || fp_fail "flush big: $(tr '\r' '\n' <"$FP_TMP/ptyfl.out")"
	echo go >&8
	fp_wait_pid "$gp" 120 || fp_fail "the writer did not end"
	grep -q "wresume: flush=0 .*wrong=0 zero=0 sigbus=0" "$FP_TMP/w.out" || fp_fail "the writer: $(tail -n1 "$FP_TMP/w.out")"
	exec 8>&-
fi
fp_log "ok: touch, fill --all and flush draw a progress line on a terminal; none without one or with --quiet"
echo "test_cli_user: passed"
