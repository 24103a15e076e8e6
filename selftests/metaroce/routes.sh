#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A peer connection caches the route of each of its flows (RouteCache,
# rust/abstractions/net.rs; Documentation/verbs.md); a change of the routing
# tables must reach the next packet of every flow. Hosts A and B are joined
# by two veth pairs: the fabric's veth0/veth1 (the devices' net devices) and
# vethr0/vethr1. While mr-integrity moves data both ways, each host gets a
# host route to the other's fabric address over the second pair (the fabric
# address stays the source), and then the first pair drops everything
# (netem loss 100% on both ends):
#   - the transfer completes with verified data;
#   - the first pair's netem drops (almost) nothing: every flow took the new
#     route with its next packet. A sender still using a route it cached
#     before the change sends into the loss until the path moves to a new
#     source port (which routes afresh), so that it too would complete;
#     this point is what tells the two apart;
#   - the second pair carries the rest.
#
# ROUTES_FAMILY=4 (the default; 10.77.0.0/24 and 10.79.0.0/24) or 6
# (fd77::/64 and fd79::/64, routes_ipv6.sh). With IPv4, IPv6 is off on the
# first pair, so that its neighbour discovery does not count among the drops; with IPv6 the first pair's addresses are
# added without duplicate address detection and it sends no router
# solicitations, so that only neighbour discovery for the peer's address,
# which the change makes unused, could be dropped.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

family=${ROUTES_FAMILY:-4}
case $family in
4)
	R_A=10.79.0.1 R_B=10.79.0.2 R_LEN=24 HOST_LEN=32
	DATA_A=$FABRIC_IP_A DATA_B=$FABRIC_IP_B
	;;
6)
	R_A=fd79::1 R_B=fd79::2 R_LEN=64 HOST_LEN=128
	DATA_A=fd77::1 DATA_B=fd77::2
	;;
*)
	echo "ROUTES_FAMILY must be 4 or 6" >&2
	exit "$KSFT_FAIL"
	;;
esac

if [ "$family" = 6 ]; then
	metaroce_integrity_needs ip tc sysctl python3
	[ -e /proc/net/if_inet6 ] || skip_all "the kernel has no IPv6"
else
	metaroce_integrity_needs ip tc sysctl
fi
ktap_plan 4
dir=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null; wait 2>/dev/null; rdma_fabric_down; rm -rf "$dir"' EXIT
fabric_point metaroce

completes="IPv$family: the transfer completes with verified data across the route change"
no_drops="IPv$family: the first pair drops nothing after the change (at most 8 packets)"
rest_want=1000000
carries="IPv$family: the second pair carries the rest (over $rest_want bytes)"
skip_rest() { # WHY: the points after the fabric's, skipped
	local p
	for p in "$completes" "$no_drops" "$carries"; do
		ktap_skip "$p" "$1"
	done
	ktap_finish
}

# netem_dropped NS DEV: packets the root qdisc of DEV dropped ("Sent N bytes
# M pkt (dropped D, overlimits ...")
netem_dropped() {
	tc -s -n "$1" qdisc show dev "$2" | grep -o 'dropped [0-9]*' | head -n1 | cut -d' ' -f2
}

# addr_on NS DEV ADDR LEN: ADDR/LEN on DEV, without duplicate address
# detection (a tentative IPv6 address cannot be a source).
addr_on() {
	if [ "$family" = 6 ]; then
		ip -n "$1" -6 addr add "$3/$4" dev "$2" nodad
	else
		ip -n "$1" addr add "$3/$4" dev "$2"
	fi
}

