// SPDX-License-Identifier: GPL-2.0

//! What a connection counts, for telemetry: its totals ([`Stats`]), each
//! path's sending and receiving side ([`TxPathStats`], [`RxPathStats`],
//! shown together with the path's state as [`PathInfo`]), the reasons it
//! drops datagrams for ([`DropReason`]) and the messages it refuses.
//! Documentation/observability.md explains every counter.

/// Adds `n` to a counter. Counters wrap rather than overflow: the kernel
/// builds this crate with overflow checks, where an overflow would panic.
#[inline]
pub fn tally(counter: &mut u64, n: u64) {
    *counter = counter.wrapping_add(n);
}

/// Why an arriving datagram was dropped: one counter each in
/// [`Stats::drops`] (`RecvError::reason` in `conn.rs` maps the errors).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DropReason {
    /// Shorter than its headers say.
    Truncated,
    /// A version this code does not speak.
    Version,
    /// An unknown packet type.
    PacketType,
    /// An unknown operation.
    Opcode,
    /// A NAK with an unknown code.
    NakCode,
    /// Flags its version does not define.
    Flags,
    /// A reserved field that is not zero.
    Reserved,
    /// A payload length the datagram does not have.
    PayloadLength,
    /// A payload outside its message.
    Bounds,
    /// Another connection id.
    Connection,
    /// A path the connection does not have.
    Path,
    /// A PSN outside the path's receive window.
    Window,
    /// An ACK of packets never sent.
    Ack,
    /// A NAK of a message not in progress.
    Nak,
    /// A hello handed to the connection (hellos are the handshake's).
    Hello,
}

impl DropReason {
    /// Every reason, in the order of [`Stats::drops`].
    pub const ALL: [Self; DROP_REASONS] = [
        Self::Truncated,
        Self::Version,
        Self::PacketType,
        Self::Opcode,
        Self::NakCode,
        Self::Flags,
        Self::Reserved,
        Self::PayloadLength,
        Self::Bounds,
        Self::Connection,
        Self::Path,
        Self::Window,
        Self::Ack,
        Self::Nak,
        Self::Hello,
    ];

    /// Its name in counters and telemetry (`drop_<name>`).
    pub const fn name(self) -> &'static str {
        match self {
            Self::Truncated => "truncated",
            Self::Version => "version",
            Self::PacketType => "packet_type",
            Self::Opcode => "opcode",
            Self::NakCode => "nak_code",
            Self::Flags => "flags",
            Self::Reserved => "reserved",
            Self::PayloadLength => "payload_length",
            Self::Bounds => "bounds",
            Self::Connection => "connection",
            Self::Path => "path",
            Self::Window => "window",
            Self::Ack => "ack",
            Self::Nak => "nak",
            Self::Hello => "hello",
        }
    }
}

/// The number of [`DropReason`]s.
pub const DROP_REASONS: usize = 15;

/// The number of ways a message is refused (NAK codes 1 to 5).
pub const REFUSALS: usize = 5;

/// Counters of one connection.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Data packets sent for the first time.
    pub tx_data: u64,
    /// Data packets resent on their path.
    pub retransmits: u64,
    /// Data packets moved to another path after their path failed.
    pub relocations: u64,
    /// Paths moved to a new source port.
    pub path_moves: u64,
    /// Probe and retransmission timer expiries.
    pub timeouts: u64,
    /// ACKs sent.
    pub tx_acks: u64,
    /// NAKs sent (messages refused).
    pub tx_naks: u64,
    /// ACKs received and taken.
    pub rx_acks: u64,
    /// NAKs received for a message in progress.
    pub rx_naks: u64,
    /// New data packets received.
    pub rx_data: u64,
    /// Duplicate data packets dropped.
    pub rx_duplicates: u64,
    /// CE-marked packets echoed to us.
    pub ce_echoed: u64,
    /// Datagrams dropped as malformed or not ours.
    pub rx_errors: u64,
    /// Resends taken for spurious: a duplicate was reported on a path soon
    /// after a packet the reordering rule resent there was acknowledged
    /// (each doubled the reordering allowed).
    pub spurious: u64,
    /// Times one of our messages was refused for want of a receive and
    /// waited for the receiver's RNR timer (a round of refusals counts once).
    pub rnr_waits: u64,
    /// Probe timers that expired while the connection made progress but
    /// nothing sent after the path's oldest packet had reached the peer
    /// (a queue, not a loss): re-armed instead of probing.
    pub deferred_probes: u64,
    /// Datagrams dropped, by [`DropReason`] (they add up to `rx_errors`).
    pub drops: [u64; DROP_REASONS],
    /// Messages refused, by NAK code less one (`NakCode` as `u8` - 1).
    pub refused: [u64; REFUSALS],
}

