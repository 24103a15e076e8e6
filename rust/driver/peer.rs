// SPDX-License-Identifier: GPL-2.0

//! A device's connection to one peer host (`Peer`): the pump that drives the
//! transport's session and connection (hellos, liveness, the receiver's fair
//! share, what the connection has to send), lets every queue pair on it
//! post, and completes what is over; the arrival of its datagrams; its
//! timer. The connection's setup, and what a peer's silence or restart does
//! to its queue pairs, are in `incarnation.rs`. The rules of all of these live
//! in `transport::session`; here they meet the queue pairs. Safe Rust only.

use super::{
    counters::bump,
    requester::{gather, sq_index},
    responder::gather_response,
    state::{Peer, PeerInner, PeerNode, QpShared, Shared, PATHS},
};
use crate::abstractions::{
    net::{RouteCache, RxPacket},
    timer::{now_ns, TimerHandler},
    trace::PeerTrace,
    types::IpAddr,
};
use crate::transport::{
    conn::{Received, Transmit},
    framing::TRANSPORT_HEADER_MAX,
    trace::TraceEvent,
    wire::{self, NakCode, Opcode, Packet, PacketType},
};
use kernel::{
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

/// The receiving capacity a device shares among the peers sending to it, in
/// kbit/s as the rate hint carries it (0: no hint): the `capacity_mbps`
/// module parameter when set, else the net device's link speed `link_mbps`
/// (veth reports 10000 whatever carries it: set the parameter to what the
/// bottleneck really is). Both are Mbit/s; a u32 of kbit/s reaches 4.29
/// Tbit/s, beyond which it saturates.
pub(crate) fn capacity(link_mbps: Option<u32>) -> u32 {
    let mbps = match *crate::module_parameters::capacity_mbps.value() {
        0 => link_mbps.unwrap_or(0),
        set => set,
    };
    mbps.saturating_mul(1000)
}

/// Peer hosts a device keeps connections to.
pub(super) const MAX_PEERS: usize = 256;

impl Shared {
    /// Sends one datagram to `dest` through the device's port: the way out of
    /// every peer connection. `route` caches the route of the datagram's
    /// path (none for a datagram outside the paths).
    fn send(
        &self,
        dest: IpAddr,
        sport: u16,
        hdr: &[u8],
        len: usize,
        fill: impl FnOnce(&mut [u8]) -> Result,
        route: Option<&mut RouteCache>,
    ) {
        let port = self.port.lock().clone();
        if let Some(p) = port {
            // A datagram that cannot be sent is a loss; the transport recovers.
            let _ = p.send(dest, self.ifindex, sport, hdr, len, fill, route);
        }
    }
}

impl PeerInner {
    /// The local QP whose peer QP is `dest` (it sends on `dest`'s streams).
    fn by_dest(&self, dest: u32) -> Option<Arc<QpShared>> {
        self.by_dest.get(&dest).cloned()
    }

    /// The route cache of `t`'s flow: our paths' first, then those of the
    /// peer's paths (`ROUTES`).
    fn route_cache(&mut self, t: &Transmit) -> Option<&mut RouteCache> {
        let i = usize::from(t.path) + if t.reverse { PATHS } else { 0 };
        self.routes.get_mut(i)
    }

    /// Lets go of every cached route (the connection died, or its
    /// namespace is going away).
    pub(super) fn forget_routes(&mut self) {
        self.routes.iter_mut().for_each(RouteCache::clear);
    }
}

impl Peer {
    /// Whether nothing was in flight at the last pump.
    pub(super) fn idle(&self) -> bool {
        self.in_flight.load(Relaxed) == 0
    }

    /// Logs what the connection did, when it had traffic (the device's
    /// totals are in `rdma statistic`, counters.rs).
    pub(super) fn log_stats(&self, ps: &PeerInner) {
        let c = ps.conn.stats();
        if c.tx_data == 0 && c.rx_data == 0 {
            return;
        }
        pr_info!(
            "{}: peer {}: sent {} data, {} resent ({} spurious), {} moved, {} path moves, {} timeouts ({} deferred), {} ACKs; received {} data, {} duplicates, {} CE echoed, {} dropped\n",
            self.dev.name(),
            self.ip,
            c.tx_data, c.retransmits, c.spurious, c.relocations, c.path_moves, c.timeouts, c.deferred_probes, c.tx_acks,
            c.rx_data, c.rx_duplicates, c.ce_echoed, c.rx_errors
        );
    }

    /// Sends the hellos the session has due (replies, challenges, our own
    /// while the handshake is incomplete).
    fn send_hellos(&self, ps: &mut PeerInner, now: u64) {
        let mut buf = [0u8; 32];
        // At most a challenge, a reply (an answer: twice) and one of our
        // own.
        for _ in 0..4 {
            // Keepalives try more than one route (one that cannot arrive
            // would take a live peer for dead): the session names the port.
            let Some((n, sport)) = ps.session.poll_hello(now, &ps.conn, &mut buf) else {
                break;
            };
            if let Some(h) = buf.get(..n) {
                bump(&self.dev.counters.hellos);
                self.dev.send(self.ip, sport, h, 0, |_| Ok(()), None);
            }
        }
    }

    /// The receiver's fair share: a peer that starts or stops sending to us
    /// moves the device's count of senders, and the connection's hint
    /// follows the count (announced at once when it changed; the other
    /// senders' connections follow at their next packet).
    fn share(&self, ps: &mut PeerInner, now: u64) {
        if ps.session.poll_quiet(now) {
            self.dev.senders.fetch_sub(1, Relaxed);
        }
        let senders = self.dev.senders.load(Relaxed);
        let capacity = self.dev.capacity.load(Relaxed);
        ps.session.share(&mut ps.conn, capacity, senders);
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
    pub(super) fn pump(&self, timer: &PeerNode, ps: &mut PeerInner, data: bool) {
        if ps.dead {
            return;
        }
        let now = now_ns();
        if let Some(silent) = ps.session.poll_liveness(now) {
            self.check_alive(ps, now, silent);
        }
        self.share(ps, now);
        self.send_hellos(ps, now);
        self.unanswered.store(ps.session.unanswered(), Relaxed);
        let mut kicked = false;
        if ps.session.ready() {
            // A second round when completions made room for queued requests.
            for _ in 0..2 {
                if !self.pump_once(ps, data) {
                    break;
                }
            }
            if !data && ps.conn.wants_to_send() {
                timer.kick();
                kicked = true;
            }
            self.in_flight.store(ps.conn.outstanding(), Relaxed);
        }
        // Once the worker is kicked, it takes the pacing slot: a slot
        // already due (only the worker's data moves it) would make the timer
        // fire every microsecond, each time taking this lock and pumping,
        // until the worker ran (under load, thousands of times per packet).
        // The other deadlines (ACKs owed, probes, the session's) stay armed.
        let conn_next = if kicked {
            ps.conn.next_timeout_but_pacer()
        } else {
            ps.conn.next_timeout()
        };
        if let Some(at) = ps.session.next_deadline(now, conn_next) {
            timer.start(at.saturating_sub(now_ns()).max(1_000));
        }
        self.trace(ps);
    }

    /// Hands the connection's recorded events to the tracepoints.
    fn trace(&self, ps: &mut PeerInner) {
        let t = PeerTrace { peer: &self.ip };
        while let Some(e) = ps.conn.poll_trace() {
            match e {
                TraceEvent::Resend { path, psn, sport } => t.resend(path, psn, sport),
                TraceEvent::Relocate { from, psn, to } => t.relocate(from, psn, to),
                TraceEvent::PathMoved { path, from, to } => t.path_moved(path, from, to),
                TraceEvent::Ecn {
                    path,
                    marks,
                    path_window,
                    conn_window,
                } => t.ecn(path, marks, path_window, conn_window),
                TraceEvent::RateHint { from, to } => t.rate_hint(from, to),
            }
        }
    }

    /// One round of `pump`; returns whether another may post more.
    fn pump_once(&self, ps: &mut PeerInner, data: bool) -> bool {
        if self.rescan.xchg(false, Relaxed) {
            for s in ps.streams.iter() {
                s.qp.queued.store(false, Relaxed);
                self.wake(&s.qp);
            }
        }
        // The QPs with work post in turn: one that could not post all it
        // has goes to the back of the ring, so that no QP keeps the
        // connection's message slots to itself. Only QPs with work are
        // visited, and none once every slot is held: the rest keep their
        // place in the ring until a completion frees one (and `pump` runs
        // another round), so while the table is full a pump costs the same
        // with 1,024 QPs waiting as with one. (Local operations need no
        // slot: they run wherever the requests before them end, and in
        // `post_send`: `reap_and_run`.)
        let rounds = self.ready.lock().len();
        for _ in 0..rounds {
            if ps.conn.messages_full() {
                break;
            }
            let Some(qp) = self.ready.lock().pop() else {
                break;
            };
            qp.queued.store(false, Relaxed);
            let mut st = qp.st.lock();
            // A QP that left this connection since it was queued is not
            // ours to post for.
            if st.dead
                || !st
                    .peer
                    .as_deref()
                    .is_some_and(|t| core::ptr::eq(&**t, self))
            {
                continue;
            }
            let mut posted = QpShared::post_responses(&mut st, &mut ps.conn)
                | QpShared::post_queued(&mut st, &mut ps.conn);
            // A local operation runs at the head of the queue and completes
            // at once, under this lock; what follows it goes then.
            while qp.run_local(&mut st) {
                qp.reap(&mut st, &mut ps.conn);
                posted |= QpShared::post_queued(&mut st, &mut ps.conn);
            }
            if posted {
                ps.session.on_posted();
            }
            let left = st.has_postable();
            drop(st);
            if left {
                self.wake(&qp);
            }
        }
        let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
        let tables = &self.dev.tables;
        // Bounds the due-deadline rounds, should one not move its deadline.
        let mut rounds = 0;
        loop {
            // Each round may record a resend or a relocation: handed on at
            // once, so that a burst does not overrun the connection's ring.
            self.trace(ps);
            // The clock moves while packets are built and sent: their
            // timestamps (RTT samples) and the pacer's slots read it fresh.
            let now = now_ns();
            let t = if data {
                ps.conn.poll_transmit(now, &mut hdr)
            } else {
                ps.conn.poll_control(&mut hdr)
            };
            if let Some(t) = t {
                let Some(h) = hdr.get(..t.len) else { break };
                let Some(seg) = t.payload else {
                    self.dev
                        .send(self.ip, t.sport, h, 0, |_| Ok(()), ps.route_cache(&t));
                    continue;
                };
                // The packet's stream names the peer's QP; ours is its peer.
                let Some(qp) = ps.by_dest(seg.stream >> 1) else {
                    continue;
                };
                let st = qp.st.lock();
                let pd = qp.pd;
                let mut unreadable = false;
                if seg.stream & 1 == 1 {
                    let Some(o) = st.owed.iter().find(|o| o.msn == seg.msn) else {
                        continue;
                    };
                    let access = st.access;
                    self.dev.send(
                        self.ip,
                        t.sport,
                        h,
                        usize::from(seg.len),
                        |buf| {
                            let r =
                                gather_response(o, pd, access, &tables.lock().mrs, seg.offset, buf);
                            unreadable = r.is_err();
                            r
                        },
                        ps.route_cache(&t),
                    );
                } else {
                    let Some(e) = sq_index(&st.sq, seg.msn).and_then(|i| st.sq.get(i)) else {
                        continue;
                    };
                    self.dev.send(
                        self.ip,
                        t.sport,
                        h,
                        usize::from(seg.len),
                        |buf| {
                            let r = gather(e, pd, &tables.lock().mrs, seg.offset, buf);
                            unreadable = r.is_err();
                            r
                        },
                        ps.route_cache(&t),
                    );
                }
                drop(st);
                if unreadable {
                    // The bytes are gone (the region was deregistered with
                    // the request outstanding): the request fails and its QP
                    // with it, and the transport resends what it had in
                    // flight void, so the paths every QP of this peer shares
                    // do not wait for bytes that cannot come.
                    qp.fail_unreadable(&mut qp.st.lock(), &mut ps.conn, seg.stream, seg.msn);
                }
                continue;
            }
            // Outside the worker, once the connection wants to send, the
            // worker (kicked by `pump`) takes the due deadlines from here:
            // a due pacing slot stays due until data moves it, and would be
            // 64 rounds that change nothing. (The timer pass before this
            // made any due ACK due, and it went out above.)
            if !data && ps.conn.wants_to_send() {
                break;
            }
            // Deadlines already due (an ACK owed now, a pacing slot) are
            // handled here: the kernel's timers may be as coarse as a jiffy.
            match ps.conn.next_timeout() {
                Some(at) if at <= now && rounds < 64 => {
                    rounds += 1;
                    ps.conn.on_timeout(now);
                }
                _ => break,
            }
        }
        // Completions, in order per stream.
        let mut more = false;
        while let Some(c) = ps.conn.poll_event() {
            let Some(qp) = ps.by_dest(c.stream >> 1) else {
                continue;
            };
            let mut st = qp.st.lock();
            // "No queue pair" proves the peer QP is not there.
            let gone = c.error == Some(NakCode::NoQueuePair);
            st.proven |= !gone;
            if c.stream & 1 == 1 {
                st.owed.retain(|o| o.msn != c.msn);
            } else if let Some(e) = sq_index(&st.sq, c.msn)
                .and_then(|i| st.sq.get_mut(i))
                .filter(|e| e.done.is_none() && !e.gone)
            {
                // A request to a QP that is gone stays unfinished until
                // the QP's patience has passed (`check_alive`).
                e.gone = gone;
                e.done = (!gone).then_some(c.error);
                e.delivered_at = now_ns();
                e.passed_at = 0;
            }
            // What is over completes now, in order, and a local operation
            // it lets go runs; room it made lets the QP post more.
            let left = qp.reap_and_run(&mut st, &mut ps.conn);
            drop(st);
            if left {
                self.wake(&qp);
            }
            // The slot it freed may take a waiting QP's request.
            more = true;
        }
        more && self.ready.lock().len() > 0
    }

    /// Handles one datagram from the peer (softirq).
    pub(super) fn receive(&self, timer: &PeerNode, pkt: &RxPacket<'_>) {
        let mut guard = self.st.lock();
        let ps = &mut guard;
        if ps.dead {
            return;
        }
        // Only a hello is decoded here; everything else once, by the
        // connection (which also counts a malformed hello it is handed).
        if wire::peek(pkt.payload).is_some_and(|(t, _)| t == PacketType::Hello) {
            if let Ok(Packet::Hello(h)) = wire::decode(pkt.payload) {
                self.on_hello(ps, h.epoch, h.isn, h.common.conn, h.common.flags, pkt.sport);
                self.pump(timer, ps, false);
                return;
            }
        }
        let ps = &mut **ps;
        let now = now_ns();
        let r = ps.conn.on_datagram(now, pkt.payload, pkt.sport, pkt.ce);
        // It named our epoch: the peer knows it, and it is alive; new data
        // may make it one more sender to share our capacity with.
        let mut joined = false;
        if let Ok(r) = &r {
            if ps.session.on_received(now, r) {
                self.dev.senders.fetch_add(1, Relaxed);
                joined = true;
            }
        }
        if let Ok(Received::Refused(h)) = r {
            // A copy of a packet refused for want of a receive, come again:
            // refused again, with its QP's timer (for a QP gone, the
            // shortest, 10 us: its new copy then meets "no queue pair").
            let timer = ps
                .by_qpn
                .get(&(h.stream >> 1))
                .map_or(1, |qp| qp.st.lock().min_rnr_timer);
            let c = h.common;
            ps.conn
                .rnr_nak(c.path, c.psn, c.timestamp, h.stream, h.msn, timer);
        }
        if let Ok(Received::Data(h, bytes)) = r {
            let (verdict, answered, rnr_timer) = match ps.by_qpn.get(&(h.stream >> 1)).cloned() {
                Some(qp) => {
                    let mut st = qp.st.lock();
                    let v = qp.on_data(&mut st, &mut ps.conn, &h, bytes);
                    let rnr_timer = st.min_rnr_timer;
                    // Answer data placed now (not a late copy of one that
                    // completed, which anyone who saw it could send again):
                    // when its request was handed to the connection. A
                    // request passed over whose own answer is arriving is
                    // being answered: its clock starts again.
                    let answered = (v == Ok(true) && h.opcode == Opcode::ReadResp)
                        .then(|| st.sq.iter_mut().find(|e| e.resp == Some(h.msn)))
                        .flatten()
                        .map(|e| {
                            if e.passed_at != 0 {
                                e.passed_at = now;
                            }
                            e.posted_at
                        });
                    // A Read answer that arrived whole completes its request
                    // (and a local operation behind it runs).
                    qp.reap_and_run(&mut st, &mut ps.conn);
                    let left = st.has_postable();
                    drop(st);
                    if left {
                        self.wake(&qp);
                    }
                    (v, answered, rnr_timer)
                }
                // No such queue pair (any more) on this host: the sender
                // treats it as a peer QP that never answers.
                None => (Err(NakCode::NoQueuePair), None, 0),
            };
            if let Some(posted) = answered {
                ps.answered_at = now;
                ps.answered_after = ps.answered_after.max(posted);
            }
            match verdict {
                // No receive posted: not acknowledged, sent again after
                // the QP's RNR timer (`conn::rnr`).
                Err(NakCode::ReceiverNotReady) => {
                    let c = h.common;
                    ps.conn
                        .not_ready(c.path, c.psn, c.timestamp, h.stream, h.msn, rnr_timer);
                }
                Err(code) => {
                    ps.conn.reject(h.common.path, h.stream, h.msn, code);
                }
                Ok(_) => {}
            }
        }
        self.pump(timer, ps, false);
        if joined {
            // The senders already here hear their smaller share at once
            // (their timers, after this peer's lock is dropped).
            drop(guard);
            self.dev.drive_others(self);
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
