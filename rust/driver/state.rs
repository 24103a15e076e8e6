// SPDX-License-Identifier: GPL-2.0

//! The state of a device's verbs objects, declared together because they
//! point at each other: the device (`Shared`) lists its peer connections, a
//! peer connection (`Peer`) the streams of its queue pairs, and a queue pair
//! (`QpShared`) its device and its peer connection. What they do is in the
//! files that use this one (Documentation/architecture.md); here are their
//! fields, the naming of a queue pair's streams, and the two things every
//! one of those files does to a queue pair: complete a request, and move the
//! QP to the error state. Safe Rust only.
//!
//! Mapping (Documentation/verbs.md): a device keeps one transport connection
//! per peer host (`Peer`), for as long as it lives, and every RC or UC queue pair
//! to that host is a pair of streams on it: its requests travel on stream
//! `2 * receiver's QPN`, the answers to them (Read data, atomic results) on
//! `2 * requester's QPN + 1`. The connection sprays all of them over `paths()`
//! paths (UDP source ports) under one congestion controller. Before data
//! flows, the two ends name their incarnation of the connection with a hello
//! exchange (`transport::handshake`).
//!
//! Contexts: `post_send`/`post_recv`/verbs calls run in process context; the
//! receive callback and the peer's timer run in softirq. Every piece of state
//! they share sits behind a `spin_lock_bh` lock. Lock order (three levels,
//! Documentation/verbs.md): a peer, then a QP, then one leaf lock (the
//! device's tables, a CQ's ring, an SRQ's ring, a peer's ready ring, a
//! port), never two leaves at once.
//!
//! `NetPort<Shared>` and `Timer<Peer>` need `Shared: UdpHandler` (shared.rs)
//! and `Peer: TimerHandler` (peer.rs): those trait implementations are how the
//! upper files plug into the port and the timer; nothing here calls them.

use super::{
    counters::Counters,
    cq::CqShared,
    mcast::McGroups,
    mr::{MrTable, PdId},
    quota::ObjectCounts,
    rd_atomic::{Initiator, Target},
    ready::ReadyRing,
    srq::SrqShared,
};
use crate::abstractions::{
    memory::KernelMemory,
    net::{NetPort, RouteCache},
    sync::{SpinLockBh, SpinLockIrq},
    timer::Timer,
    trace::PeerTrace,
    types::{
        Access, IpAddr, QpCaps, QpId, QpState, QpType, RecvWr, SendOp, SendWr, Wc, WcOpcode,
        WcStatus,
    },
};
use crate::transport::{
    conn::{Connection, Message},
    session::Session,
    stream::RecvStream,
    wire::{Atomic, NakCode, Remote},
};
use kernel::{
    alloc::{KVVec, KVec},
    prelude::*,
    rbtree::RBTree,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// The most paths (UDP source ports) a connection can have.
pub(crate) const PATHS: usize = 16;

pub(super) type Conn = Connection<PATHS>;

/// The flows a peer connection caches routes for: each of its paths, and
/// each of the peer's paths, whose ACKs it sends from the peer's ports
/// (`Transmit::reverse`).
pub(super) const ROUTES: usize = 2 * PATHS;

/// A device's name as the kernel log and its telemetry show it: the name it
/// was made with (a later `rdma dev set ... name` is not followed).
pub(crate) struct DevName<'a>(pub(crate) &'a [u8]);

impl core::fmt::Display for DevName<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        use core::fmt::Write;
        // The name comes from user space (`rdma link add`): a byte that
        // does not print shows as an escape, so no two names look alike.
        for &b in self.0 {
            if b.is_ascii_graphic() && b != b'\\' {
                f.write_char(char::from(b))?;
            } else {
                write!(f, "\\x{b:02x}")?;
            }
        }
        Ok(())
    }
}

impl kernel::fmt::Display for DevName<'_> {
    fn fmt(&self, f: &mut core::fmt::Formatter<'_>) -> core::fmt::Result {
        core::fmt::Display::fmt(self, f)
    }
}

/// The stream of the requests to queue pair `qpn`.
pub(super) const fn requests(qpn: u32) -> u32 {
    qpn << 1
}

/// The stream of the answers (Read data, atomic results) to queue pair `qpn`.
pub(super) const fn responses(qpn: u32) -> u32 {
    (qpn << 1) | 1
}

