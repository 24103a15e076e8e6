//! The baseline: a RoCEv2 RC-like transport.
//!
//! - One UDP source port per flow (one path, one plane), one PSN space.
//! - The responder accepts only the expected PSN. An out-of-order packet gets
//!   one NAK (sequence error) and is dropped, as is everything after it until
//!   the expected PSN arrives (go-back-N); a duplicate gets an ACK.
//! - ACKs are coalesced: every `ACK_EVERY` packets, at each message's last
//!   packet, and when the requester asks (last packet its window allows, or
//!   every packet while its rate is below one packet per base RTT).
//! - The requester resends from the NAKed PSN, and from the oldest unacked
//!   PSN when the retransmission timer (4x the reference RTO, doubled on each
//!   consecutive expiry up to 8x) expires.
//! - Rate control is DCQCN-like: the responder sends a CNP when it receives a
//!   CE-marked packet (at most one per `CNP_INTERVAL` per flow); the requester
//!   cuts `rc *= 1 - alpha/2`, raises alpha, and recovers on a timer: fast
//!   recovery (rc halfway to the target rate) for `F` steps, then additive,
//!   then hyper increase of the target. No byte counter (timer only).
//! - Each flow is paced at its rate and capped to a window of outstanding
//!   packets (one BDP plus two); the host's port sends one packet at a time,
//!   round robin over the flows whose pacing and window allow.

use std::collections::HashMap;

use super::{nic_plane, ser_ns, Datagram, Endpoint, EndpointConfig, Flow, Ns};

const OP_DATA: u8 = 1;
const OP_ACK: u8 = 2;
const OP_NAK: u8 = 3;
const OP_CNP: u8 = 4;
const F_LAST: u8 = 1; // last packet of a message
const F_ACKREQ: u8 = 2; // ask for an ACK now

/// Header bytes this model encodes (what `Datagram::bytes` holds).
const HDR: usize = 20;
/// Sizes on the wire beside the frame overhead, as in RoCEv2: BTH 12, ICRC 4,
/// AETH 4 on ACK/NAK, 16 reserved bytes in a CNP.
const BTH: u32 = 12;
const ICRC: u32 = 4;
const AETH: u32 = 4;
const CNP_PAD: u32 = 16;

pub const ACK_EVERY: u32 = 4;
pub const CNP_INTERVAL: Ns = 50_000;
/// DCQCN's alpha gain, alpha-decay period and rate-increase period.
pub const G: f64 = 1.0 / 16.0;
pub const T_ALPHA: Ns = 55_000;
pub const T_INC: Ns = 55_000;
/// Fast-recovery steps before additive increase, additive steps before hyper.
pub const F: u32 = 5;
/// Additive and hyper increase steps, as fractions of the line rate.
pub const R_AI: f64 = 0.005;
pub const R_HAI: f64 = 0.05;
/// Lowest rate, as a fraction of the line rate.
pub const R_MIN: f64 = 0.001;
/// The baseline's RTO in units of the reference RTO: ~730 us here, above the
/// worst queueing delay of one hop (1 MiB at 25 Gbit/s = 335 us), so queueing
/// alone does not fire it (RoCE NICs' local ACK timeouts are that long or longer).
pub const RTO_FACTOR: u64 = 4;
/// Largest RTO backoff exponent (RTO up to 8x).
pub const MAX_BACKOFF: u32 = 3;

fn put(b: &mut Vec<u8>, op: u8, flags: u8, flow: u32, psn: u32, msg: u32, off: u32) {
    b.reserve_exact(HDR);
    b.push(op);
    b.push(flags);
    b.extend_from_slice(&[0, 0]);
    b.extend_from_slice(&flow.to_be_bytes());
    b.extend_from_slice(&psn.to_be_bytes());
    b.extend_from_slice(&msg.to_be_bytes());
    b.extend_from_slice(&off.to_be_bytes());
}

struct Hdr {
    op: u8,
    flags: u8,
    flow: u32,
    psn: u32,
    msg: u32,
    off: u32,
}

