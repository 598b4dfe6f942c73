# SPDX-License-Identifier: MIT
"""Replicated regions (bench/replicas.sh)."""

from .results import kv_to_jsonl, vals
from .scale import out_err, scale_load, scale_skip, script_run
from .util import from_iec, loadavg, number, plural, tidy


def replica(b):
    """Replicated regions (bench/replicas.sh): write-back with 1, 2 and 3
    replicas, reads with 2 against 1, an owner killed -9 under a reading
    and a writing guest, the rebuild of its replicas. replica.*"""
    if scale_skip(b, "replica", "replica"):
        return
    load0 = loadavg()
    quick = b.a.replica == "quick"
    rb_mb = int(b.a.replica_mb or (64 if quick else 1024))
    if quick:
        size, runs, fo, hot = "16M", 1, "16M", "8M"
        extra = ["--lease-ms", 1000, "--heartbeat-ms", 200]
    else:
        size = f"{max(2, (b.size_bytes >> 21) * 2)}M"
        runs, fo, hot, extra = b.runs, "128M", "64M", []
    b.say(f"replica: write-back with 1/2/3 replicas ({size}, {runs} run{plural(runs)}), "
          f"reads 2 against 1, an owner killed -9, rebuild of {rb_mb} MiB")
    out = script_run(b, "replica", "replicas.sh", "--size", size, "--runs", runs,
                     "--rebuild-size", f"{rb_mb}M", "--fo-size", fo, "--hot-size", hot,
                     *extra)
    if out is None:
        b.put("replica.status", f"n/a (replicas.sh: {b.tail(out_err(b, 'replica'), 1)})")
        return
    out = kv_to_jsonl(out, f"{b.tmp}/replica.jsonl")
    for r in (1, 2, 3):
        b.fig(f"replica.wb.r{r}.MBps", out, "replica_wb", "MBps", replicas=r)
        b.fig(f"replica.wb.r{r}.flush_secs", out, "replica_wb", "flush_secs", replicas=r)
    for r in (1, 2):
        for k in ("p50_us", "p99_us", "max_us"):
            b.fig(f"replica.read.r{r}.{k}", out, "replica_read", k, replicas=r)
    for role in ("reader", "writer"):
        for k in ("p50_us", "p99_us", "max_us", "flush_secs", "ended_after_kill"):
            if vals(out, "replica_failover", k, role=role):
                b.fig(f"replica.failover.{role}.{k}", out, "replica_failover", k, role=role)
    stall = [b.m(f"replica.failover.{r}.max_us") for r in ("reader", "writer")]
    stall = [v for v in stall if v is not None]
    b.put("replica.failover.stall_ms", tidy(round(max(stall) / 1000, 1)) if stall else None)
    b.med["replica.failover.stall_ms"] = b.flat["replica.failover.stall_ms"]
    b.put("replica.failover.target_ms", 1000)
    for k in ("detect_ms", "secs", "chunks", "bytes", "MBps", "region_secs", "region_MBps"):
        b.fig(f"replica.rebuild.{k}", out, "replica_rebuild", k)
    for w in ("before", "during"):
        for k in ("p50_us", "p99_us", "max_us", "passes", "samples"):
            b.fig(f"replica.rebuild.read.{w}.{k}", out, "replica_rebuild_read", k, when=w)
    part = vals(out, "replica_rebuild_read", "partial", when="during")
    b.put("replica.rebuild.read.during.partial", number(part[0]) if part else None)
    stream = b.m(f"floors.stream.{b.floor_pl}.MBps")
    b.put("replica.rebuild.stream_MBps", stream)

    def ratio(key, v, base):
        r = round(v / base, 3) if v is not None and base else None
        b.put(key, r)
        return r

    w1 = b.m("replica.wb.r1.MBps")
    ratio("replica.ratios.wb_r2_vs_r1", b.m("replica.wb.r2.MBps"), w1)
    ratio("replica.ratios.wb_r3_vs_r1", b.m("replica.wb.r3.MBps"), w1)
    ratio("replica.ratios.read_p50_r2_vs_r1", b.m("replica.read.r2.p50_us"),
          b.m("replica.read.r1.p50_us"))
    ratio("replica.ratios.read_p99_r2_vs_r1", b.m("replica.read.r2.p99_us"),
          b.m("replica.read.r1.p99_us"))
    ratio("replica.ratios.rebuild_vs_stream", b.m("replica.rebuild.MBps"), stream)
    ratio("replica.ratios.rebuild_read_p99_during_vs_before",
          b.m("replica.rebuild.read.during.p99_us"), b.m("replica.rebuild.read.before.p99_us"))
    b.put("replica.region_bytes", from_iec(size))
    b.put("replica.rebuild_bytes", rb_mb << 20)
    b.put("replica.runs", runs)
    b.put("replica.detection", "--lease-ms 1000, --heartbeat-ms 200" if quick
          else "defaults (--lease-ms 5000, --heartbeat-ms 1000, --fault-timeout-ms 30000)")

    b.note("", "")
    b.note("replicated regions", f"bench/replicas.sh: 4 hosts, regions of {size} on 3 owners, "
           f"{runs} run{plural(runs)}; failure detection: {b.flat['replica.detection']}")
    b.row("replica write-back, 1 replica", "replica.wb.r1.MBps", "MB/s")
    for r in (2, 3):
        b.row(f"replica write-back, {r} replicas", f"replica.wb.r{r}.MBps", "MB/s",
              "1 replica", w1)
    for r in (1, 2, 3):
        b.row(f"replica flush, {r} replica{plural(r)}", f"replica.wb.r{r}.flush_secs", "s")
    for k in ("p50", "p99"):
        b.row(f"replica read fault {k}, 2 replicas", f"replica.read.r2.{k}_us", "us",
              "1 replica", b.m(f"replica.read.r1.{k}_us"))
    b.row("failover: reader's longest stall", "replica.failover.reader.max_us", "us",
          "target 1 s", 1e6)
    b.row("failover: writer's longest touch", "replica.failover.writer.max_us", "us",
          "target 1 s", 1e6)
    b.row("failover: writer's flush", "replica.failover.writer.flush_secs", "s")
    b.row("rebuild: kill to first copy", "replica.rebuild.detect_ms", "ms")
    b.row(f"rebuild of {rb_mb} MiB's lost replica", "replica.rebuild.MBps", "MB/s",
          "stream", stream)
    b.row("rebuild: read fault p99 during", "replica.rebuild.read.during.p99_us", "us",
          "before the kill", b.m("replica.rebuild.read.before.p99_us"))
    scale_load(b, "replica", load0)
    b.put("replica.status", "measured")