/// A device's hold on its namespace's port.
type PortSlot = SpinLockBh<Option<Arc<NetPort<Shared>>>>;

/// State shared by a device's objects and its receive path (shared.rs).
pub(crate) struct Shared {
    /// Its name when it was made, for the kernel log and debugfs
    /// ([`Shared::name`]).
    pub(super) name: KVec<u8>,
    /// Its net device's index.
    pub(super) ifindex: i32,
    /// The namespace's port, until the device goes away.
    pub(super) port: Pin<KBox<PortSlot>>,
    pub(super) tables: Pin<KBox<SpinLockBh<Tables>>>,
    /// The most payload bytes a packet may carry over the net device (its
    /// MTU less the headers, within 256..=4096), read when the device was
    /// made: the ceiling of every connection's packets; each QP's packets
    /// are cut at its own path MTU below it.
    pub(super) payload: u32,
    /// Its port counters (counters.rs).
    pub(super) counters: Counters,
    /// Its live PDs, CQs and SRQs, against the maxima it reports.
    pub(crate) objects: Arc<ObjectCounts>,
    /// What the port can receive (kbit/s; 0: unknown), shared among the
    /// peers sending to it: the `capacity_mbps` module parameter, or the net
    /// device's link speed, both Mbit/s times 1000 (peer.rs: `capacity`).
    pub(super) capacity: KAtomic<u32>,
    /// Peers that sent data within the session's active time (their
    /// sessions say when they start and stop counting).
    pub(super) senders: KAtomic<u32>,
}

/// A device's tables, under one lock: its memory regions, its peer
/// connections, the number of its next protection domain.
pub(super) struct Tables {
    pub(super) mrs: MrTable,
    pub(super) peers: KVec<Arc<PeerNode>>,
    pub(super) next_pd: PdId,
    /// The numbers of the device's live QPs.
    pub(super) qpns: RBTree<u32, ()>,
    pub(super) qp_count: usize,
    /// Its UD QPs by number, for the datagrams that arrive (ud.rs).
    pub(super) ud: RBTree<u32, Arc<QpShared>>,
    /// The multicast groups its UD QPs are attached to (mcast.rs).
    pub(super) mcast: McGroups,
}

/// The connection to one peer host, with its timer.
pub(super) type PeerNode = Timer<Peer>;

/// A device's connection to one peer host (peer.rs).
pub(crate) struct Peer {
    pub(super) ip: IpAddr,
    pub(super) dev: Arc<Shared>,
    /// Our epoch (the connection id we receive on), readable without the
    /// lock by the port's dispatch.
    pub(super) epoch: KAtomic<u32>,
    /// Packets in flight after the last pump, readable without the lock.
    pub(super) in_flight: KAtomic<u32>,
    /// QPs attached, readable without the lock (eviction of idle peers).
    pub(super) nstreams: KAtomic<u32>,
    /// The QPs with work for the connection (`Peer::wake`), under a lock
    /// of its own that is taken last (a process posting a request takes it
    /// without the peer's).
    pub(super) ready: Pin<KBox<SpinLockBh<ReadyRing<QpShared>>>>,
    /// A QP with work found the ring full (which its sizing rules out):
    /// the next pump looks at every QP once.
    pub(super) rescan: KAtomic<bool>,
    /// The handshake is incomplete after every quick hello went unanswered
    /// (readable without the lock: the first to go when the table is full).
    pub(super) unanswered: KAtomic<bool>,
    pub(super) st: Pin<KBox<SpinLockBh<PeerInner>>>,
}

/// A queue pair attached to a peer (its peer QP number names its streams;
/// `PeerInner::by_dest` finds it by that).
pub(super) struct Stream {
    pub(super) qpn: u32,
    pub(super) qp: Arc<QpShared>,
}

