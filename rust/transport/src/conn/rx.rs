// SPDX-License-Identifier: GPL-2.0

//! The receive path: decoding arriving datagrams, taking data in (with
//! ECN marks and relocated copies), and the ACKs and NAKs both ways:
//! processing them (SACK, RTT samples, loss, ECN echo, the peer's rate
//! hint) and building our own.

use super::super::cc::window_for_rate;
use super::super::framing::HEADER_OVERHEAD;
use super::super::path::{AckError, AckOutcome, Arrival, RecvPath, WINDOW};
use super::super::seq::{before, Bits256};
use super::super::stats::tally;
use super::super::trace::TraceEvent;
use super::super::wire::{
    self, flags, AckHeader, Common, DataHeader, NakCode, NakHeader, Packet, PacketType,
};
use super::rnr::Undo;
use super::tx::pace_gap;
use super::{us, Connection, MsgState, Received, RecvError, SlotState, Transmit, TxPath};
use super::{CE_ONE, MIN_PACE_KBPS, PORT_BASE};

/// Packets acknowledged without a spurious resend after which the allowed
/// reordering eases back.
const REORDER_EASE_AFTER: u32 = 4096;

impl<const P: usize> Connection<P> {
    /// Handles a datagram that arrived from UDP source port `sport`, marked
    /// ECN CE if `ce`.
    pub fn on_datagram<'a>(
        &mut self,
        now: u64,
        buf: &'a [u8],
        sport: u16,
        ce: bool,
    ) -> Result<Received<'a>, RecvError> {
        let r = self.receive(now, buf, sport, ce);
        if let Err(e) = &r {
            tally(&mut self.stats.rx_errors, 1);
            if let Some(d) = self.stats.drops.get_mut(e.reason() as usize) {
                tally(d, 1);
            }
        }
        r
    }

    fn receive<'a>(
        &mut self,
        now: u64,
        buf: &'a [u8],
        sport: u16,
        ce: bool,
    ) -> Result<Received<'a>, RecvError> {
        self.undo = None;
        let pkt = wire::decode(buf).map_err(RecvError::Decode)?;
        let common = match &pkt {
            Packet::Data(h, _) => h.common,
            Packet::Ack(a) => a.common,
            Packet::Nak(n) => n.common,
            // A datagram is no connection's (the dispatch sends it elsewhere).
            Packet::Hello(_) | Packet::Datagram(..) => return Err(RecvError::Hello),
        };
        if common.conn != self.cfg.local_id {
            return Err(RecvError::Connection(common.conn));
        }
        let path = usize::from(common.path);
        if path >= P {
            return Err(RecvError::Path(common.path));
        }
        match pkt {
            Packet::Data(hdr, payload) => self.on_data(now, path, hdr, payload, sport, ce),
            Packet::Ack(ack) => {
                self.on_ack(path, &ack, now)?;
                tally(&mut self.stats.rx_acks, 1);
                Ok(Received::Control)
            }
            Packet::Nak(nak) => {
                self.on_nak(&nak, now)?;
                tally(&mut self.stats.rx_naks, 1);
                Ok(Received::Control)
            }
            // A datagram is no connection's (the dispatch sends it elsewhere).
            Packet::Hello(_) | Packet::Datagram(..) => Err(RecvError::Hello),
        }
    }

    fn on_data<'a>(
        &mut self,
        now: u64,
        path: usize,
        hdr: DataHeader,
        payload: &'a [u8],
        sport: u16,
        ce: bool,
    ) -> Result<Received<'a>, RecvError> {
        // A relocated copy names its first path and PSN: check them before
        // anything is recorded, so that a malformed one burns no PSN.
        if let Some(o) = hdr.origin {
            // A copy moves to another path, never its own (one claiming so
            // would have its two PSNs share one window's undo).
            if usize::from(o.path) == path {
                return Err(RecvError::Path(o.path));
            }
            let orig = self
                .rx
                .get(usize::from(o.path))
                .ok_or(RecvError::Path(o.path))?;
            if orig.seq.classify(o.psn) == Arrival::OutOfWindow {
                return Err(RecvError::Window);
            }
        }
        let origin_before = hdr
            .origin
            .and_then(|o| Some((o.path, o.psn, self.rx.get(usize::from(o.path))?.seq)));
        // A data copy of a packet refused for want of a receive (or a
        // relocated copy of one) is refused again, whatever is posted now:
        // its sender parked it and sends its bytes again on a new PSN, and
        // they must not land twice. Only its void copy fills the PSN.
        let refused = |seq: &RecvPath, psn: u32| seq.is_refused(psn);
        let refused_before = self
            .rx
            .get(path)
            .is_some_and(|r| refused(&r.seq, hdr.common.psn))
            || origin_before.is_some_and(|(_, psn, seq)| refused(&seq, psn));
        if refused_before && hdr.common.flags & flags::VOID == 0 {
            return Ok(Received::Refused(hdr));
        }
        let rx = self.rx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
        let before_seq = rx.seq;
        let had_holes = rx.seq.has_holes();
        let arrival = rx.seq.on_data(hdr.common.psn, ce);
        if arrival == Arrival::OutOfWindow {
            return Err(RecvError::Window);
        }
        rx.unacked = rx.unacked.saturating_add(1);
        if rx.ack_at.is_none() {
            rx.ack_at = Some(now.saturating_add(u64::from(self.cfg.ack_delay_ns)));
        }
        rx.due |= hdr.common.flags & flags::ACK_REQ != 0
            || rx.unacked >= self.cfg.ack_every.max(1)
            || ce
            || arrival == Arrival::Duplicate
            || (had_holes && !rx.seq.has_holes());
        let ts = hdr.common.timestamp;
        let newer = rx.newest == 0 || (ts.wrapping_sub(rx.newest) as i32) > 0;
        if arrival == Arrival::Duplicate {
            // Anyone who saw the packet can send it again, later, from any
            // port and with any ECN mark: an old copy is only counted and
            // acknowledged at once (flagged DUPLICATE). It does not move
            // the port our ACKs leave from, nor set the timestamp they echo
            // or the marks. A copy newer than anything seen on the path is
            // the sender's own resend (of a path that moved, whose ACKs'
            // route may be what failed): the ACKs follow its port.
            if newer {
                rx.newest = ts;
                rx.sport = sport;
            }
            rx.dup = true;
            tally(&mut rx.stats.duplicates, 1);
            tally(&mut self.stats.rx_duplicates, 1);
            return Ok(Received::Duplicate);
        }
        if newer {
            rx.newest = ts;
        }
        rx.sport = sport;
        rx.echo = ts;
        self.last_rx_path = Some(path as u16);
        if ce {
            tally(&mut rx.stats.ce_marked, 1);
        }
        // Smoothed share of marked data, over about 16 packets.
        self.ce_ewma = self.ce_ewma - self.ce_ewma / 16 + if ce { CE_ONE / 16 } else { 0 };
        tally(&mut rx.stats.rcvd, 1);
        if let Some(o) = hdr.origin {
            // The first copy went on another path: count it received there,
            // and drop this one if the first copy made it after all.
            let orig = self
                .rx
                .get_mut(usize::from(o.path))
                .ok_or(RecvError::Path(o.path))?;
            match orig.seq.on_data(o.psn, false) {
                Arrival::New => orig.ack_at = Some(now),
                Arrival::Duplicate => {
                    tally(&mut self.stats.rx_duplicates, 1);
                    return Ok(Received::Duplicate);
                }
                Arrival::OutOfWindow => return Err(RecvError::Window),
            }
        }
        if hdr.common.flags & flags::DRY != 0 {
            // The sender's queue ran dry with this packet: every path that
            // owes an ACK sends it now, not after the delayed-ACK timer
            // (which runs late when softirq does). Only on a new packet: a
            // copy of an old one (anyone who saw it can send it again) is
            // acknowledged alone, above; so is a relocated copy whose first
            // copy arrived.
            for r in &mut self.rx {
                r.due |= r.ack_at.is_some();
            }
        }
        if hdr.common.flags & flags::VOID != 0 {
            return Ok(Received::Void);
        }
        tally(&mut self.stats.rx_data, 1);
        self.undo = Some(Undo {
            path: path as u16,
            psn: hdr.common.psn,
            seq: before_seq,
            origin: origin_before,
        });
        Ok(Received::Data(hdr, payload))
    }

    fn on_ack(&mut self, path: usize, ack: &AckHeader, now: u64) -> Result<(), RecvError> {
        if let Some(code) = ack.status {
            // Before crediting: the rejected message must not complete as a
            // success. Repeated statuses find nothing (already handled).
            let _ = self.fail_message(ack.stream, ack.stream_msn, code);
        }
        let sack = Bits256::from_bytes(&ack.sack);
        let p = self.tx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
        let out = match p.seq.on_ack(ack.common.psn, &sack) {
            Ok(out) => out,
            Err(AckError::Stale) => return Ok(()),
            Err(AckError::AheadOfSender) => return Err(RecvError::Ack),
        };
        // Only an ACK of something new ends the first flight: an empty one
        // (anyone who saw the connection's identifiers can send it) does not.
        self.answered |= out.newly_acked > 0;
        let rtt = us(now).wrapping_sub(ack.common.timestamp);
        // The latest send time among the packets this ACK acknowledges
        // first: the echo of a packet we sent is never newer than that.
        let newest_sent = newest_sent_us(p, &out);
        // Only an ACK that acknowledges something new is a sample: a copy
        // of an old one (anyone who saw it can send it again) would be a
        // sample as old as the copy. And only an echo no newer than what it
        // acknowledges: a forged timestamp of "now" would make a round trip
        // of nothing, and the minimum it set would cap the window near one
        // packet (the hint's window is the share over the minimum).
        let echo_ok = newest_sent.is_some_and(|t| !before(t, ack.common.timestamp));
        if out.newly_acked > 0 {
            self.progress_at = now.max(1);
        }
        if out.newly_acked > 0 && echo_ok && ack.common.timestamp != 0 && rtt < 10_000_000 {
            p.rtt.sample(rtt.max(1));
            self.rtt.sample(rtt.max(1));
            if !self.all_sampled {
                // Paths of one connection cross the same fabric: a path
                // without a sample of its own starts from this one's.
                let est = p.rtt;
                self.all_sampled = true;
                for q in &mut self.tx {
                    if !q.rtt.is_sampled() {
                        q.rtt = est;
                    }
                }
            }
        }
        // Newly acknowledged packets: credit their messages.
        let mut finished = [0u16; 8];
        let mut n_finished = 0;
        for i in out.acked.ones() {
            let psn = out.acked_base.wrapping_add(i);
            let idx = psn % WINDOW;
            let p = self.tx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
            p.resend.clear(idx);
            p.relocate.clear(idx);
            let slot = core::mem::take(&mut p.slots[idx as usize]);
            if slot.state != SlotState::Live {
                continue;
            }
            if slot.by_order {
                p.order_acked_at = now.max(1);
            }
            p.outstanding = p.outstanding.saturating_sub(1);
            self.outstanding = self.outstanding.saturating_sub(1);
            self.acked_total = self.acked_total.wrapping_add(1);
            // A resent packet's order is its resend's. If the copy that
            // arrived is an earlier one (the ACK echoes a packet sent before
            // the resend: the original was late, not lost), the packets
            // sent between the two are not known to be overtaken: taking
            // the resend's order declared them all lost, and one spurious
            // probe behind a queue resent its path's whole window. An ACK
            // that echoes nothing (0: no fresh arrival since the last)
            // cannot tell the copies apart either.
            let ts = ack.common.timestamp;
            let earlier_copy = slot.resent && (ts == 0 || before(ts, slot.sent_us));
            if !earlier_copy {
                if before(p.delivered, slot.order.wrapping_add(1)) {
                    p.delivered = slot.order.wrapping_add(1);
                }
                if before(self.delivered_order, slot.conn_order.wrapping_add(1)) {
                    self.delivered_order = slot.conn_order.wrapping_add(1);
                }
            }
            // A relocated copy's arrival counted its first PSN received on
            // the path it left: that PSN is acknowledged too, whether or not
            // the first path's ACK saying so arrives.
            if let Some(o) = slot.origin {
                if let Some(q) = self.tx.get_mut(usize::from(o.path)) {
                    q.seq.acknowledge(o.psn);
                }
            }
            let Some(m) = self.msgs.get_mut(usize::from(slot.msg)) else {
                continue;
            };
            if m.state == MsgState::Active && m.gen == slot.gen {
                if slot.void {
                    // The void copy closing a parked packet's PSN: its
                    // bytes come (or came) on another.
                    m.voids = m.voids.saturating_sub(1);
                } else {
                    m.acked = m.acked.saturating_add(1);
                }
                if m.settled() && m.sent_packets == m.packets {
                    m.state = MsgState::Done;
                    if n_finished < finished.len() {
                        finished[n_finished] = slot.msg;
                        n_finished += 1;
                    }
                }
            }
        }
        let p = self.tx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
        // Reordering: a packet the reordering rule marked lost was
        // acknowledged, and a duplicate is reported on its path within a
        // probe timer of that (usually in a later ACK: the first copy's ACK
        // freed the slot, the second copy makes the duplicate). The resend
        // is taken for spurious: allow twice the reordering. A long run
        // without one eases it back by a quarter. (A duplicate of a timer
        // probe says nothing about reordering, only that an ACK was lost:
        // counting those at 10% loss grew the allowance to its maximum, and
        // every loss then waited for the timer.)
        let floor = self.cfg.reorder_window;
        if ack.common.flags & wire::ack_flags::DUPLICATE != 0
            && p.order_acked_at != 0
            && now.saturating_sub(p.order_acked_at) <= p.timer_ns(&self.rtt, &self.cfg)
        {
            p.order_acked_at = 0;
            tally(&mut self.stats.spurious, 1);
            // min/max, not clamp: clamp has a panic path for min > max.
            self.reorder = self
                .reorder
                .max(1)
                .saturating_mul(2)
                .min(WINDOW / 2)
                .max(floor);
            self.reorder_quiet = 0;
        } else {
            self.reorder_quiet = self.reorder_quiet.saturating_add(out.newly_acked);
            if self.reorder_quiet >= REORDER_EASE_AFTER {
                self.reorder = (self.reorder - self.reorder / 4).max(floor);
                self.reorder_quiet = 0;
            }
        }
        // Loss: unacknowledged packets sent before one that was acknowledged.
        let reorder = self.reorder;
        // The first PSN not acknowledged: the next to send when nothing is
        // in flight (0 there set the halving's recovery point to PSN 0, and
        // on a path whose PSNs were in the upper half of the space every
        // later mark was ignored until they wrapped).
        let una = p.seq.una();
        for k in 0..p.seq.in_flight() {
            let psn = una.wrapping_add(k);
            let idx = psn % WINDOW;
            let slot = &p.slots[idx as usize];
            if slot.state == SlotState::Live
                && !p.seq.is_acked(psn)
                && before(slot.order.wrapping_add(reorder), p.delivered)
                && !p.relocate.get(idx)
                && !p.resend.get(idx)
            {
                p.resend.set(idx);
                p.slots[idx as usize].by_order = true;
            }
        }
        // Congestion control.
        if ack.ecn_ce > 0 {
            tally(&mut self.stats.ce_echoed, u64::from(ack.ecn_ce));
            tally(&mut p.stats.ce_echoed, u64::from(ack.ecn_ce));
            // Coupled decrease: the connection gives up what the marked path
            // gave up, so a congested path sheds its load onto the others
            // while marks on every path still halve the whole.
            let before = p.cc.window();
            if p.cc.on_congestion(una, una.wrapping_add(p.seq.in_flight())) {
                self.cc.reduce(before.saturating_sub(p.cc.window()));
            }
            self.trace.push(TraceEvent::Ecn {
                path: path as u16,
                marks: ack.ecn_ce,
                path_window: p.cc.window(),
                conn_window: self.cc.window(),
            });
        } else if out.newly_acked > 0 {
            p.cc.on_acked(out.newly_acked);
            self.cc.on_acked(out.newly_acked);
        }
        // A hint is obeyed down to MIN_PACE_KBPS: one forged ACK asking for
        // 1 kbit/s would otherwise hold the next packet back for seconds.
        let hint = match ack.rate_hint_kbps {
            0 => 0,
            k => k.max(MIN_PACE_KBPS),
        };
        if self.pace_kbps != hint {
            self.trace.push(TraceEvent::RateHint {
                from: self.pace_kbps,
                to: hint,
            });
            // The next packet is due no later than one gap at the new rate
            // (a slot booked at a slower rate is not kept).
            if hint > 0 {
                let soonest = now.saturating_add(pace_gap(self.cfg.max_payload, hint));
                self.next_send = self.next_send.min(soonest);
            }
        }
        self.pace_kbps = hint;
        if hint > 0 {
            // The share over the round trip without queueing but with the
            // ACK delay (the peer runs the same configuration), and one
            // packet more (the division rounds down): the senders' windows
            // stay near the receiver's bandwidth-delay product, so a
            // standing queue drains instead of being kept, while the pacer,
            // not the window, sets the rate. Over the bare round trip a
            // share of a packet or two made each packet wait for the
            // delayed ACK of the one before.
            let round_us = self
                .rtt
                .min_us()
                .saturating_add(self.cfg.ack_delay_ns / 1000)
                .max(1);
            let bytes = u32::from(self.cfg.max_payload) + HEADER_OVERHEAD;
            self.cc
                .cap(window_for_rate(hint, round_us, bytes).saturating_add(1));
        }
        // Timer: progress restarts it.
        if out.newly_acked > 0 {
            p.expiries = 0;
            p.strikes = 0;
            p.acked_at = now.max(1);
            p.deadline =
                (p.outstanding > 0).then(|| now.saturating_add(p.timer_ns(&self.rtt, &self.cfg)));
        }
        for m in finished.into_iter().take(n_finished) {
            self.release(m);
        }
        if n_finished == finished.len() {
            // More finished than tracked above: sweep every stream.
            self.release_all();
        }
        Ok(())
    }

    fn on_nak(&mut self, nak: &NakHeader, now: u64) -> Result<(), RecvError> {
        if nak.code == NakCode::ReceiverNotReady {
            return self.on_not_ready(nak, now);
        }
        self.fail_message(nak.stream, nak.msn, nak.code)
    }

    pub(super) fn send_nak(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let nak = self.naks[0];
        self.naks.copy_within(1.., 0);
        self.nak_len -= 1;
        let path = usize::from(nak.common.path);
        let sport = self.rx.get(path).map_or(PORT_BASE, |r| r.sport);
        let len = wire::encode_nak(&nak, buf).ok()?;
        tally(&mut self.stats.tx_naks, 1);
        Some(Transmit {
            path: nak.common.path,
            sport,
            reverse: true,
            len,
            payload: None,
        })
    }

    pub(super) fn send_ack(&mut self, i: usize, buf: &mut [u8]) -> Option<Transmit> {
        let hint = self.hint_now();
        let rx = self.rx.get_mut(i)?;
        rx.due = false;
        rx.unacked = 0;
        let fl = if core::mem::take(&mut rx.dup) {
            wire::ack_flags::DUPLICATE
        } else {
            0
        };
        rx.ack_at = None;
        if rx.sport == 0 {
            // Acknowledged only through relocated packets: any port will do.
            rx.sport = PORT_BASE.wrapping_add(i as u16);
        }
        let (cum, sack, ce) = rx.seq.take_ack();
        let ack = AckHeader {
            common: Common {
                ptype: PacketType::Ack,
                flags: fl,
                path: i as u16,
                conn: self.cfg.remote_id,
                psn: cum,
                // Only an ACK that answers fresh data carries an RTT sample
                // (not one sent for a relocated copy's first path).
                timestamp: core::mem::take(&mut rx.echo),
            },
            sack: sack.to_bytes(),
            ecn_ce: ce,
            rate_hint_kbps: hint,
            status: self.rejected.map(|r| r.2),
            stream: self.rejected.map_or(self.progress.0, |r| r.0),
            stream_msn: self.rejected.map_or(self.progress.1, |r| r.1),
        };
        let len = wire::encode_ack(&ack, buf).ok()?;
        tally(&mut self.stats.tx_acks, 1);
        Some(Transmit {
            path: i as u16,
            sport: rx.sport,
            reverse: true,
            len,
            payload: None,
        })
    }
}

/// The latest send time (the timestamp each carried) among the packets of
/// path `p` that `out` acknowledges for the first time, moved ones included
/// (their copy on this path is what arrived); `None` if none.
fn newest_sent_us(p: &TxPath, out: &AckOutcome) -> Option<u32> {
    out.acked
        .ones()
        .filter_map(|i| {
            p.slots
                .get((out.acked_base.wrapping_add(i) % WINDOW) as usize)
        })
        .filter(|s| s.state != SlotState::Free)
        .map(|s| s.sent_us)
        .reduce(|a, b| if before(a, b) { b } else { a })
}
