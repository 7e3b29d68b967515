//! Where data moves after it is written: compactions (L0 to L1 and level to level, with the
//! medium log merged in place) and garbage collection of the large log.

pub(crate) mod compaction;
pub(crate) mod gc;
