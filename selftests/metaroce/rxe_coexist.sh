#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# MetaRoCE runs beside soft-RoCE (rdma_rxe) in the same kernel.
# Loads rdma_rxe with modprobe, or from $RXE_KO when set.

. "$(dirname "$0")/lib.sh"

require_tools ip rdma
require_module

if [ ! -d /sys/module/rdma_rxe ]; then
	if [ -n "$RXE_KO" ]; then
		insmod "$RXE_KO" 2>/dev/null || skip_all "cannot insmod $RXE_KO"
	else
		modprobe rdma_rxe 2>/dev/null || skip_all "rdma_rxe is not available"
	fi
fi

trap 'cleanup_links mrt0 rxet0; netns_pair_down' EXIT

ktap_plan 5
netns_pair_up || { ktap_info "cannot build the namespaces"; exit $KSFT_FAIL; }

check "rxe device on veth1" rdma_in "$NS_B" link add rxet0 type rxe netdev veth1
check "MetaRoCE device on veth0" rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0
out=$(rdma link show 2>&1)
ktap_info "$out"
check "both are listed" eval 'grep -q "link rxet0/1" <<<"$out" && grep -q "link mrt0/1" <<<"$out"'
out=$(rdma_in "$NS_A" link add rxet0 type metaroce netdev veth0 2>&1)
rc=$?
ktap_info "link add rxet0 type metaroce -> rc $rc: $out"
check "an rxe device's name is refused" eval \
	'[ $rc -ne 0 ] && grep -q "File exists" <<<"$out" && ibdev_exists rxet0'
check "rxe device deletes cleanly beside MetaRoCE" eval \
	'rdma link delete rxet0 && wait_for 5 ibdev_gone rxet0 && ibdev_exists mrt0'

ktap_finish
