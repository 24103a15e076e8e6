// SPDX-License-Identifier: GPL-2.0

//! The telemetry a MetaRoCE device writes to debugfs
//! (`/sys/kernel/debug/metaroce/<device>`, rust/driver/telemetry.rs) read
//! back: one record per line, a keyword (`device`, `peer`, `path`), the
//! record's name, then `key value` pairs. Rates come from two samples.
//! Documentation/observability.md describes every field.

use serde_json::{json, Map, Value};
use std::collections::BTreeMap;

/// One record: its name (device name, peer address, path number) and its
/// fields, numbers where they parse as one.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Record {
    pub name: String,
    pub fields: BTreeMap<String, Value>,
}

impl Record {
    /// A field as a number (0 when absent or not a number).
    pub fn num(&self, key: &str) -> u64 {
        self.fields.get(key).and_then(Value::as_u64).unwrap_or(0)
    }

    /// A field as text ("" when absent).
    pub fn text(&self, key: &str) -> String {
        match self.fields.get(key) {
            Some(Value::String(s)) => s.clone(),
            Some(v) => v.to_string(),
            None => String::new(),
        }
    }
}

/// A peer connection and its paths.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Peer {
    pub rec: Record,
    pub paths: Vec<Record>,
}

/// One device's telemetry.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Device {
    pub rec: Record,
    pub peers: Vec<Peer>,
}

/// Why a telemetry text did not parse.
#[derive(Debug, PartialEq, Eq)]
pub struct ParseError {
    pub line: usize,
    pub what: &'static str,
}

impl std::fmt::Display for ParseError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "line {}: {}", self.line, self.what)
    }
}

fn record(words: &[&str], line: usize) -> Result<Record, ParseError> {
    let name = words.get(1).ok_or(ParseError {
        line,
        what: "a record without a name",
    })?;
    let rest = words.get(2..).unwrap_or_default();
    if rest.len() % 2 != 0 {
        return Err(ParseError {
            line,
            what: "a key without a value",
        });
    }
    let fields = rest
        .chunks(2)
        .map(|kv| {
            let v = match kv[1].parse::<u64>() {
                Ok(n) => Value::from(n),
                Err(_) => Value::from(kv[1]),
            };
            (kv[0].to_string(), v)
        })
        .collect();
    Ok(Record {
        name: name.to_string(),
        fields,
    })
}

/// Parses one device file.
pub fn parse(text: &str) -> Result<Device, ParseError> {
    let mut dev: Option<Device> = None;
    for (i, l) in text.lines().enumerate() {
        let line = i + 1;
        let words: Vec<&str> = l.split_whitespace().collect();
        let Some(kind) = words.first() else { continue };
        let r = record(&words, line)?;
        match (*kind, dev.as_mut()) {
            ("device", None) => {
                dev = Some(Device {
                    rec: r,
                    peers: vec![],
                })
            }
            ("peer", Some(d)) => d.peers.push(Peer {
                rec: r,
                paths: vec![],
            }),
            ("path", Some(d)) => match d.peers.last_mut() {
                Some(p) => p.paths.push(r),
                None => {
                    return Err(ParseError {
                        line,
                        what: "a path before any peer",
                    })
                }
            },
            _ => {
                return Err(ParseError {
                    line,
                    what: "an unknown or misplaced record",
                })
            }
        }
    }
    dev.ok_or(ParseError {
        line: 0,
        what: "no device record",
    })
}

/// The path counters whose rate per second the viewer shows.
pub const PATH_RATES: [&str; 5] = ["sent", "resent", "rcvd", "ce_echoed", "ce_marked"];
/// The peer counters whose rate per second the viewer shows.
pub const PEER_RATES: [&str; 4] = ["sent", "resent", "rcvd", "dropped"];

/// `keys`' increase per second from `old` to `new` over `secs` (a counter
/// that went back, as when a connection restarts, counts from 0).
pub fn rates(old: Option<&Record>, new: &Record, keys: &[&str], secs: f64) -> Map<String, Value> {
    let mut m = Map::new();
    for k in keys {
        let n = new.num(k);
        let o = old.map_or(0, |o| o.num(k));
        let d = if n >= o { n - o } else { n };
        let r = if secs > 0.0 { d as f64 / secs } else { 0.0 };
        m.insert((*k).to_string(), json!((r * 10.0).round() / 10.0));
    }
    m
}

