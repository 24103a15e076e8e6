#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A peer connection caches the route of each of its paths (RouteCache,
# rust/abstractions/net.rs; Documentation/verbs.md); a change of the routing
# tables must reach the next packet of every path. Hosts A and B are joined
# by two veth pairs: the fabric's veth0/veth1 (10.77.0.0/24, the devices' net
# devices) and vethr0/vethr1 (10.79.0.0/24). While mr-integrity moves data
# from B to A, each host gets a /32 route to the other's fabric address over
# the second pair (the fabric address stays the source), and then the first
# pair drops everything (netem loss 100% on both ends):
#   - the transfer completes with verified data;
#   - the first pair's netem drops (almost) nothing: every path took the new
#     route with its next packet. A sender still using a route it cached
#     before the change sends into the loss until the path moves to a new
#     source port (which routes afresh), so that it too would complete;
#     this point is what tells the two apart;
#   - the second pair carries the rest.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

metaroce_integrity_needs ip tc sysctl
ktap_plan 4
trap 'rdma_fabric_down' EXIT
fabric_point metaroce

# tx_bytes NS DEV
tx_bytes() {
	ip netns exec "$1" cat "/sys/class/net/$2/statistics/tx_bytes"
}
# netem_dropped NS DEV: packets the root qdisc of DEV dropped
netem_dropped() {
	tc -s -n "$1" qdisc show dev "$2" | awk '/dropped/ {
		for (i = 1; i < NF; i++) if ($i == "dropped") { gsub(",", "", $(i + 1)); print $(i + 1); exit }
	}'
}

second_pair() {
	ip link add vethr0 netns "$NS_A" type veth peer name vethr1 netns "$NS_B" || return 1
	ip -n "$NS_A" addr add 10.79.0.1/24 dev vethr0 &&
		ip -n "$NS_B" addr add 10.79.0.2/24 dev vethr1 &&
		ip -n "$NS_A" link set vethr0 up &&
		ip -n "$NS_B" link set vethr1 up || return 1
	# A host's fabric address now arrives by either pair.
	local ns
	for ns in "$NS_A" "$NS_B"; do
		ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
			net.ipv4.conf.default.rp_filter=0 || return 1
	done
}
if ! second_pair; then
	for p in "the transfer completes with verified data across the route change" \
		"the first pair drops nothing after the change (at most 8 packets)" \
		"the second pair carries the rest (over 1 MB)"; do
		ktap_skip "$p" "the second veth pair could not be set up"
	done
	ktap_finish
fi

dir=$(mktemp -d)
ip netns exec "$NS_A" timeout 280 "$MR_INTEGRITY" -d "$RDMA_A" -p 18810 \
	-n 8 -q 2 -s 1M -t 60 >"$dir/server" 2>&1 &
spid=$!
sleep 1
ip netns exec "$NS_B" timeout 280 "$MR_INTEGRITY" -d "$RDMA_B" -p 18810 \
	-n 8 -q 2 -s 1M -t 60 "$FABRIC_IP_A" >"$dir/client" 2>&1 &
cpid=$!
# B's veth1 carries the data; A's veth0 the ACKs (veth0_moving counts A).
b_moving() {
	local a
	a=$(tx_bytes "$NS_B" veth1)
	sleep 1
	[ "$(tx_bytes "$NS_B" veth1)" -gt $((a + 100000)) ]
}
wait_for 60 b_moving || ktap_info "the transfer never reached 100 KB/s on veth1"
r0=$(tx_bytes "$NS_B" vethr1)
ip -n "$NS_A" route add "$FABRIC_IP_B/32" dev vethr0 src "$FABRIC_IP_A"
ip -n "$NS_B" route add "$FABRIC_IP_A/32" dev vethr1 src "$FABRIC_IP_B"
netem_both loss 100%
t0=$SECONDS
wait "$cpid"
crc=$?
wait "$spid"
src=$?
da=$(netem_dropped "$NS_A" veth0)
db=$(netem_dropped "$NS_B" veth1)
rest=$(($(tx_bytes "$NS_B" vethr1) - r0))
ktap_info "the routes changed; the transfer ended $((SECONDS - t0)) s later, client rc $crc, server rc $src"
ktap_info "the first pair's netem dropped $da packets at A and $db at B; B sent $rest bytes on the second"
grep -h "PASS\|FAIL" "$dir/client" | while IFS= read -r l; do ktap_info "client: $l"; done
check "the transfer completes with verified data across the route change" \
	eval '[ $crc = 0 ] && [ $src = 0 ] && grep -q "^mr-integrity: PASS" "$dir/client"'
# A few packets may be on their way in the instant between the route and
# the qdisc changes; a stale route costs a path's whole window, every path.
check "the first pair drops nothing after the change (at most 8 packets)" \
	eval '[ -n "$da" ] && [ -n "$db" ] && [ $((da + db)) -le 8 ]'
check "the second pair carries the rest (over 1 MB)" test "$rest" -gt 1000000
rm -rf "$dir"
ktap_finish
