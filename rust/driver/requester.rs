// SPDX-License-Identifier: GPL-2.0

//! The requester side of a queue pair: send requests checked and queued
//! (`post_send`'s work under the QP lock), handed to the connection, reaped
//! in order when delivered (and answered), and the answers to Reads and
//! atomics placed into their buffers. Safe Rust only.

use super::{
    frmr::FastError,
    mr::{scatter, sge_pieces, MrTable, PdId},
    state::{path_payload, requests, wc_opcode, Conn, QpInner, QpShared, SqEntry},
};
use crate::abstractions::{
    memory::copy_from_user,
    timer::now_ns,
    types::{QpState, SendOp, SendWr, WcStatus},
};
use crate::transport::{
    conn::Message,
    stream::{Pieces, StreamError, Target},
    wire::{Atomic, DataHeader, NakCode, Opcode, Remote},
};
use kernel::{alloc::KVec, prelude::*};

/// The most bytes of inline data in a send request (reported by `query_device`
/// and enforced at QP creation).
pub(crate) const MAX_INLINE: u32 = 256;

impl SqEntry {
    /// Whether the request is over: delivered (and answered, if it asks for
    /// an answer) or refused.
    pub(super) fn finished(&self) -> Option<Option<NakCode>> {
        match self.done {
            Some(Some(code)) => Some(Some(code)),
            Some(None) if self.resp.is_none() || self.resp_done => Some(None),
            _ => None,
        }
    }
}

/// Where the request numbered `msn` is in a send queue. Requests are queued
/// with consecutive numbers and leave in order; a local operation takes no
/// number of its own and holds the next request's, before it. So the queue
/// is sorted by (number from the first's, request after local operation),
/// and a binary search finds it (a scan should that ever not hold).
pub(super) fn sq_index(sq: &[SqEntry], msn: u32) -> Option<usize> {
    let first = sq.first()?.msn;
    let want = msn.wrapping_sub(first);
    let is = |e: &SqEntry| e.msn == msn && !e.wr.op.is_local();
    let i = sq.partition_point(|e| {
        let d = e.msn.wrapping_sub(first);
        d < want || (d == want && e.wr.op.is_local())
    });
    if sq.get(i).is_some_and(is) {
        return Some(i);
    }
    sq.iter().position(is)
}

/// The status of a local operation that failed.
fn local_status(e: FastError) -> WcStatus {
    match e {
        FastError::NoRegion => WcStatus::LocProtErr,
        FastError::State | FastError::Length | FastError::Access => WcStatus::LocQpOpErr,
    }
}

fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::RemoteAccess => WcStatus::RemAccessErr,
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::RemoteOperation => WcStatus::RemOpErr,
        // Refused for want of a receive more than `rnr_retry` times.
        NakCode::ReceiverNotReady => WcStatus::RnrRetryExcErr,
        // Held until the QP's patience passes (`SqEntry::gone`), then
        // failed as a request the peer never answered.
        NakCode::NoQueuePair => WcStatus::RetryExcErr,
    }
}

/// A send request checked by [`QpShared::prepare_send`], ready to be queued.
pub(super) struct SendRequest {
    inline: KVec<u8>,
    opcode: Opcode,
    remote: Option<Remote>,
    imm: Option<u32>,
    atomic: Option<Atomic>,
    answered: bool,
    len: u64,
    len32: u32,
    /// The local buffers passed their checks (inline data needs none).
    pub(super) local_ok: bool,
}

impl QpShared {
    /// The bytes of message `msn` on `stream` (a request of ours, or an
    /// answer we owe) can no longer be read: a request completes with a
    /// local protection error; either way the QP moves to the error state.
    pub(super) fn fail_unreadable(&self, st: &mut QpInner, conn: &mut Conn, stream: u32, msn: u32) {
        if stream & 1 == 0 {
            if let Some(i) = sq_index(&st.sq, msn) {
                if let Ok(e) = st.sq.remove(i) {
                    let wc = self.wc(
                        e.wr.wr_id,
                        WcStatus::LocProtErr,
                        wc_opcode(&e.wr.op),
                        0,
                        None,
                        st.dest_qp,
                    );
                    self.scq.push(wc, false);
                }
            }
        }
        if st.state != QpState::Err {
            self.to_error(st, conn);
        }
    }

