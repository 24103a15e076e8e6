//! The multiplane fabric: hosts with one port per plane, each plane a two-tier
//! leaf/spine Clos (or one switch), every link a FIFO egress queue with a rate,
//! a propagation delay, step ECN marking, tail drop and random loss.
//!
//! This module holds the topology and the per-link queue arithmetic; the event
//! loop that moves datagrams between links lives in `sim.rs`.

use std::collections::VecDeque;

/// Simulated time, nanoseconds.
pub type Ns = u64;

/// One datagram on the wire. `bytes` are the transport's own encoded headers
/// (opaque to the fabric); `wire_len` is its size on the wire (framing +
/// headers + payload), used for serialization time and queue occupancy.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Datagram {
    pub src: u32,
    pub dst: u32,
    pub sport: u16,
    pub wire_len: u32,
    pub ecn_ce: bool,
    pub bytes: Vec<u8>,
}

/// Salt of the host NIC's port (plane) choice.
pub const NIC_SALT: u64 = 0x4e49_435f_706c_616e;

#[inline]
fn mix64(mut z: u64) -> u64 {
    // The finaliser of SplitMix64: a bijective avalanche mix.
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The ECMP hash of every switch and of the NIC: a function of the flow's
/// (src, dst, UDP source port) and the deciding element's salt.
#[inline]
pub fn ecmp_hash(src: u32, dst: u32, sport: u16, salt: u64) -> u64 {
    mix64(mix64(mix64(salt ^ src as u64) ^ dst as u64) ^ sport as u64)
}

/// The plane (NIC port) a datagram from `src` to `dst` with source port
/// `sport` leaves on. Transports steer across planes only by the source port;
/// they may call this to know where a port lands.
#[inline]
pub fn nic_plane(src: u32, dst: u32, sport: u16, planes: u32) -> u32 {
    (ecmp_hash(src, dst, sport, NIC_SALT) % planes as u64) as u32
}

/// Serialization time of `wire_len` bytes at `rate_bps`, rounded up.
#[inline]
pub fn ser_ns(wire_len: u32, rate_bps: u64) -> Ns {
    (wire_len as u64 * 8 * 1_000_000_000).div_ceil(rate_bps)
}

/// What the far end of a link is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum To {
    Host(u32),
    Leaf { plane: u32, leaf: u32 },
    Spine { plane: u32, spine: u32 },
}

/// A unidirectional link: the egress queue of its sending element plus the wire.
#[derive(Clone, Debug)]
pub struct Link {
    pub to: To,
    pub rate_bps: u64,
    pub prop_ns: Ns,
    /// Step ECN marking: CE is set on a datagram enqueued while the queue holds
    /// more than this many bytes.
    pub ecn_k: u64,
    /// Tail drop: a datagram that would take the queue above this is dropped.
    pub drop_limit: u64,
    /// Independent probability that a datagram is lost on this link.
    pub loss: f64,
    pub up: bool,
    // Queue state: departure time (last bit on the wire) and size of every
    // datagram not yet fully sent, oldest first.
    busy_until: Ns,
    fifo: VecDeque<(Ns, u32)>,
    occ: u64,
    // Counters.
    pub max_occ: u64,
    pub tx_pkts: u64,
    pub tx_bytes: u64,
    pub marks: u64,
    pub tail_drops: u64,
    pub loss_drops: u64,
    pub down_drops: u64,
}

/// What happened to a datagram offered to a link.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Enq {
    /// Its last bit reaches the far end at this time (it may have been marked).
    Arrives(Ns),
    TailDrop,
    Down,
}

impl Link {
    pub fn new(to: To, rate_bps: u64, prop_ns: Ns, ecn_k: u64, drop_limit: u64) -> Self {
        Link {
            to,
            rate_bps,
            prop_ns,
            ecn_k,
            drop_limit,
            loss: 0.0,
            up: true,
            busy_until: 0,
            fifo: VecDeque::new(),
            occ: 0,
            max_occ: 0,
            tx_pkts: 0,
            tx_bytes: 0,
            marks: 0,
            tail_drops: 0,
            loss_drops: 0,
            down_drops: 0,
        }
    }

