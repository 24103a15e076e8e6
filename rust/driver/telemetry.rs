// SPDX-License-Identifier: GPL-2.0

//! Per-peer and per-path telemetry: one debugfs file per device,
//! `/sys/kernel/debug/metaroce/<device>`, read without stopping traffic
//! (each connection is copied out under its lock, then formatted).
//!
//! debugfs, not netlink: this is a diagnostic view for operators and for
//! `tools/viewer` (its fields may grow with the transport), readable by root
//! only; the stable counters are the port counters (`rdma statistic`,
//! counters.rs). The format is one record per line, a keyword then `key
//! value` pairs, described field by field in Documentation/observability.md:
//!
//! ```text
//! device metaroceA peers 1 payload 1408
//! peer 10.0.0.2 state up ...
//! path 0 sport 51234 ...
//! ```
//!
//! Safe Rust only.

use super::state::{PeerNode, Shared, PATHS};
use crate::abstractions::types::IpAddr;
use crate::transport::stats::{DropReason, PathInfo, Stats};
use core::fmt;
use kernel::{
    alloc::KVec,
    prelude::*,
    sync::{atomic::Relaxed, Arc},
};

/// What a debugfs read shows: the device's connections.
pub(crate) struct Telemetry {
    pub(crate) dev: Arc<Shared>,
}

/// One connection as copied out under its lock.
struct PeerView {
    ip: IpAddr,
    ready: bool,
    dead: bool,
    epoch: u32,
    remote: u32,
    qps: usize,
    window: u32,
    in_flight: u32,
    srtt_us: u32,
    pace_kbps: u32,
    hint_kbps: u32,
    trace_lost: u64,
    keepalives: u64,
    silent_max_ms: u64,
    quiet_max_ms: u64,
    stats: Stats,
    /// On the heap (about 1.5 KiB: not on a debug kernel's stack).
    paths: KVec<PathInfo>,
}

fn view(p: &PeerNode) -> Result<PeerView, fmt::Error> {
    // Room for every path before the lock: nothing is allocated under it.
    let mut paths = KVec::with_capacity(PATHS, GFP_KERNEL).map_err(|_| fmt::Error)?;
    let ps = p.st.lock();
    let c = &ps.conn;
    for i in 0..PATHS {
        if let Some(info) = c.path_info(i as u16) {
            // Within the capacity: does not allocate.
            paths.push(info, GFP_ATOMIC).map_err(|_| fmt::Error)?;
        }
    }
    Ok(PeerView {
        ip: p.ip,
        ready: ps.session.ready(),
        dead: ps.dead,
        epoch: ps.session.epoch(),
        remote: ps.session.handshake().remote(),
        qps: ps.streams.len(),
        window: c.window(),
        in_flight: c.outstanding(),
        srtt_us: c.srtt_us(),
        pace_kbps: c.pace_kbps(),
        hint_kbps: c.rate_hint(),
        trace_lost: c.trace_overwritten(),
        keepalives: ps.session.keepalives_sent(),
        silent_max_ms: ps.session.longest_silence() / 1_000_000,
        quiet_max_ms: ps.session.longest_quiet() / 1_000_000,
        stats: *c.stats(),
        paths,
    })
}

/// A path's state word: `up` (proven, healthy), `suspect` (its probe timer
/// expired without progress: no new data goes there), `moved` (on a new
/// source port not yet proven).
fn path_state(p: &PathInfo) -> &'static str {
    if p.expiries > 0 {
        "suspect"
    } else if p.strikes > 0 {
        "moved"
    } else {
        "up"
    }
}

fn write_peer(f: &mut fmt::Formatter<'_>, v: &PeerView) -> fmt::Result {
    let state = if v.dead {
        "dead"
    } else if v.ready {
        "up"
    } else {
        "connecting"
    };
    let s = &v.stats;
    write!(
        f,
        "peer {} state {state} conn {:#010x} peer_conn {:#010x} qps {} window {} in_flight {} srtt_us {} pace_kbps {} hint_kbps {} trace_lost {}",
        v.ip, v.epoch, v.remote, v.qps, v.window, v.in_flight, v.srtt_us, v.pace_kbps, v.hint_kbps,
        v.trace_lost
    )?;
    write!(
        f,
        " sent {} resent {} spurious {} relocated {} moves {} timeouts {} deferred {} acks_sent {} acks_rcvd {} naks_sent {} naks_rcvd {} rcvd {} duplicates {} ce_echoed {} dropped {}",
        s.tx_data, s.retransmits, s.spurious, s.relocations, s.path_moves, s.timeouts, s.deferred_probes,
        s.tx_acks, s.rx_acks, s.tx_naks, s.rx_naks, s.rx_data, s.rx_duplicates, s.ce_echoed,
        s.rx_errors
    )?;
    for (r, n) in DropReason::ALL.iter().zip(s.drops.iter()) {
        if *n > 0 {
            write!(f, " drop_{} {n}", r.name())?;
        }
    }
    // The session's (added after the connection's counters).
    write!(
        f,
        " keepalives {} silent_max_ms {} quiet_max_ms {}",
        v.keepalives, v.silent_max_ms, v.quiet_max_ms
    )?;
    writeln!(f)?;
    for (i, p) in v.paths.iter().enumerate() {
        let (t, r) = (&p.tx, &p.rx);
        writeln!(
            f,
            "path {i} sport {} peer_sport {} state {} window {} in_flight {} srtt_us {} sent {} resent {} relocated {} timeouts {} moves {} ce_echoed {} rcvd {} duplicates {} ce_marked {}",
            p.sport, p.peer_sport, path_state(p), p.window, p.in_flight, p.srtt_us,
            t.sent, t.resent, t.relocated, t.timeouts, t.moves, t.ce_echoed,
            r.rcvd, r.duplicates, r.ce_marked
        )?;
    }
    Ok(())
}

/// Formats the device's telemetry (the debugfs read; process context).
pub(crate) fn write(t: &Telemetry, f: &mut fmt::Formatter<'_>) -> fmt::Result {
    let peers = t.dev.peers().map_err(|_| fmt::Error)?;
    writeln!(
        f,
        "device {} peers {} payload {} capacity_kbps {} senders {}",
        t.dev.name(),
        peers.len(),
        t.dev.payload,
        t.dev.capacity.load(Relaxed),
        t.dev.senders.load(Relaxed)
    )?;
    for p in peers.iter() {
        let v = view(p)?;
        write_peer(f, &v)?;
    }
    Ok(())
}
