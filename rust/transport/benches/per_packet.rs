// SPDX-License-Identifier: GPL-2.0

//! The core's own cost per packet, without I/O: a sender and a receiver
//! connection exchange a long run of 4 KiB RDMA Writes in memory, and the time
//! spent inside each side's calls is divided by the data packets.
//!
//!     cargo bench --bench per_packet
//!
//! "send" = the sender's `post` + `poll_transmit` + `on_datagram` (its ACKs),
//! "receive" = the receiver's `on_datagram` (data) + `poll_transmit` (ACKs).

use metaroce_transport::conn::{Config, Connection, Message, PostError, Received};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::wire::{Opcode, Remote};
use std::hint::black_box;
use std::time::{Duration, Instant};

type Conn = Connection<8>;
const PAYLOAD: u16 = 4096;

fn run(packets: u64) -> (Duration, Duration, u64) {
    let mut a = Conn::new(Config::new(1, 2, 8, PAYLOAD));
    let mut b = Conn::new(Config::new(2, 1, 8, PAYLOAD));
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let payload = vec![0xa5u8; usize::from(PAYLOAD)];
    let (mut t_send, mut t_recv) = (Duration::ZERO, Duration::ZERO);
    let (mut sent, mut msn, mut now) = (0u64, 0u32, 0u64);
    let mut wire: Vec<(Vec<u8>, u16)> = Vec::with_capacity(512);
    let mut acks: Vec<(Vec<u8>, u16)> = Vec::with_capacity(512);
    while sent < packets {
        now += 10_000;
        // Sender: post what fits, send what the windows allow.
        let t = Instant::now();
        loop {
            let m = Message {
                opcode: Opcode::Write,
                stream: msn % 4,
                msn: msn / 4,
                len: 16 * u32::from(PAYLOAD),
                remote: Some(Remote { rkey: 1, addr: 0 }),
                rsn: 0,
                imm: None,
                atomic: None,
                solicited: false,
            };
            match a.post(m) {
                Ok(()) => msn += 1,
                Err(PostError::Full | PostError::StreamBusy) => break,
                Err(PostError::Invalid) => unreachable!(),
            }
        }
        let mut n = 0;
        while let Some(tx) = a.poll_transmit(now, &mut hdr) {
            wire.push((hdr[..tx.len].to_vec(), tx.sport));
            n += u64::from(tx.payload.is_some());
        }
        while a.poll_event().is_some() {}
        t_send += t.elapsed();
        sent += n;
        // The datagrams get their payload outside the timed regions.
        for (d, _) in &mut wire {
            d.extend_from_slice(&payload);
        }
        let t = Instant::now();
        for (d, sport) in &wire {
            if let Ok(Received::Data(h, p)) = b.on_datagram(now + 5_000, d, *sport, false) {
                black_box((h.offset, p.len()));
            }
        }
        while let Some(tx) = b.poll_transmit(now + 5_000, &mut hdr) {
            acks.push((hdr[..tx.len].to_vec(), tx.sport));
        }
        t_recv += t.elapsed();
        wire.clear();
        let t = Instant::now();
        for (d, sport) in &acks {
            let _ = black_box(a.on_datagram(now + 10_000, d, *sport, false));
        }
        t_send += t.elapsed();
        acks.clear();
    }
    (t_send, t_recv, sent)
}

fn main() {
    // Warm up, then take the best of five runs.
    run(20_000);
    let mut best = (f64::MAX, f64::MAX);
    for _ in 0..5 {
        let (s, r, n) = run(400_000);
        best.0 = best.0.min(s.as_nanos() as f64 / n as f64);
        best.1 = best.1.min(r.as_nanos() as f64 / n as f64);
    }
    println!("per data packet (4 KiB payload, 8 paths, best of 5 x 400000 packets):");
    println!(
        "  send    (post + poll_transmit + ACK processing): {:6.1} ns",
        best.0
    );
    println!(
        "  receive (decode + place + ACK generation):      {:6.1} ns",
        best.1
    );
    println!(
        "{{\"send_ns_per_packet\":{:.1},\"receive_ns_per_packet\":{:.1}}}",
        best.0, best.1
    );
}
