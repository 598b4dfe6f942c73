# SPDX-License-Identifier: MIT
"""Unmodified programs on far memory (bench/programs.sh): Debian's
redis-server and memcached under `farpage run`, host A's cache at 100,
75, 50 and 25 % of their data, against `farpage run --local-only`."""

from .results import kv_to_jsonl, vals
from .scale import out_err, scale_load, scale_skip, script_run
from .util import fmt_n, from_iec, loadavg, number, plural, tidy

PROGS = ("redis", "memcached")
# (test, keys): the workloads, in the order programs.sh runs them.
WORKLOADS = (("get", "uniform"), ("set", "uniform"), ("get", "hot"), ("set", "hot"),
             ("mix", "hot"))
PCTS = (100, 75, 50, 25)
FIELDS = ("ops", "p50_us", "p99_us")
FAR_FIELDS = FIELDS + ("fetched",)
DATA_KEYS = ("keys", "hot_keys", "value_bytes", "values_bytes", "data_bytes", "used_bytes",
             "region_bytes")
RUN_KEYS = ("cache_bytes", "hwm_bytes", "load_secs", "load_fetched")
# The target: at 50 % local, >= 0.5 of all-local throughput on the
# hot-set read-mostly mix, p99 under 2 ms.
TARGET_PCT, TARGET_RATIO, TARGET_P99_US = 50, 0.5, 2000
TARGET_WORKLOAD = ("mix", "hot")

WHAT = {("get", "uniform"): "get, uniform keys", ("set", "uniform"): "set, uniform keys",
        ("get", "hot"): "get, hot set", ("set", "hot"): "set, hot set",
        ("mix", "hot"): "90/10 get/set, hot set"}


def keys(prog):
    """Every key of PROG's part: (key, True if a figure: it has _spread
    and _runs)."""
    pre = f"programs.{prog}"
    for k in DATA_KEYS:
        yield f"{pre}.{k}", False
    for pct in ("local",) + PCTS:
        for k in RUN_KEYS:
            yield f"{pre}.config.{pct}.{k}", False
    for t, kk in WORKLOADS:
        for f in FIELDS:
            yield f"{pre}.{t}.{kk}.local.{f}", True
        for pct in PCTS:
            for f in FAR_FIELDS:
                yield f"{pre}.{t}.{kk}.{pct}.{f}", True
            yield f"{pre}.{t}.{kk}.{pct}.ratio", False
            yield f"{pre}.{t}.{kk}.{pct}.p99_vs_local", False
    for k in ("ratio", "p99_us", "met"):
        yield f"{pre}.target.{k}", False


def not_measured(b, why):
    """programs.status says why; every figure's key is there, null (the JSON's
    shape does not depend on whether the host has the programs)."""
    b.put("programs.status", why)
    for prog in PROGS:
        for k, is_fig in keys(prog):
            b.put(k, None)
            b.med[k] = None
            if is_fig:
                b.put(f"{k}_spread", None)
                b.put(f"{k}_runs", None)
    put_setup(b, None, None, None, None)


def put_setup(b, data, reqs, runs, load0):
    b.put("programs.values_bytes", from_iec(data) if data else None)
    b.put("programs.requests", reqs)
    b.put("programs.runs", runs)
    b.put("programs.clients", 4)
    b.put("programs.pcts", list(PCTS))
    b.put("programs.mode", b.a.programs)
    b.put("programs.targets.local_pct", TARGET_PCT)
    b.put("programs.targets.ratio", TARGET_RATIO)
    b.put("programs.targets.p99_us", TARGET_P99_US)
    if load0 is not None:
        scale_load(b, "programs", load0)
    else:
        b.put("programs.loadavg", None)


