//! Property tests: every message survives framing and decoding; arbitrary bytes never panic.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    reason = "test code: a failure stops where it happened"
)]

use std::ops::Bound;

use halyard_proto::*;
use proptest::prelude::*;

const MAX: usize = 1 << 20;

fn bytes() -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..40)
}

fn bound() -> impl Strategy<Value = (u8, Vec<u8>)> {
    (0u8..3, bytes())
}

fn as_bound(b: &(u8, Vec<u8>)) -> Bound<&[u8]> {
    match b.0 {
        0 => Bound::Unbounded,
        1 => Bound::Included(&b.1),
        _ => Bound::Excluded(&b.1),
    }
}

/// Owned inputs; the borrowed `Request` is built from them in the test body.
#[derive(Debug, Clone)]
enum Req {
    Hello(u16, u16, u32),
    Ping(Vec<u8>),
    Get(Vec<u8>),
    Put(Vec<u8>, Vec<u8>),
    Delete(Vec<u8>),
    Batch(Vec<(Vec<u8>, Option<Vec<u8>>)>),
    Scan((u8, Vec<u8>), (u8, Vec<u8>), bool, u32),
}

fn req() -> impl Strategy<Value = Req> {
    prop_oneof![
        (any::<u16>(), any::<u16>(), any::<u32>()).prop_map(|(a, b, c)| Req::Hello(a, b, c)),
        bytes().prop_map(Req::Ping),
        bytes().prop_map(Req::Get),
        (bytes(), bytes()).prop_map(|(k, v)| Req::Put(k, v)),
        bytes().prop_map(Req::Delete),
        prop::collection::vec((bytes(), prop::option::of(bytes())), 0..8).prop_map(Req::Batch),
        (bound(), bound(), any::<bool>(), any::<u32>()).prop_map(|(s, e, r, l)| Req::Scan(s, e, r, l)),
    ]
}

fn borrow(r: &Req) -> Request<'_> {
    match r {
        Req::Hello(a, b, c) => Request::Hello { min_version: *a, max_version: *b, max_frame_bytes: *c },
        Req::Ping(p) => Request::Ping { payload: p },
        Req::Get(k) => Request::Get { key: k },
        Req::Put(k, v) => Request::Put { key: k, value: v },
        Req::Delete(k) => Request::Delete { key: k },
        Req::Batch(ops) => Request::Batch {
            ops: ops
                .iter()
                .map(|(k, v)| match v {
                    Some(v) => BatchOp::Put { key: k, value: v },
                    None => BatchOp::Delete { key: k },
                })
                .collect(),
        },
        Req::Scan(s, e, reverse, limit) => {
            Request::Scan(ScanRequest { start: as_bound(s), end: as_bound(e), reverse: *reverse, limit: *limit })
        }
    }
}

fn resp() -> impl Strategy<Value = Response> {
    prop_oneof![
        (any::<u16>(), any::<u32>())
            .prop_map(|(version, max_frame_bytes)| Response::HelloOk { version, max_frame_bytes }),
        bytes().prop_map(|payload| Response::Pong { payload }),
        prop::option::of(bytes()).prop_map(Response::Value),
        Just(Response::Done),
        (prop::collection::vec((bytes(), bytes()), 0..8), prop::option::of(bytes()))
            .prop_map(|(pairs, resume)| Response::ScanPage(ScanPage { pairs, resume })),
        (any::<u16>(), ".{0,20}").prop_map(|(c, message)| Response::Error { code: ErrorCode::from_u16(c), message }),
    ]
}

