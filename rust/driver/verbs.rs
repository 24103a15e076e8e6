// SPDX-License-Identifier: GPL-2.0

//! Verbs objects of a MetaRoCE device and the data path that runs the
//! transport core under them. Safe Rust only.
//!
//! Mapping (Documentation/verbs.md): each RC queue pair owns one transport
//! connection to its peer QP, identified on the wire by the receiver's QP
//! number; the QP's messages are stream 0 of that connection; the connection
//! sprays them over `PATHS` paths (UDP source ports).
//!
//! Contexts: `post_send`/`post_recv`/verbs calls run in process context; the
//! receive callback and the retransmission timer run in softirq. Every piece
//! of state they share sits behind a `spin_lock_bh` lock. Lock order: QP, then
//! memory-region table, then CQ.

use crate::abstractions::{
    net::{now_ns, NetPort, RxPacket, Timer, TimerHandler, UdpHandler},
    sync::SpinLockBh,
    verbs::{
        copy_from_user, Access, CqEvents, MrKeys, QpCaps, QpCreate, QpId, QpModify, QpQuery,
        QpState, RecvWr, SendOp, SendWr, Umem, Wc, WcOpcode, WcStatus,
    },
};
use crate::new_spinlock_bh;
use crate::transport::{
    conn::{Config, Connection, Message, Received},
    framing::{TRANSPORT_HEADER_MAX, UDP_PORT},
    stream::{RecvStream, StreamError, MAX_OUTSTANDING},
    wire::{Atomic, DataHeader, NakCode, Opcode, Remote},
};
use kernel::{
    alloc::KVec,
    prelude::*,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// The most paths (UDP source ports) a connection can have.
pub(crate) const PATHS: usize = 8;

/// The paths of new connections: the `paths` module parameter, within 1..=PATHS.
pub(crate) fn paths() -> u16 {
    (*crate::module_parameters::paths.value()).clamp(1, PATHS as u32) as u16
}

/// Limits reported by `query_device` and enforced at creation.
pub(crate) const MAX_QP_WR: u32 = 1024;
pub(crate) const MAX_CQE: u32 = 65536;
pub(crate) const MAX_INLINE: u32 = 256;
pub(crate) const MAX_SGE: u32 = crate::abstractions::verbs::MAX_SGE as u32;

/// The first QP number handed out (0 and 1 are the special QPs).
const FIRST_QPN: u32 = 0x11;

/// The next QP number, module-wide: devices in one namespace share a UDP
/// port, and an arriving packet is routed by the QP number it names.
static NEXT_QPN: KAtomic<u32> = KAtomic::new(0);

fn alloc_qpn() -> u32 {
    FIRST_QPN + NEXT_QPN.fetch_add(1, Relaxed) % (0x100_0000 - FIRST_QPN)
}

static EMPTY_CONN: Connection<PATHS> = Connection::EMPTY;

/// State shared by a device's objects and its receive path.
pub(crate) struct Shared {
    /// The namespace's port, until the device goes away.
    port: Pin<KBox<SpinLockBh<Option<Arc<NetPort<Shared>>>>>>,
    tables: Pin<KBox<SpinLockBh<Tables>>>,
}

struct Tables {
    mrs: KVec<Option<MrEntry>>,
    qps: KVec<Arc<QpNode>>,
    next_pd: u32,
    key_gen: u8,
}

struct MrEntry {
    key: u32,
    pd: u32,
    access: Access,
    iova: u64,
    umem: Umem,
}

impl MrEntry {
    /// The region offset of `[addr, addr + len)`, if it lies within.
    fn offset(&self, addr: u64, len: u64) -> Option<u64> {
        region_offset(self.iova, self.umem.len(), addr, len)
    }
}

/// The offset of `[addr, addr + len)` in a region of `size` bytes at `iova`,
/// if it lies entirely within.
fn region_offset(iova: u64, size: u64, addr: u64, len: u64) -> Option<u64> {
    let off = addr.checked_sub(iova)?;
    (off.checked_add(len)? <= size).then_some(off)
}

/// Which posted receive (index from the oldest) a Send with receive number
/// `rsn` (low 8 bits) uses, when `consumed` receives are already used: one
/// of the next `MAX_OUTSTANDING`, or none.
fn receive_slot(consumed: u32, rsn: u8) -> Option<usize> {
    let d = rsn.wrapping_sub(consumed as u8);
    (u32::from(d) < MAX_OUTSTANDING).then_some(usize::from(d))
}

impl Tables {
    fn mr(&self, key: u32) -> Option<&MrEntry> {
        let e = self.mrs.get((key >> 8) as usize)?.as_ref()?;
        (e.key == key).then_some(e)
    }

    /// Checks a local buffer: key, domain, rights, bounds.
    fn local(&self, pd: u32, sge_addr: u64, len: u64, lkey: u32, write: bool) -> Option<(&MrEntry, u64)> {
        let e = self.mr(lkey)?;
        if e.pd != pd || (write && !e.access.has(Access::LOCAL_WRITE)) {
            return None;
        }
        Some((e, e.offset(sge_addr, len)?))
    }
}

impl Shared {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::new(
            Self {
                port: KBox::pin_init(new_spinlock_bh!(None, "metaroce_dev_port"), GFP_KERNEL)?,
                tables: KBox::pin_init(
                    new_spinlock_bh!(
                        Tables {
                            mrs: KVec::new(),
                            qps: KVec::new(),
                            next_pd: 1,
                            key_gen: 0,
                        },
                        "metaroce_tables"
                    ),
                    GFP_KERNEL,
                )?,
            },
            GFP_KERNEL,
        )
        .map_err(Into::into)
    }

    pub(crate) fn set_port(&self, port: Arc<NetPort<Shared>>) {
        *self.port.lock() = Some(port);
    }

    /// Leaves the namespace's port (the device is going away).
    pub(crate) fn close(self: &Arc<Self>) {
        let port = self.port.lock().take();
        if let Some(p) = port {
            p.detach(self);
        }
    }

    pub(crate) fn alloc_pd(&self) -> u32 {
        let mut t = self.tables.lock();
        let id = t.next_pd;
        t.next_pd = t.next_pd.wrapping_add(1).max(1);
        id
    }

    pub(crate) fn reg_mr(&self, pd: u32, umem: Umem, iova: u64, access: Access) -> Result<(u32, MrKeys)> {
        let mut t = self.tables.lock();
        let slot = match t.mrs.iter().position(|m| m.is_none()) {
            Some(i) => i,
            None => {
                if t.mrs.len() >= (1 << 24) {
                    return Err(ENOMEM);
                }
                t.mrs.push(None, GFP_ATOMIC)?;
                t.mrs.len() - 1
            }
        };
        t.key_gen = t.key_gen.wrapping_add(1);
        let key = ((slot as u32) << 8) | u32::from(t.key_gen);
        if let Some(s) = t.mrs.get_mut(slot) {
            *s = Some(MrEntry {
                key,
                pd,
                access,
                iova,
                umem,
            });
        }
        Ok((key, MrKeys { lkey: key, rkey: key }))
    }

    pub(crate) fn dereg_mr(&self, key: u32) {
        // Taken out under the lock, released (which may sleep) after it.
        let entry = {
            let mut t = self.tables.lock();
            match t.mrs.get_mut((key >> 8) as usize) {
                Some(s) if s.as_ref().is_some_and(|e| e.key == key) => s.take(),
                _ => None,
            }
        };
        drop(entry);
    }

    fn send(&self, dest: [u8; 4], sport: u16, hdr: &[u8], len: usize, fill: impl FnOnce(&mut [u8]) -> Result) {
        let port = self.port.lock().clone();
        if let Some(p) = port {
            // A datagram that cannot be sent is a loss; the transport recovers.
            let _ = p.send(dest, sport, UDP_PORT, hdr, len, fill);
        }
    }

    /// The QP number a packet names (bytes 4..8: the receiver's connection
    /// id, which is the receiving QP's number).
    fn qpn_of(pkt: &RxPacket<'_>) -> Option<u32> {
        let id = pkt.payload.get(4..8)?;
        Some(u32::from_be_bytes([id[0], id[1], id[2], id[3]]))
    }
}

