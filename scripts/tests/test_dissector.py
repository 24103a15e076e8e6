# SPDX-License-Identifier: GPL-2.0
"""The Wireshark dissector (tools/dissector/metaroce.lua) against the codec:
rust/transport's `wire_samples` example encodes packets of every type and
optional part (and broken copies the decoder refuses) into a capture, with
the value of every field; tshark with the dissector must show each field
with that value, show no field a packet does not have, and mark as
malformed exactly the broken copies. Skipped without tshark (scripts/setup.sh
installs it)."""

import json
import os
import shutil
import subprocess
import tempfile
import unittest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MANIFEST = os.path.join(TOP, "rust", "transport", "Cargo.toml")
LUA = os.path.join(TOP, "tools", "dissector", "metaroce.lua")


def tshark(pcap, *args):
    r = subprocess.run(["tshark", "-X", "lua_script:" + LUA, "-r", pcap, *args],
                       capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"tshark exit {r.returncode}: {r.stderr[-2000:]}")
    return r.stdout


@unittest.skipUnless(shutil.which("tshark"), "tshark is not installed")
class Dissector(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.dir = tempfile.mkdtemp()
        cls.pcap = os.path.join(cls.dir, "samples.pcap")
        expect = os.path.join(cls.dir, "samples.jsonl")
        r = subprocess.run(["cargo", "run", "--quiet", "--manifest-path", MANIFEST,
                            "--example", "wire_samples", "--", cls.pcap, expect],
                           capture_output=True, text=True)
        if r.returncode != 0:
            raise AssertionError(f"wire_samples exit {r.returncode}: {r.stderr[-2000:]}")
        with open(expect) as f:
            cls.frames = [json.loads(line) for line in f if line.strip()]

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)

    def test_every_field_has_the_encoded_value(self):
        names = sorted({k for fr in self.frames for k in fr["fields"]})
        args = ["-T", "fields", "-E", "separator=/t", "-E", "occurrence=f", "-e", "frame.number"]
        for n in names:
            args += ["-e", n]
        rows = [line.split("\t") for line in tshark(self.pcap, *args).splitlines()]
        self.assertEqual(len(rows), len(self.frames), "one row per frame")
        checked = 0
        for fr, row in zip(self.frames, rows):
            if fr["malformed"]:
                continue
            got = dict(zip(names, row[1:]))
            for n in names:
                want = fr["fields"].get(n)
                with self.subTest(frame=fr["frame"], field=n):
                    if want is None:
                        self.assertEqual(got[n], "", "a field this packet does not have")
                    else:
                        self.assertNotEqual(got[n], "", "missing")
                        self.assertEqual(int(got[n], 0), want)
                        checked += 1
        # Every type and optional part is there to be checked.
        self.assertGreater(checked, 200)
        for n in ["metaroce.raddr", "metaroce.imm", "metaroce.swap_add", "metaroce.origin_psn",
                  "metaroce.ack.sacked", "metaroce.nak.code", "metaroce.hello.isn"]:
            self.assertIn(n, names)

    def test_exactly_the_broken_copies_are_malformed(self):
        out = tshark(self.pcap, "-Y", "metaroce.malformed", "-T", "fields", "-e", "frame.number")
        marked = {int(x) for x in out.split()}
        broken = {fr["frame"] for fr in self.frames if fr["malformed"]}
        self.assertTrue(broken, "the samples include broken copies")
        self.assertEqual(marked, broken)

    def test_the_full_tree_has_no_lua_error(self):
        out = tshark(self.pcap, "-V")
        self.assertNotIn("Lua: Error", out)
        self.assertIn("Receiver fair-share rate hint (kbit/s): 2500000", out)
        self.assertIn("Origin PSN: 55", out)


if __name__ == "__main__":
    unittest.main()
