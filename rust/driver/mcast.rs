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
pub(super) struct McGroup<Q> {
    ip: IpAddr,
    qps: KVec<Arc<Q>>,
}

/// A device's multicast groups (in its tables, under their lock), whose
/// members are `Q`s (QPs; the tests use plain values).
pub(super) struct McGroups<Q = QpShared> {
    groups: KVec<McGroup<Q>>,
    attached: usize,
}

impl<Q> McGroups<Q> {
    pub(super) const fn new() -> Self {
        Self {
            groups: KVec::new(),
            attached: 0,
        }
    }

    fn group(&self, ip: &IpAddr) -> Option<&McGroup<Q>> {
        self.groups.iter().find(|g| g.ip == *ip)
    }

    /// Whether any QP is attached to the group of `ip`.
    pub(super) fn has(&self, ip: &IpAddr) -> bool {
        self.group(ip).is_some()
    }

    /// The QPs attached to the group of `ip` (at most [`MAX_PER_GROUP`]),
    /// copied into `out`; how many.
    fn members(&self, ip: &IpAddr, out: &mut [Option<Arc<Q>>; MAX_PER_GROUP]) -> usize {
        let Some(g) = self.group(ip) else { return 0 };
        let mut n = 0;
        for (slot, qp) in out.iter_mut().zip(g.qps.iter()) {
            *slot = Some(qp.clone());
            n += 1;
        }
        n
    }

