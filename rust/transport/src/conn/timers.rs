// SPDX-License-Identifier: GPL-2.0

//! Timers: the probe timer of each path, delayed ACKs and the pacer's
//! wake-up; a probe that goes unanswered fails its path and moves it to a
//! new route.

use super::super::cc::Aimd;
use super::super::path::WINDOW;
use super::super::rtt::{Rtt, MAX_RTO_US};
use super::super::seq::before;
use super::super::stats::tally;
use super::super::trace::TraceEvent;
use super::{
    port_for, Config, Connection, SlotState, TxPath, FAIL_AFTER_EXPIRIES,
    FAIL_BLIND_AFTER_EXPIRIES, SLOTS,
};

const MAX_STRIKE_SHIFT: u8 = 6;

impl TxPath {
    /// The probe timer, in nanoseconds: about two round trips of this path,
    /// but at most twice the connection's (a path that carried little lately
    /// may keep an old, inflated estimate), doubled per strike, plus the
    /// longest the receiver may hold an ACK back.
    pub(super) fn timer_ns(&self, conn: &Rtt, cfg: &Config) -> u64 {
        let mut pto = u64::from(self.rtt.pto_us());
        if conn.is_sampled() {
            pto = pto.min(2 * u64::from(conn.pto_us()));
        }
        let pto = pto.max(u64::from(cfg.probe_floor_us));
        // A new route fails with the odds of the old one: only repeated
        // failures (every route down) back off.
        let shift = self.strikes.saturating_sub(1).min(MAX_STRIKE_SHIFT);
        ((pto << shift).min(u64::from(MAX_RTO_US)) * 1_000)
            .saturating_add(u64::from(cfg.ack_delay_ns))
    }
}

impl<const P: usize> Connection<P> {
    /// When [`Self::on_timeout`] must be called next.
    pub fn next_timeout(&self) -> Option<u64> {
        // Only while new data still waits for it: a message cancelled or
        // refused, or a window that shrank, since the pacer held it back
        // leaves `paced` set until the next send, and a slot in the past
        // would be a timer firing every microsecond.
        let pacer = (self.paced && self.new_data_has_room()).then_some(self.pace_release_at());
        self.next_timeout_but_pacer().into_iter().chain(pacer).min()
    }

    /// [`Self::next_timeout`] without the pacer's slot: for a caller whose
    /// data sender will run anyway (and take the slot), so that a slot
    /// already due does not make its timer fire at once, again and again.
    pub fn next_timeout_but_pacer(&self) -> Option<u64> {
        let tx = self.tx.iter().filter_map(|p| p.deadline);
        let rx = self.rx.iter().filter(|r| !r.due).filter_map(|r| r.ack_at);
        tx.chain(rx).chain(self.rnr_wake).min()
    }

    /// Handles the timers due at `now`.
    pub fn on_timeout(&mut self, now: u64) {
        self.wake_waiting(now);
        for r in &mut self.rx {
            if r.ack_at.is_some_and(|t| t <= now) {
                r.due = true;
            }
        }
        for i in 0..self.n_paths() {
            if self
                .tx
                .get(i)
                .is_some_and(|p| p.deadline.is_some_and(|d| d <= now))
            {
                self.path_timeout(i, now);
            }
        }
    }

