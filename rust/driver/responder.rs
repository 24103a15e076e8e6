// SPDX-License-Identifier: GPL-2.0

//! The responder side of a queue pair: each arriving request checked and
//! placed on arrival (Writes into the region, Sends into the receive they
//! name), receives completed in order, Reads and atomics answered once every
//! request before them is complete. Safe Rust only.

use super::{
    mr::{scatter, MrEntry, MrTable, PdId},
    state::{path_payload, requests, responses, Conn, QpInner, QpShared, RespEntry, RxMsg},
};
use crate::abstractions::timer::now_ns;
use crate::abstractions::types::{Access, QpState, RecvWr, WcOpcode, WcStatus};
use crate::transport::{
    conn::Message,
    stream::{StreamError, Target, MAX_OUTSTANDING},
    wire::{flags, DataHeader, NakCode, Opcode},
};
use kernel::{
    prelude::*,
    sync::atomic::{Atomic as KAtomic, Relaxed},
};

/// Read and atomic answers a QP may keep at once, handed to the connection
/// or not: a backstop behind `max_dest_rd_atomic` (rd_atomic.rs), which
/// bounds those not yet handed over; the connection bounds the others.
const MAX_OWED: usize = 1024;

/// When the out-of-memory warning was last logged (nanoseconds).
static OOM_LOGGED: KAtomic<u64> = KAtomic::new(0);

/// Whether a log line rate-limited by `last` may go now: one a second.
fn log_allowed(last: &KAtomic<u64>) -> bool {
    let now = now_ns();
    let then = last.load(Relaxed);
    if then != 0 && now.wrapping_sub(then) < 1_000_000_000 {
        return false;
    }
    last.store(now, Relaxed);
    true
}

/// Which posted receive (index from the oldest) a Send with receive number
/// `rsn` (low 8 bits) uses, when `consumed` receives are already used: one
/// of the next `MAX_OUTSTANDING`, or none.
fn receive_slot(consumed: u32, rsn: u8) -> Option<usize> {
    let d = rsn.wrapping_sub(consumed as u8);
    (u32::from(d) < MAX_OUTSTANDING).then_some(usize::from(d))
}

/// The posted receive (its index from the oldest, and itself) that a
/// message with receive number `rsn` consumes, `consumed` receives being
/// used already: an RSN out of range is an invalid request, a receive not
/// posted yet is "receiver not ready".
fn posted_receive(rq: &[RecvWr], consumed: u32, rsn: u8) -> Result<(usize, &RecvWr), NakCode> {
    let d = receive_slot(consumed, rsn).ok_or(NakCode::InvalidRequest)?;
    Ok((d, rq.get(d).ok_or(NakCode::ReceiverNotReady)?))
}

impl QpShared {
    /// An arriving data packet for this QP: places it and releases what
    /// completed; `Ok(true)` if it placed bytes (`Ok(false)`: a late copy of
    /// a message that completed), `Err` names the NAK to send.
    pub(super) fn on_data(
        &self,
        st: &mut QpInner,
        conn: &mut Conn,
        h: &DataHeader,
        bytes: &[u8],
    ) -> Result<bool, NakCode> {
        if st.dead || st.peer.is_none() {
            // Destroyed, or reset: as if it were not there.
            return Err(NakCode::NoQueuePair);
        }
        if !matches!(st.state, QpState::Rtr | QpState::Rts | QpState::Sqd) {
            // In the error state nothing is placed: every request fails.
            return Err(NakCode::RemoteOperation);
        }
        st.proven = true;
        let placed = self.place(st, conn, h, bytes);
        if placed.is_ok() {
            self.complete_receives(st, conn);
        }
        if let Some((d, status)) = st.fatal.take() {
            if d < st.rq.len() {
                if let Ok(r) = st.rq.remove(d) {
                    self.rcq.push(
                        self.wc(r.wr_id, status, WcOpcode::Recv, 0, None, st.dest_qp),
                        false,
                    );
                }
            }
            self.to_error(st, conn);
        }
        placed
    }

