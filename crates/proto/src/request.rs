//! Requests (client to server): opcodes `0x01..=0x7f`.

use std::ops::Bound;

use halyard_codec::Writer;

use crate::reader::Reader;
use crate::{begin_frame, finish_frame, ProtoError};

/// Request opcodes (the frame's kind byte).
pub mod kind {
    /// Handshake; must be the first frame on a connection.
    pub const HELLO: u8 = 0x01;
    /// Liveness check; the reply echoes the payload.
    pub const PING: u8 = 0x02;
    /// Read one key.
    pub const GET: u8 = 0x03;
    /// Write one key.
    pub const PUT: u8 = 0x04;
    /// Delete one key.
    pub const DELETE: u8 = 0x05;
    /// Atomic group of puts and deletes.
    pub const BATCH: u8 = 0x06;
    /// One page of an ordered range scan.
    pub const SCAN: u8 = 0x07;
    /// REGION_MAP (cluster mode).
    pub const REGION_MAP: u8 = 0x08;
    /// AUTH: the server's password.
    pub const AUTH: u8 = 0x09;
    /// RESP: a Redis command forwarded by another node of the cluster to a region's primary.
    pub const RESP: u8 = 0x0a;
    /// ROUTED: another request, for a region at an epoch (cluster clients send every request so).
    pub const ROUTED: u8 = 0x0b;
    /// Delete every key of a range `[start, end)`.
    pub const DELETE_RANGE: u8 = 0x0c;
}

const OP_PUT: u8 = 1;
const OP_DELETE: u8 = 2;
const BOUND_UNBOUNDED: u8 = 0;
const BOUND_INCLUDED: u8 = 1;
const BOUND_EXCLUDED: u8 = 2;
const SCAN_REVERSE: u8 = 1;

/// A request, borrowing its keys and values from the receive buffer (server) or the caller (client).
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Request<'a> {
    /// Handshake: the versions the client speaks and the largest frame it accepts.
    Hello {
        /// Oldest supported version.
        min_version: u16,
        /// Newest supported version.
        max_version: u16,
        /// Largest frame the client will accept; the server keeps replies within it.
        max_frame_bytes: u32,
    },
    /// Echo request.
    Ping {
        /// Echoed back verbatim.
        payload: &'a [u8],
    },
    /// Read one key.
    Get {
        /// The key.
        key: &'a [u8],
    },
    /// Write one key.
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Delete every key of `[start, end)` (`end` greater than `start`). Payload:
    /// `u32 len | start | end` (the end runs to the end of the payload).
    DeleteRange {
        /// First key deleted.
        start: &'a [u8],
        /// First key past the range.
        end: &'a [u8],
    },
    /// Delete one key.
    Delete {
        /// The key.
        key: &'a [u8],
    },
    /// Apply all operations atomically, or none.
    Batch {
        /// The operations, in order.
        ops: Vec<BatchOp<'a>>,
    },
    /// Read one page of a range.
    Scan(ScanRequest<'a>),
    /// The node's region map (cluster mode): answered with a VALUE holding the map as JSON.
    RegionMap,
    /// The server's password (`requirepass`): answered with DONE, or ERROR `AuthFailed`.
    Auth {
        /// The password.
        password: &'a [u8],
    },
    /// A Redis command forwarded to the primary of `region` (cluster mode), run there as if a
    /// Redis client had sent it, confined to the region's keys; answered with a VALUE holding
    /// the reply encoded in RESP `proto`, or ERROR `NotLeader` / `StaleEpoch`.
    ///
    /// Payload: `u32 region | u64 epoch | u8 proto | u32 argc | argc × (u32 len | bytes)`.
    Resp {
        /// The region the command's keys lie in (or, for a command on no key, the region it
        /// is confined to).
        region: u32,
        /// The region's epoch in the sender's map; the receiver refuses any other.
        epoch: u64,
        /// The RESP version to encode the reply in (2 or 3).
        proto: u8,
        /// The command's name and arguments.
        args: Vec<&'a [u8]>,
    },
    /// `inner` (GET, PUT, DELETE, BATCH, SCAN or DELETE_RANGE) for the region `region` at `epoch` in the
    /// sender's map: the receiver runs it only if that is its own epoch for the region, and
    /// answers ERROR `StaleEpoch` (naming its epoch) otherwise.
    ///
    /// Payload: `u32 region | u64 epoch | u8 inner kind | inner payload`.
    Routed {
        /// The region of the inner request's keys.
        region: u32,
        /// The region's epoch in the sender's map.
        epoch: u64,
        /// The request itself.
        inner: Box<Request<'a>>,
    },
}

