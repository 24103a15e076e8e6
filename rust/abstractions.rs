// SPDX-License-Identifier: GPL-2.0

//! The abstraction layer: safe Rust types over the kernel's RDMA core, net
//! device and notifier APIs. This is the only place in the module with `unsafe`
//! code; everything above it (`driver/`) is safe Rust.

mod bindings;
pub(crate) mod device;
pub(crate) mod link;
pub(crate) mod net;
pub(crate) mod netdev;
pub(crate) mod sync;
pub(crate) mod verbs;
