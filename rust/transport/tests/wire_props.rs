// SPDX-License-Identifier: GPL-2.0

//! Property tests of the wire codec: it never panics, it round-trips every
//! valid header, and whatever it accepts it would have encoded the same way
//! (one encoding per packet, so nothing unvalidated slips through).

use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::wire::*;
use proptest::prelude::*;

fn opcode() -> impl Strategy<Value = Opcode> {
    prop_oneof![
        Just(Opcode::Send),
        Just(Opcode::SendImm),
        Just(Opcode::Write),
        Just(Opcode::WriteImm),
        Just(Opcode::ReadReq),
        Just(Opcode::ReadResp),
        Just(Opcode::CmpSwap),
        Just(Opcode::FetchAdd),
        Just(Opcode::SendInv),
    ]
}

fn common(ptype: PacketType, flag_mask: u8) -> impl Strategy<Value = Common> {
    (
        any::<u8>(),
        any::<u16>(),
        any::<u32>(),
        any::<u32>(),
        any::<u32>(),
    )
        .prop_map(move |(f, path, conn, psn, timestamp)| Common {
            ptype,
            flags: f & flag_mask,
            path,
            conn,
            psn,
            timestamp,
        })
}

/// A valid data header and a payload length that fits it.
fn data() -> impl Strategy<Value = (DataHeader, u16)> {
    (
        common(PacketType::Data, flags::ALL),
        opcode(),
        any::<[u32; 4]>(),
        any::<(u32, u64, u32, u64, u64)>(),
        any::<u16>(),
    )
        .prop_map(
            |(mut common, opcode, [stream, msn, offset, msg_len], r, len)| {
                // Only a message that completes a receive may be solicited.
                if !opcode.consumes_receive() {
                    common.flags &= !flags::SOLICITED;
                }
                // A queue that ran dry asks for an ACK too.
                if common.flags & flags::DRY != 0 {
                    common.flags |= flags::ACK_REQ;
                }
                let void = common.flags & flags::VOID != 0;
                let (payload_len, offset, msg_len) = if opcode.is_atomic() {
                    (0, 0, 8)
                } else if !opcode.has_payload() || void {
                    (0, 0, msg_len)
                } else {
                    let offset = offset / 2;
                    let len = len.min(4096);
                    (len, offset, msg_len.max(offset + u32::from(len)))
                };
                let hdr = DataHeader {
                    common,
                    opcode,
                    stream,
                    msn,
                    offset,
                    msg_len,
                    remote: opcode.has_remote().then_some(Remote {
                        rkey: r.0,
                        addr: r.1,
                    }),
                    rsn: if opcode.consumes_receive() {
                        r.2 as u8
                    } else {
                        0
                    },
                    imm: opcode.has_imm().then_some(r.2),
                    atomic: opcode.is_atomic().then_some(Atomic {
                        swap_add: r.3,
                        compare: r.4,
                    }),
                    origin: (common.flags & flags::RELOCATED != 0).then_some(Origin {
                        path: (r.2 >> 16) as u16,
                        psn: r.0 ^ r.2,
                    }),
                };
                (hdr, payload_len)
            },
        )
}

/// Encodes whatever `decode` returned; `None` if it cannot be encoded.
fn reencode(p: &Packet<'_>) -> Option<Vec<u8>> {
    let mut buf = vec![0u8; 128];
    let n = match p {
        Packet::Data(h, payload) => {
            let n = encode_data(h, u16::try_from(payload.len()).ok()?, &mut buf).ok()?;
            buf.truncate(n);
            buf.extend_from_slice(payload);
            return Some(buf);
        }
        Packet::Ack(a) => encode_ack(a, &mut buf).ok()?,
        Packet::Nak(k) => encode_nak(k, &mut buf).ok()?,
        Packet::Hello(h) => encode_hello(h, &mut buf).ok()?,
        Packet::Datagram(h, payload) => {
            let n = encode_datagram(h, &mut buf).ok()?;
            buf.truncate(n);
            buf.extend_from_slice(payload);
            return Some(buf);
        }
    };
    buf.truncate(n);
    Some(buf)
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2000))]

    #[test]
    fn decode_never_panics_and_accepts_only_canonical(bytes in prop::collection::vec(any::<u8>(), 0..200)) {
        if let Ok(p) = decode(&bytes) {
            prop_assert_eq!(reencode(&p), Some(bytes.clone()));
        }
    }

    #[test]
    fn data_round_trips((hdr, len) in data(), fill in any::<u8>()) {
        let mut buf = vec![0u8; TRANSPORT_HEADER_MAX as usize + usize::from(len)];
        let n = encode_data(&hdr, len, &mut buf).unwrap();
        prop_assert_eq!(n, hdr.len());
        buf.truncate(n);
        buf.resize(n + usize::from(len), fill);
        let payload = vec![fill; usize::from(len)];
        prop_assert_eq!(decode(&buf), Ok(Packet::Data(hdr, &payload[..])));
    }

    #[test]
    fn mutated_valid_packets_never_panic(
        (hdr, len) in data(),
        flips in prop::collection::vec((any::<usize>(), any::<u8>()), 1..4),
    ) {
        let mut buf = vec![0u8; TRANSPORT_HEADER_MAX as usize + usize::from(len)];
        let n = encode_data(&hdr, len, &mut buf).unwrap();
        buf.truncate(n + usize::from(len));
        for (at, x) in flips {
            let i = at % buf.len();
            buf[i] ^= x;
        }
        if let Ok(p) = decode(&buf) {
            prop_assert_eq!(reencode(&p), Some(buf.clone()));
        }
    }

    #[test]
    fn ack_round_trips(c in common(PacketType::Ack, ack_flags::ALL), sack in any::<[u8; 32]>(),
                       ecn in any::<u16>(), rest in any::<[u32; 3]>(),
                       status in prop_oneof![Just(None),
                                             Just(Some(NakCode::RemoteAccess)),
                                             Just(Some(NakCode::InvalidRequest)),
                                             Just(Some(NakCode::NoQueuePair))]) {
        let ack = AckHeader { common: c, sack, ecn_ce: ecn, status, rate_hint_kbps: rest[0],
                              stream: rest[1], stream_msn: rest[2] };
        let mut buf = [0u8; 64];
        let n = encode_ack(&ack, &mut buf).unwrap();
        prop_assert_eq!(decode(&buf[..n]), Ok(Packet::Ack(ack)));
    }
}
