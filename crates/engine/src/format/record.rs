//! Log records: the unit of the L0 recovery log, the medium log and the large log.
//!
//! ```text
//! 0  u16 start marker 0x4B56
//! 2  u8  kind (1 put, 2 delete, 3 put that expires: format 3, 4 range delete: format 4,
//!        5 mark: format 7)
//! 3  u8  reserved (must be 0)
//! 4  u32 salt of the segment the record was written into
//! 8  u64 LSN
//! 16 u16 key length K
//! 18 u32 value length V
//! 22 [K] key, [V] value (kind 3: u64 expire_at, ms since the Unix epoch, non-zero, then the value;
//!        kind 4: key = first key deleted, value = first key past the range, greater than the key;
//!        kind 5: no key, no value)
//! .. u32 batch_remaining: records of the same atomic batch that follow this one
//! .. u32 crc32c of everything above
//! .. u32 end marker 0x21444E45
//! ```

#![expect(
    clippy::indexing_slicing,
    reason = "record fields are read within the length checked before decoding (fuzzed: log_record)"
)]

use halyard_codec::{get_u16, get_u32, get_u64, put_u16, put_u32, put_u64};

pub(crate) const START: u16 = 0x4B56;
pub(crate) const END: u32 = 0x2144_4E45;
pub(crate) const HEADER: usize = 22;
pub(crate) const TRAILER: usize = 12;
/// Bytes a record needs besides key and value.
pub const RECORD_OVERHEAD: usize = HEADER + TRAILER;

pub(crate) const KIND_PUT: u8 = 1;
pub(crate) const KIND_DELETE: u8 = 2;
/// A put whose value field starts with its expiry time (u64, non-zero).
pub(crate) const KIND_PUT_EXPIRING: u8 = 3;
/// Deletes every key in `[key, value)`: one record whatever the number of keys it covers.
pub(crate) const KIND_RANGE_DELETE: u8 = 4;
/// Holds an LSN and nothing else: a region split takes an LSN of its own and writes this at
/// it, so that the L0 log its halves share has a record at every LSN (replays stop at a gap).
pub(crate) const KIND_MARK: u8 = 5;

/// Bytes the expiry time adds to a put's value field (0 for a put that never expires).
pub(crate) fn expiry_len(expire_at: u64) -> usize {
    if expire_at != 0 {
        8
    } else {
        0
    }
}

/// A decoded record, borrowing from the buffer it was read from.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Record<'a> {
    /// [`KIND_PUT`], [`KIND_DELETE`] or [`KIND_RANGE_DELETE`]: a put that expires is a put
    /// with `expire_at` set.
    pub kind: u8,
    /// When the put expires (ms since the Unix epoch); 0 for never.
    pub expire_at: u64,
    pub lsn: u64,
    pub key: &'a [u8],
    pub value: &'a [u8],
    pub batch_remaining: u32,
    /// Total encoded length.
    pub len: usize,
}

impl<'a> Record<'a> {
    /// What the record holds, to write it again (GC, a fuzz check).
    pub(crate) fn body(&self) -> Body<'a> {
        Body { kind: self.kind, key: self.key, value: self.value, expire_at: self.expire_at }
    }
}

pub(crate) fn encoded_len(key: usize, value: usize) -> usize {
    HEADER + key + value + TRAILER
}

/// What a record holds besides its salt and LSN.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Body<'a> {
    /// [`KIND_PUT`], [`KIND_DELETE`] or [`KIND_RANGE_DELETE`] (`key..value` is the range).
    pub kind: u8,
    pub key: &'a [u8],
    pub value: &'a [u8],
    /// A put's expiry time (0: never); written as a [`KIND_PUT_EXPIRING`] record.
    pub expire_at: u64,
}

impl Body<'_> {
    /// The record's encoded length.
    pub(crate) fn encoded_len(&self) -> usize {
        encoded_len(self.key.len(), self.value.len() + expiry_len(self.expire_at))
    }
}

/// Encodes a record into `out` (which must be `b.encoded_len()` long).
pub(crate) fn encode(out: &mut [u8], b: Body<'_>, salt: u32, lsn: u64, batch_remaining: u32) {
    let (key, value) = (b.key, b.value);
    let expires = b.kind == KIND_PUT && b.expire_at != 0;
    put_u16(out, 0, START);
    out[2] = if expires { KIND_PUT_EXPIRING } else { b.kind };
    out[3] = 0;
    put_u32(out, 4, salt);
    put_u64(out, 8, lsn);
    put_u16(out, 16, key.len() as u16);
    let mut v = HEADER + key.len();
    put_u32(out, 18, (value.len() + if expires { 8 } else { 0 }) as u32);
    out[HEADER..v].copy_from_slice(key);
    if expires {
        put_u64(out, v, b.expire_at);
        v += 8;
    }
    out[v..v + value.len()].copy_from_slice(value);
    let t = v + value.len();
    put_u32(out, t, batch_remaining);
    let crc = crc32c::crc32c(&out[..t + 4]);
    put_u32(out, t + 4, crc);
    put_u32(out, t + 8, END);
}

