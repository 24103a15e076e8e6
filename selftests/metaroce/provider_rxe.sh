#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# The user-space side: Debian's unmodified verbs programs run on the rdma-core
# 65.0 that scripts/build-rdma-core.sh built into the cache (libibverbs and
# every provider of that release, metaroce's included), loaded through
# scripts/rdma-env.sh. rxe's provider from that build carries an RC ping-pong
# between two namespaces; a MetaRoCE device, when the module is loaded and
# exposes a uverbs device, must be claimed by the metaroce provider.
#
# Skips when the prefix is missing (make provider). Loads rdma_rxe with
# modprobe, or from $RXE_KO when set. METAROCE_RDMA_PREFIX may name the prefix
# (saves hashing the tree, which costs seconds under emulation).

. "$(dirname "$0")/lib.sh"

top=$(cd "$(dirname "$0")/../.." && pwd)
envsh="$top/scripts/rdma-env.sh"

require_tools ip rdma ibv_devices ibv_devinfo ibv_rc_pingpong ib_write_bw rping

prefix=${METAROCE_RDMA_PREFIX:-$("$top/scripts/build-rdma-core.sh" --prefix 2>/dev/null)}
[ -n "$prefix" ] && [ -e "$prefix/lib/libibverbs.so.1" ] ||
	skip_all "no rdma-core prefix (make provider)"
export METAROCE_RDMA_PREFIX="$prefix"

if [ ! -d /sys/module/rdma_rxe ]; then
	if [ -n "$RXE_KO" ]; then
		insmod "$RXE_KO" 2>/dev/null || skip_all "cannot insmod $RXE_KO"
	else
		modprobe rdma_rxe 2>/dev/null || skip_all "rdma_rxe is not available"
	fi
fi

tmp=$(mktemp -d)
server=
cleanup() {
	[ -n "$server" ] && kill "$server" 2>/dev/null
	cleanup_links rxep0 rxep1 mrp0
	netns_pair_down
	rm -rf "$tmp"
}
trap cleanup EXIT

# info TEXT: a diagnostic, one "# " line per line of TEXT.
info() {
	local l
	while IFS= read -r l; do
		ktap_info "$l"
	done <<<"$1"
}

ktap_plan 15
ktap_info "prefix: $prefix"
netns_pair_up || { ktap_info "cannot build the namespaces"; exit $KSFT_FAIL; }

check "rxe device on veth0 (namespace A)" \
	rdma_in "$NS_A" link add rxep0 type rxe netdev veth0
check "rxe device on veth1 (namespace B)" \
	rdma_in "$NS_B" link add rxep1 type rxe netdev veth1

# RoCE GIDs of 10.77.0.1 and 10.77.0.2 are ::ffff:10.77.0.x.
gid_a=0000:0000:0000:0000:0000:ffff:0a4d:0001
gid_b=0000:0000:0000:0000:0000:ffff:0a4d:0002
check "rxep0 has a RoCE v2 GID for 10.77.0.1" wait_for 10 roce_v2_index rxep0 "$gid_a"
check "rxep1 has a RoCE v2 GID for 10.77.0.2" wait_for 10 roce_v2_index rxep1 "$gid_b"
idx_a=$(roce_v2_index rxep0 "$gid_a")
idx_b=$(roce_v2_index rxep1 "$gid_b")
ktap_info "GID index: rxep0 $idx_a, rxep1 $idx_b"

# The loader's own account of which files it loads.
out=$(LD_DEBUG=libs "$envsh" ibv_devices 2>&1)
info "$(grep -v '^ *[0-9]*:' <<<"$out")"
check "ibv_devices loads libibverbs from the prefix" \
	grep -q "calling init: $prefix/lib/libibverbs.so.1\$" <<<"$out"
check "ibv_devices loads rxe's provider from the prefix" \
	grep -q "calling init: $prefix/lib/libibverbs/librxe-rdmav65.so\$" <<<"$out"
check "ibv_devices lists rxep0 and rxep1" eval \
	'grep -Eq "^ +rxep0 " <<<"$out" && grep -Eq "^ +rxep1 " <<<"$out"'

