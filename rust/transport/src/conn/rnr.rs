// SPDX-License-Identifier: GPL-2.0

//! Receiver not ready: a packet of a Send or Write with Immediate that
//! finds no receive posted is refused without being acknowledged. The
//! receiver forgets that it arrived (no ACK can let its message complete as
//! delivered) and from then on takes only a void copy in its PSN (a data
//! copy still on the way is refused again: the bytes come again on a new
//! PSN, and must not land twice). A NAK naming that packet (path, PSN, and
//! the timestamp of the copy refused) and the receiver's RNR timer goes
//! back.
//!
//! The sender parks the refused packet: its PSN is closed with a void copy
//! at once (so that no path's window is pinned while the receiver waits),
//! and the packet joins a run of its message's parked packets in a small
//! table. The stream stops at the refused message: nothing more of it or
//! of the stream's later messages is cut. When the timer has passed, the
//! parked packets go out again as new packets and the stream goes on.
//! After the queue pair's `rnr_retry` rounds of refusals (7: no limit), or
//! when a refused packet finds no room in the table, the message fails
//! instead (its packets then go void, closing their PSNs).

use super::super::path::{RecvPath, WINDOW};
use super::super::stats::tally;
use super::super::wire::{flags, NakCode, NakHeader};
use super::{
    indexed, position, Connection, MsgState, RecvError, SlotState, Transmit, TxSlot, SLOTS,
};

/// `rnr_retry` that never runs out, as verbs defines it.
pub const RNR_FOREVER: u8 = 7;

/// Runs of refused packets a connection parks at once.
pub const PARKED: usize = 1024;

/// verbs' `min_rnr_timer` codes, in microseconds (the IBA table: code 0 is
/// the longest, 655.36 ms; 1 to 31 grow from 0.01 ms to 491.52 ms).
const RNR_US: [u32; 32] = [
    655_360, 10, 20, 30, 40, 60, 80, 120, 160, 240, 320, 480, 640, 960, 1_280, 1_920, 2_560, 3_840,
    5_120, 7_680, 10_240, 15_360, 20_480, 30_720, 40_960, 61_440, 81_920, 122_880, 163_840,
    245_760, 327_680, 491_520,
];

/// The wait an RNR timer code asks for, in nanoseconds (only the low 5
/// bits count, as on the wire).
pub(super) fn rnr_delay_ns(code: u8) -> u64 {
    u64::from(RNR_US[usize::from(code & 31)]) * 1_000
}

/// Runs of parked packets one stream may hold (a quarter of the table).
pub const PARKED_PER_STREAM: usize = PARKED / 4;

/// The receive window of the last data packet's path as it was before the
/// packet, and of a relocated copy's first path: what
/// [`Connection::not_ready`] puts back.
#[derive(Clone, Copy, Debug)]
pub(super) struct Undo {
    pub(super) path: u16,
    pub(super) psn: u32,
    pub(super) seq: RecvPath,
    pub(super) origin: Option<(u16, u32, RecvPath)>,
}

/// A run of refused packets of one message, waiting to be sent again:
/// `count` packets from byte `offset` on (packets are cut at the message's
/// `payload` bytes, so a run needs no more; the refusals of one round are
/// mostly one run).
#[derive(Clone, Copy, Debug)]
pub(super) struct Parked {
    msg: u16,
    gen: u32,
    offset: u32,
    count: u32,
}

impl Parked {
    pub(super) const EMPTY: Self = Self {
        msg: 0,
        gen: 0,
        offset: 0,
        count: 0,
    };
}

/// What became of a refused packet at its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Park {
    /// Parked now: its PSN goes out void.
    Parked,
    /// The copy refused is ours and the latest, but the table (or the
    /// stream's share) has no run it extends and no room for one: its
    /// message fails (its PSNs then close void).
    Full,
    /// Not an unacknowledged packet of ours whose latest copy was the one
    /// refused (an older copy, one already parked, or a forgery).
    Stale,
}

/// The byte after run `e` (packets of `payload` bytes), if it fits.
fn run_end(e: &Parked, payload: u32) -> Option<u32> {
    e.count
        .checked_mul(payload)
        .and_then(|b| e.offset.checked_add(b))
}

