// SPDX-License-Identifier: GPL-2.0

//! The connection state machine end to end, over a simulated channel.

mod common;

use common::*;
use metaroce_transport::conn::{
    Config, Message, PostError, Received, RecvError, ACK_EVERY, FAIL_AFTER_EXPIRIES,
    FAIL_BLIND_AFTER_EXPIRIES, MIN_PACE_KBPS,
};
use metaroce_transport::framing::TRANSPORT_HEADER_MAX;
use metaroce_transport::stats::DropReason;
use metaroce_transport::wire::{self, NakCode, Opcode, Origin, Packet};
use proptest::prelude::*;
use std::collections::BTreeMap;

const SECOND: u64 = 1_000_000_000;

fn run_one_way(chan: Channel, paths: u16, msgs: &[Message], seed: u64) -> Pair {
    let mut p = Pair::new(paths, 1024, chan, seed);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND), "did not finish");
    p
}

#[test]
fn lossless_delivery_over_four_paths() {
    let msgs = workload(40, 3, &[0, 1, 1000, 1024, 1025, 9000, 65536]);
    let p = run_one_way(Channel::default(), 4, &msgs, 1);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    let s = p.hosts[0].conn.stats();
    assert_eq!(s.retransmits, 0, "{s:?}");
    assert_eq!(p.hosts[1].conn.stats().rx_duplicates, 0);
    // Packets were spread over every path.
    let used = (0..4)
        .filter(|i| p.hosts[0].conn.path_info(*i).is_some_and(|x| x.srtt_us > 0))
        .count();
    assert_eq!(used, 4, "every path carried traffic and has an RTT");
}

#[test]
fn one_lost_packet_is_resent_exactly_once_on_its_path() {
    // Two messages of 8 packets each; drop exactly the 5th datagram A sends.
    let msgs = workload(2, 1, &[8 * 1024]);
    let mut p = Pair::new(1, 1024, Channel::default(), 1);
    p.hosts[0].todo.extend(msgs.iter().copied());
    // Send everything, drop one data packet by hand.
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    for m in &msgs {
        p.hosts[0].conn.post(*m).unwrap();
    }
    p.hosts[0].todo.clear();
    let mut out = vec![];
    while let Some(t) = p.hosts[0].conn.poll_transmit(0, &mut hdr) {
        let mut b = hdr[..t.len].to_vec();
        let seg = t.payload.unwrap();
        b.extend((0..u32::from(seg.len)).map(|i| pattern(seg.stream, seg.msn, seg.offset + i)));
        out.push((b, t.sport));
    }
    assert_eq!(out.len(), 16, "initial window 16 sends both messages");
    let lost = out.remove(4);
    let lost_psn = match wire::decode(&lost.0).unwrap() {
        Packet::Data(h, _) => h.common.psn,
        _ => unreachable!(),
    };
    for (b, sport) in &out {
        p.hosts[1].receive(1000, b, *sport, false);
    }
    // B acknowledges; A sees the hole and resends exactly that PSN.
    let mut acks = vec![];
    while let Some(t) = p.hosts[1].conn.poll_transmit(1000, &mut hdr) {
        acks.push((hdr[..t.len].to_vec(), t.sport));
    }
    assert!(!acks.is_empty());
    for (b, sport) in &acks {
        assert!(matches!(
            p.hosts[0].conn.on_datagram(2000, b, *sport, false),
            Ok(Received::Control)
        ));
    }
    let t = p.hosts[0].conn.poll_transmit(2000, &mut hdr).unwrap();
    let mut b = hdr[..t.len].to_vec();
    b.resize(t.len + usize::from(t.payload.unwrap().len), 0);
    match wire::decode(&b).unwrap() {
        Packet::Data(h, _) => {
            assert_eq!(h.common.psn, lost_psn);
            assert_ne!(h.common.flags & wire::flags::RETRANSMIT, 0);
        }
        other => panic!("expected the retransmission, got {other:?}"),
    }
    assert!(p.hosts[0].conn.poll_transmit(2000, &mut hdr).is_none());
    assert_eq!(p.hosts[0].conn.stats().retransmits, 1);
}

#[test]
fn tail_loss_is_recovered_by_the_probe_timer() {
    let msgs = workload(1, 1, &[1024]);
    let mut p = Pair::new(1, 1024, Channel::default(), 1);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    p.hosts[0].conn.post(msgs[0]).unwrap();
    // The only packet is lost.
    assert!(p.hosts[0].conn.poll_transmit(0, &mut hdr).is_some());
    let t = p.hosts[0].conn.next_timeout().expect("probe timer armed");
    assert!(p.hosts[0].conn.poll_transmit(t - 1, &mut hdr).is_none());
    p.hosts[0].conn.on_timeout(t);
    let r = p.hosts[0].conn.poll_transmit(t, &mut hdr).expect("probe");
    assert!(r.payload.is_some());
    assert_eq!(p.hosts[0].conn.stats().timeouts, 1);
}

#[test]
fn failed_route_moves_the_path_and_relocates_its_packets() {
    // Find which source-port class path 0 uses and black-hole it.
    let (a, _) = config_pair(4, 1024);
    let probe = Conn::new(a);
    let port0 = probe.path_info(0).unwrap().sport;
    let chan = Channel {
        blackhole: Some(port0 % 8),
        ..Channel::default()
    };
    let msgs = workload(64, 2, &[4096, 16384]);
    let p = run_one_way(chan, 4, &msgs, 3);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    let s = p.hosts[0].conn.stats();
    assert!(s.path_moves >= 1, "{s:?}");
    assert!(s.relocations >= 1, "{s:?}");
    let now_port = p.hosts[0].conn.path_info(0).unwrap().sport;
    assert_ne!(now_port % 8, port0 % 8, "path 0 left the dead route");
    // Per path: the moves and relocations are path 0's (a path another
    // path's packets were moved to may fail too, but path 0 always does),
    // and the paths' counts add up to the connection's.
    let info: Vec<_> = (0..4)
        .map(|i| p.hosts[0].conn.path_info(i).unwrap())
        .collect();
    assert!(
        info[0].tx.moves >= 1 && info[0].tx.relocated >= 1,
        "{info:?}"
    );
    let sum = |f: fn(&metaroce_transport::stats::TxPathStats) -> u64| -> u64 {
        info.iter().map(|i| f(&i.tx)).sum()
    };
    assert_eq!(sum(|t| t.moves), s.path_moves);
    assert_eq!(sum(|t| t.relocated), s.relocations);
    assert_eq!(sum(|t| t.resent), s.retransmits);
    assert_eq!(sum(|t| t.timeouts), s.timeouts);
    assert_eq!(sum(|t| t.sent), s.tx_data + s.retransmits + s.relocations);
    assert!(
        p.hosts[0].conn.path_info(4).is_none(),
        "only the paths in use"
    );
    let r: Vec<_> = (0..4)
        .map(|i| p.hosts[1].conn.path_info(i).unwrap())
        .collect();
    let rcvd: u64 = r.iter().map(|i| i.rx.rcvd).sum();
    let dups: u64 = r.iter().map(|i| i.rx.duplicates).sum();
    let rs = p.hosts[1].conn.stats();
    // A relocated copy counts on the path it arrived by.
    assert!(
        rcvd >= rs.rx_data && dups <= rs.rx_duplicates,
        "{r:?} {rs:?}"
    );
}

#[test]
fn dropped_datagrams_and_refusals_are_counted_by_reason() {
    let mut p = Pair::new(2, 1024, Channel::default(), 1);
    // A well-formed ACK for another connection: find one by sending data
    // from B and taking A's acknowledgement, then changing its id.
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    p.hosts[1].conn.post(workload(1, 1, &[100])[0]).unwrap();
    let t = p.hosts[1].conn.poll_transmit(0, &mut hdr).unwrap();
    let mut b = hdr[..t.len].to_vec();
    b.resize(t.len + usize::from(t.payload.unwrap().len), 0);
    let mut other = b.clone();
    let (ptype, conn) = wire::peek(&other).unwrap();
    assert_eq!(ptype, wire::PacketType::Data);
    let at = other
        .windows(4)
        .position(|w| w == conn.to_be_bytes())
        .expect("the connection id is in the header");
    other[at] ^= 0xff;
    let c = &mut p.hosts[0].conn;
    // Cut short.
    assert!(c.on_datagram(0, &b[..6], 49152, false).is_err());
    assert!(matches!(
        c.on_datagram(0, &other, 49152, false),
        Err(RecvError::Connection(_))
    ));
    assert!(c.on_datagram(0, &b, 49152, false).is_ok());
    assert!(c.reject(0, 2, 0, NakCode::RemoteAccess));
    // The message's next packet: the same refusal.
    assert!(c.reject(1, 2, 0, NakCode::RemoteAccess));
    let s = c.stats();
    assert_eq!(s.drops[DropReason::Truncated as usize], 1, "{s:?}");
    assert_eq!(s.drops[DropReason::Connection as usize], 1, "{s:?}");
    assert_eq!(s.drops.iter().sum::<u64>(), 2);
    assert_eq!(s.rx_errors, 2);
    assert_eq!(s.refused, [1, 0, 0, 0, 0]);
    // Every reason has its own index.
    let mut seen = [false; metaroce_transport::stats::DROP_REASONS];
    for e in [
        RecvError::Decode(wire::DecodeError::Truncated),
        RecvError::Decode(wire::DecodeError::Version(9)),
        RecvError::Decode(wire::DecodeError::PacketType(9)),
        RecvError::Decode(wire::DecodeError::Opcode(9)),
        RecvError::Decode(wire::DecodeError::NakCode(9)),
        RecvError::Decode(wire::DecodeError::Flags(9)),
        RecvError::Decode(wire::DecodeError::Reserved),
        RecvError::Decode(wire::DecodeError::PayloadLength),
        RecvError::Decode(wire::DecodeError::Bounds),
        RecvError::Connection(1),
        RecvError::Path(1),
        RecvError::Window,
        RecvError::Ack,
        RecvError::Nak,
        RecvError::Hello,
    ] {
        let i = e.reason() as usize;
        assert!(!seen[i], "{e:?} shares a counter");
        seen[i] = true;
        assert_eq!(DropReason::ALL[i], e.reason());
    }
}

#[test]
fn ecn_marks_shrink_the_window() {
    let msgs = workload(200, 1, &[8192]);
    let clean = run_one_way(Channel::default(), 2, &msgs, 5);
    let marked = run_one_way(
        Channel {
            ce: 300,
            ..Channel::default()
        },
        2,
        &msgs,
        5,
    );
    assert_eq!(check_delivery(&marked, 0, 1, &msgs), Vec::<String>::new());
    assert!(marked.hosts[0].conn.stats().ce_echoed > 0);
    assert!(
        marked.hosts[0].conn.window() < clean.hosts[0].conn.window(),
        "marked {} clean {}",
        marked.hosts[0].conn.window(),
        clean.hosts[0].conn.window()
    );
    // Losses alone do not shrink it.
    let lossy = run_one_way(
        Channel {
            loss: 20,
            ..Channel::default()
        },
        2,
        &msgs,
        5,
    );
    assert_eq!(check_delivery(&lossy, 0, 1, &msgs), Vec::<String>::new());
    assert!(lossy.hosts[0].conn.window() > marked.hosts[0].conn.window());
}

#[test]
fn the_receivers_rate_hint_caps_the_window() {
    let msgs = workload(300, 1, &[8192]);
    let mut p = Pair::new(4, 1024, Channel::default(), 7);
    // 1 Gbit/s over ~20 us of RTT is a few packets.
    p.hosts[1].conn.set_rate_hint(1_000_000);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND));
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    assert!(
        p.hosts[0].conn.window() <= 8,
        "{}",
        p.hosts[0].conn.window()
    );
}

