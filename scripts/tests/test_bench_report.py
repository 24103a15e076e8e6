# SPDX-License-Identifier: GPL-2.0
"""Tests of tools/bench/report.py: the TCP column and CPU-seconds per GB.

    python3 -m unittest scripts/tests/test_bench_report.py
"""

import csv
import io
import os
import re
import sys
import tempfile
import unittest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "tools", "bench")
sys.path.insert(0, BENCH)
import report  # noqa: E402

OLD = ["point", "transport", "repeat", "value", "unit", "perftest_value",
       "cpu_busy", "cpu_user", "cpu_system", "cpu_softirq"]
NEW = OLD + ["wire_bytes", "busy_cpu_s", "kernel_cpu_s"]


def write(rows, header=NEW):
    f = tempfile.NamedTemporaryFile("w", suffix=".csv", delete=False, newline="")
    w = csv.writer(f)
    w.writerow(header)
    for r in rows:
        w.writerow(r)
    f.close()
    return f.name


def table(path):
    """What report.py prints for the CSV at path."""
    out = io.StringIO()
    report.render(path, out=out)
    return out.getvalue()


def cpu_table(text):
    """The lines of the CPU-seconds table in report.py's output."""
    lines = text.splitlines()
    at = [i for i, ln in enumerate(lines) if ln.startswith("CPU-seconds per GB")]
    return lines[at[0]:] if at else []


def per_gb(path):
    """{point: {transport: (busy, kernel)}} of the CSV at path."""
    order, _, unit, cpu = report.load(path)
    return dict(report.cpu_rows(order, unit, cpu))


def run(point, transport, rep, value, wire="", busy="", kernel=""):
    return [point, transport, rep, value, "Gb/s", "", "79", "37", "15", "27",
            wire, busy, kernel]


