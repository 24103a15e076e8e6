// SPDX-License-Identifier: GPL-2.0

//! A two-host harness for the connection state machine: a channel that loses,
//! delays, reorders and duplicates datagrams, applications that post patterned
//! messages, and receivers that place every byte and check it.

#![allow(dead_code)]

use metaroce_transport::conn::{
    Completion, Config, Connection, Message, PostError, Received, Transmit,
};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::stream::RecvStream;
use metaroce_transport::wire::{Opcode, Remote};
use std::collections::{BTreeMap, BinaryHeap, HashMap};

pub const PATHS: usize = 4;
pub type Conn = Connection<PATHS>;

/// The byte at `offset` of message `msn` of `stream`.
pub fn pattern(stream: u32, msn: u32, offset: u32) -> u8 {
    let x = stream
        .wrapping_mul(0x9e37_79b9)
        .wrapping_add(msn.wrapping_mul(0x85eb_ca6b))
        .wrapping_add(offset.wrapping_mul(0xc2b2_ae35));
    (x ^ (x >> 13) ^ (x >> 24)) as u8
}

/// The datagram of transmission `t`, whose header is in `hdr`: the header
/// and the payload [`pattern`] gives its segment.
pub fn datagram(hdr: &[u8], t: &Transmit) -> Vec<u8> {
    let mut bytes = hdr[..t.len].to_vec();
    if let Some(seg) = t.payload {
        bytes.extend((0..u32::from(seg.len)).map(|i| pattern(seg.stream, seg.msn, seg.offset + i)));
    }
    bytes
}

/// A tiny deterministic RNG (xorshift64*).
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed | 1)
    }
    pub fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
    /// True with probability `permille / 1000`.
    pub fn chance(&mut self, permille: u32) -> bool {
        (self.next() % 1000) < u64::from(permille)
    }
    pub fn below(&mut self, n: u64) -> u64 {
        self.next() % n.max(1)
    }
}

/// What the channel does to datagrams.
#[derive(Clone, Copy, Debug)]
pub struct Channel {
    /// Loss, per mille.
    pub loss: u32,
    /// Duplication, per mille.
    pub dup: u32,
    /// Base one-way delay, ns.
    pub delay: u64,
    /// Extra delay per source port class (different paths, different delays).
    pub path_skew: u64,
    /// Random jitter within a path (reorders a path; 0 keeps it in order).
    pub jitter: u64,
    /// The jitter delays data packets only: ACKs stay in order.
    pub jitter_data_only: bool,
    /// Source ports whose datagrams are all dropped (a failed route), as
    /// `port % 8 == blackhole` when `Some`.
    pub blackhole: Option<u16>,
    /// As `blackhole`, for datagrams without payload only (ACKs, NAKs,
    /// hellos, and data packets of no bytes): a route that failed in the
    /// direction the ACKs of a path take.
    pub blackhole_acks: Option<u16>,
    /// Mark CE on this share of data packets, per mille.
    pub ce: u32,
    /// Lose every NAK packet.
    pub drop_naks: bool,
    /// `(period, window)` in ns: ACKs due in the last `window` of every
    /// `period` arrive together at the period's end (a receiver that is
    /// busy elsewhere and then acknowledges a burst at once).
    pub ack_stall: Option<(u64, u64)>,
}

impl Default for Channel {
    fn default() -> Self {
        Self {
            loss: 0,
            dup: 0,
            delay: 5_000,
            path_skew: 3_000,
            jitter: 0,
            jitter_data_only: false,
            blackhole: None,
            blackhole_acks: None,
            ce: 0,
            drop_naks: false,
            ack_stall: None,
        }
    }
}

#[derive(PartialEq, Eq)]
struct InFlight {
    at: u64,
    seq: u64,
    to: usize,
    sport: u16,
    ce: bool,
    bytes: Vec<u8>,
}

