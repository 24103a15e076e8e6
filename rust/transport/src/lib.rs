// SPDX-License-Identifier: GPL-2.0

//! The MetaRoCE transport core: sans-IO, `no_std`, no allocation.
//!
//! The kernel module includes this crate's source unchanged (see
//! `rust/metaroce.rs`); `cargo test` here runs its unit tests in user space.
//! Today: framing facts (`framing`), the wire codec (`wire`), wrapping
//! sequence numbers and the 256-bit window bitmap (`seq`), per-path sequence,
//! SACK and loss state (`path`), the RTT/RTO estimator (`rtt`) and the
//! congestion-control building blocks (`cc`: AIMD windows, the receiver's fair
//! share, path choice) and in-order completion of a stream's messages
//! (`stream`). Connections, the sender side of streams and the event-driven
//! state machine that ties them together arrive with the issue "The MetaRoCE
//! transport core".
//!
//! Modules refer to each other with `super::`, never `crate::`: inside the
//! kernel module this crate is itself a module (`crate::transport`).

#![no_std]
#![forbid(unsafe_code)]

pub mod cc;
pub mod conn;
pub mod framing;
pub mod path;
pub mod rtt;
pub mod seq;
pub mod stream;
pub mod wire;