    /// Completes the oldest outstanding request with `status` (the others
    /// are flushed by `to_error`); returns whether there was one.
    pub(super) fn fail_first(&self, st: &mut QpInner, status: WcStatus) -> bool {
        if st.sq.is_empty() {
            return false;
        }
        let Ok(e) = st.sq.remove(0) else {
            return false;
        };
        self.scq.push(
            self.wc(e.wr.wr_id, status, wc_opcode(&e.wr.op), 0, None, st.dest_qp),
            false,
        );
        true
    }

    /// Hands queued requests to the connection, in order, while it takes
    /// them; returns whether it took any.
    pub(super) fn post_queued(st: &mut QpInner, conn: &mut Conn) -> bool {
        if !matches!(st.state, QpState::Rts | QpState::Sqd) {
            return false;
        }
        let mut any = false;
        for e in st.sq.iter_mut().filter(|e| !e.posted) {
            if e.wr.op.is_local() {
                // Carried out by `run_local`, in order: what follows waits.
                break;
            }
            let answered = e.resp.is_some();
            if answered && !st.rd.may_post(st.max_rd_atomic) {
                // It waits for an answer to arrive (`place_response`).
                st.rd.stop_at_limit();
                break;
            }
            if e.wr.fence && !st.rd.fence_open() {
                // Its peer may reuse what the Reads before it read once
                // it arrives (a Send saying "done"): it waits for them.
                st.rd.stop_at_fence();
                break;
            }
            if conn
                .post_with(e.msg, path_payload(st.mtu), st.rnr_retry)
                .is_err()
            {
                break;
            }
            st.rd.passed_fence();
            e.posted = true;
            e.posted_at = now_ns();
            if answered {
                st.rd.posted();
            }
            any = true;
        }
        any
    }

    /// Reports the requests that are over, in order; returns whether some
    /// were and more wait to be posted.
    pub(super) fn reap(&self, st: &mut QpInner, conn: &mut Conn) -> bool {
        let mut failed = false;
        let mut reaped = false;
        while let Some(first) = st.sq.first() {
            let Some(verdict) = first.finished() else {
                break;
            };
            reaped = true;
            let e = st.sq.remove(0);
            let Ok(e) = e else { break };
            let status = e
                .local_failed
                .unwrap_or_else(|| verdict.map_or(WcStatus::Success, nak_status));
            if status != WcStatus::Success || e.wr.signaled || self.sig_all {
                let len = if status == WcStatus::Success {
                    e.wr.len() as u32
                } else {
                    0
                };
                self.scq.push(
                    self.wc(
                        e.wr.wr_id,
                        status,
                        wc_opcode(&e.wr.op),
                        len,
                        None,
                        st.dest_qp,
                    ),
                    false,
                );
            }
            if status != WcStatus::Success {
                failed = true;
                break;
            }
        }
        if failed {
            self.to_error(st, conn);
            return false;
        }
        reaped && st.sq.iter().any(|e| !e.posted)
    }

    /// [`Self::reap`], then the local operations that lets go, each reaped
    /// in turn: wherever a request ends, since a local operation needs no
    /// message slot and must not wait for the QP's turn on the ring, which a
    /// full message table holds back (`Peer::pump_once`). Returns `reap`'s
    /// answer for the last one.
    pub(super) fn reap_and_run(&self, st: &mut QpInner, conn: &mut Conn) -> bool {
        let mut left = self.reap(st, conn);
        while self.run_local(st) {
            left = self.reap(st, conn);
        }
        left
    }

    /// Carries out the first request not handed on yet if it is a local
    /// operation that may run now (`first_unposted_may_go`: every request
    /// before it is over). Returns whether it did; the request is then over
    /// and the caller reaps it, under the same lock, so that a registration
    /// that ran is never reported flushed.
    pub(super) fn run_local(&self, st: &mut QpInner) -> bool {
        if !matches!(st.state, QpState::Rts | QpState::Sqd) || !st.first_unposted_may_go() {
            return false;
        }
        let Some(e) = st.first_unposted().and_then(|i| st.sq.get_mut(i)) else {
            return false;
        };
        let r = match e.wr.op {
            SendOp::RegMr {
                key,
                access,
                iova,
                length,
            } => self
                .dev
                .tables
                .lock()
                .mrs
                .register_fast(self.pd, key, iova, length, access),
            SendOp::LocalInv { key } => self.dev.tables.lock().mrs.invalidate(self.pd, key, true),
            _ => return false,
        };
        e.posted = true;
        e.done = Some(None);
        e.local_failed = r.err().map(local_status);
        true
    }

