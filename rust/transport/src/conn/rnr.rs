// SPDX-License-Identifier: GPL-2.0

//! Receiver not ready: a packet of a Send or Write with Immediate that
//! finds no receive posted is refused without being acknowledged. The
//! receiver forgets that it arrived (no ACK can let its message complete as
//! delivered), and a NAK naming that packet (path, PSN, and the timestamp
//! of the copy refused) and the receiver's RNR timer goes back.
//!
//! The sender parks the refused packet: its PSN is closed with a void copy
//! at once (so that no path's window is pinned while the receiver waits),
//! and its bytes wait in a small table. The stream stops at the refused
//! message: nothing more of it or of the stream's later messages is cut.
//! When the timer has passed, the parked packets go out again as new
//! packets and the stream goes on. After the queue pair's `rnr_retry`
//! rounds of refusals (7: no limit) the message fails instead.

use super::super::path::{RecvPath, WINDOW};
use super::super::wire::{flags, Common, NakCode, NakHeader, PacketType};
use super::{Connection, MsgState, RecvError, SlotState, Transmit, TxSlot, SLOTS};

/// `rnr_retry` that never runs out, as verbs defines it.
pub const RNR_FOREVER: u8 = 7;

/// Refused packets a connection parks at once. One more is left in flight
/// as a hole (its path's window waits on it) and is sent again as a loss.
pub const PARKED: usize = 256;

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

/// Parked packets one stream may hold: a user who never posts receives
/// keeps at most this much of the table, and the other streams the rest.
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

/// A refused packet's bytes, waiting to be sent again.
#[derive(Clone, Copy, Debug)]
pub(super) struct Parked {
    msg: u16,
    gen: u32,
    offset: u32,
    len: u16,
    last: bool,
}

impl Parked {
    pub(super) const EMPTY: Self = Self {
        msg: 0,
        gen: 0,
        offset: 0,
        len: 0,
        last: false,
    };
}

/// What became of a refused packet at its sender.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Park {
    /// Parked now: its PSN goes out void.
    Parked,
    /// The copy refused is ours and the latest, but the table (or the
    /// stream's share) is full: it is resent as a loss, on its PSN.
    Full,
    /// Not an unacknowledged packet of ours whose latest copy was the one
    /// refused (an older copy, one already parked, or a forgery).
    Stale,
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
        if let Some(u) = self.undo.take().filter(|u| u.path == path && u.psn == psn) {
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
        }
        self.rnr_timer = rnr_timer & 31;
        self.rnr_nak(path, psn, sent_us, stream, msn)
    }

    /// Queues the receiver-not-ready NAK of a packet (and counts it).
    pub(super) fn rnr_nak(
        &mut self,
        path: u16,
        psn: u32,
        sent_us: u32,
        stream: u32,
        msn: u32,
    ) -> bool {
        let code = NakCode::ReceiverNotReady;
        if let Some(r) = self.stats.refused.get_mut(usize::from(code as u8) - 1) {
            *r += 1;
        }
        self.queue_nak(NakHeader {
            common: Common {
                ptype: PacketType::Nak,
                flags: 0,
                path,
                conn: self.cfg.remote_id,
                psn,
                timestamp: sent_us,
            },
            code,
            rnr_timer: self.rnr_timer,
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
        let i = self
            .msgs
            .iter()
            .position(|m| m.state == MsgState::Active && m.msg.stream == stream && m.msg.msn == msn)
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
        if m.rnr_until != 0 {
            return Ok(());
        }
        if m.rnr_left == 0 {
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
        self.stats.rnr_waits += 1;
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
        let Some((gen, stream)) = self.msgs.get(i).map(|m| (m.gen, m.msg.stream)) else {
            return Park::Stale;
        };
        let n = usize::from(self.n_parked);
        let mine = self
            .parked
            .iter()
            .take(n)
            .filter(|e| {
                self.msgs
                    .get(usize::from(e.msg))
                    .is_some_and(|m| m.msg.stream == stream)
            })
            .count();
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
        let Some(entry) = self.parked.get_mut(n).filter(|_| mine < PARKED_PER_STREAM) else {
            return Park::Full;
        };
        *entry = Parked {
            msg: slot.msg,
            gen,
            offset: slot.offset,
            len: slot.len,
            last: slot.last,
        };
        self.n_parked += 1;
        slot.void = true;
        slot.by_order = false;
        p.relocate.clear(idx);
        p.resend.set(idx);
        if let Some(m) = self.msgs.get_mut(i) {
            m.voids = m.voids.saturating_add(1);
        }
        Park::Parked
    }

    /// Takes parked entry `k` out of the table.
    fn unpark(&mut self, k: usize) -> Option<Parked> {
        let last = usize::from(self.n_parked).checked_sub(1)?;
        let e = *self.parked.get(k)?;
        let moved = *self.parked.get(last)?;
        if let Some(slot) = self.parked.get_mut(k) {
            *slot = moved;
        }
        self.n_parked -= 1;
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
                m.acked += 1;
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
        self.parked
            .iter()
            .take(usize::from(self.n_parked))
            .position(|e| {
                self.msgs
                    .get(usize::from(e.msg))
                    .is_some_and(|m| m.rnr_until == 0)
            })
    }

    /// Whether a parked packet may go out again now.
    pub(super) fn parked_ready(&self) -> bool {
        self.conn_has_room() && self.ready_parked().is_some()
    }

    /// Sends a parked packet whose message no longer waits, as a new packet
    /// (not paced: as a resend, it is data the receiver's share already
    /// counted once).
    pub(super) fn send_parked(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        self.sweep_parked();
        let k = self.ready_parked()?;
        if !self.conn_has_room() {
            return None;
        }
        let path = self.pick(None)?;
        let e = *self.parked.get(k)?;
        let slot = TxSlot {
            state: SlotState::Live,
            msg: e.msg,
            gen: e.gen,
            offset: e.offset,
            len: e.len,
            last: e.last,
            ..TxSlot::default()
        };
        let psn = self.place(path, slot, now)?;
        self.unpark(k);
        self.stats.retransmits += 1;
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
