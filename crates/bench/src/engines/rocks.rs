//! RocksDB and BlobDB (RocksDB with blob files and blob GC) through the `rocksdb` crate,
//! configured like Halyard: same cache, L0 and level budgets, direct I/O, no compression,
//! Bloom filters of 10 bits per key, equivalent durability.

use super::api::{Engine, EngineConfig, EngineStats};
use crate::args::Sync;
use crate::workload::KEY_BYTES;
use rocksdb::{BlockBasedOptions, Cache, DBCompressionType, Options, ReadOptions, WriteOptions, DB};
use std::path::Path;

/// Halyard's large threshold (key + value bytes); BlobDB's `min_blob_size` counts the value
/// only, so it gets this minus the key size and the same pairs go to a log in both engines.
const LARGE_THRESHOLD: u64 = 1024;
/// Halyard's B+-tree node size: RocksDB's data blocks get the same size so that a cache
/// miss costs one equal-sized read in both.
const BLOCK_BYTES: usize = 8 << 10;

pub(super) struct Rocks {
    db: DB,
    wopts: WriteOptions,
    settings: Vec<(String, String)>,
}

impl Rocks {
    pub(super) fn open(dir: &Path, cfg: &EngineConfig, blob: bool) -> Result<Rocks, String> {
        let mut s: Vec<(String, String)> = Vec::new();
        let mut o = Options::default();
        o.create_if_missing(true);
        o.set_use_direct_reads(true);
        o.set_use_direct_io_for_flush_and_compaction(true);
        set(&mut s, "use_direct_reads", "true".into());
        set(&mut s, "use_direct_io_for_flush_and_compaction", "true".into());
        o.set_compression_type(DBCompressionType::None);
        set(&mut s, "compression", "none".into());
        level_options(&mut o, cfg, &mut s);
        let cache = Cache::new_lru_cache(cfg.cache_bytes as usize);
        table_options(&mut o, &cache, cfg, &mut s);
        if blob {
            blob_options(&mut o, cfg, &mut s);
        }
        let wopts = write_options(cfg, &mut s);
        let db = DB::open(&o, dir).map_err(|e| format!("open {}: {e}", dir.display()))?;
        if let Some(f) = options_file(dir) {
            s.push(("OPTIONS file".into(), f));
        }
        Ok(Rocks { db, wopts, settings: s })
    }
}

/// Records a setting for the report.
fn set(s: &mut Vec<(String, String)>, k: &str, v: String) {
    s.push((k.to_string(), v));
}

/// Memtables and level sizes as Halyard's L0 and levels.
fn level_options(o: &mut Options, cfg: &EngineConfig, s: &mut Vec<(String, String)>) {
    // Halyard has one mutable and at most one immutable L0 table of l0_bytes each.
    o.set_write_buffer_size(cfg.l0_bytes as usize);
    o.set_max_write_buffer_number(2);
    set(s, "write_buffer_size", cfg.l0_bytes.to_string());
    set(s, "max_write_buffer_number", "2".into());
    // Level 1 holds l0 * growth, as Halyard's L1 does.
    o.set_max_bytes_for_level_base(cfg.l0_bytes * u64::from(cfg.growth_factor));
    o.set_max_bytes_for_level_multiplier(f64::from(cfg.growth_factor));
    o.set_target_file_size_base(cfg.l0_bytes);
    set(s, "max_bytes_for_level_base", (cfg.l0_bytes * u64::from(cfg.growth_factor)).to_string());
    set(s, "max_bytes_for_level_multiplier", cfg.growth_factor.to_string());
    set(s, "target_file_size_base", cfg.l0_bytes.to_string());
    set(s, "level0_file_num_compaction_trigger", "4 (default)".into());
    set(s, "max_background_jobs", "2 (default)".into());
}

/// The block cache, filters and block size.
fn table_options(o: &mut Options, cache: &Cache, cfg: &EngineConfig, s: &mut Vec<(String, String)>) {
    let mut t = BlockBasedOptions::default();
    t.set_block_cache(cache);
    // Index and filter blocks live in the cache, charged to the budget. Halyard keeps its
    // SST index nodes and filters pinned outside its cache (about 1% of the data, reported
    // as `pinned_bytes`), so this leaves RocksDB a few percent less cache for data;
    // docs/performance.md says so next to the figures.
    t.set_cache_index_and_filter_blocks(true);
    t.set_pin_l0_filter_and_index_blocks_in_cache(true);
    t.set_bloom_filter(10.0, false);
    t.set_block_size(BLOCK_BYTES);
    o.set_block_based_table_factory(&t);
    set(s, "block_cache (LRU) bytes", cfg.cache_bytes.to_string());
    set(s, "cache_index_and_filter_blocks", "true (pinned for L0)".into());
    set(s, "bloom_filter", "10 bits/key, full filter".into());
    set(s, "block_size", BLOCK_BYTES.to_string());
}

