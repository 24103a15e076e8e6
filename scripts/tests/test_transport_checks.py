# SPDX-License-Identifier: GPL-2.0
"""The transport core's machine-code checks: the no-panic/no-float/no-alloc
proof of scripts/check_nopanic.py (on synthetic disassembly, so that it is
seen failing, and on the real per-packet entry points), and the cargo-fuzz
targets for a bounded time (METAROCE_FUZZ_SECONDS, default 60 each, two
at a time)."""

import concurrent.futures
import os
import shutil
import subprocess
import sys
import tempfile
import unittest

TOP = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
CHECK = os.path.join(TOP, "scripts", "check_nopanic.py")
TRANSPORT = os.path.join(TOP, "rust", "transport")


def run_check(text):
    with tempfile.NamedTemporaryFile("w", suffix=".txt", delete=False) as f:
        f.write(text)
    try:
        return subprocess.run([sys.executable, CHECK, f.name], capture_output=True, text=True)
    finally:
        os.unlink(f.name)


CLEAN = """
0000000000000000 <mr_probe_x>:
   0:	call   5 <mr_probe_x+0x5>
			1: R_X86_64_PLT32	.text._ZN4core5inner17hE-0x4
   5:	ret
0000000000000000 <_ZN4core5inner17hE>:
   0:	mov    %rdi,%rax
   3:	movaps %xmm0,0x10(%rsp)
   8:	ret
"""


class NoPanicCheck(unittest.TestCase):
    def test_clean_code_passes(self):
        r = run_check(CLEAN)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("0 forbidden", r.stdout)

    def test_a_reachable_panic_fails(self):
        bad = CLEAN.replace("   3:	movaps %xmm0,0x10(%rsp)\n",
                            "   3:	call   8\n\t\t\t4: R_X86_64_PLT32\t"
                            ".text.unlikely._RNvNtCs1_4core9panicking18panic_bounds_check-0x4\n")
        r = run_check(bad)
        self.assertEqual(r.returncode, 1, r.stdout)
        self.assertIn("panic_bounds_check", r.stdout)

    def test_floating_point_fails(self):
        r = run_check(CLEAN.replace("mov    %rdi,%rax", "mulsd  %xmm1,%xmm0"))
        self.assertEqual(r.returncode, 1, r.stdout)

    def test_per_packet_entry_points(self):
        if not shutil.which("objdump") or not shutil.which("cargo"):
            self.skipTest("objdump or cargo missing")
        manifest = os.path.join(TRANSPORT, "nopanic", "Cargo.toml")
        subprocess.run(["cargo", "build", "--release", "--quiet", "--manifest-path", manifest],
                       check=True)
        lib = os.path.join(TRANSPORT, "nopanic", "target", "release",
                           "libmetaroce_transport_nopanic.a")
        dis = subprocess.run(["objdump", "-dr", "--no-show-raw-insn", lib],
                             capture_output=True, text=True, check=True).stdout
        r = run_check(dis)
        self.assertEqual(r.returncode, 0, r.stdout)
        self.assertIn("entry points", r.stdout)


FUZZ_TARGETS = ("decode", "connection", "session")


class Fuzz(unittest.TestCase):
    """Each target runs METAROCE_FUZZ_SECONDS; two at a time (one core each
    of the two this machine has), started once for the three tests, so the
    three take two periods rather than three (2026-12-06: a minute less of
    `make check`)."""

    results = {}

    @classmethod
    def setUpClass(cls):
        cargo = shutil.which("cargo")
        if not cargo or subprocess.run([cargo, "fuzz", "--version"],
                                       capture_output=True).returncode != 0:
            cls.missing = "cargo-fuzz missing (scripts/setup.sh installs it)"
            return
        cls.missing = None
        secs = os.environ.get("METAROCE_FUZZ_SECONDS", "60")
        env = dict(os.environ, RUSTC_BOOTSTRAP="1")
        fuzz_dir = os.path.join(TRANSPORT, "fuzz")
        # Built once first, so that the runs do not wait on cargo's lock
        # inside their time.
        subprocess.run([cargo, "fuzz", "build"], cwd=fuzz_dir,
                       env=env, capture_output=True)

        def run(target):
            r = subprocess.run([cargo, "fuzz", "run", target, "--",
                                f"-max_total_time={secs}"],
                               cwd=fuzz_dir, env=env, capture_output=True, text=True)
            return r.returncode, (r.stdout + r.stderr)[-3000:]

        with concurrent.futures.ThreadPoolExecutor(max_workers=2) as pool:
            futures = {t: pool.submit(run, t) for t in FUZZ_TARGETS}
            cls.results = {t: f.result() for t, f in futures.items()}

    def fuzz(self, target):
        if self.missing:
            self.skipTest(self.missing)
        rc, tail = self.results[target]
        self.assertEqual(rc, 0, tail)
        self.assertRegex(tail, r"Done \d+ runs in \d+ second")

    def test_fuzz_decode(self):
        self.fuzz("decode")

    def test_fuzz_connection(self):
        self.fuzz("connection")

    def test_fuzz_session(self):
        self.fuzz("session")


if __name__ == "__main__":
    unittest.main()
