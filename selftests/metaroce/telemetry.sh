#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Per-peer and per-path telemetry (/sys/kernel/debug/metaroce/DEV,
# rust/driver/telemetry.rs) and its live viewer (tools/viewer), read around
# traffic whose effect is known:
#   1. each device has its file, and it names the device;
#   2. after a lossless mr-integrity run, A's view of B: the connection is
#      up, every path is listed, the paths' data packets add up to the
#      peer's (first sends, resends, relocations) and the peer's to A's port
#      counters (`rdma statistic`, one peer);
#   3. 10% netem loss on one of B's paths only (a routing rule on its UDP
#      source port sends it over a second, lossy link; the other paths keep
#      the first), with the programs waiting for completion events rather
#      than polling: that path resent or moved at least as many as any
#      other, or, when netem's drops on its port are more than twice any
#      other path's count, resent at least half of them (TODO, not a
#      failure, when the lossless run of 2 already moved paths: a known
#      fault, Documentation/performance.md; SKIP when the drops are too
#      few to tell the paths apart), and the paths together at least half
#      of what netem dropped (some losses are recovered by earlier copies,
#      and a moving path may leave the lossy port or borrow it); both SKIP
#      if netem passed packets on the port but dropped none, and fail if
#      the port was not set up or carried nothing;
#   4. metaroce-top --json, run during traffic: one JSON object per device
#      and sample, the peer and its paths in it, and a rate measured
#      between samples is positive (SKIP when the viewer is not built);
#   5. tracepoints (events/metaroce/): during the one-path loss of 3, the
#      metaroce_resend events per path are the telemetry's resends; a QP
#      failed by a wrong remote key (mr-negative's case 3) raises
#      metaroce_qp_error from RTS (SKIP without tracefs).
# Skips without debugfs, mr-integrity, the rdma-core build or tc.

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
metaroce_integrity_needs ip rdma tc python3
tdir=/sys/kernel/debug/metaroce
mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug 2>/dev/null
mountpoint -q /sys/kernel/debug || skip_all "debugfs is not mounted on /sys/kernel/debug"
viewer=${METAROCE_TOP:-$top/tools/viewer/target/debug/metaroce-top}

ktap_plan 15

dir=$(mktemp -d)
vpid=
trap '[ -n "$vpid" ] && kill "$vpid" 2>/dev/null; rdma_fabric_down; rm -rf "$dir"' EXIT
fabric_point metaroce

# field FILE KIND NAME KEY: KEY of record KIND NAME ("path 3", "peer 10.0.0.2")
field() {
	awk -v k="$2" -v n="$3" -v key="$4" '$1 == k && $2 == n {
		for (i = 3; i < NF; i += 2) if ($i == key) print $(i + 1)
	}' "$1"
}
# sum_paths FILE KEY: KEY summed over the path records
sum_paths() {
	awk -v key="$2" '$1 == "path" {
		for (i = 3; i < NF; i += 2) if ($i == key) s += $(i + 1)
	} END { print s + 0 }' "$1"
}
# stat NS DEV NAME: one port counter
stat() {
	rdma_in "$1" -j statistic show link "$2/1" | python3 -c '
import json, sys
def find(o):
    if isinstance(o, dict):
        if sys.argv[1] in o:
            return o[sys.argv[1]]
        for v in o.values():
            r = find(v)
            if r is not None:
                return r
    elif isinstance(o, list):
        for v in o:
            r = find(v)
            if r is not None:
                return r
print(find(json.load(sys.stdin)))' "$3"
}

# (debugfs is there: a missing file is a failure, not a skip.)
check "each device has its telemetry file, naming the device" \
	eval "head -n1 '$tdir/$RDMA_A' | grep -q '^device $RDMA_A ' &&
		head -n1 '$tdir/$RDMA_B' | grep -q '^device $RDMA_B '"

