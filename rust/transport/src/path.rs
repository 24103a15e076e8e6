// SPDX-License-Identifier: GPL-2.0

//! One path of a connection: its own packet sequence, a window of at most 256
//! packets in flight (so the ACK's 256-bit SACK covers all of them), the
//! sender's scoreboard of what was acknowledged and the receiver's bitmap of
//! what arrived. Which unacknowledged packets are lost is the connection's
//! call (`conn.rs`: by transmission order, so a lost retransmission is found
//! too); it resends exactly those, with their PSN, on this path.

// `super`, not `crate`: the kernel module includes this crate as a module.
use super::seq::{before, Bits256, BITS};

/// Most packets in flight on one path.
pub const WINDOW: u32 = BITS;

/// Why an acknowledgement was ignored.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AckError {
    /// Acknowledges PSNs that were never sent: a bogus or corrupt ACK.
    AheadOfSender,
    /// Older than what is already acknowledged (reordered ACK): harmless.
    Stale,
}

/// What one acknowledgement changed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct AckOutcome {
    /// Packets acknowledged for the first time.
    pub newly_acked: u32,
    /// Which: bit `i` is PSN `acked_base + i`.
    pub acked: Bits256,
    /// The PSN of bit 0 of `acked` (the oldest PSN unacknowledged before).
    pub acked_base: u32,
}

/// Sender side of a path.
#[derive(Clone, Copy, Debug)]
pub struct SendPath {
    /// Next PSN to send.
    next: u32,
    /// Oldest PSN not yet acknowledged.
    una: u32,
    /// Bit `i`: PSN `una + i` was selectively acknowledged.
    sacked: Bits256,
}

impl SendPath {
    /// A path whose first packet will carry `initial_psn`.
    pub const fn new(initial_psn: u32) -> Self {
        Self {
            next: initial_psn,
            una: initial_psn,
            sacked: Bits256::EMPTY,
        }
    }

    /// Packets sent and not acknowledged (cumulatively).
    pub const fn in_flight(&self) -> u32 {
        self.next.wrapping_sub(self.una)
    }

    /// Whether the window allows one more new packet.
    pub const fn can_send(&self) -> bool {
        self.in_flight() < WINDOW
    }

    /// Takes the PSN for a new packet, if the window allows one.
    pub fn send(&mut self) -> Option<u32> {
        if !self.can_send() {
            return None;
        }
        let psn = self.next;
        self.next = psn.wrapping_add(1);
        Some(psn)
    }

    /// The first PSN not acknowledged cumulatively: the next to send when
    /// nothing is in flight.
    pub const fn una(&self) -> u32 {
        self.una
    }

    /// Oldest unacknowledged PSN (for the tail-loss timer: retransmit it).
    pub fn oldest_unacked(&self) -> Option<u32> {
        (self.in_flight() > 0).then_some(self.una)
    }

    /// Whether `psn` is acknowledged (cumulatively or selectively).
    pub fn is_acked(&self, psn: u32) -> bool {
        if before(psn, self.una) {
            return true;
        }
        self.sacked.get(psn.wrapping_sub(self.una))
    }

    /// Records `psn` as acknowledged without an ACK on this path: the
    /// receiver is known to have it (its relocated copy was acknowledged on
    /// another path, and the copy's arrival counted it here). Returns whether
    /// it was news. Without this, a path whose last ACK for such a PSN was
    /// lost kept it unacknowledged forever: nothing of it was left to resend,
    /// so nothing asked for another ACK, and once the window filled the path
    /// sent no more.
    pub fn acknowledge(&mut self, psn: u32) -> bool {
        let off = psn.wrapping_sub(self.una);
        if before(psn, self.una) || off >= self.in_flight() || self.sacked.set(off) {
            return false;
        }
        self.skip_acknowledged();
        true
    }

    /// Moves the oldest unacknowledged PSN past the PSNs at its front that
    /// were acknowledged by other means ([`Self::acknowledge`]).
    fn skip_acknowledged(&mut self) {
        let run = self.sacked.trailing_ones();
        self.sacked.shift_down(run);
        self.una = self.una.wrapping_add(run);
    }

