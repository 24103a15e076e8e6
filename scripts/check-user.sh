#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Run the userspace tests: each crate's cargo tests (OUT/cargo-NAME.log) and the
# unit tests of the test tooling itself (OUT/unittest-scripts.log).
#
#   scripts/check-user.sh [OUT]
set -uo pipefail
. "$(dirname "$0")/lib.sh"

out=${1:-$TOP/out/check-user}
mkdir -p "$out"
rc=0
for manifest in "$TOP"/rust/*/Cargo.toml "$TOP"/tools/*/Cargo.toml; do
	[ -f "$manifest" ] || continue
	name=$(basename "$(dirname "$manifest")")
	log "cargo test: $name"
	cargo test --manifest-path "$manifest" -- --test-threads=2 \
		>"$out/cargo-$name.log" 2>&1 || rc=1
done
log "python unittest: scripts/tests"
python3 -m unittest discover -v -s "$TOP/scripts/tests" -p 'test_*.py' \
	>"$out/unittest-scripts.log" 2>&1 || rc=1
exit $rc
