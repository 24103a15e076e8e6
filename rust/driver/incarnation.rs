// SPDX-License-Identifier: GPL-2.0

//! The peer's incarnation, as its queue pairs see it: the connection's setup
//! for it (the epochs and initial PSNs of the handshake, and this driver's
//! own tuning: paths, reorder window, ACK policy; `shared.rs` uses it for a
//! new connection), a look at what waits on a silent peer (and at Reads and
//! atomics a live peer never answers), and what a hello from a new
//! incarnation does to the queue pairs. The rules of liveness and restarts
//! live in `transport::session`; `peer.rs`'s pump and arrivals call these
//! under the peer lock. Safe Rust only.

use super::{
    counters::bump,
    rd_atomic::Initiator,
    state::{Conn, Peer, PeerInner, PATHS},
};
use crate::abstractions::{
    timer::now_ns,
    trace::PeerTrace,
    types::{IpAddr, WcStatus},
};
use crate::transport::{
    conn::{Config, Connection},
    session::{patience_ns, HelloOutcome, Session},
};
use kernel::{prelude::*, sync::atomic::Relaxed};

/// The paths of new connections: the `paths` module parameter, within 1..=PATHS.
pub(crate) fn paths() -> u16 {
    (*crate::module_parameters::paths.value()).clamp(1, PATHS as u32) as u16
}

/// A connection with nothing in it, what a peer connection starts (and
/// restarts) from.
pub(super) static EMPTY_CONN: Conn = Connection::EMPTY;

/// The connection's setup for session `s` with host `ip`.
pub(super) fn conn_config(s: &Session, ip: &IpAddr, mtu: u32) -> Config {
    let mut cfg = Config::new(0, 0, paths(), mtu.clamp(256, 4096) as u16);
    // The ids are the epochs; the initial PSNs are random, exchanged in the
    // hellos: a sender who does not see the traffic has to guess a
    // 256-packet window of a path's 2^32 PSNs as well as the 32-bit epoch.
    s.configure(&mut cfg);
    cfg.port_seed = ip.0.chunks_exact(4).fold(s.epoch().rotate_left(8), |h, w| {
        h ^ u32::from_ne_bytes([w[0], w[1], w[2], w[3]])
    });
    // Each path leaves this host in order (one sending context, see
    // `Peer::pump`), so a hole followed by 8 later packets is taken for a
    // loss; on a fabric that reorders within a path the receiver reports the
    // duplicates those resends make and the connection allows more (up to
    // 128).
    cfg.reorder_window = 8;
    // Scheduling delays of a few milliseconds happen (virtual machines):
    // a path is probed after 2 ms without an answer at the earliest, and
    // failed at its second expiry if other paths show the peer answering,
    // else at its fourth (`FAIL_BLIND_AFTER_EXPIRIES`).
    cfg.probe_floor_us = 2_000;
    // Losses do not shrink windows (on a lossy fabric they are rarely
    // congestion), so without ECN marks on the way a window would grow until
    // the receiving CPU's input backlog (netdev_max_backlog, 1000 packets on
    // veth and loopback) drops. 256 packets stay well within it.
    cfg.max_window = 256;
    // An ACK for every 8th packet of a path, at once when the sender asks
    // (the end of its data, the path's window is full, or its pacer holds
    // the next packet longer than the ACK delay), when the path's
    // last hole closes, on a CE mark or a duplicate, on every path that
    // owes one when the sender's queue runs dry (DRY), and otherwise within
    // 2 ms. Each ACK is a datagram both hosts pay for in full: acknowledging
    // every packet (as this module did) made half of all datagrams ACKs.
    // The delay is also added to every probe timer (a path's ACK may wait
    // that long): at 500 us, Debian's kernel timed out 53-136 probes per
    // round of four bench points (lossless Write, Send, Write at 1% loss,
    // latency) against 0-27 at 2 ms, where lossless Write moved 14-15%
    // more bytes; DRY keeps the tails of the last message queued from
    // waiting for the delay (Documentation/performance.md, "DRY and a 2 ms
    // ACK delay").
    cfg.ack_every = 8;
    cfg.ack_delay_ns = 2_000_000;
    cfg
}

