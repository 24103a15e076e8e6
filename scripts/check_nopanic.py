#!/usr/bin/env python3
# SPDX-License-Identifier: GPL-2.0
"""Proves from machine code that the transport's per-packet entry points can
neither panic, allocate nor compute in floating point.

Reads `objdump -dr` of the staticlib built by rust/transport/nopanic (LTO,
panic=abort), follows every call and jump relocation from the `mr_probe_*`
entry points, and fails if any reachable function is a panic, allocation or
formatting routine of core/alloc, or uses a floating-point instruction.

    scripts/check_nopanic.py DISASSEMBLY.txt
"""
import re
import sys

FORBIDDEN = re.compile(
    r"panic|slice_(start_|end_)?index_(len_)?fail|unwrap_failed|expect_failed|"
    r"__rust_alloc|__rust_dealloc|__rust_realloc|alloc::|core3fmt|core\.\.fmt|"
    r"assert_failed|unreachable")
# Scalar and packed floating-point arithmetic (plain moves of xmm registers are
# how memcpy moves 16 bytes, so they are allowed).
FLOAT = re.compile(
    r"\b(add|sub|mul|div|sqrt|min|max)[sp][sd]\b|\bcvt\w*s[sd]\b|\bcvtt?s[sd]2\w+|"
    r"\bu?comis[sd]\b|\bfld|\bfst|\bfmul|\bfadd")
FUNC = re.compile(r"^[0-9a-f]+ <(.+)>:$")
RELOC = re.compile(r"R_X86_64_(?:PLT32|PC32|GOTPCRELX|REX_GOTPCRELX)\s+(\S+?)(?:[-+]0x[0-9a-f]+)?$")


def parse(path):
    funcs, cur, section_of = {}, None, {}
    for line in open(path, encoding="utf-8", errors="replace"):
        line = line.rstrip("\n")
        m = FUNC.match(line)
        if m:
            cur = m.group(1)
            funcs.setdefault(cur, {"calls": set(), "float": []})
            continue
        if line.startswith("Disassembly of section "):
            sec = line[len("Disassembly of section "):].rstrip(":")
            section_of[sec] = None
            continue
        if cur is None:
            continue
        r = RELOC.search(line)
        if r:
            funcs[cur]["calls"].add(r.group(1))
        elif FLOAT.search(line.split("\t")[-1] if "\t" in line else line):
            funcs[cur]["float"].append(line.strip())
    return funcs


def name_of(target, funcs):
    # Relocations name either the function or its section (.text.<name>).
    for prefix in (".text.unlikely.", ".text."):
        if target.startswith(prefix):
            return target[len(prefix):]
    return target


def main():
    funcs = parse(sys.argv[1])
    roots = [f for f in funcs if f.startswith("mr_probe_")]
    if not roots:
        print("not ok: no mr_probe_* entry points in the disassembly")
        return 1
    seen, stack, parent, bad = set(), list(roots), {}, []
    while stack:
        f = stack.pop()
        if f in seen:
            continue
        seen.add(f)
        if FORBIDDEN.search(f):
            bad.append(f)
            continue
        info = funcs.get(f)
        if info is None:
            continue
        for line in info["float"]:
            bad.append(f"{f}: {line}")
        for t in info["calls"]:
            n = name_of(t, funcs)
            if n not in seen:
                parent.setdefault(n, f)
                stack.append(n)
    for b in bad:
        chain, f = [], b.split(":")[0]
        while f in parent:
            f = parent[f]
            chain.append(f)
        print(f"not ok: reachable: {b}\n        via {' <- '.join(chain[:6])}")
    print(f"{len(seen)} functions reachable from {len(roots)} entry points, "
          f"{len(bad)} forbidden")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
