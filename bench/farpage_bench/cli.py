# SPDX-License-Identifier: MIT
"""The command line: farpage-bench [run] [OPTIONS] measures;
farpage-bench report [--json FILE] [--update-docs DOC] writes the current
results table."""

import argparse
import os
import random
import re
import signal

from . import report
from .runner import Driver
from .util import Die, Skip, bad_arg, from_iec, log

ABOUT = """farpage measured against its floors, in one run.

Builds a two-host cluster like tests/two-node.sh (two network namespaces
joined by a veth pair; loopback addresses if namespaces can't be made),
creates and fills a region interleaved between the hosts, then measures,
every figure --runs times: the floors (memcpy of 4 KiB, the userfaultfd
round trip on the same CPU / different CPUs / unpinned, TCP 16 B->4 KiB
round trip and streaming bandwidth between the two hosts) and farpage
(remote fault latency seq and rand, local page access, fault-in MB/s with
1/2/4 threads; read-ahead on and off, background prefetch), far memory
through host A's bounded cache (bench_farmem; --farmem); what the cache's
flush, region-deleted and unmap steps cost (bench_scale); map, flush and
unmap time of regions up to 256 GiB, fault-in with 1 and 2 fault loops,
dirty tracking A/B (bench/bigmap.sh, fault_loops.sh, dirty_ab.sh; the
--scale-* options); replicated regions (bench/replicas.sh; --replica);
live migration of a VM, farpage against QEMU's precopy (bench/migrate.sh;
--migrate); unmodified redis-server and memcached under `farpage run` with
the cache at 100/75/50/25 % of their data against all local
(bench/programs.sh; --programs); coherent regions (bench/coherent.sh;
--coherent); the coordinator's figures, its WAL store
against etcd (bench_coord; --coord); what security and the cache cost
(--secure).
Prints a table (median, spread min..max, floor, ratio), writes JSON and a
latency CDF plot (matplotlib). Never fails because of a figure; exits 1
only if something broke (the cluster didn't start, a page did not verify),
77 if the host can't run it (not root, no userfaultfd).

'farpage-bench report --update-docs docs/bench.md' rewrites the current
results table of docs/bench.md from a run's JSON (see report --help).
The programs' results are read as JSON (every bench_* program's --json);
what a program can do from its --features, what the agent takes from
'farpage-node OPTION VALUE --version'."""

