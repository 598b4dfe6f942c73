# SPDX-License-Identifier: MIT
"""The cluster: what tests/lib.sh does for the tests, in Python."""

import os
import random
import re
import signal
import subprocess
import sys
import time

from .util import Die, Skip, log, walk_json

# What ASan, LSan, UBSan and TSan reports start with.
SAN_RE = re.compile(r"ERROR: (Address|Leak|Thread)Sanitizer|WARNING: ThreadSanitizer|"
                    r"runtime error:")


class Cluster:
    """Coordinator and agents on hosts that are network namespaces (or the
    root namespace, loopback). Every process carries FP_RUN_ID=TMP in its
    environment: cleanup() finds and ends them all."""

    def __init__(self, bindir, tmp):
        self.bin = bindir
        self.coord_bin = f"{bindir}/coordinator/farpage-coordinator"
        self.node_bin = f"{bindir}/node/farpage-node"
        self.cli_bin = f"{bindir}/cli/farpage"
        self.tmp = tmp
        self.procs = []
        self.netns = []
        self.run_prefix = {}
        self.ip = {}
        self.node_proc = {}
        self.node_sock = {}
        self.coord = ""
        self.coord_host = None
        self.coord_proc = None
        self.insecure = False
        self.pool = "256M"
        self.ns_names = {}
        os.environ["FP_RUN_ID"] = tmp

    def require(self):
        for b in (self.coord_bin, self.node_bin, self.cli_bin):
            if not os.access(b, os.X_OK):
                raise Die(f"{b} not built")
        self.key()
        if os.getuid() != 0:
            raise Skip("needs root (userfaultfd for all processes, namespaces)")
        if not (os.path.exists("/proc/sys/vm/unprivileged_userfaultfd")
                or os.path.exists("/dev/userfaultfd")):
            raise Skip("kernel without userfaultfd")

    def key(self):
        if self.insecure:
            return
        k = f"{self.tmp}/cluster.key"
        if not os.path.exists(k) or os.path.getsize(k) == 0:
            r = subprocess.run([self.cli_bin, "keygen", "-o", k],
                               stdout=subprocess.DEVNULL)
            if r.returncode != 0:
                raise Die("farpage keygen failed")
        os.environ["FARPAGE_KEY_FILE"] = k

    def insecure_flag(self):
        return ["--insecure"] if self.insecure else []

    def hosts_loopback(self, *hosts):
        for h in hosts:
            self.run_prefix[h] = []
            self.ip[h] = "127.0.0.1"

    def hosts_netns(self, a, b):
        """Two namespaces joined by a veth pair; False if they can't be made."""
        ident = f"{os.getpid()}{random.randrange(32768)}"
        na, nb = f"fp{ident}a", f"fp{ident}b"
        va, vb = f"fpa{ident[-8:]}", f"fpb{ident[-8:]}"
        net = f"10.{random.randrange(200) + 20}.{random.randrange(250) + 1}"

        def ip(*args):
            return subprocess.run(["ip", *args], stdout=subprocess.DEVNULL,
                                  stderr=subprocess.DEVNULL).returncode == 0

        for ns in (na, nb):
            if not ip("netns", "add", ns):
                return False
            self.netns.append(ns)
        if not ip("link", "add", va, "netns", na, "type", "veth", "peer",
                  "name", vb, "netns", nb):
            return False
        for args in (("-n", na, "addr", "add", f"{net}.1/24", "dev", va),
                     ("-n", nb, "addr", "add", f"{net}.2/24", "dev", vb),
                     ("-n", na, "link", "set", "lo", "up"),
                     ("-n", nb, "link", "set", "lo", "up"),
                     ("-n", na, "link", "set", va, "up"),
                     ("-n", nb, "link", "set", vb, "up")):
            if not ip(*args):
                return False
        self.run_prefix[a] = ["ip", "netns", "exec", na]
        self.run_prefix[b] = ["ip", "netns", "exec", nb]
        self.ip[a], self.ip[b] = f"{net}.1", f"{net}.2"
        self.ns_names = {a: na, b: nb}
        return True

    def spawn(self, host, cmd, log_path, env=None):
        """A background process on HOST, its output appended to LOG_PATH."""
        with open(log_path, "ab") as out:
            p = subprocess.Popen(self.run_prefix[host] + cmd, stdout=out,
                                 stderr=subprocess.STDOUT,
                                 stdin=subprocess.DEVNULL, env=env)
        self.procs.append(p)
        return p

    def run(self, host, cmd, out_path=None, env=None, errors=True, err_path=None):
        """A command on HOST to its end: (status, output if not to a file;
        with its stderr unless not ERRORS). With OUT_PATH its stdout goes
        there, its stderr too or to ERR_PATH."""
        full = self.run_prefix[host] + cmd
        if out_path:
            with open(out_path, "wb") as out, open(err_path or os.devnull, "wb") as err:
                r = subprocess.run(full, stdout=out,
                                   stderr=err if err_path else subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, env=env)
            return r.returncode, ""
        r = subprocess.run(full, stdout=subprocess.PIPE,
                           stderr=subprocess.STDOUT if errors else subprocess.DEVNULL,
                           stdin=subprocess.DEVNULL, env=env)
        return r.returncode, r.stdout.decode(errors="replace")

    @staticmethod
    def wait_file(path, secs=20):
        for _ in range(secs * 20):
            if os.path.exists(path) and os.path.getsize(path) > 0:
                return True
            time.sleep(0.05)
        return False

    def coord_spawn(self, host, listen, data_dir):
        addr = f"{self.tmp}/coord.addr"
        if os.path.exists(addr):
            os.unlink(addr)
        self.key()
        self.coord_host = host
        self.coord_proc = self.spawn(host, [
            self.coord_bin, "--listen", listen, *self.insecure_flag(),
            "--addr-file", addr, "--data-dir", data_dir,
            "--log-level", os.environ.get("FP_LOG_LEVEL", "info")],
            f"{self.tmp}/coord.log")
        if not self.wait_file(addr):
            raise Die(f"coordinator did not start on {listen}")
        with open(addr) as f:
            self.coord = f.readline().strip()

    def node_start(self, host, name, *flags):
        addr = f"{self.tmp}/{name}.addr"
        if os.path.exists(addr):
            os.unlink(addr)
        self.node_sock[name] = f"{self.tmp}/{name}.sock"
        self.key()
        fm = os.environ.get("FP_FAULT_MODE", "")
        self.node_proc[name] = self.spawn(host, [
            self.node_bin, "--coordinator", self.coord, "--name", name,
            *self.insecure_flag(), "--pool-size", str(self.pool),
            "--data-listen", f"{self.ip[host]}:0", "--addr-file", addr,
            "--sock", self.node_sock[name], "--heartbeat-ms", "200",
            "--log-level", os.environ.get("FP_LOG_LEVEL", "info"),
            *(["--fault-mode", fm] if fm else []), *flags],
            f"{self.tmp}/{name}.log")
        if not self.wait_file(addr):
            raise Die(f"agent {name} did not start")

    def stop(self, p):
        """TERM, up to 5 s, then KILL."""
        if p is None or p.poll() is not None:
            return
        p.terminate()
        try:
            p.wait(5)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()

    def agent_env(self, name):
        env = dict(os.environ)
        env["FARPAGE_AGENT_SOCK"] = self.node_sock.get(name, "")
        return env

    def cli(self, host, node, *args, errors=True):
        """The CLI on HOST talking to NODE's agent: (status, output; with
        its stderr unless not ERRORS)."""
        return self.run(host, [self.cli_bin, "--coordinator", self.coord,
                               *self.insecure_flag(), *map(str, args)],
                        env=self.agent_env(node), errors=errors)

    def node_id(self, name):
        """The node id the coordinator gives agent NAME now (None if none)."""
        rc, out = self.run(self.coord_host, [
            self.cli_bin, "--coordinator", self.coord, *self.insecure_flag(),
            "status", "--json"], errors=False)
        for o in walk_json(out):
            if o.get("name") == name and isinstance(o.get("id"), int):
                return o["id"]
        return None

    def tagged(self):
        """PIDs of processes carrying this run's tag, this one left out."""
        want = f"FP_RUN_ID={self.tmp}".encode()
        pids = []
        for d in os.listdir("/proc"):
            if not d.isdigit() or int(d) == os.getpid():
                continue
            try:
                with open(f"/proc/{d}/environ", "rb") as f:
                    if want in f.read().split(b"\0"):
                        pids.append(int(d))
            except OSError:
                pass
        return pids

    def cleanup(self):
        """Ends every process, removes the namespaces; True if nothing
        was left behind that only the tag found and no sanitizer spoke."""
        for p in self.procs:
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGCONT)
                    p.terminate()
                except OSError:
                    pass
        deadline = time.monotonic() + 5
        for p in self.procs:
            try:
                p.wait(max(0.0, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        clean = True
        left = self.tagged()
        if left:
            log(f"FAIL: the run left {len(left)} process(es) running (ended now): {left}")
            clean = False
            for sig in (signal.SIGTERM, signal.SIGKILL):
                for pid in left:
                    try:
                        os.kill(pid, sig)
                    except OSError:
                        pass
                for _ in range(50):
                    left = self.tagged()
                    if not left:
                        break
                    time.sleep(0.1)
        for ns in self.netns:
            subprocess.run(["ip", "netns", "del", ns], stderr=subprocess.DEVNULL)
        # A sanitizer report from a daemon (*.log) or a program (*.out)
        # fails the run, whatever else passed.
        for name in sorted(os.listdir(self.tmp)):
            if not name.endswith((".log", ".out", ".err")):
                continue
            with open(f"{self.tmp}/{name}", errors="replace") as f:
                text = f.read()
            m = SAN_RE.search(text)
            if m:
                sys.stderr.write(text[m.start():m.start() + 4000] + "\n")
                log(f"FAIL: a sanitizer reported errors in {name} (above)")
                clean = False
        return clean

    def dump_logs(self):
        for name in sorted(os.listdir(self.tmp)):
            if name.endswith(".log"):
                with open(f"{self.tmp}/{name}", errors="replace") as f:
                    lines = f.readlines()[-30:]
                print(f"----- {name} (last 30 lines)", file=sys.stderr)
                sys.stderr.writelines(lines)
