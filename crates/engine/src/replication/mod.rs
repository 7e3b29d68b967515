//! The engine side of replication (docs/design.md §3): a primary's segments read for shipping,
//! and a backup region taking them.

pub(crate) mod backup;
pub(crate) mod resync;
pub(crate) mod ship;

use crate::db::{Db, RegionHandle};
use crate::error::Result;
use crate::log::listener::ShipListener;
use std::sync::Arc;

/// The replication side of a store: the hooks a primary's shipper and a backup's replica use
/// (docs/design.md §3). Ordinary reads and writes never need it.
#[derive(Clone, Copy)]
pub struct Replication<'a> {
    db: &'a Db,
}

impl Db {
    /// The replication hooks of this store.
    pub fn replication(&self) -> Replication<'_> {
        Replication { db: self }
    }
}

impl Replication<'_> {
    /// Creates a region that is a replication backup: it takes shipped segments and edits
    /// only, keeps no L0 and never compacts.
    pub fn create_backup_region(&self, id: u32, start: &[u8], end: Option<&[u8]>) -> Result<RegionHandle> {
        self.db.create_region_with(id, start, end, true)
    }

    /// Whether this store's storage can take segments another store names on it (a backup
    /// then tells its primary to name segments rather than send them).
    pub fn takes_named_segments(&self) -> bool {
        self.db.inner.sh.dev.can_adopt()
    }

    /// Registers the receiver of what a primary must ship (None to remove it).
    pub fn set_ship_listener(&self, l: Option<Arc<dyn ShipListener>>) {
        *self.db.inner.sh.listener.write() = l;
    }
}
