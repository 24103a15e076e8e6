#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Run the userspace crates' tests; each crate's output goes to OUT/cargo-NAME.log.
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
exit $rc
