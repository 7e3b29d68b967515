//! `halyard bench`: YCSB workloads against Halyard, RocksDB and BlobDB side by side, and
//! through servers (Halyard over RESP or its native protocol, Redis as a reference).
//!
//! For each mix, each engine in turn gets a fresh directory and the same operation
//! sequence (a function of `--seed`); every phase is measured (throughput, latency, device
//! I/O, space, CPU, stability, stalls, memory) and Halyard's figures are divided by each
//! baseline's. See README.md in this crate.

mod args;
mod engines;
mod measure;
mod plot;
mod report;
mod runner;
mod workload;

pub use args::{BenchArgs, Config};
pub use engines::{set_bench_thread, Engine, EngineConfig, EngineStats, ServerSample};
pub use workload::{fnv64, key, Chooser, Dist, Mix, Op, OpGen, Workload, Zipfian};

/// Runs the benchmark. Engines that fail are reported and the others' results still
/// written; the error then lists the failures (so the exit status is non-zero).
pub fn run(args: &BenchArgs) -> Result<(), String> {
    let cfg = Config::from_args(args)?;
    std::fs::create_dir_all(&cfg.dir).map_err(|e| format!("cannot create --dir {}: {e}", cfg.dir.display()))?;
    // Check the outputs are writable before spending minutes on the runs.
    for p in [&cfg.json, &cfg.plot].into_iter().flatten() {
        std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(p)
            .map_err(|e| format!("cannot write {}: {e}", p.display()))?;
    }
    let mut runs = Vec::new();
    for mix in &cfg.mixes {
        for engine in &cfg.engines {
            runs.push(runner::run_engine(&cfg, engine, mix));
        }
    }
    let ratios = report::ratios(&runs);
    print!("{}", report::table(&cfg, &runs, &ratios));
    let mut errors: Vec<String> = runs
        .iter()
        .filter_map(|r| r.failure.as_ref().map(|(w, e)| format!("{} ({}, {w}) failed: {e}", r.engine.name(), r.mix)))
        .collect();
    if let Some(p) = &cfg.json {
        let doc = report::json(&cfg, &runs, &ratios);
        let text = serde_json::to_string_pretty(&doc).map_err(|e| e.to_string())?;
        if let Err(e) = std::fs::write(p, text + "\n") {
            errors.push(format!("cannot write {}: {e}", p.display()));
        }
    }
    if let Some(p) = &cfg.plot {
        if let Err(e) = plot::draw(p, &runs) {
            errors.push(format!("cannot draw {}: {e}", p.display()));
        }
    }
    if errors.is_empty() {
        Ok(())
    } else {
        Err(errors.join("; "))
    }
}
