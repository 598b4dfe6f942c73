# SPDX-License-Identifier: MIT
"""The results: the table on standard output, the latency plot, and the
current results table of docs/bench.md (farpage-bench report)."""

import os
import time

from .secure import secure_table
from .util import cdf, fmt, note_text, plural, to_iec


def table(d):
    m, rt = d.m, d.row_text
    pl = d.floor_pl
    stream = m("floors.stream_MBps")
    t = d.header() + [
        f"region: {d.size_h}, {d.pages} pages ({d.remote} remote, {d.local} "
        f"local), every page verified; {d.runs} run{plural(d.runs)} of each figure",
        f"placement: farpage {d.placement_fp};",
        f"           its floors: placement '{pl}' (same = both ends on CPU 0, cross = CPU "
        "0 and 1, none = unpinned)",
        "",
        f"{'figure':<44} {'median':>12}  {'spread (min..max)':<21} {'floor':<30} ratio",
        "-" * 118,
        rt("memcpy 4 KiB warm, p50", "floors.memcpy.warm.p50_us", "us"),
        rt("memcpy 4 KiB cold, p50", "floors.memcpy.cold.p50_us", "us"),
        rt("memcpy 4 KiB cold, back to back", "floors.memcpy.cold.MBps", "MB/s"),
    ]
    for p in d.placements:
        t.append(rt(f"uffd floor p50 ({p})", f"floors.uffd.{p}.p50_us", "us"))
        t.append(rt(f"uffd floor p99 ({p})", f"floors.uffd.{p}.p99_us", "us"))
    if d.net_addr:
        for p in d.placements:
            t.append(rt(f"TCP 16 B->4 KiB RTT p50 ({p})", f"floors.rtt.{p}.p50_us", "us"))
            t.append(rt(f"TCP 16 B->4 KiB RTT p99 ({p})", f"floors.rtt.{p}.p99_us", "us"))
        for p in d.placements:
            t.append(rt(f"TCP stream, one connection ({p})", f"floors.stream.{p}.MBps",
                        "MB/s"))
    else:
        t.append(note_text("TCP floors", "n/a (attached cluster, no --net-server)"))
    t.append("")
    for o in ("seq", "rand"):
        t.append(rt(f"remote fault {o} p50", f"remote.{o}.p50_us", "us", "uffd+RTT p50",
                    m("floors.fault_p50_us")))
        if pl != "same":
            t.append(rt(f"remote fault {o} p50 vs same-CPU floors", f"remote.{o}.p50_us",
                        "us", "uffd+RTT p50 (same)", m("floors.best_fault_p50_us")))
        t.append(rt(f"remote fault {o} p90", f"remote.{o}.p90_us", "us"))
        t.append(rt(f"remote fault {o} p99", f"remote.{o}.p99_us", "us", "uffd+RTT p99",
                    m("floors.fault_p99_us")))
        t.append(rt(f"remote fault {o} p99.9", f"remote.{o}.p999_us", "us"))
        t.append(rt(f"remote fault {o} max", f"remote.{o}.max_us", "us"))

    def q(v):
        return "?" if v is None else str(v)

    t.append(note_text("uffd faults the agent served (seq / rand)",
                       f"{q(m('remote.seq.agent_faults'))} / {q(m('remote.rand.agent_faults'))}"
                       f" for {d.remote} remote pages (fewer: read ahead)"))
    t.append(rt("local page, first touch p50", "local.first.p50_us", "us"))
    t.append(rt("local page, first touch p99", "local.first.p99_us", "us"))
    t.append(rt("local page, warm read p50", "local.warm.p50_us", "us"))
    t.append("")
    for o in ("seq", "rand"):
        for n in (1, 2, 4):
            t.append(rt(f"fault-in {o}, {n} thread{plural(n)}", f"fault_in.{o}.t{n}_MBps",
                        "MB/s", "stream", stream))
    t.append(rt("fault-in seq, 1 thread vs serial bound", "fault_in.seq.t1_MBps", "MB/s",
                "4K/(uffd+RTT)", m("floors.serial_MBps")))
    t.append(rt("fault-in rand, 4 threads vs 1 thread", "fault_in.rand.t4_MBps", "MB/s",
                "rand 1 thread", m("fault_in.rand.t1_MBps")))
    ra = d.a.readahead_pages
    if d.ra_note == "measured":
        for o in ("seq", "rand"):
            for n in (1, 4):
                t.append(rt(f"read-ahead {ra}: fault-in {o}, {n} thr",
                            f"readahead.on.fault_in.{o}.t{n}_MBps", "MB/s", "read-ahead off",
                            m(f"readahead.off.fault_in.{o}.t{n}_MBps")))
            t.append(rt(f"read-ahead {ra}: remote {o} p50", f"readahead.on.remote.{o}.p50_us",
                        "us", "read-ahead off", m(f"readahead.off.remote.{o}.p50_us")))
    else:
        t.append(note_text("read-ahead", d.ra_note))
    if d.pf_note == "measured":
        t.append(rt("prefetch: idle fill of all remote pages", "prefetch.fill.MBps", "MB/s",
                    "stream", stream))
        t.append(rt("prefetch: then first touch p50", "prefetch.fill.touch_p50_us", "us"))
        for o in ("seq", "rand"):
            for n in (1, 4):
                t.append(rt(f"prefetch: fault-in {o}, {n} thr",
                            f"prefetch.fault_in.{o}.t{n}_MBps", "MB/s", "without",
                            m(f"fault_in.{o}.t{n}_MBps")))
            t.append(rt(f"prefetch: remote {o} p50", f"prefetch.remote.{o}.p50_us", "us",
                        "without", m(f"remote.{o}.p50_us")))
    else:
        t.append(note_text("background prefetch", d.pf_note))
    t.append("")
    t += farmem_table(d)
    if d.more_rows:
        t += [""] + d.more_rows
    t.append("")
    t += secure_table(d)
    t += ["", f"JSON: {d.json_out}"]
    return t