impl UdpHandler for Shared {
    fn owns(&self, pkt: &RxPacket<'_>) -> bool {
        Self::qpn_of(pkt).is_some_and(|qpn| self.tables.lock().qps.iter().any(|q| q.qpn == qpn))
    }

    fn receive(&self, pkt: &RxPacket<'_>) {
        let Some(qpn) = Self::qpn_of(pkt) else { return };
        let node = {
            let t = self.tables.lock();
            match t.qps.iter().find(|q| q.qpn == qpn) {
                Some(q) => q.clone(),
                None => return,
            }
        };
        node.receive(pkt);
    }
}

/// A completion queue.
pub(crate) struct Cq {
    inner: Arc<CqShared>,
}

struct CqShared {
    events: Arc<CqEvents>,
    ring: Pin<KBox<SpinLockBh<CqRing>>>,
}

struct CqRing {
    slots: KVec<Option<Wc>>,
    head: usize,
    len: usize,
    /// Armed for the next completion (`Some(true)`: solicited only).
    armed: Option<bool>,
    overflow: bool,
}

impl CqShared {
    /// Adds a completion; fires the event if armed.
    fn push(&self, wc: Wc, solicited: bool) {
        let fire = {
            let mut r = self.ring.lock();
            let cap = r.slots.len();
            if r.len == cap {
                r.overflow = true;
                false
            } else {
                let at = (r.head + r.len) % cap;
                if let Some(s) = r.slots.get_mut(at) {
                    *s = Some(wc);
                }
                r.len += 1;
                match r.armed {
                    Some(sol_only) if !sol_only || solicited || wc.status != WcStatus::Success => {
                        r.armed = None;
                        true
                    }
                    _ => false,
                }
            }
        };
        if fire {
            self.events.fire();
        }
    }

    fn purge(&self, qp: QpId) {
        let mut r = self.ring.lock();
        let cap = r.slots.len();
        let (head, len) = (r.head, r.len);
        let mut kept = 0;
        for i in 0..len {
            let wc = r.slots.get_mut((head + i) % cap).and_then(|s| s.take());
            if let Some(wc) = wc.filter(|w| w.qp != qp) {
                if let Some(s) = r.slots.get_mut((head + kept) % cap) {
                    *s = Some(wc);
                }
                kept += 1;
            }
        }
        r.len = kept;
    }
}

