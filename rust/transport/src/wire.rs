// SPDX-License-Identifier: GPL-2.0

//! The MetaRoCE wire format: packet headers, a strict decoder and an encoder.
//!
//! Every field is big-endian. The layout is documented field by field in
//! `Documentation/wire-format.md`; this module is the one place that knows it,
//! so that it can follow a published specification later.
//!
//! The decoder never panics and never trusts a length: any input either
//! decodes to a packet whose fields are consistent, or is rejected with a
//! [`DecodeError`] naming what is wrong.

/// The wire format version this code speaks: 4 since 2026-12-07 (the data
/// flag DRY); 3 since 2026-12-05 (a packet
/// refused for want of a receive is not acknowledged, and its NAK names it
/// and carries the RNR timer); 2 since 2026-12-03 (the receive number in
/// data packets, the SOLICITED flag, NAK code 5 "no queue pair"). A peer
/// speaking another version drops every packet of ours, and we its.
pub const VERSION: u8 = 4;

/// Bytes of the common header that starts every packet.
pub const COMMON_LEN: usize = 16;
/// Bytes of the fixed part of a data header (after the common header).
pub const DATA_FIXED_LEN: usize = 20;
/// Bytes of a remote address and key (RDMA Write, Read, atomics).
pub const REMOTE_LEN: usize = 12;
/// Bytes of immediate data.
pub const IMM_LEN: usize = 4;
/// Bytes of the atomic operands (swap/add value, compare value).
pub const ATOMIC_LEN: usize = 16;
/// Bytes of the origin of a relocated packet (path, reserved, PSN).
pub const ORIGIN_LEN: usize = 8;
/// Bytes of an acknowledgement after the common header.
pub const ACK_LEN: usize = 48;
/// Bytes of a negative acknowledgement after the common header.
pub const NAK_LEN: usize = 12;
/// Bytes of a hello after the common header.
pub const HELLO_LEN: usize = 8;
/// Bits in the selective-acknowledgement bitmap of an ACK.
pub const SACK_BITS: usize = 256;

/// Packet types (low nibble of byte 0).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum PacketType {
    /// Carries (part of) a message.
    Data = 1,
    /// Acknowledges packets of one path.
    Ack = 2,
    /// Reports an error for one message.
    Nak = 3,
    /// Names the sender's incarnation of a connection (see `handshake`).
    Hello = 4,
    /// One unreliable datagram between two UD queue pairs, outside any
    /// connection.
    Datagram = 5,
}

/// Data packet flags (byte 1 of a data packet).
pub mod flags {
    /// The first packet of its message.
    pub const FIRST: u8 = 1 << 0;
    /// The last packet of its message.
    pub const LAST: u8 = 1 << 1;
    /// A retransmission of a packet sent before.
    pub const RETRANSMIT: u8 = 1 << 2;
    /// The sender asks for an immediate acknowledgement.
    pub const ACK_REQ: u8 = 1 << 3;
    /// The packet was first sent on another path, which failed; an origin
    /// part names that path and PSN so the receiver can drop a late original.
    pub const RELOCATED: u8 = 1 << 4;
    /// The sender cancelled the message (its queue pair went away): the
    /// packet carries no payload and only fills its PSN; nothing is placed.
    pub const VOID: u8 = 1 << 5;
    /// The sender asked for a solicited event (verbs' `IBV_SEND_SOLICITED`):
    /// the receive this message completes wakes a CQ armed for solicited
    /// completions only. On every packet of a Send, Send with Immediate or
    /// Write with Immediate so marked; never on other operations.
    pub const SOLICITED: u8 = 1 << 6;
    /// The sender's queue ran dry with this packet (it also asks for an
    /// ACK): the receiver acknowledges at once every path that owes an
    /// ACK, not only this packet's, so that no path's last packets wait
    /// for the receiver's delayed ACK.
    pub const DRY: u8 = 1 << 7;
    /// Every flag this version defines.
    pub const ALL: u8 = FIRST | LAST | RETRANSMIT | ACK_REQ | RELOCATED | VOID | SOLICITED | DRY;
}

/// ACK flags (byte 1 of an ACK).
pub mod ack_flags {
    /// The packet that prompted this ACK had arrived before: the sender's
    /// resend of it was spurious (it took reordering for loss).
    pub const DUPLICATE: u8 = 1 << 0;
    /// Every ACK flag this version defines.
    pub const ALL: u8 = DUPLICATE;
}

/// Hello flags (byte 1 of a hello).
pub mod hello_flags {
    /// The sender doubts that the incarnation this hello names is still
    /// alive (another hello claimed the peer restarted): an end that is that
    /// incarnation answers with a hello of its own, which no other can forge
    /// without knowing both epochs.
    pub const CHALLENGE: u8 = 1 << 0;
    /// Every hello flag this version defines.
    pub const ALL: u8 = CHALLENGE;
}

/// Datagram flags (byte 1 of a datagram).
pub mod datagram_flags {
    /// Immediate data follows the header.
    pub const IMM: u8 = 1 << 0;
    /// The sender asked for a solicited event (as [`super::flags::SOLICITED`]).
    pub const SOLICITED: u8 = 1 << 6;
    /// Every datagram flag this version defines.
    pub const ALL: u8 = IMM | SOLICITED;
}

/// The length of a datagram's header without immediate data: the common
/// header, whose fields it reads its own way ([`DatagramHeader`]).
pub const DATAGRAM_LEN: usize = COMMON_LEN;

/// The bytes of a GRH, which verbs put at the start of every UD receive.
pub const GRH_LEN: usize = 40;

/// Message operations.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Opcode {
    /// Send: lands in the posted receive matched by the message sequence number.
    Send = 0,
    /// Send with immediate data.
    SendImm = 1,
    /// RDMA Write to (rkey, address).
    Write = 2,
    /// RDMA Write with immediate data (consumes a receive at the target).
    WriteImm = 3,
    /// RDMA Read request: asks for `msg_len` bytes at (rkey, address).
    ReadReq = 4,
    /// RDMA Read response: data for the requester's message (stream, msn).
    ReadResp = 5,
    /// Atomic compare and swap of the 8 bytes at (rkey, address).
    CmpSwap = 6,
    /// Atomic fetch and add of the 8 bytes at (rkey, address).
    FetchAdd = 7,
    /// Send with Invalidate: a Send whose immediate slot carries a key of
    /// the responder's that it invalidates when the receive completes.
    SendInv = 8,
}

