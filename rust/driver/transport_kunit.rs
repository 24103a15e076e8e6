// SPDX-License-Identifier: GPL-2.0

//! The transport core run inside the kernel: the same source the user-space
//! tests and the simulator run, here under the kernel's compiler flags and
//! sanitizers (KASAN in the test kernel), at module load.

use kernel::prelude::*;

#[kunit_tests(metaroce_transport)]
mod tests {
    use crate::transport::path::{Arrival, RecvPath, SendPath};
    use crate::transport::seq::Bits256;
    use crate::transport::stream::RecvStream;
    use crate::transport::wire::{
        decode, encode_data, flags, Common, DataHeader, DecodeError, Opcode, Packet, PacketType,
        Remote,
    };

    fn write_header() -> DataHeader {
        DataHeader {
            common: Common {
                ptype: PacketType::Data,
                flags: flags::FIRST | flags::ACK_REQ,
                path: 3,
                conn: 0x0102_0304,
                psn: u32::MAX,
                timestamp: 77,
            },
            // A plain Write: its receive-number byte is reserved (a Write
            // with Immediate names the receive it consumes there).
            opcode: Opcode::Write,
            stream: 5,
            msn: 9,
            offset: 4096,
            msg_len: 8192,
            remote: Some(Remote {
                rkey: 0x1234,
                addr: 0xffff_8000_0000_1000,
            }),
            rsn: 0,
            imm: None,
            atomic: None,
            origin: None,
        }
    }

    #[test]
    fn wire_round_trip_and_strict_decode() {
        let hdr = write_header();
        let mut buf = [0u8; 128];
        let n = encode_data(&hdr, 16, &mut buf).unwrap_or(0);
        assert_eq!(n, hdr.len());
        for (i, b) in buf[n..n + 16].iter_mut().enumerate() {
            *b = i as u8;
        }
        let decoded = decode(&buf[..n + 16]);
        assert!(
            matches!(decoded, Ok(Packet::Data(got, p)) if got == hdr && p.len() == 16 && p[15] == 15)
        );
        // One byte short, one too many, a reserved byte set: refused.
        assert_eq!(decode(&buf[..n + 15]), Err(DecodeError::Truncated));
        assert_eq!(decode(&buf[..n + 17]), Err(DecodeError::PayloadLength));
        buf[17] = 1;
        assert_eq!(decode(&buf[..n + 16]), Err(DecodeError::Reserved));
    }

    #[test]
    fn a_path_acknowledges_around_a_hole() {
        let mut s = SendPath::new(u32::MAX - 1);
        let mut r = RecvPath::new(u32::MAX - 1);
        let mut psns = [0u32; 4];
        for p in psns.iter_mut() {
            *p = s.send().unwrap_or(0);
        }
        // The second packet is lost; the others arrive, one twice.
        for (i, psn) in psns.iter().enumerate() {
            if i != 1 {
                assert_eq!(r.on_data(*psn, false), Arrival::New);
            }
        }
        assert_eq!(r.on_data(psns[2], false), Arrival::Duplicate);
        assert!(r.has_holes());
        let (cum, sack, _) = r.take_ack();
        assert_eq!(cum, psns[1]);
        let out = s.on_ack(cum, &sack).unwrap_or_default();
        assert_eq!(out.newly_acked, 3);
        assert!(!s.is_acked(psns[1]) && s.is_acked(psns[3]));
        // The resent packet fills the hole across the wrap of the PSN space.
        assert_eq!(r.on_data(psns[1], false), Arrival::New);
        let (cum, sack, _) = r.take_ack();
        assert_eq!(s.on_ack(cum, &sack).map(|o| o.newly_acked), Ok(1));
        assert_eq!(s.in_flight(), 0);
    }

    #[test]
    fn a_stream_completes_in_order() {
        let mut st = RecvStream::new(0);
        assert_eq!(st.on_packet(1, 100, 100), Ok(()));
        assert_eq!(st.pop_completed(), None);
        assert_eq!(st.on_packet(0, 50, 100), Ok(()));
        assert_eq!(st.pop_completed(), None);
        assert_eq!(st.on_packet(0, 50, 100), Ok(()));
        assert_eq!(st.pop_completed(), Some(0));
        assert_eq!(st.pop_completed(), Some(1));
        // Already completed.
        assert!(st.on_packet(0, 1, 100).is_err());
    }

    #[test]
    fn bitmap_operations() {
        let mut b = Bits256::EMPTY;
        assert!(!b.set(200));
        assert!(b.set(200));
        b.set(0);
        assert_eq!(b.count(), 2);
        b.shift_down(100);
        assert!(b.get(100) && !b.get(0));
        assert_eq!(b.highest(), Some(100));
    }
}