impl Cq {
    pub(crate) fn new(cqe: u32, events: Arc<CqEvents>) -> Result<Self> {
        let mut slots = KVec::with_capacity(cqe as usize, GFP_KERNEL)?;
        for _ in 0..cqe {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            inner: Arc::new(
                CqShared {
                    events,
                    ring: KBox::pin_init(
                        new_spinlock_bh!(
                            CqRing {
                                slots,
                                head: 0,
                                len: 0,
                                armed: None,
                                overflow: false,
                            },
                            "metaroce_cq"
                        ),
                        GFP_KERNEL,
                    )?,
                },
                GFP_KERNEL,
            )?,
        })
    }

    pub(crate) fn poll_one(&self) -> Option<Wc> {
        let mut r = self.inner.ring.lock();
        if r.len == 0 {
            return None;
        }
        let cap = r.slots.len();
        let head = r.head;
        let wc = r.slots.get_mut(head).and_then(|s| s.take());
        r.head = if head + 1 >= cap { 0 } else { head + 1 };
        r.len -= 1;
        wc
    }

    pub(crate) fn req_notify(&self, solicited: bool) -> bool {
        let mut r = self.inner.ring.lock();
        r.armed = Some(solicited);
        r.len > 0
    }
}

/// A protection domain.
pub(crate) struct Pd {
    pub(crate) id: u32,
}

/// A memory region.
pub(crate) struct Mr {
    pub(crate) key: u32,
    pub(crate) dev: Arc<Shared>,
}

/// A queue pair.
pub(crate) struct Qp {
    node: Arc<QpNode>,
}

type QpNode = Timer<QpShared>;

pub(crate) struct QpShared {
    qpn: u32,
    id: QpId,
    pd: u32,
    user: bool,
    sig_all: bool,
    caps: QpCaps,
    dev: Arc<Shared>,
    scq: Arc<CqShared>,
    rcq: Arc<CqShared>,
    st: Pin<KBox<SpinLockBh<QpInner>>>,
}

struct SqEntry {
    wr: SendWr,
    msn: u32,
    /// The transport message, and whether the connection has taken it yet
    /// (it holds at most `MAX_OUTSTANDING` per stream; the send queue may
    /// be deeper).
    msg: Message,
    posted: bool,
    /// Transport verdict: `Some(None)` delivered, `Some(Some(code))` refused.
    done: Option<Option<NakCode>>,
    inline: KVec<u8>,
    /// Reads and atomics: the response's number on the response stream, and
    /// whether all of it has arrived.
    resp: Option<u32>,
    resp_done: bool,
}

impl SqEntry {
    /// Whether the request is over: delivered (and answered, if it asks for
    /// an answer) or refused.
    fn finished(&self) -> Option<Option<NakCode>> {
        match self.done {
            Some(Some(code)) => Some(Some(code)),
            Some(None) if self.resp.is_none() || self.resp_done => Some(None),
            _ => None,
        }
    }
}

/// The stream of a QP's requests, and the stream its responder's answers
/// (Read data, atomic results) travel on, in the other direction.
const REQUESTS: u32 = 0;
const RESPONSES: u32 = 1;

#[derive(Clone, Copy, Default)]
struct RxMsg {
    used: bool,
    opcode: u8,
    imm: Option<u32>,
    len: u32,
    remote: Option<Remote>,
    atomic: Option<Atomic>,
}

/// A response the responder owes: Read data from its memory, or the value an
/// atomic found.
struct RespEntry {
    msn: u32,
    posted: bool,
    read: Option<Remote>,
    value: [u8; 8],
    len: u32,
}

struct QpInner {
    state: QpState,
    access: Access,
    mtu: u32,
    dest_qp: u32,
    rq_psn: u32,
    sq_psn: u32,
    dest_ip: [u8; 4],
    max_rd_atomic: u8,
    max_dest_rd_atomic: u8,
    timeout: u8,
    retry_cnt: u8,
    rnr_retry: u8,
    min_rnr_timer: u8,
    conn: Option<KBox<Connection<PATHS>>>,
    sq: KVec<SqEntry>,
    next_msn: u32,
    next_rsn: u32,
    rq: KVec<RecvWr>,
    /// Receive number of `rq[0]`: receives consumed so far.
    rq_base: u32,
    rstream: RecvStream,
    rx: [RxMsg; MAX_OUTSTANDING as usize],
    /// Requester: reads/atomics posted; responses received.
    next_resp: u32,
    resp_stream: RecvStream,
    /// Responder: responses owed, oldest first, and the next one's number.
    owed: KVec<RespEntry>,
    next_owed: u32,
    /// A receive that failed on arrival (index in `rq`): it completes with
    /// this status and the QP moves to the error state once the NAK is out.
    fatal: Option<(usize, WcStatus)>,
    dead: bool,
}

fn nak_status(code: NakCode) -> WcStatus {
    match code {
        NakCode::RemoteAccess => WcStatus::RemAccessErr,
        NakCode::InvalidRequest => WcStatus::RemInvReqErr,
        NakCode::ReceiverNotReady | NakCode::RemoteOperation => WcStatus::RemOpErr,
    }
}

fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendImm(_) => WcOpcode::Send,
        SendOp::Write { .. } | SendOp::WriteImm { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::CmpSwap { .. } => WcOpcode::CompSwap,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
    }
}

