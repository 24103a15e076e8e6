// SPDX-License-Identifier: GPL-2.0

//! The two limits verbs puts on Reads and atomics in flight: a requester
//! keeps at most `max_rd_atomic` of its own outstanding (posting the rest
//! later), a responder holds at most `max_dest_rd_atomic` of its peer's and
//! refuses one more (an invalid-request NAK: the requester's QP fails with
//! `IBV_WC_REM_INV_REQ_ERR`). Both sides count with two numbers that only
//! grow (no scan, and no removal site to forget), and each request and each
//! answer is counted once: the paths drop duplicate packets, the responder
//! ignores a second copy of a request it holds (`responder.rs`), and the
//! requester takes answers only for requests that went out and counts one
//! when it completes in order (`requester.rs`). Safe Rust only.
//!
//! Why a well-behaved requester is never refused: with `m =
//! max(max_rd_atomic, 1)` it posts its Read or atomic number `n` (from 0)
//! only once the answers to numbers `0..=n - m` arrived whole, and an
//! answer arrives only after the responder handed it to its connection. So
//! every request the responder holds (accepted, its answer not yet handed
//! over) is one the requester counts as outstanding: at most `m`. A
//! responder whose `max_dest_rd_atomic` is at least `m` never refuses it,
//! whatever the order the requests arrive in.

use kernel::prelude::*;

/// The most Reads and atomics a QP may have in flight either way
/// (`max_qp_rd_atom` and `max_qp_init_rd_atom` in `query_device`; larger
/// values are refused by `modify_qp`).
pub(crate) const MAX_RD_ATOMIC: u8 = 16;

/// The requester's count: Reads and atomics handed to the connection, and
/// answers that arrived whole (in order).
#[derive(Default)]
pub(super) struct Initiator {
    posted: u32,
    answered: u32,
    /// The last attempt to post stopped at the limit.
    at_limit: bool,
    /// The last attempt to post stopped at a fenced request.
    at_fence: bool,
}

impl Initiator {
    /// Whether one more may go with `max` in flight allowed. A limit of 0
    /// is taken as 1: a Read posted on such a QP goes, one at a time, rather
    /// than wait for ever.
    pub(super) fn may_post(&self, max: u8) -> bool {
        self.posted.wrapping_sub(self.answered) < u32::from(max.max(1))
    }

    /// One more handed to the connection.
    pub(super) fn posted(&mut self) {
        self.posted = self.posted.wrapping_add(1);
        self.at_limit = false;
    }

    /// One more answer arrived whole.
    pub(super) fn answer_arrived(&mut self) {
        if self.answered != self.posted {
            self.answered = self.answered.wrapping_add(1);
        }
    }

    /// Reads and atomics in flight.
    pub(super) fn in_flight(&self) -> u32 {
        self.posted.wrapping_sub(self.answered)
    }

    /// Posting stopped at the limit: the QP has nothing to post until an
    /// answer arrives.
    pub(super) fn stop_at_limit(&mut self) {
        self.at_limit = true;
    }

    /// Whether a fenced request may go: every Read and atomic posted
    /// before it was answered (IB_SEND_FENCE).
    pub(super) fn fence_open(&self) -> bool {
        self.in_flight() == 0
    }

    /// Posting stopped at a fenced request: the QP has nothing to post until
    /// the last answer before it arrives.
    pub(super) fn stop_at_fence(&mut self) {
        self.at_fence = true;
    }

    /// A request went (fenced or not): no fence holds the QP.
    pub(super) fn passed_fence(&mut self) {
        self.at_fence = false;
    }

    /// Whether a QP whose next request waits may try to post it now.
    pub(super) fn may_try(&self, max: u8) -> bool {
        (!self.at_limit || self.may_post(max)) && (!self.at_fence || self.fence_open())
    }
}

/// The responder's count: Reads and atomics of the peer accepted, and their
/// answers handed to the connection (or given up).
#[derive(Default)]
pub(super) struct Target {
    accepted: u32,
    handed: u32,
}

impl Target {
    /// Whether one more may be accepted with `max` held allowed (0: none,
    /// as verbs defines for a QP that grants no responder resources).
    pub(super) fn may_accept(&self, max: u8) -> bool {
        self.accepted.wrapping_sub(self.handed) < u32::from(max)
    }

    /// Requests of the peer held (accepted, not answered yet).
    pub(super) fn held(&self) -> u32 {
        self.accepted.wrapping_sub(self.handed)
    }

    pub(super) fn accepted(&mut self) {
        self.accepted = self.accepted.wrapping_add(1);
    }

    /// An answer handed to the connection, or one that will never be.
    pub(super) fn handed(&mut self) {
        if self.handed != self.accepted {
            self.handed = self.handed.wrapping_add(1);
        }
    }
}

#[kunit_tests(metaroce_rd_atomic)]
mod tests {
    use super::*;

    #[test]
    fn requester_keeps_to_its_limit() {
        let mut i = Initiator::default();
        assert!(i.may_post(2));
        i.posted();
        i.posted();
        assert!(!i.may_post(2));
        i.stop_at_limit();
        assert!(!i.may_try(2));
        i.answer_arrived();
        assert!(i.may_post(2));
        assert!(i.may_try(2));
        // 0 is taken as 1, never as "wait for ever".
        let mut z = Initiator::default();
        assert!(z.may_post(0));
        z.posted();
        assert!(!z.may_post(0));
        // An answer without a request does not make room.
        let mut e = Initiator::default();
        e.answer_arrived();
        e.posted();
        assert!(!e.may_post(1));
    }

    #[test]
    fn a_fence_holds_until_every_answer_arrived() {
        let mut i = Initiator::default();
        // Nothing in flight.
        assert!(i.fence_open());
        i.posted();
        i.posted();
        assert!(!i.fence_open());
        i.stop_at_fence();
        // Room under the limit, but fenced.
        assert!(!i.may_try(16));
        i.answer_arrived();
        // One answer still missing.
        assert!(!i.may_try(16));
        i.answer_arrived();
        assert!(i.fence_open() && i.may_try(16));
        i.passed_fence();
        i.posted();
        // The fence passed: later Reads do not hold the QP.
        assert!(i.may_try(16));
    }

    #[test]
    fn responder_refuses_beyond_its_limit_and_wraps() {
        let mut t = Target::default();
        assert!(!t.may_accept(0));
        assert!(t.may_accept(1));
        t.accepted();
        assert!(!t.may_accept(1));
        t.handed();
        assert!(t.may_accept(1));
        // Across the counters' wrap.
        let mut w = Target {
            accepted: u32::MAX,
            handed: u32::MAX - 1,
        };
        assert!(!w.may_accept(1));
        w.accepted();
        assert!(!w.may_accept(2));
        w.handed();
        w.handed();
        assert!(w.may_accept(1));
        // A hand-over without an acceptance does not make room.
        w.handed();
        w.accepted();
        assert!(!w.may_accept(1));
    }
}
