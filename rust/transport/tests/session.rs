// SPDX-License-Identifier: GPL-2.0

//! Sessions and their connections between several hosts, driven in the
//! order `metaroce_transport::session` prescribes (the kernel driver and the
//! simulator drive them the same way): the handshake before any data, a
//! peer that restarts or goes silent mid-transfer, and the receiver's fair
//! share as senders come and go.

use metaroce_transport::cc::fair_share;
use metaroce_transport::conn::{Config, Connection, Message, PostError, Received, PORT_BASE};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::handshake::RESTART_SILENCE_NS;
use metaroce_transport::session::{
    HelloOutcome, Session, SessionConfig, ALIVE_CHECK_NS, KEEPALIVE_NS, KEEPALIVE_SPAN_NS,
    MIN_DEAD_NS,
};
use metaroce_transport::stream::RecvStream;
use metaroce_transport::wire::{
    self, hello_flags, Common, HelloHeader, Opcode, Packet, PacketType, Remote,
};
use proptest::prelude::*;
use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap};

type Conn = Connection<4>;
/// A datagram on the wire: (arrival, order, from, to, source port, bytes).
type OnWire = Reverse<(u64, u64, u32, u32, u16, Vec<u8>)>;

const US: u64 = 1_000;
const MS: u64 = 1_000_000;
const MSG: u32 = 4096;

/// A tiny deterministic RNG (xorshift64*).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// One host's view of one peer.
struct Link {
    session: Session,
    conn: Box<Conn>,
    /// Messages to post to the peer (`u32::MAX`: for ever).
    to_post: u32,
    next_msn: u32,
    /// The stream our messages go on (a new one after a reset).
    stream: u32,
    /// Messages from the peer delivered whole, per stream.
    rx: BTreeMap<u32, RecvStream>,
    delivered: u64,
    completed: u64,
    resets: u32,
    /// The longest silence measured while something waited.
    silent_waiting: u64,
}

struct Host {
    id: u32,
    up: bool,
    incarnation: u64,
    /// What the host's receiver shares among its senders (kbit/s).
    capacity: u32,
    senders: u32,
    /// The most senders counted at once.
    peak_senders: u32,
    links: BTreeMap<u32, Link>,
    hellos: u64,
}

struct Net {
    hosts: Vec<Host>,
    now: u64,
    delay: u64,
    /// Datagrams lost, per mille.
    loss: u64,
    rng: Rng,
    wire: BinaryHeap<OnWire>,
    seq: u64,
    active_ns: u64,
    /// A host whose incoming link is a FIFO at this many bit/s.
    bottleneck: Option<(u32, u64)>,
    /// When that link is done with what it was given.
    busy_until: u64,
    /// The longest wait in its queue since last cleared, ns.
    max_queue_ns: u64,
    /// A host whose datagrams other than hellos are all lost: every route
    /// its paths take has failed, while the one its hellos take works.
    cut: Option<u32>,
    /// Routes that failed: every datagram of host `.0` from source port
    /// `.1` is lost.
    dead_ports: Vec<(u32, u16)>,
}

impl Net {
    fn new(hosts: u32, capacity: u32, seed: u64) -> Self {
        Self {
            hosts: (0..hosts)
                .map(|id| Host {
                    id,
                    up: true,
                    incarnation: 0,
                    capacity,
                    senders: 0,
                    peak_senders: 0,
                    links: BTreeMap::new(),
                    hellos: 0,
                })
                .collect(),
            now: 0,
            delay: 10 * US,
            loss: 0,
            rng: Rng(seed | 1),
            wire: BinaryHeap::new(),
            seq: 0,
            active_ns: 200 * US,
            bottleneck: None,
            busy_until: 0,
            max_queue_ns: 0,
            cut: None,
            dead_ports: Vec::new(),
        }
    }

