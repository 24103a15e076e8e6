// SPDX-License-Identifier: GPL-2.0

//! The MetaRoCE transport core: sans-IO, `no_std`, no allocation.
//!
//! The kernel module includes this crate's source unchanged (see
//! `rust/metaroce.rs`); `cargo test` here runs its unit tests in user space.
//! The wire format, paths, congestion control and streams arrive here (issue
//! "The MetaRoCE transport core"); today it holds the framing facts the driver
//! already depends on.

#![no_std]
#![forbid(unsafe_code)]

pub mod framing;
pub mod path;
pub mod rtt;
pub mod seq;
pub mod wire;
