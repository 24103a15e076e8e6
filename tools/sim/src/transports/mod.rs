//! Transports that run on the simulated hosts: one `Endpoint` per host.
//!
//! - `roce`: the RoCEv2-RC-like baseline (single path, go-back-N, DCQCN-like
//!   rate control), written here;
//! - `metaroce`: the adapter around `rust/transport` (the MetaRoCE core), written
//!   by the transport engineer.

pub mod metaroce;
pub mod roce;

pub use crate::fabric::{nic_plane, ser_ns, Datagram, Ns};

/// One flow of messages from `src` to `dst`.
#[derive(Clone, Debug)]
pub struct Flow {
    pub id: u32,
    pub src: u32,
    pub dst: u32,
    /// Bytes to send, rounded up to whole messages; u64::MAX = unbounded.
    pub bytes: u64,
    pub msg_size: u32,
    pub start: Ns,
}

impl Flow {
    /// Number of messages, u64::MAX when unbounded.
    pub fn messages(&self) -> u64 {
        if self.bytes == u64::MAX {
            u64::MAX
        } else {
            self.bytes.div_ceil(self.msg_size as u64)
        }
    }
}

/// One host's transport. The simulator calls it; it never calls the simulator.
pub trait Endpoint {
    /// This host is the flow's source; the flow starts now.
    fn add_flow(&mut self, now: Ns, flow: &Flow);
    /// This host is the flow's destination (called when the flow is registered,
    /// before its source starts).
    fn expect_flow(&mut self, _flow: &Flow) {}
    /// A datagram addressed to this host arrived. Datagrams to send go to `tx`.
    fn on_datagram(&mut self, now: Ns, d: Datagram, tx: &mut Vec<Datagram>);
    /// Called at (or after) `next_wakeup()`.
    fn on_wakeup(&mut self, now: Ns, tx: &mut Vec<Datagram>);
    /// When this endpoint next wants `on_wakeup` (None: never, until a datagram
    /// arrives or a flow is added). Asked after every call above.
    fn next_wakeup(&self) -> Option<Ns>;
    /// Bytes of whole messages of `flow` delivered in order to the receiving
    /// application, measured at the destination host's endpoint.
    fn delivered(&self, flow: u32) -> u64;
    /// Integrity errors seen (duplicate, lost or out-of-order delivery); must stay 0.
    fn errors(&self) -> u64;
    /// The endpoint's current retransmission timeout, if it has one (the
    /// plane-failure scenario states recovery in RTOs). Default: none, and the
    /// scenario uses `EndpointConfig::rto_ns`.
    fn rto_estimate(&self) -> Option<Ns> {
        None
    }
    /// The rate, bit/s, this (source) host's control loop allows `flow` now,
    /// if it has one: the incast scenario measures how fast it converges.
    fn control_rate_bps(&self, _flow: u32) -> Option<f64> {
        None
    }
    /// Named counters for the report (summed over hosts), e.g. retransmits.
    fn counters(&self) -> Vec<(&'static str, u64)> {
        Vec::new()
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Kind {
    Roce,
    #[serde(rename = "metaroce")]
    MetaRoce,
}

impl Kind {
    pub fn name(self) -> &'static str {
        match self {
            Kind::Roce => "roce",
            Kind::MetaRoce => "metaroce",
        }
    }
}

/// What every endpoint knows about the fabric and its own configuration.
#[derive(Clone, Debug, serde::Serialize)]
pub struct EndpointConfig {
    pub hosts: u32,
    /// Host ports, one per plane.
    pub planes: u32,
    /// Rate of each host port, bit/s.
    pub link_bps: u64,
    /// Payload bytes per full data packet (the MTU's payload).
    pub mtu_payload: u32,
    /// Bytes every datagram costs on the wire besides the transport's own
    /// headers and payload: Ethernet header + FCS, IPv4, UDP, preamble and
    /// inter-frame gap.
    pub frame_overhead: u32,
    /// Unloaded round trip of a full data packet and its acknowledgement over
    /// the longest path of the fabric.
    pub base_rtt_ns: Ns,
    /// Reference (minimum) retransmission timeout.
    pub rto_ns: Ns,
    /// Paths a multipath transport may use per connection (UDP source ports).
    pub paths: u32,
    /// Seed for the endpoint's own randomness (already distinct per host).
    pub seed: u64,
}

impl EndpointConfig {
    /// Bandwidth-delay product of one host port, bytes.
    pub fn bdp_bytes(&self) -> u64 {
        self.link_bps / 8 * self.base_rtt_ns / 1_000_000_000
    }
}

/// Builds the endpoint of `host`. Fails when the transport is not available
/// (the MetaRoCE adapter not yet written).
pub fn make(kind: Kind, host: u32, cfg: &EndpointConfig) -> Result<Box<dyn Endpoint>, String> {
    let mut cfg = cfg.clone();
    cfg.seed ^= (host as u64).wrapping_mul(0x9e37_79b9_7f4a_7c15);
    match kind {
        Kind::Roce => Ok(Box::new(roce::RoceHost::new(host, &cfg))),
        // ------------------------------------------------------------------
        // MetaRoCE: the adapter in transports/metaroce.rs (rust/transport
        // driven through the Endpoint trait). It returns None until written.
        // ------------------------------------------------------------------
        Kind::MetaRoce => metaroce::new(host, &cfg).ok_or_else(|| {
            "the MetaRoCE endpoint adapter is not written yet \
             (tools/sim/src/transports/metaroce.rs returns None); \
             run with --transport roce for the baseline alone"
                .to_string()
        }),
    }
}