    fn link(&mut self, host: u32, peer: u32) -> &mut Link {
        let now = self.now;
        let active_ns = self.active_ns;
        let h = &mut self.hosts[host as usize];
        let salt = (h.incarnation << 40) ^ (u64::from(host) << 20) ^ u64::from(peer);
        let epoch = (salt.wrapping_mul(0x9e37_79b9_7f4a_7c15) >> 32) as u32;
        h.links.entry(peer).or_insert_with(|| {
            let session = Session::new(
                epoch,
                epoch ^ 0x5a5a_5a5a,
                now,
                SessionConfig {
                    active_ns,
                    ..SessionConfig::DEFAULT
                },
            );
            let conn = Box::new(Conn::new(config(&session)));
            Link {
                session,
                conn,
                to_post: 0,
                next_msn: 0,
                stream: 0,
                rx: BTreeMap::new(),
                delivered: 0,
                completed: 0,
                resets: 0,
                silent_waiting: 0,
            }
        })
    }

    /// `from` sends `n` more messages to `to` (`u32::MAX`: for ever; 0:
    /// stops).
    fn send(&mut self, from: u32, to: u32, n: u32) {
        let now = self.now;
        let l = self.link(from, to);
        l.to_post = n;
        l.session.set_wanted(now, true);
        self.pump(from, to);
    }

    fn emit(&mut self, from: u32, to: u32, sport: u16, bytes: Vec<u8>) {
        if self.rng.next() % 1000 < self.loss {
            return;
        }
        if self.cut == Some(from) && wire::peek(&bytes).is_none_or(|(t, _)| t != PacketType::Hello)
        {
            return;
        }
        if self.dead_ports.contains(&(from, sport)) {
            return;
        }
        self.seq += 1;
        let mut at = self.now;
        if let Some(bps) = self.bottleneck.filter(|b| b.0 == to).map(|b| b.1) {
            let start = self.busy_until.max(at);
            self.max_queue_ns = self.max_queue_ns.max(start - at);
            self.busy_until = start + bytes.len() as u64 * 8 * 1_000_000_000 / bps;
            at = self.busy_until;
        }
        self.wire
            .push(Reverse((at + self.delay, self.seq, from, to, sport, bytes)));
    }

    /// The driver's pump, in the session's order.
    fn pump(&mut self, host: u32, peer: u32) {
        let now = self.now;
        let h = &mut self.hosts[host as usize];
        if !h.up {
            return;
        }
        let (capacity, mut senders) = (h.capacity, h.senders);
        let Some(l) = h.links.get_mut(&peer) else {
            return;
        };
        if let Some(silent) = l.session.poll_liveness(now) {
            let waiting = l.conn.outstanding() > 0 || l.completed < u64::from(l.next_msn);
            if waiting {
                l.silent_waiting = l.silent_waiting.max(silent);
            }
            l.session.set_waiting(now, waiting);
        }
        if l.session.poll_quiet(now) {
            senders -= 1;
        }
        l.session.share(&mut l.conn, capacity, senders);
        let mut out = Vec::new();
        let mut buf = [0u8; 32];
        while let Some((n, port)) = l.session.poll_hello(now, &l.conn, &mut buf) {
            out.push((port, buf[..n].to_vec()));
        }
        let hellos = out.len() as u64;
        if l.session.ready() {
            let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
            loop {
                let mut posted = false;
                while l.to_post > 0 {
                    let m = Message {
                        opcode: Opcode::Write,
                        stream: l.stream,
                        msn: l.next_msn,
                        len: MSG,
                        remote: Some(Remote { rkey: 1, addr: 0 }),
                        rsn: 0,
                        imm: None,
                        atomic: None,
                        solicited: false,
                    };
                    match l.conn.post(m) {
                        Ok(()) => {
                            l.next_msn += 1;
                            if l.to_post != u32::MAX {
                                l.to_post -= 1;
                            }
                            l.session.on_posted();
                            posted = true;
                        }
                        Err(PostError::Full | PostError::StreamBusy) => break,
                        Err(e) => panic!("post: {e:?}"),
                    }
                }
                let mut sent = false;
                while let Some(t) = l.conn.poll_transmit(now, &mut hdr) {
                    let mut bytes = hdr[..t.len].to_vec();
                    bytes.resize(t.len + t.payload.map_or(0, |s| usize::from(s.len)), 0);
                    out.push((t.sport, bytes));
                    sent = true;
                }
                // A completion frees its stream for the next post: go round
                // again (a busy stream with nothing in flight would
                // otherwise wait for ever).
                let mut completed = false;
                while let Some(c) = l.conn.poll_event() {
                    assert_eq!(c.error, None, "completion {c:?}");
                    l.completed += 1;
                    completed = true;
                }
                if !posted && !sent && !completed {
                    break;
                }
            }
        }
        h.senders = senders;
        h.hellos += hellos;
        for (sport, bytes) in out {
            self.emit(host, peer, sport, bytes);
        }
    }

