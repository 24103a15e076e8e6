//! `planes`: 64 hosts, 1/2/4/8 planes, all-to-all (64 x 63 = 4,032
//! connections, unbounded); aggregate goodput vs the number of planes. Each
//! plane's capacity is fixed (one 25 Gbit/s port per host per plane), so the
//! ideal aggregate is linear in P.

use std::time::Instant;

use serde_json::{json, Value};

use super::{add_all_to_all, build, port_goodput_bps, progress, run_report, Ctx, MS};
use crate::fabric::FabricConfig;
use crate::report::{criterion, criterion_within, plot, round, write_csv, Plot, Series};

pub const PLANES: [u32; 4] = [1, 2, 4, 8];
pub const HOSTS: u32 = 64;

pub fn run(ctx: &Ctx) -> Result<Value, String> {
    let (warm, dur) = if ctx.quick {
        (MS / 2, MS)
    } else {
        (2 * MS, 6 * MS)
    };
    let base = FabricConfig {
        hosts: HOSTS,
        ..Default::default()
    };
    let mut rows = Vec::new();
    let mut per_kind = serde_json::Map::new();
    let mut series = Vec::new();
    let mut ideal_pts = Vec::new();
    for &kind in &ctx.kinds {
        let mut results = Vec::new();
        let mut thr = Vec::new();
        for &p in &PLANES {
            let fc = FabricConfig {
                planes: p,
                ..base.clone()
            };
            let (mut sim, ec) = build(kind, fc, ctx.seed)?;
            let started = Instant::now();
            let flows = add_all_to_all(&mut sim, HOSTS, 16 * 1024, ctx.seed ^ 0x706c_616e_6573);
            sim.run_until(warm);
            let d0: u64 = (0..flows).map(|i| sim.delivered(i)).sum();
            sim.run_until(warm + dur);
            let per_flow: Vec<u64> = (0..flows).map(|i| sim.delivered(i)).collect();
            let d1: u64 = per_flow.iter().sum();
            let gbps = (d1 - d0) as f64 * 8.0 / dur as f64;
            let ideal = port_goodput_bps(ec.link_bps) * (HOSTS * p) as f64 / 1e9;
            let starved = per_flow.iter().filter(|&&d| d == 0).count();
            let rep = run_report(&mut sim, started);
            progress(&format!(
                "planes {}: P={p} -> {:.1} Gbit/s of {:.1} ideal ({} events, {} s)",
                kind.name(),
                gbps,
                ideal,
                rep["events"],
                rep["wall_s"]
            ));
            if series.is_empty() {
                ideal_pts.push((p as f64, ideal));
            }
            thr.push(gbps);
            results.push(json!({
                "planes": p, "connections": flows, "aggregate_gbps": round(gbps), "ideal_gbps": round(ideal),
                "of_ideal": round(gbps / ideal), "flows_without_delivery": starved, "run": rep,
            }));
        }
        let mut criteria = serde_json::Map::new();
        for (j, &p) in PLANES.iter().enumerate() {
            let lin = thr[j] / (p as f64 * thr[0].max(1e-12));
            results[j]["of_linear"] = json!(round(lin));
            rows.push(vec![
                kind.name().into(),
                p.to_string(),
                format!("{:.3}", thr[j]),
                format!("{:.3}", results[j]["ideal_gbps"].as_f64().unwrap()),
                format!("{:.4}", lin),
            ]);
            if p > 1 {
                criteria.insert(
                    format!("linear_{p}_planes"),
                    criterion_within(
                        &format!("aggregate({p} planes) / ({p} x aggregate(1 plane))"),
                        lin,
                        0.9,
                        1.1,
                    ),
                );
            }
        }
        let errors: u64 = results
            .iter()
            .map(|r| r["run"]["integrity_errors"].as_u64().unwrap_or(1))
            .sum();
        criteria.insert(
            "integrity".into(),
            criterion("integrity errors over all runs", errors as f64, "==", 0.0),
        );
        let pass = criteria.values().all(|c| c["pass"] == true);
        series.push(Series {
            name: kind.name().into(),
            points: PLANES
                .iter()
                .zip(&thr)
                .map(|(&p, &g)| (p as f64, g))
                .collect(),
            color: kind as usize,
            legend: true,
        });
        per_kind.insert(
            kind.name().into(),
            json!({ "points": results, "criteria": criteria, "pass": pass }),
        );
    }
    series.push(Series {
        name: "ideal (all host ports busy)".into(),
        points: ideal_pts,
        color: 7,
        legend: true,
    });
    write_csv(
        &ctx.out.join("planes.csv"),
        "transport,planes,aggregate_gbps,ideal_gbps,of_linear",
        &rows,
    )
    .map_err(|e| e.to_string())?;
    plot(
        &ctx.out.join("planes.svg"),
        &Plot {
            title: "64 hosts, all-to-all (4,032 connections): aggregate goodput vs planes",
            x_label: "planes",
            y_label: "aggregate goodput (Gbit/s)",
            series,
            hlines: vec![],
            vlines: vec![],
            points: true,
        },
    )?;
    Ok(json!({
        "params": {
            "fabric": base, "planes": PLANES,
            "traffic": "all-to-all, unbounded flows, 16 KiB messages, starts uniform in [0, 10 us)",
            "warmup_ns": warm, "measure_ns": dur,
        },
        "transports": per_kind,
    }))
}
