//! `incast`: 32 senders to 1 receiver (40 hosts, one plane; the receiver's
//! leaf port is the bottleneck). Unbounded flows of 4 KiB messages (one
//! packet each, so delivery is measured per packet), all starting within
//! 1 us of t = 0.
//!
//! Settling is judged on each sender's control loop: the rate it allows
//! itself (MetaRoCE: the pace set by the receiver's hint; the baseline: its
//! DCQCN rate), sampled every `CDT`. A sender's hint arrives with its first
//! acknowledgement (late for senders whose first packets wait behind the
//! initial burst), and a hint is right only once the receiver has heard from
//! every sender, so "the hints have arrived" when the last sender got its
//! first one. A sender has settled at the earliest sample from which every
//! later one is within 20% of the fair share; the scenario's settling time is
//! from the hints' arrival to the last sender's settling. At the fair share a sender
//! moves one 4 KiB packet every ~4 base RTTs, so a delivered rate cannot be
//! measured at RTT resolution; it is reported too, over a sliding window `W`
//! long enough for ~10 packets (`delivery_settle_ns`).

use std::time::Instant;

use rand::Rng;
use rand_chacha::rand_core::SeedableRng;
use rand_chacha::ChaCha8Rng;
use serde_json::{json, Value};

use super::{build, port_goodput_bps, progress, run_report, Ctx, MS, US};
use crate::fabric::{FabricConfig, Ns};
use crate::report::{all_pass, criterion, jain, plot, round, write_csv, Plot, Series};
use crate::transports::Flow;

pub const SENDERS: u32 = 32;
pub const DT: Ns = 10 * US;
/// Sampling step of the senders' control rates (a fraction of a base RTT).
pub const CDT: Ns = 2 * US;