# 2. Lossless.
integrity_point "integrity, lossless" pass -n 2 -q 2 -s 256K -t 60
cat "$tdir/$RDMA_A" >"$dir/a1"
while IFS= read -r l; do ktap_info "A: $l"; done <"$dir/a1"
check "A's view of B: the connection is up" \
	test "$(field "$dir/a1" peer "$FABRIC_IP_B" state)" = up
npaths=$(grep -c '^path ' "$dir/a1")
# The module's `paths` parameter: 16 unless given at load (it is not in sysfs).
want=${METAROCE_PATHS:-16}
got=$(awk '$1 == "path" { printf "%s ", $2 }' "$dir/a1")
check "every path is listed, numbered from 0" test "$got" = "$(seq -s ' ' 0 $((want - 1))) "
p_sent=$(($(field "$dir/a1" peer "$FABRIC_IP_B" sent) + $(field "$dir/a1" peer "$FABRIC_IP_B" resent) +
	$(field "$dir/a1" peer "$FABRIC_IP_B" relocated)))
check "the paths' data packets add up to the peer's ($p_sent)" \
	test "$p_sent" -gt 0 -a "$(sum_paths "$dir/a1" sent)" = "$p_sent"
c_sent=$(stat "$NS_A" "$RDMA_A" sent_data_pkts)
check "the peer's first sends are A's port counter ($c_sent)" \
	test "$(field "$dir/a1" peer "$FABRIC_IP_B" sent)" = "$c_sent"

# Tracing (tracefs, wherever it is mounted).
tr=/sys/kernel/tracing
[ -e "$tr/events" ] || mount -t tracefs nodev "$tr" 2>/dev/null
[ -e "$tr/events" ] || tr=/sys/kernel/debug/tracing
# trace_on EVENT... / trace_off FILE: enable the events on an empty buffer /
# disable them all and save the buffer
trace_on() {
	local e
	echo 0 >"$tr/events/metaroce/enable" && : >"$tr/trace" || return 1
	for e in "$@"; do echo 1 >"$tr/events/metaroce/$e/enable" || return 1; done
}
trace_off() {
	echo 0 >"$tr/events/metaroce/enable"
	cat "$tr/trace" >"$1"
}
tracing=0
if [ -e "$tr/events" ]; then
	tracing=1
	[ -d "$tr/events/metaroce" ] || ktap_info "no events/metaroce in $tr: the tracepoints are missing"
fi

# 3. Loss on one path of B's (the client writes to A: B sends most data),
# its busiest: a second link joins the hosts, with netem loss at B's end,
# and a routing rule sends B's UDP packets from that path's source port
# over it (the module's route lookup gives the ports, as ECMP needs).
cat "$tdir/$RDMA_B" >"$dir/b1"
path=$(awk '$1 == "path" { for (i = 3; i < NF; i += 2) if ($i == "sent") print $2, $(i + 1) }' \
	"$dir/b1" | sort -k2 -n -r | head -n1 | cut -d' ' -f1)
