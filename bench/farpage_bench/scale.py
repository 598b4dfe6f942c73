# SPDX-License-Identifier: MIT
"""Scale: the cache's whole-mapping steps (bench_scale), big maps, fault
loops and dirty tracking (bench/bigmap.sh, fault_loops.sh, dirty_ab.sh).

Each script builds its own loopback cluster with tests/lib.sh (a
coordinator and agents of its own, ended when it ends), so they need the
source tree."""

import json
import os
import subprocess

from .results import kv_to_jsonl, records, stat3, vals
from .util import Die, fmt_n, from_iec, loadavg, number, tidy


def scale(b):
    """The cache's whole-mapping steps against region size: the same part
    (the region size, at most 256 MiB) written in cache mappings of 1, 4
    and 16 GiB: flush, region deleted, unmap."""
    mib = min(b.size_bytes >> 20, 256)
    b.say(f"scale: flush, stale, unmap of 1, 4, 16 GiB cache mappings, {mib} MiB written")
    rc, out = b.run_prog("scale", "bench_scale", "--runs", b.runs,
                         "--sizes", "1,4,16", "--touched", f"{mib}M")
    if rc != 0:
        raise Die(f"bench_scale: {b.why(out, 3)}")
    b.put("scale.touched_mib", mib)
    for g in (1, 4, 16):
        for op in ("flush", "stale", "unmap"):
            b.fig(f"scale.g{g}.{op}_us", out, "scale", f"{op}_us", region_gib=g)


def script_run(b, tag, script, *args):
    """bench/SCRIPT ARGS from the source tree to its end, stdout in
    TMP/TAG.out and stderr in TMP/TAG.err: the stdout's path; dies if it fails."""
    out, err = f"{b.tmp}/{tag}.out", f"{b.tmp}/{tag}.err"
    path = f"{b.a.src}/bench/{script}"
    env = dict(os.environ, FARPAGE_BIN=b.a.bin)
    # The test suite's knobs for every agent of tests/lib.sh (copy mode,
    # write-protect faults, fault loops) are not this bench's: its scripts
    # measure the defaults, or set their own.
    for k in ("FP_FAULT_MODE", "FP_DIRTY_TRACKING", "FP_FAULT_THREADS"):
        env.pop(k, None)
    with open(out, "wb") as fo, open(err, "wb") as fe:
        p = subprocess.Popen(["bash", path, "--bin", b.a.bin, *map(str, args)], stdout=fo,
                             stderr=fe, stdin=subprocess.DEVNULL, env=env)
        try:
            rc = p.wait()
        except BaseException:
            p.terminate()  # its tests/lib.sh trap ends its cluster
            p.wait()
            raise
    b.vcat(out)
    if rc == 77:
        return None
    if rc != 0:
        why = fail_line(err) or b.tail(err, 3) or b.tail(out, 3)
        raise Die(f"{script} failed ({rc}): {why}")
    return out


def fail_line(path):
    """The first 'FAIL: ' line tests/lib.sh wrote to PATH (before the logs
    it dumps after it), or ''."""
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if "FAIL: " in line:
                    return line.strip()
    except OSError:
        pass
    return ""


def scale_skip(b, opt, key):
    """True (and KEY.status says why) if --OPT is off or the run is attached."""
    v = getattr(b.a, opt.replace("-", "_"))
    if v == "off":
        b.put(f"{key}.status", f"not measured (--{opt} off)")
        return True
    if b.mode == "attach":
        b.put(f"{key}.status", "n/a (attached cluster: the script builds its own)")
        return True
    if not b.a.src:
        b.put(f"{key}.status", "n/a (no source tree: set FARPAGE_SRC)")
        return True
    return False


def scale_load(b, key, start):
    """KEY.loadavg: the load average when the part started and ended (the
    machine may be shared)."""
    b.put(f"{key}.loadavg", [start, loadavg()])


def out_err(b, tag):
    return f"{b.tmp}/{tag}.err"


def scale_map(b):
    """Map, flush and unmap time by region size (bench/bigmap.sh --json):
    scale.map.SIZE.{map_ms,write_ms,flush_ms,unmap_ms,map_ro_ms,read_ms,
    unmap_ro_ms,write_us_per_page} (the median over the rounds) and
    .guest_hwm_kb, .agent_hwm_kb (the most)."""
    if scale_skip(b, "scale-map", "scale.map"):
        return
    load0 = loadavg()
    quick = b.a.scale_map == "quick"
    sizes = b.a.scale_map_sizes or ("1G" if quick else "1G 4G 16G 64G 256G")
    rounds, pages = (1, 64) if quick else (b.runs, 1024)
    b.say(f"scale: map, flush, unmap of {sizes} ({rounds} rounds, {pages} pages written)")
    out = script_run(b, "bigmap", "bigmap.sh", "--sizes", sizes, "--rounds", rounds,
                     "--pages", pages, "--json")
    if out is None:
        b.put("scale.map.status", f"n/a (bigmap.sh: {b.tail(out_err(b, 'bigmap'), 1)})")
        return
    try:
        with open(out) as f:
            res = json.load(f)["scale"]["map"]
    except (OSError, ValueError, KeyError, TypeError):
        raise Die(f"bigmap.sh --json: no scale.map in {b.tail(out, 2)}")
    for s in sizes.split():
        for k, v in sorted(res.get(s, {}).items()):
            b.put(f"scale.map.{s}.{k}", v if isinstance(v, (int, float)) else None)
        r = res.get(s, {})
        b.note(f"map {s}: map / flush / unmap (ms)",
               f"{fmt_n(r.get('map_ms'))} / {fmt_n(r.get('flush_ms'))} / "
               f"{fmt_n(r.get('unmap_ms'))}  read-only {fmt_n(r.get('map_ro_ms'))} / "
               f"{fmt_n(r.get('unmap_ro_ms'))}  (median of {rounds})")
        b.note(f"map {s}: per page written (a fault and its fetch)",
               f"{fmt_n(r.get('write_us_per_page'))} us")
    b.put("scale.map.sizes", sizes.split())
    b.put("scale.map.rounds", rounds)
    b.put("scale.map.pages", pages)
    scale_load(b, "scale.map", load0)
    b.put("scale.map.status", "measured")


