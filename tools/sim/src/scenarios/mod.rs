//! The scenarios of issue 3 and what they share: building a simulation for a
//! transport, the common parameters, the per-run report.

pub mod incast;
pub mod loss;
pub mod plane_failure;
pub mod planes;

use std::path::PathBuf;
use std::time::Instant;

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use crate::fabric::{Fabric, FabricConfig, Ns};
use crate::sim::Sim;
use crate::transports::{make, EndpointConfig, Flow, Kind};

/// Payload bytes per full packet.
pub const MTU_PAYLOAD: u32 = 4096;
/// Ethernet header 14 + FCS 4 + IPv4 20 + UDP 8 + preamble/SFD 8 + IFG 12.
pub const FRAME_OVERHEAD: u32 = 66;
/// Transport header bytes assumed for the base RTT and goodput capacity
/// (the baseline's BTH 12 + ICRC 4); ACK-sized datagrams carry 20.
pub const DATA_HDR: u32 = 16;
pub const ACK_HDR: u32 = 20;

pub struct Ctx {
    pub kinds: Vec<Kind>,
    pub quick: bool,
    pub seed: u64,
    pub out: PathBuf,
}

pub const US: Ns = 1_000;
pub const MS: Ns = 1_000_000;

/// All-to-all traffic among `hosts`: one unbounded flow of `msg_size`-byte
/// messages per ordered pair, ids in (src, dst) order, each starting at a
/// random time in [0, 10 us) drawn from `rng_seed`. Returns the flow count.
pub fn add_all_to_all(sim: &mut Sim, hosts: u32, msg_size: u32, rng_seed: u64) -> usize {
    let mut rng = ChaCha8Rng::seed_from_u64(rng_seed);
    let mut id = 0;
    for src in 0..hosts {
        for dst in 0..hosts {
            if src != dst {
                let start = rng.gen_range(0..10 * US);
                sim.add_flow(Flow {
                    id,
                    src,
                    dst,
                    bytes: u64::MAX,
                    msg_size,
                    start,
                });
                id += 1;
            }
        }
    }
    id as usize
}

/// A simulation of `kind` on the fabric `fc`, with the endpoint configuration
/// every transport gets.
pub fn build(kind: Kind, fc: FabricConfig, seed: u64) -> Result<(Sim, EndpointConfig), String> {
    let fabric = Fabric::new(fc);
    let ec = endpoint_config(&fabric, seed);
    let mut eps = Vec::with_capacity(fabric.cfg.hosts as usize);
    for h in 0..fabric.cfg.hosts {
        eps.push(make(kind, h, &ec)?);
    }
    Ok((Sim::new(fabric, eps, seed), ec))
}

pub fn endpoint_config(f: &Fabric, seed: u64) -> EndpointConfig {
    let data_wire = FRAME_OVERHEAD + DATA_HDR + MTU_PAYLOAD;
    let ack_wire = FRAME_OVERHEAD + ACK_HDR;
    let base_rtt_ns = f.base_rtt(data_wire, ack_wire);
    EndpointConfig {
        hosts: f.cfg.hosts,
        planes: f.cfg.planes,
        link_bps: f.cfg.host_bps,
        mtu_payload: MTU_PAYLOAD,
        frame_overhead: FRAME_OVERHEAD,
        base_rtt_ns,
        rto_ns: (16 * base_rtt_ns).max(100 * US),
        paths: 4 * f.cfg.planes,
        seed,
    }
}

/// Goodput capacity of one host port: line rate times payload efficiency.
pub fn port_goodput_bps(link_bps: u64) -> f64 {
    link_bps as f64 * MTU_PAYLOAD as f64 / (MTU_PAYLOAD + DATA_HDR + FRAME_OVERHEAD) as f64
}

/// Counters and costs of one finished run, for the summary.
pub fn run_report(sim: &mut Sim, started: Instant) -> Value {
    let wall = started.elapsed().as_secs_f64();
    let st = sim.link_totals();
    let mut counters = serde_json::Map::new();
    for e in &sim.endpoints {
        for (k, v) in e.counters() {
            let c = counters.entry(k).or_insert(json!(0u64));
            *c = json!(c.as_u64().unwrap_or(0) + v);
        }
    }
    json!({
        "sim_ns": sim.now,
        "wall_s": crate::report::round(wall),
        "events": st.events,
        "events_per_s": (st.events as f64 / wall.max(1e-9)).round(),
        "fabric": st,
        "transport_counters": counters,
        "integrity_errors": sim.errors(),
    })
}

pub fn progress(msg: &str) {
    eprintln!("[metaroce-sim] {msg}");
}
