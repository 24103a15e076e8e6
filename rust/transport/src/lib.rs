// SPDX-License-Identifier: GPL-2.0

//! The MetaRoCE transport core: sans-IO, `no_std`, no allocation.
//!
//! The kernel module includes this crate's source unchanged (see
//! `rust/metaroce.rs`); `cargo test` here runs its unit tests in user space.
//! Today: framing facts (`framing`), the wire codec (`wire`), wrapping
//! sequence numbers and the 256-bit window bitmap (`seq`), per-path sequence,
//! SACK and loss state (`path`) and the RTT/RTO estimator (`rtt`). Congestion
//! control, connections and streams, and the event-driven state machine arrive
//! with the issue "The MetaRoCE transport core".
//!
//! Modules refer to each other with `super::`, never `crate::`: inside the
//! kernel module this crate is itself a module (`crate::transport`).

#![no_std]
#![forbid(unsafe_code)]

pub mod framing;
pub mod path;
pub mod rtt;
pub mod seq;
pub mod wire;