/// A hint whose rate over the bare round trip is less than a packet, with
/// delayed ACKs as the kernel module's before 2026-12-07 (every 8 packets or
/// 500 us; 2 ms since): the sender
/// still reaches its hint. (The window was capped at the hint times the
/// minimum RTT, rounded down: two packets here, which waited for a delayed
/// ACK: 0.69 of the hint.)
#[test]
fn a_paced_sender_reaches_its_hint_despite_delayed_acks() {
    let msgs = workload(32, 1, &[64 * 1024]);
    let (mut a, mut b) = config_pair(4, 1024);
    for c in [&mut a, &mut b] {
        c.ack_delay_ns = 500_000;
        c.ack_every = 8;
    }
    let mut p = Pair::with_configs(a, b, Channel::default(), 5);
    let hint = 50_000;
    p.hosts[1].conn.set_rate_hint(hint);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND));
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    let bytes: u64 = msgs.iter().map(|m| u64::from(m.len)).sum();
    let kbps = bytes * 8 * 1_000_000 / p.now;
    // Payload: below the hint, which counts the headers too (the pacer
    // still holds it), but not far below.
    assert!(kbps * 4 >= u64::from(hint) * 3, "{kbps} kbit/s of {hint}");
    assert!(kbps <= u64::from(hint), "{kbps} kbit/s of {hint}");
}

#[test]
fn the_connection_window_stays_within_its_configured_maximum() {
    let msgs = workload(200, 2, &[16 * 1024]);
    let run = |max_window| {
        let (mut a, b) = config_pair(4, 1024);
        a.max_window = max_window;
        let mut p = Pair::with_configs(a, b, Channel::default(), 3);
        p.hosts[0].todo.extend(msgs.iter().copied());
        assert!(p.run(60 * SECOND));
        assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
        p.peak[0]
    };
    // Without a maximum the window grows past it on this lossless run.
    assert!(run(0) > 40, "{}", run(0));
    assert!(run(40) <= 40, "{}", run(40));
}

#[test]
fn a_rejected_message_completes_with_the_receivers_error() {
    let msgs = workload(6, 2, &[3000]);
    let mut p = Pair::new(2, 1024, Channel::default(), 9);
    p.hosts[1].reject_stream = Some(1);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND));
    let errs: Vec<_> = p.hosts[0]
        .completions
        .iter()
        .filter(|c| c.error.is_some())
        .collect();
    assert!(!errs.is_empty());
    assert!(errs
        .iter()
        .all(|c| c.stream == 1 && c.error == Some(NakCode::RemoteAccess)));
    // Stream 0 is unaffected, in order.
    let ok: Vec<u32> = p.hosts[0]
        .completions
        .iter()
        .filter(|c| c.stream == 0)
        .map(|c| c.msn)
        .collect();
    assert_eq!(ok, [0, 1, 2]);
}

#[test]
fn a_rejection_reaches_the_sender_even_if_every_nak_is_lost() {
    let msgs = workload(6, 2, &[3000]);
    let chan = Channel {
        drop_naks: true,
        ..Channel::default()
    };
    let mut p = Pair::new(2, 1024, chan, 9);
    p.hosts[1].reject_stream = Some(1);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND));
    assert!(p.dropped > 0, "NAKs were sent and lost");
    let stream1: Vec<_> = p.hosts[0]
        .completions
        .iter()
        .filter(|c| c.stream == 1)
        .collect();
    assert!(!stream1.is_empty());
    assert!(
        stream1
            .iter()
            .all(|c| c.error == Some(NakCode::RemoteAccess)),
        "{stream1:?}"
    );
}

#[test]
fn a_solicited_message_marks_every_packet_and_only_its_own() {
    let (a, _) = config_pair(1, 1024);
    let mut c = Conn::new(a);
    // workload: a Send, then a Write; the Send (3 packets) solicited.
    let w = workload(2, 1, &[3000]);
    let write = Message {
        solicited: true,
        ..w[1]
    };
    assert_eq!(c.post(write), Err(PostError::Invalid));
    c.post(Message {
        solicited: true,
        ..w[0]
    })
    .unwrap();
    c.post(w[1]).unwrap();
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut seen = Vec::new();
    while let Some(t) = c.poll_transmit(SECOND, &mut hdr) {
        let mut b = hdr[..t.len].to_vec();
        b.resize(t.len + t.payload.map_or(0, |p| usize::from(p.len)), 0);
        if let Ok(Packet::Data(h, _)) = wire::decode(&b) {
            seen.push((h.msn, h.common.flags & wire::flags::SOLICITED != 0));
        }
    }
    assert_eq!(
        seen,
        [
            (0, true),
            (0, true),
            (0, true),
            (1, false),
            (1, false),
            (1, false)
        ]
    );
}

#[test]
fn posting_is_bounded_and_validated() {
    let (a, _) = config_pair(2, 1024);
    let mut c = Conn::new(a);
    let bad = Message {
        opcode: Opcode::Write,
        stream: 0,
        msn: 0,
        len: 10,
        remote: None,
        rsn: 0,
        imm: None,
        atomic: None,
        solicited: false,
    };
    assert_eq!(c.post(bad), Err(PostError::Invalid));
    let m = workload(1, 1, &[10])[0];
    for msn in 0..64 {
        c.post(Message { msn, ..m }).unwrap();
    }
    assert_eq!(c.post(Message { msn: 64, ..m }), Err(PostError::StreamBusy));
    for s in 1..4u32 {
        for msn in 0..64 {
            c.post(Message {
                stream: s,
                msn,
                ..m
            })
            .unwrap();
        }
    }
    assert_eq!(c.post(Message { stream: 9, ..m }), Err(PostError::Full));
}

#[test]
fn more_messages_than_the_table_holds_flow_through_it() {
    // 600 messages over 6 streams: the 256-slot table fills, refuses at
    // once (its count of held slots), and takes more as completions free
    // slots; a count that did not fall with them would stall the run.
    let msgs = workload(600, 6, &[0, 100, 2000]);
    let p = run_one_way(Channel::default(), 2, &msgs, 7);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
}

#[test]
fn a_full_table_says_so_until_a_completion_frees_a_slot() {
    // What a caller with many streams asks before offering each one a
    // post (the driver's pump ends its round on it).
    let (a, _) = config_pair(2, 1024);
    let mut c = Conn::new(a);
    let msgs = workload(257, 8, &[100]);
    for m in &msgs[..255] {
        c.post(*m).unwrap();
        assert!(!c.messages_full());
    }
    c.post(msgs[255]).unwrap();
    assert!(c.messages_full());
    assert_eq!(c.post(msgs[256]), Err(PostError::Full));
    // Nothing was sent: cancelled, stream 3's 32 messages complete at once.
    assert_eq!(c.cancel_stream(3, NakCode::RemoteOperation), 32);
    assert!(c.messages_full(), "held until polled");
    assert!(c.poll_event().is_some());
    assert!(!c.messages_full());
    c.post(msgs[256]).unwrap();
    assert!(c.messages_full());
}

#[test]
fn malformed_and_foreign_datagrams_are_counted_and_dropped() {
    let (a, _) = config_pair(2, 1024);
    let mut c = Conn::new(a);
    assert!(matches!(
        c.on_datagram(0, &[0x11, 0], 1, false),
        Err(RecvError::Decode(_))
    ));
    // A valid ACK for another connection, and one for PSNs never sent.
    let (_, b) = config_pair(2, 1024);
    let mut other = Conn::new(Config { remote_id: 99, ..b });
    let mut d = Conn::new(b);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let m = workload(1, 1, &[100])[0];
    d.post(m).unwrap();
    other.post(m).unwrap();
    let t = other.poll_transmit(0, &mut hdr).unwrap();
    let mut pkt = hdr[..t.len].to_vec();
    pkt.extend([0u8; 100]);
    assert_eq!(
        c.on_datagram(0, &pkt, t.sport, false),
        Err(RecvError::Connection(99))
    );
    let t = d.poll_transmit(0, &mut hdr).unwrap();
    let mut pkt = hdr[..t.len].to_vec();
    pkt.extend((0..100).map(|i| pattern(0, 0, i)));
    assert!(matches!(
        c.on_datagram(0, &pkt, t.sport, false),
        Ok(Received::Data(..))
    ));
    assert_eq!(
        c.on_datagram(0, &pkt, t.sport, false),
        Ok(Received::Duplicate)
    );
    let t = c.poll_transmit(0, &mut hdr).unwrap();
    let mut ack = hdr[..t.len].to_vec();
    // Acknowledge far ahead of what d sent.
    ack[8..12].copy_from_slice(&1_000_000u32.to_be_bytes());
    assert_eq!(d.on_datagram(0, &ack, t.sport, false), Err(RecvError::Ack));
    assert_eq!(c.stats().rx_errors, 2);
    assert_eq!(d.stats().rx_errors, 1);
}

/// A copy of a packet that arrived already, sent again later from another
/// port and marked CE (anyone who saw it can): the receiver's next ACK
/// leaves from the port the real packet came from, echoes no timestamp
/// (the copy's is old: the sender would take seconds for its RTT) and the
/// mark is not counted. A copy with a newer timestamp is the sender's own
/// resend (after a path move): the ACKs follow its port.
#[test]
fn a_replayed_packet_moves_neither_the_ack_port_nor_the_rtt_echo() {
    fn ack_of(c: &mut Conn, now: u64) -> (u16, wire::AckHeader) {
        let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
        let t = c.poll_transmit(now, &mut hdr).unwrap();
        match wire::decode(&hdr[..t.len]) {
            Ok(Packet::Ack(a)) => (t.sport, a),
            other => panic!("not an ACK: {other:?}"),
        }
    }
    let (a, b) = config_pair(1, 1024);
    let mut rx = Conn::new(a);
    let mut tx = Conn::new(b);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    for m in workload(2, 1, &[100]) {
        tx.post(m).unwrap();
    }
    let t = tx.poll_transmit(SECOND, &mut hdr).unwrap();
    let mut first = hdr[..t.len].to_vec();
    first.extend([0u8; 100]);
    let real_port = t.sport;
    let replayer = 40_000;
    assert_ne!(real_port, replayer);
    assert!(matches!(
        rx.on_datagram(SECOND, &first, real_port, false),
        Ok(Received::Data(..))
    ));
    let (port, ack) = ack_of(&mut rx, SECOND);
    assert_eq!(port, real_port);
    assert_ne!(ack.common.timestamp, 0, "fresh data is echoed");
    // Three seconds later, the copy, from the replayer's own port, marked.
    let later = 4 * SECOND;
    assert_eq!(
        rx.on_datagram(later, &first, replayer, true),
        Ok(Received::Duplicate)
    );
    let (port, ack) = ack_of(&mut rx, later);
    assert_eq!(port, real_port, "the copy chose the ACK's port");
    assert_eq!(
        ack.common.timestamp, 0,
        "the copy's old timestamp was echoed"
    );
    assert_eq!(ack.ecn_ce, 0);
    assert_eq!(ack.common.flags, wire::ack_flags::DUPLICATE);
    assert_eq!(
        rx.path_info(0).unwrap().rx.ce_marked,
        0,
        "the copy's mark counted"
    );
    // The sender's resend of it on a moved path: a newer timestamp.
    let mut resend = first.clone();
    let newer = u32::from_be_bytes([first[12], first[13], first[14], first[15]]) + 1_000;
    resend[12..16].copy_from_slice(&newer.to_be_bytes());
    assert_eq!(
        rx.on_datagram(later, &resend, 50_001, false),
        Ok(Received::Duplicate)
    );
    let (port, _) = ack_of(&mut rx, later);
    assert_eq!(port, 50_001, "the ACKs did not follow the resend");
}