impl Opcode {
    /// The operation of wire value `v`, if it is one.
    pub fn from_u8(v: u8) -> Option<Self> {
        Some(match v {
            0 => Self::Send,
            1 => Self::SendImm,
            2 => Self::Write,
            3 => Self::WriteImm,
            4 => Self::ReadReq,
            5 => Self::ReadResp,
            6 => Self::CmpSwap,
            7 => Self::FetchAdd,
            8 => Self::SendInv,
            _ => return None,
        })
    }

    /// Whether packets of this operation carry a remote key and address.
    pub const fn has_remote(self) -> bool {
        matches!(
            self,
            Self::Write | Self::WriteImm | Self::ReadReq | Self::CmpSwap | Self::FetchAdd
        )
    }

    /// Whether packets of this operation carry a 32-bit word after the
    /// remote part: immediate data, or the key a Send with Invalidate
    /// invalidates.
    pub const fn has_imm(self) -> bool {
        matches!(self, Self::SendImm | Self::WriteImm | Self::SendInv)
    }

    /// Send, Send with Immediate or Send with Invalidate (they consume a
    /// receive and land in its buffers).
    pub const fn is_send(self) -> bool {
        matches!(self, Self::Send | Self::SendImm | Self::SendInv)
    }

    /// Whether a message of this operation consumes a receive of the
    /// responder (and names it with its RSN): Sends and Write with
    /// Immediate.
    pub const fn consumes_receive(self) -> bool {
        matches!(
            self,
            Self::Send | Self::SendImm | Self::WriteImm | Self::SendInv
        )
    }

    /// Compare-and-swap or fetch-and-add.
    pub const fn is_atomic(self) -> bool {
        matches!(self, Self::CmpSwap | Self::FetchAdd)
    }

    /// Whether packets of this operation carry message bytes.
    pub const fn has_payload(self) -> bool {
        !matches!(self, Self::ReadReq | Self::CmpSwap | Self::FetchAdd)
    }
}

/// The header every packet starts with.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Common {
    /// What follows.
    pub ptype: PacketType,
    /// Type-specific flags (see [`flags`] for data packets; 0 otherwise).
    pub flags: u8,
    /// The path (sender's index) the packet travels on.
    pub path: u16,
    /// The receiver's identifier of the connection.
    pub conn: u32,
    /// Data: the packet's per-path sequence number. ACK/NAK: the cumulative
    /// acknowledgement, i.e. the first sequence number not yet received.
    pub psn: u32,
    /// Data: the sender's clock (microseconds, wrapping). ACK/NAK: the value
    /// echoed from the data packet that triggered it, for RTT measurement.
    pub timestamp: u32,
}

/// Remote memory named by a data packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Remote {
    /// The remote key of the target memory region.
    pub rkey: u32,
    /// The virtual address of the target (for the whole message; the packet
    /// lands at `addr + offset`).
    pub addr: u64,
}

/// Operands of an atomic operation.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Atomic {
    /// Compare-and-swap: the new value. Fetch-and-add: the addend.
    pub swap_add: u64,
    /// Compare-and-swap: the expected value. Fetch-and-add: 0.
    pub compare: u64,
}

/// Where a relocated packet was first sent.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Origin {
    /// The path it was first sent on.
    pub path: u16,
    /// Its PSN on that path.
    pub psn: u32,
}

/// A data packet's header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DataHeader {
    /// The common header (`ptype` is [`PacketType::Data`]).
    pub common: Common,
    /// The operation.
    pub opcode: Opcode,
    /// The stream (queue pair) on the connection.
    pub stream: u32,
    /// The message sequence number within the stream (every message counts;
    /// the receive a message consumes is named by `rsn`).
    pub msn: u32,
    /// Receive sequence number, low 8 bits: for Send, Send with Immediate
    /// and Write with Immediate, which receive of the stream the message
    /// consumes (the n-th such message uses the n-th receive), so the
    /// receiver can place a Send before the messages ahead of it arrive and
    /// refuse one that finds no receive; 0 for other operations.
    pub rsn: u8,
    /// Byte offset of this packet's payload in the message.
    pub offset: u32,
    /// Total bytes of the message.
    pub msg_len: u32,
    /// Remote key and address, for operations that have them.
    pub remote: Option<Remote>,
    /// Immediate data, for operations that have it.
    pub imm: Option<u32>,
    /// Operands, for atomics.
    pub atomic: Option<Atomic>,
    /// First path and PSN, exactly when the RELOCATED flag is set.
    pub origin: Option<Origin>,
}

impl DataHeader {
    /// Encoded length of this header, common header included.
    #[allow(clippy::len_without_is_empty)] // a header is never empty
    pub fn len(&self) -> usize {
        COMMON_LEN
            + DATA_FIXED_LEN
            + if self.remote.is_some() { REMOTE_LEN } else { 0 }
            + if self.imm.is_some() { IMM_LEN } else { 0 }
            + if self.atomic.is_some() { ATOMIC_LEN } else { 0 }
            + if self.origin.is_some() { ORIGIN_LEN } else { 0 }
    }
}

/// An acknowledgement for one path.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AckHeader {
    /// The common header: `psn` is the first sequence number of the path not
    /// yet received (everything before it was).
    pub common: Common,
    /// Selective acknowledgement: bit `i` (bit `i % 8` of byte `i / 8`) set
    /// means sequence number `psn + 1 + i` was received.
    pub sack: [u8; SACK_BITS / 8],
    /// Data packets of this path received with ECN CE since the previous ACK.
    pub ecn_ce: u16,
    /// The receiver's fair share for this sender, in kbit/s (0: no hint).
    pub rate_hint_kbps: u32,
    /// `None`: `stream`/`stream_msn` report progress. Otherwise the receiver
    /// rejected message `stream_msn` of `stream` with this code: every ACK
    /// carries it from then on, so no acknowledgement of that message's
    /// packets can reach the sender without it.
    pub status: Option<NakCode>,
    /// Progress of one stream: every message of `stream` below `msn` is
    /// delivered and may be completed (or the rejected message, see `status`).
    pub stream: u32,
    /// See `stream`.
    pub stream_msn: u32,
}

impl AckHeader {
    /// Whether the SACK bitmap records `psn` as received (false outside it).
    pub fn sacked(&self, psn: u32) -> bool {
        let i = psn.wrapping_sub(self.common.psn).wrapping_sub(1) as usize;
        i < SACK_BITS && self.sack[i / 8] & (1 << (i % 8)) != 0
    }
}