    /// Places one arriving data packet; `Err` names the NAK to send.
    fn place(
        &self,
        st: &mut QpInner,
        conn: &mut Conn,
        h: &DataHeader,
        bytes: &[u8],
    ) -> Result<bool, NakCode> {
        if h.stream == responses(self.qpn) {
            return self.place_response(st, conn, h, bytes);
        }
        if h.stream != requests(self.qpn) {
            return Err(NakCode::InvalidRequest);
        }
        let idx = (h.msn % MAX_OUTSTANDING) as usize;
        // Read requests and atomics carry no bytes: their one packet is all
        // of them (`msg_len` is the length asked for).
        let carried = if h.opcode.has_payload() { h.msg_len } else { 0 };
        // Checked now, counted once placed: bytes refused (a missing
        // receive, a bad rkey) never count as arrived, so the message they
        // belong to cannot complete as if they had landed.
        // A Write's target, as its packets name it: each packet of the
        // message must name the same.
        let target = match (h.opcode, h.remote) {
            (Opcode::Write | Opcode::WriteImm, Some(r)) if h.msg_len > 0 => Some(Target {
                key: r.rkey,
                addr: r.addr,
            }),
            _ => None,
        };
        let len = bytes.len() as u32;
        match st.rstream.admits_write(h.msn, len, carried, target) {
            Ok(()) => {}
            Err(StreamError::Completed) => return Ok(false),
            Err(_) => return Err(NakCode::InvalidRequest),
        }
        // The parts of a Write's bytes that no newer Write of the stream,
        // already begun, also writes: only those are placed (stream.rs:
        // Writes over the same bytes keep their order). Found before the
        // device's tables are locked.
        let pieces = target.map(|t| st.rstream.pieces(h.msn, t, h.offset, len));
        if h.opcode.consumes_receive() {
            self.take_shared(st, h.rsn);
        }
        let tables = self.dev.tables.lock();
        // The target region of a remote access, checked for `right` on both
        // the QP and the region, and for bounds: its offset.
        let remote = |right: u32, at: u64, len: u64| -> Result<(&MrEntry, u64), NakCode> {
            let r = h.remote.ok_or(NakCode::InvalidRequest)?;
            let at = r.addr.checked_add(at).ok_or(NakCode::RemoteAccess)?;
            tables
                .mrs
                .remote(self.pd, st.access, r.rkey, right, at, len)
        };
        match h.opcode {
            Opcode::Write | Opcode::WriteImm => {
                // The receive a Write with Immediate completes must be
                // posted, as for a Send: without one, it would be written
                // and its immediate lost, and the receive numbers of the
                // Sends after it would no longer match.
                if h.opcode == Opcode::WriteImm {
                    posted_receive(&st.rq, st.rq_base, h.rsn)?;
                }
                // A Write of no bytes touches no memory: its rkey and
                // address are not looked at (verbs lets them be anything,
                // as IBA C9-88 does; rsockets' credit updates are such
                // Writes with Immediate), but the QP must allow Writes.
                if h.msg_len == 0 {
                    if st.access.0 & Access::REMOTE_WRITE == 0 {
                        return Err(NakCode::RemoteAccess);
                    }
                } else {
                    // The whole message must fit, whichever packet comes
                    // first: otherwise the packets inside would land before
                    // the one outside is refused.
                    let (e, base) = remote(Access::REMOTE_WRITE, 0, u64::from(h.msg_len))?;
                    // `remote` checked that the whole message fits in the
                    // region, and the decoder that the packet fits in the
                    // message.
                    let at = base + u64::from(h.offset);
                    // (A Write of bytes always has a target, so pieces.)
                    let pieces = pieces.as_ref().ok_or(NakCode::InvalidRequest)?;
                    for (s, t) in pieces.iter() {
                        let piece = bytes
                            .get(s as usize..t as usize)
                            .ok_or(NakCode::RemoteAccess)?;
                        e.write(at + u64::from(s), piece)
                            .map_err(|_| NakCode::RemoteAccess)?;
                    }
                }
            }
            // A second copy of a request held here (the stream takes it:
            // it carries no bytes) is ignored, not counted again.
            // A UC QP answers none: its peer cannot have asked (the
            // requester refuses them at post).
            Opcode::ReadReq | Opcode::CmpSwap | Opcode::FetchAdd
                if !self.qp_type.has_reads_and_atomics() =>
            {
                return Err(NakCode::InvalidRequest);
            }
            Opcode::ReadReq | Opcode::CmpSwap | Opcode::FetchAdd
                if st.rx.get(idx).is_some_and(|m| m.used) =>
            {
                return Ok(false);
            }
            Opcode::ReadReq => {
                if !st.rd_dest.may_accept(st.max_dest_rd_atomic) || st.owed.len() >= MAX_OWED {
                    return Err(NakCode::InvalidRequest);
                }
                // As for a Write of no bytes.
                if h.msg_len == 0 {
                    if st.access.0 & Access::REMOTE_READ == 0 {
                        return Err(NakCode::RemoteAccess);
                    }
                } else {
                    remote(Access::REMOTE_READ, 0, u64::from(h.msg_len))?;
                }
                st.rd_dest.accepted();
            }
            Opcode::CmpSwap | Opcode::FetchAdd => {
                let r = h.remote.ok_or(NakCode::InvalidRequest)?;
                if r.addr % 8 != 0
                    || !st.rd_dest.may_accept(st.max_dest_rd_atomic)
                    || st.owed.len() >= MAX_OWED
                {
                    return Err(NakCode::InvalidRequest);
                }
                remote(Access::REMOTE_ATOMIC, 0, 8)?;
                st.rd_dest.accepted();
            }
            Opcode::Send | Opcode::SendImm | Opcode::SendInv => {
                // The key a Send with Invalidate names must be one this QP
                // may invalidate (a valid fast registration of its domain)
                // before any byte lands; it is invalidated when the receive
                // completes (`complete_receives`).
                if h.opcode == Opcode::SendInv
                    && !h
                        .imm
                        .is_some_and(|key| tables.mrs.may_invalidate(self.pd, key))
                {
                    return Err(NakCode::InvalidRequest);
                }
                let (d, rwr) = posted_receive(&st.rq, st.rq_base, h.rsn)?;
                let room: u64 = rwr.sges().iter().map(|s| u64::from(s.length)).sum();
                if u64::from(h.msg_len) > room {
                    // Nothing of it is placed; the receive completes with a
                    // local length error and the QP fails (after the NAK).
                    st.fatal = Some((d, WcStatus::LocLenErr));
                    return Err(NakCode::InvalidRequest);
                }
                // A receive taken from an SRQ names buffers of the SRQ's PD.
                let pd = self.srq.as_ref().map_or(self.pd, |q| q.pd);
                scatter(rwr.sges(), pd, &tables.mrs, h.offset, bytes)
                    .ok_or(NakCode::InvalidRequest)?;
            }
            Opcode::ReadResp => return Err(NakCode::InvalidRequest),
        }
        drop(tables);
        st.rstream
            .on_write(h.msn, len, carried, target)
            .map_err(|_| NakCode::InvalidRequest)?;
        if let Some(m) = st.rx.get_mut(idx) {
            // Every packet of a solicited message says so; any one that
            // did is enough (packets land in any order).
            let solicited = (m.used && m.solicited) || h.common.flags & flags::SOLICITED != 0;
            *m = RxMsg {
                used: true,
                rsn: h.rsn,
                opcode: h.opcode as u8,
                imm: h.imm,
                len: h.msg_len,
                remote: h.remote,
                atomic: h.atomic,
                solicited,
            };
        }
        Ok(true)
    }

