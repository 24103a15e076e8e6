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
//! duplicate (every path that owes an ACK at once on a new packet flagged
//! DRY: the sender's queue ran dry), and echoes the sender's timestamp; every ACK
//! carries the fair-share hint and the latest rejection. Placement and
//! in-order completion per stream are the caller's (see `stream`).
//! `Documentation/transport.md` tells the whole design.
//!
//! This file holds the types and the connection's state; its children hold
//! the code by concept: `tx` (what to send next, on which path), `rx`
//! (arrivals, ACKs and NAKs), `messages` (the message table and
//! completions), `pacing` (the rate hint we grant the peer) and `timers`
//! (probe timers, failing a path).

use super::cc::Aimd;
use super::path::{RecvPath, SendPath, WINDOW};
use super::rtt::Rtt;
use super::seq::Bits256;
use super::stats::{DropReason, PathInfo, RxPathStats, Stats, TxPathStats};
use super::trace::{TraceEvent, TraceRing};
use super::wire::{
    Atomic, Common, DataHeader, DecodeError, NakCode, NakHeader, Opcode, Origin, PacketType, Remote,
};

mod messages;
mod pacing;
mod rnr;
use rnr::{Parked, Undo};
pub use rnr::{PARKED, RNR_FOREVER};
mod rx;
mod timers;
mod tx;

/// The slowest rate a sender is paced at (kbit/s): a 4 KiB packet every
/// half second. A smaller hint is taken as this (a forged ACK cannot hold
/// new data back for long).
pub const MIN_PACE_KBPS: u32 = 64;

/// Messages a connection holds at once (posted and not yet completed).
pub const MAX_MESSAGES: usize = 256;
/// Timer expiries without progress after which a path is failed: the first
/// sends a probe (the oldest packet again), the second moves the path if the
/// peer is known to answer (a packet sent since the probe, on another path,
/// was acknowledged: this route, not the peer, is silent).
pub const FAIL_AFTER_EXPIRIES: u8 = 2;
/// Timer expiries after which a path is failed without that evidence (one
/// path alone, every route down, or a peer whose ACKs come late in bursts:
/// moving then only resends what was waiting).
pub const FAIL_BLIND_AFTER_EXPIRIES: u8 = 4;
const _: () = assert!(FAIL_BLIND_AFTER_EXPIRIES > FAIL_AFTER_EXPIRIES);
/// The receiver acknowledges at least every this many packets of a path,
/// unless [`Config::ack_every`] says otherwise.
pub const ACK_EVERY: u16 = 2;
/// First UDP source port of paths; ports are drawn from here to 65535.
pub const PORT_BASE: u16 = 49152;

const SLOTS: usize = WINDOW as usize;
/// Fixed-point one of the CE share.
const CE_ONE: u32 = 1024;
const NAK_QUEUE: usize = 64;

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
    /// Initial window of each path, in packets; also the first flight (at
    /// least 8): the packets in flight over the whole connection until the
    /// peer has acknowledged one.
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
    /// duplicate, and every path that owes one on a new packet flagged DRY).
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
    /// Send, Send with Immediate and Write with Immediate: low 8 bits of the
    /// receive it consumes (such messages of the stream counted from 0); 0
    /// otherwise.
    pub rsn: u8,
    /// Its length in bytes (for Read: the bytes asked for; atomics: 8).
    pub len: u32,
    /// Remote key and address, for operations that have them.
    pub remote: Option<Remote>,
    /// Immediate data, for operations that have it.
    pub imm: Option<u32>,
    /// Operands, for atomics.
    pub atomic: Option<Atomic>,
    /// Send, Send with Immediate and Write with Immediate: the receiver's
    /// completion is solicited (its packets carry the SOLICITED flag);
    /// false otherwise.
    pub solicited: bool,
}