/// BlobDB: values of large pairs in blob files, with blob GC.
fn blob_options(o: &mut Options, cfg: &EngineConfig, s: &mut Vec<(String, String)>) {
    let min_blob = LARGE_THRESHOLD - KEY_BYTES as u64;
    o.set_enable_blob_files(true);
    o.set_min_blob_size(min_blob);
    // Blob files the size of a memtable flush, as RocksDB's tuning guide suggests;
    // its default of 256 MiB would leave GC nothing to do at benchmark sizes.
    o.set_blob_file_size(cfg.l0_bytes);
    o.set_blob_compression_type(DBCompressionType::None);
    o.set_enable_blob_gc(true);
    set(s, "enable_blob_files", "true".into());
    set(s, "min_blob_size", format!("{min_blob} (key+value >= {LARGE_THRESHOLD} B with {KEY_BYTES} B keys)"));
    set(s, "blob_file_size", cfg.l0_bytes.to_string());
    set(s, "blob_compression", "none".into());
    set(s, "enable_blob_garbage_collection", "true".into());
    set(s, "blob_garbage_collection_age_cutoff", "0.25 (default)".into());
}

/// Durability equivalent to Halyard's sync mode.
fn write_options(cfg: &EngineConfig, s: &mut Vec<(String, String)>) -> WriteOptions {
    let mut wopts = WriteOptions::default();
    match cfg.sync {
        Sync::Always => wopts.set_sync(true),
        Sync::Group => wopts.set_sync(false),
        Sync::None => wopts.disable_wal(true),
    }
    let text = match cfg.sync {
        Sync::Always => "sync=true",
        Sync::Group => "sync=false, WAL on",
        Sync::None => "WAL disabled",
    };
    set(s, "write_options", text.into());
    wopts
}

/// The full OPTIONS file RocksDB wrote, for the JSON report.
fn options_file(dir: &Path) -> Option<String> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .ok()?
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("OPTIONS-"))
        .collect();
    names.sort();
    std::fs::read_to_string(dir.join(names.last()?)).ok()
}

/// "Cumulative stall: 00:00:1.234 H:M:S, 0.5 percent" from `rocksdb.dbstats`.
fn parse_stall(stats: &str) -> Option<f64> {
    let line = stats.lines().find(|l| l.trim_start().starts_with("Cumulative stall:"))?;
    let hms = line.split_whitespace().nth(2)?;
    let p: Vec<f64> = hms.split(':').map(|x| x.parse().ok()).collect::<Option<_>>()?;
    match p.as_slice() {
        [h, m, s] => Some(h * 3600.0 + m * 60.0 + s),
        _ => None,
    }
}

impl Engine for Rocks {
    fn put(&self, key: &[u8], value: &[u8]) -> Result<(), String> {
        self.db.put_opt(key, value, &self.wopts).map_err(|e| e.to_string())
    }

    fn get(&self, key: &[u8]) -> Result<Option<usize>, String> {
        self.db.get_pinned(key).map(|v| v.map(|v| v.len())).map_err(|e| e.to_string())
    }

    fn scan(&self, start: &[u8], len: usize) -> Result<(usize, u64), String> {
        let mut it = self.db.raw_iterator_opt(ReadOptions::default());
        it.seek(start);
        let (mut n, mut bytes) = (0, 0u64);
        while n < len && it.valid() {
            bytes += (it.key().map_or(0, |k| k.len()) + it.value().map_or(0, |v| v.len())) as u64;
            n += 1;
            it.next();
        }
        it.status().map_err(|e| e.to_string())?;
        Ok((n, bytes))
    }

    fn stats(&self) -> EngineStats {
        let stall = self.db.property_value("rocksdb.dbstats").ok().flatten().as_deref().and_then(parse_stall);
        EngineStats {
            device_read_bytes: None,
            device_write_bytes: None,
            stall_seconds: stall.unwrap_or(0.0),
            server: None,
            backup: None,
            counters: Default::default(),
            gauges: Default::default(),
        }
    }

    fn settings(&self) -> Vec<(String, String)> {
        self.settings.clone()
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn stall_line_parses() {
        let s = "** DB Stats **\nUptime(secs): 1.0 total\nCumulative stall: 00:01:2.500 H:M:S, 3.0 percent\n";
        assert_eq!(super::parse_stall(s), Some(62.5));
    }
}