impl<const P: usize> Connection<P> {
    /// Refuses the data packet that [`Self::on_datagram`] just returned (of
    /// `stream`, message `msn`, PSN `psn` on `path`, sent at `sent_us`)
    /// because no receive is posted for it: its arrival is forgotten, so it
    /// is not acknowledged, and from now on only a void copy may fill its
    /// PSN (a data copy still on the way is refused again: its bytes come
    /// again on a new PSN, and must not land twice). A NAK asks the sender
    /// to send it again after `rnr_timer` (verbs' `min_rnr_timer` code).
    /// Returns false if the NAK queue is full (the sender then takes the
    /// packet for lost, and its resend is refused again).
    pub fn not_ready(
        &mut self,
        path: u16,
        psn: u32,
        sent_us: u32,
        stream: u32,
        msn: u32,
        rnr_timer: u8,
    ) -> bool {
        // Only the packet just handed over can be refused so: any other
        // stays received, and a NAK for it would make its sender park
        // bytes that landed (they would land twice).
        let Some(u) = self.undo.take().filter(|u| u.path == path && u.psn == psn) else {
            return false;
        };
        if let Some(r) = self.rx.get_mut(usize::from(u.path)) {
            r.seq.refuse(&u.seq, u.psn);
        }
        if let Some((o, opsn, seq)) = u.origin {
            if let Some(r) = self.rx.get_mut(usize::from(o)) {
                r.seq.refuse(&seq, opsn);
            }
        }
        // Counted when it comes again and is taken.
        self.stats.rx_data = self.stats.rx_data.saturating_sub(1);
        self.rnr_nak(path, psn, sent_us, stream, msn, rnr_timer)
    }

    /// Queues the receiver-not-ready NAK of a data packet (of `stream`,
    /// message `msn`, PSN `psn` on `path`, sent at `sent_us`), with the
    /// refusing queue pair's `rnr_timer`, and counts it: for
    /// [`Self::not_ready`], and for a copy of a refused packet that came
    /// again ([`super::Received::Refused`]). False if the NAK queue is full.
    pub fn rnr_nak(
        &mut self,
        path: u16,
        psn: u32,
        sent_us: u32,
        stream: u32,
        msn: u32,
        rnr_timer: u8,
    ) -> bool {
        let code = NakCode::ReceiverNotReady;
        self.count_refusal(code);
        self.queue_nak(NakHeader {
            common: self.nak_common(path, psn, sent_us),
            code,
            rnr_timer: rnr_timer & 31,
            stream,
            msn,
        })
    }

    /// The receiver refused our packet `nak` names (message `msn` of
    /// `stream`) for want of a receive: park it, and stop the stream at
    /// that message for the NAK's timer, or fail the message once its
    /// retries are used up. A NAK that names no packet of ours as it was
    /// last sent changes nothing (an older copy's, or a forgery).
    pub(super) fn on_not_ready(&mut self, nak: &NakHeader, now: u64) -> Result<(), RecvError> {
        let (stream, msn) = (nak.stream, nak.msn);
        let i = position(&self.msgs, |m| {
            m.state == MsgState::Active && m.msg.stream == stream && m.msg.msn == msn
        })
        .ok_or(RecvError::Nak)?;
        let parked = self.park(i, nak.common.path, nak.common.psn, nak.common.timestamp);
        if parked == Park::Stale {
            // Usual under reordering or duplication (the refusal of an
            // older copy, of one parked already): nothing to do.
            return Ok(());
        }
        let m = self.msgs.get_mut(i).ok_or(RecvError::Nak)?;
        // Failed or cancelled: what it parked is dropped. Already waiting:
        // another of its packets was refused in the same round.
        if m.cancelled || m.error.is_some() {
            self.sweep_parked();
            return Ok(());
        }
        // Out of room to park a refused packet (it could not close its PSN,
        // which would hold its path's window for every stream), even in a
        // round already counted, or out of retries: the message fails.
        if parked != Park::Full && m.rnr_until != 0 {
            return Ok(());
        }
        if m.rnr_left == 0 || parked == Park::Full {
            m.cancelled = true;
            self.fail_message(stream, msn, NakCode::ReceiverNotReady)?;
            self.sweep_parked();
            return Ok(());
        }
        if m.rnr_left != RNR_FOREVER {
            m.rnr_left -= 1;
        }
        let gen = m.gen;
        let until = now.saturating_add(rnr_delay_ns(nak.rnr_timer)).max(1);
        // The stream stops at this message: nothing more of it or of a
        // later message of the stream is cut until the timer has passed
        // (their Sends find no receive either). Messages posted meanwhile
        // take the wait too (`post_with`).
        let next_gen = self.next_gen;
        for w in self.msgs.iter_mut() {
            let later = w.gen.wrapping_sub(next_gen) >= gen.wrapping_sub(next_gen);
            if w.state == MsgState::Active && w.msg.stream == stream && later && w.rnr_until == 0 {
                w.rnr_until = until;
            }
        }
        self.rnr_wake = Some(self.rnr_wake.map_or(until, |w| w.min(until)));
        tally(&mut self.stats.rnr_waits, 1);
        self.advance_cursor();
        Ok(())
    }

