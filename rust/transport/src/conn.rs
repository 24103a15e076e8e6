// SPDX-License-Identifier: GPL-2.0

//! One connection to one peer: the sans-IO state machine that ties paths,
//! congestion control and messages together.
//!
//! Inputs: [`Connection::on_datagram`] ("a datagram arrived"),
//! [`Connection::on_timeout`] ("now is T"), [`Connection::post`] ("the
//! application posted a message"), and the receiver's verdicts
//! ([`Connection::reject`], [`Connection::set_progress`],
//! [`Connection::set_rate_hint`]). Outputs: [`Connection::poll_transmit`]
//! ("send this packet on path P from source port S, followed by these message
//! bytes"), [`Received::Data`] ("place these bytes"), [`Connection::poll_event`]
//! ("this message is complete") and [`Connection::next_timeout`] ("call me
//! back at T"). Time is nanoseconds from any origin; nothing here reads a clock,
//! allocates, uses floating point or panics on any input.
//!
//! Sender: a message is cut into packets of at most `max_payload` bytes; each
//! new packet goes to the path with the most free window (per-path AIMD) while
//! the connection's AIMD window has room and the pacer (the receiver's rate
//! hint) allows. A packet is lost when a packet sent after it on the same path
//! was acknowledged (a path is one route and delivers in order), or when the
//! path's probe timer finds it unacknowledged; it is resent at once with its
//! PSN on its path. A probe that goes unanswered fails the path: it moves to a
//! new UDP source port (a new route) and its unacknowledged packets are
//! relocated to the other paths, carrying their origin so that the receiver
//! drops a late original. An ECN CE echo halves the path's window (once per
//! window of data) and takes the same amount off the connection's; losses
//! alone do not, since on these fabrics loss is rarely congestion.
//!
//! Receiver: each path keeps its bitmap of received PSNs (duplicates are
//! dropped), acknowledges every `ack_every` packets (or after `ack_delay_ns`)
//! or at once when asked, when its last hole closes, on a CE mark or on a
//! duplicate, and echoes the sender's timestamp; every ACK
//! carries the fair-share hint and the latest rejection. Placement and
//! in-order completion per stream are the caller's (see `stream`).
//! `Documentation/transport.md` tells the whole design.

use super::cc::{fair_share, pick_path, window_for_rate, Aimd};
use super::framing::HEADER_OVERHEAD;
use super::path::{AckError, Arrival, RecvPath, SendPath, WINDOW};
use super::rtt::{Rtt, MAX_RTO_US};
use super::seq::{before, Bits256};
use super::stats::{DropReason, PathInfo, RxPathStats, Stats, TxPathStats};
use super::stream::MAX_OUTSTANDING;
use super::trace::{TraceEvent, TraceRing};
use super::wire::{
    self, flags, AckHeader, Atomic, Common, DataHeader, DecodeError, NakCode, NakHeader, Opcode,
    Origin, Packet, PacketType, Remote,
};

/// Messages a connection holds at once (posted and not yet completed).
pub const MAX_MESSAGES: usize = 256;
/// Timer expiries without progress after which a path is failed: the first
/// sends a probe (the oldest packet again), the second moves the path.
pub const FAIL_AFTER_EXPIRIES: u8 = 2;
/// The receiver acknowledges at least every this many packets of a path,
/// unless [`Config::ack_every`] says otherwise.
pub const ACK_EVERY: u16 = 2;
/// First UDP source port of paths; ports are drawn from here to 65535.
pub const PORT_BASE: u16 = 49152;

const SLOTS: usize = WINDOW as usize;
const MAX_STRIKE_SHIFT: u8 = 6;
/// Packets of idle time the pacer may make up in a burst.
const PACE_CREDIT: u64 = 4;
/// Fixed-point one of the CE share.
const CE_ONE: u32 = 1024;
const NAK_QUEUE: usize = 16;
/// Packets acknowledged without a spurious resend after which the allowed
/// reordering eases back.
const REORDER_EASE_AFTER: u32 = 4096;

/// How a connection is set up; both ends agree on the initial PSNs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Config {
    /// Our identifier of the connection: incoming packets carry it.
    pub local_id: u32,
    /// The peer's identifier: outgoing packets carry it.
    pub remote_id: u32,
    /// Paths used to send (1 ..= the connection's capacity).
    pub paths: u16,
    /// Most message bytes per packet.
    pub max_payload: u16,
    /// PSN of the first packet we send on path 0 (path `i`: plus `i << 24`).
    pub tx_isn: u32,
    /// PSN of the first packet the peer sends on path 0.
    pub rx_isn: u32,
    /// Initial window of each path, in packets.
    pub initial_window: u32,
    /// Seed of the source-port choice (differs per connection).
    pub port_seed: u32,
    /// Packets sent after a packet that may be acknowledged before it is
    /// declared lost (0: a path never reorders).
    pub reorder_window: u32,
    /// Longest wait, in nanoseconds, before acknowledging a lone packet.
    pub ack_delay_ns: u32,
    /// The receiver acknowledges at least every this many packets of a path
    /// (and at once when asked, when its last hole closes, on a CE mark or a
    /// duplicate).
    pub ack_every: u16,
    /// Shortest probe timer, in microseconds: a host whose scheduling
    /// delays exceed its round trips (a busy or virtual machine) sets it so
    /// that a late ACK is not taken for a dead path.
    pub probe_floor_us: u32,
    /// Most packets in flight over the whole connection (0: every path's
    /// window of [`WINDOW`]). Losses do not shrink the window, so a host
    /// whose own queues drop (a CPU's input backlog) bounds it here.
    pub max_window: u32,
}

impl Config {
    /// A configuration with the usual defaults for the given identifiers.
    pub const fn new(local_id: u32, remote_id: u32, paths: u16, max_payload: u16) -> Self {
        Self {
            local_id,
            remote_id,
            paths,
            max_payload,
            tx_isn: 0,
            rx_isn: 0,
            initial_window: 16,
            port_seed: local_id ^ remote_id.rotate_left(16),
            reorder_window: 0,
            ack_delay_ns: 2_000,
            ack_every: ACK_EVERY,
            probe_floor_us: 0,
            max_window: 0,
        }
    }
}

/// A message the application posted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Message {
    /// The operation.
    pub opcode: Opcode,
    /// The stream (queue pair) it belongs to.
    pub stream: u32,
    /// Its sequence number in the stream (consecutive per stream).
    pub msn: u32,
    /// Send and Send with Immediate: low 8 bits of the receive it consumes
    /// (Sends of the stream counted from 0); 0 otherwise.
    pub rsn: u8,
    /// Its length in bytes (for Read: the bytes asked for; atomics: 8).
    pub len: u32,
    /// Remote key and address, for operations that have them.
    pub remote: Option<Remote>,
    /// Immediate data, for operations that have it.
    pub imm: Option<u32>,
    /// Operands, for atomics.
    pub atomic: Option<Atomic>,
}

/// Why a message was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The connection holds [`MAX_MESSAGES`] messages: wait for completions.
    Full,
    /// The stream has [`MAX_OUTSTANDING`] messages in progress.
    StreamBusy,
    /// The message's parts do not match its opcode, or its length does not.
    Invalid,
}

/// A completion, released in message order per stream.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Completion {
    /// The message's stream.
    pub stream: u32,
    /// The message.
    pub msn: u32,
    /// `None`: every packet arrived; otherwise the receiver's error.
    pub error: Option<NakCode>,
}

