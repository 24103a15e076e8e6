#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# MetaRoCE on a lossy multiplane fabric (functional, not timed): hosts A and B
# behind routers joined by four planes, ECMP hashing the UDP ports
# (lib_netns.sh's rdma_fabric_up metaroce 4). tools/integrity's mr-integrity
# (every operation, every byte checked) must pass, which also means no QP
# entered the error state:
#   - with 1% and with 10% loss and reordering on every plane;
#   - while one plane fails mid-transfer: the transfer completes with
#     verified data, the failed plane carries nothing afterwards and the
#     others carry the rest (RA's routes skip the plane; the paths whose
#     packets RB still sends onto it moved off it);
#   - through a rate-limited bottleneck queue that marks ECN (tbf + fq_codel
#     ecn on every plane, 0.5 Mbit/s each): the queues marked packets, the
#     receiver counted the marks and echoed them to the sender in its ACKs
#     (udp_sniff.py on B's veth1). (That the sender's windows answer the
#     echoes is covered by the transport core's tests,
#     ecn_marks_shrink_the_window.)

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$MR_INTEGRITY" ] || skip_all "$MR_INTEGRITY is not built (make -C tools/integrity)"
. "$top/scripts/rdma-env.sh"
[ -n "${METAROCE_RDMA_PREFIX:-}" ] || skip_all "the rdma-core build is missing (make provider)"
require_tools ip rdma tc python3 sysctl
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

PLANES=4
ktap_plan 11
trap 'rdma_fabric_down' EXIT
fabric_point metaroce $PLANES

all_planes() {
	local i
	for ((i = 0; i < PLANES; i++)); do plane_qdisc "$i" "$@" || return 1; done
}

for loss in 1% 10%; do
	if all_planes loss "$loss" delay 1ms reorder 25% 50%; then
		integrity_point "integrity over $PLANES planes, loss $loss and reordering on each" pass \
			-n 4 -q 2 -s 64K -t 60
	else
		ktap_skip "integrity over $PLANES planes, loss $loss and reordering on each" "no netem"
	fi
done
all_planes

# A plane fails while a long transfer runs: 24 iterations, so that on
# Debian's (fast) kernel it is still running after the failure (with 8 it
# once ended within the second the failure took: 0 bytes after it,
# 2026-12-04); under the debug kernel 8 took about 35 s, and the rest after
# the failure 90-175 s (beside another test, 2026-12-07). A CI run failed
# this point without saying why when the limit was 280 s, the closest of
# its limits. With 400 s the test's limits add up to about 1300 s, under
# selftests/metaroce/settings' 1500 s. (mr-integrity's -t fails a transfer
# that stalls for 60 s.)
dir=$(mktemp -d)
kmsg_mark
ip netns exec "$NS_A" timeout 400 "$MR_INTEGRITY" -d "$RDMA_A" -p 18710 \
	-n 24 -q 2 -s 1M -t 60 >"$dir/server" 2>&1 &
spid=$!
sleep 1
ip netns exec "$NS_B" timeout 400 "$MR_INTEGRITY" -d "$RDMA_B" -p 18710 \
	-n 24 -q 2 -s 1M -t 60 "$FABRIC_IP_A" >"$dir/client" 2>&1 &
