//! The frame every message to or from a node's replication port travels in, admin requests
//! and replication streams alike (`docs/admin.md` §1): `u32 magic | u32 body length | u32
//! crc32c(body)`, then the body, whose first byte is the message's tag. This crate owns the
//! admin messages' tags ([`crate::is_admin_tag`]), `halyard-replication` the streams'.

use crate::error::{Error, Result};
use halyard_codec::{put_u32, Reader, Writer};

/// Frame magic, "HLYR".
pub const MAGIC: u32 = 0x5259_4c48;
/// Bytes before the body: magic, body length, crc32c of the body.
pub const HEADER: usize = 12;
/// Largest body accepted: a whole segment plus room for its description.
pub const MAX_BODY: usize = (16 << 20) + 4096;

/// A writer for a new frame: room for the header, the body to follow.
pub fn begin() -> Writer {
    let mut w = Writer::with_capacity(64);
    w.raw(&[0; HEADER]);
    w
}

/// The frame [`begin`]'s writer holds, its header filled in.
pub fn seal(w: Writer) -> Vec<u8> {
    let mut out = w.into_inner();
    let body_len = (out.len() - HEADER) as u32;
    let crc = crc32c::crc32c(out.get(HEADER..).unwrap_or_default());
    put_u32(&mut out, 0, MAGIC);
    put_u32(&mut out, 4, body_len);
    put_u32(&mut out, 8, crc);
    out
}

/// Parses a frame header: the body length, after checking the magic and the limit.
pub fn header(h: &[u8; HEADER]) -> Result<(usize, u32)> {
    let mut r = Reader::new(h);
    let (magic, len, crc) = (r.u32()?, r.u32()? as usize, r.u32()?);
    if magic != MAGIC {
        return Err(Error::Malformed("bad frame magic (not a replication stream?)"));
    }
    if len > MAX_BODY {
        return Err(Error::Malformed("frame larger than the limit"));
    }
    Ok((len, crc))
}

/// The body of the whole frame at the start of `buf`, its checksum verified, and the bytes
/// the frame takes; None when more bytes are needed.
pub fn split(buf: &[u8]) -> Result<Option<(&[u8], usize)>> {
    let Some(h) = buf.get(..HEADER) else {
        return Ok(None);
    };
    let mut hb = [0u8; HEADER];
    hb.copy_from_slice(h);
    let (len, crc) = header(&hb)?;
    let Some(body) = buf.get(HEADER..HEADER + len) else {
        return Ok(None);
    };
    if crc32c::crc32c(body) != crc {
        return Err(Error::Checksum);
    }
    Ok(Some((body, HEADER + len)))
}

/// Reads one frame from an async stream: its body, checksum verified.
pub async fn read_body<S: tokio::io::AsyncRead + Unpin>(s: &mut S) -> Result<Vec<u8>> {
    use tokio::io::AsyncReadExt;
    let mut h = [0u8; HEADER];
    s.read_exact(&mut h).await?;
    let (len, crc) = header(&h)?;
    let mut body = vec![0u8; len];
    s.read_exact(&mut body).await?;
    if crc32c::crc32c(&body) != crc {
        return Err(Error::Checksum);
    }
    Ok(body)
}

/// A `u32` count of items of at least `each` bytes, refused when the rest of the body cannot
/// hold them (so a forged count reserves nothing).
pub fn count(r: &mut Reader<'_>, each: usize) -> Result<usize> {
    let n = r.u32()? as usize;
    if n.saturating_mul(each) > r.remaining() {
        return Err(Error::Malformed("count larger than the message"));
    }
    Ok(n)
}