/// The flow a transmission belongs to, which the kernel caches its route
/// by (`Transmit::reverse`): data goes on one of our paths, from its port;
/// an ACK goes on the peer's path, from the port the peer's data came by.
/// The two share path numbers but not ports, so they must not share a route.
#[test]
fn an_ack_is_sent_on_the_peers_flow_and_data_on_ours() {
    let (a, b) = config_pair(4, 1024);
    let mut rx = Conn::new(a);
    let mut tx = Conn::new(b);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    tx.post(workload(1, 1, &[100])[0]).unwrap();
    let t = tx.poll_transmit(SECOND, &mut hdr).unwrap();
    assert!(t.payload.is_some());
    assert!(!t.reverse, "data goes on one of our paths");
    let pkt = datagram(&hdr, &t);
    let peer_port = 50_123;
    assert!(matches!(
        rx.on_datagram(SECOND, &pkt, peer_port, false),
        Ok(Received::Data(..))
    ));
    let ack = rx.poll_transmit(SECOND, &mut hdr).unwrap();
    assert!(matches!(wire::decode(&hdr[..ack.len]), Ok(Packet::Ack(_))));
    assert!(ack.reverse, "an ACK goes on the peer's path");
    assert_eq!(ack.path, t.path);
    assert_eq!(ack.sport, peer_port);
}

/// A receiver and a sender over `paths` paths, and the sender's first data
/// packet (100 bytes of payload, sent at 1 s) with its source port.
fn first_packet(paths: u16) -> (Conn, Conn, Vec<u8>, u16) {
    let (a, b) = config_pair(paths, 1024);
    let rx = Conn::new(a);
    let mut tx = Conn::new(b);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    tx.post(workload(1, 1, &[100])[0]).unwrap();
    let t = tx.poll_transmit(SECOND, &mut hdr).unwrap();
    let mut pkt = hdr[..t.len].to_vec();
    pkt.extend([0u8; 100]);
    (rx, tx, pkt, t.sport)
}

/// A relocated copy whose origin is impossible (a path the connection does
/// not have, a PSN outside that path's window) is dropped before its own
/// PSN is recorded: the real packet with that PSN still gets through.
#[test]
fn a_relocated_copy_with_a_bad_origin_burns_no_psn() {
    let (mut rx, _tx, real, sport) = first_packet(2);
    let Ok(Packet::Data(h, payload)) = wire::decode(&real) else {
        panic!("not data")
    };
    for (origin, err) in [
        (wire::Origin { path: 99, psn: 0 }, RecvError::Path(99)),
        (
            wire::Origin {
                path: 1,
                psn: 0x4000_0000,
            },
            RecvError::Window,
        ),
    ] {
        let mut forged_hdr = h;
        forged_hdr.common.flags |= wire::flags::RELOCATED;
        forged_hdr.origin = Some(origin);
        let mut buf = [0u8; TRANSPORT_HEADER_MAX as usize];
        let n = wire::encode_data(&forged_hdr, payload.len() as u16, &mut buf).unwrap();
        let mut forged = buf[..n].to_vec();
        forged.extend(payload);
        assert_eq!(rx.on_datagram(SECOND, &forged, 40_000, false), Err(err));
    }
    assert!(
        matches!(
            rx.on_datagram(SECOND, &real, sport, false),
            Ok(Received::Data(..))
        ),
        "the forged copies burned the real packet's PSN"
    );
}

/// A copy of the newest ACK, sent again seconds later: it acknowledges
/// nothing new, so it is no RTT sample (it would be one as old as the copy).
#[test]
fn a_replayed_ack_is_no_rtt_sample() {
    let (mut rx, mut tx, pkt, sport) = first_packet(1);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    assert!(rx.on_datagram(SECOND, &pkt, sport, false).is_ok());
    let t = rx.poll_transmit(SECOND + 20_000, &mut hdr).unwrap();
    let ack = hdr[..t.len].to_vec();
    assert!(tx
        .on_datagram(SECOND + 40_000, &ack, t.sport, false)
        .is_ok());
    let srtt = tx.srtt_us();
    assert!(srtt > 0 && srtt < 1_000, "{srtt}");
    for i in 1..=8 {
        let _ = tx.on_datagram(SECOND + i * SECOND, &ack, 40_000, false);
    }
    assert_eq!(tx.srtt_us(), srtt, "the copies were RTT samples");
}

/// The port a keepalive leaves from is that of the path acknowledged last:
/// none before any ACK, not merely one a packet left from, and of two paths
/// the one whose ACK came later, in either order; a path whose timer
/// expired since loses the claim.
#[test]
fn the_proven_port_is_the_last_acknowledged_paths() {
    for later_first in [false, true] {
        let (a, b) = config_pair(4, 1024);
        let mut rx = Conn::new(a);
        let mut tx = Conn::new(b);
        let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
        for m in workload(2, 2, &[100]) {
            tx.post(m).unwrap();
        }
        // Two packets, each on its own path.
        let mut sent = Vec::new();
        while let Some(t) = tx.poll_transmit(SECOND, &mut hdr) {
            let mut pkt = hdr[..t.len].to_vec();
            pkt.extend(vec![0u8; t.payload.map_or(0, |p| usize::from(p.len))]);
            sent.push((pkt, t.sport));
        }
        assert_eq!(sent.len(), 2);
        assert_ne!(sent[0].1, sent[1].1, "two paths");
        assert_eq!(tx.proven_sport(), None, "sent, not acknowledged");
        for (pkt, sport) in &sent {
            assert!(rx.on_datagram(SECOND, pkt, *sport, false).is_ok());
        }
        assert_eq!(rx.proven_sport(), None, "received is not proven");
        let mut acks = Vec::new();
        while let Some(t) = rx.poll_transmit(SECOND + 600_000, &mut hdr) {
            acks.push((hdr[..t.len].to_vec(), t.sport));
        }
        assert_eq!(acks.len(), 2, "one ACK per path");
        if later_first {
            acks.reverse();
        }
        let mut at = SECOND + 700_000;
        for (ack, sport) in &acks {
            assert!(tx.on_datagram(at, ack, *sport, false).is_ok());
            at += 100_000;
        }
        // An ACK leaves from the port of the packets it acknowledges.
        let last = acks.last().unwrap().1;
        assert_eq!(tx.proven_sport(), Some(last), "later_first {later_first}");

        // Two more packets, both lost: once each path's timer expired
        // (its probe), neither route counts as proven, however recent its
        // last ACK.
        for m in workload(2, 2, &[100]) {
            tx.post(m).unwrap();
        }
        let mut lost = Vec::new();
        while let Some(t) = tx.poll_transmit(2 * SECOND, &mut hdr) {
            let mut pkt = hdr[..t.len].to_vec();
            pkt.extend(vec![0u8; t.payload.map_or(0, |p| usize::from(p.len))]);
            lost.push((pkt, t.sport));
        }
        assert_eq!(lost.len(), 2);
        let expired = |c: &Conn| {
            (0..2)
                .filter(|&i| c.path_info(i).unwrap().expiries > 0)
                .count()
        };
        let mut now = 2 * SECOND;
        let mut saw_one = false;
        for turn in 0.. {
            if expired(&tx) == 2 {
                break;
            }
            assert!(turn < 100, "the timers never expired");
            let at = tx.next_timeout().expect("lost packets keep a timer");
            assert!(at < 10 * SECOND, "no probe in 8 s");
            now = now.max(at);
            tx.on_timeout(now);
            if expired(&tx) == 1 {
                saw_one = true;
                // The one not expired yet is the proven one if it was
                // acknowledged.
                let fresh = (0..2)
                    .map(|i| tx.path_info(i).unwrap())
                    .find(|p| p.expiries == 0)
                    .unwrap();
                assert_eq!(tx.proven_sport(), Some(fresh.sport));
            }
        }
        // (Round trips of 0.7 and 0.8 ms: the timers expire apart.)
        assert!(saw_one, "one path expired before the other");
        // Neither path moved (that would forget its ACK): the expiries
        // alone take the claim.
        let ports: Vec<u16> = (0..2).map(|i| tx.path_info(i).unwrap().sport).collect();
        assert!(ports.iter().all(|p| sent.iter().any(|s| s.1 == *p)));
        assert_eq!(tx.proven_sport(), None, "every path is suspect");
    }
}

#[test]
fn both_directions_at_once() {
    let msgs_a = workload(30, 2, &[5000, 100]);
    let msgs_b = workload(30, 3, &[2048, 0, 70000]);
    let mut p = Pair::new(
        3,
        1024,
        Channel {
            loss: 30,
            ..Channel::default()
        },
        11,
    );
    p.hosts[0].todo.extend(msgs_a.iter().copied());
    p.hosts[1].todo.extend(msgs_b.iter().copied());
    assert!(p.run(60 * SECOND));
    assert_eq!(check_delivery(&p, 0, 1, &msgs_a), Vec::<String>::new());
    assert_eq!(check_delivery(&p, 1, 0, &msgs_b), Vec::<String>::new());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

    /// Every message is delivered exactly once with identical bytes and
    /// completed in order, whatever the channel loses, duplicates or reorders.
    #[test]
    fn exactly_once_in_order_over_a_hostile_channel(
        seed in any::<u64>(),
        loss in 0u32..250,
        dup in 0u32..100,
        jitter in prop_oneof![Just(0u64), 1u64..40_000],
        blackhole in prop_oneof![3 => Just(None), 1 => (0u16..8).prop_map(Some)],
        paths in 1u16..=4,
        streams in 1u32..4,
        n in 1u32..40,
        sizes in prop::collection::vec(0u32..20_000, 1..5),
        reorder_window in prop_oneof![Just(0u32), 1u32..64],
    ) {
        let chan = Channel { loss, dup, jitter, blackhole, ..Channel::default() };
        let msgs = workload(n, streams, &sizes);
        // With a reordering allowance (the kernel module's is 8 and grows),
        // holes wait for the probe timer more often.
        let (mut a, mut b) = config_pair(paths, 1024);
        a.reorder_window = reorder_window;
        b.reorder_window = reorder_window;
        let mut p = Pair::with_configs(a, b, chan, seed);
        p.hosts[0].todo.extend(msgs.iter().copied());
        prop_assert!(p.run(600 * SECOND), "stalled");
        prop_assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    }
}

/// Moves everything one side may send now to the other side; returns the
/// decoded ACKs' rate hints.
fn exchange(p: &mut Pair, from: usize, now: u64) -> Vec<u32> {
    let mut hints = vec![];
    deliver(p, from, now, |b| {
        if let Ok(Packet::Ack(a)) = wire::decode(b) {
            hints.push(a.rate_hint_kbps);
        }
    });
    hints
}

/// Hands everything `from` sends at `now` to the other host, after `seen`.
fn deliver(p: &mut Pair, from: usize, now: u64, mut seen: impl FnMut(&[u8])) {
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    while let Some(t) = p.hosts[from].conn.poll_transmit(now, &mut hdr) {
        let b = datagram(&hdr, &t);
        seen(&b);
        p.hosts[1 - from].receive(now, &b, t.sport, false);
    }
}

/// The data packets `from` sends at `now`: their flags.
fn data_flags(p: &mut Pair, from: usize, now: u64) -> Vec<u8> {
    let mut out = vec![];
    deliver(p, from, now, |b| {
        if let Ok(Packet::Data(d, _)) = wire::decode(b) {
            out.push(d.common.flags);
        }
    });
    out
}

/// Before the peer has answered, a connection of 4 paths sends one path's
/// initial window (not one on every path) and asks for an ACK with its last
/// packet; the answer opens the connection's window to its paths' windows.
#[test]
fn the_first_flight_is_one_paths_window_until_the_peer_answers() {
    let msgs = workload(4, 1, &[1024 * 1024]);
    let mut p = Pair::new(PATHS as u16, 1024, Channel::default(), 1);
    for m in &msgs {
        p.hosts[0].conn.post(*m).unwrap();
    }
    let first = data_flags(&mut p, 0, 0);
    assert_eq!(first.len(), 16, "the first flight");
    let asks = |f: &[u8]| {
        f.iter()
            .map(|x| x & wire::flags::ACK_REQ != 0)
            .collect::<Vec<_>>()
    };
    let mut want = vec![false; 15];
    want.push(true);
    assert_eq!(asks(&first), want);
    // Nothing new until the peer answers (the probes the timers would send
    // are copies of the flight's packets).
    assert!(data_flags(&mut p, 0, SECOND).is_empty());
    assert_eq!(p.hosts[0].conn.window(), 16);
    exchange(&mut p, 1, SECOND + 1_000);
    assert_eq!(p.hosts[0].conn.outstanding(), 0);
    let second = data_flags(&mut p, 0, SECOND + 2_000);
    assert!(
        second.len() >= 4 * 16,
        "{} packets once answered",
        second.len()
    );
}

