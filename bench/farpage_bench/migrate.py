# SPDX-License-Identifier: MIT
"""Live migration (bench/migrate.sh): farpage against QEMU's precopy."""

from .results import kv_to_jsonl, vals
from .scale import out_err, scale_load, scale_skip, script_run
from .util import from_iec, loadavg, tidy

KEYS = ("total_ms", "downtime_ms", "switchover_ms", "bytes")
FARPAGE_KEYS = ("preflush_pages", "predrop_pages", "switchover_pages", "handover_ms")


def label(n):
    """512M, 2G, 16G: the guest size in keys."""
    return f"{n >> 30}G" if n % (1 << 30) == 0 else f"{n >> 20}M"


def migrate(b):
    """Live migration of a TCG guest between two hosts (namespaces), idle
    and writing at a fixed rate: farpage (RAM left in a region, the lease
    handed over) against QEMU's precopy of the same guest on local RAM.
    migrate.<size>.<farpage|precopy>[.writing].<total_ms|downtime_ms|
    switchover_ms|bytes>"""
    if scale_skip(b, "migrate", "migrate"):
        return
    load0 = loadavg()
    quick = b.a.migrate == "quick"
    sizes = b.a.migrate_sizes or ("512M" if quick else "512M 2G 16G")
    loads = "idle" if quick else "idle writing"
    rate = int(b.a.migrate_rate)
    b.say(f"migrate: guests of {sizes}, {loads}, farpage against QEMU's precopy")
    out = script_run(b, "migrate", "migrate.sh", "--sizes", sizes, "--loads", loads,
                     "--rate", rate)
    if out is None:
        b.put("migrate.status", f"n/a (migrate.sh: {b.tail(out_err(b, 'migrate'), 1)})")
        return
    out = kv_to_jsonl(out, f"{b.tmp}/migrate.jsonl")
    b.note("", "")
    b.note("live migration", f"bench/migrate.sh: TCG guests, hosts in namespaces over veth; "
           f"writing: {rate} MiB/s over 64 MiB")
    labels = []
    for size in sizes.split():
        n = from_iec(size)
        lb = label(n)
        labels.append(lb)
        for load in loads.split():
            sub = "" if load == "idle" else ".writing"
            for how in ("farpage", "precopy"):
                pre = f"migrate.{lb}.{how}{sub}"
                for k in KEYS + (FARPAGE_KEYS if how == "farpage" else ()):
                    b.fig(f"{pre}.{k}", out, "migrate", k, size=n, how=how, load=load)
                ok = vals(out, "migrate", "guest_ok", size=n, how=how, load=load)
                b.put(f"{pre}.guest_ok", ok[0] if ok else None)
                byt = b.m(f"{pre}.bytes")
                b.put(f"{pre}.bytes_of_ram", tidy(round(byt / n, 5)) if byt is not None
                      else None)
            fp, pc = f"migrate.{lb}.farpage{sub}", f"migrate.{lb}.precopy{sub}"
            for k in ("total_ms", "downtime_ms", "switchover_ms"):
                v, base = b.m(f"{fp}.{k}"), b.m(f"{pc}.{k}")
                b.put(f"migrate.ratios.{lb}{sub}.precopy_vs_farpage.{k}",
                      round(base / v, 2) if v and base is not None else None)
            what = f"{lb} {load}"
            b.row(f"migrate {what}: farpage total", f"{fp}.total_ms", "ms", "precopy",
                  b.m(f"{pc}.total_ms"))
            b.row(f"migrate {what}: farpage downtime", f"{fp}.downtime_ms", "ms", "precopy",
                  b.m(f"{pc}.downtime_ms"))
            b.row(f"migrate {what}: farpage switch-over", f"{fp}.switchover_ms", "ms",
                  "precopy", b.m(f"{pc}.switchover_ms"))
            b.row(f"migrate {what}: farpage stream", f"{fp}.bytes", "B", "precopy",
                  b.m(f"{pc}.bytes"))
    if len(labels) > 1:
        lo, hi = b.m(f"migrate.{labels[0]}.farpage.total_ms"), \
            b.m(f"migrate.{labels[-1]}.farpage.total_ms")
        b.put("migrate.ratios.farpage_total_largest_vs_smallest",
              round(hi / lo, 2) if lo and hi is not None else None)
    b.put("migrate.sizes", labels)
    b.put("migrate.rate_MiBps", rate)
    scale_load(b, "migrate", load0)
    b.put("migrate.status", "measured")
