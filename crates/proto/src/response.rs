//! Responses (server to client): kinds `0x80..=0xff`.

use halyard_codec::Writer;

use crate::reader::Reader;
use crate::{begin_frame, finish_frame, ErrorCode, ProtoError, FRAME_OVERHEAD};

/// Reply kinds (the frame's kind byte).
pub mod kind {
    /// Handshake accepted.
    pub const HELLO_OK: u8 = 0x81;
    /// Reply to PING.
    pub const PONG: u8 = 0x82;
    /// Reply to GET.
    pub const VALUE: u8 = 0x83;
    /// Reply to PUT, DELETE and BATCH: applied.
    pub const DONE: u8 = 0x84;
    /// Reply to SCAN.
    pub const SCAN_PAGE: u8 = 0x87;
    /// The request failed; carries an error code and message.
    pub const ERROR: u8 = 0xff;
}

const VALUE_ABSENT: u8 = 0;
const VALUE_FOUND: u8 = 1;
const PAGE_HAS_RESUME: u8 = 1;

/// A response, owning its data (it outlives the receive buffer on the client).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Response {
    /// Handshake accepted.
    HelloOk {
        /// The version both sides will speak.
        version: u16,
        /// Largest frame the server accepts; larger requests are refused and close the connection.
        max_frame_bytes: u32,
    },
    /// Echo of a PING payload.
    Pong {
        /// The PING's payload.
        payload: Vec<u8>,
    },
    /// The value of a GET, or `None` when the key is absent.
    Value(Option<Vec<u8>>),
    /// A PUT, DELETE or BATCH was applied.
    Done,
    /// One page of a scan.
    ScanPage(ScanPage),
    /// The request failed.
    Error {
        /// What kind of failure.
        code: ErrorCode,
        /// Human-readable detail.
        message: String,
    },
}

/// One page of scan results.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ScanPage {
    /// Pairs in scan order.
    pub pairs: Vec<(Vec<u8>, Vec<u8>)>,
    /// Set when the range may hold more pairs: the last key returned. The next page starts
    /// just after it (forward: start = Excluded(resume); reverse: end = Excluded(resume)).
    pub resume: Option<Vec<u8>>,
}

/// Bytes one pair adds to a SCAN_PAGE frame, for servers filling a page up to a frame limit.
pub fn scan_pair_len(key: usize, value: usize) -> usize {
    8 + key + value
}

/// Bytes of a SCAN_PAGE frame besides its pairs, with a resume key of `resume` bytes.
pub fn scan_page_overhead(resume: usize) -> usize {
    FRAME_OVERHEAD + 1 + 4 + 4 + resume
}

impl Response {
    /// The reply kind of this response.
    pub fn kind(&self) -> u8 {
        match self {
            Response::HelloOk { .. } => kind::HELLO_OK,
            Response::Pong { .. } => kind::PONG,
            Response::Value(_) => kind::VALUE,
            Response::Done => kind::DONE,
            Response::ScanPage(_) => kind::SCAN_PAGE,
            Response::Error { .. } => kind::ERROR,
        }
    }

