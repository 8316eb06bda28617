#!/usr/bin/env python3
"""kvpool against SGLang's Triton kernels, from one `scripts/gpu/run.sh bench` run: device µs
of each paged allocation (alloc_extend, alloc_decode; page size > 1, where the baseline has
a Triton kernel) per replay of a one-call graph and per launch in a graph of 100, Triton and
kvpool side by side with kvpool / Triton, as a Markdown table (as in BENCHMARKS.md), the
floors above it.

    python3 scripts/gpu/triton_table.py OUT/triton    # steps.sh scripts/gpu/plans/triton.sh
    python3 scripts/gpu/triton_table.py OUT/triton --ops alloc_decode --page-sizes 16

Inputs, in the folder (the bench step's $OUT): bench_python.csv (bench-gpu/baseline_bench.py:
Triton and kvpool per replay, `baseline_device_us` and `kvpool_device_us`; Triton per launch
in a graph of 100, `baseline_device_graph100_us`; the empty Triton kernel's floors,
`floor_device_graph_us` and `floor_device_graph100_us`, else from the header of
bench_python.md) and bench_cpp.csv (bench-gpu/kvpool_bench.cu: kvpool per launch in a graph
of 100, `device_us`; optional). A kvpool figure timed by events (the row's device method:
the graph replay faulted) is marked `*` and gets no ratio; an absent one (an older run,
--host-only) is `–`.
"""
import argparse
import csv
import math
import os
import re

OPS = ("alloc_extend", "alloc_decode")


def number(text):
    """The CSV cell as a float, None if empty or nan (no figure)."""
    if text in (None, "", "nan"):
        return None
    value = float(text)
    return None if math.isnan(value) else value


def cell(row, column, graph=True):
    """(µs, timed by a graph) of one figure, None if there is none."""
    value = number(row.get(column))
    return None if value is None else (value, graph)


def by_graph(row):
    """Whether the row's kvpool figure is a graph's (graph, flat graph, either less rewind),
    not events'."""
    return row.get("device_method", "").startswith(("graph", "flat graph"))


def read_rows(path):
    """{(op, page size, bs): row} of one CSV, the paged allocations only."""
    with open(path, newline="") as f:
        return {(r["op"], int(r["page_size"]), int(r["bs"])): r for r in csv.DictReader(f)
                if r["op"] in OPS and int(r["page_size"]) > 1}


def floors_from_report(path):
    """The empty Triton kernel per replay and per launch in a graph of 100, from the report's
    line `- device floors (µs): empty Triton kernel X per graph replay, Y per launch in a
    graph of 100, ...` (bench_python.md), for a CSV without the floor columns."""
    if not os.path.exists(path):
        return None, None
    with open(path) as f:
        match = re.search(r"empty Triton kernel ([\d.]+) per graph replay, ([\d.]+) per launch "
                          r"in a graph of 100", f.read())
    return (float(match[1]), float(match[2])) if match else (None, None)


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folder", help="the bench step's $OUT (holding bench_python.csv and "
                                       "bench_cpp.csv)")
    parser.add_argument("--ops", help=f"comma-separated, of {','.join(OPS)} (default both)")
    parser.add_argument("--page-sizes", help="comma-separated page sizes > 1 (default all)")
    args = parser.parse_args()
    ops = args.ops.split(",") if args.ops else list(OPS)
    if not set(ops) <= set(OPS):
        parser.error(f"--ops: the baseline's Triton kernels are {','.join(OPS)}")
    pages = {int(p) for p in args.page_sizes.split(",")} if args.page_sizes else None
    if pages and min(pages) < 2:
        parser.error("--page-sizes: page size 1 has no Triton kernel (its allocation is a slice)")

    py_path = os.path.join(args.folder, "bench_python.csv")
    cpp_path = os.path.join(args.folder, "bench_cpp.csv")
    if not os.path.exists(py_path):
        parser.error(f"no bench_python.csv in {args.folder} (scripts/gpu/run.sh bench writes "
                     "it there, unless BENCH_PYTHON=0)")
    py = read_rows(py_path)
    cpp = read_rows(cpp_path) if os.path.exists(cpp_path) else {}

    floor_replay = floor_launch = None
    if py:
        first = next(iter(py.values()))
        floor_replay = number(first.get("floor_device_graph_us"))
        floor_launch = number(first.get("floor_device_graph100_us"))
    if floor_replay is None or floor_launch is None:  # an older CSV: the report's header
        floor_replay, floor_launch = floors_from_report(
            os.path.join(args.folder, "bench_python.md"))

    def shown(value):
        return "–" if value is None else f"{value[0]:.2f}" + ("" if value[1] else "*")

    def ratio(kvpool, triton):
        if kvpool is None or triton is None or not (kvpool[1] and triton[1]):
            return "–"
        return f"{kvpool[0] / triton[0]:.2f}"

    def floor(value):
        return "–" if value is None else f"{value:.2f}"

    cpp_floor = next((number(r["floor_device_us"]) for r in cpp.values() if by_graph(r)), None)
    flat = any(r.get("device_method", "").startswith("flat graph") for r in cpp.values())
    cpp_floor_what = ("an empty CUDA kernel that awaits its predecessor, C++: "
                      f"{floor(cpp_floor)} per launch in a flat graph of 100, launched as the "
                      "library launches" if flat else
                      f"empty CUDA kernel, C++: {floor(cpp_floor)} per launch in a graph of 100")
    print(f"Empty Triton kernel {floor(floor_replay)} µs per replay, {floor(floor_launch)} per "
          f"launch in a graph of 100 ({cpp_floor_what}){'' if cpp else '; no bench_cpp.csv'}:\n")
    keys = sorted((k for k in set(py) | set(cpp)
                   if k[0] in ops and (pages is None or k[1] in pages)),
                  key=lambda k: (OPS.index(k[0]), k[1], k[2]))
    print("| op | page | bs | Triton, per replay | kvpool, per replay | kvpool / Triton "
          "| Triton, per launch in 100 | kvpool, per launch in 100 | kvpool / Triton |")
    print("|---|---:|---:|" + "---:|" * 6)
    marked = False
    for key in keys:
        p, c = py.get(key, {}), cpp.get(key, {})
        # The baseline's kernel is always timed in a graph (the row's method is kvpool's).
        cells = [cell(p, "baseline_device_us"), cell(p, "kvpool_device_us", by_graph(p)),
                 cell(p, "baseline_device_graph100_us"), cell(c, "device_us", by_graph(c))]
        marked |= any(v is not None and not v[1] for v in cells)
        print(f"| {key[0]} | {key[1]} | {key[2]:,} | {shown(cells[0])} | {shown(cells[1])} | "
              f"{ratio(cells[1], cells[0])} | {shown(cells[2])} | {shown(cells[3])} | "
              f"{ratio(cells[3], cells[2])} |")
    copies = ("its kernels copied 100 times into one flat graph, linked as a capture of "
              "consecutive calls links them (kvpool_bench --flat-graph)" if flat else
              "100 child graphs of one graph")
    print("\nPer replay: bench_python.csv, one call per captured graph, the graph's launch "
          "included; a paged decode is replayed with kvpool's rewind of the continued pages, "
          "less the rewind alone (graph less rewind), which cancels the launch. Per launch in "
          f"100: Triton's kernel 100 times in one graph (bench_python.csv), kvpool's call as "
          f"{copies} (bench_cpp.csv; 20 with --quick).")
    if marked:
        print("\n\\* timed by events around one call (the graph replay faulted the pool): not "
              "comparable, no ratio.")


if __name__ == "__main__":
    main()
