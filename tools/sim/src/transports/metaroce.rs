//! MetaRoCE on a simulated host: the `metaroce_transport` crate, unchanged,
//! behind the simulator's `Endpoint` trait.
//!
//! - One `Session` and `Connection` per peer host, created on first use (a
//!   flow to it, or its first hello), driven exactly as the kernel driver
//!   drives them (`metaroce_transport::session` says how): the handshake
//!   runs before any data, each end's epoch drawn from the run's seed.
//! - Every flow between two hosts is a stream of their connection (stream
//!   id = flow id). A flow posts RDMA Writes of `msg_size` bytes while its
//!   connection accepts them (at most 64 in progress per stream, 256 per
//!   connection).
//! - Receiving: new data goes through a `RecvStream` per flow; whole
//!   messages count as delivered, in order. Anything out of place is an
//!   integrity error.
//! - Rate hint: the host's inbound capacity (all its ports, in kbit/s) is
//!   shared equally among the peers its sessions count as sending to it.
//! - Timers: a heap of (deadline, peer) with stale entries skipped.

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};

use metaroce_transport::conn::{Config, Connection, Message, PostError, Received};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::session::{HelloOutcome, Session, SessionConfig};
use metaroce_transport::stream::RecvStream;
use metaroce_transport::wire::{self, Opcode, Packet, PacketType, Remote};

use super::{Datagram, Endpoint, EndpointConfig, Flow, Ns};

/// Most paths a connection may have here.
pub const MAX_PATHS: usize = 8;
/// A peer counts as an active sender for this long after its last data.
pub const ACTIVE_NS: Ns = 500_000;

type Conn = Connection<MAX_PATHS>;

struct SendFlow {
    id: u32,
    dst: u32,
    msg_size: u32,
    /// Messages still to post (u64::MAX: unbounded).
    left: u64,
    next_msn: u32,
}

struct RecvFlow {
    stream: RecvStream,
    msg_size: u32,
    delivered: u64,
}

struct Peer {
    session: Session,
    conn: Box<Conn>,
    /// Flows from this host to the peer (indices into `senders`).
    flows: Vec<usize>,
    /// The deadline of this peer's entry in the timer heap.
    armed: Option<Ns>,
}

pub struct MetaRoceHost {
    host: u32,
    cfg: EndpointConfig,
    peers: HashMap<u32, Peer>,
    senders: Vec<SendFlow>,
    receivers: HashMap<u32, RecvFlow>,
    timers: BinaryHeap<Reverse<(Ns, u32)>>,
    errors: u64,
    /// Peers the sessions count as sending to this host.
    active: u32,
    completions: u64,
    hellos: u64,
    resets: u64,
    hdr: [u8; TRANSPORT_HEADER_MAX as usize],
}

pub fn new(host: u32, cfg: &EndpointConfig) -> Option<Box<dyn Endpoint>> {
    Some(Box::new(MetaRoceHost {
        host,
        cfg: cfg.clone(),
        peers: HashMap::new(),
        senders: Vec::new(),
        receivers: HashMap::new(),
        timers: BinaryHeap::new(),
        errors: 0,
        active: 0,
        completions: 0,
        hellos: 0,
        resets: 0,
        hdr: [0; TRANSPORT_HEADER_MAX as usize],
    }))
}

/// A number drawn from `seed` and `salt` (splitmix64): the same run gives
/// the same epochs.
fn draw(seed: u64, salt: u64) -> u32 {
    let mut z = seed.wrapping_add(salt.wrapping_mul(0x9e37_79b9_7f4a_7c15));
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    (z ^ (z >> 31)) as u32
}

impl MetaRoceHost {
    fn conn_config(&self, peer: u32, session: &Session) -> Config {
        let paths = self.cfg.paths.clamp(1, MAX_PATHS as u32) as u16;
        let payload = self.cfg.mtu_payload.min(u32::from(u16::MAX)) as u16;
        // Start each path with its share of one port's bandwidth-delay
        // product, so that a new connection fills the port in about one RTT
        // (the transport's first flight, at least 8 packets, is all of it
        // here).
        let bdp_packets = (self.cfg.bdp_bytes() / u64::from(self.cfg.mtu_payload)) as u32;
        let per_path = bdp_packets.div_ceil(u32::from(paths)).max(2);
        let mut cfg = Config {
            initial_window: per_path,
            port_seed: (self.cfg.seed as u32) ^ peer.wrapping_mul(0x9e37_79b9),
            ..Config::new(0, 0, paths, payload)
        };
        session.configure(&mut cfg);
        cfg
    }

