//! The admin messages (`docs/admin.md` §2): the requests a node answers on its replication
//! port, their replies, and the two messages the replication streams share with them (Reject,
//! Auth). Their tags are this crate's; the streams' other tags are `halyard-replication`'s.

use crate::error::{Error, Result};
use crate::frame::{self, count};
use halyard_codec::{Reader, Writer};

/// An entry of a DumpPage: (key, version LSN, value).
pub type DumpPair = (Vec<u8>, u64, Vec<u8>);

/// One admin message. Every field's width and meaning is in `docs/admin.md`; `region` is the
/// engine region id, the same on every node.
#[allow(missing_docs)]
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Msg {
    /// Refusal (stale epoch, unknown region): node -> admin, and backup -> primary on a
    /// replication stream; the sender closes the connection (a stream: the region's stream).
    Reject { region: u32, reason: String },
    /// Admin -> node: become the primary of `region` at `epoch`.
    Promote { epoch: u64, region: u32 },
    /// Node -> admin: promoted; L0 rebuilt up to `last_lsn`.
    Promoted { region: u32, last_lsn: u64, dropped: u64 },
    /// Admin -> node: a page of the region's contents after `after` (None: from the start).
    Dump { region: u32, after: Option<Vec<u8>>, limit: u32 },
    /// Node -> admin: the page of (key, version LSN, value); `more` when it was cut at `limit`.
    DumpPage { region: u32, lsn: u64, pairs: Vec<DumpPair>, more: bool },
    /// Admin -> node: become a backup of `region` (key range `start..end`) at `epoch`; the
    /// primary's stream, with a full copy, follows.
    Host { epoch: u64, region: u32, start: Vec<u8>, end: Option<Vec<u8>> },
    /// Admin -> primary: ship `region` to one more backup, `node` (addresses `native`,
    /// `replication`), starting with a full copy. Answered once the copy is queued.
    AddBackup { epoch: u64, region: u32, node: String, native: String, replication: String },
    /// Node -> admin: Host or AddBackup done.
    Done { region: u32 },
    /// Any -> node: the cluster secret, the first frame of every connection to a replication
    /// port when the cluster has one.
    Auth { secret: Vec<u8> },
    /// Master -> primary of `region` at `epoch`: stop serving the region (a planned handoff:
    /// the node refuses its requests until a map with a higher epoch names it again) and
    /// answer once every backup acknowledged the region's last LSN.
    Handoff { epoch: u64, region: u32 },
    /// Primary -> master: fenced; every backup holds the region up to `last_lsn`.
    HandedOff { region: u32, last_lsn: u64 },
    /// Master -> primary of `region` at `epoch`: fence the region (as for a handoff), then split
    /// it at key `at`, its keys from `at` on becoming region `child` (fenced too); answered with
    /// HandedOff once the backups hold the region up to the split. Both serve again with a map
    /// that names them at a higher epoch. Asked again after the split, it only fences.
    Split { epoch: u64, region: u32, at: Vec<u8>, child: u32 },
    /// Master -> primary of both: fence `region` at `epoch` and `right` (which starts where
    /// `region` ends) at `right_epoch`, as for a handoff, then merge `right` into `region`,
    /// whose backups join their copies when its stream opens again at `merged_epoch`; answered
    /// with HandedOff once done. Asked again once merged, it only fences `region`.
    Merge { epoch: u64, region: u32, right_epoch: u64, right: u32, merged_epoch: u64 },
}

/// The first byte of a body: which message follows. Each is used by `encode` and
/// `decode_body`; the tags missing here (1..=8, 12, 15, 19, 23..=25) are the replication streams'.
mod tag {
    pub(super) const REJECT: u8 = 9;
    pub(super) const PROMOTE: u8 = 10;
    pub(super) const PROMOTED: u8 = 11;
    pub(super) const DUMP: u8 = 13;
    pub(super) const DUMP_PAGE: u8 = 14;
    pub(super) const HOST: u8 = 16;
    pub(super) const ADD_BACKUP: u8 = 17;
    pub(super) const DONE: u8 = 18;
    pub(super) const AUTH: u8 = 20;
    pub(super) const HANDOFF: u8 = 21;
    pub(super) const HANDED_OFF: u8 = 22;
    pub(super) const SPLIT: u8 = 26;
    pub(super) const MERGE: u8 = 27;
}

/// Whether a body whose first byte is `tag` is an admin message ([`Msg`]) rather than one of
/// a replication stream's.
pub fn is_admin_tag(tag: u8) -> bool {
    matches!(
        tag,
        tag::REJECT
            | tag::PROMOTE
            | tag::PROMOTED
            | tag::DUMP
            | tag::DUMP_PAGE
            | tag::HOST
            | tag::ADD_BACKUP
            | tag::DONE
            | tag::AUTH
            | tag::HANDOFF
            | tag::HANDED_OFF
            | tag::SPLIT
            | tag::MERGE
    )
}

