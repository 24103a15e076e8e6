// SPDX-License-Identifier: GPL-2.0

//! The `metaroce` link type (`rdma link add NAME type metaroce netdev DEV`) and
//! the reaction to net devices going away.

use super::{device::MrDevice, Driver};
use crate::abstractions::{
    link::LinkOps,
    netdev::{NetDevice, NetdevEvent, NetdevEvents},
};
use kernel::prelude::*;

impl LinkOps for Driver {
    const TYPE: &'static CStr = c"metaroce";

    fn newlink(&self, name: &CStr, ndev: &NetDevice) -> Result {
        let Some(mac) = ndev.mac() else {
            pr_err!(
                "{}: ifindex {} has no Ethernet address; MetaRoCE needs an Ethernet device\n",
                name.to_str().unwrap_or("?"),
                ndev.ifindex()
            );
            return Err(EINVAL);
        };
        match self.devices.add(name, ndev, super::device::node_guid(mac), MrDevice::new(ndev)) {
            Ok(()) => {
                pr_info!(
                    "{}: created on ifindex {}\n",
                    name.to_str().unwrap_or("?"),
                    ndev.ifindex()
                );
                Ok(())
            }
            Err(e) => {
                if e == EEXIST {
                    pr_err!(
                        "{}: not created: ifindex {} already has a MetaRoCE device, or the name is taken\n",
                        name.to_str().unwrap_or("?"),
                        ndev.ifindex()
                    );
                }
                Err(e)
            }
        }
    }
}

impl NetdevEvents for Driver {
    fn event(&self, event: NetdevEvent, ndev: &NetDevice) {
        if event == NetdevEvent::Unregister {
            self.devices.unregister_by_netdev(ndev);
        }
    }
}
