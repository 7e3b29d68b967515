//! Halyard's one byte codec: the engine's on-disk formats (`crates/engine/docs/format.md`), the
//! native protocol (`crates/proto/docs/protocol.md`) and the replication protocol
//! (`crates/replication/docs/replication.md`) all write and read their fields with it.
//!
//! # Byte conventions
//!
//! - Integers are unsigned, fixed width and **little-endian**: `u8`, `u16`, `u32` and `u64`
//!   take 1, 2, 4 and 8 bytes. There are no variable-length integers and no padding.
//! - `bytes` is a byte string with a length prefix: a `u32` length, then that many bytes.
//! - `raw` bytes have no prefix: their length is known from elsewhere (a fixed-size field, or
//!   the rest of the buffer).
//!
//! A [`Writer`] appends fields to a `Vec<u8>`; a [`Reader`] reads them back in the same order
//! from a byte slice. Every read is bounds-checked: it returns [`Short`] when the input ends
//! before the field, never panics and never allocates, so untrusted input (a frame from the
//! network, a block from a damaged disk) can be decoded directly. A length prefix is checked
//! against the bytes present before anything is taken. [`Reader::finish`] reports bytes left
//! over after the last field as [`Trailing`].
//!
//! Structures that are patched in place (a header whose length is known only at the end, a
//! B+-tree node with slots and cells) use the fixed-offset helpers [`get_u16`], [`get_u32`],
//! [`get_u64`] (which return `None` out of range) and [`put_u16`], [`put_u32`], [`put_u64`]
//! (which panic out of range: the caller sized the buffer).
//!
//! The crate has no dependencies and no `unsafe` code.
//!
//! ```
//! use halyard_codec::{Reader, Short, Writer};
//!
//! let mut w = Writer::new();
//! w.u8(1).u16(0x0203).bytes(b"key");
//! let buf = w.into_inner();
//! assert_eq!(buf, [1, 3, 2, 3, 0, 0, 0, b'k', b'e', b'y']);
//!
//! let mut r = Reader::new(&buf);
//! assert_eq!((r.u8()?, r.u16()?, r.bytes()?), (1, 0x0203, &b"key"[..]));
//! r.finish().expect("every byte used");
//!
//! let mut cut = Reader::new(&buf[..8]);
//! assert_eq!((cut.u8(), cut.u16(), cut.bytes()), (Ok(1), Ok(0x0203), Err(Short)));
//! # Ok::<(), Short>(())
//! ```

#![forbid(unsafe_code)]
#![warn(unreachable_pub)]

use std::fmt;

/// The input ends before a field (or, for callers that reuse it, a field is malformed).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Short;

impl fmt::Display for Short {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("encoding ends before a field")
    }
}

impl std::error::Error for Short {}

/// [`Reader::finish`] found this many bytes after the last field.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct Trailing(pub usize);

impl fmt::Display for Trailing {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} bytes after the last field", self.0)
    }
}

impl std::error::Error for Trailing {}

/// Appends fields to a byte vector; every method returns `&mut Self` so fields chain.
///
/// ```
/// let mut w = halyard_codec::Writer::with_capacity(16);
/// w.u32(7).u64(1 << 40).raw(b"tail");
/// assert_eq!(w.len(), 16);
/// ```
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Writer {
    buf: Vec<u8>,
}

impl Writer {
    /// An empty writer.
    pub fn new() -> Self {
        Writer::default()
    }

    /// An empty writer with room for `n` bytes.
    pub fn with_capacity(n: usize) -> Self {
        Writer { buf: Vec::with_capacity(n) }
    }

