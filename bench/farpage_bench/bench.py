# SPDX-License-Identifier: MIT
"""A run's results and what every section uses: keys, figures, rows."""

import json
import os
import re
import sys

from .results import stat3, vals
from .util import fmt, log, nest, note_text


class Bench:
    def __init__(self, args):
        self.a = args
        self.flat = {}
        self.med, self.lo, self.hi = {}, {}, {}
        self.more_rows = []

    # -- results --

    def put(self, key, value):
        """A key of the JSON (dotted: nested); a str, number, list or None."""
        self.flat[key] = value

    def fig(self, key, out, what, field, **filt):
        """The median of FIELD over the runs of WHAT lines matching FILT
        in program output OUT into KEY, min..max into KEY_spread, every run
        into KEY_runs; returns the median (None if no run printed it)."""
        s = stat3(vals(out, what, field, **filt))
        return self.set_fig(key, s)

    def set_fig(self, key, s):
        if s is None:
            self.put(key, None)
            self.med[key] = None
            return None
        med, lo, hi, runs = s
        self.put(key, med)
        self.put(f"{key}_spread", [lo, hi])
        self.put(f"{key}_runs", runs)
        self.med[key], self.lo[key], self.hi[key] = med, lo, hi
        return med

    def m(self, key):
        return self.med.get(key)

    def write_json(self):
        with open(self.json_out + ".tmp", "w") as f:
            json.dump(nest(self.flat), f, indent=2, ensure_ascii=False)
            f.write("\n")
        os.replace(self.json_out + ".tmp", self.json_out)

    # -- running things --

    def say(self, msg):
        log(msg)

    def vcat(self, path):
        if not self.a.verbose:
            return
        for line in self.lines(path):
            if line.startswith("{") or re.match(r"[a-z_]+: ", line):
                sys.stderr.write(line)

    def run_prog(self, tag, prog, *args, host=None, agent=False):
        """bench/PROG --json with ARGS (on HOST, with host A's agent socket
        if AGENT) to its end, its result lines in TMP/TAG.out, its stderr
        in TMP/TAG.err: (status, the .out path)."""
        out, err = f"{self.tmp}/{tag}.out", f"{self.tmp}/{tag}.err"
        env = self.c.agent_env("hostA") if agent else None
        rc, _ = self.c.run(host or "local",
                           [f"{self.bb}/{prog}", "--json", *map(str, args)],
                           out_path=out, env=env, err_path=err)
        self.vcat(out)
        return rc, out

    @staticmethod
    def lines(path):
        """The lines of a program's output and of its stderr beside it."""
        text = []
        for p in (path, path[:-4] + ".err" if path.endswith(".out") else None):
            try:
                with open(p, errors="replace") as f:
                    text += f.readlines()
            except (OSError, TypeError):
                pass
        return text

    def tail(self, path, n):
        try:
            with open(path, errors="replace") as f:
                return "".join(f.readlines()[-n:]).strip()
        except OSError:
            return ""

    def why(self, out, n):
        """What a program that failed said last: its stderr, else its output."""
        return self.tail(out[:-4] + ".err", n) or self.tail(out, n)

    # -- the table --

    def row_text(self, name, key, unit, ftext="", fval=None):
        """A table row: FIGURE KEY UNIT [FLOOR_TEXT FLOOR_VALUE]."""
        v = self.m(key)
        if v is None:
            return f"{name:<44} {'n/a':>12}  {'':<21} {ftext:<30} "
        spread = f"{fmt(self.lo.get(key, v))}..{fmt(self.hi.get(key, v))}"
        ratio = ""
        if ftext and fval is None:
            ftext = f"{ftext} n/a"
        elif fval is not None and fval > 0:
            r = round(v / fval, 6)
            ratio = (f"{r:.3f}" if r < 0.095 else f"{r:.2f}") + "x"
            ftext = f"{ftext} {fmt(fval)} {unit}"
        return f"{name:<44} {fmt(v) + ' ' + unit:>12}  {spread:<21} {ftext:<30} {ratio}"

    def row(self, name, key, unit, ftext="", fval=None):
        """A row of a new section's figure, printed after far memory."""
        self.more_rows.append(self.row_text(name, key, unit, ftext, fval))

    def note(self, name, text):
        self.more_rows.append(note_text(name, text))