/// An optional byte string: a flag (0 or 1), then the bytes when it is 1.
fn put_option(w: &mut Writer, v: Option<&[u8]>) {
    w.u8(u8::from(v.is_some()));
    if let Some(b) = v {
        w.bytes(b);
    }
}

/// Reads what [`put_option`] wrote.
fn option(r: &mut Reader<'_>) -> Result<Option<Vec<u8>>> {
    Ok(if flag(r)? { Some(r.bytes()?.to_vec()) } else { None })
}

/// A boolean written as `u8::from(b)`: one meaning, one encoding.
fn flag(r: &mut Reader<'_>) -> Result<bool> {
    match r.u8()? {
        0 => Ok(false),
        1 => Ok(true),
        _ => Err(Error::Malformed("flag other than 0 or 1")),
    }
}

/// UTF-8 text as length-prefixed bytes.
fn string(r: &mut Reader<'_>) -> Result<String> {
    String::from_utf8(r.bytes()?.to_vec()).map_err(|_| Error::Malformed("text is not UTF-8"))
}

/// A DumpPage's count and (key, version, value) entries.
fn put_pairs(w: &mut Writer, pairs: &[DumpPair]) {
    w.u32(pairs.len() as u32);
    for (k, version, v) in pairs {
        w.bytes(k).u64(*version).bytes(v);
    }
}

/// Reads what [`put_pairs`] wrote.
fn pairs(r: &mut Reader<'_>) -> Result<Vec<DumpPair>> {
    let n = count(r, 16)?;
    let mut pairs = Vec::with_capacity(n);
    for _ in 0..n {
        pairs.push((r.bytes()?.to_vec(), r.u64()?, r.bytes()?.to_vec()));
    }
    Ok(pairs)
}

impl Msg {
    /// The frame for this message.
    pub fn encode(&self) -> Vec<u8> {
        let mut w = frame::begin();
        match self {
            Msg::Reject { region, reason } => {
                w.u8(tag::REJECT).u32(*region).bytes(reason.as_bytes());
            }
            Msg::Promote { epoch, region } => {
                w.u8(tag::PROMOTE).u64(*epoch).u32(*region);
            }
            Msg::Promoted { region, last_lsn, dropped } => {
                w.u8(tag::PROMOTED).u32(*region).u64(*last_lsn).u64(*dropped);
            }
            Msg::Dump { region, after, limit } => {
                w.u8(tag::DUMP).u32(*region);
                put_option(&mut w, after.as_deref());
                w.u32(*limit);
            }
            Msg::DumpPage { region, lsn, pairs, more } => {
                w.u8(tag::DUMP_PAGE).u32(*region).u64(*lsn);
                put_pairs(&mut w, pairs);
                w.u8(u8::from(*more));
            }
            Msg::Auth { secret } => {
                w.u8(tag::AUTH).bytes(secret);
            }
            Msg::Host { epoch, region, start, end } => {
                w.u8(tag::HOST).u64(*epoch).u32(*region).bytes(start);
                put_option(&mut w, end.as_deref());
            }
            Msg::AddBackup { epoch, region, node, native, replication } => {
                w.u8(tag::ADD_BACKUP)
                    .u64(*epoch)
                    .u32(*region)
                    .bytes(node.as_bytes())
                    .bytes(native.as_bytes())
                    .bytes(replication.as_bytes());
            }
            Msg::Done { region } => {
                w.u8(tag::DONE).u32(*region);
            }
            Msg::Handoff { epoch, region } => {
                w.u8(tag::HANDOFF).u64(*epoch).u32(*region);
            }
            Msg::Split { epoch, region, at, child } => {
                w.u8(tag::SPLIT).u64(*epoch).u32(*region).bytes(at).u32(*child);
            }
            Msg::Merge { epoch, region, right_epoch, right, merged_epoch } => {
                w.u8(tag::MERGE).u64(*epoch).u32(*region).u64(*right_epoch).u32(*right).u64(*merged_epoch);
            }
            Msg::HandedOff { region, last_lsn } => {
                w.u8(tag::HANDED_OFF).u32(*region).u64(*last_lsn);
            }
        }
        frame::seal(w)
    }

