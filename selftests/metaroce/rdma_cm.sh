#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# RDMA-CM over the device, with librdmacm's own programs, unmodified, between
# two namespaces joined by a veth pair: the kernel's connection manager sends
# its MADs over QP1 (a GSI QP carried by MetaRoCE datagrams), resolves
# addresses and routes from the net device, and connects RC and UD QPs.
# - rping (RC: Send, RDMA Read and Write of a buffer, verified);
# - ucmatose (RC, two connections), udaddy (UD, two QPs);
# - rdma_server / rdma_client (the rdma_* convenience calls);
# - rstream (rsockets over RC, data verified) and riostream (rsockets
#   with RDMA Writes).
# The same runs on rdma_rxe in the same boot, for comparison.
#
# Needs the rdma-core build with the MetaRoCE provider (make provider).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

verbs_tools_needs
require_tools ip rdma ss rping ucmatose udaddy rdma_server rdma_client rstream riostream
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"
rdma_cm_ready || skip_all "no /dev/infiniband/rdma_cm (rdma_ucm is not available)"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
points=7

type_points() {
	local t=$1 a=$FABRIC_IP_A
	cm_pair "$t: rping, 100 pings of 4 KiB, verified" \
		"rping -s -a $a -p @PORT@ -C 100 -S 4096 -V" "rping -c -a $a -p @PORT@ -C 100 -S 4096 -V"
	cm_pair "$t: ucmatose, 2 connections, 100 messages of 1000 bytes" \
		"ucmatose -b $a -p @PORT@ -c 2 -C 100 -S 1000" "ucmatose -s $a -p @PORT@ -c 2 -C 100 -S 1000"
	cm_pair "$t: udaddy, 2 UD QPs, 100 messages of 512 bytes" \
		"udaddy -b $a -c 2 -C 100 -S 512" "udaddy -s $a -c 2 -C 100 -S 512"
	cm_pair "$t: rdma_server and rdma_client" \
		"rdma_server -s $a -p @PORT@" "rdma_client -s $a -p @PORT@"
	cm_pair "$t: rstream (rsockets), 300 transfers of 4 KiB, verified" \
		"rstream -b $a -p @PORT@ -S 4096 -C 300 -T v" "rstream -s $a -p @PORT@ -S 4096 -C 300 -T v"
	cm_pair "$t: riostream (rsockets with RDMA writes), 300 transfers of 4 KiB" \
		"riostream -b $a -p @PORT@ -S 4096 -C 300" "riostream -s $a -p @PORT@ -S 4096 -C 300"
}

ktap_plan $(($(fabric_types) * points))
each_type "$points" type_points
ktap_finish