    /// One byte.
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.buf.push(v);
        self
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self, v: u16) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self, v: u32) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self, v: u64) -> &mut Self {
        self.raw(&v.to_le_bytes())
    }

    /// A byte string: its length as a `u32`, then the bytes ([`Reader::bytes`] reads it).
    ///
    /// Callers keep such fields far below 4 GiB (their formats and frame limits do): the length
    /// of a longer slice would be written modulo 2^32.
    pub fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.u32(v.len() as u32).raw(v)
    }

    /// Bytes as they are, without a length.
    pub fn raw(&mut self, v: &[u8]) -> &mut Self {
        self.buf.extend_from_slice(v);
        self
    }

    /// Bytes written so far (including any the vector held before, see [`From<Vec<u8>>`]).
    pub fn len(&self) -> usize {
        self.buf.len()
    }

    /// True when nothing has been written.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The bytes written so far.
    pub fn as_slice(&self) -> &[u8] {
        &self.buf
    }

    /// The vector itself, to patch fields in place (see [`put_u32`]) or truncate.
    pub fn as_mut_vec(&mut self) -> &mut Vec<u8> {
        &mut self.buf
    }

    /// The bytes.
    pub fn into_inner(self) -> Vec<u8> {
        self.buf
    }
}

/// A writer that appends after the vector's contents: `Writer::from(std::mem::take(out))`
/// then `*out = w.into_inner()` writes onto a caller's buffer without copying it.
impl From<Vec<u8>> for Writer {
    fn from(buf: Vec<u8>) -> Self {
        Writer { buf }
    }
}

/// A bounds-checked cursor over a byte slice, reading fields in the order a [`Writer`] wrote
/// them. A failed read returns [`Short`] and leaves the cursor where it was; nothing panics.
#[derive(Clone, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// A cursor at the start of `buf`.
    pub fn new(buf: &'a [u8]) -> Self {
        Reader { buf }
    }

    /// Bytes not yet read.
    pub fn remaining(&self) -> usize {
        self.buf.len()
    }

    /// True when every byte has been read.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }

    /// The next `n` bytes.
    pub fn take(&mut self, n: usize) -> Result<&'a [u8], Short> {
        if n > self.buf.len() {
            return Err(Short);
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], Short> {
        let (head, tail) = self.buf.split_first_chunk::<N>().ok_or(Short)?;
        self.buf = tail;
        Ok(*head)
    }

    /// One byte.
    pub fn u8(&mut self) -> Result<u8, Short> {
        Ok(u8::from_le_bytes(self.array()?))
    }

    /// A little-endian `u16`.
    pub fn u16(&mut self) -> Result<u16, Short> {
        Ok(u16::from_le_bytes(self.array()?))
    }

    /// A little-endian `u32`.
    pub fn u32(&mut self) -> Result<u32, Short> {
        Ok(u32::from_le_bytes(self.array()?))
    }

    /// A little-endian `u64`.
    pub fn u64(&mut self) -> Result<u64, Short> {
        Ok(u64::from_le_bytes(self.array()?))
    }

    /// A byte string written by [`Writer::bytes`]: a `u32` length, then that many bytes. If the
    /// length is read but the bytes are missing, the cursor stays after the length.
    pub fn bytes(&mut self) -> Result<&'a [u8], Short> {
        let n = self.u32()? as usize;
        self.take(n)
    }

    /// Everything left; the reader is empty afterwards.
    pub fn rest(&mut self) -> &'a [u8] {
        std::mem::take(&mut self.buf)
    }

    /// Ends the reading: every byte must have been used.
    pub fn finish(self) -> Result<(), Trailing> {
        match self.buf.len() {
            0 => Ok(()),
            n => Err(Trailing(n)),
        }
    }
}

fn get<const N: usize>(buf: &[u8], at: usize) -> Option<[u8; N]> {
    buf.get(at..)?.first_chunk::<N>().copied()
}

#[expect(clippy::panic, reason = "documented on each put: a field outside the caller's own buffer is a layout bug")]
fn put<const N: usize>(buf: &mut [u8], at: usize, v: [u8; N]) {
    let len = buf.len();
    match buf.get_mut(at..).and_then(|s| s.first_chunk_mut::<N>()) {
        Some(dst) => *dst = v,
        None => panic!("{N} bytes at offset {at} do not fit in a buffer of {len} bytes"),
    }
}

