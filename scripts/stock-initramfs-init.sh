#!/bin/busybox sh
# SPDX-License-Identifier: GPL-2.0
# /init of the small initramfs that scripts/check-stock.sh gives Debian's stock
# kernel. That kernel has 9p as modules, so the host's root (shared over 9p, as
# scripts/vm-run.sh does for the test kernel) cannot be its root device: load
# the modules listed in /modules/order, mount the root read-only, and hand over
# to the init= of the kernel command line (scripts/guest-init.sh).
#
# With mrvm.modules=DIR on the command line, DIR (a host path) becomes the
# guest's /lib/modules/$(uname -r): the read-only /usr/lib gets a tmpfs overlay
# in which that directory can be made.
bb=/bin/busybox
$bb mount -t proc proc /proc
$bb mount -t devtmpfs devtmpfs /dev

for m in $($bb cat /modules/order); do
	$bb insmod "/modules/$m" || echo "initramfs: insmod $m failed"
done

init=/sbin/init
modules=
flags=trans=virtio,version=9p2000.L
for word in $($bb cat /proc/cmdline); do
	case "$word" in
	init=*) init=${word#init=} ;;
	rootflags=*) flags=${word#rootflags=} ;;
	mrvm.modules=*) modules=${word#mrvm.modules=} ;;
	esac
done

$bb mkdir -p /newroot
if ! $bb mount -t 9p -o "ro,$flags" /dev/root /newroot; then
	echo "initramfs: cannot mount the 9p root; powering off"
	$bb poweroff -f
fi
if [ -n "$modules" ]; then
	rel=$($bb uname -r)
	$bb mkdir -p /rw
	$bb mount -t tmpfs tmpfs /rw
	$bb mkdir -p /rw/upper /rw/work
	$bb mount -t overlay overlay \
		-o lowerdir=/newroot/usr/lib,upperdir=/rw/upper,workdir=/rw/work /newroot/usr/lib &&
	$bb mkdir -p "/newroot/usr/lib/modules/$rel" &&
	$bb mount -o bind "/newroot$modules" "/newroot/usr/lib/modules/$rel" ||
		echo "initramfs: cannot put $modules at /lib/modules/$rel"
fi
$bb umount /dev
$bb umount /proc
exec $bb switch_root /newroot "$init"