    fn peer(&mut self, now: Ns, peer: u32) -> &mut Peer {
        if !self.peers.contains_key(&peer) {
            let salt = u64::from(peer) << 32 | u64::from(self.host);
            let session = Session::new(
                draw(self.cfg.seed, salt),
                draw(self.cfg.seed, !salt),
                now,
                SessionConfig {
                    active_ns: ACTIVE_NS,
                    // A lost hello is asked again after a few round trips
                    // of this fabric, as the kernel's 1 ms is for a LAN.
                    hello_first_ns: 4 * self.cfg.base_rtt_ns,
                },
            );
            let cfg = self.conn_config(peer, &session);
            self.peers.insert(
                peer,
                Peer {
                    session,
                    conn: Box::new(Conn::new(cfg)),
                    flows: Vec::new(),
                    armed: None,
                },
            );
        }
        self.peers.get_mut(&peer).expect("inserted above")
    }

    fn datagram(&self, peer: u32, sport: u16, bytes: Vec<u8>) -> Datagram {
        Datagram {
            src: self.host,
            dst: peer,
            sport,
            wire_len: self.cfg.frame_overhead + bytes.len() as u32,
            ecn_ce: false,
            bytes,
        }
    }

    /// Drives the peer's session and connection as the kernel's pump does:
    /// liveness, the fair share, hellos, then (once the handshake is done)
    /// posting what the flows may post and sending what the connection may
    /// send; collects completions and re-arms the timer.
    fn pump(&mut self, now: Ns, peer: u32, tx: &mut Vec<Datagram>) {
        // In kbit/s, as the hint carries it (25 Gbit/s x 8 planes is 2e8 of
        // the u32's 4.29e9; more saturates).
        let capacity_kbps =
            u32::try_from((self.cfg.link_bps / 1_000).saturating_mul(u64::from(self.cfg.planes)))
                .unwrap_or(u32::MAX);
        let Some(p) = self.peers.get_mut(&peer) else {
            return;
        };
        if p.session.poll_liveness(now).is_some() {
            // Flows here have no patience to run out of.
            let waiting = p.conn.outstanding() > 0;
            p.session.set_waiting(now, waiting);
        }
        if p.session.poll_quiet(now) {
            self.active -= 1;
        }
        p.session.share(&mut p.conn, capacity_kbps, self.active);
        let mut hello = [0u8; 32];
        let mut hellos = Vec::new();
        while let Some((n, port)) = p.session.poll_hello(now, &p.conn, &mut hello) {
            hellos.push((port, hello[..n].to_vec()));
        }
        let ready = p.session.ready();
        for (port, h) in hellos {
            self.hellos += 1;
            tx.push(self.datagram(peer, port, h));
        }
        let p = self.peers.get_mut(&peer).expect("looked up above");
        // Until nothing more is posted or sent.
        if ready {
            loop {
                while p.conn.poll_event().is_some() {
                    self.completions += 1;
                }
                let mut posted = false;
                for &fi in &p.flows {
                    let f = &mut self.senders[fi];
                    while f.left > 0 {
                        let m = Message {
                            opcode: Opcode::Write,
                            stream: f.id,
                            msn: f.next_msn,
                            len: f.msg_size,
                            remote: Some(Remote { rkey: 1, addr: 0 }),
                            rsn: 0,
                            imm: None,
                            atomic: None,
                            solicited: false,
                        };
                        match p.conn.post(m) {
                            Ok(()) => {
                                f.next_msn = f.next_msn.wrapping_add(1);
                                if f.left != u64::MAX {
                                    f.left -= 1;
                                }
                                posted = true;
                                p.session.on_posted();
                            }
                            Err(PostError::Full | PostError::StreamBusy) => break,
                            Err(PostError::Invalid) => {
                                self.errors += 1;
                                f.left = 0;
                            }
                        }
                    }
                }
                let mut sent = false;
                while let Some(t) = p.conn.poll_transmit(now, &mut self.hdr) {
                    let payload = t.payload.map_or(0, |s| usize::from(s.len));
                    let mut bytes = Vec::with_capacity(t.len + payload);
                    bytes.extend_from_slice(&self.hdr[..t.len]);
                    bytes.resize(t.len + payload, 0);
                    tx.push(Datagram {
                        src: self.host,
                        dst: peer,
                        sport: t.sport,
                        wire_len: self.cfg.frame_overhead + bytes.len() as u32,
                        ecn_ce: false,
                        bytes,
                    });
                    sent = true;
                }
                if !posted && !sent {
                    break;
                }
            }
        }
        let next = p.session.next_deadline(now, p.conn.next_timeout());
        if next.is_some() && next != p.armed {
            p.armed = next;
            self.timers.push(Reverse((next.unwrap_or(0), peer)));
        }
    }

