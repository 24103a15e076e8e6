#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# A small RDMA fabric for the tests that move data: two namespaces joined by
# veth (lib.sh's netns_pair_up) with an RDMA device of one type on each end.
# The same set-up serves soft-RoCE (rxe) and MetaRoCE (metaroce) devices.
# Source lib.sh first.
#
#   rdma_type_load TYPE   make TYPE's module present (rxe: $RXE_KO or modprobe;
#                         metaroce: $METAROCE_KO or already loaded); 1 if not
#   rdma_fabric_up TYPE   NS_A: veth0 $FABRIC_IP_A, device $RDMA_A
#                         NS_B: veth1 $FABRIC_IP_B, device $RDMA_B
#                         returns once both ports are ACTIVE and each device
#                         has its IPv4 address as a RoCE GID
#   rdma_fabric_down      delete the devices and the namespaces
#   netem_both ARGS...    the same netem qdisc on veth0 and veth1, i.e. on
#                         both directions ("loss 1%", "delay 1ms reorder 25%")
#   netem_clear           remove it again
#   integrity_point NAME EXPECT ARGS...
#                         one test point: tools/integrity/mr-integrity's server
#                         on $RDMA_A, its client on $RDMA_B, ARGS to both;
#                         EXPECT is "pass" or "fail" (a run with -X must fail)

FABRIC_IP_A=10.77.0.1
FABRIC_IP_B=10.77.0.2
RDMA_A=
RDMA_B=

rdma_type_load() {
	case "$1" in
	rxe)
		[ -d /sys/module/rdma_rxe ] && return 0
		if [ -n "$RXE_KO" ]; then
			insmod "$RXE_KO" 2>/dev/null
		else
			modprobe rdma_rxe 2>/dev/null
		fi
		[ -d /sys/module/rdma_rxe ]
		;;
	metaroce)
		[ -d /sys/module/metaroce ] && return 0
		[ -n "$METAROCE_KO" ] && insmod "$METAROCE_KO" 2>/dev/null
		[ -d /sys/module/metaroce ]
		;;
	*)
		echo "rdma_type_load: unknown device type '$1'" >&2
		return 1
		;;
	esac
}

# The sysfs spelling of the RoCE GID of an IPv4 address:
# 10.77.0.1 -> 0000:0000:0000:0000:0000:ffff:0a4d:0001
fabric_gid_of() {
	local IFS=.
	# shellcheck disable=SC2086
	set -- $1
	printf '0000:0000:0000:0000:0000:ffff:%02x%02x:%02x%02x' "$1" "$2" "$3" "$4"
}

# fabric_gid_index DEV IP: the GID table index of IP's RoCE v2 GID (for -g/-x).
fabric_gid_index() {
	roce_v2_index "$1" "$(fabric_gid_of "$2")"
}

# fabric_dev_ready DEV IP: port 1 ACTIVE and IP's GID in the table.
fabric_dev_ready() {
	local dev=/sys/class/infiniband/$1/ports/1 gid
	gid=$(fabric_gid_of "$2")
	grep -q ACTIVE "$dev/state" 2>/dev/null &&
		grep -qx "$gid" "$dev"/gids/* 2>/dev/null
}

rdma_fabric_up() {
	local type=$1
	RDMA_A="${type}A$$"
	RDMA_B="${type}B$$"
	netns_pair_up || return 1
	rdma_in "$NS_A" link add "$RDMA_A" type "$type" netdev veth0 || return 1
	rdma_in "$NS_B" link add "$RDMA_B" type "$type" netdev veth1 || return 1
	wait_for 20 fabric_dev_ready "$RDMA_A" "$FABRIC_IP_A" || {
		echo "rdma_fabric_up: $RDMA_A did not become ready" >&2
		return 1
	}
	wait_for 20 fabric_dev_ready "$RDMA_B" "$FABRIC_IP_B" || {
		echo "rdma_fabric_up: $RDMA_B did not become ready" >&2
		return 1
	}
}

rdma_fabric_down() {
	[ -n "$RDMA_A" ] && cleanup_links "$RDMA_A" "$RDMA_B"
	netns_pair_down
}

netem_both() {
	ip -n "$NS_A" link show veth0 >/dev/null 2>&1 || return 1
	tc -n "$NS_A" qdisc replace dev veth0 root netem "$@" &&
		tc -n "$NS_B" qdisc replace dev veth1 root netem "$@"
}

netem_clear() {
	tc -n "$NS_A" qdisc del dev veth0 root 2>/dev/null
	tc -n "$NS_B" qdisc del dev veth1 root 2>/dev/null
	true
}

MR_INTEGRITY=${MR_INTEGRITY:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)/tools/integrity/mr-integrity}
__integrity_port=18600

__integrity_show() {
	local l
	while IFS= read -r l; do ktap_info "$1: $l"; done
}

integrity_point() {
	local name=$1 expect=$2 t0=$SECONDS src crc spid ok=0 dir
	shift 2
	dir=$(mktemp -d)
	__integrity_port=$((__integrity_port + 1))
	ip netns exec "$NS_A" timeout 280 "$MR_INTEGRITY" -d "$RDMA_A" \
		-p "$__integrity_port" "$@" >"$dir/server" 2>&1 &
	spid=$!
	ip netns exec "$NS_B" timeout 280 "$MR_INTEGRITY" -d "$RDMA_B" \
		-p "$__integrity_port" "$@" "$FABRIC_IP_A" >"$dir/client" 2>&1
	crc=$?
	wait "$spid"
	src=$?
	ktap_info "$name: $((SECONDS - t0)) s, client rc $crc, server rc $src"
	grep -h "PASS" "$dir/client" | __integrity_show client
	if [ "$expect" = pass ]; then
		[ "$crc" -eq 0 ] && [ "$src" -eq 0 ] &&
			grep -q "^mr-integrity: PASS" "$dir/client" &&
			grep -q "^mr-integrity: PASS" "$dir/server" && ok=1
	else
		# both sides fail, and one of them says which byte
		[ "$crc" -eq 1 ] && [ "$src" -eq 1 ] &&
			grep -q "FAIL qp=.*byte\|FAIL qp=.*value" \
				"$dir/client" "$dir/server" && ok=1
	fi
	if [ "$ok" = 0 ] || [ "$expect" != pass ]; then
		grep -h "FAIL\|note" "$dir/client" | head -n 8 | __integrity_show client
		grep -h "FAIL\|note" "$dir/server" | head -n 8 | __integrity_show server
	fi
	rm -rf "$dir"
	if [ "$ok" = 1 ]; then
		ktap_ok "$name"
	else
		ktap_fail "$name"
	fi
}
