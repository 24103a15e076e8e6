#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The table of `make bench`: MetaRoCE against rdma_rxe (and TCP), from fabric-bench.sh's CSV.

    report.py BENCH_CSV [--out DIR]

Prints one row per point: min/median/max of each transport over the repeats,
the ratio MetaRoCE/rxe (medians), and MetaRoCE's median as a fraction of its
own reference: the lossless figure of the same operation for the direct
points, one plane for the plane points, four planes for the failed-plane
points. When the CSV has TCP runs (iperf3, transport "tcp"), TCP's median
and the ratio MetaRoCE/TCP are two more columns. When it has the runs' wire
bytes and CPU-seconds, a second table gives each transport's median
CPU-seconds per GB on the wire, busy and kernel only, for the bandwidth
points. With --out, writes DIR/summary.csv (the same numbers) and
DIR/bench.png (medians with min-max bars; needs matplotlib, else says so).
"""

import argparse
import csv
import os
import statistics
import sys

# The RDMA transports: the table's first columns, and every table's before
# TCP was added.
RDMA = ("metaroce", "rxe")
TRANSPORTS = RDMA + ("tcp",)
NAMES = {"metaroce": "MetaRoCE", "rxe": "rdma_rxe", "tcp": "TCP"}


def number(text):
    """A CSV cell as a float, None when empty or not a number."""
    try:
        return float(text)
    except (TypeError, ValueError):
        return None


# A CSV whose header lacks this column was written before fabric-bench.sh
# divided perftest's bytes by its sampling window (2026-12-07).
WINDOW_COLUMN = "busy_cpu_s"


def halved(path):
    """Whether the CSV at path is from before the sampling-window fix: its
    perftest figures are bytes over the whole -D time (half the rate at the
    default 4 s)."""
    with open(path, newline="") as f:
        return WINDOW_COLUMN not in (next(csv.reader(f), None) or [])


def load(path):
    """(points in order, values, units, CPU per GB): values[point][transport]
    lists each run's figure (None for a failed run); cpu[point][transport]
    lists (busy, kernel) CPU-seconds per GB of the runs that recorded them
    (the busy column was "cpu_s" in the first CSVs that had it)."""
    runs = {}
    order = []
    unit = {}
    cpu = {}
    with open(path, newline="") as f:
        for row in csv.DictReader(f):
            p = row["point"]
            if p not in runs:
                runs[p] = {t: [] for t in TRANSPORTS}
                cpu[p] = {t: [] for t in TRANSPORTS}
                order.append(p)
            unit[p] = row["unit"]
            t = row["transport"]
            if t not in runs[p]:
                continue
            v = number(row["value"])
            runs[p][t].append(v)
            wire, kernel = number(row.get("wire_bytes")), number(row.get("kernel_cpu_s"))
            busy = number(row.get(WINDOW_COLUMN) or row.get("cpu_s"))
            if (v is not None and wire is not None and wire > 0 and busy is not None
                    and kernel is not None):
                cpu[p][t].append((busy / (wire / 1e9), kernel / (wire / 1e9)))
    return order, runs, unit, cpu


def has(runs, t):
    """Whether transport t has any run, failed or not."""
    return any(p[t] for p in runs.values())


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
        m, r, c = med[p]["metaroce"], med[p]["rxe"], med[p]["tcp"]
        if unit[p] == "us":
            # Latency: lower is better; the ratio is rxe's over ours.
            row["ratio"] = r / m if m and r else None
        else:
            row["ratio"] = m / r if m is not None and r else None
        # TCP has bandwidth points only.
        row["ratio_tcp"] = m / c if unit[p] != "us" and m is not None and c else None
        ref, label = reference(p)
        base = med.get(ref, {}).get("metaroce") if ref else None
        row["fraction"] = m / base if base and m is not None else None
        row["fraction_label"] = label
        rows.append(row)
    return rows


def print_table(rows, tcp=False, out=sys.stdout):
    """The table; with tcp, TCP's median and MetaRoCE/TCP too."""
    cols = ["%-34s" % "point", "%-6s" % "unit", "%-30s" % "MetaRoCE min / median / max",
            "%-30s" % "rxe min / median / max", "%-9s" % "ratio"]
    if tcp:
        cols += ["%-17s" % "TCP median", "%-9s" % "vs TCP"]
    head = " ".join(cols + ["MetaRoCE vs its reference"])
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        cells = []
        for t in RDMA:
            lo, mid, hi, failed = r[t]
            c = "%s / %s / %s" % (fmt(lo, r["unit"]), fmt(mid, r["unit"]), fmt(hi, r["unit"]))
            if failed:
                c += " (%d failed)" % failed
            cells.append(c)
        ratio = "-" if r["ratio"] is None else "%.2fx" % r["ratio"]
        frac = "" if r["fraction"] is None else "%.2f %s" % (r["fraction"], r["fraction_label"])
        line = ["%-34s" % r["point"], "%-6s" % r["unit"], "%-30s" % cells[0], "%-30s" % cells[1],
                "%-9s" % ratio]
        if tcp:
            lo, mid, hi, failed = r["tcp"]
            c = fmt(mid, r["unit"]) + (" (%d failed)" % failed if failed else "")
            line += ["%-17s" % c,
                     "%-9s" % ("-" if r["ratio_tcp"] is None else "%.2fx" % r["ratio_tcp"])]
        print(" ".join(line + [frac]), file=out)
    print("ratio: MetaRoCE/rxe of the medians (latency: rxe/MetaRoCE, so above 1 is "
          "MetaRoCE ahead)" + ("; vs TCP: MetaRoCE/TCP (iperf3, TSO/GSO/GRO off)" if tcp else ""),
          file=out)