    fn receive(&mut self, from: u32, to: u32, sport: u16, bytes: &[u8]) {
        let now = self.now;
        if !self.hosts[to as usize].up {
            return;
        }
        if wire::peek(bytes).is_some_and(|(t, _)| t == PacketType::Hello) {
            let Ok(Packet::Hello(hello)) = wire::decode(bytes) else {
                panic!("a hello that does not decode")
            };
            let l = self.link(to, from);
            let o = l.session.on_hello(
                hello.epoch,
                hello.isn,
                hello.common.conn,
                hello.common.flags,
                sport,
                now,
            );
            match o {
                HelloOutcome::Nothing => {}
                HelloOutcome::Rekey => l.conn.configure(config(&l.session)),
                HelloOutcome::Reset => {
                    // As the driver does: what was in flight is void, the
                    // connection starts again, the application on a new
                    // stream.
                    l.resets += 1;
                    *l.conn = Conn::new(config(&l.session));
                    l.stream += 2;
                    l.next_msn = 0;
                    l.completed = 0;
                }
            }
        } else {
            let l = self.link(to, from);
            let mut joined = false;
            if let Ok(r) = l.conn.on_datagram(now, bytes, sport, false) {
                joined = l.session.on_received(now, &r);
                if let Received::Data(d, payload) = r {
                    let s = l.rx.entry(d.stream).or_insert_with(|| RecvStream::new(0));
                    s.on_packet(d.msn, payload.len() as u32, d.msg_len)
                        .expect("in place");
                    while let Some(msn) = s.pop_completed() {
                        l.delivered += 1;
                        l.conn.set_progress(d.stream, msn.wrapping_add(1));
                    }
                }
            }
            let h = &mut self.hosts[to as usize];
            if joined {
                h.senders += 1;
                h.peak_senders = h.peak_senders.max(h.senders);
                self.pump(to, from);
                // The senders already here hear their smaller share now.
                let others: Vec<u32> = self.hosts[to as usize]
                    .links
                    .iter()
                    .filter(|(p, l)| **p != from && l.session.sending())
                    .map(|(p, _)| *p)
                    .collect();
                for p in others {
                    self.pump(to, p);
                }
                return;
            }
        }
        self.pump(to, from);
    }

