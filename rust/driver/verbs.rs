// SPDX-License-Identifier: GPL-2.0

//! Verbs objects of a MetaRoCE device and the data path that runs the
//! transport core under them. Safe Rust only.
//!
//! Mapping (Documentation/verbs.md): a device keeps one transport connection
//! per peer host (`Peer`), for as long as it lives, and every RC queue pair
//! to that host is a pair of streams on it: its requests travel on stream
//! `2 * receiver's QPN`, the answers to them (Read data, atomic results) on
//! `2 * requester's QPN + 1`. The connection sprays all of them over `paths()`
//! paths (UDP source ports) under one congestion controller. Before data
//! flows, the two ends name their incarnation of the connection with a hello
//! exchange (`transport::handshake`).
//!
//! Contexts: `post_send`/`post_recv`/verbs calls run in process context; the
//! receive callback and the peer's timer run in softirq. Every piece of state
//! they share sits behind a `spin_lock_bh` lock. Lock order: peer, then QP,
//! then memory-region table, then CQ.

use crate::abstractions::{
    net::{now_ns, random_u32, NetPort, RxPacket, Timer, TimerHandler, UdpHandler},
    sync::SpinLockBh,
    verbs::{
        copy_from_user, Access, CqEvents, KernelMemory, MrKeys, QpCaps, QpCreate, QpId, QpModify, QpQuery,
        QpState, RecvWr, SendOp, SendWr, Umem, Wc, WcOpcode, WcStatus,
    },
};
use crate::new_spinlock_bh;
use crate::transport::{
    conn::{Config, Connection, Message, Received, PORT_BASE},
    framing::{TRANSPORT_HEADER_MAX, UDP_PORT},
    handshake::Handshake,
    stream::{RecvStream, StreamError, MAX_OUTSTANDING},
    wire::{self, Atomic, DataHeader, NakCode, Opcode, Packet, PacketType, Remote},
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
pub(crate) const PATHS: usize = 16;

type Conn = Connection<PATHS>;

/// The paths of new connections: the `paths` module parameter, within 1..=PATHS.
pub(crate) fn paths() -> u16 {
    (*crate::module_parameters::paths.value()).clamp(1, PATHS as u32) as u16
}

/// Limits reported by `query_device` and enforced at creation.
pub(crate) const MAX_QP_WR: u32 = 1024;
pub(crate) const MAX_CQE: u32 = 65536;
pub(crate) const MAX_INLINE: u32 = 256;
pub(crate) const MAX_SGE: u32 = crate::abstractions::verbs::MAX_SGE as u32;

/// Peer hosts a device keeps connections to.
const MAX_PEERS: usize = 256;

/// Hellos are repeated until the handshake completes, the gap doubling from
/// the first to the last (nanoseconds).
const HELLO_FIRST_NS: u64 = 1_000_000;
const HELLO_MAX_NS: u64 = 128_000_000;

/// The least time a peer may go silent while requests wait on it before its
/// queue pairs fail with "retry exceeded", whatever their timeout attributes
/// say: a path's probe timer backs off to 2 s, and at 10% loss each way all
/// paths were seen waiting on probes for 4.7 s together (Debian's kernel, a
/// TCG guest), with a live peer.
const MIN_DEAD_NS: u64 = 10_000_000_000;

/// How long QP `st` lets its peer go silent: the verbs local ACK timeout
/// (4.096 us << `timeout`) times the tries (`retry_cnt` + 1), at least
/// `MIN_DEAD_NS`; `None` for timeout 0 (wait forever).
fn patience_ns(timeout: u8, retry_cnt: u8) -> Option<u64> {
    if timeout == 0 {
        return None;
    }
    let one = 4096u64 << timeout.min(31);
    Some((one * (u64::from(retry_cnt.min(7)) + 1)).max(MIN_DEAD_NS))
}

/// The first QP number handed out (0 and 1 are the special QPs).
const FIRST_QPN: u32 = 0x11;

/// The next QP number, module-wide: devices in one namespace share a UDP
/// port, and a QP number names one queue pair on the host.
static NEXT_QPN: KAtomic<u32> = KAtomic::new(0);

fn alloc_qpn() -> u32 {
    FIRST_QPN + NEXT_QPN.fetch_add(1, Relaxed) % (0x100_0000 - FIRST_QPN)
}

static EMPTY_CONN: Conn = Connection::EMPTY;

/// The stream of the requests to queue pair `qpn`.
const fn requests(qpn: u32) -> u32 {
    qpn << 1
}

/// The stream of the answers (Read data, atomic results) to queue pair `qpn`.
const fn responses(qpn: u32) -> u32 {
    (qpn << 1) | 1
}

/// State shared by a device's objects and its receive path.
pub(crate) struct Shared {
    /// The namespace's port, until the device goes away.
    port: Pin<KBox<SpinLockBh<Option<Arc<NetPort<Shared>>>>>>,
    tables: Pin<KBox<SpinLockBh<Tables>>>,
}

struct Tables {
    mrs: KVec<Option<MrEntry>>,
    peers: KVec<Arc<PeerNode>>,
    next_pd: u32,
    key_gen: u8,
}

/// The memory behind a region.
pub(crate) enum Mem {
    /// Pinned pages of a user process.
    User(Umem),
    /// All of kernel memory, for a kernel consumer's PD (local access only):
    /// the region starts at address 0, so an offset is an address.
    Kernel(KernelMemory),
}

struct MrEntry {
    key: u32,
    pd: u32,
    access: Access,
    iova: u64,
    mem: Mem,
}

impl MrEntry {
    fn len(&self) -> u64 {
        match &self.mem {
            Mem::User(u) => u.len(),
            Mem::Kernel(_) => u64::MAX,
        }
    }

    /// The region offset of `[addr, addr + len)`, if it lies within.
    fn offset(&self, addr: u64, len: u64) -> Option<u64> {
        region_offset(self.iova, self.len(), addr, len)
    }

    /// Copies `src` into the region at offset `off`.
    fn write(&self, off: u64, src: &[u8]) -> Result {
        match &self.mem {
            Mem::User(u) => u.write(off, src),
            Mem::Kernel(k) => k.write(off, src),
        }
    }

    /// Copies the region's bytes at offset `off` into `dst`.
    fn read(&self, off: u64, dst: &mut [u8]) -> Result {
        match &self.mem {
            Mem::User(u) => u.read(off, dst),
            Mem::Kernel(k) => k.read(off, dst),
        }
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
                            peers: KVec::new(),
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

    /// Leaves the namespace's port and drops the peer connections (the
    /// device is going away; its queue pairs are gone).
    pub(crate) fn close(self: &Arc<Self>) {
        let port = self.port.lock().take();
        if let Some(p) = port {
            p.detach(self);
        }
        let peers = core::mem::take(&mut self.tables.lock().peers);
        for p in peers.iter() {
            {
                let mut ps = p.st.lock();
                ps.dead = true;
                ps.streams.clear();
                p.log_stats(&ps);
            }
            p.stop();
        }
    }

    pub(crate) fn alloc_pd(&self) -> u32 {
        let mut t = self.tables.lock();
        let id = t.next_pd;
        t.next_pd = t.next_pd.wrapping_add(1).max(1);
        id
    }

    pub(crate) fn reg_mr(&self, pd: u32, mem: Mem, iova: u64, access: Access) -> Result<(u32, MrKeys)> {
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
                mem,
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

    fn find_peer(&self, ip: [u8; 4]) -> Option<Arc<PeerNode>> {
        self.tables.lock().peers.iter().find(|p| p.ip == ip).cloned()
    }

    /// The connection to host `ip`, set up (and its first hello sent) if
    /// there is none yet. Process context.
    fn peer(self: &Arc<Self>, ip: [u8; 4], mtu: u32) -> Result<Arc<PeerNode>> {
        if let Some(p) = self.find_peer(ip) {
            return Ok(p);
        }
        let hs = Handshake::new(random_u32());
        // About 160 KiB: virtually contiguous memory will do.
        let mut conn = KVBox::new(EMPTY_CONN, GFP_KERNEL)?;
        conn.configure(conn_config(&hs, ip, mtu));
        let node = Timer::new_arc(
            Peer {
                ip,
                dev: self.clone(),
                epoch: KAtomic::new(hs.epoch()),
                in_flight: KAtomic::new(0),
                st: KBox::pin_init(
                    new_spinlock_bh!(
                        PeerInner {
                            conn,
                            hs,
                            streams: KVec::new(),
                            next_hello: 0,
                            hello_gap: HELLO_FIRST_NS,
                            rr: 0,
                            alive_at: now_ns(),
                            dead: false,
                        },
                        "metaroce_peer"
                    ),
                    GFP_KERNEL,
                )?,
            },
            GFP_KERNEL,
        )?;
        {
            let mut t = self.tables.lock();
            if let Some(p) = t.peers.iter().find(|p| p.ip == ip) {
                return Ok(p.clone());
            }
            if t.peers.len() >= MAX_PEERS {
                return Err(ENOSPC);
            }
            t.peers.push(node.clone(), GFP_ATOMIC)?;
        }
        node.pump(&node, &mut node.st.lock(), false);
        Ok(node)
    }
}

/// The connection's setup for handshake state `hs` with host `ip`.
fn conn_config(hs: &Handshake, ip: [u8; 4], mtu: u32) -> Config {
    let mut cfg = Config::new(hs.epoch(), hs.remote(), paths(), mtu.clamp(256, 4096) as u16);
    cfg.port_seed = hs.epoch().rotate_left(8) ^ u32::from_ne_bytes(ip);
    // Each path leaves this host in order (one sending context, see
    // `Peer::pump`), so a hole followed by 8 later packets is taken for a
    // loss; on a fabric that reorders within a path the receiver reports the
    // spurious resends and the connection allows more (up to 128).
    cfg.reorder_window = 8;
    // Scheduling delays of a few milliseconds happen (virtual machines):
    // a path is probed after 2 ms without an answer at the earliest, and
    // failed after two more probe periods.
    cfg.probe_floor_us = 2_000;
    // Losses do not shrink windows (on a lossy fabric they are rarely
    // congestion), so without ECN marks on the way a window would grow until
    // the receiving CPU's input backlog (netdev_max_backlog, 1000 packets on
    // veth and loopback) drops. 256 packets stay well within it.
    cfg.max_window = 256;
    // An ACK for every 8th packet of a path, at once when the sender asks
    // (the end of its data, or the path's window is full), when the path's
    // last hole closes, on a CE mark or a duplicate, and otherwise within
    // 500 us. Each ACK is a datagram both hosts pay for in full:
    // acknowledging every packet (as this module did) made half of all
    // datagrams ACKs; now they are 15-30% (Documentation/performance.md).
    cfg.ack_every = 8;
    cfg.ack_delay_ns = 500_000;
    cfg
}

impl UdpHandler for Shared {
    fn owns(&self, pkt: &RxPacket<'_>) -> bool {
        let Some((ptype, conn)) = wire::peek(pkt.payload) else {
            return false;
        };
        let hello = ptype == PacketType::Hello;
        self.tables
            .lock()
            .peers
            .iter()
            .any(|p| p.ip == pkt.saddr && (hello || p.epoch.load(Relaxed) == conn))
    }

    fn receive(&self, pkt: &RxPacket<'_>) {
        if let Some(p) = self.find_peer(pkt.saddr) {
            p.receive(&p, pkt);
        }
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

/// The connection to one peer host, with its timer.
type PeerNode = Timer<Peer>;

pub(crate) struct Peer {
    ip: [u8; 4],
    dev: Arc<Shared>,
    /// Our epoch (the connection id we receive on), readable without the
    /// lock by the port's dispatch.
    epoch: KAtomic<u32>,
    /// Packets in flight after the last pump, readable without the lock.
    in_flight: KAtomic<u32>,
    st: Pin<KBox<SpinLockBh<PeerInner>>>,
}

/// A queue pair attached to a peer: its number and its peer QP's, which
/// name its streams.
struct Stream {
    qpn: u32,
    dest: u32,
    qp: Arc<QpShared>,
}

struct PeerInner {
    conn: KVBox<Conn>,
    hs: Handshake,
    streams: KVec<Stream>,
    /// When the next hello is due while the handshake is incomplete.
    next_hello: u64,
    hello_gap: u64,
    /// The stream served first by the next pump (round robin).
    rr: usize,
    /// The last time the peer showed life, or nothing was waiting on it.
    alive_at: u64,
    dead: bool,
}

impl PeerInner {
    /// The local QP whose peer QP is `dest` (it sends on `dest`'s streams).
    fn by_dest(&self, dest: u32) -> Option<Arc<QpShared>> {
        self.streams.iter().find(|s| s.dest == dest).map(|s| s.qp.clone())
    }
}

/// A queue pair.
pub(crate) struct Qp {
    node: Arc<QpShared>,
}

pub(crate) struct QpShared {
    qpn: u32,
    id: QpId,
    pd: u32,
    user: bool,
    /// A kernel consumer's QP: the memory its inline data lives in.
    kmem: Option<KernelMemory>,
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
    /// The connection to the peer host, from RTR until reset or destroy.
    peer: Option<Arc<PeerNode>>,
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
    /// this status and the QP moves to the error state.
    fatal: Option<(usize, WcStatus)>,
    /// The peer answered this QP (a request completed, data arrived): its
    /// peer QP is known to exist in the current incarnation.
    proven: bool,
    dead: bool,
}

/// Where the request numbered `msn` is in a send queue: requests are queued
/// with consecutive numbers and leave from the front, so its place is its
/// distance from the first (checked; a search should that ever not hold).
fn sq_index(sq: &[SqEntry], msn: u32) -> Option<usize> {
    let first = sq.first()?.msn;
    let i = msn.wrapping_sub(first) as usize;
    if sq.get(i).is_some_and(|e| e.msn == msn) {
        return Some(i);
    }
    sq.iter().position(|e| e.msn == msn)
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

impl Peer {
    /// Whether nothing was in flight at the last pump.
    fn idle(&self) -> bool {
        self.in_flight.load(Relaxed) == 0
    }

    /// Logs what the connection did, when it had traffic (until the
    /// counters appear in `rdma statistic`).
    fn log_stats(&self, ps: &PeerInner) {
        let c = ps.conn.stats();
        if c.tx_data == 0 && c.rx_data == 0 {
            return;
        }
        pr_info!(
            "peer {}.{}.{}.{}: sent {} data, {} resent ({} spurious), {} moved, {} path moves, {} timeouts, {} ACKs; received {} data, {} duplicates, {} CE echoed, {} dropped\n",
            self.ip[0], self.ip[1], self.ip[2], self.ip[3],
            c.tx_data, c.retransmits, c.spurious, c.relocations, c.path_moves, c.timeouts, c.tx_acks,
            c.rx_data, c.rx_duplicates, c.ce_echoed, c.rx_errors
        );
    }

    /// Sends our hello now.
    fn hello(&self, ps: &PeerInner) {
        let mut buf = [0u8; 32];
        if let Ok(n) = ps.hs.hello(&mut buf) {
            if let Some(h) = buf.get(..n) {
                self.dev.send(self.ip, PORT_BASE, h, 0, |_| Ok(()));
            }
        }
    }

    /// Sends what the connection has to send, reports what completed and
    /// arms the timer. Called with the peer lock held (no QP lock).
    ///
    /// Data packets go out only where `data` says so: on the peer's worker
    /// (and for a lone small request on an idle connection, in the system
    /// call). Elsewhere (softirq, other process contexts) only ACKs and NAKs
    /// are sent, and the worker is kicked when data may go. One sending
    /// context keeps each path in order on the wire: transmissions from two
    /// CPUs pass through two input backlogs (veth, loopback) and overtake each
    /// other, which the receiver takes for loss.
    fn pump(&self, timer: &PeerNode, ps: &mut PeerInner, data: bool) {
        if ps.dead {
            return;
        }
        let now = now_ns();
        self.check_alive(ps, now);
        let mut next = None;
        if ps.hs.ready() {
            // A second round when completions made room for queued requests.
            for _ in 0..2 {
                if !self.pump_once(ps, data) {
                    break;
                }
            }
            if !data && ps.conn.wants_to_send() {
                timer.kick();
            }
            next = ps.conn.next_timeout();
            self.in_flight.store(ps.conn.outstanding(), Relaxed);
        } else {
            if now >= ps.next_hello {
                self.hello(ps);
                ps.next_hello = now + ps.hello_gap;
                ps.hello_gap = (ps.hello_gap * 2).min(HELLO_MAX_NS);
            }
            next = next.or(Some(ps.next_hello));
        }
        if let Some(at) = next {
            timer.start(at.saturating_sub(now_ns()).max(1_000));
        }
    }

    /// One round of `pump`; returns whether another may post more.
    fn pump_once(&self, ps: &mut PeerInner, data: bool) -> bool {
        let PeerInner { conn, hs, streams, rr, .. } = ps;
        let n = streams.len();
        // Every stream may post; the first to do so rotates, so that one
        // queue pair cannot keep the connection's message slots to itself.
        for k in 0..n {
            if let Some(s) = streams.get((*rr + k) % n) {
                let mut st = s.qp.st.lock();
                if QpShared::post_responses(&mut st, conn) | QpShared::post_queued(&mut st, conn) {
                    hs.mark_used();
                }
            }
        }
        *rr = rr.wrapping_add(1);
        let mut now = now_ns();
        let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
        let tables = &self.dev.tables;
        // Bounds the due-deadline rounds, should one not move its deadline.
        let mut rounds = 0;
        loop {
            let t = if data { ps.conn.poll_transmit(now, &mut hdr) } else { ps.conn.poll_control(&mut hdr) };
            if let Some(t) = t {
                let Some(h) = hdr.get(..t.len) else { break };
                let Some(seg) = t.payload else {
                    self.dev.send(self.ip, t.sport, h, 0, |_| Ok(()));
                    continue;
                };
                // The packet's stream names the peer's QP; ours is its peer.
                let Some(qp) = ps.by_dest(seg.stream >> 1) else { continue };
                let st = qp.st.lock();
                let pd = qp.pd;
                if seg.stream & 1 == 1 {
                    let Some(o) = st.owed.iter().find(|o| o.msn == seg.msn) else { continue };
                    self.dev.send(self.ip, t.sport, h, usize::from(seg.len), |buf| {
                        gather_response(o, pd, &tables.lock(), seg.offset, buf)
                    });
                    continue;
                }
                let Some(e) = sq_index(&st.sq, seg.msn).and_then(|i| st.sq.get(i)) else { continue };
                self.dev.send(self.ip, t.sport, h, usize::from(seg.len), |buf| {
                    gather(e, pd, &tables.lock(), seg.offset, buf)
                });
                continue;
            }
            // Deadlines already due (an ACK owed now, a pacing slot) are
            // handled here: the kernel's timers may be as coarse as a jiffy.
            match ps.conn.next_timeout() {
                Some(at) if at <= now && rounds < 64 => {
                    rounds += 1;
                    ps.conn.on_timeout(now);
                    now = now_ns();
                }
                _ => break,
            }
        }
        // Completions, in order per stream.
        while let Some(c) = ps.conn.poll_event() {
            let Some(qp) = ps.by_dest(c.stream >> 1) else { continue };
            let mut st = qp.st.lock();
            st.proven = true;
            if c.stream & 1 == 1 {
                st.owed.retain(|o| o.msn != c.msn);
            } else if let Some(e) = sq_index(&st.sq, c.msn).and_then(|i| st.sq.get_mut(i)).filter(|e| e.done.is_none()) {
                e.done = Some(c.error);
            }
        }
        let mut more = false;
        for s in ps.streams.iter() {
            let mut st = s.qp.st.lock();
            more |= s.qp.reap(&mut st, &mut ps.conn);
        }
        more
    }

    /// Handles one datagram from the peer (softirq).
    fn receive(&self, timer: &PeerNode, pkt: &RxPacket<'_>) {
        let mut ps = self.st.lock();
        if ps.dead {
            return;
        }
        // Only a hello is decoded here; everything else once, by the
        // connection (which also counts a malformed hello it is handed).
        if wire::peek(pkt.payload).is_some_and(|(t, _)| t == PacketType::Hello) {
            if let Ok(Packet::Hello(h)) = wire::decode(pkt.payload) {
                self.on_hello(&mut ps, h.epoch, h.common.conn);
                self.pump(timer, &mut ps, false);
                return;
            }
        }
        let ps = &mut *ps;
        let r = ps.conn.on_datagram(now_ns(), pkt.payload, pkt.sport, pkt.ce);
        if r.is_ok() {
            // It named our epoch: the peer knows it, and it is alive.
            ps.hs.on_traffic();
            ps.alive_at = now_ns();
        }
        if let Ok(Received::Data(..) | Received::Void) = r {
            ps.hs.mark_used();
        }
        if let Ok(Received::Data(h, bytes)) = r {
            let verdict = match ps.streams.iter().find(|s| s.qpn == h.stream >> 1) {
                Some(s) => {
                    let mut st = s.qp.st.lock();
                    s.qp.on_data(&mut st, &mut ps.conn, &h, bytes)
                }
                // No such queue pair (any more) on this host.
                None => Err(NakCode::InvalidRequest),
            };
            if let Err(code) = verdict {
                ps.conn.reject(h.common.path, h.stream, h.msn, code);
            }
        }
        self.pump(timer, ps, false);
    }

    /// Fails the queue pairs waiting on a peer that has been silent for
    /// longer than they allow (verbs' "transport retry counter exceeded").
    fn check_alive(&self, ps: &mut PeerInner, now: u64) {
        let PeerInner { conn, streams, alive_at, .. } = ps;
        let mut waiting = false;
        let mut patience: Option<u64> = None;
        for s in streams.iter() {
            let st = s.qp.st.lock();
            if st.sq.is_empty() && st.owed.is_empty() {
                continue;
            }
            waiting = true;
            if let Some(p) = patience_ns(st.timeout, st.retry_cnt) {
                patience = Some(patience.map_or(p, |q| q.min(p)));
            }
        }
        // Nothing waits on the peer: the clock starts when something does.
        if !waiting {
            *alive_at = now;
            return;
        }
        let Some(p) = patience else { return };
        if now.saturating_sub(*alive_at) < p {
            return;
        }
        pr_info!(
            "peer {}.{}.{}.{} silent for {} ms: its queue pairs fail (retry exceeded)\n",
            self.ip[0], self.ip[1], self.ip[2], self.ip[3],
            now.saturating_sub(*alive_at) / 1_000_000
        );
        for s in streams.iter() {
            let mut st = s.qp.st.lock();
            if st.sq.is_empty() && st.owed.is_empty() {
                continue;
            }
            s.qp.fail_first(&mut st, WcStatus::RetryExcErr);
            s.qp.to_error(&mut st, conn);
        }
        *alive_at = now;
    }

    /// Handles a hello: adopts the peer's epoch; if the peer is a new
    /// incarnation and data flowed with the old one, starts the connection
    /// again under our next epoch. Queue pairs the old incarnation answered
    /// fail (their peer QPs are gone); the others never reached it (their
    /// packets named an epoch the peer no longer has) and start again on the
    /// new connection, so that a queue pair set up against the peer's new
    /// incarnation while its hello was on the way loses nothing.
    fn on_hello(&self, ps: &mut PeerInner, from: u32, to: u32) {
        let v = ps.hs.on_hello(from, to);
        if v.reset {
            pr_info!(
                "peer {}.{}.{}.{} restarted: the queue pairs it answered fail\n",
                self.ip[0], self.ip[1], self.ip[2], self.ip[3]
            );
            let PeerInner { conn, streams, .. } = ps;
            for s in streams.iter() {
                let mut st = s.qp.st.lock();
                if st.proven {
                    s.qp.fail_first(&mut st, WcStatus::RetryExcErr);
                    s.qp.to_error(&mut st, conn);
                } else {
                    for e in st.sq.iter_mut() {
                        e.posted = false;
                        e.done = None;
                    }
                }
            }
            let mtu = u32::from(ps.conn.config().max_payload);
            *ps.conn = EMPTY_CONN;
            ps.conn.configure(conn_config(&ps.hs, self.ip, mtu));
            self.epoch.store(ps.hs.epoch(), Relaxed);
            ps.hello_gap = HELLO_FIRST_NS;
        } else if ps.conn.config().remote_id != ps.hs.remote() {
            ps.conn.set_remote_id(ps.hs.remote());
        }
        if v.reply {
            self.hello(ps);
            ps.next_hello = now_ns() + ps.hello_gap;
        }
    }
}

impl TimerHandler for Peer {
    fn expired(node: &PeerNode) {
        Peer::on_timer(node, false);
    }

    fn kicked(node: &PeerNode) {
        Peer::on_timer(node, true);
    }
}

impl Peer {
    /// The timer fired (softirq: control only) or the worker was kicked
    /// (`data`: everything that may go).
    fn on_timer(node: &PeerNode, data: bool) {
        let mut ps = node.st.lock();
        if ps.dead {
            return;
        }
        ps.conn.on_timeout(now_ns());
        node.pump(node, &mut ps, data);
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

    /// Moves to the error state: every outstanding request completes flushed
    /// and the connection stops sending for this QP. Its streams stay
    /// attached: what the peer still sends is refused, so the peer's requests
    /// complete, in error, instead of hanging.
    fn to_error(&self, st: &mut QpInner, conn: &mut Conn) {
        if st.peer.is_some() {
            conn.cancel_stream(requests(st.dest_qp), NakCode::RemoteOperation);
            conn.cancel_stream(responses(st.dest_qp), NakCode::RemoteOperation);
        }
        self.flush(st);
    }

    /// The error state without a connection (not attached, or the caller
    /// cancels the streams).
    fn flush(&self, st: &mut QpInner) {
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

    /// Completes the oldest outstanding request with `status` (the others
    /// are flushed by `to_error`).
    fn fail_first(&self, st: &mut QpInner, status: WcStatus) {
        if st.sq.is_empty() {
            return;
        }
        if let Ok(e) = st.sq.remove(0) {
            self.scq.push(self.wc(e.wr.wr_id, status, wc_opcode(&e.wr.op), 0, None, st.dest_qp), false);
        }
    }

    /// Hands queued requests to the connection, in order, while it takes
    /// them; returns whether it took any.
    fn post_queued(st: &mut QpInner, conn: &mut Conn) -> bool {
        if !matches!(st.state, QpState::Rts | QpState::Sqd) {
            return false;
        }
        let mut any = false;
        for e in st.sq.iter_mut().filter(|e| !e.posted) {
            if conn.post(e.msg).is_err() {
                break;
            }
            e.posted = true;
            any = true;
        }
        any
    }

    /// Reports the requests that are over, in order; returns whether some
    /// were and more wait to be posted.
    fn reap(&self, st: &mut QpInner, conn: &mut Conn) -> bool {
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
            self.to_error(st, conn);
            return false;
        }
        reaped && st.sq.iter().any(|e| !e.posted)
    }

    /// An arriving data packet for this QP: places it and releases what
    /// completed; `Err` names the NAK to send.
    fn on_data(&self, st: &mut QpInner, conn: &mut Conn, h: &DataHeader, bytes: &[u8]) -> Result<(), NakCode> {
        if st.dead || st.peer.is_none() {
            return Err(NakCode::InvalidRequest);
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
                    self.rcq.push(self.wc(r.wr_id, status, WcOpcode::Recv, 0, None, st.dest_qp), false);
                }
            }
            self.to_error(st, conn);
        }
        placed.map(|_| ())
    }

    /// Places one arriving data packet; `Err` names the NAK to send.
    fn place(&self, st: &mut QpInner, conn: &mut Conn, h: &DataHeader, bytes: &[u8]) -> Result<bool, NakCode> {
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
                e.write(base + u64::from(h.offset), bytes).map_err(|_| NakCode::RemoteAccess)?;
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
    fn place_response(&self, st: &mut QpInner, conn: &mut Conn, h: &DataHeader, bytes: &[u8]) -> Result<bool, NakCode> {
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
        conn.set_progress(h.stream, st.resp_stream.progress());
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
    fn post_responses(st: &mut QpInner, conn: &mut Conn) -> bool {
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
            };
            if conn.post(msg).is_err() {
                break;
            }
            o.posted = true;
            any = true;
        }
        any
    }

    /// Releases the receive completions of messages complete in order.
    fn complete_receives(&self, st: &mut QpInner, conn: &mut Conn) {
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
            conn.set_progress(requests(self.qpn), st.rstream.progress());
            // Posted responses are sent by the pump that follows.
            let _ = Self::post_responses(st, conn);
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
        let Some(peer) = n.st.lock().peer.take() else { return };
        let mut ps = peer.st.lock();
        let dest = n.st.lock().dest_qp;
        ps.streams.retain(|s| s.qpn != n.qpn);
        ps.conn.cancel_stream(requests(dest), NakCode::RemoteOperation);
        ps.conn.cancel_stream(responses(dest), NakCode::RemoteOperation);
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
        let len = wr.len();
        let mut inline = KVec::new();
        if wr.inline && len > 0 {
            if len > u64::from(MAX_INLINE) {
                return Err(EINVAL);
            }
            // Kernel consumers may post from atomic context.
            let gfp = if n.user { GFP_KERNEL } else { GFP_ATOMIC };
            inline.reserve(len as usize, gfp)?;
            for s in wr.sges() {
                let at = inline.len();
                inline.resize(at + s.length as usize, 0, gfp)?;
                let dst = inline.get_mut(at..).ok_or(EINVAL)?;
                match &n.kmem {
                    Some(k) => k.read(s.addr, dst)?,
                    None => copy_from_user(dst, s.addr)?,
                }
            }
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
        let Some(peer) = self.peer() else {
            let st = n.st.lock();
            if st.state == QpState::Err {
                // Verbs: accepted, and completed at once as flushed.
                n.scq.push(n.wc(wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&wr.op), 0, None, st.dest_qp), false);
                return Ok(());
            }
            return Err(EINVAL);
        };
        // The peer's lock only when the queue pair fails here: a request
        // that is accepted is queued under the queue pair's lock alone, and
        // the connection takes it on its worker or its next pump.
        let mut ps = (!local_ok).then(|| peer.st.lock());
        let one_packet = {
            let mut st = n.st.lock();
            if st.state == QpState::Err {
                n.scq.push(n.wc(wr.wr_id, WcStatus::WrFlushErr, wc_opcode(&wr.op), 0, None, st.dest_qp), false);
                return Ok(());
            }
            if st.state != QpState::Rts || !st.peer.as_ref().is_some_and(|p| Arc::ptr_eq(p, &peer)) {
                return Err(EINVAL);
            }
            if st.sq.len() >= n.caps.max_send_wr as usize {
                return Err(ENOMEM);
            }
            if let Some(ps) = ps.as_mut() {
                let wc = n.wc(wr.wr_id, WcStatus::LocProtErr, wc_opcode(&wr.op), 0, None, st.dest_qp);
                n.scq.push(wc, false);
                n.to_error(&mut st, &mut ps.conn);
                return Ok(());
            }
            let msn = st.next_msn;
            let consumes = matches!(opcode, Opcode::Send | Opcode::SendImm | Opcode::WriteImm);
            let rsn = if matches!(opcode, Opcode::Send | Opcode::SendImm) { st.next_rsn as u8 } else { 0 };
            let msg = Message {
                opcode,
                stream: requests(st.dest_qp),
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
            len <= u64::from(st.mtu)
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

/// Copies bytes `[offset, offset + buf.len())` of a send request's data.
fn gather(e: &SqEntry, pd: u32, t: &Tables, offset: u32, buf: &mut [u8]) -> Result {
    if !e.inline.is_empty() || e.wr.inline {
        let src = e.inline.get(offset as usize..offset as usize + buf.len()).ok_or(EINVAL)?;
        buf.copy_from_slice(src);
        return Ok(());
    }
    let len = buf.len();
    sge_pieces(e.wr.sges(), pd, t, false, offset, len, |mr, at, piece| {
        mr.read(at, buf.get_mut(piece)?).ok()
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
    e.read(off, buf)
}

/// Writes arriving bytes at `offset` of the local buffers `sges` (a receive,
/// or the target of a Read or atomic), which need local write access.
fn scatter(sges: &[crate::abstractions::verbs::Sge], pd: u32, t: &Tables, offset: u32, bytes: &[u8]) -> Option<()> {
    sge_pieces(sges, pd, t, true, offset, bytes.len(), |mr, at, piece| {
        mr.write(at, bytes.get(piece)?).ok()
    })
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
    fn streams_name_the_receiving_qp() {
        // Requests to QP 0x11 and the answers to QP 0x12 never collide, and
        // the receiver finds its QP from either.
        assert_eq!(requests(0x11), 0x22);
        assert_eq!(responses(0x12), 0x25);
        assert_eq!(requests(0xff_ffff) >> 1, 0xff_ffff);
        assert_eq!(responses(0xff_ffff) >> 1, 0xff_ffff);
        assert_ne!(requests(7), responses(7));
    }

    #[test]
    fn a_silent_peer_is_given_the_qps_patience() {
        assert_eq!(patience_ns(0, 7), None);
        // perftest's and ibv_rc_pingpong's 14/7 is 0.54 s: raised to 10 s.
        assert_eq!(patience_ns(14, 7), Some(MIN_DEAD_NS));
        // 4.096 us << 21 is 8.6 s, << 22 is 17.2 s.
        assert_eq!(patience_ns(21, 0), Some(MIN_DEAD_NS));
        assert_eq!(patience_ns(22, 0), Some(4096u64 << 22));
        assert_eq!(patience_ns(22, 7), Some((4096u64 << 22) * 8));
        // Out-of-range attributes do not overflow.
        assert!(patience_ns(255, 255).is_some_and(|p| p >= MIN_DEAD_NS));
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
                stream: requests(0),
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
