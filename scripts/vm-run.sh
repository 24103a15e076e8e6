#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Boot a kernel build tree under QEMU (virtme-ng, the host's root file system
# over 9p, read-only) and run one command in it as root.
#
#   scripts/vm-run.sh KDIR RWDIR COMMAND...
#
# RWDIR is writable from the guest. KVM is used only if it really works here
# (METAROCE_KVM=1 forces it on); otherwise QEMU emulates (TCG).
set -euo pipefail
. "$(dirname "$0")/lib.sh"

kdir=$1
rwdir=$2
shift 2

kvm=(--disable-kvm)
if [ "${METAROCE_KVM:-0}" = 1 ]; then
	kvm=()
fi

exec timeout --foreground "${METAROCE_VM_TIMEOUT:-1800}" \
	vng --run "$kdir" "${kvm[@]}" --cpus 2 --memory 3G \
	--rwdir "$rwdir" --cwd "$TOP" --verbose \
	--exec "$*"
