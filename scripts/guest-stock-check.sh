#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the VM of `make check-stock` (Debian's stock kernel, booted by
# scripts/check-stock.sh, whose initramfs put the stock kernel's module tree,
# with metaroce as DKMS installed it, at /lib/modules/KREL): checks that the
# guest runs that kernel and that `modprobe metaroce` loads the DKMS-installed
# module with the RDMA core; then runs scripts/guest-check.sh (selftests, kernel
# log) on that module. Its own results go to OUT/stock.tap.
#
#   guest-stock-check.sh OUT KREL

out=$1
krel=$2
tap="$out/stock.tap"
n=0
point() { # point OK|FAIL NAME
	n=$((n + 1))
	if [ "$1" = OK ]; then echo "ok $n $2"; else echo "not ok $n $2"; fi >>"$tap"
}
: >"$tap"

running=$(uname -r)
echo "# guest: uname -r: $running"
[ "$running" = "$krel" ] && ok=OK || ok=FAIL
point $ok "stock: the guest runs Debian's kernel $krel (uname -r: $running)"

ko=$(modinfo -n metaroce 2>"$out/modinfo.err")
echo "# modinfo -n metaroce: $ko"
case "$ko" in
"/lib/modules/$krel/updates/dkms/"*) ok=OK ;;
*) ok=FAIL ;;
esac
point $ok "stock: modprobe finds the DKMS-installed module (${ko:-none})"

modprobe metaroce 2>"$out/modprobe.err"
rc=$?
echo "# modprobe metaroce: exit $rc; loaded: $(cut -d' ' -f1 /proc/modules | tr '\n' ' ')"
[ $rc = 0 ] && [ -d /sys/module/metaroce ] && [ -d /sys/module/ib_core ] && ok=OK || ok=FAIL
point $ok "stock: modprobe metaroce loads it with ib_core"
echo "# taint: $(cat /proc/sys/kernel/tainted), metaroce: $(cat /sys/module/metaroce/taint 2>/dev/null)"

rmmod metaroce 2>>"$out/modprobe.err"
[ $? = 0 ] && ok=OK || ok=FAIL
point $ok "stock: rmmod metaroce after modprobe"

# An installed module is loaded on demand by its alias, rdma-link-metaroce.
ip link add mrstock0 type veth peer name mrstock1 2>>"$out/modprobe.err"
rdma link add mrstock0 type metaroce netdev mrstock0 2>>"$out/modprobe.err"
[ -d /sys/module/metaroce ] && [ -e /sys/class/infiniband/mrstock0 ] && ok=OK || ok=FAIL
point $ok "stock: rdma link add ... type metaroce loads the module by its alias"
rdma link delete mrstock0 2>/dev/null
ip link del mrstock0 2>/dev/null
# guest-check.sh loads the module itself (insmod, ib_core already there).
rmmod metaroce 2>>"$out/modprobe.err"

exec "$(dirname "$0")/guest-check.sh" "$out" "${ko:-/nonexistent/metaroce.ko}"
