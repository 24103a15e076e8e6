#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Tests of scripts/stock-kernel.sh's checks that run before anything is built:
a kernel whose rustc is not installed, or one without Rust, must stop the
preparation with a message that says what to do."""

import os
import subprocess
import tempfile
import unittest

SCRIPT = os.path.join(os.path.dirname(__file__), "..", "stock-kernel.sh")


def fake_headers(config):
    """A headers directory as Debian's linux-headers package lays it out, with
    the given .config."""
    d = tempfile.mkdtemp()
    os.makedirs(os.path.join(d, "include", "generated"))
    os.makedirs(os.path.join(d, "include", "config"))
    files = {
        ".config": config,
        "include/generated/package.h": '#define LINUX_PACKAGE_ID " Debian 7.2.13-1"\n',
        "include/config/kernel.release": "7.2.13+deb14-amd64\n",
    }
    for name, text in files.items():
        with open(os.path.join(d, name), "w") as f:
            f.write(text)
    return d


def run(headers):
    env = dict(os.environ, METAROCE_CACHE=tempfile.mkdtemp(), RUSTUP_AUTO_INSTALL="0")
    env.pop("RUSTC_FORCE_RUSTC_VERSION", None)
    return subprocess.run(
        ["bash", SCRIPT, "--release", "7.2.13+deb14-amd64", "--headers", headers],
        capture_output=True, text=True, env=env, timeout=120)


class PrecheckTest(unittest.TestCase):
    def test_missing_rustc_says_what_to_install(self):
        config = ("CONFIG_RUST=y\nCONFIG_CC_IS_GCC=y\n"
                  'CONFIG_RUSTC_VERSION_TEXT="rustc 1.0.0 (a59de37e9 2015-05-13) '
                  '(built from a source tarball)"\n')
        p = run(fake_headers(config))
        self.assertNotEqual(p.returncode, 0, p.stderr)
        self.assertIn('built by "rustc 1.0.0 (a59de37e9 2015-05-13)', p.stderr)
        self.assertIn("rustup toolchain install 1.0.0", p.stderr)
        # Stopped before anything was prepared.
        self.assertNotIn("preparing Rust metadata", p.stderr)

    def test_kernel_without_rust_is_refused(self):
        p = run(fake_headers("# CONFIG_RUST is not set\nCONFIG_CC_IS_GCC=y\n"))
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("without CONFIG_RUST=y", p.stderr)


if __name__ == "__main__":
    unittest.main()