/// One operation of a batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BatchOp<'a> {
    /// Write a key.
    Put {
        /// The key.
        key: &'a [u8],
        /// The value.
        value: &'a [u8],
    },
    /// Delete a key.
    Delete {
        /// The key.
        key: &'a [u8],
    },
}

/// A scan page request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanRequest<'a> {
    /// Lower bound.
    pub start: Bound<&'a [u8]>,
    /// Upper bound.
    pub end: Bound<&'a [u8]>,
    /// Descending order (pages then walk from `end` down to `start`).
    pub reverse: bool,
    /// At most this many pairs in the page; 0 means no count limit (the frame size still bounds the page).
    pub limit: u32,
}

impl<'a> Request<'a> {
    /// The opcode of this request.
    pub fn kind(&self) -> u8 {
        match self {
            Request::Hello { .. } => kind::HELLO,
            Request::Ping { .. } => kind::PING,
            Request::Get { .. } => kind::GET,
            Request::Put { .. } => kind::PUT,
            Request::Delete { .. } => kind::DELETE,
            Request::DeleteRange { .. } => kind::DELETE_RANGE,
            Request::Batch { .. } => kind::BATCH,
            Request::Scan(_) => kind::SCAN,
            Request::RegionMap => kind::REGION_MAP,
            Request::Auth { .. } => kind::AUTH,
            Request::Resp { .. } => kind::RESP,
            Request::Routed { .. } => kind::ROUTED,
        }
    }