fn fields_json(r: &Record) -> Map<String, Value> {
    r.fields.clone().into_iter().collect()
}

/// One sample of a device as JSON, with rates against `old` (the previous
/// sample of the same device, if any) over `secs`.
pub fn to_json(d: &Device, old: Option<&Device>, secs: f64) -> Value {
    let mut peers = vec![];
    for p in &d.peers {
        let op = old.and_then(|o| o.peers.iter().find(|q| q.rec.name == p.rec.name));
        let mut paths = vec![];
        for t in &p.paths {
            let ot = op.and_then(|q| q.paths.iter().find(|u| u.name == t.name));
            let mut m = fields_json(t);
            m.insert(
                "path".into(),
                Value::from(t.name.parse::<u64>().unwrap_or(0)),
            );
            m.insert(
                "rates".into(),
                Value::Object(rates(ot, t, &PATH_RATES, secs)),
            );
            paths.push(Value::Object(m));
        }
        let mut m = fields_json(&p.rec);
        m.insert("peer".into(), Value::from(p.rec.name.clone()));
        m.insert(
            "rates".into(),
            Value::Object(rates(op.map(|q| &q.rec), &p.rec, &PEER_RATES, secs)),
        );
        m.insert("paths".into(), Value::Array(paths));
        peers.push(Value::Object(m));
    }
    let mut m = fields_json(&d.rec);
    m.insert("device".into(), Value::from(d.rec.name.clone()));
    m.insert("peers".into(), Value::Array(peers));
    Value::Object(m)
}

/// A rate the telemetry gives in kbit/s, in the largest unit it reaches
/// ("0" for 0: no rate hint).
pub fn rate_text(kbps: u64) -> String {
    match kbps {
        0 => "0".into(),
        k if k >= 1_000_000 => format!("{:.2} Gbit/s", k as f64 / 1e6),
        k if k >= 1_000 => format!("{:.2} Mbit/s", k as f64 / 1e3),
        k => format!("{k} kbit/s"),
    }
}

