#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# One connection per peer host: queue pairs between the same two hosts are
# streams of one MetaRoCE connection under one congestion controller, named
# by a hello handshake, and a peer that comes back as a new incarnation gets a
# new one. Watched on the wire: udp_sniff.py counts the datagrams on veth1
# (connection ids, stream ids, source ports, hellos) while tools/integrity's
# mr-integrity runs with four QPs, three times:
#   1. fresh devices: hellos both ways, then every data packet of the four
#      QPs carries one connection id, at least four streams, over at least
#      two source ports and two path ids, and no more path ids than the
#      `paths` module parameter;
#   2. four new QPs: the same connection id and no hello (the connection
#      outlives its queue pairs);
#   3. the device in A deleted and created again: hellos, a new connection id
#      (B reset its side), and the kernel log says the peer restarted.
# Skips without mr-integrity, the rdma-core build or python3.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

metaroce_integrity_needs ip rdma python3 dmesg
# The module's parameters are not in sysfs: 16 unless it was loaded with paths=.
paths=$(cat /sys/module/metaroce/parameters/paths 2>/dev/null || echo 16)

ktap_plan 12

trap 'rdma_fabric_down' EXIT
fabric_point metaroce
kmsg_mark

ab="$FABRIC_IP_A>$FABRIC_IP_B"
ba="$FABRIC_IP_B>$FABRIC_IP_A"

sniff_start run1
integrity_point "integrity: 4 QPs between the two hosts" pass -n 2 -q 4 -s 64K -t 60
sniff_stop run1
conn1=$(sniff_field run1 "$ab" conns)
ktap_info "paths=$paths; A->B connection id $conn1"
check "hellos both ways before the first data" \
	test "$(sniff_field run1 "$ab" hello)" -ge 1 -a "$(sniff_field run1 "$ba" hello)" -ge 1
check "the four QPs' data carry one connection id" \
	test -n "$conn1" -a "$conn1" != - -a "${conn1#*,}" = "$conn1"
check "the four QPs are streams of it (at least 4 stream ids)" \
	test "$(sniff_field run1 "$ab" streams)" -ge 4
# A path whose probes go unanswered moves to a new port (on a slow debug
# kernel that happens without loss), so the ports seen are not bounded by
# the paths, nor exactly the ports in use at once (a packet sent on a path's
# old port just before it moved can arrive after the new port's first): the
# path ids the packets carry are.
check "sprayed over more than one source port, on no more than paths=$paths paths" \
	test "$(sniff_field run1 "$ab" sports)" -ge 2 -a "$(sniff_field run1 "$ab" paths)" -ge 2 \
	-a "$(sniff_field run1 "$ab" paths)" -le "$paths"

sniff_start run2
integrity_point "integrity: 4 new QPs" pass -n 2 -q 4 -s 64K -t 60
sniff_stop run2
# Keepalives aside: a peer silent for a second while requests wait (the
# debug kernel under load) is challenged, and answers with a plain hello
# (twice when the challenge came from another port than the one it trusts).
h_ab=$(sniff_field run2 "$ab" hello) c_ab=$(sniff_field run2 "$ab" challenge)
h_ba=$(sniff_field run2 "$ba" hello) c_ba=$(sniff_field run2 "$ba" challenge)
ktap_info "hellos in run2: A>B $h_ab ($c_ab challenges), B>A $h_ba ($c_ba challenges)"
numbers() { local v; for v; do [[ "$v" =~ ^[0-9]+$ ]] || return 1; done; }
# Plain hellos only as answers to the other side's challenges, two each at
# most (a re-handshake would also show as another connection id).
check "new QPs use the same connection, without a hello other than keepalives" \
	eval '[ "$(sniff_field run2 "$ab" conns)" = "$conn1" ] &&
		numbers "$h_ab" "$c_ab" "$h_ba" "$c_ba" &&
		[ $((h_ab - c_ab)) -le $((2 * c_ba)) ] &&
		[ $((h_ba - c_ba)) -le $((2 * c_ab)) ]'

rdma_in "$NS_A" link delete "$RDMA_A"
if rdma_in "$NS_A" link add "$RDMA_A" type metaroce netdev veth0 &&
	wait_for 20 fabric_dev_ready "$RDMA_A" "$FABRIC_IP_A"; then
	ktap_ok "the device in A deleted and created again"
else
	ktap_fail "the device in A deleted and created again"
fi
sniff_start run3
integrity_point "integrity: 4 QPs after A restarted" pass -n 2 -q 4 -s 64K -t 60
sniff_stop run3
conn3=$(sniff_field run3 "$ab" conns)
check "a new incarnation: hellos and another connection id ($conn3)" \
	test "$(sniff_field run3 "$ab" hello)" -ge 1 -a -n "$conn3" -a "$conn3" != - \
	-a "$conn3" != "$conn1" -a "${conn3#*,}" = "$conn3"
check "B's kernel log says the peer restarted" \
	eval "kmsg_since | grep -q ': $RDMA_B: peer $FABRIC_IP_A restarted'"
ktap_finish
