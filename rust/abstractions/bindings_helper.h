/* SPDX-License-Identifier: GPL-2.0 */
/*
 * The C headers bindgen reads to generate rust/abstractions/bindings_generated.rs
 * at build time, from the kernel tree being built against. Only the abstraction
 * layer uses the result.
 */
#include <linux/ethtool.h>
#include <linux/netdevice.h>
#include <linux/notifier.h>
#include <linux/random.h>
#include <net/udp_tunnel.h>
#include <rdma/ib_verbs.h>
#include <rdma/ib_mad.h>
#include <rdma/rdma_netlink.h>
#include <uapi/rdma/ib_user_ioctl_verbs.h>

#include "helpers.h"
#include "../../uapi/rdma/metaroce-abi.h"