    /// Places Read data or an atomic's result into the request's buffers.
    pub(super) fn place_response(
        &self,
        st: &mut QpInner,
        conn: &mut Conn,
        h: &DataHeader,
        bytes: &[u8],
    ) -> Result<bool, NakCode> {
        if h.opcode != Opcode::ReadResp {
            return Err(NakCode::InvalidRequest);
        }
        // Only a request that went out can be answered: one still held back
        // (`max_rd_atomic`) or never made is not, and nothing of such a
        // packet is recorded.
        let Some(e) = st.sq.iter_mut().find(|e| e.posted && e.resp == Some(h.msn)) else {
            // A late copy of an answer that completed, or a forgery.
            let late = (h.msn.wrapping_sub(st.resp_stream.progress()) as i32) < 0;
            return if late {
                Ok(false)
            } else {
                Err(NakCode::InvalidRequest)
            };
        };
        if e.local_failed.is_some() {
            // Its own buffer refused an earlier packet (below) and the
            // request is not acknowledged yet (reaped, it would have failed
            // the QP): the packet is taken and dropped.
            return Ok(false);
        }
        if u64::from(h.msg_len) != e.wr.len() {
            return Err(NakCode::InvalidRequest);
        }
        // Answers into one buffer keep their order as Writes do
        // (Documentation/transport.md, "Read answers into the same
        // buffer"; `RecvStream::pieces`): the target of a Read into one
        // buffer is its lkey and first address, and a late packet of an
        // earlier answer is not placed over bytes a newer one, already
        // begun, also fills. (A Read into several buffers is not compared.)
        let target = match e.wr.sges() {
            [sge] if h.msg_len > 0 => Some(Target {
                key: sge.lkey,
                addr: sge.addr,
            }),
            _ => None,
        };
        let len = bytes.len() as u32;
        match st.resp_stream.admits_write(h.msn, len, h.msg_len, target) {
            Ok(()) => {}
            Err(StreamError::Completed) => return Ok(false),
            Err(_) => return Err(NakCode::InvalidRequest),
        }
        let pieces = match target {
            Some(t) => st.resp_stream.pieces(h.msn, t, h.offset, len),
            None => Pieces::whole(len),
        };
        let tables = self.dev.tables.lock();
        // `s` is within the packet, which is within the message.
        let placed = pieces.iter().all(|(s, t)| {
            bytes
                .get(s as usize..t as usize)
                .and_then(|b| {
                    scatter(
                        e.wr.sges(),
                        self.pd,
                        &tables.mrs,
                        h.offset.saturating_add(s),
                        b,
                    )
                })
                .is_some()
        });
        drop(tables);
        if !placed {
            // The packet's bytes lie within the message (the decoder and
            // `admits_write` see to it), and the request's buffers were
            // checked when it was posted: one of them has gone since (its
            // region deregistered or invalidated). The request fails with
            // a local protection error, as the verbs have it, when it is
            // reaped (the caller reaps after every packet; with the
            // request acknowledged, at once), and its QP with it; the
            // packet is taken, not refused. Refused, the answer was
            // dropped by the responder and the request failed only after
            // the QP's patience, with RETRY_EXC_ERR.
            e.local_failed = Some(WcStatus::LocProtErr);
            e.resp_done = true;
            return Ok(false);
        }
        // Counted once placed: an answer whose bytes were refused cannot
        // complete as if they had landed.
        st.resp_stream
            .on_write(h.msn, len, h.msg_len, target)
            .map_err(|_| NakCode::InvalidRequest)?;
        while let Some(msn) = st.resp_stream.pop_completed() {
            st.rd.answer_arrived();
            if let Some(e) = st.sq.iter_mut().find(|e| e.resp == Some(msn)) {
                e.resp_done = true;
            }
        }
        conn.set_progress(h.stream, st.resp_stream.progress());
        Ok(true)
    }

