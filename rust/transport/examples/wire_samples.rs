// SPDX-License-Identifier: GPL-2.0

//! Packets of every type and optional part, encoded by the codec, written as
//! a packet capture, with the value of every field in a second file: what
//! scripts/tests/test_dissector.py checks the Wireshark dissector
//! (tools/dissector/metaroce.lua) against.
//!
//!     cargo run --example wire_samples -- OUT.pcap OUT.jsonl
//!
//! Each line of OUT.jsonl is one frame: `{"frame": N, "malformed": BOOL,
//! "fields": {"metaroce.NAME": VALUE, ...}}`. The malformed frames are valid
//! packets with one thing broken (the decoder refuses each, which this
//! program checks); the dissector must mark them, and only them.

use metaroce_transport::wire::{
    self, ack_flags, flags, hello_flags, AckHeader, Atomic, Common, DataHeader, HelloHeader,
    NakCode, NakHeader, Opcode, Origin, PacketType, Remote,
};
use std::{fmt::Write as _, fs, io::Write as _};

/// One frame: the datagram, and the fields the dissector must show.
struct Sample {
    bytes: Vec<u8>,
    fields: Vec<(&'static str, u64)>,
    malformed: bool,
}

fn common(ptype: PacketType, flags: u8, path: u16, psn: u32) -> Common {
    Common {
        ptype,
        flags,
        path,
        conn: 0x5eed_0000 | u32::from(path),
        psn,
        timestamp: 0x0102_0304,
    }
}

fn common_fields(c: &Common, ptype: u64) -> Vec<(&'static str, u64)> {
    let seq = if ptype == 2 || ptype == 3 {
        "metaroce.cumulative"
    } else {
        "metaroce.psn"
    };
    let mut v = vec![
        ("metaroce.version", u64::from(wire::VERSION)),
        ("metaroce.type", ptype),
        ("metaroce.flags", u64::from(c.flags)),
        ("metaroce.path", u64::from(c.path)),
        ("metaroce.conn", u64::from(c.conn)),
        (seq, u64::from(c.psn)),
    ];
    if ptype != 4 {
        v.push(("metaroce.timestamp", u64::from(c.timestamp)));
    }
    v
}

fn data(h: DataHeader, payload: &[u8]) -> Sample {
    let mut bytes = vec![0u8; h.len() + payload.len()];
    let n = wire::encode_data(&h, payload.len() as u16, &mut bytes).expect("encodes");
    bytes[n..].copy_from_slice(payload);
    assert!(
        wire::decode(&bytes).is_ok(),
        "the codec takes back what it made"
    );
    let mut fields = common_fields(&h.common, 1);
    fields.extend([
        ("metaroce.opcode", h.opcode as u64),
        ("metaroce.rsn", u64::from(h.rsn)),
        ("metaroce.paylen", payload.len() as u64),
        ("metaroce.stream", u64::from(h.stream)),
        ("metaroce.msn", u64::from(h.msn)),
        ("metaroce.offset", u64::from(h.offset)),
        ("metaroce.msglen", u64::from(h.msg_len)),
    ]);
    if let Some(r) = h.remote {
        fields.extend([
            ("metaroce.rkey", u64::from(r.rkey)),
            ("metaroce.raddr", r.addr),
        ]);
    }
    if let Some(i) = h.imm {
        fields.push(("metaroce.imm", u64::from(i)));
    }
    if let Some(a) = h.atomic {
        fields.extend([
            ("metaroce.swap_add", a.swap_add),
            ("metaroce.compare", a.compare),
        ]);
    }
    if let Some(o) = h.origin {
        fields.extend([
            ("metaroce.origin_path", u64::from(o.path)),
            ("metaroce.origin_psn", u64::from(o.psn)),
        ]);
    }
    Sample {
        bytes,
        fields,
        malformed: false,
    }
}

fn header(opcode: Opcode, fl: u8, path: u16, psn: u32) -> DataHeader {
    let remote = opcode.has_remote().then_some(Remote {
        rkey: 0xabcd_0123,
        addr: 0x7f00_1234_5678_9000,
    });
    DataHeader {
        common: common(PacketType::Data, fl, path, psn),
        opcode,
        stream: 0x24,
        msn: 7,
        rsn: 0,
        offset: 0,
        msg_len: 64,
        remote,
        imm: opcode.has_imm().then_some(0xfeed_beef),
        atomic: opcode.is_atomic().then_some(Atomic {
            swap_add: 0x1111_2222_3333_4444,
            compare: 0x5555_6666_7777_8888,
        }),
        origin: None,
    }
}

fn ack(fl: u8, status: Option<NakCode>) -> Sample {
    let mut sack = [0u8; 32];
    sack[0] = 0b1010_0001;
    sack[31] = 0x80;
    let a = AckHeader {
        common: common(PacketType::Ack, fl, 3, 1000),
        sack,
        ecn_ce: 5,
        rate_hint_kbps: 2_500_000,
        status,
        stream: 0x25,
        stream_msn: 42,
    };
    let mut bytes = vec![0u8; wire::COMMON_LEN + wire::ACK_LEN];
    wire::encode_ack(&a, &mut bytes).expect("encodes");
    assert!(wire::decode(&bytes).is_ok());
    let mut fields = common_fields(&a.common, 2);
    fields.extend([
        ("metaroce.ack.sacked", 4),
        ("metaroce.ack.ecn_ce", 5),
        ("metaroce.ack.status", status.map_or(0, |c| c as u64)),
        ("metaroce.ack.rate_hint", 2_500_000),
        ("metaroce.ack.stream", 0x25),
        ("metaroce.ack.stream_msn", 42),
    ]);
    Sample {
        bytes,
        fields,
        malformed: false,
    }
}

fn nak(code: NakCode) -> Sample {
    let n = NakHeader {
        common: common(PacketType::Nak, 0, 2, 77),
        code,
        rnr_timer: if code == NakCode::ReceiverNotReady {
            14
        } else {
            0
        },
        stream: 0x22,
        msn: 9,
    };
    let mut bytes = vec![0u8; wire::COMMON_LEN + wire::NAK_LEN];
    wire::encode_nak(&n, &mut bytes).expect("encodes");
    assert!(wire::decode(&bytes).is_ok());
    let mut fields = common_fields(&n.common, 3);
    fields.extend([
        ("metaroce.nak.code", code as u64),
        ("metaroce.nak.rnr_timer", u64::from(n.rnr_timer)),
        ("metaroce.nak.stream", 0x22),
        ("metaroce.nak.msn", 9),
    ]);
    Sample {
        bytes,
        fields,
        malformed: false,
    }
}

fn hello(fl: u8) -> Sample {
    let h = HelloHeader {
        common: common(PacketType::Hello, fl, 0, 0),
        epoch: 0x1234_5678,
        isn: 0x00ab_cdef,
    };
    let mut bytes = vec![0u8; wire::COMMON_LEN + wire::HELLO_LEN];
    wire::encode_hello(&h, &mut bytes).expect("encodes");
    assert!(wire::decode(&bytes).is_ok());
    let mut fields = common_fields(&h.common, 4);
    fields.extend([
        ("metaroce.hello.epoch", 0x1234_5678),
        ("metaroce.hello.isn", 0x00ab_cdef),
    ]);
    Sample {
        bytes,
        fields,
        malformed: false,
    }
}

/// `s` with one thing broken that the decoder refuses.
fn broken(s: &Sample, f: impl Fn(&mut Vec<u8>)) -> Sample {
    let mut bytes = s.bytes.clone();
    f(&mut bytes);
    assert!(wire::decode(&bytes).is_err(), "the decoder refuses it");
    Sample {
        bytes,
        fields: Vec::new(),
        malformed: true,
    }
}

fn samples() -> Vec<Sample> {
    let payload: Vec<u8> = (0..64u8).collect();
    let mut v = vec![hello(0), hello(hello_flags::CHALLENGE)];
    let both = flags::FIRST | flags::LAST;
    let mut send = header(Opcode::Send, both | flags::ACK_REQ | flags::DRY, 1, 100);
    send.rsn = 3;
    v.push(data(send, &payload));
    let mut send_imm = header(Opcode::SendImm, flags::FIRST, 2, 101);
    send_imm.msg_len = 128;
    v.push(data(send_imm, &payload));
    v.push(data(header(Opcode::Write, both, 3, 102), &payload));
    let mut write_imm = header(Opcode::WriteImm, flags::LAST | flags::SOLICITED, 4, 103);
    write_imm.offset = 64;
    write_imm.msg_len = 128;
    v.push(data(write_imm, &payload));
    let mut read = header(Opcode::ReadReq, both, 5, 104);
    read.msg_len = 4096;
    v.push(data(read, &[]));
    v.push(data(header(Opcode::ReadResp, both, 6, 105), &payload));
    let mut cas = header(Opcode::CmpSwap, both, 7, 106);
    cas.msg_len = 8;
    v.push(data(cas, &[]));
    let mut faa = header(Opcode::FetchAdd, both, 8, 107);
    faa.msg_len = 8;
    v.push(data(faa, &[]));
    let mut moved = header(
        Opcode::Write,
        both | flags::RETRANSMIT | flags::RELOCATED,
        9,
        108,
    );
    moved.origin = Some(Origin { path: 4, psn: 55 });
    v.push(data(moved, &payload));
    v.push(data(
        header(Opcode::Write, both | flags::VOID, 10, 109),
        &[],
    ));
    v.push(ack(0, None));
    v.push(ack(ack_flags::DUPLICATE, Some(NakCode::RemoteAccess)));
    for code in [
        NakCode::RemoteAccess,
        NakCode::InvalidRequest,
        NakCode::ReceiverNotReady,
        NakCode::RemoteOperation,
        NakCode::NoQueuePair,
    ] {
        v.push(nak(code));
    }
    // Broken copies: each must be marked, and nothing else.
    let good_write = data(header(Opcode::Write, both, 3, 102), &payload);
    let good_ack = ack(0, None);
    let good_hello = hello(0);
    v.push(broken(&good_write, |b| b.truncate(30)));
    v.push(broken(&good_write, |b| b[0] = 0x31));
    v.push(broken(&good_write, |b| b[0] = 0x11));
    v.push(broken(&good_write, |b| b[0] = 0x27));
    v.push(broken(&good_write, |b| b[1] |= flags::DRY));
    v.push(broken(&good_write, |b| b.truncate(b.len() - 1)));
    v.push(broken(&good_write, |b| b[16] = 9));
    v.push(broken(&good_write, |b| b[1] |= flags::VOID));
    v.push(broken(&good_write, |b| b[17] = 1));
    v.push(broken(&good_write, |b| b[1] |= flags::SOLICITED));
    v.push(broken(&good_write, |b| {
        b[28..32].copy_from_slice(&32u32.to_be_bytes())
    }));
    v.push(broken(&good_ack, |b| b[16 + 35] = 1));
    v.push(broken(&good_ack, |b| b[16 + 34] = 7));
    v.push(broken(&good_hello, |b| b.push(0)));
    v
}

/// A pcap file (Ethernet) of UDP datagrams from 10.0.0.1 to 10.0.0.2 port
/// 4792, each from source port 49152 + its path id.
fn pcap(samples: &[Sample]) -> Vec<u8> {
    let mut out = Vec::new();
    out.extend(0xa1b2_c3d4u32.to_le_bytes());
    out.extend(2u16.to_le_bytes());
    out.extend(4u16.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(0u32.to_le_bytes());
    out.extend(65535u32.to_le_bytes());
    out.extend(1u32.to_le_bytes());
    for (i, s) in samples.iter().enumerate() {
        let path = if s.bytes.len() >= 4 {
            u16::from_be_bytes([s.bytes[2], s.bytes[3]])
        } else {
            0
        };
        let udp_len = 8 + s.bytes.len();
        let ip_len = 20 + udp_len;
        let mut f = Vec::new();
        f.extend([2, 0, 0, 0, 0, 2, 2, 0, 0, 0, 0, 1, 0x08, 0x00]);
        let mut ip = vec![
            0x45, 0, 0, 0, 0, 0, 0x40, 0, 64, 17, 0, 0, 10, 0, 0, 1, 10, 0, 0, 2,
        ];
        ip[2..4].copy_from_slice(&(ip_len as u16).to_be_bytes());
        let mut sum = 0u32;
        for w in ip.chunks(2) {
            sum += u32::from(u16::from_be_bytes([w[0], w[1]]));
        }
        while sum > 0xffff {
            sum = (sum & 0xffff) + (sum >> 16);
        }
        ip[10..12].copy_from_slice(&(!(sum as u16)).to_be_bytes());
        f.extend(ip);
        f.extend((49152u16.wrapping_add(path)).to_be_bytes());
        f.extend(4792u16.to_be_bytes());
        f.extend((udp_len as u16).to_be_bytes());
        f.extend(0u16.to_be_bytes());
        f.extend(&s.bytes);
        out.extend((i as u32).to_le_bytes());
        out.extend(0u32.to_le_bytes());
        out.extend((f.len() as u32).to_le_bytes());
        out.extend((f.len() as u32).to_le_bytes());
        out.extend(f);
    }
    out
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, pcap_path, json_path] = args.as_slice() else {
        eprintln!("usage: wire_samples OUT.pcap OUT.jsonl");
        std::process::exit(2);
    };
    let samples = samples();
    fs::write(pcap_path, pcap(&samples)).expect("write the capture");
    let mut json = String::new();
    for (i, s) in samples.iter().enumerate() {
        let fields: Vec<String> = s
            .fields
            .iter()
            .map(|(k, v)| format!("\"{k}\": {v}"))
            .collect();
        let _ = writeln!(
            json,
            "{{\"frame\": {}, \"malformed\": {}, \"fields\": {{{}}}}}",
            i + 1,
            s.malformed,
            fields.join(", ")
        );
    }
    fs::File::create(json_path)
        .and_then(|mut f| f.write_all(json.as_bytes()))
        .expect("write the expectations");
}