/// Why a message failed at the receiver.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NakCode {
    /// Key, address, length or access rights do not allow the access.
    RemoteAccess = 1,
    /// The request is malformed or not allowed in the stream's state.
    InvalidRequest = 2,
    /// No receive was posted for a Send or Write with Immediate: the
    /// refused packet is not acknowledged, and the sender sends it again
    /// after the NAK's `rnr_timer` (it fails the message once the queue
    /// pair's `rnr_retry` is used up).
    ReceiverNotReady = 3,
    /// The receiver failed the operation for a reason of its own.
    RemoteOperation = 4,
    /// No queue pair takes the stream on the receiver (it was destroyed,
    /// or never existed): the sender treats the message as one a peer
    /// never answers, as verbs does a request to a QP that is gone.
    NoQueuePair = 5,
}

/// A negative acknowledgement for one message.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NakHeader {
    /// The common header (as for an ACK).
    pub common: Common,
    /// What went wrong.
    pub code: NakCode,
    /// [`NakCode::ReceiverNotReady`]: how long the sender waits before it
    /// sends the refused packets again, in verbs' 5-bit `min_rnr_timer`
    /// encoding (see `rnr::rnr_delay_ns`); 0 for every other code.
    pub rnr_timer: u8,
    /// The stream of the failed message.
    pub stream: u32,
    /// The failed message.
    pub msn: u32,
}

/// A hello: the sender's incarnation of the connection between two hosts,
/// and the receiver's as far as the sender knows it (`common.conn`, 0 when
/// it knows none yet).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HelloHeader {
    /// The common header (`ptype` is [`PacketType::Hello`]; `path`, `psn` and
    /// `timestamp` carry nothing).
    pub common: Common,
    /// The sender's incarnation: the connection id it receives on.
    pub epoch: u32,
    /// The sender's initial packet sequence number: path `i` starts at
    /// `isn + (i << 24)`. Random per incarnation, so that a sender who cannot
    /// see the traffic must guess a PSN window as well as the epoch.
    pub isn: u32,
}

/// A datagram between two UD queue pairs. It has the common header's shape:
/// the connection id field carries the destination QP number, the PSN field
/// the source QP number, the timestamp field the Q_Key; the path id is 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DatagramHeader {
    /// The receiving queue pair (24 bits).
    pub dest_qpn: u32,
    /// The sending queue pair (24 bits).
    pub src_qpn: u32,
    /// The Q_Key the receiving queue pair must hold.
    pub qkey: u32,
    /// Immediate data, if any.
    pub imm: Option<u32>,
    /// Whether the sender asked for a solicited event.
    pub solicited: bool,
}

impl DatagramHeader {
    /// The header's length on the wire.
    #[allow(clippy::len_without_is_empty)] // a header is never empty
    pub fn len(&self) -> usize {
        DATAGRAM_LEN + if self.imm.is_some() { IMM_LEN } else { 0 }
    }
}

/// A decoded packet; data packets borrow their payload from the input.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Packet<'a> {
    /// A data packet and its payload.
    Data(DataHeader, &'a [u8]),
    /// An acknowledgement.
    Ack(AckHeader),
    /// A negative acknowledgement.
    Nak(NakHeader),
    /// A hello.
    Hello(HelloHeader),
    /// A datagram and its payload.
    Datagram(DatagramHeader, &'a [u8]),
}

/// Why a datagram is not a valid MetaRoCE packet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum DecodeError {
    /// Shorter than its headers say.
    Truncated,
    /// A version this code does not speak.
    Version(u8),
    /// An unknown packet type.
    PacketType(u8),
    /// An unknown opcode.
    Opcode(u8),
    /// An unknown NAK code.
    NakCode(u8),
    /// Flags this version does not define, a combination it refuses
    /// (SOLICITED on an operation that takes no receive, DRY without
    /// ACK_REQ), or flags on a packet without any.
    Flags(u8),
    /// A reserved field is not zero.
    Reserved,
    /// The payload length field does not match the datagram.
    PayloadLength,
    /// The payload does not fit in the message (`offset + len > msg_len`), or
    /// an operation that carries no payload has one, or an atomic's message
    /// length is not 8.
    Bounds,
}

/// Why a header cannot be encoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum EncodeError {
    /// The output buffer is too small.
    BufferTooSmall,
    /// The header is inconsistent (optional parts missing or present against
    /// the opcode, payload out of the message bounds, unknown flags).
    Invalid,
}

struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], DecodeError> {
        let end = self.pos.checked_add(N).ok_or(DecodeError::Truncated)?;
        let bytes = self.buf.get(self.pos..end).ok_or(DecodeError::Truncated)?;
        let mut out = [0u8; N];
        out.copy_from_slice(bytes);
        self.pos = end;
        Ok(out)
    }

    fn u8(&mut self) -> Result<u8, DecodeError> {
        Ok(self.take::<1>()?[0])
    }

    fn u16(&mut self) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.take()?))
    }

    fn u32(&mut self) -> Result<u32, DecodeError> {
        Ok(u32::from_be_bytes(self.take()?))
    }

    fn u64(&mut self) -> Result<u64, DecodeError> {
        Ok(u64::from_be_bytes(self.take()?))
    }

    fn rest(&self) -> &'a [u8] {
        self.buf.get(self.pos..).unwrap_or(&[])
    }
}

struct Writer<'a> {
    buf: &'a mut [u8],
    pos: usize,
}

impl Writer<'_> {
    fn put(&mut self, bytes: &[u8]) {
        // Callers check the total length first; `encode_*` never writes past it.
        let Some(end) = self.pos.checked_add(bytes.len()) else {
            self.pos = usize::MAX;
            return;
        };
        if let Some(dst) = self.buf.get_mut(self.pos..end) {
            dst.copy_from_slice(bytes);
        }
        self.pos = end;
    }
}

fn packet_type(v: u8) -> Option<PacketType> {
    Some(match v {
        1 => PacketType::Data,
        2 => PacketType::Ack,
        3 => PacketType::Nak,
        4 => PacketType::Hello,
        5 => PacketType::Datagram,
        _ => return None,
    })
}

/// The type and connection id of a datagram, read from its common header
/// without decoding the rest (for dispatch); `None` if it is too short or of
/// another version or an unknown type. For a [`PacketType::Datagram`] the
/// id is its destination QP number. [`decode`] still checks the packet.
pub fn peek(buf: &[u8]) -> Option<(PacketType, u32)> {
    let b0 = *buf.first()?;
    if b0 >> 4 != VERSION {
        return None;
    }
    let ptype = packet_type(b0 & 0x0f)?;
    let id = buf.get(4..8)?;
    Some((ptype, u32::from_be_bytes([id[0], id[1], id[2], id[3]])))
}