sport=$(field "$dir/b1" path "$path" sport)
ktap_info "netem loss on B's path $path (UDP source port $sport) only"
setup_ok=0
[ -n "$path" ] && [ -n "$sport" ] && {
	ip link add lossyB netns "$NS_B" type veth peer name lossyA netns "$NS_A" &&
		ip -n "$NS_A" addr add 10.77.9.1/24 dev lossyA &&
		ip -n "$NS_B" addr add 10.77.9.2/24 dev lossyB &&
		ip -n "$NS_A" link set lossyA up && ip -n "$NS_B" link set lossyB up &&
		ip netns exec "$NS_A" sysctl -qw net.ipv4.conf.all.rp_filter=0 \
			net.ipv4.conf.lossyA.rp_filter=0 &&
		ip -n "$NS_B" route add "$FABRIC_IP_A/32" dev lossyB src "$FABRIC_IP_B" table 100 &&
		ip -n "$NS_B" rule add ipproto udp sport "$sport" table 100 prio 100 &&
		tc -n "$NS_B" qdisc add dev lossyB root netem loss 10% && setup_ok=1
}
[ "$setup_ok" = 1 ] || ktap_info "the one-path loss could not be set up"
[ "$tracing" = 1 ] && trace_on metaroce_resend
# Why 10% and event mode: every path's probe timer fires once or twice per
# run with nothing lost when ACKs come late (the known fault above), and a
# path whose losses meet such a timeout leaves the lossy port for a new one.
# At 30% with both programs busy-polling both vCPUs, the lossy path often
# left after 2-3 losses, level with the others' noise (one CI failure; in 12
# runs on Debian's kernel: another path's 20 against its 21, and 2 against
# 2). At 10% and with completion events, 12 runs there: the lossy path 2-25
# (9 of 12 at 10 or more), any other path at most 2.
integrity_point "integrity, 10% loss on one path" pass -e -n 4 -q 2 -s 256K -t 60
[ "$tracing" = 1 ] && trace_off "$dir/trace-resend"
tc -n "$NS_B" -s qdisc show dev lossyB >"$dir/tc" 2>&1
while IFS= read -r l; do ktap_info "tc: $l"; done <"$dir/tc"
dropped=$(awk '/dropped/ {
	for (i = 1; i < NF; i++) if ($i == "(dropped") { sub(/,/, "", $(i + 1)); print $(i + 1); exit } }' "$dir/tc")
# What netem let through ("Sent BYTES bytes PKTS pkt"): the port was used.
passed=$(awk '$1 == "Sent" && $5 == "pkt" { print $4; exit }' "$dir/tc")
ip -n "$NS_B" rule del prio 100 2>/dev/null
ip -n "$NS_B" link del lossyB 2>/dev/null
cat "$tdir/$RDMA_B" >"$dir/b2"
# Per path: the port it ends on, its estimate, and what rose over the run.
awk '$1 == "path" { for (i = 3; i < NF; i += 2) v[FILENAME == ARGV[1], $2, $i] = $(i + 1); n[$2] = 1 }
	END { for (p in n) { l = "B: path " p " sport " v[0, p, "sport"] " srtt_us " v[0, p, "srtt_us"]
		split("sent resent relocated timeouts moves", k, " ")
		for (j = 1; j <= 5; j++) l = l " " k[j] " +" (v[0, p, k[j]] - v[1, p, k[j]])
		print l } }' "$dir/b1" "$dir/b2" | sort -k3,3n | while IFS= read -r l; do ktap_info "$l"; done