def programs(b):
    """redis-server and memcached under farpage run (bench/programs.sh):
    programs.<redis|memcached>.<get|set|mix>.<uniform|hot>.<100|75|50|25|local>.
    <ops|p50_us|p99_us|fetched>, .ratio (ops against all local),
    programs.<prog>.{data_bytes,...}, programs.<prog>.config.<pct>.*,
    programs.<prog>.target.* (docs/bench.md, "Programs on far memory")."""
    if b.a.programs == "off":
        b.put("programs.status", "not measured (--programs off)")
        return
    if scale_skip(b, "programs", "programs"):
        not_measured(b, b.flat["programs.status"])
        return
    load0 = loadavg()
    quick = b.a.programs == "quick"
    data = b.a.programs_data or ("64M" if quick else "512M")
    reqs, runs = (2000, 1) if quick else (100000, b.runs)
    # (quick: a short warm-up, not one the cache settles in)
    warm = ["--warmup", 1000] if quick else []
    if b.a.programs_requests:
        reqs = int(b.a.programs_requests)
    b.say(f"programs: redis-server and memcached under farpage run, {data} of values, the "
          f"cache at 100/75/50/25 % of the data and all local; {reqs} requests, {runs} "
          f"run{plural(runs)} of each workload")
    out = script_run(b, "programs", "programs.sh", "--data", data, "--requests", reqs,
                     "--runs", runs, *warm)
    if out is None:
        not_measured(b, f"n/a (programs.sh: {b.tail(out_err(b, 'programs'), 1)})")
        return
    out = kv_to_jsonl(out, f"{b.tmp}/programs.jsonl")

    def put_m(key, v):
        v = tidy(number(v)) if v is not None else None
        b.put(key, v)
        b.med[key] = v
        return v

    def ratio(v, base, nd=3):
        return tidy(round(v / base, nd)) if v is not None and base else None

    b.note("", "")
    b.note("programs on far memory", f"bench/programs.sh: redis-server, memcached under "
           f"farpage run; {data} of values; 4 clients; {reqs} requests, {runs} "
           f"run{plural(runs)}; against all local")
    for prog in PROGS:
        pre = f"programs.{prog}"
        for k in DATA_KEYS:
            v = vals(out, "programs_data", k, prog=prog)
            put_m(f"{pre}.{k}", v[0] if v else None)
        if prog == "memcached":
            v = vals(out, "programs_data", "hashpower", prog=prog)
            put_m(f"{pre}.hashpower", v[0] if v else None)
        for pct in ("local",) + PCTS:
            for k in RUN_KEYS:
                v = vals(out, "programs_run", k, prog=prog, local_pct=pct)
                put_m(f"{pre}.config.{pct}.{k}", v[0] if v else None)
        for t, kk in WORKLOADS:
            w = f"{pre}.{t}.{kk}"
            for f in FIELDS:
                b.fig(f"{w}.local.{f}", out, "programs", f, prog=prog, test=t, keys=kk,
                      local_pct="local")
            lops, lp99 = b.m(f"{w}.local.ops"), b.m(f"{w}.local.p99_us")
            for pct in PCTS:
                for f in FAR_FIELDS:
                    b.fig(f"{w}.{pct}.{f}", out, "programs", f, prog=prog, test=t, keys=kk,
                          local_pct=pct)
                put_m(f"{w}.{pct}.ratio", ratio(b.m(f"{w}.{pct}.ops"), lops))
                put_m(f"{w}.{pct}.p99_vs_local", ratio(b.m(f"{w}.{pct}.p99_us"), lp99, 2))
        t, kk = TARGET_WORKLOAD
        tw = f"{pre}.{t}.{kk}.{TARGET_PCT}"
        r, p99 = b.m(f"{tw}.ratio"), b.m(f"{tw}.p99_us")
        put_m(f"{pre}.target.ratio", r)
        put_m(f"{pre}.target.p99_us", p99)
        put_m(f"{pre}.target.met", None if r is None or p99 is None else
              int(r >= TARGET_RATIO and p99 < TARGET_P99_US))

        data_b = b.m(f"{pre}.data_bytes")
        b.note(f"{prog}: data (resident, all local)",
               f"{fmt_n(data_b / (1 << 20) if data_b else None)} MiB for "
               f"{fmt_n(b.m(f'{pre}.keys'))} values of {fmt_n(b.m(f'{pre}.value_bytes'))} B")
        for t, kk in WORKLOADS:
            w = f"{pre}.{t}.{kk}"
            b.row(f"{prog} {WHAT[(t, kk)]}, 50 % local", f"{w}.50.ops", "ops/s", "all local",
                  b.m(f"{w}.local.ops"))
        t, kk = TARGET_WORKLOAD
        w = f"{pre}.{t}.{kk}"
        for pct in (100, 75, 25):
            b.row(f"{prog} {WHAT[(t, kk)]}, {pct} % local", f"{w}.{pct}.ops", "ops/s",
                  "all local", b.m(f"{w}.local.ops"))
        b.row(f"{prog} {WHAT[(t, kk)]}, 50 % local, p99", f"{w}.50.p99_us", "us",
              "target", TARGET_P99_US)
        b.note(f"{prog}: the target at 50 % local",
               f"ops {fmt_n(r)}x of all local (target {TARGET_RATIO}x), p99 {fmt_n(p99)} us "
               f"(target < {TARGET_P99_US} us): "
               + ("n/a" if r is None or p99 is None else
                  "met" if r >= TARGET_RATIO and p99 < TARGET_P99_US else "not met"))
    put_setup(b, data, reqs, runs, load0)
    b.put("programs.status", "measured")