fn get(b: &[u8]) -> Option<Hdr> {
    if b.len() != HDR {
        return None;
    }
    let w = |i: usize| u32::from_be_bytes([b[i], b[i + 1], b[i + 2], b[i + 3]]);
    Some(Hdr {
        op: b[0],
        flags: b[1],
        flow: w(4),
        psn: w(8),
        msg: w(12),
        off: w(16),
    })
}

struct Sender {
    flow: u32,
    dst: u32,
    sport: u16,
    plane: u32,
    msg_size: u32,
    ppm: u32,
    total: u64,
    /// Oldest unacknowledged PSN, next PSN to send, highest PSN sent + 1.
    una: u64,
    nxt: u64,
    high: u64,
    last_tx: Ns,
    last_len: u32,
    /// Pacing: earliest time of the next packet at the current rate.
    next_tx: Ns,
    // DCQCN state (bit/s).
    rc: f64,
    rt: f64,
    alpha: f64,
    alpha_at: Ns,
    inc_at: Ns,
    stage: u32,
    rto_at: Ns,
    backoff: u32,
}

struct Receiver {
    src: u32,
    sport: u16,
    msg_size: u32,
    ppm: u32,
    epsn: u64,
    nak_sent: bool,
    since_ack: u32,
    last_cnp: Option<Ns>,
    delivered: u64,
}

#[derive(Default, Clone, Copy)]
struct Counters {
    data_sent: u64,
    retransmits: u64,
    naks: u64,
    timeouts: u64,
    cnps: u64,
    dropped_ooo: u64,
}

pub struct RoceHost {
    host: u32,
    cfg: EndpointConfig,
    wnd: u64,
    rto: Ns,
    line: f64,
    senders: Vec<Sender>,
    by_flow: HashMap<u32, usize>,
    receivers: HashMap<u32, Receiver>,
    port_free: Vec<Ns>,
    rr: usize,
    wake: Option<Ns>,
    errors: u64,
    c: Counters,
}

impl RoceHost {
    pub fn new(host: u32, cfg: &EndpointConfig) -> Self {
        let wnd = (cfg.bdp_bytes().div_ceil(cfg.mtu_payload as u64) + 2).max(4);
        RoceHost {
            host,
            cfg: cfg.clone(),
            wnd,
            rto: RTO_FACTOR * cfg.rto_ns,
            line: cfg.link_bps as f64,
            senders: Vec::new(),
            by_flow: HashMap::new(),
            receivers: HashMap::new(),
            port_free: vec![0; cfg.planes as usize],
            rr: 0,
            wake: None,
            errors: 0,
            c: Counters::default(),
        }
    }

    /// The flow's UDP source port: fixed for its life (a hash of its id, as a
    /// NIC hashes the QPN).
    pub fn sport_of(flow: u32) -> u16 {
        let h = crate::fabric::ecmp_hash(flow, 0, 0, 0x51_50_4e);
        0xc000 | (h as u16 & 0x3fff)
    }

    fn ctrl(&self, dst: u32, sport: u16, op: u8, flow: u32, psn: u64) -> Datagram {
        let mut bytes = Vec::new();
        put(&mut bytes, op, 0, flow, psn as u32, 0, 0);
        let extra = if op == OP_CNP { CNP_PAD } else { AETH };
        Datagram {
            src: self.host,
            dst,
            sport,
            wire_len: self.cfg.frame_overhead + BTH + extra + ICRC,
            ecn_ce: false,
            bytes,
        }
    }

    /// Applies the DCQCN timers that expired by `now` (alpha decay, rate increase).
    fn dcqcn_tick(s: &mut Sender, now: Ns, line: f64) {
        while s.alpha_at <= now {
            s.alpha *= 1.0 - G;
            s.alpha_at += T_ALPHA;
        }
        while s.inc_at <= now {
            if s.rc >= line {
                s.rc = line;
                s.rt = line;
                s.inc_at = Ns::MAX;
                break;
            }
            s.stage += 1;
            if s.stage > 2 * F {
                s.rt += R_HAI * line * (s.stage - 2 * F) as f64;
            } else if s.stage > F {
                s.rt += R_AI * line;
            }
            s.rt = s.rt.min(line);
            s.rc = ((s.rt + s.rc) / 2.0).min(line);
            if line - s.rc < line * 1e-4 {
                s.rc = line;
            }
            s.inc_at += T_INC;
            Self::repace(s);
        }
    }

