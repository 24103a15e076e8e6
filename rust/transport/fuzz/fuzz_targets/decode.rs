// SPDX-License-Identifier: GPL-2.0

//! The wire decoder on arbitrary bytes: it must never panic, and whatever it
//! accepts must encode back to exactly the same bytes.

#![no_main]

use libfuzzer_sys::fuzz_target;
use metaroce_transport::wire::{
    decode, encode_ack, encode_data, encode_datagram, encode_hello, encode_nak, Packet,
};

fuzz_target!(|data: &[u8]| {
    let Ok(p) = decode(data) else {
        return;
    };
    let mut buf = [0u8; 128];
    let again: Vec<u8> = match p {
        Packet::Data(h, payload) => {
            let len = u16::try_from(payload.len()).expect("decoded payload fits u16");
            let n = encode_data(&h, len, &mut buf).expect("accepted header encodes");
            let mut v = buf[..n].to_vec();
            v.extend_from_slice(payload);
            v
        }
        Packet::Ack(a) => {
            let n = encode_ack(&a, &mut buf).expect("ack encodes");
            buf[..n].to_vec()
        }
        Packet::Nak(k) => {
            let n = encode_nak(&k, &mut buf).expect("nak encodes");
            buf[..n].to_vec()
        }
        Packet::Hello(h) => {
            let n = encode_hello(&h, &mut buf).expect("hello encodes");
            buf[..n].to_vec()
        }
        Packet::Datagram(h, payload) => {
            let n = encode_datagram(&h, &mut buf).expect("datagram encodes");
            let mut v = buf[..n].to_vec();
            v.extend_from_slice(payload);
            v
        }
    };
    assert_eq!(again, data, "decode accepted a non-canonical encoding");
});
