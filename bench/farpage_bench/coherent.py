# SPDX-License-Identifier: MIT
"""Coherent regions (bench/coherent.sh): ownership ping-pong against the
RTT floor, partitioned writes against single-writer regions, read-mostly
sharing against read-only mappings."""

from .results import kv_to_jsonl
from .scale import out_err, scale_load, scale_skip, script_run
from .util import loadavg, plural

TARGET_PINGPONG_RTTS = 3
TARGET_PART_RATIO = 1.1


def coherent(b):
    """Coherent regions (bench/coherent.sh, three hosts in namespaces):
    coherent.rtt_us, coherent.pingpong.*, coherent.pingpong_replicated.*,
    coherent.partitioned.*, coherent.readmostly.*"""
    if scale_skip(b, "coherent", "coherent"):
        return
    load0 = loadavg()
    quick = b.a.coherent == "quick"
    runs, moves, pages, passes, secs = (1, 2000, 1024, 10, 2) if quick else \
        (b.runs, 20000, 4096, 20, 5)
    b.say(f"coherent: ping-pong ({moves} moves), partitioned writes ({pages} pages a host, "
          f"{passes} passes), read-mostly ({secs} s), {runs} run{plural(runs)}")
    out = script_run(b, "coherent", "coherent.sh", "--runs", runs, "--moves", moves,
                     "--pages", pages, "--passes", passes, "--secs", secs)
    if out is None:
        b.put("coherent.status", f"n/a (coherent.sh: {b.tail(out_err(b, 'coherent'), 1)})")
        return
    out = kv_to_jsonl(out, f"{b.tmp}/coherent.jsonl")
    b.note("", "")
    b.note("coherent regions", "bench/coherent.sh: hosts in namespaces over veth; "
           "ping-pong homed on one of the two hosts, the rest on a third")
    rtt = b.fig("coherent.rtt_us", out, "coh_rtt", "p50_us")
    pp = b.fig("coherent.pingpong.us_per_move", out, "coh_pingpong", "us_per_move")
    b.put("coherent.pingpong.moves", moves)
    b.put("coherent.pingpong.rtts_per_move", round(pp / rtt, 2) if pp and rtt else None)
    b.put("coherent.pingpong.target_rtts", TARGET_PINGPONG_RTTS)
    b.row("coherent: ownership ping-pong, a move", "coherent.pingpong.us_per_move", "µs",
          "TCP RTT floor", rtt)
    b.fig("coherent.pingpong_replicated.us_per_move", out, "coh_pingpong_repl", "us_per_move")
    b.row("coherent: ping-pong, two replicas", "coherent.pingpong_replicated.us_per_move", "µs",
          "one replica", pp)
    for kind in ("coherent", "single"):
        for k in ("secs", "first_secs", "ns_per_write"):
            b.fig(f"coherent.partitioned.{kind}.{k}", out, "coh_part", k, kind=kind)
    for k in ("secs", "ns_per_write"):
        v, base = b.m(f"coherent.partitioned.coherent.{k}"), \
            b.m(f"coherent.partitioned.single.{k}")
        b.put(f"coherent.partitioned.ratio.{k}", round(v / base, 3) if v and base else None)
    b.put("coherent.partitioned.pages", pages)
    b.put("coherent.partitioned.passes", passes)
    b.put("coherent.partitioned.target_ratio", TARGET_PART_RATIO)
    b.row("coherent: partitioned writes, a write", "coherent.partitioned.coherent.ns_per_write",
          "ns", "single-writer", b.m("coherent.partitioned.single.ns_per_write"))
    b.row("coherent: partitioned writes, all passes", "coherent.partitioned.coherent.secs",
          "s", "single-writer", b.m("coherent.partitioned.single.secs"))
    for kind in ("coherent", "readonly"):
        b.fig(f"coherent.readmostly.{kind}.reads_per_s", out, "coh_readmostly", "reads_per_s",
              kind=kind)
    b.fig("coherent.readmostly.pokes", out, "coh_readmostly", "pokes", kind="coherent")
    v, base = b.m("coherent.readmostly.coherent.reads_per_s"), \
        b.m("coherent.readmostly.readonly.reads_per_s")
    b.put("coherent.readmostly.ratio", round(v / base, 3) if v and base else None)
    b.row("coherent: read-mostly, reads", "coherent.readmostly.coherent.reads_per_s", "/s",
          "read-only map", base)
    scale_load(b, "coherent", load0)
    b.put("coherent.status", "measured")