impl QpShared {
    fn wc(&self, wr_id: u64, status: WcStatus, opcode: WcOpcode, byte_len: u32, imm: Option<u32>, src_qp: u32) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len,
            imm,
            qp: self.id,
            src_qp,
        }
    }

    /// Moves to the error state: every outstanding request completes flushed.
    /// The connection stays: it still acknowledges what arrives (refusing
    /// it), so the peer's requests complete, in error, instead of hanging.
    fn to_error(&self, st: &mut QpInner) {
        st.state = QpState::Err;
        st.owed.clear();
        for e in st.sq.drain_all() {
            let wc = self.wc(e.wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&e.wr.op), 0, None, st.dest_qp);
            self.scq.push(wc, false);
        }
        for r in st.rq.drain_all() {
            let wc = self.wc(r.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None, st.dest_qp);
            self.rcq.push(wc, false);
        }
    }

    /// Sends what the connection has to send, reports what completed and arms
    /// the timer. Called with the QP lock held.
    fn pump(&self, timer: &Timer<QpShared>, st: &mut QpInner) {
        // A second round when completions made room for queued requests.
        for _ in 0..2 {
            if !self.pump_once(st) {
                break;
            }
        }
        if st.state == QpState::Err {
            return;
        }
        if let Some(at) = st.conn.as_ref().and_then(|c| c.next_timeout()) {
            timer.start(at.saturating_sub(now_ns()).max(1_000));
        }
    }

    /// Hands queued requests to the connection, in order, while it takes them.
    fn post_queued(st: &mut QpInner) {
        let QpInner { sq, conn, .. } = st;
        let Some(conn) = conn.as_mut() else { return };
        for e in sq.iter_mut().filter(|e| !e.posted) {
            if conn.post(e.msg).is_err() {
                break;
            }
            e.posted = true;
        }
    }

    /// One round of `pump`; returns whether another may post more.
    fn pump_once(&self, st: &mut QpInner) -> bool {
        self.post_responses(st);
        Self::post_queued(st);
        let mut now = now_ns();
        let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
        let tables = &self.dev.tables;
        // Bounds the due-deadline rounds, should one not move its deadline.
        let mut rounds = 0;
        loop {
            let Some(conn) = st.conn.as_mut() else { break };
            if let Some(t) = conn.poll_transmit(now, &mut hdr) {
                let Some(h) = hdr.get(..t.len) else { break };
                let Some(seg) = t.payload else {
                    self.dev.send(st.dest_ip, t.sport, h, 0, |_| Ok(()));
                    continue;
                };
                let pd = self.pd;
                if seg.stream == RESPONSES {
                    let Some(o) = st.owed.iter().find(|o| o.msn == seg.msn) else { continue };
                    self.dev.send(st.dest_ip, t.sport, h, usize::from(seg.len), |buf| {
                        gather_response(o, pd, &tables.lock(), seg.offset, buf)
                    });
                    continue;
                }
                let Some(e) = st.sq.iter().find(|e| e.msn == seg.msn) else { continue };
                self.dev.send(st.dest_ip, t.sport, h, usize::from(seg.len), |buf| {
                    gather(e, pd, &tables.lock(), seg.offset, buf)
                });
                continue;
            }
            // Deadlines already due (an ACK owed now, a pacing slot) are
            // handled here: the kernel's timers may be as coarse as a jiffy.
            match conn.next_timeout() {
                Some(at) if at <= now && rounds < 64 => {
                    rounds += 1;
                    conn.on_timeout(now);
                    now = now_ns();
                }
                _ => break,
            }
        }
        // Completions, in order.
        while let Some(c) = st.conn.as_mut().and_then(|c| c.poll_event()) {
            if c.stream == RESPONSES {
                st.owed.retain(|o| o.msn != c.msn);
            } else if let Some(e) = st.sq.iter_mut().find(|e| e.msn == c.msn && e.done.is_none()) {
                e.done = Some(c.error);
            }
        }
        let mut failed = false;
        let mut reaped = false;
        while let Some(first) = st.sq.first() {
            let Some(verdict) = first.finished() else { break };
            reaped = true;
            let e = st.sq.remove(0);
            let Ok(e) = e else { break };
            let status = verdict.map_or(WcStatus::Success, nak_status);
            if status != WcStatus::Success || e.wr.signaled || self.sig_all {
                let len = if status == WcStatus::Success { e.wr.len() as u32 } else { 0 };
                self.scq.push(self.wc(e.wr.wr_id, status, wc_opcode(&e.wr.op), len, None, st.dest_qp), false);
            }
            if status != WcStatus::Success {
                failed = true;
                break;
            }
        }
        if failed {
            self.to_error(st);
            return false;
        }
        reaped && st.sq.iter().any(|e| !e.posted)
    }

    /// Places one arriving data packet; `Err` names the NAK to send.
    fn place(&self, st: &mut QpInner, h: &DataHeader, bytes: &[u8]) -> Result<bool, NakCode> {
        if h.stream == RESPONSES {
            return self.place_response(st, h, bytes);
        }
        if h.stream != REQUESTS {
            return Err(NakCode::InvalidRequest);
        }
        let idx = (h.msn % MAX_OUTSTANDING) as usize;
        // Read requests and atomics carry no bytes: their one packet is all
        // of them (`msg_len` is the length asked for).
        let carried = if h.opcode.has_payload() { h.msg_len } else { 0 };
        match st.rstream.on_packet(h.msn, bytes.len() as u32, carried) {
            Ok(()) => {}
            Err(StreamError::Completed) => return Ok(false),
            Err(_) => return Err(NakCode::InvalidRequest),
        }
        let tables = self.dev.tables.lock();
        // The target region of a remote access, checked for `right` on both
        // the QP and the region, and for bounds: its offset.
        let remote = |right: u32, at: u64, len: u64| -> Result<(&MrEntry, u64), NakCode> {
            let r = h.remote.ok_or(NakCode::InvalidRequest)?;
            let e = tables.mr(r.rkey).ok_or(NakCode::RemoteAccess)?;
            if e.pd != self.pd || !e.access.has(right) || !st.access.has(right) {
                return Err(NakCode::RemoteAccess);
            }
            let at = r.addr.checked_add(at).ok_or(NakCode::RemoteAccess)?;
            Ok((e, e.offset(at, len).ok_or(NakCode::RemoteAccess)?))
        };
        match h.opcode {
            Opcode::Write | Opcode::WriteImm => {
                // The whole message must fit, whichever packet comes first:
                // otherwise the packets inside would land before the one
                // outside is refused.
                let (e, base) = remote(Access::REMOTE_WRITE, 0, u64::from(h.msg_len))?;
                e.umem.write(base + u64::from(h.offset), bytes).map_err(|_| NakCode::RemoteAccess)?;
            }
            Opcode::ReadReq => {
                remote(Access::REMOTE_READ, 0, u64::from(h.msg_len))?;
            }
            Opcode::CmpSwap | Opcode::FetchAdd => {
                let r = h.remote.ok_or(NakCode::InvalidRequest)?;
                if r.addr % 8 != 0 {
                    return Err(NakCode::InvalidRequest);
                }
                remote(Access::REMOTE_ATOMIC, 0, 8)?;
            }
            Opcode::Send | Opcode::SendImm => {
                let d = receive_slot(st.rq_base, h.rsn).ok_or(NakCode::InvalidRequest)?;
                let rwr = st.rq.get(d).ok_or(NakCode::ReceiverNotReady)?;
                let room: u64 = rwr.sges().iter().map(|s| u64::from(s.length)).sum();
                if u64::from(h.msg_len) > room {
                    // Nothing of it is placed; the receive completes with a
                    // local length error and the QP fails (after the NAK).
                    st.fatal = Some((d, WcStatus::LocLenErr));
                    return Err(NakCode::InvalidRequest);
                }
                scatter(rwr.sges(), self.pd, &tables, h.offset, bytes).ok_or(NakCode::InvalidRequest)?;
            }
            Opcode::ReadResp => return Err(NakCode::InvalidRequest),
        }
        drop(tables);
        if let Some(m) = st.rx.get_mut(idx) {
            *m = RxMsg {
                used: true,
                opcode: h.opcode as u8,
                imm: h.imm,
                len: h.msg_len,
                remote: h.remote,
                atomic: h.atomic,
            };
        }
        Ok(true)
    }

    /// Places Read data or an atomic's result into the request's buffers.
    fn place_response(&self, st: &mut QpInner, h: &DataHeader, bytes: &[u8]) -> Result<bool, NakCode> {
        if h.opcode != Opcode::ReadResp {
            return Err(NakCode::InvalidRequest);
        }
        let Some(e) = st.sq.iter().find(|e| e.resp == Some(h.msn)) else {
            // Not ours (any more): a late copy after the request completed.
            return match st.resp_stream.on_packet(h.msn, bytes.len() as u32, h.msg_len) {
                Err(StreamError::Completed) => Ok(false),
                _ => Err(NakCode::InvalidRequest),
            };
        };
        if u64::from(h.msg_len) != e.wr.len() {
            return Err(NakCode::InvalidRequest);
        }
        match st.resp_stream.on_packet(h.msn, bytes.len() as u32, h.msg_len) {
            Ok(()) => {}
            Err(StreamError::Completed) => return Ok(false),
            Err(_) => return Err(NakCode::InvalidRequest),
        }
        let tables = self.dev.tables.lock();
        scatter(e.wr.sges(), self.pd, &tables, h.offset, bytes).ok_or(NakCode::InvalidRequest)?;
        drop(tables);
        while let Some(msn) = st.resp_stream.pop_completed() {
            if let Some(e) = st.sq.iter_mut().find(|e| e.resp == Some(msn)) {
                e.resp_done = true;
            }
        }
        let next = st.resp_stream.progress();
        if let Some(c) = st.conn.as_mut() {
            c.set_progress(RESPONSES, next);
        }
        Ok(true)
    }

    /// Performs an atomic on the target (checked when it arrived) and returns
    /// the value found. Atomics of this device are serialised by the table lock.
    fn atomic(&self, m: &RxMsg) -> Option<[u8; 8]> {
        let r = m.remote?;
        let a = m.atomic?;
        let tables = self.dev.tables.lock();
        let e = tables.mr(r.rkey)?;
        let off = e.offset(r.addr, 8)?;
        let mut old = [0u8; 8];
        e.umem.read(off, &mut old).ok()?;
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
        e.umem.write(off, &new.to_ne_bytes()).ok()?;
        Some(old)
    }

    /// Posts the responses owed that the connection can take now.
    fn post_responses(&self, st: &mut QpInner) {
        let QpInner { owed, conn, .. } = st;
        let Some(conn) = conn.as_mut() else { return };
        for o in owed.iter_mut().filter(|o| !o.posted) {
            let msg = Message {
                opcode: Opcode::ReadResp,
                stream: RESPONSES,
                msn: o.msn,
                rsn: 0,
                len: o.len,
                remote: None,
                imm: None,
                atomic: None,
            };
            if conn.post(msg).is_err() {
                break;
            }
            o.posted = true;
        }
    }

    /// Releases the receive completions of messages complete in order.
    fn complete_receives(&self, st: &mut QpInner) {
        let mut progressed = false;
        while let Some(msn) = st.rstream.pop_completed() {
            progressed = true;
            let m = st.rx.get_mut((msn % MAX_OUTSTANDING) as usize).map(core::mem::take).unwrap_or_default();
            let answer = if m.opcode == Opcode::ReadReq as u8 {
                Some((m.remote, [0u8; 8], m.len))
            } else if m.opcode == Opcode::CmpSwap as u8 || m.opcode == Opcode::FetchAdd as u8 {
                // Checked on arrival; a region deregistered since answers 0.
                Some((None, self.atomic(&m).unwrap_or_default(), 8))
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
                    pr_warn!("qp {}: no memory for a response\n", self.qpn);
                }
                continue;
            }
            let consumes = m.used
                && (m.opcode == Opcode::Send as u8 || m.opcode == Opcode::SendImm as u8 || m.opcode == Opcode::WriteImm as u8);
            if !consumes {
                continue;
            }
            if st.rq.is_empty() {
                continue;
            }
            let Ok(r) = st.rq.remove(0) else { continue };
            st.rq_base = st.rq_base.wrapping_add(1);
            // A Write with Immediate reports the bytes written, as Sends do.
            let op = if m.opcode == Opcode::WriteImm as u8 {
                WcOpcode::RecvRdmaWithImm
            } else {
                WcOpcode::Recv
            };
            // The wire carries no solicited flag: every receive counts as
            // solicited, so a solicited-only waiter is never left asleep.
            self.rcq.push(self.wc(r.wr_id, WcStatus::Success, op, m.len, m.imm, st.dest_qp), true);
        }
        if progressed {
            let next = st.rstream.progress();
            if let Some(c) = st.conn.as_mut() {
                c.set_progress(REQUESTS, next);
            }
            self.post_responses(st);
        }
    }
}