/// An ACK that acknowledges nothing (anyone who has seen the connection's
/// identifiers can forge one) does not end the first flight.
#[test]
fn an_empty_ack_does_not_end_the_first_flight() {
    let mut p = Pair::new(PATHS as u16, 1024, Channel::default(), 1);
    for m in &workload(4, 1, &[1024 * 1024]) {
        p.hosts[0].conn.post(*m).unwrap();
    }
    // The flight reaches the peer; each path's first PSN is noted.
    let mut first = BTreeMap::new();
    deliver(&mut p, 0, 0, |b| {
        if let Ok(Packet::Data(d, _)) = wire::decode(b) {
            let f = first.entry(d.common.path).or_insert(d.common.psn);
            *f = (*f).min(d.common.psn);
        }
    });
    assert_eq!(first.len(), PATHS);
    // The peer's ACKs, turned into ones that acknowledge nothing.
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut forged = vec![];
    while let Some(t) = p.hosts[1].conn.poll_transmit(SECOND, &mut hdr) {
        if let Ok(Packet::Ack(mut a)) = wire::decode(&hdr[..t.len]) {
            a.common.psn = first[&a.common.path];
            a.sack = [0; 32];
            let mut b = [0u8; TRANSPORT_HEADER_MAX as usize];
            let n = wire::encode_ack(&a, &mut b).unwrap();
            forged.push((b[..n].to_vec(), t.sport));
        }
    }
    assert!(!forged.is_empty());
    for (b, sport) in &forged {
        p.hosts[0].receive(SECOND, b, *sport, false);
    }
    assert_eq!(p.hosts[0].conn.window(), 16);
    assert!(data_flags(&mut p, 0, SECOND).is_empty());
}

/// Hands the first `n` datagrams `from` sends at `now` to the other host,
/// with CE marks on the data packets; the rest are lost.
fn deliver_marked(p: &mut Pair, from: usize, now: u64, n: usize) {
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut k = 0;
    while let Some(t) = p.hosts[from].conn.poll_transmit(now, &mut hdr) {
        if k < n {
            let b = datagram(&hdr, &t);
            p.hosts[1 - from].receive(now, &b, t.sport, t.payload.is_some());
        }
        k += 1;
    }
}

/// A path whose PSNs are in the upper half of the space (`config_pair`
/// starts at 0xffff_ff00) empties with a marked ACK, then an ACK of part of
/// its next window brings marks: the window halves again. (The first
/// halving's recovery point was PSN 0 when nothing was left in flight, and
/// every later mark was taken for one of the same window until the PSNs
/// wrapped.)
#[test]
fn a_mark_after_a_path_emptied_still_halves_its_window() {
    let mut p = Pair::new(1, 1024, Channel::default(), 1);
    for m in &workload(8, 1, &[16 * 1024]) {
        p.hosts[0].conn.post(*m).unwrap();
    }
    deliver_marked(&mut p, 0, 0, usize::MAX);
    exchange(&mut p, 1, SECOND);
    assert_eq!(p.hosts[0].conn.outstanding(), 0);
    let first = p.hosts[0].conn.window();
    assert!(first < 16, "{first} after the first marks");
    deliver_marked(&mut p, 0, 2 * SECOND, 2);
    exchange(&mut p, 1, 3 * SECOND);
    assert!(p.hosts[0].conn.outstanding() > 0);
    let second = p.hosts[0].conn.window();
    assert!(
        second < first,
        "{second} after the second window's marks, {first} before"
    );
}

/// An ACK whose echoed timestamp is newer than anything it acknowledges
/// (forged to say "now") is no round-trip sample: it would set a minimum of
/// nothing, and the window the receiver's hint allows (the share over that
/// minimum) would shrink to a packet or two.
#[test]
fn a_forged_echo_of_now_is_no_round_trip_sample() {
    let mut p = Pair::new(1, 1024, Channel::default(), 1);
    let msgs = workload(2, 1, &[1024]);
    p.hosts[0].conn.post(msgs[0]).unwrap();
    // The first packet's ACK, 30 ms later, its echo rewritten to the time
    // it arrives.
    deliver(&mut p, 0, SECOND, |_| {});
    let t1 = SECOND + 30_000_000;
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    while let Some(t) = p.hosts[1].conn.poll_transmit(t1, &mut hdr) {
        if let Ok(Packet::Ack(mut a)) = wire::decode(&hdr[..t.len]) {
            a.common.timestamp = (t1 / 1_000) as u32;
            let mut b = [0u8; TRANSPORT_HEADER_MAX as usize];
            let n = wire::encode_ack(&a, &mut b).unwrap();
            p.hosts[0].receive(t1, &b[..n], t.sport, false);
        }
    }
    assert_eq!(p.hosts[0].conn.stats().rx_acks, 1);
    assert_eq!(p.hosts[0].conn.srtt_us(), 0, "the forged echo was a sample");
    // The second packet's genuine ACK, 30 ms after it was sent.
    p.hosts[0].conn.post(msgs[1]).unwrap();
    let t2 = 2 * SECOND;
    deliver(&mut p, 0, t2, |_| {});
    exchange(&mut p, 1, t2 + 30_000_000);
    assert_eq!(p.hosts[0].conn.stats().rx_acks, 2);
    let srtt = p.hosts[0].conn.srtt_us();
    assert!((29_000..=31_000).contains(&srtt), "{srtt} us");
}

/// A probe resends a packet that was only late: the ACK of its original
/// (it echoes a timestamp older than the probe) says nothing about the
/// packets sent between the two. Taking the probe's transmission order for
/// it declared them all lost, and they were resent.
#[test]
fn the_late_original_of_a_probed_packet_does_not_make_the_rest_lost() {
    let mut p = Pair::new(1, 1024, Channel::default(), 1);
    p.hosts[0]
        .conn
        .post(workload(1, 1, &[4 * 1024])[0])
        .unwrap();
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut originals = vec![];
    while let Some(t) = p.hosts[0].conn.poll_transmit(SECOND, &mut hdr) {
        originals.push((datagram(&hdr, &t), t.sport));
    }
    assert_eq!(originals.len(), 4);
    // Nothing answered: the timer probes the oldest.
    let at = p.hosts[0].conn.next_timeout().unwrap();
    p.hosts[0].conn.on_timeout(at);
    assert!(p.hosts[0].conn.poll_transmit(at, &mut hdr).is_some());
    assert!(p.hosts[0].conn.poll_transmit(at, &mut hdr).is_none());
    assert_eq!(p.hosts[0].conn.stats().retransmits, 1);
    // The first original arrives (late), then its ACK.
    let late = at + 1_000_000;
    let (b, sport) = &originals[0];
    p.hosts[1].receive(late, b, *sport, false);
    p.hosts[1].conn.on_timeout(late + 100_000);
    exchange(&mut p, 1, late + 100_000);
    assert_eq!(p.hosts[0].conn.stats().rx_acks, 1);
    // The other three are not taken for lost.
    let resent = data_flags(&mut p, 0, late + 100_000);
    assert!(resent.is_empty(), "{} packets resent", resent.len());
    assert_eq!(p.hosts[0].conn.stats().retransmits, 1);
}

/// When [`paced_at`] sent its packet.
const PACED_T0: u64 = 2_000;

/// A pair whose sender learned the receiver's hint of `kbps` (kbit/s) from
/// an ACK and sent one new packet at [`PACED_T0`], with more queued.
fn paced_at(kbps: u32) -> Pair {
    let msgs = workload(4, 1, &[64 * 1024]);
    let mut p = Pair::new(2, 1024, Channel::default(), 1);
    for m in &msgs {
        p.hosts[0].conn.post(*m).unwrap();
    }
    p.hosts[1].conn.set_rate_hint(kbps);
    exchange(&mut p, 0, 0);
    let hints = exchange(&mut p, 1, 1_000);
    assert!(hints.contains(&kbps), "{hints:?}");
    assert_eq!(p.hosts[0].conn.pace_kbps(), kbps);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    assert!(p.hosts[0].conn.poll_transmit(PACED_T0, &mut hdr).is_some());
    p
}

/// The next new packet after [`paced_at`]'s waits more than `early` ns and
/// is due by `due` ns (the pacer's timer asks for it by then).
fn next_packet_between(p: &mut Pair, early: u64, due: u64) {
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let c = &mut p.hosts[0].conn;
    assert!(c.poll_transmit(PACED_T0, &mut hdr).is_none(), "paced");
    assert!(c.poll_transmit(PACED_T0 + early, &mut hdr).is_none());
    let next = c.next_timeout();
    assert!(next.is_some_and(|t| t <= PACED_T0 + due), "{next:?}");
    assert!(c.poll_transmit(PACED_T0 + due, &mut hdr).is_some());
}

/// The flags of the first new packet of a sender paced at `kbps` (more
/// queued), both ends holding ACKs back at most `ack_delay_ns`.
fn first_paced_flags(kbps: u32, ack_delay_ns: u32) -> u8 {
    let msgs = workload(4, 1, &[64 * 1024]);
    let (mut a, mut b) = config_pair(2, 1024);
    a.ack_delay_ns = ack_delay_ns;
    b.ack_delay_ns = ack_delay_ns;
    let mut p = Pair::with_configs(a, b, Channel::default(), 1);
    for m in &msgs {
        p.hosts[0].conn.post(*m).unwrap();
    }
    p.hosts[1].conn.set_rate_hint(kbps);
    exchange(&mut p, 0, 0);
    exchange(&mut p, 1, 1_000);
    assert_eq!(p.hosts[0].conn.pace_kbps(), kbps);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let t = p.hosts[0]
        .conn
        .poll_transmit(PACED_T0, &mut hdr)
        .expect("a packet");
    let mut b = hdr[..t.len].to_vec();
    if let Some(seg) = t.payload {
        b.extend((0..u32::from(seg.len)).map(|i| pattern(seg.stream, seg.msn, seg.offset + i)));
    }
    match wire::decode(&b) {
        Ok(Packet::Data(d, _)) => d.common.flags,
        other => panic!("not a data packet: {other:?}"),
    }
}

#[test]
fn the_pacers_slot_can_be_left_out_of_the_next_timeout() {
    // 400 Mbit/s: a slot every 23 us, more than the pacer's 10 us of
    // slack (at 1 Gbit/s the slack lets the next packet go at once), and
    // released at 13 us, before the first probe (16 us).
    let mut p = paced_at(400_000);
    let c = &mut p.hosts[0].conn;
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    // Held back by the pacer: its slot is a deadline, before the probe's.
    assert!(c.poll_transmit(PACED_T0 + 1, &mut hdr).is_none());
    let all = c.next_timeout().expect("the pacer's slot");
    let other = c.next_timeout_but_pacer().expect("the probe timer");
    assert!(all < other, "{all} {other}");
    // Once the slot is due, it stays the next timeout until data is sent;
    // without it, the probe is.
    let late = all + 1;
    assert!(c.next_timeout().is_some_and(|t| t <= late));
    assert_eq!(c.next_timeout_but_pacer(), Some(other));
}

#[test]
fn a_sender_paced_slower_than_the_ack_delay_asks_for_each_ack() {
    // 250 kbit/s: a packet every 37 ms, the receiver's delay is 0.5 ms.
    assert_ne!(first_paced_flags(250, 500_000) & wire::flags::ACK_REQ, 0);
    // 100 Gbit/s: the next packet follows within the delay.
    assert_eq!(
        first_paced_flags(100_000_000, 500_000) & wire::flags::ACK_REQ,
        0
    );
}

