//! [`RemoteStorage`]: a store's segments on storage nodes. Each segment is striped over ρ data
//! fragments and a parity fragment ([`crate::stripe`]) on ρ + 1 distinct nodes chosen when
//! the segment is first written ([`placement`]). Every fragment records the segment's
//! placement, so opening a store asks each node which fragments it holds and needs no scan of
//! data. A write goes to every fragment it touches and to the parity before it returns; a
//! fragment a node fails to take moves to another node, rebuilt from the rest. A read that a
//! node fails, or answers "corrupt", is rebuilt from the other fragments and the parity (and a
//! corrupt fragment is rewritten in place). Placements carry a generation, a clock reading in
//! microseconds kept increasing, so the newest placement wins over a stale fragment.

mod adopt;
mod conn;
mod io_path;
mod open;
pub mod placement;
mod rebuild;
mod storage;

pub use adopt::SegRef;
pub use conn::node_usage;
pub use placement::Choice;
pub use storage::{RemoteOptions, RemoteStats, RemoteStorage};
