//! The report: a table on stdout, ratios of Halyard over each baseline, and JSON.

use crate::args::Config;
use crate::runner::{EngineRun, PhaseResult};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Halyard's figure over a baseline's for one workload and metric.
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// Mix name.
    pub mix: String,
    /// Workload name.
    pub workload: String,
    /// Metric name (a field of the results).
    pub metric: String,
    /// Always "halyard": the engine whose figure is the numerator.
    pub engine: String,
    /// The baseline engine.
    pub baseline: String,
    /// Halyard's figure / the baseline's.
    pub value: f64,
}

/// Reads one figure from a result.
type Metric = fn(&PhaseResult) -> f64;

/// Metrics compared in ratios, and how to read each from a result.
const METRICS: [(&str, Metric); 6] = [
    ("ops_per_sec", |r| r.ops_per_sec),
    ("io_amplification", |r| r.io_amplification),
    ("space_amplification", |r| r.space_amplification),
    ("cpu_us_per_op", |r| r.cpu_us_per_op),
    ("latency_p99_us", |r| r.latency_us.p99),
    ("device_bytes_per_op", |r| r.device_bytes_per_op),
];

/// Ratios of Halyard over every other engine, for each mix and workload both completed.
pub fn ratios(runs: &[EngineRun]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for h in runs.iter().filter(|r| r.engine.name() == "halyard") {
        for b in runs.iter().filter(|b| b.mix == h.mix && b.engine.name() != "halyard") {
            for hr in &h.results {
                let Some(br) = b.results.iter().find(|br| br.workload == hr.workload) else { continue };
                for (metric, f) in METRICS {
                    let (hv, bv) = (f(hr), f(br));
                    // A zero baseline (no device I/O in a cached read phase) has no ratio.
                    if bv > 0.0 && hv.is_finite() {
                        out.push(Ratio {
                            mix: h.mix.clone(),
                            workload: hr.workload.clone(),
                            metric: metric.into(),
                            engine: "halyard".into(),
                            baseline: b.engine.name().into(),
                            value: hv / bv,
                        });
                    }
                }
            }
        }
    }
    out
}

fn mb(b: u64) -> f64 {
    b as f64 / (1u64 << 20) as f64
}

