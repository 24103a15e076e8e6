#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Shared helpers for the metaroce selftests: KTAP output, network namespaces,
# waiting on asynchronous state. Sourced by each test script.

KSFT_PASS=0
KSFT_FAIL=1
KSFT_SKIP=4

__ktap_num=0
__ktap_failed=0
__ktap_skipped=0
__ktap_planned=0

# Every test runs in its own namespaces and leaves nothing behind.
NS_A=mrA-$$
NS_B=mrB-$$

ktap_plan() {
	__ktap_planned=$1
	echo "TAP version 13"
	echo "1..$1"
}

ktap_ok() {
	__ktap_num=$((__ktap_num + 1))
	echo "ok $__ktap_num $*"
}

ktap_fail() {
	__ktap_num=$((__ktap_num + 1))
	__ktap_failed=$((__ktap_failed + 1))
	echo "not ok $__ktap_num $*"
}

ktap_skip() {
	__ktap_num=$((__ktap_num + 1))
	__ktap_skipped=$((__ktap_skipped + 1))
	echo "ok $__ktap_num $1 # SKIP $2"
}

# Every line of the message is a comment (a second line starting "ok N"
# would otherwise be read as a test point).
ktap_info() {
	local l
	while IFS= read -r l; do
		echo "# $l"
	done <<<"$*"
}

# A known deviation of the reference (rdma_rxe): reported, not counted as a
# failure.
ktap_todo() {
	__ktap_num=$((__ktap_num + 1))
	echo "not ok $__ktap_num $1 # TODO $2"
}

# check NAME COMMAND...: one test point from a command's exit status.
check() {
	local name=$1
	shift
	if "$@"; then
		ktap_ok "$name"
	else
		ktap_fail "$name"
	fi
}

# Skip the whole script (exit code 4) when a prerequisite is missing.
skip_all() {
	echo "TAP version 13"
	echo "1..0 # SKIP $*"
	exit $KSFT_SKIP
}

ktap_finish() {
	if [ "$__ktap_num" -ne "$__ktap_planned" ]; then
		echo "# planned $__ktap_planned tests but ran $__ktap_num"
		exit $KSFT_FAIL
	fi
	if [ "$__ktap_failed" -gt 0 ]; then
		exit $KSFT_FAIL
	fi
	if [ "$__ktap_skipped" -eq "$__ktap_num" ] && [ "$__ktap_num" -gt 0 ]; then
		exit $KSFT_SKIP
	fi
	exit $KSFT_PASS
}

require_tools() {
	local t
	for t in "$@"; do
		command -v "$t" >/dev/null 2>&1 || skip_all "$t is not installed"
	done
}

require_module() {
	[ -d /sys/module/metaroce ] ||
		skip_all "metaroce is not loaded (insmod metaroce.ko first)"
}

# Two namespaces joined by veth0 (in A, 10.77.0.1) <-> veth1 (in B, 10.77.0.2).
netns_pair_up() {
	ip netns add "$NS_A" && ip netns add "$NS_B" || return 1
	ip link add veth0 netns "$NS_A" type veth peer name veth1 netns "$NS_B" || return 1
	ip -n "$NS_A" addr add 10.77.0.1/24 dev veth0
	ip -n "$NS_B" addr add 10.77.0.2/24 dev veth1
	ip -n "$NS_A" link set veth0 up
	ip -n "$NS_B" link set veth1 up
	# As on any host: traffic to the namespace's own address goes over lo.
	ip -n "$NS_A" link set lo up
	ip -n "$NS_B" link set lo up
}

netns_pair_down() {
	ip netns del "$NS_A" 2>/dev/null
	ip netns del "$NS_B" 2>/dev/null
	true
}

# kmsg_mark: writes a line unique to this test run into the kernel log;
# kmsg_since then prints the log from it on, and fails if it is gone (the
# buffer wrapped): a check of "no such line" must not pass on nothing.
kmsg_mark() {
	KMSG_MARK="metaroce-selftest: mark $(basename "$0") $$ $RANDOM"
	echo "$KMSG_MARK" >/dev/kmsg
}
kmsg_since() {
	dmesg | awk -v m="$KMSG_MARK" 'index($0, m) { on = 1 } on { print } END { exit !on }'
}

# pid_listening PID PORT: a TCP socket of PID's network namespace listens on
# PORT, read from /proc/PID/net/tcp and tcp6 in bash (no program started:
# under emulation each costs about 0.25 s, and this is polled).
pid_listening() {
	local f l hex
	printf -v hex '%04X' "$2"
	for f in /proc/"$1"/net/tcp /proc/"$1"/net/tcp6; do
		[ -r "$f" ] || continue
		while read -r l; do
			# local_address (hex port), rem_address, st: 0A is LISTEN
			[[ $l == *":$hex "*" 0A "* ]] && return 0
		done <"$f"
	done
	return 1
}

# wait_for SECONDS COMMAND...: poll until COMMAND succeeds.
wait_for() {
	local deadline=$((SECONDS + $1))
	shift
	while ! "$@" >/dev/null 2>&1; do
		[ $SECONDS -ge $deadline ] && return 1
		sleep 0.2
	done
}

ibdev_exists() {
	[ -e "/sys/class/infiniband/$1" ]
}

ibdev_gone() {
	! ibdev_exists "$1"
}

# rdma_in NS ARGS...: the rdma tool inside a namespace.
rdma_in() {
	local ns=$1
	shift
	ip netns exec "$ns" rdma "$@"
}

# Remove any MetaRoCE device this test created, even after a failure.
cleanup_links() {
	local d
	for d in "$@"; do
		ibdev_exists "$d" && rdma link delete "$d" 2>/dev/null
	done
	true
}

# roce_v2_index DEV GID: the index of GID's RoCE v2 entry in port 1's table
# (shell built-ins only: every program started costs about a second under
# emulation).
roce_v2_index() {
	local f g t
	for f in /sys/class/infiniband/"$1"/ports/1/gids/*; do
		read -r g 2>/dev/null <"$f" || continue
		[ "$g" = "$2" ] || continue
		read -r t 2>/dev/null \
			<"/sys/class/infiniband/$1/ports/1/gid_attrs/types/${f##*/}" || continue
		[ "$t" = "RoCE v2" ] && { echo "${f##*/}"; return 0; }
	done
	return 1
}