    /// With an SRQ: takes its oldest receives into the QP's own queue, in
    /// order, until the receive that number `rsn` names is there (or the
    /// SRQ is empty, which `posted_receive` then reports). A receive number
    /// out of range takes nothing. The receives taken before that one
    /// belong to messages the peer sent earlier, which consume them when
    /// they arrive (or are flushed with the QP); at most `MAX_OUTSTANDING`
    /// are taken, for which the queue has room from creation.
    fn take_shared(&self, st: &mut QpInner, rsn: u8) {
        let Some(srq) = self.srq.as_ref() else { return };
        let Some(d) = receive_slot(st.rq_base, rsn) else {
            return;
        };
        while st.rq.len() <= d {
            let Some(wr) = srq.take() else { return };
            if st.rq.push(wr, GFP_ATOMIC).is_err() {
                return;
            }
        }
    }

    /// Performs an atomic on the target and returns the value found. The
    /// access is checked again in full now (it was when the request arrived,
    /// but the region may have gone, or the QP's rights changed, while the
    /// request waited for the messages before it); `access` is the QP's
    /// now. Atomics of this device are serialised by the table lock.
    fn atomic(&self, m: &RxMsg, access: Access) -> Option<[u8; 8]> {
        let r = m.remote?;
        let a = m.atomic?;
        let tables = self.dev.tables.lock();
        let (e, off) = tables
            .mrs
            .remote(self.pd, access, r.rkey, Access::REMOTE_ATOMIC, r.addr, 8)
            .ok()?;
        let mut old = [0u8; 8];
        e.read(off, &mut old).ok()?;
        let v = u64::from_ne_bytes(old);
        let new = if m.opcode == Opcode::CmpSwap as u8 {
            if v == a.compare {
                a.swap_add
            } else {
                v
            }
        } else {
            v.wrapping_add(a.swap_add)
        };
        e.write(off, &new.to_ne_bytes()).ok()?;
        Some(old)
    }