/// Copies bytes `[offset, offset + buf.len())` of a send request's data.
fn gather(e: &SqEntry, pd: u32, t: &Tables, offset: u32, buf: &mut [u8]) -> Result {
    if !e.inline.is_empty() || e.wr.inline {
        let src = e.inline.get(offset as usize..offset as usize + buf.len()).ok_or(EINVAL)?;
        buf.copy_from_slice(src);
        return Ok(());
    }
    let len = buf.len();
    sge_pieces(e.wr.sges(), pd, t, false, offset, len, |mr, at, piece| {
        mr.umem.read(at, buf.get_mut(piece)?).ok()
    })
    .ok_or(EINVAL)
}

/// Walks the local buffers `sges` over message bytes `[offset, offset +
/// len)`: each piece's region (checked: key, domain, local write access if
/// `write`, bounds), its offset in the region and its range in the message
/// slice. `None` if a check or `f` fails or the buffers are too short.
fn sge_pieces(
    sges: &[crate::abstractions::verbs::Sge],
    pd: u32,
    t: &Tables,
    write: bool,
    offset: u32,
    len: usize,
    mut f: impl FnMut(&MrEntry, u64, core::ops::Range<usize>) -> Option<()>,
) -> Option<()> {
    let mut skip = u64::from(offset);
    let mut done = 0usize;
    for s in sges {
        if done == len {
            break;
        }
        let l = u64::from(s.length);
        if skip >= l {
            skip -= l;
            continue;
        }
        let n = ((l - skip) as usize).min(len - done);
        let (mr, off) = t.local(pd, s.addr, l, s.lkey, write)?;
        f(mr, off + skip, done..done + n)?;
        done += n;
        skip = 0;
    }
    (done == len).then_some(())
}

