//! `plane-failure`: 32 hosts, 4 planes, all-to-all (992 connections,
//! unbounded). At `t_fail` every link of plane 0 goes down, host ports
//! included; the NICs keep hashing onto it (they do not know the plane is
//! gone: only a transport that moves its source ports leaves it).
//!
//! Goodput is sampled every `DT`; the recovery time is the time from the
//! failure to the start of the first window of `W` from which every later
//! window's mean goodput is at least (P-1)/P of the mean goodput over the
//! 1 ms before the failure (so the dip right after the failure, while data
//! already past the failed plane still arrives, is not taken for recovery).

use std::time::Instant;

use serde_json::{json, Value};

use super::{add_all_to_all, build, progress, run_report, Ctx, MS, US};
use crate::fabric::{FabricConfig, Ns};
use crate::report::{all_pass, criterion, plot, round, write_csv, Plot, Series};

pub const HOSTS: u32 = 32;
pub const PLANES: u32 = 4;
pub const DT: Ns = 10 * US;
pub const W: Ns = 100 * US;

pub fn run(ctx: &Ctx) -> Result<Value, String> {
    let (t_fail, end) = if ctx.quick {
        (3 * MS / 2, 4 * MS)
    } else {
        (3 * MS, 10 * MS)
    };
    let fc = FabricConfig {
        hosts: HOSTS,
        planes: PLANES,
        ..Default::default()
    };
    let mut rows = Vec::new();
    let mut per_kind = serde_json::Map::new();
    let mut series = Vec::new();
    for &kind in &ctx.kinds {
        let (mut sim, ec) = build(kind, fc.clone(), ctx.seed)?;
        let started = Instant::now();
        let flows = add_all_to_all(&mut sim, HOSTS, 16 * 1024, ctx.seed ^ 0x6661_696c);
        let total = |sim: &crate::sim::Sim| -> u64 { (0..flows).map(|i| sim.delivered(i)).sum() };
        let mut cum = vec![0u64]; // delivered at k * DT
        let mut rto = ec.rto_ns;
        let mut t = 0;
        let mut at_3q = Vec::new();
        while t < end {
            t += DT;
            if t > t_fail && t - DT <= t_fail {
                sim.run_until(t_fail);
                rto = sim
                    .endpoints
                    .iter()
                    .filter_map(|e| e.rto_estimate())
                    .max()
                    .unwrap_or(ec.rto_ns);
                sim.set_plane_up(0, false);
                progress(&format!(
                    "plane-failure {}: plane 0 down at {} us",
                    kind.name(),
                    t_fail / US
                ));
            }
            sim.run_until(t);
            if t == end * 3 / 4 / DT * DT {
                at_3q = (0..flows).map(|i| sim.delivered(i)).collect();
            }
            cum.push(total(&sim));
        }
        let stalled = (0..flows)
            .filter(|&i| sim.delivered(i) == at_3q.get(i).copied().unwrap_or(0))
            .count();
        let gbps = |a: Ns, b: Ns| -> f64 {
            let (i, j) = ((a / DT) as usize, (b / DT) as usize);
            (cum[j] - cum[i]) as f64 * 8.0 / (b - a) as f64
        };
        let pre = gbps(t_fail - MS.min(t_fail / 2), t_fail / DT * DT);
        let target = pre * (PLANES - 1) as f64 / PLANES as f64;
        // Recovered at the start of the first window from which every later
        // window's mean goodput is at least the target.
        let first = t_fail.div_ceil(DT) * DT;
        let mut recovered_at = None;
        let mut s = (end - W) / DT * DT;
        while s >= first && gbps(s, s + W) >= target {
            recovered_at = Some(s);
            s -= DT;
        }
        // A good stretch shorter than a quarter of the time after the failure
        // (e.g. the last window alone, by chance) is not a recovery.
        recovered_at = recovered_at.filter(|&r| end - r >= (end - t_fail) / 4);
        let recovery = recovered_at.map(|s| s.saturating_sub(t_fail));
        let post = gbps((t_fail + end) / 2 / DT * DT, end);
        let rep = run_report(&mut sim, started);
        let errors = sim.errors();
        progress(&format!(
            "plane-failure {}: before {:.1} Gbit/s, after {:.1} Gbit/s, recovery {:?} us, {} stalled flows ({} events, {} s)",
            kind.name(), pre, post, recovery.map(|r| r / US), stalled, rep["events"], rep["wall_s"]
        ));
        let mut pts = Vec::new();
        let wk = (W / DT) as usize;
        for k in 1..cum.len() {
            let g = (cum[k] - cum[k - 1]) as f64 * 8.0 / DT as f64;
            let smooth = if k >= wk {
                (cum[k] - cum[k - wk]) as f64 * 8.0 / W as f64
            } else {
                f64::NAN
            };
            rows.push(vec![
                kind.name().into(),
                format!("{}", k as u64 * DT / US),
                format!("{:.3}", g),
                if smooth.is_nan() {
                    String::new()
                } else {
                    format!("{:.3}", smooth)
                },
            ]);
            if !smooth.is_nan() {
                pts.push(((k as u64 * DT) as f64 / 1e3, smooth));
            }
        }
        series.push(Series {
            name: format!("{} ({} us mean)", kind.name(), W / US),
            points: pts,
            color: kind as usize,
            legend: true,
        });
        let rec_rto = recovery.map_or(f64::INFINITY, |r| r as f64 / rto as f64);
        let criteria = json!({
            "recovery_within_10_rto": criterion(
                "time from the failure to goodput >= (P-1)/P of before, in RTOs", rec_rto, "<=", 10.0),
            "no_message_lost": criterion(
                "flows that delivered nothing in the last quarter of the run (their messages are stuck)", stalled as f64, "==", 0.0),
            "no_message_duplicated_or_misordered": criterion("integrity errors", errors as f64, "==", 0.0),
        });
        let pass = all_pass(&criteria);
        per_kind.insert(
            kind.name().into(),
            json!({
                "goodput_before_gbps": round(pre),
                "target_gbps": round(target),
                "goodput_after_gbps": round(post),
                "after_vs_before": round(post / pre.max(1e-12)),
                "recovery_ns": recovery,
                "rto_ns": rto,
                "recovery_rto": round(rec_rto),
                "stalled_flows": stalled,
                "connections": flows,
                "run": rep,
                "criteria": criteria,
                "pass": pass,
            }),
        );
    }
    write_csv(
        &ctx.out.join("plane-failure.csv"),
        "transport,t_us,goodput_gbps,goodput_gbps_100us_mean",
        &rows,
    )
    .map_err(|e| e.to_string())?;
    plot(
        &ctx.out.join("plane-failure.svg"),
        &Plot {
            title: "32 hosts, 4 planes, all-to-all: plane 0 fails",
            x_label: "time (us)",
            y_label: "aggregate goodput (Gbit/s)",
            series,
            hlines: vec![],
            vlines: vec![((t_fail / US) as f64, "plane 0 down".into())],
            points: false,
        },
    )?;
    Ok(json!({
        "params": {
            "fabric": fc, "failed_plane": 0, "fail_at_ns": t_fail, "end_ns": end,
            "traffic": "all-to-all, unbounded flows, 16 KiB messages, starts uniform in [0, 10 us)",
            "sample_ns": DT, "window_ns": W,
        },
        "transports": per_kind,
    }))
}
