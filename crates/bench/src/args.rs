//! Command-line arguments and their validation into a [`Config`].
//!
//! Lists (`--engines`, `--workloads`, `--mix`) are taken as plain strings and parsed here
//! rather than by clap so that every bad value gets one message naming the accepted ones,
//! and so that the checks can be unit-tested without a process.

use crate::workload::{Dist, Mix, Workload};
use clap::Args;
use serde::Serialize;
use std::path::PathBuf;

/// Arguments of `halyard bench`.
#[derive(Args, Debug, Clone)]
pub struct BenchArgs {
    /// Directory for the engines' data; each engine and mix gets a fresh subdirectory.
    #[arg(long, default_value = "halyard-bench")]
    pub dir: PathBuf,
    /// Engines to run in turn, comma-separated: halyard, rocksdb, blobdb (the last two need
    /// a build with the `rocksdb` feature). `faulty` is a Halyard that fails after 1000 writes,
    /// for testing the failure path.
    #[arg(long, default_value = "halyard")]
    pub engines: String,
    /// YCSB workloads in order, comma-separated: load-a, run-a .. run-f. Run workloads need a
    /// loaded store: load-a is put first when missing.
    #[arg(long, default_value = "load-a,run-a,run-b,run-c,run-d,run-e,run-f")]
    pub workloads: String,
    /// KV size mixes, comma-separated: S, M, L, SD, MD, LD or custom:S%,M%,L% (33 / 148 /
    /// 1228 B pairs with 24 B keys). A custom mix must be the only or the last entry.
    #[arg(long, default_value = "SD")]
    pub mix: String,
    /// Request distribution: zipfian (0.99), uniform or latest. Run D always uses latest.
    #[arg(long, default_value = "zipfian")]
    pub dist: String,
    /// Records inserted by load-a.
    #[arg(long, default_value_t = 100_000)]
    pub records: u64,
    /// Operations of each run workload.
    #[arg(long, default_value_t = 100_000)]
    pub ops: u64,
    /// Client threads sharing one engine.
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// Cache budget of every engine (MiB).
    #[arg(long, default_value_t = 256)]
    pub cache_mb: u64,
    /// L0 / memtable budget of every engine (MiB).
    #[arg(long, default_value_t = 64)]
    pub l0_mb: u64,
    /// Size ratio between consecutive levels.
    #[arg(long, default_value_t = 8)]
    pub growth_factor: u32,
    /// Durability of writes: none, group or always.
    #[arg(long, default_value = "group")]
    pub sync: String,
    /// Seed of the operation sequence (the same on every engine).
    #[arg(long, default_value_t = 1)]
    pub seed: u64,
    /// Write the results as JSON to this file.
    #[arg(long)]
    pub json: Option<PathBuf>,
    /// Write charts to this file (.svg or .png).
    #[arg(long)]
    pub plot: Option<PathBuf>,
    /// No progress bar.
    #[arg(long)]
    pub quiet: bool,
    /// Keep the engines' directories after the run (they are removed by default).
    #[arg(long)]
    pub keep: bool,
}

/// An engine to benchmark.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum EngineKind {
    /// Halyard's engine.
    Halyard,
    /// RocksDB, values in place.
    Rocksdb,
    /// RocksDB with blob files and blob GC.
    Blobdb,
    /// Halyard that fails after a number of writes (tests the failure path).
    Faulty,
}

impl EngineKind {
    /// Name as given on the command line.
    pub fn name(self) -> &'static str {
        match self {
            EngineKind::Halyard => "halyard",
            EngineKind::Rocksdb => "rocksdb",
            EngineKind::Blobdb => "blobdb",
            EngineKind::Faulty => "faulty",
        }
    }
}

/// Durability of writes, mapped onto each engine's own knobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Sync {
    /// No per-write durability (Halyard `SyncMode::None`, RocksDB WAL disabled).
    None,
    /// Group commit (Halyard `SyncMode::Group`, RocksDB WAL without sync).
    Group,
    /// Durable on return (Halyard `SyncMode::Always`, RocksDB `sync = true`).
    Always,
}

