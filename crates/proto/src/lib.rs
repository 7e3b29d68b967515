//! Halyard's native wire protocol, shared by the server and the Rust client.
//!
//! Every message is a frame: `[u32 magic][u32 payload length][u64 request id][u8 kind][payload][u32 crc32c]`,
//! all little-endian. The kind byte is an opcode in requests (`0x01..=0x7f`) and a reply kind in
//! responses (`0x80..=0xff`), so either direction decodes without context. Request ids let a client
//! pipeline many requests on one connection and match replies that arrive in any order.
//! The byte layouts are in `docs/protocol.md`.
//!
//! Decoding is two steps: [`decode_frame`] finds one complete, checksummed frame in a byte buffer
//! (rejecting an oversized frame from its header alone, before anything is allocated), then
//! [`Request::decode`] or [`Response::decode`] parses its payload. Neither panics on any input.
//!
//! ```
//! use halyard_proto::{decode_frame, encode_request, Request, DEFAULT_MAX_FRAME_BYTES};
//! let mut buf = Vec::new();
//! encode_request(7, &Request::Get { key: b"k" }, &mut buf, DEFAULT_MAX_FRAME_BYTES).unwrap();
//! let (frame, used) = decode_frame(&buf, DEFAULT_MAX_FRAME_BYTES).unwrap().unwrap();
//! assert_eq!((frame.id, used), (7, buf.len()));
//! assert_eq!(Request::decode(frame.kind, frame.payload).unwrap(), Request::Get { key: b"k" });
//! ```

#![warn(unreachable_pub)]

mod error;
mod frame;
mod reader;
mod request;
mod response;

pub use error::{ErrorCode, ProtoError};
pub use frame::{begin_frame, decode_frame, finish_frame, Frame, FRAME_OVERHEAD, HEADER_LEN, TRAILER_LEN};
pub use request::{encode_request, kind as request_kind, BatchOp, Request, ScanRequest};
pub use response::{encode_response, kind as response_kind, scan_page_overhead, scan_pair_len, Response, ScanPage};

/// First four bytes of every frame: `HLYD` in ASCII (`48 4C 59 44`), read as a little-endian `u32`.
pub const MAGIC: u32 = u32::from_le_bytes(*b"HLYD");
/// The protocol version this crate speaks. The handshake picks the highest version both sides support.
pub const PROTOCOL_VERSION: u16 = 1;
/// The oldest protocol version this crate speaks.
pub const MIN_PROTOCOL_VERSION: u16 = 1;
/// Default limit on a whole frame (header, payload and checksum): 16 MiB.
pub const DEFAULT_MAX_FRAME_BYTES: usize = 16 << 20;
/// The smallest frame limit a peer may announce; below it even a handshake or an error reply may not fit.
pub const MIN_MAX_FRAME_BYTES: usize = 1024;
/// Request id reserved for connection-level errors (a frame whose own id cannot be trusted).
pub const CONNECTION_ID: u64 = 0;