    /// When `stream` waits for its receiver, until when (0: it does not).
    pub(super) fn stream_waits(&self, stream: u32) -> u64 {
        if self.rnr_wake.is_none() {
            return 0;
        }
        self.msgs
            .iter()
            .find(|m| m.state == MsgState::Active && m.msg.stream == stream && m.rnr_until != 0)
            .map_or(0, |m| m.rnr_until)
    }

    /// Parks the packet of message `i` sent as `psn` on `path`, if that is
    /// the copy the receiver refused (sent at `sent_us`: a later copy may
    /// still land) and it is not acknowledged: its PSN is sent again void,
    /// and its bytes wait in the table.
    fn park(&mut self, i: usize, path: u16, psn: u32, sent_us: u32) -> Park {
        let Some((gen, stream, payload)) = self
            .msgs
            .get(i)
            .map(|m| (m.gen, m.msg.stream, u32::from(m.payload.max(1))))
        else {
            return Park::Stale;
        };
        let Some(p) = self.tx.get_mut(usize::from(path)) else {
            return Park::Stale;
        };
        let Some(una) = p.seq.oldest_unacked() else {
            return Park::Stale;
        };
        if psn.wrapping_sub(una) >= p.seq.in_flight() || p.seq.is_acked(psn) {
            return Park::Stale;
        }
        let idx = psn % WINDOW;
        let Some(slot) = p.slots.get_mut(psn as usize % SLOTS) else {
            return Park::Stale;
        };
        if slot.state != SlotState::Live
            || usize::from(slot.msg) != i
            || slot.gen != gen
            || slot.void
            || slot.sent_us != sent_us
        {
            return Park::Stale;
        }
        let offset = slot.offset;
        // A run of the message it extends at either end, or a new run.
        let n = usize::from(self.n_parked);
        let msgs = &self.msgs;
        let mut runs_of_stream: usize = 0;
        let mut joined = None;
        let runs = (0..n).zip(self.parked.iter_mut());
        for (k, e) in runs {
            if msgs
                .get(usize::from(e.msg))
                .is_some_and(|m| m.msg.stream == stream)
            {
                runs_of_stream = runs_of_stream.saturating_add(1);
            }
            if joined.is_some() || usize::from(e.msg) != i || e.gen != gen {
                continue;
            }
            if run_end(e, payload) == Some(offset) {
                e.count = e.count.saturating_add(1);
                joined = Some(k);
            } else if offset.checked_add(payload) == Some(e.offset) {
                e.offset = offset;
                e.count = e.count.saturating_add(1);
                joined = Some(k);
            }
        }
        if joined.is_none() {
            let Some(e) = self
                .parked
                .get_mut(n)
                .filter(|_| runs_of_stream < PARKED_PER_STREAM)
            else {
                // Its message fails: the packet goes out void now.
                slot.by_order = false;
                p.relocate.clear(idx);
                p.resend.set(idx);
                return Park::Full;
            };
            *e = Parked {
                msg: i as u16,
                gen,
                offset,
                count: 1,
            };
            self.n_parked = self.n_parked.saturating_add(1);
        }
        slot.void = true;
        slot.by_order = false;
        p.relocate.clear(idx);
        p.resend.set(idx);
        if let Some(m) = self.msgs.get_mut(i) {
            m.voids = m.voids.saturating_add(1);
        }
        if let Some(k) = joined {
            // It may have closed the gap to another run of the message
            // (NAKs of one round arrive in any order): one run again.
            self.merge_runs(k, payload);
        }
        Park::Parked
    }

    /// Merges into run `k` the run of the same message that starts where
    /// it ends or ends where it starts, if there is one.
    fn merge_runs(&mut self, k: usize, payload: u32) {
        let Some(r) = self.parked.get(k).copied() else {
            return;
        };
        let other = indexed(self.parked_runs())
            .find(|&(j, e)| {
                j != k
                    && e.msg == r.msg
                    && e.gen == r.gen
                    && (run_end(&r, payload) == Some(e.offset)
                        || run_end(e, payload) == Some(r.offset))
            })
            .map(|(j, _)| j);
        let Some(j) = other else {
            return;
        };
        let Some(e) = self.parked.get(j).copied() else {
            return;
        };
        if let Some(m) = self.parked.get_mut(k) {
            m.offset = m.offset.min(e.offset);
            m.count = m.count.saturating_add(e.count);
        }
        // `unpark` moves the last run into `j` (if that was `k`, the merged
        // run moves with it).
        self.unpark(j);
    }