/// Validated arguments.
#[derive(Clone, Debug, Serialize)]
pub struct Config {
    /// Parent directory of the engines' directories.
    pub dir: PathBuf,
    /// Engines in order.
    pub engines: Vec<EngineKind>,
    /// Workloads in order.
    pub workloads: Vec<Workload>,
    /// Mixes in order.
    pub mixes: Vec<Mix>,
    /// Request distribution.
    pub dist: Dist,
    /// Records of load-a.
    pub records: u64,
    /// Operations per run workload.
    pub ops: u64,
    /// Client threads.
    pub threads: usize,
    /// Cache budget in bytes.
    pub cache_bytes: u64,
    /// L0 / memtable budget in bytes.
    pub l0_bytes: u64,
    /// Level size ratio.
    pub growth_factor: u32,
    /// Durability.
    pub sync: Sync,
    /// Seed.
    pub seed: u64,
    /// JSON output.
    pub json: Option<PathBuf>,
    /// Chart output.
    pub plot: Option<PathBuf>,
    /// No progress bar.
    pub quiet: bool,
    /// Keep data directories.
    pub keep: bool,
}

fn list(s: &str) -> impl Iterator<Item = &str> {
    s.split(',').map(str::trim).filter(|x| !x.is_empty())
}

/// Parses `--engines`.
pub fn parse_engines(s: &str) -> Result<Vec<EngineKind>, String> {
    let mut v = Vec::new();
    for e in list(s) {
        let k = match e.to_ascii_lowercase().as_str() {
            "halyard" => EngineKind::Halyard,
            "rocksdb" => EngineKind::Rocksdb,
            "blobdb" => EngineKind::Blobdb,
            "faulty" => EngineKind::Faulty,
            _ => return Err(format!("unknown engine `{e}` (expected halyard, rocksdb or blobdb)")),
        };
        if matches!(k, EngineKind::Rocksdb | EngineKind::Blobdb) && !cfg!(feature = "rocksdb") {
            return Err(format!(
                "engine `{e}` needs a build with the `rocksdb` feature (librocksdb-dev, \
                 ROCKSDB_LIB_DIR=/usr/lib/x86_64-linux-gnu)"
            ));
        }
        if v.contains(&k) {
            return Err(format!("engine `{e}` is listed twice"));
        }
        v.push(k);
    }
    if v.is_empty() {
        return Err("--engines is empty".into());
    }
    Ok(v)
}

/// Parses `--workloads`; puts load-a first when only run workloads are given.
pub fn parse_workloads(s: &str) -> Result<Vec<Workload>, String> {
    let mut v = Vec::new();
    for w in list(s) {
        v.push(Workload::parse(w)?);
    }
    if v.is_empty() {
        return Err("--workloads is empty".into());
    }
    if v[0] != Workload::LoadA {
        if v.contains(&Workload::LoadA) {
            return Err("load-a must come first in --workloads: run workloads need a loaded store".into());
        }
        v.insert(0, Workload::LoadA);
    }
    Ok(v)
}

/// Parses `--mix`. `custom:a,b,c` swallows the rest of the list, so it comes last.
pub fn parse_mixes(s: &str) -> Result<Vec<Mix>, String> {
    let mut v = Vec::new();
    let (named, custom) = match s.find("custom:") {
        Some(i) => (&s[..i], Some(&s[i..])),
        None => (s, None),
    };
    for m in list(named) {
        v.push(Mix::parse(m)?);
    }
    if let Some(c) = custom {
        v.push(Mix::parse(c)?);
    }
    if v.is_empty() {
        return Err("--mix is empty".into());
    }
    Ok(v)
}