    fn arm_now(&mut self, now: Ns, peer: u32) {
        let p = self.peer(now, peer);
        if p.armed.is_none_or(|t| t > now) {
            p.armed = Some(now);
            self.timers.push(Reverse((now, peer)));
        }
    }

    /// Drops stale entries from the top of the timer heap, so that its top is
    /// the real next deadline.
    fn clean_timers(&mut self) {
        while let Some(&Reverse((t, peer))) = self.timers.peek() {
            if self.peers.get(&peer).is_some_and(|p| p.armed == Some(t)) {
                break;
            }
            self.timers.pop();
        }
    }

    /// A hello from `src`: the session decides, the connection follows.
    fn on_hello(&mut self, now: Ns, src: u32, sport: u16, bytes: &[u8]) {
        let Ok(Packet::Hello(h)) = wire::decode(bytes) else {
            self.errors += 1;
            return;
        };
        let p = self.peer(now, src);
        let outcome = p
            .session
            .on_hello(h.epoch, h.isn, h.common.conn, h.common.flags, sport, now);
        let session = p.session.clone();
        let cfg = self.conn_config(src, &session);
        let p = self.peers.get_mut(&src).expect("made above");
        match outcome {
            HelloOutcome::Nothing => {}
            HelloOutcome::Rekey => p.conn.configure(cfg),
            HelloOutcome::Reset => {
                // Nothing restarts in these runs; were it to, what was in
                // flight is void and the flows' counts tell.
                self.resets += 1;
                *p.conn = Conn::new(cfg);
            }
        }
    }
}

impl Endpoint for MetaRoceHost {
    fn add_flow(&mut self, now: Ns, flow: &Flow) {
        let i = self.senders.len();
        self.senders.push(SendFlow {
            id: flow.id,
            dst: flow.dst,
            msg_size: flow.msg_size,
            left: flow.messages(),
            next_msn: 0,
        });
        let dst = self.senders[i].dst;
        let p = self.peer(now, dst);
        p.flows.push(i);
        p.session.set_wanted(now, true);
        // Hellos and sending start in on_wakeup.
        self.arm_now(now, dst);
    }

    fn expect_flow(&mut self, flow: &Flow) {
        self.receivers.insert(
            flow.id,
            RecvFlow {
                stream: RecvStream::new(0),
                msg_size: flow.msg_size,
                delivered: 0,
            },
        );
    }

    fn on_datagram(&mut self, now: Ns, d: Datagram, tx: &mut Vec<Datagram>) {
        let src = d.src;
        if wire::peek(&d.bytes).is_some_and(|(t, _)| t == PacketType::Hello) {
            self.on_hello(now, src, d.sport, &d.bytes);
            self.pump(now, src, tx);
            self.clean_timers();
            return;
        }
        let p = self.peer(now, src);
        let mut delivered_msgs = Vec::new();
        let mut joined = false;
        match p.conn.on_datagram(now, &d.bytes, d.sport, d.ecn_ce) {
            Ok(r) => {
                joined = p.session.on_received(now, &r);
                if let Received::Data(h, payload) = r {
                    match self.receivers.get_mut(&h.stream) {
                        Some(r) if h.msg_len == r.msg_size => {
                            match r.stream.on_packet(h.msn, payload.len() as u32, h.msg_len) {
                                Ok(()) => {
                                    while let Some(msn) = r.stream.pop_completed() {
                                        r.delivered += u64::from(r.msg_size);
                                        delivered_msgs.push((h.stream, msn));
                                    }
                                }
                                Err(_) => self.errors += 1,
                            }
                        }
                        _ => self.errors += 1,
                    }
                }
            }
            Err(_) => self.errors += 1,
        }
        if let Some(p) = self.peers.get_mut(&src) {
            for (stream, msn) in delivered_msgs {
                p.conn.set_progress(stream, msn.wrapping_add(1));
            }
        }
        self.pump(now, src, tx);
        if joined {
            // One more sender: every other connection is driven now, so
            // that the senders already here hear their smaller share at once.
            self.active += 1;
            let mut others: Vec<u32> = self
                .peers
                .iter()
                .filter(|(id, p)| **id != src && p.session.sending())
                .map(|(id, _)| *id)
                .collect();
            // In a fixed order: the same seed gives the same run.
            others.sort_unstable();
            for id in others {
                self.pump(now, id, tx);
            }
        }
        self.clean_timers();
    }

