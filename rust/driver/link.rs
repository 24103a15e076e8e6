// SPDX-License-Identifier: GPL-2.0

//! The `metaroce` link type (`rdma link add NAME type metaroce netdev DEV`) and
//! the reaction to net devices going away.

use super::{
    device::{node_guid, MetaroceDevice},
    state::DevName,
    Driver,
};
use crate::abstractions::{
    device::AddError,
    link::LinkOps,
    netdev::{NetDevice, NetdevEvent, NetdevEvents},
};
use kernel::prelude::*;

impl LinkOps for Driver {
    const TYPE: &'static CStr = c"metaroce";

    fn newlink(&self, name: &CStr, ndev: &NetDevice) -> Result {
        let name_str = DevName(name.to_bytes());
        let Some(mac) = ndev.mac() else {
            pr_err!(
                "{}: ifindex {} has no Ethernet address; MetaRoCE needs one\n",
                name_str,
                ndev.ifindex()
            );
            return Err(EINVAL);
        };
        let data =
            MetaroceDevice::new(name, ndev, &self.ports, &self.debugfs).inspect_err(|e| {
                pr_err!(
                    "{}: not created (UDP port {}): {e:?}\n",
                    name_str,
                    crate::transport::framing::UDP_PORT
                );
            })?;
        match self
            .devices
            .add(name, ndev, node_guid(mac), Ok::<_, Error>(data))
        {
            Ok(()) => {
                pr_info!("{}: created on ifindex {}\n", name_str, ndev.ifindex());
                Ok(())
            }
            Err(e) => {
                match e {
                    AddError::NetdevBusy => pr_err!(
                        "{}: not created: ifindex {} already has a MetaRoCE device\n",
                        name_str,
                        ndev.ifindex()
                    ),
                    AddError::NameTaken => {
                        pr_err!("{}: not created: the name is taken\n", name_str)
                    }
                    AddError::Other(_) => {}
                }
                Err(e.into())
            }
        }
    }
}

impl NetdevEvents for Driver {
    fn event(&self, event: NetdevEvent, ndev: &NetDevice) {
        match event {
            NetdevEvent::Unregister => {
                // A cached route holds its net device, which cannot go until
                // the route does: every connection lets go of its routes now
                // (they are looked up again at the next datagram), not when
                // its device or connection goes, which may be long after.
                self.devices.for_each(|d| d.forget_routes());
                self.devices.unregister_by_netdev(ndev);
            }
            NetdevEvent::LinkChange => {
                let active = ndev.is_active();
                // Asked only of net devices that carry a MetaRoCE device.
                self.devices.for_each_on(ndev, |d| {
                    d.link_changed(active, ndev.speed_mbps_rtnl_held())
                });
            }
            _ => {}
        }
    }
}