first_pair() {
	[ "$family" = 6 ] || {
		ip netns exec "$NS_A" sysctl -qw net.ipv6.conf.veth0.disable_ipv6=1 &&
			ip netns exec "$NS_B" sysctl -qw net.ipv6.conf.veth1.disable_ipv6=1
		return
	}
	ip netns exec "$NS_A" sysctl -qw net.ipv6.conf.veth0.router_solicitations=0 \
		net.ipv6.conf.veth0.accept_ra=0 &&
		ip netns exec "$NS_B" sysctl -qw net.ipv6.conf.veth1.router_solicitations=0 \
			net.ipv6.conf.veth1.accept_ra=0 &&
		addr_on "$NS_A" veth0 "$DATA_A" 64 && addr_on "$NS_B" veth1 "$DATA_B" 64
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
	ip link add vethr0 netns "$NS_A" type veth peer name vethr1 netns "$NS_B" || return 1
	addr_on "$NS_A" vethr0 "$R_A" "$R_LEN" &&
		addr_on "$NS_B" vethr1 "$R_B" "$R_LEN" &&
		ip -n "$NS_A" link set vethr0 up &&
		ip -n "$NS_B" link set vethr1 up
}

# data_gid ADDR: the sysfs spelling of ADDR's GID (once: gid6 starts
# python3, which costs about a second under emulation).
data_gid() {
	if [ "$family" = 6 ]; then
		gid6 "$1"
	else
		fabric_gid_of "$1"
	fi
}

# transfer PORT ITERATIONS: mr-integrity between the data addresses, the
# server in A and the client in B, in the background (SPID and CPID). Its
# TCP control connection goes to the data address too, so that it follows
# the route change (in the IPv6 run, one over IPv4 would stay on the first
# pair, and its losses there stall the transfer with the RDMA side idle).
transfer() {
	ip netns exec "$NS_A" timeout 280 "$MR_INTEGRITY" -d "$RDMA_A" -g "$GID_A" \
		-p "$1" -n "$2" -q 2 -s 1M -t 60 >"$dir/server" 2>&1 &
	SPID=$!
	pids+=("$SPID")
	sleep 1
	ip netns exec "$NS_B" timeout 280 "$MR_INTEGRITY" -d "$RDMA_B" -g "$GID_B" \
		-p "$1" -n "$2" -q 2 -s 1M -t 60 "$DATA_A" >"$dir/client" 2>&1 &
	CPID=$!
	pids+=("$CPID")
}

first_pair || skip_rest "the first pair's addresses could not be set up"
second_pair || skip_rest "the second veth pair could not be set up"
gid_a=$(data_gid "$DATA_A")
gid_b=$(data_gid "$DATA_B")
wait_for 20 roce_v2_index "$RDMA_A" "$gid_a" && wait_for 20 roce_v2_index "$RDMA_B" "$gid_b" ||
	skip_rest "no RoCE v2 GID of $DATA_A and $DATA_B"
GID_A=$(roce_v2_index "$RDMA_A" "$gid_a")
GID_B=$(roce_v2_index "$RDMA_B" "$gid_b")
ktap_info "IPv$family: GID $GID_A ($DATA_A) and $GID_B ($DATA_B)"

# 24 iterations of 1 MiB each way: long enough on Debian's kernel to be
# running when the routes change (fabric.sh's plane failure found 8 could
# end within a second).
transfer 18810 24
wait_for 60 veth0_moving 100000 || ktap_info "the transfer never reached 100 KB/s on veth0"
r0=$(dev_tx_bytes "$NS_B" vethr1)
# Through the other host's second-pair address: an IPv6 host answers
# neighbour solicitations only for the addresses of the device they arrive
# on.
ip -n "$NS_A" route add "$DATA_B/$HOST_LEN" via "$R_B" dev vethr0 src "$DATA_A" &&
	ip -n "$NS_B" route add "$DATA_A/$HOST_LEN" via "$R_A" dev vethr1 src "$DATA_B" ||
	skip_rest "the routes over the second pair could not be added"
netem_both loss 100% || skip_rest "no netem"
t0=$SECONDS
running=1
kill -0 "$CPID" 2>/dev/null || running=0
wait "$CPID"
crc=$?
wait "$SPID"
src=$?
pids=()
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
