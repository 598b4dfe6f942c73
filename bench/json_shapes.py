#!/usr/bin/python3
# SPDX-License-Identifier: MIT
"""The shape of the benchmarks' JSON: which keys, of which types.

  json_shapes.py record --driver BENCH.JSON --outs DIR [--outs DIR ...] -o SHAPES.JSON
  json_shapes.py check  --driver BENCH.JSON --outs DIR [--outs DIR ...] --shapes SHAPES.JSON

record writes SHAPES.JSON from a farpage-bench run: every dotted key of
the driver's JSON with its type, and, for every kind of line ("what") the
programs printed with --json (the *.out files of DIR: FP_KEEP=DIR keeps a
run's), its keys with their types and the keys every such line had.
check fails (status 1, saying what) if the driver's JSON lacks a key of
SHAPES.JSON or has it with another type (null stands for any), unless the
part it belongs to was not measured in this run (its status), or if a
program's line is of a kind SHAPES.JSON does not know, lacks a key every
such line had or has a key or type none had.
"""

import argparse
import json
import os
import sys

# Parts of the driver's JSON that a host may not be able to measure (their
# .status says so): their keys are checked only where measured.
PARTS = ("readahead", "prefetch", "farmem.ab", "farmem.policy", "farmem", "scale.map",
         "scale.loops", "scale.dirty", "replica", "migrate", "secure", "coord.scale", "coord",
         "coherent")


def kind(v):
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "bool"
    if isinstance(v, (int, float)):
        return "number"
    if isinstance(v, str):
        return "string"
    if isinstance(v, list):
        return "list"
    return "object"


def flat(d, pre=""):
    out = {}
    for k, v in d.items():
        key = f"{pre}{k}"
        if isinstance(v, dict):
            out.update(flat(v, key + "."))
        else:
            out[key] = kind(v)
    return out


def lines(dirs):
    """Every JSON line of the *.out files under DIRS."""
    for d in dirs:
        for root, _, files in os.walk(d):
            for name in sorted(files):
                if not name.endswith(".out"):
                    continue
                with open(os.path.join(root, name), errors="replace") as f:
                    for line in f:
                        if not line.startswith("{"):
                            continue
                        try:
                            o = json.loads(line)
                        except ValueError:
                            continue
                        if isinstance(o, dict) and isinstance(o.get("what"), str):
                            yield name, o


def record(a):
    with open(a.driver) as f:
        drv = json.load(f)
    progs = {}
    for _, o in lines(a.outs):
        p = progs.setdefault(o["what"], {"keys": {}, "required": None})
        for k, v in o.items():
            p["keys"].setdefault(k, [])
            if kind(v) not in p["keys"][k]:
                p["keys"][k].append(kind(v))
        req = set(o)
        p["required"] = req if p["required"] is None else p["required"] & req
    for p in progs.values():
        p["required"] = sorted(p["required"])
        p["keys"] = {k: sorted(v) for k, v in sorted(p["keys"].items())}
    shapes = {
        "driver": dict(sorted(flat(drv).items())),
        "driver_status": {p: _get(drv, f"{p}.status") for p in PARTS
                          if isinstance(_get(drv, f"{p}.status"), str)},
        "programs": dict(sorted(progs.items())),
    }
    with open(a.o, "w") as f:
        json.dump(shapes, f, indent=1, sort_keys=False)
        f.write("\n")
    return 0


def _get(d, key):
    for p in key.split("."):
        if not isinstance(d, dict):
            return None
        d = d.get(p)
    return d


def part_of(key):
    for p in PARTS:
        if key.startswith(p + "."):
            return p
    return None


def check(a):
    with open(a.shapes) as f:
        ref = json.load(f)
    with open(a.driver) as f:
        drv = json.load(f)
    have = flat(drv)
    bad = []
    for key, t in ref["driver"].items():
        p = part_of(key)
        if p and ref["driver_status"].get(p) == "measured" and _get(drv, f"{p}.status") != "measured":
            continue
        if key not in have:
            bad.append(f"driver JSON: no key {key}")
        elif have[key] != t and "null" not in (have[key], t):
            bad.append(f"driver JSON: {key} is a {have[key]}, was a {t}")
    n = 0
    for name, o in lines(a.outs):
        n += 1
        p = ref["programs"].get(o["what"])
        if p is None:
            bad.append(f"{name}: a line of a kind not known: {o['what']}")
            continue
        for k in p["required"]:
            if k not in o:
                bad.append(f"{name}: a {o['what']} line without {k}")
        for k, v in o.items():
            if k not in p["keys"]:
                bad.append(f"{name}: a {o['what']} line with a new key {k}")
            elif kind(v) not in p["keys"][k] and kind(v) != "null":
                bad.append(f"{name}: {o['what']}.{k} is a {kind(v)}, was {p['keys'][k]}")
    if n == 0:
        bad.append("no program output (*.out JSON lines) found")
    for b in sorted(set(bad)):
        print(f"json_shapes: {b}", file=sys.stderr)
    print(f"json_shapes: {len(ref['driver'])} driver keys, {n} program lines checked: "
          f"{'ok' if not bad else f'{len(set(bad))} differences'}", file=sys.stderr)
    return 1 if bad else 0


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    for c in ("record", "check"):
        s = sub.add_parser(c)
        s.add_argument("--driver", required=True)
        s.add_argument("--outs", action="append", required=True)
        if c == "record":
            s.add_argument("-o", required=True)
        else:
            s.add_argument("--shapes", required=True)
    a = ap.parse_args()
    return record(a) if a.cmd == "record" else check(a)


if __name__ == "__main__":
    sys.exit(main())
