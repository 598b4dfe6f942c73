#!/bin/bash
# Debian's memcached under `farpage run` (docs/run.md, "Tested with"): a
# dataset about twice the cache, every sampled get the value set.
# memcached allocates with glibc's malloc(): farpage run preloads jemalloc,
# which takes its place, so its slabs land in the region.
#   a. --local-only (the same preload and jemalloc on local memory, no
#      agent): memcached's peak RSS once it answers `version` is what it
#      keeps without data (the baseline); KEYS binary values of VAL bytes,
#      each derived from its key, stored with `set` (a small client of the
#      text protocol, python3 sockets), none evicted; a sample of keys (the
#      first, the last and SAMPLE random ones) read back with `get`, byte
#      for byte; its peak RSS then is above the data: local memory holds it
#      all, and the bound below could tell
#   b. a REGION all owned by B, memcached on A under `farpage run
#      --cache-size CACHE`: the same load and check; A's agent fetched
#      pages back from B (cache misses grew), zero-filled at least the
#      data's pages (farpage_anon_zero_fills_total), the library placed at
#      least the data in the region (its counters at exit), and memcached's
#      peak RSS stayed under CACHE plus the agent's slack plus the
#      baseline, which is below the data
#   Both end with memcached's `shutdown` command (-A): farpage run's exit
#   status is memcached's, 0. FP_MC_SEED picks the sample again.
set -uo pipefail
. "$(dirname "$0")/../lib.sh"
fp_require
. "$(dirname "$0")/../run_prog.sh"
PROG=$(command -v memcached) ||
	fp_skip "memcached is not installed (Debian package memcached; scripts/deps.sh installs it)"
PY=/usr/bin/python3
[ -x "$PY" ] || fp_skip "no /usr/bin/python3 (the test's memcached client; scripts/deps.sh installs it)"
run_prog_require

KEYS=${FP_MC_KEYS:-20000}
VAL=4096 # bytes a value (a multiple of 32)
SAMPLE=${FP_MC_SAMPLE:-500}
SEED=${FP_MC_SEED:-$RANDOM}
REGION=512M
CACHE=32M
MC_MEM=256 # memcached -m (MiB): room for every item, none evicted
DATA=$((KEYS * VAL))
HOST_IP=127.0.0.1
fp_hosts_loopback H
fp_log "dataset: $KEYS keys of $VAL bytes ($DATA bytes), sample of $((SAMPLE + 2)) keys (FP_MC_SEED=$SEED)"

# The client: memcached's text protocol over one TCP connection. Values:
# VAL bytes of SHA-256 in counter mode over the key, so a value from
# another key, another offset or another page never matches.
cat >"$FP_TMP/mcclient.py" <<'EOF'
import hashlib, random, socket, sys

def key(i):
    return b"key:%06d" % i

