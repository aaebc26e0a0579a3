//! What a run writes: the CSV of every point, one JSON object per curve, and the summary
//! table.

use std::fmt::Write as _;
use std::io::Write;

use serde_json::{json, Map, Value};

use crate::published::Published;
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
/// decimals), plus `pods` and `failed` (means per run); with `published` results for the
/// trace, also `fgd` (FGD's published mean per `k` of [`SUMMARY_KS`]) and `vs_fgd` (the
/// policy's mean minus FGD's, at the same `k`).
pub fn json_lines(curves: &[Curve], published: Option<&Published>) -> String {
    let mut out = String::new();
    for curve in curves {
        let map = |f: &dyn Fn(&crate::metrics::Point) -> f64| -> Value {
            let m: Map<String, Value> =
                curve.points.iter().map(|p| (p.k.to_string(), json!(round4(f(p))))).collect();
            Value::Object(m)
        };
        let mut object = json!({
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
        let fgd: Vec<(usize, f64)> = SUMMARY_KS
            .iter()
            .filter_map(|&k| Some((k, published?.fgd(&curve.trace, k)?)))
            .collect();
        if !fgd.is_empty() {
            let vs: Map<String, Value> = fgd
                .iter()
                .filter_map(|&(k, f)| {
                    Some((k.to_string(), json!(round4(curve.at(k)?.alloc.mean - f))))
                })
                .collect();
            let fgd: Map<String, Value> =
                fgd.iter().map(|&(k, f)| (k.to_string(), json!(f))).collect();
            object["fgd"] = Value::Object(fgd);
            object["vs_fgd"] = Value::Object(vs);
        }
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

/// The bucket the comparison across traces shows.
pub const VERSUS_K: usize = 100;

/// Every trace at k = [`VERSUS_K`]: each policy's mean allocation (%), FGD's published mean
/// (`FGD`, `-` where the authors did not run the trace) and `vs FGD`, the last policy's mean
/// minus FGD's, in points. The last policy is the one compared, so `--policy` decides it.
pub fn versus_fgd(curves: &[Curve], published: &Published) -> String {
    let mut traces: Vec<&str> = Vec::new();
    let mut policies: Vec<&str> = Vec::new();
    for curve in curves {
        if !traces.contains(&curve.trace.as_str()) {
            traces.push(&curve.trace);
        }
        if !policies.contains(&curve.policy.as_str()) {
            policies.push(&curve.policy);
        }
    }
    let Some(&compared) = policies.last() else { return String::new() };
    let seeds = curves.first().map_or(0, |c| c.seeds.len());
    let mut out = String::new();
    let _ = writeln!(
        out,
        "GPU allocation (%) at k = {VERSUS_K}, mean over {seeds} seed{}, beside FGD's published mean; vs FGD: {compared} − FGD",
        if seeds == 1 { "" } else { "s" }
    );
    let width = traces.iter().map(|t| t.len()).max().unwrap_or(5).max(5);
    let _ = write!(out, "{:<width$}", "trace");
    for policy in &policies {
        let _ = write!(out, "  {:>w$}", policy, w = policy.len().max(6));
    }
    let _ = writeln!(out, "  {:>6}  {:>6}", "FGD", "vs FGD");
    let mean = |trace: &str, policy: &str| {
        curves
            .iter()
            .find(|c| c.trace == trace && c.policy == policy)
            .and_then(|c| c.at(VERSUS_K))
            .map(|p| p.alloc.mean)
    };
    for trace in traces {
        let _ = write!(out, "{trace:<width$}");
        for policy in &policies {
            let cell = mean(trace, policy).map_or("-".to_string(), |m| format!("{m:.1}"));
            let _ = write!(out, "  {cell:>w$}", w = policy.len().max(6));
        }
        let fgd = published.fgd(trace, VERSUS_K);
        let versus = fgd.zip(mean(trace, compared)).map(|(f, m)| m - f);
        let fgd = fgd.map_or("-".to_string(), |f| format!("{f:.2}"));
        let versus = versus.map_or("-".to_string(), |v| format!("{v:+.2}"));
        let _ = writeln!(out, "  {fgd:>6}  {versus:>6}");
    }
    out
}