def farmem_table(d):
    m, rt = d.m, d.row_text
    stream = m("floors.stream_MBps")
    t = [
        rt("fault-in seq, 1 thread vs stream", "fault_in.seq.t1_MBps", "MB/s",
           "stream (target 0.6x)", stream),
        rt("fault-in seq, 4 threads vs stream", "fault_in.seq.t4_MBps", "MB/s",
           "stream (target 0.6x)", stream),
        rt("prefetch: fault-in rand, 1 thr vs stream", "prefetch.fault_in.rand.t1_MBps",
           "MB/s", "stream (target 0.4x)", stream),
        rt("prefetch: fault-in rand, 4 thr vs stream", "prefetch.fault_in.rand.t4_MBps",
           "MB/s", "stream (target 0.4x)", stream),
        note_text("  (faults served by)",
                  f"{d.main_fault_mode} mode: host A's agent at its defaults"),
    ]
    if (d.fm_ab_note or "measured") == "measured" and d.fm_note == "measured":
        for o in ("seq", "rand"):
            t.append(rt(f"fault path A/B: {o}, 1 thr, continue",
                        f"farmem.ab.continue.{o}_MBps", "MB/s", "copy (--fault-mode copy)",
                        m(f"farmem.ab.copy.{o}_MBps")))
    elif d.fm_note == "measured":
        t.append(note_text("fault path A/B", d.fm_ab_note))
    if d.fm_note != "measured":
        t.append(note_text("far memory", d.fm_note))
        return t

    def cell(key, dec=None):
        v = m(key)
        if v is None:
            return "n/a"
        return f"{v:.{dec}f}" if dec is not None else fmt(v)

    runs = d.runs
    t += [
        "",
        f"far memory: host A's cache {to_iec(d.fm_cache_bytes)}; regions all host B's: "
        "r2x = 2x, r4x = 4x the cache; ceiling.r4x: the cache as large as r4x;",
        f"            {d.a.farmem_secs} s of touches per workload after a warm-up (the "
        f"cache full); medians of {runs} run{plural(runs)}, spreads in the JSON;",
        "            hit ratio = 1 - misses / touches (misses: faults that fetched); wb = "
        "written home during the touches",
        f"{'workload':<38} {'touches/s':>11} {'hit ratio':>9} {'p50 us':>9} {'p99 us':>9} "
        f"{'p99.9 us':>9} {'wb MB/s':>9} {'flush s':>9}",
        "-" * 118,
    ]
    for s in ("r2x", "r4x", "ceiling.r4x"):
        for dist in ("uniform", "zipf"):
            for w in (0, 50):
                for n in (1, 4):
                    k = f"farmem.{s}.{dist}.w{w}.t{n}"
                    if m(f"{k}.hit_ratio") is None:
                        continue
                    name = f"{s} {dist}, {w} % writes, {n} thr"
                    t.append(f"{name:<38} {cell(k + '.touches_per_s', 0):>11} "
                             f"{cell(k + '.hit_ratio', 3):>9} {cell(k + '.p50_us'):>9} "
                             f"{cell(k + '.p99_us'):>9} {cell(k + '.p999_us'):>9} "
                             f"{cell(k + '.wb_MBps'):>9} {cell(k + '.flush_secs', 3):>9}")
    t.append("")
    for w in (0, 50):
        k = "w50." if w == 50 else ""
        c, f = f"farmem.policy.clock.{k}", f"farmem.policy.fifo.{k}"
        if m(c + "hit_ratio") is None and m(f + "hit_ratio") is None:
            continue
        t.append(note_text(
            f"policy: r4x zipf, {w} % writes, 1 thr, hit ratio",
            f"clock {cell(c + 'hit_ratio', 3)}, fifo {cell(f + 'hit_ratio', 3)} (touches/s "
            f"clock {cell(c + 'touches_per_s', 0)}, fifo {cell(f + 'touches_per_s', 0)}; "
            f"minor re-faults clock {cell(c + 'hits', 0)}, fifo {cell(f + 'hits', 0)})"))
    if d.fm_pol_note != "measured":
        t.append(note_text("  (policies)", d.fm_pol_note))
    return t


