// SPDX-License-Identifier: GPL-2.0

//! Congestion control from both ends, in integers.
//!
//! - Sender, per path and per connection: AIMD on congestion windows counted in
//!   packets. Each acknowledged packet adds `1/cwnd` (one packet per window per
//!   round trip); an ECN CE echo or a loss halves the window, at most once per
//!   window of data (until the packets in flight at the decrease are acked).
//! - Receiver: divides its inbound capacity evenly among its active senders and
//!   returns each sender's share in every ACK; the sender caps the connection
//!   window at that share times the round trip, so an incast settles within a
//!   round trip or two instead of probing.
//! - Path choice: the next packet goes to the path with the most free window, so
//!   a marked (shrunk) path gets fewer packets until it recovers.

use super::seq::before;

/// Fixed-point scale of windows: `1 << SHIFT` is one packet.
const SHIFT: u32 = 8;

/// Smallest window, in packets.
pub const MIN_WINDOW: u32 = 2;

/// `min` and `max` for constant contexts.
const fn umin(a: u32, b: u32) -> u32 {
    if a < b {
        a
    } else {
        b
    }
}

const fn umax(a: u32, b: u32) -> u32 {
    if a > b {
        a
    } else {
        b
    }
}

/// One AIMD window (used per path and per connection).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Aimd {
    /// Window in 1/256 packets.
    cwnd: u32,
    /// Largest window, in 1/256 packets.
    max: u32,
    /// No further decrease until the sequence reaches this point.
    recover: u32,
    /// Whether a decrease happened and `recover` is meaningful.
    recovering: bool,
}

impl Aimd {
    /// A window of `initial` packets that never exceeds `max` packets.
    #[allow(clippy::manual_clamp)]
    pub const fn new(initial: u32, max: u32) -> Self {
        // max/min instead of clamp: clamp has a panic path for min > max.
        let max = umin(umax(max, MIN_WINDOW), u32::MAX >> SHIFT);
        Self {
            cwnd: umin(umax(initial, MIN_WINDOW), max) << SHIFT,
            max: max << SHIFT,
            recover: 0,
            recovering: false,
        }
    }

    /// The window in whole packets.
    pub const fn window(&self) -> u32 {
        self.cwnd >> SHIFT
    }

    /// `acked` packets were acknowledged without congestion signals.
    pub fn on_acked(&mut self, acked: u32) {
        // cwnd += acked / cwnd packets, in fixed point.
        let inc = (u64::from(acked) << (2 * SHIFT)) / u64::from(self.cwnd.max(1));
        self.cwnd = (u64::from(self.cwnd) + inc).min(u64::from(self.max)) as u32;
    }

    /// A congestion signal (CE echo or loss) arrived while the sequence
    /// acknowledged so far is `acked_to` and the next to send is `next`.
    /// Halves the window unless it was already halved for this window of data.
    /// Returns whether it decreased.
    pub fn on_congestion(&mut self, acked_to: u32, next: u32) -> bool {
        if self.recovering && before(acked_to, self.recover) {
            return false;
        }
        self.cwnd = (self.cwnd / 2).max(MIN_WINDOW << SHIFT);
        self.recover = next;
        self.recovering = true;
        true
    }

    /// Takes `packets` off the window (never below the minimum).
    pub fn reduce(&mut self, packets: u32) {
        let cut = packets.min(u32::MAX >> SHIFT) << SHIFT;
        self.cwnd = self.cwnd.saturating_sub(cut).max(MIN_WINDOW << SHIFT);
    }

    /// Caps the window at `packets` (the receiver's hint); never below the
    /// minimum.
    pub fn cap(&mut self, packets: u32) {
        let cap = packets.min(self.max >> SHIFT).max(MIN_WINDOW) << SHIFT;
        self.cwnd = self.cwnd.min(cap);
    }
}