    /// Checks a send request and copies its inline data (`post_send` before
    /// any lock but the table's).
    pub(super) fn prepare_send(&self, wr: &SendWr) -> Result<SendRequest> {
        let len = wr.len();
        let mut inline = KVec::new();
        if wr.inline && len > 0 {
            if len > u64::from(MAX_INLINE) {
                return Err(EINVAL);
            }
            // Kernel consumers may post from atomic context.
            let gfp = if self.user { GFP_KERNEL } else { GFP_ATOMIC };
            inline.reserve(len as usize, gfp)?;
            for s in wr.sges() {
                let at = inline.len();
                inline.resize(at + s.length as usize, 0, gfp)?;
                let dst = inline.get_mut(at..).ok_or(EINVAL)?;
                match &self.kmem {
                    Some(k) => k.read(s.addr, dst)?,
                    None => copy_from_user(dst, s.addr)?,
                }
            }
        }
        let (opcode, remote, imm, atomic) = match wr.op {
            SendOp::Send => (Opcode::Send, None, None, None),
            SendOp::SendImm(i) => (Opcode::SendImm, None, Some(i), None),
            SendOp::Write { addr, rkey } => {
                (Opcode::Write, Some(Remote { rkey, addr }), None, None)
            }
            SendOp::WriteImm { addr, rkey, imm } => (
                Opcode::WriteImm,
                Some(Remote { rkey, addr }),
                Some(imm),
                None,
            ),
            SendOp::Read { addr, rkey } => {
                (Opcode::ReadReq, Some(Remote { rkey, addr }), None, None)
            }
            SendOp::CmpSwap {
                addr,
                rkey,
                compare,
                swap,
            } => (
                Opcode::CmpSwap,
                Some(Remote { rkey, addr }),
                None,
                Some(Atomic {
                    swap_add: swap,
                    compare,
                }),
            ),
            SendOp::FetchAdd { addr, rkey, add } => (
                Opcode::FetchAdd,
                Some(Remote { rkey, addr }),
                None,
                Some(Atomic {
                    swap_add: add,
                    compare: 0,
                }),
            ),
            SendOp::SendInv { rkey } => (Opcode::SendInv, None, Some(rkey), None),
            // Never sent: a placeholder message (`queue_send`).
            SendOp::RegMr { .. } | SendOp::LocalInv { .. } => (Opcode::Send, None, None, None),
        };
        if wr.op.is_local() && (wr.num_sge != 0 || wr.inline) {
            return Err(EINVAL);
        }
        let answered = matches!(opcode, Opcode::ReadReq | Opcode::CmpSwap | Opcode::FetchAdd);
        // A UC QP has no Reads or atomics (verbs refuses them at post).
        if (atomic.is_some() && len != 8)
            || (answered && (wr.inline || !self.qp_type.has_reads_and_atomics()))
        {
            return Err(EINVAL);
        }
        let len32 = u32::try_from(len).map_err(|_| EINVAL)?;
        // Local buffers are checked now: a bad one completes in error at once.
        let local_ok = !inline.is_empty() || {
            let t = self.dev.tables.lock();
            wr.sges().iter().all(|s| {
                t.mrs
                    .local(self.pd, s.addr, u64::from(s.length), s.lkey, answered)
                    .is_some()
            })
        };
        Ok(SendRequest {
            inline,
            opcode,
            remote,
            imm,
            atomic,
            answered,
            len,
            len32,
            local_ok,
        })
    }

    /// Queues a prepared request, under the QP lock (`post_send`, once the
    /// QP is known to be ready to send); returns whether it fits one packet.
    pub(super) fn queue_send(
        &self,
        st: &mut QpInner,
        wr: &SendWr,
        req: SendRequest,
    ) -> Result<bool> {
        let SendRequest {
            inline,
            opcode,
            remote,
            imm,
            atomic,
            answered,
            len,
            len32,
            ..
        } = req;
        let msn = st.next_msn;
        // A local operation takes no number: it never reaches the peer.
        let local = wr.op.is_local();
        // A Write with Immediate consumes a receive too, and names it, so
        // that the responder refuses it when there is none (as a Send).
        let consumes = opcode.consumes_receive() && !local;
        let rsn = if consumes { st.next_rsn as u8 } else { 0 };
        let msg = Message {
            opcode,
            stream: requests(st.dest_qp),
            msn,
            rsn,
            len: len32,
            remote,
            imm,
            atomic,
            // Verbs gives the flag a meaning for these only; on others it
            // is ignored, as the wire allows it on these only.
            solicited: wr.solicited && consumes,
        };
        let resp = answered.then_some(st.next_resp);
        st.sq.push(
            SqEntry {
                wr: *wr,
                msn,
                msg,
                posted: false,
                posted_at: 0,
                done: None,
                inline,
                resp,
                resp_done: false,
                delivered_at: 0,
                passed_at: 0,
                gone: false,
                local_failed: None,
            },
            GFP_ATOMIC,
        )?;
        if local {
            return Ok(true);
        }
        st.next_msn = msn.wrapping_add(1);
        if answered {
            st.next_resp = st.next_resp.wrapping_add(1);
        }
        if consumes {
            st.next_rsn = st.next_rsn.wrapping_add(1);
        }
        Ok(len <= u64::from(st.mtu))
    }
}

