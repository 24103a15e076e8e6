// SPDX-License-Identifier: GPL-2.0

//! Unreliable datagram (UD) queue pairs at work. A send leaves at once as
//! one datagram (wire-format.md, "Datagram"), outside every peer
//! connection: nothing is acknowledged or resent, and the request completes
//! once the datagram is handed to the network. An arriving datagram is
//! checked (its QP, the QP's state, the Q_Key, the room of the receive) and
//! written, after a GRH, into the QP's oldest receive; anything else drops
//! it, counted (`ud_*` port counters). Safe Rust only.

use super::{
    counters::bump,
    mcast::MCAST_QPN,
    mr::{scatter, sge_pieces},
    requester::MAX_INLINE,
    shared::QPN_MASK,
    state::{QpShared, Shared, UdTx},
};
use crate::abstractions::{
    memory::copy_from_user,
    net::{RxPacket, TxError},
    timer::{Timer, TimerHandler},
    types::{IbMtu, QpState, SendOp, SendWr, UdDest, WcOpcode, WcStatus},
};
use crate::transport::wire::{self, DatagramHeader, Packet, DATAGRAM_LEN, GRH_LEN, IMM_LEN};
use kernel::{prelude::*, sync::Arc};

/// The largest UD message over a link that carries `payload` bytes per
/// packet: the largest IB MTU within it, which `query_port` reports as the
/// active MTU.
pub(super) fn ud_mtu(payload: u32) -> u32 {
    IbMtu::largest_within(payload).map_or(IbMtu::Mtu256.bytes(), IbMtu::bytes)
}

/// The UDP source port of a UD QP's datagrams: one per QP, so that a
/// multipath route keeps its datagrams on one path (in order, as UD over
/// one link would be), and QPs spread over the paths.
fn source_port(qpn: u32) -> u16 {
    0xc000 | (qpn & 0x3fff) as u16
}

/// The Q_Key a UD send carries: the request's, or the QP's own when the
/// request's has its high bit set (verbs' rule; such keys are reserved for
/// privileged QPs).
fn send_qkey(request: u32, own: u32) -> u32 {
    if request & 0x8000_0000 != 0 {
        own
    } else {
        request
    }
}

impl QpShared {
    /// Checks a UD request as `post_send` must: a Send or Send with
    /// Immediate to an address, of at most the MTU. Its destination, its
    /// immediate and its length.
    fn check_datagram(&self, wr: &SendWr) -> Result<(UdDest, Option<u32>, u64)> {
        let dest = wr.ud.ok_or(EINVAL)?;
        let imm = match wr.op {
            SendOp::Send => None,
            SendOp::SendImm(i) => Some(i),
            _ => return Err(EINVAL),
        };
        let len = wr.len();
        // One datagram per message: larger ones are refused, not cut. A QP
        // number has 24 bits; a group is sent to as QP 0xFFFFFF, and only a
        // group is (every receiver would drop the datagram uncounted).
        if len > u64::from(ud_mtu(self.dev.payload))
            || dest.qpn > QPN_MASK
            || dest.ah.ip.is_multicast() != (dest.qpn == MCAST_QPN)
        {
            return Err(EINVAL);
        }
        Ok((dest, imm, len))
    }