cpid=$!
# Plane 1 fails once the transfer is under way. Its link goes down at RA:
# RA's routes skip it at once, while RB's side only loses carrier and RB keeps
# hashing onto it whatever it routes there, lost until the paths move: B's
# data and the ACKs B sends on A's paths (they take A's ports, so A's paths
# move then). Whether any of the transfer is on plane 1 depends on where the
# paths' ports hash and which paths carry the traffic: what RB sent on plane 1
# in the second before the failure says.
b1=0
underway() { # sets b1, RB's bytes on plane 1 in the second measured
	local i a=() z=() all=0
	for ((i = 0; i < PLANES; i++)); do a[i]=$(plane_bytes "$i" "$NS_RB"); done
	sleep 1
	for ((i = 0; i < PLANES; i++)); do
		z[i]=$(plane_bytes "$i" "$NS_RB")
		all=$((all + z[i] - a[i]))
	done
	b1=$((z[1] - a[1]))
	[ "$all" -gt 100000 ]
}
path_sum() { # DEVICE KEY: KEY summed over the device's paths
	awk -v key="$2" '$1 == "path" {
		for (i = 3; i < NF; i += 2) if ($i == key) s += $(i + 1)
	} END { print s + 0 }' "/sys/kernel/debug/metaroce/$1" 2>/dev/null
}
wait_for 60 underway || ktap_info "the transfer never reached 100 KB/s at RB"
moves0=$(($(path_sum "$RDMA_A" moves) + $(path_sum "$RDMA_B" moves)))
plane_down 1
t0=$SECONDS
# From the failure on (on Debian's kernel the rest takes about 3 s).
before=()
for ((i = 0; i < PLANES; i++)); do before[i]=$(plane_bytes "$i"); done
wait "$cpid"
crc=$?
wait "$spid"
src=$?
after=()
for ((i = 0; i < PLANES; i++)); do after[i]=$(plane_bytes "$i"); done
plane_up 1
rest=$((SECONDS - t0))
ktap_info "plane 1 failed; the transfer ended $rest s later, client rc $crc, server rc $src"
[ "$rest" -gt 200 ] &&
	ktap_info "slower than every run on record (90-175 s from the failure in the debug guest, 1-8 s on Debian's kernel)"
grep -h "PASS\|FAIL" "$dir/client" | while IFS= read -r l; do ktap_info "client: $l"; done
if [ "$crc" != 0 ] || [ "$src" != 0 ]; then
	for side in client server; do
		tail -n 5 "$dir/$side" | tr -d '\r' | while IFS= read -r l; do ktap_info "$side: $l"; done
	done
	# The kernel's verdict on either peer (silent, restarted), if it gave
	# one during the transfer.
	kmsg_since | grep -E ": ($RDMA_A|$RDMA_B): peer .* (silent|restarted)" | tail -n 4 |
		while IFS= read -r l; do ktap_info "kernel: $l"; done
fi
moved=0
for ((i = 0; i < PLANES; i++)); do
	ktap_info "plane $i: $((after[i] - before[i])) bytes from the failure to the end"
	[ "$i" != 1 ] && moved=$((moved + after[i] - before[i]))
done
check "the transfer completes with verified data though plane 1 failed" \
	eval '[ $crc = 0 ] && [ $src = 0 ] && grep -q "^mr-integrity: PASS" "$dir/client"'
check "the failed plane carries nothing after it failed" test "$((after[1] - before[1]))" -eq 0
# Over 1 MB; a rest that ended within 4 s of the failure (Debian's kernel,
# 2026-12-03: 1 s, 0.69 MB) had less left to carry: over 256 KB then.
want=1000000
[ "$rest" -lt 4 ] && want=256000
check "the other planes carry the rest (over $want bytes)" test "$moved" -gt "$want"
# The telemetry (rust/driver/telemetry.rs): the paths on plane 1 moved.
if mountpoint -q /sys/kernel/debug; then
	for d in "$RDMA_A" "$RDMA_B"; do
		grep '^path ' "/sys/kernel/debug/metaroce/$d" | while IFS= read -r l; do ktap_info "$d: $l"; done
	done
	# Challenges sent because the peer was silent for a second while
	# requests waited (rust/transport/src/session.rs, KEEPALIVE_NS), the
	# longest silence with their answers, and without them (the
	# connection's own).
	for d in "$RDMA_A" "$RDMA_B"; do
		ktap_info "$d: $(sed -n 's/^peer \([^ ]*\) .* keepalives \([0-9]*\) silent_max_ms \([0-9]*\) quiet_max_ms \([0-9]*\).*/\2 keepalives to \1, silent for up to \3 ms, the connection quiet for up to \4 ms/p' "/sys/kernel/debug/metaroce/$d")"
	done
	moves1=$(($(path_sum "$RDMA_A" moves) + $(path_sum "$RDMA_B" moves)))
	ktap_info "A's and B's paths moved $moves0 times before plane 1 failed, $moves1 by the end"
	ktap_info "RB sent $b1 bytes on plane 1 in the second before it failed"
	# A path moves when its packets on plane 1 time out twice: a rest of
	# a few seconds (Debian's kernel, 2026-12-02: 2 s, no move) may
	# finish on the other planes first, with nothing left on plane 1.
	if [ "$b1" -gt 50000 ] && [ "$moves1" -eq "$moves0" ] && [ "$rest" -lt 4 ]; then
		ktap_skip "the telemetry shows paths moved after the plane failed" \
			"the rest took $rest s on the other planes: no path on plane 1 timed out"
	elif [ "$b1" -gt 50000 ]; then
		check "the telemetry shows paths moved after the plane failed" \
			test "$moves1" -gt "$moves0"
	else
		ktap_skip "the telemetry shows paths moved after the plane failed" \
			"RB sent $b1 bytes on plane 1 in the second before it failed: the transfer was on paths hashed elsewhere"
	fi