# option, metavar, default, help (docs/bench.md has the same table)
RUN_OPTS = [
    ("--bin", "DIR", None, "the build dir (default: $FARPAGE_BIN, the build dir this copy is "
     "in, or ../build next to the source copy)"),
    ("--size", "SIZE", "256M", "the main region (default 256M, at least 4M)"),
    ("--runs", "N", "3", "runs of every figure (default 3): median, min..max"),
    ("--json", "FILE", "bench-results/bench.json", "results, nested JSON (default "
     "./bench-results/bench.json)"),
    ("--png", "FILE", "bench-results/bench-latency.png", "the latency CDF plot (default "
     "./bench-results/bench-latency.png)"),
    ("--transport", "T", "auto", "passed to both agents: tcp, auto (default) or verbs"),
    ("--pin", "none|cpu0", "none", "none (default): no pinning, compared with the unpinned "
     "floors; cpu0: agents and guest threads all on CPU 0, compared with the same-CPU floors"),
    ("--attach", "COORD_ADDR:PORT:AGENT_SOCK", "", "use a running cluster instead of building "
     "one (the region: --region or --remote-fill)"),
    ("--region", "NAME", "", "with --attach: a region filled with --seed N everywhere"),
    ("--remote-fill", "CMD", "", "with --attach: fills the new region on the other hosts "
     "({region} and {seed} are substituted)"),
    ("--net-server", "ADDR:PORT", "", "with --attach: a remote 'bench_net_floor --server'"),
    ("--readahead-pages", "N", "16", "the window of the read-ahead-on runs (default 16)"),
    ("--prefetch", "auto|on|off", "auto", "background prefetch runs (default auto: if "
     "bench_fault --features lists prefetch)"),
    ("--prefetch-value", "V", "64", "the value of the agent's own '--prefetch V', if it takes "
     "one (default 64)"),
    ("--farmem", "on|off|quick", "on", "far memory (default on); quick: one workload (4x, "
     "Zipf, 50 %% writes, 4 threads) of each kind"),
    ("--farmem-cache", "SIZE", "32M", "host A's cache in the far-memory matrix, whole MiB "
     "(default 32M)"),
    ("--farmem-secs", "X", "1", "seconds of touches per workload and thread (default 1)"),
    ("--seed", "N", None, "the fill pattern's seed (default random)"),
    ("--secure", "on|off|only", "on", "what security and the cache cost (default on); only: "
     "nothing else"),
    ("--scale-map", "on|off|quick", "on", "map, flush and unmap time by region size "
     "(bench/bigmap.sh; default on); quick: 1G, one round, 64 pages"),
    ("--scale-map-sizes", "LIST", "", 'its region sizes (default "1G 4G 16G 64G 256G"; '
     'quick: "1G")'),
    ("--scale-loops", "on|off|quick", "on", "fault-in with 1 and 2 fault loops "
     "(bench/fault_loops.sh; default on); quick: 16 MiB, one run"),
    ("--scale-dirty", "on|off|quick", "on", "dirty tracking A/B (bench/dirty_ab.sh; default "
     "on); quick: 16 MiB, 50 %% writes, 1 thread, one run of 0.2 s"),
    ("--replica", "on|off|quick", "on", "replicated regions (bench/replicas.sh; default on); "
     "quick: 16 MiB regions, one run, a 64 MiB rebuild"),
    ("--replica-mb", "N", "", "the rebuilt region, MiB (default 1024; quick: 64)"),
    ("--migrate", "on|off|quick", "on", "live migration, farpage against QEMU's precopy "
     "(bench/migrate.sh; default on); quick: a 512 MiB guest, idle"),
    ("--migrate-sizes", "LIST", "", 'its guest sizes (default "512M 2G 16G"; quick: "512M")'),
    ("--migrate-rate", "M", "16", "the writing guest's rate, MiB/s (default 16)"),
    ("--programs", "on|off|quick", "on", "redis-server and memcached under farpage run, "
     "the cache at 100/75/50/25 %% of their data against all local (bench/programs.sh; "
     "default on); quick: 64 MiB of values, 2000 requests, one run"),
    ("--coherent", "on|off|quick", "on", "coherent regions: ownership ping-pong against the "
     "RTT floor, partitioned writes against single-writer, read-mostly against read-only "
     "(bench/coherent.sh; default on); quick: one short run"),
    ("--programs-data", "SIZE", "", "their data, bytes of values (default 512M; quick: 64M)"),
    ("--programs-requests", "N", "", "requests of each timed run of a workload, half as many "
     "before them to warm up (default 100000; quick: 2000)"),
    ("--coord", "on|off|quick|scale", "on", "the coordinator, WAL store against etcd "
     "(bench_coord; default on); quick: fewer creates, one TTL, 2 failover rounds; scale: "
     "on plus 1000 nodes and 10 000 regions"),
]


def run_parser():
    p = argparse.ArgumentParser(
        prog="farpage-bench", description=ABOUT, allow_abbrev=False,
        formatter_class=argparse.RawDescriptionHelpFormatter,
        usage="farpage-bench [run] [OPTIONS]\n       farpage-bench report [--json FILE] "
              "[--update-docs DOC]")
    for opt, meta, default, text in RUN_OPTS:
        if opt == "--bin":
            default = os.environ.get("FARPAGE_BIN", "")
        elif opt == "--seed":
            default = str(random.randrange(32768) + 1)
        p.add_argument(opt, metavar=meta, default=default, help=text)
    p.add_argument("--verbose", action="store_true",
                   help="every program's result lines on stderr as they come")
    return p


