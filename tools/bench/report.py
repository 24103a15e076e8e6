#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The table of `make bench`: MetaRoCE against rdma_rxe, from fabric-bench.sh's CSV.

    report.py BENCH_CSV [--out DIR]

Prints one row per point: min/median/max of each transport over the repeats,
the ratio MetaRoCE/rxe (medians), and MetaRoCE's median as a fraction of its
own reference: the lossless figure of the same operation for the direct
points, one plane for the plane points, four planes for the failed-plane
points. With --out, writes DIR/summary.csv
(the same numbers) and DIR/bench.png (medians with min-max bars; needs
matplotlib, else says so).
"""

import argparse
import csv
import os
import statistics
import sys

TRANSPORTS = ("metaroce", "rxe")


def load(path):
    runs = {}
    order = []
    unit = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            p = row["point"]
            if p not in runs:
                runs[p] = {t: [] for t in TRANSPORTS}
                order.append(p)
            unit[p] = row["unit"]
            v = row["value"].strip()
            if row["transport"] in runs[p]:
                runs[p][row["transport"]].append(float(v) if v else None)
    return order, runs, unit


def stats(values):
    """(min, median, max, failed runs) of the runs that gave a figure."""
    ok = [v for v in values if v is not None]
    failed = len(values) - len(ok)
    if not ok:
        return None, None, None, failed
    return min(ok), statistics.median(ok), max(ok), failed


def reference(point):
    """The point MetaRoCE's figure is a fraction of, and how to label it."""
    if "planes 1 fail" in point:
        return "write_bw 4 planes", "of 4 planes"
    if "planes" in point:
        return "write_bw 1 planes", "of 1 plane"
    if point.endswith(" QPs"):
        # Many QPs against one (the lossless point: perftest's default -q 1).
        return point.split()[0] + " loss 0%", "of 1 QP"
    if point == "write_bw reordering":
        # netem reorders by sending a quarter of the packets at once and
        # delaying the rest by 1 ms: its cost is against that delay alone.
        return "write_bw delay 1ms", "of delay 1ms"
    op = point.split()[0]
    if op.endswith("_bw"):
        return op + " loss 0%", "of lossless"
    return None, ""


def fmt(v, unit):
    if v is None:
        return "-"
    return ("%.4f" if unit == "Gb/s" else "%.1f") % v


def summarize(order, runs, unit):
    med = {p: {t: stats(runs[p][t])[1] for t in TRANSPORTS} for p in order}
    rows = []
    for p in order:
        row = {"point": p, "unit": unit[p]}
        for t in TRANSPORTS:
            lo, mid, hi, failed = stats(runs[p][t])
            row[t] = (lo, mid, hi, failed)
        m, r = med[p]["metaroce"], med[p]["rxe"]
        if unit[p] == "us":
            # Latency: lower is better; the ratio is rxe's over ours.
            row["ratio"] = r / m if m and r else None
        else:
            row["ratio"] = m / r if m is not None and r else None
        ref, label = reference(p)
        base = med.get(ref, {}).get("metaroce") if ref else None
        row["fraction"] = m / base if base and m is not None else None
        row["fraction_label"] = label
        rows.append(row)
    return rows


def print_table(rows, out=sys.stdout):
    head = "%-34s %-6s %-30s %-30s %-9s %s" % (
        "point", "unit", "MetaRoCE min / median / max", "rxe min / median / max",
        "ratio", "MetaRoCE vs its reference")
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        cells = []
        for t in TRANSPORTS:
            lo, mid, hi, failed = r[t]
            c = "%s / %s / %s" % (fmt(lo, r["unit"]), fmt(mid, r["unit"]), fmt(hi, r["unit"]))
            if failed:
                c += " (%d failed)" % failed
            cells.append(c)
        ratio = "-" if r["ratio"] is None else "%.2fx" % r["ratio"]
        frac = "" if r["fraction"] is None else "%.2f %s" % (r["fraction"], r["fraction_label"])
        print("%-34s %-6s %-30s %-30s %-9s %s" % (r["point"], r["unit"], cells[0], cells[1],
                                                  ratio, frac), file=out)
    print("ratio: MetaRoCE/rxe of the medians (latency: rxe/MetaRoCE, so above 1 is "
          "MetaRoCE ahead)", file=out)


def write_csv(rows, path):
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["point", "unit"] + ["%s_%s" % (t, s) for t in TRANSPORTS
                                        for s in ("min", "median", "max", "failed")] +
                   ["ratio", "fraction_of_reference", "reference"])
        for r in rows:
            cells = []
            for t in TRANSPORTS:
                cells += ["" if v is None else v for v in r[t]]
            w.writerow([r["point"], r["unit"]] + cells +
                       ["" if r["ratio"] is None else "%.4f" % r["ratio"],
                        "" if r["fraction"] is None else "%.4f" % r["fraction"],
                        r["fraction_label"]])


def plot(rows, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is missing, no %s (apt-get install python3-matplotlib)" % path)
        return False
    bw = [r for r in rows if r["unit"] == "Gb/s"]
    fig, ax = plt.subplots(figsize=(max(8, len(bw) * 0.7), 5))
    width = 0.4
    for k, t in enumerate(TRANSPORTS):
        xs = [i + (k - 0.5) * width for i in range(len(bw))]
        mids = [r[t][1] or 0 for r in bw]
        lo = [max(0, (r[t][1] or 0) - (r[t][0] or 0)) for r in bw]
        hi = [max(0, (r[t][2] or 0) - (r[t][1] or 0)) for r in bw]
        ax.bar(xs, mids, width, yerr=[lo, hi], capsize=2,
               label="MetaRoCE" if t == "metaroce" else "rdma_rxe")
    ax.set_xticks(range(len(bw)))
    ax.set_xticklabels([r["point"] for r in bw], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("Gb/s (median, min-max bars)")
    ax.set_title("perftest, 64 KiB messages: MetaRoCE vs rdma_rxe, same VM boot")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--out")
    a = ap.parse_args()
    order, runs, unit = load(a.csv)
    rows = summarize(order, runs, unit)
    print_table(rows)
    if a.out:
        write_csv(rows, os.path.join(a.out, "summary.csv"))
        if plot(rows, os.path.join(a.out, "bench.png")):
            print("wrote %s and %s" % (os.path.join(a.out, "summary.csv"),
                                       os.path.join(a.out, "bench.png")))


if __name__ == "__main__":
    main()