else
	ktap_skip "the telemetry shows paths moved after the plane failed" "debugfs is not mounted"
fi
rm -rf "$dir"

# ECN: a bottleneck queue on every plane that marks instead of dropping, slow
# enough (0.5 Mbit/s) that a sender in the debug kernel fills it however its
# packets spread over the four planes (at 2 Mbit/s, a run that spread them
# evenly marked nothing).
PLANE_RATE=500kbit all_planes
sniff_start ecn
integrity_point "integrity through ECN-marking bottlenecks ($PLANES x 0.5 Mbit/s)" pass \
	-n 2 -q 2 -s 256K -t 120
sniff_stop ecn
marks=0
drops=0
for ((i = 0; i < PLANES; i++)); do
	for ns in "$NS_RA" "$NS_RB"; do
		s=$(tc -n "$ns" -s qdisc show dev "plane$i" | tr '\n' ' ')
		m=$(echo "$s" | sed -n 's/.*fq_codel 3:.*ecn_mark \([0-9]*\).*/\1/p')
		d=$(echo "$s" | sed -n 's/.*fq_codel 3:.*(dropped \([0-9]*\),.*/\1/p')
		marks=$((marks + ${m:-0}))
		drops=$((drops + ${d:-0}))
	done
done
ab="$FABRIC_IP_A>$FABRIC_IP_B"
ba="$FABRIC_IP_B>$FABRIC_IP_A"
ktap_info "fq_codel: $marks packets marked CE, $drops dropped"
check "the bottleneck queues marked packets CE" test "$marks" -gt 0
# The sniffer sits at B: it sees the marks on A's data arrive (ce) but not
# those on B's data, marked later on the way; the ACKs of both receivers pass
# it, with the marks each counted (echoed).
echoed=$(( $(sniff_field ecn "$ab" echoed) + $(sniff_field ecn "$ba" echoed) ))
ktap_info "ACKs echoed $echoed marks; $(sniff_field ecn "$ab" ce) marked packets of A's reached B"
check "the receivers counted the marks and echoed them in ACKs" test "$echoed" -gt 0
if mountpoint -q /sys/kernel/debug; then
	m_a=$(path_sum "$RDMA_A" ce_marked)
	m_b=$(path_sum "$RDMA_B" ce_marked)
	e_a=$(path_sum "$RDMA_A" ce_echoed)
	e_b=$(path_sum "$RDMA_B" ce_echoed)
	ktap_info "telemetry: marked arrivals A $m_a, B $m_b; marks echoed to A $e_a, to B $e_b"
	check "the paths' telemetry counts the marks and their echoes" \
		test $((m_a + m_b)) -gt 0 -a $((e_a + e_b)) -gt 0
else
	ktap_skip "the paths' telemetry counts the marks" "debugfs is not mounted"
fi
ktap_finish
