#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# In-kernel consumers accept the device: tools/kclient's metaroce_kclient.ko
# registers as an RDMA client (the core offers it only devices with every
# mandatory kernel verb, get_dma_mr included) and, on the MetaRoCE device,
# allocates a PD, a CQ and two RC QPs the way kernel storage transports do,
# connects them to each other through the device's own address (loopback),
# and sends messages of 1 B .. 64 KiB from kernel buffers (two SGEs, with
# immediate data, some inline), checking every completion and byte; a PD
# asking for an unsafe global rkey (remote access to all kernel memory) must be
# refused; then (fast=1) a REG_MR that must complete while other QPs to the
# same host hold every slot of the connection's message table with Sends
# that wait for ever (a local operation needs no slot), and fast
# registration as NVMe-oF uses it (alloc_mr,
# map_mr_sg, REG_MR, a peer's Write into it, LOCAL_INV, REG_MR again, the
# peer's Send with Invalidate, and a Write by the invalidated key refused).
# It loads only if all of that passed. Skips when the test module is not
# built (make kclient).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
ko=${KCLIENT_KO:-$top/tools/kclient/metaroce_kclient.ko}
[ -e "$ko" ] || skip_all "$ko is not built (make kclient)"
# Built for another kernel (make check builds it for the test kernel only).
[ "$(modinfo -F vermagic "$ko" 2>/dev/null | cut -d' ' -f1)" = "$(uname -r)" ] ||
	skip_all "$ko is built for another kernel than $(uname -r)"
require_tools ip rdma insmod rmmod dmesg modinfo
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

ktap_plan 4
trap '[ -d /sys/module/metaroce_kclient ] && rmmod metaroce_kclient; rdma_fabric_down' EXIT
fabric_point metaroce

for dev in "$RDMA_A" "$RDMA_B"; do
	name="an in-kernel consumer runs 32 Sends and fast registration over loopback QPs on $dev"
	if insmod "$ko" dev="$dev" iters=32 fast=1 2>/dev/null; then
		rmmod metaroce_kclient
		ktap_info "$(dmesg | grep "metaroce_kclient: PASS on $dev" | tail -1)"
		ktap_ok "$name"
	else
		dmesg | grep "metaroce_kclient" | tail -5 | while IFS= read -r l; do ktap_info "$l"; done
		ktap_fail "$name"
	fi
done
check "a device that does not exist is reported, not crashed on" \
	eval '! insmod "$ko" dev=nosuchdevice 2>/dev/null && dmesg | grep -q "did not offer .nosuchdevice."'
ktap_finish
