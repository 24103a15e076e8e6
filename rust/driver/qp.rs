// SPDX-License-Identifier: GPL-2.0

//! Queue pairs as verbs see them (`Qp`): creation, attributes and state
//! changes, joining and leaving the peer connection (RTR, reset, destroy),
//! and the posting of work requests. Safe Rust only.

use super::{
    cq::Cq,
    rd_atomic::{Initiator, Target, MAX_RD_ATOMIC},
    requester::MAX_INLINE,
    shared::{Pd, QPN_MASK},
    srq::Srq,
    state::{
        requests, responses, wc_opcode, PeerNode, QpInner, QpShared, RxMsg, Shared, Stream, TxRing,
        UdTx,
    },
};
use crate::abstractions::{
    ops::ResAttrs,
    timer::{now_ns, Timer},
    types::{
        eopnotsupp, Access, IpAddr, QpCreate, QpModify, QpQuery, QpState, QpType, RecvWr, SendWr,
        WcOpcode, WcStatus, MAX_SGE as SGE_SLOTS,
    },
};
use crate::transport::{
    stream::{RecvStream, MAX_OUTSTANDING},
    wire::NakCode,
};
use crate::{new_spinlock_bh, new_spinlock_irq};
use kernel::{
    alloc::KVec,
    new_mutex,
    prelude::*,
    rbtree::RBTreeNodeReservation,
    str::CString,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc, Mutex,
    },
};

/// Limits reported by `query_device` and enforced at creation.
pub(crate) const MAX_QP_WR: u32 = 1024;
pub(crate) const MAX_SGE: u32 = SGE_SLOTS as u32;
/// A UC QP's local ACK timeout and retry count. UC's transitions cannot set
/// them (the core's table), and without them a UC QP whose peer is gone
/// would wait for ever: with these its requests fail after the patience of
/// (14, 7), the 10 s floor (`session::patience_ns`).
const UC_TIMEOUT: u8 = 14;
const UC_RETRY_CNT: u8 = 7;
/// A UC QP's RNR retry count and timer, which UC's transitions cannot set
/// either: a Send that finds no receive is tried again after 1.28 ms (code
/// 14), 6 times, then fails with `RNR_RETRY_EXC_ERR` (7 would be for ever;
/// hardware UC would drop it, see verbs.md).
const UC_RNR_RETRY: u8 = 6;
const UC_MIN_RNR_TIMER: u8 = 14;

/// A queue pair.
pub(crate) struct Qp {
    node: Arc<QpShared>,
    /// Serialises modify_qp and destroy_qp: uverbs lets a process call them
    /// on one QP from several threads at once, and two concurrent RTR
    /// transitions must not attach the QP to two peer connections.
    verbs: Pin<KBox<Mutex<()>>>,
}

impl Drop for Qp {
    fn drop(&mut self) {
        // Its number is free again once the verbs object is gone.
        self.node.dev.release_qpn(self.node.qpn);
    }
}

impl Qp {
    pub(crate) fn create(
        dev: &Arc<Shared>,
        req: &mut QpCreate<'_, Pd, Cq, Srq>,
    ) -> Result<(Self, u32)> {
        let Some(qp_type) = req.qp_type else {
            return Err(eopnotsupp());
        };
        // QP1 is the MAD layer's (uverbs has no GSI QPs for processes).
        if qp_type == QpType::Gsi && req.user {
            return Err(EINVAL);
        }
        let c = &mut req.caps;
        // With an SRQ the receive sizes are ignored, as verbs says.
        let own_rq = req.srq.is_none();
        if c.max_send_wr > MAX_QP_WR
            || (own_rq && c.max_recv_wr > MAX_QP_WR)
            || c.max_send_sge > MAX_SGE
            || (own_rq && c.max_recv_sge > MAX_SGE)
            || c.max_inline_data > MAX_INLINE
        {
            return Err(EINVAL);
        }
        c.max_send_wr = c.max_send_wr.max(1);
        c.max_send_sge = MAX_SGE;
        if !own_rq {
            // Its receives come from the SRQ: it has no receive queue.
            c.max_recv_wr = 0;
            c.max_recv_sge = 0;
        } else {
            c.max_recv_wr = c.max_recv_wr.max(1);
            c.max_recv_sge = MAX_SGE;
        }
        c.max_inline_data = MAX_INLINE;
        let verbs = KBox::pin_init(new_mutex!((), "metaroce_qp_verbs"), GFP_KERNEL_ACCOUNT)?;
        // A UD or GSI QP's place in the table of datagram receivers.
        let ud_slot = match qp_type.datagram() {
            true => Some(RBTreeNodeReservation::new(GFP_KERNEL_ACCOUNT)?),
            false => None,
        };
        let qpn = match qp_type {
            QpType::Gsi => dev.alloc_gsi_qpn()?,
            _ => dev.alloc_qpn()?,
        };
        let node = match Self::new_node(dev, req, qp_type, qpn) {
            Ok(n) => n,
            Err(e) => {
                dev.release_qpn(qpn);
                return Err(e);
            }
        };
        if let Some(slot) = ud_slot {
            dev.tables
                .lock()
                .ud
                .insert(slot.into_node(qpn, node.clone()));
        }
        Ok((Self { node, verbs }, qpn))
    }

