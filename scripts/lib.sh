# SPDX-License-Identifier: GPL-2.0
# Shared settings for the scripts. Sourced, never run.

# CI may start with a thin environment: make sure HOME (cargo, rustup, the
# cache) is set.
if [ -z "${HOME:-}" ]; then
	HOME=$(getent passwd "$(id -u)" | cut -d: -f6)
	export HOME
fi

KVER_MAJOR=${KVER_MAJOR:-7.2}
BINDGEN_VER=${BINDGEN_VER:-0.73.2}
CARGO_FUZZ_VER=${CARGO_FUZZ_VER:-0.13.2}
LLVM_SUFFIX=${LLVM_SUFFIX:--19}
export LIBCLANG_PATH=${LIBCLANG_PATH:-/usr/lib/llvm-19/lib}
export PATH="$HOME/.cargo/bin:$PATH"

# Where built kernels live; outside the checkout so clean clones reuse them.
METAROCE_CACHE=${METAROCE_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/metaroce}

TOP=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)

log() { printf '[metaroce] %s\n' "$*" >&2; }
die() { printf '[metaroce] error: %s\n' "$*" >&2; exit 1; }

# run_dir NAME: a new results directory out/NAME-DATE (with guest/ for the
# VM's files) in $out, announced on stderr.
run_dir() {
	out="$TOP/out/$1-$(date +%Y%m%d-%H%M%S)"
	mkdir -p "$out/guest"
	log "results and logs: $out"
}

# plot_python: prints a Python that has matplotlib (installing Debian's
# python3-matplotlib for /usr/bin/python3 if needed; log in $out), or
# python3 (the reports then say there is no plot).
plot_python() {
	local sudo=
	if ! /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
		log "installing python3-matplotlib (for the plot)"
		# Never a password prompt in the middle of a run: no plot instead.
		[ "$(id -u)" = 0 ] || sudo="sudo -n"
		DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends \
			python3-matplotlib >"$out/matplotlib.log" 2>&1 || log "no matplotlib: no plot"
	fi
	if /usr/bin/python3 -c 'import matplotlib' 2>/dev/null; then
		echo /usr/bin/python3
	else
		echo python3
	fi
}