/// One sample of a device as the terminal view shows it.
pub fn to_text(d: &Device, old: Option<&Device>, secs: f64) -> String {
    use std::fmt::Write;
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{}: {} peer(s), payload {} B, capacity {}, {} sender(s)",
        d.rec.name,
        d.peers.len(),
        d.rec.num("payload"),
        rate_text(d.rec.num("capacity_kbps")),
        d.rec.num("senders")
    );
    for p in &d.peers {
        let op = old.and_then(|o| o.peers.iter().find(|q| q.rec.name == p.rec.name));
        let r = &p.rec;
        let pr = rates(op.map(|q| &q.rec), r, &PEER_RATES, secs);
        let _ = writeln!(
            s,
            "  peer {} {}  qps {}  window {}  in flight {}  srtt {} us  pace {}  hint {}  sent {}/s  resent {}/s  rcvd {}/s  dropped {}/s",
            r.name,
            r.text("state"),
            r.num("qps"),
            r.num("window"),
            r.num("in_flight"),
            r.num("srtt_us"),
            rate_text(r.num("pace_kbps")),
            rate_text(r.num("hint_kbps")),
            pr["sent"],
            pr["resent"],
            pr["rcvd"],
            pr["dropped"]
        );
        let _ = writeln!(
            s,
            "    {:>4} {:>6} {:>7} {:>8} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>6}",
            "path",
            "sport",
            "state",
            "srtt_us",
            "window",
            "flight",
            "sent/s",
            "resent/s",
            "rcvd/s",
            "ce/s",
            "resent",
            "relocated",
            "moves"
        );
        for t in &p.paths {
            let ot = op.and_then(|q| q.paths.iter().find(|u| u.name == t.name));
            let tr = rates(ot, t, &PATH_RATES, secs);
            let _ = writeln!(
                s,
                "    {:>4} {:>6} {:>7} {:>8} {:>6} {:>6} {:>9} {:>9} {:>9} {:>7} {:>7} {:>8} {:>6}",
                t.name,
                t.num("sport"),
                t.text("state"),
                t.num("srtt_us"),
                t.num("window"),
                t.num("in_flight"),
                tr["sent"],
                tr["resent"],
                tr["rcvd"],
                tr["ce_echoed"],
                t.num("resent"),
                t.num("relocated"),
                t.num("moves")
            );
        }
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    const ONE: &str = "device mrA peers 1 payload 1408 capacity_kbps 10000000 senders 1
peer 10.0.0.2 state up conn 0x00000007 qps 2 window 64 in_flight 3 srtt_us 120 pace_kbps 500 hint_kbps 2500000 sent 100 resent 2 rcvd 50 dropped 0
path 0 sport 51234 peer_sport 49999 state up window 16 in_flight 1 srtt_us 110 sent 60 resent 2 relocated 0 timeouts 0 moves 0 ce_echoed 0 rcvd 20 duplicates 0 ce_marked 0
path 1 sport 50000 peer_sport 49998 state suspect window 4 in_flight 2 srtt_us 130 sent 40 resent 0 relocated 1 timeouts 1 moves 1 ce_echoed 0 rcvd 30 duplicates 0 ce_marked 0
";

    #[test]
    fn parses_records_and_numbers() {
        let d = parse(ONE).unwrap();
        assert_eq!(d.rec.name, "mrA");
        assert_eq!(d.rec.num("payload"), 1408);
        assert_eq!(d.peers.len(), 1);
        let p = &d.peers[0];
        assert_eq!(p.rec.name, "10.0.0.2");
        assert_eq!(p.rec.text("state"), "up");
        assert_eq!(p.rec.text("conn"), "0x00000007");
        assert_eq!(p.paths.len(), 2);
        assert_eq!(p.paths[1].text("state"), "suspect");
        assert_eq!(p.paths[1].num("moves"), 1);
    }

    #[test]
    fn rejects_malformed_text() {
        assert_eq!(parse("").unwrap_err().what, "no device record");
        assert_eq!(parse("path 0 sport 1\n").unwrap_err().line, 1);
        let e = parse("device a peers\n").unwrap_err();
        assert_eq!(e.what, "a key without a value");
        let e = parse("device a\npath 0 sport 1\n").unwrap_err();
        assert_eq!(e.what, "a path before any peer");
        let e = parse("device a\nwhat 0\n").unwrap_err();
        assert_eq!(e.line, 2);
    }

    #[test]
    fn rates_are_per_second_and_restart_at_zero() {
        let old = parse(ONE).unwrap();
        let new = parse(
            &ONE.replace("sent 60", "sent 260")
                .replace("rcvd 30", "rcvd 10"),
        )
        .unwrap();
        let j = to_json(&new, Some(&old), 2.0);
        let paths = j["peers"][0]["paths"].as_array().unwrap();
        assert_eq!(paths[0]["rates"]["sent"], json!(100.0));
        assert_eq!(paths[0]["rates"]["resent"], json!(0.0));
        // Went back (a restart): counted from 0.
        assert_eq!(paths[1]["rates"]["rcvd"], json!(5.0));
        assert_eq!(paths[1]["path"], json!(1));
        assert_eq!(j["device"], json!("mrA"));
        assert_eq!(j["peers"][0]["peer"], json!("10.0.0.2"));
        // No previous sample: everything so far, over the interval.
        let first = to_json(&old, None, 1.0);
        assert_eq!(first["peers"][0]["paths"][0]["rates"]["sent"], json!(60.0));
        let t = to_text(&new, Some(&old), 2.0);
        assert!(t.contains("suspect"), "{t}");
        assert!(t.contains("peer 10.0.0.2 up"), "{t}");
        assert!(t.contains("pace 500 kbit/s  hint 2.50 Gbit/s"), "{t}");
        assert!(t.contains("capacity 10.00 Gbit/s, 1 sender(s)"), "{t}");
        assert_eq!(j["peers"][0]["pace_kbps"], json!(500));
    }

    #[test]
    fn rates_show_in_the_largest_unit_they_reach() {
        assert_eq!(rate_text(0), "0");
        assert_eq!(rate_text(999), "999 kbit/s");
        assert_eq!(rate_text(1_500), "1.50 Mbit/s");
        assert_eq!(rate_text(25_000_000), "25.00 Gbit/s");
    }
}