/// Copies bytes `[offset, offset + buf.len())` of a send request's data.
pub(super) fn gather(e: &SqEntry, pd: PdId, t: &MrTable, offset: u32, buf: &mut [u8]) -> Result {
    if !e.inline.is_empty() || e.wr.inline {
        let src = e
            .inline
            .get(offset as usize..offset as usize + buf.len())
            .ok_or(EINVAL)?;
        buf.copy_from_slice(src);
        return Ok(());
    }
    let len = buf.len();
    sge_pieces(e.wr.sges(), pd, t, false, offset, len, |mr, at, piece| {
        mr.read(at, buf.get_mut(piece)?).ok()
    })
    .ok_or(EINVAL)
}

#[kunit_tests(metaroce_requester)]
mod tests {
    use super::*;
    use crate::abstractions::types::{Sge, MAX_SGE};

    fn entry(op: SendOp, resp: Option<u32>) -> SqEntry {
        let mut sge = [Sge::default(); MAX_SGE];
        sge[0].length = 8;
        SqEntry {
            wr: SendWr {
                wr_id: 7,
                op,
                sge,
                num_sge: 1,
                signaled: true,
                inline: false,
                fence: false,
                solicited: false,
                ud: None,
            },
            msn: 0,
            msg: Message {
                opcode: Opcode::Write,
                stream: requests(0),
                msn: 0,
                rsn: 0,
                len: 8,
                remote: Some(Remote { rkey: 1, addr: 0 }),
                imm: None,
                atomic: None,
                solicited: false,
            },
            posted: true,
            posted_at: 0,
            done: None,
            inline: KVec::new(),
            resp,
            resp_done: false,
            delivered_at: 0,
            passed_at: 0,
            gone: false,
            local_failed: None,
        }
    }

    #[test]
    fn requests_are_found_past_local_operations() -> Result {
        // [LOCAL_INV, 5, REG_MR, 6, 7]: each local operation holds the
        // next request's number and is never what a number finds.
        let mut sq = KVec::new();
        for (msn, local) in [(5, true), (5, false), (6, true), (6, false), (7, false)] {
            let op = if local {
                SendOp::LocalInv { key: 1 }
            } else {
                SendOp::Write { addr: 0, rkey: 1 }
            };
            let mut e = entry(op, None);
            e.msn = msn;
            sq.push(e, GFP_KERNEL)?;
        }
        assert_eq!(sq_index(&sq, 5), Some(1));
        assert_eq!(sq_index(&sq, 6), Some(3));
        assert_eq!(sq_index(&sq, 7), Some(4));
        assert_eq!(sq_index(&sq, 8), None);
        assert_eq!(sq_index(&sq, 4), None);
        Ok(())
    }

    #[test]
    fn reads_complete_when_answered_and_errors_at_once() {
        let mut w = entry(SendOp::Write { addr: 0, rkey: 1 }, None);
        assert_eq!(w.finished(), None);
        w.done = Some(None);
        assert_eq!(w.finished(), Some(None));

        let mut r = entry(SendOp::Read { addr: 0, rkey: 1 }, Some(0));
        r.done = Some(None);
        // Delivered but not answered yet.
        assert_eq!(r.finished(), None);
        r.resp_done = true;
        assert_eq!(r.finished(), Some(None));

        let mut bad = entry(
            SendOp::FetchAdd {
                addr: 0,
                rkey: 1,
                add: 1,
            },
            Some(1),
        );
        bad.done = Some(Some(NakCode::RemoteAccess));
        assert_eq!(bad.finished(), Some(Some(NakCode::RemoteAccess)));
        assert_eq!(nak_status(NakCode::RemoteAccess), WcStatus::RemAccessErr);
        // A message the transport failed for want of a receive has used up
        // its rnr_retry (conn/rnr.rs): never the generic remote error.
        assert_eq!(
            nak_status(NakCode::ReceiverNotReady),
            WcStatus::RnrRetryExcErr
        );
    }
}