impl Peer {
    /// Fails the queue pairs waiting on a peer that has been silent for
    /// longer than each of them allows (verbs' "transport retry counter
    /// exceeded"), and a QP whose delivered Read or atomic has waited that
    /// long for its answer. Each QP is measured against its own patience:
    /// one that asks little fails alone. Runs when the session says a look
    /// is due (it visits every QP of the peer); `silent`: how long the peer
    /// has been silent.
    pub(super) fn check_alive(&self, ps: &mut PeerInner, now: u64, silent: u64) {
        let PeerInner {
            conn,
            streams,
            session,
            answered_at,
            answered_after,
            ..
        } = ps;
        let mut waiting = false;
        let mut gave_up = false;
        let mut failed = 0u32;
        for s in streams.iter() {
            let mut st = s.qp.st.lock();
            if st.sq.is_empty() && st.owed.is_empty() {
                continue;
            }
            let Some(p) = patience_ns(st.timeout, st.retry_cnt) else {
                waiting = true;
                continue;
            };
            // A live peer that never answers a delivered Read or atomic
            // (its region went away under it, its QP failed, a forged
            // packet took the answer's place) fails that request, as a
            // silent peer would, instead of leaving it waiting for ever.
            // The peer answers in the order requests reached it: while it
            // answers requests that may have reached it before this one,
            // the clock waits; from when it answers one handed to the
            // connection after this one was delivered (which reached it
            // later, whatever order the ACKs told), this one was passed
            // over and the clock runs.
            let unanswered = st.sq.first_mut().is_some_and(|e| {
                if e.gone {
                    return now.saturating_sub(e.delivered_at) >= p;
                }
                if e.done != Some(None) || e.resp.is_none() || e.resp_done {
                    return false;
                }
                if e.passed_at == 0 && *answered_after > e.delivered_at {
                    e.passed_at = now;
                }
                let since = if e.passed_at != 0 {
                    e.passed_at
                } else {
                    e.delivered_at.max(*answered_at)
                };
                now.saturating_sub(since) >= p
            });
            if silent >= p || unanswered {
                gave_up |= silent >= p;
                failed = failed.saturating_add(1);
                if s.qp.fail_first(&mut st, WcStatus::RetryExcErr) {
                    bump(&self.dev.counters.retry_exceeded);
                }
                s.qp.to_error(&mut st, conn);
            } else {
                waiting = true;
            }
        }
        // Only QPs still waiting keep the silence clock: once those that
        // waited gave up, a request posted next gets its own patience (in
        // CI a Send posted 100 ms after a Read failed for a 10 s silence
        // was failed for the same silence before it could be answered).
        session.set_waiting(now, waiting);
        if gave_up {
            bump(&self.dev.counters.silences);
            let ms = u32::try_from(silent / 1_000_000).unwrap_or(u32::MAX);
            PeerTrace { peer: &self.ip }.peer_silence(ms, failed);
            pr_info!(
                "{}: peer {} silent for {} ms: queue pairs that allow less fail (retry exceeded)\n",
                self.dev.name(),
                self.ip,
                silent / 1_000_000
            );
        }
    }

    /// Handles a hello: adopts the peer's epoch; if the peer is a new
    /// incarnation and data flowed with the old one, starts the connection
    /// again under our next epoch. Queue pairs the old incarnation answered
    /// fail (their peer QPs are gone); the others never reached it (their
    /// packets named an epoch the peer no longer has) and start again on the
    /// new connection, so that a queue pair set up against the peer's new
    /// incarnation while its hello was on the way loses nothing.
    pub(super) fn on_hello(
        &self,
        ps: &mut PeerInner,
        from: u32,
        isn: u32,
        to: u32,
        flags: u8,
        sport: u16,
    ) {
        let mtu = u32::from(ps.conn.config().max_payload);
        match ps.session.on_hello(from, isn, to, flags, sport, now_ns()) {
            HelloOutcome::Nothing => {}
            HelloOutcome::Rekey => ps.conn.configure(conn_config(&ps.session, &self.ip, mtu)),
            HelloOutcome::Reset => {
                bump(&self.dev.counters.restarts);
                let qps = u32::try_from(ps.streams.len()).unwrap_or(u32::MAX);
                PeerTrace { peer: &self.ip }.peer_restart(qps);
                pr_info!(
                    "{}: peer {} restarted: the queue pairs it answered fail\n",
                    self.dev.name(),
                    self.ip
                );
                let PeerInner { conn, streams, .. } = ps;
                for s in streams.iter() {
                    let mut st = s.qp.st.lock();
                    if st.proven {
                        if s.qp.fail_first(&mut st, WcStatus::RetryExcErr) {
                            bump(&self.dev.counters.retry_exceeded);
                        }
                        s.qp.to_error(&mut st, conn);
                    } else {
                        // Sent again to the new incarnation, as new: a "no
                        // queue pair" from the old one no longer counts.
                        for e in st.sq.iter_mut() {
                            e.posted = false;
                            e.done = None;
                            e.gone = false;
                            e.delivered_at = 0;
                            e.passed_at = 0;
                        }
                        // Nothing of it was answered (it is not proven)
                        // and nothing is posted now: its Reads and atomics
                        // are counted again when they go, or a fence and
                        // `max_rd_atomic` would wait for answers that were
                        // counted twice.
                        st.rd = Initiator::default();
                        self.wake(&s.qp);
                    }
                }
                // Its counts stay in the device's (under this lock, so that
                // a reader sees them either here or there).
                self.dev.counters.retire(ps.conn.stats());
                *ps.conn = EMPTY_CONN;
                ps.conn.configure(conn_config(&ps.session, &self.ip, mtu));
                self.epoch.store(ps.session.epoch(), Relaxed);
            }
        }
    }
}
