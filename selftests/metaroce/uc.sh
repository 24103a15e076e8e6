#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# UC queue pairs, through the public libibverbs API: ibv_uc_pingpong,
# unmodified, between two namespaces, with the received buffer checked
# (--chk), one packet and many packets per message, polling and with
# completion events. The same runs on rdma_rxe in the same boot, for
# comparison. (The refusal of a Read or atomic posted on a UC QP is
# mr-negative's case uc_read_refused; perftest.sh runs ib_write_bw and
# ib_send_bw -c UC.)
#
# Needs the rdma-core build with the MetaRoCE provider (make provider).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

require_tools ip rdma ss ibv_uc_pingpong
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
per_type=4

type_points() {
	pingpong_pair ibv_uc_pingpong "$1: ibv_uc_pingpong 64 bytes, checked" "$logs" -s 64 -n 500 -c
	pingpong_pair ibv_uc_pingpong "$1: ibv_uc_pingpong 64 KiB (many packets), checked" "$logs" -s 65536 -n 200 -c
	pingpong_pair ibv_uc_pingpong "$1: ibv_uc_pingpong 4 KiB with completion events (-e), checked" "$logs" -s 4096 -n 200 -e -c
}

ktap_plan $(($(fabric_types) * per_type))
each_type "$per_type" type_points
ktap_finish