#[test]
fn a_tiny_hint_is_obeyed_down_to_the_floor_and_a_faster_one_takes_over_at_once() {
    let msgs = workload(4, 1, &[64 * 1024]);
    let mut p = Pair::new(2, 1024, Channel::default(), 1);
    for m in &msgs {
        p.hosts[0].conn.post(*m).unwrap();
    }
    // A forged ACK could ask for 1 kbit/s: a packet every 9 s.
    p.hosts[1].conn.set_rate_hint(1);
    exchange(&mut p, 0, 0);
    exchange(&mut p, 1, 1_000);
    assert_eq!(p.hosts[0].conn.pace_kbps(), MIN_PACE_KBPS);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let t0 = PACED_T0;
    assert!(p.hosts[0].conn.poll_transmit(t0, &mut hdr).is_some());
    // At 64 kbit/s the next one waits 143 ms.
    assert!(p.hosts[0]
        .conn
        .poll_transmit(t0 + 100_000_000, &mut hdr)
        .is_none());
    let next = p.hosts[0].conn.next_timeout();
    assert!(next.is_some_and(|t| t <= t0 + 144_000_000), "{next:?}");
    // The receiver's share grows: the next packet is due within one gap at
    // the new rate, not at the slot booked at the old one.
    p.hosts[1].conn.set_rate_hint(100_000);
    p.hosts[1].conn.announce();
    let t1 = t0 + 1_000_000;
    exchange(&mut p, 1, t1);
    assert_eq!(p.hosts[0].conn.pace_kbps(), 100_000);
    assert!(p.hosts[0]
        .conn
        .poll_transmit(t1 + 92_000, &mut hdr)
        .is_some());
}

#[test]
fn new_data_is_paced_at_the_receivers_hint() {
    // 100 Mbit/s: (1024 + 120) bytes every 91.5 us, let go up to the
    // pacer's 10 us of slack early.
    let mut p = paced_at(100_000);
    next_packet_between(&mut p, 75_000, 92_000);
}

#[test]
fn a_gigabit_hint_does_not_cost_a_timer_per_packet() {
    // 10 Gbit/s: a slot every 0.9 us, less than a kernel timer can be
    // relied on for. A sender whose clock has not moved (one burst of
    // sends) still sends the slots due within the slack: 10 us of them,
    // not a packet per timer.
    // (Windows of 64 packets and a round trip of 100 us, so that neither
    // the windows nor the hint's window cap limit it first.)
    let (mut a, mut b) = config_pair(2, 1024);
    a.initial_window = 64;
    b.initial_window = 64;
    let mut p = Pair::with_configs(a, b, Channel::default(), 1);
    for m in &workload(4, 1, &[64 * 1024]) {
        p.hosts[0].conn.post(*m).unwrap();
    }
    p.hosts[1].conn.set_rate_hint(10_000_000);
    exchange(&mut p, 0, 0);
    assert!(exchange(&mut p, 1, 100_000).contains(&10_000_000));
    let t0 = 101_000;
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut sent = 0;
    while p.hosts[0].conn.poll_transmit(t0, &mut hdr).is_some() {
        sent += 1;
    }
    assert!((12..=17).contains(&sent), "{sent} packets at one instant");
    // The rest waits for time to pass, and is due by the pacer's timer.
    let next = p.hosts[0].conn.next_timeout();
    assert!(next.is_some_and(|t| t <= t0 + 2_000), "{next:?}");
}

#[test]
fn the_pacer_is_no_timer_once_nothing_waits_for_it() {
    // The pacer holds the next packet back; then the stream is cancelled
    // (its QP destroyed): no new data waits, and the pacer's slot, soon in
    // the past, must not stay a deadline (it would fire every microsecond).
    let mut p = paced_at(100_000);
    let c = &mut p.hosts[0].conn;
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    assert!(c.poll_transmit(PACED_T0, &mut hdr).is_none(), "paced");
    c.cancel_stream(
        workload(4, 1, &[64 * 1024])[0].stream,
        NakCode::RemoteOperation,
    );
    // Past the slot, with every timer due handled: nothing is due still.
    let now = PACED_T0 + 200_000;
    c.on_timeout(now);
    let next = c.next_timeout();
    assert!(
        next.is_none_or(|t| t > now),
        "a deadline in the past: {next:?}"
    );
}

#[test]
fn marks_shrink_the_hint_by_at_most_an_eighth() {
    let msgs = workload(8, 1, &[8 * 1024]);
    let mut p = Pair::new(1, 1024, Channel::default(), 1);
    for m in &msgs {
        p.hosts[0].conn.post(*m).unwrap();
    }
    p.hosts[1].conn.set_rate_hint(8_000_000);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut hints = vec![];
    let mut now = 0;
    // Every data packet arrives marked; time moves past the pacer.
    while let Some(t) = p.hosts[0].conn.poll_transmit(now, &mut hdr) {
        let mut b = hdr[..t.len].to_vec();
        let seg = t.payload.unwrap();
        b.extend((0..u32::from(seg.len)).map(|i| pattern(seg.stream, seg.msn, seg.offset + i)));
        p.hosts[1].receive(now, &b, t.sport, true);
        hints.extend(exchange(&mut p, 1, now));
        now += 5_000;
    }
    assert!(hints.len() > 4);
    assert!(
        hints.windows(2).all(|w| w[1] <= w[0]),
        "falls as marks accumulate: {hints:?}"
    );
    let last = *hints.last().unwrap();
    assert!((7_000_000..8_000_000).contains(&last), "{hints:?}");
}

#[test]
fn an_announcement_is_an_ack_carrying_the_new_hint() {
    let msgs = workload(1, 1, &[100]);
    let mut p = Pair::new(2, 1024, Channel::default(), 1);
    p.hosts[0].conn.post(msgs[0]).unwrap();
    exchange(&mut p, 0, 0);
    exchange(&mut p, 1, 0);
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    assert!(p.hosts[1].conn.poll_transmit(0, &mut hdr).is_none());
    p.hosts[1].conn.share_capacity(25_000_000, 5);
    p.hosts[1].conn.announce();
    let hints = exchange(&mut p, 1, 10);
    assert_eq!(hints, [5_000_000]);
    assert_eq!(p.hosts[0].conn.pace_kbps(), 5_000_000);
}

#[test]
fn a_hint_below_one_megabit_per_second_paces_too() {
    // 500 kbit/s (0 in whole Mbit/s): (1024 + 120) bytes every 18.3 ms.
    let mut p = paced_at(500);
    next_packet_between(&mut p, 18_000_000, 18_305_000);
}

#[test]
fn a_cancelled_stream_drains_void_while_the_others_deliver() {
    // Stream 1's queue pair goes away while its packets are in flight over a
    // lossy channel: its messages complete in error, its lost packets are
    // resent void (no bytes), and the other streams are not disturbed.
    let chan = Channel {
        loss: 200,
        ..Channel::default()
    };
    let msgs = workload(48, 3, &[64 * 1024]);
    let mut p = Pair::new(4, 1024, chan, 11);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(!p.run(30_000), "still running when the stream is cancelled");
    let cancelled = p.hosts[0].conn.cancel_stream(1, NakCode::RemoteOperation);
    assert!(cancelled > 0, "nothing of stream 1 in progress");
    p.hosts[0].todo.retain(|m| m.stream != 1);
    assert!(p.run(60 * SECOND), "did not drain");
    let h = &p.hosts[0];
    assert_eq!(h.conn.outstanding(), 0);
    assert!(!h.conn.stream_busy(1));
    assert!(
        p.hosts[1].voids > 0,
        "no void packet was needed: {:?} {cancelled}",
        h.conn.stats()
    );
    let failed = h
        .completions
        .iter()
        .filter(|c| c.stream == 1 && c.error == Some(NakCode::RemoteOperation))
        .count();
    assert_eq!(failed as u32, cancelled);
    // Stream 1 completed in order: successes, then the cancelled ones.
    let s1: Vec<_> = h.completions.iter().filter(|c| c.stream == 1).collect();
    assert!(s1.windows(2).all(|w| w[1].msn == w[0].msn + 1), "{s1:?}");
    let others: Vec<Message> = msgs.iter().copied().filter(|m| m.stream != 1).collect();
    p.hosts[0].completions.retain(|c| c.stream != 1);
    p.hosts[1].delivered.remove(&1);
    assert_eq!(check_delivery(&p, 0, 1, &others), Vec::<String>::new());
}

/// 300 x 32 packets over two paths that reorder by up to 200 us at about a
/// packet per microsecond, from an allowance of 2 packets: most overtaken
/// packets are taken for lost at first. Each duplicate the receiver reports
/// doubles the allowance, so the spurious resends stop early instead of going
/// on all run long (without the widening most overtaken packets are resent).
fn reordering_widens_the_allowance(chan: Channel, ack_every: u16) {
    let msgs = workload(300, 1, &[32 * 1024]);
    let (mut a, mut b) = config_pair(2, 1024);
    a.reorder_window = 2;
    b.reorder_window = 2;
    b.ack_every = ack_every;
    let mut p = Pair::with_configs(a, b, chan, 11);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(600 * SECOND), "did not finish");
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    let s = p.hosts[0].conn.stats();
    assert!(s.spurious > 0, "the allowance widened: {s:?}");
    assert!(s.retransmits * 20 < s.tx_data, "{s:?}");
}

#[test]
fn spurious_resends_widen_the_reordering_allowed() {
    let chan = Channel {
        delay: 20_000,
        jitter: 200_000,
        ..Channel::default()
    };
    reordering_widens_the_allowance(chan, ACK_EVERY);
}

#[test]
fn reordered_data_with_acks_in_order_widens_the_reordering_allowed() {
    // Only the data is reordered, and every packet is acknowledged at once.
    // The first copy of a packet taken for lost is acknowledged without a
    // duplicate (its ACK frees the slot); the duplicate comes with the second
    // copy, in a later ACK. It still counts: a gate that looked only at the
    // ACK carrying the duplicate left the allowance narrow (39,073 resends
    // for 9,600 packets).
    let chan = Channel {
        delay: 20_000,
        jitter: 200_000,
        jitter_data_only: true,
        ..Channel::default()
    };
    reordering_widens_the_allowance(chan, 1);
}

#[test]
fn duplicates_of_timer_probes_do_not_widen_the_reordering_allowed() {
    // Paths that never reorder, 20% loss both ways, one-packet messages: a
    // probe the timer sends after a lost ACK arrives as a duplicate. That
    // says nothing about reordering; taking it for a spurious reordering
    // resend once doubled the allowance up to half the window, so every
    // later loss waited for the timer (the simulator's goodput at 10% loss:
    // 0.31-0.34 or 0.80 by seed before, 0.80-0.81 on seeds 1-5 after).
    let msgs = workload(400, 4, &[100]);
    let chan = Channel {
        loss: 200,
        ..Channel::default()
    };
    let p = run_one_way(chan, 4, &msgs, 4);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    let s = p.hosts[0].conn.stats();
    // The receiver reported duplicates (its paths count the ones it flagged).
    let flagged: u64 = (0..4)
        .map(|i| p.hosts[1].conn.path_info(i).map_or(0, |x| x.rx.duplicates))
        .sum();
    assert!(
        s.timeouts > 0 && flagged > 0,
        "probes were duplicated: {s:?}"
    );
    assert_eq!(
        s.spurious, 0,
        "in-order paths never widened the allowance: {s:?}"
    );
}

#[test]
fn every_path_suspect_still_probes_instead_of_moving_forever() {
    // Found by the property test above: at 21.5% loss with reordering, holes
    // wait for the probe timer, every path turns suspect and none takes the
    // packets waiting to move; a probe that sent nothing failed its path
    // again and again (76,000 path moves in 600 simulated seconds).
    let chan = Channel {
        loss: 215,
        dup: 42,
        jitter: 33_902,
        ..Channel::default()
    };
    let msgs = workload(20, 1, &[13_313]);
    let mut p = Pair::new(3, 1024, chan, 11_284_169_792_729_131_952);
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(
        p.run(600 * SECOND),
        "stalled: {:?}",
        p.hosts[0].conn.stats()
    );
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    assert!(
        p.hosts[0].conn.stats().path_moves < 100,
        "{:?}",
        p.hosts[0].conn.stats()
    );
}