/// The window, in packets, that carries `rate_kbps` (kbit/s) over a round
/// trip of `rtt_us` with packets of `packet_bytes` (at least one packet).
pub fn window_for_rate(rate_kbps: u32, rtt_us: u32, packet_bytes: u32) -> u32 {
    // kbit/s x us = millibits; / 1000 = bits, / 8 = bytes. Two u32 factors
    // cannot overflow a u64.
    let bytes = u64::from(rate_kbps) * u64::from(rtt_us) / 8_000;
    let packets = bytes / u64::from(packet_bytes.max(1));
    packets.max(1).min(u64::from(u32::MAX)) as u32
}

/// The receiver's fair share for each of `active_senders` senders of an
/// inbound capacity of `capacity` (the whole capacity for one or none), in
/// the capacity's unit (kbit/s for the rate hint).
pub fn fair_share(capacity: u32, active_senders: u32) -> u32 {
    capacity / active_senders.max(1)
}

/// Picks the path for the next packet: the one with the most free window
/// (`window - in_flight`), lowest index on ties; `None` if every path is full.
pub fn pick_path(paths: impl IntoIterator<Item = (u32, u32)>) -> Option<usize> {
    let mut best: Option<(usize, u32)> = None;
    for (i, (window, in_flight)) in paths.into_iter().enumerate() {
        let free = window.saturating_sub(in_flight);
        if free > 0 && best.is_none_or(|(_, f)| free > f) {
            best = Some((i, free));
        }
    }
    best.map(|(i, _)| i)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn additive_increase_is_one_packet_per_window() {
        let mut w = Aimd::new(10, 1000);
        w.on_acked(10);
        assert_eq!(w.window(), 11);
        w.on_acked(11);
        assert_eq!(w.window(), 12);
    }

    #[test]
    fn increase_stops_at_the_maximum() {
        let mut w = Aimd::new(10, 12);
        for _ in 0..100 {
            w.on_acked(50);
        }
        assert_eq!(w.window(), 12);
    }

    #[test]
    fn one_decrease_per_window_of_data() {
        let mut w = Aimd::new(64, 1000);
        assert!(w.on_congestion(100, 164));
        assert_eq!(w.window(), 32);
        // More marks for packets sent before the decrease: no further cut.
        assert!(!w.on_congestion(120, 170));
        assert_eq!(w.window(), 32);
        // Once the data in flight at the decrease is acknowledged, cut again.
        assert!(w.on_congestion(164, 200));
        assert_eq!(w.window(), 16);
    }

    #[test]
    fn decrease_has_a_floor() {
        let mut w = Aimd::new(3, 1000);
        let mut seq = 0u32;
        for _ in 0..10 {
            seq += 10;
            w.on_congestion(seq, seq + 1);
        }
        assert_eq!(w.window(), MIN_WINDOW);
    }

    #[test]
    fn receiver_hint_caps_the_window() {
        let mut w = Aimd::new(500, 1000);
        // 10 Gbit/s over 100 us with 4 KiB packets: 125,000 bytes = 30 packets.
        let cap = window_for_rate(10_000_000, 100, 4096);
        assert_eq!(cap, 30);
        w.cap(cap);
        assert_eq!(w.window(), 30);
        w.cap(0);
        assert_eq!(w.window(), MIN_WINDOW);
    }

    #[test]
    fn fair_share_divides_capacity() {
        // 100 Gbit/s among 32 senders: 3.125 Gbit/s each.
        assert_eq!(fair_share(100_000_000, 32), 3_125_000);
        assert_eq!(fair_share(100_000_000, 0), 100_000_000);
        // 1 Mbit/s among 3: 333 kbit/s each, below what Mbit/s could say.
        assert_eq!(fair_share(1_000, 3), 333);
    }

    #[test]
    fn packets_go_to_the_freest_path() {
        // (window, in flight): path 1 was marked and shrank.
        assert_eq!(pick_path([(32, 10), (8, 7), (32, 4)]), Some(2));
        assert_eq!(pick_path([(8, 8), (16, 16)]), None);
        assert_eq!(pick_path([(16, 0), (16, 0)]), Some(0));
    }
}
