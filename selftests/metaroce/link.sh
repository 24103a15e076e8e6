#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Create, inspect and delete MetaRoCE links between two network namespaces.

. "$(dirname "$0")/lib.sh"

require_tools ip rdma
require_module

trap 'cleanup_links mrt0 mrt1; netns_pair_down' EXIT

ktap_plan 15
netns_pair_up || { ktap_info "cannot build the namespaces"; exit $KSFT_FAIL; }

check "link add in namespace A" rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0
check "link add in namespace B" rdma_in "$NS_B" link add mrt1 type metaroce netdev veth1

out=$(rdma_in "$NS_A" link show mrt0/1 2>&1)
ktap_info "$out"
check "rdma link shows mrt0 ACTIVE on veth0" \
	grep -Eq "link mrt0/1 state ACTIVE physical_state LINK_UP netdev veth0" <<<"$out"

out=$(rdma dev show mrt0 2>&1)
ktap_info "$out"
check "rdma dev lists mrt0 as a CA" grep -Eq "^[0-9]+: mrt0: node_type ca " <<<"$out"

mac=$(ip -n "$NS_A" -br link show veth0 | awk '{print $3}')
guid=$(cat /sys/class/infiniband/mrt0/node_guid)
ktap_info "veth0 mac $mac, node_guid $guid"
want=$(printf '%02x%s:%sff:fe%s:%s%s' \
	$((0x${mac:0:2} ^ 2)) "${mac:3:2}" "${mac:6:2}" "${mac:9:2}" "${mac:12:2}" "${mac:15:2}")
check "node GUID is the EUI-64 of the MAC" test "$guid" = "$want"

check "link layer is Ethernet" \
	grep -qx Ethernet /sys/class/infiniband/mrt0/ports/1/link_layer

# RoCE GID of 10.77.0.1 is ::ffff:10.77.0.1.
gid_v4=0000:0000:0000:0000:0000:ffff:0a4d:0001
has_gid() { grep -qx "$2" /sys/class/infiniband/"$1"/ports/1/gids/* 2>/dev/null; }
check "GID table holds the IPv4 address as a RoCE GID" wait_for 10 has_gid mrt0 "$gid_v4"

gid_type_of_v4() {
	local f
	for f in /sys/class/infiniband/mrt0/ports/1/gids/*; do
		[ "$(cat "$f")" = "$gid_v4" ] || continue
		grep -qx "RoCE v2" "/sys/class/infiniband/mrt0/ports/1/gid_attrs/types/${f##*/}"
		return
	done
	return 1
}
check "the GID is of type RoCE v2" gid_type_of_v4

ip -n "$NS_A" addr add 10.77.1.1/24 dev veth0
check "a new address appears as a new GID" \
	wait_for 10 has_gid mrt0 0000:0000:0000:0000:0000:ffff:0a4d:0101
ip -n "$NS_A" addr del 10.77.1.1/24 dev veth0
check "a removed address leaves the GID table" \
	wait_for 10 eval '! has_gid mrt0 0000:0000:0000:0000:0000:ffff:0a4d:0101'

port_state() { grep -q "$2" /sys/class/infiniband/"$1"/ports/1/state; }
ip -n "$NS_A" link set veth0 down
check "port goes DOWN with its net device" wait_for 10 port_state mrt0 DOWN
ip -n "$NS_A" link set veth0 up
check "port comes back ACTIVE" wait_for 10 port_state mrt0 ACTIVE

check "link delete removes mrt0" rdma link delete mrt0
check "mrt0 is gone from sysfs" wait_for 5 ibdev_gone mrt0
check "mrt1 is still there" ibdev_exists mrt1

ktap_finish
