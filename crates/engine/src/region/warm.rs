//! Warming the cache after open. Direct I/O keeps the page cache out of the store, so a
//! restarted store starts cold and its first reads each wait for a random device read (on
//! this class of device: 4 KiB in ~60 µs, against 1 MiB in ~0.6 ms sequentially). A
//! background pass reads what the cache has room for in whole segments instead: every SST,
//! from L1 down, then the values of the medium log's runs and the large log's live records,
//! newest segment first. It never evicts (a store whose data outgrows its cache keeps what its
//! readers load), and stops at close.

use crate::catalog::LogKind;
use crate::device::IoKind;
use crate::error::Result;
use crate::format::record;
use crate::region::{value_cache_key, Region};
use crate::tree::cache::ENTRY_OVERHEAD;
use std::sync::atomic::Ordering::Relaxed;
use std::sync::Arc;

/// Warms the cache with `r`'s SSTs and log values until it is full or `stop` says so;
/// `opened_at` is the last LSN recovery left. Counts what the cache grew by, not what was
/// inserted: the cache's shards fill unevenly, so an insert into a full shard may evict even
/// while the cache as a whole has room.
pub(crate) fn warm_region(r: &Region, opened_at: u64, stop: &dyn Fn() -> bool) -> Result<()> {
    let (ctx, warmed) = (&r.sh().ctx, &r.sh().counters.warm_bytes);
    for sst in r.view().version.levels.iter().flatten() {
        if stop() || ctx.cache.room() == 0 {
            return Ok(());
        }
        let room = ctx.cache.room();
        sst.warm(ctx)?;
        warmed.fetch_add(room.saturating_sub(ctx.cache.room()), Relaxed);
    }
    let Some(meta) = r.sh().manifest.region(r.id()) else { return Ok(()) };
    // A medium run is written whole before the catalog names it. A large-log segment is
    // taken up to its fill and seal, and the tail up to what recovery left: past them a
    // restart may have dropped records that new writes then replace at the same place, under
    // the same salt.
    let medium = meta.log(LogKind::Medium).iter().rev().map(|s| (s, None));
    let bound = |s: &crate::catalog::LogSeg| Some((s.sealed.min(opened_at), s.written(ctx.dev.seg_bytes()) as usize));
    let large = meta.log(LogKind::Large).iter().rev().map(|s| (s, bound(s)));
    for (s, bound) in medium.chain(large) {
        if stop() || ctx.cache.room() < ctx.dev.seg_bytes() {
            return Ok(());
        }
        let room = ctx.cache.room();
        warm_log_segment(r, s.seg, s.salt, bound)?;
        warmed.fetch_add(room.saturating_sub(ctx.cache.room()), Relaxed);
    }
    Ok(())
}

/// Caches the values of the records of one log segment; of a large-log segment (`bound`: its
/// seal and fill), those within them and not known dead (the medium log's runs have no such
/// record, and their dead values age out). Returns the bytes cached.
fn warm_log_segment(r: &Region, seg: u32, salt: u32, bound: Option<(u64, usize)>) -> Result<u64> {
    let (ctx, dev) = (&r.sh().ctx, &r.sh().dev);
    let base = dev.seg_base(seg);
    let img = dev.read(base, dev.seg_bytes() as usize, IoKind::Warm)?;
    let mut cached = 0;
    for (off, rec) in record::scan(&img, salt) {
        if let Some((sealed, fill)) = bound {
            if off + rec.len > fill || rec.lsn > sealed {
                break;
            }
            if r.dead().is_dead(seg, salt, off as u32) {
                continue;
            }
        }
        let key = value_cache_key(base + off as u64, salt);
        if !ctx.cache.contains(key) {
            ctx.cache.insert(key, Arc::new(rec.value.to_vec()));
            cached += (rec.value.len() + ENTRY_OVERHEAD) as u64;
        }
    }
    Ok(cached)
}
