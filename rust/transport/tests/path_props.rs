// SPDX-License-Identifier: GPL-2.0

//! End to end over one path: a sender and a receiver exchange packets and ACKs
//! over a channel that drops, reorders and duplicates. Every packet must be
//! delivered exactly once and the sender must see everything acknowledged.

use metaroce_transport::path::{Arrival, RecvPath, SendPath};
use metaroce_transport::seq::Bits256;
use proptest::prelude::*;

/// A tiny deterministic generator so that one proptest input drives a whole run.
struct Lcg(u64);

impl Lcg {
    fn next(&mut self) -> u32 {
        self.0 = self
            .0
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        (self.0 >> 33) as u32
    }

    fn chance(&mut self, percent: u32) -> bool {
        self.next() % 100 < percent
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(300))]

    #[test]
    fn exactly_once_over_a_bad_channel(
        seed in any::<u64>(),
        initial in any::<u32>(),
        total in 1u32..2000,
        loss in 0u32..30,
        reorder in 0u32..50,
        dup in 0u32..10,
    ) {
        let mut rng = Lcg(seed);
        let mut s = SendPath::new(initial);
        let mut r = RecvPath::new(initial);
        let mut delivered = std::collections::HashSet::new();
        let mut wire: Vec<u32> = Vec::new();
        let mut acks: Vec<(u32, Bits256)> = Vec::new();
        let mut sent_new = 0u32;
        let mut rounds = 0;
        while !(sent_new == total && s.in_flight() == 0) {
            rounds += 1;
            prop_assert!(rounds < 200_000, "no progress");
            // Send what the window allows.
            while sent_new < total {
                let Some(psn) = s.send() else { break };
                sent_new += 1;
                wire.push(psn);
            }
            // The channel: pick a packet (maybe not the oldest), maybe lose it,
            // maybe deliver it twice.
            if let Some(i) = (!wire.is_empty()).then(|| {
                if rng.chance(reorder) { rng.next() as usize % wire.len() } else { 0 }
            }) {
                let psn = wire.remove(i);
                if !rng.chance(loss) {
                    for _ in 0..(1 + usize::from(rng.chance(dup))) {
                        if r.on_data(psn, false) == Arrival::New {
                            prop_assert!(delivered.insert(psn), "PSN {} delivered twice", psn);
                        }
                    }
                    let (cum, sack, _) = r.take_ack();
                    if !rng.chance(loss) {
                        acks.push((cum, sack));
                    }
                }
            }
            // ACKs arrive, possibly out of order.
            while let Some(j) = (!acks.is_empty()).then(|| rng.next() as usize % acks.len()) {
                let (cum, sack) = acks.remove(j);
                let _ = s.on_ack(cum, &sack);
            }
            // Nothing left on the wire but data outstanding: resend every
            // PSN the scoreboard does not have (the timer's job).
            if wire.is_empty() {
                if let Some(una) = s.oldest_unacked() {
                    wire.extend((0..s.in_flight()).map(|k| una.wrapping_add(k)).filter(|p| !s.is_acked(*p)));
                }
            }
        }
        prop_assert_eq!(delivered.len() as u32, total);
        for k in 0..total {
            prop_assert!(delivered.contains(&initial.wrapping_add(k)));
        }
    }
}

/// A PSN acknowledged by other means (its relocated copy's ACK) counts as
/// acknowledged once: the cumulative point passes it and what was
/// selectively acknowledged above it, and a later ACK saying the same is
/// stale or news only for the others.
#[test]
fn a_psn_acknowledged_without_an_ack_opens_the_window() {
    let mut s = SendPath::new(u32::MAX - 1);
    let psns: Vec<u32> = (0..256).map(|_| s.send().unwrap()).collect();
    assert!(!s.can_send(), "the window is full");
    // Everything but the first arrived (selectively acknowledged).
    let mut sack = Bits256::EMPTY;
    for i in 0..255 {
        sack.set(i);
    }
    let out = s.on_ack(psns[0], &sack).unwrap();
    assert_eq!(out.newly_acked, 255);
    assert!(!s.can_send(), "the first PSN still holds the window");
    assert!(!s.acknowledge(psns[0].wrapping_sub(1)), "before the window");
    assert!(!s.acknowledge(psns[255].wrapping_add(1)), "never sent");
    assert!(s.acknowledge(psns[0]));
    assert!(!s.acknowledge(psns[0]), "only once");
    assert_eq!(s.oldest_unacked(), None, "the cumulative point passed all");
    assert!(s.can_send());
    // The first path's own ACK, arriving late, changes nothing.
    let cum = psns[255].wrapping_add(1);
    assert_eq!(s.on_ack(cum, &Bits256::EMPTY).unwrap().newly_acked, 0);
    // A PSN acknowledged this way above a hole leaves the hole.
    let a = s.send().unwrap();
    let b = s.send().unwrap();
    assert!(s.acknowledge(b));
    assert_eq!(s.oldest_unacked(), Some(a));
    let out = s.on_ack(a.wrapping_add(2), &Bits256::EMPTY).unwrap();
    assert_eq!(out.newly_acked, 1, "only the hole is news");
    // An older ACK whose cumulative point stops at a PSN acknowledged this
    // way (their ACKs crossed) leaves the oldest unacknowledged past it.
    let c = s.send().unwrap();
    let d = s.send().unwrap();
    let e = s.send().unwrap();
    assert!(s.acknowledge(d));
    let out = s.on_ack(d, &Bits256::EMPTY).unwrap();
    assert_eq!(out.newly_acked, 1, "c");
    assert_eq!(s.oldest_unacked(), Some(e), "not d, acknowledged before");
    let _ = c;
}