/// Decodes one datagram (the UDP payload).
pub fn decode(buf: &[u8]) -> Result<Packet<'_>, DecodeError> {
    let mut r = Reader { buf, pos: 0 };
    let b0 = r.u8()?;
    if b0 >> 4 != VERSION {
        return Err(DecodeError::Version(b0 >> 4));
    }
    let ptype = packet_type(b0 & 0x0f).ok_or(DecodeError::PacketType(b0 & 0x0f))?;
    let flags = r.u8()?;
    let common = Common {
        ptype,
        flags,
        path: r.u16()?,
        conn: r.u32()?,
        psn: r.u32()?,
        timestamp: r.u32()?,
    };
    match ptype {
        PacketType::Data => decode_data(common, r),
        PacketType::Ack => decode_ack(common, r),
        PacketType::Nak => decode_nak(common, r),
        PacketType::Hello => decode_hello(common, r),
        PacketType::Datagram => decode_datagram(common, r),
    }
}

/// QP numbers have 24 bits.
const QPN_BITS: u32 = 0xff_ffff;

fn decode_datagram(common: Common, mut r: Reader<'_>) -> Result<Packet<'_>, DecodeError> {
    if common.flags & !datagram_flags::ALL != 0 {
        return Err(DecodeError::Flags(common.flags));
    }
    if common.path != 0 || common.conn & !QPN_BITS != 0 || common.psn & !QPN_BITS != 0 {
        return Err(DecodeError::Reserved);
    }
    let imm = if common.flags & datagram_flags::IMM != 0 {
        Some(r.u32()?)
    } else {
        None
    };
    let hdr = DatagramHeader {
        dest_qpn: common.conn,
        src_qpn: common.psn,
        qkey: common.timestamp,
        imm,
        solicited: common.flags & datagram_flags::SOLICITED != 0,
    };
    Ok(Packet::Datagram(hdr, r.rest()))
}

fn decode_data(common: Common, mut r: Reader<'_>) -> Result<Packet<'_>, DecodeError> {
    // Every bit of a data packet's flags is defined (`flags::ALL`); the
    // rules below refuse the combinations that make no sense.
    const _: () = assert!(flags::ALL == u8::MAX);
    let op = r.u8()?;
    let opcode = Opcode::from_u8(op).ok_or(DecodeError::Opcode(op))?;
    if common.flags & flags::SOLICITED != 0 && !opcode.consumes_receive() {
        return Err(DecodeError::Flags(common.flags));
    }
    // A queue that ran dry asks for this packet's ACK too.
    if common.flags & flags::DRY != 0 && common.flags & flags::ACK_REQ == 0 {
        return Err(DecodeError::Flags(common.flags));
    }
    let rsn = r.u8()?;
    if rsn != 0 && !opcode.consumes_receive() {
        return Err(DecodeError::Reserved);
    }
    let payload_len = r.u16()?;
    let stream = r.u32()?;
    let msn = r.u32()?;
    let offset = r.u32()?;
    let msg_len = r.u32()?;
    let remote = if opcode.has_remote() {
        Some(Remote {
            rkey: r.u32()?,
            addr: r.u64()?,
        })
    } else {
        None
    };
    let imm = if opcode.has_imm() {
        Some(r.u32()?)
    } else {
        None
    };
    let atomic = if opcode.is_atomic() {
        Some(Atomic {
            swap_add: r.u64()?,
            compare: r.u64()?,
        })
    } else {
        None
    };
    let origin = if common.flags & flags::RELOCATED != 0 {
        let path = r.u16()?;
        if r.u16()? != 0 {
            return Err(DecodeError::Reserved);
        }
        Some(Origin {
            path,
            psn: r.u32()?,
        })
    } else {
        None
    };
    let payload = r.rest();
    if payload.len() != usize::from(payload_len) {
        return Err(if payload.len() < usize::from(payload_len) {
            DecodeError::Truncated
        } else {
            DecodeError::PayloadLength
        });
    }
    let hdr = DataHeader {
        common,
        opcode,
        stream,
        msn,
        offset,
        msg_len,
        remote,
        rsn,
        imm,
        atomic,
        origin,
    };
    if !bounds_ok(&hdr, payload_len) {
        return Err(DecodeError::Bounds);
    }
    Ok(Packet::Data(hdr, payload))
}

/// Payload within the message; no payload where the operation has none;
/// atomics work on exactly 8 bytes.
fn bounds_ok(hdr: &DataHeader, payload_len: u16) -> bool {
    let end = u64::from(hdr.offset) + u64::from(payload_len);
    if end > u64::from(hdr.msg_len) {
        return false;
    }
    if !hdr.opcode.has_payload() && (payload_len != 0 || hdr.offset != 0) {
        return false;
    }
    if hdr.common.flags & flags::VOID != 0 && payload_len != 0 {
        return false;
    }
    !hdr.opcode.is_atomic() || hdr.msg_len == 8
}

fn decode_ack(common: Common, mut r: Reader<'_>) -> Result<Packet<'_>, DecodeError> {
    if common.flags & !ack_flags::ALL != 0 {
        return Err(DecodeError::Flags(common.flags));
    }
    let sack = r.take::<{ SACK_BITS / 8 }>()?;
    let ecn_ce = r.u16()?;
    // "Receiver not ready" is never a status: its packet is not
    // acknowledged, so there is nothing for it to travel with.
    let status = match r.u8()? {
        0 => None,
        3 => return Err(DecodeError::NakCode(3)),
        c => Some(nak_code(c)?),
    };
    if r.u8()? != 0 {
        return Err(DecodeError::Reserved);
    }
    let ack = AckHeader {
        common,
        sack,
        ecn_ce,
        status,
        rate_hint_kbps: r.u32()?,
        stream: r.u32()?,
        stream_msn: r.u32()?,
    };
    if !r.rest().is_empty() {
        return Err(DecodeError::PayloadLength);
    }
    Ok(Packet::Ack(ack))
}

fn nak_code(c: u8) -> Result<NakCode, DecodeError> {
    match c {
        1 => Ok(NakCode::RemoteAccess),
        2 => Ok(NakCode::InvalidRequest),
        3 => Ok(NakCode::ReceiverNotReady),
        4 => Ok(NakCode::RemoteOperation),
        5 => Ok(NakCode::NoQueuePair),
        _ => Err(DecodeError::NakCode(c)),
    }
}

fn decode_nak(common: Common, mut r: Reader<'_>) -> Result<Packet<'_>, DecodeError> {
    if common.flags != 0 {
        return Err(DecodeError::Flags(common.flags));
    }
    let code = nak_code(r.u8()?)?;
    let [rnr_timer, r1, r2] = r.take::<3>()?;
    // Only "receiver not ready" carries a timer, in verbs' 5-bit encoding.
    let timer_ok = rnr_timer == 0 || (code == NakCode::ReceiverNotReady && rnr_timer < 32);
    if !timer_ok || [r1, r2] != [0; 2] {
        return Err(DecodeError::Reserved);
    }
    let nak = NakHeader {
        common,
        code,
        rnr_timer,
        stream: r.u32()?,
        msn: r.u32()?,
    };
    if !r.rest().is_empty() {
        return Err(DecodeError::PayloadLength);
    }
    Ok(Packet::Nak(nak))
}

fn decode_hello(common: Common, mut r: Reader<'_>) -> Result<Packet<'_>, DecodeError> {
    if common.flags & !hello_flags::ALL != 0 {
        return Err(DecodeError::Flags(common.flags));
    }
    let epoch = r.u32()?;
    let isn = r.u32()?;
    if !r.rest().is_empty() {
        return Err(DecodeError::PayloadLength);
    }
    Ok(Packet::Hello(HelloHeader { common, epoch, isn }))
}

fn put_common(w: &mut Writer<'_>, c: &Common) {
    w.put(&[(VERSION << 4) | c.ptype as u8, c.flags]);
    w.put(&c.path.to_be_bytes());
    w.put(&c.conn.to_be_bytes());
    w.put(&c.psn.to_be_bytes());
    w.put(&c.timestamp.to_be_bytes());
}

/// Encodes a data header for a payload of `payload_len` bytes into `out`;
/// the payload goes right after the returned number of bytes.
pub fn encode_data(
    hdr: &DataHeader,
    payload_len: u16,
    out: &mut [u8],
) -> Result<usize, EncodeError> {
    let op = hdr.opcode;
    let consistent = hdr.common.ptype == PacketType::Data
        && hdr.remote.is_some() == op.has_remote()
        && hdr.imm.is_some() == op.has_imm()
        && hdr.atomic.is_some() == op.is_atomic()
        && hdr.origin.is_some() == (hdr.common.flags & flags::RELOCATED != 0)
        && (hdr.rsn == 0 || op.consumes_receive())
        && (hdr.common.flags & flags::SOLICITED == 0 || op.consumes_receive())
        && (hdr.common.flags & flags::DRY == 0 || hdr.common.flags & flags::ACK_REQ != 0)
        && bounds_ok(hdr, payload_len);
    if !consistent {
        return Err(EncodeError::Invalid);
    }
    let len = hdr.len();
    if out.len() < len {
        return Err(EncodeError::BufferTooSmall);
    }
    let mut w = Writer { buf: out, pos: 0 };
    put_common(&mut w, &hdr.common);
    w.put(&[op as u8, hdr.rsn]);
    w.put(&payload_len.to_be_bytes());
    for v in [hdr.stream, hdr.msn, hdr.offset, hdr.msg_len] {
        w.put(&v.to_be_bytes());
    }
    if let Some(rem) = hdr.remote {
        w.put(&rem.rkey.to_be_bytes());
        w.put(&rem.addr.to_be_bytes());
    }
    if let Some(imm) = hdr.imm {
        w.put(&imm.to_be_bytes());
    }
    if let Some(a) = hdr.atomic {
        w.put(&a.swap_add.to_be_bytes());
        w.put(&a.compare.to_be_bytes());
    }
    if let Some(o) = hdr.origin {
        w.put(&o.path.to_be_bytes());
        w.put(&[0, 0]);
        w.put(&o.psn.to_be_bytes());
    }
    Ok(w.pos)
}

/// Checks a control packet's (ACK, NAK, hello) common header and the room for it and
/// its `body_len` bytes, and writes the common header.
fn start_control<'a>(
    common: &Common,
    ptype: PacketType,
    allowed_flags: u8,
    body_len: usize,
    out: &'a mut [u8],
) -> Result<Writer<'a>, EncodeError> {
    if common.ptype != ptype || common.flags & !allowed_flags != 0 {
        return Err(EncodeError::Invalid);
    }
    if out.len() < COMMON_LEN + body_len {
        return Err(EncodeError::BufferTooSmall);
    }
    let mut w = Writer { buf: out, pos: 0 };
    put_common(&mut w, common);
    Ok(w)
}

/// Encodes a datagram's header into `out`; its payload goes right after the
/// returned number of bytes.
pub fn encode_datagram(hdr: &DatagramHeader, out: &mut [u8]) -> Result<usize, EncodeError> {
    if hdr.dest_qpn & !QPN_BITS != 0 || hdr.src_qpn & !QPN_BITS != 0 {
        return Err(EncodeError::Invalid);
    }
    let mut flags = 0;
    if hdr.imm.is_some() {
        flags |= datagram_flags::IMM;
    }
    if hdr.solicited {
        flags |= datagram_flags::SOLICITED;
    }
    let common = Common {
        ptype: PacketType::Datagram,
        flags,
        path: 0,
        conn: hdr.dest_qpn,
        psn: hdr.src_qpn,
        timestamp: hdr.qkey,
    };
    let body = hdr.len() - COMMON_LEN;
    let mut w = start_control(
        &common,
        PacketType::Datagram,
        datagram_flags::ALL,
        body,
        out,
    )?;
    if let Some(imm) = hdr.imm {
        w.put(&imm.to_be_bytes());
    }
    Ok(w.pos)
}

/// The GRH verbs put before a UD message in its receive buffer, for a
/// datagram that came over IPv4 as RoCE v2 lays it out: 20 bytes of zeros,
/// then the IPv4 header (with its checksum, by which verbs tell it from an
/// IPv6 one) of a UDP datagram carrying `udp_payload` bytes from `saddr` to
/// `daddr`.
pub fn ipv4_grh(saddr: [u8; 4], daddr: [u8; 4], udp_payload: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    let total = udp_payload.saturating_add(20 + 8).min(0xffff) as u16;
    let ip = &mut g[20..];
    ip[0] = 0x45;
    ip[2..4].copy_from_slice(&total.to_be_bytes());
    // Time to live 64, protocol UDP.
    ip[8] = 64;
    ip[9] = 17;
    ip[12..16].copy_from_slice(&saddr);
    ip[16..20].copy_from_slice(&daddr);
    let mut sum: u32 = 0;
    for pair in ip.chunks_exact(2) {
        sum += u32::from(u16::from_be_bytes([pair[0], pair[1]]));
    }
    while sum > 0xffff {
        sum = (sum & 0xffff) + (sum >> 16);
    }
    ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
    g
}

/// The GRH verbs put before a UD message in its receive buffer, for a
/// datagram that came over IPv6: the IPv6 header itself (version 6, next
/// header UDP, hop limit 64) of a UDP datagram carrying `udp_payload` bytes
/// from `saddr` to `daddr`, whose addresses are the GIDs verbs read.
pub fn ipv6_grh(saddr: &[u8; 16], daddr: &[u8; 16], udp_payload: usize) -> [u8; GRH_LEN] {
    let mut g = [0u8; GRH_LEN];
    g[0] = 0x60;
    let len = (8 + udp_payload).min(0xffff) as u16;
    g[4..6].copy_from_slice(&len.to_be_bytes());
    g[6] = 17;
    g[7] = 64;
    g[8..24].copy_from_slice(saddr);
    g[24..40].copy_from_slice(daddr);
    g
}

/// Encodes an acknowledgement into `out`; returns its length.
pub fn encode_ack(ack: &AckHeader, out: &mut [u8]) -> Result<usize, EncodeError> {
    let mut w = start_control(&ack.common, PacketType::Ack, ack_flags::ALL, ACK_LEN, out)?;
    w.put(&ack.sack);
    w.put(&ack.ecn_ce.to_be_bytes());
    w.put(&[ack.status.map_or(0, |c| c as u8), 0]);
    for v in [ack.rate_hint_kbps, ack.stream, ack.stream_msn] {
        w.put(&v.to_be_bytes());
    }
    Ok(w.pos)
}

/// Encodes a negative acknowledgement into `out`; returns its length.
pub fn encode_nak(nak: &NakHeader, out: &mut [u8]) -> Result<usize, EncodeError> {
    let mut w = start_control(&nak.common, PacketType::Nak, 0, NAK_LEN, out)?;
    w.put(&[nak.code as u8, nak.rnr_timer, 0, 0]);
    w.put(&nak.stream.to_be_bytes());
    w.put(&nak.msn.to_be_bytes());
    Ok(w.pos)
}

/// Encodes a hello into `out`; returns its length.
pub fn encode_hello(hello: &HelloHeader, out: &mut [u8]) -> Result<usize, EncodeError> {
    let mut w = start_control(
        &hello.common,
        PacketType::Hello,
        hello_flags::ALL,
        HELLO_LEN,
        out,
    )?;
    w.put(&hello.epoch.to_be_bytes());
    w.put(&hello.isn.to_be_bytes());
    Ok(w.pos)
}

#[cfg(test)]
mod tests {
    use super::super::framing::TRANSPORT_HEADER_MAX;
    use super::*;

    fn common(ptype: PacketType, flags: u8) -> Common {
        Common {
            ptype,
            flags,
            path: 3,
            conn: 0xdead_beef,
            psn: 1000,
            timestamp: 77,
        }
    }

    fn write_hdr() -> DataHeader {
        DataHeader {
            common: common(PacketType::Data, flags::FIRST),
            opcode: Opcode::WriteImm,
            stream: 9,
            msn: 4,
            offset: 0,
            msg_len: 4096,
            remote: Some(Remote {
                rkey: 0x1234,
                addr: 0x7f00_0000_1000,
            }),
            rsn: 0,
            imm: Some(0xcafe),
            atomic: None,
            origin: None,
        }
    }

    #[test]
    fn data_round_trip_with_payload() {
        let hdr = write_hdr();
        let mut buf = [0u8; 128];
        let n = encode_data(&hdr, 10, &mut buf).unwrap();
        assert_eq!(n, COMMON_LEN + DATA_FIXED_LEN + REMOTE_LEN + IMM_LEN);
        buf[n..n + 10].copy_from_slice(b"0123456789");
        assert_eq!(decode(&buf[..n + 10]), Ok(Packet::Data(hdr, b"0123456789")));
    }

    #[test]
    fn byte_order_is_big_endian() {
        let mut buf = [0u8; 128];
        encode_data(&write_hdr(), 0, &mut buf).unwrap();
        assert_eq!(buf[0], 0x41, "version 4, type data");
        assert_eq!(&buf[4..8], &[0xde, 0xad, 0xbe, 0xef]);
        assert_eq!(&buf[8..12], &1000u32.to_be_bytes());
    }

    #[test]
    fn widest_header_fits_the_budget() {
        let hdr = DataHeader {
            common: common(PacketType::Data, flags::RELOCATED),
            origin: Some(Origin { path: 1, psn: 2 }),
            opcode: Opcode::CmpSwap,
            msg_len: 8,
            rsn: 0,
            imm: None,
            atomic: Some(Atomic {
                swap_add: 1,
                compare: 2,
            }),
            ..write_hdr()
        };
        assert_eq!(hdr.len(), TRANSPORT_HEADER_MAX as usize);
        let mut buf = [0u8; 128];
        assert_eq!(encode_data(&hdr, 0, &mut buf), Ok(hdr.len()));
        assert!(COMMON_LEN + ACK_LEN <= TRANSPORT_HEADER_MAX as usize);
    }

    #[test]
    fn truncated_and_oversized_payloads_are_rejected() {
        let mut buf = [0u8; 128];
        let n = encode_data(&write_hdr(), 10, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n + 9]), Err(DecodeError::Truncated));
        assert_eq!(decode(&buf[..n + 11]), Err(DecodeError::PayloadLength));
        for cut in 0..n {
            assert_eq!(
                decode(&buf[..cut]),
                Err(DecodeError::Truncated),
                "cut {cut}"
            );
        }
    }

    #[test]
    fn payload_past_the_message_is_rejected() {
        let hdr = DataHeader {
            offset: 4090,
            ..write_hdr()
        };
        let mut buf = [0u8; 128];
        assert_eq!(encode_data(&hdr, 10, &mut buf), Err(EncodeError::Invalid));
        // Forge it on the wire: offset 4090 + 10 > 4096.
        let n = encode_data(&write_hdr(), 10, &mut buf).unwrap();
        buf[28..32].copy_from_slice(&4090u32.to_be_bytes());
        assert_eq!(decode(&buf[..n + 10]), Err(DecodeError::Bounds));
    }

    #[test]
    fn unknown_values_are_rejected() {
        let mut buf = [0u8; 128];
        // A plain Write: its RSN byte is reserved.
        let plain = DataHeader {
            opcode: Opcode::Write,
            imm: None,
            ..write_hdr()
        };
        let n = encode_data(&plain, 0, &mut buf).unwrap();
        let mut bad = buf;
        bad[0] = 0x51;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Version(5)));
        // The versions before: 3 had no DRY; 2 acknowledged a packet
        // refused for want of a receive; 1 had no receive number,
        // SOLICITED or code 5.
        bad[0] = 0x31;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Version(3)));
        bad[0] = 0x21;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Version(2)));
        bad[0] = 0x11;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Version(1)));
        bad = buf;
        bad[0] = 0x4f;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::PacketType(15)));
        // DRY without ACK_REQ (a queue that ran dry asks for this
        // packet's ACK too); with it, a packet as any other.
        bad = buf;
        bad[1] = flags::DRY;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Flags(flags::DRY)));
        bad[1] = flags::DRY | flags::ACK_REQ;
        assert!(matches!(decode(&bad[..n]), Ok(Packet::Data(..))));
        bad = buf;
        bad[16] = 99;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Opcode(99)));
        bad = buf;
        bad[17] = 1;
        assert_eq!(decode(&bad[..n]), Err(DecodeError::Reserved));
    }

    #[test]
    fn only_messages_that_consume_a_receive_carry_its_number() {
        let mut buf = [0u8; 128];
        let send = DataHeader {
            opcode: Opcode::Send,
            remote: None,
            imm: None,
            rsn: 0xa5,
            ..write_hdr()
        };
        let n = encode_data(&send, 0, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Data(send, &[][..])));
        let write = DataHeader {
            opcode: Opcode::Write,
            imm: None,
            rsn: 1,
            ..write_hdr()
        };
        assert_eq!(encode_data(&write, 0, &mut buf), Err(EncodeError::Invalid));
        let write_imm = DataHeader {
            opcode: Opcode::WriteImm,
            imm: Some(9),
            rsn: 2,
            ..write_hdr()
        };
        let n = encode_data(&write_imm, 0, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Data(write_imm, &[][..])));
        // A write whose reserved byte is set is refused by the decoder.
        let n = encode_data(&DataHeader { rsn: 0, ..write }, 0, &mut buf).unwrap();
        buf[COMMON_LEN + 1] = 1;
        assert_eq!(decode(&buf[..n]), Err(DecodeError::Reserved));
    }

    #[test]
    fn only_messages_that_complete_a_receive_are_solicited() {
        let mut buf = [0u8; 128];
        let mut send = DataHeader {
            opcode: Opcode::Send,
            remote: None,
            imm: None,
            ..write_hdr()
        };
        send.common.flags |= flags::SOLICITED;
        let n = encode_data(&send, 0, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Data(send, &[][..])));
        let mut write = DataHeader {
            opcode: Opcode::Write,
            imm: None,
            ..write_hdr()
        };
        let n = encode_data(&write, 0, &mut buf).unwrap();
        write.common.flags |= flags::SOLICITED;
        assert_eq!(encode_data(&write, 0, &mut buf), Err(EncodeError::Invalid));
        // A plain Write with the flag set on the wire is refused.
        buf[1] |= flags::SOLICITED;
        assert_eq!(
            decode(&buf[..n]),
            Err(DecodeError::Flags(write.common.flags))
        );
    }

    #[test]
    fn inconsistent_headers_do_not_encode() {
        let mut buf = [0u8; 128];
        let no_remote = DataHeader {
            remote: None,
            ..write_hdr()
        };
        assert_eq!(
            encode_data(&no_remote, 0, &mut buf),
            Err(EncodeError::Invalid)
        );
        let read_with_payload = DataHeader {
            opcode: Opcode::ReadReq,
            rsn: 0,
            imm: None,
            ..write_hdr()
        };
        assert_eq!(
            encode_data(&read_with_payload, 1, &mut buf),
            Err(EncodeError::Invalid)
        );
        assert_eq!(
            encode_data(&write_hdr(), 0, &mut buf[..20]),
            Err(EncodeError::BufferTooSmall)
        );
    }

    #[test]
    fn ack_round_trip_and_sack_bits() {
        let mut sack = [0u8; SACK_BITS / 8];
        sack[0] = 0b101; // psn + 1 and psn + 3
        sack[31] = 0x80; // psn + 256
        let ack = AckHeader {
            common: common(PacketType::Ack, 0),
            sack,
            ecn_ce: 5,
            status: None,
            rate_hint_kbps: 25_000_000,
            stream: 9,
            stream_msn: 4,
        };
        let mut buf = [0u8; 128];
        let n = encode_ack(&ack, &mut buf).unwrap();
        assert_eq!(n, COMMON_LEN + ACK_LEN);
        let Ok(Packet::Ack(got)) = decode(&buf[..n]) else {
            panic!("not an ack")
        };
        assert_eq!(got, ack);
        assert!(got.sacked(1001) && !got.sacked(1002) && got.sacked(1003));
        assert!(got.sacked(1256) && !got.sacked(1257));
        assert!(!got.sacked(1000), "the cumulative point itself is missing");
        assert!(!got.sacked(999));
        assert_eq!(decode(&buf[..n + 1]), Err(DecodeError::PayloadLength));
    }

    #[test]
    fn nak_round_trip() {
        let nak = NakHeader {
            common: common(PacketType::Nak, 0),
            code: NakCode::RemoteAccess,
            rnr_timer: 0,
            stream: 2,
            msn: 8,
        };
        let mut buf = [0u8; 64];
        let n = encode_nak(&nak, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Nak(nak)));
        // Only "receiver not ready" carries a timer, and only 5 bits of it.
        buf[COMMON_LEN + 1] = 12;
        assert_eq!(decode(&buf[..n]), Err(DecodeError::Reserved));
        let rnr = NakHeader {
            code: NakCode::ReceiverNotReady,
            rnr_timer: 31,
            ..nak
        };
        let n = encode_nak(&rnr, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Nak(rnr)));
        buf[COMMON_LEN + 1] = 32;
        assert_eq!(decode(&buf[..n]), Err(DecodeError::Reserved));
        buf[COMMON_LEN + 1] = 0;
        buf[COMMON_LEN + 3] = 1;
        assert_eq!(decode(&buf[..n]), Err(DecodeError::Reserved));
        buf[COMMON_LEN + 3] = 0;
        buf[COMMON_LEN] = 0;
        assert_eq!(decode(&buf[..n]), Err(DecodeError::NakCode(0)));
    }

    #[test]
    fn hello_round_trip() {
        let hello = HelloHeader {
            common: common(PacketType::Hello, 0),
            epoch: 0x0102_0304,
            isn: 0x0a0b_0c0d,
        };
        let mut buf = [0u8; 64];
        let n = encode_hello(&hello, &mut buf).unwrap();
        assert_eq!(n, COMMON_LEN + HELLO_LEN);
        assert_eq!(decode(&buf[..n]), Ok(Packet::Hello(hello)));
        assert_eq!(
            &buf[COMMON_LEN..COMMON_LEN + 8],
            &[1, 2, 3, 4, 10, 11, 12, 13]
        );
        assert_eq!(decode(&buf[..n + 1]), Err(DecodeError::PayloadLength));
        assert_eq!(decode(&buf[..n - 1]), Err(DecodeError::Truncated));
        buf[1] = 1 << 1;
        assert_eq!(decode(&buf[..n]), Err(DecodeError::Flags(1 << 1)));
        // The one hello flag.
        let challenge = HelloHeader {
            common: common(PacketType::Hello, hello_flags::CHALLENGE),
            epoch: 9,
            isn: 0,
        };
        let n = encode_hello(&challenge, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Hello(challenge)));
    }

    #[test]
    fn void_packets_carry_no_payload() {
        let mut h = write_hdr();
        h.common.flags |= flags::VOID;
        let mut buf = [0u8; 128];
        assert_eq!(encode_data(&h, 4, &mut buf), Err(EncodeError::Invalid));
        let n = encode_data(&h, 0, &mut buf).unwrap();
        assert_eq!(decode(&buf[..n]), Ok(Packet::Data(h, &[][..])));
        // A void packet with bytes after it is refused.
        buf[COMMON_LEN + 3] = 1;
        assert_eq!(decode(&buf[..n + 1]), Err(DecodeError::Bounds));
    }

    #[test]
    fn peek_reads_type_and_connection_only() {
        let hello = HelloHeader {
            common: common(PacketType::Hello, 0),
            epoch: 9,
            isn: 77,
        };
        let mut buf = [0u8; 64];
        let n = encode_hello(&hello, &mut buf).unwrap();
        assert_eq!(peek(&buf[..n]), Some((PacketType::Hello, 0xdead_beef)));
        // Only the common header's first 8 bytes are read.
        assert_eq!(peek(&buf[..8]), Some((PacketType::Hello, 0xdead_beef)));
        assert_eq!(peek(&buf[..7]), None);
        buf[0] = (VERSION << 4) | 9;
        assert_eq!(peek(&buf[..n]), None);
        buf[0] = (1 << 4) | 1;
        assert_eq!(peek(&buf[..n]), None);
    }

    #[test]
    fn datagrams_round_trip_and_reserved_bits_are_refused() {
        let h = DatagramHeader {
            dest_qpn: 0x12_3456,
            src_qpn: 0xab_cdef,
            qkey: 0x8001_0000,
            imm: Some(0xfeed_f00d),
            solicited: true,
        };
        let mut buf = [0u8; 64];
        let n = encode_datagram(&h, &mut buf).unwrap();
        assert_eq!(n, DATAGRAM_LEN + IMM_LEN);
        buf[n..n + 3].copy_from_slice(b"abc");
        assert_eq!(decode(&buf[..n + 3]), Ok(Packet::Datagram(h, &b"abc"[..])));
        assert_eq!(peek(&buf[..n]), Some((PacketType::Datagram, 0x12_3456)));
        let plain = DatagramHeader {
            imm: None,
            solicited: false,
            ..h
        };
        let m = encode_datagram(&plain, &mut buf).unwrap();
        assert_eq!(m, DATAGRAM_LEN);
        assert_eq!(decode(&buf[..m]), Ok(Packet::Datagram(plain, &[][..])));
        // A QP number of more than 24 bits is neither written nor read.
        let wide = DatagramHeader {
            dest_qpn: 1 << 24,
            ..plain
        };
        assert_eq!(encode_datagram(&wide, &mut buf), Err(EncodeError::Invalid));
        buf[4] = 1;
        assert_eq!(decode(&buf[..m]), Err(DecodeError::Reserved));
        buf[4] = 0;
        // The path id is reserved, and so are unknown flags.
        buf[3] = 1;
        assert_eq!(decode(&buf[..m]), Err(DecodeError::Reserved));
        buf[3] = 0;
        buf[1] = 1 << 3;
        assert_eq!(decode(&buf[..m]), Err(DecodeError::Flags(1 << 3)));
        // The immediate announced must be there.
        buf[1] = datagram_flags::IMM;
        assert_eq!(decode(&buf[..m + 2]), Err(DecodeError::Truncated));
        assert_eq!(
            encode_datagram(&h, &mut buf[..n - 1]),
            Err(EncodeError::BufferTooSmall)
        );
    }

    #[test]
    fn the_grh_of_an_ipv6_datagram_is_its_header() {
        let mut a = [0u8; 16];
        a[0] = 0xfe;
        a[1] = 0x80;
        a[15] = 1;
        let mut b = a;
        b[15] = 2;
        let g = ipv6_grh(&a, &b, 100);
        assert_eq!(g[0] >> 4, 6);
        assert_eq!(u16::from_be_bytes([g[4], g[5]]), 108);
        assert_eq!(g[6], 17);
        assert_eq!(&g[8..24], &a);
        assert_eq!(&g[24..40], &b);
    }

    #[test]
    fn the_grh_holds_a_valid_ipv4_header() {
        let g = ipv4_grh([10, 0, 0, 1], [10, 0, 0, 2], 100);
        assert!(g[..20].iter().all(|b| *b == 0));
        let ip = &g[20..];
        assert_eq!(ip[0], 0x45);
        assert_eq!(u16::from_be_bytes([ip[2], ip[3]]), 128);
        assert_eq!(ip[9], 17);
        assert_eq!(&ip[12..16], &[10, 0, 0, 1]);
        assert_eq!(&ip[16..20], &[10, 0, 0, 2]);
        // The ones' complement sum over a valid header, checksum included,
        // is 0xffff.
        let mut sum: u32 = ip
            .chunks_exact(2)
            .map(|p| u32::from(u16::from_be_bytes([p[0], p[1]])))
            .sum();
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        assert_eq!(sum, 0xffff);
    }
}