    /// Recomputes the pacing time of the next packet after a rate change.
    fn repace(s: &mut Sender) {
        s.next_tx = if s.last_len == 0 {
            0
        } else {
            s.last_tx + ser_ns(s.last_len, s.rc.max(1.0) as u64)
        };
    }

    fn on_cnp(s: &mut Sender, now: Ns, line: f64) {
        Self::dcqcn_tick(s, now, line);
        s.rt = s.rc;
        s.rc = (s.rc * (1.0 - s.alpha / 2.0)).max(R_MIN * line);
        s.alpha = (1.0 - G) * s.alpha + G;
        s.alpha_at = now + T_ALPHA;
        s.inc_at = now + T_INC;
        s.stage = 0;
        Self::repace(s);
    }

    fn has_work(&self, s: &Sender) -> bool {
        s.nxt < s.total && s.nxt < s.una + self.wnd
    }

    /// Sends one packet of sender `i` if its pacing, window and port allow.
    fn try_send(&mut self, i: usize, now: Ns, tx: &mut Vec<Datagram>) -> bool {
        let line = self.line;
        if !self.has_work(&self.senders[i]) {
            return false;
        }
        let s = &mut self.senders[i];
        if self.port_free[s.plane as usize] > now {
            return false;
        }
        Self::dcqcn_tick(s, now, line);
        if s.next_tx > now {
            return false;
        }
        let psn = s.nxt;
        let idx = (psn % s.ppm as u64) as u32;
        let msg = psn / s.ppm as u64;
        let off = idx * self.cfg.mtu_payload;
        let payload = (s.msg_size - off).min(self.cfg.mtu_payload);
        let last = idx + 1 == s.ppm;
        let mut flags = if last { F_LAST } else { 0 };
        // Ask for an ACK at once when the window closes, at the flow's end, and
        // when the rate is so low that coalescing ACKs would delay them by more
        // than a base RTT (else the timer fires while the data sits unacked).
        let slow = ser_ns(
            self.cfg.frame_overhead + BTH + ICRC + self.cfg.mtu_payload,
            s.rc.max(1.0) as u64,
        ) > self.cfg.base_rtt_ns;
        if s.nxt + 1 == s.una + self.wnd || s.nxt + 1 == s.total || slow {
            flags |= F_ACKREQ;
        }
        let mut bytes = Vec::new();
        put(
            &mut bytes, OP_DATA, flags, s.flow, psn as u32, msg as u32, off,
        );
        let wire_len = self.cfg.frame_overhead + BTH + ICRC + payload;
        tx.push(Datagram {
            src: self.host,
            dst: s.dst,
            sport: s.sport,
            wire_len,
            ecn_ce: false,
            bytes,
        });
        if psn < s.high {
            self.c.retransmits += 1;
        }
        self.c.data_sent += 1;
        s.nxt += 1;
        s.high = s.high.max(s.nxt);
        s.last_tx = now;
        s.last_len = wire_len;
        Self::repace(s);
        if s.rto_at == Ns::MAX {
            s.rto_at = now + (self.rto << s.backoff);
        }
        self.port_free[s.plane as usize] = now + ser_ns(wire_len, self.cfg.link_bps);
        true
    }

    /// Sends what pacing, windows and ports allow now, round robin.
    fn pump(&mut self, now: Ns, tx: &mut Vec<Datagram>) {
        let n = self.senders.len();
        if n == 0 || self.port_free.iter().all(|&p| p > now) {
            return;
        }
        loop {
            let mut sent = false;
            for k in 0..n {
                let i = (self.rr + k) % n;
                if self.try_send(i, now, tx) {
                    sent = true;
                }
            }
            self.rr = (self.rr + 1) % n;
            if !sent {
                break;
            }
        }
    }

    fn timers(&mut self, now: Ns) {
        let line = self.line;
        for s in &mut self.senders {
            Self::dcqcn_tick(s, now, line);
            if s.rto_at <= now {
                if s.una < s.high {
                    self.c.timeouts += 1;
                    s.nxt = s.una;
                    s.backoff = (s.backoff + 1).min(MAX_BACKOFF);
                    s.rto_at = now + (self.rto << s.backoff);
                } else {
                    s.rto_at = Ns::MAX;
                }
            }
        }
    }

