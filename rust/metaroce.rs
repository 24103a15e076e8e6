// SPDX-License-Identifier: GPL-2.0

//! MetaRoCE: a multipath, loss-tolerant RDMA transport as a software RDMA device
//! over any Ethernet net device.
//!
//! Layers (see `Documentation/architecture.md`):
//! - `abstractions`: safe wrappers over the kernel's C APIs; the only `unsafe`;
//! - `driver`: link type, devices and event handling, in safe Rust;
//! - `transport`: the sans-IO transport core, the same source `cargo test` and
//!   the simulator build.

mod abstractions;
#[deny(unsafe_code)]
mod driver;
// The crate's `#![no_std]` is meaningless inside this crate (already no_std).
// `cargo clippy` sees the crate's items as its public API, whose names
// (`wrong_self_convention`) it leaves alone; here they are the module's own.
#[allow(
    unused_attributes,
    unreachable_pub,
    dead_code,
    clippy::wrong_self_convention
)]
#[path = "transport/src/lib.rs"]
mod transport;

use abstractions::{link::LinkRegistration, netdev::NetdevNotifier};
use driver::Driver;
use kernel::{prelude::*, sync::Arc};

module! {
    type: Metaroce,
    name: "metaroce",
    authors: ["The metaroce developers"],
    description: "MetaRoCE multipath RDMA transport over Ethernet",
    license: "GPL",
    alias: ["rdma-link-metaroce"],
    params: {
        paths: u32 {
            default: 16,
            description: "Paths (UDP source ports) each connection sprays over, 1 to 16",
        },
        cq_ring: u32 {
            default: 1,
            description: "1: a process may read its CQs' completions from a ring it maps, without a system call; 0: POLL_CQ only",
        },
        capacity_mbps: u32 {
            default: 0,
            description: "Mbit/s each device shares among the peers sending to it (0: the net device's link speed)",
        },
    },
}

struct Metaroce {
    // Fields drop in this order: first no new links, then no more net device
    // events, then the driver, whose device set unregisters the devices left.
    _link: Pin<KBox<LinkRegistration<Driver>>>,
    _notifier: Pin<KBox<NetdevNotifier<Driver>>>,
    _driver: Arc<Driver>,
}

impl kernel::Module for Metaroce {
    fn init(module: &'static ThisModule) -> Result<Self> {
        let driver = Arc::pin_init(Driver::new(module), GFP_KERNEL)?;
        let notifier = KBox::pin_init(NetdevNotifier::new(driver.clone()), GFP_KERNEL)?;
        let link = KBox::pin_init(LinkRegistration::new(driver.clone()), GFP_KERNEL)?;
        pr_info!("loaded; create devices with `rdma link add NAME type metaroce netdev DEV`\n");
        Ok(Self {
            _link: link,
            _notifier: notifier,
            _driver: driver,
        })
    }
}