def pyplot(d):
    """matplotlib's pyplot on the Agg backend, or None (said)."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        d.say("matplotlib not installed (python3-matplotlib): no plot")
        return None
    return plt


def legend_outside(ax):
    """The legend right of the axes, where it hides no curve or bar."""
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1), borderaxespad=0,
              framealpha=1)


def save(d, plt, fig, out):
    """Writes @fig to @out as PNG (its legend included); True if it did."""
    try:
        fig.savefig(out, format="png", bbox_inches="tight")
    except (OSError, ValueError, RuntimeError) as e:
        d.say(f"matplotlib failed (no plot {out}): {e}")
        return False
    finally:
        plt.close(fig)
    d.say(f"plot: {out}")
    return True


def fault_in_png(d):
    """The fault-in plot's file: beside the latency plot."""
    base, ext = os.path.splitext(d.png_out)
    if base.endswith("-latency"):
        base = base[:-len("-latency")]
    return f"{base}-fault-in{ext or '.png'}"


def plot_fault_in(d):
    """Fault-in MB/s by configuration (threads, order, read-ahead,
    prefetch, the fault path), bars against the TCP stream floor."""
    plt = pyplot(d)
    if not plt:
        return None
    m = d.m
    rows = []
    for label, key in (
            ("sequential", "fault_in.seq"), ("random", "fault_in.rand"),
            ("sequential, read-ahead off", "readahead.off.fault_in.seq"),
            ("random, read-ahead off", "readahead.off.fault_in.rand"),
            ("sequential, prefetch", "prefetch.fault_in.seq"),
            ("random, prefetch", "prefetch.fault_in.rand")):
        for t in (1, 2, 4):
            v = m(f"{key}.t{t}_MBps")
            if v is not None:
                rows.append((f"{label}, {t} thr", v, t))
    for path in ("continue", "copy"):
        for order in ("seq", "rand"):
            v = m(f"farmem.ab.{path}.{order}_MBps")
            if v is not None:
                rows.append((f"fault path {path}, {order}", v, 0))
    if not rows:
        d.say("no fault-in figures: no fault-in plot")
        return None
    colors = {0: "#7f7f7f", 1: "#1f77b4", 2: "#ff7f0e", 4: "#2ca02c"}
    out = fault_in_png(d)
    try:
        fig, ax = plt.subplots(figsize=(12, 0.4 * len(rows) + 2), dpi=100)
        ys = list(range(len(rows)))[::-1]
        seen = set()
        for y, (label, v, t) in zip(ys, rows):
            name = f"{t} thread{plural(t)}" if t else "1 thread (A/B)"
            ax.barh(y, v, color=colors[t],
                    label=None if name in seen else name)
            seen.add(name)
        stream = m("floors.stream_MBps")
        if stream:
            ax.axvline(stream, ls="--", color="#d62728",
                       label=f"TCP stream floor ({stream:.0f} MB/s)")
        ax.set_yticks(ys)
        ax.set_yticklabels([r[0] for r in rows])
        ax.set_xlabel("fault-in rate (MB/s of 4 KiB pages)")
        ax.set_title(f"farpage fault-in by configuration: {d.size_h} region, "
                     f"{d.transport_used}, {d.ncpu} CPUs, {d.runs} runs "
                     f"(medians), {time.strftime('%Y-%m-%d', time.gmtime())}")
        ax.grid(True, axis="x", alpha=0.4)
        legend_outside(ax)
    except (ValueError, RuntimeError) as e:
        d.say(f"matplotlib failed (no fault-in plot): {e}")
        return None
    return out if save(d, plt, fig, out) else None