    /// Sends one UD request (`post_send` on a UD or GSI QP). A process's is
    /// sent at once; a kernel consumer's is left for a worker, as it may be
    /// posted with interrupts disabled.
    pub(super) fn post_datagram(self: &Arc<Self>, wr: &SendWr) -> Result {
        let (dest, imm, len) = self.check_datagram(wr)?;
        if let Some(tx) = self.tx.as_ref() {
            // Its inline bytes would have to be copied now, and the ring
            // has no room for them: kernel consumers send from memory.
            if wr.inline {
                return Err(EINVAL);
            }
            if !tx.ring.lock().push((self.clone(), *wr)) {
                return Err(ENOMEM);
            }
            tx.kick();
            return Ok(());
        }
        // Inline data is copied now, before anything is sent: a bad
        // address fails the call, as on an RC QP.
        let mut inline = [0u8; MAX_INLINE as usize];
        let inline_len = if wr.inline {
            if len > u64::from(MAX_INLINE) {
                return Err(EINVAL);
            }
            let mut at = 0usize;
            for s in wr.sges() {
                let dst = inline.get_mut(at..at + s.length as usize).ok_or(EINVAL)?;
                match &self.kmem {
                    Some(k) => k.read(s.addr, dst)?,
                    None => copy_from_user(dst, s.addr)?,
                }
                at += s.length as usize;
            }
            Some(at)
        } else {
            None
        };
        let qkey = {
            let st = self.st.lock();
            match st.state {
                QpState::Rts => send_qkey(dest.qkey, st.qkey),
                QpState::Err => {
                    // Verbs: accepted, and completed at once as flushed.
                    let wc = self.wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Send, 0, None, 0);
                    self.scq.push(wc, false);
                    return Ok(());
                }
                _ => return Err(EINVAL),
            }
        };
        let inline = inline_len.and_then(|l| inline.get(..l));
        self.transmit(wr, dest, imm, len, inline, qkey);
        Ok(())
    }

    /// Sends a kernel consumer's request the worker took from the ring.
    fn send_queued(&self, wr: &SendWr) {
        // Checked when posted; the device's MTU does not change.
        let Ok((dest, imm, len)) = self.check_datagram(wr) else {
            return;
        };
        let qkey = {
            let st = self.st.lock();
            if st.dead {
                // Destroyed: no completion may name it.
                return;
            }
            if st.state != QpState::Rts {
                // Reset or failed since it was posted.
                let wc = self.wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Send, 0, None, 0);
                self.scq.push(wc, false);
                return;
            }
            send_qkey(dest.qkey, st.qkey)
        };
        self.transmit(wr, dest, imm, len, None, qkey);
    }

    /// Hands one datagram to the network and completes its request
    /// (process context, no lock held).
    fn transmit(
        &self,
        wr: &SendWr,
        dest: UdDest,
        imm: Option<u32>,
        len: u64,
        inline: Option<&[u8]>,
        qkey: u32,
    ) {
        let hdr = DatagramHeader {
            dest_qpn: dest.qpn,
            src_qpn: self.qpn,
            qkey,
            imm,
            solicited: wr.solicited,
        };
        let c = &self.dev.counters.ud;
        let mut head = [0u8; DATAGRAM_LEN + IMM_LEN];
        let port = self.dev.port.lock().clone();
        let sent = match (wire::encode_datagram(&hdr, &mut head), port) {
            (Ok(n), Some(port)) => port.send(
                dest.ah.ip,
                self.dev.ifindex,
                source_port(self.qpn),
                head.get(..n).unwrap_or(&[]),
                len as usize,
                |buf| match inline {
                    Some(b) => {
                        buf.copy_from_slice(b.get(..buf.len()).ok_or(EINVAL)?);
                        Ok(())
                    }
                    None => self.gather_datagram(wr, buf),
                },
                // A datagram's destination changes from one to the next.
                None,
            ),
            // A device going away has no port: lost, as a datagram may be.
            _ => Err(TxError::Closed),
        };
        let status = match sent {
            Ok(()) => {
                bump(&c.sent);
                WcStatus::Success
            }
            // A local buffer failed its check (key, PD, bounds).
            Err(TxError::Fill) => WcStatus::LocProtErr,
            Err(_) => {
                bump(&c.send_errors);
                WcStatus::Success
            }
        };
        let st = self.st.lock();
        if st.dead {
            return;
        }
        if status != WcStatus::Success {
            // The request fails alone: the QP stays as it is (verbs would
            // move a UD QP to SQE until it is moved back to RTS; the MAD
            // layer does that for QP1, which needs no move here).
            let wc = self.wc(wr.wr_id, status, WcOpcode::Send, 0, None, 0);
            self.scq.push(wc, false);
        } else if wr.signaled || self.sig_all {
            let wc = self.wc(wr.wr_id, status, WcOpcode::Send, len as u32, None, 0);
            self.scq.push(wc, false);
        }
    }

    /// Copies a UD request's bytes from its registered buffers.
    fn gather_datagram(&self, wr: &SendWr, buf: &mut [u8]) -> Result {
        let len = buf.len();
        let t = self.dev.tables.lock();
        sge_pieces(
            wr.sges(),
            self.pd,
            &t.mrs,
            false,
            0,
            len,
            |mr, at, piece| mr.read(at, buf.get_mut(piece)?).ok(),
        )
        .ok_or(EINVAL)
    }

    /// Places an arriving datagram into the oldest receive, after its GRH
    /// (softirq).
    pub(super) fn deliver(&self, pkt: &RxPacket<'_>, h: &DatagramHeader, payload: &[u8]) {
        let c = &self.dev.counters.ud;
        let mut st = self.st.lock();
        // Destroyed since the dispatch found it: nothing may complete for it.
        if st.dead || !matches!(st.state, QpState::Rtr | QpState::Rts) {
            bump(&c.qp_state);
            return;
        }
        if h.qkey != st.qkey {
            bump(&c.qkey);
            return;
        }
        let need = GRH_LEN + payload.len();
        let fits = |wr: &crate::abstractions::types::RecvWr| {
            wr.sges().iter().map(|s| s.length as usize).sum::<usize>() >= need
        };
        // A datagram that does not fit is dropped and the receive stays
        // for the next: a sender cannot fail the QP with large datagrams.
        let wr = match self.srq.as_ref() {
            Some(srq) => match srq.take_if(fits) {
                Ok(wr) => wr,
                Err(true) => {
                    bump(&c.length);
                    return;
                }
                Err(false) => {
                    bump(&c.no_receive);
                    return;
                }
            },
            None => match st.rq.first() {
                Some(wr) if fits(wr) => match st.rq.remove(0) {
                    Ok(wr) => wr,
                    Err(_) => return,
                },
                Some(_) => {
                    bump(&c.length);
                    return;
                }
                None => {
                    bump(&c.no_receive);
                    return;
                }
            },
        };
        // A receive taken from an SRQ names buffers of the SRQ's PD.
        let pd = self.srq.as_ref().map_or(self.pd, |q| q.pd);
        let grh = match (pkt.saddr.v4(), pkt.daddr.v4()) {
            (Some(s), Some(d)) => wire::ipv4_grh(s, d, pkt.payload.len()),
            _ => wire::ipv6_grh(&pkt.saddr.0, &pkt.daddr.0, pkt.payload.len()),
        };
        let placed = {
            let t = self.dev.tables.lock();
            scatter(wr.sges(), pd, &t.mrs, 0, &grh)
                .and_then(|()| scatter(wr.sges(), pd, &t.mrs, GRH_LEN as u32, payload))
        };
        if placed.is_none() {
            // The receive's own buffer fails its check: it completes in
            // error and the QP fails, as verbs wants.
            let wc = self.wc(wr.wr_id, WcStatus::LocProtErr, WcOpcode::Recv, 0, None, 0);
            self.rcq.push(wc, false);
            self.flush(&mut st);
            return;
        }
        bump(&c.rcvd);
        let mut wc = self.wc(
            wr.wr_id,
            WcStatus::Success,
            WcOpcode::Recv,
            need as u32,
            h.imm,
            h.src_qpn,
        );
        wc.grh = true;
        self.rcq.push(wc, h.solicited);
    }
}