/// Copies bytes of a response: Read data from the responder's region (checked
/// again: it may have been deregistered since), or an atomic's result.
fn gather_response(o: &RespEntry, pd: u32, t: &Tables, offset: u32, buf: &mut [u8]) -> Result {
    let Some(r) = o.read else {
        let src = o.value.get(offset as usize..offset as usize + buf.len()).ok_or(EINVAL)?;
        buf.copy_from_slice(src);
        return Ok(());
    };
    let e = t.mr(r.rkey).ok_or(EINVAL)?;
    if e.pd != pd || !e.access.has(Access::REMOTE_READ) {
        return Err(EINVAL);
    }
    let at = r.addr.checked_add(u64::from(offset)).ok_or(EINVAL)?;
    let off = e.offset(at, buf.len() as u64).ok_or(EINVAL)?;
    e.umem.read(off, buf)
}

/// Writes arriving bytes at `offset` of the local buffers `sges` (a receive,
/// or the target of a Read or atomic), which need local write access.
fn scatter(sges: &[crate::abstractions::verbs::Sge], pd: u32, t: &Tables, offset: u32, bytes: &[u8]) -> Option<()> {
    sge_pieces(sges, pd, t, true, offset, bytes.len(), |mr, at, piece| {
        mr.umem.write(at, bytes.get(piece)?).ok()
    })
}

impl TimerHandler for QpShared {
    fn expired(node: &QpNode) {
        let mut st = node.st.lock();
        if st.dead {
            return;
        }
        if let Some(c) = st.conn.as_mut() {
            c.on_timeout(now_ns());
        }
        node.pump(node, &mut st);
    }
}