def programs_png(d):
    """The programs plot's file: beside the latency plot."""
    base, ext = os.path.splitext(d.png_out)
    if base.endswith("-latency"):
        base = base[:-len("-latency")]
    return f"{base}-programs{ext or '.png'}"


def plot_programs(d):
    """Programs on far memory: throughput as a fraction of all-local
    throughput against the share of the data the cache holds, one line per
    program, workload and key choice (bench/programs.sh)."""
    from .programs import PCTS, PROGS, TARGET_P99_US, TARGET_PCT, TARGET_RATIO, WHAT, WORKLOADS
    lines = []
    for prog in PROGS:
        for t, k in WORKLOADS:
            ys = [d.m(f"programs.{prog}.{t}.{k}.{pct}.ratio") for pct in PCTS]
            if any(y is not None for y in ys):
                lines.append((prog, t, k, ys))
    if not lines:
        return None
    plt = pyplot(d)
    if not plt:
        return None
    colors = {("get", "uniform"): "#1f77b4", ("set", "uniform"): "#ff7f0e",
              ("get", "hot"): "#2ca02c", ("set", "hot"): "#9467bd", ("mix", "hot"): "#d62728"}
    out = programs_png(d)
    try:
        fig, ax = plt.subplots(figsize=(12, 7), dpi=100)
        for prog, t, k, ys in lines:
            pts = [(x, y) for x, y in zip(PCTS, ys) if y is not None]
            ax.plot([p[0] for p in pts], [p[1] for p in pts],
                    ls="-" if prog == "redis" else "--",
                    marker="o" if prog == "redis" else "s",
                    lw=2.5 if (t, k) == ("mix", "hot") else 1.5,
                    color=colors[(t, k)], label=f"{prog}: {WHAT[(t, k)]}")
        ax.plot([TARGET_PCT], [TARGET_RATIO], marker="*", ms=16, ls="none", color="black",
                label=f"target: at {TARGET_PCT} % local, {TARGET_RATIO} of all local "
                      f"(hot-set mix, p99 < {TARGET_P99_US / 1000:g} ms)")
        ax.axhline(1.0, ls=":", color="#7f7f7f")
        ax.set_xticks(list(PCTS))
        ax.set_xlim(PCTS[0] + 5, PCTS[-1] - 5)  # from all of the data local to a quarter
        ax.set_ylim(bottom=0)
        ax.set_xlabel("host A's cache: % of the program's data (the rest is remote)")
        ax.set_ylabel("throughput / all-local throughput (farpage run --local-only)")
        data = d.flat.get("programs.values_bytes")
        ax.set_title(f"redis-server and memcached under farpage run: "
                     f"{to_iec(data) if data else '?'} of values, 4 clients, "
                     f"{d.transport_used}, {d.ncpu} CPUs, "
                     f"{time.strftime('%Y-%m-%d', time.gmtime())}")
        ax.grid(True, alpha=0.4)
        legend_outside(ax)
    except (ValueError, RuntimeError) as e:
        d.say(f"matplotlib failed (no programs plot): {e}")
        return None
    return out if save(d, plt, fig, out) else None