/// Why a message was not accepted.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PostError {
    /// The connection holds [`MAX_MESSAGES`] messages: wait for completions.
    Full,
    /// The stream has [`MAX_OUTSTANDING`](super::stream::MAX_OUTSTANDING) messages in progress.
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
    /// The path: one of ours, or with `reverse` one of the peer's. With
    /// `reverse` and `sport` it names the flow (statistics; the kernel
    /// caches a route per flow).
    pub path: u16,
    /// The UDP source port: it selects the route.
    pub sport: u16,
    /// An ACK or NAK of the peer's path `path`, sent from the port the
    /// peer's packets on it came from (an ACK of a path none came by uses
    /// `PORT_BASE` plus the path, a NAK `PORT_BASE`), not from one of ours:
    /// a flow of its own, whose route is not our path's.
    pub reverse: bool,
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
    /// A packet of a message its sender cancelled, or the void copy that
    /// closes a packet refused for want of a receive (`conn::rnr`): it fills
    /// its PSN, and nothing is placed.
    Void,
    /// A data copy of a packet refused for want of a receive: refused again
    /// (only its void copy may fill its PSN, its bytes come on a new one);
    /// NAK it again with [`Connection::rnr_nak`] and its queue pair's timer.
    Refused(DataHeader),
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
    /// Marked lost by the reordering rule (packets sent after it were
    /// acknowledged), not by the timer. If it was not lost after all, its
    /// two copies arrive and the receiver reports a duplicate: the path
    /// reorders. (A per-ACK heuristic: the ACK does not say which packet
    /// was the duplicate.)
    by_order: bool,
    /// Parked (refused for want of a receive): it goes out void, to close
    /// its PSN, and its acknowledgement credits nothing.
    void: bool,
    /// When its latest copy was sent (the timestamp it carried).
    sent_us: u32,
    /// Transmission order of its latest copy over the whole connection.
    conn_order: u32,
    /// Its latest copy is a resend (`send_resend`: a probe, the reordering
    /// rule's, a failed path's, a parked packet's void copy): an ACK of it
    /// may be an earlier copy's, delayed rather than lost.
    resent: bool,
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
    /// The connection's transmission order when the path last probed: an
    /// acknowledgement of a packet sent at or after it is the evidence that
    /// moves the path at [`FAIL_AFTER_EXPIRIES`] or a later expiry.
    probe_order: u32,
    /// Route changes since the last progress: each doubles the timer, so a
    /// connection whose every route is down does not spin.
    strikes: u8,
    /// When the current route last delivered (data out, ACKs back); 0: not
    /// since the path moved to it.
    acked_at: u64,
    /// When a packet the reordering rule marked lost was last acknowledged
    /// (0: none pending). A duplicate reported within a probe timer of it
    /// is taken for that resend's copy: the path reorders.
    order_acked_at: u64,
    stats: TxPathStats,
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
    /// The newest sender timestamp seen on the path (0: none yet): a
    /// duplicate newer than it is the sender's resend, not an old copy.
    newest: u32,
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
    /// Times the receiver may still refuse it for want of a receive
    /// ([`RNR_FOREVER`]: no limit).
    rnr_left: u8,
    /// Its stream waits for the receiver until then (0: not waiting):
    /// nothing more of it is cut.
    rnr_until: u64,
    /// Its parked packets' void copies not yet acknowledged: it is not
    /// done before they are (the copies are built from it).
    voids: u16,
}

impl MsgSlot {
    /// Every packet sent of it is acknowledged, void copies included.
    const fn settled(&self) -> bool {
        self.acked >= self.sent_packets && self.voids == 0
    }
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
        solicited: false,
    },
    payload: 1,
    packets: 0,
    sent_packets: 0,
    acked: 0,
    error: None,
    cancelled: false,
    rnr_left: 0,
    rnr_until: 0,
    voids: 0,
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
    probe_order: 0,
    strikes: 0,
    acked_at: 0,
    order_acked_at: 0,
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
    by_order: false,
    void: false,
    sent_us: 0,
    conn_order: 0,
    resent: false,
};

