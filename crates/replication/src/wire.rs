//! The replication streams' messages (byte layouts in `docs/replication.md`). Every message a
//! primary sends names the region and the epoch it leads in; a backup rejects a lower epoch
//! than it has seen. The frame they travel in, and the admin messages that share the port
//! with them, are `halyard-admin`'s ([`halyard_admin::frame`], [`halyard_admin::Msg`]); of
//! those, Reject and Auth belong to streams too and are variants here, encoded by
//! `halyard-admin`.

use crate::error::{Error, Result};
use halyard_admin::frame::{self, count};
use halyard_admin::Msg as AdminMsg;
use halyard_codec::{Reader, Short, Writer};
use halyard_engine::{Inventory, Keep};

pub use halyard_admin::frame::{HEADER, MAGIC, MAX_BODY};

/// The protocol version a primary names in its `Hello`; a backup speaking another one refuses
/// the stream (version 2: segment images are LZ4-packed; 3: one connection carries many
/// regions' streams; 5: a Hello may ask for the backup's inventory, which its HelloOk carries, and
/// an incremental copy starts with Resync instead of Reset; 6: Split; 7: a Remap carries the new
/// primary's levels digest, a Hello may name a region its stream absorbs; 8: the L0 log may
/// hold a split's mark, log record kind 5, which a backup replays as no change).
pub const VERSION: u16 = 9;
/// Segment images (SSTs, medium runs) are sent raw or LZ4-compressed, whichever is smaller.
const RAW: u8 = 0;
const LZ4: u8 = 1;

/// How a backup keeps its copy.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Mode {
    /// Backups install the primary's compaction output (no L0, no compaction).
    SendIndex = 0,
    /// Backups replay records into their own L0 and compact (the papers' baseline).
    BuildIndex = 1,
}

impl Mode {
    /// From the command-line name.
    pub fn parse(s: &str) -> Option<Mode> {
        match s {
            "send-index" => Some(Mode::SendIndex),
            "build-index" => Some(Mode::BuildIndex),
            _ => None,
        }
    }
    /// The command-line name.
    pub fn name(self) -> &'static str {
        match self {
            Mode::SendIndex => "send-index",
            Mode::BuildIndex => "build-index",
        }
    }
}

/// A log tail a Remap carries: (log, primary segment, salt, bytes).
pub type LogTail = (u8, u32, u32, Vec<u8>);

/// The region a merged region's stream takes in (its primary merged `right` into the
/// stream's region, which now ends at `end`): before reporting what it holds, the backup joins
/// its copy of `right` into the region's, or, holding none, widens the region to `end`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Absorb {
    /// The region merged away.
    pub right: u32,
    /// Where the merged region ends (None: the end of the key space).
    pub end: Option<Vec<u8>>,
}