def val(k, size):
    return b"".join(hashlib.sha256(b"%s/%d" % (k, j)).digest()
                    for j in range(size // 32))

class Conn:
    def __init__(self, host, port):
        self.s = socket.create_connection((host, port))
        self.f = self.s.makefile("rb")

    def line(self):
        l = self.f.readline()
        if not l.endswith(b"\r\n"):
            sys.exit("mc: the connection closed (%r)" % l)
        return l[:-2]

    def cmd(self, c):
        self.s.sendall(c + b"\r\n")
        return self.line()

def main():
    mode, host, port = sys.argv[1], sys.argv[2], int(sys.argv[3])
    c = Conn(host, port)
    if mode == "version":       # version: the server answers
        l = c.cmd(b"version")
        if not l.startswith(b"VERSION "):
            sys.exit("mc: version: %r" % l)
        print(l.decode())
    elif mode == "load":        # load N SIZE: set every key, 100 at a time
        n, size = int(sys.argv[4]), int(sys.argv[5])
        for b in range(0, n, 100):
            ks = range(b, min(n, b + 100))
            c.s.sendall(b"".join(b"set %s 0 0 %d\r\n%s\r\n" % (key(i), size, val(key(i), size))
                                 for i in ks))
            for i in ks:
                l = c.line()
                if l != b"STORED":
                    sys.exit("mc: set %s: %r" % (key(i).decode(), l))
        print("mc: load keys=%d bytes=%d" % (n, n * size))
    elif mode == "check":       # check N COUNT SEED SIZE: get the first, the last, COUNT others
        n, cnt, seed, size = (int(a) for a in sys.argv[4:8])
        ks = [0, n - 1] + random.Random(seed).sample(range(1, n - 1), cnt)
        ok = wrong = missing = 0
        for i in ks:
            k = key(i)
            l = c.cmd(b"get " + k)
            if l == b"END":
                missing += 1
                print("mc: %s missing" % k.decode())
                continue
            h = l.split()
            if len(h) != 4 or h[0] != b"VALUE" or h[1] != k:
                sys.exit("mc: get %s: %r" % (k.decode(), l))
            v = c.f.read(int(h[3]) + 2)
            if c.line() != b"END":
                sys.exit("mc: get %s: no END" % k.decode())
            want = val(k, size)
            if v[:-2] == want and v[-2:] == b"\r\n":
                ok += 1
            else:
                wrong += 1
                d = next((j for j in range(min(len(want), len(v))) if v[j] != want[j]), min(len(want), len(v)))
                print("mc: %s wrong: %d bytes, want %d; first difference at byte %d: got %s want %s"
                      % (k.decode(), len(v) - 2, size, d, v[d:d + 16].hex(), want[d:d + 16].hex()))
        print("mc: check keys=%d ok=%d wrong=%d missing=%d" % (len(ks), ok, wrong, missing))
        sys.exit(0 if ok == len(ks) else 1)
    elif mode == "stats":       # stats: NAME VALUE lines
        c.s.sendall(b"stats\r\n")
        while True:
            l = c.line()
            if l == b"END":
                break
            print(l.decode().removeprefix("STAT "))
    elif mode == "shutdown":    # shutdown: the server closes the connection and exits
        c.s.sendall(b"shutdown\r\n")
        l = c.f.readline()
        if l:
            sys.exit("mc: shutdown: %r" % l)
    else:
        sys.exit("mc: unknown mode " + mode)

main()
EOF
# shellcheck disable=SC2086
mcc() { ${FP_HOST_RUN[H]} timeout 300 "$PY" "$FP_TMP/mcclient.py" "$1" "$HOST_IP" "$MPORT" "${@:2}"; }

# prog_start NAME RUN-ARGS...: memcached under `farpage run -v RUN-ARGS`
# on A's agent, on a free port of its own, until it answers `version`.
prog_start() {
	local name=$1
	shift
	MPORT=$(fp_port H)
	run_prog_spawn "$name" "$@" -- "$PROG" -m "$MC_MEM" -l "$HOST_IP" -p "$MPORT" -U 0 \
		-u root -A -v
	run_prog_wait "$name" mc_up
}
mc_up() { mcc version >/dev/null 2>&1; }
mc_stat() { sed -n "s/^$1 //p" "$2"; }

# prog_load_check NAME: the dataset set, every item kept (none evicted), the
# sample read back with get and compared byte for byte.
prog_load_check() {
	local name=$1 n ev
	mcc load "$KEYS" "$VAL" >"$FP_TMP/$name.load" 2>&1 ||
		{ cat "$FP_TMP/$name.load" >&2; fp_fail "$name: the sets failed"; }
	mcc stats >"$FP_TMP/$name.stats" 2>&1 || { cat "$FP_TMP/$name.stats" >&2; fp_fail "$name: stats"; }
	n=$(mc_stat curr_items "$FP_TMP/$name.stats") ev=$(mc_stat evictions "$FP_TMP/$name.stats")
	[ "$n" = "$KEYS" ] && [ "$ev" = 0 ] ||
		fp_fail "$name: memcached holds $n items, not $KEYS ($ev evicted): -m $MC_MEM is too small"
	mcc check "$KEYS" "$SAMPLE" "$SEED" "$VAL" >"$FP_TMP/$name.check" 2>&1 ||
		{ head -n 20 "$FP_TMP/$name.check" >&2; fp_fail "$name: get did not return the value set"; }
	grep -q "^mc: check keys=$((SAMPLE + 2)) ok=$((SAMPLE + 2)) wrong=0 missing=0\$" "$FP_TMP/$name.check" ||
		{ cat "$FP_TMP/$name.check" >&2; fp_fail "$name: the check did not say every key was right"; }
	fp_log "ok: $name: $KEYS sets (bytes=$(mc_stat bytes "$FP_TMP/$name.stats"), limit_maxbytes=$(mc_stat limit_maxbytes "$FP_TMP/$name.stats")), $((SAMPLE + 2)) gets byte for byte"
}

# prog_shutdown NAME: memcached's shutdown command (-A).
prog_shutdown() {
	mcc shutdown >"$FP_TMP/$1.shut" 2>&1 ||
		{ cat "$FP_TMP/$1.shut" >&2; fp_fail "$1: shutdown failed"; }
}

run_prog_main
