//! Halyard's engine.

use super::api::{Engine, EngineConfig, EngineStats};
use crate::args::Sync;
use halyard_engine::{Db, Options, ScanOptions, SyncMode};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};

/// Names of `Stats::stalls`' buckets among the engine counters.
pub(crate) const STALL_BUCKETS: [&str; 5] =
    ["stalls_under_1ms", "stalls_1_10ms", "stalls_10_100ms", "stalls_100ms_1s", "stalls_1s_or_more"];

/// Halyard, optionally failing after a number of writes (to test the failure path).
pub(super) struct Halyard {
    db: Db,
    opts: Options,
    fail_after: Option<u64>,
    writes: AtomicU64,
}

impl Halyard {
    pub(super) fn open(dir: &Path, cfg: &EngineConfig, fail_after: Option<u64>) -> Result<Halyard, String> {
        let defaults = Options::default();
        let opts = Options {
            gc_threshold: cfg.gc_threshold.unwrap_or(defaults.gc_threshold),
            cache_bytes: (cfg.cache_bytes - cfg.lsm_bypass_bytes) as usize,
            lsm_bypass_bytes: cfg.lsm_bypass_bytes as usize,
            l0_bytes: cfg.l0_bytes as usize,
            dranges: cfg.dranges.unwrap_or(defaults.dranges),
            l0_merge_parts: cfg.l0_merge_parts.unwrap_or(defaults.l0_merge_parts),
            growth_factor: cfg.growth_factor,
            sync: match cfg.sync {
                Sync::None => SyncMode::None,
                Sync::Group => SyncMode::Group,
                Sync::Always => SyncMode::Always,
            },
            direct_io: true,
            bloom_bits_per_key: 10,
            ..Options::default()
        };
        let db = Db::open(dir, opts.clone()).map_err(|e| format!("open {}: {e}", dir.display()))?;
        Ok(Halyard { db, opts, fail_after, writes: AtomicU64::new(0) })
    }
}

impl Engine for Halyard {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        if let Some(n) = self.fail_after {
            if self.writes.fetch_add(1, Relaxed) >= n {
                return Err(format!("injected failure after {n} writes"));
            }
        }
        self.db.put(key, value).map_err(|e| e.to_string())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
        self.db.get(key).map(|v| v.map(|v| v.len())).map_err(|e| e.to_string())
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<(usize, u64), String> {
        let (mut n, mut bytes) = (0, 0);
        for kv in self.db.scan_with(start.., ScanOptions { reverse: false, limit: Some(len) }) {
            let (k, v) = kv.map_err(|e| e.to_string())?;
            n += 1;
            bytes += (k.len() + v.len()) as u64;
        }
        Ok((n, bytes))
    }

    fn stats(&self) -> EngineStats {
        let s = self.db.stats();
        EngineStats {
            device_read_bytes: Some(s.device_read_bytes),
            device_write_bytes: Some(s.device_write_bytes),
            stall_seconds: s.stall_seconds,
            server: None,
            backup: None,
            counters: s
                .read_bytes_by
                .iter()
                .map(|(k, v)| (format!("read_bytes.{k}"), *v))
                .chain(s.write_bytes_by.iter().map(|(k, v)| (format!("write_bytes.{k}"), *v)))
                .chain([
                    ("cache_hits".to_string(), s.cache_hits),
                    ("cache_misses".to_string(), s.cache_misses),
                    ("row_hits".to_string(), s.row_hits),
                    ("row_misses".to_string(), s.row_misses),
                    ("compactions".to_string(), s.compactions),
                    ("warmed_leaves".to_string(), s.warmed_leaves),
                    ("compaction_cached_bytes".to_string(), s.compaction_cached_bytes),
                    ("l0_versions_dropped".to_string(), s.l0_versions_dropped),
                    ("gc_segments".to_string(), s.gc_segments),
                    ("gc_known_segments".to_string(), s.gc_known_segments),
                    ("gc_bytes_moved".to_string(), s.gc_bytes_moved),
                    ("syncs".to_string(), s.syncs),
                    ("bypass_hits".to_string(), s.bypass_hits),
                    ("bypass_fallbacks".to_string(), s.bypass_fallbacks),
                    ("drange_reorganisations".to_string(), s.drange_reorganisations),
                ])
                .chain(STALL_BUCKETS.iter().zip(s.stalls).map(|(name, n)| (name.to_string(), n)))
                .collect(),
            gauges: [
                ("l0_log_segments", s.log_segments[0]),
                ("medium_log_segments", s.log_segments[1]),
                ("large_log_segments", s.log_segments[2]),
                ("large_garbage_bytes", s.large_garbage_bytes),
                ("space_allocated_bytes", s.space_allocated_bytes),
                ("file_bytes", s.file_bytes),
                ("l0_bytes", s.l0_bytes),
                ("cache_bytes", s.cache_bytes),
                ("bypass_slots", s.bypass_slots),
                ("bypass_bytes", s.bypass_bytes),
                ("dranges", s.dranges),
                ("l0_merge_parts", s.l0_merge_parts),
                // Nova-LSM's load imbalance of the last L0 table, in millionths.
                ("drange_load_imbalance_ppm", (s.drange_load_imbalance * 1e6).round() as u64),
            ]
            .into_iter()
            .map(|(k, v)| (k.to_string(), v))
            .chain(s.levels.iter().enumerate().flat_map(|(i, l)| {
                [
                    (format!("L{}.ssts", i + 1), l.ssts as u64),
                    (format!("L{}.stored_bytes", i + 1), l.stored_bytes),
                    (format!("L{}.full_bytes", i + 1), l.full_bytes),
                ]
            }))
            .collect(),
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        let o = &self.opts;
        let mut v: Vec<(String, String)> = [
            ("cache_bytes", o.cache_bytes.to_string()),
            ("lsm_bypass_bytes", o.lsm_bypass_bytes.to_string()),
            ("l0_bytes", o.l0_bytes.to_string()),
            (
                "max_l0_log_bytes",
                o.max_l0_log_bytes
                    .map_or_else(|| format!("{} (2 x l0_bytes)", 2 * o.l0_bytes as u64), |b| b.to_string()),
            ),
            ("growth_factor", o.growth_factor.to_string()),
            ("max_levels", o.max_levels.to_string()),
            ("sync", format!("{:?}", o.sync)),
            ("group_commit_ms", o.group_commit_ms.to_string()),
            ("direct_io", format!("{} (effective: {})", o.direct_io, self.db.stats().direct_io)),
            ("compression", "none (Halyard does not compress)".into()),
            ("bloom_bits_per_key", o.bloom_bits_per_key.to_string()),
            ("segment_bytes", o.segment_bytes.to_string()),
            ("node_bytes", o.node_bytes.to_string()),
            ("data_files", o.data_files.to_string()),
            ("small_threshold", o.small_threshold.to_string()),
            ("large_threshold", o.large_threshold.to_string()),
            ("medium_placement", format!("{:?}", o.medium_placement)),
            ("gc_threshold", o.gc_threshold.to_string()),
            ("gc_interval_ms", o.gc_interval_ms.to_string()),
            ("log_chunk_bytes", o.log_chunk_bytes.to_string()),
            ("compaction_threads", o.compaction_threads.to_string()),
            ("dranges", o.dranges.to_string()),
            ("l0_merge_parts", o.l0_merge_parts.to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect();
        if let Some(n) = self.fail_after {
            v.push(("fail_after_writes".into(), n.to_string()));
        }
        v
    }
}