    /// Runs until `until` (ns).
    fn run(&mut self, until: u64) {
        // A deadline that stays due would spin here (and spin a kernel's
        // timer): bounded, so that it fails instead.
        for _ in 0..50_000_000u64 {
            let wire = self.wire.peek().map(|Reverse(d)| d.0);
            let timer = self
                .hosts
                .iter()
                .filter(|h| h.up)
                .flat_map(|h| {
                    h.links.iter().filter_map(move |(p, l)| {
                        l.session
                            .next_deadline(0, l.conn.next_timeout())
                            .map(|t| (t, h.id, *p))
                    })
                })
                .min();
            let next = match (wire, timer) {
                (Some(w), Some((t, ..))) => w.min(t),
                (Some(w), None) => w,
                (None, Some((t, ..))) => t,
                (None, None) => {
                    self.now = self.now.max(until);
                    return;
                }
            };
            if next > until {
                self.now = self.now.max(until);
                return;
            }
            self.now = self.now.max(next);
            if wire == Some(next) {
                let Some(Reverse((_, _, from, to, sport, bytes))) = self.wire.pop() else {
                    unreachable!("peeked above");
                };
                self.receive(from, to, sport, &bytes);
            } else if let Some((_, h, p)) = timer {
                let now = self.now;
                let l = self.hosts[h as usize]
                    .links
                    .get_mut(&p)
                    .expect("timer of a link");
                if l.session.ready() {
                    l.conn.on_timeout(now);
                }
                self.pump(h, p);
            }
        }
        panic!("no progress by {} ns", self.now);
    }

    /// Host `id` restarts: its state is gone, a new incarnation comes up.
    fn restart(&mut self, id: u32) {
        let h = &mut self.hosts[id as usize];
        h.links.clear();
        h.senders = 0;
        h.incarnation += 1;
    }

    fn pace(&self, host: u32, peer: u32) -> u32 {
        self.hosts[host as usize].links[&peer].conn.pace_kbps()
    }
}

fn config(s: &Session) -> Config {
    let mut c = Config::new(0, 0, 4, 1024);
    s.configure(&mut c);
    c
}

#[test]
fn sessions_meet_before_any_data_and_then_deliver_everything() {
    let mut net = Net::new(2, 0, 1);
    net.send(0, 1, 50);
    net.run(50 * MS);
    let l = &net.hosts[0].links[&1];
    assert_eq!(l.completed, 50);
    assert_eq!(net.hosts[1].links[&0].delivered, 50);
    // Three hellos make the handshake; none after it.
    let hellos = net.hosts[0].hellos + net.hosts[1].hellos;
    assert!(hellos <= 4, "{hellos} hellos");
    // No capacity: no hint, no pacing.
    assert_eq!(net.pace(0, 1), 0);
}

#[test]
fn a_peer_that_restarts_mid_transfer_is_met_again_once() {
    let mut net = Net::new(2, 1_000_000, 2);
    net.send(0, 1, 3000);
    net.run(5 * MS);
    let before = net.hosts[1].links[&0].delivered;
    assert!(
        before > 10 && before < 3000,
        "{before} delivered: mid-transfer"
    );
    let epoch = net.hosts[0].links[&1].session.epoch();
    net.restart(1);
    // The new incarnation says hello; the old one stays silent.
    net.send(1, 0, 0);
    net.run(5 * MS + RESTART_SILENCE_NS / 2);
    assert_eq!(net.hosts[0].links[&1].resets, 0, "a claim is doubted first");
    net.run(5 * MS + 2 * RESTART_SILENCE_NS + 300 * MS);
    let l = &net.hosts[0].links[&1];
    assert_eq!(l.resets, 1);
    assert_ne!(l.session.epoch(), epoch, "our epoch moved on");
    assert!(l.session.ready());
    let after = net.hosts[1].links[&0].delivered;
    assert!(after > 10, "{after} messages reached the new incarnation");
}

#[test]
fn a_silent_peer_is_measured_while_requests_wait() {
    let mut net = Net::new(2, 1_000_000, 3);
    net.send(0, 1, 3000);
    net.run(5 * MS);
    assert!(net.hosts[1].links[&0].delivered < 3000, "mid-transfer");
    net.hosts[1].up = false;
    net.run(5 * MS + MIN_DEAD_NS + 200 * MS);
    let s = net.hosts[0].links[&1].silent_waiting;
    assert!(s >= MIN_DEAD_NS, "silent {s} ns");
    // The session's own record (the telemetry's silent_max_ms) agrees.
    assert_eq!(net.hosts[0].links[&1].session.longest_silence(), s);
    // A peer that answers is never measured silent for long.
    let mut net = Net::new(2, 0, 4);
    net.send(0, 1, 2000);
    net.run(MIN_DEAD_NS);
    assert!(net.hosts[0].links[&1].silent_waiting < 50 * MS);
}

