#!/usr/bin/env bash
# SPDX-License-Identifier: GPL-2.0
# Point the dynamic loader at the rdma-core 65.0 that scripts/build-rdma-core.sh
# built into the cache (libibverbs, librdmacm, their providers, metaroce's
# among them), for unmodified programs: ibv_devinfo, ibv_rc_pingpong, perftest,
# rping. Changes nothing on the system: only this process's environment.
#
#   scripts/rdma-env.sh CMD [ARGS...]    run CMD with it
#   . scripts/rdma-env.sh                set it in the current shell
#   eval "$(scripts/rdma-env.sh)"        the same, from any shell
#
# Undo in a shell: unset LD_LIBRARY_PATH METAROCE_RDMA_PREFIX (or restore the
# LD_LIBRARY_PATH you had). METAROCE_RDMA_PREFIX=DIR chooses a prefix instead
# of the one this tree's sources hash to.
#
# Only LD_LIBRARY_PATH is needed: libibverbs.so.1 then comes from the prefix,
# and that libibverbs reads the provider list from the configuration directory
# compiled into it ($prefix/etc/libibverbs.d/*.driver) and dlopen()s each
# provider from the provider directory compiled into it ($prefix/lib/libibverbs/
# lib<name>-rdmav65.so). Neither /etc/libibverbs.d nor Debian's providers are
# read. (rdma-core 65 has no environment variable for the configuration
# directory; RDMAV_DRIVERS only adds providers.)

__mr_prefix() {
	if [ -n "${METAROCE_RDMA_PREFIX:-}" ]; then
		echo "$METAROCE_RDMA_PREFIX"
	else
		"$(dirname "${BASH_SOURCE[0]}")/build-rdma-core.sh" --prefix
	fi
}

if [ "${BASH_SOURCE[0]}" != "$0" ]; then
	# Sourced: no `set -e` here, it would stay in the caller's shell.
	if __mr_p=$(__mr_prefix) && [ -e "$__mr_p/lib/libibverbs.so.1" ]; then
		export METAROCE_RDMA_PREFIX="$__mr_p"
		case ":${LD_LIBRARY_PATH:-}:" in
		*":$__mr_p/lib:"*) ;;
		*) export LD_LIBRARY_PATH="$__mr_p/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" ;;
		esac
	else
		echo "rdma-env.sh: no rdma-core prefix (run make provider)" >&2
	fi
	unset __mr_p
	unset -f __mr_prefix
	return 0 2>/dev/null
fi

set -euo pipefail
prefix=$(__mr_prefix) || exit 1
[ -e "$prefix/lib/libibverbs.so.1" ] ||
	{ echo "rdma-env.sh: $prefix has no lib/libibverbs.so.1" >&2; exit 1; }
export METAROCE_RDMA_PREFIX="$prefix"
export LD_LIBRARY_PATH="$prefix/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"

if [ $# -eq 0 ]; then
	printf 'export METAROCE_RDMA_PREFIX=%q\n' "$METAROCE_RDMA_PREFIX"
	printf 'export LD_LIBRARY_PATH=%q\n' "$LD_LIBRARY_PATH"
	exit 0
fi
exec "$@"
