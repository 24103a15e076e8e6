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

top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh
verbs_tools_needs
require_tools ip rdma ss rping ucmatose udaddy rdma_server rdma_client rstream riostream
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"
rdma_cm_ready || skip_all "no /dev/infiniband/rdma_cm (rdma_ucm is not available)"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
port=18900
points=7

# cm_listening PORT: an RDMA-CM ID of $RDMA_A listens on PORT (an RDMA-CM
# port has no socket ss sees; the RDMA core lists its IDs).
cm_listening() {
	rdma resource show cm_id 2>/dev/null |
		grep -E "^link $RDMA_A/1 .*state LISTEN .*src-addr [^ ]*:$1( |$)" >/dev/null
}

# cm_pair NAME SERVER CLIENT: the command SERVER (words) in $NS_A, then,
# once it listens, CLIENT in $NS_B, each under a 120 s timeout; one point,
# passed when both exit 0. @PORT@ in either stands for the next port after
# $port (udaddy has no port option: its -p is the port space; it listens
# on 7174).
cm_pair() {
	local name=$1 server=$2 client=$3 spid crc src l listen=7174
	port=$((port + 1))
	[[ "$server" == *@PORT@* ]] && listen=$port
	server=${server//@PORT@/$port}
	client=${client//@PORT@/$port}
	# shellcheck disable=SC2086
	ip netns exec "$NS_A" timeout 120 "$env" $server >"$logs/server" 2>&1 &
	spid=$!
	# (or has exited: the client then fails at once)
	wait_for 30 eval "cm_listening $listen || ! kill -0 $spid 2>/dev/null" ||
		ktap_info "$name: the server does not listen on $listen after 30 s"
	# shellcheck disable=SC2086
	ip netns exec "$NS_B" timeout 120 "$env" $client >"$logs/client" 2>&1
	crc=$?
	# A server whose client failed would wait out its timeout: stopped
	# (ip netns exec runs timeout in its place, which passes the signal on).
	[ "$crc" -eq 0 ] || kill "$spid" 2>/dev/null
	wait "$spid"
	src=$?
	[ "$crc" -ne 0 ] || tail -n 2 "$logs/client" | while read -r l; do ktap_info "client: $l"; done
	pair_verdict "$name" "$crc" "$src" "$logs"
}

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
