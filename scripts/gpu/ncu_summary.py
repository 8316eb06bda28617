#!/usr/bin/env python3
"""One line per profiled kernel from `scripts/gpu/run.sh profile`'s Nsight Compute exports
(profile-NAME.csv: `ncu --csv --page details`, the tool's own messages around it): the
kernel, its grid and block, the median duration (ns) and elapsed cycles over the launches,
warp instructions, cycles per issued instruction and registers per thread. Puts kvpool's
kernel and the Triton baseline's (`PROFILE_TRITON`) side by side, e.g.

    python3 scripts/gpu/ncu_summary.py */profile-this.csv */profile-triton.csv
"""
import argparse
import csv
import io
import statistics


def metrics(path):
    """(first row, {metric name: [values over the launches]}) of one export."""
    with open(path) as f:
        lines = [line for line in f if line.startswith('"')]  # the CSV, not ncu's messages
    rows = list(csv.DictReader(io.StringIO("".join(lines))))
    values = {}
    for row in rows:
        values.setdefault(row["Metric Name"], []).append(row["Metric Value"].replace(",", ""))
    return (rows[0] if rows else None), values


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("files", nargs="+")
    args = parser.parse_args()
    for path in args.files:
        first, values = metrics(path)
        if first is None:
            print(f"{path}: no kernel profiled")
            continue

        def median(name):
            return statistics.median(float(v) for v in values[name])

        print(f"{path}: {first['Kernel Name']} grid {first['Grid Size']} block "
              f"{first['Block Size']}, {len(values['Duration'])} launches: duration "
              f"{median('Duration'):.0f} ns, {median('Elapsed Cycles'):.0f} cycles, "
              f"{values['Executed Instructions'][0]} warp instructions, "
              f"{median('Warp Cycles Per Issued Instruction'):.2f} cycles per issued "
              f"instruction, {values['Registers Per Thread'][0]} registers")


if __name__ == "__main__":
    main()