    fn on_wakeup(&mut self, now: Ns, tx: &mut Vec<Datagram>) {
        while let Some(&Reverse((t, peer))) = self.timers.peek() {
            if t > now {
                break;
            }
            self.timers.pop();
            let Some(p) = self.peers.get_mut(&peer) else {
                continue;
            };
            if p.armed != Some(t) {
                continue; // stale: the deadline moved since
            }
            p.armed = None;
            if p.session.ready() {
                p.conn.on_timeout(now);
            }
            self.pump(now, peer, tx);
        }
        self.clean_timers();
    }

    fn next_wakeup(&self) -> Option<Ns> {
        self.timers.peek().map(|Reverse((t, _))| *t)
    }

    fn control_rate_bps(&self, flow: u32) -> Option<f64> {
        let f = self.senders.iter().find(|f| f.id == flow)?;
        let kbps = self.peers.get(&f.dst)?.conn.pace_kbps();
        (kbps > 0).then(|| f64::from(kbps) * 1e3)
    }

    fn delivered(&self, flow: u32) -> u64 {
        self.receivers.get(&flow).map_or(0, |r| r.delivered)
    }

    fn errors(&self) -> u64 {
        self.errors
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let mut c = [0u64; 7];
        for p in self.peers.values() {
            let s = p.conn.stats();
            for (i, v) in [
                s.tx_data,
                s.retransmits,
                s.relocations,
                s.path_moves,
                s.timeouts,
                s.rx_duplicates,
                s.ce_echoed,
            ]
            .into_iter()
            .enumerate()
            {
                c[i] += v;
            }
        }
        vec![
            ("tx_data", c[0]),
            ("retransmits", c[1]),
            ("relocations", c[2]),
            ("path_moves", c[3]),
            ("timeouts", c[4]),
            ("rx_duplicates", c[5]),
            ("ce_echoed", c[6]),
            ("completions", self.completions),
            ("hellos", self.hellos),
            ("resets", self.resets),
        ]
    }
}

#[cfg(test)]
mod tests {
    use crate::fabric::{Fabric, FabricConfig};
    use crate::sim::Sim;
    use crate::transports::{make, EndpointConfig, Flow, Kind};

    fn sim(planes: u32, drop_limit: u64) -> Sim {
        let fc = FabricConfig {
            hosts: 16,
            planes,
            drop_limit,
            ecn_k: 16 * 1024,
            ..Default::default()
        };
        let c = EndpointConfig {
            hosts: 16,
            planes,
            link_bps: 25_000_000_000,
            mtu_payload: 4096,
            frame_overhead: 66,
            base_rtt_ns: 12_000,
            rto_ns: 200_000,
            paths: 8,
            seed: 3,
        };
        let eps = (0..16)
            .map(|h| make(Kind::MetaRoce, h, &c).unwrap())
            .collect();
        Sim::new(Fabric::new(fc), eps, 7)
    }

    #[test]
    fn incast_through_the_fabric_delivers_everything_once() {
        let mut s = sim(2, 256 * 1024);
        for i in 0..6u32 {
            s.add_flow(Flow {
                id: i,
                src: 8 + i,
                dst: 0,
                bytes: 100 * 16384,
                msg_size: 16384,
                start: u64::from(i) * 200,
            });
        }
        s.run_until(100_000_000);
        for i in 0..6 {
            assert_eq!(s.delivered(i), 100 * 16384, "flow {i}");
        }
        assert_eq!(s.errors(), 0);
        let ce: u64 = s
            .endpoints
            .iter()
            .flat_map(|e| e.counters())
            .filter(|(k, _)| *k == "ce_echoed")
            .map(|(_, v)| v)
            .sum();
        assert!(ce > 0, "the shared downlink must have marked");
    }

    #[test]
    fn a_failed_plane_is_left_and_nothing_is_lost() {
        let mut s = sim(4, 1024 * 1024);
        for i in 0..4u32 {
            s.add_flow(Flow {
                id: i,
                src: 8 + i,
                dst: i,
                bytes: 400 * 16384,
                msg_size: 16384,
                start: 0,
            });
        }
        s.run_until(300_000);
        s.set_plane_up(1, false);
        s.run_until(200_000_000);
        for i in 0..4 {
            assert_eq!(s.delivered(i), 400 * 16384, "flow {i}");
        }
        assert_eq!(s.errors(), 0);
        let moves: u64 = s
            .endpoints
            .iter()
            .flat_map(|e| e.counters())
            .filter(|(k, _)| *k == "path_moves")
            .map(|(_, v)| v)
            .sum();
        assert!(moves > 0, "paths on the failed plane must have moved");
    }
}
