// SPDX-License-Identifier: GPL-2.0

//! The transmit path: what to send next (control, resends, relocated
//! packets, new data), which path takes it, pacing new data, and building
//! data packets.

use super::super::cc::pick_path;
use super::super::framing::HEADER_OVERHEAD;
use super::super::path::WINDOW;
use super::super::seq::Bits256;
use super::super::stats::tally;
use super::super::trace::TraceEvent;
use super::super::wire::{self, flags, Common, DataHeader, Origin, PacketType};
use super::{position, us, Connection, MsgState, Segment, SlotState, Transmit, TxSlot, SLOTS};

/// The smallest first flight, in packets. With the simulator's initial
/// windows of 2 packets a flight of 2 stalled a start at 10% loss (the
/// 10%-loss point of seed 3 fell from 0.835 to 0.495 of lossless); with 8 it
/// is 0.835 again.
const FIRST_FLIGHT_MIN: u32 = 8;

/// Packets of idle time the pacer may make up in a burst.
const PACE_CREDIT: u64 = 4;

/// How early the pacer lets a packet go (nanoseconds): a slot due within
/// this is taken now (the long-run rate is unchanged: each packet still
/// books the next slot one gap later). At a share of gigabits a gap is a
/// microsecond or two, less than a timer can be relied on for; without
/// slack each slot cost a timer and a wake-up, and a 10 Gbit/s hint held a
/// kernel sender to ~20 Mbit/s. (Linux's fq qdisc allows the same 10 us.)
const PACE_SLACK_NS: u64 = 10_000;

/// The time a packet of `len` payload bytes takes at `kbps`, in
/// nanoseconds: bits / (kbit/s) = ms, times 1,000,000 (a packet's bits are
/// below 2^20: no overflow).
pub(super) fn pace_gap(len: u16, kbps: u32) -> u64 {
    let bits = (u64::from(len) + u64::from(HEADER_OVERHEAD)) * 8;
    bits * 1_000_000 / u64::from(kbps.max(1))
}