    fn path_timeout(&mut self, i: usize, now: u64) {
        let Some(p) = self.tx.get_mut(i) else {
            return;
        };
        // The oldest packet still ours to resend on this path.
        let mut oldest = None;
        let una = p.seq.una();
        for k in 0..p.seq.in_flight() {
            let psn = una.wrapping_add(k);
            if !p.seq.is_acked(psn) && p.slots[psn as usize % SLOTS].state == SlotState::Live {
                oldest = Some(psn);
                break;
            }
        }
        let Some(psn) = oldest else {
            p.deadline = None;
            p.expiries = 0;
            return;
        };
        // A queue, not a loss: the connection still makes progress (on
        // other paths: an ACK on this one re-arms its timer), but nothing
        // sent after this packet has reached the peer yet. A sender faster
        // than its receiver builds a queue faster than the round-trip
        // estimate follows it, and each probe then resent a packet that was
        // only waiting. Wait until a timer after that progress: the packets
        // ahead of this one are finite (a window), each deferral needs new
        // progress, and once a later packet has arrived, or the progress
        // stops, the next expiry probes. (Either expiry, the probe's or the
        // one that fails the path, waits so.)
        let timer = p.timer_ns(&self.rtt, &self.cfg);
        let order = p.slots[psn as usize % SLOTS].conn_order;
        if self.progress_at != 0
            && now.saturating_sub(self.progress_at) < timer
            && !before(order, self.delivered_order)
        {
            tally(&mut self.stats.deferred_probes, 1);
            // Later than now: the progress was within the timer.
            p.deadline = Some(self.progress_at.saturating_add(timer));
            return;
        }
        tally(&mut self.stats.timeouts, 1);
        tally(&mut p.stats.timeouts, 1);
        p.expiries = p.expiries.saturating_add(1);
        // Evidence that the peer answers while this route does not: a packet
        // sent at or after this path's last probe was acknowledged (on
        // another path: one on this path would have reset the timer). A
        // receiver busy enough to hold its ACKs back past the timer answers
        // no other path sooner, so its late ACKs move no path; a dead route
        // beside live ones moves at the second expiry (the third if the
        // evidence came only after it). (`probe_order` is taken here, before
        // the probe goes out: a packet sent in between counts as after it.)
        let evidence = before(p.probe_order, self.delivered_order);
        p.probe_order = self.tx_count;
        // The probe is the oldest packet itself, on this path, even if it
        // waits to move to another: when every path is suspect, none takes
        // relocations, and a probe that sent nothing would only fail the
        // path again (a livelock of path moves found by the hostile-channel
        // property test once holes wait for the timer).
        p.relocate.clear(psn % WINDOW);
        p.resend.set(psn % WINDOW);
        p.slots[psn as usize % SLOTS].by_order = false;
        // The probe waits twice as long for its answer.
        p.deadline = Some(now.saturating_add(timer.saturating_mul(2)));
        if p.expiries >= FAIL_BLIND_AFTER_EXPIRIES
            || (p.expiries >= FAIL_AFTER_EXPIRIES && evidence)
        {
            self.fail_path(i, now);
        }
    }

    /// Moves path `i` to a new source port and hands its unacknowledged
    /// packets to the other paths.
    fn fail_path(&mut self, i: usize, now: u64) {
        let initial = self.initial_window();
        let seed = self.cfg.port_seed;
        let alone = self.cfg.paths == 1;
        // After a new route failed too, take a route another path proved
        // (both directions work there) instead of drawing again: a packet
        // that stays on this path must not wait on more bad draws.
        let n = self.n_paths();
        let borrowed = self
            .tx
            .get(i)
            .filter(|p| p.strikes > 0)
            .and_then(|_| {
                (0..n)
                    .filter(|j| *j != i)
                    .filter_map(|j| self.tx.get(j))
                    .filter(|q| q.acked_at > 0)
                    .max_by_key(|q| q.acked_at)
            })
            .filter(|q| now.saturating_sub(q.acked_at) < q.timer_ns(&self.rtt, &self.cfg))
            .map(|q| q.sport);
        let Some(p) = self.tx.get_mut(i) else {
            return;
        };
        p.epoch = p.epoch.wrapping_add(1);
        tally(&mut p.stats.moves, 1);
        let from = p.sport;
        p.sport = borrowed.unwrap_or_else(|| port_for(seed, i as u16, p.epoch));
        self.trace.push(TraceEvent::PathMoved {
            path: i as u16,
            from,
            to: p.sport,
        });
        p.acked_at = 0;
        p.cc = Aimd::new(initial, WINDOW);
        p.expiries = 0;
        p.strikes = p.strikes.saturating_add(1);
        p.deadline = Some(now.saturating_add(p.timer_ns(&self.rtt, &self.cfg)));
        let una = p.seq.una();
        for k in 0..p.seq.in_flight() {
            let psn = una.wrapping_add(k);
            let idx = psn % WINDOW;
            let slot = &p.slots[idx as usize];
            if p.seq.is_acked(psn) || slot.state != SlotState::Live {
                continue;
            }
            // A packet that was already relocated once stays here (its new
            // route is the new port); first-time packets move, if there is
            // another path.
            if slot.origin.is_none() && !alone {
                p.resend.clear(idx);
                p.relocate.set(idx);
            } else {
                p.resend.set(idx);
                p.slots[idx as usize].by_order = false;
            }
        }
        tally(&mut self.stats.path_moves, 1);
    }
}
