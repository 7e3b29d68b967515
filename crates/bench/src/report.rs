//! The report: a table on stdout, ratios of Halyard over each baseline, and JSON.

use crate::args::Config;
use crate::runner::{EngineRun, PhaseResult};
use serde::Serialize;
use serde_json::{json, Value};
use std::fmt::Write as _;

/// Halyard's figure over a baseline's for one workload and metric: in-process Halyard over
/// the in-process baselines, and a Halyard server (`resp://`, `halyard://`) over the other
/// servers (redis).
#[derive(Clone, Debug, Serialize)]
pub struct Ratio {
    /// Mix name.
    pub mix: String,
    /// Workload name.
    pub workload: String,
    /// Metric name (a field of the results).
    pub metric: String,
    /// The Halyard engine whose figure is the numerator ("halyard" or a Halyard target's URL).
    pub engine: String,
    /// The baseline engine.
    pub baseline: String,
    /// Halyard's figure / the baseline's.
    pub value: f64,
}

/// Reads one figure from a result.
type Metric = fn(&PhaseResult) -> f64;

/// Metrics compared in ratios, and how to read each from a result.
const METRICS: [(&str, Metric); 10] = [
    ("ops_per_sec", |r| r.ops_per_sec),
    ("io_amplification", |r| r.io_amplification),
    ("space_amplification", |r| r.space_amplification),
    ("cpu_us_per_op", |r| r.cpu_us_per_op),
    ("latency_p99_us", |r| r.latency_us.p99),
    ("device_bytes_per_op", |r| r.device_bytes_per_op),
    ("backup_cpu_us_per_op", |r| r.roles.as_ref().and_then(|x| x.backup_cpu_us_per_op).unwrap_or(f64::NAN)),
    ("backup_device_read_bytes", |r| {
        r.roles.as_ref().and_then(|x| x.backup_device_read_bytes).map_or(f64::NAN, |v| v as f64)
    }),
    ("backup_io_amplification", |r| r.roles.as_ref().and_then(|x| x.backup_io_amplification).unwrap_or(f64::NAN)),
    ("network_amplification", |r| r.roles.as_ref().and_then(|x| x.network_amplification).unwrap_or(f64::NAN)),
];

