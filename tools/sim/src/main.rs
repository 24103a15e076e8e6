//! metaroce-sim: a discrete-event simulator of a multiplane leaf/spine fabric
//! that runs the MetaRoCE transport core (through `transports::metaroce`) and
//! a RoCEv2-like baseline side by side. See Documentation/simulator.md.

mod fabric;
mod report;
mod scenarios;
mod sim;
mod transports;

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Instant;

use clap::{Parser, ValueEnum};
use serde_json::json;

use scenarios::Ctx;
use transports::Kind;

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Scenario {
    /// One flow, goodput at 0, 0.1, 1, 5, 10% random loss.
    Loss,
    /// 64 hosts, 1/2/4/8 planes, all-to-all (4,032 connections).
    Planes,
    /// 32 hosts, 4 planes, all-to-all; one plane fails mid-run.
    PlaneFailure,
    /// 32 senders to 1 receiver.
    Incast,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum TransportArg {
    Roce,
    Metaroce,
    Both,
}

#[derive(Parser, Debug)]
#[command(
    name = "metaroce-sim",
    version,
    about = "Multiplane fabric simulator: MetaRoCE vs a RoCEv2-like baseline"
)]
struct Args {
    scenario: Scenario,
    /// Which transport(s) to run.
    #[arg(long, value_enum, default_value = "both")]
    transport: TransportArg,
    /// Smaller sizes and durations (CI).
    #[arg(long)]
    quick: bool,
    #[arg(long, default_value_t = 1)]
    seed: u64,
    /// Output directory for CSV and plots (default out/sim/<scenario>/).
    #[arg(long)]
    out: Option<PathBuf>,
    /// Exit with status 1 when a criterion of MetaRoCE fails (the baseline's
    /// criteria are reported, never enforced).
    #[arg(long)]
    strict: bool,
}

fn main() -> ExitCode {
    let args = Args::parse();
    let name = args
        .scenario
        .to_possible_value()
        .unwrap()
        .get_name()
        .to_string();
    let out = args
        .out
        .clone()
        .unwrap_or_else(|| PathBuf::from("out/sim").join(&name));
    if let Err(e) = std::fs::create_dir_all(&out) {
        eprintln!("metaroce-sim: cannot create {}: {e}", out.display());
        return ExitCode::from(2);
    }
    let kinds = match args.transport {
        TransportArg::Roce => vec![Kind::Roce],
        TransportArg::Metaroce => vec![Kind::MetaRoce],
        TransportArg::Both => vec![Kind::Roce, Kind::MetaRoce],
    };
    // Fail early and clearly when a transport cannot be built.
    let probe = scenarios::endpoint_config(
        &fabric::Fabric::new(fabric::FabricConfig::default()),
        args.seed,
    );
    for &k in &kinds {
        if let Err(e) = transports::make(k, 0, &probe) {
            eprintln!("metaroce-sim: --transport {}: {e}", k.name());
            return ExitCode::from(2);
        }
    }
    let ctx = Ctx {
        kinds,
        quick: args.quick,
        seed: args.seed,
        out: out.clone(),
    };
    let started = Instant::now();
    let res = match args.scenario {
        Scenario::Loss => scenarios::loss::run(&ctx),
        Scenario::Planes => scenarios::planes::run(&ctx),
        Scenario::PlaneFailure => scenarios::plane_failure::run(&ctx),
        Scenario::Incast => scenarios::incast::run(&ctx),
    };
    let mut v = match res {
        Ok(v) => v,
        Err(e) => {
            eprintln!("metaroce-sim: {name}: {e}");
            return ExitCode::from(2);
        }
    };
    let summary = v.as_object_mut().unwrap();
    let mut obj = serde_json::Map::new();
    obj.insert("scenario".into(), json!(name));
    obj.insert("quick".into(), json!(args.quick));
    obj.insert("seed".into(), json!(args.seed));
    obj.insert("out".into(), json!(out.display().to_string()));
    obj.insert(
        "wall_s".into(),
        json!(report::round(started.elapsed().as_secs_f64())),
    );
    obj.append(summary);
    // The human-readable verdicts, then the JSON summary as the last line.
    let mut failed_metaroce = false;
    if let Some(t) = obj.get("transports").and_then(|t| t.as_object()) {
        for (k, r) in t {
            if let Some(c) = r["criteria"].as_object() {
                for (cn, c) in c {
                    let pass = c["pass"] == true;
                    if !pass && k == "metaroce" {
                        failed_metaroce = true;
                    }
                    println!(
                        "{name} {k:9} {:4} {cn}: {} {} {}",
                        if pass { "PASS" } else { "FAIL" },
                        c["value"],
                        c["op"].as_str().unwrap_or("?"),
                        c["threshold"]
                    );
                }
            }
        }
    }
    println!("{}", serde_json::Value::Object(obj));
    if args.strict && failed_metaroce {
        return ExitCode::from(1);
    }
    ExitCode::SUCCESS
}
