//! What a replication primary offers beyond the live stream ([`crate::ShipListener`]): its
//! logs and levels as they are now, for a backup that catches up.

use crate::aligned::AlignedBuf;
use crate::catalog::SstInfo;
use crate::db::Db;
use crate::device::IoKind;
use crate::error::{Error, Result};
use crate::logtail::LogKind;

impl Db {
    /// The segments of a region's log with their salts, oldest first (for shipping a whole
    /// log to a new backup).
    pub fn log_segments(&self, region: u32, log: LogKind) -> Result<Vec<(u32, u32)>> {
        let meta = self.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.logs[log as usize].iter().map(|s| (s.seg, s.salt)).collect())
    }

    /// Reads a whole segment image (after writing out the region's log tails, so that a
    /// live log segment is read as far as it was appended).
    pub fn read_segment(&self, region: u32, seg: u32) -> Result<Vec<u8>> {
        let h = self.region(region)?;
        {
            let mut w = h.region.w.lock();
            h.region.write_out(&mut w)?;
        }
        let dev = &self.inner.sh.dev;
        let mut buf = AlignedBuf::new(dev.seg_bytes() as usize);
        dev.read_into(dev.seg_base(seg), &mut buf, IoKind::Read)?;
        Ok(buf.to_vec())
    }

    /// The SSTs of a region per level (L1 first), as a primary would ship them to a new backup.
    pub fn level_ssts(&self, region: u32) -> Result<Vec<Vec<SstInfo>>> {
        let meta = self.inner.sh.manifest.region(region).ok_or(Error::NoSuchRegion(region))?;
        Ok(meta.levels)
    }
}
