#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# PID 1 of the test VM (see scripts/vm-run.sh): mount the basics, run the
# command from the kernel command line, power off.
#
# Under emulation every dynamically linked program costs about a second to
# start over 9p, so set-up uses the static busybox and shell built-ins.
export PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export HOME=/root TERM=${TERM:-linux}
bb=/bin/busybox

$bb mount -t proc proc /proc
$bb mount -t sysfs sysfs /sys
$bb mount -t devtmpfs devtmpfs /dev 2>/dev/null
$bb mkdir -p /dev/pts /dev/shm /dev/.hostroot
$bb mount -t devpts devpts /dev/pts
# Keep a view of the host's root: the writable tmpfs below may hide the
# checkout (a clone under /tmp, say), which is then bound back in place.
$bb mount -o bind / /dev/.hostroot
for d in /dev/shm /run /tmp /var/tmp /mnt; do
	$bb mount -t tmpfs tmpfs $d 2>/dev/null
done
$bb mount -t debugfs debugfs /sys/kernel/debug 2>/dev/null
# `ip netns` keeps its namespaces under /run/netns.
$bb mkdir -p /run/netns

read -r cmdline </proc/cmdline
rwdir= cmd= cwd=
for word in $cmdline; do
	case "$word" in
	mrvm.rwdir=*) rwdir=${word#*=} ;;
	mrvm.cmd=*) cmd=$(echo "${word#*=}" | $bb base64 -d) ;;
	mrvm.cwd=*) cwd=${word#*=} ;;
	esac
done

if [ -n "$cwd" ] && [ ! -d "$cwd" ]; then
	$bb mkdir -p "$cwd"
	$bb mount -o bind "/dev/.hostroot$cwd" "$cwd"
fi

# The read-write share appears at its host path, over the read-only root.
if [ -n "$rwdir" ]; then
	$bb mkdir -p /mnt/rw "$rwdir" 2>/dev/null
	$bb mount -t 9p -o trans=virtio,version=9p2000.L,msize=512000,access=any rwdir /mnt/rw
	$bb mount -o bind /mnt/rw "$rwdir" ||
		echo "guest-init: cannot mount $rwdir (does it exist on the host?)"
fi

$bb ip link set lo up
$bb hostname metaroce-vm
cd "${cwd:-/}" || cd /

if [ -n "$cmd" ]; then
	echo "guest-init: running: $cmd"
	bash -c "$cmd"
	echo "guest-init: command exited with $?"
else
	$bb setsid bash -il </dev/ttyS0 >/dev/ttyS0 2>&1
fi

echo "guest-init: powering off"
$bb poweroff -f
$bb sleep 60
