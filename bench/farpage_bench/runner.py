# SPDX-License-Identifier: MIT
"""The run: the cluster and its agents, the sections in their order, the
derived floors, the run's metadata; then the table, JSON and plot."""

import os
import random
import re
import shutil
import subprocess
import sys
import tempfile
import time

from . import (coherent, coord, fault, farmem, floors, migrate, programs, replica, report,
               scale)
from .bench import Bench
from .cluster import Cluster
from .results import vals
from .secure import secure_run, secure_table
from .util import (PROG, Die, Skip, bad_arg, cpu_model, hostname, loadavg, number, tail_text,
                   to_iec, walk_json)

# The sections, in the order they run (after the cluster is up, before the
# derived figures, the table and the plot). A section measures, puts its
# keys with b.fig / b.put and, for the table, adds rows with b.row / b.note
# (printed after the far-memory part), unless the table already knows its
# rows. New ones go before farmem.farmem: there the main region (b.region)
# is whole and filled with b.seed; b.remote_region() makes one all on host
# B (docs/bench.md, "Adding a figure").
SECTIONS = [
    floors.floors_memcpy,
    scale.scale,
    floors.floors_uffd,
    floors.floors_net,
    fault.farpage_main,
    fault.readahead,
    fault.prefetch,
    scale.scale_map,
    scale.scale_loops,
    scale.scale_dirty,
    replica.replica,
    migrate.migrate,
    programs.programs,
    coherent.coherent,
    coord.coord,
    farmem.farmem,
]


