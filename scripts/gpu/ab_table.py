#!/usr/bin/env python3
"""The A/B table of a `scripts/gpu/run.sh bench` run with BENCH_VARIANTS (the C++
benchmark's bench_cpp_var<i>_<NAME>.csv, one per run of a build): device µs per call of each
(operation, page size, batch size) for each named build, every run of it side by side, and
the ratio of the builds' means, each against the one before it in the list, e.g.

    python3 scripts/gpu/ab_table.py OUT/bench P T          # T / P
    python3 scripts/gpu/ab_table.py OUT/bench P H T --ops alloc_extend --page-sizes 16
    python3 scripts/gpu/ab_table.py OUT/host P T --host    # host µs (ratio to the floor)

prints a Markdown table (as in BENCHMARKS.md). With --host the cells are host medians, each
followed by its ratio to that run's empty-kernel launch (issue 9's host criterion: <= 1.3).
"""
import argparse
import csv
import glob
import os
import re


def runs_by_build(folder, host=False):
    """{build name: [{(op, page size, bs): µs} for each of its runs, in run order]}: device
    µs, or with `host` (host median µs, host median / that run's launch floor)."""
    found = []
    for path in glob.glob(os.path.join(folder, "bench_cpp_*_*.csv")):
        match = re.fullmatch(r"bench_cpp_(?:var|env)(\d+)_(.+)\.csv", os.path.basename(path))
        if match:
            found.append((int(match[1]), match[2], path))
    runs = {}
    for _, name, path in sorted(found):
        with open(path, newline="") as f:
            rows = list(csv.DictReader(f))
        if host:
            cells = {(r["op"], int(r["page_size"]), int(r["bs"])):
                     (float(r["host_median_us"]),
                      float(r["host_median_us"]) / float(r["floor_host_us"]))
                     for r in rows}
        else:
            cells = {(r["op"], int(r["page_size"]), int(r["bs"])): float(r["device_us"])
                     for r in rows if r["device_us"] not in ("", "nan")}
        runs.setdefault(name, []).append(cells)
    return runs


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the bench step's $OUT (holding bench_cpp_var*.csv)")
    parser.add_argument("builds", nargs="+", help="build names, the baseline first")
    parser.add_argument("--ops", help="comma-separated operations (default all)")
    parser.add_argument("--page-sizes", help="comma-separated page sizes (default all)")
    parser.add_argument("--host", action="store_true",
                        help="host time per call and its ratio to the launch floor")
    args = parser.parse_args()
    runs = runs_by_build(args.folder, args.host)
    missing = [b for b in args.builds if b not in runs]
    if missing:
        parser.error(f"no runs of {', '.join(missing)} in {args.folder} "
                     f"(found: {', '.join(sorted(runs)) or 'none'})")
    ops = set(args.ops.split(",")) if args.ops else None
    pages = {int(p) for p in args.page_sizes.split(",")} if args.page_sizes else None
    # The cells every run of every build measured.
    keys = set.intersection(*(set(cells) for b in args.builds for cells in runs[b]))
    keys = sorted(k for k in keys
                  if (ops is None or k[0] in ops) and (pages is None or k[1] in pages))
    ratios = [f"{b} / {a}" for a, b in zip(args.builds, args.builds[1:])]
    print("| op | page | bs | " + " | ".join(args.builds + ratios) + " |")
    print("|---|---:|---:|" + "---:|" * (len(args.builds) + len(ratios)))
    for key in keys:
        per_build = [[cells[key] for cells in runs[b]] for b in args.builds]
        if args.host:
            shown = [" / ".join(f"{us:.2f} ({ratio:.2f})" for us, ratio in v) for v in per_build]
            per_build = [[us for us, _ in v] for v in per_build]
        else:
            shown = [" / ".join(f"{x:.2f}" for x in v) for v in per_build]
        means = [sum(v) / len(v) for v in per_build]
        shown += [f"{b / a:.2f}" for a, b in zip(means, means[1:])]
        print(f"| {key[0]} | {key[1]} | {key[2]:,} | " + " | ".join(shown) + " |")


if __name__ == "__main__":
    main()
