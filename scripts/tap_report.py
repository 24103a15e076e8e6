#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Merge the results of `make check` (or `make check-stock`) into one TAP stream
and a closing line "N passed, N failed, N skipped". Exit 1 if anything failed.

  tap_report.py --cargo FILE... --guest DIR
  tap_report.py --points FILE... --guest DIR --no-kunit REASON
"""

import argparse
import os
import re
import sys

# A kernel log line matching any of these fails the run.
BAD_LOG = re.compile(
    r"WARNING:|BUG:|Oops|general protection fault|Kernel panic|"
    r"\[ cut here \]|UBSAN:|refcount_t:|list_(add|del) corruption|"
    r"kmemleak: \d+ new suspected memory leak|INFO: task .* blocked|"
    r"soft lockup|rcu: INFO|unregister_netdevice: waiting|"
    r"possible recursive locking|circular locking dependency|"
    r"inconsistent lock state|suspicious RCU usage"
)
# Of the diagnostic lines a failed selftest point carries, the first
# NOTES_HEAD and the last NOTES_TAIL are printed, each cut to NOTE_WIDTH.
NOTES_HEAD = 5
NOTES_TAIL = 15
NOTE_WIDTH = 240
TAP_LINE = re.compile(r"^[ \t]*(not )?ok \d+ (.*?)\s*$")
# What a printed name or note may not carry: control characters and what
# readers take for line breaks (a "\r" that shows a line as "ok").
UNPRINTABLE = re.compile(r"[\x00-\x08\x0a-\x1f\x7f\x85\u2028\u2029]")
DMESG_PREFIX = re.compile(r"^\[\s*\d+\.\d+\]\s?")


def printable(text):
    return UNPRINTABLE.sub(" ", text)


SELFTEST_MARK = re.compile(r"metaroce-selftest: (start|end) (\S+)")


def running_tests(lines):
    """The selftests started and not ended in LINES (kernel log lines, with
    the marks scripts/guest-check.sh writes), in the order they started."""
    running = []
    for line in lines:
        m = SELFTEST_MARK.search(line)
        if not m:
            continue
        if m.group(1) == "start":
            running.append(m.group(2))
        elif m.group(2) in running:
            running.remove(m.group(2))
    return running


class Report:
    def __init__(self):
        self.n = 0
        self.passed = self.failed = self.skipped = 0

    def point(self, ok, name, skip=None, diag=()):
        name = printable(name)
        skip = printable(skip) if skip is not None else None
        diag = [printable(d) for d in diag]
        self.n += 1
        if skip is not None:
            self.skipped += 1
            print(f"ok {self.n} {name} # SKIP {skip}")
        elif ok:
            self.passed += 1
            print(f"ok {self.n} {name}")
        else:
            self.failed += 1
            print(f"not ok {self.n} {name}")
        for line in diag:
            print(f"#   {line}")


def read(path, default="", newline=None):
    try:
        with open(path, errors="replace", newline=newline) as f:
            return f.read()
    except OSError:
        return default


# How each userspace runner prints one result: (pattern with groups name and
# result, the prefix of the TAP name, results that mean "skipped").
CARGO = (r"^test (\S+) \.\.\. (ok|FAILED|ignored)", "cargo: ", ("ignored",))
UNITTEST = (r"^(\w+) \(.*?\) \.\.\. (ok|FAIL|ERROR|skipped.*)$", "", ("skipped",))


def runner_log(rep, path, style):
    """One TAP point per result line of a userspace test runner's log, and a
    failure if the log holds none (the runner did not build or run)."""
    pattern, prefix, skips = style
    text = read(path)
    label = prefix + os.path.basename(path).removesuffix(".log")
    found = False
    for m in re.finditer(pattern, text, re.M):
        found = True
        name, res = m.groups()
        skip = res if res.startswith(skips) else None
        rep.point(res == "ok", f"{label}: {name}", skip=skip)
    if not found:
        rep.point(False, f"{label}: tests ran", diag=text.splitlines()[-15:])


def points(rep, path):
    """The TAP points of a file that a check script wrote itself (`ok N name`,
    `not ok N name`, `# SKIP`); a failure if the file is missing or empty."""
    text = read(path, None)
    found = False
    for line in (text or "").splitlines():
        m = TAP_LINE.match(line)
        if not m:
            continue
        found = True
        name, skip = m.group(2), None
        if " # SKIP" in name:
            name, skip = (x.strip() for x in name.split(" # SKIP", 1))
        rep.point(m.group(1) is None, name, skip=skip)
    if not found:
        rep.point(False, f"{os.path.basename(path)}: results were written",
                  diag=[f"no TAP point in {path}"])


def kunit(rep, dmesg):
    """Reports the metaroce suites of the first module load (later loads by the
    selftests run them again; those runs only matter through the log check)."""
    suite = None
    found = False
    seen = set()
    for raw in dmesg.splitlines():
        line = DMESG_PREFIX.sub("", raw)
        m = re.match(r"^\s*# Subtest: (\S+)", line)
        if m:
            name = m.group(1)
            suite = name if name.startswith("metaroce") and name not in seen else None
            seen.add(name)
            continue
        if suite is None:
            continue
        m = re.match(r"^(\s+)(not )?ok \d+ (\S+)(.*)$", line)
        if m:
            found = True
            skip = "skipped" if "# SKIP" in m.group(4) else None
            rep.point(m.group(2) is None, f"kunit: {suite}: {m.group(3)}", skip=skip)
        elif re.match(r"^(not )?ok \d+ ", line):
            suite = None
    if not found:
        rep.point(False, "kunit: metaroce suites ran at module load")


def excerpt(notes):
    """What a failed point prints of the diagnostics before it: the first
    and the last lines (the first often names the failure, the last are the
    closest to it), each cut short."""
    cut = [n[:NOTE_WIDTH] for n in notes]
    if len(cut) <= NOTES_HEAD + NOTES_TAIL:
        return cut
    left = len(cut) - NOTES_HEAD - NOTES_TAIL
    return cut[:NOTES_HEAD] + [f"... ({left} lines)"] + cut[-NOTES_TAIL:]


def selftests(rep, guest):
    for t in read(os.path.join(guest, "tests.list")).split():
        # (newline="": a "\r" stays in its line, see below.)
        tap = read(os.path.join(guest, f"{t}.tap"), newline="")
        rc = read(os.path.join(guest, f"{t}.rc"), "missing").strip()
        failed_here = 0
        points = 0
        # The test's own diagnostics since its previous failed point (a
        # reason may come several points before the one it fails): printed
        # under a failed point, so that a report that keeps only this
        # stream (CI's) still says why. Lines end at "\n" only: a carriage
        # return a program printed neither starts a point nor a note (and
        # `Report.point` prints it as a space).
        notes = []
        for line in tap.split("\n"):
            if line.startswith("#"):
                notes.append(line[1:].strip())
                continue
            m = re.match(r"^1\.\.0 # SKIP (.*)$", line)
            if m:
                rep.point(True, f"selftests: metaroce: {t}", skip=m.group(1).strip())
                points += 1
                continue
            m = TAP_LINE.match(line)
            if not m:
                continue
            points += 1
            name = m.group(2)
            skip = None
            passed = m.group(1) is None
            if " # SKIP" in name:
                name, skip = name.split(" # SKIP", 1)
            elif " # TODO" in name and not passed:
                # A known deviation of the reference device (rdma_rxe),
                # named by the test: reported, not counted as a failure.
                name, todo = name.split(" # TODO", 1)
                skip, passed = f"TODO: {todo.strip()}", True
            # A point marked SKIP is a skip, whether "ok" or "not ok".
            failed = not passed and skip is None
            if failed:
                failed_here += 1
            rep.point(passed, f"selftests: metaroce: {t}: {name}",
                      skip=skip.strip() if skip is not None else None,
                      diag=excerpt(notes) if failed else [])
            if failed:
                notes = []
        # A script that failed without a failed point, or that ended other
        # than by reporting its failures (status 1): killed by its time limit
        # (124, 137), crashed. A failure of its own, with the last lines of
        # its output.
        if rc not in ("0", "4") and (failed_here == 0 or rc != "1"):
            tail = tap.split("\n") + read(os.path.join(guest, f"{t}.err")).splitlines()
            diag = [x[:NOTE_WIDTH] for x in tail if x.strip()][-15:]
            rep.point(False, f"selftests: metaroce: {t}: exit status {rc}", diag=diag)
        elif points == 0:
            rep.point(False, f"selftests: metaroce: {t}: printed no TAP")


def guest(rep, guest, no_kunit=None):
    if not os.path.exists(os.path.join(guest, "done")):
        rep.point(False, "vm: the guest ran to the end",
                  diag=["see the VM log for how far it got"])
    print(f"# guest kernel: {read(os.path.join(guest, 'uname')).strip()}")
    rc = read(os.path.join(guest, "insmod.rc"), "missing").strip()
    rep.point(rc == "0", "vm: insmod metaroce.ko",
              diag=read(os.path.join(guest, "insmod.err")).splitlines())
    dmesg = read(os.path.join(guest, "dmesg.txt"))
    if no_kunit:
        rep.point(True, "kunit: metaroce suites ran at module load", skip=no_kunit)
    else:
        kunit(rep, dmesg)
    selftests(rep, guest)
    rc = read(os.path.join(guest, "rmmod.rc"), "missing").strip()
    rep.point(rc == "0", "vm: rmmod metaroce at the end",
              diag=read(os.path.join(guest, "rmmod.err")).splitlines())
    leaks = read(os.path.join(guest, "kmemleak.txt"))
    if os.path.exists(os.path.join(guest, "kmemleak.missing")):
        rep.point(True, "vm: kmemleak reports no leak", skip="kmemleak not in this kernel")
    else:
        rep.point(leaks.strip() == "", "vm: kmemleak reports no leak",
                  diag=leaks.splitlines()[:30])
    bad = [l for l in dmesg.splitlines() if BAD_LOG.search(l)]
    if not dmesg:
        rep.point(False, "vm: kernel log is clean", diag=["no kernel log was saved"])
    else:
        idx = dmesg.splitlines()
        first = idx.index(bad[0]) if bad else 0
        diag = []
        if bad:
            running = running_tests(idx[:first])
            diag.append("selftests running then: " + (", ".join(running) or "none"))
            diag += idx[first:first + 40]
        rep.point(not bad, "vm: kernel log is clean (no WARN/BUG/KASAN/lockdep/leak)",
                  diag=diag)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--cargo", nargs="*", default=[])
    ap.add_argument("--unittest", nargs="*", default=[])
    ap.add_argument("--points", nargs="*", default=[])
    ap.add_argument("--guest")
    ap.add_argument("--no-kunit", metavar="REASON",
                    help="the guest kernel has no KUnit: report the suites as skipped")
    ap.add_argument("--vm-log")
    args = ap.parse_args()
    rep = Report()
    print("TAP version 13")
    for path in args.cargo:
        runner_log(rep, path, CARGO)
    for path in args.unittest:
        runner_log(rep, path, UNITTEST)
    for path in args.points:
        points(rep, path)
    if args.guest:
        guest(rep, args.guest, args.no_kunit)
    print(f"1..{rep.n}")
    line = f"{rep.passed} passed, {rep.failed} failed"
    if rep.skipped:
        line += f", {rep.skipped} skipped"
    print(line)
    return 1 if rep.failed or rep.n == 0 else 0


if __name__ == "__main__":
    sys.exit(main())
