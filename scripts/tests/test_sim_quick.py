# SPDX-License-Identifier: GPL-2.0
"""The simulator's quick scenarios (what `make sim-quick` runs), both
transports: each must end with its JSON summary, lose or duplicate nothing,
and MetaRoCE must meet the loss, plane-failure and incast criteria. The
planes scenario's quick windows (1 ms) are too short for its linearity
criterion, which the committed full run (Documentation/sim/) shows; here it
must run and keep integrity."""

import json
import os
import shutil
import subprocess
import unittest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(TOP, "tools", "sim", "Cargo.toml")


def run(scenario, seed=1, transport="both"):
    out = os.path.join(TOP, "out", "sim-quick", scenario)
    r = subprocess.run(["cargo", "run", "--release", "--quiet", "--manifest-path", MANIFEST,
                        "--", scenario, "--quick", "--transport", transport, "--seed", str(seed),
                        "--out", out],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"exit {r.returncode}: {r.stderr[-2000:]}")
    summary = json.loads(r.stdout.strip().splitlines()[-1])
    return summary


class SimQuick(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        if not shutil.which("cargo"):
            raise unittest.SkipTest("cargo missing")

    def check(self, scenario, metaroce_all):
        s = run(scenario)
        self.assertEqual(s["scenario"], scenario)
        for kind in ("roce", "metaroce"):
            crit = s["transports"][kind]["criteria"]
            self.assertTrue(crit, kind)
            for name, c in crit.items():
                if "integrity" in name or "duplicated" in name:
                    self.assertTrue(c["pass"], f"{kind} {name}: {c}")
        if metaroce_all:
            for name, c in s["transports"]["metaroce"]["criteria"].items():
                self.assertTrue(c["pass"], f"metaroce {name}: {c}")

    def test_loss(self):
        # Five seeds, every criterion on each: 10% loss was bimodal over
        # seeds (0.31 or 0.80) until a probe's duplicate stopped widening
        # the reordering allowed (Documentation/simulator.md, "The 10% loss
        # fix").
        self.check("loss", True)
        for seed in range(2, 6):
            crit = run("loss", seed, "metaroce")["transports"]["metaroce"]["criteria"]
            for name, c in crit.items():
                self.assertTrue(c["pass"], f"seed {seed}: metaroce {name}: {c}")

    def test_planes(self):
        self.check("planes", False)

    def test_plane_failure(self):
        self.check("plane-failure", True)

    def test_incast(self):
        self.check("incast", True)


if __name__ == "__main__":
    unittest.main()