/// The little-endian `u16` at byte offset `at`, or `None` if the buffer ends first.
pub fn get_u16(buf: &[u8], at: usize) -> Option<u16> {
    get(buf, at).map(u16::from_le_bytes)
}

/// The little-endian `u32` at byte offset `at`, or `None` if the buffer ends first.
pub fn get_u32(buf: &[u8], at: usize) -> Option<u32> {
    get(buf, at).map(u32::from_le_bytes)
}

/// The little-endian `u64` at byte offset `at`, or `None` if the buffer ends first.
pub fn get_u64(buf: &[u8], at: usize) -> Option<u64> {
    get(buf, at).map(u64::from_le_bytes)
}

/// Writes `v` little-endian at byte offset `at`.
///
/// # Panics
///
/// If the buffer ends before `at + 2`: callers write into buffers they sized themselves.
pub fn put_u16(buf: &mut [u8], at: usize, v: u16) {
    put(buf, at, v.to_le_bytes());
}

/// Writes `v` little-endian at byte offset `at`.
///
/// # Panics
///
/// If the buffer ends before `at + 4`: callers write into buffers they sized themselves.
pub fn put_u32(buf: &mut [u8], at: usize, v: u32) {
    put(buf, at, v.to_le_bytes());
}

/// Writes `v` little-endian at byte offset `at`.
///
/// # Panics
///
/// If the buffer ends before `at + 8`: callers write into buffers they sized themselves.
pub fn put_u64(buf: &mut [u8], at: usize, v: u64) {
    put(buf, at, v.to_le_bytes());
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[derive(Clone, Debug, PartialEq, Eq)]
    enum Field {
        U8(u8),
        U16(u16),
        U32(u32),
        U64(u64),
        Bytes(Vec<u8>),
    }

    fn field() -> impl Strategy<Value = Field> {
        prop_oneof![
            any::<u8>().prop_map(Field::U8),
            any::<u16>().prop_map(Field::U16),
            any::<u32>().prop_map(Field::U32),
            any::<u64>().prop_map(Field::U64),
            proptest::collection::vec(any::<u8>(), 0..40).prop_map(Field::Bytes),
        ]
    }

    fn write(fields: &[Field]) -> Vec<u8> {
        let mut w = Writer::new();
        for f in fields {
            match f {
                Field::U8(v) => w.u8(*v),
                Field::U16(v) => w.u16(*v),
                Field::U32(v) => w.u32(*v),
                Field::U64(v) => w.u64(*v),
                Field::Bytes(v) => w.bytes(v),
            };
        }
        w.into_inner()
    }

    /// Reads fields shaped like `like`, then finishes.
    fn read(buf: &[u8], like: &[Field]) -> Result<Result<Vec<Field>, Trailing>, Short> {
        let mut r = Reader::new(buf);
        let mut out = Vec::new();
        for f in like {
            out.push(match f {
                Field::U8(_) => Field::U8(r.u8()?),
                Field::U16(_) => Field::U16(r.u16()?),
                Field::U32(_) => Field::U32(r.u32()?),
                Field::U64(_) => Field::U64(r.u64()?),
                Field::Bytes(_) => Field::Bytes(r.bytes()?.to_vec()),
            });
        }
        Ok(r.finish().map(|()| out))
    }

    proptest! {
        #[test]
        fn fields_round_trip_and_every_cut_is_short(fields in proptest::collection::vec(field(), 0..12)) {
            let buf = write(&fields);
            prop_assert_eq!(read(&buf, &fields), Ok(Ok(fields.clone())));
            for cut in 0..buf.len() {
                prop_assert_eq!(read(&buf[..cut], &fields), Err(Short), "cut at {}", cut);
            }
            let mut longer = buf.clone();
            longer.extend_from_slice(&[0, 0, 0]);
            prop_assert_eq!(read(&longer, &fields), Ok(Err(Trailing(3))));
        }

        #[test]
        fn arbitrary_input_never_panics(buf in proptest::collection::vec(any::<u8>(), 0..64), n in 0usize..80) {
            let mut r = Reader::new(&buf);
            let _ = (r.u8(), r.bytes(), r.u64(), r.take(n), r.u16(), r.u32());
            let left = r.remaining();
            prop_assert_eq!(r.rest().len(), left);
            for at in [0, 1, buf.len().saturating_sub(8), buf.len(), usize::MAX - 1] {
                let _ = (get_u16(&buf, at), get_u32(&buf, at), get_u64(&buf, at));
            }
        }
    }

    #[test]
    fn documented_bytes() {
        let mut w = Writer::new();
        w.u8(0xab).u16(0x0102).u32(0x0304_0506).u64(0x0708_090a_0b0c_0d0e).bytes(b"hi").raw(b"!");
        assert_eq!(
            w.as_slice(),
            [0xab, 2, 1, 6, 5, 4, 3, 0xe, 0xd, 0xc, 0xb, 0xa, 9, 8, 7, 2, 0, 0, 0, b'h', b'i', b'!']
        );
        assert_eq!((w.len(), w.is_empty(), Writer::default().is_empty()), (22, false, true));
    }

    #[test]
    fn a_failed_read_leaves_the_cursor() {
        let mut r = Reader::new(&[1, 2, 3]);
        assert_eq!(r.u32(), Err(Short));
        assert_eq!(r.take(4), Err(Short));
        assert_eq!(r.remaining(), 3);
        assert_eq!(r.u16(), Ok(0x0201));
        assert_eq!(r.clone().finish(), Err(Trailing(1)));
        assert_eq!(r.rest(), [3]);
        assert!(r.is_empty());
        assert_eq!(r.rest(), [] as [u8; 0]);
        assert_eq!(r.finish(), Ok(()));
    }

    #[test]
    fn a_forged_length_is_short_not_an_allocation() {
        let mut r = Reader::new(&[0xff, 0xff, 0xff, 0xff, 1, 2]);
        assert_eq!(r.bytes(), Err(Short));
        assert_eq!(r.remaining(), 2);
        assert_eq!(Reader::new(&[1, 2]).take(usize::MAX), Err(Short));
    }

    #[test]
    fn a_writer_appends_after_a_vectors_contents() {
        let mut w = Writer::from(b"head".to_vec());
        w.u16(1);
        w.as_mut_vec().push(9);
        put_u16(w.as_mut_vec(), 4, 0x0302);
        assert_eq!(w.into_inner(), b"head\x02\x03\x09");
    }

    #[test]
    fn fixed_offsets() {
        let mut b = [0u8; 8];
        put_u64(&mut b, 0, 0x1122_3344_5566_7788);
        assert_eq!(get_u64(&b, 0), Some(0x1122_3344_5566_7788));
        put_u32(&mut b, 4, 0xdead_beef);
        put_u16(&mut b, 0, 0x0102);
        assert_eq!(b, [2, 1, 0x66, 0x55, 0xef, 0xbe, 0xad, 0xde]);
        assert_eq!((get_u16(&b, 6), get_u16(&b, 7), get_u16(&b, 9)), (Some(0xdead), None, None));
        assert_eq!((get_u32(&b, 4), get_u32(&b, 5)), (Some(0xdead_beef), None));
        assert_eq!((get_u64(&b, 1), get_u64(&b, usize::MAX)), (None, None));
    }

    #[test]
    #[should_panic(expected = "4 bytes at offset 5 do not fit in a buffer of 8 bytes")]
    fn put_past_the_end_panics() {
        put_u32(&mut [0u8; 8], 5, 1);
    }

    #[test]
    fn errors_print() {
        assert_eq!(Short.to_string(), "encoding ends before a field");
        assert_eq!(Trailing(2).to_string(), "2 bytes after the last field");
    }
}
