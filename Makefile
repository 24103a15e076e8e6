# SPDX-License-Identifier: GPL-2.0
#
# metaroce: the entry points. `make help` lists them.

KERNEL_VARIANT ?= debug
# The kernel build tree to build against. Defaults to the project's test kernel
# (built on first use into $(METAROCE_CACHE), see scripts/build-kernel.sh).
KDIR ?= $(shell scripts/build-kernel.sh $(KERNEL_VARIANT))
# The LLVM suffix the kernel was built with; LLVM= (empty) for a GCC-built kernel.
LLVM ?= -19

export PATH := $(HOME)/.cargo/bin:$(PATH)
export LIBCLANG_PATH ?= /usr/lib/llvm-19/lib

# A tree prepared by scripts/stock-kernel.sh (Debian's stock kernel) says how to
# run Kbuild for it: the compiler, the rustc toolchain, LLVM= (empty). Looked for
# only when KDIR is given: the default KDIR would build the test kernel to look.
MR_KBUILD_ARGS :=
ifneq ($(filter command line environment,$(origin KDIR)),)
-include $(KDIR)/metaroce-kbuild.mk
endif

.PHONY: all modules kclient clean setup kernel check check-user demo bench help \
	stock-kernel stock check-stock provider lint lint-fmt lint-clippy lint-module
.PHONY: sim-loss sim-planes sim-plane-failure sim-incast sim-quick

all: modules

modules:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) $(MR_KBUILD_ARGS) modules

# The in-kernel test consumer (tools/kclient), for selftests/metaroce/kclient.sh.
kclient:
	$(MAKE) -C $(KDIR) M=$(CURDIR)/tools/kclient LLVM=$(LLVM) $(MR_KBUILD_ARGS) modules

clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) $(MR_KBUILD_ARGS) clean
	rm -f rust/abstractions/bindings_generated.rs

setup:
	scripts/setup.sh

kernel:
	scripts/build-kernel.sh $(KERNEL_VARIANT)

# Static checks (no VM): every Rust source formatted as .rustfmt.toml says, the
# user-space crates clean under clippy, and the module clean under the kernel's.
lint: lint-fmt lint-clippy lint-module

# Every Rust source but the generated bindings and cargo's build directories,
# each on its own (given a path, rustfmt would also check the modules it declares).
RUST_SOURCES = $(shell find rust tools -name '*.rs' -not -path '*/target/*' \
	-not -name bindings_generated.rs | sort)
RUSTFMT = rustfmt --edition 2021 --config-path .rustfmt.toml

lint-fmt:
	@rc=0; for f in $(RUST_SOURCES); do \
		$(RUSTFMT) --emit stdout <$$f | diff -u --label $$f --label "$$f (rustfmt)" $$f - || rc=1; \
	done; exit $$rc

# The user-space crates, every target (tests, benches) included. tools/sim's
# tests check ranges with two comparisons: manual_range_contains is allowed there.
CLIPPY_ARGS = --all-targets --quiet -- -D warnings
lint-clippy:
	cargo clippy --manifest-path rust/transport/Cargo.toml $(CLIPPY_ARGS)
	cargo clippy --manifest-path tools/sim/Cargo.toml $(CLIPPY_ARGS) -A clippy::manual_range_contains
	cargo clippy --manifest-path tools/viewer/Cargo.toml $(CLIPPY_ARGS)

# The module built with the kernel's clippy (CLIPPY=1), any warning an error.
# clippy-driver does not make the same metaroce.ko as rustc: `make` rebuilds it.
lint-module:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) $(MR_KBUILD_ARGS) CLIPPY=1 KRUSTFLAGS=-Dwarnings modules

# Userspace crates' tests only (no VM).
check-user:
	@scripts/check-user.sh out/check-user; \
	python3 scripts/tap_report.py --cargo out/check-user/cargo-*.log \
		--unittest out/check-user/unittest-*.log

# The whole suite: userspace crates, then the module in a QEMU guest.
check:
	scripts/check.sh

demo:
	scripts/demo.sh

# rdma-core 65.0 with the metaroce provider, installed into a cache prefix
# (printed); scripts/rdma-env.sh CMD runs a verbs program on it.
provider:
	@scripts/build-rdma-core.sh