/// Message bytes that follow a packet's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Segment {
    /// The message's stream.
    pub stream: u32,
    /// The message.
    pub msn: u32,
    /// Offset of the bytes in the message.
    pub offset: u32,
    /// Number of bytes.
    pub len: u16,
}

/// A packet to send: `buf[..len]` holds its header, then come `payload`'s
/// bytes (if any), from UDP source port `sport`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Transmit {
    /// The path (for statistics).
    pub path: u16,
    /// The UDP source port: it selects the route.
    pub sport: u16,
    /// Header bytes written to the buffer.
    pub len: usize,
    /// Message bytes to append.
    pub payload: Option<Segment>,
}

/// What an arriving datagram meant.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Received<'a> {
    /// New data: place it (or [`Connection::reject`] it) before polling.
    Data(DataHeader, &'a [u8]),
    /// A copy of data already received: dropped.
    Duplicate,
    /// A packet of a message its sender cancelled: it fills its PSN, and
    /// nothing is placed.
    Void,
    /// An acknowledgement or negative acknowledgement, processed.
    Control,
}

/// Why an arriving datagram was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RecvError {
    /// Not a valid MetaRoCE packet.
    Decode(DecodeError),
    /// For another connection.
    Connection(u32),
    /// Names a path this connection does not have.
    Path(u16),
    /// A PSN outside the receive window.
    Window,
    /// An ACK for packets never sent.
    Ack,
    /// A NAK for a message that is not in progress.
    Nak,
    /// A hello: the handshake's business (see `handshake`), not the
    /// connection's.
    Hello,
}

impl RecvError {
    /// Which counter of [`Stats::drops`] it counts in.
    pub const fn reason(&self) -> DropReason {
        match self {
            Self::Decode(d) => match d {
                DecodeError::Truncated => DropReason::Truncated,
                DecodeError::Version(_) => DropReason::Version,
                DecodeError::PacketType(_) => DropReason::PacketType,
                DecodeError::Opcode(_) => DropReason::Opcode,
                DecodeError::NakCode(_) => DropReason::NakCode,
                DecodeError::Flags(_) => DropReason::Flags,
                DecodeError::Reserved => DropReason::Reserved,
                DecodeError::PayloadLength => DropReason::PayloadLength,
                DecodeError::Bounds => DropReason::Bounds,
            },
            Self::Connection(_) => DropReason::Connection,
            Self::Path(_) => DropReason::Path,
            Self::Window => DropReason::Window,
            Self::Ack => DropReason::Ack,
            Self::Nak => DropReason::Nak,
            Self::Hello => DropReason::Hello,
        }
    }
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum SlotState {
    #[default]
    Free,
    /// In flight on this path.
    Live,
    /// Moved to another path; nothing to do when acknowledged here.
    Moved,
}

/// One packet in flight, indexed by PSN modulo the window.
#[derive(Clone, Copy, Debug, Default)]
struct TxSlot {
    state: SlotState,
    /// Message slot and its generation.
    msg: u16,
    gen: u32,
    offset: u32,
    len: u16,
    last: bool,
    origin: Option<Origin>,
    /// Transmission order on the path, for loss detection.
    order: u32,
}

#[derive(Clone, Copy, Debug)]
struct TxPath {
    seq: SendPath,
    slots: [TxSlot; SLOTS],
    cc: Aimd,
    rtt: Rtt,
    sport: u16,
    /// Route changes so far (feeds the port choice).
    epoch: u32,
    /// Sent, not acknowledged, not moved away.
    outstanding: u32,
    /// PSNs (modulo the window) to resend on this path / to move elsewhere.
    resend: Bits256,
    relocate: Bits256,
    next_order: u32,
    /// One past the highest transmission order acknowledged.
    delivered: u32,
    deadline: Option<u64>,
    /// Timer expiries since the last progress (the first is a probe).
    expiries: u8,
    /// Route changes since the last progress: each doubles the timer, so a
    /// connection whose every route is down does not spin.
    strikes: u8,
    /// When the current route last delivered (data out, ACKs back); 0: not
    /// since the path moved to it.
    acked_at: u64,
    stats: TxPathStats,
}

impl TxPath {
    /// The probe timer, in nanoseconds: about two round trips of this path,
    /// but at most twice the connection's (a path that carried little lately
    /// may keep an old, inflated estimate), doubled per strike, plus the
    /// longest the receiver may hold an ACK back.
    fn timer_ns(&self, conn: &Rtt, cfg: &Config) -> u64 {
        let mut pto = u64::from(self.rtt.pto_us());
        if conn.is_sampled() {
            pto = pto.min(2 * u64::from(conn.pto_us()));
        }
        let pto = pto.max(u64::from(cfg.probe_floor_us));
        // A new route fails with the odds of the old one: only repeated
        // failures (every route down) back off.
        let shift = self.strikes.saturating_sub(1).min(MAX_STRIKE_SHIFT);
        (pto << shift).min(u64::from(MAX_RTO_US)) * 1_000 + u64::from(cfg.ack_delay_ns)
    }
}

#[derive(Clone, Copy, Debug)]
struct RxPath {
    seq: RecvPath,
    sport: u16,
    unacked: u16,
    due: bool,
    /// A duplicate arrived since the last ACK (it says so).
    dup: bool,
    /// When a lone unacknowledged packet must be acknowledged.
    ack_at: Option<u64>,
    echo: u32,
    stats: RxPathStats,
}

#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
enum MsgState {
    #[default]
    Free,
    Active,
    /// Every packet acknowledged (or rejected); waits for older ones.
    Done,
    /// In the completion queue.
    Reported,
}

#[derive(Clone, Copy, Debug)]
struct MsgSlot {
    state: MsgState,
    gen: u32,
    msg: Message,
    /// Payload bytes per packet of this message (its queue pair's path MTU,
    /// at most the connection's `max_payload`).
    payload: u16,
    packets: u32,
    sent_packets: u32,
    acked: u32,
    error: Option<NakCode>,
    /// Cancelled by [`Connection::cancel_stream`]: its packets in flight
    /// travel void.
    cancelled: bool,
}

const EMPTY_MSG: MsgSlot = MsgSlot {
    state: MsgState::Free,
    gen: 0,
    msg: Message {
        opcode: Opcode::Send,
        stream: 0,
        msn: 0,
        len: 0,
        remote: None,
        rsn: 0,
        imm: None,
        atomic: None,
    },
    payload: 1,
    packets: 0,
    sent_packets: 0,
    acked: 0,
    error: None,
    cancelled: false,
};

const TX_PATH_EMPTY: TxPath = TxPath {
    seq: SendPath::new(0),
    slots: [TX_SLOT_EMPTY; SLOTS],
    cc: Aimd::new(0, 0),
    rtt: Rtt::new(),
    sport: 0,
    epoch: 0,
    outstanding: 0,
    resend: Bits256::EMPTY,
    relocate: Bits256::EMPTY,
    next_order: 0,
    delivered: 0,
    deadline: None,
    expiries: 0,
    strikes: 0,
    acked_at: 0,
    stats: TxPathStats::EMPTY,
};

const TX_SLOT_EMPTY: TxSlot = TxSlot {
    state: SlotState::Free,
    msg: 0,
    gen: 0,
    offset: 0,
    len: 0,
    last: false,
    origin: None,
    order: 0,
};

const RX_PATH_EMPTY: RxPath = RxPath {
    seq: RecvPath::new(0),
    sport: 0,
    unacked: 0,
    due: false,
    dup: false,
    ack_at: None,
    echo: 0,
    stats: RxPathStats::EMPTY,
};

const EMPTY_NAK: NakHeader = NakHeader {
    common: Common {
        ptype: PacketType::Nak,
        flags: 0,
        path: 0,
        conn: 0,
        psn: 0,
        timestamp: 0,
    },
    code: NakCode::RemoteOperation,
    stream: 0,
    msn: 0,
};

/// One connection with room for `P` paths.
/// `Copy` lets a kernel build one in place from [`Connection::EMPTY`].
#[derive(Clone, Copy, Debug)]
pub struct Connection<const P: usize> {
    cfg: Config,
    tx: [TxPath; P],
    rx: [RxPath; P],
    cc: Aimd,
    /// Packets in flight over all paths.
    outstanding: u32,
    /// Connection-level sequence (packets sent / acknowledged) for AIMD.
    sent_total: u32,
    acked_total: u32,
    msgs: [MsgSlot; MAX_MESSAGES],
    next_gen: u32,
    /// The message being cut into packets.
    cursor: Option<u16>,
    done: [u16; MAX_MESSAGES],
    done_head: u16,
    done_len: u16,
    naks: [NakHeader; NAK_QUEUE],
    nak_len: u8,
    /// Our receiver's fair share for the peer, before scaling by marks.
    rate_hint: u32,
    /// Share of arriving data marked CE, smoothed (1024 = all).
    ce_ewma: u32,
    /// The peer's hint for us (Mbit/s, 0: none): new data is paced at it.
    pace_mbps: u32,
    /// Earliest time the pacer lets the next new packet go.
    next_send: u64,
    /// Whether new data waits for the pacer (then it is a timer).
    paced: bool,
    progress: (u32, u32),
    /// The message our receiver rejected last: every ACK carries it.
    rejected: Option<(u32, u32, NakCode)>,
    /// Whether every path has an RTT estimate.
    all_sampled: bool,
    /// The path that last brought data (ACKs for announcements go there).
    last_rx_path: Option<u16>,
    /// Round trips of every path together.
    rtt: Rtt,
    /// The reordering allowed before a hole is a loss, in packets: from
    /// `cfg.reorder_window` up, doubled when a resend proves spurious and
    /// eased back while none does.
    reorder: u32,
    /// Packets acknowledged since `reorder` last changed.
    reorder_quiet: u32,
    stats: Stats,
    /// Events for tracing, until the owner takes them.
    trace: TraceRing,
}

/// A well-mixed 32-bit hash (for source ports).
const fn mix(mut x: u32) -> u32 {
    x ^= x >> 16;
    x = x.wrapping_mul(0x7feb_352d);
    x ^= x >> 15;
    x = x.wrapping_mul(0x846c_a68b);
    x ^ (x >> 16)
}

fn port_for(seed: u32, path: u16, epoch: u32) -> u16 {
    let h = mix(seed ^ mix(u32::from(path) ^ epoch.rotate_left(20)));
    PORT_BASE + (h % (65536 - u32::from(PORT_BASE))) as u16
}

/// The clock in microseconds as data packets carry it: wrapping, never 0
/// (an ACK echoing 0 carries no RTT sample).
fn us(now: u64) -> u32 {
    ((now / 1_000) as u32).max(1)
}

fn packets_of(msg: &Message, max_payload: u16) -> u32 {
    if !msg.opcode.has_payload() || msg.len == 0 {
        return 1;
    }
    msg.len.div_ceil(u32::from(max_payload.max(1)))
}

impl<const P: usize> Connection<P> {
    /// A connection set up as `cfg` says (`cfg.paths` is clamped to 1..=P).
    pub fn new(cfg: Config) -> Self {
        let mut c = Self::EMPTY;
        c.configure(cfg);
        c
    }

