# SPDX-License-Identifier: MIT
"""Far memory: host A's bounded cache of remote pages (bench_farmem)."""

import re
import sys

from .results import records, stat3, vals
from .util import Die, number, to_iec

FM_KEYS = ("touches_per_s hit_ratio p50_us p90_us p99_us p999_us wb_MBps flush_secs "
           "flush_MBps touches misses hits evictions writebacks wp_faults warmup_secs").split()
FM_TOUCHES = 2000000


def farmem_figs(b, out, prefix):
    """The figures of one bench_farmem output under PREFIX.DIST.wW.tT.KEY."""
    groups = {}
    for what, kv in records(out):
        if what != "farmem":
            continue
        g = f"{prefix}.{kv.get('dist', '')}.w{kv.get('write_pct', '')}.t{kv.get('threads', '')}"
        for k in FM_KEYS:
            if k in kv:
                groups.setdefault(f"{g}.{k}", []).append(kv[k])
    for key, vs in groups.items():
        s = stat3(vs)
        if s is not None:
            b.set_fig(key, s)


def fm_policy_alias(b, pol, prefix):
    """The policy's headline figures, farmem.policy.POL.KEY (zipf, 0 %
    writes, 1 thread) and .w50.KEY, from PREFIX.zipf.w0.t1 and .w50.t1."""
    for k in ("hit_ratio", "touches_per_s", "p50_us", "p99_us", "misses", "hits",
              "evictions"):
        for w in (0, 50):
            src = f"{prefix}.zipf.w{w}.t1.{k}"
            dst = f"farmem.policy.{pol}.{'w50.' if w == 50 else ''}{k}"
            if b.m(src) is None:
                continue
            b.put(dst, b.med[src])
            b.put(f"{dst}_spread", [b.lo[src], b.hi[src]])
            b.med[dst], b.lo[dst], b.hi[dst] = b.med[src], b.lo[src], b.hi[src]