/// One message of a replication stream. Every field's width and meaning is in
/// `docs/replication.md`; `epoch` is the sender's epoch for `region`, `region` the engine
/// region id on both ends.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Primary -> backup, first on a connection: this stream feeds `region` at `epoch`;
    /// `inventory`: a copy follows, say what you hold.
    Hello { version: u16, epoch: u64, region: u32, mode: Mode, inventory: bool, absorb: Option<Absorb> },
    /// Backup -> primary: accepted; the backup holds the region up to `lsn`, and (when asked)
    /// the segments of `held` (empty: nothing worth keeping).
    /// `named`: a copy may name segments on the storage both stores share (`Named`).
    HelloOk { region: u32, lsn: u64, held: Inventory, named: bool },
    /// Bytes appended to log `log` of the primary's segment `seg` at `offset`; `commit` is the
    /// highest LSN every backup has acknowledged (Build-Index backups apply up to it).
    Append {
        epoch: u64,
        region: u32,
        log: u8,
        seg: u32,
        salt: u32,
        offset: u32,
        last_lsn: u64,
        commit: u64,
        bytes: Vec<u8>,
    },
    /// The primary moved on from segment `seg` of log `log`: store the buffer.
    Seal { epoch: u64, region: u32, log: u8, seg: u32, salt: u32 },
    /// A compaction output SST (`info`: `SstInfo::to_bytes`).
    Sst { epoch: u64, region: u32, info: Vec<u8>, bytes: Vec<u8> },
    /// A medium-log segment an L0->L1 compaction wrote.
    Medium { epoch: u64, region: u32, seg: u32, salt: u32, bytes: Vec<u8> },
    /// Committed edits (`encode_shipped_edits`).
    Edits { epoch: u64, region: u32, edits: Vec<u8> },
    /// Backup -> primary: everything up to `lsn` is in the backup's memory.
    Ack { region: u32, lsn: u64 },
    /// Refusal (stale epoch, unknown region); the sender closes the connection (on a stream:
    /// the region's stream). Encoded by `halyard-admin` (its `Msg::Reject`).
    Reject { region: u32, reason: String },
    /// New primary -> backup, after its Hello: the log tails it was promoted with (which
    /// replace the backup's own buffers: every backup continues from the new primary's
    /// history, up to `last_lsn`), and its maps to re-key the backup's (`(old primary seg, salt,
    /// new primary seg)` for logs, `(old primary seg, new primary seg)` for SSTs), and the
    /// digest of its levels a Send-Index backup must match once remapped (0: not checked).
    Remap {
        epoch: u64,
        region: u32,
        last_lsn: u64,
        tails: Vec<LogTail>,
        log: Vec<(u32, u32, u32)>,
        index: Vec<(u32, u32)>,
        levels: u64,
    },
    /// Primary -> backup: drop the region's copy; a full copy follows (catch-up).
    Reset { epoch: u64, region: u32 },
    /// Primary -> backup: an incremental copy follows; empty the region but keep the log
    /// segments and SSTs `keep` names, re-keyed to the primary's segments.
    Resync { epoch: u64, region: u32, keep: Keep },
    /// Primary -> backup, in an incremental copy: the L0 or large log segment `(seg, salt)`
    /// the backup holds goes back into log `log` here, in the primary's order.
    Kept { epoch: u64, region: u32, log: u8, seg: u32, salt: u32 },
    /// Primary -> backup: the full copy that began with a Reset (or Resync) ends here and holds the
    /// region up to `lsn`; the backup acknowledges `lsn` (a copy with no log tail carries no
    /// other LSN to acknowledge).
    Copied { epoch: u64, region: u32, lsn: u64 },
    /// Any -> node: the cluster secret, the first frame of every connection to a replication
    /// port when the cluster has one. Encoded by `halyard-admin` (its `Msg::Auth`).
    Auth { secret: Vec<u8> },
    /// Primary -> backup: `region` split at key `at` and LSN `lsn`; its keys from `at` on are
    /// region `child` now, whose own stream follows (Send-Index backups only).
    Split { epoch: u64, region: u32, at: Vec<u8>, lsn: u64, child: u32 },
    /// Primary -> backup, in a copy to a backup whose HelloOk said `named`, in place of a
    /// segment's bytes: the storage both stores share copies it by `name`
    /// (`Storage::segment_ref`). `piece`: the log (0 L0, 1 medium, 2 large) of segment
    /// `(seg, salt)`, whose records end within its first `valid` bytes (the backup clears the
    /// rest), or 255 for an SST described by `info` (empty for logs).
    Named { epoch: u64, region: u32, piece: u8, seg: u32, salt: u32, valid: u32, info: Vec<u8>, name: Vec<u8> },
}

/// [`Msg::Named`]'s `piece` for an SST.
pub const NAMED_SST: u8 = 255;

/// The first byte of a body: which message follows. Each is used by `encode` and `decode_body`;
/// the tags missing here (9..=11, 13, 14, 16..=18, 20..=22, 26, 27) are `halyard-admin`'s.
mod tag {
    pub(super) const HELLO: u8 = 1;
    pub(super) const HELLO_OK: u8 = 2;
    pub(super) const APPEND: u8 = 3;
    pub(super) const SEAL: u8 = 4;
    pub(super) const SST: u8 = 5;
    pub(super) const MEDIUM: u8 = 6;
    pub(super) const EDITS: u8 = 7;
    pub(super) const ACK: u8 = 8;
    pub(super) const REMAP: u8 = 12;
    pub(super) const RESET: u8 = 15;
    pub(super) const COPIED: u8 = 19;
    pub(super) const RESYNC: u8 = 23;
    pub(super) const KEPT: u8 = 24;
    pub(super) const SPLIT: u8 = 25;
    pub(super) const NAMED: u8 = 28;
}