/// A peer connection's state under its lock.
pub(super) struct PeerInner {
    pub(super) conn: KVBox<Conn>,
    /// The handshake, hellos, liveness and fair share (the transport's
    /// session, driven in peer.rs and incarnation.rs).
    pub(super) session: Session,
    pub(super) streams: KVec<Stream>,
    /// The same QPs by their number (to find the target of a packet) and by
    /// their peer QP's (to find the source of a packet to send).
    pub(super) by_qpn: RBTree<u32, Arc<QpShared>>,
    pub(super) by_dest: RBTree<u32, Arc<QpShared>>,
    /// When answer data (Read or atomic) from the peer was last placed, for
    /// any of its QPs (nanoseconds; 0: never), and the latest time one of
    /// the requests so answered was handed to the connection. The peer
    /// answers in the order requests reached it, so on a slow link the last
    /// of many QPs' deep queues waits its turn long after delivery: a
    /// delivered request's patience counts from its delivery or
    /// `answered_at`, whichever is later, until the peer answers a request
    /// that was handed to the connection after this one was delivered (and
    /// so surely reached the peer after it; delivery times alone do not
    /// order requests: an ACK may report an earlier arrival later) (incarnation.rs,
    /// `check_alive`).
    pub(super) answered_at: u64,
    pub(super) answered_after: u64,
    pub(super) dead: bool,
    /// The route of each flow the connection sends on (`ROUTES` of them;
    /// peer.rs: `route_cache`), so that a packet is not routed afresh while
    /// the routing tables stay the same.
    pub(super) routes: KVec<RouteCache>,
}

/// A queue pair's state, shared by its verbs object (`Qp`, qp.rs) and the
/// stream of its peer connection.
pub(crate) struct QpShared {
    pub(super) qpn: u32,
    pub(super) id: QpId,
    pub(super) qp_type: QpType,
    pub(super) pd: PdId,
    /// On its peer connection's ready ring (or being put there).
    pub(super) queued: KAtomic<bool>,
    pub(super) user: bool,
    /// A kernel consumer's QP: the memory its inline data lives in.
    pub(super) kmem: Option<KernelMemory>,
    pub(super) sig_all: bool,
    pub(super) caps: QpCaps,
    pub(super) dev: Arc<Shared>,
    pub(super) scq: Arc<CqShared>,
    pub(super) rcq: Arc<CqShared>,
    /// The shared receive queue its receives come from (srq.rs): then `rq`
    /// holds only the receives taken from it for messages that arrived.
    pub(super) srq: Option<Arc<SrqShared>>,
    /// A kernel consumer's UD or GSI QP: its sends, left for a worker.
    pub(super) tx: Option<Arc<Timer<UdTx>>>,
    pub(super) st: Pin<KBox<SpinLockBh<QpInner>>>,
}

/// The sends a kernel consumer posted to a UD or GSI QP, which a worker
/// sends (ud.rs): the MAD layer posts to QP1 with interrupts disabled, where
/// none of the driver's other locks may be taken. Each entry holds its QP;
/// destroying the QP stops the worker and empties the ring. The timer is
/// unused.
pub(crate) struct UdTx {
    /// A leaf lock, taken with interrupts disabled.
    pub(super) ring: Pin<KBox<SpinLockIrq<TxRing<TxEntry>>>>,
}

/// A send on the ring: its QP and the request.
pub(super) type TxEntry = (Arc<QpShared>, SendWr);

/// Sends in the order posted: at most the QP's `max_send_wr`.
pub(super) struct TxRing<T> {
    slots: KVVec<Option<T>>,
    head: usize,
    len: usize,
}

impl<T> TxRing<T> {
    /// An empty ring of `cap` entries, allocated now (`push` never
    /// allocates: it runs with interrupts disabled).
    pub(super) fn new(cap: usize) -> Result<Self> {
        let mut slots = KVVec::with_capacity(cap, GFP_KERNEL)?;
        for _ in 0..cap {
            slots.push(None, GFP_KERNEL)?;
        }
        Ok(Self {
            slots,
            head: 0,
            len: 0,
        })
    }

    /// Queues a send; `false` if the ring is full.
    pub(super) fn push(&mut self, e: T) -> bool {
        let cap = self.slots.len();
        if self.len == cap || cap == 0 {
            return false;
        }
        let at = (self.head + self.len) % cap;
        if let Some(s) = self.slots.get_mut(at) {
            *s = Some(e);
            self.len += 1;
            return true;
        }
        false
    }

    /// The oldest send.
    pub(super) fn pop(&mut self) -> Option<T> {
        if self.len == 0 {
            return None;
        }
        let e = self.slots.get_mut(self.head)?.take();
        self.head = (self.head + 1) % self.slots.len();
        self.len -= 1;
        e
    }
}