class BenchReport(unittest.TestCase):
    def csv(self, rows, header=NEW):
        p = write(rows, header)
        self.addCleanup(os.unlink, p)
        return p

    def test_tcp_column_and_ratio(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.2"),
                      run("write_bw loss 0%", "rxe", 1, "0.1"),
                      run("write_bw loss 0%", "tcp", 1, "0.8")])
        t = table(p)
        self.assertIn("TCP median", t)
        line = [ln for ln in t.splitlines() if ln.startswith("write_bw loss 0%")][0]
        self.assertIn("2.00x", line)  # against rxe
        self.assertIn("0.8000", line)
        self.assertIn("0.25x", line)  # against TCP

    def test_no_tcp_column_without_tcp_runs(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.2", "1000000000", "2", "1"),
                      run("write_bw loss 0%", "rxe", 1, "0.1", "1000000000", "2", "1")])
        t = table(p)
        self.assertNotIn("TCP median", t)
        self.assertTrue(cpu_table(t), t)
        self.assertNotIn("TCP busy", "\n".join(cpu_table(t)))
        self.assertNotIn("note:", t)

    def test_the_header_is_the_one_fabric_bench_writes(self):
        with open(os.path.join(BENCH, "fabric-bench.sh")) as f:
            m = re.search(r'^echo "(point,transport,[^"]*)" >"\$csv"$', f.read(), re.M)
        self.assertIsNotNone(m)
        self.assertEqual(m.group(1).split(","), NEW)

    def test_an_old_csv_gets_a_note_and_its_cpu_column(self):
        # The first CSVs with CPU figures named the busy column cpu_s; they and
        # older ones divided perftest's bytes by the whole -D time.
        old = OLD + ["wire_bytes", "cpu_s", "kernel_cpu_s"]
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.1", "1000000000", "4", "2")],
                     header=old)
        t = table(p)
        self.assertIn("note: this CSV is from before", t)
        self.assertNotIn("vs TCP is half", t)
        self.assertIn("4.0 / 2.0", t)
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.1"),
                      run("write_bw loss 0%", "tcp", 1, "0.8")], header=old)
        self.assertIn("vs TCP is half what it should be", table(p))

    def test_cpu_seconds_per_gb_are_medians_over_wire_bytes(self):
        p = self.csv([
            # 2 GB sent: 4 busy and 2 kernel CPU-seconds give 2.0 / 1.0 per GB.
            run("write_bw loss 0%", "metaroce", 1, "0.2", "2000000000", "4", "2"),
            run("write_bw loss 0%", "metaroce", 2, "0.2", "1000000000", "3", "1"),
            run("write_bw loss 0%", "metaroce", 3, "0.2", "1000000000", "5", "2"),
            run("write_bw loss 0%", "tcp", 1, "0.9", "4000000000", "2", "2"),
        ])
        rows = per_gb(p)
        busy, kernel = rows["write_bw loss 0%"]["metaroce"]
        self.assertAlmostEqual(busy, 3.0)   # median of 2, 3, 5
        self.assertAlmostEqual(kernel, 1.0)  # median of 1, 1, 2
        self.assertEqual(rows["write_bw loss 0%"]["tcp"], (0.5, 0.5))
        self.assertIsNone(rows["write_bw loss 0%"]["rxe"])
        self.assertIn("3.0 / 1.0", table(p))

    def test_a_failed_run_gives_no_cpu_figure(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "", "1000000000", "9", "9"),
                      run("write_bw loss 0%", "metaroce", 2, "0.2", "1000000000", "1", "1")])
        rows = per_gb(p)
        self.assertEqual(rows["write_bw loss 0%"]["metaroce"], (1.0, 1.0))

    def test_no_bytes_on_the_wire_gives_no_cpu_figure(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.2", "0", "9", "9"),
                      run("write_bw loss 0%", "rxe", 1, "0.2", "-5", "9", "9")])
        self.assertEqual(per_gb(p), {})

    def test_tcp_runs_that_all_failed_still_show_the_column(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.2"),
                      run("write_bw loss 0%", "tcp", 1, ""),
                      run("write_bw loss 0%", "tcp", 2, "")])
        t = table(p)
        self.assertIn("TCP median", t)
        self.assertIn("- (2 failed)", t)

    def test_a_csv_without_the_new_columns_still_reports(self):
        p = self.csv([["write_bw loss 0%", "metaroce", 1, "0.2", "Gb/s", "", "79", "37", "15", "27"],
                      ["write_bw loss 0%", "rxe", 1, "0.1", "Gb/s", "", "79", "37", "15", "27"]],
                     header=OLD)
        t = table(p)
        self.assertIn("2.00x", t)
        self.assertNotIn("CPU-seconds per GB", t)

    def test_summary_csv_keeps_the_first_columns_in_place(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.2")])
        order, runs, unit, _ = report.load(p)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "summary.csv")
            report.write_csv(report.summarize(order, runs, unit), out)
            with open(out, newline="") as f:
                head = next(csv.reader(f))
        first = ["point", "unit"] + ["%s_%s" % (t, s) for t in ("metaroce", "rxe")
                                     for s in ("min", "median", "max", "failed")] + \
            ["ratio", "fraction_of_reference", "reference"]
        self.assertEqual(head[:len(first)], first)

    def test_summary_csv_carries_the_tcp_ratio_and_cpu(self):
        p = self.csv([run("write_bw loss 0%", "metaroce", 1, "0.2", "1000000000", "2", "1"),
                      run("write_bw loss 0%", "tcp", 1, "0.4", "1000000000", "1", "1")])
        order, runs, unit, cpu = report.load(p)
        rows = report.summarize(order, runs, unit)
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "summary.csv")
            report.write_csv(rows, out, dict(report.cpu_rows(order, unit, cpu)))
            with open(out, newline="") as f:
                got = list(csv.DictReader(f))[0]
        self.assertEqual(got["ratio_tcp"], "0.5000")
        self.assertEqual(got["tcp_median"], "0.4")
        self.assertEqual(got["metaroce_busy_cpu_s_per_gb"], "2.000")
        self.assertEqual(got["tcp_kernel_cpu_s_per_gb"], "1.000")
        self.assertEqual(got["rxe_busy_cpu_s_per_gb"], "")


if __name__ == "__main__":
    unittest.main()
