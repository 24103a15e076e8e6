//! `loss`: one flow, goodput at 0, 0.1, 1, 5 and 10% random packet loss.
//!
//! The loss is applied on every link, in both directions, at the per-link
//! probability q that makes a data packet's end-to-end loss on its 4-link path
//! exactly p: 1 - (1 - q)^4 = p. ACKs cross the same lossy links.

use std::time::Instant;

use serde_json::{json, Value};

use super::{build, port_goodput_bps, progress, run_report, Ctx, MS};
use crate::fabric::FabricConfig;
use crate::report::{all_pass, criterion, plot, round, write_csv, Plot, Series};
use crate::transports::Flow;

pub const LOSSES: [f64; 5] = [0.0, 0.001, 0.01, 0.05, 0.10];

pub fn run(ctx: &Ctx) -> Result<Value, String> {
    let (warm, dur) = if ctx.quick {
        (MS, 20 * MS)
    } else {
        (2 * MS, 100 * MS)
    };
    let base = FabricConfig {
        hosts: 16,
        planes: 1,
        ..Default::default()
    };
    let hops = 4.0;
    let mut rows = Vec::new();
    let mut per_kind = serde_json::Map::new();
    let mut series = Vec::new();
    for &kind in &ctx.kinds {
        let mut points = Vec::new();
        let mut results = Vec::new();
        let mut goodputs = Vec::new();
        for (i, &p) in LOSSES.iter().enumerate() {
            let q = 1.0 - (1.0 - p).powf(1.0 / hops);
            let fc = FabricConfig {
                link_loss: q,
                ..base.clone()
            };
            let (mut sim, ec) = build(kind, fc, ctx.seed.wrapping_add(i as u64))?;
            let started = Instant::now();
            sim.add_flow(Flow {
                id: 0,
                src: 0,
                dst: 8,
                bytes: u64::MAX,
                msg_size: 64 * 1024,
                start: 0,
            });
            sim.run_until(warm);
            let d0 = sim.delivered(0);
            sim.run_until(warm + dur);
            let d1 = sim.delivered(0);
            let gbps = (d1 - d0) as f64 * 8.0 / dur as f64;
            let rep = run_report(&mut sim, started);
            progress(&format!(
                "loss {}: {:>5.1}% -> {:.2} Gbit/s ({} events, {} s)",
                kind.name(),
                p * 100.0,
                gbps,
                rep["events"],
                rep["wall_s"]
            ));
            goodputs.push(gbps);
            points.push((p * 100.0, gbps));
            results.push(json!({
                "loss": p,
                "per_link_loss": round(q * 1e6) / 1e6,
                "goodput_gbps": round(gbps),
                "of_line_goodput": round(gbps * 1e9 / port_goodput_bps(ec.link_bps)),
                "run": rep,
            }));
        }
        let g0 = goodputs[0].max(1e-12);
        for (j, r) in results.iter_mut().enumerate() {
            r["of_lossless"] = json!(round(goodputs[j] / g0));
            rows.push(vec![
                kind.name().to_string(),
                format!("{}", LOSSES[j] * 100.0),
                format!("{:.6}", r["per_link_loss"].as_f64().unwrap()),
                format!("{:.4}", goodputs[j]),
                format!("{:.4}", goodputs[j] / g0),
            ]);
        }
        let criteria = json!({
            "goodput_at_1pct_vs_lossless": criterion("goodput at 1% loss / lossless goodput", goodputs[2] / g0, ">=", 0.9),
            "goodput_at_10pct_vs_lossless": criterion("goodput at 10% loss / lossless goodput", goodputs[4] / g0, ">=", 0.5),
            "integrity": criterion("integrity errors over all runs",
                results.iter().map(|r| r["run"]["integrity_errors"].as_u64().unwrap_or(1)).sum::<u64>() as f64, "==", 0.0),
        });
        let pass = all_pass(&criteria);
        per_kind.insert(
            kind.name().into(),
            json!({ "points": results, "criteria": criteria, "pass": pass }),
        );
        series.push(Series {
            name: kind.name().into(),
            points,
            color: kind as usize,
            legend: true,
        });
    }
    write_csv(
        &ctx.out.join("loss.csv"),
        "transport,loss_pct,per_link_loss,goodput_gbps,of_lossless",
        &rows,
    )
    .map_err(|e| e.to_string())?;
    plot(
        &ctx.out.join("loss.svg"),
        &Plot {
            title: "One flow: goodput vs random packet loss",
            x_label: "end-to-end packet loss (%)",
            y_label: "goodput (Gbit/s)",
            series,
            hlines: vec![],
            vlines: vec![],
            points: true,
        },
    )?;
    Ok(json!({
        "params": {
            "fabric": base, "flow": "host 0 -> host 8 (different leaves), unbounded, 64 KiB messages",
            "warmup_ns": warm, "measure_ns": dur, "losses": LOSSES,
        },
        "transports": per_kind,
    }))
}
