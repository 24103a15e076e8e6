#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A peer connection caches the route of each of its flows (RouteCache,
# rust/abstractions/net.rs; Documentation/verbs.md); a change of the routing
# tables must reach the next packet of every flow. Hosts A and B are joined
# by two veth pairs: the fabric's veth0/veth1 (10.77.0.0/24, the devices' net
# devices) and vethr0/vethr1 (10.79.0.0/24). While mr-integrity moves data
# both ways, each host gets a /32 route to the other's fabric address over
# the second pair (the fabric address stays the source), and then the first
# pair drops everything (netem loss 100% on both ends):
#   - the transfer completes with verified data;
#   - the first pair's netem drops (almost) nothing: every flow took the new
#     route with its next packet. A sender still using a route it cached
#     before the change sends into the loss until the path moves to a new
#     source port (which routes afresh), so that it too would complete;
#     this point is what tells the two apart;
#   - the second pair carries the rest.
# IPv6 is off on the first pair, so that its neighbour discovery and router
# solicitations do not count among the drops.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

metaroce_integrity_needs ip tc sysctl
ktap_plan 4
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rdma_fabric_down; rm -rf "$dir"' EXIT
fabric_point metaroce

completes="the transfer completes with verified data across the route change"
no_drops="the first pair drops nothing after the change (at most 8 packets)"
rest_want=1000000
carries="the second pair carries the rest (over $rest_want bytes)"
skip_rest() { # WHY: the three points that need the route change, skipped
	local p
	for p in "$completes" "$no_drops" "$carries"; do ktap_skip "$p" "$1"; done
	ktap_finish
}

# netem_dropped NS DEV: packets the root qdisc of DEV dropped ("Sent N bytes
# M pkt (dropped D, overlimits ...")
netem_dropped() {
	tc -s -n "$1" qdisc show dev "$2" | grep -o 'dropped [0-9]*' | head -n1 | cut -d' ' -f2
}

second_pair() {
	local ns
	for ns in "$NS_A" "$NS_B"; do
		# A host's fabric address now arrives by either pair: no reverse
		# path filter on the devices created from here on ("all" as well:
		# the kernel takes the higher of the two).
		ip netns exec "$ns" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
			net.ipv4.conf.default.rp_filter=0 || return 1
	done
	ip netns exec "$NS_A" sysctl -qw net.ipv6.conf.veth0.disable_ipv6=1 &&
		ip netns exec "$NS_B" sysctl -qw net.ipv6.conf.veth1.disable_ipv6=1 || return 1
	ip link add vethr0 netns "$NS_A" type veth peer name vethr1 netns "$NS_B" || return 1
	ip -n "$NS_A" addr add 10.79.0.1/24 dev vethr0 &&
		ip -n "$NS_B" addr add 10.79.0.2/24 dev vethr1 &&
		ip -n "$NS_A" link set vethr0 up &&
		ip -n "$NS_B" link set vethr1 up
}
second_pair || skip_rest "the second veth pair could not be set up"

# 24 iterations of 1 MiB each way: long enough on Debian's kernel to be
# running when the routes change (fabric.sh's plane failure found 8 could
# end within a second).
ip netns exec "$NS_A" timeout 280 "$MR_INTEGRITY" -d "$RDMA_A" -p 18810 \
	-n 24 -q 2 -s 1M -t 60 >"$dir/server" 2>&1 &
spid=$!
pids+=("$spid")
sleep 1
ip netns exec "$NS_B" timeout 280 "$MR_INTEGRITY" -d "$RDMA_B" -p 18810 \
	-n 24 -q 2 -s 1M -t 60 "$FABRIC_IP_A" >"$dir/client" 2>&1 &
cpid=$!
pids+=("$cpid")
wait_for 60 veth0_moving 100000 || ktap_info "the transfer never reached 100 KB/s on veth0"
r0=$(dev_tx_bytes "$NS_B" vethr1)
ip -n "$NS_A" route add "$FABRIC_IP_B/32" dev vethr0 src "$FABRIC_IP_A" &&
	ip -n "$NS_B" route add "$FABRIC_IP_A/32" dev vethr1 src "$FABRIC_IP_B" ||
	skip_rest "the routes over the second pair could not be added"
netem_both loss 100% || skip_rest "no netem"
t0=$SECONDS
running=1
kill -0 "$cpid" 2>/dev/null || running=0
wait "$cpid"
crc=$?
wait "$spid"
src=$?
da=$(netem_dropped "$NS_A" veth0)
db=$(netem_dropped "$NS_B" veth1)
rest=$(($(dev_tx_bytes "$NS_B" vethr1) - r0))
ktap_info "the routes changed; the transfer ended $((SECONDS - t0)) s later, client rc $crc, server rc $src"
ktap_info "the first pair's netem dropped ${da:-?} packets at A and ${db:-?} at B; B sent $rest bytes on the second"
grep -h "PASS\|FAIL" "$dir/client" | while IFS= read -r l; do ktap_info "client: $l"; done
check "$completes" eval '[ $crc = 0 ] && [ $src = 0 ] && grep -q "^mr-integrity: PASS" "$dir/client"'
if [ "$running" = 0 ]; then
	# Nothing was left to send: neither point says anything.
	ktap_skip "$no_drops" "the transfer had ended before the routes changed"
	ktap_skip "$carries" "the transfer had ended before the routes changed"
else
	# A stale route costs every path of both hosts its window, a hundred
	# packets or more; the slack is for a neighbour probe of veth0's old
	# entries.
	check "$no_drops" eval '[ -n "$da" ] && [ -n "$db" ] && [ $((da + db)) -le 8 ]'
	check "$carries" test "$rest" -gt "$rest_want"
fi
ktap_finish