    /// Bytes queued (including the one being serialized) at `now`.
    pub fn occupancy(&mut self, now: Ns) -> u64 {
        while let Some(&(dep, b)) = self.fifo.front() {
            if dep > now {
                break;
            }
            self.occ -= b as u64;
            self.fifo.pop_front();
        }
        self.occ
    }

    /// Offers `d` to the queue at `now`: drop, or mark and schedule. Random
    /// loss is decided by the caller (it owns the RNG) after `Arrives`.
    pub fn enqueue(&mut self, now: Ns, d: &mut Datagram) -> Enq {
        if !self.up {
            self.down_drops += 1;
            return Enq::Down;
        }
        let occ = self.occupancy(now);
        let len = d.wire_len as u64;
        if occ + len > self.drop_limit {
            self.tail_drops += 1;
            return Enq::TailDrop;
        }
        if occ > self.ecn_k {
            if !d.ecn_ce {
                self.marks += 1;
            }
            d.ecn_ce = true;
        }
        let dep = now.max(self.busy_until) + ser_ns(d.wire_len, self.rate_bps);
        self.busy_until = dep;
        self.fifo.push_back((dep, d.wire_len));
        self.occ += len;
        self.max_occ = self.max_occ.max(self.occ);
        self.tx_pkts += 1;
        self.tx_bytes += len;
        Enq::Arrives(dep + self.prop_ns)
    }
}

/// The fabric's parameters (see Documentation/simulator.md).
#[derive(Clone, Debug, serde::Serialize)]
pub struct FabricConfig {
    pub hosts: u32,
    pub planes: u32,
    pub hosts_per_leaf: u32,
    /// Spines per plane; 0 = leaves/2 (at least 1). Uplinks run at
    /// host_bps * hosts_per_leaf / spines, so every leaf is non-blocking.
    pub spines: u32,
    /// Rate of each host port (one per plane) and of each leaf's host-facing port.
    pub host_bps: u64,
    pub prop_ns: Ns,
    pub ecn_k: u64,
    pub drop_limit: u64,
    /// Random loss probability applied to every link (both directions).
    pub link_loss: f64,
}

impl Default for FabricConfig {
    fn default() -> Self {
        FabricConfig {
            hosts: 16,
            planes: 1,
            hosts_per_leaf: 8,
            spines: 0,
            host_bps: 25_000_000_000,
            prop_ns: 1_000,
            ecn_k: 40 * 1024,
            drop_limit: 1024 * 1024,
            link_loss: 0.0,
        }
    }
}

/// The built topology: every link of every plane in one vector, addressed by
/// arithmetic (no pointers).
pub struct Fabric {
    pub cfg: FabricConfig,
    pub leaves: u32,
    pub spines: u32,
    pub uplink_bps: u64,
    per_plane: u32,
    pub links: Vec<Link>,
}