/// A request on the send queue (requester.rs).
pub(super) struct SqEntry {
    pub(super) wr: SendWr,
    pub(super) msn: u32,
    /// The transport message, and whether the connection has taken it yet
    /// (it holds at most `MAX_OUTSTANDING` per stream; the send queue may
    /// be deeper).
    pub(super) msg: Message,
    pub(super) posted: bool,
    /// When the connection took it (nanoseconds): it reached the peer after
    /// every request that was delivered before then.
    pub(super) posted_at: u64,
    /// Transport verdict: `Some(None)` delivered, `Some(Some(code))` refused.
    pub(super) done: Option<Option<NakCode>>,
    pub(super) inline: KVec<u8>,
    /// Reads and atomics: the response's number on the response stream, and
    /// whether all of it has arrived.
    pub(super) resp: Option<u32>,
    pub(super) resp_done: bool,
    /// When the transport reported the request delivered (nanoseconds; 0:
    /// not yet): a Read or atomic whose answer does not come within the
    /// QP's patience after that (or after the peer's last answer, while it
    /// answers requests that may have reached it before this one) fails.
    pub(super) delivered_at: u64,
    /// When the peer was first seen answering a request handed to the
    /// connection after this one was delivered (0: not yet): from then its
    /// patience runs whatever else the peer answers.
    pub(super) passed_at: u64,
    /// The peer has no QP for it (NAK "no queue pair", its QP destroyed):
    /// it is not completed at once but fails as a request the peer never
    /// answers, once the QP's patience has passed since `delivered_at`
    /// (incarnation.rs `check_alive`), as verbs fails a request to a QP that
    /// is gone.
    pub(super) gone: bool,
    /// A local operation (REG_MR, LOCAL_INV) that was carried out and
    /// failed: its completion's status. Such an operation takes no message
    /// number (`msn` is the next request's) and never reaches the peer.
    pub(super) local_failed: Option<WcStatus>,
}

/// A request that arrived, kept until it completes in order (responder.rs).
#[derive(Clone, Copy, Default)]
pub(super) struct RxMsg {
    pub(super) used: bool,
    /// The receive a Send was placed in (low 8 bits of its number).
    pub(super) rsn: u8,
    pub(super) opcode: u8,
    pub(super) imm: Option<u32>,
    pub(super) len: u32,
    pub(super) remote: Option<Remote>,
    pub(super) atomic: Option<Atomic>,
    /// The sender asked for a solicited completion (flag SOLICITED).
    pub(super) solicited: bool,
}

/// A response the responder owes (responder.rs): Read data from its memory, or the value an
/// atomic found.
pub(super) struct RespEntry {
    pub(super) msn: u32,
    pub(super) posted: bool,
    pub(super) read: Option<Remote>,
    pub(super) value: [u8; 8],
    pub(super) len: u32,
}

/// A queue pair's state under its lock.
pub(super) struct QpInner {
    pub(super) state: QpState,
    /// UD: the Q_Key its datagrams must carry.
    pub(super) qkey: u32,
    pub(super) access: Access,
    pub(super) mtu: u32,
    pub(super) dest_qp: u32,
    pub(super) rq_psn: u32,
    pub(super) sq_psn: u32,
    pub(super) dest_ip: IpAddr,
    pub(super) max_rd_atomic: u8,
    pub(super) max_dest_rd_atomic: u8,
    pub(super) timeout: u8,
    pub(super) retry_cnt: u8,
    pub(super) rnr_retry: u8,
    pub(super) min_rnr_timer: u8,
    /// The connection to the peer host, from RTR until reset or destroy.
    pub(super) peer: Option<Arc<PeerNode>>,
    pub(super) sq: KVec<SqEntry>,
    pub(super) next_msn: u32,
    pub(super) next_rsn: u32,
    pub(super) rq: KVec<RecvWr>,
    /// Receive number of `rq[0]`: receives consumed so far.
    pub(super) rq_base: u32,
    /// The receive side of the request stream and what arrived of each
    /// message (boxed: kept off the stack while a QP is built).
    pub(super) rstream: KBox<RecvStream>,
    pub(super) rx: KVec<RxMsg>,
    /// Requester: the number on the response stream of the next Read or
    /// atomic queued.
    pub(super) next_resp: u32,
    /// Requester: its Reads and atomics in flight, against `max_rd_atomic`.
    pub(super) rd: Initiator,
    /// Responder: the peer's Reads and atomics held, against
    /// `max_dest_rd_atomic`.
    pub(super) rd_dest: Target,
    pub(super) resp_stream: KBox<RecvStream>,
    /// Responder: responses owed, oldest first, and the next one's number.
    pub(super) owed: KVec<RespEntry>,
    pub(super) next_owed: u32,
    /// A receive that failed on arrival (index in `rq`): it completes with
    /// this status and the QP moves to the error state.
    pub(super) fatal: Option<(usize, WcStatus)>,
    /// The peer answered this QP (a request completed, data arrived): its
    /// peer QP is known to exist in the current incarnation.
    pub(super) proven: bool,
    pub(super) dead: bool,
}

