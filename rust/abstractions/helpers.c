// SPDX-License-Identifier: GPL-2.0
/*
 * One-line wrappers of static inline functions and macros for the Rust
 * abstraction layer (see helpers.h). Each body is a single call.
 */
#include "helpers.h"

bool mr_ib_device_try_get(struct ib_device *dev)
{
	return ib_device_try_get(dev);
}

enum ib_port_state mr_ib_get_curr_port_state(struct net_device *ndev)
{
	return ib_get_curr_port_state(ndev);
}

void mr_ib_mark_name_assigned_by_user(struct ib_device *dev)
{
	ib_mark_name_assigned_by_user(dev);
}

struct net *mr_dev_net(const struct net_device *ndev)
{
	return dev_net(ndev);
}

void mr_dev_hold(struct net_device *ndev)
{
	dev_hold(ndev);
}

void mr_dev_put(struct net_device *ndev)
{
	dev_put(ndev);
}

struct net_device *mr_netdev_notifier_info_to_dev(void *info)
{
	return netdev_notifier_info_to_dev(info);
}
