// SPDX-License-Identifier: GPL-2.0

//! The session's own tests: hellos, liveness and the receiver's share.

extern crate std;
use super::super::conn::Config;
use super::super::wire::{decode, Packet};
use super::*;
use std::{vec, vec::Vec};

const MS: u64 = 1_000_000;
type Conn = Connection<4>;
/// The paths hellos take their ports from (none here: `PORT_BASE`).
static NO_PATHS: Conn = Conn::EMPTY;

/// The next hello's length, as `poll_hello` gives it.
fn hello_len(s: &mut Session, now: u64, out: &mut [u8]) -> Option<usize> {
    s.poll_hello(now, &NO_PATHS, out).map(|(n, _)| n)
}

fn deliver(from: &mut Session, to: &mut Session, now: u64) -> Vec<HelloOutcome> {
    let mut out = Vec::new();
    let mut buf = [0u8; 64];
    while let Some(n) = hello_len(from, now, &mut buf) {
        match decode(&buf[..n]) {
            Ok(Packet::Hello(h)) => {
                out.push(to.on_hello(h.epoch, h.isn, h.common.conn, h.common.flags, 0, now))
            }
            other => panic!("not a hello: {other:?}"),
        }
    }
    out
}

fn pair() -> (Session, Session) {
    let mut a = Session::new(100, 7, 0, SessionConfig::DEFAULT);
    let mut b = Session::new(900, 9, 0, SessionConfig::DEFAULT);
    a.set_wanted(0, true);
    b.set_wanted(0, true);
    (a, b)
}

/// Two sessions that met.
fn met() -> (Session, Session) {
    let (mut a, mut b) = pair();
    for t in 0..4 {
        deliver(&mut a, &mut b, t);
        deliver(&mut b, &mut a, t);
    }
    assert!(a.ready() && b.ready());
    (a, b)
}

#[test]
fn two_sessions_meet_and_then_stay_quiet() {
    let (mut a, mut b) = pair();
    let mut t = 0;
    for _ in 0..4 {
        deliver(&mut a, &mut b, t);
        deliver(&mut b, &mut a, t);
        t += MS / 10;
    }
    assert!(a.ready() && b.ready());
    let (sa, sb) = (a.hellos_sent(), b.hellos_sent());
    assert!(sa + sb <= 4, "{sa} + {sb} hellos");
    // Ready: no more hellos, and the timer is the connection's alone.
    assert_eq!(deliver(&mut a, &mut b, t + 10 * HELLO_MAX_NS), vec![]);
    assert_eq!(a.next_deadline(t, None), None);
    assert_eq!(a.next_deadline(t, Some(t + 5)), Some(t + 5));
    // Both ends configure matching connections.
    let (mut ca, mut cb) = (Config::new(0, 0, 1, 1024), Config::new(0, 0, 1, 1024));
    a.configure(&mut ca);
    b.configure(&mut cb);
    assert_eq!((ca.local_id, ca.remote_id), (cb.remote_id, cb.local_id));
    assert_eq!((ca.tx_isn, ca.rx_isn), (cb.rx_isn, cb.tx_isn));
}

#[test]
fn an_unanswered_peer_is_asked_ever_more_rarely_and_then_not_at_all() {
    let mut a = Session::new(5, 5, 0, SessionConfig::DEFAULT);
    a.set_wanted(0, true);
    let mut buf = [0u8; 64];
    let mut t = 0;
    let mut gaps = Vec::new();
    let mut last = 0;
    while a.hellos_sent() < 24 {
        t = a.next_deadline(t, None).unwrap();
        assert!(hello_len(&mut a, t, &mut buf).is_some());
        assert!(
            hello_len(&mut a, t, &mut buf).is_none(),
            "one hello per deadline"
        );
        gaps.push(t - last);
        last = t;
    }
    assert!(gaps.windows(2).all(|w| w[1] >= w[0]), "{gaps:?}");
    assert_eq!(*gaps.last().unwrap(), HELLO_SLOW_NS);
    assert!(gaps[..HELLO_FAST_TRIES as usize]
        .iter()
        .all(|g| *g <= HELLO_MAX_NS));
    assert!(a.unanswered());
    // Nothing wants it any more: no hellos, no timer.
    a.set_wanted(t, false);
    assert_eq!(a.next_deadline(t, None), None);
    assert!(hello_len(&mut a, t + 100 * HELLO_SLOW_NS, &mut buf).is_none());
    // Wanted again: asked again from the start.
    a.set_wanted(t, true);
    assert_eq!(a.next_deadline(t, None), Some(t));
    assert!(hello_len(&mut a, t, &mut buf).is_some());
    assert_eq!(a.next_deadline(t, None), Some(t + HELLO_FIRST_NS));
}