#[test]
fn each_stream_is_cut_at_its_own_payload_size() {
    // The connection allows 1024 bytes; stream 2 asks for 256. A small path
    // MTU of one queue pair used to set every stream's (the first QP's).
    let (a, _) = config_pair(1, 1024);
    let mut c = Conn::new(a);
    let m = workload(1, 1, &[2048])[0];
    c.post_sized(Message { stream: 2, ..m }, 256).unwrap();
    c.post_sized(Message { stream: 4, ..m }, 4096).unwrap();
    let mut buf = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut sizes: BTreeMap<u32, Vec<(u32, u16)>> = BTreeMap::new();
    for _ in 0..64 {
        let Some(t) = c.poll_transmit(0, &mut buf) else {
            break;
        };
        if let Some(s) = t.payload {
            sizes.entry(s.stream).or_default().push((s.offset, s.len));
        }
    }
    let small: Vec<_> = (0..8).map(|i| (i * 256, 256)).collect();
    assert_eq!(sizes.get(&2), Some(&small));
    // Asking for more than the connection allows gets the connection's.
    assert_eq!(sizes.get(&4), Some(&vec![(0, 1024), (1024, 1024)]));
}

#[test]
fn a_stream_that_starts_again_is_not_failed_by_an_old_rejection() {
    // Stream 0's message 0 is rejected; the receiver's queue pair is reset
    // and the stream starts again from message 0. Every ACK used to carry
    // the old rejection, so the new message 0 failed too.
    let first = workload(1, 1, &[3000]);
    let mut p = Pair::new(2, 1024, Channel::default(), 3);
    p.hosts[1].reject_stream = Some(0);
    p.hosts[0].todo.extend(first.iter().copied());
    assert!(p.run(60 * SECOND));
    assert_eq!(p.hosts[0].completions.len(), 1);
    assert_eq!(p.hosts[0].completions[0].error, Some(NakCode::RemoteAccess));
    // The receiver's QP starts again: its stream is new.
    p.hosts[1].reject_stream = None;
    p.hosts[1].conn.forget_rejection(0);
    p.hosts[1].rx_streams.clear();
    p.hosts[1].rx_bufs.clear();
    p.hosts[1].rx_rsn.clear();
    p.hosts[1].sends_done.clear();
    p.hosts[1].delivered.clear();
    p.hosts[0].todo.extend(first.iter().copied());
    assert!(p.run(120 * SECOND));
    assert_eq!(p.hosts[0].completions.len(), 2);
    assert_eq!(
        p.hosts[0].completions[1].error, None,
        "{:?}",
        p.hosts[0].completions
    );
}

/// A packet moved off a failed path is acknowledged on the path it went to;
/// its first path's PSN, counted received when the copy arrived, was then
/// acknowledged only by that path's next ACK. When that ACK was lost and the
/// path had filled its 256-PSN window meanwhile (everything else on it
/// selectively acknowledged), nothing was left on the path to ask for
/// another ACK, and the path sent nothing more for the rest of the
/// connection's life. (A long simulated run at 10% loss closed three of four
/// paths this way; the kernel's fabric test once failed every transfer after
/// its first lossy one, as a connection with every path closed would.) Here,
/// without the rule that the copy's ACK acknowledges its origin too, seeds 4
/// and 5 each ended with paths far below their share.
#[test]
fn a_lost_ack_for_a_moved_packet_does_not_close_the_path_it_left() {
    for seed in 0..8u64 {
        let chan = Channel {
            loss: 300,
            jitter: 2_000_000,
            delay: 1_000_000,
            ..Channel::default()
        };
        let msgs = workload(3000, 8, &[65536, 4096, 1, 0, 20000]);
        let (mut a, mut b) = config_pair(4, 1024);
        a.reorder_window = 8;
        b.reorder_window = 8;
        let mut p = Pair::with_configs(a, b, chan, seed * 7919 + 13);
        p.hosts[0].todo.extend(msgs.iter().copied());
        assert!(p.run(600 * SECOND), "seed {seed}: stalled");
        assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
        let sent: Vec<u64> = (0..4)
            .map(|i| p.hosts[0].conn.path_info(i).map_or(0, |x| x.tx.sent))
            .collect();
        let mean = sent.iter().sum::<u64>() / 4;
        assert!(
            sent.iter().all(|s| 2 * s >= mean),
            "seed {seed}: a path stopped carrying its share: {sent:?}"
        );
    }
}

/// Runs `msgs` from A to B, B refusing stream 1's receive-consuming
/// packets until `ready_at` (RNR timer code `timer`), A posting with
/// `rnr_retry`.
fn run_not_ready(chan: Channel, ready_at: u64, timer: u8, rnr_retry: u8, msgs: &[Message]) -> Pair {
    let mut p = Pair::new(2, 1024, chan, 11);
    p.hosts[1].not_ready = Some((1, ready_at, timer));
    p.hosts[0].rnr_retry = rnr_retry;
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND), "did not finish");
    p
}

#[test]
fn a_receiver_not_ready_delays_the_message_instead_of_failing_it() {
    // Sends, Writes and their immediate variants on two streams, many
    // packets each; stream 1 has no receive for its first 20 ms.
    let msgs = workload(24, 2, &[1, 3000, 9000]);
    let p = run_not_ready(Channel::default(), 20_000_000, 14, 7, &msgs);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    assert!(p.hosts[0].completions.iter().all(|c| c.error.is_none()));
    assert!(p.hosts[1].rnr_refusals > 0, "the receiver refused");
    let s = p.hosts[0].conn.stats();
    assert!(s.rnr_waits > 0, "{s:?}");
    // Held packets wait on the receiver's timer, not the path's: no probe,
    // no path moved, nothing resent before a 1.28 ms wait was over.
    assert_eq!((s.timeouts, s.path_moves), (0, 0), "{s:?}");
    assert!(p.now >= 20_000_000);
    // B's refusals: one NAK each, none of them acknowledged as data.
    let r = p.hosts[1].conn.stats();
    assert_eq!(
        r.refused[NakCode::ReceiverNotReady as usize - 1],
        p.hosts[1].rnr_refusals
    );
}

#[test]
fn a_receiver_not_ready_is_waited_for_across_loss() {
    // 3% of everything lost, the NAKs included: a refusal whose NAK is lost
    // looks like a loss, is resent, and is refused again.
    let chan = Channel {
        loss: 30,
        ..Channel::default()
    };
    let msgs = workload(24, 2, &[3000, 5000]);
    let p = run_not_ready(chan, 10_000_000, 10, 7, &msgs);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    assert!(p.hosts[0].completions.iter().all(|c| c.error.is_none()));
    assert!(p.hosts[1].rnr_refusals > 0);
}

#[test]
fn rnr_retry_bounds_the_refusals_then_the_message_fails() {
    // One Send on stream 1, a receiver never ready: rnr_retry 0 fails it at
    // the first refusal, 2 after three rounds.
    let send = workload(8, 2, &[3000])
        .into_iter()
        .find(|m| m.stream == 1 && m.opcode.consumes_receive())
        .unwrap();
    for retry in [0u8, 2] {
        let p = run_not_ready(Channel::default(), u64::MAX, 1, retry, &[send]);
        let c = &p.hosts[0].completions;
        assert_eq!(c.len(), 1, "{c:?}");
        assert_eq!(c[0].error, Some(NakCode::ReceiverNotReady));
        assert_eq!(p.hosts[0].conn.stats().rnr_waits, u64::from(retry));
        // Its held packets went out void to close their holes.
        assert_eq!(p.hosts[0].conn.outstanding(), 0);
        assert!(p.hosts[1].voids > 0, "retry {retry}");
        assert!(p.hosts[1].delivered.get(&1).is_none_or(|d| d.is_empty()));
    }
}

#[test]
fn a_stream_waiting_for_its_receiver_leaves_the_window_to_the_others() {
    // Stream 1 never ready (rnr_retry 7): stream 0 still completes, in
    // order, however many of stream 1's packets are held.
    // (Fewer of stream 1's than its 64 in progress: the harness posts in
    // order, and one that does not fit would keep stream 0's back.)
    let msgs: Vec<Message> = workload(200, 2, &[9000])
        .into_iter()
        .filter(|m| m.stream == 0 || (m.opcode.consumes_receive() && m.msn < 80))
        .collect();
    let mut p = Pair::new(2, 1024, Channel::default(), 5);
    p.hosts[1].not_ready = Some((1, u64::MAX, 20));
    p.hosts[0].rnr_retry = 7;
    p.hosts[0].todo.extend(msgs.iter().copied());
    // Never idle (stream 1 waits for ever, in rounds of 10.24 ms): run for
    // a while.
    assert!(!p.run(SECOND / 2));
    assert!(p.hosts[0].conn.stats().rnr_waits > 10);
    let done0: Vec<u32> = p.hosts[0]
        .completions
        .iter()
        .filter(|c| c.stream == 0)
        .map(|c| c.msn)
        .collect();
    let want0: Vec<u32> = msgs
        .iter()
        .filter(|m| m.stream == 0)
        .map(|m| m.msn)
        .collect();
    assert_eq!(done0, want0);
    assert!(p.hosts[0].completions.iter().all(|c| c.stream == 0));
}

#[test]
fn a_message_that_failed_for_want_of_a_receive_leaves_no_hole() {
    // rnr_retry 0: a 3-packet Send fails at its first refusal, and the
    // void copies of its parked packets must still go out after its
    // completion was taken (the driver takes completions first), or their
    // PSNs pin the paths for every later message.
    let send = workload(8, 2, &[3000])
        .into_iter()
        .find(|m| m.stream == 1 && m.opcode.consumes_receive())
        .unwrap();
    let mut p = Pair::new(2, 1024, Channel::default(), 11);
    p.driver_order = true;
    p.hosts[1].not_ready = Some((1, u64::MAX, 1));
    p.hosts[0].todo.push_back(send);
    assert!(p.run(SECOND));
    assert_eq!(p.hosts[0].completions.len(), 1);
    assert_eq!(
        p.hosts[0].completions[0].error,
        Some(NakCode::ReceiverNotReady)
    );
    p.hosts[0].completions.clear();
    let later: Vec<Message> = workload(600, 2, &[100])
        .into_iter()
        .filter(|m| m.stream == 0)
        .collect();
    p.hosts[0].todo.extend(later.iter().copied());
    assert!(p.run(20 * SECOND), "stuck");
    assert_eq!(p.hosts[0].conn.outstanding(), 0);
    assert_eq!(check_delivery(&p, 0, 1, &later), Vec::<String>::new());
    let s = p.hosts[0].conn.stats();
    assert_eq!(s.path_moves, 0, "{s:?}");
}

/// `seeds` runs of 24 messages over two streams, stream 1 refused for a
/// while, over `chan`: every message delivered once, in order, with its
/// bytes, and the run goes idle.
fn not_ready_over(chan: Channel, seeds: u64) {
    for seed in 1..=seeds {
        let msgs = workload(24, 2, &[3000, 9000, 5000]);
        let mut p = Pair::new(2, 1024, chan, seed);
        p.driver_order = seed % 2 == 0;
        p.hosts[1].not_ready = Some((1, 200_000 + seed * 7_000, 3));
        p.hosts[0].rnr_retry = 7;
        p.hosts[0].todo.extend(msgs.iter().copied());
        assert!(p.run(60 * SECOND), "seed {seed}: not idle");
        assert_eq!(
            check_delivery(&p, 0, 1, &msgs),
            Vec::<String>::new(),
            "seed {seed}"
        );
    }
}

#[test]
fn a_refused_packet_lands_once_despite_duplicates_and_reordering() {
    // A copy of a refused packet still on the way (a duplicate, a spurious
    // resend, the first copy behind its probe) lands after the receive is
    // posted: it must be refused again, or its bytes count twice (once
    // more from the parked copy).
    let chan = Channel {
        dup: 100,
        jitter: 30_000,
        ..Channel::default()
    };
    not_ready_over(chan, 60);
}

#[test]
fn a_receiver_not_ready_is_waited_for_across_loss_and_reordering() {
    let chan = Channel {
        loss: 20,
        jitter: 30_000,
        ..Channel::default()
    };
    not_ready_over(chan, 40);
}

