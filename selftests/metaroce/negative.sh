#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Negative verbs semantics between two namespaces: tools/integrity/mr-negative's
# server on the device in A, its client on the device in B. Each of its cases
# (RDMA Write past / straddling the end of an MR, with a wrong rkey, to an MR
# without remote write; RDMA Read from an MR without remote read; a Send with a
# wrong lkey; posting in RESET/INIT; flushing in the error state; a Send longer
# than the receive; dest_qp above 24 bits; deregistering with work
# outstanding; Reads and atomics against max_rd_atomic/max_dest_rd_atomic and
# the device's limits; state transitions verbs does not define; a Send with
# Invalidate of a key the peer may not invalidate) runs on a
# fresh QP pair and is one test point here (`mr-negative -l` lists them).
#
#   NEG_TYPE=rxe|metaroce   the device type (default metaroce)
#   NEG_TIMEOUT=SEC         the tool's completion deadline (default 10)
#   MR_NEGATIVE=PATH        another binary (default tools/integrity/mr-negative)
#
# The tool runs through scripts/rdma-env.sh (the rdma-core 65.0 build, which
# has the MetaRoCE provider) when that prefix exists, else on the system's
# libibverbs (enough for rxe). METAROCE_RDMA_PREFIX may name the prefix. Loads
# rdma_rxe from $RXE_KO or with modprobe, metaroce from $METAROCE_KO.
# Skips when the binary, the prefix (metaroce) or the module is missing.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
type=${NEG_TYPE:-metaroce}
tmo=${NEG_TIMEOUT:-10}
bin=${MR_NEGATIVE:-$top/tools/integrity/mr-negative}

case "$type" in
rxe | metaroce) ;;
*) skip_all "NEG_TYPE must be rxe or metaroce, not '$type'" ;;
esac
[ -x "$bin" ] || skip_all "$bin is not built (make -C tools/integrity)"
require_tools ip rdma

prefix=${METAROCE_RDMA_PREFIX:-$("$top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)}
run=()
if [ -n "$prefix" ] && [ -e "$prefix/lib/libibverbs.so.1" ]; then
	export METAROCE_RDMA_PREFIX="$prefix"
	run=("$top/scripts/rdma-env.sh")
elif [ "$type" = metaroce ]; then
	skip_all "the rdma-core build with the MetaRoCE provider is missing (make provider)"
fi

rdma_type_load "$type" || skip_all "the $type module is not available"

# (no process substitution: the test VM has no /dev/fd)
list=$("$bin" -l) || skip_all "$bin -l failed"
mapfile -t cases <<<"$list"
[ -n "$list" ] || skip_all "$bin -l lists no case"

# Known deviations of rdma_rxe (the reference) from what the tool checks. With
# NEG_TYPE=rxe a failure whose whole reason is one of these is reported as
# "not ok ... # TODO" (not counted as a failure); any other failure fails.
rxe_known() {
	case "$1: $2" in
	"send_wrong_lkey: Send with a wrong lkey: completion status IBV_WC_WR_FLUSH_ERR (vendor_err 0x0), want IBV_WC_LOC_PROT_ERR")
		echo "rdma_rxe completes a WR whose lkey is bad with IBV_WC_WR_FLUSH_ERR (rxe_requester marks it in error, then rxe_qp_error flushes the whole send queue, it included)"
		;;
	"send_longer_than_recv: neither side reported the length error: requester IBV_WC_REM_OP_ERR, receiver IBV_WC_LOC_QP_OP_ERR (want the receiver's IBV_WC_LOC_LEN_ERR or the requester's IBV_WC_REM_INV_REQ_ERR)")
		echo "rdma_rxe's copy_data returns -EINVAL for a message longer than the receive, which takes the malformed-WQE path (IBV_WC_LOC_QP_OP_ERR / IBV_WC_REM_OP_ERR) instead of the length error"
		;;
	*) return 1 ;;
	esac
}

show() {
	local l
	while IFS= read -r l; do ktap_info "$1: $l"; done
}

ktap_plan $((1 + ${#cases[@]}))

logs=$(mktemp -d)
trap 'rdma_fabric_down; rm -rf "$logs"' EXIT

if ! rdma_fabric_up "$type" 2>"$logs/setup"; then
	show setup <"$logs/setup"
	ktap_fail "$type devices on both ends of the veth pair"
	for c in "${cases[@]}"; do
		ktap_skip "negative: ${c#* }" "no fabric"
	done
	ktap_finish
fi
ktap_ok "$type devices on both ends of the veth pair ($RDMA_A, $RDMA_B)"

gargs_a=() gargs_b=()
if g=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A"); then
	gargs_a=(-g "$g")
fi
if g=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B"); then
	gargs_b=(-g "$g")
fi

# The tool bounds its own waits; this outer limit only guards against a hang.
limit=$((${#cases[@]} * (5 * tmo + 10) + 60))
port=18519
t0=$SECONDS
ip netns exec "$NS_A" timeout "$limit" "${run[@]}" "$bin" -d "$RDMA_A" \
	"${gargs_a[@]}" -p "$port" -t "$tmo" >"$logs/server" 2>"$logs/server.err" &
spid=$!
ip netns exec "$NS_B" timeout "$limit" "${run[@]}" "$bin" -d "$RDMA_B" \
	"${gargs_b[@]}" -p "$port" -t "$tmo" "$FABRIC_IP_A" \
	>"$logs/client" 2>"$logs/client.err"
crc=$?
wait "$spid"
src=$?
ktap_info "mr-negative on $type: $((SECONDS - t0)) s, client rc $crc, server rc $src"

for c in "${cases[@]}"; do
	n=${c%% *}
	name=${c#* }
	line=$(grep -E "^(not )?ok $n " "$logs/client" | head -n 1)
	grep -E "^# $n " "$logs/client" | sed "s/^# $n [^ ]*: //" | show "$name"
	case "$line" in
	"ok $n "*)
		ktap_ok "negative: $name"
		;;
	"not ok $n "*)
		why=${line#not ok $n $name: }
		ktap_info "$name: $why"
		if [ "$type" = rxe ] && known=$(rxe_known "$name" "$why"); then
			ktap_todo "negative: $name" "$known"
		else
			ktap_fail "negative: $name"
		fi
		;;
	*)
		ktap_info "$name: no result from the client (rc $crc)"
		ktap_fail "negative: $name"
		;;
	esac
done

# Anything the programs said beyond their results.
if [ "$crc" -ne 0 ] || [ "$src" -ne 0 ]; then
	grep -h "Bail out" "$logs/client" "$logs/server" | show bail
	tail -n 5 "$logs/client.err" | show "client stderr"
	tail -n 5 "$logs/server.err" | show "server stderr"
fi
# The kernel's view, when something failed.
if [ "$__ktap_failed" -gt 0 ]; then
	dmesg 2>/dev/null | tail -n 15 | show dmesg
fi

ktap_finish