def plot(d):
    """Latency CDFs, log x (matplotlib)."""
    plt = pyplot(d)
    if not plt:
        return False
    pl = d.floor_pl
    series = [
        ("fault-seq", "farpage remote fault, seq", dict(lw=2.5, color="#1f77b4")),
        ("fault-rand", "farpage remote fault, rand", dict(lw=2.5, color="#d62728")),
        (f"uffd-{pl}", f"uffd floor ({pl})", dict(lw=2, ls="--", color="#2ca02c")),
        (f"rtt-{pl}", f"TCP 16 B->4 KiB RTT floor ({pl})",
         dict(lw=2, ls="--", color="#ff7f0e")),
    ]
    if pl != "same":
        series += [("uffd-same", "uffd floor (same CPU)", dict(lw=1.5, ls=":", color="#17becf")),
                   ("rtt-same", "TCP RTT floor (same CPU)",
                    dict(lw=1.5, ls=":", color="#bcbd22"))]
    try:
        fig, ax = plt.subplots(figsize=(12, 7.5), dpi=100)
        drawn = 0
        for name, title, style in series:
            xs, ys = cdf(f"{d.lat}/{name}.lat")
            if xs:
                ax.plot(xs, ys, label=title, **style)
                drawn += 1
        placement = "all on CPU 0" if d.a.pin == "cpu0" else "unpinned"
        ax.set_title(f"farpage remote fault latency vs floors: {d.size_h} region, "
                     f"{d.transport_used}, farpage {placement}, {d.ncpu} CPUs, "
                     f"{d.runs} runs, {time.strftime('%Y-%m-%d', time.gmtime())}")
        if drawn:
            ax.set_xscale("log")
            legend_outside(ax)
        ax.set_xlabel("latency per fault / round trip (µs, log scale)")
        ax.set_ylabel("fraction of samples <= x")
        ax.set_ylim(0, 1.001)
        ax.set_yticks([i / 10 for i in range(11)])
        ax.grid(True, which="both", alpha=0.4)
    except (ValueError, RuntimeError) as e:
        d.say(f"matplotlib failed (no plot): {e}")
        return False
    return save(d, plt, fig, d.png_out)


# ---- the current results table of docs/bench.md (farpage-bench report) ----

BEGIN = "<!-- bench-results:begin -->"
END = "<!-- bench-results:end -->"