#[test]
fn a_not_ready_nak_that_names_no_packet_of_ours_changes_nothing() {
    // A refusal A takes stops the stream for a round. One that names
    // another PSN, or the right PSN sent at another time (an older copy's
    // refusal, or a forger's guess), is ignored.
    let send = workload(8, 2, &[1000])
        .into_iter()
        .find(|m| m.stream == 1 && m.opcode.consumes_receive())
        .unwrap();
    let (ca, _) = config_pair(1, 1024);
    let mut a = Conn::new(ca);
    a.post_with(send, 1024, 7).unwrap();
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let t = a.poll_transmit(1_000, &mut hdr).unwrap();
    let mut pkt = hdr[..t.len].to_vec();
    pkt.resize(t.len + t.payload.map_or(0, |s| usize::from(s.len)), 0);
    let Ok(Packet::Data(h, _)) = wire::decode(&pkt) else {
        panic!("not data")
    };
    let nak = |psn: u32, ts: u32| {
        let n = wire::NakHeader {
            common: wire::Common {
                ptype: wire::PacketType::Nak,
                flags: 0,
                path: 0,
                conn: ca.local_id,
                psn,
                timestamp: ts,
            },
            code: NakCode::ReceiverNotReady,
            rnr_timer: 1,
            stream: send.stream,
            msn: send.msn,
        };
        let mut b = [0u8; 64];
        let len = wire::encode_nak(&n, &mut b).unwrap();
        b[..len].to_vec()
    };
    let (psn, ts) = (h.common.psn, h.common.timestamp);
    for (p, s) in [(psn.wrapping_add(1), ts), (psn, ts.wrapping_add(1))] {
        assert!(a.on_datagram(2_000, &nak(p, s), 4791, false).is_ok());
        assert_eq!(a.poll_event(), None, "a stale refusal failed the Send");
        assert_eq!(a.stats().rnr_waits, 0);
    }
    // The refusal of the copy A sent: a round, and its void copy goes out.
    assert!(a.on_datagram(3_000, &nak(psn, ts), 4791, false).is_ok());
    assert_eq!(a.stats().rnr_waits, 1);
    let t = a.poll_transmit(3_000, &mut hdr).unwrap();
    assert!(t.payload.is_none(), "the PSN is closed void");
    assert!(a.waits_for_receiver());
}

#[test]
fn more_refused_packets_than_a_stream_may_park_still_arrive() {
    // A 300-packet Send refused for 20 ms: past the stream's 64 parked
    // packets the rest stay on their PSNs and are resent as losses (and
    // refused again) until there is room; all of it lands, once.
    let mut send = workload(8, 2, &[300 * 1024])
        .into_iter()
        .find(|m| m.stream == 1 && m.opcode.consumes_receive())
        .unwrap();
    // The stream's first message (the harness's receiver counts from 0).
    (send.msn, send.rsn) = (0, 0);
    let mut msgs = vec![send];
    msgs.extend(workload(40, 1, &[4096]));
    let mut p = Pair::new(4, 1024, Channel::default(), 17);
    p.hosts[1].not_ready = Some((1, 20_000_000, 14));
    p.hosts[0].rnr_retry = 7;
    p.hosts[0].todo.extend(msgs.iter().copied());
    assert!(p.run(60 * SECOND), "not idle");
    assert!(p.hosts[1].rnr_refusals > 64, "{}", p.hosts[1].rnr_refusals);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    assert!(p.hosts[0].completions.iter().all(|c| c.error.is_none()));
}

/// A `len`-byte Send as stream `stream`'s first message.
fn first_send(stream: u32, len: u32) -> Message {
    Message {
        opcode: Opcode::Send,
        stream,
        msn: 0,
        len,
        remote: None,
        rsn: 0,
        imm: None,
        atomic: None,
        solicited: false,
    }
}

#[test]
fn a_large_send_refused_for_a_while_stalls_no_stream() {
    // A 1000-packet Send whose receiver posts 5, 20 or 100 ms late, beside
    // 1000 Writes of another stream, 50 us each way: every refused packet
    // must close its PSN (parked as runs), or the refused PSNs hold every
    // path's window and nothing moves again.
    let ms = 1_000_000;
    for ready in [5 * ms, 20 * ms, 100 * ms] {
        let chan = Channel {
            delay: 50_000,
            ..Channel::default()
        };
        let mut p = Pair::new(4, 1024, chan, 7);
        p.hosts[0].rnr_retry = 7;
        p.hosts[1].not_ready = Some((1, ready, 14));
        let mut msgs = vec![first_send(1, 1000 * 1024)];
        msgs.extend(workload(1000, 1, &[4096]));
        p.hosts[0].todo.extend(msgs.iter().copied());
        assert!(p.run(10 * SECOND), "ready at {ready} ns: stuck");
        assert_eq!(
            check_delivery(&p, 0, 1, &msgs),
            Vec::<String>::new(),
            "ready at {ready} ns"
        );
        assert!(p.hosts[1].rnr_refusals > 100, "{}", p.hosts[1].rnr_refusals);
    }
}

#[test]
fn streams_whose_receivers_never_post_leave_the_others_room() {
    // Eight streams each with a 200-packet Send nobody receives (rnr_retry
    // 7: for ever, timer 0.64 ms), and 2000 Writes on stream 0: the Writes
    // all complete, in order, however long the eight wait.
    let mut p = Pair::new(4, 1024, Channel::default(), 5);
    p.hosts[0].rnr_retry = 7;
    p.hosts[1].not_ready = Some((u32::MAX, u64::MAX, 12));
    for s in 1..=8 {
        p.hosts[0].todo.push_back(first_send(s, 200 * 1024));
    }
    let writes = workload(2000, 1, &[4096]);
    p.hosts[0].todo.extend(writes.iter().copied());
    // Never idle (the eight wait for ever).
    assert!(!p.run(SECOND / 2));
    let done: Vec<u32> = p.hosts[0]
        .completions
        .iter()
        .filter(|c| c.stream == 0)
        .map(|c| c.msn)
        .collect();
    assert_eq!(done, (0..2000).collect::<Vec<u32>>());
    assert!(p.hosts[0].completions.iter().all(|c| c.stream == 0));
}

/// ACKs due in the last 100 us of every 400 us arrive together at the end:
/// later than a probe timer, but nothing is lost.
const ACK_BURSTS: Option<(u64, u64)> = Some((400_000, 100_000));

/// Writes from host 0 while host 1's ACKs come in [`ACK_BURSTS`].
fn writes_with_acks_in_bursts(seed: u64) -> Pair {
    let chan = Channel {
        ack_stall: ACK_BURSTS,
        ..Channel::default()
    };
    let msgs = workload(400, 4, &[4096, 16384, 65536]);
    let p = run_one_way(chan, 4, &msgs, seed);
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    p
}

/// `n` Read-like exchanges over one stream, 16 outstanding: host 0 sends a
/// 16-byte request, host 1 answers each with `answer` bytes, and host 0
/// sends the next request when an answer arrives (`n` at least 16).
fn requests_and_answers(chan: Channel, n: u32, answer: u32, seed: u64) -> Pair {
    assert!(n >= 16);
    let mut p = Pair::new(4, 4096, chan, seed);
    // The first 16 requests now, the rest as answers arrive.
    let mut requests = Answer {
        len: 16,
        left: n,
        next_msn: Default::default(),
    };
    let first = (0..16).filter_map(|_| requests.message(0));
    p.hosts[0].todo.extend(first);
    p.hosts[0].on_delivery = Some(requests);
    p.hosts[1].on_delivery = Some(Answer {
        len: answer,
        left: n,
        next_msn: Default::default(),
    });
    assert!(p.run(600 * SECOND), "did not finish");
    for h in &p.hosts {
        assert_eq!(h.errors, Vec::<String>::new());
    }
    assert_eq!(p.hosts[1].delivered.get(&0).map(Vec::len), Some(n as usize));
    assert_eq!(p.hosts[0].delivered.get(&0).map(Vec::len), Some(n as usize));
    p
}

/// What [`until_first_move`] saw.
#[derive(Debug)]
struct FirstMove {
    /// Path `path`'s timer expiries from the call to its move.
    expiries: u64,
    /// New packets the other paths sent from the path's first expiry to
    /// its move (each is evidence once acknowledged).
    others_sent: u64,
}

/// Runs `p` in 10 us steps until path `path` of host 0 first moves (or
/// `until` passes, or nothing is left to do: `None`).
fn until_first_move(p: &mut Pair, path: u16, until: u64) -> Option<FirstMove> {
    let info = |p: &Pair, i: u16| p.hosts[0].conn.path_info(i);
    let others_sent = |p: &Pair| -> u64 {
        (0..PATHS as u16)
            .filter(|i| *i != path)
            .filter_map(|i| info(p, i))
            .map(|x| x.tx.sent)
            .sum()
    };
    let timeouts0 = info(p, path)?.tx.timeouts;
    let mut sent_at_first_expiry = None;
    // The others' count a step before: the step of the move also sends
    // the packets the move relocates.
    let mut sent_before = others_sent(p);
    let mut step = p.now;
    while step < until {
        // (`run` leaves the clock at its last event, not at `step`.)
        step += 10_000;
        let idle = p.run(step);
        let x = info(p, path)?;
        if x.tx.moves > 0 {
            return Some(FirstMove {
                expiries: x.tx.timeouts - timeouts0,
                others_sent: sent_before - sent_at_first_expiry.unwrap_or(sent_before),
            });
        }
        sent_before = others_sent(p);
        if x.tx.timeouts > timeouts0 && sent_at_first_expiry.is_none() {
            sent_at_first_expiry = Some(sent_before);
        }
        if idle {
            return None;
        }
    }
    None
}

#[test]
fn acks_in_bursts_later_than_the_timer_move_no_path() {
    // The probe timers fire (the ACKs are late), but the peer answers no
    // other path sooner: no path moves, and nothing is relocated. (Before
    // the evidence rule: 1 move and 12 relocations here.)
    let p = writes_with_acks_in_bursts(7);
    let s = p.hosts[0].conn.stats();
    assert!(s.timeouts > 0, "the stall outlasts the timer: {s:?}");
    assert_eq!((s.path_moves, s.relocations), (0, 0), "{s:?}");
}

#[test]
fn answers_with_acks_in_bursts_move_no_path() {
    // Read-like: few small requests one way, 64 KiB answers the other.
    // (Before the evidence rule: 1 and 3 moves.)
    let chan = Channel {
        ack_stall: ACK_BURSTS,
        ..Channel::default()
    };
    let p = requests_and_answers(chan, 400, 65536, 5);
    for h in &p.hosts {
        let s = h.conn.stats();
        assert!(s.timeouts > 0, "the stall outlasts the timer: {s:?}");
        assert_eq!((s.path_moves, s.relocations), (0, 0), "{s:?}");
    }
}

#[test]
fn a_dead_path_moves_at_its_second_expiry_while_the_others_deliver() {
    // Path 0's route dies mid-run while the other paths keep delivering
    // new packets (and ACK in bursts): that is the evidence, so the path
    // moves at its second expiry, not at the blind fourth.
    let (a, _) = config_pair(4, 1024);
    let port0 = Conn::new(a).path_info(0).unwrap().sport;
    for stall in [None, ACK_BURSTS] {
        let chan = Channel {
            ack_stall: stall,
            ..Channel::default()
        };
        let all = workload(440, 4, &[4096, 16384, 65536]);
        let (warm, rest) = all.split_at(40);
        let mut p = run_one_way(chan, 4, warm, 1);
        assert_eq!(p.hosts[0].conn.stats().path_moves, 0);
        p.chan.blackhole = Some(port0 % 8);
        p.hosts[0].todo.extend(rest.iter().copied());
        let until = p.now + 60 * SECOND;
        let m = until_first_move(&mut p, 0, until).expect("path 0 moved");
        // The second expiry; with ACKs in bursts the evidence may come
        // only after it, and the path moves at the third.
        let most = match stall {
            None => FAIL_AFTER_EXPIRIES,
            Some(_) => FAIL_AFTER_EXPIRIES + 1,
        };
        assert!(
            (u64::from(FAIL_AFTER_EXPIRIES)..=u64::from(most)).contains(&m.expiries),
            "{stall:?}: {m:?}"
        );
        assert!(m.expiries < u64::from(FAIL_BLIND_AFTER_EXPIRIES));
        assert!(m.others_sent > 0, "{m:?}");
        assert!(p.run(until));
        assert_eq!(check_delivery(&p, 0, 1, &all), Vec::<String>::new());
    }
}

