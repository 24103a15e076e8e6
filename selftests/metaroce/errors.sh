#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Bad requests get a clear error and change nothing.

. "$(dirname "$0")/lib.sh"

require_tools ip rdma
require_module

trap 'cleanup_links mrt0 mrt1 mrt2; netns_pair_down' EXIT

ndevs() { ls /sys/class/infiniband 2>/dev/null | wc -l; }

# expect_error NAME ERRNO-TEXT ARGS...: `rdma ARGS` must fail saying ERRNO-TEXT.
expect_error() {
	local name=$1 text=$2 out rc
	shift 2
	out=$("$@" 2>&1)
	rc=$?
	ktap_info "$* -> rc $rc: $out"
	if [ $rc -ne 0 ] && grep -qi "$text" <<<"$out"; then
		ktap_ok "$name"
	else
		ktap_fail "$name"
	fi
}

ktap_plan 8
netns_pair_up || { ktap_info "cannot build the namespaces"; exit $KSFT_FAIL; }

before=$(ndevs)
expect_error "unknown net device is refused" "No such device" \
	rdma_in "$NS_A" link add mrt0 type metaroce netdev nosuchdev0
check "no device was created for it" test "$(ndevs)" = "$before"

check "first device on veth0" rdma_in "$NS_A" link add mrt0 type metaroce netdev veth0
expect_error "second device on the same net device is refused" "File exists" \
	rdma_in "$NS_A" link add mrt1 type metaroce netdev veth0
check "mrt1 was not created" ibdev_gone mrt1

expect_error "a name in use is refused" "File exists" \
	rdma_in "$NS_B" link add mrt0 type metaroce netdev veth1
check "mrt0 still belongs to veth0" \
	grep -q "netdev veth0" <<<"$(rdma_in "$NS_A" link show mrt0/1)"

# After the refusals the net device is still free for a correct request.
check "veth1 still accepts a device" rdma_in "$NS_B" link add mrt2 type metaroce netdev veth1

ktap_finish