    /// A connection with no configuration, to be [`Self::configure`]d. It is a
    /// constant so that a large connection can be built where it will live (a
    /// kernel copies it from a static into the heap and configures it there)
    /// instead of on the stack.
    pub const EMPTY: Self = Self {
        cfg: Config::new(0, 0, 1, 1),
        tx: [TX_PATH_EMPTY; P],
        rx: [RX_PATH_EMPTY; P],
        cc: Aimd::new(0, 0),
        outstanding: 0,
        sent_total: 0,
        acked_total: 0,
        msgs: [EMPTY_MSG; MAX_MESSAGES],
        next_gen: 0,
        cursor: None,
        done: [0; MAX_MESSAGES],
        done_head: 0,
        done_len: 0,
        naks: [EMPTY_NAK; NAK_QUEUE],
        nak_len: 0,
        rate_hint: 0,
        ce_ewma: 0,
        pace_mbps: 0,
        next_send: 0,
        paced: false,
        progress: (0, 0),
        rejected: None,
        all_sampled: false,
        last_rx_path: None,
        rtt: Rtt::new(),
        reorder: 0,
        reorder_quiet: 0,
        stats: Stats::EMPTY,
        trace: TraceRing::EMPTY,
    };

    /// Sets up a connection that is still [`Self::EMPTY`] as `cfg` says, in
    /// place (`cfg.paths` is clamped to 1..=P).
    pub fn configure(&mut self, cfg: Config) {
        let cfg = Config {
            paths: cfg.paths.clamp(1, P.min(usize::from(u16::MAX)) as u16),
            max_payload: cfg.max_payload.max(1),
            ..cfg
        };
        let initial = cfg.initial_window.clamp(super::cc::MIN_WINDOW, WINDOW);
        self.reorder = cfg.reorder_window;
        self.reorder_quiet = 0;
        for (i, t) in self.tx.iter_mut().enumerate() {
            t.seq = SendPath::new(cfg.tx_isn.wrapping_add((i as u32) << 24));
            t.cc = Aimd::new(initial, WINDOW);
            t.sport = port_for(cfg.port_seed, i as u16, 0);
        }
        for (i, r) in self.rx.iter_mut().enumerate() {
            r.seq = RecvPath::new(cfg.rx_isn.wrapping_add((i as u32) << 24));
        }
        let paths = u32::from(cfg.paths);
        let max = match cfg.max_window {
            0 => WINDOW * paths,
            m => m.min(WINDOW * paths),
        };
        self.cc = Aimd::new(initial * paths, max);
        self.cfg = cfg;
    }

    /// Paths in use (never more than `P`).
    fn n_paths(&self) -> usize {
        usize::from(self.cfg.paths).min(P)
    }

    /// The configuration in force.
    pub const fn config(&self) -> &Config {
        &self.cfg
    }

    /// Counters since creation.
    pub const fn stats(&self) -> &Stats {
        &self.stats
    }

    /// Packets in flight over all paths.
    pub const fn outstanding(&self) -> u32 {
        self.outstanding
    }

    /// The rate new data is paced at (the peer's hint), Mbit/s; 0: none.
    pub const fn pace_mbps(&self) -> u32 {
        self.pace_mbps
    }

    /// The connection's congestion window, in packets.
    pub const fn window(&self) -> u32 {
        self.cc.window()
    }

    /// Path `path` as it is now (`None` past the paths in use). For
    /// telemetry.
    pub fn path_info(&self, path: u16) -> Option<PathInfo> {
        let i = usize::from(path);
        if i >= self.n_paths() {
            return None;
        }
        let p = self.tx.get(i)?;
        let r = self.rx.get(i)?;
        Some(PathInfo {
            sport: p.sport,
            peer_sport: r.sport,
            window: p.cc.window(),
            in_flight: p.outstanding,
            srtt_us: if p.rtt.is_sampled() {
                p.rtt.srtt_us()
            } else {
                0
            },
            expiries: p.expiries,
            strikes: p.strikes,
            tx: p.stats,
            rx: r.stats,
        })
    }

