// SPDX-License-Identifier: GPL-2.0

//! The device's port counters (`rdma statistic show link DEV/1`, sysfs
//! `ports/1/hw_counters/`): what its peer connections counted (the live ones
//! read when asked, by `Shared::port_counters`; those gone folded into
//! `retired` when they went), and the events the device counts itself.
//! Every name is explained in Documentation/observability.md. Safe Rust
//! only.

use crate::abstractions::{sync::SpinLockBh, types::CounterDesc};
use crate::transport::stats::{Stats, DROP_REASONS, REFUSALS};
use kernel::{
    prelude::*,
    sync::atomic::{Atomic as KAtomic, Relaxed},
};

/// The number of port counters: the events below, then one per drop
/// reason, then one per refusal, then the UD QPs' datagrams.
const N: usize = EVENTS + DROP_REASONS + REFUSALS + DATAGRAMS;

/// The counters of UD datagrams, last.
const DATAGRAMS: usize = 8;

/// The counters before the drop reasons.
const EVENTS: usize = 21;

/// The port counters' names, in the order of [`values`].
pub(crate) const PORT_COUNTERS: &[CounterDesc; N] = &[
    CounterDesc::new(c"sent_data_pkts"),
    CounterDesc::new(c"resent_pkts"),
    CounterDesc::new(c"spurious_resends"),
    CounterDesc::new(c"relocated_pkts"),
    CounterDesc::new(c"path_moves"),
    CounterDesc::new(c"retransmit_timeouts"),
    CounterDesc::new(c"sent_acks"),
    CounterDesc::new(c"sent_naks"),
    CounterDesc::new(c"rcvd_data_pkts"),
    CounterDesc::new(c"duplicate_pkts"),
    CounterDesc::new(c"rcvd_acks"),
    CounterDesc::new(c"rcvd_naks"),
    CounterDesc::new(c"ecn_marks_echoed"),
    CounterDesc::new(c"rcvd_dropped"),
    CounterDesc::new(c"hellos_sent"),
    CounterDesc::new(c"peer_restarts"),
    CounterDesc::new(c"peer_silences"),
    CounterDesc::new(c"retry_exceeded_err"),
    CounterDesc::new(c"peer_connections"),
    CounterDesc::new(c"link_downed"),
    CounterDesc::new(c"rnr_waits"),
    // One per drop reason, in the order of `transport::stats::DropReason::ALL`
    // (KUnit `metaroce_counters` checks).
    CounterDesc::new(c"drop_truncated"),
    CounterDesc::new(c"drop_version"),
    CounterDesc::new(c"drop_packet_type"),
    CounterDesc::new(c"drop_opcode"),
    CounterDesc::new(c"drop_nak_code"),
    CounterDesc::new(c"drop_flags"),
    CounterDesc::new(c"drop_reserved"),
    CounterDesc::new(c"drop_payload_length"),
    CounterDesc::new(c"drop_bounds"),
    CounterDesc::new(c"drop_connection"),
    CounterDesc::new(c"drop_path"),
    CounterDesc::new(c"drop_window"),
    CounterDesc::new(c"drop_ack"),
    CounterDesc::new(c"drop_nak"),
    CounterDesc::new(c"drop_hello"),
    // One per refusal (NAK code 1 to 5).
    CounterDesc::new(c"refused_remote_access"),
    CounterDesc::new(c"refused_invalid_request"),
    CounterDesc::new(c"refused_rnr"),
    CounterDesc::new(c"refused_remote_operation"),
    CounterDesc::new(c"refused_no_qp"),
    // UD datagrams (ud.rs).
    CounterDesc::new(c"ud_sent_pkts"),
    CounterDesc::new(c"ud_send_errors"),
    CounterDesc::new(c"ud_rcvd_pkts"),
    CounterDesc::new(c"ud_drop_malformed"),
    CounterDesc::new(c"ud_drop_qp_state"),
    CounterDesc::new(c"ud_drop_qkey"),
    CounterDesc::new(c"ud_drop_no_receive"),
    CounterDesc::new(c"ud_drop_length"),
];

/// The counts of connections that were reset or dropped, and how many times
/// that happened (a reader that saw it change while it summed starts again,
/// so that no counter is seen to go back).
struct Retired {
    stats: Stats,
    generation: u64,
}

/// What the device counts itself, and the connections' counts of those that
/// are gone.
pub(crate) struct Counters {
    /// A leaf lock.
    retired: Pin<KBox<SpinLockBh<Retired>>>,
    pub(super) hellos: KAtomic<u64>,
    pub(super) restarts: KAtomic<u64>,
    pub(super) silences: KAtomic<u64>,
    pub(super) retry_exceeded: KAtomic<u64>,
    pub(super) link_downed: KAtomic<u64>,
    /// UD datagrams, in the order of their names above.
    pub(super) ud: UdCounters,
}

