#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Shared receive queues: tools/integrity/srq-check (one device, QPs connected
# over its own GID: two QPs sharing one SRQ's receives with every byte
# checked, the limit event, a full SRQ, resizing, the SRQ's PD governing its
# receive buffers, an SRQ in use that cannot be destroyed), then the
# unmodified ibv_srq_pingpong (16 QPs on one SRQ) between two namespaces,
# polling and with completion events. The same runs on rdma_rxe in the same
# boot, for comparison: the two srq-check checks it is known to fail are
# reported as TODO with its reason, anything else it fails fails.
#
# Needs the rdma-core build with the MetaRoCE provider (make provider) and
# the tool (make -C tools/integrity); SRQ_CHECK names another binary.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
bin=${SRQ_CHECK:-$top/tools/integrity/srq-check}
verbs_tools_needs "$bin"
require_tools ip rdma ss ibv_srq_pingpong
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
# (No process substitution: the test VM has no /dev/fd.)
names=($("$bin" -l))
pingpongs=2
# What rdma_rxe does otherwise (rdma-core 65.0, Linux 7.2): it checks an
# SRQ's receive buffers against the QP's PD, and a Send to a destroyed QP got
# no completion within 40 s.
rxe_differs="^(srq_pd_governs_receive_buffers|send_to_destroyed_qp_times_out):"
per_type=$((2 + ${#names[@]} + pingpongs))

# refused_no_qp: $RDMA_A's count of messages refused for a QP that is gone.
no_qp() {
	ip netns exec "$NS_A" rdma statistic show link "$RDMA_A/1" |
		tr ' ' '\n' | grep -A1 -x refused_no_qp | tail -n 1
}

# srq_checks TYPE: one test point per srq-check check, on $RDMA_A.
srq_checks() {
	local type=$1 before after
	before=$(no_qp)
	check_tool_points "$type" "$bin" "$logs" "$rxe_differs"
	if [ "$type" = metaroce ]; then
		after=$(no_qp)
		ktap_info "refused_no_qp: ${before:-?} before, ${after:-?} after"
		check "$type: the Send to the destroyed QP counts as refused_no_qp" \
			test "${after:-0}" -gt "${before:-0}"
	else
		ktap_skip "$type: the Send to the destroyed QP counts as refused_no_qp" \
			"a MetaRoCE counter"
	fi
}

# type_points TYPE: the checks and the ping-pongs on TYPE.
type_points() {
	local type=$1
	srq_checks "$type"
	pingpong_pair ibv_srq_pingpong "$type: ibv_srq_pingpong, 16 QPs, 4 KiB" \
		"$logs" -q 16 -s 4096 -n 500
	pingpong_pair ibv_srq_pingpong "$type: ibv_srq_pingpong, 8 QPs, 64 KiB, events (-e)" \
		"$logs" -q 8 -s 65536 -n 50 -e
}

ktap_plan $(($(fabric_types) * per_type))
each_type "$per_type" type_points
ktap_finish
