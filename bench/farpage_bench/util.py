# SPDX-License-Identifier: MIT
"""Small helpers: logging, errors, numbers, sizes, the machine."""

import json
import os
import re
import sys
import time

PROG = "farpage-bench"


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


def bad_arg(msg):
    print(f"{PROG}: {msg}", file=sys.stderr)
    sys.exit(2)


class Die(Exception):
    """Something broke: the run ends with status 1 and a JSON saying what."""


class Skip(Exception):
    """The host cannot run the benchmark: status 77."""


def number(s):
    """A program's value as a JSON number (as it is if one already), or
    None if it is not one."""
    if isinstance(s, bool):
        return None
    if isinstance(s, (int, float)):
        return s
    if not isinstance(s, str):
        return None
    if re.fullmatch(r"-?[0-9]+", s):
        return int(s)
    if re.fullmatch(r"-?[0-9]*\.?[0-9]+([eE][-+]?[0-9]+)?", s):
        return float(s)
    return None


def tidy(v):
    """A computed number: an integral float as an int."""
    if isinstance(v, float) and v.is_integer():
        return int(v)
    return v


def fmt(v):
    """A figure in the table: 3 significant-ish digits."""
    if v >= 100:
        return f"{v:.0f}"
    if v >= 10:
        return f"{v:.1f}"
    return f"{v:.2f}"


IEC = "KMGTPE"


def from_iec(s):
    """numfmt --from=iec with an optional B or iB: bytes, or None."""
    m = re.fullmatch(r"([0-9]+(?:\.[0-9]+)?)([KMGTPE]?)(?:i?B|b)?", s)
    if not m:
        return None
    mult = 1024 ** (IEC.index(m.group(2)) + 1) if m.group(2) else 1
    v = float(m.group(1)) * mult
    return int(-(-v // 1))


def to_iec(n):
    """numfmt --to=iec-i --suffix=B: 500B, 4.0MiB, 16MiB (rounded up)."""
    if n < 1024:
        return f"{n}B"
    v, u = float(n), -1
    while v >= 1024 and u < len(IEC) - 1:
        v, u = v / 1024, u + 1
    if v < 10:
        v = -(-v * 10 // 1) / 10
        if v < 10:
            return f"{v:.1f}{IEC[u]}iB"
    v = int(-(-v // 1))
    if v >= 1024 and u < len(IEC) - 1:
        return f"1.0{IEC[u + 1]}iB"
    return f"{v}{IEC[u]}iB"


def plural(n):
    return "" if n == 1 else "s"


def fmt_n(v):
    return "n/a" if v is None else fmt(v)


def note_text(name, text):
    return f"{name:<44} {text}"


def tail_text(text, n):
    return "\n".join(text.strip().splitlines()[-n:])


def walk_json(text):
    """Every object in a JSON text (depth first); nothing if not JSON."""
    try:
        stack = [json.loads(text)]
    except ValueError:
        return
    while stack:
        v = stack.pop(0)
        if isinstance(v, dict):
            yield v
            stack[0:0] = list(v.values())
        elif isinstance(v, list):
            stack[0:0] = v


def nest(flat):
    """{"a.b": 1} -> {"a": {"b": 1}}, keys sorted as bytes; a key that is
    both a value and a prefix of others is said on stderr, the later left out."""
    root = {}
    for key in sorted(flat, key=lambda k: k.encode()):
        parts = key.split(".")
        d = root
        ok = True
        for p in parts[:-1]:
            nxt = d.setdefault(p, {})
            if not isinstance(nxt, dict):
                ok = False
                break
            d = nxt
        if not ok or isinstance(d.get(parts[-1]), dict):
            print(f"{PROG}: JSON key {key} clashes with another key (left out)", file=sys.stderr)
            continue
        d[parts[-1]] = flat[key]
    return root


def cdf(path):
    """Sorted ns samples -> (us, fraction), thinned to ~2000 points with
    every point of the top 1 % kept (up to 20000)."""
    try:
        with open(path) as f:
            v = sorted(int(x) for x in f.read().split())
    except (OSError, ValueError):
        return [], []
    n = len(v)
    xs, ys = [], []
    step = n / 2000 if n > 2000 else 1
    tail = n / 20000 if n > 20000 else 1
    nxt = 1
    for i in range(1, n + 1):
        if i < nxt and i != n:
            continue
        xs.append(v[i - 1] / 1000)
        ys.append(i / n)
        nxt = i + (step if i < 0.99 * n else tail)
    return xs, ys


def loadavg():
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return ""


def hostname():
    """The host name as text: bytes that are not UTF-8 become U+FFFD."""
    try:
        with open("/proc/sys/kernel/hostname", "rb") as f:
            raw = f.read().rstrip(b"\n")
    except OSError:
        raw = os.uname().nodename.encode(errors="surrogateescape")
    return raw.decode("utf-8", errors="replace")