impl QpInner {
    /// Whether the QP has requests or answers that the connection has not
    /// taken yet and may take now. They are handed over in order, so the
    /// last one of each queue says.
    pub(super) fn has_postable(&self) -> bool {
        (matches!(self.state, QpState::Rts | QpState::Sqd)
            && self.rd.may_try(self.max_rd_atomic)
            && self.first_unposted_may_go())
            || self.owed.last().is_some_and(|o| !o.posted)
    }

    /// The place of the first request not handed on yet. Requests are
    /// handed on in order, and a peer's restart hands all of them back, so
    /// those handed on are a prefix of the queue: a binary search finds it.
    pub(super) fn first_unposted(&self) -> Option<usize> {
        let i = self.sq.partition_point(|e| e.posted);
        (i < self.sq.len()).then_some(i)
    }

    /// Whether there is a request not handed on yet that may go now:
    /// anything but a local operation (REG_MR, LOCAL_INV), which waits
    /// until every request before it is over. A LOCAL_INV must (their bytes
    /// may still be read for a resend); a REG_MR that ran before them would
    /// be reported flushed, as never done, if one of them failed, while the
    /// region stayed valid.
    pub(super) fn first_unposted_may_go(&self) -> bool {
        match self.first_unposted() {
            Some(i) => i == 0 || !self.sq.get(i).is_some_and(|e| e.wr.op.is_local()),
            None => false,
        }
    }
}

/// The payload bytes per packet of a QP whose path MTU is `mtu` (the
/// connection caps it at the device's).
pub(super) fn path_payload(mtu: u32) -> u16 {
    mtu.clamp(256, 4096) as u16
}

/// The completion opcode of a send request.
pub(super) fn wc_opcode(op: &SendOp) -> WcOpcode {
    match op {
        SendOp::Send | SendOp::SendImm(_) | SendOp::SendInv { .. } => WcOpcode::Send,
        SendOp::Write { .. } | SendOp::WriteImm { .. } => WcOpcode::RdmaWrite,
        SendOp::Read { .. } => WcOpcode::RdmaRead,
        SendOp::CmpSwap { .. } => WcOpcode::CompSwap,
        SendOp::FetchAdd { .. } => WcOpcode::FetchAdd,
        SendOp::RegMr { .. } => WcOpcode::RegMr,
        SendOp::LocalInv { .. } => WcOpcode::LocalInv,
    }
}

impl Peer {
    /// `qp` has work for the connection: it goes on the ready ring, unless
    /// it is there already. Any context; the QP's lock may be held.
    pub(super) fn wake(&self, qp: &Arc<QpShared>) {
        if qp.queued.xchg(true, Relaxed) {
            return;
        }
        if self.ready.lock().push(qp.clone()).is_err() {
            // Cannot happen (the ring has room for every attached QP); if
            // it did, the next pump looks at every QP.
            self.rescan.store(true, Relaxed);
        }
    }
}

impl QpShared {
    /// A completion of this queue pair.
    pub(super) fn wc(
        &self,
        wr_id: u64,
        status: WcStatus,
        opcode: WcOpcode,
        byte_len: u32,
        imm: Option<u32>,
        src_qp: u32,
    ) -> Wc {
        Wc {
            wr_id,
            status,
            opcode,
            byte_len,
            imm,
            qp: self.id,
            qpn: self.qpn,
            src_qp,
            grh: false,
            invalidated: None,
        }
    }