impl Ord for InFlight {
    fn cmp(&self, o: &Self) -> std::cmp::Ordering {
        (o.at, o.seq).cmp(&(self.at, self.seq))
    }
}
impl PartialOrd for InFlight {
    fn partial_cmp(&self, o: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(o))
    }
}

/// One side: a connection, the messages it still has to post, and what its
/// receiver saw.
pub struct Host {
    pub conn: Conn,
    /// Messages to post, in order.
    pub todo: std::collections::VecDeque<Message>,
    pub completions: Vec<Completion>,
    /// Receive side: per stream, message buffers and the order tracker.
    pub rx_streams: HashMap<u32, RecvStream>,
    pub rx_bufs: HashMap<(u32, u32), Vec<u8>>,
    /// Receive numbers of arrived Sends, and Sends completed per stream.
    pub rx_rsn: HashMap<(u32, u32), u8>,
    pub sends_done: HashMap<u32, u32>,
    /// Messages delivered in order, per stream.
    pub delivered: BTreeMap<u32, Vec<u32>>,
    pub errors: Vec<String>,
    pub reject_stream: Option<u32>,
    /// Refuses the packets of this stream's (`u32::MAX`: every stream but
    /// 0) Sends and Writes with Immediate for want of a receive until this
    /// time (ns), with this RNR timer code.
    pub not_ready: Option<(u32, u64, u8)>,
    /// Packets refused so.
    pub rnr_refusals: u64,
    /// The `rnr_retry` its messages are posted with.
    pub rnr_retry: u8,
    /// Void packets (of cancelled messages) received.
    pub voids: u64,
    /// Answers every message delivered with a new one on the same stream
    /// (a request and its answer, as a Read's).
    pub on_delivery: Option<Answer>,
    /// How late this host's timers run (ns): its `on_timeout` is called
    /// this long after its earliest deadline, as a kernel's soft timers are
    /// when softirq work is deferred under load (and, as there, that call
    /// handles every deadline due by then, so a later one is less late).
    pub timer_lag: u64,
}

/// What a host posts for each message it receives: a Write of `len` bytes
/// on the same stream, `left` times more.
#[derive(Clone, Debug, Default)]
pub struct Answer {
    pub len: u32,
    pub left: u32,
    /// The next MSN of each stream's answers.
    pub next_msn: HashMap<u32, u32>,
}

impl Answer {
    /// The next message on `stream`, if any are left.
    pub fn message(&mut self, stream: u32) -> Option<Message> {
        self.left = self.left.checked_sub(1)?;
        let msn = self.next_msn.entry(stream).or_default();
        let m = Message {
            opcode: Opcode::Write,
            stream,
            msn: *msn,
            len: self.len,
            remote: Some(Remote {
                rkey: 5,
                addr: 0x1000,
            }),
            rsn: 0,
            imm: None,
            atomic: None,
            solicited: false,
        };
        *msn += 1;
        Some(m)
    }
}

impl Host {
    pub fn new(cfg: Config) -> Self {
        Self {
            conn: Conn::new(cfg),
            todo: Default::default(),
            completions: vec![],
            rx_streams: HashMap::new(),
            rx_bufs: HashMap::new(),
            rx_rsn: HashMap::new(),
            sends_done: HashMap::new(),
            delivered: BTreeMap::new(),
            errors: vec![],
            reject_stream: None,
            not_ready: None,
            rnr_refusals: 0,
            rnr_retry: 0,
            voids: 0,
            on_delivery: None,
            timer_lag: 0,
        }
    }

    fn post_what_fits(&mut self) {
        while let Some(m) = self.todo.front().copied() {
            let payload = self.conn.config().max_payload;
            match self.conn.post_with(m, payload, self.rnr_retry) {
                Ok(()) => {
                    self.todo.pop_front();
                }
                Err(PostError::Full | PostError::StreamBusy) => break,
                Err(e) => {
                    self.errors.push(format!("post {m:?}: {e:?}"));
                    self.todo.pop_front();
                }
            }
        }
    }

