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
