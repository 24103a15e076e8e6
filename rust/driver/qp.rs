// SPDX-License-Identifier: GPL-2.0

//! Queue pairs as verbs see them (`Qp`): creation, attributes and state
//! changes, joining and leaving the peer connection (RTR, reset, destroy),
//! and the posting of work requests. Safe Rust only.

use super::{
    cq::Cq,
    requester::MAX_INLINE,
    shared::Pd,
    state::{requests, responses, wc_opcode, PeerNode, QpInner, QpShared, RxMsg, Shared, Stream},
};
use crate::abstractions::types::{
    Access, QpCreate, QpModify, QpQuery, QpState, RecvWr, SendWr, WcOpcode, WcStatus,
    MAX_SGE as SGE_SLOTS,
};
use crate::new_spinlock_bh;
use crate::transport::{
    stream::{RecvStream, MAX_OUTSTANDING},
    wire::NakCode,
};
use kernel::{
    alloc::KVec,
    prelude::*,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// Limits reported by `query_device` and enforced at creation.
pub(crate) const MAX_QP_WR: u32 = 1024;
pub(crate) const MAX_SGE: u32 = SGE_SLOTS as u32;

/// The first QP number handed out (0 and 1 are the special QPs).
const FIRST_QPN: u32 = 0x11;

/// The next QP number, module-wide: devices in one namespace share a UDP
/// port, and a QP number names one queue pair on the host.
static NEXT_QPN: KAtomic<u32> = KAtomic::new(0);

fn alloc_qpn() -> u32 {
    FIRST_QPN + NEXT_QPN.fetch_add(1, Relaxed) % (0x100_0000 - FIRST_QPN)
}

/// A queue pair.
pub(crate) struct Qp {
    node: Arc<QpShared>,
}

impl Qp {
    pub(crate) fn create(dev: &Arc<Shared>, req: &mut QpCreate<'_, Pd, Cq>) -> Result<(Self, u32)> {
        if !req.rc {
            return Err(ENOTSUPP);
        }
        let c = &mut req.caps;
        if c.max_send_wr > MAX_QP_WR
            || c.max_recv_wr > MAX_QP_WR
            || c.max_send_sge > MAX_SGE
            || c.max_recv_sge > MAX_SGE
            || c.max_inline_data > MAX_INLINE
        {
            return Err(EINVAL);
        }
        c.max_send_wr = c.max_send_wr.max(1);
        c.max_recv_wr = c.max_recv_wr.max(1);
        c.max_send_sge = MAX_SGE;
        c.max_recv_sge = MAX_SGE;
        c.max_inline_data = MAX_INLINE;
        let qpn = alloc_qpn();
        let node = Arc::new(
            QpShared {
                qpn,
                id: req.id,
                pd: req.pd.id,
                user: req.user,
                kmem: req.kernel.take(),
                sig_all: req.sig_all,
                caps: *c,
                dev: dev.clone(),
                scq: req.send_cq.inner.clone(),
                rcq: req.recv_cq.inner.clone(),
                st: KBox::pin_init(
                    new_spinlock_bh!(
                        QpInner {
                            state: QpState::Reset,
                            access: Access(0),
                            mtu: 1024,
                            dest_qp: 0,
                            rq_psn: 0,
                            sq_psn: 0,
                            dest_ip: [0; 4],
                            max_rd_atomic: 0,
                            max_dest_rd_atomic: 0,
                            timeout: 0,
                            retry_cnt: 0,
                            rnr_retry: 0,
                            min_rnr_timer: 0,
                            peer: None,
                            sq: KVec::with_capacity(c.max_send_wr as usize, GFP_KERNEL)?,
                            next_msn: 0,
                            next_rsn: 0,
                            rq: KVec::with_capacity(c.max_recv_wr as usize, GFP_KERNEL)?,
                            rq_base: 0,
                            rstream: RecvStream::new(0),
                            rx: [RxMsg::default(); MAX_OUTSTANDING as usize],
                            next_resp: 0,
                            resp_stream: RecvStream::new(0),
                            owed: KVec::new(),
                            next_owed: 0,
                            fatal: None,
                            proven: false,
                            dead: false,
                        },
                        "metaroce_qp"
                    ),
                    GFP_KERNEL,
                )?,
            },
            GFP_KERNEL,
        )?;
        Ok((Self { node }, qpn))
    }

    /// The QP's peer connection, if attached.
    fn peer(&self) -> Option<Arc<PeerNode>> {
        self.node.st.lock().peer.clone()
    }

    /// Joins the connection to the peer host as a pair of streams (RTR).
    fn attach(&self) -> Result {
        let n = &self.node;
        let (ip, dest, mtu) = {
            let st = n.st.lock();
            if st.peer.is_some() {
                return Ok(());
            }
            (st.dest_ip, st.dest_qp, st.mtu)
        };
        let peer = n.dev.peer(ip, mtu)?;
        let mut ps = peer.st.lock();
        // One local QP per peer QP: the streams are named by the peer's QP
        // number. A stream whose last messages still drain (the QP was reset
        // just now) cannot start again yet.
        if ps.dead || ps.streams.iter().any(|s| s.dest == dest) {
            return Err(EBUSY);
        }
        if ps.conn.stream_busy(requests(dest)) || ps.conn.stream_busy(responses(dest)) {
            return Err(EBUSY);
        }
        ps.streams.push(
            Stream {
                qpn: n.qpn,
                dest,
                qp: n.clone(),
            },
            GFP_ATOMIC,
        )?;
        n.st.lock().peer = Some(peer.clone());
        Ok(())
    }

    /// Leaves the peer connection: what the QP still had there is cancelled.
    fn detach(&self) {
        let n = &self.node;
        let Some(peer) = n.st.lock().peer.take() else {
            return;
        };
        let mut ps = peer.st.lock();
        let dest = n.st.lock().dest_qp;
        ps.streams.retain(|s| s.qpn != n.qpn);
        ps.conn
            .cancel_stream(requests(dest), NakCode::RemoteOperation);
        ps.conn
            .cancel_stream(responses(dest), NakCode::RemoteOperation);
        peer.pump(&peer, &mut ps, false);
    }

    pub(crate) fn modify(&self, m: &QpModify) -> Result {
        if m.dest_unsupported {
            return Err(EINVAL);
        }
        let n = &self.node;
        {
            let mut st = n.st.lock();
            if let Some(a) = m.access {
                st.access = a;
            }
            if let Some(v) = m.path_mtu {
                st.mtu = v;
            }
            if let Some(v) = m.rq_psn {
                st.rq_psn = v;
            }
            if let Some(v) = m.sq_psn {
                st.sq_psn = v;
            }
            // The peer is fixed while attached.
            if st.peer.is_none() {
                if let Some(v) = m.dest_qp {
                    st.dest_qp = v;
                }
                if let Some(v) = m.dest_ip4 {
                    st.dest_ip = v;
                }
            }
            if let Some(v) = m.max_rd_atomic {
                st.max_rd_atomic = v;
            }
            if let Some(v) = m.max_dest_rd_atomic {
                st.max_dest_rd_atomic = v;
            }
            if let Some(v) = m.timeout {
                st.timeout = v;
            }
            if let Some(v) = m.retry_cnt {
                st.retry_cnt = v;
            }
            if let Some(v) = m.rnr_retry {
                st.rnr_retry = v;
            }
            if let Some(v) = m.min_rnr_timer {
                st.min_rnr_timer = v;
            }
        }
        let Some(new) = m.state else { return Ok(()) };
        match new {
            QpState::Rtr => self.attach()?,
            QpState::Err => match self.peer() {
                Some(peer) => {
                    let mut ps = peer.st.lock();
                    let mut st = n.st.lock();
                    n.to_error(&mut st, &mut ps.conn);
                }
                None => n.flush(&mut n.st.lock()),
            },
            QpState::Reset => {
                self.detach();
                let mut st = n.st.lock();
                st.sq.clear();
                st.rq.clear();
                st.next_msn = 0;
                st.next_rsn = 0;
                st.rq_base = 0;
                st.rstream = RecvStream::new(0);
                st.rx = [RxMsg::default(); MAX_OUTSTANDING as usize];
                st.next_resp = 0;
                st.resp_stream = RecvStream::new(0);
                st.owed.clear();
                st.next_owed = 0;
            }
            _ => {}
        }
        let peer = {
            let mut st = n.st.lock();
            st.state = new;
            st.peer.clone()
        };
        // RTS: requests posted before may go now.
        if let Some(p) = peer {
            p.pump(&p, &mut p.st.lock(), false);
        }
        Ok(())
    }

    pub(crate) fn query(&self) -> QpQuery {
        let n = &self.node;
        let st = n.st.lock();
        QpQuery {
            state: st.state,
            access: st.access,
            path_mtu: st.mtu,
            dest_qp: st.dest_qp,
            rq_psn: st.rq_psn,
            sq_psn: st.sq_psn,
            caps: n.caps,
            max_rd_atomic: st.max_rd_atomic,
            max_dest_rd_atomic: st.max_dest_rd_atomic,
            timeout: st.timeout,
            retry_cnt: st.retry_cnt,
            rnr_retry: st.rnr_retry,
            min_rnr_timer: st.min_rnr_timer,
        }
    }

    pub(crate) fn destroy(&self) {
        let n = &self.node;
        self.detach();
        {
            let mut st = n.st.lock();
            st.dead = true;
            st.sq.clear();
            st.owed.clear();
        }
        n.scq.purge(n.id);
        n.rcq.purge(n.id);
    }

    pub(crate) fn post_send(&self, wr: &SendWr) -> Result {
        let n = &self.node;
        let req = n.prepare_send(wr)?;
        let Some(peer) = self.peer() else {
            let st = n.st.lock();
            if st.state == QpState::Err {
                // Verbs: accepted, and completed at once as flushed.
                n.scq.push(
                    n.wc(
                        wr.wr_id,
                        WcStatus::WrFlushErr,
                        wc_opcode(&wr.op),
                        0,
                        None,
                        st.dest_qp,
                    ),
                    false,
                );
                return Ok(());
            }
            return Err(EINVAL);
        };
        // The peer's lock only when the queue pair fails here: a request
        // that is accepted is queued under the queue pair's lock alone, and
        // the connection takes it on its worker or its next pump.
        let mut ps = (!req.local_ok).then(|| peer.st.lock());
        let one_packet = {
            let mut st = n.st.lock();
            if st.state == QpState::Err {
                n.scq.push(
                    n.wc(
                        wr.wr_id,
                        WcStatus::WrFlushErr,
                        wc_opcode(&wr.op),
                        0,
                        None,
                        st.dest_qp,
                    ),
                    false,
                );
                return Ok(());
            }
            if st.state != QpState::Rts || !st.peer.as_ref().is_some_and(|p| Arc::ptr_eq(p, &peer))
            {
                return Err(EINVAL);
            }
            if st.sq.len() >= n.caps.max_send_wr as usize {
                return Err(ENOMEM);
            }
            if let Some(ps) = ps.as_mut() {
                let wc = n.wc(
                    wr.wr_id,
                    WcStatus::LocProtErr,
                    wc_opcode(&wr.op),
                    0,
                    None,
                    st.dest_qp,
                );
                n.scq.push(wc, false);
                n.to_error(&mut st, &mut ps.conn);
                return Ok(());
            }
            n.queue_send(&mut st, wr, req)?
        };
        // Sending moves to a worker thread: the caller (often a user polling
        // loop) gets its CPU back, and the transmissions and the softirqs they
        // cause run on another one. A lone small request is sent at once, so
        // that a ping-pong does not wait for a worker to wake up.
        if one_packet && peer.idle() {
            peer.pump(&peer, &mut peer.st.lock(), true);
        } else {
            peer.kick();
        }
        Ok(())
    }

    pub(crate) fn post_recv(&self, wr: &RecvWr) -> Result {
        let n = &self.node;
        let mut st = n.st.lock();
        if st.state == QpState::Reset {
            return Err(EINVAL);
        }
        if st.state == QpState::Err {
            n.rcq.push(
                n.wc(
                    wr.wr_id,
                    WcStatus::WrFlushErr,
                    WcOpcode::Recv,
                    0,
                    None,
                    st.dest_qp,
                ),
                false,
            );
            return Ok(());
        }
        if st.rq.len() >= n.caps.max_recv_wr as usize {
            return Err(ENOMEM);
        }
        st.rq.push(*wr, GFP_ATOMIC)?;
        Ok(())
    }
}