/// The readable report.
pub fn table(cfg: &Config, runs: &[EngineRun], ratios: &[Ratio]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "halyard bench: records {} ops {} threads {} dist {:?} cache {} MiB l0 {} MiB growth {} sync {:?} seed {}",
        cfg.records,
        cfg.ops,
        cfg.threads,
        cfg.dist,
        cfg.cache_bytes >> 20,
        cfg.l0_bytes >> 20,
        cfg.growth_factor,
        cfg.sync,
        cfg.seed
    );
    let mut seen = Vec::new();
    for r in runs.iter().filter(|r| !r.settings.is_empty()) {
        if seen.contains(&r.engine) {
            continue;
        }
        seen.push(r.engine);
        let _ = writeln!(s, "\n{} configuration:", r.engine.name());
        for (k, v) in &r.settings {
            if v.contains('\n') {
                let _ = writeln!(s, "  {k:<40} (in the JSON report)");
            } else {
                let _ = writeln!(s, "  {k:<40} {v}");
            }
        }
    }
    let _ = writeln!(
        s,
        "\n{:<8} {:<8} {:<7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7}",
        "engine",
        "mix",
        "phase",
        "ops",
        "ops/s",
        "p50 us",
        "p99 us",
        "p999 us",
        "max us",
        "dev R MB",
        "dev W MB",
        "io amp",
        "space",
        "cpu us",
        "tput cv",
        "stall s",
        "rss MB"
    );
    for run in runs {
        for r in &run.results {
            let _ = writeln!(
                s,
                "{:<8} {:<8} {:<7} {:>9} {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>9.0} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>6.1} {:>7.2} {:>7.2} {:>7.0}",
                r.engine,
                r.mix,
                r.workload,
                r.ops,
                r.ops_per_sec,
                r.latency_us.p50,
                r.latency_us.p99,
                r.latency_us.p999,
                r.latency_us.max,
                mb(r.device_read_bytes),
                mb(r.device_write_bytes),
                r.io_amplification,
                r.space_amplification,
                r.cpu_us_per_op,
                r.throughput_cv,
                r.stall_seconds,
                mb(r.peak_rss_bytes)
            );
            if let Some(note) = cross_check(r) {
                let _ = writeln!(s, "  note: {note}");
            }
        }
        if let Some((phase, e)) = &run.failure {
            let _ = writeln!(s, "{:<8} {:<8} {:<7} FAILED: {e}", run.engine.name(), run.mix, phase);
        }
    }
    if !ratios.is_empty() {
        let _ = writeln!(s, "\nHalyard / baseline (ops/s: higher is better for Halyard; the others: lower is):");
        let _ = writeln!(
            s,
            "{:<8} {:<8} {:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            "baseline", "mix", "phase", "ops/s", "io amp", "space", "cpu/op", "p99", "dev B/op"
        );
        let mut keys: Vec<(&str, &str, &str)> = Vec::new();
        for r in ratios {
            let k = (r.baseline.as_str(), r.mix.as_str(), r.workload.as_str());
            if !keys.contains(&k) {
                keys.push(k);
            }
        }
        for (b, m, w) in keys {
            let cell = |metric: &str| {
                ratios
                    .iter()
                    .find(|r| r.baseline == b && r.mix == m && r.workload == w && r.metric == metric)
                    .map_or_else(|| "-".to_string(), |r| format!("{:.2}", r.value))
            };
            let _ = writeln!(
                s,
                "{b:<8} {m:<8} {w:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
                cell("ops_per_sec"),
                cell("io_amplification"),
                cell("space_amplification"),
                cell("cpu_us_per_op"),
                cell("latency_p99_us"),
                cell("device_bytes_per_op")
            );
        }
    }
    let _ = writeln!(
        s,
        "\nDevice bytes from /proc/self/io (writes net of cancelled); io amp = device bytes / user bytes; \
         space = allocated bytes / live bytes.\nThroughput varies by up to ~15% between identical runs on \
         this machine: compare medians of at least 3 runs."
    );
    s
}

/// Where /proc/self/io and Halyard's own device counters disagree by more than 10% (and
/// 1 MiB): page-cache reads, other files or counting bugs.
pub fn cross_check(r: &PhaseResult) -> Option<String> {
    let (er, ew) = (r.engine_device_read_bytes?, r.engine_device_write_bytes?);
    let off = |proc: u64, own: u64| {
        let d = proc.abs_diff(own);
        d > 1 << 20 && d as f64 > 0.1 * proc.max(own) as f64
    };
    (off(r.device_read_bytes, er) || off(r.device_write_bytes, ew)).then(|| {
        format!(
            "/proc/self/io read {:.1} MB written {:.1} MB, engine counters read {:.1} MB written {:.1} MB",
            mb(r.device_read_bytes),
            mb(r.device_write_bytes),
            mb(er),
            mb(ew)
        )
    })
}

/// The JSON document.
pub fn json(cfg: &Config, runs: &[EngineRun], ratios: &[Ratio]) -> Value {
    let mut settings = serde_json::Map::new();
    for r in runs.iter().filter(|r| !r.settings.is_empty()) {
        let m: serde_json::Map<String, Value> =
            r.settings.iter().map(|(k, v)| (k.clone(), Value::String(v.clone()))).collect();
        settings.entry(r.engine.name()).or_insert(Value::Object(m));
    }
    let mut config = serde_json::to_value(cfg).unwrap_or(Value::Null);
    if let Value::Object(c) = &mut config {
        c.insert("engine_settings".into(), Value::Object(settings));
    }
    let results: Vec<&PhaseResult> = runs.iter().flat_map(|r| &r.results).collect();
    let failures: Vec<Value> = runs
        .iter()
        .filter_map(|r| {
            let (phase, e) = r.failure.as_ref()?;
            Some(json!({"engine": r.engine.name(), "mix": r.mix, "workload": phase, "error": e}))
        })
        .collect();
    json!({"config": config, "results": results, "ratios": ratios, "failures": failures})
}