#[test]
fn a_restarted_peer_resets_a_used_session_once() {
    let (mut a, _) = met();
    a.on_posted();
    // B restarts: a new epoch, and its old incarnation stays silent.
    let mut b2 = Session::new(5000, 11, 0, SessionConfig::DEFAULT);
    b2.set_wanted(0, true);
    let first = deliver(&mut b2, &mut a, 10 * MS);
    assert_eq!(
        first,
        vec![HelloOutcome::Nothing],
        "a claim is challenged first"
    );
    let mut buf = [0u8; 64];
    let n = hello_len(&mut a, 10 * MS, &mut buf).expect("a challenge");
    assert!(matches!(decode(&buf[..n]), Ok(Packet::Hello(h)) if h.common.flags != 0));
    let later = 10 * MS + super::super::handshake::RESTART_SILENCE_NS;
    let mut outcomes = Vec::new();
    for k in 0..3 {
        b2.set_wanted(later, true);
        outcomes.extend(deliver(&mut b2, &mut a, later + k));
        outcomes.extend(deliver(&mut a, &mut b2, later + k));
    }
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == HelloOutcome::Reset)
            .count(),
        1,
        "{outcomes:?}"
    );
    assert!(a.ready() && b2.ready());
    assert_ne!(a.epoch(), 100, "our epoch moves on after a reset");
}

#[test]
fn an_answer_leaves_from_the_port_of_the_last_challenge_if_it_is_ours() {
    use super::super::handshake::REPLY_GAP_NS;
    let (mut a, mut b) = met();
    let conn = Conn::new(Config::new(0, 0, 1, 1024));
    fn challenge_from(a: &mut Session, b: &mut Session, sport: u16, now: u64) {
        let mut buf = [0u8; 64];
        b.challenge = true;
        let n = hello_len(b, now, &mut buf).expect("a challenge");
        let Ok(Packet::Hello(h)) = decode(&buf[..n]) else {
            panic!("not a hello");
        };
        a.on_hello(h.epoch, h.isn, h.common.conn, h.common.flags, sport, now);
    }
    let mut out = [0u8; 64];
    let t = 10 * MS;
    challenge_from(&mut a, &mut b, PORT_BASE + 3, t);
    assert_eq!(a.hello_port(&conn), PORT_BASE + 3);
    // Not polled before the next challenge (two reply gaps later), from a
    // port no peer of ours sends from (forged): the answer does not go
    // where the earlier challenge came from either.
    let t = t + 2 * REPLY_GAP_NS;
    challenge_from(&mut a, &mut b, 7, t);
    assert_eq!(
        a.poll_hello(t, &conn, &mut out).map(|(_, p)| p),
        Some(PORT_BASE)
    );
    assert_eq!(a.poll_hello(t, &conn, &mut out), None, "one answer");
    // A challenge from our peer's port, answered from it, and once more
    // from the port we trust (no path proven here: PORT_BASE), at once.
    let t = t + 2 * REPLY_GAP_NS;
    challenge_from(&mut a, &mut b, PORT_BASE + 5, t);
    assert_eq!(
        a.poll_hello(t, &conn, &mut out).map(|(_, p)| p),
        Some(PORT_BASE + 5)
    );
    assert_eq!(a.next_deadline(t, None), Some(t));
    let (n, p) = a.poll_hello(t, &conn, &mut out).expect("again");
    assert_eq!(p, PORT_BASE);
    assert!(
        matches!(decode(&out[..n]), Ok(Packet::Hello(h)) if h.common.flags == 0
        && (h.epoch, h.common.conn) == (a.epoch(), b.epoch()))
    );
    assert_eq!(a.poll_hello(t, &conn, &mut out), None, "twice only");
    // From PORT_BASE itself: once.
    let t = t + 2 * REPLY_GAP_NS;
    challenge_from(&mut a, &mut b, PORT_BASE, t);
    assert!(a.poll_hello(t, &conn, &mut out).is_some());
    assert_eq!(a.poll_hello(t, &conn, &mut out), None, "one answer");
}

#[test]
fn hellos_before_any_data_only_rekey() {
    let (mut a, mut b) = pair();
    let o = deliver(&mut b, &mut a, 0);
    assert_eq!(o, vec![HelloOutcome::Rekey]);
    let mut c = Config::new(0, 0, 1, 1024);
    a.configure(&mut c);
    assert_eq!(c.remote_id, b.epoch());
    assert_eq!(c.rx_isn, 9);
}

