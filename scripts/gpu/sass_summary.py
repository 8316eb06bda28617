#!/usr/bin/env python3
"""Summarizes per-instruction Nsight Compute exports (`scripts/gpu/run.sh profile` with
PROFILE_SASS=1 writes profile-NAME-sass.csv: `ncu --page source --print-source sass --csv`).

For each file: warp-level instructions executed, how many distinct instructions ran (the
machine code a launch had to fetch: for kernels of a few microseconds, running more distinct
code costs time even at equal counts), and the warp stall samples by reason. With --top N,
the N instructions with the most stall samples; with --executed, every executed instruction
with its count (to read the order of a kernel's loads, e.g. whether one waits for another).

    python3 scripts/gpu/sass_summary.py profile-this-sass.csv profile-P-sass.csv [--top 10]
"""
import argparse
import csv


def number(text):
    try:
        return float(text.replace(",", ""))
    except ValueError:
        return 0.0


def load(path):
    """The instruction rows of one export: dicts of address, source, samples, executed, stalls."""
    with open(path, newline="") as f:
        rows = list(csv.reader(f))
    # Row 0 names the kernel; row 1 is the header.
    header = rows[1]
    at = {name: i for i, name in enumerate(header)}
    stall_columns = [n for n in header if n.startswith("stall_") and "Not Issued" not in n]
    out = []
    for row in rows[2:]:
        if len(row) < len(header):
            continue
        out.append({
            "address": row[at["Address"]],
            "source": row[at["Source"]].strip(),
            "samples": number(row[at["Warp Stall Sampling (All Samples)"]]),
            "executed": number(row[at["Instructions Executed"]]),
            "stalls": {n[len("stall_"):]: number(row[at[n]]) for n in stall_columns},
        })
    return out


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    parser.add_argument("--top", type=int, default=0, help="instructions with most samples")
    parser.add_argument("--executed", action="store_true", help="list executed instructions")
    args = parser.parse_args()
    for path in args.files:
        rows = load(path)
        executed = sum(r["executed"] for r in rows)
        distinct = sum(1 for r in rows if r["executed"] > 0)
        samples = sum(r["samples"] for r in rows)
        print(f"{path}: {executed:.0f} instructions executed, {distinct} of {len(rows)} "
              f"distinct instructions ran, {samples:.0f} stall samples")
        totals = {}
        for r in rows:
            for reason, n in r["stalls"].items():
                totals[reason] = totals.get(reason, 0.0) + n
        ranked = sorted((n, reason) for reason, n in totals.items() if n > 0)
        print("  stalls: " + ", ".join(f"{reason} {n:.0f}" for n, reason in reversed(ranked)))
        for r in sorted(rows, key=lambda r: -r["samples"])[:args.top]:
            reasons = ", ".join(f"{k} {v:.0f}" for k, v in r["stalls"].items() if v > 0)
            print(f"  {r['address']} samples {r['samples']:.0f} executed {r['executed']:.0f}: "
                  f"{r['source']} ({reasons})")
        if args.executed:
            for i, r in enumerate(rows):
                if r["executed"] > 0:
                    print(f"  {i:5d} {r['executed']:8.0f}  {r['source']}")


if __name__ == "__main__":
    main()
