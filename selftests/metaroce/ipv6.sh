#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# MetaRoCE over IPv6, between two namespaces joined by a veth pair that has
# IPv4 addresses, IPv6 ones (fd77::1/64, fd77::2/64) and the link-local
# addresses the kernel gives every interface. For each type (MetaRoCE, then
# rdma_rxe in the same boot for comparison):
# - the port's GID table holds RoCE v2 GIDs of the global and the
#   link-local IPv6 addresses, and GID index 0 is the link-local one;
# - ibv_rc_pingpong over the global IPv6 GIDs, and over GID index 0 on both
#   ends (the link-local GID the RDMA core adds, which programs use when
#   told nothing else), and to the host's own IPv6 address (through lo,
#   with no warning in the kernel log);
# - ibv_ud_pingpong over the IPv6 GIDs (address handles from IPv6 GIDs, the
#   GRH an IPv6 header);
# - RDMA-CM over IPv6 addresses: rping (RC, verified) and udaddy (UD);
# - MetaRoCE's telemetry names the peers by their IPv6 addresses;
# - the GIDs follow address changes: an address removed takes its GID
#   away, a new one brings its own, and a QP can use it at once.
#
# Needs the rdma-core build with the MetaRoCE provider (make provider).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh
verbs_tools_needs
require_tools ip rdma ss ibv_rc_pingpong ibv_ud_pingpong rping udaddy python3
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"
[ -e /proc/net/if_inet6 ] || skip_all "the kernel has no IPv6"
rdma_cm_ready || skip_all "no /dev/infiniband/rdma_cm (rdma_ucm is not available)"

IP6_A=fd77::1
IP6_B=fd77::2
IP6_NEW=fd77::11
logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
points=12

# link_local NS DEV: the link-local address of DEV.
link_local() {
	ip -n "$1" -6 -o addr show dev "$2" scope link | awk '{ sub(/\/.*/, "", $4); print $4; exit }'
}

# The namespaces as lib.sh's pair, with duplicate address detection off (a
# tentative address cannot be a source) and the IPv6 addresses added.
pair6_up() {
	ip netns add "$NS_A" && ip netns add "$NS_B" || return 1
	local ns
	for ns in "$NS_A" "$NS_B"; do
		ip netns exec "$ns" sysctl -qw net.ipv6.conf.default.accept_dad=0 \
			net.ipv6.conf.all.accept_dad=0 || return 1
	done
	ip link add veth0 netns "$NS_A" type veth peer name veth1 netns "$NS_B" || return 1
	ip -n "$NS_A" addr add 10.77.0.1/24 dev veth0
	ip -n "$NS_B" addr add 10.77.0.2/24 dev veth1
	ip -n "$NS_A" addr add "$IP6_A/64" dev veth0 nodad || return 1
	ip -n "$NS_B" addr add "$IP6_B/64" dev veth1 nodad || return 1
	ip -n "$NS_A" link set veth0 up
	ip -n "$NS_B" link set veth1 up
	ip -n "$NS_A" link set lo up
	ip -n "$NS_B" link set lo up
}

# gids6_ready DEV NS NETDEV ADDR: DEV has RoCE v2 GIDs of ADDR and of its
# net device's link-local address.
gids6_ready() {
	local ll
	ll=$(link_local "$2" "$3")
	[ -n "$ll" ] && v6_index "$1" "$4" && v6_index "$1" "$ll"
}

# verbs6_pair PROG NAME GID_A GID_B [ARGS...]: PROG as server in A with -g
# GID_A and as client in B with -g GID_B, the out-of-band exchange over
# IPv4 as usual; one point.
verbs6_pair() {
	local prog=$1 name=$2 ga=$3 gb=$4 crc src spid port
	shift 4
	PINGPONG_PORT=$((PINGPONG_PORT + 1))
	port=$PINGPONG_PORT
	ip netns exec "$NS_A" timeout 120 "$env" "$prog" -d "$RDMA_A" -g "$ga" -p "$port" "$@" \
		>"$logs/server" 2>&1 &
	spid=$!
	wait_for 10 listening "$NS_A" "$port"
	ip netns exec "$NS_B" timeout 120 "$env" "$prog" -d "$RDMA_B" -g "$gb" -p "$port" "$@" \
		10.77.0.1 >"$logs/client" 2>&1
	crc=$?
	[ "$crc" -eq 0 ] || kill "$spid" 2>/dev/null
	wait "$spid"
	src=$?
	pair_verdict "$name" "$crc" "$src" "$logs"
}

