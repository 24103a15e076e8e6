#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Unmodified verbs programs over MetaRoCE between two namespaces joined by a
# veth pair: ibv_devinfo sees both devices through the project's provider,
# ibv_rc_pingpong passes from 1 byte to 1 MiB, polling and with completion
# events (-e).
#
# Needs the rdma-core build with the MetaRoCE provider (make provider); the
# programs run through scripts/rdma-env.sh. Loads the module from $METAROCE_KO
# unless it is loaded.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh
prefix=$("$top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)
[ -e "$prefix/lib/libibverbs.so.1" ] || skip_all "the rdma-core build is missing (make provider)"
require_tools ip rdma ibv_devinfo ibv_rc_pingpong
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
port=18700

# pingpong NAME ARGS...: one server/client pair as one test point.
pingpong() {
	local name=$1 crc src spid
	shift
	port=$((port + 1))
	ip netns exec "$NS_A" timeout 240 "$env" ibv_rc_pingpong -d "$RDMA_A" \
		-g "$GID_A" -p "$port" "$@" >"$logs/server" 2>&1 &
	spid=$!
	sleep 1
	ip netns exec "$NS_B" timeout 240 "$env" ibv_rc_pingpong -d "$RDMA_B" \
		-g "$GID_B" -p "$port" "$@" "$FABRIC_IP_A" >"$logs/client" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	grep -h "bytes in" "$logs/client" | while read -r l; do ktap_info "client: $l"; done
	if [ "$crc" -eq 0 ] && [ "$src" -eq 0 ]; then
		ktap_ok "$name"
	else
		ktap_info "client rc $crc, server rc $src"
		head -n 15 "$logs/client" | while read -r l; do ktap_info "client: $l"; done
		head -n 15 "$logs/server" | while read -r l; do ktap_info "server: $l"; done
		ktap_fail "$name"
	fi
}

ktap_plan 9

fabric_point metaroce
GID_A=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")
GID_B=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")

ip netns exec "$NS_A" "$env" ibv_devinfo -d "$RDMA_A" >"$logs/devinfo" 2>&1
grep -E "hca_id|transport|state|active_mtu|vendor_id" "$logs/devinfo" | while read -r l; do ktap_info "$l"; done
check "ibv_devinfo shows $RDMA_A through the MetaRoCE provider" \
	grep -q "hca_id:.*$RDMA_A" "$logs/devinfo"
# Verbs programs and test suites read it; rdma_rxe reports the same value.
check "it reports a vendor id (0xffffff: no IEEE OUI, as software devices do)" \
	grep -Eq "vendor_id:[[:space:]]+0xffffff$" "$logs/devinfo"
ip netns exec "$NS_B" "$env" ibv_devices >"$logs/devices" 2>&1
check "ibv_devices lists $RDMA_B" grep -q "$RDMA_B" "$logs/devices"

pingpong "ibv_rc_pingpong 1 byte" -s 1 -n 100
pingpong "ibv_rc_pingpong 4 KiB" -s 4096 -n 500
pingpong "ibv_rc_pingpong 64 KiB" -s 65536 -n 100
pingpong "ibv_rc_pingpong 1 MiB" -s 1048576 -n 5
pingpong "ibv_rc_pingpong 4 KiB with completion events (-e)" -s 4096 -n 200 -e

ktap_finish