# ibv_devinfo (rdma-core 44) binds ibv_query_gid_type@IBVERBS_PRIVATE_34.
out=$("$envsh" ibv_devinfo -v -d rxep0 2>&1)
rc=$?
info "ibv_devinfo -v -d rxep0 -> rc $rc: $(grep -E 'state:|GID\[ *'"$idx_a"'\]' <<<"$out")"
check "ibv_devinfo -v: port active, IPv4 RoCE v2 GID" eval \
	'[ $rc -eq 0 ] && grep -q "PORT_ACTIVE" <<<"$out" &&
	 grep -Eq "GID\[ *$idx_a\]:.*10\.77\.0\.1, RoCE v2" <<<"$out"'

# run_pair NAME PORT SERVER_CMD -- CLIENT_CMD: server in A, client in B;
# PORT is the server's TCP port (empty: rdma_cm, give it a few seconds).
run_pair() {
	local name=$1 port=$2 scmd=() ccmd=()
	shift 2
	while [ "$1" != -- ]; do scmd+=("$1"); shift; done
	shift
	ccmd=("$@")
	ip netns exec "$NS_A" timeout 120 "$envsh" "${scmd[@]}" \
		>"$tmp/$name.server" 2>&1 &
	server=$!
	if [ -n "$port" ]; then
		wait_for 60 pid_listening "$server" "$port" ||
			echo "the server never listened" >>"$tmp/$name.server"
	else
		sleep 5
	fi
	ip netns exec "$NS_B" timeout 90 "$envsh" "${ccmd[@]}" \
		>"$tmp/$name.client" 2>&1
	crc=$?
	wait "$server"
	src=$?
	server=
	info "$name client (rc $crc): $(tail -n 8 "$tmp/$name.client")"
	info "$name server (rc $src): $(tail -n 8 "$tmp/$name.server")"
}

# RC ping-pong over the veth pair: rxe's provider (65) on both ends. -e waits
# on the completion channel: two busy-polling processes on the guest's two
# vCPUs starve rxe's kernel work when the host is loaded.
run_pair ibv_rc_pingpong 18515 ibv_rc_pingpong -d rxep0 -g "$idx_a" -n 100 -e \
	-- ibv_rc_pingpong -d rxep1 -g "$idx_b" -n 100 -e 10.77.0.1
check "ibv_rc_pingpong client completes" eval \
	'[ $crc -eq 0 ] && grep -q "100 iters in" "$tmp/ibv_rc_pingpong.client"'
check "ibv_rc_pingpong server completes" eval \
	'[ $src -eq 0 ] && grep -q "100 iters in" "$tmp/ibv_rc_pingpong.server"'

# perftest links libmlx5.so.1 and libefa.so.1 too: the prefix's (65) load.
run_pair ib_write_bw 18515 ib_write_bw -d rxep0 -x "$idx_a" -n 100 -s 4096 -F \
	-- ib_write_bw -d rxep1 -x "$idx_b" -n 100 -s 4096 -F 10.77.0.1
check "ib_write_bw client completes" eval '[ $crc -eq 0 ]'
check "ib_write_bw server completes" eval '[ $src -eq 0 ]'

# rping: librdmacm from the prefix, connection set up by the RDMA CM.
run_pair rping "" rping -s -v -a 10.77.0.1 -C 5 \
	-- rping -c -v -a 10.77.0.1 -C 5
check "rping client completes" eval \
	'[ $crc -eq 0 ] && grep -q "ping data: rdma-ping-4" "$tmp/rping.client"'
check "rping server completes" eval '[ $src -eq 0 ]'

# A MetaRoCE device is ours to claim once the module exposes it to uverbs.
# (The rxe devices go first: both would bind UDP port 4791 on veth0.)
cleanup_links rxep0 rxep1
mr_uverbs() {
	local d n
	for d in /sys/class/infiniband_verbs/uverbs*; do
		read -r n 2>/dev/null <"$d/ibdev" && [ "$n" = mrp0 ] && return 0
	done
	return 1
}
if [ ! -d /sys/module/metaroce ]; then
	ktap_skip "the metaroce provider claims a MetaRoCE device" "metaroce is not loaded"
elif ! rdma_in "$NS_A" link add mrp0 type metaroce netdev veth0; then
	ktap_fail "the metaroce provider claims a MetaRoCE device (link add failed)"
elif ! mr_uverbs; then
	ktap_skip "the metaroce provider claims a MetaRoCE device" \
		"mrp0 has no uverbs device yet"
else
	out=$("$envsh" ibv_devices 2>&1)
	info "$out"
	check "the metaroce provider claims a MetaRoCE device" \
		grep -Eq "^ +mrp0 " <<<"$out"
fi

ktap_finish
