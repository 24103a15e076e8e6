#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Install everything metaroce needs on a Debian 12 (bookworm) machine. Idempotent:
# each step checks first and does nothing when already done.
#
#   scripts/setup.sh            packages + Rust pieces
#   scripts/setup.sh stock      also what Debian's stock kernel needs (make check-stock,
#                               DKMS): dkms, and the exact rustc Debian built it with
#
# Newer suites (bookworm-backports for QEMU, sid for linux-source-7.2) are added with apt pin priority 100, so nothing is upgraded from them
# unless asked for by name. Undo: rm /etc/apt/sources.list.d/metaroce.sources
# /etc/apt/preferences.d/metaroce.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

SUDO=
export DEBIAN_FRONTEND=noninteractive
[ "$(id -u)" = 0 ] || SUDO=sudo

add_suites() {
	local src=/etc/apt/sources.list.d/metaroce.sources
	local pref=/etc/apt/preferences.d/metaroce
	if [ ! -f "$src" ]; then
		log "adding bookworm-backports and sid (pinned at 100) to apt"
		$SUDO tee "$src" >/dev/null <<'SRC'
Types: deb deb-src
URIs: http://deb.debian.org/debian
Suites: bookworm-backports sid
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
SRC
		$SUDO tee "$pref" >/dev/null <<'PREF'
Package: *
Pin: release n=sid
Pin-Priority: 100

Package: *
Pin: release n=bookworm-backports
Pin-Priority: 100
PREF
		$SUDO apt-get update -q
	elif [ -z "$(apt-cache policy linux-source-$KVER_MAJOR 2>/dev/null | grep Candidate | grep -v none)" ]; then
		$SUDO apt-get update -q
	fi
}

BOOKWORM_PKGS=(
	build-essential bc bison flex libelf-dev libssl-dev dwarves cpio kmod rsync
	xz-utils zstd python3 git pkg-config
	clang-19 lld-19 llvm-19 libclang-19-dev
	rdma-core ibverbs-utils ibverbs-providers rdmacm-utils libibverbs-dev
	librdmacm-dev perftest iproute2 iperf3 ethtool busybox-static procps
	# NVMe over Fabrics, the kernel consumer of selftests/metaroce/nvme_rdma.sh
	nvme-cli
	# the dissector's tests (tools/dissector, counters.sh)
	tshark
	# rdma-core 65.0 from source (scripts/build-rdma-core.sh)
	cmake ninja-build libnl-3-dev libnl-route-3-dev libudev-dev
)

install_packages() {
	local missing=() p
	for p in "${BOOKWORM_PKGS[@]}"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "ok installed" ||
			missing+=("$p")
	done
	if [ ${#missing[@]} -gt 0 ]; then
		log "installing: ${missing[*]}"
		$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
	# QEMU 10 from bookworm-backports matches the qemu-utils the image ships.
	if ! command -v qemu-system-x86_64 >/dev/null; then
		log "installing qemu-system-x86 from bookworm-backports"
		$SUDO apt-get install -y -q --no-install-recommends \
			-t bookworm-backports qemu-system-x86
	fi
	if ! ls /usr/src/linux-source-$KVER_MAJOR.tar.* >/dev/null 2>&1; then
		log "installing linux-source-$KVER_MAJOR from sid"
		$SUDO apt-get install -y -q --no-install-recommends linux-source-$KVER_MAJOR
	fi
}

install_rust() {
	if ! rustup component list --installed 2>/dev/null | grep -q '^rust-src'; then
		log "adding rust-src to the active toolchain"
		rustup component add rust-src
	fi
	if ! command -v bindgen >/dev/null ||
	   ! bindgen --version | grep -q "bindgen $BINDGEN_VER"; then
		log "installing bindgen-cli $BINDGEN_VER"
		LIBCLANG_PATH=$LIBCLANG_PATH cargo install --locked --version "$BINDGEN_VER" bindgen-cli
	fi
	# The transport core's fuzz targets (run on stable with RUSTC_BOOTSTRAP=1).
	if ! cargo fuzz --version 2>/dev/null | grep -q "$CARGO_FUZZ_VER"; then
		log "installing cargo-fuzz $CARGO_FUZZ_VER"
		cargo install --locked --version "$CARGO_FUZZ_VER" cargo-fuzz
	fi
}

# The rustc version is read from the kernel's headers package (its .config), by
# scripts/stock-kernel.sh, which downloads that package into the cache.
install_stock() {
	if ! command -v dkms >/dev/null; then
		log "installing dkms"
		$SUDO apt-get install -y -q --no-install-recommends dkms
	fi
	"$TOP/scripts/stock-kernel.sh" toolchain
}

add_suites
install_packages
install_rust
if [ "${1:-}" = stock ]; then
	install_stock
fi
log "set-up complete"
