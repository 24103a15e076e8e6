// SPDX-License-Identifier: GPL-2.0

//! Round-trip time estimation and the retransmission timeout of one path, in
//! integer microseconds (RFC 6298's estimator, with exponential backoff).

/// Smallest RTO, in microseconds.
pub const MIN_RTO_US: u32 = 1_000;
/// Largest RTO after backoff, in microseconds.
pub const MAX_RTO_US: u32 = 1_000_000;
/// RTO before the first sample, in microseconds.
pub const INITIAL_RTO_US: u32 = 10_000;
/// Most doublings of the RTO.
pub const MAX_BACKOFF: u8 = 6;

/// Added to the tail-loss probe timeout for the receiver's ACK decision.
pub const PTO_SLACK_US: u32 = 10;

/// The estimator of one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Rtt {
    srtt: u32,
    /// Smallest sample: the round trip without queueing.
    min: u32,
    rttvar: u32,
    rto: u32,
    backoff: u8,
    sampled: bool,
}

impl Default for Rtt {
    fn default() -> Self {
        Self::new()
    }
}

impl Rtt {
    /// No sample yet.
    pub const fn new() -> Self {
        Self {
            srtt: 0,
            min: 0,
            rttvar: 0,
            rto: INITIAL_RTO_US,
            backoff: 0,
            sampled: false,
        }
    }

    /// Whether a sample arrived.
    pub const fn is_sampled(&self) -> bool {
        self.sampled
    }

    /// Smoothed RTT (0 before the first sample).
    pub const fn srtt_us(&self) -> u32 {
        self.srtt
    }

    /// The smallest sample so far (0 before the first).
    pub const fn min_us(&self) -> u32 {
        self.min
    }

    /// Feeds one RTT sample and clears the backoff.
    pub fn sample(&mut self, rtt_us: u32) {
        self.min = if self.sampled {
            self.min.min(rtt_us)
        } else {
            rtt_us
        };
        if self.sampled {
            let err = self.srtt.abs_diff(rtt_us);
            self.rttvar = ((3 * u64::from(self.rttvar) + u64::from(err)) / 4) as u32;
            self.srtt = ((7 * u64::from(self.srtt) + u64::from(rtt_us)) / 8) as u32;
        } else {
            self.srtt = rtt_us;
            self.rttvar = rtt_us / 2;
            self.sampled = true;
        }
        let rto = u64::from(self.srtt) + 4 * u64::from(self.rttvar);
        self.rto = rto.clamp(u64::from(MIN_RTO_US), u64::from(MAX_RTO_US)) as u32;
        self.backoff = 0;
    }

    /// The timeout to arm now, backoff included.
    pub fn rto_us(&self) -> u32 {
        // (A backoff above 32 could lose bits; it is at most MAX_BACKOFF.)
        let rto = u64::from(self.rto) << self.backoff.min(32);
        rto.min(u64::from(MAX_RTO_US)) as u32
    }

    /// The tail-loss probe timeout: about two round trips, never above the
    /// RTO. Before the first sample it is the RTO.
    pub fn pto_us(&self) -> u32 {
        if !self.sampled {
            return self.rto_us();
        }
        let pto = 2 * u64::from(self.srtt) + 2 * u64::from(self.rttvar) + u64::from(PTO_SLACK_US);
        pto.min(u64::from(self.rto_us())) as u32
    }

    /// A retransmission timer fired: double the timeout (up to a limit).
    pub fn on_timeout(&mut self) {
        self.backoff = (self.backoff + 1).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn probe_timeout_is_two_round_trips_capped_by_the_rto() {
        let mut r = Rtt::new();
        assert_eq!(r.pto_us(), INITIAL_RTO_US);
        r.sample(100);
        // srtt 100, rttvar 50: 2 * 100 + 2 * 50 + slack.
        assert_eq!(r.pto_us(), 300 + PTO_SLACK_US);
        r.sample(5_000);
        assert!(r.pto_us() <= r.rto_us());
        assert_eq!(r.min_us(), 100);
    }

    #[test]
    fn first_sample_sets_srtt_and_rto() {
        let mut r = Rtt::new();
        assert_eq!(r.rto_us(), INITIAL_RTO_US);
        r.sample(2_000);
        assert_eq!(r.srtt_us(), 2_000);
        assert_eq!(r.rto_us(), 2_000 + 4 * 1_000);
    }

    #[test]
    fn converges_and_respects_bounds() {
        let mut r = Rtt::new();
        for _ in 0..100 {
            r.sample(100);
        }
        assert!(r.srtt_us() <= 101);
        assert_eq!(r.rto_us(), MIN_RTO_US, "clamped from below");
        r.sample(u32::MAX);
        assert_eq!(r.rto_us(), MAX_RTO_US, "clamped from above");
    }

    #[test]
    fn backoff_doubles_then_saturates_and_a_sample_clears_it() {
        let mut r = Rtt::new();
        r.sample(4_000); // rto 12 ms
        r.on_timeout();
        assert_eq!(r.rto_us(), 24_000);
        for _ in 0..20 {
            r.on_timeout();
        }
        assert_eq!(r.rto_us(), (12_000u32 << MAX_BACKOFF).min(MAX_RTO_US));
        r.sample(4_000);
        assert!(r.rto_us() < 24_000);
    }
}
