#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# perftest's RDMA-CM points (ib_{write,send,read}_bw -R: perftest.sh with
# PERF_SET=cm), on their own so that scripts/guest-check.sh runs them alone
# (run_alone): the kernel CM's REQ is retried after about 4.6 s, and beside
# another test lane (devices created and deleted, two busy vCPUs) the server
# sometimes answered after it, lost the connection attempt and refused its
# QP (EINVAL), about once in 20 runs. The other PERF_* variables apply.
PERF_SET=cm exec "$(dirname "$0")/perftest.sh" "$@"