impl QpNode {
    fn receive(&self, pkt: &RxPacket<'_>) {
        let mut st = self.st.lock();
        let live = matches!(st.state, QpState::Rtr | QpState::Rts | QpState::Sqd);
        if st.dead || !(live || st.state == QpState::Err) || pkt.saddr != st.dest_ip {
            return;
        }
        let Some(conn) = st.conn.as_mut() else { return };
        let r = conn.on_datagram(now_ns(), pkt.payload, pkt.sport, pkt.ce);
        if let Ok(Received::Data(h, bytes)) = r {
            let placed = if live {
                self.place(&mut st, &h, bytes)
            } else {
                // In the error state nothing is placed: every request fails.
                Err(NakCode::RemoteOperation)
            };
            match placed {
                Ok(_) => self.complete_receives(&mut st),
                Err(code) => {
                    if let Some(c) = st.conn.as_mut() {
                        c.reject(h.common.path, h.stream, h.msn, code);
                    }
                }
            }
        }
        self.pump(self, &mut st);
        if let Some((d, status)) = st.fatal.take() {
            if d < st.rq.len() {
                if let Ok(r) = st.rq.remove(d) {
                    self.rcq.push(self.wc(r.wr_id, status, WcOpcode::Recv, 0, None, st.dest_qp), false);
                }
            }
            self.to_error(&mut st);
        }
    }
}

