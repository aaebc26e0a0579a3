//! What a run writes: the CSV of every point, one JSON object per curve, and the summary
//! table.

use std::fmt::Write as _;
use std::io::Write;

use serde_json::{json, Map, Value};

use crate::run::Curve;

/// The buckets the summary table shows.
pub const SUMMARY_KS: [usize; 5] = [80, 90, 100, 110, 130];

/// The CSV header.
pub const CSV_HEADER: [&str; 10] = [
    "trace",
    "policy",
    "k",
    "seeds",
    "alloc_mean",
    "alloc_sd",
    "frag_rate_mean",
    "frag_rate_sd",
    "frag_gpu_mean",
    "frag_gpu_sd",
];

/// Writes every point of every curve: allocation and fragmentation rate in percent,
/// fragmentation in GPUs, four decimals.
pub fn write_csv<W: Write>(curves: &[Curve], out: W) -> Result<(), csv::Error> {
    let mut writer = csv::Writer::from_writer(out);
    writer.write_record(CSV_HEADER)?;
    for curve in curves {
        for p in &curve.points {
            let f = |x: f64| format!("{x:.4}");
            writer.write_record([
                curve.trace.clone(),
                curve.policy.clone(),
                p.k.to_string(),
                p.seeds.to_string(),
                f(p.alloc.mean),
                f(p.alloc.sd),
                f(p.frag_rate.mean),
                f(p.frag_rate.sd),
                f(p.frag_gpus.mean),
                f(p.frag_gpus.sd),
            ])?;
        }
    }
    writer.flush()?;
    Ok(())
}

/// One JSON object per curve, each on its own line: `trace`, `policy`, `seeds`, and per bucket
/// (keys are `k` as text) `alloc`, `alloc_sd`, `frag_rate`, `frag_rate_sd` (percent, four
/// decimals), plus `pods` and `failed` (means per run).
pub fn json_lines(curves: &[Curve]) -> String {
    let mut out = String::new();
    for curve in curves {
        let map = |f: &dyn Fn(&crate::metrics::Point) -> f64| -> Value {
            let m: Map<String, Value> =
                curve.points.iter().map(|p| (p.k.to_string(), json!(round4(f(p))))).collect();
            Value::Object(m)
        };
        let object = json!({
            "trace": curve.trace,
            "policy": curve.policy,
            "seeds": curve.seeds,
            "alloc": map(&|p| p.alloc.mean),
            "alloc_sd": map(&|p| p.alloc.sd),
            "frag_rate": map(&|p| p.frag_rate.mean),
            "frag_rate_sd": map(&|p| p.frag_rate.sd),
            "pods": round4(curve.pods),
            "failed": round4(curve.failed),
        });
        let _ = writeln!(out, "{object}");
    }
    out
}

fn round4(x: f64) -> f64 {
    (x * 10_000.0).round() / 10_000.0
}

/// The summary: per trace, GPU allocation (%) at the [`SUMMARY_KS`] per policy, mean ± sd over
/// seeds.
pub fn table(curves: &[Curve]) -> String {
    let mut out = String::new();
    let mut traces: Vec<&str> = Vec::new();
    for curve in curves {
        if !traces.contains(&curve.trace.as_str()) {
            traces.push(&curve.trace);
        }
    }
    for (i, trace) in traces.iter().enumerate() {
        let rows: Vec<&Curve> = curves.iter().filter(|c| c.trace == *trace).collect();
        let seeds = rows.first().map_or(0, |c| c.seeds.len());
        if i > 0 {
            out.push('\n');
        }
        let _ = writeln!(
            out,
            "trace {trace}: GPU allocation (%) at arrived workload k (% of cluster GPUs), mean ± sd over {seeds} seed{}",
            if seeds == 1 { "" } else { "s" }
        );
        let width = rows.iter().map(|c| c.policy.len()).max().unwrap_or(6).max(6);
        let _ = write!(out, "{:<width$}", "policy");
        for k in SUMMARY_KS {
            let _ = write!(out, "  {:>13}", format!("k={k}"));
        }
        out.push('\n');
        for curve in rows {
            let _ = write!(out, "{:<width$}", curve.policy);
            for k in SUMMARY_KS {
                let cell = curve.at(k).map_or("-".to_string(), |p| {
                    format!("{:.1} ± {:.1}", p.alloc.mean, p.alloc.sd)
                });
                let _ = write!(out, "  {cell:>13}");
            }
            out.push('\n');
        }
    }
    out
}