    fn new_node(
        dev: &Arc<Shared>,
        req: &mut QpCreate<'_, Pd, Cq, Srq>,
        qp_type: QpType,
        qpn: u32,
    ) -> Result<Arc<QpShared>> {
        let c = &req.caps;
        // With an SRQ, the receives it takes: at most one per message the
        // stream has outstanding (responder.rs `take_shared`), so taking
        // one never allocates in softirq.
        let rq_room = match req.srq {
            Some(_) => MAX_OUTSTANDING as usize,
            None => c.max_recv_wr as usize,
        };
        // What a process creates is charged to its memory cgroup. The
        // larger parts are allocated one by one, not built on the stack.
        // UC's transitions cannot set these (UC_TIMEOUT); RC's start at 0.
        let (timeout, retry_cnt, rnr_retry, min_rnr_timer) = match qp_type {
            QpType::Uc => (UC_TIMEOUT, UC_RETRY_CNT, UC_RNR_RETRY, UC_MIN_RNR_TIMER),
            _ => (0, 0, 0, 0),
        };
        let rstream = KBox::new(RecvStream::new(0), GFP_KERNEL_ACCOUNT)?;
        let resp_stream = KBox::new(RecvStream::new(0), GFP_KERNEL_ACCOUNT)?;
        let mut rx = KVec::with_capacity(MAX_OUTSTANDING as usize, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..MAX_OUTSTANDING {
            rx.push(RxMsg::default(), GFP_KERNEL_ACCOUNT)?;
        }
        // A kernel consumer's datagram sends go through a worker (ud.rs).
        let tx = match qp_type.datagram() && !req.user {
            true => {
                let ring = TxRing::new(c.max_send_wr as usize)?;
                Some(Timer::new_arc(
                    UdTx {
                        ring: KBox::pin_init(
                            new_spinlock_irq!(ring, "metaroce_ud_tx"),
                            GFP_KERNEL,
                        )?,
                    },
                    GFP_KERNEL,
                )?)
            }
            false => None,
        };
        Arc::new(
            QpShared {
                qpn,
                id: req.id,
                qp_type,
                pd: req.pd.id,
                queued: KAtomic::new(false),
                user: req.user,
                kmem: req.kernel.take(),
                sig_all: req.sig_all,
                caps: *c,
                dev: dev.clone(),
                scq: req.send_cq.inner.clone(),
                rcq: req.recv_cq.inner.clone(),
                srq: req.srq.map(|s| s.inner.clone()),
                tx,
                st: KBox::pin_init(
                    new_spinlock_bh!(
                        QpInner {
                            state: QpState::Reset,
                            qkey: 0,
                            access: Access(0),
                            mtu: 1024,
                            dest_qp: 0,
                            rq_psn: 0,
                            sq_psn: 0,
                            dest_ip: IpAddr::default(),
                            max_rd_atomic: 0,
                            max_dest_rd_atomic: 0,
                            timeout,
                            retry_cnt,
                            rnr_retry,
                            min_rnr_timer,
                            peer: None,
                            sq: KVec::with_capacity(c.max_send_wr as usize, GFP_KERNEL_ACCOUNT)?,
                            next_msn: 0,
                            next_rsn: 0,
                            rq: KVec::with_capacity(rq_room, GFP_KERNEL_ACCOUNT)?,
                            rq_base: 0,
                            rstream,
                            rx,
                            next_resp: 0,
                            rd: Initiator::default(),
                            rd_dest: Target::default(),
                            resp_stream,
                            owed: KVec::new(),
                            next_owed: 0,
                            fatal: None,
                            proven: false,
                            dead: false,
                        },
                        "metaroce_qp"
                    ),
                    GFP_KERNEL_ACCOUNT,
                )?,
            },
            GFP_KERNEL_ACCOUNT,
        )
        .map_err(Into::into)
    }

    /// The QP's peer connection, if attached.
    fn peer(&self) -> Option<Arc<PeerNode>> {
        self.node.st.lock().peer.clone()
    }

    /// Joins the connection to the peer host as a pair of streams (RTR).
    fn attach(&self) -> Result {
        let n = &self.node;
        let (ip, dest) = {
            let st = n.st.lock();
            if st.peer.is_some() {
                return Ok(());
            }
            (st.dest_ip, st.dest_qp)
        };
        // Also when no address was ever given (::).
        if !ip.is_unicast() {
            return Err(EINVAL);
        }
        let mut peer = n.dev.peer(ip)?;
        // A connection evicted just now may be found for a moment before it
        // leaves the table: then the lookup is made again (and sets up a
        // new one).
        for _ in 0..3 {
            if !peer.st.lock().dead {
                break;
            }
            peer = n.dev.peer(ip)?;
        }
        // The lookup trees' nodes, allocated before the peer's lock.
        let by_qpn = RBTreeNodeReservation::new(GFP_KERNEL_ACCOUNT)?;
        let by_dest = RBTreeNodeReservation::new(GFP_KERNEL_ACCOUNT)?;
        let mut ps = peer.st.lock();
        // One local QP per peer QP: the streams are named by the peer's QP
        // number. A stream whose last messages still drain (the QP was reset
        // just now) cannot start again yet.
        if ps.dead || ps.by_dest.get(&dest).is_some() {
            return Err(EBUSY);
        }
        if ps.conn.stream_busy(requests(dest)) || ps.conn.stream_busy(responses(dest)) {
            return Err(EBUSY);
        }
        // Room on the ready ring for every attached QP: waking one never
        // allocates.
        {
            let mut ready = peer.ready.lock();
            let (want, cap) = (ps.streams.len() + 1, ready.capacity());
            // Doubling: attaching n QPs costs O(n) in all.
            if want > cap {
                ready.reserve(want.max(2 * cap).max(16), GFP_ATOMIC)?;
            }
        }
        ps.streams.push(
            Stream {
                qpn: n.qpn,
                qp: n.clone(),
            },
            GFP_ATOMIC,
        )?;
        ps.by_qpn.insert(by_qpn.into_node(n.qpn, n.clone()));
        // Our streams start again from message 0: a rejection the ACKs
        // still carry for a message of theirs is about the QP's last life.
        ps.conn.forget_rejection(requests(n.qpn));
        ps.conn.forget_rejection(responses(n.qpn));
        ps.by_dest.insert(by_dest.into_node(dest, n.clone()));
        peer.nstreams.store(ps.streams.len() as u32, Relaxed);
        // A QP wants this peer: if it has not answered, ask again from the
        // start.
        ps.session.set_wanted(now_ns(), true);
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
        ps.by_qpn.remove(&n.qpn);
        ps.by_dest.remove(&dest);
        peer.ready.lock().remove(|q| Arc::ptr_eq(q, n));
        n.queued.store(false, Relaxed);
        peer.nstreams.store(ps.streams.len() as u32, Relaxed);
        // The last QP left: the hellos to a peer that never answered stop.
        // (Another still wanting it is no news: its backoff goes on.)
        if ps.streams.is_empty() {
            ps.session.set_wanted(now_ns(), false);
        }
        ps.conn
            .cancel_stream(requests(dest), NakCode::RemoteOperation);
        ps.conn
            .cancel_stream(responses(dest), NakCode::RemoteOperation);
        peer.pump(&peer, &mut ps, false);
    }

    pub(crate) fn modify(&self, m: &QpModify) -> Result {
        let _serial = self.verbs.lock();
        // Only the transitions verbs defines, with the attributes each
        // needs. The state may move to the error state meanwhile (softirq),
        // which is then the state the next call is checked against.
        if !m.allowed_from(self.node.st.lock().state) {
            return Err(EINVAL);
        }
        // A QP number has 24 bits: a larger one would name another QP's
        // streams (the stream id is the number shifted left by one).
        if m.dest_qp.is_some_and(|q| q > QPN_MASK) {
            return Err(EINVAL);
        }
        if m.dest_ip.is_some_and(|ip| !ip.is_unicast()) {
            return Err(EINVAL);
        }
        // Beyond what `query_device` reports.
        if m.max_rd_atomic.is_some_and(|v| v > MAX_RD_ATOMIC)
            || m.max_dest_rd_atomic.is_some_and(|v| v > MAX_RD_ATOMIC)
        {
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
                if let Some(v) = m.dest_ip {
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
            if let Some(v) = m.qkey {
                st.qkey = v;
            }
        }
        let Some(new) = m.state else { return Ok(()) };
        match new {
            // A UD QP joins no connection: its datagrams go out one by one.
            // RC and UC join their peer's.
            QpState::Rtr if !n.qp_type.datagram() => self.attach()?,
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
                n.drop_receives(&mut st);
                st.next_msn = 0;
                st.next_rsn = 0;
                st.rq_base = 0;
                *st.rstream = RecvStream::new(0);
                for m in st.rx.iter_mut() {
                    *m = RxMsg::default();
                }
                st.next_resp = 0;
                st.rd = Initiator::default();
                st.rd_dest = Target::default();
                *st.resp_stream = RecvStream::new(0);
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
            p.wake(n);
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
            sig_all: n.sig_all,
            qp_type: n.qp_type,
            qkey: st.qkey,
        }
    }

    /// Its driver attributes in `rdma resource show qp -dd`
    /// (Documentation/observability.md).
    pub(crate) fn attrs(&self, out: &mut ResAttrs<'_>) -> Result {
        let n = &self.node;
        let (peer, dest, queued, unposted, rq, owed, reads, held) = {
            let st = n.st.lock();
            (
                st.peer.clone(),
                st.dest_qp,
                st.sq.len(),
                st.sq.iter().filter(|e| !e.posted).count(),
                st.rq.len(),
                st.owed.len(),
                st.rd.in_flight(),
                st.rd_dest.held(),
            )
        };
        match &peer {
            Some(p) => {
                let ip = CString::try_from_fmt(fmt!("{}", p.ip))?;
                // Not the connection id: any local user may read these
                // attributes, and the id is what keeps a blind sender from
                // forging the peer's packets (root sees it in debugfs).
                out.string(c"peer", &ip)?;
            }
            None => out.string(c"peer", c"-")?,
        }
        out.u32_hex(c"send_stream", requests(dest))?;
        out.u32_hex(c"recv_stream", requests(n.qpn))?;
        out.u32(c"sq_queued", queued as u32)?;
        out.u32(c"sq_unsent", unposted as u32)?;
        out.u32(c"rq_posted", rq as u32)?;
        out.u32(c"answers_owed", owed as u32)?;
        out.u32(c"reads_out", reads)?;
        out.u32(c"reads_held", held)
    }

    /// `attach_mcast` (mcast.rs), serialised with `destroy` (which
    /// leaves every group): none can attach a QP being destroyed.
    pub(crate) fn attach_mcast(&self, ip: IpAddr) -> Result {
        let _serial = self.verbs.lock();
        if self.node.st.lock().dead {
            return Err(EINVAL);
        }
        self.node.attach_mcast(ip)
    }

    /// `detach_mcast` (mcast.rs).
    pub(crate) fn detach_mcast(&self, ip: IpAddr) -> Result {
        let _serial = self.verbs.lock();
        self.node.detach_mcast(ip)
    }

    pub(crate) fn destroy(&self) {
        let _serial = self.verbs.lock();
        let n = &self.node;
        self.detach();
        if n.qp_type.datagram() {
            // uverbs refuses to destroy a QP still attached (EBUSY) and
            // detaches at process exit; a kernel consumer's are left here.
            n.leave_groups();
            // No datagram reaches it any more (one found just before sees
            // it dead below).
            let gone = n.dev.tables.lock().ud.remove(&n.qpn);
            drop(gone);
        }
        {
            let mut st = n.st.lock();
            // From now on nothing completes for it (`flush` does nothing):
            // the verbs object is about to go.
            st.dead = true;
            st.sq.clear();
            n.drop_receives(&mut st);
            st.owed.clear();
        }
        if let Some(tx) = n.tx.as_ref() {
            // Its worker has finished; what it left holds the QP.
            tx.stop();
            loop {
                let e = tx.ring.lock().pop();
                if e.is_none() {
                    break;
                }
            }
        }
        n.scq.purge(n.id);
        n.rcq.purge(n.id);
    }

    pub(crate) fn post_send(&self, wr: &SendWr) -> Result {
        let n = &self.node;
        if n.qp_type.datagram() {
            return n.post_datagram(wr);
        }
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
        // The peer's lock only when the queue pair fails here, or for a
        // local operation (below): a request that is accepted is queued
        // under the queue pair's lock alone, and the connection takes it on
        // its worker or its next pump.
        let mut ps = (!req.local_ok || wr.op.is_local()).then(|| peer.st.lock());
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
            if let Some(ps) = ps.as_mut().filter(|_| !req.local_ok) {
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
            let one = n.queue_send(&mut st, wr, req)?;
            // A local operation with nothing before it runs now: it needs
            // no message slot, so it must not wait for the QP's turn on the
            // ring, which a full message table holds back (`pump_once`).
            if let Some(ps) = ps.as_mut() {
                n.reap_and_run(&mut st, &mut ps.conn);
            }
            // Still under the QP's lock, attached to `peer` (checked above):
            // a detach that follows takes it off the ring again.
            peer.wake(n);
            one
        };
        // (`pump` below takes the peer's lock itself.)
        drop(ps);
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
        if n.srq.is_some() {
            // Its receives are posted to the SRQ.
            return Err(EINVAL);
        }
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