impl Config {
    /// Checks the arguments.
    pub fn from_args(a: &BenchArgs) -> Result<Config, String> {
        let dist = Dist::parse(&a.dist)?;
        let sync = match a.sync.to_ascii_lowercase().as_str() {
            "none" => Sync::None,
            "group" => Sync::Group,
            "always" => Sync::Always,
            s => return Err(format!("unknown --sync `{s}` (expected none, group or always)")),
        };
        if a.records == 0 {
            return Err("--records must be at least 1".into());
        }
        if a.threads == 0 || a.threads > 1024 {
            return Err(format!("--threads {} must be in 1..=1024", a.threads));
        }
        if a.cache_mb == 0 {
            return Err("--cache-mb must be at least 1".into());
        }
        if a.l0_mb == 0 || a.l0_mb > 4096 {
            return Err(format!("--l0-mb {} must be in 1..=4096", a.l0_mb));
        }
        if !(2..=100).contains(&a.growth_factor) {
            return Err(format!("--growth-factor {} must be in 2..=100", a.growth_factor));
        }
        if let Some(p) = &a.plot {
            let ext = p.extension().and_then(|e| e.to_str()).unwrap_or("").to_ascii_lowercase();
            if ext != "svg" && ext != "png" {
                return Err(format!("--plot {}: the file name must end in .svg or .png", p.display()));
            }
        }
        Ok(Config {
            dir: a.dir.clone(),
            engines: parse_engines(&a.engines)?,
            workloads: parse_workloads(&a.workloads)?,
            mixes: parse_mixes(&a.mix)?,
            dist,
            records: a.records,
            ops: a.ops,
            threads: a.threads,
            cache_bytes: a.cache_mb << 20,
            l0_bytes: a.l0_mb << 20,
            growth_factor: a.growth_factor,
            sync,
            seed: a.seed,
            json: a.json.clone(),
            plot: a.plot.clone(),
            quiet: a.quiet,
            keep: a.keep,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::Parser;

    #[derive(Parser)]
    struct Cli {
        #[command(flatten)]
        a: BenchArgs,
    }

    fn cfg(args: &[&str]) -> Result<Config, String> {
        let cli =
            Cli::try_parse_from(std::iter::once("bench").chain(args.iter().copied())).map_err(|e| e.to_string())?;
        Config::from_args(&cli.a)
    }

    #[test]
    fn defaults_are_valid() {
        let c = cfg(&[]).unwrap();
        assert_eq!(c.engines, vec![EngineKind::Halyard]);
        assert_eq!(c.workloads.len(), 7);
        assert_eq!(c.sync, Sync::Group);
    }

    #[test]
    fn bad_values_are_named() {
        let e = cfg(&["--engines", "halyard,leveldb"]).unwrap_err();
        assert!(e.contains("leveldb"), "{e}");
        let e = cfg(&["--workloads", "load-a,run-z"]).unwrap_err();
        assert!(e.contains("run-z"), "{e}");
        let e = cfg(&["--mix", "XL"]).unwrap_err();
        assert!(e.contains("XL"), "{e}");
        let e = cfg(&["--mix", "custom:50,60,10"]).unwrap_err();
        assert!(e.contains("100"), "{e}");
        let e = cfg(&["--dist", "pareto"]).unwrap_err();
        assert!(e.contains("pareto"), "{e}");
        let e = cfg(&["--sync", "sometimes"]).unwrap_err();
        assert!(e.contains("sometimes"), "{e}");
        assert!(cfg(&["--threads", "0"]).unwrap_err().contains("--threads"));
        assert!(cfg(&["--records", "0"]).unwrap_err().contains("--records"));
        assert!(cfg(&["--growth-factor", "1"]).unwrap_err().contains("--growth-factor"));
        assert!(cfg(&["--plot", "x.pdf"]).unwrap_err().contains(".svg"));
        assert!(cfg(&["--engines", "halyard,halyard"]).unwrap_err().contains("twice"));
        assert!(cfg(&["--records", "lots"]).is_err());
        assert!(cfg(&["--workloads", "run-a,load-a"]).unwrap_err().contains("first"));
    }

    #[test]
    fn lists_parse() {
        let c = cfg(&["--mix", "SD,MD,custom:10%,20%,70%", "--workloads", "run-c,run-e"]).unwrap();
        assert_eq!(c.mixes.len(), 3);
        assert_eq!(c.mixes[2].percent, [10, 20, 70]);
        assert_eq!(c.workloads, vec![Workload::LoadA, Workload::RunC, Workload::RunE]);
    }

    #[cfg(not(feature = "rocksdb"))]
    #[test]
    fn rocksdb_needs_the_feature() {
        assert!(cfg(&["--engines", "halyard,rocksdb"]).unwrap_err().contains("feature"));
    }
}