    fn recompute_wake(&mut self) {
        let mut w = Ns::MAX;
        for s in &self.senders {
            w = w.min(s.rto_at);
            if self.has_work(s) {
                let t = s.next_tx.max(self.port_free[s.plane as usize]);
                w = w.min(t);
                if s.inc_at < t {
                    w = w.min(s.inc_at);
                }
            }
        }
        self.wake = if w == Ns::MAX { None } else { Some(w) };
    }

    fn on_data(&mut self, now: Ns, d: &Datagram, h: &Hdr, tx: &mut Vec<Datagram>) {
        let Some(r) = self.receivers.get_mut(&h.flow) else {
            self.errors += 1;
            return;
        };
        let (src, sport) = (r.src, r.sport);
        let mut out: [Option<(u8, u64)>; 2] = [None, None];
        if d.ecn_ce && r.last_cnp.is_none_or(|t| now >= t + CNP_INTERVAL) {
            r.last_cnp = Some(now);
            out[0] = Some((OP_CNP, 0));
        }
        // PSNs are 32 bits on the wire; flows here never wrap them.
        let psn = h.psn as u64;
        if psn == r.epsn {
            let idx = (psn % r.ppm as u64) as u32;
            let want_msg = (psn / r.ppm as u64) as u32;
            let want_off = idx * self.cfg.mtu_payload;
            let last = idx + 1 == r.ppm;
            if h.msg != want_msg || h.off != want_off || (h.flags & F_LAST != 0) != last {
                self.errors += 1;
            }
            r.epsn += 1;
            r.nak_sent = false;
            r.since_ack += 1;
            if last {
                r.delivered += r.msg_size as u64;
            }
            if last || r.since_ack >= ACK_EVERY || h.flags & F_ACKREQ != 0 {
                r.since_ack = 0;
                out[1] = Some((OP_ACK, r.epsn));
            }
        } else if psn > r.epsn {
            self.c.dropped_ooo += 1;
            if !r.nak_sent {
                r.nak_sent = true;
                out[1] = Some((OP_NAK, r.epsn));
            }
        } else {
            out[1] = Some((OP_ACK, r.epsn));
        }
        for (op, psn) in out.into_iter().flatten() {
            if op == OP_CNP {
                self.c.cnps += 1;
            }
            tx.push(self.ctrl(src, sport, op, h.flow, psn));
        }
    }

    fn on_ctrl(&mut self, now: Ns, h: &Hdr) {
        let Some(&i) = self.by_flow.get(&h.flow) else {
            self.errors += 1;
            return;
        };
        let line = self.line;
        let rto = self.rto;
        let s = &mut self.senders[i];
        let psn = h.psn as u64;
        match h.op {
            OP_CNP => Self::on_cnp(s, now, line),
            OP_ACK | OP_NAK => {
                if psn > s.high {
                    self.errors += 1;
                    return;
                }
                if psn > s.una {
                    s.una = psn;
                    s.backoff = 0;
                    s.rto_at = if s.una < s.high { now + rto } else { Ns::MAX };
                }
                if h.op == OP_NAK {
                    self.c.naks += 1;
                    if psn == s.una {
                        s.nxt = s.una; // go back N
                    }
                }
                if s.nxt < s.una {
                    s.nxt = s.una;
                }
            }
            _ => self.errors += 1,
        }
    }
}

impl Endpoint for RoceHost {
    fn add_flow(&mut self, now: Ns, flow: &Flow) {
        let sport = Self::sport_of(flow.id);
        let ppm = flow.msg_size.div_ceil(self.cfg.mtu_payload).max(1);
        let msgs = flow.messages();
        let total = if msgs == u64::MAX {
            u64::MAX
        } else {
            msgs * ppm as u64
        };
        self.by_flow.insert(flow.id, self.senders.len());
        self.senders.push(Sender {
            flow: flow.id,
            dst: flow.dst,
            sport,
            plane: nic_plane(self.host, flow.dst, sport, self.cfg.planes),
            msg_size: flow.msg_size,
            ppm,
            total,
            una: 0,
            nxt: 0,
            high: 0,
            last_tx: now,
            last_len: 0,
            next_tx: 0,
            rc: self.line,
            rt: self.line,
            alpha: 1.0,
            alpha_at: now + T_ALPHA,
            inc_at: Ns::MAX,
            stage: 0,
            rto_at: Ns::MAX,
            backoff: 0,
        });
        self.recompute_wake();
        if self.wake.is_none_or(|w| w > now) {
            self.wake = Some(now);
        }
    }

