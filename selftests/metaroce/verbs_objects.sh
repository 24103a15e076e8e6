#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Verbs objects a local user creates and changes, on one device (QPs
# connected over its own GID), through the public libibverbs API:
# - tools/integrity/rereg-check: registering a memory region again
#   (ibv_rereg_mr). Its new rights, PD and translation govern the very next
#   Write or Read (refused bytes never land), and pages pinned only for
#   reading are never given a right that writes.
# - tools/integrity/limits-check: no more PDs, CQs and SRQs than
#   ibv_query_device reports, with ENOMEM at the edge and the room of a
#   destroyed one given back.
# - tools/integrity/udata-check: raw uverbs commands (ALLOC_PD, CREATE_CQ,
#   RESIZE_CQ, REG_MR) carrying driver data that MetaRoCE's ABI does not
#   define are refused with EINVAL; without it they succeed.
# The same runs on rdma_rxe in the same boot, for comparison. rdma-core's rxe
# provider has no rereg_mr (its kernel driver changes PD and rights only), so
# a rereg-check check that fails on rxe with EOPNOTSUPP is reported as TODO;
# rxe's maxima are above what limits-check creates (SKIP). Any other rxe
# failure fails. rdma_rxe ignores driver data in ALLOC_PD and REG_MR and
# wants room for a response in CREATE_CQ: udata-check's failures that say
# so are TODO on rxe (rxe_udata below), any other fails.
#
# Needs the rdma-core build with the MetaRoCE provider (make provider) and
# the tools (make -C tools/integrity); REREG_CHECK, LIMITS_CHECK and
# UDATA_CHECK name other binaries.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
rereg=${REREG_CHECK:-$top/tools/integrity/rereg-check}
limits=${LIMITS_CHECK:-$top/tools/integrity/limits-check}
udata=${UDATA_CHECK:-$top/tools/integrity/udata-check}
verbs_tools_needs "$rereg" "$limits" "$udata"
require_tools ip rdma ss
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT
# (No process substitution: the test VM has no /dev/fd.)
names=($("$rereg" -l) $("$limits" -l) $("$udata" -l))
per_type=$((1 + ${#names[@]}))

# What rdma_rxe does otherwise: rdma-core's rxe provider has no rereg_mr, so
# libibverbs answers every ibv_rereg_mr with EOPNOTSUPP.
rxe_rereg="^[a-z_]+: ibv_rereg_mr [^:]*: Operation not supported(, want .*)?$"

# What rdma_rxe does with driver data (rxe_verbs.c, 7.2): ALLOC_PD and REG_MR
# ignore it, and CREATE_CQ wants room for its response, so a CQ without
# driver data is refused and there is none to resize.
rxe_udata="^((pd|mr)_driver_data_refused: accepted, want |cq_without_driver_data: Invalid argument, want success$|resize_cq_(driver_data_refused|without_driver_data): no CQ to resize$)"

# type_points TYPE: one point per check of each tool.
type_points() {
	check_tool_points "$1" "$rereg" "$logs" "$rxe_rereg"
	# limits-check creates every PD, CQ and SRQ a device allows: 8,191
	# CQs, each with a ring to allocate and map, took 65 s in a parallel
	# lane of the debug kernel (2026-12-06; about 8 ms a CQ, against the
	# 2.6 ms quota.rs measured without rings), so it gets more than the
	# default 120 s.
	check_tool_points "$1" "$limits" "$logs" "" 420
	check_tool_points "$1" "$udata" "$logs" "$rxe_udata"
}

ktap_plan $(($(fabric_types) * per_type))
each_type "$per_type" type_points
ktap_finish