/// Host 0 writes to host 1 until, mid-transfer, every route its paths take
/// fails (`Net::cut`): host 1 then sends nothing, since it only answers.
/// Host 0's paths probe and move, to no avail. Returns the net at the cut.
fn cut_mid_transfer(seed: u64) -> Net {
    let mut net = Net::new(2, 1_000_000, seed);
    net.send(0, 1, 3000);
    net.run(5 * MS);
    assert!(net.hosts[1].links[&0].delivered < 3000, "mid-transfer");
    net.cut = Some(0);
    net
}

#[test]
fn a_live_peer_behind_failed_routes_is_asked_and_not_taken_for_dead() {
    let mut net = cut_mid_transfer(5);
    let (from, until) = (net.now, net.now + 3 * MIN_DEAD_NS);
    net.run(until);
    let l = &net.hosts[0].links[&1];
    assert!(l.conn.outstanding() > 0, "still waiting");
    // The peer answers every keepalive: its silence never reaches one
    // keepalive interval and a look more (and a round trip).
    let s = l.silent_waiting;
    assert!(s < KEEPALIVE_NS + ALIVE_CHECK_NS + MS, "silent {s} ns");
    assert_eq!(l.session.longest_silence(), s);
    // Without the answers, the connection alone was quiet all along.
    let q = l.session.longest_quiet();
    assert!(q >= 3 * MIN_DEAD_NS - ALIVE_CHECK_NS, "quiet {q} ns");
    // One keepalive per interval of silence (a look every ALIVE_CHECK_NS
    // finds it due: the interval, a look and a round trip at most), no more.
    let k = l.session.keepalives_sent();
    let most = (until - from) / KEEPALIVE_NS;
    let least = (until - from) / (KEEPALIVE_NS + ALIVE_CHECK_NS + MS) - 1;
    assert!(
        (least..=most).contains(&k),
        "{k} keepalives, {least}..={most}"
    );
    assert_eq!(l.resets, 0);
    // Answers alone keep it alive for KEEPALIVE_SPAN_NS of a quiet
    // connection, no longer: the requests then fail as for a silent peer,
    // and no keepalive goes any more.
    let span_end = from + KEEPALIVE_SPAN_NS;
    net.run(span_end + 2 * MIN_DEAD_NS);
    let l = &net.hosts[0].links[&1];
    let s = l.silent_waiting;
    assert!(s >= KEEPALIVE_SPAN_NS, "silent {s} ns");
    let k = l.session.keepalives_sent();
    assert!(k <= KEEPALIVE_SPAN_NS / KEEPALIVE_NS, "{k} keepalives");
}

#[test]
fn keepalives_and_their_answers_avoid_routes_that_failed() {
    // As above, and the route of the path host 0 had acknowledged last
    // failed too, as did PORT_BASE's both ways: every other keepalive takes
    // another path's port, and host 1 answers from the port the challenge
    // came from (it has no path of its own acknowledged).
    let mut net = cut_mid_transfer(6);
    let proven = net.hosts[0].links[&1]
        .conn
        .proven_sport()
        .expect("acknowledged");
    net.dead_ports = vec![(0, proven), (0, PORT_BASE), (1, PORT_BASE)];
    net.run(net.now + 3 * MIN_DEAD_NS);
    let l = &net.hosts[0].links[&1];
    assert!(l.conn.outstanding() > 0, "still waiting");
    // Half the keepalives may be lost: two intervals, a look and a round
    // trip at most.
    let s = l.silent_waiting;
    assert!(s < 2 * KEEPALIVE_NS + ALIVE_CHECK_NS + MS, "silent {s} ns");
}

