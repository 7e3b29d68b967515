//! The command table's entries: each command's name, arity, flags, key positions and
//! handler, as Redis describes its commands. Each module of commands has a table of its own;
//! `commands` assembles them (`install`) into the one that requests are looked up in.

use crate::resp::Reply;
use crate::state::{Session, Shared};
use std::sync::OnceLock;

/// Runs a command whose arity and flags were checked; `args` starts with the name.
pub type Handler = fn(&Shared, &mut Session, &[&[u8]]) -> Reply;

/// One entry of the command table.
pub struct Command {
    /// Lower case: the name metrics and error messages use.
    pub name: &'static str,
    /// Redis' convention: positive = exactly this many arguments including the name,
    /// negative = at least that many.
    pub arity: i32,
    /// [`WRITE`], [`READONLY`], [`NO_AUTH`].
    pub flags: u8,
    /// Where its keys are: what cluster mode routes it by, and what COMMAND reports.
    pub keys: Keys,
    /// The command itself.
    pub handler: Handler,
}

/// The key positions of a command (Redis' key specs: first, last, step), in the one place that
/// routing, forwarding and COMMAND INFO read them from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Keys {
    /// No key (connection and server commands).
    None,
    /// The first argument.
    First,
    /// The second argument (OBJECT ENCODING key).
    Second,
    /// Every argument.
    All,
    /// Every other argument from the first (MSET's key-value pairs).
    Pairs,
    /// The first two arguments (RENAME, COPY, SMOVE, LMOVE).
    Two,
    /// Every argument but the last (BLPOP's keys before its timeout).
    AllButLast,
    /// A count at argument `at` and that many keys after it, and the first argument too when
    /// `dest` (ZUNIONSTORE dest numkeys key..., ZUNION numkeys key..., EVAL script numkeys key...).
    CountAt {
        /// The count's argument.
        at: u8,
        /// The first argument is a key (a destination).
        dest: bool,
    },
    /// The first half of the arguments after `STREAMS` (XREAD, XREADGROUP).
    Streams,
    /// The whole key space: a cluster answers it region by region.
    Whole,
    /// The key space of the region a forwarded command names (cluster-internal).
    Region,
    /// No key, but every node of a cluster takes part (PUBLISH).
    Nodes,
}

impl Keys {
    /// Redis' (first, last, step) for COMMAND.
    pub fn spec(self) -> (i64, i64, i64) {
        match self {
            Keys::First => (1, 1, 1),
            Keys::Second => (2, 2, 1),
            Keys::All => (1, -1, 1),
            Keys::Pairs => (1, -1, 2),
            Keys::Two => (1, 2, 1),
            Keys::AllButLast => (1, -2, 1),
            Keys::CountAt { dest: true, .. } => (1, 1, 1),
            Keys::None
            | Keys::Whole
            | Keys::Region
            | Keys::Nodes
            | Keys::Streams
            | Keys::CountAt { dest: false, .. } => (0, 0, 0),
        }
    }

    /// The keys of `args` (the command's name first).
    pub fn of<'a>(self, args: &[&'a [u8]]) -> smallvec::SmallVec<[&'a [u8]; 4]> {
        let rest = args.get(1..).unwrap_or_default();
        match self {
            Keys::First => rest.first().copied().into_iter().collect(),
            Keys::Second => rest.get(1).copied().into_iter().collect(),
            Keys::All => rest.iter().copied().collect(),
            Keys::Pairs => rest.iter().step_by(2).copied().collect(),
            Keys::Two => rest.iter().take(2).copied().collect(),
            Keys::AllButLast => rest.iter().take(rest.len().saturating_sub(1)).copied().collect(),
            Keys::Streams => {
                let after = rest.iter().position(|a| a.eq_ignore_ascii_case(b"streams")).map_or(0, |i| i + 1);
                let tail = rest.get(after..).unwrap_or_default();
                tail.iter().take(tail.len() / 2).copied().collect()
            }
            Keys::CountAt { at, dest } => {
                let at = usize::from(at);
                let n = args.get(at).and_then(|n| std::str::from_utf8(n).ok()?.parse::<usize>().ok()).unwrap_or(0);
                let keys = args.get(at + 1..).unwrap_or_default().iter().take(n).copied();
                rest.first().copied().filter(|_| dest).into_iter().chain(keys).collect()
            }
            Keys::None | Keys::Whole | Keys::Region | Keys::Nodes => smallvec::SmallVec::new(),
        }
    }
}

/// Changes the keyspace (Redis' `write`). With [`READONLY`] this classifies every keyspace
/// command as Redis does; no check reads the two yet (a read-only replica or per-key routing
/// of RESP requests would).
pub const WRITE: u8 = 1;
/// Reads the keyspace and changes nothing (Redis' `readonly`).
pub const READONLY: u8 = 2;
/// Runs before AUTH on a server with a password (Redis' `no-auth`).
pub const NO_AUTH: u8 = 4;
/// Takes the command gate exclusively itself (EXEC, scripts): not held shared around it.
pub const ATOMIC: u8 = 8;
/// Refused inside MULTI (Redis' `no-multi`).
pub const NO_MULTI: u8 = 16;

impl Command {
    /// Whether `n` arguments (the name included) fit the arity.
    pub fn arity_ok(&self, n: usize) -> bool {
        let want = self.arity.unsigned_abs() as usize;
        if self.arity < 0 {
            n >= want
        } else {
            n == want
        }
    }
}

/// The assembled table.
static TABLE: OnceLock<Table> = OnceLock::new();

/// The assembled table: the modules' tables, and every command by its name (lower case), so
/// that a request's lookup is one hash probe, not a walk of some 200 names.
struct Table {
    tables: &'static [&'static [Command]],
    by_name: std::collections::HashMap<&'static [u8], &'static Command>,
}

/// Assembles the command table from each module's (the first call counts).
pub fn install(tables: &'static [&'static [Command]]) {
    TABLE.get_or_init(|| Table {
        tables,
        by_name: tables.iter().flat_map(|t| t.iter()).map(|c| (c.name.as_bytes(), c)).collect(),
    });
}

/// Every command.
pub fn all() -> impl Iterator<Item = &'static Command> {
    TABLE.get().map(|t| t.tables).unwrap_or_default().iter().flat_map(|t| t.iter())
}

/// The command called `name`, in any case.
pub fn lookup(name: &[u8]) -> Option<&'static Command> {
    let t = TABLE.get()?;
    if name.iter().any(u8::is_ascii_uppercase) {
        t.by_name.get(name.to_ascii_lowercase().as_slice()).copied()
    } else {
        t.by_name.get(name).copied()
    }
}