/// A body that ends before its last field.
impl From<Short> for Error {
    fn from(_: Short) -> Error {
        Error::Malformed("message shorter than its fields")
    }
}

impl Mode {
    fn from_u8(v: u8) -> Option<Mode> {
        [Mode::SendIndex, Mode::BuildIndex].into_iter().find(|m| *m as u8 == v)
    }
}

/// A segment image: `u8 codec | u32 raw length | u32 n | n bytes`, LZ4 when that is smaller.
/// Index segments are bulk transfers sent long before anyone waits for them, so the
/// compression time is off every writer's path; log appends stay raw (latency).
fn put_packed(w: &mut Writer, b: &[u8]) {
    let packed = lz4_flex::block::compress(b);
    match packed.len() < b.len() {
        true => w.u8(LZ4).u32(b.len() as u32).bytes(&packed),
        false => w.u8(RAW).u32(b.len() as u32).bytes(b),
    };
}

/// Reads what [`put_packed`] wrote.
fn packed(r: &mut Reader<'_>) -> Result<Vec<u8>> {
    let (codec, raw) = (r.u8()?, r.u32()? as usize);
    let data = r.bytes()?;
    if raw > MAX_BODY {
        return Err(Error::Malformed("segment image larger than the limit"));
    }
    match codec {
        RAW if data.len() == raw => Ok(data.to_vec()),
        RAW => Err(Error::Malformed("raw segment image length mismatch")),
        LZ4 => {
            let mut out = vec![0u8; raw];
            match lz4_flex::block::decompress_into(data, &mut out) {
                Ok(got) if got == raw => Ok(out),
                _ => Err(Error::Malformed("LZ4 segment image does not decompress to its length")),
            }
        }
        _ => Err(Error::Malformed("unknown segment image codec")),
    }
}

/// A Remap's tails and maps, each a count and its entries.
fn put_remap(w: &mut Writer, tails: &[LogTail], log: &[(u32, u32, u32)], index: &[(u32, u32)]) {
    w.u32(tails.len() as u32);
    for (l, seg, salt, b) in tails {
        w.u8(*l).u32(*seg).u32(*salt).bytes(b);
    }
    w.u32(log.len() as u32);
    for (p, s, n) in log {
        w.u32(*p).u32(*s).u32(*n);
    }
    w.u32(index.len() as u32);
    for (p, n) in index {
        w.u32(*p).u32(*n);
    }
}

