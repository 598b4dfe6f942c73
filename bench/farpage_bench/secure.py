# SPDX-License-Identifier: MIT
"""What security and the cache cost (--secure): four configurations, a
fresh cluster each, interleaved run by run; the parts alone (bench_seal,
bench_land)."""

import json
import os

from .results import stat3, vals
from .util import Die, fmt, note_text, number, plural, tail_text, tidy, to_iec

SEC_CFGS = ("defaults", "noenc", "insecure", "copy")
SEC_TITLE = {"defaults": "defaults", "noenc": "--page-encryption off",
             "insecure": "--insecure", "copy": "--insecure --fault-mode copy"}
SEC_COST_KEYS = ("wall_us a_cpu_us a_user_us a_sys_us b_cpu_us b_user_us b_sys_us g_cpu_us "
                 "busy_cpus m_cpu_us ceiling_MBps").split()

SEC_LAND_WAYS = ("pwrite_continue", "copy_shmem", "copy_anon")


def proc_cpu(pid):
    """An agent's user and system clock ticks, and all its threads' run
    time in ns (schedstat: finer than the ticks)."""
    with open(f"/proc/{pid}/stat") as f:
        rest = f.read().rsplit(")", 1)[1].split()
    user, system = int(rest[11]), int(rest[12])
    run_ns = 0
    try:
        for t in os.listdir(f"/proc/{pid}/task"):
            try:
                with open(f"/proc/{pid}/task/{t}/schedstat") as f:
                    run_ns += int(f.read().split()[0])
            except (OSError, ValueError, IndexError):
                pass
    except OSError:
        pass
    return user, system, run_ns


def secure_parts(b):
    """The parts of a page's cost alone, on this host, in CPU time per
    4 KiB page: sealing and opening a record (bench_seal, encrypted, 4 KiB
    and 256 KiB bodies) and the kernel landing it each way (bench_land,
    runs of 1 and 64 pages). secure.parts.*; missing parts are left out."""
    b.say("secure: the parts alone (bench_seal, bench_land)")
    rc, out = b.run_prog("sec-seal", "bench_seal", "--runs", b.runs, "--bytes", "64M")
    if rc == 0:
        for ln, tag in ((4096, "4k"), (262144, "256k")):
            for k in ("seal", "open"):
                us = vals(out, "seal", f"{k}_us", mode="encrypt", len=ln)
                pages = ln // 4096
                s = stat3([str(float(v) * 1e3 / pages) for v in us if number(v) is not None])
                b.set_fig(f"secure.parts.{k}.r{tag}_ns", s)
    rc, out = b.run_prog("sec-land", "bench_land", "--runs", b.runs, "--pages", "16384")
    if rc == 0:
        for way in SEC_LAND_WAYS:
            for rp in (1, 64):
                b.fig(f"secure.parts.land.{way}.r{rp}_ns", out, "land", "ns_per_page",
                      way=way, run_pages=rp)