#[test]
fn a_sniffer_forging_challenges_cannot_silence_a_live_peers_answers() {
    // As in the first case, while someone who sees the traffic forges host
    // 0's challenge (both epochs are on the wire) every millisecond, from a
    // port whose route from host 1 has failed: each forged challenge takes
    // host 1's answer slot and names that port. Host 1's answers also leave
    // from other ports in turn (it has no path of its own acknowledged, so
    // every other copy takes PORT_BASE, the others its paths' ports), so
    // host 0 still hears one per keepalive: with PORT_BASE's route working,
    // with it failed too, and with the forger naming PORT_BASE itself.
    for (forged_port, dead) in [
        (PORT_BASE + 9, vec![PORT_BASE + 9]),
        (PORT_BASE + 9, vec![PORT_BASE + 9, PORT_BASE]),
        (PORT_BASE, vec![PORT_BASE]),
    ] {
        let mut net = cut_mid_transfer(7);
        net.dead_ports = dead.iter().map(|&p| (1, p)).collect();
        let (a, b) = (
            &net.hosts[0].links[&1].session,
            &net.hosts[1].links[&0].session,
        );
        let forged = HelloHeader {
            common: Common {
                ptype: PacketType::Hello,
                flags: hello_flags::CHALLENGE,
                path: 0,
                conn: b.epoch(),
                psn: 0,
                timestamp: 0,
            },
            epoch: a.epoch(),
            isn: a.handshake().isn(),
        };
        let mut bytes = [0u8; 64];
        let n = wire::encode_hello(&forged, &mut bytes).expect("a hello");
        let until = net.now + 3 * MIN_DEAD_NS;
        while net.now < until {
            net.receive(0, 1, forged_port, &bytes[..n]);
            net.run(net.now + MS);
        }
        let l = &net.hosts[0].links[&1];
        assert!(l.conn.outstanding() > 0, "still waiting");
        let s = l.silent_waiting;
        assert!(
            s < KEEPALIVE_NS + ALIVE_CHECK_NS + MS,
            "silent {s} ns, dead {dead:?}"
        );
        assert_eq!((l.resets, net.hosts[1].links[&0].resets), (0, 0));
    }
}

#[test]
fn the_receivers_capacity_is_shared_among_senders_as_they_come_and_go() {
    const CAP: u32 = 8_000_000;
    let mut net = Net::new(5, CAP, 5);
    net.send(1, 0, u32::MAX);
    net.send(2, 0, u32::MAX);
    net.run(3 * MS);
    assert_eq!(net.hosts[0].senders, 2);
    assert_eq!((net.pace(1, 0), net.pace(2, 0)), (CAP / 2, CAP / 2));
    net.send(3, 0, u32::MAX);
    net.send(4, 0, u32::MAX);
    net.run(4 * MS);
    assert_eq!(net.hosts[0].senders, 4);
    for s in 1..=4 {
        assert_eq!(net.pace(s, 0), CAP / 4, "sender {s}");
    }
    // Three stop: the last one gets everything once they count as quiet.
    for s in 1..=3 {
        net.send(s, 0, 0);
    }
    net.run(30 * MS);
    assert_eq!(net.hosts[0].senders, 1);
    assert_eq!(net.pace(4, 0), CAP);
    net.send(4, 0, 0);
    net.run(60 * MS);
    assert_eq!(net.hosts[0].senders, 0);
    assert_eq!(net.hosts[0].peak_senders, 4);
}