    /// Decodes a body (the bytes after the header, checksum already verified); a tag other
    /// than an admin message's is `Malformed`.
    pub fn decode_body(body: &[u8]) -> Result<Msg> {
        let mut r = Reader::new(body);
        let m = match r.u8()? {
            tag::REJECT => Msg::Reject { region: r.u32()?, reason: string(&mut r)? },
            tag::PROMOTE => Msg::Promote { epoch: r.u64()?, region: r.u32()? },
            tag::PROMOTED => Msg::Promoted { region: r.u32()?, last_lsn: r.u64()?, dropped: r.u64()? },
            tag::DUMP => Msg::Dump { region: r.u32()?, after: option(&mut r)?, limit: r.u32()? },
            tag::DUMP_PAGE => {
                let (region, lsn) = (r.u32()?, r.u64()?);
                Msg::DumpPage { region, lsn, pairs: pairs(&mut r)?, more: flag(&mut r)? }
            }
            tag::AUTH => Msg::Auth { secret: r.bytes()?.to_vec() },
            tag::HOST => {
                Msg::Host { epoch: r.u64()?, region: r.u32()?, start: r.bytes()?.to_vec(), end: option(&mut r)? }
            }
            tag::ADD_BACKUP => Msg::AddBackup {
                epoch: r.u64()?,
                region: r.u32()?,
                node: string(&mut r)?,
                native: string(&mut r)?,
                replication: string(&mut r)?,
            },
            tag::DONE => Msg::Done { region: r.u32()? },
            tag::HANDOFF => Msg::Handoff { epoch: r.u64()?, region: r.u32()? },
            tag::HANDED_OFF => Msg::HandedOff { region: r.u32()?, last_lsn: r.u64()? },
            tag::SPLIT => Msg::Split { epoch: r.u64()?, region: r.u32()?, at: r.bytes()?.to_vec(), child: r.u32()? },
            tag::MERGE => Msg::Merge {
                epoch: r.u64()?,
                region: r.u32()?,
                right_epoch: r.u64()?,
                right: r.u32()?,
                merged_epoch: r.u64()?,
            },
            _ => return Err(Error::Malformed("unknown message type")),
        };
        r.finish().map_err(|_| Error::Malformed("trailing bytes after the message"))?;
        Ok(m)
    }
}

/// Reads one admin message from an async stream.
pub async fn read_msg<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Result<Msg> {
    Msg::decode_body(&frame::read_body(s).await?)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::frame::HEADER;
    use proptest::prelude::*;

    fn decode_frame(f: &[u8]) -> Result<Option<(Msg, usize)>> {
        match frame::split(f)? {
            Some((body, used)) => Ok(Some((Msg::decode_body(body)?, used))),
            None => Ok(None),
        }
    }

    fn samples() -> Vec<Msg> {
        vec![
            Msg::Reject { region: 7, reason: "stale epoch 2 < 3".into() },
            Msg::Promote { epoch: 4, region: 7 },
            Msg::Promoted { region: 7, last_lsn: 88, dropped: 1 },
            Msg::Dump { region: 7, after: Some(b"k".to_vec()), limit: 100 },
            Msg::Dump { region: 7, after: None, limit: 0 },
            Msg::DumpPage { region: 7, lsn: 5, pairs: vec![(b"a".to_vec(), 3, b"b".to_vec())], more: true },
            Msg::Auth { secret: b"s3cret".to_vec() },
            Msg::Host { epoch: 2, region: 7, start: b"a".to_vec(), end: Some(b"m".to_vec()) },
            Msg::Host { epoch: 2, region: 7, start: vec![], end: None },
            Msg::AddBackup {
                epoch: 2,
                region: 7,
                node: "n4".into(),
                native: "127.0.0.1:1".into(),
                replication: "127.0.0.1:2".into(),
            },
            Msg::Done { region: 7 },
            Msg::Handoff { epoch: 9, region: 7 },
            Msg::HandedOff { region: 7, last_lsn: 1234 },
            Msg::Split { epoch: 9, region: 7, at: b"k5".to_vec(), child: 8 },
            Msg::Merge { epoch: 9, region: 7, right_epoch: 4, right: 8, merged_epoch: 10 },
        ]
    }

    #[test]
    fn every_message_roundtrips_and_every_cut_or_flip_is_caught() {
        for m in samples() {
            let f = m.encode();
            assert!(is_admin_tag(f[HEADER]), "{m:?}");
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
                // One encoding per meaning.
                prop_assert_eq!(&frame[HEADER..], &body[..]);
                prop_assert_eq!(decode_frame(&frame).unwrap(), Some((m, frame.len())));
            }
        }
    }

    #[test]
    fn promote_matches_the_documented_bytes() {
        let f = Msg::Promote { epoch: 5, region: 3 }.encode();
        let doc = "48 4C 59 52 0D 00 00 00 3E 6D 16 C8 0A 05 00 00 00 00 00 00 00 03 00 00 00";
        let want: Vec<u8> = doc.split(' ').map(|h| u8::from_str_radix(h, 16).unwrap()).collect();
        assert_eq!(f, want, "docs/admin.md section 1 example");
    }
}
