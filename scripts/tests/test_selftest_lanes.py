#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""scripts/guest-check.sh runs the selftests two at a time, except those
listed in selftests/metaroce/run_alone. A test that touches what every other
test sees must be on that list: this finds the ways a test can do so (the
module unloaded or loaded, a fixed RDMA device name, every device counted)
in tests that are not, and names that are listed but not tests."""

import os
import re
import unittest

TESTS = os.path.join(os.path.dirname(__file__), "..", "..", "selftests", "metaroce")

# What makes a test unfit to run beside another one.
GLOBAL = [
    (re.compile(r"\brmmod\s+\"?(metaroce|rdma_rxe)\b\"?(?!_)"), "unloads a module"),
    (re.compile(r"\bmodprobe\s+-r\b"), "unloads a module"),
    (re.compile(r"\binsmod\s+\"?\$METAROCE_KO"), "loads metaroce"),
    (re.compile(r"\blink\s+add\s+\"?[A-Za-z][A-Za-z0-9_]*\"?\s+type\s+(metaroce|rxe)\b"),
     "creates an RDMA device with a fixed name"),
    (re.compile(r"ls\s+/sys/class/infiniband\b"), "counts every RDMA device"),
    (re.compile(r"\brdma\s+link\s+show\s*(2>|\)|$)"), "lists every RDMA link"),
    (re.compile(r"/sys/kernel/(debug/)?tracing\b"), "uses the kernel's one trace buffer"),
    (re.compile(r"^(?!.*netns exec).*\bsysctl\s+-\w*w"), "changes a sysctl of every namespace"),
]


def test_progs():
    with open(os.path.join(TESTS, "Makefile")) as f:
        for line in f:
            if line.startswith("TEST_PROGS := "):
                return line.split(":=", 1)[1].split()
    return []


def run_alone():
    """The names in run_alone, read as scripts/guest-check.sh reads them
    (awk '!/^#/ && NF { print $1 }')."""
    names = []
    with open(os.path.join(TESTS, "run_alone")) as f:
        for line in f:
            if line.startswith("#") or not line.split():
                continue
            names.append(line.split()[0])
    return names


def global_uses(text):
    """The reasons TEXT (a test script) cannot run beside another test."""
    found = []
    for line in text.splitlines():
        if line.lstrip().startswith("#"):
            continue
        for pat, why in GLOBAL:
            if pat.search(line) and why not in found:
                found.append(why)
    return found


class Lanes(unittest.TestCase):
    def test_listed_names_are_tests(self):
        progs = test_progs()
        self.assertTrue(progs)
        for name in run_alone():
            self.assertIn(name, progs, f"run_alone lists {name}, which is no test")

    def test_tests_that_touch_everyone_run_alone(self):
        alone = set(run_alone())
        for name in test_progs():
            with open(os.path.join(TESTS, name)) as f:
                uses = global_uses(f.read())
            if name not in alone:
                self.assertEqual(uses, [], f"{name} {', '.join(uses)}: list it in run_alone")

    def test_the_checker_finds_each_kind(self):
        # The patterns must catch what they are for, and not the usual forms.
        for text in ["rmmod metaroce", 'rmmod "metaroce"', "rmmod rdma_rxe", "modprobe -r rdma_rxe",
                     'insmod "$METAROCE_KO" paths=1', "tr=/sys/kernel/tracing",
                     "sysctl -qw net.core.rmem_max=1", 'rdma link add "mrt0" type metaroce netdev v',
                     'rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0',
                     "n=$(ls /sys/class/infiniband | wc -l)", "out=$(rdma link show 2>&1)"]:
            self.assertNotEqual(global_uses(text), [], text)
        for text in ["rmmod metaroce_kclient", 'rdma_in "$NS_A" link add "$RDMA_A" type metaroce',
                     "ip link add lossyB netns x type veth", "rdma link show $RDMA_A/1",
                     "# rmmod metaroce in a comment",
                     'ip netns exec "$NS_R" sysctl -qw net.ipv4.ip_forward=1']:
            self.assertEqual(global_uses(text), [], text)


if __name__ == "__main__":
    unittest.main()
