//! Promotion (`docs/design.md` §3 step 6, `docs/replication.md` §4 and §5): the old primary is
//! fenced off (the region's epoch raised and stored under its gate, then what its stream
//! already accepted installed), and the region is rebuilt as a primary region from what this
//! backup holds. The admin request that asks for it is answered in `crate::admin`.

use super::build::build_index;
use super::{tail_images, Promoted, Replica};
use crate::wire::Mode;
use crate::{Error, Result};
use std::sync::atomic::Ordering::Relaxed;

impl Replica {
    /// Fences `region`'s old primary off before a promotion at `epoch`: refuses an epoch not
    /// above the region's, stores and raises it under the region's gate (from then on the old
    /// primary's messages are refused), then waits for the jobs of what its stream accepted
    /// before (a job that failed leaves the copy incomplete, and the promotion is refused).
    /// False when this node is not a backup of the region.
    pub(crate) async fn fence_for_promotion(&self, region: u32, epoch: u64) -> Result<bool> {
        let Some(r) = self.region(region) else { return Ok(false) };
        if epoch <= r.epoch.load(Relaxed) {
            return Err(Error::Rejected(format!("promotion epoch {epoch} is not above {}", r.epoch.load(Relaxed))));
        }
        {
            let _gate = r.gate.write().await;
            self.epochs.store(region, epoch)?;
            r.epoch.store(epoch, Relaxed);
        }
        r.settle().await?;
        Ok(true)
    }

    /// Stops being a backup of `region` and rebuilds it as a primary region (docs/design.md §3 step
    /// 6): Send-Index rebuilds L0 from the replicated logs plus the buffers; Build-Index applies
    /// what its buffers hold beyond the commit point. Returns the last LSN, the records not
    /// replayed, and the log tails it used (the other backups adopt them with the Remap).
    pub fn promote_region(&self, region: u32) -> Result<Promoted> {
        let r = self
            .regions
            .lock()
            .remove(&region)
            .ok_or_else(|| Error::Rejected(format!("not a backup of region {region}")))?;
        if (r.mode == Mode::BuildIndex && r.copying.load(Relaxed)) || r.incomplete.load(Relaxed) {
            self.regions.lock().insert(region, r);
            return Err(Error::Rejected(format!(
                "region {region} is still taking its full copy here and cannot lead yet; promote another backup"
            )));
        }
        let tails = r.tails();
        if r.mode == Mode::BuildIndex {
            for log in [0, 2] {
                build_index(&self.db, &r, log, u64::MAX)?;
            }
            let last = self.db.region(region)?.lsn();
            let dropped = r.build.lock().0.len() as u64;
            return Ok(Promoted { last_lsn: last, dropped, tails });
        }
        let p = self.db.replication().promote(region, &tail_images(&tails))?;
        Ok(Promoted { last_lsn: p.last_lsn, dropped: p.dropped_records, tails })
    }
}
