# SPDX-License-Identifier: MIT
"""farpage itself through libfarpage (bench_fault): remote fault latency,
local access, fault-in, read-ahead and background prefetch."""

from .results import vals
from .util import Die, number, to_iec


def fault_figs(b, out, p):
    """The medians of one bench_fault output under P (only those there)."""
    for o in ("seq", "rand"):
        for k in ("p50", "p90", "p99", "p999", "max", "mean"):
            if vals(out, "fault_lat", f"{k}_us", order=o):
                b.fig(f"{p}.remote.{o}.{k}_us", out, "fault_lat", f"{k}_us", order=o)
        if vals(out, "fault_lat", "agent_faults", order=o):
            b.fig(f"{p}.remote.{o}.agent_faults", out, "fault_lat", "agent_faults", order=o)
        for t in (1, 2, 4):
            if vals(out, "fault_in", "MBps", order=o, threads=t):
                b.fig(f"{p}.fault_in.{o}.t{t}_MBps", out, "fault_in", "MBps",
                      order=o, threads=t)


def farpage_main(b):
    b.say("farpage: remote fault latency, local access, fault-in with 1/2/4 threads")
    out = b.run_fault("main", "--lat-dir", b.lat)
    for o in ("seq", "rand"):
        for k in ("p50", "p90", "p99", "p999", "max", "mean"):
            b.fig(f"remote.{o}.{k}_us", out, "fault_lat", f"{k}_us", order=o)
        # Faults the agent served for them: fewer than the pages = read ahead.
        b.fig(f"remote.{o}.agent_faults", out, "fault_lat", "agent_faults", order=o)
        b.fig(f"remote.{o}.agent_fetched", out, "fault_lat", "agent_fetched", order=o)
        for t in (1, 2, 4):
            b.fig(f"fault_in.{o}.t{t}_MBps", out, "fault_in", "MBps", order=o, threads=t)
    for a in ("first", "warm"):
        for k in ("p50", "p99", "max"):
            b.fig(f"local.{a}.{k}_us", out, "fault_local", f"{k}_us", access=a)

    def one(k):
        v = vals(out, "bench_fault", k)
        return number(v[0]) if v else None

    b.pages, b.remote, b.local = one("pages"), one("remote"), one("local")
    if not b.remote or b.remote <= 0:
        raise Die(f"region {b.region} has no remote pages on this host")
    b.put("region.name", b.region)
    size = one("size")
    b.put("region.size_bytes", size if size is not None else b.size_bytes)
    b.size_h = to_iec(size if size is not None else b.size_bytes)
    b.put("region.pages", b.pages)
    b.put("region.remote_pages", b.remote)
    b.put("region.local_pages", b.local)
    b.put("region.seed", b.seed)


def readahead(b):
    """Read-ahead on and off: only if the agent has the flag."""
    if b.mode == "attach":
        b.ra_note = "n/a (attached cluster: agents not ours to restart)"
    elif b.agent_has("--readahead", "0"):
        b.say("farpage: read-ahead off (--readahead 0), agents restarted")
        b.agents_restart("--readahead", "0")
        fault_figs(b, b.run_fault("ra-off", "--tests", "lat,faultin"), "readahead.off")
        pages = b.a.readahead_pages
        b.say(f"farpage: read-ahead on (--readahead {pages}), agents restarted")
        b.agents_restart("--readahead", str(pages))
        fault_figs(b, b.run_fault("ra-on", "--tests", "lat,faultin"), "readahead.on")
        b.put("readahead.pages", pages)
        b.ra_note = "measured"
    else:
        b.ra_note = "n/a (agent has no --readahead)"
    b.put("readahead.status", b.ra_note)


def prefetch(b):
    """Background prefetch, asked for per mapping (FARPAGE_MAP_PREFETCH):
    --prefetch auto measures it if bench_fault --features lists prefetch
    (this build's libfarpage maps with it); with the agent's own
    "--prefetch V" if the agent takes it (asked: "farpage-node --prefetch V
    --version" succeeds)."""
    note = ""
    if b.mode == "attach":
        note = "n/a (attached cluster: agents not ours to restart)"
    have = "prefetch" in b.features("bench_fault")
    pf = []
    if have and b.agent_has("--prefetch", str(b.a.prefetch_value)):
        pf = ["--prefetch", str(b.a.prefetch_value)]
    if b.a.prefetch == "off":
        note = note or "not measured (--prefetch off)"
    elif b.a.prefetch == "on":
        have = True
    if note or not have:
        b.pf_note = note or "n/a (neither the agent nor libfarpage offer prefetch)"
        b.put("prefetch.status", b.pf_note)
        return
    # Compared with the main figures: the agents' default flags plus these.
    if pf or b.ra_note == "measured":
        b.say("farpage: background prefetch (agents restarted"
              + (f" with {' '.join(pf)})" if pf else ")"))
        b.agents_restart(*pf)
    else:
        b.say("farpage: background prefetch (mappings ask for it)")
    out = b.run_fault("prefetch", "--tests", "lat,faultin,prefetch", "--threads", "1,4",
                      "--prefetch", "--prefetch-timeout-ms",
                      10000 + b.size_bytes // 100000)
    fault_figs(b, out, "prefetch")
    for key, field in (("MBps", "MBps"), ("secs", "secs"), ("complete", "complete"),
                       ("fetched", "fetched"), ("touch_p50_us", "p50_us"),
                       ("touch_p99_us", "p99_us")):
        b.fig(f"prefetch.fill.{key}", out, "fault_prefetch", field)
    b.put("prefetch.agent_flag", " ".join(pf))
    b.pf_note = "measured"
    b.put("prefetch.status", b.pf_note)
