// SPDX-License-Identifier: GPL-2.0

//! A connection with data in flight fed arbitrary datagrams and clock jumps:
//! it must never panic, and after any input its transmit and event queues
//! must still drain.

#![no_main]

use libfuzzer_sys::fuzz_target;
use metaroce_transport::conn::{Config, Connection, Message};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::wire::{Opcode, Remote};

fuzz_target!(|data: &[u8]| {
    let mut c = Connection::<4>::new(Config::new(1, 2, 4, 1024));
    for msn in 0..4 {
        let m = Message {
            opcode: Opcode::Write,
            stream: 0,
            msn,
            len: 3000,
            remote: Some(Remote { rkey: 1, addr: 0 }),
            rsn: 0,
            imm: None,
            atomic: None,
            solicited: false,
        };
        c.post(m).expect("room for four messages");
    }
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut now = 0u64;
    while c.poll_transmit(now, &mut hdr).is_some() {}
    // Each chunk: 1 byte length, 1 byte time step, 1 byte flags, then bytes.
    let mut rest = data;
    while rest.len() >= 3 {
        let (len, step, fl) = (usize::from(rest[0]), u64::from(rest[1]), rest[2]);
        rest = &rest[3..];
        let take = len.min(rest.len());
        let (dgram, tail) = rest.split_at(take);
        rest = tail;
        now += step * 1_000;
        let _ = c.on_datagram(now, dgram, u16::from(fl) << 8, fl & 1 != 0);
        if fl & 2 != 0 {
            c.on_timeout(now);
        }
        let mut budget = 10_000;
        while c.poll_transmit(now, &mut hdr).is_some() {
            budget -= 1;
            assert!(budget > 0, "poll_transmit never ran dry");
        }
        while c.poll_event().is_some() {}
    }
});