def scale_loops(b):
    """Fault-in with 1 and 2 fault loops (bench/fault_loops.sh):
    scale.loops.L.mMtT.MBps, best of the runs (M mappings, T threads each)."""
    if scale_skip(b, "scale-loops", "scale.loops"):
        return
    load0 = loadavg()
    quick = b.a.scale_loops == "quick"
    size, runs = ("16M", 1) if quick else ("128M", b.runs)
    b.say(f"scale: fault-in with 1 and 2 fault loops ({size} regions, best of {runs})")
    out = script_run(b, "loops", "fault_loops.sh", "--size", size, "--loops", "1 2",
                     "--runs", runs)
    if out is None:
        b.put("scale.loops.status", f"n/a (fault_loops.sh: {b.tail(out_err(b, 'loops'), 1)})")
        return
    out = kv_to_jsonl(out, f"{b.tmp}/loops.jsonl")
    for w, kv in records(out):
        if w != "fault_loops":
            continue
        try:
            key = f"scale.loops.{int(kv['loops'])}.m{int(kv['mappings'])}t{int(kv['threads'])}"
        except (KeyError, ValueError):
            continue
        b.put(f"{key}.MBps", number(kv.get("MBps", "")))
    for m, t in ((1, 1), (1, 2), (1, 4), (2, 1), (2, 2)):
        f = [b.flat.get(f"scale.loops.{n}.m{m}t{t}.MBps") for n in (1, 2)]
        b.note(f"fault-in {m} mapping{'s' if m > 1 else ''}, {t} thr, MB/s",
               f"1 loop {fmt_n(f[0])}, 2 loops {fmt_n(f[1])} (best of {runs})")
    b.put("scale.loops.region_bytes", from_iec(size))
    b.put("scale.loops.runs", runs)
    scale_load(b, "scale.loops", load0)
    b.put("scale.loops.status", "measured")


def scale_dirty(b):
    """Dirty tracking A/B (bench/dirty_ab.sh): write-protect faults against
    WP_ASYNC + PAGEMAP_SCAN, scale.dirty.MODE.wW.tT.{touches_per_s,
    wp_faults_per_s,p50_us,p99_us} and scale.dirty.MODE.touches_per_s
    (50 % writes, 1 thread)."""
    if scale_skip(b, "scale-dirty", "scale.dirty"):
        return
    load0 = loadavg()
    quick = b.a.scale_dirty == "quick"
    if quick:
        size, runs, secs, wpct, thr = "16M", 1, "0.2", "50", "1"
    else:
        size, runs, secs, wpct, thr = "128M", b.runs, "1", "0,50", "1,4"
    b.say(f"scale: dirty tracking wp-fault against scan ({size}, {wpct} % writes, "
          f"{thr} threads, {runs} runs)")
    out = script_run(b, "dirty", "dirty_ab.sh", "--size", size, "--runs", runs,
                     "--secs", secs, "--write-pct", wpct, "--threads", thr)
    if out is None:
        b.put("scale.dirty.status", f"n/a (dirty_ab.sh: {b.tail(out_err(b, 'dirty'), 1)})")
        return
    modes = ("wp-fault", "scan")
    with open(out, errors="replace") as f:
        lines = f.readlines()
    for mode in modes:
        mo = f"{b.tmp}/dirty-{mode}.out"
        with open(mo, "w") as f:
            f.writelines(ln[len(mode) + 1:] for ln in lines if ln.startswith(mode + " "))
        mo = kv_to_jsonl(mo, f"{b.tmp}/dirty-{mode}.jsonl")
        for w in wpct.split(","):
            for t in thr.split(","):
                k = f"scale.dirty.{mode}.w{w}.t{t}"
                filt = {"write_pct": w, "threads": t}
                for fld in ("touches_per_s", "p50_us", "p99_us"):
                    b.fig(f"{k}.{fld}", mo, "farmem", fld, **filt)
                wp = [x / s for x, s in zip(
                    map(number, vals(mo, "farmem", "wp_faults", **filt)),
                    map(number, vals(mo, "farmem", "secs", **filt)))
                    if x is not None and s]
                b.set_fig(f"{k}.wp_faults_per_s", stat3([str(tidy(round(x, 1))) for x in wp]))
        k = f"scale.dirty.{mode}.w50.t1"
        b.put(f"scale.dirty.{mode}.touches_per_s", b.m(f"{k}.touches_per_s"))
        b.put(f"scale.dirty.{mode}.wp_faults_per_s", b.m(f"{k}.wp_faults_per_s"))
        b.row(f"dirty {mode}, 50 % writes, 1 thr", f"{k}.touches_per_s", "touches/s")
        b.row(f"dirty {mode}, wp faults/s", f"{k}.wp_faults_per_s", "/s")
    b.put("scale.dirty.region_bytes", from_iec(size))
    b.put("scale.dirty.secs", number(secs))
    scale_load(b, "scale.dirty", load0)
    b.put("scale.dirty.status", "measured")