    fn expect_flow(&mut self, flow: &Flow) {
        self.receivers.insert(
            flow.id,
            Receiver {
                src: flow.src,
                sport: Self::sport_of(flow.id),
                msg_size: flow.msg_size,
                ppm: flow.msg_size.div_ceil(self.cfg.mtu_payload).max(1),
                epsn: 0,
                nak_sent: false,
                since_ack: 0,
                last_cnp: None,
                delivered: 0,
            },
        );
    }

    fn on_datagram(&mut self, now: Ns, d: Datagram, tx: &mut Vec<Datagram>) {
        match get(&d.bytes) {
            Some(h) if h.op == OP_DATA => self.on_data(now, &d, &h, tx),
            Some(h) => {
                self.on_ctrl(now, &h);
                self.pump(now, tx);
            }
            None => self.errors += 1,
        }
        self.recompute_wake();
    }

    fn on_wakeup(&mut self, now: Ns, tx: &mut Vec<Datagram>) {
        self.timers(now);
        self.pump(now, tx);
        self.recompute_wake();
    }

    fn next_wakeup(&self) -> Option<Ns> {
        self.wake
    }

    fn delivered(&self, flow: u32) -> u64 {
        self.receivers.get(&flow).map_or(0, |r| r.delivered)
    }

    fn errors(&self) -> u64 {
        self.errors
    }

    fn control_rate_bps(&self, flow: u32) -> Option<f64> {
        self.by_flow.get(&flow).map(|&i| self.senders[i].rc)
    }

    fn rto_estimate(&self) -> Option<Ns> {
        Some(self.rto)
    }

    fn counters(&self) -> Vec<(&'static str, u64)> {
        let c = self.c;
        vec![
            ("data_sent", c.data_sent),
            ("retransmits", c.retransmits),
            ("naks", c.naks),
            ("timeouts", c.timeouts),
            ("cnps", c.cnps),
            ("dropped_out_of_order", c.dropped_ooo),
        ]
    }
}