    /// The oldest event recorded for tracing that was not taken yet (the
    /// ring keeps the last [`super::trace::TRACE_RING`]).
    pub fn poll_trace(&mut self) -> Option<TraceEvent> {
        self.trace.pop()
    }

    /// Events for tracing overwritten before they were taken.
    pub const fn trace_overwritten(&self) -> u64 {
        self.trace.overwritten()
    }

    /// Our receiver's fair share for the peer, in Mbit/s, as the next ACK
    /// carries it (0: no hint).
    pub fn rate_hint(&self) -> u32 {
        self.hint_now()
    }

    /// The smoothed round trip over every path, in microseconds (0: no
    /// sample yet).
    pub const fn srtt_us(&self) -> u32 {
        if self.rtt.is_sampled() {
            self.rtt.srtt_us()
        } else {
            0
        }
    }

    // ---- application side -------------------------------------------------

    /// Queues a message for sending, cut into packets of the connection's
    /// `max_payload` bytes.
    pub fn post(&mut self, msg: Message) -> Result<(), PostError> {
        self.post_sized(msg, self.cfg.max_payload)
    }

    /// Queues a message for sending, cut into packets of at most
    /// `max_payload` bytes (a stream's own path MTU; the connection's
    /// `max_payload` caps it), so one stream's small MTU does not set every
    /// other stream's.
    pub fn post_sized(&mut self, msg: Message, max_payload: u16) -> Result<(), PostError> {
        let payload = max_payload.clamp(1, self.cfg.max_payload.max(1));
        let op = msg.opcode;
        let valid = msg.remote.is_some() == op.has_remote()
            && msg.imm.is_some() == op.has_imm()
            && msg.atomic.is_some() == op.is_atomic()
            && (!op.is_atomic() || msg.len == 8)
            && (op.is_send() || msg.rsn == 0);
        if !valid {
            return Err(PostError::Invalid);
        }
        let mut free = None;
        let mut in_stream = 0;
        for (i, m) in self.msgs.iter().enumerate() {
            if m.state == MsgState::Free {
                free = free.or(Some(i));
            } else if m.msg.stream == msg.stream {
                in_stream += 1;
            }
        }
        if in_stream >= MAX_OUTSTANDING {
            return Err(PostError::StreamBusy);
        }
        let i = free.ok_or(PostError::Full)?;
        let slot = self.msgs.get_mut(i).ok_or(PostError::Full)?;
        *slot = MsgSlot {
            state: MsgState::Active,
            gen: self.next_gen,
            msg,
            payload,
            packets: packets_of(&msg, payload),
            sent_packets: 0,
            acked: 0,
            error: None,
            cancelled: false,
        };
        self.next_gen = self.next_gen.wrapping_add(1);
        if self.cursor.is_none() {
            self.cursor = Some(i as u16);
        }
        Ok(())
    }

    /// Cancels every message of `stream` that has not completed (its queue
    /// pair went away): nothing more of them is cut, their packets in flight
    /// are resent void until acknowledged, and they complete with `code`.
    /// Returns how many were cancelled.
    pub fn cancel_stream(&mut self, stream: u32, code: NakCode) -> u32 {
        let mut n = 0;
        for i in 0..MAX_MESSAGES {
            let Some(m) = self.msgs.get_mut(i) else { break };
            if m.state != MsgState::Active || m.msg.stream != stream {
                continue;
            }
            n += 1;
            m.cancelled = true;
            m.error = m.error.or(Some(code));
            m.packets = m.sent_packets;
            if m.acked == m.sent_packets {
                m.state = MsgState::Done;
            }
            if self.cursor == Some(i as u16) {
                self.advance_cursor();
            }
        }
        self.release_all();
        n
    }

    /// Whether `stream` has messages the connection still holds (in flight
    /// or completed and not yet polled).
    pub fn stream_busy(&self, stream: u32) -> bool {
        self.msgs
            .iter()
            .any(|m| m.state != MsgState::Free && m.msg.stream == stream)
    }

    /// The next completion, in message order per stream.
    pub fn poll_event(&mut self) -> Option<Completion> {
        if self.done_len == 0 {
            return None;
        }
        let i = usize::from(*self.done.get(usize::from(self.done_head))?);
        self.done_head = (self.done_head + 1) % MAX_MESSAGES as u16;
        self.done_len -= 1;
        let slot = self.msgs.get_mut(i)?;
        let c = Completion {
            stream: slot.msg.stream,
            msn: slot.msg.msn,
            error: slot.error,
        };
        *slot = EMPTY_MSG;
        Some(c)
    }

    // ---- receiver verdicts ------------------------------------------------

    /// Rejects a message whose packet arrived on `path`: a NAK goes out
    /// before further acknowledgements. Returns false if the NAK queue is full.
    pub fn reject(&mut self, path: u16, stream: u32, msn: u32, code: NakCode) -> bool {
        // Every ACK from now on names the rejection, so no ACK of the
        // message's packets reaches the sender without it, even if every NAK
        // is lost.
        // A message's packets after the first refused one are refused too:
        // the message counts once.
        if self.rejected != Some((stream, msn, code)) {
            let i = usize::from(code as u8).wrapping_sub(1);
            if let Some(r) = self.stats.refused.get_mut(i) {
                *r += 1;
            }
        }
        self.rejected = Some((stream, msn, code));
        let n = usize::from(self.nak_len);
        let Some(slot) = self.naks.get_mut(n) else {
            return false;
        };
        *slot = NakHeader {
            common: Common {
                ptype: PacketType::Nak,
                flags: 0,
                path,
                conn: self.cfg.remote_id,
                psn: 0,
                timestamp: 0,
            },
            code,
            stream,
            msn,
        };
        self.nak_len += 1;
        true
    }

    /// Forgets the rejection of a message of `stream` that the ACKs carry:
    /// the stream starts again (its queue pair was reset and joined the
    /// connection anew, message numbers from 0), and a message that reuses
    /// the rejected number must not fail for it.
    pub fn forget_rejection(&mut self, stream: u32) {
        if self.rejected.is_some_and(|r| r.0 == stream) {
            self.rejected = None;
        }
    }

    /// Every message of `stream` below `msn` is complete at the receiver; the
    /// next ACKs report it.
    pub fn set_progress(&mut self, stream: u32, msn: u32) {
        self.progress = (stream, msn);
    }

    /// The fair share of our receiver for this sender, in Mbit/s, returned in
    /// every ACK (0: no hint). See [`fair_share`].
    pub fn set_rate_hint(&mut self, mbps: u32) {
        self.rate_hint = mbps;
    }

    /// The hint sent now: the share, less up to an eighth of it when most
    /// arriving packets are marked (a queue stands at our end: drain it, while
    /// every sender stays within 20% of its share).
    fn hint_now(&self) -> u32 {
        // Only a standing queue (most arrivals marked) is the receiver's own:
        // marks from a hot spot elsewhere are the paths' business.
        let excess = self.ce_ewma.saturating_sub(CE_ONE / 2);
        let cut = u64::from(self.rate_hint) * u64::from(excess) / u64::from(4 * CE_ONE);
        self.rate_hint - cut as u32
    }

    /// Sends the current hint at once, in an ACK on the path that last
    /// brought data (when the receiver's number of senders changed, so that
    /// every sender learns its new share within a round trip).
    pub fn announce(&mut self) {
        if let Some(r) = self
            .last_rx_path
            .and_then(|p| self.rx.get_mut(usize::from(p)))
        {
            r.due = true;
        }
    }

