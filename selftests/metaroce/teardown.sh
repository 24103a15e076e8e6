#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Tearing MetaRoCE down under traffic: `rdma link delete`, the removal of the
# net device and `rmmod` while ibv_rc_pingpong moves data between two
# namespaces. The device goes away once its users close it, the module
# refuses to unload while a process holds a device open and unloads after,
# and nothing is left behind (the kernel log and kmemleak are checked by the
# runner after every test).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/rdma-env.sh"
[ -n "${METAROCE_RDMA_PREFIX:-}" ] || skip_all "the rdma-core build is missing (make provider)"
require_tools ip rdma ss ibv_rc_pingpong rmmod insmod
[ -n "$METAROCE_KO" ] && [ -f "$METAROCE_KO" ] ||
	skip_all "set METAROCE_KO to the module's path to run this test"
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

port=18800
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rdma_fabric_down;
	[ -d /sys/module/metaroce ] || insmod "$METAROCE_KO"' EXIT

# traffic: a long ibv_rc_pingpong between the namespaces, in the background.
traffic() {
	local gid_a gid_b
	port=$((port + 1))
	gid_a=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")
	gid_b=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")
	ip netns exec "$NS_A" ibv_rc_pingpong -d "$RDMA_A" -g "$gid_a" -p "$port" \
		-s 65536 -n 1000000 >/dev/null 2>&1 &
	pids+=($!)
	# The client connects once, so only when the server listens.
	wait_for 30 listening "$NS_A" "$port"
	ip netns exec "$NS_B" ibv_rc_pingpong -d "$RDMA_B" -g "$gid_b" -p "$port" \
		-s 65536 -n 1000000 "$FABRIC_IP_A" >/dev/null 2>&1 &
	pids+=($!)
	sleep 3
}

# moving: whether packets flow on veth0 now (its byte counter grows).
moving() {
	veth0_moving 65536
}

stop_traffic() {
	kill "${pids[@]}" 2>/dev/null
	wait "${pids[@]}" 2>/dev/null
	pids=()
}

ktap_plan 10

rdma_fabric_up metaroce || { ktap_info "no fabric"; exit $KSFT_FAIL; }
traffic
check "traffic flows between the namespaces" moving

# rdma link delete waits for the device's users to close it: start it, then
# end the programs, and it must complete.
rdma_in "$NS_A" link delete "$RDMA_A" &
del=$!
sleep 2
stop_traffic
check "rdma link delete under traffic completes once the programs end" \
	eval "timeout 60 tail --pid=$del -f /dev/null"
check "the device is gone" ibdev_gone "$RDMA_A"
rdma_fabric_down

# Removing the net device under traffic: the device goes with it.
rdma_fabric_up metaroce || { ktap_info "no fabric"; exit $KSFT_FAIL; }
traffic
ip -n "$NS_A" link delete veth0 &
del=$!
sleep 2
stop_traffic
check "deleting the net device under traffic removes the device" \
	eval "timeout 60 tail --pid=$del -f /dev/null && wait_for 20 ibdev_gone $RDMA_A"
rdma_fabric_down

rdma_fabric_up metaroce || { ktap_info "no fabric"; exit $KSFT_FAIL; }
traffic
check "rmmod is refused while programs hold devices open" eval '! rmmod metaroce 2>/dev/null'
check "traffic still flows after the refused rmmod" moving
stop_traffic
check "rmmod succeeds once they end (devices present)" rmmod metaroce
check "both devices are gone" eval 'ibdev_gone "$RDMA_A" && ibdev_gone "$RDMA_B"'
netns_pair_down
RDMA_A= RDMA_B=
check "insmod loads it again, with one path per connection (paths=1)" \
	insmod "$METAROCE_KO" paths=1

# A connection on a single path (one UDP source port) carries traffic too.
rdma_fabric_up metaroce || { ktap_info "no fabric"; exit $KSFT_FAIL; }
port=$((port + 1))
gid_a=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")
gid_b=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")
ip netns exec "$NS_A" timeout 120 ibv_rc_pingpong -d "$RDMA_A" -g "$gid_a" -p "$port" \
	-s 4096 -n 50 >/dev/null 2>&1 &
spid=$!
wait_for 30 listening "$NS_A" "$port"
check "ibv_rc_pingpong passes with paths=1" eval 'ip netns exec "$NS_B" timeout 120 \
	ibv_rc_pingpong -d "$RDMA_B" -g "$gid_b" -p "$port" -s 4096 -n 50 "$FABRIC_IP_A" >/dev/null 2>&1'
wait "$spid"
rdma_fabric_down
RDMA_A= RDMA_B=
rmmod metaroce && insmod "$METAROCE_KO"

ktap_finish
