#!/usr/bin/env python3
"""Markdown tables of a Python-overhead A/B (scripts/gpu/plans/python-ab.sh: run.sh
python-overhead with OVERHEAD_VARIANTS="P T P T ..."): for each pool, call, batch size and
input, the delta (Python - C, µs) of every run of build A and of build B, in run order, and
the ratio of their medians.

    python3 scripts/gpu/overhead_table.py OUT/overhead P T [--pool cuda|host]
"""
import argparse
import glob
import os
import re
import statistics


def deltas(path):
    """{(operation, bs, input): delta µs} of one python_overhead.py table."""
    rows = {}
    with open(path) as f:
        for line in f:
            cells = [c.strip() for c in line.split("|")]
            if len(cells) > 7 and cells[2].isdigit() and cells[1] != "(timer floor)":
                rows[(cells[1], int(cells[2]), cells[3])] = float(cells[6])
    return rows


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("folder")
    p.add_argument("a")
    p.add_argument("b")
    p.add_argument("--pool", choices=("cuda", "host"), action="append")
    args = p.parse_args()
    for pool in args.pool or ("cuda", "host"):
        runs = {args.a: [], args.b: []}
        pattern = os.path.join(args.folder, f"python_overhead_{pool}_*_*.md")
        for path in sorted(glob.glob(pattern),
                           key=lambda s: int(re.search(r"_(\d+)_[^_]+\.md$", s).group(1))):
            name = re.search(r"_\d+_([^_]+)\.md$", path).group(1)
            if name in runs:
                runs[name].append(deltas(path))
        if not runs[args.a] or not runs[args.b]:
            continue
        print(f"\n{pool} pool: Python - C, µs per call ({args.a}: {len(runs[args.a])} runs, "
              f"{args.b}: {len(runs[args.b])} runs, in run order)\n")
        print(f"| call | bs | input | {args.a} | {args.b} | median {args.b} / {args.a} |")
        print("|---|---:|---|---|---|---:|")
        for key in runs[args.a][0]:
            a = [r[key] for r in runs[args.a] if key in r]
            b = [r[key] for r in runs[args.b] if key in r]
            if not b:
                continue
            ratio = statistics.median(b) / statistics.median(a)
            print(f"| {key[0]} | {key[1]} | {key[2]} | {' / '.join(f'{x:+.2f}' for x in a)} | "
                  f"{' / '.join(f'{x:+.2f}' for x in b)} | {ratio:.2f} |")


if __name__ == "__main__":
    main()