impl Msg {
    /// The frame for this message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = frame::begin();
        match self {
            Msg::Hello { version, epoch, region, mode, inventory, absorb } => {
                w.u8(tag::HELLO).u32(u32::from(*version)).u64(*epoch).u32(*region).u8(*mode as u8);
                w.u8(u8::from(*inventory));
                match absorb {
                    None => {
                        w.u8(0);
                    }
                    Some(a) => {
                        w.u8(1).u32(a.right);
                        match &a.end {
                            None => w.u8(0),
                            Some(e) => w.u8(1).bytes(e),
                        };
                    }
                }
            }
            Msg::HelloOk { region, lsn, held, named } => {
                w.u8(tag::HELLO_OK).u32(*region).u64(*lsn);
                put_inventory(&mut w, held);
                w.u8(u8::from(*named));
            }
            Msg::Append { epoch, region, log, seg, salt, offset, last_lsn, commit, bytes } => {
                w.u8(tag::APPEND)
                    .u64(*epoch)
                    .u32(*region)
                    .u8(*log)
                    .u32(*seg)
                    .u32(*salt)
                    .u32(*offset)
                    .u64(*last_lsn)
                    .u64(*commit)
                    .bytes(bytes);
            }
            Msg::Seal { epoch, region, log, seg, salt } => {
                w.u8(tag::SEAL).u64(*epoch).u32(*region).u8(*log).u32(*seg).u32(*salt);
            }
            Msg::Sst { epoch, region, info, bytes } => {
                w.u8(tag::SST).u64(*epoch).u32(*region).bytes(info);
                put_packed(&mut w, bytes);
            }
            Msg::Medium { epoch, region, seg, salt, bytes } => {
                w.u8(tag::MEDIUM).u64(*epoch).u32(*region).u32(*seg).u32(*salt);
                put_packed(&mut w, bytes);
            }
            Msg::Edits { epoch, region, edits } => {
                w.u8(tag::EDITS).u64(*epoch).u32(*region).bytes(edits);
            }
            Msg::Ack { region, lsn } => {
                w.u8(tag::ACK).u32(*region).u64(*lsn);
            }
            Msg::Remap { epoch, region, last_lsn, tails, log, index, levels } => {
                w.u8(tag::REMAP).u64(*epoch).u32(*region).u64(*last_lsn);
                put_remap(&mut w, tails, log, index);
                w.u64(*levels);
            }
            Msg::Copied { epoch, region, lsn } => {
                w.u8(tag::COPIED).u64(*epoch).u32(*region).u64(*lsn);
            }
            Msg::Reset { epoch, region } => {
                w.u8(tag::RESET).u64(*epoch).u32(*region);
            }
            Msg::Resync { epoch, region, keep } => {
                w.u8(tag::RESYNC).u64(*epoch).u32(*region).u32(keep.logs.len() as u32);
                for (key, salt, seg) in &keep.logs {
                    w.u32(*key).u32(*salt).u32(*seg);
                }
                w.u32(keep.ssts.len() as u32);
                for (key, seg) in &keep.ssts {
                    w.u32(*key).u32(*seg);
                }
            }
            Msg::Kept { epoch, region, log, seg, salt } => {
                w.u8(tag::KEPT).u64(*epoch).u32(*region).u8(*log).u32(*seg).u32(*salt);
            }
            Msg::Named { epoch, region, piece, seg, salt, valid, info, name } => {
                w.u8(tag::NAMED).u64(*epoch).u32(*region).u8(*piece).u32(*seg).u32(*salt).u32(*valid);
                w.bytes(info).bytes(name);
            }
            Msg::Split { epoch, region, at, lsn, child } => {
                w.u8(tag::SPLIT).u64(*epoch).u32(*region).bytes(at).u64(*lsn).u32(*child);
            }
            Msg::Reject { region, reason } => {
                return AdminMsg::Reject { region: *region, reason: reason.clone() }.encode();
            }
            Msg::Auth { secret } => return AdminMsg::Auth { secret: secret.clone() }.encode(),
        }
        frame::seal(w)
    }

    /// Decodes a body (the bytes after the header, checksum already verified). An admin
    /// message other than Reject and Auth is not part of a stream: `Protocol`.
    pub fn decode_body(body: &[u8]) -> Result<Msg> {
        if body.first().is_some_and(|t| halyard_admin::is_admin_tag(*t)) {
            return match AdminMsg::decode_body(body)? {
                AdminMsg::Reject { region, reason } => Ok(Msg::Reject { region, reason }),
                AdminMsg::Auth { secret } => Ok(Msg::Auth { secret }),
                m => Err(Error::Protocol(format!("{m:?} inside a replication stream"))),
            };
        }
        let mut r = Reader::new(body);
        let m = match r.u8()? {
            tag::HELLO => {
                let version = u16::try_from(r.u32()?).map_err(|_| Error::Malformed("protocol version out of range"))?;
                let (epoch, region) = (r.u64()?, r.u32()?);
                let mode = Mode::from_u8(r.u8()?).ok_or(Error::Malformed("unknown replication mode"))?;
                let inventory = flag(&mut r)?;
                let absorb = match flag(&mut r)? {
                    false => None,
                    true => {
                        let right = r.u32()?;
                        let end = match flag(&mut r)? {
                            false => None,
                            true => Some(r.bytes()?.to_vec()),
                        };
                        Some(Absorb { right, end })
                    }
                };
                Msg::Hello { version, epoch, region, mode, inventory, absorb }
            }
            tag::HELLO_OK => {
                Msg::HelloOk { region: r.u32()?, lsn: r.u64()?, held: inventory(&mut r)?, named: flag(&mut r)? }
            }
            tag::APPEND => Msg::Append {
                epoch: r.u64()?,
                region: r.u32()?,
                log: r.u8()?,
                seg: r.u32()?,
                salt: r.u32()?,
                offset: r.u32()?,
                last_lsn: r.u64()?,
                commit: r.u64()?,
                bytes: r.bytes()?.to_vec(),
            },
            tag::SEAL => Msg::Seal { epoch: r.u64()?, region: r.u32()?, log: r.u8()?, seg: r.u32()?, salt: r.u32()? },
            tag::SST => {
                Msg::Sst { epoch: r.u64()?, region: r.u32()?, info: r.bytes()?.to_vec(), bytes: packed(&mut r)? }
            }
            tag::MEDIUM => {
                Msg::Medium { epoch: r.u64()?, region: r.u32()?, seg: r.u32()?, salt: r.u32()?, bytes: packed(&mut r)? }
            }
            tag::EDITS => Msg::Edits { epoch: r.u64()?, region: r.u32()?, edits: r.bytes()?.to_vec() },
            tag::ACK => Msg::Ack { region: r.u32()?, lsn: r.u64()? },
            tag::REMAP => remap(&mut r)?,
            tag::RESET => Msg::Reset { epoch: r.u64()?, region: r.u32()? },
            tag::COPIED => Msg::Copied { epoch: r.u64()?, region: r.u32()?, lsn: r.u64()? },
            tag::RESYNC => resync(&mut r)?,
            tag::KEPT => Msg::Kept { epoch: r.u64()?, region: r.u32()?, log: r.u8()?, seg: r.u32()?, salt: r.u32()? },
            tag::NAMED => Msg::Named {
                epoch: r.u64()?,
                region: r.u32()?,
                piece: r.u8()?,
                seg: r.u32()?,
                salt: r.u32()?,
                valid: r.u32()?,
                info: r.bytes()?.to_vec(),
                name: r.bytes()?.to_vec(),
            },
            tag::SPLIT => Msg::Split {
                epoch: r.u64()?,
                region: r.u32()?,
                at: r.bytes()?.to_vec(),
                lsn: r.u64()?,
                child: r.u32()?,
            },
            _ => return Err(Error::Malformed("unknown message type")),
        };
        r.finish().map_err(|_| Error::Malformed("trailing bytes after the message"))?;
        Ok(m)
    }
}

