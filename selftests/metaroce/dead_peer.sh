#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A peer that stops answering fails the queue pairs waiting on it, as verbs
# say ("transport retry counter exceeded"), instead of leaving them hanging:
# ibv_rc_pingpong runs between the namespaces, then netem drops everything on
# both ends of the veth pair. A program with a Send outstanding must end with
# the retry-exceeded status within the QP's patience (ibv_rc_pingpong:
# timeout 14, retry_cnt 7, i.e. 0.5 s, which the module raises to at least
# 10 s) plus the time to notice. (One that only waits for a receive waits, as
# on any RC transport: nothing of its own is unanswered.) The kernel log must
# say which peer went silent.
#
# First the other side of it: a slow peer is not a silent one. ib_read_bw
# with 8 QPs, each with 16 Reads of 16 KiB outstanding, answered through a
# 1 Mbit/s link: 2 MiB of answers, which the peer sends in the order the
# requests reached it, so the last QPs' answers start well over 10 s after
# their requests were delivered: past the 10 s a QP allows a delivered Read
# that gets no answer (before that rule waited, the client failed with
# status 12 after 17 s). It must complete: while the peer answers requests
# that may have reached it before a QP's, that QP's clock waits. (The ACKs
# of 128 requests sent at once do not tell their order of arrival: a rule
# that took the order of their ACKs for it failed here now and then.)

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
. "$top/scripts/rdma-env.sh"
[ -n "${METAROCE_RDMA_PREFIX:-}" ] || skip_all "the rdma-core build is missing (make provider)"
require_tools ip rdma tc ss ibv_rc_pingpong dmesg stdbuf timeout
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

ktap_plan 5
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rdma_fabric_down; rm -rf "$dir"' EXIT

fabric_point metaroce
kmsg_mark

gid_a=$(fabric_gid_index "$RDMA_A" "$FABRIC_IP_A")
gid_b=$(fabric_gid_index "$RDMA_B" "$FABRIC_IP_B")

# A slow peer: A answers B's Reads through 1 Mbit/s, a queue that holds
# them all (no loss; its seconds of delay do make spurious probes and path
# moves, which the transport must ride out too).
slow="a slow peer is not a silent one: ib_read_bw, 8 QPs x 16 Reads of 16 KiB outstanding, answered at 1 Mbit/s"
if command -v ib_read_bw >/dev/null 2>&1; then
	tc -n "$NS_A" qdisc replace dev veth0 root tbf rate 1mbit burst 16kb limit 8mb
	read_args=(-F -q 8 -s 16384 -n 16 -o 16)
	ip netns exec "$NS_A" timeout 120 stdbuf -oL ib_read_bw -d "$RDMA_A" -x "$gid_a" \
		-p 18951 "${read_args[@]}" >"$dir/rs" 2>&1 &
	rpid=$!
	pids+=("$rpid")
	wait_for 30 listening "$NS_A" 18951
	t0=$SECONDS
	ip netns exec "$NS_B" timeout 120 stdbuf -oL ib_read_bw -d "$RDMA_B" -x "$gid_b" \
		-p 18951 "${read_args[@]}" "$FABRIC_IP_A" >"$dir/rc" 2>&1
	crc=$?
	wait "$rpid"
	src=$?
	pids=()
	ktap_info "ib_read_bw: client rc $crc, server rc $src, $((SECONDS - t0)) s"
	grep -Hi "fail\|status\|error" "$dir/rc" "$dir/rs" | head -n 4 |
		while IFS= read -r l; do ktap_info "${l#"$dir/"}"; done
	check "$slow" test "$crc" = 0 -a "$src" = 0
	tc -n "$NS_A" qdisc del dev veth0 root 2>/dev/null
else
	ktap_skip "$slow" "perftest is not installed"
fi
ip netns exec "$NS_A" ibv_rc_pingpong -d "$RDMA_A" -g "$gid_a" -p 18950 \
	-s 4096 -n 100000000 >"$dir/a" 2>&1 &
pids+=($!)
# The client connects once, so only when the server listens.
wait_for 30 listening "$NS_A" 18950
ip netns exec "$NS_B" ibv_rc_pingpong -d "$RDMA_B" -g "$gid_b" -p 18950 \
	-s 4096 -n 100000000 "$FABRIC_IP_A" >"$dir/b" 2>&1 &
pids+=($!)

wait_for 30 veth0_moving 4096
check "ibv_rc_pingpong runs between the namespaces" veth0_moving 4096

netem_both loss 100%
t0=$SECONDS
ended() {
	! kill -0 "${pids[0]}" 2>/dev/null || ! kill -0 "${pids[1]}" 2>/dev/null
}
if wait_for 60 ended; then
	ktap_info "one ended $((SECONDS - t0)) s after the peer went silent"
	sleep 1
	grep -Hi "fail\|status" "$dir/a" "$dir/b" | while IFS= read -r l; do ktap_info "${l#"$dir/"}"; done
	check "a QP with a Send outstanding failed with retry exceeded" \
		grep -q "retry counter exceeded" "$dir/a" "$dir/b"
else
	ktap_fail "a QP with a Send outstanding failed with retry exceeded (both still running after 60 s)"
fi
kill "${pids[@]}" 2>/dev/null
wait "${pids[@]}" 2>/dev/null
pids=()
# Each side whose QP failed names its peer; the other may only have waited
# for a receive when the link went (its last Send already acknowledged),
# and then it says nothing (in most runs both sides had a Send outstanding;
# in one only B did).
named() { # named SIDE_OUTPUT DEV PEER_IP
	! grep -q "retry counter exceeded" "$1" ||
		kmsg_since | grep -q ": $2: peer $3 silent for"
}
check "the kernel log names the silent peer" \
	eval "kmsg_since | grep -Eq ': ($RDMA_A|$RDMA_B): peer .* silent for' &&
		named '$dir/a' '$RDMA_A' '$FABRIC_IP_B' && named '$dir/b' '$RDMA_B' '$FABRIC_IP_A'"
ktap_finish