    /// When this host's `on_timeout` runs next: its earliest deadline, late
    /// by `timer_lag`.
    fn timers_run_at(&self) -> Option<u64> {
        self.conn.next_timeout().map(|t| t + self.timer_lag)
    }

    pub fn receive(&mut self, now: u64, bytes: &[u8], sport: u16, ce: bool) {
        match self.conn.on_datagram(now, bytes, sport, ce) {
            Ok(Received::Data(h, payload)) => {
                if self.reject_stream == Some(h.stream) {
                    self.conn.reject(
                        h.common.path,
                        h.stream,
                        h.msn,
                        metaroce_transport::wire::NakCode::RemoteAccess,
                    );
                    return;
                }
                if let Some((s, until, timer)) = self.not_ready {
                    let refused = s == h.stream || (s == u32::MAX && h.stream != 0);
                    if refused && now < until && h.opcode.consumes_receive() {
                        self.rnr_refusals += 1;
                        self.conn.not_ready(
                            h.common.path,
                            h.common.psn,
                            h.common.timestamp,
                            h.stream,
                            h.msn,
                            timer,
                        );
                        return;
                    }
                }
                let st = self
                    .rx_streams
                    .entry(h.stream)
                    .or_insert_with(|| RecvStream::new(0));
                if let Err(e) = st.on_packet(h.msn, payload.len() as u32, h.msg_len) {
                    self.errors.push(format!(
                        "stream {} msn {} offset {}: {e:?}",
                        h.stream, h.msn, h.offset
                    ));
                    return;
                }
                let buf = self
                    .rx_bufs
                    .entry((h.stream, h.msn))
                    .or_insert_with(|| vec![0u8; h.msg_len as usize]);
                let at = h.offset as usize;
                buf[at..at + payload.len()].copy_from_slice(payload);
                if h.opcode.is_send() {
                    self.rx_rsn.insert((h.stream, h.msn), h.rsn);
                }
                while let Some(msn) = st.pop_completed() {
                    let buf = self.rx_bufs.remove(&(h.stream, msn)).unwrap_or_default();
                    for (i, b) in buf.iter().enumerate() {
                        if *b != pattern(h.stream, msn, i as u32) {
                            self.errors
                                .push(format!("stream {} msn {msn} byte {i} differs", h.stream));
                            break;
                        }
                    }
                    if let Some(rsn) = self.rx_rsn.remove(&(h.stream, msn)) {
                        let n = self.sends_done.entry(h.stream).or_default();
                        if rsn != *n as u8 {
                            self.errors.push(format!(
                                "stream {} msn {msn}: receive number {rsn}, want {}",
                                h.stream, *n as u8
                            ));
                        }
                        *n += 1;
                    }
                    self.delivered.entry(h.stream).or_default().push(msn);
                    if let Some(m) = self.on_delivery.as_mut().and_then(|a| a.message(h.stream)) {
                        self.todo.push_back(m);
                    }
                    self.conn.set_progress(h.stream, msn.wrapping_add(1));
                }
            }
            Ok(Received::Refused(h)) => {
                self.rnr_refusals += 1;
                let timer = self.not_ready.map_or(1, |n| n.2);
                let c = h.common;
                self.conn
                    .rnr_nak(c.path, c.psn, c.timestamp, h.stream, h.msn, timer);
            }
            Ok(Received::Void) => self.voids += 1,
            Ok(_) => {}
            Err(e) => self.errors.push(format!("receive: {e:?}")),
        }
    }
}

/// Two hosts and the channel between them.
pub struct Pair {
    pub hosts: [Host; 2],
    pub chan: Channel,
    pub rng: Rng,
    pub now: u64,
    wire: BinaryHeap<InFlight>,
    seq: u64,
    last_arrival: HashMap<(usize, u16), u64>,
    /// Datagrams put on the wire, per direction.
    pub sent: [u64; 2],
    pub dropped: u64,
    /// Most packets a host had in flight at once.
    pub peak: [u32; 2],
    /// Completions are taken before data is polled, as the kernel's
    /// softirq does (a message's slot may be freed before its last packet
    /// is encoded).
    pub driver_order: bool,
}