def secure_run(b):
    """A fresh cluster for each configuration (--insecure is the whole
    cluster's, coordinator included), its region all host B's. The rows are
    the runs of each configuration interleaved, so that a loaded machine
    slows them all alike."""
    c = b.c
    if b.mode == "attach":
        b.sec_note = "n/a (attached cluster: agents not ours to restart)"
        return
    sec_bytes = b.sec_bytes
    clk_tck = os.sysconf("SC_CLK_TCK")
    ncpu = os.cpu_count() or 1
    sec_mode = b.sec_mode
    gen = [0]
    flags_before = list(b.agent_flags)

    def cluster_stop():
        b.agents_stop()
        c.stop(c.coord_proc)

    def cluster(cfg):
        fl = []
        c.insecure = cfg in ("insecure", "copy")
        if cfg == "noenc":
            fl = ["--page-encryption", "off"]
        elif cfg == "copy":
            fl = ["--fault-mode", "copy"]
        cluster_stop()
        gen[0] += 1
        c.coord_spawn("hostA", f"{c.ip['hostA']}:0", f"{b.tmp}/coord-sec{gen[0]}")
        b.agents_start(*fl)
        node_b = c.node_id("hostB")
        if node_b is None:
            raise Die(f"secure ({cfg}): no node id for host B")
        owners = ",".join([str(node_b)] * (sec_bytes >> 21))
        rc, out = c.cli("hostA", "hostA", "region", "create", "sec", "--size", sec_bytes,
                        "--chunk-size", "2M", "--owners", owners)
        if rc != 0:
            raise Die(f"secure ({cfg}): region create: {out.strip()}")
        rc, out = c.cli("hostB", "hostB", "fill", "sec", "--seed", b.seed)
        if rc != 0:
            raise Die(f"secure ({cfg}): fill on host B: {tail_text(out, 2)}")
        sec_mode[cfg] = "cache" if b.agent_caches("hostA") else "copy"

    def sec_pass(cfg, name, *args):
        """One bench_fault pass (--runs 1) on "sec", appended to
        sec-CFG-PASS.out with a line of both agents' CPU time per remote
        page fetched: sec_cpu: pages=N wall_us=X a_cpu_us=X ... b_sys_us=X,
        the guest's (g_cpu_us), the CPUs busy meanwhile (busy_cpus), what a
        page cost the whole machine (m_cpu_us = busy_cpus * wall_us) and the
        MB/s at which that cost would take every CPU (ceiling_MBps); a JSON
        line as the programs print"""
        pa, pb = c.node_proc["hostA"].pid, c.node_proc["hostB"].pid
        a0, b0 = proc_cpu(pa), proc_cpu(pb)
        out = b.run_fault(f"sec-{cfg}-{name}", *args, "--runs", "1", region="sec")
        a1, b1 = proc_cpu(pa), proc_cpu(pb)
        with open(out, errors="replace") as f:
            text = f.read()
        dst = f"{b.tmp}/sec-{cfg}-{name}.out"

        def fault_in(key):
            """The pass's KEY (its fault_in line's), or None."""
            v = vals(out, "fault_in", key, threads=1)
            return number(v[0]) if v else None

        def r(v, d):
            return float(f"{v:.{d}f}")

        nbytes, secs = fault_in("bytes"), fault_in("secs")
        line = ""
        if nbytes and secs is not None and nbytes > 0:
            p = nbytes // 4096
            s = secs or 0
            f_tick = 1e6 / clk_tck / p
            busy = fault_in("busy_cpus") or 0
            g_us = fault_in("guest_cpu_us") or 0
            m_us = busy * s * 1e6 / p
            ceil = ncpu * 4096 / m_us if m_us > 0 else 0
            line = json.dumps({
                "what": "sec_cpu", "pages": p, "wall_us": r(s * 1e6 / p, 3),
                "a_cpu_us": r((a1[2] - a0[2]) / 1e3 / p, 3),
                "a_user_us": r((a1[0] - a0[0]) * f_tick, 3),
                "a_sys_us": r((a1[1] - a0[1]) * f_tick, 3),
                "b_cpu_us": r((b1[2] - b0[2]) / 1e3 / p, 3),
                "b_user_us": r((b1[0] - b0[0]) * f_tick, 3),
                "b_sys_us": r((b1[1] - b0[1]) * f_tick, 3),
                "g_cpu_us": r(g_us, 3), "busy_cpus": r(busy, 3), "m_cpu_us": r(m_us, 3),
                "ceiling_MBps": r(ceil, 1)}) + "\n"
        with open(dst, "a") as f:
            f.write(text + line)

    secure_parts(b)
    b.say(f"secure: {to_iec(sec_bytes)} all on host B, 1 thread; configurations "
          f"{' '.join(SEC_CFGS)} interleaved, a fresh cluster each, {b.runs} runs")
    for r in range(1, b.runs + 1):
        for cfg in SEC_CFGS:
            b.say(f"secure: run {r}, {SEC_TITLE[cfg]}")
            cluster(cfg)
            sec_pass(cfg, "seq", "--tests", "faultin", "--orders", "seq", "--threads", "1")
            sec_pass(cfg, "seqpf", "--tests", "faultin", "--orders", "seq", "--threads", "1",
                     "--prefetch")
            sec_pass(cfg, "randpf", "--tests", "faultin", "--orders", "rand", "--threads", "1",
                     "--prefetch")
            sec_pass(cfg, "lat", "--tests", "lat", "--orders", "rand")
    cluster_stop()
    c.insecure = False
    b.agent_flags = flags_before
    for cfg in SEC_CFGS:
        b.put(f"secure.{cfg}.flags", SEC_TITLE[cfg])
        b.put(f"secure.{cfg}.fault_mode", sec_mode.get(cfg))
        for p in ("seq", "seqpf", "randpf"):
            o = "rand" if p == "randpf" else "seq"
            out = f"{b.tmp}/sec-{cfg}-{p}.out"
            b.fig(f"secure.{cfg}.{p}_MBps", out, "fault_in", "MBps", order=o, threads=1)
            for k in SEC_COST_KEYS:
                b.fig(f"secure.{cfg}.cost.{p}.{k}", out, "sec_cpu", k)
        b.fig(f"secure.{cfg}.rand_p50_us", f"{b.tmp}/sec-{cfg}-lat.out", "fault_lat",
              "p50_us", order="rand")
    b.put("secure.region_bytes", sec_bytes)
    # The targets: the defaults within 10 % of --insecure --fault-mode copy
    # on every row; seq + prefetch >= 1500 MB/s; rand + prefetch >= 900.
    for k in ("seq_MBps", "seqpf_MBps", "randpf_MBps", "rand_p50_us"):
        d, cp = b.m(f"secure.defaults.{k}"), b.m(f"secure.copy.{k}")
        if d is not None and cp is not None and cp != 0:
            name = k.replace("_MBps", "").replace("_us", "")
            b.put(f"secure.targets.{name}_vs_copy", tidy(round(d / cp, 3)))
    b.sec_note = "measured"
    b.put("secure.status", b.sec_note)


