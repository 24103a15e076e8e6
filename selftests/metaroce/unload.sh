#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# rmmod with devices present removes them cleanly; the module loads again.
# Needs the path of metaroce.ko in $METAROCE_KO to reload it.

. "$(dirname "$0")/lib.sh"

require_tools ip rdma rmmod insmod
require_module
[ -n "$METAROCE_KO" ] && [ -f "$METAROCE_KO" ] ||
	skip_all "set METAROCE_KO to the module's path to run this test"

trap 'netns_pair_down; [ -d /sys/module/metaroce ] || insmod "$METAROCE_KO"' EXIT

ktap_plan 6
netns_pair_up || { ktap_info "cannot build the namespaces"; exit $KSFT_FAIL; }

check "two devices before unloading" eval \
	'rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0 &&
	 rdma_in "$NS_B" link add mrt1 type metaroce netdev veth1'
check "rmmod succeeds with devices present" rmmod metaroce
check "both devices are gone" eval 'ibdev_gone mrt0 && ibdev_gone mrt1'
check "the link type is gone with the module" eval \
	'! rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0 2>/dev/null || [ -d /sys/module/metaroce ]'
# Where modprobe finds the module (installed in /lib/modules, as DKMS does),
# that request loaded it again by its alias rdma-link-metaroce: unload it.
if [ -d /sys/module/metaroce ]; then
	ktap_info "rdma link add loaded metaroce by its alias; unloading it again"
	rmmod metaroce
fi
check "insmod loads it again" insmod "$METAROCE_KO"
check "and it serves new links" rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0
rdma link delete mrt0

ktap_finish
