// SPDX-License-Identifier: GPL-2.0

//! The MetaRoCE transport core: sans-IO, `no_std`, no allocation.
//!
//! The kernel module includes this crate's source unchanged (see
//! `rust/metaroce.rs`); `cargo test` here runs its tests in user space and the
//! simulator (`tools/sim`) runs it on thousands of simulated hosts. It holds
//! framing facts (`framing`), the wire codec (`wire`), wrapping sequence
//! numbers and the 256-bit window bitmap (`seq`), per-path sequence and SACK
//! state (`path`), the RTT estimator (`rtt`), congestion-control building
//! blocks (`cc`), in-order completion of a stream's messages (`stream`), the
//! connection state machine that ties them together (`conn`), what it
//! counts (`stats`), the events it records for tracing (`trace`), the
//! handshake that names a connection's incarnation (`handshake`) and the
//! session that drives a connection to a peer host: handshake, liveness
//! and the receiver's fair share (`session`). See
//! `Documentation/transport.md`.
//!
//! Modules refer to each other with `super::`, never `crate::`: inside the
//! kernel module this crate is itself a module (`crate::transport`).

#![no_std]
#![forbid(unsafe_code)]

pub mod cc;
pub mod conn;
pub mod framing;
pub mod handshake;
pub mod path;
pub mod rtt;
pub mod seq;
pub mod session;
pub mod stats;
pub mod stream;
pub mod trace;
pub mod wire;