# (figure, key, unit, floor text, floor key): the rows, where measured.
DOC_ROWS = [
    ("memcpy 4 KiB cold, p50", "floors.memcpy.cold.p50_us", "µs", "", ""),
    ("uffd floor p50", "floors.uffd_p50_us", "µs", "", ""),
    ("TCP 16 B → 4 KiB RTT p50", "floors.rtt_p50_us", "µs", "", ""),
    ("TCP stream, one connection", "floors.stream_MBps", "MB/s", "", ""),
    ("remote fault seq p50", "remote.seq.p50_us", "µs", "uffd + RTT p50",
     "floors.fault_p50_us"),
    ("remote fault rand p50", "remote.rand.p50_us", "µs", "uffd + RTT p50",
     "floors.fault_p50_us"),
    ("remote fault rand p99", "remote.rand.p99_us", "µs", "uffd + RTT p99",
     "floors.fault_p99_us"),
    ("local page, first touch p50", "local.first.p50_us", "µs", "", ""),
    ("fault-in seq, 1 thread", "fault_in.seq.t1_MBps", "MB/s", "stream", "floors.stream_MBps"),
    ("fault-in seq, 4 threads", "fault_in.seq.t4_MBps", "MB/s", "stream", "floors.stream_MBps"),
    ("fault-in rand, 1 thread", "fault_in.rand.t1_MBps", "MB/s", "stream", "floors.stream_MBps"),
    ("fault-in rand, 4 threads", "fault_in.rand.t4_MBps", "MB/s", "rand, 1 thread",
     "fault_in.rand.t1_MBps"),
    ("prefetch: idle fill", "prefetch.fill.MBps", "MB/s", "stream", "floors.stream_MBps"),
    ("prefetch: fault-in rand, 1 thread", "prefetch.fault_in.rand.t1_MBps", "MB/s",
     "without", "fault_in.rand.t1_MBps"),
    ("far memory r4x zipf, 50 % writes, 4 thr: touches/s",
     "farmem.r4x.zipf.w50.t4.touches_per_s", "/s", "", ""),
    ("far memory r4x zipf, 50 % writes, 4 thr: hit ratio",
     "farmem.r4x.zipf.w50.t4.hit_ratio", "", "ceiling (cache = region)",
     "farmem.ceiling.r4x.zipf.w50.t4.hit_ratio"),
    ("fault path A/B: seq, continue", "farmem.ab.continue.seq_MBps", "MB/s", "copy",
     "farmem.ab.copy.seq_MBps"),
    ("fault path A/B: rand, continue", "farmem.ab.continue.rand_MBps", "MB/s", "copy",
     "farmem.ab.copy.rand_MBps"),
    ("cache flush, 1 GiB mapping", "scale.g1.flush_us", "µs", "", ""),
    ("cache unmap, 16 GiB mapping", "scale.g16.unmap_us", "µs", "", ""),
    ("map 1G: map", "scale.map.1G.map_ms", "ms", "", ""),
    ("fault-in, 1 mapping, 4 thr, 2 loops", "scale.loops.2.m1t4.MBps", "MB/s", "1 loop",
     "scale.loops.1.m1t4.MBps"),
    ("dirty scan, 50 % writes, 1 thr", "scale.dirty.scan.touches_per_s", "touches/s",
     "wp-fault", "scale.dirty.wp-fault.touches_per_s"),
    ("replica write-back, 2 replicas", "replica.wb.r2.MBps", "MB/s", "1 replica",
     "replica.wb.r1.MBps"),
    ("replica read fault p99, 2 replicas", "replica.read.r2.p99_us", "µs", "1 replica",
     "replica.read.r1.p99_us"),
    ("failover: longest stall", "replica.failover.stall_ms", "ms", "target",
     "replica.failover.target_ms"),
    ("rebuild of the lost replica", "replica.rebuild.MBps", "MB/s", "stream",
     "replica.rebuild.stream_MBps"),
    ("redis, hot-set 90/10 get/set, 50 % local", "programs.redis.mix.hot.50.ops", "ops/s",
     "all local", "programs.redis.mix.hot.local.ops"),
    ("redis, hot-set 90/10 get/set, 50 % local, p99", "programs.redis.mix.hot.50.p99_us",
     "µs", "target", "programs.targets.p99_us"),
    ("memcached, hot-set 90/10 get/set, 50 % local", "programs.memcached.mix.hot.50.ops",
     "ops/s", "all local", "programs.memcached.mix.hot.local.ops"),
    ("memcached, hot-set 90/10 get/set, 50 % local, p99",
     "programs.memcached.mix.hot.50.p99_us", "µs", "target", "programs.targets.p99_us"),
    ("secure defaults: seq + prefetch", "secure.defaults.seqpf_MBps", "MB/s",
     "--insecure --fault-mode copy", "secure.copy.seqpf_MBps"),
    ("secure defaults: rand + prefetch", "secure.defaults.randpf_MBps", "MB/s",
     "--insecure --fault-mode copy", "secure.copy.randpf_MBps"),
    ("secure defaults: rand demand fault p50", "secure.defaults.rand_p50_us", "µs",
     "--insecure --fault-mode copy", "secure.copy.rand_p50_us"),
]


def get(j, key):
    """JSON J's dotted KEY, or None."""
    v = j
    for p in key.split("."):
        if not isinstance(v, dict) or p not in v:
            return None
        v = v[p]
    return v