    /// Processes an ACK: `cum` is the first PSN the receiver lacks, `sack` bit
    /// `i` says PSN `cum + 1 + i` arrived.
    pub fn on_ack(&mut self, cum: u32, sack: &Bits256) -> Result<AckOutcome, AckError> {
        if before(self.next, cum) {
            return Err(AckError::AheadOfSender);
        }
        if before(cum, self.una) {
            return Err(AckError::Stale);
        }
        let mut out = AckOutcome {
            acked_base: self.una,
            ..AckOutcome::default()
        };
        // Cumulative part.
        let advance = cum.wrapping_sub(self.una);
        for i in 0..advance.min(BITS) {
            if !self.sacked.get(i) {
                out.newly_acked = out.newly_acked.saturating_add(1);
                out.acked.set(i);
            }
        }
        self.sacked.shift_down(advance);
        self.una = cum;
        // Selective part: bit i is PSN cum + 1 + i, i.e. offset i + 1 from una.
        let sent = self.in_flight();
        for i in 0..BITS.saturating_sub(1) {
            let off = i + 1;
            if off >= sent {
                break;
            }
            if sack.get(i) && !self.sacked.set(off) {
                out.newly_acked = out.newly_acked.saturating_add(1);
                out.acked.set(off + advance);
            }
        }
        // The receiver's cumulative point may stop at a PSN acknowledged by
        // other means (`acknowledge`: its ACK crossed this older one): the
        // oldest unacknowledged PSN is past it.
        self.skip_acknowledged();
        Ok(out)
    }
}

/// What the receiver made of one data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Arrival {
    /// First arrival: place the data.
    New,
    /// Seen before (a retransmission that crossed its ACK): drop it.
    Duplicate,
    /// Beyond the 256-packet window: the sender never does that; drop it.
    OutOfWindow,
}

/// Receiver side of a path.
#[derive(Clone, Copy, Debug)]
pub struct RecvPath {
    /// First PSN not received.
    cum: u32,
    /// Bit `i`: PSN `cum + 1 + i` received.
    above: Bits256,
    /// Bit `i`: PSN `cum + i` was refused for want of a receive (and is not
    /// received): only a void copy may fill it (see `conn::rnr`).
    refused: Bits256,
    /// CE-marked packets since the last ACK.
    ce: u16,
}

impl RecvPath {
    /// A path whose first packet carries `initial_psn`.
    pub const fn new(initial_psn: u32) -> Self {
        Self {
            cum: initial_psn,
            above: Bits256::EMPTY,
            refused: Bits256::EMPTY,
            ce: 0,
        }
    }

    /// What packet `psn` would be, without recording it.
    pub fn classify(&self, psn: u32) -> Arrival {
        if before(psn, self.cum) {
            return Arrival::Duplicate;
        }
        let off = psn.wrapping_sub(self.cum);
        if off >= WINDOW {
            Arrival::OutOfWindow
        } else if off > 0 && self.above.get(off - 1) {
            Arrival::Duplicate
        } else {
            Arrival::New
        }
    }

    /// Records packet `psn`, which carried an ECN CE mark if `ce`.
    pub fn on_data(&mut self, psn: u32, ce: bool) -> Arrival {
        let arrival = self.classify(psn);
        if arrival != Arrival::New {
            return arrival;
        }
        let off = psn.wrapping_sub(self.cum);
        self.refused.clear(off);
        if off == 0 {
            // Fill the hole and absorb what was waiting above it.
            let run = self.above.trailing_ones();
            self.above.shift_down(run + 1);
            self.refused.shift_down(run + 1);
            self.cum = self.cum.wrapping_add(run + 1);
        } else {
            // Not set: `classify` said new.
            self.above.set(off - 1);
        }
        if ce {
            self.ce = self.ce.saturating_add(1);
        }
        Arrival::New
    }

    /// Puts the window back as it was in `earlier` (a copy taken before
    /// the last [`Self::on_data`], of packet `psn`), and marks `psn`
    /// refused: it is again not received, and only a void copy may fill it.
    /// The CE count is kept (the packet did cross the network).
    pub fn refuse(&mut self, earlier: &RecvPath, psn: u32) {
        self.cum = earlier.cum;
        self.above = earlier.above;
        self.refused = earlier.refused;
        self.refused.set(psn.wrapping_sub(self.cum));
    }

    /// Whether `psn` was refused and not filled since.
    pub fn is_refused(&self, psn: u32) -> bool {
        let off = psn.wrapping_sub(self.cum);
        off < WINDOW && self.refused.get(off)
    }

    /// Whether a packet above a missing one arrived (a hole).
    pub fn has_holes(&self) -> bool {
        !self.above.is_empty()
    }

