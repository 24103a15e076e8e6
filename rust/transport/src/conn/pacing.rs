// SPDX-License-Identifier: GPL-2.0

//! Rate hints: the fair share our receiver grants the peer, which every ACK
//! carries and the peer paces its new data at. The sender's side of the
//! pacer sits where it acts: `rx` takes the peer's hint (the pace and a cap
//! on the window), `tx` spaces new packets at it.

use super::super::cc::fair_share;
use super::{Connection, CE_ONE};

impl<const P: usize> Connection<P> {
    /// The fair share of our receiver for this sender, in kbit/s, returned in
    /// every ACK (0: no hint). See [`fair_share`].
    pub fn set_rate_hint(&mut self, kbps: u32) {
        self.rate_hint = kbps;
    }

    /// The hint sent now: the share, less up to an eighth of it when most
    /// arriving packets are marked (a queue stands at our end: drain it, while
    /// every sender stays within 20% of its share).
    pub(super) fn hint_now(&self) -> u32 {
        // Only a standing queue (most arrivals marked) is the receiver's own:
        // marks from a hot spot elsewhere are the paths' business.
        let excess = self.ce_ewma.saturating_sub(CE_ONE / 2);
        let cut = u64::from(self.rate_hint) * u64::from(excess) / u64::from(4 * CE_ONE);
        // (`cut` is at most an eighth of the hint.)
        self.rate_hint.saturating_sub(cut as u32)
    }

    /// Sends the current hint at once, in an ACK on the path that last
    /// brought data (when the receiver's number of senders changed, so that
    /// every sender learns its new share within a round trip).
    pub fn announce(&mut self) {
        if let Some(r) = self
            .last_rx_path
            .and_then(|p| self.rx.get_mut(usize::from(p)))
        {
            r.due = true;
        }
    }

    /// Sets the rate hint to an equal share of `capacity_kbps` (kbit/s)
    /// among `active_senders`.
    pub fn share_capacity(&mut self, capacity_kbps: u32, active_senders: u32) {
        self.rate_hint = fair_share(capacity_kbps, active_senders);
    }
}
