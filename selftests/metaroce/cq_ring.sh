#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Completion rings shared with user space (uapi/rdma/metaroce-abi.h,
# Documentation/abi.md), on MetaRoCE devices only (rdma_rxe has rings of its
# own ABI):
# - tools/integrity/cq-ring-check: the CREATE_CQ request is validated (unknown
#   flags, reserved bits, short or dirty driver data, no room for the
#   response: EINVAL); the ring maps only as created (MAP_SHARED, its exact
#   size and offset, never executable, never grown, not after destroy);
#   completions, data and immediates arrive through it; a process that
#   corrupts its ring's consumer index overruns its own CQ (IBV_EVENT_CQ_ERR)
#   and nothing else, and cannot resize it; a healthy ring holds exactly the
#   CQ's size; a resize keeps the unread completions; a destroyed QP's
#   completions leave the ring it shared with another QP.
# - ibv_rc_pingpong over the rings, polling and with completion events (-e),
#   and with the provider told not to use them (METAROCE_NO_RINGS=1: POLL_CQ).
#
# Needs the rdma-core build with the MetaRoCE provider (make provider) and
# tools/integrity/cq-ring-check (make -C tools/integrity); CQ_RING_CHECK
# names another binary.
#
# Rings are required: cq-ring-check runs with CQ_RING_REQUIRED=1 (its -r),
# so a context that offers no CQ ring (an older module, or cq_ring=0) fails
# each of its points. CQ_RING_OPTIONAL=1 lets them SKIP instead.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
ringcheck=${CQ_RING_CHECK:-$top/tools/integrity/cq-ring-check}
# cq-ring-check's -r, through the environment: check_tool_points passes
# only -d and -g.
if [ "${CQ_RING_OPTIONAL:-0}" = 1 ]; then
	unset CQ_RING_REQUIRED
else
	export CQ_RING_REQUIRED=1
fi
verbs_tools_needs "$ringcheck"
require_tools ip rdma ss ibv_rc_pingpong
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
names=($("$ringcheck" -l))

ktap_plan $((1 + ${#names[@]} + 3))
fabric_point metaroce
check_tool_points metaroce "$ringcheck" "$logs"
# 600 iterations: each side's 501-entry CQ (ibv_rc_pingpong's 500 receives
# and one more; its shared ring has 512 slots) takes 1200 completions, so
# its ring wraps twice. (With 2000 the three runs took 111 of this test's
# 148 s in the debug guest.)
pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong over CQ rings" "$logs" -n 600
pingpong_pair ibv_rc_pingpong "ibv_rc_pingpong -e (completion events) over CQ rings" \
	"$logs" -n 600 -e
METAROCE_NO_RINGS=1 pingpong_pair ibv_rc_pingpong \
	"ibv_rc_pingpong with METAROCE_NO_RINGS=1 (POLL_CQ)" "$logs" -n 600
ktap_finish