impl Stats {
    /// All counters zero.
    pub const EMPTY: Self = Self {
        tx_data: 0,
        retransmits: 0,
        relocations: 0,
        path_moves: 0,
        timeouts: 0,
        tx_acks: 0,
        tx_naks: 0,
        rx_acks: 0,
        rx_naks: 0,
        rx_data: 0,
        rx_duplicates: 0,
        ce_echoed: 0,
        rx_errors: 0,
        spurious: 0,
        rnr_waits: 0,
        deferred_probes: 0,
        drops: [0; DROP_REASONS],
        refused: [0; REFUSALS],
    };

    /// Adds `o`'s counts to these (a device's total over its connections).
    pub fn add(&mut self, o: &Self) {
        let Self {
            tx_data,
            retransmits,
            relocations,
            path_moves,
            timeouts,
            tx_acks,
            tx_naks,
            rx_acks,
            rx_naks,
            rx_data,
            rx_duplicates,
            ce_echoed,
            rx_errors,
            spurious,
            rnr_waits,
            deferred_probes,
            drops,
            refused,
        } = *o;
        self.tx_data = self.tx_data.wrapping_add(tx_data);
        self.retransmits = self.retransmits.wrapping_add(retransmits);
        self.relocations = self.relocations.wrapping_add(relocations);
        self.path_moves = self.path_moves.wrapping_add(path_moves);
        self.timeouts = self.timeouts.wrapping_add(timeouts);
        self.tx_acks = self.tx_acks.wrapping_add(tx_acks);
        self.tx_naks = self.tx_naks.wrapping_add(tx_naks);
        self.rx_acks = self.rx_acks.wrapping_add(rx_acks);
        self.rx_naks = self.rx_naks.wrapping_add(rx_naks);
        self.rx_data = self.rx_data.wrapping_add(rx_data);
        self.rx_duplicates = self.rx_duplicates.wrapping_add(rx_duplicates);
        self.ce_echoed = self.ce_echoed.wrapping_add(ce_echoed);
        self.rx_errors = self.rx_errors.wrapping_add(rx_errors);
        self.spurious = self.spurious.wrapping_add(spurious);
        self.rnr_waits = self.rnr_waits.wrapping_add(rnr_waits);
        self.deferred_probes = self.deferred_probes.wrapping_add(deferred_probes);
        for (a, b) in self.drops.iter_mut().zip(drops) {
            *a = a.wrapping_add(b);
        }
        for (a, b) in self.refused.iter_mut().zip(refused) {
            *a = a.wrapping_add(b);
        }
    }
}

/// Counters of a path's sending side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TxPathStats {
    /// Data packets sent on the path (first transmissions, resends and
    /// packets moved here from a failed path).
    pub sent: u64,
    /// Packets found lost on the path (a SACK hole or a probe) and resent
    /// on it.
    pub resent: u64,
    /// Packets moved off the path after it failed.
    pub relocated: u64,
    /// Probe timer expiries.
    pub timeouts: u64,
    /// Moves to a new source port.
    pub moves: u64,
    /// CE marks the receiver echoed for the path.
    pub ce_echoed: u64,
}

impl TxPathStats {
    /// All counters zero.
    pub const EMPTY: Self = Self {
        sent: 0,
        resent: 0,
        relocated: 0,
        timeouts: 0,
        moves: 0,
        ce_echoed: 0,
    };
}

/// Counters of a path's receiving side.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RxPathStats {
    /// Data packets received on the path for the first time (void packets
    /// and moved copies included).
    pub rcvd: u64,
    /// Data packets received again on it.
    pub duplicates: u64,
    /// New data packets that arrived marked CE (a copy's mark is not
    /// counted: anyone can send a copy, marked).
    pub ce_marked: u64,
}

impl RxPathStats {
    /// All counters zero.
    pub const EMPTY: Self = Self {
        rcvd: 0,
        duplicates: 0,
        ce_marked: 0,
    };
}

/// What a path looks like now (`Connection::path_info`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PathInfo {
    /// The UDP source port our packets take (the path's route).
    pub sport: u16,
    /// The source port the peer's packets on this path came from last
    /// (before any: `PORT_BASE` plus the path, where an ACK would go).
    pub peer_sport: u16,
    /// Congestion window, in packets.
    pub window: u32,
    /// Packets in flight.
    pub in_flight: u32,
    /// Smoothed round trip, in microseconds (0: no sample yet).
    pub srtt_us: u32,
    /// Probe timer expiries since the last progress (0: healthy; more:
    /// suspect, no new data is placed on it).
    pub expiries: u8,
    /// Route changes since the last progress (0: the route is proven).
    pub strikes: u8,
    /// Its sending side's counters.
    pub tx: TxPathStats,
    /// Its receiving side's counters.
    pub rx: RxPathStats,
}