#[cfg(test)]
impl RoceHost {
    /// Current rate of the sender of `flow`.
    pub fn rate_of(&self, flow: u32) -> Option<f64> {
        self.by_flow.get(&flow).map(|&i| self.senders[i].rc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::fabric::{Fabric, FabricConfig};
    use crate::sim::Sim;
    use crate::transports::{make, Kind};

    fn cfg(planes: u32) -> EndpointConfig {
        EndpointConfig {
            hosts: 2,
            planes,
            link_bps: 25_000_000_000,
            mtu_payload: 4096,
            frame_overhead: 66,
            base_rtt_ns: 8_000,
            rto_ns: 100_000,
            paths: 1,
            seed: 1,
        }
    }

    /// Two RoceHosts connected back to back by hand, with a filter deciding
    /// which datagrams (by their order of transmission) are lost.
    struct Pair {
        a: RoceHost,
        b: RoceHost,
        now: Ns,
        wire: Vec<(Ns, Datagram)>,
        sent: u64,
    }

    impl Pair {
        fn new(flow: &Flow) -> Self {
            let c = cfg(1);
            let mut a = RoceHost::new(0, &c);
            let mut b = RoceHost::new(1, &c);
            b.expect_flow(flow);
            a.add_flow(0, flow);
            Pair {
                a,
                b,
                now: 0,
                wire: Vec::new(),
                sent: 0,
            }
        }

        /// Runs until nothing is left to do or `until`; `lose(n, d)` drops the
        /// n-th datagram sent.
        fn run(&mut self, until: Ns, lose: &mut dyn FnMut(u64, &Datagram) -> bool) {
            let delay = 4_000;
            loop {
                let next_wire = self.wire.iter().map(|w| w.0).min();
                let next = [next_wire, self.a.next_wakeup(), self.b.next_wakeup()]
                    .into_iter()
                    .flatten()
                    .min();
                let Some(t) = next else { break };
                if t > until {
                    break;
                }
                self.now = t.max(self.now);
                let mut tx = Vec::new();
                if let Some(pos) = self.wire.iter().position(|w| w.0 == t) {
                    let (_, d) = self.wire.remove(pos);
                    if d.dst == 0 {
                        self.a.on_datagram(self.now, d, &mut tx);
                    } else {
                        self.b.on_datagram(self.now, d, &mut tx);
                    }
                } else if self.a.next_wakeup().is_some_and(|w| w <= t) {
                    self.a.on_wakeup(self.now, &mut tx);
                } else {
                    self.b.on_wakeup(self.now, &mut tx);
                }
                for d in tx {
                    let n = self.sent;
                    self.sent += 1;
                    if !lose(n, &d) {
                        self.wire.push((self.now + delay, d));
                    }
                }
            }
        }
    }

    fn is_data(d: &Datagram) -> bool {
        d.bytes[0] == OP_DATA
    }

    #[test]
    fn go_back_n_recovers_from_a_single_loss() {
        let flow = Flow {
            id: 7,
            src: 0,
            dst: 1,
            bytes: 40 * 8192,
            msg_size: 8192,
            start: 0,
        };
        let mut p = Pair::new(&flow);
        let mut data_n = 0u64;
        p.run(100_000_000, &mut |_, d| {
            if is_data(d) {
                data_n += 1;
                data_n == 10 // lose the 10th data packet, once
            } else {
                false
            }
        });
        assert_eq!(p.b.delivered(7), 40 * 8192);
        assert_eq!(p.a.errors() + p.b.errors(), 0);
        assert_eq!(p.a.c.naks, 1);
        assert!(p.a.c.retransmits >= 1);
        assert_eq!(p.a.c.timeouts, 0);
        // Every packet after the hole up to the window was dropped and resent.
        assert!(p.b.c.dropped_ooo >= 1);
        assert_eq!(p.a.senders[0].una, 80);
    }

    #[test]
    fn tail_loss_recovers_by_timeout() {
        let flow = Flow {
            id: 1,
            src: 0,
            dst: 1,
            bytes: 4 * 4096,
            msg_size: 4096,
            start: 0,
        };
        let mut p = Pair::new(&flow);
        let mut data_n = 0u64;
        p.run(100_000_000, &mut |_, d| {
            if is_data(d) {
                data_n += 1;
                data_n == 4 // the last packet: no later packet to reveal the hole
            } else {
                false
            }
        });
        assert_eq!(p.b.delivered(1), 4 * 4096);
        assert_eq!(p.a.c.timeouts, 1);
        assert_eq!(p.a.errors() + p.b.errors(), 0);
    }

    #[test]
    fn random_loss_delivers_every_message_exactly_once_in_order() {
        let flow = Flow {
            id: 3,
            src: 0,
            dst: 1,
            bytes: 300 * 12_000,
            msg_size: 12_000,
            start: 0,
        };
        let mut p = Pair::new(&flow);
        let mut x = 12345u64;
        p.run(10_000_000_000, &mut |_, _| {
            x = x
                .wrapping_mul(6364136223846793005)
                .wrapping_add(1442695040888963407);
            (x >> 33) % 100 < 5 // 5% of everything, ACKs and NAKs included
        });
        assert_eq!(p.b.delivered(3), 300 * 12_000);
        assert_eq!(p.a.errors() + p.b.errors(), 0);
        assert!(p.a.c.retransmits > 0);
    }

    #[test]
    fn receiver_counts_a_corrupt_sequence_as_error() {
        // A packet at the expected PSN but claiming another message is an integrity error.
        let flow = Flow {
            id: 2,
            src: 0,
            dst: 1,
            bytes: u64::MAX,
            msg_size: 4096,
            start: 0,
        };
        let mut b = RoceHost::new(1, &cfg(1));
        b.expect_flow(&flow);
        let mut bytes = Vec::new();
        put(&mut bytes, OP_DATA, F_LAST, 2, 0, 5, 0);
        let d = Datagram {
            src: 0,
            dst: 1,
            sport: 1,
            wire_len: 100,
            ecn_ce: false,
            bytes,
        };
        let mut tx = Vec::new();
        b.on_datagram(0, d, &mut tx);
        assert_eq!(b.errors(), 1);
    }

    #[test]
    fn cnp_cuts_the_rate_and_it_recovers() {
        let c = cfg(1);
        let line = c.link_bps as f64;
        let flow = Flow {
            id: 9,
            src: 0,
            dst: 1,
            bytes: u64::MAX,
            msg_size: 4096,
            start: 0,
        };
        let mut a = RoceHost::new(0, &c);
        a.add_flow(0, &flow);
        assert_eq!(a.rate_of(9), Some(line));
        let cnp = a.ctrl(0, 1, OP_CNP, 9, 0);
        let mut tx = Vec::new();
        a.on_datagram(1_000, cnp.clone(), &mut tx);
        let r1 = a.rate_of(9).unwrap();
        assert!((r1 - line / 2.0).abs() < 1.0, "alpha=1 halves: {r1}");
        a.on_datagram(2_000, cnp, &mut tx);
        let r2 = a.rate_of(9).unwrap();
        assert!(r2 < r1 && r2 > r1 * 0.45, "{r2}");
        // With no more CNPs the timers bring it back to line rate.
        let mut now = 2_000;
        while now < 5_000_000 {
            now += 10_000;
            a.on_wakeup(now, &mut tx);
        }
        // on_wakeup only ticks DCQCN through sending; force a tick.
        let s = &mut a.senders[0];
        RoceHost::dcqcn_tick(s, now, line);
        assert_eq!(s.rc, line);
    }

    #[test]
    fn pacing_follows_the_rate() {
        // After a cut to half rate the sender's packets are spaced twice as far.
        let mut c = cfg(1);
        c.base_rtt_ns = 1_000_000; // a big window, so pacing alone limits
        let flow = Flow {
            id: 4,
            src: 0,
            dst: 1,
            bytes: u64::MAX,
            msg_size: 4096,
            start: 0,
        };
        let mut a = RoceHost::new(0, &c);
        a.add_flow(0, &flow);
        let mut tx = Vec::new();
        a.on_datagram(0, a.ctrl(0, 1, OP_CNP, 4, 0), &mut tx);
        let mut times = Vec::new();
        let mut now = 0;
        while times.len() < 5 {
            now = a.next_wakeup().unwrap();
            a.on_wakeup(now, &mut tx);
            for _ in tx.drain(..) {
                times.push(now);
            }
        }
        let gap = times[4] - times[3];
        let wire = 66 + BTH + ICRC + 4096;
        assert_eq!(gap, ser_ns(wire, c.link_bps / 2), "{times:?} {now}");
    }

    #[test]
    fn through_the_fabric_with_congestion_every_message_arrives() {
        // 4 senders into one receiver over the simulated fabric: CE marks,
        // CNPs, maybe drops; everything must still arrive exactly once.
        let fc = FabricConfig {
            hosts: 16,
            planes: 2,
            drop_limit: 64 * 1024,
            ecn_k: 16 * 1024,
            ..Default::default()
        };
        let fabric = Fabric::new(fc);
        let mut c = cfg(2);
        c.hosts = 16;
        let eps = (0..16).map(|h| make(Kind::Roce, h, &c).unwrap()).collect();
        let mut sim = Sim::new(fabric, eps, 5);
        for i in 0..4u32 {
            sim.add_flow(Flow {
                id: i,
                src: 9 + i,
                dst: 0,
                bytes: 200 * 8192,
                msg_size: 8192,
                start: i as u64 * 100,
            });
        }
        sim.run_until(200_000_000);
        for i in 0..4 {
            assert_eq!(sim.delivered(i), 200 * 8192, "flow {i}");
        }
        assert_eq!(sim.errors(), 0);
        let cnps: u64 = sim.endpoints.iter().map(|e| e.counters()[4].1).sum();
        assert!(cnps > 0, "the shared downlink must have marked");
    }
}
