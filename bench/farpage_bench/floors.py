# SPDX-License-Identifier: MIT
"""The floors: memcpy, the userfaultfd round trip, TCP (bench_memcpy,
bench_uffd_floor, bench_net_floor)."""

from .util import Die


def floors_memcpy(b):
    b.say(f"floor: memcpy 4 KiB (warm, cold in 2 x {b.cold})")
    rc, out = b.run_prog("memcpy", "bench_memcpy", "--runs", b.runs,
                         "--cold-size", b.cold)
    if rc != 0:
        raise Die(f"bench_memcpy: {b.why(out, 3)}")
    for m in ("warm", "cold"):
        for k in ("p50_us", "p99_us", "MBps"):
            b.fig(f"floors.memcpy.{m}.{k}", out, "memcpy", k, mode=m)


def floors_uffd(b):
    for pl in b.placements:
        b.say(f"floor: userfaultfd, placement {pl}")
        rc, out = b.run_prog(f"uffd-{pl}", "bench_uffd_floor", "--placement", pl,
                             "--runs", b.runs, "--pages", b.floor_iters,
                             "--lat-file", f"{b.lat}/uffd-{pl}.lat")
        if rc != 0:
            raise Die(f"bench_uffd_floor --placement {pl}: {b.why(out, 3)}")
        for k in ("p50", "p90", "p99", "p999", "max"):
            b.fig(f"floors.uffd.{pl}.{k}_us", out, "uffd_floor", f"{k}_us")


def floors_net(b):
    c = b.c
    b.net_addr = ""
    srv = None
    if b.mode == "cluster":
        addr = f"{b.tmp}/netsrv.addr"
        srv = c.spawn("hostB", [f"{b.bb}/bench_net_floor", "--server",
                                f"{c.ip['hostB']}:0", "--addr-file", addr],
                      f"{b.tmp}/netsrv.log")
        if not c.wait_file(addr):
            raise Die("bench_net_floor server did not start")
        with open(addr) as f:
            b.net_addr = f.readline().strip()
    elif b.a.net_server:
        b.net_addr = b.a.net_server
    if not b.net_addr:
        b.say("floor: TCP n/a (attached: no --net-server)")
        b.put("floors.rtt.note", "n/a (attached cluster, no --net-server)")
        return
    for pl in b.placements:
        cpus = {"same": ["--cpu", 0, "--server-cpu", 0],
                "cross": ["--cpu", 0, "--server-cpu", 1]}.get(pl, [])
        b.say(f"floor: TCP 16 B -> 4 KiB round trip and stream, placement {pl}")
        rc, out = b.run_prog(f"net-{pl}", "bench_net_floor", "--connect", b.net_addr,
                             "--runs", b.runs, "--iters", b.floor_iters,
                             "--stream-secs", b.stream_secs, *cpus,
                             "--lat-file", f"{b.lat}/rtt-{pl}.lat", host="hostA")
        if rc != 0:
            raise Die(f"bench_net_floor --connect {b.net_addr}: {b.why(out, 3)}")
        for k in ("p50", "p90", "p99", "p999", "max"):
            b.fig(f"floors.rtt.{pl}.{k}_us", out, "net_rtt", f"{k}_us")
        b.fig(f"floors.stream.{pl}.MBps", out, "net_stream", "MBps")
    if srv is not None:
        c.stop(srv)
