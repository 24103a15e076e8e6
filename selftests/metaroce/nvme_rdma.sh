#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# NVMe over Fabrics with the RDMA transport: a kernel consumer nobody here
# wrote. The target (nvmet, nvmet-rdma) exports a file-backed namespace on the
# device's address; the host (nvme-rdma, connected with nvme-cli) reaches it
# through the same device (both kernel sides bind in the initial network
# namespace, so this runs over loopback, as blktests runs NVMe-oF on
# rdma_rxe). The host registers each I/O's pages with fast registration
# (alloc_mr, map_mr_sg, REG_MR), the target moves the data with RDMA Read
# and Write and answers with Send with Invalidate.
# Points per type: the device, the target's port, the connection, 8 MiB
# written with O_DIRECT and read back identical (and identical in the
# target's file), the same under 1% loss on the loopback device (MetaRoCE
# must have resent packets; rdma_rxe's loopback never reaches the wire),
# disconnect, and the target removed; then one point: the modules this test
# loaded are unloaded. rdma_rxe runs the same points in the same boot where
# METAROCE_TYPES lists it (make check-stock). It works in the initial
# namespace (netem on its lo, modules loaded and unloaded): it runs alone
# (run_alone).
#
# Needs nvme-cli, configfs, and nvme-rdma, nvmet and nvmet-rdma (modules:
# modprobe, or insmod from the kernel build tree $METAROCE_KDIR).

. "$(dirname "$0")/lib.sh"
. "$(dirname "$0")/lib_netns.sh"

require_tools ip rdma nvme dd cmp truncate modprobe tc
rdma_type_load metaroce || skip_all "metaroce.ko is not loaded"

# nvme_modules_load: the host and target modules, from the module tree or,
# failing that, from the kernel build tree (make check's debug kernel has
# no /lib/modules tree), in dependency order (each round loads what it can).
nvme_modules_load() {
	modprobe -a nvme-rdma nvmet-rdma 2>/dev/null && return 0
	[ -n "${METAROCE_KDIR:-}" ] || return 1
	local kos ko left
	# (no process substitution: the guest has no /dev/fd)
	kos=$(find "$METAROCE_KDIR/drivers/nvme" -name '*.ko' 2>/dev/null)
	[ -n "$kos" ] || return 1
	for _ in 1 2 3 4 5; do
		left=0
		for ko in $kos; do
			[ -d "/sys/module/$(basename "$ko" .ko | tr - _)" ] && continue
			insmod "$ko" 2>/dev/null || left=$((left + 1))
		done
		[ "$left" = 0 ] && break
	done
	[ -d /sys/module/nvme_rdma ] && [ -d /sys/module/nvmet_rdma ]
}

# nvme_modules_unload: the modules this test loaded (not in $mods_before),
# dependents first (a few rounds); fails if one stays.
nvme_modules_unload() {
	local m left
	for _ in 1 2 3 4 5; do
		left=0
		for m in $(ls /sys/module); do
			case $m in nvme* | nvmet*) ;; *) continue ;; esac
			[[ " $mods_before " == *" $m "* ]] && continue
			rmmod "$m" 2>/dev/null || left=$((left + 1))
		done
		[ "$left" = 0 ] && return 0
	done
	return 1
}

mods_before=" $(ls /sys/module | tr '\n' ' ') "
work=$(mktemp -d /dev/shm/nvme_rdma.XXXXXX 2>/dev/null || mktemp -d)
veth=nvm$$
lo_netem=0
cur_dev=
cur_nqn=
cur_port=
trap 'teardown; nvme_modules_unload; rm -rf "$work"' EXIT
nvme_modules_load || skip_all "nvme-rdma and nvmet-rdma are not available"
cfs=/sys/kernel/config
[ -d "$cfs/nvmet" ] || mount -t configfs none "$cfs" 2>/dev/null
[ -d "$cfs/nvmet" ] || skip_all "no $cfs/nvmet (configfs)"

n=7
ktap_plan $((n * $(fabric_types) + 1))
ip4=10.213.$(($$ % 200)).1
hostnqn=nqn.2026-12.org.metaroce:host-$$

target_down() {
	[ -n "$cur_nqn" ] || return 0
	rm -f "$cfs/nvmet/ports/$cur_port/subsystems/$cur_nqn" 2>/dev/null
	rmdir "$cfs/nvmet/ports/$cur_port" 2>/dev/null
	echo 0 2>/dev/null >"$cfs/nvmet/subsystems/$cur_nqn/namespaces/1/enable"
	rmdir "$cfs/nvmet/subsystems/$cur_nqn/namespaces/1" 2>/dev/null
	rmdir "$cfs/nvmet/subsystems/$cur_nqn" 2>/dev/null
	! [ -e "$cfs/nvmet/subsystems/$cur_nqn" ]
}

teardown() {
	[ -n "$cur_nqn" ] && nvme disconnect -n "$cur_nqn" >/dev/null 2>&1
	target_down
	[ "$lo_netem" = 1 ] && tc qdisc del dev lo root 2>/dev/null
	lo_netem=0
	[ -n "$cur_dev" ] && rdma link delete "$cur_dev" 2>/dev/null
	ip link del "$veth" 2>/dev/null
	cur_dev= cur_nqn=
}

# host_disk NQN: the host's block device of subsystem NQN's namespace. Its
# "device" is the controller, or with native multipath (Debian's kernel) the
# subsystem; both name the NQN. The hidden per-path devices (nvmeXcYnZ)
# have no /dev node and are skipped.
host_disk() {
	local b n
	for b in /sys/block/nvme*n*; do
		n=${b##*/}
		case $n in *c*) continue ;; esac
		[ "$(cat "$b/device/subsysnqn" 2>/dev/null)" = "$1" ] && [ -b "/dev/$n" ] &&
			{ echo "/dev/$n"; return 0; }
	done
	return 1
}

