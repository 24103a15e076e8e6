// SPDX-License-Identifier: GPL-2.0

//! The module's tracepoints (tracefs `events/metaroce/`), raised from Rust.
//! Their definitions are C (`metaroce_trace.h`, the way the kernel's Rust
//! drivers define theirs), and `trace.c` has a one-line function per event;
//! each costs a call and a static-key test while its event is off.
//! Documentation/observability.md lists them.

use super::{
    bindings,
    types::{IpAddr, QpState},
};

/// Events of a connection to peer `peer`.
pub(crate) struct PeerTrace<'a> {
    pub(crate) peer: &'a IpAddr,
}

impl PeerTrace<'_> {
    /// A packet found lost was resent on its path.
    pub(crate) fn resend(&self, path: u16, psn: u32, sport: u16) {
        // SAFETY: `peer` points to 16 readable bytes for the call (the event
        // copies them).
        unsafe { bindings::mr_trace_resend(self.peer.0.as_ptr(), path, psn, sport) }
    }

    /// A packet of failed path `path` was moved to path `to`.
    pub(crate) fn relocate(&self, path: u16, psn: u32, to: u16) {
        // SAFETY: As in `resend`.
        unsafe { bindings::mr_trace_relocate(self.peer.0.as_ptr(), path, psn, to) }
    }

    /// Path `path` moved from source port `from` to `to`.
    pub(crate) fn path_moved(&self, path: u16, from: u16, to: u16) {
        // SAFETY: As in `resend`.
        unsafe { bindings::mr_trace_path_moved(self.peer.0.as_ptr(), path, from, to) }
    }

    /// An ACK on `path` echoed `marks` CE marks; the windows after.
    pub(crate) fn ecn(&self, path: u16, marks: u16, path_window: u32, conn_window: u32) {
        // SAFETY: As in `resend`.
        unsafe {
            bindings::mr_trace_ecn(self.peer.0.as_ptr(), path, marks, path_window, conn_window)
        }
    }

    /// The peer's rate hint changed from `from` to `to` kbit/s (0: none).
    pub(crate) fn rate_hint(&self, from: u32, to: u32) {
        // SAFETY: As in `resend`.
        unsafe { bindings::mr_trace_rate_hint(self.peer.0.as_ptr(), from, to) }
    }

    /// The peer restarted; `qps` queue pairs were on the connection.
    pub(crate) fn peer_restart(&self, qps: u32) {
        // SAFETY: As in `resend`.
        unsafe { bindings::mr_trace_peer_restart(self.peer.0.as_ptr(), qps) }
    }

    /// The peer was silent for `silent_ms`: `failed` queue pairs failed.
    pub(crate) fn peer_silence(&self, silent_ms: u32, failed: u32) {
        // SAFETY: As in `resend`.
        unsafe { bindings::mr_trace_peer_silence(self.peer.0.as_ptr(), silent_ms, failed) }
    }

    /// Queue pair `qpn` (to `dest_qpn`) entered the error state from
    /// state `from`.
    pub(crate) fn qp_error(&self, qpn: u32, dest_qpn: u32, from: QpState) {
        let from = from.to_raw();
        // SAFETY: As in `resend`.
        unsafe { bindings::mr_trace_qp_error(self.peer.0.as_ptr(), qpn, dest_qpn, from) }
    }
}
