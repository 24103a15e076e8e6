// SPDX-License-Identifier: GPL-2.0

//! A device's shared state (`Shared`, declared in state.rs) at work: its
//! place on the namespace's UDP port and the dispatch of arriving datagrams
//! to its peer connections, the lookup and setup of those connections, its
//! protection domains and memory regions (`Pd`, `Mr`), and its close. Safe
//! Rust only.

use super::{
    mr::{Mem, MrTable},
    peer::{conn_config, EMPTY_CONN, HELLO_FIRST_NS, MAX_PEERS},
    state::{Peer, PeerInner, PeerNode, Shared, Tables},
};
use crate::abstractions::{
    net::{now_ns, random_u32, NetPort, RxPacket, Timer, UdpHandler},
    types::{Access, MrKeys},
};
use crate::new_spinlock_bh;
use crate::transport::{
    handshake::Handshake,
    wire::{self, PacketType},
};
use kernel::{
    alloc::KVec,
    prelude::*,
    sync::{
        atomic::{Atomic as KAtomic, Relaxed},
        Arc,
    },
};

impl Shared {
    pub(crate) fn new() -> Result<Arc<Self>> {
        Arc::new(
            Self {
                port: KBox::pin_init(new_spinlock_bh!(None, "metaroce_dev_port"), GFP_KERNEL)?,
                tables: KBox::pin_init(
                    new_spinlock_bh!(
                        Tables {
                            mrs: MrTable::new(),
                            peers: KVec::new(),
                            next_pd: 1,
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

    pub(crate) fn reg_mr(
        &self,
        pd: u32,
        mem: Mem,
        iova: u64,
        access: Access,
    ) -> Result<(u32, MrKeys)> {
        let mut t = self.tables.lock();
        // Without a slot, `mem` is released (which may sleep) after the lock.
        let slot = t.mrs.free_slot()?;
        Ok(t.mrs.reg(slot, pd, mem, iova, access))
    }

    pub(crate) fn dereg_mr(&self, key: u32) {
        // Taken out under the lock, released (which may sleep) after it.
        let entry = {
            let mut t = self.tables.lock();
            t.mrs.dereg(key)
        };
        drop(entry);
    }

    fn find_peer(&self, ip: [u8; 4]) -> Option<Arc<PeerNode>> {
        self.tables
            .lock()
            .peers
            .iter()
            .find(|p| p.ip == ip)
            .cloned()
    }

    /// The connection to host `ip`, set up (and its first hello sent) if
    /// there is none yet. Process context.
    pub(super) fn peer(self: &Arc<Self>, ip: [u8; 4], mtu: u32) -> Result<Arc<PeerNode>> {
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

/// A protection domain.
pub(crate) struct Pd {
    pub(crate) id: u32,
}

/// A memory region.
pub(crate) struct Mr {
    pub(crate) key: u32,
    pub(crate) dev: Arc<Shared>,
}
