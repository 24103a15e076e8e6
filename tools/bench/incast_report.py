#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""The incast point of `make bench`, from fabric-bench.sh's incast.txt.

    incast_report.py INCAST_TXT [--out DIR]

Each line of INCAST_TXT is one run of selftests/metaroce/incast.sh for one
transport: "repeat R TYPE senders N bottleneck_kbit K window_s W rates_mbps
R1 .. RN mean M jain J bottleneck_mbps B queue_max_bytes Q queue_drops D".
Prints one row per run (Jain's index, the slowest and fastest sender against
the mean, what crossed the bottleneck, its largest backlog and its drops) and
with --out writes DIR/incast.png: every sender's rate in each run, per
transport (needs matplotlib, else says so).
"""

import argparse
import os
import sys


def parse(path):
    runs = []
    with open(path) as f:
        for line in f:
            w = line.split()
            if len(w) < 4 or w[0] != "repeat":
                continue
            run = {"repeat": int(w[1]), "type": w[2]}
            i = 3
            while i < len(w):
                key = w[i]
                if key == "rates_mbps":
                    rates = []
                    i += 1
                    while i < len(w) and w[i] != "mean":
                        rates.append(float(w[i]))
                        i += 1
                    run["rates"] = rates
                    continue
                if i + 1 < len(w):
                    run[key] = w[i + 1]
                i += 2
            if run.get("rates"):
                runs.append(run)
    return runs


def table(runs, out=sys.stdout):
    head = "%-9s %-6s %-7s %-9s %-17s %-14s %-15s %s" % (
        "transport", "repeat", "jain", "mean", "slowest/fastest", "bottleneck", "queue max", "drops")
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in runs:
        mean = float(r.get("mean", 0)) or 1e-9
        print("%-9s %-6d %-7s %-9s %-17s %-14s %-15s %s" % (
            r["type"], r["repeat"], r.get("jain", "-"), r.get("mean", "-") + " Mb/s",
            "%.2f / %.2f" % (min(r["rates"]) / mean, max(r["rates"]) / mean),
            r.get("bottleneck_mbps", "-") + " Mb/s", r.get("queue_max_bytes", "-") + " B",
            r.get("queue_drops", "-")), file=out)
    print("rates: MetaRoCE's new data at the receiver, rxe's bytes sent by each sender "
          "(go-back-N resends included)", file=out)


def plot(runs, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("note: matplotlib is missing, no %s" % path)
        return False
    types = sorted({r["type"] for r in runs})
    fig, axes = plt.subplots(1, len(types), figsize=(5 * len(types), 4), squeeze=False)
    for ax, t in zip(axes[0], types):
        for r in [r for r in runs if r["type"] == t]:
            ax.plot(range(1, len(r["rates"]) + 1), r["rates"], marker="o",
                    label="run %d (Jain %s)" % (r["repeat"], r.get("jain", "?")))
        ax.set_title("%s: %s senders, one bottleneck" % ("MetaRoCE" if t == "metaroce" else "rdma_rxe",
                                                      len(runs[0]["rates"])))
        ax.set_xlabel("sender")
        ax.set_ylabel("Mbit/s")
        ax.set_ylim(bottom=0)
        ax.legend(fontsize=7)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("incast")
    ap.add_argument("--out")
    a = ap.parse_args()
    runs = parse(a.incast)
    if not runs:
        print("no incast runs in %s" % a.incast)
        return 1
    table(runs)
    if a.out and plot(runs, os.path.join(a.out, "incast.png")):
        print("wrote %s" % os.path.join(a.out, "incast.png"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
