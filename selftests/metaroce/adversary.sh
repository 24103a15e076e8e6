#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A hostile wire: while mr-integrity runs back to back between the
# namespaces, inject.py in each namespace sends to the other end, from the
# peer's own address (as any user on the peer host can, with a UDP socket),
# forged hellos claiming a restart (50 a second), garbage, truncated copies,
# copies of real datagrams with a header field set at random (stream, MSN,
# offset, length, rkey, PSN, ...) and stale replays, and garbage and copies
# from a stranger's address. Every integrity run must pass, no forged hello
# may be taken for a restart, strangers leave no trace, and the connections'
# drop counters show the forgeries were seen and refused.
#
#   ADVERSARY_RUNS=N   integrity runs under fire (default 4)

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
[ -x "$MR_INTEGRITY" ] ||
	skip_all "$MR_INTEGRITY is not built (make -C tools/integrity)"
. "$top/scripts/rdma-env.sh"
[ -n "${METAROCE_RDMA_PREFIX:-}" ] || skip_all "the rdma-core build is missing (make provider)"
require_tools ip rdma python3 dmesg
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

runs=${ADVERSARY_RUNS:-4}
STRANGER_A=10.77.0.13
STRANGER_B=10.77.0.14

ktap_plan $((runs + 7))
dir=$(mktemp -d)
ipids=()
trap 'kill "${ipids[@]}" 2>/dev/null; wait 2>/dev/null; rdma_fabric_down; rm -rf "$dir"' EXIT

fabric_point metaroce
kmsg_mark

# Each side gets a second address: the stranger its injector also sends from.
ip -n "$NS_A" addr add "$STRANGER_A/24" dev veth0
ip -n "$NS_B" addr add "$STRANGER_B/24" dev veth1

inject() { # NS IFACE SRC DST STRANGER NAME
	rm -f "$dir/$6" "$dir/$6.ready"
	ip netns exec "$1" python3 "$(dirname "$0")/inject.py" --iface "$2" \
		--src "$3" --dst "$4" --stranger "$5" --out "$dir/$6" &
	ipids+=($!)
	wait_for 20 test -e "$dir/$6.ready"
}
inject "$NS_B" veth1 "$FABRIC_IP_B" "$FABRIC_IP_A" "$STRANGER_B" toA
inject "$NS_A" veth0 "$FABRIC_IP_A" "$FABRIC_IP_B" "$STRANGER_A" toB

for i in $(seq 1 "$runs"); do
	integrity_point "integrity under injection, run $i of $runs" pass \
		-n 2 -q 2 -s 256K -t 60
done

kill -TERM "${ipids[@]}" 2>/dev/null
wait "${ipids[@]}" 2>/dev/null
ipids=()
for f in toA toB; do
	[ -s "$dir/$f" ] && ktap_info "injector $f: $(cat "$dir/$f")"
done
field() { sed -n "s/.* $2=\([0-9]*\).*/\1/p" "$dir/$1"; }
sent_all() {
	local f k
	for f in toA toB; do
		for k in hello garbage truncated mutate replay stranger; do
			[ "$(field $f $k)" -gt 0 ] 2>/dev/null || return 1
		done
	done
}
check "the injectors sent every kind of forgery, both ways" sent_all

log=$dir/dmesg
check "the kernel log holds this run's lines (its start mark)" \
	eval 'kmsg_since >"$log"'
# Only this test's devices: other tests may run beside it.
ours=": \\($RDMA_A\\|$RDMA_B\\): peer "
check "no forged hello was taken for a peer restart" \
	bash -c "! grep -q '$ours.* restarted' '$log'"
check "no peer went silent under injection" \
	bash -c "! grep -q '$ours.* silent for' '$log'"

# The per-peer counters are logged when a device goes away.
A_DEV=$RDMA_A B_DEV=$RDMA_B
cleanup_links "$RDMA_A" "$RDMA_B"
RDMA_A= RDMA_B=
kmsg_since >"$log"
grep "$ours" "$log" | while IFS= read -r l; do ktap_info "${l#*] }"; done
dropped() { # DEVICE PEER: the drop count of DEVICE's connection to PEER
	sed -n "s/.*: $1: peer $2: .* \([0-9][0-9]*\) dropped.*/\1/p" "$log" | tail -n 1
}
counted() {
	[ "$(dropped "$A_DEV" "$FABRIC_IP_B")" -gt 0 ] 2>/dev/null &&
		[ "$(dropped "$B_DEV" "$FABRIC_IP_A")" -gt 0 ] 2>/dev/null
}
check "both connections counted forged datagrams as dropped" counted
check "strangers left no connection behind" \
	bash -c "! grep -q 'peer $STRANGER_A\|peer $STRANGER_B' '$log'"
ktap_finish