# Debian's stock kernel (see Documentation/distribution-kernel.md). Which one:
# the one of the installed linux-source package (downloaded into the cache), or
# KERNELRELEASE= an installed kernel (DKMS passes it), STOCK_HEADERS= its headers.
STOCK_ARGS = $(if $(KERNELRELEASE),--release $(KERNELRELEASE)) \
	$(if $(STOCK_HEADERS),--headers $(STOCK_HEADERS))

# Regenerate the stock kernel's Rust metadata (cached); print the build directory.
stock-kernel:
	@scripts/stock-kernel.sh $(STOCK_ARGS)

# Build metaroce.ko for the stock kernel (dkms.conf's build command).
stock:
	@kdir=$$(scripts/stock-kernel.sh $(STOCK_ARGS)) && \
	$(MAKE) --no-print-directory KDIR="$$kdir" modules

# Boot Debian's stock kernel in QEMU: DKMS-built module, modprobe, selftests.
check-stock:
	scripts/check-stock.sh

# MetaRoCE against rdma_rxe (and TCP) in one boot of Debian's stock (non-debug) kernel:
# perftest on the direct and multiplane topologies; table, CSV and PNG in
# out/bench-DATE/ (Documentation/performance.md). BENCH_REPEAT=N (default 3),
# BENCH_FILTER=REGEX (only matching points), BENCH_BASE_KO=PATH (latency,
# 64 KiB latency, lossless write_bw and send_bw, and write_bw at 1% loss
# also against another revision's module, alternating in the same boot),
# BENCH_TYPES (default "metaroce rxe tcp": iperf3 beside the direct
# write_bw points).
bench:
	scripts/bench.sh

# The fabric simulator (tools/sim): each scenario prints a JSON summary as its
# last line and writes CSV + SVG into out/sim/<scenario>/.
# SIM_TRANSPORT=roce|metaroce|both; SIM_ARGS for more (e.g. --seed 2 --strict).
SIM_TRANSPORT ?= both
SIM_ARGS ?=
SIM = cargo run --release --quiet --manifest-path tools/sim/Cargo.toml --

sim-loss sim-planes sim-plane-failure sim-incast:
	$(SIM) $(@:sim-%=%) --transport $(SIM_TRANSPORT) $(SIM_ARGS)

sim-quick:
	$(SIM) loss --quick --transport $(SIM_TRANSPORT) $(SIM_ARGS)
	$(SIM) planes --quick --transport $(SIM_TRANSPORT) $(SIM_ARGS)
	$(SIM) plane-failure --quick --transport $(SIM_TRANSPORT) $(SIM_ARGS)
	$(SIM) incast --quick --transport $(SIM_TRANSPORT) $(SIM_ARGS)

help:
	@echo "make            build metaroce.ko against KDIR (default: the test kernel)"
	@echo "make setup      install packages and tools (idempotent)"
	@echo "make kernel     build or reuse the test kernel; prints its directory"
	@echo "make check      run every test: userspace crates, then the VM suite"
	@echo "make check-user run the userspace crates' tests only"
	@echo "make lint       static checks: lint-fmt (rustfmt), lint-clippy (the user-space crates),"
	@echo "                lint-module (the module built with CLIPPY=1); any warning fails"
	@echo "make demo       boot Debian's kernel: MetaRoCE and rxe side by side, lossless, 1% loss, reordering, a failing plane"
	@echo "make provider   build rdma-core 65.0 + the metaroce provider into the cache; prints"
	@echo "                the prefix (run programs on it: scripts/rdma-env.sh CMD)"
	@echo "make stock      build metaroce.ko for Debian's stock kernel (KERNELRELEASE=...)"
	@echo "make stock-kernel  prepare the stock kernel's Rust metadata; prints its directory"
	@echo "make check-stock   boot Debian's stock kernel: DKMS install, modprobe, selftests"
	@echo "make bench      MetaRoCE vs rdma_rxe on Debian's stock kernel, one boot: table, CSV, PNG"
	@echo "make sim-loss   simulator: one flow, goodput vs random loss (0..10%)"
	@echo "make sim-planes simulator: 64 hosts, 1/2/4/8 planes, 4,032 connections"
	@echo "make sim-plane-failure  simulator: 4 planes, one fails mid-run"
	@echo "make sim-incast simulator: 32-to-1 incast"
	@echo "make sim-quick  all four simulator scenarios, small (CI)"
	@echo "                (SIM_TRANSPORT=roce|metaroce|both, SIM_ARGS=\"--seed N --strict\")"