/// Ratios of Halyard over every other engine of the same kind (in process, or behind a
/// server), for each mix and workload both completed.
pub fn ratios(runs: &[EngineRun]) -> Vec<Ratio> {
    let mut out = Vec::new();
    for h in runs.iter().filter(|r| r.halyard) {
        let peers = |b: &&EngineRun| b.mix == h.mix && !b.halyard && b.engine.is_server() == h.engine.is_server();
        for b in runs.iter().filter(peers) {
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
                            engine: h.engine.name().into(),
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

/// Megabytes, NaN when unknown (printed as such in the table).
fn mbo(b: Option<u64>) -> f64 {
    b.map_or(f64::NAN, mb)
}

/// The readable report.
pub fn table(cfg: &Config, runs: &[EngineRun], ratios: &[Ratio]) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "halyard bench: records {} ops {} threads {} dist {:?}{} keys {:?}{}{} cache {} MiB l0 {} MiB growth {} sync {:?} seed {}",
        cfg.records,
        cfg.ops,
        cfg.threads,
        cfg.dist,
        cfg.dist_by.iter().map(|(w, d)| format!(",{w}={d:?}")).collect::<String>(),
        cfg.keys,
        if cfg.update_rmw { " updates read-modify-write" } else { "" },
        if cfg.reopen { " reopen between phases" } else { "" },
        cfg.cache_bytes >> 20,
        cfg.l0_bytes >> 20,
        cfg.growth_factor,
        cfg.sync,
        cfg.seed
    );
    settings_table(&mut s, runs);
    // Target URLs are longer than the engine names.
    let ew = runs.iter().map(|r| r.engine.name().len()).max().unwrap_or(0).max(8);
    results_table(&mut s, runs, ew);
    if !ratios.is_empty() {
        ratios_table(&mut s, ratios, ew);
    }
    let _ = writeln!(
        s,
        "\nDevice bytes from /proc/self/io (writes net of cancelled); io amp = device bytes / user bytes; \
         space = allocated bytes / live bytes.\nServer engines (redis, resp://, halyard://): device bytes, \
         space, CPU, stalls and RSS are the server's (redis: /proc/<pid>; a Halyard target: --metrics);\n\
         NaN where the server cannot be measured, and cpu us is then the client's (see the notes).\n\
         Remote targets are not emptied before load-a.\nThroughput varies by up to ~15% between identical runs on \
         this machine: compare medians of at least 3 runs."
    );
    s
}

/// Each engine's settings, once per engine.
fn settings_table(s: &mut String, runs: &[EngineRun]) {
    let mut seen = Vec::new();
    for r in runs.iter().filter(|r| !r.settings.is_empty()) {
        if seen.contains(&&r.engine) {
            continue;
        }
        seen.push(&r.engine);
        let _ = writeln!(s, "\n{} configuration:", r.engine.name());
        for (k, v) in &r.settings {
            if v.contains('\n') {
                let _ = writeln!(s, "  {k:<40} (in the JSON report)");
            } else {
                let _ = writeln!(s, "  {k:<40} {v}");
            }
        }
    }
}

/// One row per engine, mix and phase, with its notes; `ew` is the engine column's width.
fn results_table(s: &mut String, runs: &[EngineRun], ew: usize) {
    let _ = writeln!(
        s,
        "\n{:<ew$} {:<8} {:<7} {:>9} {:>10} {:>8} {:>8} {:>8} {:>9} {:>8} {:>8} {:>8} {:>8} {:>6} {:>7} {:>7} {:>7}",
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
            result_row(s, r, ew);
        }
        if let Some(m) = run.results.first().and_then(|r| r.server_measures.as_ref()) {
            let cpu = run.results.first().map_or("", |r| r.cpu_source.as_str());
            let _ = writeln!(s, "  note: server measures: {m}; cpu us = {cpu} CPU per op");
        }
        for (phase, why) in &run.unsupported {
            let _ = writeln!(s, "{:<ew$} {:<8} {:<7} UNSUPPORTED: {why}", run.engine.name(), run.mix, phase);
        }
        if let Some((phase, e)) = &run.failure {
            let _ = writeln!(s, "{:<ew$} {:<8} {:<7} FAILED: {e}", run.engine.name(), run.mix, phase);
        }
    }
}

fn result_row(s: &mut String, r: &PhaseResult, ew: usize) {
    let _ = writeln!(
        s,
        "{:<ew$} {:<8} {:<7} {:>9} {:>10.0} {:>8.1} {:>8.1} {:>8.1} {:>9.0} {:>8.1} {:>8.1} {:>8.2} {:>8.2} {:>6.1} {:>7.2} {:>7.2} {:>7.0}",
        r.engine,
        r.mix,
        r.workload,
        r.ops,
        r.ops_per_sec,
        r.latency_us.p50,
        r.latency_us.p99,
        r.latency_us.p999,
        r.latency_us.max,
        mbo(r.device_read_bytes),
        mbo(r.device_write_bytes),
        r.io_amplification,
        r.space_amplification,
        r.cpu_us_per_op,
        r.throughput_cv,
        r.stall_seconds,
        mbo(r.peak_rss_bytes)
    );
    if let Some(note) = cross_check(r) {
        let _ = writeln!(s, "  note: {note}");
    }
    let stalls: Vec<String> = crate::engines::STALL_BUCKETS
        .iter()
        .filter_map(|b| {
            r.engine_counters.get(*b).filter(|n| **n > 0).map(|n| format!("{} {n}", b.trim_start_matches("stalls_")))
        })
        .collect();
    if !stalls.is_empty() {
        let _ = writeln!(s, "  {} writes stalled for L0 room, by wait: {}", r.workload, stalls.join(", "));
    }
    if let Some(n) = r.engine_counters.get("drange_reorganisations").filter(|n| **n > 0) {
        let ppm = r.engine_gauges.get("drange_load_imbalance_ppm").copied().unwrap_or(0);
        let _ = writeln!(
            s,
            "  {} Dranges: {} per L0 table, cut anew {n} times; load imbalance of the last table {:.2e}",
            r.workload,
            r.engine_gauges.get("dranges").copied().unwrap_or(0),
            ppm as f64 / 1e6
        );
    }
    if let Some(x) = &r.reopen {
        let _ = writeln!(
            s,
            "  {} reopen: open before {:.2} s (read {:.1} MB), close after {:.2} s (wrote {:.1} MB), \
             cpu {:.2} s; ops/s over open..close {:.0}",
            r.workload,
            x.open_seconds,
            mb(x.open_read_bytes),
            x.close_seconds,
            mb(x.close_write_bytes),
            x.cpu_seconds,
            x.ops_per_sec_open_to_close
        );
    }
    if let Some(x) = &r.roles {
        let f = |v: Option<f64>| v.map_or("NaN".to_string(), |v| format!("{v:.2}"));
        let m = |v: Option<u64>| v.map_or("NaN".to_string(), |v| format!("{:.1}", mb(v)));
        let _ = writeln!(
            s,
            "  {} roles: primary = columns above; backups: cpu us/op {}, dev rd/wr MB {}/{}, io amp {}; \
             network MB {} (amp {}; replication MB {}, index images MB {} before packing); \
             L0 MB primary {} backups {}",
            r.workload,
            f(x.backup_cpu_us_per_op),
            m(x.backup_device_read_bytes),
            m(x.backup_device_write_bytes),
            f(x.backup_io_amplification),
            m(x.network_bytes),
            f(x.network_amplification),
            m(x.replication_bytes),
            m(x.index_image_bytes),
            m(x.primary_l0_bytes),
            m(x.backup_l0_bytes)
        );
    }
}