/// Why a position does not hold a valid record.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Invalid {
    /// No start marker: the end of the written part of the segment.
    End,
    /// Start marker present but the record is cut short or fails its checksum: a torn write.
    Torn,
}

/// Decodes the record at the start of `buf`. `salt`, when given, must match.
pub(crate) fn decode(buf: &[u8], salt: Option<u32>) -> Result<Record<'_>, Invalid> {
    if get_u16(buf, 0) != Some(START) {
        return Err(Invalid::End);
    }
    let rsalt = get_u32(buf, 4).ok_or(Invalid::Torn)?;
    if salt.is_some_and(|s| s != rsalt) {
        // A record left over from the segment's previous life.
        return Err(Invalid::End);
    }
    let kind = buf[2];
    let lsn = get_u64(buf, 8).ok_or(Invalid::Torn)?;
    let klen = get_u16(buf, 16).ok_or(Invalid::Torn)? as usize;
    let vlen = get_u32(buf, 18).ok_or(Invalid::Torn)? as usize;
    let len = HEADER
        .checked_add(klen)
        .and_then(|x| x.checked_add(vlen))
        .and_then(|x| x.checked_add(TRAILER))
        .ok_or(Invalid::Torn)?;
    if len > buf.len() {
        return Err(Invalid::Torn);
    }
    let t = HEADER + klen + vlen;
    let batch_remaining = get_u32(buf, t).ok_or(Invalid::Torn)?;
    let crc = get_u32(buf, t + 4).ok_or(Invalid::Torn)?;
    if get_u32(buf, t + 8) != Some(END) || crc32c::crc32c(&buf[..t + 4]) != crc {
        return Err(Invalid::Torn);
    }
    // One meaning, one encoding: the reserved byte is 0 (the fuzzer forged a record that
    // passed its CRC with another value there), and an expiry time is not 0.
    let key = &buf[HEADER..HEADER + klen];
    let (kind, expire_at, value) = match kind {
        KIND_PUT | KIND_DELETE => (kind, 0, &buf[HEADER + klen..t]),
        // An empty or inverted range deletes nothing and is never written.
        KIND_RANGE_DELETE if buf[HEADER + klen..t] > *key => (kind, 0, &buf[HEADER + klen..t]),
        KIND_MARK if klen == 0 && vlen == 0 => (kind, 0, &buf[t..t]),
        KIND_PUT_EXPIRING => match get_u64(buf, HEADER + klen) {
            Some(at) if at != 0 && vlen >= 8 => (KIND_PUT, at, &buf[HEADER + klen + 8..t]),
            _ => return Err(Invalid::Torn),
        },
        _ => return Err(Invalid::Torn),
    };
    if buf[3] != 0 || (kind == KIND_DELETE && vlen != 0) {
        return Err(Invalid::Torn);
    }
    Ok(Record { kind, expire_at, lsn, key, value, batch_remaining, len })
}

/// Iterates the valid records of a segment image from its start.
/// Stops at the end marker or the first torn record.
pub(crate) fn scan(seg: &[u8], salt: u32) -> impl Iterator<Item = (usize, Record<'_>)> {
    let mut pos = 0usize;
    std::iter::from_fn(move || {
        let r = decode(seg.get(pos..)?, Some(salt)).ok()?;
        let at = pos;
        pos += r.len;
        Some((at, r))
    })
}

