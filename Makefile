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

.PHONY: all modules clean setup kernel check check-user demo help

all: modules

modules:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) modules

clean:
	$(MAKE) -C $(KDIR) M=$(CURDIR) LLVM=$(LLVM) clean
	rm -f rust/abstractions/bindings_generated.rs

setup:
	scripts/setup.sh

kernel:
	scripts/build-kernel.sh $(KERNEL_VARIANT)

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

help:
	@echo "make            build metaroce.ko against KDIR (default: the test kernel)"
	@echo "make setup      install packages and tools (idempotent)"
	@echo "make kernel     build or reuse the test kernel; prints its directory"
	@echo "make check      run every test: userspace crates, then the VM suite"
	@echo "make check-user run the userspace crates' tests only"
	@echo "make demo       boot the VM and show two MetaRoCE devices in two netns"