    /// Parses a request payload. Never panics; allocates at most in proportion to `payload`.
    pub fn decode(kind: u8, payload: &'a [u8]) -> Result<Request<'a>, ProtoError> {
        let mut r = Reader::new(payload);
        let req = match kind {
            kind::HELLO => Request::Hello {
                min_version: r.u16("hello min_version")?,
                max_version: r.u16("hello max_version")?,
                max_frame_bytes: r.u32("hello max_frame_bytes")?,
            },
            kind::PING => Request::Ping { payload: r.rest() },
            kind::GET => Request::Get { key: r.rest() },
            kind::PUT => Request::Put { key: r.bytes("put key")?, value: r.rest() },
            kind::DELETE => Request::Delete { key: r.rest() },
            kind::DELETE_RANGE => Request::DeleteRange { start: r.bytes("delete range start")?, end: r.rest() },
            kind::BATCH => Request::Batch { ops: decode_batch(&mut r)? },
            kind::SCAN => {
                let flags = r.u8("scan flags")?;
                if flags & !SCAN_REVERSE != 0 {
                    return Err(ProtoError::Invalid("unknown scan flags"));
                }
                let limit = r.u32("scan limit")?;
                let start = decode_bound(&mut r, "scan start bound")?;
                let end = decode_bound(&mut r, "scan end bound")?;
                Request::Scan(ScanRequest { start, end, reverse: flags & SCAN_REVERSE != 0, limit })
            }
            kind::REGION_MAP => Request::RegionMap,
            kind::AUTH => Request::Auth { password: r.rest() },
            kind::RESP => decode_resp(&mut r)?,
            kind::ROUTED => {
                let region = r.u32("routed region")?;
                let epoch = r.u64("routed epoch")?;
                let inner = r.u8("routed kind")?;
                if !matches!(
                    inner,
                    kind::GET | kind::PUT | kind::DELETE | kind::BATCH | kind::SCAN | kind::DELETE_RANGE
                ) {
                    return Err(ProtoError::Invalid(
                        "a routed request holds a GET, PUT, DELETE, BATCH, SCAN or DELETE_RANGE",
                    ));
                }
                Request::Routed { region, epoch, inner: Box::new(Request::decode(inner, r.rest())?) }
            }
            other => return Err(ProtoError::UnknownKind(other)),
        };
        r.finish()?;
        Ok(req)
    }

    /// Appends the payload (no frame) to `out`.
    pub fn encode_payload(&self, out: &mut Vec<u8>) {
        // Callers keep every blob below the frame limit, which `finish_frame` checks against
        // `u32`, so no length prefix is truncated in a frame that is sent.
        let mut w = Writer::from(std::mem::take(out));
        match self {
            Request::Hello { min_version, max_version, max_frame_bytes } => {
                w.u16(*min_version).u16(*max_version).u32(*max_frame_bytes);
            }
            Request::Ping { payload } => {
                w.raw(payload);
            }
            Request::Get { key } | Request::Delete { key } => {
                w.raw(key);
            }
            Request::Put { key, value } => {
                w.bytes(key).raw(value);
            }
            Request::DeleteRange { start, end } => {
                w.bytes(start).raw(end);
            }
            Request::Batch { ops } => {
                w.u32(ops.len() as u32);
                for op in ops {
                    match op {
                        BatchOp::Put { key, value } => w.u8(OP_PUT).bytes(key).bytes(value),
                        BatchOp::Delete { key } => w.u8(OP_DELETE).bytes(key),
                    };
                }
            }
            Request::Scan(s) => {
                w.u8(if s.reverse { SCAN_REVERSE } else { 0 }).u32(s.limit);
                encode_bound(&mut w, s.start);
                encode_bound(&mut w, s.end);
            }
            Request::RegionMap => {}
            Request::Auth { password } => {
                w.raw(password);
            }
            Request::Routed { region, epoch, inner } => {
                w.u32(*region).u64(*epoch).u8(inner.kind());
                let mut rest = w.into_inner();
                inner.encode_payload(&mut rest);
                w = Writer::from(rest);
            }
            Request::Resp { region, epoch, proto, args } => {
                w.u32(*region).u64(*epoch).u8(*proto).u32(args.len() as u32);
                for a in args {
                    w.bytes(a);
                }
            }
        }
        *out = w.into_inner();
    }
}

/// Appends one complete request frame to `out`; on `FrameTooLarge` (the peer's limit) `out` is unchanged.
pub fn encode_request(
    id: u64,
    req: &Request<'_>,
    out: &mut Vec<u8>,
    max_frame_bytes: usize,
) -> Result<usize, ProtoError> {
    let start = begin_frame(out, id, req.kind());
    req.encode_payload(out);
    finish_frame(out, start, max_frame_bytes)
}

fn decode_batch<'a>(r: &mut Reader<'a>) -> Result<Vec<BatchOp<'a>>, ProtoError> {
    let count = r.u32("batch count")? as usize;
    // Each op takes at least 5 bytes; bounding the reservation by what is present stops a forged
    // count from allocating more than the payload justifies.
    let mut ops = Vec::with_capacity(count.min(r.remaining() / 5));
    for _ in 0..count {
        let op = match r.u8("batch op")? {
            OP_PUT => BatchOp::Put { key: r.bytes("batch key")?, value: r.bytes("batch value")? },
            OP_DELETE => BatchOp::Delete { key: r.bytes("batch key")? },
            _ => return Err(ProtoError::Invalid("unknown batch op")),
        };
        ops.push(op);
    }
    Ok(ops)
}

fn decode_resp<'a>(r: &mut Reader<'a>) -> Result<Request<'a>, ProtoError> {
    let region = r.u32("resp region")?;
    let epoch = r.u64("resp epoch")?;
    let proto = r.u8("resp proto")?;
    if !(2..=3).contains(&proto) {
        return Err(ProtoError::Invalid("resp protocol version must be 2 or 3"));
    }
    let argc = r.u32("resp argc")? as usize;
    if argc == 0 {
        return Err(ProtoError::Invalid("resp command without a name"));
    }
    // Each argument takes at least its 4-byte length.
    let mut args = Vec::with_capacity(argc.min(r.remaining() / 4));
    for _ in 0..argc {
        args.push(r.bytes("resp argument")?);
    }
    Ok(Request::Resp { region, epoch, proto, args })
}

fn decode_bound<'a>(r: &mut Reader<'a>, what: &'static str) -> Result<Bound<&'a [u8]>, ProtoError> {
    match r.u8(what)? {
        BOUND_UNBOUNDED => Ok(Bound::Unbounded),
        BOUND_INCLUDED => Ok(Bound::Included(r.bytes(what)?)),
        BOUND_EXCLUDED => Ok(Bound::Excluded(r.bytes(what)?)),
        _ => Err(ProtoError::Invalid("unknown bound kind")),
    }
}

