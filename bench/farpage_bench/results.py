# SPDX-License-Identifier: MIT
"""What the programs print: one JSON object a line, {"what": W, "k": v, ...}
(every bench_* program with --json; the helper scripts' key=value lines
are turned into the same by kv_to_jsonl)."""

import json
import re

from .util import number, tidy


def records(path):
    """Every JSON object line of a program's output: (what, {k: v})."""
    out = []
    try:
        with open(path, errors="replace") as f:
            for line in f:
                if not line.startswith("{"):
                    continue
                try:
                    o = json.loads(line)
                except ValueError:
                    continue
                if isinstance(o, dict) and isinstance(o.get("what"), str):
                    out.append((o["what"], o))
    except FileNotFoundError:
        pass
    return out


def kv_to_jsonl(src, dst):
    """A script's "what: k=v ..." lines from SRC as JSON lines in DST
    (numbers as numbers, the rest as text); DST's path."""
    with open(src, errors="replace") as f, open(dst, "w") as o:
        for line in f:
            fs = line.split()
            if not fs or not fs[0].endswith(":") or not re.fullmatch(r"[a-z_]+:", fs[0]):
                continue
            rec = {"what": fs[0][:-1]}
            for field in fs[1:]:
                k, eq, v = field.partition("=")
                if eq:
                    n = number(v)
                    rec[k] = v if n is None else n
            o.write(json.dumps(rec) + "\n")
    return dst


def vals(path, what, field, **filt):
    """FIELD's value on every WHAT line whose fields match FILT (compared
    as text), as they are (numbers or text)."""
    want = {k: str(v) for k, v in filt.items()}
    return [kv[field] for w, kv in records(path)
            if w == what and field in kv
            and all(k in kv and str(kv[k]) == v for k, v in want.items())]


def stat3(values):
    """(median, min, max, sorted list) of the numbers among VALUES, or None."""
    v = sorted(x for x in map(number, values) if x is not None)
    if not v:
        return None
    n = len(v)
    med = v[n // 2] if n % 2 else tidy((v[n // 2 - 1] + v[n // 2]) / 2)
    return med, v[0], v[-1], v