const RX_PATH_EMPTY: RxPath = RxPath {
    seq: RecvPath::new(0),
    sport: 0,
    unacked: 0,
    due: false,
    dup: false,
    ack_at: None,
    echo: 0,
    newest: 0,
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
    rnr_timer: 0,
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
    /// Slots of `msgs` that are not free: a full table refuses a post at
    /// once, without a scan (a peer's pump offers it every waiting QP).
    held: u16,
    next_gen: u32,
    /// The message being cut into packets.
    cursor: Option<u16>,
    done: [u16; MAX_MESSAGES],
    done_head: u16,
    done_len: u16,
    naks: [NakHeader; NAK_QUEUE],
    nak_len: u8,
    /// Our receiver's fair share for the peer (kbit/s), before scaling by
    /// marks.
    rate_hint: u32,
    /// Share of arriving data marked CE, smoothed (1024 = all).
    ce_ewma: u32,
    /// The peer's hint for us (kbit/s, 0: none): new data is paced at it.
    pace_kbps: u32,
    /// Earliest time the pacer lets the next new packet go.
    next_send: u64,
    /// Whether new data waits for the pacer (then it is a timer).
    paced: bool,
    /// Whether the peer acknowledged anything yet. Until it has, at most one
    /// path's initial window (at least 8 packets) is in flight over the whole
    /// connection (the first flight, `window_now`): the ACK that ends it brings the receiver's rate hint,
    /// and a connection that joins a busy receiver does not queue a window
    /// of every path ahead of the senders already paced there.
    answered: bool,
    /// Packets sent over the whole connection (new and resent, wrapping):
    /// the next one's [`TxSlot::conn_order`].
    tx_count: u32,
    /// One past the latest [`TxSlot::conn_order`] known to have reached
    /// the peer (its copy of that order, not an earlier one, acknowledged).
    delivered_order: u32,
    /// When an ACK last acknowledged something new (ns; 0: never).
    progress_at: u64,
    progress: (u32, u32),
    /// The message our receiver rejected last: every ACK carries it.
    rejected: Option<(u32, u32, NakCode)>,
    /// How to forget the arrival of the data packet `receive` returned
    /// last ([`Connection::not_ready`]); cleared by the next datagram.
    undo: Option<Undo>,
    /// When the first message waiting for its receiver is due again.
    rnr_wake: Option<u64>,
    /// Refused packets waiting to be sent again (the first `n_parked`).
    parked: [Parked; PARKED],
    n_parked: u16,
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

/// `items` with their indices. (`enumerate` and `position` count with an
/// addition the compiler cannot always prove never overflows, and the
/// kernel builds this crate with overflow checks: a range of indices has
/// none.)
fn indexed<T>(items: &[T]) -> impl Iterator<Item = (usize, &T)> {
    (0..items.len()).zip(items)
}

/// The index of the first of `items` for which `f` holds ([`indexed`]).
fn position<T>(items: &[T], mut f: impl FnMut(&T) -> bool) -> Option<usize> {
    indexed(items).find(|(_, x)| f(x)).map(|(i, _)| i)
}

/// The clock in microseconds as data packets carry it: wrapping, never 0
/// (an ACK echoing 0 carries no RTT sample).
fn us(now: u64) -> u32 {
    ((now / 1_000) as u32).max(1)
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
        held: 0,
        next_gen: 0,
        cursor: None,
        done: [0; MAX_MESSAGES],
        done_head: 0,
        done_len: 0,
        naks: [EMPTY_NAK; NAK_QUEUE],
        nak_len: 0,
        rate_hint: 0,
        ce_ewma: 0,
        pace_kbps: 0,
        next_send: 0,
        paced: false,
        answered: false,
        tx_count: 0,
        delivered_order: 0,
        progress_at: 0,
        progress: (0, 0),
        rejected: None,
        undo: None,
        rnr_wake: None,
        parked: [Parked::EMPTY; PARKED],
        n_parked: 0,
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
        self.cfg = Config {
            paths: cfg.paths.clamp(1, P.min(usize::from(u16::MAX)) as u16),
            max_payload: cfg.max_payload.max(1),
            ..cfg
        };
        let initial = self.initial_window();
        let cfg = &self.cfg;
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
        self.answered = false;
    }

    /// A path's initial window in packets (the configured one, within what
    /// a path can hold); the connection's first flight is one of these, or
    /// 8 packets if that is more.
    fn initial_window(&self) -> u32 {
        self.cfg.initial_window.clamp(super::cc::MIN_WINDOW, WINDOW)
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

    /// The rate new data is paced at (the peer's hint), kbit/s; 0: none.
    pub const fn pace_kbps(&self) -> u32 {
        self.pace_kbps
    }

    /// The connection's window in force, in packets: the congestion window,
    /// or the first flight's until the peer has acknowledged something.
    pub fn window(&self) -> u32 {
        self.window_now()
    }

    /// The source port of the path the peer acknowledged last among those
    /// not suspect (no probe timer expired since): a route that worked both
    /// ways, for a datagram outside the paths that must reach the peer (a
    /// keepalive). `None` before any acknowledgement. (A path that moves
    /// loses its claim; `fail_path` borrows the route only if the ACK was
    /// recent.)
    pub fn proven_sport(&self) -> Option<u16> {
        self.tx
            .iter()
            .take(self.n_paths())
            .filter(|q| q.acked_at > 0 && q.expiries == 0)
            .max_by_key(|q| q.acked_at)
            .map(|q| q.sport)
    }

    /// The source port path `turn` (modulo the paths in use) takes now.
    pub fn path_sport(&self, turn: u64) -> Option<u16> {
        let n = self.n_paths() as u64;
        let i = turn.checked_rem(n)?;
        self.tx.get(usize::try_from(i).ok()?).map(|q| q.sport)
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

    /// Our receiver's fair share for the peer, in kbit/s, as the next ACK
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
}