def secure_table(b):
    """The table of --secure: a row per figure, a column per configuration."""
    lines = []
    if b.sec_note != "measured":
        return [note_text("security and cache cost (--secure)",
                          b.sec_note or "not measured (--secure off)")]

    def cell(key):
        v = b.m(key)
        return fmt(v) if v is not None else "n/a"

    sm = b.sec_mode
    lines.append(f"security and the cache: {to_iec(b.sec_bytes)} all on host B, 1 thread; "
                 f"medians of {b.runs} run{plural(b.runs)}, a fresh cluster per configuration "
                 "and run, configurations interleaved")
    lines.append(f"  defaults = authenticated, encrypted pages, {sm.get('defaults', '')} mode; "
                 f"enc off = --page-encryption off ({sm.get('noenc', '')} mode);")
    lines.append(f"  insecure = --insecure ({sm.get('insecure', '')} mode); copy = --insecure "
                 "--fault-mode copy; ratio = defaults / copy (target >= 0.9; p50: <= 1.1)")
    lines.append(f"{'figure':<36} {'defaults':>10} {'enc off':>10} {'insecure':>10} "
                 f"{'copy':>10} {'ratio':>7}")
    lines.append("-" * 88)
    for p, name in (("seq", "sequential, MB/s"), ("seqpf", "sequential + prefetch, MB/s"),
                    ("randpf", "random + prefetch, MB/s"),
                    ("lat", "random, demand fault p50, us")):
        k = "rand_p50_us" if p == "lat" else f"{p}_MBps"
        line = f"{name:<36}" + "".join(f" {cell(f'secure.{cfg}.{k}'):>10}" for cfg in SEC_CFGS)
        d, cp = b.m(f"secure.defaults.{k}"), b.m(f"secure.copy.{k}")
        if d is not None and cp is not None and cp != 0:
            line += f" {d / cp:>7.2f}"
        lines.append(line)
    parts = []
    for k, name in (("seal.r4k", "seal 4 KiB"), ("seal.r256k", "seal in 256 KiB"),
                    ("open.r4k", "open 4 KiB"), ("open.r256k", "open in 256 KiB")):
        v = b.m(f"secure.parts.{k}_ns")
        if v is not None:
            parts.append(f"{name} {v:.0f}")
    land = []
    for way in SEC_LAND_WAYS:
        v1, v64 = b.m(f"secure.parts.land.{way}.r1_ns"), b.m(f"secure.parts.land.{way}.r64_ns")
        if v1 is not None and v64 is not None:
            land.append(f"{way} {v1:.0f} / {v64:.0f}")
    if parts or land:
        lines.append("  the parts alone, CPU ns per 4 KiB page (bench_seal: AES-256-GCM; "
                     "bench_land: runs of 1 / 64 pages):")
        if parts:
            lines.append("    " + ", ".join(parts))
        if land:
            lines.append("    land: " + ", ".join(land))
    lines.append("  cost per remote page, us: wall clock of the pass; CPU time of host A's agent "
                 "(a: the fault side) and of host B's (b: the page server),")
    lines.append("  all its threads (cpu), of that user and system (clock ticks: coarser); of the "
                 "guest (g); busy: CPUs busy meanwhile")
    lines.append(f"  (of {os.cpu_count()}, /proc/stat); m_cpu: CPU per page on the whole machine "
                 "(busy x wall); ceiling: MB/s with every CPU at that cost")
    for p, name in (("seq", "sequential"), ("seqpf", "sequential + prefetch"),
                    ("randpf", "random + prefetch")):
        for k in SEC_COST_KEYS:
            short = {"busy_cpus": "busy", "ceiling_MBps": "ceiling"}.get(k, k[:-3])
            label = f"  {name}: {short}"
            lines.append(f"{label:<36}" + "".join(
                f" {cell(f'secure.{cfg}.cost.{p}.{k}'):>10}" for cfg in SEC_CFGS))
    return lines
