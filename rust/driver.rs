// SPDX-License-Identifier: GPL-2.0

//! The MetaRoCE driver: link type, devices and their reaction to net device
//! events. Safe Rust only; everything unsafe is in `abstractions/`.

mod addr_kunit;
mod counters;
mod cq;
pub(crate) mod device;
mod frmr;
mod incarnation;
pub(crate) mod link;
mod mcast;
mod mr;
mod peer;
mod qp;
mod quota;
mod rd_atomic;
mod ready;
mod requester;
mod responder;
mod shared;
mod srq;
mod state;
mod telemetry;
mod transport_kunit;
mod ud;

use crate::abstractions::{device::DeviceSet, net::NetPorts};
use device::MetaroceDevice;
use kernel::{debugfs::Dir, prelude::*};
use state::Shared;

/// State shared by the link type, the netdevice notifier and module exit.
#[pin_data]
pub(crate) struct Driver {
    /// Every MetaRoCE device. Dropping the driver unregisters those left
    /// (fields drop in order: the devices go before their ports).
    #[pin]
    pub(crate) devices: DeviceSet<MetaroceDevice>,
    /// The MetaRoCE UDP port of each network namespace.
    pub(crate) ports: NetPorts<Shared>,
    /// `/sys/kernel/debug/metaroce/`: a telemetry file per device
    /// (driver/telemetry.rs). After `devices`, so it outlives their files.
    pub(crate) debugfs: Dir,
}

impl Driver {
    pub(crate) fn new(module: &'static ThisModule) -> impl PinInit<Self, Error> {
        try_pin_init!(Self {
            devices <- DeviceSet::new(module),
            ports: NetPorts::register()?,
            debugfs: Dir::new(c"metaroce"),
        })
    }
}