/// Like [`scan`], and also says whether the scan ended cleanly: false when it stopped at a
/// damaged record (a torn one, or one whose start marker or salt lost a byte) rather than at
/// the end of what was written.
pub(crate) fn scan_checked(seg: &[u8], salt: u32) -> (Vec<(usize, Record<'_>)>, bool) {
    let mut out = Vec::new();
    let mut pos = 0usize;
    loop {
        let Some(rest) = seg.get(pos..).filter(|r| r.len() >= HEADER) else { return (out, true) };
        match decode(rest, Some(salt)) {
            Ok(r) => {
                pos += r.len;
                out.push((pos - r.len, r));
            }
            Err(Invalid::Torn) => return (out, false),
            Err(Invalid::End) => {
                // Never written (zeros), or a record of the segment's previous life (another
                // salt). A salt one byte away from ours, or a good salt behind a bad start
                // marker, is damage instead.
                let s = get_u32(rest, 4).unwrap_or(0);
                let near = (s ^ salt).to_le_bytes().iter().filter(|b| **b != 0).count() <= 1;
                return (out, !(near && s != 0 && rest[..HEADER].iter().any(|b| *b != 0)));
            }
        }
    }
}

/// Where the records of a segment with an LSN of at most `upto` end: the bytes they fill from
/// offset 0. `records` are (offset, length, LSN) in segment order, which is LSN order.
pub(crate) fn end_through(records: impl IntoIterator<Item = (usize, usize, u64)>, upto: u64) -> usize {
    records.into_iter().take_while(|r| r.2 <= upto).last().map_or(0, |r| r.0 + r.1)
}

/// Whether a valid record with this salt and an LSN in `lsns` starts anywhere after `from`
/// (a byte-by-byte search; used only after damage was found).
pub(crate) fn any_valid_after(seg: &[u8], from: usize, salt: u32, lsns: std::ops::RangeInclusive<u64>) -> bool {
    let marker = START.to_le_bytes();
    let salt_bytes = salt.to_le_bytes();
    (from + 1..seg.len().saturating_sub(HEADER)).any(|p| {
        seg[p..p + 2] == marker
            && seg[p + 4..p + 8] == salt_bytes
            && decode(&seg[p..], Some(salt)).is_ok_and(|r| lsns.contains(&r.lsn))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn put<'a>(key: &'a [u8], value: &'a [u8]) -> Body<'a> {
        Body { kind: KIND_PUT, key, value, expire_at: 0 }
    }

    #[test]
    fn an_expiring_put_roundtrips_and_a_zero_expiry_does_not_decode() {
        let b = Body { expire_at: 1_700_000_000_123, ..put(b"key", b"value") };
        let mut buf = vec![0u8; b.encoded_len()];
        encode(&mut buf, b, 7, 42, 0);
        let r = decode(&buf, Some(7)).expect("valid");
        assert_eq!((r.kind, r.expire_at, r.key, r.value), (KIND_PUT, 1_700_000_000_123, &b"key"[..], &b"value"[..]));
        // A kind-3 record whose expiry is 0 (a forged one, CRC recomputed) is refused.
        buf[HEADER + 3..HEADER + 11].fill(0);
        let t = buf.len() - TRAILER;
        let crc = crc32c::crc32c(&buf[..t + 4]);
        put_u32(&mut buf, t + 4, crc);
        assert_eq!(decode(&buf, Some(7)).unwrap_err(), Invalid::Torn);
    }

    #[test]
    fn damage_in_the_middle_is_not_a_clean_end() {
        let n = encoded_len(3, 5);
        let mut b = vec![0u8; 4 * n];
        for i in 0..3 {
            encode(&mut b[i * n..(i + 1) * n], put(b"key", b"value"), 0xABCD_1234, i as u64, 0);
        }
        assert_eq!(scan_checked(&b, 0xABCD_1234).0.len(), 3);
        assert!(scan_checked(&b, 0xABCD_1234).1);
        for at in [n, n + 1, n + 4, n + 9, n + 20] {
            let mut d = b.clone();
            d[at] ^= 0x08;
            let (recs, clean) = scan_checked(&d, 0xABCD_1234);
            assert_eq!(recs.len(), 1);
            assert!(!clean, "flip at {at} looks like a clean end");
        }
        // Bytes of another incarnation after the end are a clean end.
        let mut d = b.clone();
        encode(&mut d[3 * n..4 * n], put(b"key", b"value"), 0x5555_0000, 9, 0);
        assert!(scan_checked(&d, 0xABCD_1234).1);
    }

    #[test]
    fn roundtrip_and_every_truncation_is_detected() {
        let n = encoded_len(3, 5);
        let mut b = vec![0u8; n];
        encode(&mut b, put(b"key", b"value"), 7, 42, 2);
        let r = decode(&b, Some(7)).expect("valid");
        assert_eq!((r.lsn, r.key, r.value, r.batch_remaining, r.len), (42, &b"key"[..], &b"value"[..], 2, n));
        assert_eq!(decode(&b, Some(8)).unwrap_err(), Invalid::End);
        for cut in 2..n {
            let mut t = b.clone();
            t[cut..].fill(0);
            assert!(decode(&t, Some(7)).is_err(), "torn at {cut} accepted");
        }
        for i in 0..n {
            let mut t = b.clone();
            t[i] ^= 0x40;
            assert!(decode(&t, Some(7)).is_err(), "flip at {i} accepted");
        }
    }
}
