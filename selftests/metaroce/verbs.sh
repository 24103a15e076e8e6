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
require_tools ip rdma ss ibv_devinfo ibv_rc_pingpong
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT

ktap_plan 9

fabric_point metaroce

ip netns exec "$NS_A" "$env" ibv_devinfo -d "$RDMA_A" >"$logs/devinfo" 2>&1
grep -E "hca_id|transport|state|active_mtu|vendor_id" "$logs/devinfo" | while read -r l; do ktap_info "$l"; done
check "ibv_devinfo shows $RDMA_A through the MetaRoCE provider" \
	grep -Eqw "hca_id:[[:space:]]+$RDMA_A" "$logs/devinfo"
# Verbs programs and test suites read it; rdma_rxe reports the same value.
check "it reports a vendor id (0xffffff: no IEEE OUI, as software devices do)" \
	grep -Eq "vendor_id:[[:space:]]+0xffffff$" "$logs/devinfo"
ip netns exec "$NS_B" "$env" ibv_devices >"$logs/devices" 2>&1
check "ibv_devices lists $RDMA_B" grep -qw "$RDMA_B" "$logs/devices"

pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong 1 byte" "$logs" -s 1 -n 100
pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong 4 KiB" "$logs" -s 4096 -n 500
pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong 64 KiB" "$logs" -s 65536 -n 100
pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong 1 MiB" "$logs" -s 1048576 -n 5
pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong 4 KiB with completion events (-e)" "$logs" -s 4096 -n 200 -e

ktap_finish
