#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The driver's attributes in `rdma resource show qp|cq|mr -dd`: while
# ibv_rc_pingpong runs between the two namespaces, the server's QP on the
# device in A shows its peer host, the connection id it receives on, the
# stream ids its requests leave and arrive on (twice the peer's and its own
# QP number), and its queues; its CQ (polled, never armed) shows what it
# holds and that it never overflowed; its MR names its PD and the local-write
# right ibv_rc_pingpong registers it with. Skips without the rdma-core build.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
env=$top/scripts/rdma-env.sh
prefix=${METAROCE_RDMA_PREFIX:-$("$top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)}
[ -n "$prefix" ] && [ -e "$prefix/lib/libibverbs.so.1" ] ||
	skip_all "the rdma-core build with the MetaRoCE provider is missing (make provider)"
export METAROCE_RDMA_PREFIX=$prefix
require_tools ip rdma ss
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

ktap_plan 7

logs=$(mktemp -d)
pids=()
trap '[ ${#pids[@]} -gt 0 ] && kill "${pids[@]}" 2>/dev/null; rdma_fabric_down; rm -rf "$logs"' EXIT
fabric_point metaroce
gid_a=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")
gid_b=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")

ip netns exec "$NS_A" timeout 120 "$env" ibv_rc_pingpong -d "$RDMA_A" -g "$gid_a" \
	-p 18800 -n 1000000 >"$logs/server" 2>&1 &
pids+=($!)
# The client connects once, so only when the server listens.
wait_for 30 listening "$NS_A" 18800
ip netns exec "$NS_B" timeout 120 "$env" ibv_rc_pingpong -d "$RDMA_B" -g "$gid_b" \
	-p 18800 -n 1000000 "$FABRIC_IP_A" >"$logs/client" 2>&1 &
pids+=($!)

# qp_line: A's QP of ibv_rc_pingpong once it is connected (has a peer)
qp_line() {
	rdma_in "$NS_A" resource show qp -dd 2>/dev/null |
		grep -w "$RDMA_A" | grep "ibv_rc_pingpong" | grep "drv_peer $FABRIC_IP_B " >"$logs/qp"
}
if wait_for 30 qp_line; then
	ktap_ok "rdma resource show qp -dd shows the QP's peer ($FABRIC_IP_B)"
else
	rdma_in "$NS_A" resource show qp -dd 2>&1 | head -n 5 | while read -r l; do ktap_info "$l"; done
	ktap_fail "rdma resource show qp -dd shows the QP's peer ($FABRIC_IP_B)"
fi
ktap_info "$(cat "$logs/qp")"

# attr NAME: the value after NAME on the QP's line
attr() { tr ' ' '\n' <"$logs/qp" | awk -v n="$1" 'p { print; exit } $0 == n { p = 1 }'; }
# (the rdma tool prints the driver's attributes with a drv_ prefix)
lqpn=$(attr lqpn)
rqpn=$(attr rqpn)
want_send=$(printf '0x%x' $((2 * ${rqpn:-0})))
want_recv=$(printf '0x%x' $((2 * ${lqpn:-0})))
ktap_info "lqpn $lqpn rqpn $rqpn: send_stream $(attr drv_send_stream) (want $want_send), recv_stream $(attr drv_recv_stream) (want $want_recv)"
check "its requests leave on stream 2 x the peer's QP number" \
	test -n "$rqpn" -a "$rqpn" != 0 -a "$(attr drv_send_stream)" = "$want_send"
check "they arrive on stream 2 x its own QP number" \
	test -n "$lqpn" -a "$(attr drv_recv_stream)" = "$want_recv"
check "it names its peer and queues, and not the connection id (any user may read it)" \
	bash -c "[ -z '$(attr drv_conn_id)' ] && [ -n '$(attr drv_peer)' ] && [ -n '$(attr drv_sq_queued)' ] && [ -n '$(attr drv_rq_posted)' ] && [ -n '$(attr drv_reads_out)' ]"

# The server's CQ and MR (the tool's lines name the owning program).
rdma_in "$NS_A" resource show cq -dd 2>&1 | grep -w "$RDMA_A" | grep ibv_rc_pingpong >"$logs/cq"
rdma_in "$NS_A" resource show mr -dd 2>&1 | grep -w "$RDMA_A" | grep ibv_rc_pingpong >"$logs/mr"
ktap_info "$(head -n 1 "$logs/cq")"
ktap_info "$(head -n 1 "$logs/mr")"
check "its CQ (polled) is not armed, never overflowed, and has a ring the process reads" \
	grep -Eq "drv_queued [0-9]+ drv_armed no drv_overflowed 0 drv_shared_ring 1" "$logs/cq"
check "its MR names its PD and the local-write right it was registered with" \
	grep -Eq "drv_pd [1-9][0-9]* drv_access 0x1( |$)" "$logs/mr"

kill "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
pids=()
ktap_finish
