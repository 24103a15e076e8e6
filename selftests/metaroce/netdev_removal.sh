#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A MetaRoCE device goes away with its net device.

. "$(dirname "$0")/lib.sh"

require_tools ip rdma
require_module

trap 'cleanup_links mrt0 mrt1 mrt2; netns_pair_down' EXIT

ktap_plan 7
netns_pair_up || { ktap_info "cannot build the namespaces"; exit $KSFT_FAIL; }

check "devices on both ends" eval \
	'rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0 &&
	 rdma_in "$NS_B" link add mrt1 type metaroce netdev veth1'
ip -n "$NS_A" link del veth0
check "deleting veth0 removes mrt0" wait_for 15 ibdev_gone mrt0
check "its peer veth1 went too, and so did mrt1" wait_for 15 ibdev_gone mrt1

# A new pair with the same names works again: nothing stale was left behind.
ip link add veth0 netns "$NS_A" type veth peer name veth1 netns "$NS_B"
ip -n "$NS_A" link set veth0 up
ip -n "$NS_B" link set veth1 up
check "the names are free again" rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0

# Destroying a namespace destroys its veth end, and so the device.
check "a device in namespace B" rdma_in "$NS_B" link add mrt2 type metaroce netdev veth1
ip netns del "$NS_B"
t0=$SECONDS
check "deleting namespace B removes mrt2" wait_for 60 ibdev_gone mrt2
check "and mrt0, whose peer went with it" wait_for 60 ibdev_gone mrt0
# Usually 2-6 s in the debug kernel: a slower teardown shows here.
ktap_info "both devices were gone $((SECONDS - t0)) s after the namespace was deleted"

ktap_finish
