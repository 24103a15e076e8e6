#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Boot a kernel build tree under QEMU and run one command in it as root.
#
#   scripts/vm-run.sh KDIR RWDIR [COMMAND...]
#
# KDIR is a kernel build tree (its arch/x86/boot/bzImage is booted) or a kernel
# image file (e.g. Debian's vmlinuz). METAROCE_VM_INITRD names an initramfs to
# pass along (scripts/check-stock.sh uses one for a kernel with 9p as modules).
#
# The guest's root file system is the host's, read-only over 9p; RWDIR is
# shared read-write and mounted at the same path in the guest. Without a
# COMMAND the guest gives an interactive shell on the console. The kernel log
# is printed on the console as it comes. KVM is used only when METAROCE_KVM=1
# (it is not usable on this project's machines); otherwise QEMU emulates (TCG).
#
# scripts/guest-init.sh is the guest's init: it mounts what the tests need and
# powers the guest off when the command ends, so no time goes to a distro init.
set -euo pipefail
. "$(dirname "$0")/lib.sh"

[ $# -ge 2 ] || die "usage: $0 KDIR RWDIR [COMMAND...]"
kdir=$1
rwdir=$(cd "$2" && pwd)
shift 2
if [ -f "$kdir" ]; then
	kernel=$kdir
else
	kernel="$kdir/arch/x86/boot/bzImage"
fi
[ -f "$kernel" ] || die "no kernel image at $kernel"
initrd=()
if [ -n "${METAROCE_VM_INITRD:-}" ]; then
	initrd=(-initrd "$METAROCE_VM_INITRD")
fi

accel=tcg
if [ "${METAROCE_KVM:-0}" = 1 ]; then accel=kvm; else accel=tcg,thread=multi; fi

# The command travels base64-encoded on the kernel command line. (The prefix is
# not "metaroce.": modprobe would hand such options to the module.) One
# argument is a shell command line as it is; several are quoted one by one,
# so that an argument with spaces (BENCH_FILTER='a|b c') stays one word.
if [ $# = 1 ]; then line=$1; else line=$(printf '%q ' "$@"); fi
cmd=$(printf '%s' "$line" | base64 -w0)
append="console=ttyS0 root=/dev/root rootfstype=9p"
append+=" rootflags=trans=virtio,version=9p2000.L,msize=512000,access=any,cache=loose"
append+=" ro panic=-1 oops=panic init=$TOP/scripts/guest-init.sh"
append+=" mrvm.rwdir=$rwdir mrvm.cmd=$cmd mrvm.cwd=$TOP"
# Under TCG the clocksource watchdog sees the TSC drift against the HPET by a
# fraction of a percent and switches the guest to the HPET, whose every read
# is an emulated MMIO access: each clock read then costs microseconds, which
# the data path of both RDMA transports pays. The guest's TSC is QEMU's clock,
# so it is kept.
append+=" tsc=reliable"
append+=" ${METAROCE_VM_APPEND:-}"

# isa-debug-exit makes QEMU exit with status 1 when the guest is done: that
# is success here.
rc=0
timeout --foreground "${METAROCE_VM_TIMEOUT:-1800}" \
	qemu-system-x86_64 -machine pc -accel "$accel" -smp "${METAROCE_VM_CPUS:-2}" \
	-m "${METAROCE_VM_MEM:-3G}" -nographic -no-reboot -nic none \
	-device isa-debug-exit,iobase=0xf4,iosize=0x04 \
	-kernel "$kernel" "${initrd[@]}" -append "$append" \
	-fsdev local,id=root,path=/,security_model=none,readonly=on \
	-device virtio-9p-pci,fsdev=root,mount_tag=/dev/root \
	-fsdev local,id=rw,path="$rwdir",security_model=none \
	-device virtio-9p-pci,fsdev=rw,mount_tag=rwdir || rc=$?
[ "$rc" = 1 ] && rc=0
exit "$rc"