pub fn config_pair(paths: u16, max_payload: u16) -> (Config, Config) {
    let a = Config {
        tx_isn: 0xffff_ff00,
        rx_isn: 77,
        ..Config::new(10, 20, paths, max_payload)
    };
    let b = Config {
        tx_isn: 77,
        rx_isn: 0xffff_ff00,
        ..Config::new(20, 10, paths, max_payload)
    };
    (a, b)
}

impl Pair {
    pub fn new(paths: u16, max_payload: u16, chan: Channel, seed: u64) -> Self {
        let (a, b) = config_pair(paths, max_payload);
        Self::with_configs(a, b, chan, seed)
    }

    pub fn with_configs(a: Config, b: Config, chan: Channel, seed: u64) -> Self {
        Self {
            hosts: [Host::new(a), Host::new(b)],
            chan,
            rng: Rng::new(seed),
            now: 0,
            wire: BinaryHeap::new(),
            seq: 0,
            last_arrival: HashMap::new(),
            sent: [0; 2],
            dropped: 0,
            peak: [0; 2],
            driver_order: false,
        }
    }

    fn emit(&mut self, from: usize, bytes: Vec<u8>, sport: u16, is_data: bool) {
        self.sent[from] += 1;
        let c = self.chan;
        let nak = c.drop_naks
            && matches!(
                metaroce_transport::wire::decode(&bytes),
                Ok(metaroce_transport::wire::Packet::Nak(_))
            );
        let dead = |b: Option<u16>| b.is_some_and(|b| sport % 8 == b);
        if nak
            || dead(c.blackhole)
            || (!is_data && dead(c.blackhole_acks))
            || self.rng.chance(c.loss)
        {
            self.dropped += 1;
            return;
        }
        let stalled = c.ack_stall.filter(|_| {
            !is_data
                && matches!(
                    metaroce_transport::wire::decode(&bytes),
                    Ok(metaroce_transport::wire::Packet::Ack(_))
                )
        });
        let copies = if self.rng.chance(c.dup) { 2 } else { 1 };
        let ce = is_data && self.rng.chance(c.ce);
        for _ in 0..copies {
            let skew = c.path_skew * u64::from(sport % 4);
            let jittery = c.jitter > 0 && (is_data || !c.jitter_data_only);
            let jitter = if jittery { self.rng.below(c.jitter) } else { 0 };
            let mut at = self.now + c.delay + skew + jitter;
            if let Some((period, window)) = stalled {
                assert!(period > 0, "ack_stall's period is 0");
                let end = (at / period + 1) * period;
                if end - at <= window {
                    at = end;
                }
            }
            if !jittery {
                // One route delivers in order.
                let last = self.last_arrival.entry((from, sport)).or_insert(0);
                at = at.max(*last);
                *last = at;
            }
            self.seq += 1;
            self.wire.push(InFlight {
                at,
                seq: self.seq,
                to: 1 - from,
                sport,
                ce,
                bytes: bytes.clone(),
            });
        }
    }

    /// Lets both hosts send everything they may send now.
    pub fn flush(&mut self) {
        let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
        for h in 0..2 {
            self.hosts[h].post_what_fits();
            if self.driver_order {
                while let Some(c) = self.hosts[h].conn.poll_event() {
                    self.hosts[h].completions.push(c);
                }
            }
            while let Some(t) = self.hosts[h].conn.poll_transmit(self.now, &mut hdr) {
                let bytes = datagram(&hdr, &t);
                self.emit(h, bytes, t.sport, t.payload.is_some());
            }
            self.peak[h] = self.peak[h].max(self.hosts[h].conn.outstanding());
            while let Some(c) = self.hosts[h].conn.poll_event() {
                self.hosts[h].completions.push(c);
            }
            self.hosts[h].post_what_fits();
        }
    }