/// A flag byte: 0 or 1 exactly (one meaning, one encoding).
fn flag(r: &mut Reader<'_>) -> Result<bool> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::Malformed("flag other than 0 or 1")),
    }
}

/// Reads a Remap's fields (after its tag): what [`put_remap`] wrote.
fn remap(r: &mut Reader<'_>) -> Result<Msg> {
    let (epoch, region, last_lsn) = (r.u64()?, r.u32()?, r.u64()?);
    let n = count(r, 13)?;
    let mut tails = Vec::with_capacity(n);
    for _ in 0..n {
        tails.push((r.u8()?, r.u32()?, r.u32()?, r.bytes()?.to_vec()));
    }
    let n = count(r, 12)?;
    let mut log = Vec::with_capacity(n);
    for _ in 0..n {
        log.push((r.u32()?, r.u32()?, r.u32()?));
    }
    let n = count(r, 8)?;
    let mut index = Vec::with_capacity(n);
    for _ in 0..n {
        index.push((r.u32()?, r.u32()?));
    }
    let levels = r.u64()?;
    Ok(Msg::Remap { epoch, region, last_lsn, tails, log, index, levels })
}

/// A backup's inventory: `u32 n | n × (u32 segment, u32 salt, u64 digest)` for log segments,
/// then `u32 n | n × (u8 level, u32 segment, u64 digest)` for SSTs.
fn put_inventory(w: &mut Writer, inv: &Inventory) {
    w.u32(inv.logs.len() as u32);
    for (seg, salt, d) in &inv.logs {
        w.u32(*seg).u32(*salt).u64(*d);
    }
    w.u32(inv.ssts.len() as u32);
    for (level, seg, d) in &inv.ssts {
        w.u8(*level).u32(*seg).u64(*d);
    }
}

/// Reads what [`put_inventory`] wrote.
fn inventory(r: &mut Reader<'_>) -> Result<Inventory> {
    let n = count(r, 16)?;
    let mut inv = Inventory { logs: Vec::with_capacity(n), ssts: Vec::new() };
    for _ in 0..n {
        inv.logs.push((r.u32()?, r.u32()?, r.u64()?));
    }
    let n = count(r, 13)?;
    inv.ssts.reserve(n);
    for _ in 0..n {
        inv.ssts.push((r.u8()?, r.u32()?, r.u64()?));
    }
    Ok(inv)
}