# rise FIELD: per path, FIELD's rise over the run ("PATH RISE" lines)
rise() {
	awk -v k="$1" '$1 == "path" { for (i = 3; i < NF; i += 2) if ($i == k) {
		if (FILENAME == ARGV[1]) old[$2] = $(i + 1); else print $2, $(i + 1) - old[$2] } }' \
		"$dir/b1" "$dir/b2"
}
lossy_resent=$(rise resent | awk -v p="$path" '$1 == p { print $2 }')
lossy=$((lossy_resent + $(rise relocated | awk -v p="$path" '$1 == p { print $2 }')))
# Resends and moves per path over the run, the lossy path's left out.
rise resent >"$dir/rise-resent"
rise relocated >"$dir/rise-relocated"
most=$(awk -v p="$path" 'FNR == NR { r[$1] = $2; next } $1 != p && r[$1] + $2 > m { m = r[$1] + $2 }
	END { print m + 0 }' "$dir/rise-resent" "$dir/rise-relocated")
all=$(awk '{ s += $2 } END { print s + 0 }' "$dir/rise-resent" "$dir/rise-relocated")
ktap_info "netem dropped ${dropped:-?} packets with path $path's port; path $path resent or moved $lossy, another path at most $most, all paths $all"
# A path whose probes go unanswered moves to a new port, and may borrow a
# port another path proved: other paths can meet the lossy port too, so the
# losses are not all path $path's; it is hit first and most.
name="the lossy path resent or moved the most, or resent half what netem dropped on its port"
# Path moves before any loss (the lossless run; the devices are this
# script's own): in the debug kernel under TCG every path can time out and
# move with nothing lost, as the receiver's ACKs come further apart than the
# timers, and those moves and relocations can outnumber the lossy path's.
# That is a known fault (Documentation/performance.md, "Probes with nothing
# lost"), reported as TODO while the lossy path still resent something; with
# no such move, or nothing resent on the lossy path, this point must hold.
calm_moves=$(sum_paths "$dir/b1" moves)
ktap_info "the lossless run timed out $(sum_paths "$dir/b1" timeouts) probes, moved $calm_moves times and relocated $(sum_paths "$dir/b1" relocated) packets over all paths"
# The path can also leave the port after its first loss or two (a probe
# timeout with nothing lost meeting them): its count is then level with
# the others' noise (2 against 2 in 25 runs on Debian's kernel). When
# netem's drops still stand clear of that noise (more than twice another
# path's count), the path's own resends must answer for half of them
# (relocations, which any moving path makes, do not count there).
figures="path $path $lossy ($lossy_resent resent), another at most $most, netem dropped ${dropped:-?} and passed ${passed:-?}"
name2="the paths resent or moved at least half the packets netem dropped"
if [ "$setup_ok" != 1 ] || [ -z "$dropped" ] || [ "${passed:-0}" -eq 0 ]; then
	# No loss set up, or nothing sent on the port the telemetry names.
	ktap_fail "$name (no lossy port in use: $figures)"
	ktap_fail "$name2 (no lossy port in use)"
elif [ "$dropped" -eq 0 ]; then
	# The path left the port before netem dropped anything there: there is
	# no loss to find (seen as 1 drop in 3 of 25 runs; 0 never yet).
	ktap_skip "$name" "netem dropped nothing on path $path's port ($figures)"
	ktap_skip "$name2" "netem dropped nothing"
else
	if [ "$lossy" -gt 0 ] && [ "$lossy" -ge "$most" ]; then
		ktap_ok "$name"
	elif [ "$dropped" -gt $((2 * most)) ] && [ $((2 * lossy_resent)) -ge "$dropped" ]; then
		ktap_ok "$name"
	elif [ "$lossy" -gt 0 ] && [ "$calm_moves" -gt 0 ]; then
		ktap_todo "$name" "$figures; the lossless run already moved paths $calm_moves times"
	elif [ "$lossy" -gt 0 ] && [ "$dropped" -le $((2 * most)) ]; then
		ktap_skip "$name" "too few drops to tell the paths apart ($figures)"
	else
		ktap_fail "$name ($figures)"
	fi
	check "$name2 ($dropped)" test $((2 * all)) -ge "$dropped"
fi
if [ "$tracing" = 1 ]; then
	grep -m 3 "metaroce_resend: " "$dir/trace-resend" | while IFS= read -r l; do ktap_info "trace: $l"; done
	# Events per path of B's connection to A, against the telemetry's
	# resends per path: the same events, counted twice.
	grep -o "metaroce_resend: peer=::ffff:$FABRIC_IP_A path=[0-9]* " "$dir/trace-resend" |
		sed 's/.*path=//' | sort -n | uniq -c | awk '{ print $2, $1 }' >"$dir/trace-count"
	lost=$(field "$dir/b2" peer "$FABRIC_IP_A" trace_lost)
	diff=$(awk 'FNR == NR { t[$1] = $2; next } $2 != (t[$1] + 0) { printf "path %s: %d traced, %d counted; ", $1, t[$1], $2 }' \
		"$dir/trace-count" "$dir/rise-resent")
	ktap_info "metaroce_resend: $(tr '\n' ' ' <"$dir/trace-count")(path count); ${diff:-every path as counted}; ring overwrote ${lost:-?}"
	check "tracing metaroce_resend gives every path's resends, as the telemetry counts them" \
		test -s "$dir/trace-count" -a -z "$diff" -a "${lost:-1}" = 0
else
	ktap_skip "tracing metaroce_resend gives every path's resends" "no tracefs"
fi

# 4. The viewer, during traffic.
if [ -x "$viewer" ]; then
	# Not in the namespace: `ip netns exec` mounts a sysfs without debugfs.
	"$viewer" --json --count 5 --interval 2 --dev "$RDMA_A" \
		>"$dir/top.json" 2>"$dir/top.err" &
	vpid=$!
	integrity_point "integrity, while metaroce-top watches" pass -n 2 -q 2 -s 1M -t 60
	wait "$vpid"
	vrc=$?
	vpid=
	ktap_info "metaroce-top: rc $vrc, $(wc -l <"$dir/top.json") lines $(head -c 300 "$dir/top.err")"
	check "metaroce-top --json: one object per sample, with the peer and its paths" \
		python3 -c '
import json, sys
lines = [json.loads(l) for l in open(sys.argv[1])]
assert len(lines) == 5, len(lines)
for j in lines:
    assert j["device"] == sys.argv[2], j["device"]
    p = [p for p in j["peers"] if p["peer"] == sys.argv[3]][0]
    assert p["state"] == "up" and len(p["paths"]) == int(sys.argv[4]), p
    assert all("rates" in t and "srtt_us" in t for t in p["paths"]), p
' "$dir/top.json" "$RDMA_A" "$FABRIC_IP_B" "$npaths"
	# The highest rate after the first sample (whose rates are the counts
	# so far over one interval).
	rate=$(python3 -c '
import json, sys
js = [json.loads(l) for l in open(sys.argv[1])][1:]
print(max(sum(t["rates"]["sent"] + t["rates"]["rcvd"] for p in j["peers"] for t in p["paths"])
          for j in js))' "$dir/top.json" 2>/dev/null)
	ktap_info "samples 2 to 5: at most ${rate:-?} packets/s sent and received over the paths"
	check "metaroce-top sees the traffic (a positive rate)" \
		python3 -c 'import sys; sys.exit(0 if float(sys.argv[1]) > 0 else 1)' "${rate:-0}"
else
	ktap_skip "integrity, while metaroce-top watches" "$viewer is not built (cargo build in tools/viewer)"
	ktap_skip "metaroce-top --json" "$viewer is not built"
	ktap_skip "metaroce-top sees the traffic" "$viewer is not built"
fi

# 5. A QP failed by a wrong remote key (mr-negative's case 3).
neg=$top/tools/integrity/mr-negative
if [ "$tracing" = 1 ] && [ -x "$neg" ]; then
	trace_on metaroce_qp_error
	ip netns exec "$NS_A" timeout 120 "$neg" -d "$RDMA_A" -p 18790 >"$dir/neg-server" 2>&1 &
	spid=$!
	ip netns exec "$NS_B" timeout 120 "$neg" -d "$RDMA_B" -p 18790 -c 3 "$FABRIC_IP_A" \
		>"$dir/neg-client" 2>&1
	wait "$spid"
	trace_off "$dir/trace-qp"
	grep -m 4 "metaroce_qp_error: " "$dir/trace-qp" | while IFS= read -r l; do ktap_info "trace: $l"; done
	check "a QP failed by a wrong remote key raises metaroce_qp_error from RTS" \
		grep -q "metaroce_qp_error: peer=::ffff:$FABRIC_IP_A qpn=.* from_state=3" "$dir/trace-qp"
else
	ktap_skip "a QP failed by a wrong remote key raises metaroce_qp_error" "no tracefs or mr-negative"
fi
ktap_finish