type_points() {
	local t=$1 ga gb lla llb gidx
	if ! wait_for 20 gids6_ready "$RDMA_A" "$NS_A" veth0 "$IP6_A" ||
		! wait_for 20 gids6_ready "$RDMA_B" "$NS_B" veth1 "$IP6_B"; then
		ktap_fail "$t: RoCE v2 GIDs of the IPv6 addresses, global and link-local"
		for _ in $(seq 3 "$points"); do ktap_skip "$t: IPv6 point" "no IPv6 GIDs"; done
		return
	fi
	lla=$(link_local "$NS_A" veth0)
	llb=$(link_local "$NS_B" veth1)
	ga=$(v6_index "$RDMA_A" "$IP6_A")
	gb=$(v6_index "$RDMA_B" "$IP6_B")
	ktap_ok "$t: RoCE v2 GIDs of the IPv6 addresses, global ($ga, $gb) and link-local ($lla: $(v6_index "$RDMA_A" "$lla"))"
	read -r gidx <"/sys/class/infiniband/$RDMA_A/ports/1/gids/0"
	check "$t: GID index 0 is the link-local one ($gidx)" [ "$gidx" = "$(gid6 "$lla")" ]
	verbs6_pair ibv_rc_pingpong "$t: ibv_rc_pingpong over the global IPv6 GIDs" "$ga" "$gb" -n 200
	verbs6_pair ibv_rc_pingpong "$t: ibv_rc_pingpong over GID index 0 (link-local) on both ends" 0 0 -n 200
	# Both ends on A: the datagrams go to A's own address, through lo,
	# which keeps no tunnel statistics (the kernel warned once when handed
	# it for them).
	kmsg_mark
	local spid crc src
	PINGPONG_PORT=$((PINGPONG_PORT + 1))
	ip netns exec "$NS_A" timeout 120 "$env" ibv_rc_pingpong -d "$RDMA_A" -g "$ga" \
		-p "$PINGPONG_PORT" -n 100 >"$logs/server" 2>&1 &
	spid=$!
	wait_for 10 listening "$NS_A" "$PINGPONG_PORT"
	ip netns exec "$NS_A" timeout 120 "$env" ibv_rc_pingpong -d "$RDMA_A" -g "$ga" \
		-p "$PINGPONG_PORT" -n 100 127.0.0.1 >"$logs/client" 2>&1
	crc=$?
	[ "$crc" -eq 0 ] || kill "$spid" 2>/dev/null
	wait "$spid"
	src=$?
	if kmsg_since | grep -E "WARNING|iptunnel_xmit_stats|BUG" >"$logs/warn"; then
		ktap_info "kernel log: $(head -n 2 "$logs/warn" | tr '\n' ' ')"
		crc=1
	fi
	pair_verdict "$t: ibv_rc_pingpong to this host's own IPv6 address (through lo), no warning" \
		"$crc" "$src" "$logs"
	# The connections are to IPv6 hosts: B's telemetry names A by both
	# addresses (a connection per peer address, kept while the device lives).
	local tel=/sys/kernel/debug/metaroce/$RDMA_B
	if [ "$t" != metaroce ]; then
		ktap_skip "$t: the telemetry names the IPv6 peers" "MetaRoCE's telemetry"
	elif [ ! -r "$tel" ]; then
		ktap_skip "$t: the telemetry names the IPv6 peers" "no debugfs"
	else
		check "$t: the telemetry names the IPv6 peers ($IP6_A, $lla)" \
			eval "grep -q '^peer $IP6_A state up ' $tel && grep -q '^peer $lla state up ' $tel"
	fi
	verbs6_pair ibv_ud_pingpong "$t: ibv_ud_pingpong over the global IPv6 GIDs" "$ga" "$gb" -n 200 -s 512
	cm_pair "$t: rping over IPv6, 100 pings of 4 KiB, verified" \
		"rping -s -a $IP6_A -p @PORT@ -C 100 -S 4096 -V" "rping -c -a $IP6_A -p @PORT@ -C 100 -S 4096 -V"
	cm_pair "$t: udaddy over IPv6, 2 UD QPs, 100 messages" \
		"udaddy -b $IP6_A -c 2 -C 100 -S 512" "udaddy -s $IP6_A -c 2 -C 100 -S 512"
	# An address that goes takes its GID; a new one brings its own.
	ip -n "$NS_A" addr del "$IP6_A/64" dev veth0
	ip -n "$NS_A" addr add "$IP6_NEW/64" dev veth0 nodad
	if wait_for 20 eval "! v6_index $RDMA_A $IP6_A" && wait_for 20 v6_index "$RDMA_A" "$IP6_NEW"; then
		ktap_ok "$t: the GIDs follow the addresses ($IP6_A gone, $IP6_NEW at $(v6_index "$RDMA_A" "$IP6_NEW"))"
	else
		ktap_fail "$t: the GIDs follow the addresses ($IP6_A gone, $IP6_NEW added)"
	fi
	verbs6_pair ibv_rc_pingpong "$t: ibv_rc_pingpong over the new address's GID" \
		"$(v6_index "$RDMA_A" "$IP6_NEW" || echo none)" "$gb" -n 100
}

# each_type brings the IPv4 pair up; this test needs its own.
netns_pair_up() {
	pair6_up
}

ktap_plan $(($(fabric_types) * points))
each_type "$points" type_points
ktap_finish