impl<const P: usize> Connection<P> {
    /// The next packet to send now, its header written to `buf` (which must
    /// hold [`super::super::framing::TRANSPORT_HEADER_MAX`] bytes); `None` when
    /// nothing may be sent until an input arrives.
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        if self.nak_len > 0 {
            return self.send_nak(buf);
        }
        if let Some(i) = position(&self.rx, |r| r.due) {
            return self.send_ack(i, buf);
        }
        for i in 0..self.n_paths() {
            if self.tx.get(i).is_some_and(|p| !p.resend.is_empty()) {
                if let Some(t) = self.send_resend(i, now, buf) {
                    return Some(t);
                }
            }
        }
        for i in 0..self.n_paths() {
            if self.tx.get(i).is_some_and(|p| !p.relocate.is_empty()) {
                if let Some(t) = self.send_relocated(i, now, buf) {
                    return Some(t);
                }
            }
        }
        if self.n_parked > 0 {
            if let Some(t) = self.send_parked(now, buf) {
                return Some(t);
            }
        }
        self.send_new(now, buf)
    }

    /// Like [`Self::poll_transmit`], but only an ACK or a NAK: for a caller
    /// that sends data from one context only and control from any.
    pub fn poll_control(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        if self.nak_len > 0 {
            return self.send_nak(buf);
        }
        let i = position(&self.rx, |r| r.due)?;
        self.send_ack(i, buf)
    }

    /// Whether [`Self::poll_transmit`] may send data now: a packet to resend
    /// or to move, or new data with room in the connection's window (the
    /// paths' windows and the pacer may still hold it back).
    pub fn wants_to_send(&self) -> bool {
        let n = self.n_paths();
        self.tx
            .iter()
            .take(n)
            .any(|p| !p.resend.is_empty() || !p.relocate.is_empty())
            || self.new_data_has_room()
            || (self.n_parked > 0 && self.parked_ready())
    }

    /// Whether new data waits and the connection's window has room for it
    /// (the paths' windows and the pacer may still hold it back).
    pub(super) fn new_data_has_room(&self) -> bool {
        self.cursor.is_some() && self.conn_has_room()
    }

    /// Encodes the data packet of `slot` as PSN `psn` of path `path`.
    pub(super) fn encode_slot(
        &self,
        path: usize,
        psn: u32,
        slot: &TxSlot,
        extra: u8,
        now: u64,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let m = self.msgs.get(usize::from(slot.msg))?;
        let mut fl = extra;
        // A cancelled message's packet goes out without its bytes.
        let (len, void) = if m.cancelled || slot.void {
            (0, true)
        } else {
            (slot.len, false)
        };
        if void {
            fl |= flags::VOID;
        }
        if slot.offset == 0 {
            fl |= flags::FIRST;
        }
        if slot.last {
            fl |= flags::LAST | flags::ACK_REQ;
        }
        if slot.origin.is_some() {
            fl |= flags::RELOCATED;
        }
        if m.msg.solicited {
            fl |= flags::SOLICITED;
        }
        let hdr = DataHeader {
            common: Common {
                ptype: PacketType::Data,
                flags: fl,
                path: path as u16,
                conn: self.cfg.remote_id,
                psn,
                timestamp: us(now),
            },
            opcode: m.msg.opcode,
            stream: m.msg.stream,
            msn: m.msg.msn,
            offset: slot.offset,
            msg_len: m.msg.len,
            remote: m.msg.remote,
            rsn: m.msg.rsn,
            imm: m.msg.imm,
            atomic: m.msg.atomic,
            origin: slot.origin,
        };
        let hlen = wire::encode_data(&hdr, len, buf).ok()?;
        Some(Transmit {
            path: path as u16,
            sport: self.tx.get(path)?.sport,
            reverse: false,
            len: hlen,
            payload: (len > 0).then_some(Segment {
                stream: m.msg.stream,
                msn: m.msg.msn,
                offset: slot.offset,
                len,
            }),
        })
    }

    fn send_resend(&mut self, i: usize, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        let p = self.tx.get_mut(i)?;
        let una = p.seq.oldest_unacked()?;
        // Oldest first: walk from una.
        let mut found = None;
        for k in 0..p.seq.in_flight() {
            let idx = una.wrapping_add(k) % WINDOW;
            if p.resend.clear(idx) {
                found = Some(una.wrapping_add(k));
                break;
            }
        }
        let Some(psn) = found else {
            p.resend = Bits256::EMPTY;
            return None;
        };
        if p.deadline.is_none() {
            p.deadline = Some(now.saturating_add(p.timer_ns(&self.rtt, &self.cfg)));
        }
        let slot = &mut p.slots[psn as usize % SLOTS];
        if slot.state != SlotState::Live {
            return None;
        }
        slot.order = p.next_order;
        slot.sent_us = us(now);
        slot.resent = true;
        slot.conn_order = self.tx_count;
        self.tx_count = self.tx_count.wrapping_add(1);
        p.next_order = p.next_order.wrapping_add(1);
        let slot = *slot;
        tally(&mut self.stats.retransmits, 1);
        tally(&mut p.stats.resent, 1);
        tally(&mut p.stats.sent, 1);
        let sport = p.sport;
        self.trace.push(TraceEvent::Resend {
            path: i as u16,
            psn,
            sport,
        });
        // With nothing more queued, a resend is the sender's last word
        // too (the DRY packet itself may have been the one lost).
        let extra = flags::RETRANSMIT | flags::ACK_REQ | self.dry_flag();
        self.encode_slot(i, psn, &slot, extra, now, buf)
    }

    /// Free window of path `i` for new packets (0 for a suspect path).
    fn free(&self, i: usize) -> u32 {
        let Some(p) = self.tx.get(i) else {
            return 0;
        };
        if p.expiries > 0 || !p.seq.can_send() {
            return 0;
        }
        p.cc.window().saturating_sub(p.outstanding)
    }

    /// The path for the next packet: the most free window among the paths
    /// known to work, else among those on a new, untried route.
    pub(super) fn pick(&self, except: Option<usize>) -> Option<usize> {
        let n = usize::from(self.cfg.paths);
        let free = |proven: bool| {
            pick_path((0..n).map(move |i| {
                let ok =
                    Some(i) != except && self.tx.get(i).is_some_and(|p| (p.strikes == 0) == proven);
                (if ok { self.free(i) } else { 0 }, 0)
            }))
        };
        free(true).or_else(|| free(false))
    }

    /// When the pacer lets the next new packet go: its slot, less the
    /// slack.
    pub(super) const fn pace_release_at(&self) -> u64 {
        self.next_send.saturating_sub(PACE_SLACK_NS)
    }

    /// Whether the connection window has room. Packets on a path whose
    /// timer expired without progress are likely gone, so they do not count
    /// (as lost packets leave TCP's pipe): the other paths keep sending.
    pub(super) fn conn_has_room(&self) -> bool {
        let stuck: u32 = self
            .tx
            .iter()
            .take(self.n_paths())
            .filter(|p| p.expiries > 0)
            .fold(0u32, |a, p| a.saturating_add(p.outstanding));
        self.outstanding.saturating_sub(stuck) < self.window_now()
    }

    /// The connection's window: the AIMD window, or the first flight's (one
    /// path's initial window, at least [`FIRST_FLIGHT_MIN`]) until the peer
    /// has answered.
    pub(super) fn window_now(&self) -> u32 {
        if self.answered {
            self.cc.window()
        } else {
            self.cc
                .window()
                .min(self.initial_window().max(FIRST_FLIGHT_MIN))
        }
    }

    /// Puts `slot` on a path as a new PSN and accounts for it.
    pub(super) fn place(&mut self, path: usize, mut slot: TxSlot, now: u64) -> Option<u32> {
        let p = self.tx.get_mut(path)?;
        let psn = p.seq.send()?;
        slot.state = SlotState::Live;
        slot.sent_us = us(now);
        slot.resent = false;
        slot.conn_order = self.tx_count;
        self.tx_count = self.tx_count.wrapping_add(1);
        slot.order = p.next_order;
        p.next_order = p.next_order.wrapping_add(1);
        p.slots[psn as usize % SLOTS] = slot;
        p.outstanding = p.outstanding.saturating_add(1);
        tally(&mut p.stats.sent, 1);
        if p.deadline.is_none() {
            p.deadline = Some(now.saturating_add(p.timer_ns(&self.rtt, &self.cfg)));
        }
        self.outstanding = self.outstanding.saturating_add(1);
        self.sent_total = self.sent_total.wrapping_add(1);
        Some(psn)
    }

    fn send_relocated(&mut self, src: usize, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        if !self.conn_has_room() {
            return None;
        }
        let target = self.pick(Some(src))?;
        let p = self.tx.get_mut(src)?;
        let idx = p.relocate.ones().next()?;
        p.relocate.clear(idx);
        let una = p.seq.oldest_unacked()?;
        let psn = una.wrapping_add(idx.wrapping_sub(una % WINDOW) % WINDOW);
        let old = &mut p.slots[idx as usize];
        if old.state != SlotState::Live {
            return None;
        }
        old.state = SlotState::Moved;
        let moved = TxSlot {
            by_order: false,
            origin: Some(Origin {
                path: src as u16,
                psn,
            }),
            ..*old
        };
        p.outstanding = p.outstanding.saturating_sub(1);
        self.outstanding = self.outstanding.saturating_sub(1);
        let new_psn = self.place(target, moved, now)?;
        tally(&mut self.stats.relocations, 1);
        if let Some(p) = self.tx.get_mut(src) {
            tally(&mut p.stats.relocated, 1);
        }
        self.trace.push(TraceEvent::Relocate {
            from: src as u16,
            psn,
            to: target as u16,
        });
        self.encode_slot(target, new_psn, &moved, flags::RETRANSMIT, now, buf)
    }

    fn send_new(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        // The pacer is a timer only while it alone holds new data back.
        self.paced = false;
        let ci = usize::from(self.cursor?);
        if !self.conn_has_room() {
            return None;
        }
        if self.pace_kbps > 0 && now < self.pace_release_at() {
            self.paced = true;
            return None;
        }
        let path = self.pick(None)?;
        let m = self.msgs.get_mut(ci)?;
        let mp = u32::from(m.payload);
        if m.state != MsgState::Active || m.sent_packets >= m.packets {
            self.advance_cursor();
            return None;
        }
        let offset = m.sent_packets.saturating_mul(mp);
        let len = if m.msg.opcode.has_payload() {
            m.msg.len.saturating_sub(offset).min(mp) as u16
        } else {
            0
        };
        m.sent_packets += 1;
        let last = m.sent_packets == m.packets;
        let slot = TxSlot {
            state: SlotState::Live,
            msg: ci as u16,
            gen: m.gen,
            offset,
            len,
            last,
            origin: None,
            order: 0,
            by_order: false,
            void: false,
            sent_us: 0,
            conn_order: 0,
            resent: false,
        };
        if last {
            self.advance_cursor();
        }
        let psn = self.place(path, slot, now)?;
        tally(&mut self.stats.tx_data, 1);
        let mut held = false;
        if self.pace_kbps > 0 {
            let gap = pace_gap(len, self.pace_kbps);
            // Time the pacer could not use (no window, nothing posted) is
            // credited up to PACE_CREDIT packets, so that the average reaches
            // the share instead of losing every idle moment.
            let floor = now.saturating_sub(gap * PACE_CREDIT);
            self.next_send = self.next_send.max(floor).saturating_add(gap);
            // The pacer holds the next packet longer than the receiver
            // holds an ACK back (both ends have the one configuration): the
            // receiver sees nothing more before its delayed ACK, so the ACK
            // is asked for now, and the probe timer does not wait on the
            // receiver's timer (late under load, it made paced senders
            // resend packets that were not lost). Not within a burst the
            // pacer's credit allows.
            held = self.pace_release_at() > now.saturating_add(u64::from(self.cfg.ack_delay_ns));
        }
        // Ask for an ACK when nothing more is queued or this path's window
        // is full, so the sender never waits on a delayed acknowledgement.
        // (Not when only the connection's window is full: the paths' ACKs
        // arrive every `ack_every` packets anyway, and asking on every send
        // that fills the window made an ACK of every other packet.) The
        // first flight's last packet asks too: no ACK clock runs yet. With
        // nothing more queued, the other paths' last packets would wait for
        // the receiver's delayed ACK, late under load (each then cost a
        // probe and a resend): DRY asks for every path's ACK.
        let first_done = !self.answered && self.outstanding >= self.window_now();
        let more = self.cursor.is_some() && self.free(path) > 0 && !held && !first_done;
        let extra = if more {
            0
        } else {
            flags::ACK_REQ | self.dry_flag()
        };
        self.encode_slot(path, psn, &slot, extra, now, buf)
    }

    /// [`flags::DRY`] when nothing more is queued to send (the packet being
    /// sent is the sender's last word for now), else nothing.
    fn dry_flag(&self) -> u8 {
        if self.cursor.is_none() {
            flags::DRY
        } else {
            0
        }
    }
}