    /// Sets the rate hint to an equal share of `capacity_mbps` among
    /// `active_senders`.
    pub fn share_capacity(&mut self, capacity_mbps: u32, active_senders: u32) {
        self.rate_hint = fair_share(capacity_mbps, active_senders);
    }

    // ---- timers -----------------------------------------------------------

    /// When [`Self::on_timeout`] must be called next.
    pub fn next_timeout(&self) -> Option<u64> {
        let tx = self.tx.iter().filter_map(|p| p.deadline);
        let rx = self.rx.iter().filter(|r| !r.due).filter_map(|r| r.ack_at);
        let pacer = self.paced.then_some(self.next_send);
        tx.chain(rx).chain(pacer).min()
    }

    /// Handles the timers due at `now`.
    pub fn on_timeout(&mut self, now: u64) {
        for r in &mut self.rx {
            if r.ack_at.is_some_and(|t| t <= now) {
                r.due = true;
            }
        }
        for i in 0..self.n_paths() {
            if self
                .tx
                .get(i)
                .is_some_and(|p| p.deadline.is_some_and(|d| d <= now))
            {
                self.path_timeout(i, now);
            }
        }
    }

    fn path_timeout(&mut self, i: usize, now: u64) {
        let Some(p) = self.tx.get_mut(i) else {
            return;
        };
        // The oldest packet still ours to resend on this path.
        let mut oldest = None;
        let una = p.seq.oldest_unacked().unwrap_or(0);
        for k in 0..p.seq.in_flight() {
            let psn = una.wrapping_add(k);
            if !p.seq.is_acked(psn) && p.slots[psn as usize % SLOTS].state == SlotState::Live {
                oldest = Some(psn);
                break;
            }
        }
        let Some(psn) = oldest else {
            p.deadline = None;
            p.expiries = 0;
            return;
        };
        self.stats.timeouts += 1;
        p.stats.timeouts += 1;
        p.expiries = p.expiries.saturating_add(1);
        // The probe is the oldest packet itself, on this path, even if it
        // waits to move to another: when every path is suspect, none takes
        // relocations, and a probe that sent nothing would only fail the
        // path again (a livelock of path moves found by the hostile-channel
        // property test once holes wait for the timer).
        p.relocate.clear(psn % WINDOW);
        p.resend.set(psn % WINDOW);
        // The probe waits twice as long for its answer.
        p.deadline = Some(now + 2 * p.timer_ns(&self.rtt, &self.cfg));
        if p.expiries >= FAIL_AFTER_EXPIRIES {
            self.fail_path(i, now);
        }
    }

    /// Moves path `i` to a new source port and hands its unacknowledged
    /// packets to the other paths.
    fn fail_path(&mut self, i: usize, now: u64) {
        let initial = self.cfg.initial_window.clamp(super::cc::MIN_WINDOW, WINDOW);
        let seed = self.cfg.port_seed;
        let alone = self.cfg.paths == 1;
        // After a new route failed too, take a route another path proved
        // (both directions work there) instead of drawing again: a packet
        // that stays on this path must not wait on more bad draws.
        let n = self.n_paths();
        let borrowed = self
            .tx
            .get(i)
            .filter(|p| p.strikes > 0)
            .and_then(|_| {
                (0..n)
                    .filter(|j| *j != i)
                    .filter_map(|j| self.tx.get(j))
                    .filter(|q| q.acked_at > 0)
                    .max_by_key(|q| q.acked_at)
            })
            .filter(|q| now.saturating_sub(q.acked_at) < q.timer_ns(&self.rtt, &self.cfg))
            .map(|q| q.sport);
        let Some(p) = self.tx.get_mut(i) else {
            return;
        };
        p.epoch = p.epoch.wrapping_add(1);
        p.stats.moves += 1;
        let from = p.sport;
        p.sport = borrowed.unwrap_or_else(|| port_for(seed, i as u16, p.epoch));
        self.trace.push(TraceEvent::PathMoved {
            path: i as u16,
            from,
            to: p.sport,
        });
        p.acked_at = 0;
        p.cc = Aimd::new(initial, WINDOW);
        p.expiries = 0;
        p.strikes = p.strikes.saturating_add(1);
        p.deadline = Some(now + p.timer_ns(&self.rtt, &self.cfg));
        let una = p.seq.oldest_unacked().unwrap_or(0);
        for k in 0..p.seq.in_flight() {
            let psn = una.wrapping_add(k);
            let idx = psn % WINDOW;
            let slot = &p.slots[idx as usize];
            if p.seq.is_acked(psn) || slot.state != SlotState::Live {
                continue;
            }
            // A packet that was already relocated once stays here (its new
            // route is the new port); first-time packets move, if there is
            // another path.
            if slot.origin.is_none() && !alone {
                p.resend.clear(idx);
                p.relocate.set(idx);
            } else {
                p.resend.set(idx);
            }
        }
        self.stats.path_moves += 1;
    }

    // ---- receiving --------------------------------------------------------

