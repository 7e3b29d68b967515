#![no_main]
//! The native protocol decoder on arbitrary bytes: framing then both payload decoders must never
//! panic, must respect the frame limit, and whatever decodes must re-encode to the same frame.
use halyard_proto::{decode_frame, encode_request, encode_response, Request, Response};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The first byte picks the frame limit, so the oversize path is exercised too.
    let Some((&sel, stream)) = data.split_first() else { return };
    let max = 21 + (sel as usize) * 64;
    let mut rest = stream;
    while let Ok(Some((frame, used))) = decode_frame(rest, max) {
        assert!(used <= max && used <= rest.len());
        let original = &rest[..used];
        if let Ok(req) = Request::decode(frame.kind, frame.payload) {
            let mut again = Vec::new();
            encode_request(frame.id, &req, &mut again, max).expect("re-encoding fits the same limit");
            assert_eq!(again, original);
        }
        if let Ok(resp) = Response::decode(frame.kind, frame.payload) {
            let mut again = Vec::new();
            encode_response(frame.id, &resp, &mut again, max).expect("re-encoding fits the same limit");
            assert_eq!(again, original);
        }
        rest = &rest[used..];
    }
    // Payload decoders on raw bytes, without a frame around them.
    if let Some((&kind, payload)) = stream.split_first() {
        let _ = Request::decode(kind, payload);
        let _ = Response::decode(kind, payload);
    }
});