    /// Attaches `qp` to the group of `ip`; attaching it again is no change.
    fn attach(&mut self, qp: &Arc<Q>, ip: IpAddr) -> Result {
        let at = self.groups.iter().position(|g| g.ip == ip);
        if let Some(g) = at.and_then(|i| self.groups.get(i)) {
            if g.qps.iter().any(|q| Arc::ptr_eq(q, qp)) {
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

    /// Detaches `qp` from the group of `ip` (`None`: from every group);
    /// how many attachments it had there. The references dropped here
    /// are never the last: the caller holds `qp`.
    fn detach(&mut self, qp: &Arc<Q>, ip: Option<IpAddr>) -> usize {
        let mut n = 0;
        let mut i = 0;
        while let Some(g) = self.groups.get_mut(i) {
            if ip.is_none_or(|ip| ip == g.ip) {
                let before = g.qps.len();
                g.qps.retain(|q| !Arc::ptr_eq(q, qp));
                n += before - g.qps.len();
            }
            if g.qps.is_empty() {
                self.groups.remove(i).ok();
            } else {
                i += 1;
            }
        }
        self.attached = self.attached.saturating_sub(n);
        n
    }
}

impl QpShared {
    /// `attach_mcast`: the QP receives the datagrams sent to the group of
    /// `ip`. EINVAL for an address that is not multicast or a QP that is
    /// not UD (QP1 included); ENOMEM past the limits. The caller (qp.rs)
    /// serialises it with `destroy_qp`, which leaves every group.
    pub(super) fn attach_mcast(self: &Arc<Self>, ip: IpAddr) -> Result {
        if !self.qp_type.datagram() || self.qpn <= 1 || !ip.is_multicast() {
            return Err(EINVAL);
        }
        self.dev.tables.lock().mcast.attach(self, ip)
    }

    /// `detach_mcast`: EINVAL if the QP is not attached to the group.
    pub(super) fn detach_mcast(self: &Arc<Self>, ip: IpAddr) -> Result {
        match self.dev.tables.lock().mcast.detach(self, Some(ip)) {
            0 => Err(EINVAL),
            _ => Ok(()),
        }
    }

    /// Detaches the QP from every group (it is being destroyed).
    pub(super) fn leave_groups(self: &Arc<Self>) {
        self.dev.tables.lock().mcast.detach(self, None);
    }
}

impl Shared {
    /// Whether a datagram to multicast address `ip` that arrived on the net
    /// device `iif` is this device's: its link, and a group with QPs.
    pub(super) fn owns_multicast(&self, ip: &IpAddr, iif: i32) -> bool {
        iif == self.ifindex && ip.is_multicast() && self.tables.lock().mcast.has(ip)
    }

    /// Delivers a datagram sent to a group to each QP attached to it, as a
    /// datagram to that QP (each checks its state, Q_Key and receive): the
    /// members as they were when it arrived, delivered to with the tables'
    /// lock released (`deliver` takes it, and the QP's).
    pub(super) fn deliver_multicast(&self, pkt: &RxPacket<'_>, h: &DatagramHeader, payload: &[u8]) {
        let mut members: [Option<Arc<QpShared>>; MAX_PER_GROUP] = [const { None }; MAX_PER_GROUP];
        let n = self.tables.lock().mcast.members(&pkt.daddr, &mut members);
        for qp in members.iter().take(n).flatten() {
            qp.deliver(pkt, h, payload);
        }
    }
}

#[kunit_tests(metaroce_mcast)]
mod tests {
    use super::*;

    fn group(n: u8) -> IpAddr {
        IpAddr::from_v4([239, 0, 1, n])
    }

    /// `n` distinct members.
    fn members(n: usize) -> KVec<Arc<u32>> {
        let mut v = KVec::new();
        for i in 0..n as u32 {
            v.push(Arc::new(i, GFP_KERNEL).expect("memory"), GFP_KERNEL)
                .expect("memory");
        }
        v
    }

    #[test]
    fn attachments_are_counted_and_bounded() {
        let mut m = McGroups::<u32>::new();
        let qps = members(MAX_PER_GROUP + 1);
        for qp in qps.iter().take(MAX_PER_GROUP) {
            assert_eq!(m.attach(qp, group(1)), Ok(()));
        }
        // Again: no change; one more: the group is full.
        assert_eq!(m.attach(&qps[0], group(1)), Ok(()));
        assert_eq!(m.attached, MAX_PER_GROUP);
        assert_eq!(m.attach(&qps[MAX_PER_GROUP], group(1)), Err(ENOMEM));
        let mut out = [const { None }; MAX_PER_GROUP];
        assert_eq!(m.members(&group(1), &mut out), MAX_PER_GROUP);
        assert_eq!(m.members(&group(2), &mut out), 0);
        // Detached once from its group, then from nothing.
        assert_eq!(m.detach(&qps[3], Some(group(1))), 1);
        assert_eq!(m.detach(&qps[3], Some(group(1))), 0);
        assert_eq!(m.detach(&qps[4], Some(group(2))), 0);
        assert_eq!(m.attached, MAX_PER_GROUP - 1);
        // One QP in two groups leaves both; an empty group goes.
        assert_eq!(m.attach(&qps[0], group(2)), Ok(()));
        assert!(m.has(&group(2)));
        assert_eq!(m.detach(&qps[0], None), 2);
        assert!(!m.has(&group(2)));
        for qp in qps.iter().take(MAX_PER_GROUP) {
            m.detach(qp, None);
        }
        assert_eq!((m.attached, m.groups.len()), (0, 0));
    }

    #[test]
    fn groups_and_the_total_are_bounded() {
        let mut m = McGroups::<u32>::new();
        let qp = Arc::new(7u32, GFP_KERNEL).expect("memory");
        for g in 0..MAX_GROUPS {
            let ip = IpAddr::from_v4([239, 1, (g >> 8) as u8, g as u8]);
            assert_eq!(m.attach(&qp, ip), Ok(()));
        }
        // One group too many.
        assert_eq!(m.attach(&qp, group(0)), Err(ENOMEM));
        // The total: 1024 attachments over full groups.
        let mut m = McGroups::<u32>::new();
        let qps = members(MAX_PER_GROUP);
        for g in 0..MAX_ATTACHED / MAX_PER_GROUP {
            for qp in qps.iter() {
                assert_eq!(m.attach(qp, group(g as u8)), Ok(()));
            }
        }
        assert_eq!(m.attached, MAX_ATTACHED);
        // One attachment too many.
        assert_eq!(m.attach(&qps[0], group(200)), Err(ENOMEM));
    }
}