/// Reads a Resync's fields (after its tag).
fn resync(r: &mut Reader<'_>) -> Result<Msg> {
    let (epoch, region) = (r.u64()?, r.u32()?);
    let n = count(r, 12)?;
    let mut keep = Keep { logs: Vec::with_capacity(n), ssts: Vec::new() };
    for _ in 0..n {
        keep.logs.push((r.u32()?, r.u32()?, r.u32()?));
    }
    let n = count(r, 8)?;
    keep.ssts.reserve(n);
    for _ in 0..n {
        keep.ssts.push((r.u32()?, r.u32()?));
    }
    Ok(Msg::Resync { epoch, region, keep })
}

/// Parses a frame header: the body length, after checking the magic and the limit.
pub fn header(h: &[u8; HEADER]) -> Result<(usize, u32)> {
    Ok(frame::header(h)?)
}

/// Decodes one whole frame from the start of `buf`: the message and the bytes used, or None
/// when more bytes are needed.
pub fn decode_frame(buf: &[u8]) -> Result<Option<(Msg, usize)>> {
    match frame::split(buf)? {
        Some((body, used)) => Ok(Some((Msg::decode_body(body)?, used))),
        None => Ok(None),
    }
}

/// Reads one frame from an async stream.
pub async fn read_msg<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Result<Msg> {
    Msg::decode_body(&frame::read_body(s).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn samples() -> Vec<Msg> {
        vec![
            Msg::Hello {
                version: VERSION,
                epoch: 3,
                region: 7,
                mode: Mode::BuildIndex,
                inventory: false,
                absorb: None,
            },
            Msg::Hello {
                version: VERSION,
                epoch: 3,
                region: 7,
                mode: Mode::SendIndex,
                inventory: true,
                absorb: Some(Absorb { right: 8, end: Some(b"m".to_vec()) }),
            },
            Msg::Hello {
                version: VERSION,
                epoch: 3,
                region: 7,
                mode: Mode::SendIndex,
                inventory: true,
                absorb: Some(Absorb { right: 8, end: None }),
            },
            Msg::HelloOk { region: 7, lsn: 99, held: Inventory::default(), named: false },
            Msg::HelloOk {
                region: 7,
                lsn: 99,
                held: Inventory { logs: vec![(1, 2, 3), (4, 5, u64::MAX)], ssts: vec![(1, 9, 7)] },
                named: true,
            },
            Msg::Named { epoch: 5, region: 7, piece: 2, seg: 3, salt: 4, valid: 9, info: Vec::new(), name: vec![1, 2] },
            Msg::Named { epoch: 5, region: 7, piece: 255, seg: 3, salt: 0, valid: 0, info: vec![9; 40], name: vec![1] },
            Msg::Resync { epoch: 5, region: 7, keep: Keep { logs: vec![(1, 2, 3), (3, 4, 3)], ssts: vec![(9, 10)] } },
            Msg::Kept { epoch: 5, region: 7, log: 2, seg: 3, salt: 4 },
            Msg::Split { epoch: 5, region: 7, at: b"user5000".to_vec(), lsn: 99, child: 8 },
            Msg::Append {
                epoch: 3,
                region: 7,
                log: 2,
                seg: 5,
                salt: 9,
                offset: 4096,
                last_lsn: 12,
                commit: 10,
                bytes: vec![1, 2, 3],
            },
            Msg::Seal { epoch: 3, region: 7, log: 0, seg: 5, salt: 9 },
            Msg::Sst { epoch: 3, region: 7, info: vec![4; 10], bytes: vec![5; 100] },
            Msg::Sst { epoch: 3, region: 7, info: vec![4; 10], bytes: (0..=255).collect() },
            Msg::Medium { epoch: 3, region: 7, seg: 1, salt: 2, bytes: vec![6; 7] },
            Msg::Medium { epoch: 3, region: 7, seg: 1, salt: 2, bytes: vec![6; 7000] },
            Msg::Edits { epoch: 3, region: 7, edits: vec![8; 9] },
            Msg::Ack { region: 7, lsn: 1 << 40 },
            Msg::Reject { region: 7, reason: "stale epoch 2 < 3".into() },
            Msg::Remap {
                epoch: 4,
                region: 7,
                last_lsn: 40,
                tails: vec![(0, 3, 4, vec![9; 20]), (2, 5, 6, vec![])],
                log: vec![(1, 2, 3), (4, 5, 6)],
                index: vec![(7, 8)],
                levels: 0x0123_4567_89ab_cdef,
            },
            Msg::Reset { epoch: 5, region: 7 },
            Msg::Copied { epoch: 5, region: 7, lsn: 99 },
            Msg::Auth { secret: b"s3cret".to_vec() },
        ]
    }

    #[test]
    fn every_message_roundtrips_and_every_cut_or_flip_is_caught() {
        for m in samples() {
            let f = m.encode();
            assert_eq!(decode_frame(&f).unwrap(), Some((m.clone(), f.len())));
            for cut in 0..f.len() {
                assert!(matches!(decode_frame(&f[..cut]), Ok(None)), "{m:?} cut at {cut}");
            }
            for i in 0..f.len() {
                let mut g = f.clone();
                g[i] ^= 0x10;
                assert!(!matches!(decode_frame(&g), Ok(Some((ref d, _))) if *d == m), "{m:?} flip at {i}");
            }
        }
    }

    proptest! {
        #[test]
        fn arbitrary_bodies_never_panic(body in proptest::collection::vec(any::<u8>(), 0..200)) {
            if let Ok(m) = Msg::decode_body(&body) {
                let frame = m.encode();
                // One encoding per meaning, except segment images: the packer picks raw or LZ4.
                if !matches!(m, Msg::Sst { .. } | Msg::Medium { .. }) {
                    prop_assert_eq!(&frame[HEADER..], &body[..]);
                }
                prop_assert_eq!(decode_frame(&frame).unwrap(), Some((m, frame.len())));
            }
        }
    }

    #[test]
    fn reject_and_auth_are_halyard_admins_and_other_admin_messages_no_stream_message() {
        let reject = Msg::Reject { region: 7, reason: "no".into() };
        assert_eq!(reject.encode(), halyard_admin::Msg::Reject { region: 7, reason: "no".into() }.encode());
        let auth = Msg::Auth { secret: b"s".to_vec() };
        assert_eq!(auth.encode(), halyard_admin::Msg::Auth { secret: b"s".to_vec() }.encode());
        let promote = halyard_admin::Msg::Promote { epoch: 4, region: 7 }.encode();
        assert!(matches!(decode_frame(&promote), Err(Error::Protocol(_))));
    }

    #[test]
    fn hello_matches_the_documented_bytes() {
        let f =
            Msg::Hello { version: VERSION, epoch: 2, region: 3, mode: Mode::SendIndex, inventory: true, absorb: None }
                .encode();
        let doc = "48 4C 59 52 14 00 00 00 44 30 80 8D 01 09 00 00 00 02 00 00 00 00 00 00 00 03 00 00 00 00 01 00";
        let want: Vec<u8> = doc.split(' ').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(f, want, "docs/replication.md section 1 example");
    }

    #[test]
    fn packed_images_compress_when_that_is_smaller_and_reject_lies() {
        let zeros = Msg::Medium { epoch: 1, region: 2, seg: 3, salt: 4, bytes: vec![0; 1 << 20] };
        assert!(zeros.encode().len() < 10_000, "a zero segment must be sent packed");
        let noise: Vec<u8> = (0..4096u32).map(|i| (i.wrapping_mul(2_654_435_761) >> 13) as u8).collect();
        let m = Msg::Sst { epoch: 1, region: 2, info: vec![], bytes: noise.clone() };
        assert_eq!(Msg::decode_body(&m.encode()[HEADER..]).unwrap(), m);
        // A packed image claiming a larger raw length than it decompresses to is refused.
        let mut body = zeros.encode()[HEADER..].to_vec();
        let at = 1 + 8 + 4 + 4 + 4 + 1;
        body[at..at + 4].copy_from_slice(&((1u32 << 20) + 1).to_le_bytes());
        assert!(Msg::decode_body(&body).is_err());
        // A length beyond the frame limit is refused before anything is allocated.
        body[at..at + 4].copy_from_slice(&u32::MAX.to_le_bytes());
        assert!(Msg::decode_body(&body).is_err());
    }
}