    /// Moves to the error state: every outstanding request completes flushed
    /// and the connection stops sending for this QP. Its streams stay
    /// attached: what the peer still sends is refused, so the peer's requests
    /// complete, in error, instead of hanging.
    pub(super) fn to_error(&self, st: &mut QpInner, conn: &mut Conn) {
        if st.peer.is_some() {
            conn.cancel_stream(requests(st.dest_qp), NakCode::RemoteOperation);
            conn.cancel_stream(responses(st.dest_qp), NakCode::RemoteOperation);
        }
        self.flush(st);
    }

    /// Empties the receive queue without completions (reset, destroy). A
    /// QP with an SRQ gives the receives it took back to the SRQ: no
    /// message will complete them here.
    pub(super) fn drop_receives(&self, st: &mut QpInner) {
        if let Some(srq) = self.srq.as_ref() {
            srq.give_back(&st.rq);
        }
        st.rq.clear();
    }

    /// The error state without a connection (not attached, or the caller
    /// cancels the streams).
    pub(super) fn flush(&self, st: &mut QpInner) {
        if st.state != QpState::Err && !st.dead {
            let ip = st.peer.as_ref().map_or(IpAddr::default(), |p| p.ip);
            PeerTrace { peer: &ip }.qp_error(self.qpn, st.dest_qp, st.state);
        }
        st.state = QpState::Err;
        st.owed.clear();
        if st.dead {
            // Destroyed: no completion may name it any more.
            st.sq.clear();
            self.drop_receives(st);
            return;
        }
        if self.srq.is_some() {
            // The receives it took go back to the SRQ, not flushed: its
            // other QPs may use them.
            self.drop_receives(st);
        }
        for e in st.sq.drain_all() {
            let wc = self.wc(
                e.wr.wr_id,
                WcStatus::WrFlushErr,
                wc_opcode(&e.wr.op),
                0,
                None,
                st.dest_qp,
            );
            self.scq.push(wc, false);
        }
        for r in st.rq.drain_all() {
            let wc = self.wc(
                r.wr_id,
                WcStatus::WrFlushErr,
                WcOpcode::Recv,
                0,
                None,
                st.dest_qp,
            );
            self.rcq.push(wc, false);
        }
    }
}

#[kunit_tests(metaroce_verbs)]
mod tests {
    use super::*;

    #[test]
    fn the_send_ring_keeps_order_across_the_wrap_and_refuses_when_full() -> Result {
        let mut r = TxRing::new(3)?;
        assert!(r.push(1u32) && r.push(2) && r.push(3));
        assert!(!r.push(4));
        assert_eq!(r.pop(), Some(1));
        assert!(r.push(4));
        assert_eq!(
            (r.pop(), r.pop(), r.pop(), r.pop()),
            (Some(2), Some(3), Some(4), None)
        );
        let mut empty = TxRing::new(0)?;
        assert!(!empty.push(1u32));
        assert_eq!(empty.pop(), None);
        Ok(())
    }

    #[test]
    fn device_names_print_as_made() -> Result {
        let dev = Shared::new(c"mr\x01A 7", 1024, None, 0)?;
        let shown = kernel::str::CString::try_from_fmt(fmt!("{}", dev.name()))?;
        // What the kernel log and telemetry show: printable bytes, and
        // escapes that cannot be taken for them.
        assert_eq!(shown.to_bytes(), b"mr\\x01A\\x207");
        Ok(())
    }

    #[test]
    fn pd_numbers_do_not_wrap() -> Result {
        let dev = Shared::new(c"t", 1024, None, 0)?;
        dev.tables.lock().next_pd = u64::from(u32::MAX);
        let a = dev.alloc_pd();
        let b = dev.alloc_pd();
        assert_eq!(a, u64::from(u32::MAX));
        // A PD number after 2^32 allocations must be new.
        assert!(b > a);
        Ok(())
    }

    #[test]
    fn streams_name_the_receiving_qp() {
        // Requests to QP 0x11 and the answers to QP 0x12 never collide, and
        // the receiver finds its QP from either.
        assert_eq!(requests(0x11), 0x22);
        assert_eq!(responses(0x12), 0x25);
        assert_eq!(requests(0xff_ffff) >> 1, 0xff_ffff);
        assert_eq!(responses(0xff_ffff) >> 1, 0xff_ffff);
        assert_ne!(requests(7), responses(7));
    }
}