def commit_of(src):
    """The source tree's commit (short), '+' if it has changes; '' if unknown."""
    import subprocess
    try:
        r = subprocess.run(["git", "-C", src, "rev-parse", "--short=12", "HEAD"],
                           stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        if r.returncode != 0:
            return ""
        st = subprocess.run(["git", "-C", src, "status", "--porcelain",
                             "--untracked-files=no"],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        return r.stdout.strip() + ("+" if st.stdout.strip() else "")
    except OSError:
        return ""


def mem_total():
    """This machine's memory, e.g. '24 GiB' ('' if unknown)."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return f"{int(line.split()[1]) / (1 << 20):.1f} GiB"
    except (OSError, ValueError, IndexError):
        pass
    return ""


def doc_table(j, commit, mem):
    """The markdown block: the run's header and one row per figure measured."""
    def num(v):
        return fmt(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else "n/a"

    loads = [get(j, "machine.loadavg_start"), get(j, "machine.loadavg_end")]
    parts = {k: get(j, f"{k}.loadavg") for k in ("scale.map", "scale.loops", "scale.dirty",
                                                    "replica", "programs")}
    lines = [
        BEGIN,
        "<!-- made by `farpage-bench report --update-docs`: edit the run, not this block -->",
        "",
        f"**Run:** {get(j, 'timestamp')}, commit `{commit or 'unknown'}`; "
        f"**machine:** {get(j, 'placement.cpus')} CPUs ({get(j, 'machine.cpu_model')}), "
        f"{mem or 'memory unknown'}, kernel {get(j, 'machine.kernel')}; "
        f"**load average** (1, 5, 15 min) at the start {loads[0]}, at the end {loads[1]}"
        + "".join(f"; {k} part {v[0]} → {v[1]}" for k, v in parts.items()
                  if isinstance(v, list) and len(v) == 2)
        + ".",
        "",
        f"Transport {get(j, 'transport')}, {get(j, 'placement.hosts')}; region "
        f"{get(j, 'size')}, {get(j, 'runs')} run(s) of every figure; farpage "
        f"{get(j, 'placement.farpage')}, floors of placement "
        f"`{get(j, 'floors.placement')}`; far memory {get(j, 'farmem.mode') or 'off'} "
        f"({get(j, 'farmem.status')}); scale parts: map {get(j, 'scale.map.status')}, loops "
        f"{get(j, 'scale.loops.status')}, dirty {get(j, 'scale.dirty.status')}; replicas "
        f"{get(j, 'replica.status')}; programs {get(j, 'programs.status') or 'not run'}; "
        f"security {get(j, 'secure.status')}.",
        "",
        "| figure | median | spread (min..max) | floor | ratio |",
        "|---|---|---|---|---|",
    ]
    for name, key, unit, ftext, fkey in DOC_ROWS:
        v = get(j, key)
        if not isinstance(v, (int, float)) or isinstance(v, bool):
            continue
        sp = get(j, f"{key}_spread")
        spread = f"{num(sp[0])}..{num(sp[1])}" if isinstance(sp, list) and len(sp) == 2 else ""
        fv = get(j, fkey) if fkey else None
        floor, ratio = "", ""
        if ftext and isinstance(fv, (int, float)) and not isinstance(fv, bool):
            floor = f"{ftext} {num(fv)} {unit}".strip()
            if fv:
                r = v / fv
                ratio = (f"{r:.3f}" if r < 0.095 else f"{r:.2f}") + "×"
        elif ftext:
            floor = f"{ftext} n/a"
        lines.append(f"| {name} | {f'{num(v)} {unit}'.strip()} | {spread} | {floor} | {ratio} |")
    lines += ["", END]
    return "\n".join(lines)


def report_main(a, here):
    """farpage-bench report: the table of a run's JSON, printed or put into
    a document between its markers. Returns the exit status."""
    import json
    import sys
    try:
        with open(a.json) as f:
            j = json.load(f)
    except (OSError, ValueError) as e:
        print(f"farpage-bench report: {a.json}: {e}", file=sys.stderr)
        return 1
    if get(j, "error"):
        print(f"farpage-bench report: {a.json} is of a broken run: {get(j, 'error')}",
              file=sys.stderr)
        return 1
    # The source tree: --src, $FARPAGE_SRC, the tree this copy is in, or the
    # one the build dir it is in was configured from.
    src = a.src or os.environ.get("FARPAGE_SRC", "")
    up = os.path.dirname(here)
    if not src and os.path.exists(f"{up}/bench/bigmap.sh"):
        src = up
    if not src:
        try:
            with open(f"{up}/CMakeCache.txt", errors="replace") as f:
                for line in f:
                    if line.startswith("CMAKE_HOME_DIRECTORY:"):
                        src = line.split("=", 1)[1].strip()
        except OSError:
            pass
    block = doc_table(j, commit_of(src) if src else "", mem_total())
    if not a.update_docs:
        print(block)
        return 0
    try:
        with open(a.update_docs) as f:
            doc = f.read()
    except OSError as e:
        print(f"farpage-bench report: {e}", file=sys.stderr)
        return 1
    # The markers on lines of their own (the text may name them too).
    b, e = doc.find(f"\n{BEGIN}\n"), doc.find(f"\n{END}\n")
    if b >= 0:
        b += 1
        e = doc.find(f"\n{END}\n", b)
    if b < 0 or e < 0:
        print(f"farpage-bench report: {a.update_docs} has no {BEGIN} ... {END} block "
              "(each marker a line of its own)",
              file=sys.stderr)
        return 1
    doc = doc[:b] + block + doc[e + 1 + len(END):]
    with open(a.update_docs + ".tmp", "w") as f:
        f.write(doc)
    os.replace(a.update_docs + ".tmp", a.update_docs)
    print(f"farpage-bench report: {a.update_docs} updated", file=sys.stderr)
    return 0
