# SPDX-License-Identifier: MIT
"""The coordinator's figures (bench_coord): its WAL store against etcd,
failover between two coordinators on etcd, and the scale run."""

from .results import records, stat3
from .util import Die, fmt_n, loadavg, number, plural, tidy

STORES = ("wal", "etcd")
CREATE = ("p50_ms", "p99_ms", "max_ms", "mean_ms")
SCALE = ("join_secs", "create_secs", "creates_per_s", "secs", "heartbeats_per_s",
         "cpu_secs", "cpu_busy", "rss_kb", "hwm_kb", "store_bytes")


def coord(b):
    """bench_coord --json (--quick with --coord quick, --scale with --coord
    scale): coord.{wal,etcd}.{create_*_ms,heartbeats_per_s},
    coord.failover.ttlT.{min,median,max}_ms, coord.failover_ms_median,
    coord.ratios.*, coord.scale.{wal,etcd}.* (docs/bench.md, "coord")."""
    mode = b.a.coord
    if mode == "off":
        b.put("coord.status", "not measured (--coord off)")
        return
    load0 = loadavg()
    args = {"quick": ["--quick"], "scale": ["--scale"]}.get(mode, [])
    b.say(f"coord: region creates, heartbeats, WAL store against etcd; failover"
          f"{'; scale' if mode == 'scale' else ''}")
    rc, out = b.run_prog("coord", "bench_coord", *args)
    if rc == 77:
        b.put("coord.status", f"n/a (bench_coord: {b.why(out, 1)})")
        return
    if rc != 0:
        raise Die(f"bench_coord: {b.why(out, 3)}")
    recs = records(out)

    def put_m(key, v):
        v = tidy(number(v)) if v is not None else None
        b.put(key, v)
        b.med[key] = v
        return v

    for w, kv in recs:
        if w == "coord_setup":
            for k in ("etcd_members", "creates", "nodes", "conns"):
                b.put(f"coord.{k}", number(kv.get(k)))
        elif w == "coord_create" and kv.get("store") in STORES:
            for k in CREATE:
                put_m(f"coord.{kv['store']}.create_{k}", kv.get(k))
        elif w == "coord_heartbeat" and kv.get("store") in STORES:
            put_m(f"coord.{kv['store']}.heartbeats_per_s", kv.get("heartbeats_per_s"))
        elif w == "coord_scale" and kv.get("store") in STORES:
            for k in SCALE + ("nodes", "regions"):
                put_m(f"coord.scale.{kv['store']}.{k}", kv.get(k))
    failover(b, recs, put_m)
    for s in STORES:
        if b.m(f"coord.{s}.create_p50_ms") is None:
            raise Die(f"bench_coord: no {s} figures: {b.why(out, 3)}")

    def ratio(key, num, den):
        v = b.m(num)
        d = b.m(den)
        b.put(key, round(v / d, 3) if v is not None and d else None)

    for k in ("p50", "p99"):
        ratio(f"coord.ratios.create_{k}_etcd_vs_wal", f"coord.etcd.create_{k}_ms",
              f"coord.wal.create_{k}_ms")
    ratio("coord.ratios.heartbeats_etcd_vs_wal", "coord.etcd.heartbeats_per_s",
          "coord.wal.heartbeats_per_s")
    b.put("coord.targets.failover_ms", 2000)
    b.put("coord.targets.create_p99_ms", 20)
    table(b)
    b.put("coord.loadavg", [load0, loadavg()])
    b.put("coord.scale.status", "measured" if mode == "scale" else
          "not measured (--coord scale only)")
    b.put("coord.status", "measured")


def failover(b, recs, put_m):
    """coord.failover.ttlT.{min,median,max}_ms and _runs of every TTL;
    coord.failover_ms_median and coord.failover_ttl_s: the smallest TTL's."""
    ttls = sorted({int(number(kv["ttl_s"])) for w, kv in recs
                   if w == "coord_failover" and number(kv.get("ttl_s")) is not None})
    for t in ttls:
        s = stat3([kv.get("ms") for w, kv in recs
                   if w == "coord_failover" and number(kv.get("ttl_s")) == t])
        if s is None:
            continue
        med, lo, hi, runs = s
        k = f"coord.failover.ttl{t}"
        put_m(f"{k}.min_ms", lo)
        put_m(f"{k}.median_ms", med)
        put_m(f"{k}.max_ms", hi)
        b.put(f"{k}.runs_ms", runs)
    b.put("coord.failover.ttls", ttls)
    t = ttls[0] if ttls else None
    put_m("coord.failover_ms_median", b.m(f"coord.failover.ttl{t}.median_ms") if ttls else None)
    b.put("coord.failover_ttl_s", t)


def table(b):
    """The table's rows (after far memory)."""
    m = b.m
    b.note("", "")
    b.note("coordinator", f"bench_coord: WAL store against etcd ({b.flat.get('coord.etcd_members')} "
           f"member{plural(b.flat.get('coord.etcd_members') or 0)}, loopback), "
           f"{b.flat.get('coord.creates')} creates, {b.flat.get('coord.nodes')} nodes "
           f"heartbeating on {b.flat.get('coord.conns')} connections")
    for k in ("p50", "p99"):
        b.row(f"coord: region create {k}, WAL", f"coord.wal.create_{k}_ms", "ms")
        b.row(f"coord: region create {k}, etcd", f"coord.etcd.create_{k}_ms", "ms",
              "WAL", m(f"coord.wal.create_{k}_ms"))
    b.row("coord: heartbeats/s, WAL", "coord.wal.heartbeats_per_s", "/s")
    b.row("coord: heartbeats/s, etcd", "coord.etcd.heartbeats_per_s", "/s",
          "WAL", m("coord.wal.heartbeats_per_s"))
    for t in b.flat.get("coord.failover.ttls") or []:
        k = f"coord.failover.ttl{t}"
        b.note(f"coord: failover, --leader-ttl {t} (ms)",
               f"min {fmt_n(m(k + '.min_ms'))}, median {fmt_n(m(k + '.median_ms'))}, "
               f"max {fmt_n(m(k + '.max_ms'))} (target 2000)")
    for s in STORES:
        k = f"coord.scale.{s}"
        if m(f"{k}.create_secs") is None:
            continue
        b.note(f"coord: scale, {s}",
               f"{fmt_n(m(k + '.nodes'))} nodes, {fmt_n(m(k + '.regions'))} regions in "
               f"{fmt_n(m(k + '.create_secs'))} s; CPU {fmt_n(m(k + '.cpu_busy'))} busy, "
               f"RSS {fmt_n(m(k + '.rss_kb'))} kB, store {fmt_n(m(k + '.store_bytes'))} B")
