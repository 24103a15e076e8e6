// SPDX-License-Identifier: GPL-2.0

//! A device's shared state (`Shared`, declared in state.rs) at work: its
//! place on the namespace's UDP port and the dispatch of arriving datagrams
//! to its peer connections, the lookup and setup of those connections, its
//! protection domains and memory regions (`Pd`, `Mr`), and its close. Safe
//! Rust only.

use super::{
    counters::{bump, Counters},
    frmr::FastMem,
    incarnation::{conn_config, EMPTY_CONN},
    mcast::{McGroups, MCAST_QPN},
    mr::{Mem, MrTable, PdId},
    peer::{capacity, MAX_PEERS},
    quota::{Kind, ObjectCounts, Quota},
    ready::ReadyRing,
    state::{DevName, Peer, PeerInner, PeerNode, Shared, Tables, ROUTES},
};
use crate::abstractions::{
    memory::Translation,
    net::{random_u32, NetPort, RouteCache, RxPacket, UdpHandler},
    ops::ResAttrs,
    timer::{now_ns, Timer},
    types::{Access, IpAddr, MrKeys, WcStatus},
};
use crate::new_spinlock_bh;
use crate::transport::{
    session::{Session, SessionConfig},
    wire::{self, PacketType},
};
use kernel::{
    alloc::KVec,
    prelude::*,
    rbtree::{RBTree, RBTreeNodeReservation},
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

/// The most QPs a device holds (`max_qp` in `query_device`).
pub(crate) const MAX_QPS: usize = 1 << 16;

/// QP numbers have 24 bits.
pub(super) const QPN_MASK: u32 = 0xff_ffff;

/// The first QP number handed out (0 and 1 are the special QPs).
pub(super) const FIRST_QPN: u32 = 0x11;

/// The QP number handed out last, module-wide: where the next search starts
/// (devices in one namespace share a UDP port; distinct numbers keep the
/// kernel log and packet captures readable). Uniqueness is per device.
static NEXT_QPN: KAtomic<u32> = KAtomic::new(0);

/// The next QP number after `last` that is not special (below
/// [`FIRST_QPN`]), has at most 24 bits and is not in use (`used`); `None`
/// if every one is.
pub(super) fn next_free_qpn(last: u32, used: impl Fn(u32) -> bool) -> Option<u32> {
    let mut q = last & QPN_MASK;
    for _ in 0..=QPN_MASK {
        q = (q + 1) & QPN_MASK;
        // 0xFFFFFF names a multicast group (mcast.rs), never a QP.
        if q >= FIRST_QPN && q != MCAST_QPN && !used(q) {
            return Some(q);
        }
    }
    None
}

impl Shared {
    /// A device's state; `payload`: the most payload bytes a packet may
    /// carry over its net device, whose index is `ifindex`.
    pub(crate) fn new(
        name: &CStr,
        payload: u32,
        link_mbps: Option<u32>,
        ifindex: i32,
    ) -> Result<Arc<Self>> {
        let mut bytes = KVec::new();
        bytes.extend_from_slice(name.to_bytes(), GFP_KERNEL)?;
        Arc::new(
            Self {
                name: bytes,
                ifindex,
                payload: payload.clamp(256, 4096),
                capacity: KAtomic::new(capacity(link_mbps)),
                senders: KAtomic::new(0),
                counters: Counters::new()?,
                objects: Arc::new(ObjectCounts::new(), GFP_KERNEL)?,
                port: KBox::pin_init(new_spinlock_bh!(None, "metaroce_dev_port"), GFP_KERNEL)?,
                tables: KBox::pin_init(
                    new_spinlock_bh!(
                        Tables {
                            mrs: MrTable::new(random_u32()),
                            peers: KVec::new(),
                            next_pd: 1,
                            qpns: RBTree::new(),
                            qp_count: 0,
                            ud: RBTree::new(),
                            mcast: McGroups::new(),
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

    /// Its name, as the kernel log and debugfs show it.
    pub(crate) fn name(&self) -> DevName<'_> {
        DevName(&self.name)
    }

    pub(crate) fn set_port(&self, port: Arc<NetPort<Shared>>) {
        *self.port.lock() = Some(port);
    }

    /// Leaves the namespace's port and drops the peer connections (the
    /// device is going away; its queue pairs are gone).
    pub(crate) fn close(self: &Arc<Self>) {
        // No connection sends from here on: `Shared::send` clones the port
        // from under this lock and lets the lock go, but its callers hold
        // their peer's lock, which `each_peer` below takes to kill the peer
        // (a send in progress ends first, and a dead peer sends nothing). UD
        // datagrams may still go out, but they cache no route.
        let port = self.port.lock().take();
        // The connections die while still in the table, and the device
        // leaves the port last: a namespace going away meanwhile finds the
        // device in its port's list, and `port_closed` finds every
        // connection not yet dead, so no route outlives the namespace.
        self.each_peer(|p| {
            {
                let mut ps = p.st.lock();
                self.kill(&mut ps);
                ps.streams.clear();
                ps.by_qpn = RBTree::new();
                ps.by_dest = RBTree::new();
                p.ready.lock().clear();
                p.log_stats(&ps);
            }
            p.stop();
        });
        let peers = core::mem::take(&mut self.tables.lock().peers);
        drop(peers);
        if let Some(p) = port {
            p.detach(self);
        }
    }

    /// Calls `f` on each of the device's peer connections in turn, without
    /// the table lock (a peer's lock is not taken under a leaf lock), in the
    /// order of their addresses (a connection's key): one set up or dropped
    /// meanwhile does not make it skip another, as an index would, and it
    /// allocates nothing.
    fn each_peer(&self, mut f: impl FnMut(&Arc<PeerNode>)) {
        let mut after = None;
        loop {
            let next = self
                .tables
                .lock()
                .peers
                .iter()
                .filter(|p| after.is_none_or(|a| p.ip > a))
                .min_by_key(|p| p.ip)
                .cloned();
            let Some(p) = next else { break };
            f(&p);
            after = Some(p.ip);
        }
    }

    pub(crate) fn alloc_pd(&self) -> PdId {
        let mut t = self.tables.lock();
        let id = t.next_pd;
        t.next_pd += 1;
        id
    }

    pub(crate) fn reg_mr(
        &self,
        pd: PdId,
        mem: Mem,
        iova: u64,
        access: Access,
    ) -> Result<(u32, MrKeys)> {
        // The table's node is allocated before the lock (it may sleep) and
        // charged to the registering process.
        let node = RBTreeNodeReservation::new(GFP_KERNEL_ACCOUNT)?;
        let mut t = self.tables.lock();
        if t.mrs.full() {
            // `mem` is released (which may sleep) after the lock.
            return Err(ENOMEM);
        }
        Ok(t.mrs.reg(node, pd, mem, iova, access))
    }

    /// A free fast registration of domain `pd`; returns its block.
    pub(crate) fn reg_fast(&self, pd: PdId, mem: FastMem) -> Result<u32> {
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let mut t = self.tables.lock();
        if t.mrs.full() {
            return Err(ENOMEM);
        }
        Ok(t.mrs.reg_fast(node, pd, mem))
    }

    /// `map_mr_sg` on fast registration `block`.
    pub(crate) fn stage_fast(
        &self,
        block: u32,
        pages: &[u64],
        page_size: u64,
        first: u64,
        len: u64,
    ) -> Result {
        self.tables
            .lock()
            .mrs
            .stage_fast(block, pages, page_size, first, len)
    }

    /// A QP number that no live QP of this device has, reserved until
    /// [`Self::release_qpn`]. The search starts after the number handed out
    /// last by any device.
    pub(crate) fn alloc_qpn(&self) -> Result<u32> {
        let node = RBTreeNodeReservation::new(GFP_KERNEL_ACCOUNT)?;
        let mut t = self.tables.lock();
        if t.qp_count >= MAX_QPS {
            return Err(ENOSPC);
        }
        let last = NEXT_QPN.load(Relaxed);
        let qpn = next_free_qpn(last, |q| t.qpns.get(&q).is_some()).ok_or(ENOSPC)?;
        NEXT_QPN.store(qpn, Relaxed);
        t.qpns.insert(node.into_node(qpn, ()));
        t.qp_count += 1;
        Ok(qpn)
    }

    /// The number of the device's GSI QP (QP1, the MAD layer's): EBUSY if
    /// it has one.
    pub(crate) fn alloc_gsi_qpn(&self) -> Result<u32> {
        let node = RBTreeNodeReservation::new(GFP_KERNEL)?;
        let mut t = self.tables.lock();
        if t.qpns.get(&1).is_some() {
            return Err(EBUSY);
        }
        t.qpns.insert(node.into_node(1, ()));
        t.qp_count += 1;
        Ok(1)
    }

    /// QP `qpn` is gone: its number may be handed out again.
    pub(crate) fn release_qpn(&self, qpn: u32) {
        let mut t = self.tables.lock();
        if t.qpns.remove(&qpn).is_some() {
            t.qp_count -= 1;
        }
    }

    /// Changes region `key` in place (see `MrTable::rereg`); pins the new
    /// translation first, with the rights the region will have.
    pub(crate) fn rereg_mr(
        &self,
        key: u32,
        pd: Option<PdId>,
        access: Option<Access>,
        trans: Option<Translation<'_>>,
    ) -> Result {
        let mut mem = match trans {
            Some(t) => {
                // No other rereg of the region runs meanwhile, so its rights
                // do not change between this read and the swap (and if they
                // did, `MrTable::rereg` checks the pins it is given).
                let now = self.tables.lock().mrs.mr(key).map(|e| e.access);
                let rights = access.or(now).ok_or(EINVAL)?;
                let iova = t.iova;
                Some((Mem::User(t.pin(rights)?), iova))
            }
            None => None,
        };
        let r = self.tables.lock().mrs.rereg(key, pd, access, &mut mem);
        // The memory the region no longer uses (or the new memory, if it was
        // refused) is released, which may sleep, after the lock.
        drop(mem);
        r
    }

    pub(crate) fn dereg_mr(&self, key: u32) {
        // Taken out under the lock, released (which may sleep) after it.
        let entry = {
            let mut t = self.tables.lock();
            t.mrs.dereg(key)
        };
        drop(entry);
    }

    /// The device's peer connections now, to be looked at one by one
    /// without the table lock (a peer's lock is not taken under a leaf
    /// lock). Process context.
    pub(super) fn peers(&self) -> Result<KVec<Arc<PeerNode>>> {
        let mut peers = KVec::new();
        let n = self.tables.lock().peers.len();
        peers.reserve(n, GFP_KERNEL)?;
        let t = self.tables.lock();
        // Room was made for `n`; a connection added since is left out.
        for p in t.peers.iter().take(n) {
            peers.push(p.clone(), GFP_ATOMIC)?;
        }
        Ok(peers)
    }

    /// Marks peer connection `ps` dead (under its lock); a peer that
    /// counted as a sender no longer does.
    fn kill(&self, ps: &mut PeerInner) {
        ps.dead = true;
        // A dead connection sends nothing: its routes go now, not with its
        // last reference (they must not outlive their namespace).
        ps.forget_routes();
        if ps.session.close() {
            self.senders.fetch_sub(1, Relaxed);
        }
    }

    /// A peer became a sender to this device: every other peer connection
    /// is driven at once (its timer), so that those sending to us announce
    /// their smaller share. Any context; takes the table lock (a leaf),
    /// never a peer's.
    pub(super) fn drive_others(&self, except: &Peer) {
        let t = self.tables.lock();
        for p in t
            .peers
            .iter()
            .filter(|p| !core::ptr::eq::<Peer>(&****p, except))
        {
            p.start(1_000);
        }
    }

    /// The net device's link speed is now `link_mbps`: the capacity shared
    /// among senders follows it (unless the module parameter sets it).
    pub(crate) fn set_capacity(&self, link_mbps: Option<u32>) {
        self.capacity.store(capacity(link_mbps), Relaxed);
    }

    /// The port went down (counted in `link_downed`).
    pub(crate) fn link_down(&self) {
        bump(&self.counters.link_downed);
    }

    /// Fills `out` with the port counters (counters.rs). Process context.
    pub(crate) fn port_counters(&self, out: &mut [u64]) -> Result {
        let peers = self.peers()?;
        self.counters.fill(out, peers.len(), |total| {
            for p in peers.iter() {
                let ps = p.st.lock();
                // A dead connection's counts were retired when it died.
                if !ps.dead {
                    total.add(ps.conn.stats());
                }
            }
        });
        Ok(())
    }

    fn find_peer(&self, ip: IpAddr) -> Option<Arc<PeerNode>> {
        self.tables
            .lock()
            .peers
            .iter()
            .find(|p| p.ip == ip)
            .cloned()
    }

    /// The connection to host `ip`, set up (and its first hello sent) if
    /// there is none yet. Process context.
    pub(super) fn peer(self: &Arc<Self>, ip: IpAddr) -> Result<Arc<PeerNode>> {
        if let Some(p) = self.find_peer(ip) {
            return Ok(p);
        }
        let session = Session::new(random_u32(), random_u32(), now_ns(), SessionConfig::DEFAULT);
        // About 230 KiB: virtually contiguous memory will do. Charged to the
        // process whose QP asked for the peer (at most MAX_PEERS of them).
        let mut conn = KVBox::new(EMPTY_CONN, GFP_KERNEL_ACCOUNT)?;
        conn.configure(conn_config(&session, &ip, self.payload));
        let mut routes = KVec::with_capacity(ROUTES, GFP_KERNEL_ACCOUNT)?;
        for _ in 0..ROUTES {
            routes.push(RouteCache::new(), GFP_KERNEL_ACCOUNT)?;
        }
        let node = Timer::new_arc(
            Peer {
                ip,
                dev: self.clone(),
                epoch: KAtomic::new(session.epoch()),
                in_flight: KAtomic::new(0),
                nstreams: KAtomic::new(0),
                ready: KBox::pin_init(
                    new_spinlock_bh!(ReadyRing::new(), "metaroce_ready"),
                    GFP_KERNEL,
                )?,
                rescan: KAtomic::new(false),
                unanswered: KAtomic::new(false),
                st: KBox::pin_init(
                    new_spinlock_bh!(
                        PeerInner {
                            conn,
                            session,
                            streams: KVec::new(),
                            by_qpn: RBTree::new(),
                            by_dest: RBTree::new(),
                            answered_at: 0,
                            answered_after: 0,
                            dead: false,
                            routes,
                        },
                        "metaroce_peer"
                    ),
                    GFP_KERNEL,
                )?,
            },
            GFP_KERNEL,
        )?;
        // A few rounds: a call that finds the table full makes room and
        // looks again (another call may have taken the room, or evicted the
        // same connection).
        for _ in 0..4 {
            let victim = {
                let mut t = self.tables.lock();
                if let Some(p) = t.peers.iter().find(|p| p.ip == ip) {
                    return Ok(p.clone());
                }
                if t.peers.len() < MAX_PEERS {
                    t.peers.push(node.clone(), GFP_ATOMIC)?;
                    None
                } else {
                    // Full: the connection no QP uses and nothing is in
                    // flight on makes room (it is set up again when
                    // wanted); failing that, one whose peer never answered
                    // its hellos (so that QPs aimed at hosts that do not
                    // exist cannot keep every slot: theirs fail).
                    let idle = t
                        .peers
                        .iter()
                        .position(|p| {
                            p.nstreams.load(Relaxed) == 0 && p.in_flight.load(Relaxed) == 0
                        })
                        .or_else(|| t.peers.iter().position(|p| p.unanswered.load(Relaxed)));
                    let Some(i) = idle else { return Err(ENOSPC) };
                    t.peers.get(i).cloned()
                }
            };
            let Some(old) = victim else {
                node.pump(&node, &mut node.st.lock(), false);
                return Ok(node);
            };
            // It dies, and its counts are retired, before it leaves the
            // table: a reader of the counters (`port_counters`) finds them
            // in one place or the other. A QP that finds it dead in the
            // moment between looks up again (`Qp::attach`).
            self.evict(&old);
            self.tables.lock().peers.retain(|p| !Arc::ptr_eq(p, &old));
            old.stop();
        }
        Err(ENOSPC)
    }

    /// Ends the connection `old` to make room: its QPs fail (retry
    /// exceeded), its counts are retired. Only the first call does anything.
    fn evict(&self, old: &Arc<PeerNode>) {
        let mut ps = old.st.lock();
        if ps.dead {
            return;
        }
        self.kill(&mut ps);
        self.counters.retire(ps.conn.stats());
        let PeerInner { conn, streams, .. } = &mut *ps;
        for s in streams.iter() {
            let mut st = s.qp.st.lock();
            if s.qp.fail_first(&mut st, WcStatus::RetryExcErr) {
                bump(&self.counters.retry_exceeded);
            }
            s.qp.to_error(&mut st, conn);
        }
    }
}

impl Shared {
    /// Every connection lets go of its cached routes; a later datagram
    /// looks its route up again.
    pub(crate) fn forget_routes(&self) {
        self.each_peer(|p| p.st.lock().forget_routes());
    }
}

impl UdpHandler for Shared {
    fn port_closed(&self) {
        // A connection that died let go of its routes (`kill`); one set up
        // from here on finds the port closed and caches nothing.
        self.forget_routes();
    }

    fn owns(&self, pkt: &RxPacket<'_>) -> bool {
        let Some((ptype, conn)) = wire::peek(pkt.payload) else {
            return false;
        };
        if ptype == PacketType::Datagram {
            // To a multicast group: for the device of the link it came by.
            if conn == MCAST_QPN {
                return self.owns_multicast(&pkt.daddr, pkt.iif);
            }
            // Each device has a QP1, and QP numbers are unique per device
            // only: the datagram is for the device on the net device that
            // has its destination address.
            return pkt.dst_ifindex == self.ifindex && self.owns_datagram(conn);
        }
        // A link-local peer is a host of this device's link only: the same
        // address on another link (a VLAN shares its parent's) is another
        // host, for the device on that link.
        if pkt.saddr.is_link_local() && pkt.iif != self.ifindex {
            return false;
        }
        let hello = ptype == PacketType::Hello;
        self.tables
            .lock()
            .peers
            .iter()
            .any(|p| p.ip == pkt.saddr && (hello || p.epoch.load(Relaxed) == conn))
    }

    fn receive(&self, pkt: &RxPacket<'_>) {
        if wire::peek(pkt.payload).is_some_and(|(t, _)| t == PacketType::Datagram) {
            return self.receive_datagram(pkt);
        }
        if let Some(p) = self.find_peer(pkt.saddr) {
            p.receive(&p, pkt);
        }
    }
}

/// A protection domain.
pub(crate) struct Pd {
    pub(crate) id: PdId,
    /// Its place among the device's PDs.
    _quota: Quota,
}

impl Pd {
    /// A new PD of the device `dev` (ENOMEM if it holds its most).
    pub(crate) fn new(dev: &Shared) -> Result<Self> {
        let quota = Quota::take(&dev.objects, Kind::Pd)?;
        Ok(Self {
            id: dev.alloc_pd(),
            _quota: quota,
        })
    }
}

/// A memory region.
pub(crate) struct Mr {
    pub(crate) key: u32,
    pub(crate) dev: Arc<Shared>,
}

impl Mr {
    /// Its driver attributes in `rdma resource show mr -dd`
    /// (Documentation/observability.md).
    pub(crate) fn attrs(&self, out: &mut ResAttrs<'_>) -> Result {
        let found = self
            .dev
            .tables
            .lock()
            .mrs
            .mr(self.key)
            .map(|e| (e.pd, e.access));
        let Some((pd, access)) = found else {
            return Ok(());
        };
        out.u64(c"pd", pd)?;
        out.u32_hex(c"access", access.0)
    }
}