#[test]
fn a_dead_path_with_nothing_else_to_send_moves_at_its_fourth_expiry() {
    // Path 0 is dead from its first packet, so its first timer is the
    // initial one (10 ms, before any round-trip sample): by then the other
    // paths have delivered all they could, and every stream waits behind a
    // message with a packet on path 0 (64 messages each, the table's 256).
    // Nothing new is sent after the probe, so there is no evidence, and the
    // path moves blind.
    let (a, _) = config_pair(4, 1024);
    let port0 = Conn::new(a).path_info(0).unwrap().sport;
    let chan = Channel {
        blackhole: Some(port0 % 8),
        ..Channel::default()
    };
    let msgs = workload(400, 4, &[4096, 16384, 65536]);
    let mut p = Pair::new(4, 1024, chan, 2);
    p.hosts[0].todo.extend(msgs.iter().copied());
    let m = until_first_move(&mut p, 0, 60 * SECOND).expect("path 0 moved");
    // The premise: nothing new went out beside the probes.
    assert_eq!(m.others_sent, 0, "{m:?}");
    assert_eq!(m.expiries, u64::from(FAIL_BLIND_AFTER_EXPIRIES), "{m:?}");
    assert!(p.run(60 * SECOND));
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
}

/// Messages of `sizes` one at a time (the next posted once the last
/// completed), as a program that waits for each completion does, over 16
/// paths with the module's configuration before 2026-12-07 (`ack_every` 8,
/// a 500 us delay, probe floor 2 ms), host 1's timers running `lag` late.
fn one_at_a_time_with_late_receiver_timers(lag: u64, sizes: &[u32]) -> Pair {
    let (mut a, mut b) = config_pair(16, 1024);
    for c in [&mut a, &mut b] {
        c.ack_delay_ns = 500_000;
        c.ack_every = 8;
        c.probe_floor_us = 2_000;
        c.max_window = 256;
    }
    let chan = Channel {
        delay: 20_000,
        ..Channel::default()
    };
    let mut p = Pair::with_configs(a, b, chan, 3);
    p.hosts[1].timer_lag = lag;
    let msgs = workload(60, 2, sizes);
    for m in &msgs {
        p.hosts[0].todo.push_back(*m);
        let until = p.now + 10 * SECOND;
        assert!(p.run(until), "did not finish");
    }
    assert_eq!(check_delivery(&p, 0, 1, &msgs), Vec::<String>::new());
    p
}

#[test]
fn late_receiver_timers_cost_no_probe_at_the_end_of_the_queue() {
    // A message's last packet asks for an ACK at once; the other paths'
    // last few packets (fewer than `ack_every`) would wait for the
    // receiver's delayed ACK (500 us). When the receiver's timers run late
    // (softirq deferred under load, as in the debug guest) by more than
    // the probe timer's slack, each such path's probe fired and resent a
    // packet that was not lost. The last packet queued now carries DRY, and
    // the receiver sends every path's ACK on it. Messages that never fill
    // the window (4 and 16 KiB): nothing resent at any lag (before DRY,
    // 3 and 12 probes of 600 packets at 5 and 20 ms).
    for lag in [0, 1_000_000, 5_000_000, 20_000_000] {
        let p = one_at_a_time_with_late_receiver_timers(lag, &[4096, 16384]);
        let s = p.hosts[0].conn.stats();
        assert_eq!((s.timeouts, s.retransmits), (0, 0), "lag {lag}: {s:?}");
        assert_eq!((s.path_moves, s.relocations), (0, 0), "lag {lag}: {s:?}");
    }
}

#[test]
fn late_receiver_timers_still_cost_probes_where_the_window_fills() {
    // Messages of up to 200 KiB fill the connection's window while it
    // opens: the paths' packets sent before it filled (fewer than
    // `ack_every` each) wait for the late delayed ACK, and DRY does not
    // help, for more is queued. 44 probes of 4,200 packets at 5 and 20 ms
    // (96 and 119 before DRY), each one resend, no move; none when the
    // timers are on time.
    for lag in [0, 1_000_000] {
        let p = one_at_a_time_with_late_receiver_timers(lag, &[4096, 16384, 65536, 200_000]);
        let s = p.hosts[0].conn.stats();
        assert_eq!((s.timeouts, s.retransmits), (0, 0), "lag {lag}: {s:?}");
    }
    for lag in [5_000_000, 20_000_000] {
        let p = one_at_a_time_with_late_receiver_timers(lag, &[4096, 16384, 65536, 200_000]);
        let s = p.hosts[0].conn.stats();
        assert!(s.timeouts > 0 && s.timeouts <= 60, "lag {lag}: {s:?}");
        assert_eq!(s.retransmits, s.timeouts, "lag {lag}: {s:?}");
        assert_eq!((s.path_moves, s.relocations), (0, 0), "lag {lag}: {s:?}");
    }
}

#[test]
fn a_path_whose_acks_die_moves_as_one_whose_data_dies() {
    // fabric.sh's failed plane drops what one router sends onto it: for
    // some paths the data, for others only the ACKs (they take the data's
    // ports, reversed). The sender cannot tell the two apart: either way
    // the path moves once and its unacknowledged packets go to the other
    // paths. Where only the ACKs died, the receiver had those packets
    // already: every duplicate it counts is a packet resent, relocated or
    // probed, never more.
    let (a, _) = config_pair(16, 1024);
    let port0 = Conn::new(a).path_info(0).unwrap().sport;
    let all = workload(440, 4, &[4096, 16384, 65536]);
    let mut ends = Vec::new();
    for (data, acks) in [(Some(port0 % 8), None), (None, Some(port0 % 8))] {
        let chan = Channel {
            blackhole: data,
            blackhole_acks: acks,
            ..Channel::default()
        };
        let mut p = Pair::new(16, 1024, chan, 5);
        p.hosts[0].todo.extend(all.iter().copied());
        assert!(p.run(60 * SECOND));
        assert_eq!(check_delivery(&p, 0, 1, &all), Vec::<String>::new());
        let s = p.hosts[0].conn.stats();
        let dups = p.hosts[1].conn.stats().rx_duplicates;
        assert_eq!(s.path_moves, 1, "{data:?} {acks:?}: {s:?}");
        assert!(s.relocations > 0, "{s:?}");
        if data.is_some() {
            assert_eq!(dups, 0, "the lost data was new to the receiver");
        } else {
            assert!(dups > 0, "the ACKs' loss must cost duplicates here");
            assert!(dups <= s.relocations + s.retransmits, "{dups}: {s:?}");
        }
        ends.push(p.now);
    }
    // The same time to the end, within one probe timer (10 ms at first).
    assert!(ends[0].abs_diff(ends[1]) < 10_000_000, "{ends:?}");
}

/// Every datagram host 0 of `p` may send at `now`, with its source port.
fn sent_by_a(p: &mut Pair, now: u64) -> Vec<(Vec<u8>, u16)> {
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut out = vec![];
    while let Some(t) = p.hosts[0].conn.poll_transmit(now, &mut hdr) {
        out.push((datagram(&hdr, &t), t.sport));
    }
    out
}

/// How many ACKs host 1 of `p` sends at `now`.
fn acks_by_b(p: &mut Pair, now: u64) -> usize {
    let mut hdr = [0u8; TRANSPORT_HEADER_MAX as usize];
    let mut n = 0;
    while let Some(t) = p.hosts[1].conn.poll_transmit(now, &mut hdr) {
        n += usize::from(matches!(wire::decode(&hdr[..t.len]), Ok(Packet::Ack(_))));
    }
    n
}

fn flags_of(b: &[u8]) -> u8 {
    match wire::decode(b) {
        Ok(Packet::Data(h, _)) => h.common.flags,
        _ => 0,
    }
}

#[test]
fn dry_has_every_owing_path_acknowledged_and_a_replayed_dry_only_its_own() {
    // Delayed ACKs as the module's (every 8 packets; 500 us here, 2 ms in
    // the module): nothing is owed at once before 8 packets or 500 us.
    let (mut a, mut b) = config_pair(4, 1024);
    for c in [&mut a, &mut b] {
        c.ack_every = 8;
        c.ack_delay_ns = 500_000;
    }
    let mut p = Pair::with_configs(a, b, Channel::default(), 1);
    let msgs = workload(3, 1, &[4096]);
    // One message of 4 packets, one per path; only the last is DRY.
    p.hosts[0].conn.post(msgs[0]).unwrap();
    let first = sent_by_a(&mut p, 0);
    let dry: Vec<bool> = first
        .iter()
        .map(|(b, _)| flags_of(b) & wire::flags::DRY != 0)
        .collect();
    assert_eq!(dry, [false, false, false, true]);
    for (b, sport) in &first[..3] {
        p.hosts[1].receive(1_000, b, *sport, false);
    }
    assert_eq!(
        acks_by_b(&mut p, 1_000),
        0,
        "three paths owe an ACK, none due yet"
    );
    let (b, sport) = &first[3];
    p.hosts[1].receive(2_000, b, *sport, false);
    assert_eq!(acks_by_b(&mut p, 2_000), 4, "DRY: every owing path at once");
    // The next message's first three packets, then a copy of the old DRY
    // packet instead of its last: a duplicate, acknowledged alone.
    p.hosts[0].conn.post(msgs[1]).unwrap();
    let second = sent_by_a(&mut p, 3_000);
    assert_eq!(second.len(), 4);
    for (b, sport) in &second[..3] {
        p.hosts[1].receive(4_000, b, *sport, false);
    }
    assert_eq!(acks_by_b(&mut p, 4_000), 0);
    let (b, sport) = &first[3];
    p.hosts[1].receive(5_000, b, *sport, false);
    assert_eq!(
        acks_by_b(&mut p, 5_000),
        1,
        "a replayed DRY: only its own path"
    );
    // The real last packet still has the owing paths acknowledged.
    let (b, sport) = &second[3];
    p.hosts[1].receive(6_000, b, *sport, false);
    assert_eq!(acks_by_b(&mut p, 6_000), 4);
    // The third message's first three packets, then a relocated copy of
    // its first flagged DRY, on the second packet's path with that path's
    // next PSN: its first copy arrived, so it is a duplicate, acknowledged
    // on its own path alone.
    p.hosts[0].conn.post(msgs[2]).unwrap();
    let third = sent_by_a(&mut p, 7_000);
    for (b, sport) in &third[..3] {
        p.hosts[1].receive(8_000, b, *sport, false);
    }
    assert_eq!(acks_by_b(&mut p, 8_000), 0);
    let Ok(Packet::Data(first_hdr, payload)) = wire::decode(&third[0].0) else {
        panic!("data");
    };
    let Ok(Packet::Data(on, _)) = wire::decode(&third[1].0) else {
        panic!("data");
    };
    let mut copy = first_hdr;
    copy.common.path = on.common.path;
    copy.common.psn = on.common.psn.wrapping_add(1);
    copy.common.flags |= wire::flags::RELOCATED | wire::flags::ACK_REQ | wire::flags::DRY;
    copy.origin = Some(Origin {
        path: first_hdr.common.path,
        psn: first_hdr.common.psn,
    });
    let mut bytes = vec![0u8; TRANSPORT_HEADER_MAX as usize];
    let n = wire::encode_data(&copy, payload.len() as u16, &mut bytes).expect("encodes");
    bytes.truncate(n);
    bytes.extend_from_slice(payload);
    p.hosts[1].receive(9_000, &bytes, third[1].1, false);
    assert_eq!(
        acks_by_b(&mut p, 9_000),
        1,
        "a relocated DRY whose first copy arrived: only its own path"
    );
}
