//! The verify dump (`halyard admin verify`, `crates/admin/docs/admin.md` §3): a page of a
//! region's logical contents — keys, versions, values — as this node holds it, whatever its
//! role. On a Send-Index backup that is its levels overlaid with the records of its replicated
//! logs and buffers beyond them (what promotion would rebuild); on a Build-Index backup, the
//! region overlaid with the complete batches received but not applied; elsewhere the region as
//! it reads.

use super::build::build_overlay;
use super::{log_kind, Replica};
use crate::{Error, Result};
use halyard_admin::Msg as AdminMsg;
use halyard_engine::{Db, Overlay, TailImage};
use std::ops::Bound;
use std::sync::Arc;

/// (key, version, value; None for a delete).
type Entry = (Vec<u8>, u64, Option<Vec<u8>>);

/// A verify Dump's answer, read with the region at rest: its streams apply nothing more until
/// this is dropped (after the reply is sent).
pub(crate) struct AtRest {
    /// The page, or why it cannot be read (for a Reject).
    pub(crate) page: Result<AdminMsg>,
    _gate: Option<tokio::sync::OwnedRwLockWriteGuard<()>>,
}

impl Replica {
    /// Answers a Dump: what a stream accepted counts as held here, so that is installed first,
    /// and the stream applies no more until the page is sent (a sealed segment's buffer is
    /// gone from the tails before its write job has run). Fails when the blocking read itself
    /// did.
    pub(crate) async fn dump_at_rest(
        self: &Arc<Self>,
        region: u32,
        after: Option<Vec<u8>>,
        limit: u32,
    ) -> Result<AtRest> {
        let (gate, settled) = match self.region(region) {
            Some(r) => {
                let gate = r.gate.clone().write_owned().await;
                (Some(gate), r.settle().await)
            }
            None => (None, Ok(())),
        };
        let page = match settled {
            Ok(()) => {
                let me = self.clone();
                tokio::task::spawn_blocking(move || me.dump(&me.db, region, after, limit))
                    .await
                    .map_err(|e| Error::Protocol(e.to_string()))?
            }
            Err(e) => Err(e),
        };
        Ok(AtRest { page, _gate: gate })
    }

    /// One page of a region's logical contents after key `after`, at most `limit` pairs (0:
    /// 1000, at most 10 000) and about 8 MiB.
    fn dump(&self, db: &Db, region: u32, after: Option<Vec<u8>>, limit: u32) -> Result<AdminMsg> {
        let h = db.region(region)?;
        let start = match &after {
            Some(k) => Bound::Excluded(k.as_slice()),
            None => Bound::Unbounded,
        };
        let limit = if limit == 0 { 1000 } else { limit.min(10_000) } as usize;
        let overlay = Arc::new(self.overlay(db, region)?);
        // The levels' scan and the logs' overlay, merged in key order; the overlay is newer
        // where both hold a key. The levels' versions it supersedes or a range delete of it
        // hides are left out unread: they are not there once promoted, and their values may
        // lie in large-log segments the primary's GC has collected since (it re-appended the
        // live ones, which the overlay holds).
        let mut pairs =
            overlay.pairs.clone().into_iter().filter(|(k, _)| after.as_ref().is_none_or(|a| k > a)).peekable();
        let o = overlay.clone();
        let skip = Box::new(move |k: &[u8]| o.pairs.contains_key(k) || o.hides(k));
        let mut scan = h.scan_versions((start, Bound::<&[u8]>::Unbounded)).skipping(skip).peekable();
        let mut next = || -> Result<Option<Entry>> {
            let take_overlay = match (scan.peek(), pairs.peek()) {
                (_, None) => false,
                (None, Some(_)) => true,
                (Some(Err(_)), _) => false,
                (Some(Ok((k, ..))), Some((o, _))) => o <= k,
            };
            if take_overlay {
                let Some((k, (lsn, v))) = pairs.next() else { return Ok(None) };
                return Ok(Some((k, lsn, v)));
            }
            match scan.next() {
                Some(x) => {
                    let (k, lsn, v) = x?;
                    Ok(Some((k, lsn, Some(v))))
                }
                None => Ok(None),
            }
        };
        // A page stays well inside the frame limit whatever the pair sizes.
        let (mut pairs, mut bytes, mut more) = (Vec::new(), 0usize, false);
        while let Some((k, lsn, v)) = next()? {
            let Some(v) = v else { continue };
            if pairs.len() == limit || (bytes + k.len() + v.len() > (8 << 20) && !pairs.is_empty()) {
                more = true;
                break;
            }
            bytes += k.len() + v.len();
            pairs.push((k, lsn, v));
        }
        Ok(AdminMsg::DumpPage { region, lsn: h.lsn(), pairs, more })
    }

    /// What the region holds beyond its levels: a Send-Index copy's replicated logs and
    /// buffers (the buffers staged first), a Build-Index backup's batches not yet applied;
    /// nothing on a node that is not a backup of the region.
    fn overlay(&self, db: &Db, region: u32) -> Result<Overlay> {
        match self.region(region) {
            Some(r) if r.takes_segments() => {
                let bufs = r.bufs.lock();
                for b in bufs.values() {
                    db.replication().backup_stage_tail(region, b.seg, b.salt, &b.bytes)?;
                }
                let tails: Vec<TailImage<'_>> = bufs
                    .iter()
                    .filter_map(|(log, b)| {
                        Some(TailImage { log: log_kind(*log).ok()?, primary: b.seg, salt: b.salt, bytes: &b.bytes })
                    })
                    .collect();
                Ok(db.replication().backup_overlay(region, &tails)?)
            }
            Some(r) => Ok(build_overlay(&r, db.now_ms())),
            None => Ok(Overlay::default()),
        }
    }
}