    /// Handles a datagram that arrived from UDP source port `sport`, marked
    /// ECN CE if `ce`.
    pub fn on_datagram<'a>(
        &mut self,
        now: u64,
        buf: &'a [u8],
        sport: u16,
        ce: bool,
    ) -> Result<Received<'a>, RecvError> {
        let r = self.receive(now, buf, sport, ce);
        if let Err(e) = &r {
            self.stats.rx_errors += 1;
            if let Some(d) = self.stats.drops.get_mut(e.reason() as usize) {
                *d += 1;
            }
        }
        r
    }

    fn receive<'a>(
        &mut self,
        now: u64,
        buf: &'a [u8],
        sport: u16,
        ce: bool,
    ) -> Result<Received<'a>, RecvError> {
        let pkt = wire::decode(buf).map_err(RecvError::Decode)?;
        let common = match &pkt {
            Packet::Data(h, _) => h.common,
            Packet::Ack(a) => a.common,
            Packet::Nak(n) => n.common,
            Packet::Hello(_) => return Err(RecvError::Hello),
        };
        if common.conn != self.cfg.local_id {
            return Err(RecvError::Connection(common.conn));
        }
        let path = usize::from(common.path);
        if path >= P {
            return Err(RecvError::Path(common.path));
        }
        match pkt {
            Packet::Data(hdr, payload) => self.on_data(now, path, hdr, payload, sport, ce),
            Packet::Ack(ack) => {
                self.on_ack(path, &ack, now)?;
                self.stats.rx_acks += 1;
                Ok(Received::Control)
            }
            Packet::Nak(nak) => {
                self.on_nak(&nak)?;
                self.stats.rx_naks += 1;
                Ok(Received::Control)
            }
            Packet::Hello(_) => Err(RecvError::Hello),
        }
    }

    fn on_data<'a>(
        &mut self,
        now: u64,
        path: usize,
        hdr: DataHeader,
        payload: &'a [u8],
        sport: u16,
        ce: bool,
    ) -> Result<Received<'a>, RecvError> {
        let rx = self.rx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
        let had_holes = rx.seq.has_holes();
        let arrival = rx.seq.on_data(hdr.common.psn, ce);
        if arrival == Arrival::OutOfWindow {
            return Err(RecvError::Window);
        }
        rx.sport = sport;
        rx.echo = hdr.common.timestamp;
        self.last_rx_path = Some(path as u16);
        // Smoothed share of marked data, over about 16 packets.
        self.ce_ewma = self.ce_ewma - self.ce_ewma / 16 + if ce { CE_ONE / 16 } else { 0 };
        rx.unacked = rx.unacked.saturating_add(1);
        if rx.ack_at.is_none() {
            rx.ack_at = Some(now + u64::from(self.cfg.ack_delay_ns));
        }
        rx.due |= hdr.common.flags & flags::ACK_REQ != 0
            || rx.unacked >= self.cfg.ack_every.max(1)
            || ce
            || arrival == Arrival::Duplicate
            || (had_holes && !rx.seq.has_holes());
        if ce {
            rx.stats.ce_marked += 1;
        }
        if arrival == Arrival::Duplicate {
            rx.dup = true;
            rx.stats.duplicates += 1;
            self.stats.rx_duplicates += 1;
            return Ok(Received::Duplicate);
        }
        rx.stats.rcvd += 1;
        if let Some(o) = hdr.origin {
            // The first copy went on another path: count it received there,
            // and drop this one if the first copy made it after all.
            let orig = self
                .rx
                .get_mut(usize::from(o.path))
                .ok_or(RecvError::Path(o.path))?;
            match orig.seq.on_data(o.psn, false) {
                Arrival::New => orig.ack_at = Some(now),
                Arrival::Duplicate => {
                    self.stats.rx_duplicates += 1;
                    return Ok(Received::Duplicate);
                }
                Arrival::OutOfWindow => return Err(RecvError::Window),
            }
        }
        if hdr.common.flags & flags::VOID != 0 {
            return Ok(Received::Void);
        }
        self.stats.rx_data += 1;
        Ok(Received::Data(hdr, payload))
    }

    fn on_ack(&mut self, path: usize, ack: &AckHeader, now: u64) -> Result<(), RecvError> {
        if let Some(code) = ack.status {
            // Before crediting: the rejected message must not complete as a
            // success. Repeated statuses find nothing (already handled).
            let _ = self.fail_message(ack.stream, ack.stream_msn, code);
        }
        let sack = Bits256::from_bytes(&ack.sack);
        let p = self.tx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
        let out = match p.seq.on_ack(ack.common.psn, &sack) {
            Ok(out) => out,
            Err(AckError::Stale) => return Ok(()),
            Err(AckError::AheadOfSender) => return Err(RecvError::Ack),
        };
        let rtt = us(now).wrapping_sub(ack.common.timestamp);
        if ack.common.timestamp != 0 && rtt < 10_000_000 {
            p.rtt.sample(rtt.max(1));
            self.rtt.sample(rtt.max(1));
            if !self.all_sampled {
                // Paths of one connection cross the same fabric: a path
                // without a sample of its own starts from this one's.
                let est = p.rtt;
                self.all_sampled = true;
                for q in &mut self.tx {
                    if !q.rtt.is_sampled() {
                        q.rtt = est;
                    }
                }
            }
        }
        let p = self.tx.get_mut(path).ok_or(RecvError::Path(path as u16))?;
        // Newly acknowledged packets: credit their messages.
        let mut finished = [0u16; 8];
        let mut n_finished = 0;
        for i in out.acked.ones() {
            let psn = out.acked_base.wrapping_add(i);
            let idx = psn % WINDOW;
            p.resend.clear(idx);
            p.relocate.clear(idx);
            let slot = core::mem::take(&mut p.slots[idx as usize]);
            if slot.state != SlotState::Live {
                continue;
            }
            p.outstanding = p.outstanding.saturating_sub(1);
            self.outstanding = self.outstanding.saturating_sub(1);
            self.acked_total = self.acked_total.wrapping_add(1);
            if before(p.delivered, slot.order.wrapping_add(1)) {
                p.delivered = slot.order.wrapping_add(1);
            }
            let Some(m) = self.msgs.get_mut(usize::from(slot.msg)) else {
                continue;
            };
            if m.state == MsgState::Active && m.gen == slot.gen {
                m.acked += 1;
                if m.acked == m.sent_packets && m.sent_packets == m.packets {
                    m.state = MsgState::Done;
                    if n_finished < finished.len() {
                        finished[n_finished] = slot.msg;
                        n_finished += 1;
                    }
                }
            }
        }
        // Reordering: a duplicate proves a resend spurious; allow twice the
        // reordering. A long run without one eases it back by a quarter.
        let floor = self.cfg.reorder_window;
        if ack.common.flags & wire::ack_flags::DUPLICATE != 0 {
            self.stats.spurious += 1;
            // min/max, not clamp: clamp has a panic path for min > max.
            self.reorder = self
                .reorder
                .max(1)
                .saturating_mul(2)
                .min(WINDOW / 2)
                .max(floor);
            self.reorder_quiet = 0;
        } else {
            self.reorder_quiet = self.reorder_quiet.saturating_add(out.newly_acked);
            if self.reorder_quiet >= REORDER_EASE_AFTER {
                self.reorder = (self.reorder - self.reorder / 4).max(floor);
                self.reorder_quiet = 0;
            }
        }
        // Loss: unacknowledged packets sent before one that was acknowledged.
        let reorder = self.reorder;
        let una = p.seq.oldest_unacked().unwrap_or(0);
        for k in 0..p.seq.in_flight() {
            let psn = una.wrapping_add(k);
            let idx = psn % WINDOW;
            let slot = &p.slots[idx as usize];
            if slot.state == SlotState::Live
                && !p.seq.is_acked(psn)
                && before(slot.order.wrapping_add(reorder), p.delivered)
                && !p.relocate.get(idx)
            {
                p.resend.set(idx);
            }
        }
        // Congestion control.
        if ack.ecn_ce > 0 {
            self.stats.ce_echoed += u64::from(ack.ecn_ce);
            p.stats.ce_echoed += u64::from(ack.ecn_ce);
            // Coupled decrease: the connection gives up what the marked path
            // gave up, so a congested path sheds its load onto the others
            // while marks on every path still halve the whole.
            let before = p.cc.window();
            if p.cc.on_congestion(una, una.wrapping_add(p.seq.in_flight())) {
                self.cc.reduce(before - p.cc.window());
            }
            self.trace.push(TraceEvent::Ecn {
                path: path as u16,
                marks: ack.ecn_ce,
                path_window: p.cc.window(),
                conn_window: self.cc.window(),
            });
        } else if out.newly_acked > 0 {
            p.cc.on_acked(out.newly_acked);
            self.cc.on_acked(out.newly_acked);
        }
        if self.pace_mbps != ack.rate_hint_mbps {
            self.trace.push(TraceEvent::RateHint {
                from: self.pace_mbps,
                to: ack.rate_hint_mbps,
            });
        }
        self.pace_mbps = ack.rate_hint_mbps;
        if ack.rate_hint_mbps > 0 {
            // The share over the round trip without queueing: the senders'
            // windows then add up to the receiver's bandwidth-delay product
            // and a standing queue drains instead of being kept.
            let rtt = self.rtt.min_us().max(1);
            let bytes = u32::from(self.cfg.max_payload) + HEADER_OVERHEAD;
            self.cc.cap(window_for_rate(ack.rate_hint_mbps, rtt, bytes));
        }
        // Timer: progress restarts it.
        if out.newly_acked > 0 {
            p.expiries = 0;
            p.strikes = 0;
            p.acked_at = now.max(1);
            p.deadline = (p.outstanding > 0).then(|| now + p.timer_ns(&self.rtt, &self.cfg));
        }
        for m in finished.into_iter().take(n_finished) {
            self.release(m);
        }
        if n_finished == finished.len() {
            // More finished than tracked above: sweep every stream.
            self.release_all();
        }
        Ok(())
    }

    fn on_nak(&mut self, nak: &NakHeader) -> Result<(), RecvError> {
        self.fail_message(nak.stream, nak.msn, nak.code)
    }

    /// The receiver rejected message `msn` of `stream` with `code`.
    fn fail_message(&mut self, stream: u32, msn: u32, code: NakCode) -> Result<(), RecvError> {
        let i = self
            .msgs
            .iter()
            .position(|m| {
                matches!(m.state, MsgState::Active | MsgState::Done)
                    && m.msg.stream == stream
                    && m.msg.msn == msn
            })
            .ok_or(RecvError::Nak)?;
        let m = self.msgs.get_mut(i).ok_or(RecvError::Nak)?;
        m.error = Some(code);
        // Stop cutting it; it completes once what was sent is acknowledged.
        m.packets = m.sent_packets;
        if m.acked == m.sent_packets {
            m.state = MsgState::Done;
        }
        if self.cursor == Some(i as u16) {
            self.advance_cursor();
        }
        self.release(i as u16);
        Ok(())
    }

    /// Reports, in order, the finished messages of the stream of message `i`
    /// that no older message of that stream holds back.
    fn release(&mut self, i: u16) {
        let Some(stream) = self.msgs.get(usize::from(i)).map(|m| m.msg.stream) else {
            return;
        };
        loop {
            let oldest = self
                .msgs
                .iter()
                .enumerate()
                .filter(|(_, m)| {
                    m.msg.stream == stream && matches!(m.state, MsgState::Active | MsgState::Done)
                })
                .min_by_key(|(_, m)| m.gen.wrapping_sub(self.next_gen))
                .map(|(j, m)| (j, m.state));
            match oldest {
                Some((j, MsgState::Done)) if usize::from(self.done_len) < MAX_MESSAGES => {
                    let tail =
                        (usize::from(self.done_head) + usize::from(self.done_len)) % MAX_MESSAGES;
                    if let Some(m) = self.msgs.get_mut(j) {
                        m.state = MsgState::Reported;
                    }
                    self.done[tail] = j as u16;
                    self.done_len += 1;
                }
                _ => return,
            }
        }
    }

    fn release_all(&mut self) {
        for i in 0..MAX_MESSAGES {
            if self.msgs[i].state == MsgState::Done {
                self.release(i as u16);
            }
        }
    }

    fn advance_cursor(&mut self) {
        let next_gen = self.next_gen;
        self.cursor = self
            .msgs
            .iter()
            .enumerate()
            .filter(|(_, m)| {
                m.state == MsgState::Active && m.sent_packets < m.packets && m.error.is_none()
            })
            .min_by_key(|(_, m)| m.gen.wrapping_sub(next_gen))
            .map(|(j, _)| j as u16);
    }

    // ---- sending ----------------------------------------------------------

    /// The next packet to send now, its header written to `buf` (which must
    /// hold [`super::framing::TRANSPORT_HEADER_MAX`] bytes); `None` when
    /// nothing may be sent until an input arrives.
    pub fn poll_transmit(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        if self.nak_len > 0 {
            return self.send_nak(buf);
        }
        if let Some(i) = self.rx.iter().position(|r| r.due) {
            return self.send_ack(i, buf);
        }
        for i in 0..self.n_paths() {
            if self.tx.get(i).is_some_and(|p| !p.resend.is_empty()) {
                if let Some(t) = self.send_resend(i, now, buf) {
                    return Some(t);
                }
            }
        }
        for i in 0..self.n_paths() {
            if self.tx.get(i).is_some_and(|p| !p.relocate.is_empty()) {
                if let Some(t) = self.send_relocated(i, now, buf) {
                    return Some(t);
                }
            }
        }
        self.send_new(now, buf)
    }

    /// Like [`Self::poll_transmit`], but only an ACK or a NAK: for a caller
    /// that sends data from one context only and control from any.
    pub fn poll_control(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        if self.nak_len > 0 {
            return self.send_nak(buf);
        }
        let i = self.rx.iter().position(|r| r.due)?;
        self.send_ack(i, buf)
    }

    /// Whether [`Self::poll_transmit`] may send data now: a packet to resend
    /// or to move, or new data with room in the connection's window (the
    /// paths' windows and the pacer may still hold it back).
    pub fn wants_to_send(&self) -> bool {
        let n = self.n_paths();
        self.tx
            .iter()
            .take(n)
            .any(|p| !p.resend.is_empty() || !p.relocate.is_empty())
            || (self.cursor.is_some() && self.conn_has_room())
    }

    fn send_nak(&mut self, buf: &mut [u8]) -> Option<Transmit> {
        let nak = self.naks[0];
        self.naks.copy_within(1.., 0);
        self.nak_len -= 1;
        let path = usize::from(nak.common.path);
        let sport = self.rx.get(path).map_or(PORT_BASE, |r| r.sport);
        let len = wire::encode_nak(&nak, buf).ok()?;
        self.stats.tx_naks += 1;
        Some(Transmit {
            path: nak.common.path,
            sport,
            len,
            payload: None,
        })
    }

    fn send_ack(&mut self, i: usize, buf: &mut [u8]) -> Option<Transmit> {
        let hint = self.hint_now();
        let rx = self.rx.get_mut(i)?;
        rx.due = false;
        rx.unacked = 0;
        let fl = if core::mem::take(&mut rx.dup) {
            wire::ack_flags::DUPLICATE
        } else {
            0
        };
        rx.ack_at = None;
        if rx.sport == 0 {
            // Acknowledged only through relocated packets: any port will do.
            rx.sport = PORT_BASE.wrapping_add(i as u16);
        }
        let (cum, sack, ce) = rx.seq.take_ack();
        let ack = AckHeader {
            common: Common {
                ptype: PacketType::Ack,
                flags: fl,
                path: i as u16,
                conn: self.cfg.remote_id,
                psn: cum,
                // Only an ACK that answers fresh data carries an RTT sample
                // (not one sent for a relocated copy's first path).
                timestamp: core::mem::take(&mut rx.echo),
            },
            sack: sack.to_bytes(),
            ecn_ce: ce,
            rate_hint_mbps: hint,
            status: self.rejected.map(|r| r.2),
            stream: self.rejected.map_or(self.progress.0, |r| r.0),
            stream_msn: self.rejected.map_or(self.progress.1, |r| r.1),
        };
        let len = wire::encode_ack(&ack, buf).ok()?;
        self.stats.tx_acks += 1;
        Some(Transmit {
            path: i as u16,
            sport: rx.sport,
            len,
            payload: None,
        })
    }

    /// Encodes the data packet of `slot` as PSN `psn` of path `path`.
    fn encode_slot(
        &self,
        path: usize,
        psn: u32,
        slot: &TxSlot,
        extra: u8,
        now: u64,
        buf: &mut [u8],
    ) -> Option<Transmit> {
        let m = self.msgs.get(usize::from(slot.msg))?;
        let mut fl = extra;
        // A cancelled message's packet goes out without its bytes.
        let (len, void) = if m.cancelled {
            (0, true)
        } else {
            (slot.len, false)
        };
        if void {
            fl |= flags::VOID;
        }
        if slot.offset == 0 {
            fl |= flags::FIRST;
        }
        if slot.last {
            fl |= flags::LAST | flags::ACK_REQ;
        }
        if slot.origin.is_some() {
            fl |= flags::RELOCATED;
        }
        let hdr = DataHeader {
            common: Common {
                ptype: PacketType::Data,
                flags: fl,
                path: path as u16,
                conn: self.cfg.remote_id,
                psn,
                timestamp: us(now),
            },
            opcode: m.msg.opcode,
            stream: m.msg.stream,
            msn: m.msg.msn,
            offset: slot.offset,
            msg_len: m.msg.len,
            remote: m.msg.remote,
            rsn: m.msg.rsn,
            imm: m.msg.imm,
            atomic: m.msg.atomic,
            origin: slot.origin,
        };
        let hlen = wire::encode_data(&hdr, len, buf).ok()?;
        Some(Transmit {
            path: path as u16,
            sport: self.tx.get(path)?.sport,
            len: hlen,
            payload: (len > 0).then_some(Segment {
                stream: m.msg.stream,
                msn: m.msg.msn,
                offset: slot.offset,
                len,
            }),
        })
    }

    fn send_resend(&mut self, i: usize, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        let p = self.tx.get_mut(i)?;
        let una = p.seq.oldest_unacked()?;
        // Oldest first: walk from una.
        let mut found = None;
        for k in 0..p.seq.in_flight() {
            let idx = una.wrapping_add(k) % WINDOW;
            if p.resend.clear(idx) {
                found = Some(una.wrapping_add(k));
                break;
            }
        }
        let Some(psn) = found else {
            p.resend = Bits256::EMPTY;
            return None;
        };
        if p.deadline.is_none() {
            p.deadline = Some(now + p.timer_ns(&self.rtt, &self.cfg));
        }
        let slot = &mut p.slots[psn as usize % SLOTS];
        if slot.state != SlotState::Live {
            return None;
        }
        slot.order = p.next_order;
        p.next_order = p.next_order.wrapping_add(1);
        let slot = *slot;
        self.stats.retransmits += 1;
        p.stats.resent += 1;
        p.stats.sent += 1;
        let sport = p.sport;
        self.trace.push(TraceEvent::Resend {
            path: i as u16,
            psn,
            sport,
        });
        let extra = flags::RETRANSMIT | flags::ACK_REQ;
        self.encode_slot(i, psn, &slot, extra, now, buf)
    }

    /// Free window of path `i` for new packets (0 for a suspect path).
    fn free(&self, i: usize) -> u32 {
        let Some(p) = self.tx.get(i) else {
            return 0;
        };
        if p.expiries > 0 || !p.seq.can_send() {
            return 0;
        }
        p.cc.window().saturating_sub(p.outstanding)
    }

    /// The path for the next packet: the most free window among the paths
    /// known to work, else among those on a new, untried route.
    fn pick(&self, except: Option<usize>) -> Option<usize> {
        let n = usize::from(self.cfg.paths);
        let free = |proven: bool| {
            pick_path((0..n).map(move |i| {
                let ok =
                    Some(i) != except && self.tx.get(i).is_some_and(|p| (p.strikes == 0) == proven);
                (if ok { self.free(i) } else { 0 }, 0)
            }))
        };
        free(true).or_else(|| free(false))
    }

    /// Whether the connection window has room. Packets on a path whose
    /// timer expired without progress are likely gone, so they do not count
    /// (as lost packets leave TCP's pipe): the other paths keep sending.
    fn conn_has_room(&self) -> bool {
        let stuck: u32 = self
            .tx
            .iter()
            .take(self.n_paths())
            .filter(|p| p.expiries > 0)
            .fold(0u32, |a, p| a.saturating_add(p.outstanding));
        self.outstanding.saturating_sub(stuck) < self.cc.window()
    }

    /// Puts `slot` on a path as a new PSN and accounts for it.
    fn place(&mut self, path: usize, mut slot: TxSlot, now: u64) -> Option<u32> {
        let p = self.tx.get_mut(path)?;
        let psn = p.seq.send()?;
        slot.state = SlotState::Live;
        slot.order = p.next_order;
        p.next_order = p.next_order.wrapping_add(1);
        p.slots[psn as usize % SLOTS] = slot;
        p.outstanding += 1;
        p.stats.sent += 1;
        if p.deadline.is_none() {
            p.deadline = Some(now + p.timer_ns(&self.rtt, &self.cfg));
        }
        self.outstanding += 1;
        self.sent_total = self.sent_total.wrapping_add(1);
        Some(psn)
    }

    fn send_relocated(&mut self, src: usize, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        if !self.conn_has_room() {
            return None;
        }
        let target = self.pick(Some(src))?;
        let p = self.tx.get_mut(src)?;
        let idx = p.relocate.ones().next()?;
        p.relocate.clear(idx);
        let una = p.seq.oldest_unacked()?;
        let psn = una.wrapping_add(idx.wrapping_sub(una % WINDOW) % WINDOW);
        let old = &mut p.slots[idx as usize];
        if old.state != SlotState::Live {
            return None;
        }
        old.state = SlotState::Moved;
        let moved = TxSlot {
            origin: Some(Origin {
                path: src as u16,
                psn,
            }),
            ..*old
        };
        p.outstanding = p.outstanding.saturating_sub(1);
        self.outstanding = self.outstanding.saturating_sub(1);
        let new_psn = self.place(target, moved, now)?;
        self.stats.relocations += 1;
        if let Some(p) = self.tx.get_mut(src) {
            p.stats.relocated += 1;
        }
        self.trace.push(TraceEvent::Relocate {
            from: src as u16,
            psn,
            to: target as u16,
        });
        self.encode_slot(target, new_psn, &moved, flags::RETRANSMIT, now, buf)
    }

    fn send_new(&mut self, now: u64, buf: &mut [u8]) -> Option<Transmit> {
        // The pacer is a timer only while it alone holds new data back.
        self.paced = false;
        let ci = usize::from(self.cursor?);
        if !self.conn_has_room() {
            return None;
        }
        if self.pace_mbps > 0 && now < self.next_send {
            self.paced = true;
            return None;
        }
        let path = self.pick(None)?;
        let m = self.msgs.get_mut(ci)?;
        let mp = u32::from(m.payload);
        if m.state != MsgState::Active || m.sent_packets >= m.packets {
            self.advance_cursor();
            return None;
        }
        let offset = m.sent_packets.saturating_mul(mp);
        let len = if m.msg.opcode.has_payload() {
            m.msg.len.saturating_sub(offset).min(mp) as u16
        } else {
            0
        };
        m.sent_packets += 1;
        let last = m.sent_packets == m.packets;
        let slot = TxSlot {
            state: SlotState::Live,
            msg: ci as u16,
            gen: m.gen,
            offset,
            len,
            last,
            origin: None,
            order: 0,
        };
        if last {
            self.advance_cursor();
        }
        let psn = self.place(path, slot, now)?;
        self.stats.tx_data += 1;
        if self.pace_mbps > 0 {
            // bits / (Mbit/s) = microseconds; * 1000 for nanoseconds.
            let bits = (u64::from(len) + u64::from(HEADER_OVERHEAD)) * 8;
            let gap = bits * 1_000 / u64::from(self.pace_mbps);
            // Time the pacer could not use (no window, nothing posted) is
            // credited up to PACE_CREDIT packets, so that the average reaches
            // the share instead of losing every idle moment.
            let floor = now.saturating_sub(gap * PACE_CREDIT);
            self.next_send = self.next_send.max(floor) + gap;
        }
        // Ask for an ACK when nothing more is queued or this path's window
        // is full, so the sender never waits on a delayed acknowledgement.
        // (Not when only the connection's window is full: the paths' ACKs
        // arrive every `ack_every` packets anyway, and asking on every send
        // that fills the window made an ACK of every other packet.)
        let more = self.cursor.is_some() && self.free(path) > 0;
        let extra = if more { 0 } else { flags::ACK_REQ };
        self.encode_slot(path, psn, &slot, extra, now, buf)
    }
}