class Driver(Bench):
    def __init__(self, args):
        super().__init__(args)
        a = args
        self.runs = a.runs
        self.seed = a.seed
        self.size_bytes = a.size_bytes
        self.fm_cache_bytes = a.fm_cache_bytes
        self.json_out = a.json
        self.png_out = a.png
        self.bb = f"{a.bin}/bench"
        self.tmp = tempfile.mkdtemp(prefix="farpage-bench.", dir="/tmp")
        self.c = Cluster(a.bin, self.tmp)
        self.c.run_prefix["local"] = []
        self.lat = f"{self.tmp}/lat"
        os.makedirs(self.lat)
        self.region = "bench"
        self.region_gen = 0
        self.agent_flags = []
        self.created_region = None
        self.ra_note = self.pf_note = self.fm_note = self.sec_note = ""
        self.fm_ab_note = self.fm_pol_note = ""
        self.sec_mode = {}
        self.sec_bytes = (self.size_bytes >> 21) << 21
        self.net_addr = ""
        self.pages = self.remote = self.local = None
        self.size_h = to_iec(self.size_bytes)
        self.started = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        self.load_start = loadavg()
        self.agent_opts = {}
        self.prog_features = {}

    # -- agents --

    def pin(self, name):
        if self.a.pin != "cpu0":
            return
        r = subprocess.run(["taskset", "-a", "-p", "-c", "0",
                            str(self.c.node_proc[name].pid)], stdout=subprocess.DEVNULL)
        if r.returncode != 0:
            raise Die(f"cannot pin agent {name} to CPU 0")

    def agents_start(self, *flags):
        for h, n in (("hostA", "hostA"), ("hostB", "hostB")):
            self.c.node_start(h, n, "--transport", self.a.transport, *map(str, flags))
        for n in ("hostA", "hostB"):
            self.pin(n)
        self.agent_flags = list(map(str, flags))

    def agents_stop(self):
        for n in ("hostA", "hostB"):
            self.c.stop(self.c.node_proc.get(n))

    def agent_a_restart(self, *flags):
        """Host A's agent alone again with FLAGS. Host B keeps its pool (the
        far-memory regions are all B's); A's own chunks of the main region
        are gone from here on, so nothing after this uses that region."""
        self.c.stop(self.c.node_proc.get("hostA"))
        self.c.node_start("hostA", "hostA", "--transport", self.a.transport,
                          *map(str, flags))
        self.pin("hostA")

    def agent_caches(self, host):
        """True if the agent keeps a cache of remote pages (cache mode)."""
        rc, out = self.c.cli(host, host, "stats", errors=False)
        return re.search(r" cache: limit=[1-9]", out) is not None

    def node_b(self):
        """Host B's node id now."""
        n = self.c.node_id("hostB")
        if n is None:
            raise Die("no node id for host B")
        return n

    def remote_region(self, name, nbytes, node_b=None):
        """A region of NBYTES (whole 2 MiB chunks) all owned by host B,
        filled there with the seed. The agents' pools are sized for the
        main region and far memory: delete it (region_delete) when done."""
        owners = ",".join([str(node_b or self.node_b())] * (nbytes >> 21))
        rc, out = self.c.cli("hostA", "hostA", "region", "create", name, "--size", nbytes,
                             "--chunk-size", "2M", "--owners", owners)
        if rc != 0:
            raise Die(f"region create {name}: {out.strip()}")
        rc, out = self.c.cli("hostB", "hostB", "fill", name, "--seed", self.seed)
        if rc != 0:
            raise Die(f"fill {name} on host B: {tail_text(out, 2)}")

    def region_delete(self, name):
        rc, out = self.c.cli("hostA", "hostA", "region", "delete", name)
        if rc != 0:
            raise Die(f"region delete {name}: {out.strip()}")

    def region_create(self):
        rc, out = self.c.cli("hostA", "hostA", "region", "create", self.region,
                             "--size", self.a.size)
        if rc != 0:
            raise Die(f"region create {self.region}: {out.strip()}")

    def region_fill(self):
        for h, name in (("hostA", "A"), ("hostB", "B")):
            rc, out = self.c.cli(h, h, "fill", self.region, "--seed", self.seed)
            if rc != 0:
                raise Die(f"fill on host {name}: {tail_text(out, 2)}")

    def agents_restart(self, *flags):
        """Both agents again with FLAGS. A restarted owner's pages are gone
        (the agent refuses them rather than serve stale data), so the region
        is placed again from scratch, under a new name, and refilled."""
        rc, out = self.c.cli("hostA", "hostA", "region", "delete", self.region)
        if rc != 0:
            raise Die(f"region delete {self.region}: {out.strip()}")
        self.agents_stop()
        self.agents_start(*flags)
        self.region_gen += 1
        self.region = f"bench{self.region_gen}"
        self.region_create()
        self.region_fill()

    def run_fault(self, tag, *args, region=None):
        """bench_fault on host A, output in fault-TAG.out; dies if it fails."""
        rc, out = self.run_prog(f"fault-{tag}", "bench_fault", region or self.region,
                                "--seed", self.seed, "--runs", self.runs,
                                "--cpu", self.fault_cpu, *args, host="hostA", agent=True)
        if rc != 0:
            bad = [ln for ln in self.lines(out) if re.search(
                r"did not verify|differ|SIGBUS|bench_fault: ", ln)]
            sys.stderr.writelines(bad[-5:])
            mm = vals(out, "bench_fault", "mismatches")
            if mm and number(mm[0]) != 0:
                raise Die(f"bench_fault ({tag}): {mm[0]} page checks failed "
                          "(each pass checks every page)")
            raise Die(f"bench_fault ({tag}) failed: {self.why(out, 2)}")
        return out

    def agent_has(self, opt, value):
        """True if the agent takes OPT VALUE: "farpage-node OPT VALUE
        --version" succeeds (options are read in order; --version ends
        the parse before anything starts)."""
        key = (opt, value)
        if key not in self.agent_opts:
            rc, _ = self.c.run("local", [self.c.node_bin, opt, value, "--version"],
                               errors=False)
            self.agent_opts[key] = rc == 0
        return self.agent_opts[key]

    def features(self, prog):
        """What bench/PROG --features lists (a JSON line), as a set."""
        if prog not in self.prog_features:
            rc, out = self.c.run("local", [f"{self.bb}/{prog}", "--features"], errors=False)
            feat = set()
            for o in walk_json(out.strip()):
                if o.get("what") == "features" and isinstance(o.get("features"), list):
                    feat = set(o["features"])
            self.prog_features[prog] = feat
        return self.prog_features[prog]

    def detect_transport(self):
        """The transport host A's agent uses to its peer ("none" before any read)."""
        rc, out = self.c.cli("hostA", "hostA", "status", "--json", errors=False)
        for o in walk_json(out):
            t = o.get("transport")
            if isinstance(t, str) and re.fullmatch(r"[a-z]*", t) and t != "none":
                self.transport_used = t
                return
        self.transport_used = getattr(self, "transport_used", "tcp")

    # -- the run --

    def setup(self):
        a, c = self.a, self.c
        if not a.attach:
            c.require()
        if os.getuid() != 0:
            raise Skip("needs root (userfaultfd for all processes, namespaces)")
        if not a.attach:
            if c.hosts_netns("hostA", "hostB"):
                na, nb = c.ns_names["hostA"], c.ns_names["hostB"]
                self.placement_net = (f"network namespaces {na} ({c.ip['hostA']}) and "
                                      f"{nb} ({c.ip['hostB']}), veth pair")
            else:
                self.say("cannot create network namespaces; using loopback addresses")
                c.hosts_loopback("hostA", "hostB")
                self.placement_net = "loopback (one namespace)"
            # Far memory puts three more regions on host B: 1/2 --size for
            # the fault path A/B, 2x and 4x the cache.
            c.pool = a.size
            if a.farmem != "off":
                c.pool = (self.size_bytes + (self.size_bytes // 2 + (2 << 20))
                          + 6 * self.fm_cache_bytes)
            c.coord_spawn("hostA", f"{c.ip['hostA']}:0", f"{self.tmp}/coord")
            self.agents_start()
            self.region_create()
            self.region_fill()
            self.mode = "cluster"
        else:
            m = re.fullmatch(r"(\[[^]]+\]:[0-9]+|[^:]+:[0-9]+):(.+)", a.attach)
            if not m:
                bad_arg(f"--attach: expected COORD_ADDR:PORT:AGENT_SOCK, got '{a.attach}'")
            c.hosts_loopback("hostA")
            c.coord, c.coord_host = m.group(1), "hostA"
            c.node_sock["hostA"] = m.group(2)
            self.placement_net = f"attached to the cluster of coordinator {c.coord}"
            self.mode = "attach"
            if a.region:
                self.region = a.region
            else:
                if not a.remote_fill:
                    bad_arg("--attach: the other owners must fill the region: give --region "
                            "NAME (filled with --seed N everywhere) or --remote-fill CMD")
                self.region = f"bench-{os.getpid()}-{random.randrange(32768)}"
                rc, out = c.cli("hostA", "hostA", "region", "create", self.region,
                                "--size", a.size)
                if rc != 0:
                    raise Die(f"region create: {out.strip()}")
                self.created_region = self.region
                rc, out = c.cli("hostA", "hostA", "fill", self.region, "--seed", self.seed)
                if rc != 0:
                    raise Die(f"fill on this host: {tail_text(out, 2)}")
                cmd = a.remote_fill.replace("{region}", self.region).replace(
                    "{seed}", str(self.seed))
                r = subprocess.run(["bash", "-c", cmd], stdout=subprocess.PIPE,
                                   stderr=subprocess.STDOUT)
                if r.returncode != 0:
                    raise Die("--remote-fill failed: "
                              + tail_text(r.stdout.decode(errors="replace"), 3))
        self.detect_transport()
        # How host A's agent serves faults with its default flags: cache
        # (the zero-copy UFFDIO_CONTINUE path) or copy.
        self.main_fault_mode = "cache" if self.agent_caches("hostA") else "copy"
        self.ncpu = os.cpu_count() or 1
        try:
            self.ncpu = len(os.sched_getaffinity(0))
        except OSError:
            pass
        self.cpu_model = cpu_model()
        if a.pin == "cpu0":
            self.floor_pl, self.fault_cpu = "same", "0"
            self.placement_fp = "all on CPU 0 (both agents and the guest threads)"
        else:
            self.floor_pl, self.fault_cpu = "none", "none"
            self.placement_fp = ("unpinned (agents and guest threads where the scheduler "
                                 "puts them)")
        if self.mode == "attach":
            self.placement_fp += "; attached agents: not ours, not pinned"
        self.say(f"cluster: {self.placement_net}; transport {self.transport_used}; region "
                 f"{self.region} {a.size}; {self.runs} runs; {self.ncpu} CPUs")
        # Floors are smaller for small (smoke) runs: they only need to be there.
        if self.size_bytes < 64 << 20:
            self.floor_iters, self.stream_secs, self.cold = 5000, 1, "256M"
        else:
            self.floor_iters, self.stream_secs, self.cold = 20000, 2, "1G"
        # same = both ends on CPU 0, cross = CPU 0 and CPU 1, none = unpinned.
        self.placements = ("same", "cross", "none") if self.ncpu >= 2 else ("same", "none")

    def header(self):
        return [
            "",
            f"{PROG} {self.started}  {os.uname().release}  {self.cpu_model}  {self.ncpu} CPUs",
            f"hosts: {self.placement_net}; transport {self.transport_used}; load average at "
            f"start {self.load_start}",
        ]

    def secure_only(self):
        secure_run(self)
        self.put("agent_flags", "")
        self.write_json()
        lines = self.header() + [""] + secure_table(self) + ["", f"JSON: {self.json_out}"]
        print("\n".join(lines), flush=True)

    def derived(self):
        """The floors to compare with, and ratios."""
        pl, m = self.floor_pl, self.m
        self.put("floors.placement", pl)

        def copy_fig(dst, src):
            self.put(dst, m(src))
            if m(src) is not None:
                self.put(f"{dst}_spread", [self.lo[src], self.hi[src]])
                self.lo[dst], self.hi[dst] = self.lo[src], self.hi[src]
            self.med[dst] = m(src)

        copy_fig("floors.uffd_p50_us", f"floors.uffd.{pl}.p50_us")
        copy_fig("floors.uffd_p99_us", f"floors.uffd.{pl}.p99_us")
        copy_fig("floors.rtt_p50_us", f"floors.rtt.{pl}.p50_us")
        copy_fig("floors.rtt_p99_us", f"floors.rtt.{pl}.p99_us")
        copy_fig("floors.stream_MBps", f"floors.stream.{pl}.MBps")
        if m("floors.uffd_p50_us") is not None and m("floors.rtt_p50_us") is not None:
            f50 = round(m("floors.uffd_p50_us") + m("floors.rtt_p50_us"), 3)
            self.med["floors.fault_p50_us"] = f50
            self.put("floors.fault_p50_us", f50)
            if m("floors.uffd_p99_us") is not None and m("floors.rtt_p99_us") is not None:
                f99 = round(m("floors.uffd_p99_us") + m("floors.rtt_p99_us"), 3)
                self.med["floors.fault_p99_us"] = f99
                self.put("floors.fault_p99_us", f99)
            # One fault at a time can move at most a page per floor latency.
            if f50 > 0:
                self.med["floors.serial_MBps"] = round(4096 / f50, 1)
                self.put("floors.serial_MBps", self.med["floors.serial_MBps"])
        # Fault-in against the TCP stream floor, the far-memory targets:
        # sequential >= 0.6, random with background prefetch >= 0.4 (the
        # main runs, agents at their defaults).
        stream = m("floors.stream_MBps")
        for key, src in (("seq_t1", "fault_in.seq.t1_MBps"), ("seq_t4", "fault_in.seq.t4_MBps"),
                         ("rand_prefetch_t1", "prefetch.fault_in.rand.t1_MBps"),
                         ("rand_prefetch_t4", "prefetch.fault_in.rand.t4_MBps"),
                         ("prefetch_fill", "prefetch.fill.MBps")):
            v = m(src)
            r = round(v / stream, 3) if v is not None and stream and stream > 0 else None
            self.med[f"farmem.floor.{key}"] = r
            self.put(f"farmem.floor.{key}", r)
        self.put("farmem.floor.stream_MBps", stream)
        self.put("farmem.floor.seq_target", 0.6)
        self.put("farmem.floor.rand_prefetch_target", 0.4)
        self.put("farmem.floor.fault_mode", self.main_fault_mode)
        # Unpinned floors add two cross-CPU wake-ups that farpage may not
        # pay: the same-CPU sum is the best case any placement reaches here.
        us, rs = m("floors.uffd.same.p50_us"), m("floors.rtt.same.p50_us")
        if us is not None and rs is not None:
            self.med["floors.best_fault_p50_us"] = round(us + rs, 3)
            self.put("floors.best_fault_p50_us", self.med["floors.best_fault_p50_us"])

    def metadata(self):
        a = self.a
        self.detect_transport()
        self.put("transport", self.transport_used)
        self.put("transport_requested", a.transport)
        self.put("placement.farpage", self.placement_fp)
        self.put("placement.pin", a.pin)
        self.put("placement.floors_compared", self.floor_pl)
        self.put("placement.hosts", self.placement_net)
        self.put("placement.cpus", self.ncpu)
        self.put("machine.cpu_model", self.cpu_model or "unknown")
        self.put("machine.kernel", os.uname().release)
        self.put("machine.hostname", hostname())
        # Other work on the machine moves every figure: the load at the start/end.
        self.put("machine.loadavg_start", self.load_start)
        self.put("machine.loadavg_end", loadavg())
        self.put("runs", self.runs)
        self.put("size", self.size_h)
        self.put("timestamp", self.started)
        self.put("mode", self.mode)

    def main(self):
        self.setup()
        if self.a.secure == "only":
            self.secure_only()
            return
        for fn in SECTIONS:
            fn(self)
        self.derived()
        self.metadata()
        if self.a.secure == "on":
            secure_run(self)
        self.put("agent_flags", " ".join(self.agent_flags))
        self.write_json()
        print("\n".join(report.table(self)), flush=True)
        self.put("plot", self.png_out if report.plot(self) else "none")
        self.put("plot_fault_in", report.plot_fault_in(self) or "none")
        self.put("plot_programs", report.plot_programs(self) or "none")
        self.write_json()

    def finish(self):
        """A region we made on someone else's cluster goes away with us;
        every process and namespace of ours is ended."""
        if self.created_region:
            self.c.cli("hostA", "hostA", "region", "delete", self.created_region)
        clean = self.c.cleanup()
        if os.environ.get("FP_KEEP"):
            shutil.copytree(self.tmp, os.environ["FP_KEEP"], dirs_exist_ok=True)
        shutil.rmtree(self.tmp, ignore_errors=True)
        return clean
