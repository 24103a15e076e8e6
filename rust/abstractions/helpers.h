/* SPDX-License-Identifier: GPL-2.0 */
/*
 * One-line wrappers of static inline functions and macros that bindgen cannot
 * turn into callable symbols. No logic lives here: each body is one call.
 */
#ifndef METAROCE_HELPERS_H
#define METAROCE_HELPERS_H

#include <linux/netdevice.h>
#include <rdma/ib_verbs.h>

bool mr_ib_device_try_get(struct ib_device *dev);
enum ib_port_state mr_ib_get_curr_port_state(struct net_device *ndev);
void mr_ib_mark_name_assigned_by_user(struct ib_device *dev);
struct net *mr_dev_net(const struct net_device *ndev);
void mr_dev_hold(struct net_device *ndev);
void mr_dev_put(struct net_device *ndev);
struct net_device *mr_netdev_notifier_info_to_dev(void *info);

#endif