    /// The acknowledgement to send now: (cumulative point, SACK bitmap, CE
    /// count since the previous one). Resets the CE count.
    pub fn take_ack(&mut self) -> (u32, Bits256, u16) {
        let ce = core::mem::take(&mut self.ce);
        (self.cum, self.above, ce)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn window_limits_sending() {
        let mut p = SendPath::new(u32::MAX - 3);
        for _ in 0..WINDOW {
            assert!(p.send().is_some());
        }
        assert_eq!(p.send(), None);
        assert_eq!(p.in_flight(), WINDOW);
    }

    #[test]
    fn an_ack_reports_exactly_the_newly_acknowledged_psns() {
        let mut s = SendPath::new(100);
        let mut r = RecvPath::new(100);
        let psns: [u32; 5] = core::array::from_fn(|_| s.send().unwrap());
        for psn in psns {
            if psn != 101 {
                assert_eq!(r.on_data(psn, false), Arrival::New);
            }
        }
        let (cum, sack, _) = r.take_ack();
        assert_eq!(cum, 101);
        let out = s.on_ack(cum, &sack).unwrap();
        assert_eq!(out.newly_acked, 4);
        assert_eq!(out.acked_base, 100);
        assert!(out.acked.ones().eq([0, 2, 3, 4]));
        assert!(!s.is_acked(101) && s.is_acked(102));
        // The same ACK again reports nothing new.
        let again = s.on_ack(cum, &sack).unwrap();
        assert_eq!(again.newly_acked, 0);
        assert!(again.acked.is_empty());
        // The retransmission fills the hole; everything is acknowledged.
        assert_eq!(r.on_data(101, false), Arrival::New);
        let (cum, sack, _) = r.take_ack();
        assert_eq!(cum, 105);
        let done = s.on_ack(cum, &sack).unwrap();
        assert_eq!(done.newly_acked, 1);
        assert_eq!(done.acked_base, 101);
        assert!(done.acked.ones().eq([0]));
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn the_cumulative_point_moves_the_window() {
        let mut s = SendPath::new(0);
        for _ in 0..3 {
            s.send();
        }
        // Only PSN 0 arrived: 1 and 2 are still in flight.
        let out = s.on_ack(1, &Bits256::EMPTY).unwrap();
        assert_eq!(out.newly_acked, 1);
        assert_eq!(s.oldest_unacked(), Some(1));
        assert_eq!(s.in_flight(), 2);
    }

    #[test]
    fn bogus_and_stale_acks_are_refused() {
        let mut s = SendPath::new(10);
        s.send();
        s.send();
        assert_eq!(s.on_ack(13, &Bits256::EMPTY), Err(AckError::AheadOfSender));
        assert!(s.on_ack(12, &Bits256::EMPTY).is_ok());
        assert_eq!(s.on_ack(11, &Bits256::EMPTY), Err(AckError::Stale));
        // A SACK bit for a PSN never sent is ignored, not counted.
        s.send();
        let mut sack = Bits256::EMPTY;
        sack.set(5);
        assert_eq!(s.on_ack(12, &sack).unwrap().newly_acked, 0);
    }

    #[test]
    fn receiver_drops_duplicates_and_far_packets() {
        let mut r = RecvPath::new(0);
        assert_eq!(r.on_data(2, true), Arrival::New);
        assert_eq!(r.on_data(2, false), Arrival::Duplicate);
        assert_eq!(r.on_data(0, false), Arrival::New);
        assert_eq!(r.on_data(0, false), Arrival::Duplicate);
        assert_eq!(r.on_data(WINDOW + 1, false), Arrival::OutOfWindow);
        let (cum, sack, ce) = r.take_ack();
        assert_eq!((cum, ce), (1, 1));
        assert!(sack.get(0), "PSN 2 = cum + 1 + 0");
        assert_eq!(r.take_ack().2, 0, "the CE count resets");
    }

    #[test]
    fn classify_says_what_on_data_would_do() {
        let mut r = RecvPath::new(u32::MAX - 3);
        let psns = [
            u32::MAX - 1,
            u32::MAX - 1,
            u32::MAX - 3,
            2,
            WINDOW,
            1,
            u32::MAX - 10,
        ];
        for psn in psns {
            let said = r.classify(psn);
            assert_eq!(said, r.classify(psn), "classify records nothing");
            assert_eq!(said, r.on_data(psn, false), "PSN {psn}");
        }
    }
}
