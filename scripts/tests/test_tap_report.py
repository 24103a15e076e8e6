#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Tests of scripts/tap_report.py: the report must fail on every kind of bad
result `make check` can meet, and pass a clean run."""

import io
import os
import sys
import tempfile
import unittest
from contextlib import redirect_stdout

sys.path.insert(0, os.path.join(os.path.dirname(__file__), ".."))
import tap_report  # noqa: E402

CLEAN_DMESG = """\
[    1.000000] Lock dependency validator: Copyright (c) 2006 Red Hat, Inc., Ingo Molnar
[    2.000000] kmemleak: Kernel memory leak detector initialized (mem pool available: 14585)
[   35.190681] metaroce: loaded
[   35.199959]     KTAP version 1
[   35.200376]     # Subtest: metaroce_device
[   35.202150]     1..2
[   35.218774]     ok 1 port_mtu
[   35.231082]     ok 2 node_guid
[   35.261203] ok 1 metaroce_device
[   40.000000]     # Subtest: metaroce_device
[   40.000001]     not ok 1 port_mtu
[   40.000002] not ok 1 metaroce_device
"""


class ReportTest(unittest.TestCase):
    def guest(self, dmesg=CLEAN_DMESG, tap="TAP version 13\n1..1\nok 1 adds\n", rc="0",
              leaks="", files=None):
        d = tempfile.mkdtemp()
        content = {
            "done": "done", "uname": "7.2.13", "insmod.rc": "0", "insmod.err": "",
            "rmmod.rc": "0", "rmmod.err": "", "kmemleak.txt": leaks,
            "dmesg.txt": dmesg, "tests.list": "link.sh\n", "link.sh.tap": tap,
            "link.sh.rc": rc, "link.sh.err": "",
        }
        content.update(files or {})
        for name, text in content.items():
            if text is None:
                continue
            with open(os.path.join(d, name), "w") as f:
                f.write(text)
        return d

    def run_report(self, guest, cargo=(), extra=()):
        sys.argv = ["tap_report.py", "--guest", guest, "--cargo", *cargo, *extra]
        out = io.StringIO()
        with redirect_stdout(out):
            rc = tap_report.main()
        return rc, out.getvalue()

    def test_clean_run_passes(self):
        rc, out = self.run_report(self.guest())
        self.assertEqual(rc, 0, out)
        self.assertIn("ok 3 kunit: metaroce_device: node_guid", out)
        # The second load's KUnit run is not counted twice.
        self.assertNotIn("not ok", out)
        self.assertTrue(out.rstrip().endswith("passed, 0 failed"), out)

    def test_warn_in_log_fails(self):
        dmesg = CLEAN_DMESG + "[   50.0] WARNING: CPU: 1 PID: 7 at drivers/x.c:1 f+0x1\n"
        rc, out = self.run_report(self.guest(dmesg=dmesg))
        self.assertEqual(rc, 1)
        self.assertIn("not ok", out)

    def test_a_splat_names_the_tests_running_then(self):
        dmesg = CLEAN_DMESG + (
            "[ 60.0] metaroce-selftest: start ud.sh\n"
            "[ 61.0] metaroce-selftest: start srq.sh\n"
            "[ 62.0] metaroce-selftest: end ud.sh rc=0\n"
            "[ 63.0] metaroce-selftest: start rdma_cm.sh\n"
            "[ 64.0] BUG: KASAN: slab-out-of-bounds in f+0x1\n"
            "[ 65.0] metaroce-selftest: end srq.sh rc=0\n")
        rc, out = self.run_report(self.guest(dmesg=dmesg))
        self.assertEqual(rc, 1)
        self.assertIn("selftests running then: srq.sh, rdma_cm.sh", out)

    def test_kasan_lockdep_and_leak_fail(self):
        for line in ("BUG: KASAN: slab-use-after-free in f+0x1",
                     "WARNING: possible circular locking dependency detected",
                     "kmemleak: 2 new suspected memory leaks (see /sys/kernel/debug/kmemleak)"):
            rc, _ = self.run_report(self.guest(dmesg=CLEAN_DMESG + f"[ 9.0] {line}\n"))
            self.assertEqual(rc, 1, line)
        rc, _ = self.run_report(self.guest(leaks="unreferenced object 0xffff888"))
        self.assertEqual(rc, 1)

    def test_failed_selftest_fails(self):
        rc, out = self.run_report(self.guest(tap="1..1\nnot ok 1 adds\n", rc="1"))
        self.assertEqual(rc, 1)
        self.assertIn("not ok", out)

    def test_failed_selftest_prints_its_own_diagnostics(self):
        tap = ("1..2\n# before the first\nok 1 adds\n# client rc 124\n"
               "# plane 0: 5 bytes\nnot ok 2 completes\n# after\n")
        rc, out = self.run_report(self.guest(tap=tap, rc="1"))
        self.assertEqual(rc, 1)
        lines = out.splitlines()
        at = next(i for i, x in enumerate(lines) if x.startswith("not ok"))
        # Every note since the start (no point failed before this one).
        self.assertEqual(lines[at + 1:at + 4],
                         ["#   before the first", "#   client rc 124", "#   plane 0: 5 bytes"])
        self.assertNotIn("after", out)
        # A passing point prints none of its notes.
        rc, out = self.run_report(self.guest(tap="1..1\n# quiet\nok 1 adds\n"))
        self.assertEqual(rc, 0, out)
        self.assertNotIn("quiet", out)

    def test_notes_reach_a_later_failed_point_once(self):
        # The reason is printed before a passing point; the failure comes
        # at the next one. A second failure does not repeat the notes.
        tap = ("1..3\n# plane 1: 999 bytes\nok 1 completes\nnot ok 2 carries nothing\n"
               "not ok 3 the rest\n")
        rc, out = self.run_report(self.guest(tap=tap, rc="1"))
        self.assertEqual(rc, 1)
        self.assertEqual(out.count("plane 1: 999 bytes"), 1, out)
        lines = out.splitlines()
        at = next(i for i, x in enumerate(lines) if "carries nothing" in x)
        self.assertEqual(lines[at + 1], "#   plane 1: 999 bytes")

    def test_long_notes_keep_their_head_and_tail_and_are_cut(self):
        notes = "".join(f"# n{i}\n" for i in range(30)) + "# " + "x" * 5000 + "\n"
        tap = "1..1\n" + notes + "not ok 1 fails\n"
        rc, out = self.run_report(self.guest(tap=tap, rc="1"))
        self.assertEqual(rc, 1)
        diag = [x[4:] for x in out.splitlines() if x.startswith("#   ")]
        self.assertEqual(diag[:5], ["n0", "n1", "n2", "n3", "n4"])
        self.assertEqual(diag[5], "... (11 lines)")
        self.assertEqual(diag[6:20], [f"n{i}" for i in range(16, 30)])
        self.assertEqual(diag[20], "x" * tap_report.NOTE_WIDTH)
        self.assertEqual(len(diag), 21)

    def test_no_control_character_reaches_the_report(self):
        tap = "1..2\nnot ok 1 real\rok 1 looks fine\n# x\x0bok 2 y\n\rok 2 forged\n"
        rc, out = self.run_report(self.guest(tap=tap, rc="1"))
        self.assertEqual(rc, 1)
        for bad in "\r\x0b\x0c\x1c\x85\u2028":
            self.assertNotIn(bad, out)
        self.assertNotIn("forged", out)
        self.assertIn("selftests: metaroce: link.sh: real ok 1 looks fine", out)

    def test_a_skipped_failure_does_not_hide_a_failed_exit(self):
        tap = "1..1\nnot ok 1 x # SKIP y\n"
        rc, out = self.run_report(self.guest(tap=tap, rc="1"))
        self.assertEqual(rc, 1, out)
        self.assertIn("exit status 1", out)

    def test_a_script_killed_after_a_failure_is_reported(self):
        tap = "1..3\nnot ok 1 first\nok 2 second\n# waiting for the last point\n"
        rc, out = self.run_report(self.guest(tap=tap, rc="124"))
        self.assertEqual(rc, 1)
        self.assertIn("exit status 124", out)
        self.assertIn("#   # waiting for the last point", out)
        # A script that reports its failures (status 1) is not counted twice.
        rc, out = self.run_report(self.guest(tap="1..1\nnot ok 1 first\n", rc="1"))
        self.assertEqual(out.count("not ok"), 1, out)

    def test_a_carriage_return_in_a_note_makes_no_point(self):
        tap = "1..1\n# a\rnot ok 9 forged\nok 1 adds\n"
        rc, out = self.run_report(self.guest(tap=tap, rc="0"))
        self.assertEqual(rc, 0, out)
        self.assertNotIn("forged", out)

    def test_known_deviation_is_reported_not_failed(self):
        tap = "1..2\nok 1 adds\nnot ok 2 wr api # TODO rxe sends other bytes\n"
        rc, out = self.run_report(self.guest(tap=tap, rc="0"))
        self.assertEqual(rc, 0, out)
        self.assertIn("wr api # SKIP TODO: rxe sends other bytes", out)
        # A TODO on a passing point is just a pass; a failure not marked
        # TODO exactly fails.
        rc, out = self.run_report(self.guest(tap="1..1\nok 1 adds # TODO r\n", rc="0"))
        self.assertEqual(rc, 0, out)
        rc, _ = self.run_report(self.guest(tap="1..1\nnot ok 1 adds # TOD\n", rc="1"))
        self.assertEqual(rc, 1)

    def test_script_crash_without_tap_fails(self):
        rc, _ = self.run_report(self.guest(tap="TAP version 13\n1..3\n", rc="2"))
        self.assertEqual(rc, 1)

    def test_skipped_script_is_a_skip(self):
        rc, out = self.run_report(self.guest(tap="1..0 # SKIP no rxe\n", rc="4"))
        self.assertEqual(rc, 0, out)
        self.assertIn("1 skipped", out)

    def test_missing_kunit_fails(self):
        rc, _ = self.run_report(self.guest(dmesg="[ 1.0] booted\n"))
        self.assertEqual(rc, 1)

    def test_guest_that_did_not_finish_fails(self):
        rc, _ = self.run_report(self.guest(files={"done": None}))
        self.assertEqual(rc, 1)

    def test_cargo_failure_fails(self):
        d = tempfile.mkdtemp()
        log = os.path.join(d, "cargo-x.log")
        with open(log, "w") as f:
            f.write("test a::b ... ok\ntest a::c ... FAILED\n")
        rc, out = self.run_report(self.guest(), cargo=[log])
        self.assertEqual(rc, 1)
        self.assertIn("not ok 2 cargo: cargo-x: a::c", out)

    def test_no_kunit_is_a_skip_not_a_pass(self):
        extra = ["--no-kunit", "CONFIG_KUNIT is off"]
        rc, out = self.run_report(self.guest(dmesg="[ 1.0] booted\n"), extra=extra)
        self.assertEqual(rc, 0, out)
        self.assertIn("kunit: metaroce suites ran at module load # SKIP CONFIG_KUNIT is off", out)

    def test_points_files(self):
        d = tempfile.mkdtemp()
        good, bad, empty = (os.path.join(d, n) for n in ("good.tap", "bad.tap", "empty.tap"))
        with open(good, "w") as f:
            f.write("ok 1 stock: dkms build\nok 2 stock: uname # SKIP not asked\n")
        with open(bad, "w") as f:
            f.write("ok 1 stock: dkms build\nnot ok 2 stock: modprobe metaroce\n")
        with open(empty, "w") as f:
            f.write("# nothing ran\n")
        rc, out = self.run_report(self.guest(), extra=["--points", good])
        self.assertEqual(rc, 0, out)
        self.assertIn("ok 1 stock: dkms build\n", out)
        self.assertIn("1 skipped", out)
        for path in (bad, empty, os.path.join(d, "missing.tap")):
            rc, out = self.run_report(self.guest(), extra=["--points", path])
            self.assertEqual(rc, 1, path)
            self.assertIn("not ok", out)


if __name__ == "__main__":
    unittest.main()
