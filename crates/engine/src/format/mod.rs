//! The bytes of the formats: log records, B+-tree nodes, Bloom filters and the index entry
//! they encode, their fields written with `halyard_codec` (see `docs/format.md`).

pub(crate) mod bloom;
pub(crate) mod entry;
pub(crate) mod node;
pub(crate) mod rangedel;
pub(crate) mod record;
