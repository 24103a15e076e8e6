// SPDX-License-Identifier: GPL-2.0

//! A session and its connection, met and with data in flight, fed arbitrary
//! hellos, datagrams and clock jumps, driven in the order the kernel drives
//! them: nothing may panic, the sender count it reports must stay
//! consistent, and the deadline it asks for must never lie in the past once
//! its polls are drained.

#![no_main]

use libfuzzer_sys::fuzz_target;
use metaroce_transport::conn::{Config, Connection, Message};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::session::{HelloOutcome, Session, SessionConfig};
use metaroce_transport::wire::{self, Opcode, Packet, PacketType, Remote};

fuzz_target!(|data: &[u8]| {
    let mut s = Session::new(
        7,
        70,
        0,
        SessionConfig {
            active_ns: 50_000,
            hello_first_ns: 100_000,
        },
    );
    s.set_wanted(0, true);
    let mut cfg = Config::new(0, 0, 4, 1024);
    // The peer (epoch 9) says hello; it knows our epoch.
    s.on_hello(9, 90, 7, 0, 0, 0);
    s.configure(&mut cfg);
    let mut c = Connection::<4>::new(cfg);
    let mut counted = 0u32;
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut hello = [0u8; 32];
    let mut now = 0u64;
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
        if c.post(m).is_ok() {
            s.on_posted();
        }
    }
    // Each chunk: 1 byte length, 1 byte time step, 1 byte flags, then bytes.
    let mut rest = data;
    while rest.len() >= 3 {
        let (len, step, fl) = (usize::from(rest[0]), u64::from(rest[1]), rest[2]);
        rest = &rest[3..];
        let take = len.min(rest.len());
        let (dgram, tail) = rest.split_at(take);
        rest = tail;
        now += step * 10_000;
        if wire::peek(dgram).is_some_and(|(t, _)| t == PacketType::Hello) {
            if let Ok(Packet::Hello(h)) = wire::decode(dgram) {
                let sport = u16::from(fl) << 8;
                let o = s.on_hello(h.epoch, h.isn, h.common.conn, h.common.flags, sport, now);
                if o != HelloOutcome::Nothing {
                    let mut cfg = Config::new(0, 0, 4, 1024);
                    s.configure(&mut cfg);
                    if o == HelloOutcome::Reset {
                        c = Connection::<4>::new(cfg);
                    } else {
                        c.configure(cfg);
                    }
                }
            }
        } else if let Ok(r) = c.on_datagram(now, dgram, u16::from(fl) << 8, fl & 1 != 0) {
            if s.on_received(now, &r) {
                counted += 1;
            }
        }
        if fl & 2 != 0 {
            c.on_timeout(now);
        }
        if let Some(silent) = s.poll_liveness(now) {
            // Keepalive answers only ever shorten the silence.
            assert!(silent <= s.longest_quiet());
            s.set_waiting(now, c.outstanding() > 0);
        }
        if s.poll_quiet(now) {
            counted -= 1;
        }
        assert_eq!(counted, u32::from(s.sending()));
        s.share(
            &mut c,
            u32::from(fl) * 100_000,
            counted.max(u32::from(fl >> 4)),
        );
        let mut budget = 8;
        loop {
            // Any port is valid; a hello that is due has one.
            if s.poll_hello(now, &c, &mut hello).is_none() {
                break;
            }
            budget -= 1;
            assert!(budget > 0, "poll_hello never ran dry");
        }
        if s.ready() {
            let mut budget = 10_000;
            while c.poll_transmit(now, &mut hdr).is_some() {
                budget -= 1;
                assert!(budget > 0, "poll_transmit never ran dry");
            }
            while c.poll_event().is_some() {}
        }
        if let Some(at) = s.next_deadline(now, None) {
            // Every due poll was just drained: what is left lies ahead.
            assert!(at > now, "a deadline in the past: {at} at {now}");
        }
    }
});