/// What the device counts of UD datagrams.
pub(super) struct UdCounters {
    /// Sent.
    pub(super) sent: KAtomic<u64>,
    /// Not sent: no route, no memory, the device going away.
    pub(super) send_errors: KAtomic<u64>,
    /// Received into a receive.
    pub(super) rcvd: KAtomic<u64>,
    /// Dropped: not a valid datagram.
    pub(super) malformed: KAtomic<u64>,
    /// Dropped: the QP is not ready to receive (RTR or RTS).
    pub(super) qp_state: KAtomic<u64>,
    /// Dropped: the Q_Key is not the QP's.
    pub(super) qkey: KAtomic<u64>,
    /// Dropped: no receive posted.
    pub(super) no_receive: KAtomic<u64>,
    /// Dropped: the receive is too small for the GRH and the message.
    pub(super) length: KAtomic<u64>,
}

impl UdCounters {
    fn new() -> Self {
        Self {
            sent: KAtomic::new(0),
            send_errors: KAtomic::new(0),
            rcvd: KAtomic::new(0),
            malformed: KAtomic::new(0),
            qp_state: KAtomic::new(0),
            qkey: KAtomic::new(0),
            no_receive: KAtomic::new(0),
            length: KAtomic::new(0),
        }
    }

    fn values(&self) -> [u64; DATAGRAMS] {
        [
            &self.sent,
            &self.send_errors,
            &self.rcvd,
            &self.malformed,
            &self.qp_state,
            &self.qkey,
            &self.no_receive,
            &self.length,
        ]
        .map(|c| c.load(Relaxed))
    }
}

/// Counts one event.
pub(super) fn bump(c: &KAtomic<u64>) {
    c.fetch_add(1, Relaxed);
}

impl Counters {
    pub(super) fn new() -> Result<Self> {
        Ok(Self {
            retired: KBox::pin_init(
                crate::new_spinlock_bh!(
                    Retired {
                        stats: Stats::EMPTY,
                        generation: 0,
                    },
                    "metaroce_retired"
                ),
                GFP_KERNEL,
            )?,
            hellos: KAtomic::new(0),
            restarts: KAtomic::new(0),
            silences: KAtomic::new(0),
            retry_exceeded: KAtomic::new(0),
            link_downed: KAtomic::new(0),
            ud: UdCounters::new(),
        })
    }

    /// A connection's counts, before it is reset or dropped (under its
    /// peer's lock, so that a reader sees the counts in one place or the
    /// other).
    pub(super) fn retire(&self, s: &Stats) {
        let mut r = self.retired.lock();
        r.stats.add(s);
        r.generation = r.generation.wrapping_add(1);
    }

    fn retired(&self) -> (Stats, u64) {
        let r = self.retired.lock();
        (r.stats, r.generation)
    }
}

/// The values of [`PORT_COUNTERS`]: the connections' `total`, the device's
/// own events and its number of connections.
fn values(t: &Stats, c: &Counters, peers: usize) -> [u64; N] {
    let events: [u64; EVENTS] = [
        t.tx_data,
        t.retransmits,
        t.spurious,
        t.relocations,
        t.path_moves,
        t.timeouts,
        t.tx_acks,
        t.tx_naks,
        t.rx_data,
        t.rx_duplicates,
        t.rx_acks,
        t.rx_naks,
        t.ce_echoed,
        t.rx_errors,
        c.hellos.load(Relaxed),
        c.restarts.load(Relaxed),
        c.silences.load(Relaxed),
        c.retry_exceeded.load(Relaxed),
        peers as u64,
        c.link_downed.load(Relaxed),
        t.rnr_waits,
    ];
    let mut v = [0; N];
    let all = Iterator::chain(events.iter(), t.drops.iter());
    let all = Iterator::chain(all, t.refused.iter());
    let ud = c.ud.values();
    let all = Iterator::chain(all, ud.iter());
    for (o, x) in v.iter_mut().zip(all) {
        *o = *x;
    }
    v
}

impl Counters {
    /// Fills `out` (in the order of [`PORT_COUNTERS`]) with the retired
    /// counts plus those `live` adds (the live connections', each read under
    /// its peer's lock), and `peers`, the number of connections.
    pub(super) fn fill(&self, out: &mut [u64], peers: usize, mut live: impl FnMut(&mut Stats)) {
        // A connection retired while the sum was taken (a restart, or an
        // eviction, which retires before the connection leaves the table)
        // may be counted twice or missed: then the sum is taken again, a
        // few times at most (under a storm of restarts a sum may be off by a
        // connection; the next read is right again).
        let mut total = Stats::EMPTY;
        for _ in 0..4 {
            let (retired, generation) = self.retired();
            total = retired;
            live(&mut total);
            if self.retired().1 == generation {
                break;
            }
        }
        let v = values(&total, self, peers);
        for (o, v) in out.iter_mut().zip(v.iter()) {
            *o = *v;
        }
    }
}

#[kunit_tests(metaroce_counters)]
mod tests {
    use super::{EVENTS, PORT_COUNTERS};
    use crate::transport::stats::DropReason;

    /// The drop counters are named after the transport's reasons, in its
    /// order.
    #[test]
    fn drop_counters_follow_the_transport() {
        for (i, r) in DropReason::ALL.iter().enumerate() {
            assert_eq!(*r as usize, i);
            let d = PORT_COUNTERS[EVENTS + i].name();
            assert_eq!(d.get(..5), Some(&b"drop_"[..]));
            assert_eq!(d.get(5..), Some(r.name().as_bytes()));
        }
    }
}
