// SPDX-License-Identifier: GPL-2.0

//! UD multicast: the groups a device's UD QPs are attached to
//! (`attach_mcast`, `detach_mcast`), and a datagram sent to a group
//! delivered to each QP attached to it on the device of the link it
//! arrived on. A group is its multicast IP address (IPv4, mapped, or IPv6);
//! sending to it is a UD send through an address handle of that address
//! (ud.rs), routed out of the device's net device. Joining the group on the
//! net device (IGMP) is the RDMA-CM's part, as for every RoCE device. Safe
//! Rust only.

use super::state::{QpShared, Shared};
use crate::abstractions::{net::RxPacket, types::IpAddr};
use crate::transport::wire::DatagramHeader;
use kernel::{prelude::*, sync::Arc};

/// The QP number a datagram to a multicast group names (verbs' 0xFFFFFF).
pub(super) const MCAST_QPN: u32 = 0xff_ffff;
/// Most groups a device's QPs are attached to (`max_mcast_grp`).
pub(super) const MAX_GROUPS: usize = 256;
/// Most QPs attached to one group (`max_mcast_qp_attach`).
pub(super) const MAX_PER_GROUP: usize = 64;
/// Most attachments of a device in all (`max_total_mcast_qp_attach`).
pub(super) const MAX_ATTACHED: usize = 1024;

/// One multicast group of a device: its address and the QPs attached.
pub(super) struct McGroup {
    ip: IpAddr,
    qps: KVec<Arc<QpShared>>,
}

/// A device's multicast groups (in its tables, under their lock).
pub(super) struct McGroups {
    groups: KVec<McGroup>,
    attached: usize,
}

impl McGroups {
    pub(super) const fn new() -> Self {
        Self {
            groups: KVec::new(),
            attached: 0,
        }
    }

    fn group(&self, ip: &IpAddr) -> Option<&McGroup> {
        self.groups.iter().find(|g| g.ip == *ip)
    }

    /// Whether any QP is attached to the group of `ip`.
    pub(super) fn has(&self, ip: &IpAddr) -> bool {
        self.group(ip).is_some()
    }

    /// The `k`th QP attached to the group of `ip`, if there is one.
    fn member(&self, ip: &IpAddr, k: usize) -> Option<Arc<QpShared>> {
        self.group(ip)?.qps.get(k).cloned()
    }

    /// Attaches `qp` to the group of `ip`; attaching it again is no change.
    fn attach(&mut self, qp: &Arc<QpShared>, ip: IpAddr) -> Result {
        let at = self.groups.iter().position(|g| g.ip == ip);
        if let Some(g) = at.and_then(|i| self.groups.get(i)) {
            if g.qps.iter().any(|q| q.qpn == qp.qpn) {
                return Ok(());
            }
            if g.qps.len() >= MAX_PER_GROUP {
                return Err(ENOMEM);
            }
        }
        if self.attached >= MAX_ATTACHED || (at.is_none() && self.groups.len() >= MAX_GROUPS) {
            return Err(ENOMEM);
        }
        let i = match at {
            Some(i) => i,
            None => {
                self.groups.push(
                    McGroup {
                        ip,
                        qps: KVec::new(),
                    },
                    GFP_ATOMIC,
                )?;
                self.groups.len() - 1
            }
        };
        let g = self.groups.get_mut(i).ok_or(EINVAL)?;
        if let Err(e) = g.qps.push(qp.clone(), GFP_ATOMIC) {
            if g.qps.is_empty() {
                self.groups.remove(i).ok();
            }
            return Err(e.into());
        }
        self.attached += 1;
        Ok(())
    }

    /// Detaches QP `qpn` from the group of `ip` (`None`: from every group).
    /// Returns the references it held, for the caller to drop once the
    /// tables' lock is released; none if it was not attached.
    fn detach(&mut self, qpn: u32, ip: Option<IpAddr>) -> KVec<Arc<QpShared>> {
        let mut gone = KVec::new();
        let mut i = 0;
        while let Some(g) = self.groups.get_mut(i) {
            if ip.is_some_and(|ip| ip != g.ip) {
                i += 1;
                continue;
            }
            if let Some(k) = g.qps.iter().position(|q| q.qpn == qpn) {
                if let Ok(q) = g.qps.remove(k) {
                    self.attached = self.attached.saturating_sub(1);
                    // Room for it was there, or it is dropped here, under
                    // the lock: harmless, the verbs object holds another.
                    let _ = gone.push(q, GFP_ATOMIC);
                }
            }
            if g.qps.is_empty() {
                self.groups.remove(i).ok();
            } else {
                i += 1;
            }
        }
        gone
    }
}

impl QpShared {
    /// `attach_mcast`: the QP receives the datagrams sent to the group of
    /// `ip`. EINVAL for an address that is not multicast or a QP that is
    /// not UD (QP1 included); ENOMEM past the limits.
    pub(super) fn attach_mcast(self: &Arc<Self>, ip: IpAddr) -> Result {
        if !self.qp_type.datagram() || self.qpn <= 1 || !ip.is_multicast() {
            return Err(EINVAL);
        }
        self.dev.tables.lock().mcast.attach(self, ip)
    }

    /// `detach_mcast`: EINVAL if the QP is not attached to the group.
    pub(super) fn detach_mcast(&self, ip: IpAddr) -> Result {
        let gone = self.dev.tables.lock().mcast.detach(self.qpn, Some(ip));
        if gone.is_empty() {
            return Err(EINVAL);
        }
        drop(gone);
        Ok(())
    }

    /// Detaches the QP from every group (it is being destroyed).
    pub(super) fn leave_groups(&self) {
        let gone = self.dev.tables.lock().mcast.detach(self.qpn, None);
        drop(gone);
    }
}

impl Shared {
    /// Whether a datagram to multicast address `ip` that arrived on the net
    /// device `iif` is this device's: its link, and a group with QPs.
    pub(super) fn owns_multicast(&self, ip: &IpAddr, iif: i32) -> bool {
        iif == self.ifindex && ip.is_multicast() && self.tables.lock().mcast.has(ip)
    }

    /// Delivers a datagram sent to a group to each QP attached to it, as a
    /// datagram to that QP (each checks its state, Q_Key and receive).
    pub(super) fn deliver_multicast(&self, pkt: &RxPacket<'_>, h: &DatagramHeader, payload: &[u8]) {
        let mut k = 0;
        // One QP at a time, the lock not held while it is delivered to: a
        // QP detached meanwhile may be skipped or visited once more, as
        // for a datagram that crossed the detach.
        loop {
            // (A statement of its own: the guard of a `while let`
            // scrutinee would live through the body.)
            let qp = self.tables.lock().mcast.member(&pkt.daddr, k);
            let Some(qp) = qp else { break };
            qp.deliver(pkt, h, payload);
            k += 1;
        }
    }
}

#[kunit_tests(metaroce_mcast)]
mod tests {
    use super::*;

    #[test]
    fn multicast_addresses_are_told_apart() {
        assert!(IpAddr::from_v4([239, 1, 2, 3]).is_multicast());
        assert!(IpAddr::from_v4([224, 0, 0, 1]).is_multicast());
        assert!(!IpAddr::from_v4([10, 0, 0, 1]).is_multicast());
        assert!(!IpAddr::from_v4([240, 0, 0, 1]).is_multicast());
        let mut ff02 = [0u8; 16];
        ff02[0] = 0xff;
        ff02[1] = 0x02;
        ff02[15] = 1;
        assert!(IpAddr(ff02).is_multicast());
        assert!(!IpAddr([0u8; 16]).is_multicast());
    }
}
