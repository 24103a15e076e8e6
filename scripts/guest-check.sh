#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# Runs inside the test VM (started by scripts/vm-run.sh): loads the module (its
# KUnit suites run at load), runs the selftests, unloads it, asks kmemleak, and
# leaves every result in OUT for scripts/check.sh to report.
#
#   guest-check.sh OUT METAROCE_KO [RXE_KO]

out=$1
ko=$2
rxe=${3:-}
tests_dir=$(cd "$(dirname "$0")/../selftests/metaroce" && pwd)

mountpoint -q /sys/kernel/debug || mount -t debugfs none /sys/kernel/debug
uname -r >"$out/uname"

# Only what happens from here on counts: forget what boot left for kmemleak.
kml=/sys/kernel/debug/kmemleak
[ -w $kml ] && echo clear >$kml
# No scans every ten minutes: each takes a vCPU for 10-20 s under
# emulation. The scans at the end find what the tests leaked all the same.
[ -w $kml ] && echo scan=off >$kml

echo "# guest: $(uname -r), $(nproc) CPUs"
if ! insmod "$ko" 2>"$out/insmod.err"; then
	echo "1" >"$out/insmod.rc"
else
	echo "0" >"$out/insmod.rc"
fi

timeout_s=$(sed -n 's/^timeout=//p' "$tests_dir/settings")
progs=$(sed -n 's/^TEST_PROGS := //p' "$tests_dir/Makefile")
# Tests that change what every other test sees (selftests/metaroce/run_alone)
# run by themselves; the others run METAROCE_LANES at a time (default 2), in
# the Makefile's order, each in its own namespaces with its own devices. The
# emulated CPUs are the limit, so two lanes gain only the time tests spend
# waiting (about 10% in one measurement, Documentation/testing.md).
lanes=${METAROCE_LANES:-2}
[[ "$lanes" =~ ^[1-9][0-9]*$ ]] || {
	echo "# METAROCE_LANES=$lanes is not a positive number: one lane"
	lanes=1
}
# The first word of each line that is not a comment (as
# scripts/tests/test_selftest_lanes.py reads it). Without the list, every
# test runs alone.
if [ -r "$tests_dir/run_alone" ]; then
	alone=$(awk '!/^#/ && NF { print $1 }' "$tests_dir/run_alone")
else
	echo "# $tests_dir/run_alone is missing: every test runs alone"
	lanes=1
	alone=
fi
run_one() {
	local t=$1 t0=$SECONDS rc
	echo "# running $t"
	# The kernel log says which tests ran when (a splat names its test).
	echo "metaroce-selftest: start $t" >/dev/kmsg 2>/dev/null
	METAROCE_KO="$ko" RXE_KO="$rxe" timeout "${timeout_s:-300}" \
		"$tests_dir/$t" >"$out/$t.tap" 2>"$out/$t.err"
	rc=$?
	echo "$rc" >"$out/$t.rc"
	echo "metaroce-selftest: end $t rc=$rc" >/dev/kmsg 2>/dev/null
	echo "# $t took $((SECONDS - t0)) s"
	echo "$t $((SECONDS - t0))" >>"$out/times.txt"
}
: >"$out/tests.list"
: >"$out/times.txt"
# The lanes in use are counted from the running jobs each time, not kept in
# a counter: in a rehearsal (2026-12-06) a `wait -n` after a test that ran
# alone returned while both lane tests still ran, and three tests
# (negative.sh, adversary.sh, perftest.sh) ran at once.
for t in $progs; do
	echo "$t" >>"$out/tests.list"
	if [ "$lanes" = 1 ] || grep -Fqx "$t" <<<"$alone"; then
		wait
		run_one "$t"
		continue
	fi
	while [ "$(jobs -rp | wc -l)" -ge "$lanes" ]; do
		wait -n
	done
	run_one "$t" &
done
wait

# The final unload must be clean too.
if [ -d /sys/module/metaroce ]; then
	rmmod metaroce 2>"$out/rmmod.err"
	echo $? >"$out/rmmod.rc"
else
	echo "metaroce was not loaded at the end" >"$out/rmmod.err"
	echo 1 >"$out/rmmod.rc"
fi

if [ -w $kml ]; then
	# Objects must be a few seconds old before kmemleak reports them.
	sleep 6
	echo scan >$kml
	sleep 1
	echo scan >$kml
	cat $kml >"$out/kmemleak.txt"
else
	echo "kmemleak not available" >"$out/kmemleak.missing"
fi

dmesg >"$out/dmesg.txt"
echo done >"$out/done"