/// Senders join a receiver whose link is the bottleneck and whose capacity
/// is shared among them. Until its first ACK brings its share, a newcomer has
/// one path's initial window in flight, not one on every path: the queue it
/// builds ahead of the senders already paced there is that first flight,
/// and what they add while it drains (a third of the link is free). With a
/// window on every path, the first sender alone queued 294 ms, six flights.
#[test]
fn a_sender_joining_a_busy_receiver_queues_only_its_first_flight() {
    const LINK_BPS: u64 = 3_000_000;
    let mut net = Net::new(5, 2_000, 6);
    net.bottleneck = Some((0, LINK_BPS));
    // The first flight: 16 packets of 1,024 bytes and a transport header.
    let packet = u64::from(1024 + TRANSPORT_HEADER_MAX);
    let flight_ns = 16 * packet * 8 * 1_000_000_000 / LINK_BPS;
    let mut t = 0;
    for s in 1..=4 {
        net.max_queue_ns = 0;
        net.send(s, 0, u32::MAX);
        t += 300 * MS;
        net.run(t);
        let q = net.max_queue_ns;
        assert!(
            q <= flight_ns * 2,
            "sender {s} joined: a queue of {} ms, its first flight is {} ms",
            q / MS,
            flight_ns / MS
        );
        assert_eq!(net.hosts[0].senders, s);
    }
    net.run(t + 500 * MS);
    for s in 1..=4 {
        assert_eq!(net.pace(s, 0), fair_share(2_000, 4), "sender {s}");
        assert!(net.hosts[0].links[&s].delivered > 10, "sender {s}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(24))]

    /// Senders start and stop at random over a lossy network: the
    /// receiver's count never goes wrong, each sender's pace is the share of
    /// the count, and the count is back at zero once everything stopped.
    #[test]
    fn the_count_of_senders_follows_them(
        steps in proptest::collection::vec((1u32..4, any::<bool>(), 1u64..2000), 1..12),
        loss in 0u64..30,
        seed in any::<u64>(),
    ) {
        const CAP: u32 = 9_000_000;
        let mut net = Net::new(4, CAP, seed);
        net.loss = loss;
        let mut t = 0;
        for (s, on, gap) in steps {
            net.send(s, 0, if on { u32::MAX } else { 0 });
            t += gap * US;
            net.run(t);
            let h = &net.hosts[0];
            let counted = h.links.values().filter(|l| l.session.sending()).count() as u32;
            prop_assert_eq!(h.senders, counted);
            prop_assert!(h.senders <= 3);
        }
        for s in 1..4 {
            net.send(s, 0, 0);
        }
        net.run(t + 50 * MS);
        prop_assert_eq!(net.hosts[0].senders, 0);
        // While one sender alone sends, it is paced at the whole capacity.
        net.send(2, 0, u32::MAX);
        net.run(t + 60 * MS);
        prop_assert_eq!(net.hosts[0].senders, 1);
        prop_assert_eq!(net.pace(2, 0), fair_share(CAP, 1));
    }
}

/// A sender with no hint (the receiver knows no capacity) behind a FIFO
/// link that drops and marks nothing: its windows fill the link's queue,
/// and the round trip grows from under a millisecond to tens of
/// milliseconds faster than the estimate follows. Nothing is lost, so
/// nothing may be resent: a probe timer that expires while packets sent
/// before its path's oldest are still being delivered waits. Without that
/// rule two of the four paths probed in the first 3 ms (2 resends); without
/// the earlier-copy rule as well, the ACK of each probed packet's late
/// original declared its path's whole 16-packet window lost (32 resends).
#[test]
fn a_queue_that_drops_nothing_costs_no_resends() {
    let mut net = Net::new(2, 0, 7);
    net.bottleneck = Some((0, 20_000_000));
    net.send(1, 0, u32::MAX);
    net.run(1_600 * MS);
    let l = &net.hosts[1].links[&0];
    let s = l.conn.stats();
    assert!(l.completed > 900, "{} messages", l.completed);
    assert!(
        net.max_queue_ns > 20 * MS,
        "a queue of {} us",
        net.max_queue_ns / US
    );
    assert_eq!(
        (s.retransmits, s.timeouts, s.path_moves),
        (0, 0, 0),
        "resends, probes, moves"
    );
    assert!(s.deferred_probes > 0);
}