def report_parser():
    p = argparse.ArgumentParser(
        prog="farpage-bench report", allow_abbrev=False,
        description="The current results table (markdown) from a run's JSON: on standard "
                    "output, or between the markers of DOC.")
    p.add_argument("--json", metavar="FILE", default="bench-results/bench.json",
                   help="the run's JSON (default ./bench-results/bench.json)")
    p.add_argument("--update-docs", metavar="DOC", default="",
                   help="rewrite the block between <!-- bench-results:begin --> and "
                        "<!-- bench-results:end --> of DOC (e.g. docs/bench.md)")
    p.add_argument("--src", metavar="DIR", default="",
                   help="the source tree whose commit the table names (default: "
                        "$FARPAGE_SRC, the tree this copy is in, or the one its build dir "
                        "was configured from)")
    return p


def parse_args(argv, here):
    a = run_parser().parse_args(argv)

    def choice(opt, v, allowed):
        if v not in allowed:
            bad_arg(f"{opt}: '{v}' is not {', '.join(allowed[:-1])} or {allowed[-1]}")

    if not re.fullmatch(r"[1-9][0-9]*", a.runs):
        bad_arg(f"--runs: '{a.runs}' is not a positive number")
    a.runs = int(a.runs)
    if not re.fullmatch(r"[0-9]+", a.seed):
        bad_arg(f"--seed: '{a.seed}' is not a number")
    a.seed = int(a.seed)
    if not re.fullmatch(r"[1-9][0-9]*", a.readahead_pages):
        bad_arg(f"--readahead-pages: '{a.readahead_pages}' is not a positive number")
    a.readahead_pages = int(a.readahead_pages)
    choice("--transport", a.transport, ["tcp", "auto", "verbs"])
    choice("--pin", a.pin, ["none", "cpu0"])
    choice("--prefetch", a.prefetch, ["auto", "on", "off"])
    choice("--farmem", a.farmem, ["on", "off", "quick"])
    choice("--secure", a.secure, ["on", "off", "only"])
    choice("--coord", a.coord, ["on", "off", "quick", "scale"])
    for o in ("--scale-map", "--scale-loops", "--scale-dirty", "--replica", "--migrate",
              "--programs", "--coherent"):
        choice(o, getattr(a, o[2:].replace("-", "_")), ["on", "off", "quick"])
    if a.secure == "only":
        a.farmem = "off"
        a.scale_map = a.scale_loops = a.scale_dirty = a.replica = a.coord = "off"
        a.migrate = a.programs = a.coherent = "off"
    if a.programs_data:
        n = from_iec(a.programs_data) if re.fullmatch(r"[1-9][0-9]*[MG]", a.programs_data) \
            else None
        if n is None or n < 4 << 20:
            bad_arg(f"--programs-data: '{a.programs_data}' is not a size of at least 4M "
                    "(e.g. 64M, 512M, 2G)")
    if a.programs_requests and (not re.fullmatch(r"[1-9][0-9]*", a.programs_requests) or
                                int(a.programs_requests) < 100):
        bad_arg(f"--programs-requests: '{a.programs_requests}' is not a number of at least 100")
    if a.replica_mb and not re.fullmatch(r"[1-9][0-9]*", a.replica_mb) or (
            a.replica_mb and int(a.replica_mb) % 2):
        bad_arg(f"--replica-mb: '{a.replica_mb}' is not an even number of MiB (whole 2 MiB "
                "chunks)")
    for sz in a.scale_map_sizes.split():
        if not re.fullmatch(r"[1-9][0-9]*[MGT]", sz) or from_iec(sz) % (2 << 20):
            bad_arg(f"--scale-map-sizes: '{sz}' is not a size in whole 2 MiB chunks "
                    "(e.g. 1G, 64G)")
    a.scale_map_sizes = " ".join(a.scale_map_sizes.split())
    for sz in a.migrate_sizes.split():
        n = from_iec(sz) if re.fullmatch(r"[1-9][0-9]*[MG]", sz) else None
        if n is None or n < 256 << 20 or n % (2 << 20):
            bad_arg(f"--migrate-sizes: '{sz}' is not a guest size of at least 256M in whole "
                    "2 MiB (e.g. 512M, 2G)")
    a.migrate_sizes = " ".join(a.migrate_sizes.split())
    if not re.fullmatch(r"[1-9][0-9]{0,4}", a.migrate_rate):
        bad_arg(f"--migrate-rate: '{a.migrate_rate}' is not a number of MiB/s")
    if not re.fullmatch(r"[0-9]*\.?[0-9]+", a.farmem_secs) or float(a.farmem_secs) <= 0:
        bad_arg(f"--farmem-secs: '{a.farmem_secs}' is not a positive number of seconds")
    # The regions (2x and 4x) are made of 2 MiB chunks.
    a.fm_cache_bytes = from_iec(a.farmem_cache)
    if a.fm_cache_bytes is None or a.fm_cache_bytes < 1 << 20 or a.fm_cache_bytes % (1 << 20):
        bad_arg(f"--farmem-cache: '{a.farmem_cache}' is not a whole number of MiB, at least "
                "1M (e.g. 4M, 32M)")
    a.size_bytes = from_iec(a.size)
    if a.size_bytes is None or a.size_bytes < 4 << 20:
        bad_arg(f"--size: '{a.size}' is not a size of at least 4M (e.g. 16M, 256M, 1G)")
    a.json = os.path.abspath(a.json)
    a.png = os.path.abspath(a.png)
    try:
        os.makedirs(os.path.dirname(a.json), exist_ok=True)
        os.makedirs(os.path.dirname(a.png), exist_ok=True)
    except OSError:
        bad_arg(f"cannot make the folders of {a.json} and {a.png}")
    # The build dir: --bin, $FARPAGE_BIN, the dir this copy was put in
    # (BUILD/bench/farpage-bench), or ../build next to the source copy.
    if not a.bin:
        up = os.path.dirname(here)
        a.bin = up if os.access(f"{up}/node/farpage-node", os.X_OK) else f"{up}/build"
    if not os.path.isdir(a.bin):
        bad_arg(f"build dir {a.bin} not found (use --bin)")
    a.bin = os.path.abspath(a.bin)
    # The source tree (the scale sections run its bench/*.sh): $FARPAGE_SRC,
    # the tree this copy is in, or the one the build dir was configured from.
    a.src = os.environ.get("FARPAGE_SRC", "")
    if not a.src:
        up = os.path.dirname(here)
        if os.path.exists(f"{up}/bench/bigmap.sh"):
            a.src = up
        else:
            try:
                with open(f"{a.bin}/CMakeCache.txt", errors="replace") as f:
                    for line in f:
                        if line.startswith("CMAKE_HOME_DIRECTORY:"):
                            a.src = line.split("=", 1)[1].strip()
            except OSError:
                pass
    if a.src and not os.path.exists(f"{a.src}/bench/bigmap.sh"):
        a.src = ""
    for p in ("bench_uffd_floor", "bench_net_floor", "bench_memcpy", "bench_fault",
              "bench_farmem", "bench_scale", "bench_seal", "bench_land", "bench_coord"):
        if not os.access(f"{a.bin}/bench/{p}", os.X_OK):
            bad_arg(f"{a.bin}/bench/{p} not built")
    return a

def run_main(argv, here):
    a = parse_args(argv, here)
    os.environ["FARPAGE_BIN"] = a.bin

    # SIGTERM / SIGINT end the run through the same cleanup.
    def on_signal(sig, frame):
        raise SystemExit(128 + sig)

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    d = Driver(a)
    rc = 0
    try:
        d.main()
    except Skip as e:
        log(f"SKIP: {e}")
        rc = 77
    except Die as e:
        # A broken run still leaves a JSON saying what broke.
        d.put("error", str(e))
        try:
            d.write_json()
        except OSError:
            pass
        log(f"FAIL: {e}")
        d.c.dump_logs()
        rc = 1
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else 1
    finally:
        if not d.finish() and rc == 0:
            rc = 1
    return rc


def main(argv, here):
    """HERE: the folder of the farpage-bench that was run."""
    if argv[:1] == ["report"]:
        return report.report_main(report_parser().parse_args(argv[1:]), here)
    if argv[:1] == ["run"]:
        argv = argv[1:]
    return run_main(argv, here)
