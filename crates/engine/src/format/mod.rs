//! The bytes of the formats: little-endian codec, log records, B+-tree nodes, Bloom filters
//! and the index entry they encode (see `docs/format.md`).

pub(crate) mod bloom;
pub(crate) mod codec;
pub(crate) mod entry;
pub(crate) mod node;
pub(crate) mod record;