    /// Runs until nothing is left to do or `deadline` (ns) passes; returns
    /// whether it went idle.
    pub fn run(&mut self, deadline: u64) -> bool {
        loop {
            self.flush();
            let next_wire = self.wire.peek().map(|f| f.at);
            let next_timer = self.hosts.iter().filter_map(Host::timers_run_at).min();
            let Some(next) = [next_wire, next_timer].into_iter().flatten().min() else {
                return true;
            };
            if next > deadline {
                return false;
            }
            self.now = self.now.max(next);
            while self.wire.peek().is_some_and(|f| f.at <= self.now) {
                let Some(f) = self.wire.pop() else { break };
                self.hosts[f.to].receive(self.now, &f.bytes, f.sport, f.ce);
                // Receivers acknowledge as packets arrive.
                self.flush();
            }
            for h in &mut self.hosts {
                if h.timers_run_at().is_some_and(|t| t <= self.now) {
                    h.conn.on_timeout(self.now);
                }
            }
            if self.idle() {
                return true;
            }
        }
    }

    fn idle(&self) -> bool {
        // Nothing in flight is not enough: a paced sender holds queued
        // messages back until its pacer's timer.
        self.wire.is_empty()
            && self.hosts.iter().all(|h| {
                h.todo.is_empty()
                    && h.conn.outstanding() == 0
                    && !h.conn.wants_to_send()
                    && !h.conn.waits_for_receiver()
            })
    }
}

/// `n` messages over `streams` streams with sizes from `sizes`, cycling
/// through Send, Write and their immediate variants.
pub fn workload(n: u32, streams: u32, sizes: &[u32]) -> Vec<Message> {
    let mut next_msn = vec![0u32; streams as usize];
    let mut next_rsn = vec![0u8; streams as usize];
    (0..n)
        .map(|i| {
            let stream = i % streams;
            let msn = next_msn[stream as usize];
            next_msn[stream as usize] += 1;
            let len = sizes[i as usize % sizes.len()];
            let opcode = [
                Opcode::Send,
                Opcode::Write,
                Opcode::SendImm,
                Opcode::WriteImm,
            ][i as usize % 4];
            let rsn = if opcode.is_send() {
                let r = next_rsn[stream as usize];
                next_rsn[stream as usize] = r.wrapping_add(1);
                r
            } else {
                0
            };
            Message {
                opcode,
                stream,
                msn,
                len,
                remote: opcode.has_remote().then_some(Remote {
                    rkey: 5,
                    addr: 0x1000,
                }),
                rsn,
                imm: opcode.has_imm().then_some(i),
                atomic: None,
                solicited: false,
            }
        })
        .collect()
}

/// Checks that host `to` received every message of `msgs` exactly once, in
/// order per stream with identical bytes, and that host `from` completed each
/// once, in order, without error. Returns the list of problems.
pub fn check_delivery(p: &Pair, from: usize, to: usize, msgs: &[Message]) -> Vec<String> {
    let mut problems = p.hosts[to].errors.clone();
    problems.extend(p.hosts[from].errors.iter().cloned());
    let mut want: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for m in msgs {
        want.entry(m.stream).or_default().push(m.msn);
    }
    if p.hosts[to].delivered != want {
        problems.push(format!(
            "delivered {:?} want {:?}",
            summarize(&p.hosts[to].delivered),
            summarize(&want)
        ));
    }
    let mut done: BTreeMap<u32, Vec<u32>> = BTreeMap::new();
    for c in &p.hosts[from].completions {
        if c.error.is_some() {
            problems.push(format!("completion with error {c:?}"));
        }
        done.entry(c.stream).or_default().push(c.msn);
    }
    if done != want {
        problems.push(format!(
            "completed {:?} want {:?}",
            summarize(&done),
            summarize(&want)
        ));
    }
    problems
}

fn summarize(m: &BTreeMap<u32, Vec<u32>>) -> Vec<(u32, usize, Option<u32>)> {
    m.iter()
        .map(|(s, v)| (*s, v.len(), v.last().copied()))
        .collect()
}