/// Halyard's metrics over each baseline's, one row per (Halyard engine, baseline, mix, phase).
fn ratios_table(s: &mut String, ratios: &[Ratio], ew: usize) {
    let _ = writeln!(s, "\nHalyard / baseline (ops/s: higher is better for Halyard; the others: lower is):");
    let _ = writeln!(
        s,
        "{:<ew$} {:<ew$} {:<8} {:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
        "halyard", "baseline", "mix", "phase", "ops/s", "io amp", "space", "cpu/op", "p99", "dev B/op"
    );
    let mut keys: Vec<(&str, &str, &str, &str)> = Vec::new();
    for r in ratios {
        let k = (r.engine.as_str(), r.baseline.as_str(), r.mix.as_str(), r.workload.as_str());
        if !keys.contains(&k) {
            keys.push(k);
        }
    }
    for (h, b, m, w) in keys {
        let cell = |metric: &str| {
            ratios
                .iter()
                .find(|r| r.engine == h && r.baseline == b && r.mix == m && r.workload == w && r.metric == metric)
                .map_or_else(|| "-".to_string(), |r| format!("{:.2}", r.value))
        };
        let _ = writeln!(
            s,
            "{h:<ew$} {b:<ew$} {m:<8} {w:<7} {:>8} {:>8} {:>8} {:>8} {:>8} {:>8}",
            cell("ops_per_sec"),
            cell("io_amplification"),
            cell("space_amplification"),
            cell("cpu_us_per_op"),
            cell("latency_p99_us"),
            cell("device_bytes_per_op")
        );
    }
}
/// Where /proc/self/io and Halyard's own device counters disagree by more than 10% (and
/// 1 MiB): page-cache reads, other files or counting bugs.
pub fn cross_check(r: &PhaseResult) -> Option<String> {
    let (er, ew) = (r.engine_device_read_bytes?, r.engine_device_write_bytes?);
    let off = |proc: u64, own: u64| {
        let d = proc.abs_diff(own);
        d > 1 << 20 && d as f64 > 0.1 * proc.max(own) as f64
    };
    let (pr, pw) = (r.device_read_bytes?, r.device_write_bytes?);
    (off(pr, er) || off(pw, ew)).then(|| {
        format!(
            "/proc/self/io read {:.1} MB written {:.1} MB, engine counters read {:.1} MB written {:.1} MB",
            mb(pr),
            mb(pw),
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
    let unsupported: Vec<Value> = runs
        .iter()
        .flat_map(|r| {
            r.unsupported
                .iter()
                .map(|(phase, why)| json!({"engine": r.engine.name(), "mix": r.mix, "workload": phase, "reason": why}))
        })
        .collect();
    json!({"config": config, "results": results, "ratios": ratios, "failures": failures, "unsupported": unsupported})
}