impl Fabric {
    pub fn new(cfg: FabricConfig) -> Self {
        assert!(cfg.hosts > 0 && cfg.planes > 0 && cfg.hosts_per_leaf > 0);
        let leaves = cfg.hosts.div_ceil(cfg.hosts_per_leaf);
        let spines = if leaves == 1 {
            0
        } else if cfg.spines > 0 {
            cfg.spines
        } else {
            (leaves / 2).max(1)
        };
        let uplink_bps = if spines == 0 {
            0
        } else {
            cfg.host_bps * cfg.hosts_per_leaf as u64 / spines as u64
        };
        let n = cfg.hosts;
        let per_plane = 2 * n + 2 * leaves * spines;
        let mut links = Vec::with_capacity((per_plane * cfg.planes) as usize);
        let (k, lim, prop) = (cfg.ecn_k, cfg.drop_limit, cfg.prop_ns);
        for plane in 0..cfg.planes {
            // Host ports: the NIC's transmit queue, large and lossless; it
            // marks CE above the same threshold as a switch (the NIC's own
            // congestion signal: the transport chooses the port).
            for h in 0..n {
                let leaf = h / cfg.hosts_per_leaf;
                links.push(Link::new(
                    To::Leaf { plane, leaf },
                    cfg.host_bps,
                    prop,
                    k,
                    u64::MAX,
                ));
            }
            for h in 0..n {
                links.push(Link::new(To::Host(h), cfg.host_bps, prop, k, lim));
            }
            for _leaf in 0..leaves {
                for spine in 0..spines {
                    links.push(Link::new(
                        To::Spine { plane, spine },
                        uplink_bps,
                        prop,
                        k,
                        lim,
                    ));
                }
            }
            for _spine in 0..spines {
                for leaf in 0..leaves {
                    links.push(Link::new(
                        To::Leaf { plane, leaf },
                        uplink_bps,
                        prop,
                        k,
                        lim,
                    ));
                }
            }
        }
        for l in &mut links {
            l.loss = cfg.link_loss;
        }
        Fabric {
            cfg,
            leaves,
            spines,
            uplink_bps,
            per_plane,
            links,
        }
    }

    #[inline]
    fn base(&self, plane: u32) -> u32 {
        plane * self.per_plane
    }
    /// Host `h`'s port on `plane` (towards its leaf).
    #[inline]
    pub fn host_port(&self, plane: u32, h: u32) -> u32 {
        self.base(plane) + h
    }
    /// The leaf's port towards host `h` on `plane`.
    #[inline]
    pub fn host_downlink(&self, plane: u32, h: u32) -> u32 {
        self.base(plane) + self.cfg.hosts + h
    }
    #[inline]
    pub fn leaf_uplink(&self, plane: u32, leaf: u32, spine: u32) -> u32 {
        self.base(plane) + 2 * self.cfg.hosts + leaf * self.spines + spine
    }
    #[inline]
    pub fn spine_downlink(&self, plane: u32, spine: u32, leaf: u32) -> u32 {
        self.base(plane)
            + 2 * self.cfg.hosts
            + self.leaves * self.spines
            + spine * self.leaves
            + leaf
    }
    #[inline]
    pub fn leaf_of(&self, h: u32) -> u32 {
        h / self.cfg.hosts_per_leaf
    }
    #[inline]
    fn switch_salt(plane: u32, tier: u32, idx: u32) -> u64 {
        mix64(((plane as u64) << 40) ^ ((tier as u64) << 32) ^ idx as u64)
    }

    /// The leaf's choice of spine for a datagram (ECMP).
    #[inline]
    pub fn leaf_pick_spine(&self, plane: u32, leaf: u32, d: &Datagram) -> u32 {
        (ecmp_hash(d.src, d.dst, d.sport, Self::switch_salt(plane, 1, leaf)) % self.spines as u64)
            as u32
    }

    /// The link a datagram takes when it leaves element `at`; None = it has
    /// arrived at its host.
    #[inline]
    pub fn next_link(&self, at: To, d: &Datagram) -> Option<u32> {
        match at {
            To::Host(_) => None,
            To::Leaf { plane, leaf } => {
                if self.leaf_of(d.dst) == leaf {
                    Some(self.host_downlink(plane, d.dst))
                } else {
                    Some(self.leaf_uplink(plane, leaf, self.leaf_pick_spine(plane, leaf, d)))
                }
            }
            To::Spine { plane, spine } => {
                Some(self.spine_downlink(plane, spine, self.leaf_of(d.dst)))
            }
        }
    }

    /// The first link of a datagram sent by its source host.
    #[inline]
    pub fn first_link(&self, d: &Datagram) -> u32 {
        self.host_port(nic_plane(d.src, d.dst, d.sport, self.cfg.planes), d.src)
    }

