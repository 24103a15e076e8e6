#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Port counters: `rdma statistic show link DEV/1` on MetaRoCE devices, read
# around traffic whose effect is known and checked against what the wire
# sniffer (udp_sniff.py on B's veth1) counted:
#   1. every counter Documentation/observability.md lists is there, and a
#      fresh pair of devices starts at zero data packets;
#   2. a lossless mr-integrity run: the data packets A says it sent (first
#      sends, resends, relocations) are the data packets seen on the wire
#      towards B, and those B says it received (new and duplicate) too; ACKs
#      and hellos likewise (within 2%, plus the frames the sniffer says it
#      missed);
#   3. 3% netem loss from A: A counts more data sent than B received (and
#      B's count is the wire's), and A sent again (resent or relocated) at
#      least as many as were lost;
#   4. truncated copies of real datagrams injected from B's address: A's
#      rcvd_dropped and drop_truncated rise by exactly the copies long
#      enough to name the connection (8 bytes; shorter ones no device can
#      own), and no other drop reason rises;
#   5. the counters never went back between two reads;
#   7. A's link set down and up: link_downed rises by exactly one on A and
#      on B (whose veth lost its carrier);
#   6. tshark, recording the lossless run, dissects it with
#      tools/dissector/metaroce.lua: A's data packets, none malformed (SKIP
#      without tshark).
# Skips without mr-integrity, the rdma-core build or python3.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

here=$(cd "$(dirname "$0")" && pwd)
metaroce_integrity_needs ip rdma python3 tc

names="sent_data_pkts resent_pkts spurious_resends relocated_pkts path_moves
retransmit_timeouts sent_acks sent_naks rcvd_data_pkts duplicate_pkts
rcvd_acks rcvd_naks ecn_marks_echoed rcvd_dropped hellos_sent peer_restarts
peer_silences retry_exceeded_err peer_connections link_downed
drop_truncated drop_version drop_packet_type drop_opcode drop_nak_code
drop_flags drop_reserved drop_payload_length drop_bounds drop_connection
drop_path drop_window drop_ack drop_nak drop_hello refused_remote_access
refused_invalid_request refused_rnr refused_remote_operation refused_no_qp
ud_sent_pkts ud_send_errors ud_rcvd_pkts ud_drop_malformed ud_drop_qp_state
ud_drop_qkey ud_drop_no_receive ud_drop_length"
drops=$(echo $names | tr ' ' '\n' | grep '^drop_')

ktap_plan 20

dir=$(mktemp -d)
ipid=
tpid=
trap '[ -n "$ipid" ] && kill "$ipid" 2>/dev/null; [ -n "$tpid" ] && kill "$tpid" 2>/dev/null; rdma_fabric_down; rm -rf "$dir"' EXIT
fabric_point metaroce

