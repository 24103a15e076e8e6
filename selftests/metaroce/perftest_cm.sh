#!/bin/bash
# SPDX-License-Identifier: GPL-2.0
# perftest's RDMA-CM points (ib_{write,send,read}_bw -R: perftest.sh with
# PERF_SET=cm), on their own so that scripts/guest-check.sh runs them alone
# (run_alone): beside another test lane (devices created and deleted, two
# busy vCPUs) the connection failed about once in 20 runs, the client getting
# CM UNREACHABLE (-110) and once the server's rdma_create_qp EINVAL, which
# the kernel CM gives when it has already given up the attempt (its REQ is
# retried after about 4.6 s; not traced). The other PERF_* variables apply.
PERF_SET=cm exec "$(dirname "$0")/perftest.sh" "$@"