    /// Every link of `plane`, host ports included.
    pub fn plane_links(&self, plane: u32) -> std::ops::Range<usize> {
        let b = self.base(plane) as usize;
        b..b + self.per_plane as usize
    }

    pub fn set_plane_up(&mut self, plane: u32, up: bool) {
        for i in self.plane_links(plane) {
            self.links[i].up = up;
        }
    }

    /// Links a datagram between two hosts on different leaves crosses.
    pub fn max_hops(&self) -> u32 {
        if self.spines == 0 {
            2
        } else {
            4
        }
    }

    /// Unloaded round trip of one `data_wire` datagram out and one `ack_wire`
    /// datagram back over the longest (cross-leaf) path.
    pub fn base_rtt(&self, data_wire: u32, ack_wire: u32) -> Ns {
        let hops = self.max_hops() as u64;
        let one_way = |w: u32| {
            let mut t = 2 * ser_ns(w, self.cfg.host_bps);
            if self.spines > 0 {
                t += 2 * ser_ns(w, self.uplink_bps);
            }
            t + hops * self.cfg.prop_ns
        };
        one_way(data_wire) + one_way(ack_wire)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn dg(len: u32) -> Datagram {
        Datagram {
            src: 0,
            dst: 1,
            sport: 1,
            wire_len: len,
            ecn_ce: false,
            bytes: Vec::new(),
        }
    }

    #[test]
    fn serialization_time() {
        assert_eq!(ser_ns(1250, 10_000_000_000), 1000); // 10 kbit at 10 Gbit/s = 1 us
        assert_eq!(ser_ns(4160, 25_000_000_000), 1332); // 33280 bit / 25 Gbit/s = 1331.2 ns, rounded up
        assert_eq!(ser_ns(1, 8_000_000_000), 1);
        assert_eq!(ser_ns(0, 1), 0);
    }

    #[test]
    fn fifo_serializes_back_to_back_and_drains() {
        let mut l = Link::new(To::Host(1), 10_000_000_000, 500, u64::MAX, u64::MAX);
        assert_eq!(l.enqueue(0, &mut dg(1250)), Enq::Arrives(1500));
        assert_eq!(l.enqueue(0, &mut dg(1250)), Enq::Arrives(2500));
        assert_eq!(l.occupancy(0), 2500);
        assert_eq!(l.occupancy(1000), 1250);
        assert_eq!(l.occupancy(2000), 0);
        // An idle link starts at once.
        assert_eq!(l.enqueue(5000, &mut dg(1250)), Enq::Arrives(6500));
        assert_eq!(l.max_occ, 2500);
    }

    #[test]
    fn ecn_marks_only_above_threshold() {
        let mut l = Link::new(To::Host(1), 10_000_000_000, 0, 2000, u64::MAX);
        let mut a = dg(1000);
        let mut b = dg(1000);
        let mut c = dg(1000);
        let mut d = dg(1000);
        l.enqueue(0, &mut a); // occ 0 before
        l.enqueue(0, &mut b); // 1000
        l.enqueue(0, &mut c); // 2000: not above
        l.enqueue(0, &mut d); // 3000: above
        assert!(!a.ecn_ce && !b.ecn_ce && !c.ecn_ce);
        assert!(d.ecn_ce);
        assert_eq!(l.marks, 1);
        // Once drained, no more marks.
        let mut e = dg(1000);
        l.enqueue(10_000, &mut e);
        assert!(!e.ecn_ce);
    }

    #[test]
    fn tail_drop_at_limit() {
        let mut l = Link::new(To::Host(1), 10_000_000_000, 0, u64::MAX, 3000);
        assert!(matches!(l.enqueue(0, &mut dg(1000)), Enq::Arrives(_)));
        assert!(matches!(l.enqueue(0, &mut dg(1000)), Enq::Arrives(_)));
        assert!(matches!(l.enqueue(0, &mut dg(1000)), Enq::Arrives(_))); // exactly at the limit
        assert_eq!(l.enqueue(0, &mut dg(1)), Enq::TailDrop);
        assert_eq!(l.tail_drops, 1);
        assert_eq!(l.occupancy(0), 3000);
        // After one departure there is room again.
        assert!(matches!(l.enqueue(800, &mut dg(1000)), Enq::Arrives(_)));
    }

    #[test]
    fn link_down_drops_everything() {
        let mut l = Link::new(To::Host(1), 10_000_000_000, 0, u64::MAX, u64::MAX);
        l.up = false;
        for i in 0..100 {
            assert_eq!(l.enqueue(i * 10, &mut dg(100)), Enq::Down);
        }
        assert_eq!(l.down_drops, 100);
        assert_eq!(l.tx_pkts, 0);
    }

    fn spread(counts: &[u32]) -> (u32, u32) {
        (*counts.iter().min().unwrap(), *counts.iter().max().unwrap())
    }

    #[test]
    fn ecmp_spreads_source_ports_over_spines_and_planes() {
        let f = Fabric::new(FabricConfig {
            hosts: 64,
            planes: 8,
            ..Default::default()
        });
        assert_eq!(f.spines, 4);
        let n = 40_000u32;
        let mut spines = vec![0u32; f.spines as usize];
        let mut planes = vec![0u32; 8];
        for sport in 0..n {
            let d = Datagram {
                src: 3,
                dst: 60,
                sport: (sport + 1000) as u16,
                ..dg(100)
            };
            spines[f.leaf_pick_spine(0, 0, &d) as usize] += 1;
            planes[nic_plane(d.src, d.dst, d.sport, 8) as usize] += 1;
        }
        let (lo, hi) = spread(&spines);
        let mean = n / f.spines;
        assert!(lo > mean * 95 / 100 && hi < mean * 105 / 100, "{spines:?}");
        let (lo, hi) = spread(&planes);
        let mean = n / 8;
        assert!(lo > mean * 93 / 100 && hi < mean * 107 / 100, "{planes:?}");
        // The NIC's and the leaf's choices are independent (different salts):
        // the ports landing on plane 0 still spread over all spines.
        let mut s0 = vec![0u32; f.spines as usize];
        for sport in 0..n {
            let d = Datagram {
                src: 3,
                dst: 60,
                sport: sport as u16,
                ..dg(100)
            };
            if nic_plane(3, 60, d.sport, 8) == 0 {
                s0[f.leaf_pick_spine(0, 0, &d) as usize] += 1;
            }
        }
        let (lo, hi) = spread(&s0);
        assert!(lo * 10 > hi * 8, "{s0:?}");
    }

    #[test]
    fn routing_reaches_destination() {
        let f = Fabric::new(FabricConfig {
            hosts: 40,
            planes: 2,
            ..Default::default()
        });
        for (src, dst) in [(0u32, 1u32), (0, 39), (17, 3), (39, 38)] {
            for sport in 0..50u16 {
                let d = Datagram {
                    src,
                    dst,
                    sport,
                    ..dg(100)
                };
                let mut link = f.first_link(&d);
                let mut hops = 1;
                while let Some(next) = f.next_link(f.links[link as usize].to, &d) {
                    link = next;
                    hops += 1;
                    assert!(hops <= 4);
                }
                assert_eq!(f.links[link as usize].to, To::Host(dst));
                let same_leaf = f.leaf_of(src) == f.leaf_of(dst);
                assert_eq!(hops, if same_leaf { 2 } else { 4 });
            }
        }
    }

    #[test]
    fn single_switch_when_hosts_fit_one_leaf() {
        let f = Fabric::new(FabricConfig {
            hosts: 8,
            planes: 1,
            ..Default::default()
        });
        assert_eq!((f.leaves, f.spines), (1, 0));
        assert_eq!(f.links.len(), 16);
        assert_eq!(f.max_hops(), 2);
    }
}
