//! The index: the L0 table in memory, SSTs on the device, the caches in front of them, and
//! the versions of a region's levels that readers hold.

pub(crate) mod bypass;
pub(crate) mod cache;
pub(crate) mod memtable;
pub(crate) mod pointers;
pub(crate) mod rowcache;
pub(crate) mod sst;
pub(crate) mod view;