#[test]
fn silence_is_measured_only_while_something_waits() {
    let (mut a, _) = pair();
    assert_eq!(a.poll_liveness(0), Some(0));
    a.set_waiting(0, false);
    assert_eq!(a.poll_liveness(ALIVE_CHECK_NS / 2), None);
    // Nothing waited since the last look, however long ago (an idle
    // connection has no timer): no silence, so a request posted after
    // an idle spell is not failed at once.
    assert_eq!(a.poll_liveness(5 * ALIVE_CHECK_NS), Some(0));
    a.set_waiting(5 * ALIVE_CHECK_NS, false);
    a.on_posted();
    let t = 5 * ALIVE_CHECK_NS;
    assert_eq!(
        a.next_deadline(t, None).map(|d| d <= t + ALIVE_CHECK_NS),
        Some(true)
    );
    let s = a.poll_liveness(t + 3 * ALIVE_CHECK_NS).unwrap();
    assert_eq!(s, 3 * ALIVE_CHECK_NS);
    a.set_waiting(t + 3 * ALIVE_CHECK_NS, true);
    a.on_received(t + 4 * ALIVE_CHECK_NS, &Received::Control);
    assert_eq!(
        a.poll_liveness(t + 5 * ALIVE_CHECK_NS),
        Some(ALIVE_CHECK_NS)
    );
}

#[test]
fn patience_follows_the_verbs_attributes() {
    assert_eq!(patience_ns(0, 7), None);
    // perftest's and ibv_rc_pingpong's 14/7 is 0.54 s: raised to 10 s.
    assert_eq!(patience_ns(14, 7), Some(MIN_DEAD_NS));
    assert_eq!(patience_ns(21, 0), Some(MIN_DEAD_NS));
    assert_eq!(patience_ns(22, 0), Some(4096u64 << 22));
    assert_eq!(patience_ns(22, 7), Some((4096u64 << 22) * 8));
    assert!(patience_ns(255, 255).is_some_and(|p| p >= MIN_DEAD_NS));
}

#[test]
fn a_sender_counts_while_it_sends_and_its_share_is_announced() {
    let (mut a, _) = met();
    let mut conn = Conn::new(Config::new(1, 2, 4, 1024));
    let data = Received::Void;
    // Void and control traffic do not make a sender.
    assert!(!a.on_received(0, &data));
    assert!(!a.sending());
    a.share(&mut conn, 10_000_000, 1);
    assert_eq!(conn.rate_hint(), 10_000_000);
    let cfg = SessionConfig::DEFAULT;
    let q = cfg.active_ns;
    assert!(!a.poll_quiet(q * 5));
    a.sending_at = Some(q); // as `on_received` with data would
    assert!(a.sending());
    assert_eq!(a.next_deadline(q, None), Some(2 * q));
    assert!(!a.poll_quiet(2 * q - 1));
    a.share(&mut conn, 10_000_000, 4);
    assert_eq!(conn.rate_hint(), 2_500_000);
    // The same share again changes nothing.
    a.share(&mut conn, 10_000_000, 4);
    assert!(a.poll_quiet(2 * q));
    assert!(!a.poll_quiet(3 * q), "said once");
    assert!(!a.close());
    a.sending_at = Some(4 * q);
    assert!(a.close());
}

#[test]
fn a_sender_paced_at_a_small_share_keeps_counting_between_its_packets() {
    let (mut a, _) = met();
    let mut conn = Conn::new(Config::new(1, 2, 4, 1024));
    let q = SessionConfig::DEFAULT.active_ns;
    // 1 Mbit/s each: a 1,144-byte packet every 9.2 ms, 16 in 146 ms.
    a.share(&mut conn, 8_000, 8);
    a.sending_at = Some(0);
    assert!(!a.poll_quiet(2 * q), "counted for 16 packets");
    assert_eq!(a.next_deadline(0, None), Some(146_432_000));
    assert!(a.poll_quiet(146_432_000));
    // 500 kbit/s each, a share Mbit/s could not carry: twice as long.
    a.share(&mut conn, 4_000, 8);
    assert_eq!(conn.rate_hint(), 500);
    a.sending_at = Some(0);
    assert_eq!(a.next_deadline(0, None), Some(292_864_000));
    assert!(a.poll_quiet(292_864_000));
    // A tiny share: at most MAX_QUIET_NS.
    a.share(&mut conn, 8, 8);
    a.sending_at = Some(0);
    assert_eq!(a.next_deadline(0, None), Some(MAX_QUIET_NS));
    // A large share: the configured time.
    a.share(&mut conn, 10_000_000, 1);
    a.sending_at = Some(0);
    assert!(a.poll_quiet(q));
}