impl Qp {
    pub(crate) fn create(dev: &Arc<Shared>, req: &mut QpCreate<'_, super::device::MrDevice>) -> Result<(Self, u32)> {
        if !req.rc {
            return Err(ENOTSUPP);
        }
        let c = &mut req.caps;
        if c.max_send_wr > MAX_QP_WR || c.max_recv_wr > MAX_QP_WR || c.max_send_sge > MAX_SGE
            || c.max_recv_sge > MAX_SGE || c.max_inline_data > MAX_INLINE
        {
            return Err(EINVAL);
        }
        c.max_send_wr = c.max_send_wr.max(1);
        c.max_recv_wr = c.max_recv_wr.max(1);
        c.max_send_sge = MAX_SGE;
        c.max_recv_sge = MAX_SGE;
        c.max_inline_data = MAX_INLINE;
        let qpn = alloc_qpn();
        let shared = QpShared {
            qpn,
            id: req.id,
            pd: req.pd.id,
            user: req.user,
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
                        conn: None,
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
                        dead: false,
                    },
                    "metaroce_qp"
                ),
                GFP_KERNEL,
            )?,
        };
        let node = Arc::pin_init(Timer::new(shared), GFP_KERNEL)?;
        dev.tables.lock().qps.push(node.clone(), GFP_ATOMIC)?;
        Ok((Self { node }, qpn))
    }

    pub(crate) fn modify(&self, m: &QpModify) -> Result {
        let n = &self.node;
        let mut st = n.st.lock();
        if m.dest_unsupported {
            return Err(EINVAL);
        }
        if let Some(a) = m.access {
            st.access = a;
        }
        if let Some(v) = m.path_mtu {
            st.mtu = v;
        }
        if let Some(v) = m.dest_qp {
            st.dest_qp = v;
        }
        if let Some(v) = m.rq_psn {
            st.rq_psn = v;
        }
        if let Some(v) = m.sq_psn {
            st.sq_psn = v;
        }
        if let Some(v) = m.dest_ip4 {
            st.dest_ip = v;
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
        let Some(new) = m.state else { return Ok(()) };
        match new {
            QpState::Rtr if st.conn.is_none() => {
                // Both ends start every path at PSN 0: the connection is as
                // new as the QP pair (QP numbers are not reused soon).
                let mut cfg = Config::new(n.qpn, st.dest_qp, paths(), st.mtu as u16);
                cfg.port_seed = n.qpn.rotate_left(8) ^ st.dest_qp ^ u32::from_ne_bytes(st.dest_ip);
                cfg.reorder_window = 32;
                cfg.ack_delay_ns = 0;
                let mut conn = KBox::new(EMPTY_CONN, GFP_ATOMIC)?;
                conn.configure(cfg);
                st.conn = Some(conn);
            }
            QpState::Err => n.to_error(&mut st),
            QpState::Reset => {
                st.conn = None;
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
        st.state = new;
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
        n.dev.tables.lock().qps.retain(|q| q.qpn != n.qpn);
        {
            let mut st = n.st.lock();
            st.dead = true;
            st.conn = None;
        }
        n.cancel();
        n.scq.purge(n.id);
        n.rcq.purge(n.id);
    }

    pub(crate) fn post_send(&self, wr: &SendWr) -> Result {
        let n = &self.node;
        let len = wr.len();
        let mut inline = KVec::new();
        if wr.inline && len > 0 {
            if len > u64::from(MAX_INLINE) || !n.user {
                return Err(EINVAL);
            }
            inline.reserve(len as usize, GFP_KERNEL)?;
            for s in wr.sges() {
                let at = inline.len();
                inline.resize(at + s.length as usize, 0, GFP_KERNEL)?;
                copy_from_user(inline.get_mut(at..).ok_or(EINVAL)?, s.addr)?;
            }
        }
        let mut st = n.st.lock();
        if st.state == QpState::Err {
            // Verbs: accepted, and completed at once as flushed.
            n.scq.push(n.wc(wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&wr.op), 0, None, st.dest_qp), false);
            return Ok(());
        }
        if st.state != QpState::Rts {
            return Err(EINVAL);
        }
        if st.sq.len() >= n.caps.max_send_wr as usize {
            return Err(ENOMEM);
        }
        let (opcode, remote, imm, atomic) = match wr.op {
            SendOp::Send => (Opcode::Send, None, None, None),
            SendOp::SendImm(i) => (Opcode::SendImm, None, Some(i), None),
            SendOp::Write { addr, rkey } => (Opcode::Write, Some(Remote { rkey, addr }), None, None),
            SendOp::WriteImm { addr, rkey, imm } => {
                (Opcode::WriteImm, Some(Remote { rkey, addr }), Some(imm), None)
            }
            SendOp::Read { addr, rkey } => (Opcode::ReadReq, Some(Remote { rkey, addr }), None, None),
            SendOp::CmpSwap { addr, rkey, compare, swap } => (
                Opcode::CmpSwap,
                Some(Remote { rkey, addr }),
                None,
                Some(Atomic { swap_add: swap, compare }),
            ),
            SendOp::FetchAdd { addr, rkey, add } => (
                Opcode::FetchAdd,
                Some(Remote { rkey, addr }),
                None,
                Some(Atomic { swap_add: add, compare: 0 }),
            ),
        };
        let answered = matches!(opcode, Opcode::ReadReq | Opcode::CmpSwap | Opcode::FetchAdd);
        if (atomic.is_some() && len != 8) || (answered && wr.inline) {
            return Err(EINVAL);
        }
        let len32 = u32::try_from(len).map_err(|_| EINVAL)?;
        // Local buffers are checked now: a bad one completes in error at once.
        let local_ok = !inline.is_empty() || {
            let t = n.dev.tables.lock();
            wr.sges()
                .iter()
                .all(|s| t.local(n.pd, s.addr, u64::from(s.length), s.lkey, answered).is_some())
        };
        let msn = st.next_msn;
        let consumes = matches!(opcode, Opcode::Send | Opcode::SendImm | Opcode::WriteImm);
        let rsn = if matches!(opcode, Opcode::Send | Opcode::SendImm) { st.next_rsn as u8 } else { 0 };
        if !local_ok {
            let wc = n.wc(wr.wr_id, WcStatus::LocProtErr, wc_opcode(&wr.op), 0, None, st.dest_qp);
            n.scq.push(wc, false);
            n.to_error(&mut st);
            return Ok(());
        }
        if st.conn.is_none() {
            return Err(EINVAL);
        }
        let msg = Message {
            opcode,
            stream: REQUESTS,
            msn,
            rsn,
            len: len32,
            remote,
            imm,
            atomic,
        };
        let resp = answered.then_some(st.next_resp);
        st.sq.push(
            SqEntry {
                wr: *wr,
                msn,
                msg,
                posted: false,
                done: None,
                inline,
                resp,
                resp_done: false,
            },
            GFP_ATOMIC,
        )?;
        st.next_msn = msn.wrapping_add(1);
        if answered {
            st.next_resp = st.next_resp.wrapping_add(1);
        }
        if consumes {
            st.next_rsn = st.next_rsn.wrapping_add(1);
        }
        n.pump(n, &mut st);
        Ok(())
    }

    pub(crate) fn post_recv(&self, wr: &RecvWr) -> Result {
        let n = &self.node;
        let mut st = n.st.lock();
        if st.state == QpState::Reset {
            return Err(EINVAL);
        }
        if st.state == QpState::Err {
            n.rcq.push(n.wc(wr.wr_id, WcStatus::WrFlushErr, WcOpcode::Recv, 0, None, st.dest_qp), false);
            return Ok(());
        }
        if st.rq.len() >= n.caps.max_recv_wr as usize {
            return Err(ENOMEM);
        }
        st.rq.push(*wr, GFP_ATOMIC)?;
        Ok(())
    }
}

#[kunit_tests(metaroce_verbs)]
mod tests {
    use super::*;
    use crate::abstractions::verbs::Sge;

    #[test]
    fn region_bounds_are_exact() {
        // A 4096-byte region at 0x1000.
        assert_eq!(region_offset(0x1000, 4096, 0x1000, 4096), Some(0));
        assert_eq!(region_offset(0x1000, 4096, 0x1ff8, 8), Some(0xff8));
        assert_eq!(region_offset(0x1000, 4096, 0x1ff9, 8), None);
        assert_eq!(region_offset(0x1000, 4096, 0x0fff, 1), None);
        assert_eq!(region_offset(0x1000, 4096, 0x2000, 0), Some(4096));
        assert_eq!(region_offset(0x1000, 4096, 0x2000, 1), None);
        assert_eq!(region_offset(0, u64::MAX, u64::MAX, 2), None);
    }

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

    fn entry(op: SendOp, resp: Option<u32>) -> SqEntry {
        let mut sge = [Sge::default(); crate::abstractions::verbs::MAX_SGE];
        sge[0].length = 8;
        SqEntry {
            wr: SendWr {
                wr_id: 7,
                op,
                sge,
                num_sge: 1,
                signaled: true,
                inline: false,
            },
            msn: 0,
            msg: Message {
                opcode: Opcode::Write,
                stream: REQUESTS,
                msn: 0,
                rsn: 0,
                len: 8,
                remote: Some(Remote { rkey: 1, addr: 0 }),
                imm: None,
                atomic: None,
            },
            posted: true,
            done: None,
            inline: KVec::new(),
            resp,
            resp_done: false,
        }
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

        let mut bad = entry(SendOp::FetchAdd { addr: 0, rkey: 1, add: 1 }, Some(1));
        bad.done = Some(Some(NakCode::RemoteAccess));
        assert_eq!(bad.finished(), Some(Some(NakCode::RemoteAccess)));
        assert_eq!(nak_status(NakCode::RemoteAccess), WcStatus::RemAccessErr);
    }
}