impl TimerHandler for UdTx {
    fn expired(_: &Timer<Self>) {}

    /// Sends what kernel consumers posted, oldest first.
    fn kicked(t: &Timer<Self>) {
        loop {
            let e = t.ring.lock().pop();
            let Some((qp, wr)) = e else { break };
            qp.send_queued(&wr);
        }
    }
}

impl Shared {
    /// Whether a datagram for QP `qpn` is this device's: one of its UD QPs.
    pub(super) fn owns_datagram(&self, qpn: u32) -> bool {
        self.tables.lock().ud.get(&qpn).is_some()
    }

    /// Takes an arriving datagram to its UD QP (softirq).
    pub(super) fn receive_datagram(&self, pkt: &RxPacket<'_>) {
        let Ok(Packet::Datagram(h, payload)) = wire::decode(pkt.payload) else {
            bump(&self.counters.ud.malformed);
            return;
        };
        if h.dest_qpn == MCAST_QPN {
            return self.deliver_multicast(pkt, &h, payload);
        }
        let qp = self.tables.lock().ud.get(&h.dest_qpn).cloned();
        match qp {
            Some(qp) => qp.deliver(pkt, &h, payload),
            // Destroyed since the dispatch looked.
            None => bump(&self.counters.ud.qp_state),
        }
    }
}

#[kunit_tests(metaroce_ud)]
mod tests {
    use super::*;

    #[test]
    fn the_ud_mtu_is_the_largest_ib_mtu_within_the_payload() {
        assert_eq!(ud_mtu(4096), 4096);
        assert_eq!(ud_mtu(4095), 2048);
        assert_eq!(ud_mtu(1380), 1024);
        assert_eq!(ud_mtu(256), 256);
        assert_eq!(ud_mtu(0), 256);
    }

    #[test]
    fn a_high_qkey_bit_takes_the_qps_own() {
        assert_eq!(send_qkey(0x1234, 0x77), 0x1234);
        assert_eq!(send_qkey(0x8000_0000, 0x77), 0x77);
        assert_eq!(send_qkey(0x7fff_ffff, 0x77), 0x7fff_ffff);
    }

    #[test]
    fn source_ports_are_ephemeral_and_per_qp() {
        assert_eq!(source_port(0x11), 0xc011);
        assert!(source_port(0xff_ffff) >= 0xc000);
        assert_ne!(source_port(0x11), source_port(0x12));
    }
}