    /// Parses a response payload. Never panics; allocates at most in proportion to `payload`.
    pub fn decode(kind: u8, payload: &[u8]) -> Result<Response, ProtoError> {
        let mut r = Reader::new(payload);
        let resp = match kind {
            kind::HELLO_OK => {
                Response::HelloOk { version: r.u16("hello version")?, max_frame_bytes: r.u32("hello max_frame_bytes")? }
            }
            kind::PONG => Response::Pong { payload: r.rest().to_vec() },
            kind::VALUE => match r.u8("value flag")? {
                VALUE_FOUND => Response::Value(Some(r.rest().to_vec())),
                VALUE_ABSENT => Response::Value(None),
                _ => return Err(ProtoError::Invalid("value flag")),
            },
            kind::DONE => Response::Done,
            kind::SCAN_PAGE => Response::ScanPage(decode_page(&mut r)?),
            kind::ERROR => {
                let code = ErrorCode::from_u16(r.u16("error code")?);
                let message =
                    std::str::from_utf8(r.rest()).map_err(|_| ProtoError::Invalid("error message is not UTF-8"))?;
                Response::Error { code, message: message.to_owned() }
            }
            other => return Err(ProtoError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(resp)
    }

    /// Appends the payload (no frame) to `out`.
    pub fn encode_payload(&self, out: &mut Vec<u8>) {
        // Callers keep every blob below the frame limit, which `finish_frame` checks against
        // `u32`, so no length prefix is truncated in a frame that is sent.
        let mut w = Writer::from(std::mem::take(out));
        match self {
            Response::HelloOk { version, max_frame_bytes } => {
                w.u16(*version).u32(*max_frame_bytes);
            }
            Response::Pong { payload } => {
                w.raw(payload);
            }
            Response::Value(None) => {
                w.u8(VALUE_ABSENT);
            }
            Response::Value(Some(v)) => {
                w.u8(VALUE_FOUND).raw(v);
            }
            Response::Done => {}
            Response::ScanPage(page) => {
                w.u8(if page.resume.is_some() { PAGE_HAS_RESUME } else { 0 }).u32(page.pairs.len() as u32);
                for (k, v) in &page.pairs {
                    w.bytes(k).bytes(v);
                }
                if let Some(k) = &page.resume {
                    w.bytes(k);
                }
            }
            Response::Error { code, message } => {
                w.u16(code.to_u16()).raw(message.as_bytes());
            }
        }
        *out = w.into_inner();
    }
}

/// Appends one complete response frame to `out`; on `FrameTooLarge` (the peer's limit) `out` is unchanged.
pub fn encode_response(
    id: u64,
    resp: &Response,
    out: &mut Vec<u8>,
    max_frame_bytes: usize,
) -> Result<usize, ProtoError> {
    let start = begin_frame(out, id, resp.kind());
    resp.encode_payload(out);
    finish_frame(out, start, max_frame_bytes)
}

fn decode_page(r: &mut Reader<'_>) -> Result<ScanPage, ProtoError> {
    let flags = r.u8("scan page flags")?;
    if flags & !PAGE_HAS_RESUME != 0 {
        return Err(ProtoError::Invalid("unknown scan page flags"));
    }
    let count = r.u32("scan page count")? as usize;
    // A pair takes at least 8 bytes: never reserve more than the payload can hold.
    let mut pairs = Vec::with_capacity(count.min(r.remaining() / 8));
    for _ in 0..count {
        let k = r.bytes("scan key")?.to_vec();
        let v = r.bytes("scan value")?.to_vec();
        pairs.push((k, v));
    }
    let resume = if flags & PAGE_HAS_RESUME != 0 { Some(r.bytes("scan resume key")?.to_vec()) } else { None };
    Ok(ScanPage { pairs, resume })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(resp: Response) {
        let mut p = Vec::new();
        resp.encode_payload(&mut p);
        assert_eq!(Response::decode(resp.kind(), &p).unwrap(), resp);
    }

    #[test]
    fn every_response_round_trips() {
        round_trip(Response::HelloOk { version: 1, max_frame_bytes: 4096 });
        round_trip(Response::Pong { payload: b"x".to_vec() });
        round_trip(Response::Value(None));
        round_trip(Response::Value(Some(vec![])));
        round_trip(Response::Value(Some(b"v".to_vec())));
        round_trip(Response::Done);
        round_trip(Response::ScanPage(ScanPage::default()));
        round_trip(Response::ScanPage(ScanPage {
            pairs: vec![(b"a".to_vec(), b"1".to_vec()), (b"b".to_vec(), vec![])],
            resume: Some(b"b".to_vec()),
        }));
        round_trip(Response::Error { code: ErrorCode::KeyTooLarge, message: "key of 2000 bytes".into() });
        round_trip(Response::Error { code: ErrorCode::Unknown(4242), message: String::new() });
    }

    #[test]
    fn page_size_helpers_match_the_encoding() {
        let page = ScanPage { pairs: vec![(b"key".to_vec(), b"value".to_vec())], resume: Some(b"key".to_vec()) };
        let mut out = Vec::new();
        let size = encode_response(1, &Response::ScanPage(page), &mut out, 1 << 20).unwrap();
        assert_eq!(size, scan_page_overhead(3) + scan_pair_len(3, 5));
        assert_eq!(size, out.len());
    }

    #[test]
    fn malformed_payloads_are_errors() {
        assert_eq!(Response::decode(0x80, b""), Err(ProtoError::UnknownKind(0x80)));
        assert_eq!(Response::decode(kind::VALUE, b"\x00x"), Err(ProtoError::TrailingBytes(1)));
        assert_eq!(Response::decode(kind::VALUE, b"\x07"), Err(ProtoError::Invalid("value flag")));
        assert_eq!(
            Response::decode(kind::ERROR, b"\x01\x00\xff"),
            Err(ProtoError::Invalid("error message is not UTF-8"))
        );
        assert_eq!(Response::decode(kind::SCAN_PAGE, b"\x00\xff\xff\xff\xff"), Err(ProtoError::Truncated("scan key")));
    }

    #[test]
    fn error_codes_are_stable() {
        assert_eq!(ErrorCode::KeyTooLarge.to_u16(), 10);
        assert_eq!(ErrorCode::from_u16(12), ErrorCode::NoSpace);
        assert_eq!(ErrorCode::from_u16(7), ErrorCode::Unknown(7));
    }
}
