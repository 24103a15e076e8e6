// SPDX-License-Identifier: GPL-2.0

//! The abstraction layer: safe Rust types over the kernel's RDMA core, net
//! device and notifier APIs. This is the only place in the module with `unsafe`
//! code; everything above it (`driver/`) is safe Rust.
//!
//! Each file uses only files listed after it: `device` (the driver's
//! `DeviceSet`: creation, registration, release of devices), `adapter` (the
//! `ib_device_ops` table and its device-level operations), `restrack` (the
//! driver's attributes in `rdma resource -dd`), `verbs_adapter`
//! (the verbs operations), `ops` (the `DeviceOps` trait and the objects its
//! operations are given), `ring` (completion rings shared with user space,
//! and the device's `mmap`), `types` (plain values), `memory` (pinned user pages,
//! kernel memory), `link` (`rdma_link_ops`), `net` (UDP port), `timer`
//! (timers, the clock), `netdev`, `sync`, `trace` (tracepoints), `bindings`.

mod adapter;
mod bindings;
pub(crate) mod device;
pub(crate) mod link;
pub(crate) mod memory;
pub(crate) mod net;
pub(crate) mod netdev;
pub(crate) mod ops;
mod restrack;
pub(crate) mod ring;
pub(crate) mod sync;
pub(crate) mod timer;
pub(crate) mod trace;
pub(crate) mod types;
mod verbs_adapter;
