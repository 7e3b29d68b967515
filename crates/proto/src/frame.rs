//! Framing: magic, length, request id, kind, payload, CRC32C trailer.

use halyard_codec::{get_u32, get_u64, put_u32};

use crate::{ProtoError, MAGIC};

/// Bytes before the payload: magic (4), payload length (4), request id (8), kind (1).
pub const HEADER_LEN: usize = 17;
/// Bytes after the payload: CRC32C (4).
pub const TRAILER_LEN: usize = 4;
/// Header plus trailer: the size of a frame with an empty payload.
pub const FRAME_OVERHEAD: usize = HEADER_LEN + TRAILER_LEN;

/// One complete, checksum-verified frame borrowed from the receive buffer.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Frame<'a> {
    /// The request id; a reply carries the id of its request.
    pub id: u64,
    /// Opcode (request) or reply kind (response).
    pub kind: u8,
    /// The payload, whose layout depends on `kind`.
    pub payload: &'a [u8],
}

/// Finds the frame at the start of `buf`.
///
/// Returns `Ok(None)` when more bytes are needed, `Ok(Some((frame, consumed)))` for a complete
/// frame, and an error (always a framing error) when the bytes cannot be a valid frame. Bad magic
/// is reported from the first byte that differs, and an oversized frame as soon as its length
/// field has arrived, so a receiver never buffers (or allocates for) a frame it will refuse.
pub fn decode_frame(buf: &[u8], max_frame_bytes: usize) -> Result<Option<(Frame<'_>, usize)>, ProtoError> {
    let magic = MAGIC.to_le_bytes();
    let seen = buf.len().min(4);
    if buf.get(..seen) != magic.get(..seen) {
        let mut found = [0u8; 4];
        for (f, b) in found.iter_mut().zip(buf) {
            *f = *b;
        }
        return Err(ProtoError::BadMagic { found: u32::from_le_bytes(found) });
    }
    let Some(payload_len) = get_u32(buf, 4) else { return Ok(None) };
    let payload_len = u64::from(payload_len);
    let size = payload_len + FRAME_OVERHEAD as u64;
    if size > max_frame_bytes as u64 {
        return Err(ProtoError::FrameTooLarge { size, max: max_frame_bytes });
    }
    // `size` fits in usize: it is at most `max_frame_bytes`.
    let size = size as usize;
    let Some(frame) = buf.get(..size) else { return Ok(None) };
    // A frame is at least FRAME_OVERHEAD bytes (`size` counts it), so these all exist.
    let (body, trailer) = frame.split_at(size - TRAILER_LEN);
    let stored = get_u32(trailer, 0).unwrap_or_default();
    let computed = crc32c::crc32c(body);
    if stored != computed {
        return Err(ProtoError::Checksum { stored, computed });
    }
    let (Some(id), Some(&kind), Some(payload)) = (get_u64(body, 8), body.get(16), body.get(HEADER_LEN..)) else {
        return Err(ProtoError::Checksum { stored, computed });
    };
    Ok(Some((Frame { id, kind, payload }, size)))
}

/// Starts a frame at the end of `out`; write the payload after it, then call [`finish_frame`].
/// Returns the frame's start offset. Writing in place avoids a copy of every payload.
pub fn begin_frame(out: &mut Vec<u8>, id: u64, kind: u8) -> usize {
    let start = out.len();
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&[0; 4]); // payload length, patched by finish_frame
    out.extend_from_slice(&id.to_le_bytes());
    out.push(kind);
    start
}

/// Completes the frame begun at `start`: patches the length and appends the checksum.
/// If the frame would exceed `max_frame_bytes`, removes it from `out` and returns `FrameTooLarge`,
/// so a caller can reply with an error instead of sending something the peer will refuse.
pub fn finish_frame(out: &mut Vec<u8>, start: usize, max_frame_bytes: usize) -> Result<usize, ProtoError> {
    let size = out.len().saturating_sub(start) + TRAILER_LEN;
    let payload_len = size.checked_sub(FRAME_OVERHEAD).and_then(|n| u32::try_from(n).ok());
    let payload_len = match payload_len {
        Some(n) if size <= max_frame_bytes => n,
        _ => {
            out.truncate(start);
            return Err(ProtoError::FrameTooLarge { size: size as u64, max: max_frame_bytes });
        }
    };
    put_u32(out, start + 4, payload_len);
    let crc = crc32c::crc32c(out.get(start..).unwrap_or_default());
    out.extend_from_slice(&crc.to_le_bytes());
    Ok(size)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn frame(id: u64, kind: u8, payload: &[u8]) -> Vec<u8> {
        let mut out = Vec::new();
        let start = begin_frame(&mut out, id, kind);
        out.extend_from_slice(payload);
        finish_frame(&mut out, start, 1 << 20).unwrap();
        out
    }

    #[test]
    fn round_trip_and_partial_input() {
        let f = frame(42, 3, b"hello");
        assert_eq!(f.len(), FRAME_OVERHEAD + 5);
        for n in 0..f.len() {
            assert_eq!(decode_frame(&f[..n], 1 << 20).unwrap(), None, "prefix of {n} bytes");
        }
        let (fr, used) = decode_frame(&f, 1 << 20).unwrap().unwrap();
        assert_eq!((fr.id, fr.kind, fr.payload, used), (42, 3, &b"hello"[..], f.len()));
    }

    #[test]
    fn two_frames_back_to_back() {
        let mut buf = frame(1, 2, b"a");
        buf.extend(frame(2, 2, b"bb"));
        let (f1, n1) = decode_frame(&buf, 1024).unwrap().unwrap();
        let (f2, n2) = decode_frame(&buf[n1..], 1024).unwrap().unwrap();
        assert_eq!((f1.id, f2.id, n1 + n2), (1, 2, buf.len()));
    }

    #[test]
    fn bad_magic_is_seen_from_the_first_byte() {
        assert!(matches!(decode_frame(b"G", 1024), Err(ProtoError::BadMagic { .. })));
        assert!(matches!(decode_frame(b"GET / HTTP/1.1\r\n", 1024), Err(ProtoError::BadMagic { .. })));
        assert_eq!(decode_frame(b"HL", 1024), Ok(None));
    }

    #[test]
    fn oversized_frame_is_refused_from_its_header() {
        let mut hdr = MAGIC.to_le_bytes().to_vec();
        hdr.extend_from_slice(&u32::MAX.to_le_bytes());
        let err = decode_frame(&hdr, 1 << 20).unwrap_err();
        assert_eq!(err, ProtoError::FrameTooLarge { size: u32::MAX as u64 + FRAME_OVERHEAD as u64, max: 1 << 20 });
        assert!(err.is_framing());
    }

    #[test]
    fn any_flipped_bit_is_detected() {
        let f = frame(9, 4, b"payload");
        for i in 0..f.len() * 8 {
            let mut g = f.clone();
            g[i / 8] ^= 1 << (i % 8);
            assert!(!matches!(decode_frame(&g, 1024), Ok(Some(_))), "bit {i} flip went unnoticed");
        }
    }

    #[test]
    fn encoder_refuses_frames_over_the_limit() {
        let mut out = b"keep".to_vec();
        let start = begin_frame(&mut out, 1, 1);
        out.extend_from_slice(&[0; 100]);
        let err = finish_frame(&mut out, start, 64).unwrap_err();
        assert!(matches!(err, ProtoError::FrameTooLarge { size: 121, max: 64 }));
        assert_eq!(out, b"keep");
    }
}