def cpu_rows(order, unit, cpu):
    """Per bandwidth point with any such runs: {transport: (busy, kernel)}
    medians of CPU-seconds per GB on the wire."""
    rows = []
    for p in order:
        if unit[p] != "Gb/s" or not any(cpu[p][t] for t in TRANSPORTS):
            continue
        med = {}
        for t in TRANSPORTS:
            runs = cpu[p][t]
            med[t] = ((statistics.median(b for b, _ in runs),
                       statistics.median(k for _, k in runs)) if runs else None)
        rows.append((p, med))
    return rows


def print_cpu(rows, transports=TRANSPORTS, out=sys.stdout):
    """The CPU-seconds per GB table of `transports` (nothing when no run
    recorded them)."""
    if not rows:
        return
    head = "%-34s" % "CPU-seconds per GB on the wire" + "".join(
        " %-22s" % ("%s busy / kernel" % NAMES[t]) for t in transports)
    print(file=out)
    print(head, file=out)
    print("-" * len(head), file=out)
    for p, med in rows:
        cells = "".join(" %-22s" % ("-" if med[t] is None else "%.1f / %.1f" % med[t])
                        for t in transports)
        print("%-34s%s" % (p, cells), file=out)
    print("busy: all vCPUs' non-idle time while the client ran (a polling program's spin "
          "included); kernel: system, irq and softirq; per GB that host B's veth1 sent "
          "(payload, headers, resends)", file=out)


def write_csv(rows, path, cpu=None):
    """summary.csv; cpu: {point: {transport: (busy, kernel)}} from cpu_rows."""
    cpu = cpu or {}
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        # The columns of the first version first, in their places; TCP's
        # and the CPU figures after them.
        w.writerow(["point", "unit"] + ["%s_%s" % (t, s) for t in RDMA
                                        for s in ("min", "median", "max", "failed")] +
                   ["ratio", "fraction_of_reference", "reference"] +
                   ["tcp_%s" % s for s in ("min", "median", "max", "failed")] + ["ratio_tcp"] +
                   ["%s_%s_cpu_s_per_gb" % (t, k) for t in TRANSPORTS
                    for k in ("busy", "kernel")])
        for r in rows:
            cells = []
            for t in RDMA:
                cells += ["" if v is None else v for v in r[t]]
            per_gb = []
            for t in TRANSPORTS:
                m = cpu.get(r["point"], {}).get(t)
                per_gb += ["", ""] if m is None else ["%.3f" % m[0], "%.3f" % m[1]]
            w.writerow([r["point"], r["unit"]] + cells +
                       ["" if r["ratio"] is None else "%.4f" % r["ratio"],
                        "" if r["fraction"] is None else "%.4f" % r["fraction"],
                        r["fraction_label"]] +
                       ["" if v is None else v for v in r["tcp"]] +
                       ["" if r["ratio_tcp"] is None else "%.4f" % r["ratio_tcp"]] + per_gb)


def plot(rows, path, transports=RDMA):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is missing, no %s (apt-get install python3-matplotlib)" % path)
        return False
    bw = [r for r in rows if r["unit"] == "Gb/s"]
    fig, ax = plt.subplots(figsize=(max(8, len(bw) * 0.7), 5))
    width = 0.8 / len(transports)
    for k, t in enumerate(transports):
        xs = [i + (k - (len(transports) - 1) / 2) * width for i in range(len(bw))]
        mids = [r[t][1] or 0 for r in bw]
        lo = [max(0, (r[t][1] or 0) - (r[t][0] or 0)) for r in bw]
        hi = [max(0, (r[t][2] or 0) - (r[t][1] or 0)) for r in bw]
        ax.bar(xs, mids, width, yerr=[lo, hi], capsize=2,
               label=NAMES[t])
    ax.set_xticks(range(len(bw)))
    ax.set_xticklabels([r["point"] for r in bw], rotation=45, ha="right", fontsize=8)
    ax.set_ylabel("Gb/s (median, min-max bars)")
    ax.set_title("perftest, 64 KiB messages: MetaRoCE vs rdma_rxe%s, same VM boot"
                 % (" (TCP: iperf3)" if "tcp" in transports else ""))
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def render(path, out=sys.stdout):
    """Prints the tables of the CSV at path; returns (rows, CPU per GB by
    point, the transports shown)."""
    order, runs, unit, cpu = load(path)
    rows = summarize(order, runs, unit)
    tcp = has(runs, "tcp")
    shown = TRANSPORTS if tcp else RDMA
    print_table(rows, tcp=tcp, out=out)
    per_gb = cpu_rows(order, unit, cpu)
    print_cpu(per_gb, shown, out=out)
    if halved(path):
        print("note: this CSV is from before 2026-12-07: its perftest Gb/s are bytes over "
              "the whole -D time, not perftest's sampling window (half the rate at -D 4; "
              "ratios between the RDMA transports hold%s)"
              % ("; vs TCP is half what it should be" if tcp else ""), file=out)
    return rows, dict(per_gb), shown


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("csv")
    ap.add_argument("--out")
    a = ap.parse_args()
    rows, per_gb, shown = render(a.csv)
    if a.out:
        write_csv(rows, os.path.join(a.out, "summary.csv"), per_gb)
        if plot(rows, os.path.join(a.out, "bench.png"), shown):
            print("wrote %s and %s" % (os.path.join(a.out, "summary.csv"),
                                       os.path.join(a.out, "bench.png")))


if __name__ == "__main__":
    main()