# resent DEV: the device's resent_pkts counter (0 if it has none).
resent() {
	rdma statistic show link "$1/1" 2>/dev/null |
		awk '{ for (i = 1; i < NF; i++) if ($i == "resent_pkts") { print $(i + 1); exit } }' |
		grep . || echo 0
}

# roundtrip DISK: 8 MiB of fresh random bytes written to DISK with O_DIRECT
# (so every byte crosses the fabric), read back, and compared, and compared
# with the target's file too; says what failed.
roundtrip() {
	local disk=$1
	head -c $((8 << 20)) /dev/urandom >"$work/src"
	if dd if="$work/src" of="$disk" bs=1M count=8 oflag=direct status=none 2>"$work/dd.err" &&
		dd if="$disk" of="$work/back" bs=1M count=8 iflag=direct status=none 2>>"$work/dd.err" &&
		cmp -s "$work/src" "$work/back" &&
		cmp -s -n $((8 << 20)) "$work/src" "$work/img"; then
		return 0
	fi
	while IFS= read -r l; do ktap_info "dd: $l"; done <"$work/dd.err"
	ktap_info "the bytes read back, or the target's file, differ from those written"
	return 1
}

type_points() {
	local t=$1 svc=$((4420 + $$ % 1000)) disk= i
	cur_dev=${t}nv$$
	cur_nqn=nqn.2026-12.org.metaroce:$t-$$
	cur_port=$(($$ % 60000 + 1))
	ip link add "$veth" type veth peer name "${veth}p" &&
		ip addr add "$ip4/24" dev "$veth" &&
		ip link set "$veth" up && ip link set "${veth}p" up &&
		rdma link add "$cur_dev" type "$t" netdev "$veth" &&
		wait_for 20 fabric_dev_ready "$cur_dev" "$ip4"
	check "$t: device $cur_dev on $veth ($ip4) in the initial namespace" test $? = 0

	truncate -s 32M "$work/img"
	local s=$cfs/nvmet/subsystems/$cur_nqn p=$cfs/nvmet/ports/$cur_port
	mkdir "$s" && echo 1 >"$s/attr_allow_any_host" &&
		mkdir "$s/namespaces/1" &&
		echo -n "$work/img" >"$s/namespaces/1/device_path" &&
		echo 1 >"$s/namespaces/1/enable" &&
		mkdir "$p" && echo rdma >"$p/addr_trtype" && echo ipv4 >"$p/addr_adrfam" &&
		echo "$ip4" >"$p/addr_traddr" && echo "$svc" >"$p/addr_trsvcid" &&
		ln -s "$s" "$p/subsystems/$cur_nqn"
	check "$t: nvmet-rdma exports a 32 MiB file on $ip4:$svc" test $? = 0

	if nvme connect -t rdma -a "$ip4" -s "$svc" -n "$cur_nqn" -q "$hostnqn" \
		-i 2 >"$work/connect.log" 2>&1; then
		for i in $(seq 1 100); do
			disk=$(host_disk "$cur_nqn") && [ -b "$disk" ] && break
			disk=
			sleep 0.2
		done
	fi
	if [ -n "$disk" ]; then
		ktap_ok "$t: nvme connect -t rdma: $disk"
	else
		while IFS= read -r l; do ktap_info "nvme connect: $l"; done <"$work/connect.log"
		dmesg | grep -iE "nvme|metaroce" | tail -8 | while IFS= read -r l; do ktap_info "$l"; done
		ktap_fail "$t: nvme connect -t rdma"
		for i in 4 5 6; do ktap_skip "$t: point $i" "not connected"; done
		# (a controller that did connect goes before its target)
		nvme disconnect -n "$cur_nqn" >/dev/null 2>&1
		check "$t: target removed" target_down
		teardown
		return
	fi
	check "$t: 8 MiB written (O_DIRECT), read back and in the target's file, identical" \
		roundtrip "$disk"
	# MetaRoCE must have resent what was lost (else the loss did not
	# reach its traffic and the point proves nothing).
	local name="$t: the same under 1% loss on the loopback device" before after rc
	before=$(resent "$cur_dev")
	if tc qdisc add dev lo root netem loss 1%; then
		lo_netem=1
		roundtrip "$disk"
		rc=$?
		tc qdisc del dev lo root 2>/dev/null
		lo_netem=0
		after=$(resent "$cur_dev")
		[ "$t" = metaroce ] && ktap_info "$t: $((after - before)) packets resent under loss"
		if [ "$t" = metaroce ] && [ "$rc" = 0 ] && ! [ "$after" -gt "$before" ]; then
			ktap_info "$t: no packet was resent: the loss did not reach the device's traffic"
			rc=1
		fi
		check "$name" test "$rc" = 0
	else
		ktap_fail "$name (tc qdisc add dev lo root netem failed)"
	fi
	check "$t: nvme disconnect" eval "nvme disconnect -n $cur_nqn >/dev/null 2>&1 && ! host_disk $cur_nqn >/dev/null"
	check "$t: target removed" target_down
	teardown
}

for t in $FABRIC_TYPES; do
	if [ "$t" = rxe ] && ! rdma_type_load rxe; then
		for _ in $(seq 1 $n); do ktap_skip "rxe: point" "rdma_rxe is not available"; done
		continue
	fi
	type_points "$t"
done
check "nvme host and target modules unloaded" nvme_modules_unload
ktap_finish