    /// Takes parked entry `k` out of the table.
    fn unpark(&mut self, k: usize) -> Option<Parked> {
        let last = usize::from(self.n_parked).checked_sub(1)?;
        let e = *self.parked.get(k)?;
        let moved = *self.parked.get(last)?;
        if let Some(slot) = self.parked.get_mut(k) {
            *slot = moved;
        }
        self.n_parked = self.n_parked.saturating_sub(1);
        Some(e)
    }

    /// Drops the parked packets of messages that failed, were cancelled or
    /// are gone; a message's own count as done (nothing more of it goes
    /// out).
    pub(super) fn sweep_parked(&mut self) {
        let mut k = 0;
        while let Some(e) = self
            .parked
            .get(k)
            .copied()
            .filter(|_| k < usize::from(self.n_parked))
        {
            let Some(m) = self.msgs.get_mut(usize::from(e.msg)) else {
                return;
            };
            let mine = m.gen == e.gen && m.state == MsgState::Active;
            if mine && !m.cancelled && m.error.is_none() {
                k += 1;
                continue;
            }
            if mine {
                m.acked = m.acked.saturating_add(e.count);
                if m.settled() && m.sent_packets == m.packets {
                    m.state = MsgState::Done;
                }
            }
            self.unpark(k);
            if mine {
                self.release(e.msg);
            }
        }
    }

    /// A parked packet that may go out again (its message waits no more).
    fn ready_parked(&self) -> Option<usize> {
        position(self.parked_runs(), |e| {
            self.msgs
                .get(usize::from(e.msg))
                .is_some_and(|m| m.rnr_until == 0)
        })
    }

    /// The parked runs in use.
    fn parked_runs(&self) -> &[Parked] {
        let n = usize::from(self.n_parked).min(self.parked.len());
        &self.parked[..n]
    }

    /// Whether a parked packet may go out again now.
    pub(super) fn parked_ready(&self) -> bool {
        self.conn_has_room() && self.ready_parked().is_some()
    }

    /// Sends the first packet of a parked run whose message no longer
    /// waits, as a new packet (not paced: as a resend, it is data the
    /// receiver's share already counted once).
    pub(super) fn send_parked(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        let k = self.ready_parked()?;
        if !self.conn_has_room() {
            return None;
        }
        let path = self.pick(None)?;
        let e = *self.parked.get(k)?;
        let (msg_len, payload, has_payload) = self
            .msgs
            .get(usize::from(e.msg))
            .map(|m| (m.msg.len, u32::from(m.payload), m.msg.opcode.has_payload()))?;
        let len = if has_payload {
            msg_len.saturating_sub(e.offset).min(payload) as u16
        } else {
            0
        };
        let slot = TxSlot {
            state: SlotState::Live,
            msg: e.msg,
            gen: e.gen,
            offset: e.offset,
            len,
            last: e.offset.saturating_add(u32::from(len)) >= msg_len,
            ..TxSlot::default()
        };
        let psn = self.place(path, slot, now)?;
        if e.count > 1 {
            if let Some(r) = self.parked.get_mut(k) {
                r.offset = r.offset.saturating_add(payload);
                r.count = r.count.saturating_sub(1);
            }
        } else {
            self.unpark(k);
        }
        tally(&mut self.stats.retransmits, 1);
        let extra = flags::RETRANSMIT | flags::ACK_REQ;
        self.encode_slot(path, psn, &slot, extra, now, buf)
    }

    /// Whether messages wait for their receiver (a timer will send them).
    pub fn waits_for_receiver(&self) -> bool {
        self.rnr_wake.is_some() || self.n_parked > 0
    }

    /// The messages whose wait is over go on.
    pub(super) fn wake_waiting(&mut self, now: u64) {
        if self.rnr_wake.is_none_or(|w| w > now) {
            return;
        }
        let mut next: Option<u64> = None;
        for m in self.msgs.iter_mut().filter(|m| m.rnr_until != 0) {
            if m.rnr_until <= now {
                m.rnr_until = 0;
            } else {
                next = Some(next.map_or(m.rnr_until, |w| w.min(m.rnr_until)));
            }
        }
        self.rnr_wake = next;
        self.advance_cursor();
    }
}
