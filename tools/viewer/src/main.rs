// SPDX-License-Identifier: GPL-2.0

//! `metaroce-top`: per peer and per path rates, RTT, window, losses and
//! moves of every MetaRoCE device, refreshed every second, from the
//! devices' debugfs telemetry (root only). `--json` prints one JSON object
//! per device and sample instead, one per line.

use metaroce_top::{parse, to_json, to_text, Device};
use std::collections::BTreeMap;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

const USAGE: &str =
    "usage: metaroce-top [--json] [--interval SECONDS] [--count N] [--dev NAME]... [--dir DIR]

  --json          one JSON object per device and sample, one per line
  --interval S    seconds between samples (default 1)
  --count N       stop after N samples (default: run until interrupted)
  --dev NAME      only this device (repeatable; default: every device)
  --dir DIR       the telemetry directory (default /sys/kernel/debug/metaroce)";

struct Args {
    json: bool,
    interval: f64,
    count: Option<u64>,
    devs: Vec<String>,
    dir: PathBuf,
}

fn args() -> Result<Args, String> {
    let mut a = Args {
        json: false,
        interval: 1.0,
        count: None,
        devs: vec![],
        dir: PathBuf::from("/sys/kernel/debug/metaroce"),
    };
    let mut it = std::env::args().skip(1);
    while let Some(x) = it.next() {
        let mut value = |name: &str| it.next().ok_or(format!("{name} needs a value"));
        match x.as_str() {
            "--json" => a.json = true,
            "--interval" => {
                a.interval = value("--interval")?
                    .parse()
                    .ok()
                    .filter(|s: &f64| *s > 0.0 && s.is_finite())
                    .ok_or("--interval: a positive number of seconds")?
            }
            "--count" => {
                a.count = Some(
                    value("--count")?
                        .parse()
                        .ok()
                        .filter(|n| *n > 0)
                        .ok_or("--count: a positive number")?,
                )
            }
            "--dev" => a.devs.push(value("--dev")?),
            "--dir" => a.dir = PathBuf::from(value("--dir")?),
            "-h" | "--help" => return Err(String::new()),
            other => return Err(format!("unknown argument {other}")),
        }
    }
    Ok(a)
}

/// Every device's telemetry now (a device that went away between the
/// listing and the read is left out; one whose file does not parse, as
/// when the kernel cut it short, is reported and left out).
fn sample(a: &Args) -> Result<BTreeMap<String, Device>, String> {
    let rd = std::fs::read_dir(&a.dir).map_err(|e| {
        format!(
            "{}: {e} (is the module loaded, debugfs mounted, and are you root?)",
            a.dir.display()
        )
    })?;
    let mut out = BTreeMap::new();
    for e in rd.flatten() {
        let name = e.file_name().to_string_lossy().into_owned();
        if !a.devs.is_empty() && !a.devs.contains(&name) {
            continue;
        }
        let Ok(text) = std::fs::read_to_string(e.path()) else {
            continue;
        };
        match parse(&text) {
            Ok(d) => {
                out.insert(name, d);
            }
            Err(err) => eprintln!("metaroce-top: {}: {err}", e.path().display()),
        }
    }
    for d in &a.devs {
        if !out.contains_key(d) {
            return Err(format!("no device {d} in {}", a.dir.display()));
        }
    }
    Ok(out)
}

fn main() {
    let a = match args() {
        Ok(a) => a,
        Err(e) => {
            if !e.is_empty() {
                eprintln!("metaroce-top: {e}");
            }
            eprintln!("{USAGE}");
            std::process::exit(if e.is_empty() { 0 } else { 2 });
        }
    };
    let tty = std::io::stdout().is_terminal() && !a.json;
    let mut prev: BTreeMap<String, Device> = BTreeMap::new();
    let mut prev_at: Option<Instant> = None;
    let mut n = 0u64;
    loop {
        let now = Instant::now();
        let devs = match sample(&a) {
            Ok(d) => d,
            Err(e) => {
                eprintln!("metaroce-top: {e}");
                std::process::exit(1);
            }
        };
        // The first sample's rates are over the interval (counts so far).
        let secs = prev_at.map_or(a.interval, |p| now.duration_since(p).as_secs_f64());
        let mut out = String::new();
        if a.json {
            let t = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0.0, |d| d.as_secs_f64());
            for (name, d) in &devs {
                let mut j = to_json(d, prev.get(name), secs);
                j["time"] = serde_json::json!(t);
                j["interval"] = serde_json::json!(secs);
                out.push_str(&j.to_string());
                out.push('\n');
            }
        } else {
            if tty {
                // Home and clear, as top does.
                out.push_str("\x1b[H\x1b[2J");
            }
            if devs.is_empty() {
                out.push_str("no MetaRoCE device\n");
            }
            for (name, d) in &devs {
                out.push_str(&to_text(d, prev.get(name), secs));
            }
            out.push('\n');
        }
        let mut so = std::io::stdout().lock();
        if so
            .write_all(out.as_bytes())
            .and_then(|_| so.flush())
            .is_err()
        {
            // The reader went away (a pipe closed).
            return;
        }
        drop(so);
        n += 1;
        if a.count.is_some_and(|c| n >= c) {
            return;
        }
        prev = devs;
        prev_at = Some(now);
        let next = now + Duration::from_secs_f64(a.interval);
        std::thread::sleep(next.saturating_duration_since(Instant::now()));
    }
}