# snap NS DEV FILE: the device's counters, one "name value" per line.
snap() {
	rdma_in "$1" statistic show link "$2/1" >"$3.raw" 2>&1 || return 1
	rdma_in "$1" -j statistic show link "$2/1" | python3 -c '
import json, sys
def walk(o):
    if isinstance(o, dict):
        for k, v in o.items():
            if isinstance(v, int) and k not in ("port", "ifindex"):
                print(k, v)
            else:
                walk(v)
    elif isinstance(o, list):
        for v in o:
            walk(v)
walk(json.load(sys.stdin))' >"$3"
}
# Each helper below reads its snapshots in one awk: a program started
# under emulation costs about 0.25 s, and one per counter made this test
# spend over a minute starting awk (2026-12-07).
# val FILE NAME
val() { awk -v n="$2" '$1 == n { print $2 }' "$1"; }
# delta BEFORE AFTER NAME...: the sum of the named counters' rises (empty if
# a counter is missing from either snapshot)
delta() {
	local b=$1 a=$2
	shift 2
	awk -v names="$*" 'NR == FNR { b[$1] = $2; next } { a[$1] = $2 }
	END {
		n = split(names, w, " ")
		for (i = 1; i <= n; i++) {
			if (!(w[i] in a) || !(w[i] in b)) exit
			s += a[w[i]] - b[w[i]]
		}
		printf "%.0f\n", s
	}' "$b" "$a"
}
# near X WIRE MISSED: X is what the wire showed, within 2% (and 5 packets),
# or more by at most the frames the sniffer missed
near() {
	local slack=$(($2 / 50 + 5))
	[ "$1" -ge $(($2 - slack)) ] && [ "$1" -le $(($2 + $3 + slack)) ]
}
# monotone BEFORE AFTER: no counter but peer_connections went down (one
# missing from either snapshot fails too)
monotone() {
	awk -v names="$names" 'NR == FNR { b[$1] = $2; next } { a[$1] = $2 }
	END {
		n = split(names, w, " ")
		for (i = 1; i <= n; i++) {
			k = w[i]
			if (k == "peer_connections") continue
			if (!(k in a) || !(k in b) || a[k] + 0 < b[k] + 0) {
				print k " went from " b[k] " to " a[k] > "/dev/stderr"
				exit 1
			}
		}
	}' "$1" "$2"
}
# all_named FILE: every counter of $names is in the snapshot
all_named() {
	local missing
	missing=$(awk -v names="$names" '{ have[$1] = 1 }
	END {
		n = split(names, w, " ")
		for (i = 1; i <= n; i++) if (!(w[i] in have)) print w[i]
	}' "$1") || return 1
	[ -z "$missing" ] || {
		echo "no counter $(echo $missing) in: $(cat "$1.raw")" >&2
		return 1
	}
}

snap "$NS_A" "$RDMA_A" "$dir/a0" && snap "$NS_B" "$RDMA_B" "$dir/b0"
ktap_info "A before: $(cat "$dir/a0.raw")"
check "rdma statistic shows every counter of both devices" \
	bash -c "$(declare -f all_named); names='$names'; all_named '$dir/a0' && all_named '$dir/b0'"
check "fresh devices have sent and received no data" \
	test "$(val "$dir/a0" sent_data_pkts)" = 0 -a "$(val "$dir/b0" rcvd_data_pkts)" = 0

ab="$FABRIC_IP_A>$FABRIC_IP_B"
ba="$FABRIC_IP_B>$FABRIC_IP_A"

# 2. Lossless. The client in B writes and reads A's memory both ways.
sniff_start clean
# dumpcap (Wireshark's capture engine: quick to start, unlike tshark under
# emulation) records the same run, for the dissector (tools/dissector).
tpid=
if command -v tshark >/dev/null && command -v dumpcap >/dev/null; then
	ip netns exec "$NS_B" dumpcap -q -B 64 -a duration:300 -i veth1 -f "udp port 4792" \
		-w "$dir/clean.pcap" >/dev/null 2>&1 &
	tpid=$!
	wait_for 30 test -s "$dir/clean.pcap" || ktap_info "dumpcap did not start"
fi
# A fixed seed: the checks below want more than 100 data packets each way,
# and the sizes a random seed draws gave A->B 94 to 393 (this seed: 393).
integrity_point "integrity, lossless" pass -n 2 -q 2 -s 256K -t 60 -S 0x6f7b66ae221a51b2
sleep 1
sniff_stop clean
[ -n "$tpid" ] && { kill -TERM "$tpid"; wait "$tpid"; }
snap "$NS_A" "$RDMA_A" "$dir/a1" && snap "$NS_B" "$RDMA_B" "$dir/b1"
ktap_info "A after: $(cat "$dir/a1.raw")"
ktap_info "B after: $(cat "$dir/b1.raw")"
a_sent=$(delta "$dir/a0" "$dir/a1" sent_data_pkts resent_pkts relocated_pkts)
b_rcvd=$(delta "$dir/b0" "$dir/b1" rcvd_data_pkts duplicate_pkts)
wire=$(sniff_field clean "$ab" data)
missed=$(sniff_field clean "$ab" missed)
ktap_info "data A->B: A sent $a_sent, wire $wire (the sniffer missed $missed frames), B received $b_rcvd"
check "A's data sent is the data on the wire to B" \
	bash -c "$(declare -f near); [ '$wire' -gt 100 ] && near '$a_sent' '$wire' '$missed'"
check "B's data received is the data on the wire from A" \
	bash -c "$(declare -f near); near '$b_rcvd' '$wire' '$missed'"
b_sent=$(delta "$dir/b0" "$dir/b1" sent_data_pkts resent_pkts relocated_pkts)
wire_ba=$(sniff_field clean "$ba" data)
ktap_info "data B->A: B sent $b_sent, wire $wire_ba"
check "B's data sent is the data on the wire to A" \
	bash -c "$(declare -f near); [ '$wire_ba' -gt 100 ] && near '$b_sent' '$wire_ba' '$missed'"
b_acks=$(delta "$dir/b0" "$dir/b1" sent_acks)
wire_acks=$(sniff_field clean "$ba" ack)
ktap_info "ACKs B->A: B sent $b_acks, wire $wire_acks"
check "B's ACKs sent are the ACKs on the wire to A" \
	bash -c "$(declare -f near); [ '$wire_acks' -gt 0 ] && near '$b_acks' '$wire_acks' '$missed'"
a_hellos=$(delta "$dir/a0" "$dir/a1" hellos_sent)
ktap_info "hellos A->B: A sent $a_hellos, wire $(sniff_field clean "$ab" hello)"
check "A's hellos sent are the hellos on the wire to B" \
	test "$a_hellos" -ge 1 -a "$a_hellos" = "$(sniff_field clean "$ab" hello)"
check "no counter went back" monotone "$dir/a0" "$dir/a1"
if [ -n "$tpid" ]; then
	lua="lua_script:$(cd "$here/../.." && pwd)/tools/dissector/metaroce.lua"
	# One pass (tshark starts slowly here): source, type, malformed reason.
	tshark -X "$lua" -r "$dir/clean.pcap" -T fields -E separator=/t -e ip.src \
		-e metaroce.type -e metaroce.malformed >"$dir/dissected" 2>"$dir/dissect.err"
	bad=$(awk -F'\t' '$3 != ""' "$dir/dissected" | wc -l)
	seen=$(awk -F'\t' -v a="$FABRIC_IP_A" '$1 == a && $2 == 1' "$dir/dissected" | wc -l)
	[ -s "$dir/dissected" ] || ktap_info "tshark: $(tail -n 2 "$dir/dissect.err")"
	ktap_info "tshark: $seen data packets A->B dissected, $bad malformed"
	check "the dissector reads the run's capture: A's data packets, none malformed" \
		test "$bad" = 0 -a "$seen" -gt 0 -a "$seen" -ge $((wire - wire / 50 - 5))
else
	ktap_skip "the dissector reads the run's capture" "tshark or dumpcap is not installed"
fi

# 3. Loss on A's side of the veth pair (A -> B only).
tc -n "$NS_A" qdisc replace dev veth0 root netem loss 3%
sniff_start loss
# Four iterations and the lossless run's seed: many data packets towards B
# (with two and random seeds, 285-533 were sent and one run lost 2; with
# four, 1100-1770 and 26-52 lost in 8 runs on Debian's kernel).
integrity_point "integrity, 3% loss A->B" pass -n 4 -q 2 -s 256K -t 60 -S 0x6f7b66ae221a51b2
sleep 1
sniff_stop loss
# netem's own count of what it dropped (data, ACKs and hellos alike).
netem_dropped=$(tc -n "$NS_A" -s qdisc show dev veth0 |
	sed -n 's/.*(dropped \([0-9]*\),.*/\1/p' | head -n 1)
tc -n "$NS_A" qdisc del dev veth0 root 2>/dev/null
snap "$NS_A" "$RDMA_A" "$dir/a2" && snap "$NS_B" "$RDMA_B" "$dir/b2"
again=$(delta "$dir/a1" "$dir/a2" resent_pkts relocated_pkts)
a_sent=$(delta "$dir/a1" "$dir/a2" sent_data_pkts resent_pkts relocated_pkts)
b_rcvd=$(delta "$dir/b1" "$dir/b2" rcvd_data_pkts duplicate_pkts)
wire=$(sniff_field loss "$ab" data)
missed=$(sniff_field loss "$ab" missed)
# What was lost, by the two ends' counters (the sniffer's missed frames,
# of both directions and every protocol, do not blur it); the sniffer
# checks B's count, so a sender counting at the receiver cannot pass.
lost=$((a_sent - b_rcvd))
ktap_info "3% loss: A sent $a_sent data ($again of them again), B received $b_rcvd, wire $wire (the sniffer missed $missed): $lost lost; netem dropped ${netem_dropped:-?} packets of every kind"
# The figures are in the name: CI shows only the ok / not ok lines.
check "A sent more data than B received over the lossy link, as the wire saw ($a_sent sent, $b_rcvd received, $wire crossed, $missed missed, netem dropped ${netem_dropped:-?})" \
	bash -c "$(declare -f near); [ '$lost' -gt 0 ] && [ -n '$wire' ] && near '$b_rcvd' '$wire' '$missed'"
check "A sent again at least every packet that was lost" test "$again" -ge "$lost"

# 4. Truncated copies of B's datagrams, sent to A from B's address while a
# run goes on.
rm -f "$dir/inj" "$dir/inj.ready"
ip netns exec "$NS_B" python3 "$here/inject.py" --iface veth1 \
	--src "$FABRIC_IP_B" --dst "$FABRIC_IP_A" --modes truncated --rate 100 \
	--out "$dir/inj" &
ipid=$!
wait_for 20 test -e "$dir/inj.ready"
integrity_point "integrity, truncated copies injected towards A" pass -n 2 -q 2 -s 256K -t 60
kill -TERM "$ipid" 2>/dev/null
wait "$ipid" 2>/dev/null
ipid=
# The last copies may still wait in A's input queue: read once they stop.
truncated_now() {
	snap "$NS_A" "$RDMA_A" "$dir/t" && val "$dir/t" drop_truncated
}
last=-1
for _ in 1 2 3 4 5; do
	now=$(truncated_now 2>/dev/null) || break
	[ "$now" = "$last" ] && break
	last=$now
	sleep 1
done
snap "$NS_A" "$RDMA_A" "$dir/a3" || ktap_info "rdma statistic failed on A: $(cat "$dir/a3.raw" 2>/dev/null)"
[ -s "$dir/inj" ] && ktap_info "injector: $(cat "$dir/inj")"
sent=$(sed -n 's/.* truncated=\([0-9]*\).*/\1/p' "$dir/inj")
named=$(sed -n 's/.* attributable=\([0-9]*\).*/\1/p' "$dir/inj")
dropped=$(delta "$dir/a2" "$dir/a3" rcvd_dropped)
ktap_info "truncated copies sent $sent, $named of them long enough to name the connection; A's rcvd_dropped rose by $dropped"
check "every truncated copy that names the connection raises A's rcvd_dropped" \
	test "${named:-0}" -gt 0 -a "$dropped" = "${named:-0}"
other=0
for n in $drops; do
	[ "$n" = drop_truncated ] && continue
	d=$(delta "$dir/a2" "$dir/a3" "$n")
	[ "$d" = 0 ] || ktap_info "$n rose by $d"
	other=$((other + ${d:-1}))
done
ktap_info "drop_truncated rose by $(delta "$dir/a2" "$dir/a3" drop_truncated), the other drop reasons by $other"
check "they count as drop_truncated, and as no other drop reason" \
	test -n "$dropped" -a "$(delta "$dir/a2" "$dir/a3" drop_truncated)" = "$dropped" -a "$other" = 0
check "no counter went back" monotone "$dir/a1" "$dir/a3"

# 7. The link goes down and comes back.
snap "$NS_B" "$RDMA_B" "$dir/b3"
ip -n "$NS_A" link set veth0 down
sleep 1
ip -n "$NS_A" link set veth0 up
wait_for 20 fabric_dev_ready "$RDMA_A" "$FABRIC_IP_A"
wait_for 20 fabric_dev_ready "$RDMA_B" "$FABRIC_IP_B"
snap "$NS_A" "$RDMA_A" "$dir/a4" && snap "$NS_B" "$RDMA_B" "$dir/b4"
ktap_info "link_downed rose by $(delta "$dir/a3" "$dir/a4" link_downed) on A, $(delta "$dir/b3" "$dir/b4" link_downed) on B"
check "A's link down and up counts once in A's link_downed" \
	test "$(delta "$dir/a3" "$dir/a4" link_downed)" = 1
check "and once in B's, whose veth lost its carrier" \
	test "$(delta "$dir/b3" "$dir/b4" link_downed)" = 1
ktap_finish