fn encode_bound(w: &mut Writer, b: Bound<&[u8]>) {
    match b {
        Bound::Unbounded => w.u8(BOUND_UNBOUNDED),
        Bound::Included(k) => w.u8(BOUND_INCLUDED).bytes(k),
        Bound::Excluded(k) => w.u8(BOUND_EXCLUDED).bytes(k),
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    fn round_trip(req: Request<'_>) {
        let mut p = Vec::new();
        req.encode_payload(&mut p);
        assert_eq!(Request::decode(req.kind(), &p).unwrap(), req);
    }

    #[test]
    fn every_request_round_trips() {
        round_trip(Request::Hello { min_version: 1, max_version: 3, max_frame_bytes: 1 << 20 });
        round_trip(Request::Ping { payload: b"" });
        round_trip(Request::Get { key: b"k" });
        round_trip(Request::Put { key: b"", value: b"v" });
        round_trip(Request::Delete { key: b"key" });
        round_trip(Request::DeleteRange { start: b"a", end: b"b" });
        round_trip(Request::Batch { ops: vec![] });
        round_trip(Request::RegionMap);
        round_trip(Request::Auth { password: b"secret" });
        round_trip(Request::Resp { region: 7, epoch: 3, proto: 3, args: vec![b"SET", b"k", b""] });
        round_trip(Request::Routed { region: 2, epoch: 9, inner: Box::new(Request::Put { key: b"k", value: b"v" }) });
        round_trip(Request::Routed {
            region: 2,
            epoch: 9,
            inner: Box::new(Request::Scan(ScanRequest {
                start: Bound::Unbounded,
                end: Bound::Excluded(b"z"),
                reverse: false,
                limit: 5,
            })),
        });
        round_trip(Request::Batch {
            ops: vec![BatchOp::Put { key: b"a", value: b"1" }, BatchOp::Delete { key: b"b" }],
        });
        round_trip(Request::Scan(ScanRequest {
            start: Bound::Included(b"a"),
            end: Bound::Excluded(b"z"),
            reverse: true,
            limit: 10,
        }));
        round_trip(Request::Scan(ScanRequest {
            start: Bound::Unbounded,
            end: Bound::Unbounded,
            reverse: false,
            limit: 0,
        }));
    }

    #[test]
    fn put_layout_is_documented_bytes() {
        let mut p = Vec::new();
        Request::Put { key: b"ab", value: b"xyz" }.encode_payload(&mut p);
        assert_eq!(p, [2, 0, 0, 0, b'a', b'b', b'x', b'y', b'z']);
    }

    #[test]
    fn malformed_payloads_are_errors() {
        assert_eq!(Request::decode(0x7f, b""), Err(ProtoError::UnknownKind(0x7f)));
        assert_eq!(Request::decode(kind::HELLO, b"\x01\x00"), Err(ProtoError::Truncated("hello max_version")));
        assert_eq!(Request::decode(kind::PUT, b"\x05\x00\x00\x00ab"), Err(ProtoError::Truncated("put key")));
        // A forged count of 4 billion operations fails on the missing bytes without reserving for them.
        assert_eq!(Request::decode(kind::BATCH, b"\xff\xff\xff\xff"), Err(ProtoError::Truncated("batch op")));
        assert_eq!(Request::decode(kind::BATCH, b"\x01\x00\x00\x00\x09"), Err(ProtoError::Invalid("unknown batch op")));
        assert_eq!(Request::decode(kind::SCAN, b"\x02\0\0\0\0\0\0"), Err(ProtoError::Invalid("unknown scan flags")));
        assert_eq!(Request::decode(kind::SCAN, b"\x00\0\0\0\0\0\0\0"), Err(ProtoError::TrailingBytes(1)));
        let resp = |proto: u8, argc: u32| {
            let mut p = vec![0u8; 12];
            p.push(proto);
            p.extend_from_slice(&argc.to_le_bytes());
            p
        };
        assert_eq!(
            Request::decode(kind::RESP, &resp(4, 1)),
            Err(ProtoError::Invalid("resp protocol version must be 2 or 3"))
        );
        assert_eq!(Request::decode(kind::RESP, &resp(2, 0)), Err(ProtoError::Invalid("resp command without a name")));
        assert_eq!(Request::decode(kind::RESP, &resp(2, u32::MAX)), Err(ProtoError::Truncated("resp argument")));
        let mut nested = vec![0u8; 12];
        nested.push(kind::ROUTED);
        assert_eq!(
            Request::decode(kind::ROUTED, &nested),
            Err(ProtoError::Invalid("a routed request holds a GET, PUT, DELETE, BATCH, SCAN or DELETE_RANGE"))
        );
    }
}