proptest! {
    #[test]
    fn requests_round_trip(id in any::<u64>(), r in req()) {
        let req = borrow(&r);
        let mut buf = Vec::new();
        let size = encode_request(id, &req, &mut buf, MAX).unwrap();
        prop_assert_eq!(size, buf.len());
        let (frame, used) = decode_frame(&buf, MAX).unwrap().unwrap();
        prop_assert_eq!((frame.id, used), (id, buf.len()));
        prop_assert_eq!(Request::decode(frame.kind, frame.payload).unwrap(), req);
    }

    #[test]
    fn responses_round_trip(id in any::<u64>(), resp in resp()) {
        let mut buf = Vec::new();
        encode_response(id, &resp, &mut buf, MAX).unwrap();
        let (frame, _) = decode_frame(&buf, MAX).unwrap().unwrap();
        prop_assert_eq!(frame.id, id);
        prop_assert_eq!(Response::decode(frame.kind, frame.payload).unwrap(), resp);
    }

    /// A stream of frames cut at arbitrary points decodes to the same frames.
    #[test]
    fn split_stream_decodes_the_same(rs in prop::collection::vec(req(), 1..6), cuts in prop::collection::vec(any::<usize>(), 0..6)) {
        let mut stream = Vec::new();
        for (i, r) in rs.iter().enumerate() {
            encode_request(i as u64, &borrow(r), &mut stream, MAX).unwrap();
        }
        let mut cuts: Vec<usize> = cuts.into_iter().map(|c| c % (stream.len() + 1)).collect();
        cuts.push(stream.len());
        cuts.sort_unstable();
        let (mut buf, mut fed, mut got) = (Vec::new(), 0, 0u64);
        for c in cuts {
            buf.extend_from_slice(&stream[fed..c]);
            fed = c;
            while let Some((frame, used)) = decode_frame(&buf, MAX).unwrap() {
                prop_assert_eq!(frame.id, got);
                prop_assert_eq!(Request::decode(frame.kind, frame.payload).unwrap(), borrow(&rs[got as usize]));
                got += 1;
                buf.drain(..used);
            }
        }
        prop_assert_eq!(got as usize, rs.len());
    }

    /// Garbage never panics, and a frame is only accepted with a valid checksum.
    #[test]
    fn garbage_never_panics(data in prop::collection::vec(any::<u8>(), 0..256), max in 0usize..512) {
        if let Ok(Some((frame, used))) = decode_frame(&data, max) {
            prop_assert!(used <= data.len() && used <= max);
            let _ = Request::decode(frame.kind, frame.payload);
            let _ = Response::decode(frame.kind, frame.payload);
        }
        for kind in [frame_kind(&data), 0x06, 0x07, 0x87, 0xff] {
            let _ = Request::decode(kind, &data);
            let _ = Response::decode(kind, &data);
        }
    }

    /// Valid framing around a garbage payload: the payload decoders still never panic.
    #[test]
    fn framed_garbage_payload_never_panics(kind in any::<u8>(), payload in prop::collection::vec(any::<u8>(), 0..128)) {
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, 1, kind);
        buf.extend_from_slice(&payload);
        finish_frame(&mut buf, start, MAX).unwrap();
        let (frame, _) = decode_frame(&buf, MAX).unwrap().unwrap();
        let _ = Request::decode(frame.kind, frame.payload);
        let _ = Response::decode(frame.kind, frame.payload);
    }
}

fn frame_kind(data: &[u8]) -> u8 {
    data.first().copied().unwrap_or(0)
}

proptest! {
    /// What the fuzz target asserts: any frame that decodes re-encodes to the identical bytes
    /// (the encoding is canonical, so nothing is lost or invented by a decode).
    #[test]
    fn decoded_frames_re_encode_identically(kind in prop_oneof![1u8..8, 0x81u8..0x88, Just(0xffu8)],
                                            payload in prop::collection::vec(any::<u8>(), 0..64)) {
        let mut buf = Vec::new();
        let start = begin_frame(&mut buf, 3, kind);
        buf.extend_from_slice(&payload);
        finish_frame(&mut buf, start, MAX).unwrap();
        let (frame, _) = decode_frame(&buf, MAX).unwrap().unwrap();
        if let Ok(req) = Request::decode(frame.kind, frame.payload) {
            let mut again = Vec::new();
            encode_request(3, &req, &mut again, MAX).unwrap();
            prop_assert_eq!(&again, &buf);
        }
        if let Ok(resp) = Response::decode(frame.kind, frame.payload) {
            let mut again = Vec::new();
            encode_response(3, &resp, &mut again, MAX).unwrap();
            prop_assert_eq!(&again, &buf);
        }
    }
}