def farmem(b):
    a = b.a
    b.fm_ab_note = ""
    b.fm_pol_note = ""
    if a.farmem == "off":
        b.fm_note = "not measured (--farmem off)"
    elif b.mode == "attach":
        b.fm_note = "n/a (attached cluster: agents not ours to restart)"
    elif not b.agent_has("--cache-size", "4M"):
        b.fm_note = "n/a (agent has no --cache-size)"
    else:
        b.fm_note = ""
    if b.fm_note:
        b.put("farmem.status", b.fm_note)
        return
    cache = b.fm_cache_bytes
    node_b = b.node_b()
    wseed = b.seed + 1

    def region(name, nbytes):
        b.remote_region(name, nbytes, node_b)

    def run_farmem(tag, reg, *args):
        """bench_farmem on host A; False if the agent served by copying (77)."""
        rc, out = b.run_prog(f"farmem-{tag}", "bench_farmem", reg, "--seed", b.seed,
                             "--write-seed", wseed, "--runs", b.runs,
                             "--secs", a.farmem_secs, "--touches", FM_TOUCHES,
                             "--cpu", b.fault_cpu, *args, host="hostA", agent=True)
        if rc in (0, 77):
            return rc == 0, out
        bad = [ln for ln in b.lines(out) if re.search(
            r"did not verify|differ|SIGBUS|neither|bench_farmem: ", ln)]
        sys.stderr.writelines(bad[-5:])
        mm = vals(out, "bench_farmem", "mismatches")
        if mm and number(mm[0]) != 0:
            raise Die(f"bench_farmem ({tag}): {mm[0]} pages did not verify")
        raise Die(f"bench_farmem ({tag}) failed: {b.why(out, 2)}")

    # The A/B region: as many remote bytes as the main region has.
    ab_bytes = ((b.size_bytes // 2 + (2 << 20) - 1) >> 21) << 21
    sizes, loads = (2, 4), []
    loads_h = "uniform/zipf x 0/50 % writes x 1/4 threads"
    if a.farmem == "quick":
        sizes, loads = (4,), ["--dist", "zipf", "--write-pct", "50", "--threads", "4"]
        loads_h = "zipf, 50 % writes, 4 threads"
    cache_h = to_iec(cache)
    b.say(f"far memory: regions all owned by host B: fmab {to_iec(ab_bytes)} and "
          f"{'x, '.join(map(str, sizes))}x the cache ({cache_h})")
    region("fmab", ab_bytes)
    for x in sizes:
        region(f"fm{x}x", x * cache)
    b.put("farmem.cache_bytes", cache)
    b.put("farmem.r2x_bytes", 2 * cache)
    b.put("farmem.r4x_bytes", 4 * cache)
    b.put("farmem.secs", number(a.farmem_secs))
    b.put("farmem.max_touches", FM_TOUCHES)
    b.put("farmem.zipf_theta", 0.99)
    b.put("farmem.write_seed", wseed)

    # The two fault paths, fault-in of a region that is all remote.
    for mode in ("continue", "copy"):
        fm = "copy" if mode == "copy" else "auto"
        b.say(f"far memory: fault path A/B, {mode} (host A's agent restarted with --fault-mode {fm})")
        b.agent_a_restart("--fault-mode", fm)
        if mode == "continue" and not b.agent_caches("hostA"):
            b.fm_ab_note = "n/a (host A's agent serves faults by copying here: no cache mode)"
            break
        out = b.run_fault(f"ab-{mode}", "--tests", "faultin", "--orders", "seq,rand",
                          "--threads", "1", region="fmab")
        for o in ("seq", "rand"):
            b.fig(f"farmem.ab.{mode}.{o}_MBps", out, "fault_in", "MBps", order=o, threads=1)
    b.put("farmem.ab.region_bytes", ab_bytes)
    b.put("farmem.ab.status", b.fm_ab_note or "measured")

    # The matrix: 2x and 4x the cache, then the ceiling (the cache as
    # large as the region).
    b.put("farmem.mode", a.farmem)
    b.say(f"far memory: cache {cache_h} (host A's agent restarted with --cache-size {a.farmem_cache})")
    b.agent_a_restart("--fault-mode", "auto", "--cache-size", cache)
    for x in sizes:
        b.say(f"far memory: region {x}x the cache: {loads_h}")
        ok, out = run_farmem(f"r{x}x", f"fm{x}x", *loads)
        if not ok:
            b.fm_note = "n/a (host A's agent serves faults by copying here: no cache)"
            b.put("farmem.status", b.fm_note)
            return
        farmem_figs(b, out, f"farmem.r{x}x")

    # The ceiling on the 4x region only (the 2x one would say the same:
    # everything held), to keep the run short.
    b.say(f"far memory: the ceiling of 4x (--cache-size {4 * cache >> 20}M, all of it): {loads_h}")
    b.agent_a_restart("--fault-mode", "auto", "--cache-size", 4 * cache)
    ok, out = run_farmem("ceil-r4x", "fm4x", *loads)
    if not ok:
        raise Die("bench_farmem (ceiling 4x): no cache")
    farmem_figs(b, out, "farmem.ceiling.r4x")

    # Eviction policies, where the agent lets us choose.
    pol_load, pol_w = "r4x, zipf, 0 and 50 % writes, 1 thread", "0,50"
    if a.farmem == "quick":
        pol_load, pol_w = "r4x, zipf, 0 % writes, 1 thread", "0"
    if b.agent_has("--cache-policy", "clock"):
        for pol in ("clock", "fifo"):
            b.say(f"far memory: --cache-policy {pol} ({pol_load})")
            b.agent_a_restart("--fault-mode", "auto", "--cache-size", cache,
                              "--cache-policy", pol)
            ok, out = run_farmem(f"pol-{pol}", "fm4x", "--dist", "zipf", "--write-pct",
                                 pol_w, "--threads", "1")
            if not ok:
                raise Die(f"bench_farmem (--cache-policy {pol}): no cache")
            farmem_figs(b, out, f"farmem.policy.{pol}.r4x")
            fm_policy_alias(b, pol, f"farmem.policy.{pol}.r4x")
        b.fm_pol_note = "measured"
    else:
        # CLOCK is the agent's one policy: the matrix measured it.
        b.fm_pol_note = ("fifo n/a (agent has no --cache-policy); clock = the agent's only "
                         "policy, figures of r4x.zipf.w0.t1 and .w50.t1")
        fm_policy_alias(b, "clock", "farmem.r4x")
        b.put("farmem.policy.fifo.hit_ratio", None)
    b.put("farmem.policy.status", b.fm_pol_note)
    b.put("farmem.policy.workload", pol_load)
    b.fm_note = "measured"
    b.put("farmem.status", b.fm_note)