pub fn run(ctx: &Ctx) -> Result<Value, String> {
    let end = if ctx.quick { 5 * MS } else { 20 * MS };
    let fc = FabricConfig {
        hosts: 40,
        planes: 1,
        ..Default::default()
    };
    let mut rows = Vec::new();
    let mut qrows = Vec::new();
    let mut per_kind = serde_json::Map::new();
    let mut qseries = Vec::new();
    for &kind in &ctx.kinds {
        let (mut sim, ec) = build(kind, fc.clone(), ctx.seed)?;
        let started = Instant::now();
        let mut rng = ChaCha8Rng::seed_from_u64(ctx.seed ^ 0x696e_6361_7374);
        for i in 0..SENDERS {
            let start = rng.gen_range(0..US);
            sim.add_flow(Flow {
                id: i,
                src: i + 1,
                dst: 0,
                bytes: u64::MAX,
                msg_size: 4096,
                start,
            });
        }
        let bottleneck = sim.fabric.host_downlink(0, 0) as usize;
        let fair = port_goodput_bps(ec.link_bps) / SENDERS as f64; // bit/s
                                                                   // Window: ~10 packets at the fair share, in whole samples.
        let w = ((10.0 * 4096.0 * 8.0 / fair * 1e9) as Ns).div_ceil(DT) * DT;
        let steps = (end / DT) as usize;
        let mut cum = vec![vec![0u64; steps + 1]; SENDERS as usize];
        let mut queue = vec![0u64; steps + 1];
        // Control rates first, finely, over the first DT-multiple of 400 us.
        let csteps = (400 * US / CDT) as usize;
        let mut ctl_last_bad = vec![None::<usize>; SENDERS as usize];
        let mut first_hint = vec![None::<usize>; SENDERS as usize];
        let within = |r: Option<f64>| r.is_some_and(|r| (r - fair).abs() <= 0.2 * fair);
        for k in 1..=csteps {
            sim.run_until(k as Ns * CDT);
            for (i, bad) in ctl_last_bad.iter_mut().enumerate() {
                let r = sim.control_rate(i);
                if r.is_some() && first_hint[i].is_none() {
                    first_hint[i] = Some(k);
                }
                if first_hint[i].is_some() && !within(r) {
                    *bad = Some(k);
                }
            }
        }
        for k in 1..=steps {
            sim.run_until(k as Ns * DT);
            if k as Ns * DT > csteps as Ns * CDT {
                for (i, bad) in ctl_last_bad.iter_mut().enumerate() {
                    if !within(sim.control_rate(i)) {
                        *bad = Some(usize::MAX);
                    }
                }
            }
            for (i, c) in cum.iter_mut().enumerate() {
                c[k] = sim.delivered(i);
            }
            let now = sim.now;
            queue[k] = sim.fabric.links[bottleneck].occupancy(now);
        }
        let wk = (w / DT) as usize;
        let rate = |i: usize, a: usize| (cum[i][a + wk] - cum[i][a]) as f64 * 8.0 / w as f64 * 1e9;
        // Settling: per sender, the first sample after the last bad window start.
        let mut settle: Ns = 0;
        let mut never = 0;
        for i in 0..SENDERS as usize {
            let mut last_bad: Option<usize> = None;
            for a in 0..=steps - wk {
                if (rate(i, a) - fair).abs() > 0.2 * fair {
                    last_bad = Some(a);
                }
            }
            match last_bad {
                Some(a) if a == steps - wk => never += 1,
                Some(a) => settle = settle.max((a + 1) as Ns * DT),
                None => {}
            }
        }
        let delivery_settle = if never > 0 { None } else { Some(settle) };
        // Control settling, from each sender's first hint; a sender without
        // a hint in the fine window, or out of band after it, never settled.
        let unsettled = |i: usize| {
            first_hint[i].is_none()
                || matches!(ctl_last_bad[i], Some(k) if k == usize::MAX || k == csteps)
        };
        let last_hint = first_hint.iter().flatten().max().map(|k| *k as Ns * CDT);
        let settle = if (0..SENDERS as usize).any(unsettled) {
            None
        } else {
            let settled = ctl_last_bad
                .iter()
                .flatten()
                .max()
                .map_or(0, |k| (k + 1) as Ns * CDT);
            Some(settled.saturating_sub(last_hint.unwrap_or(0)))
        };
        // Jain's index and shares over the second half.
        let half = steps / 2;
        let tput: Vec<f64> = (0..SENDERS as usize)
            .map(|i| {
                (cum[i][steps] - cum[i][half]) as f64 * 8.0 / ((steps - half) as Ns * DT) as f64
                    * 1e9
            })
            .collect();
        let j = jain(&tput);
        let min_share = tput.iter().cloned().fold(f64::MAX, f64::min) / fair;
        let max_share = tput.iter().cloned().fold(0.0, f64::max) / fair;
        let agg: f64 = tput.iter().sum();
        let link = &sim.fabric.links[bottleneck];
        let (max_q, limit, drops) = (link.max_occ, link.drop_limit, link.tail_drops);
        let rep = run_report(&mut sim, started);
        let errors = sim.errors();
        let rtt = ec.base_rtt_ns;
        progress(&format!(
            "incast {}: Jain {:.3}, settle {:?} us, max queue {} KiB of {} KiB, {} drops ({} events, {} s)",
            kind.name(), j, settle.map(|s| s / US), max_q / 1024, limit / 1024, drops, rep["events"], rep["wall_s"]
        ));
        // The hints arrive about one base RTT after the start; 2 RTTs more to settle.
        let settle_rtts = settle.map_or(f64::INFINITY, |s| s as f64 / rtt as f64);
        let criteria = json!({
            "settle_within_2_rtt_of_hints": criterion(
                "time from the hints' arrival (every sender has one) until every sender's control rate stays within 20% of its fair share, in base RTTs",
                settle_rtts, "<=", 2.0),
            "jain_fairness": criterion("Jain's fairness index over the second half", j, ">=", 0.95),
            "queue_below_drop_limit": criterion(
                "max bottleneck queue occupancy / drop limit", max_q as f64 / limit as f64, "<", 1.0),
            "no_drop_at_bottleneck": criterion("tail drops at the bottleneck queue", drops as f64, "==", 0.0),
            "integrity": criterion("integrity errors", errors as f64, "==", 0.0),
        });
        let pass = all_pass(&criteria);
        per_kind.insert(
            kind.name().into(),
            json!({
                "fair_share_gbps": round(fair / 1e9),
                "aggregate_gbps": round(agg / 1e9),
                "utilisation": round(agg / (fair * SENDERS as f64)),
                "min_share": round(min_share),
                "max_share": round(max_share),
                "jain": round(j),
                "settle_ns": settle,
                "delivery_settle_ns": delivery_settle,
                "last_first_hint_ns": last_hint,
                "senders_never_settled": never,
                "settle_rtts": round(settle_rtts),
                "base_rtt_ns": rtt,
                "rate_window_ns": w,
                "max_queue_bytes": max_q,
                "drop_limit_bytes": limit,
                "bottleneck_drops": drops,
                "run": rep,
                "criteria": criteria,
                "pass": pass,
            }),
        );
        // Per-sender windowed rates (CSV and plot), the queue over time.
        let mut series = Vec::new();
        for i in 0..SENDERS as usize {
            let mut pts = Vec::new();
            let every = (steps / 500).max(1); // plot at most ~500 points per sender
            for a in 0..=steps - wk {
                let r = rate(i, a);
                if a % every == 0 {
                    pts.push(((a as Ns * DT) as f64 / 1e3, r / 1e9));
                }
                rows.push(vec![
                    kind.name().into(),
                    (a as Ns * DT / US).to_string(),
                    (i + 1).to_string(),
                    format!("{:.4}", r / 1e9),
                ]);
            }
            series.push(Series {
                name: format!("sender {}", i + 1),
                points: pts,
                color: i,
                legend: false,
            });
        }
        plot(
            &ctx.out.join(format!("incast-{}.svg", kind.name())),
            &Plot {
                title: &format!(
                    "{}: 32-to-1 incast, per-sender goodput ({} us windows)",
                    kind.name(),
                    w / US
                ),
                x_label: "window start (us)",
                y_label: "goodput (Gbit/s)",
                series,
                hlines: vec![
                    (fair / 1e9, "fair share".into()),
                    (1.2 * fair / 1e9, "+20%".into()),
                    (0.8 * fair / 1e9, "-20%".into()),
                ],
                vlines: vec![],
                points: false,
            },
        )?;
        let mut qp = Vec::new();
        for (k, &q) in queue.iter().enumerate() {
            qrows.push(vec![
                kind.name().into(),
                (k as Ns * DT / US).to_string(),
                q.to_string(),
            ]);
            qp.push(((k as Ns * DT) as f64 / 1e3, q as f64 / 1024.0));
        }
        qseries.push(Series {
            name: kind.name().into(),
            points: qp,
            color: kind as usize,
            legend: true,
        });
    }
    write_csv(
        &ctx.out.join("incast.csv"),
        "transport,window_start_us,sender,goodput_gbps",
        &rows,
    )
    .map_err(|e| e.to_string())?;
    write_csv(
        &ctx.out.join("incast-queue.csv"),
        "transport,t_us,bottleneck_queue_bytes",
        &qrows,
    )
    .map_err(|e| e.to_string())?;
    plot(
        &ctx.out.join("incast-queue.svg"),
        &Plot {
            title: "32-to-1 incast: bottleneck queue",
            x_label: "time (us)",
            y_label: "queue (KiB)",
            series: qseries,
            hlines: vec![
                (fc.drop_limit as f64 / 1024.0, "drop limit".into()),
                (fc.ecn_k as f64 / 1024.0, "ECN threshold".into()),
            ],
            vlines: vec![],
            points: false,
        },
    )?;
    Ok(json!({
        "params": {
            "fabric": fc, "senders": SENDERS, "receiver": 0, "end_ns": end, "sample_ns": DT,
            "traffic": "hosts 1..=32 -> host 0, unbounded flows, 4 KiB messages, starts uniform in [0, 1 us)",
        },
        "transports": per_kind,
    }))
}