    /// Posts the responses owed that the connection can take now.
    /// Returns whether the connection took any.
    pub(super) fn post_responses(st: &mut QpInner, conn: &mut Conn) -> bool {
        let stream = responses(st.dest_qp);
        let mut any = false;
        for o in st.owed.iter_mut().filter(|o| !o.posted) {
            let msg = Message {
                opcode: Opcode::ReadResp,
                stream,
                msn: o.msn,
                rsn: 0,
                len: o.len,
                remote: None,
                imm: None,
                atomic: None,
                solicited: false,
            };
            if conn.post_sized(msg, path_payload(st.mtu)).is_err() {
                break;
            }
            o.posted = true;
            st.rd_dest.handed();
            any = true;
        }
        any
    }

    /// Releases the receive completions of messages complete in order.
    fn complete_receives(&self, st: &mut QpInner, conn: &mut Conn) {
        let mut progressed = false;
        while let Some(msn) = st.rstream.pop_completed() {
            progressed = true;
            let m = st
                .rx
                .get_mut((msn % MAX_OUTSTANDING) as usize)
                .map(core::mem::take)
                .unwrap_or_default();
            let answer = if m.opcode == Opcode::ReadReq as u8 {
                Some((m.remote, [0u8; 8], m.len))
            } else if m.opcode == Opcode::CmpSwap as u8 || m.opcode == Opcode::FetchAdd as u8 {
                // Checked again in full. A region that went away since (or
                // rights the QP no longer grants) gets no answer at all: a
                // made-up old value would look like success (a lock taken).
                // The QP fails; the requester's atomic fails when its
                // answer does not come (`Peer::check_alive`).
                match self.atomic(&m, st.access) {
                    Some(old) => Some((None, old, 8)),
                    None => {
                        self.to_error(st, conn);
                        return;
                    }
                }
            } else {
                None
            };
            if let Some((read, value, len)) = answer {
                let msn = st.next_owed;
                st.next_owed = msn.wrapping_add(1);
                let entry = RespEntry {
                    msn,
                    posted: false,
                    read,
                    value,
                    len,
                };
                if st.owed.push(entry, GFP_ATOMIC).is_err() {
                    // Out of memory: the requester's Read never completes and
                    // its QP times out; nothing is corrupted.
                    st.rd_dest.handed();
                    if log_allowed(&OOM_LOGGED) {
                        pr_warn!("qp {}: no memory for a response\n", self.qpn);
                    }
                }
                continue;
            }
            let consumes =
                m.used && Opcode::from_u8(m.opcode).is_some_and(Opcode::consumes_receive);
            if !consumes {
                continue;
            }
            if st.rq.is_empty() {
                continue;
            }
            if m.rsn != st.rq_base as u8 {
                // It was checked against (a Send: its bytes went to) another
                // receive than the one it would complete: only a peer
                // breaking the protocol does that.
                st.fatal = Some((0, WcStatus::LocProtErr));
                break;
            }
            // A Send with Invalidate invalidates its key now, all of it
            // placed. The key was valid when it arrived; if it is not now
            // (the consumer invalidated it meanwhile), the receive fails.
            let invalidated = if m.opcode == Opcode::SendInv as u8 {
                let key = m.imm.unwrap_or(0);
                let done = self.dev.tables.lock().mrs.invalidate(self.pd, key, false);
                if done.is_err() {
                    st.fatal = Some((0, WcStatus::LocProtErr));
                    break;
                }
                Some(key)
            } else {
                None
            };
            let Ok(r) = st.rq.remove(0) else { continue };
            st.rq_base = st.rq_base.wrapping_add(1);
            // A Write with Immediate reports the bytes written, as Sends do.
            let op = if m.opcode == Opcode::WriteImm as u8 {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            // A CQ armed for solicited completions only wakes for the
            // messages the sender marked (errors always wake it: cq.rs).
            // After a Send with Invalidate the immediate slot carried the
            // key, not immediate data.
            let imm = if invalidated.is_some() { None } else { m.imm };
            let mut wc = self.wc(r.wr_id, WcStatus::Success, op, m.len, imm, st.dest_qp);
            wc.invalidated = invalidated;
            self.rcq.push(wc, m.solicited);
        }
        if progressed {
            conn.set_progress(requests(self.qpn), st.rstream.progress());
            // Posted responses are sent by the pump that follows.
            let _ = Self::post_responses(st, conn);
        }
    }
}

/// Copies bytes of a response: Read data from the responder's region (the
/// access checked again in full: the region may have been deregistered, or
/// the QP's rights `access` changed, since the request arrived), or an
/// atomic's result.
pub(super) fn gather_response(
    o: &RespEntry,
    pd: PdId,
    access: Access,
    t: &MrTable,
    offset: u32,
    buf: &mut [u8],
) -> Result {
    if buf.is_empty() {
        return Ok(());
    }
    let Some(r) = o.read else {
        let src = o
            .value
            .get(offset as usize..offset as usize + buf.len())
            .ok_or(EINVAL)?;
        buf.copy_from_slice(src);
        return Ok(());
    };
    let at = r.addr.checked_add(u64::from(offset)).ok_or(EINVAL)?;
    let (e, off) = t
        .remote(
            pd,
            access,
            r.rkey,
            Access::REMOTE_READ,
            at,
            buf.len() as u64,
        )
        .map_err(|_| EINVAL)?;
    e.read(off, buf)
}

#[kunit_tests(metaroce_responder)]
mod tests {
    use super::*;

    #[test]
    fn sends_find_their_receive_across_the_wrap() {
        assert_eq!(receive_slot(0, 0), Some(0));
        assert_eq!(receive_slot(250, 250), Some(0));
        assert_eq!(receive_slot(250, 3), Some(9));
        assert_eq!(receive_slot(250, 250u8.wrapping_add(63)), Some(63));
        // Older than the oldest posted receive, or too far ahead.
        assert_eq!(receive_slot(250, 249), None);
        assert_eq!(receive_slot(250, (250u32 + 64) as u8), None);
    }
}
